//! One run per testbed (per project for an emulated one); a run on another testbed or in another project
//! proceeds; SIGTERM records the run as interrupted.

use std::time::{Duration, Instant};

use crate::support::{Sandbox, text};

#[test]
fn second_run_on_the_same_testbed_is_refused_and_names_the_holder() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "pipelines/slow.yaml",
        "pipeline: slow\nnodes:\n  wait:\n    kind: command\n    run: sleep 30\n",
    );
    sandbox.write(
        "pipelines/quick.yaml",
        "pipeline: quick\nnodes:\n  hello:\n    kind: command\n    outputs: [hi]\n    run: echo hi > \"$FRACFLOW_OUT/hi\"\n",
    );
    let mut holder = sandbox
        .command(&["run", "slow"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn holder");
    // An emulated testbed's lock is this project's: `fracflow-testbed-emulated-project-<hash>.lock`.
    let held = || {
        std::fs::read_dir(sandbox.path().join("locks"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("fracflow-testbed-emulated-project-")
            })
            .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.lines().count() >= 2))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !held() {
        assert!(
            Instant::now() < deadline,
            "the first run never took the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let refused = sandbox.run(&["run", "quick"]);
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused));
    let message = text(&refused);
    assert!(
        message.contains(&format!("pid {}", holder.id())),
        "{message}"
    );
    assert!(
        message.contains("run slow"),
        "names the holder's command: {message}"
    );

    let elsewhere = sandbox.run(&["run", "quick", "--testbed", "other"]);
    assert!(elsewhere.status.success(), "{}", text(&elsewhere));

    // Another project on this machine (same lock directory) runs on its own emulated device meanwhile.
    let other_project = Sandbox::new();
    other_project.write(
        "pipelines/quick.yaml",
        "pipeline: quick\nnodes:\n  hello:\n    kind: command\n    outputs: [hi]\n    run: echo hi > \"$FRACFLOW_OUT/hi\"\n",
    );
    let beside = other_project
        .command(&["run", "quick"])
        .env("FRACFLOW_LOCK_DIR", sandbox.path().join("locks"))
        .output()
        .expect("run in another project");
    assert!(beside.status.success(), "{}", text(&beside));

    // SIGTERM: the running node is stopped, the run is recorded interrupted, exit code 130.
    // SAFETY: kill only sends a signal to our own child.
    unsafe {
        libc::kill(holder.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = holder.wait().expect("wait holder");
    assert_eq!(status.code(), Some(130));
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(sandbox.results("slow").join("latest/manifest.json")).expect("manifest"),
    )
    .expect("manifest JSON");
    assert_eq!(manifest["status"], "interrupted");
    assert_eq!(
        manifest["nodes"]["wait"]["status"], "failed",
        "the stopped node is not cached"
    );
}
