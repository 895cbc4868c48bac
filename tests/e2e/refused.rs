//! Bad values and unusable paths are refused with exit 2 and a message that names them, before any node
//! starts: every case checks that the pipeline's one node left no trace.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Sandbox, text};

/// One node that leaves `ran` in the project root when it runs.
const TINY: &str = r#"pipeline: tiny
params: {rounds: 2}
nodes:
  mark:
    kind: command
    outputs: [out]
    run: touch "$FRACFLOW_ROOT/ran"; echo {rounds} > "$FRACFLOW_OUT/out"
"#;

const OTHER: &str = r#"pipeline: other
nodes:
  other:
    kind: command
    outputs: [out]
    run: echo other > "$FRACFLOW_OUT/out"
"#;

fn sandbox() -> Sandbox {
    let sandbox = Sandbox::new();
    sandbox.write("pipelines/tiny.yaml", TINY);
    sandbox.write("pipelines/other.yaml", OTHER);
    sandbox
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Exit 2, and `tiny`'s node did not run (no marker, no run directory of `tiny`).
fn assert_refused(sandbox: &Sandbox, output: &Output) {
    assert_eq!(output.status.code(), Some(2), "{}", text(output));
    assert!(
        !sandbox.path().join("ran").exists(),
        "the node ran: {}",
        text(output)
    );
    assert!(
        !sandbox.results("tiny").exists(),
        "a run directory was created: {}",
        text(output)
    );
}

#[test]
fn zero_jobs_is_refused() {
    let sandbox = sandbox();
    let output = sandbox.run(&["run", "tiny", "--jobs", "0"]);
    assert_refused(&sandbox, &output);
    assert!(
        stderr(&output).starts_with(
            "error: invalid value '0' for '--jobs <JOBS>': at least 1 core is needed (leave --jobs out \
             to use every core)\n"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_invalid_rerun_glob_is_refused() {
    let sandbox = sandbox();
    let output = sandbox.run(&["run", "tiny", "--rerun", "["]);
    assert_refused(&sandbox, &output);
    assert!(
        stderr(&output).starts_with(
            "error: invalid value '[' for '--rerun <GLOB>': not a node id or glob: Pattern syntax error \
             near position 0: invalid range pattern (write `[[]` for a literal `[`)\n"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_number_too_large_for_a_double_is_refused() {
    let sandbox = sandbox();
    for command in ["run", "plan"] {
        let output = sandbox.run(&[command, "tiny", "--set", "rounds=1e400"]);
        assert_refused(&sandbox, &output);
        assert_eq!(
            stderr(&output),
            "error: --set rounds=1e400: `1e400` is too large a number (a parameter must be a finite number, \
             at most about 1.8e308)\n",
            "{command}"
        );
    }
}

#[test]
fn a_cpu_server_without_workers_is_refused_instead_of_serving() {
    let sandbox = sandbox();
    let mut server = sandbox
        .command(&["cpu-server", "-p", "0", "-n", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cpu-server");
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = server.kill();
            panic!("cpu-server -n 0 went on serving");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = server.wait_with_output().expect("output");
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        output.stdout.is_empty(),
        "it never announced a listening address: {}",
        text(&output)
    );
    assert!(
        stderr(&output).starts_with(
            "error: invalid value '0' for '--workers <WORKERS>': at least 1 worker is needed\n"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn resuming_another_pipelines_run_is_refused_naming_both() {
    let sandbox = sandbox();
    let first = sandbox.run(&["run", "other"]);
    assert!(first.status.success(), "{}", text(&first));
    let manifest = sandbox.results("other").join("latest/manifest.json");
    let before = std::fs::read_to_string(&manifest).expect("other's manifest");

    let output = sandbox.run(&["run", "tiny", "--resume", "results/other/latest"]);
    assert_refused(&sandbox, &output);
    assert_eq!(
        stderr(&output),
        "error: --resume results/other/latest: that is a run of pipeline `other`, not of `tiny`\n\
         hint: resume it with `fracflow run other --resume results/other/latest`, or leave --resume out to \
         start a new run of `tiny`\n"
    );
    assert_eq!(
        std::fs::read_to_string(&manifest).expect("other's manifest"),
        before,
        "the other pipeline's run was not touched"
    );
}

#[test]
fn resuming_what_is_not_a_run_names_it() {
    let sandbox = sandbox();
    let output = sandbox.run(&["run", "tiny", "--resume", "results/tiny/never"]);
    assert_refused(&sandbox, &output);
    assert_eq!(
        stderr(&output),
        "error: --resume results/tiny/never: not a run directory fracflow can read\n\
         caused by: results/tiny/never/manifest.json: No such file or directory (os error 2)\n\
         hint: name a directory under results/<pipeline>/, e.g. results/<pipeline>/latest\n"
    );
}

#[test]
fn why_in_a_named_pipeline_that_does_not_load_shows_its_diagnostics() {
    let sandbox = sandbox();
    sandbox.write(
        "pipelines/broken.yaml",
        "pipeline: broken\nnodes:\n  x: {kind: nope}\n",
    );
    let output = sandbox.run(&["why", "x", "--pipeline", "broken"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let shown = stderr(&output);
    assert!(shown.starts_with("error: "), "{shown}");
    assert!(
        shown.contains("broken.yaml:3:"),
        "points into the file: {shown}"
    );
    assert!(!shown.contains("no pipeline has a node"), "{shown}");
}

#[test]
fn client_samples_into_an_impossible_path_are_refused_before_measuring() {
    let sandbox = sandbox();
    sandbox.write("README.md", "# readme\n");
    // Port 9 on loopback: nothing answers there, so a client that started would fail with exit 1 instead.
    let output = sandbox.run(&[
        "client",
        "-c",
        "127.0.0.1",
        "-p",
        "9",
        "-t",
        "rr",
        "-d",
        "1",
        "--samples",
        "README.md/samples.parquet",
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert_eq!(
        stderr(&output),
        "error: cannot write the samples to README.md/samples.parquet\n\
         caused by: Not a directory (os error 20)\n\
         hint: a part of README.md/samples.parquet is a file; name a path under a directory\n"
    );
}

#[test]
fn plot_into_a_file_names_it() {
    let sandbox = sandbox();
    let first = sandbox.run(&["run", "tiny"]);
    assert!(first.status.success(), "{}", text(&first));
    sandbox.write("README.md", "# the project's readme\n");

    let output = sandbox.run(&["plot", "tiny", "--out", "README.md"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert_eq!(
        stderr(&output),
        "error: cannot write the figures into README.md\n\
         caused by: File exists (os error 17)\n\
         hint: README.md is a file; name a directory instead\n"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.path().join("README.md")).expect("readme"),
        "# the project's readme\n",
        "the file is left as it was"
    );
}

/// `fracflow ARGS` with the permission bits in force: the tests run as root, whose CAP_DAC_OVERRIDE and
/// CAP_DAC_READ_SEARCH ignore them, so then the command drops both from its bounding set before exec (root
/// regains every bounding capability at exec, so dropping them from the effective set would not last).
fn run_unprivileged(sandbox: &Sandbox, args: &[&str]) -> Output {
    let mut command: Command = sandbox.command(args);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        const CAP_DAC_OVERRIDE: libc::c_ulong = 1;
        const CAP_DAC_READ_SEARCH: libc::c_ulong = 2;
        // SAFETY: between fork and exec the closure only calls prctl, which is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                for capability in [CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH] {
                    if libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
    command
        .output()
        .expect("spawn fracflow without CAP_DAC_OVERRIDE")
}

fn read_only(path: &Path) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o555)).expect("chmod");
}

#[test]
fn a_read_only_results_folder_is_named() {
    let sandbox = sandbox();
    let results = sandbox.path().join("results");
    std::fs::create_dir(&results).expect("results/");
    read_only(&results);

    let output = run_unprivileged(&sandbox, &["run", "tiny"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(!sandbox.path().join("ran").exists(), "{}", text(&output));
    let shown = results.display();
    assert_eq!(
        stderr(&output),
        format!(
            "error: cannot create the run directory under {shown}/tiny\n\
             caused by: Permission denied (os error 13)\n\
             hint: check that this user may read and write {shown}, or work in a copy of the project\n"
        )
    );
}

#[test]
fn a_read_only_fracflow_folder_is_named() {
    let sandbox = sandbox();
    let state = sandbox.path().join(".fracflow");
    std::fs::create_dir(&state).expect(".fracflow/");
    read_only(&state);

    let output = run_unprivileged(&sandbox, &["run", "tiny"]);
    assert_refused(&sandbox, &output);
    let shown = state.display();
    assert_eq!(
        stderr(&output),
        format!(
            "error: cannot open the cache {shown}/cache\n\
             caused by: Permission denied (os error 13)\n\
             hint: check that this user may read and write {shown}, or work in a copy of the project\n"
        )
    );
}

#[test]
fn a_read_only_cache_is_named_before_any_node_starts() {
    let sandbox = sandbox();
    let staging = sandbox.path().join(".fracflow/cache/tmp");
    std::fs::create_dir_all(&staging).expect("cache");
    read_only(&staging);

    let output = run_unprivileged(&sandbox, &["run", "tiny"]);
    assert_refused(&sandbox, &output);
    assert!(
        stderr(&output).starts_with(&format!(
            "error: cannot write into the cache {}\ncaused by: Permission denied (os error 13)\n",
            staging.display()
        )),
        "{}",
        stderr(&output)
    );
}

#[test]
fn plot_into_a_read_only_directory_names_it_before_drawing() {
    let sandbox = sandbox();
    let first = sandbox.run(&["run", "tiny"]);
    assert!(first.status.success(), "{}", text(&first));
    let figures = sandbox.path().join("figures");
    std::fs::create_dir(&figures).expect("figures/");
    read_only(&figures);

    let output = run_unprivileged(&sandbox, &["plot", "tiny", "--out", "figures"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert_eq!(
        stderr(&output),
        "error: cannot write the figures into figures\n\
         caused by: Permission denied (os error 13)\n\
         hint: check that this user may read and write figures, or work in a copy of the project\n"
    );
}
