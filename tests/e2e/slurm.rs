//! Nodes run as Slurm jobs on a real single-node cluster the test starts on localhost (`tests/slurm/cluster.sh`:
//! munged, slurmctld and slurmd in the foreground under a temporary directory, stopped by pid at the end).
//!
//! One test, so the cluster starts once (about a second here): the emulated build chain of fig16 builds
//! through Slurm; an engine SIGKILLed while its job runs is restarted and re-attaches to the job instead of
//! submitting it again; Ctrl-C cancels the running job by id; a job that fails reports Slurm's state and exit
//! code.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::figures::figures_project;
use crate::support::{Sandbox, repo, text};

/// The test cluster; stopped (by the pids its script recorded) when dropped.
struct Cluster {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Cluster {
    fn start() -> Cluster {
        let script = repo().join("tests/slurm/cluster.sh");
        for tool in ["slurmctld", "slurmd", "munged", "sbatch"] {
            let found = Command::new("sh")
                .args([
                    "-c",
                    &format!("command -v {tool} || test -x /usr/sbin/{tool}"),
                ])
                .output()
                .is_ok_and(|o| o.status.success());
            assert!(
                found,
                "{tool} is missing: this test starts a real Slurm cluster; install it with \
                 `tests/slurm/cluster.sh install` (apt-get install slurm-wlm munge; .ci/run does)"
            );
        }
        let dir = tempfile::tempdir().expect("cluster dir");
        let started = Command::new(&script)
            .arg("start")
            .arg(dir.path())
            .output()
            .expect("run cluster.sh");
        assert!(
            started.status.success(),
            "cluster.sh start: {}",
            text(&started)
        );
        let env = std::fs::read_to_string(dir.path().join("env"))
            .expect("cluster env")
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches(['"', '\'']).to_owned()))
            .collect();
        Cluster { dir, env }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("tests/slurm/cluster.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}

/// `sbatch` on PATH records every submission, then submits for real.
fn recording_sbatch(sandbox: &Sandbox) -> PathBuf {
    let bin = sandbox.path().join("bin");
    let real = Command::new("sh")
        .args(["-c", "command -v sbatch"])
        .output()
        .expect("sbatch");
    let real = String::from_utf8_lossy(&real.stdout).trim().to_owned();
    sandbox.write(
        "bin/sbatch",
        &format!(
            "#!/bin/sh\necho \"$*\" >> \"{}\"\nexec {real} \"$@\"\n",
            sandbox.path().join("sbatch.calls").display()
        ),
    );
    std::fs::set_permissions(bin.join("sbatch"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    bin
}

fn with_cluster(mut command: Command, cluster: &Cluster, bin: &Path) -> Command {
    command.envs(cluster.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    command.env(
        "PATH",
        format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    );
    command
}

fn submissions(sandbox: &Sandbox, node: &str) -> usize {
    std::fs::read_to_string(sandbox.path().join("sbatch.calls"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&format!("--job-name fracflow:{node} ")))
        .count()
}

fn slurm_profile(sandbox: &Sandbox, kinds: &str) {
    let emulated = std::fs::read_to_string(sandbox.path().join("hw/testbeds/emulated.yaml"))
        .expect("emulated profile");
    sandbox.write(
        "hw/testbeds/cluster.yaml",
        &format!(
            "{emulated}\nslurm:\n  kinds: [{kinds}]\n  partition: debug\n  cpus: 1\n  mem: 256M\n  time: \"10\"\n  \
             poll_s: 0.3\n"
        ),
    );
}

/// The id of `node`'s job once Slurm says it runs (bounded).
fn running_job(sandbox: &Sandbox, cluster: &Cluster, node: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "no Slurm job started running");
        let ids: Vec<String> = std::fs::read_dir(sandbox.path().join(".fracflow/slurm"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("job")).ok())
            .map(|id| id.trim().to_owned())
            .collect();
        for id in ids {
            let state = with_cluster(Command::new("scontrol"), cluster, Path::new("/nonexistent"))
                .args(["show", "job", "-o", &id])
                .output()
                .expect("scontrol");
            let state = String::from_utf8_lossy(&state.stdout);
            if state.contains(&format!("JobName=fracflow:{node} "))
                && state.contains("JobState=RUNNING")
            {
                return id;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn build_nodes_run_as_slurm_jobs_reattach_after_a_kill_and_report_failures() {
    let cluster = Cluster::start();

    // 1. The fig16 build chain (hls → weave → partials → image) as Slurm jobs.
    let sandbox = figures_project();
    let bin = recording_sbatch(&sandbox);
    slurm_profile(&sandbox, "hls, weave, partials, image");
    let built = with_cluster(
        sandbox.command(&["run", "bitstreams", "--testbed", "cluster"]),
        &cluster,
        &bin,
    )
    .output()
    .expect("run");
    let output = text(&built);
    assert_eq!(built.status.code(), Some(0), "{output}");
    for node in ["weave", "image", "hls[unit=top_k]"] {
        assert_eq!(
            submissions(&sandbox, node),
            1,
            "{node} went through sbatch once:\n{output}"
        );
    }
    let logs = sandbox
        .latest_on("frac-bitstreams", None, "cluster")
        .join("logs");
    let image_log = std::fs::read_to_string(logs.join("image.log")).expect("image log");
    assert!(image_log.contains("submitted Slurm job"), "{image_log}");
    assert!(
        image_log.contains("Slurm job") && image_log.contains("COMPLETED"),
        "{image_log}"
    );
    assert!(
        sandbox
            .latest_on("frac-bitstreams", None, "cluster")
            .join("nodes/image")
            .read_dir()
            .is_ok(),
        "the image's outputs were collected"
    );

    // 2. Kill the engine while its job runs; the restarted engine re-attaches.
    let sandbox = Sandbox::new();
    let bin = recording_sbatch(&sandbox);
    slurm_profile(&sandbox, "command");
    sandbox.write(
        "pipelines/jobs.yaml",
        // `slow` reads `seed`: its inputs are the run's view of seed's outputs, which a restarted run puts
        // elsewhere; the job must still be found again.
        "pipeline: jobs\ntargets:\n  slow: [slow]\n  broken: [broken]\nnodes:\n  seed:\n    kind: command\n    \
         outputs: [seed.txt]\n    run: echo seeded > \"$FRACFLOW_OUT/seed.txt\"\n  slow:\n    kind: command\n    \
         deps: [seed]\n    outputs: [built.txt]\n    run: sleep 4 && cat \"$FRACFLOW_DEP_SEED/seed.txt\" > /dev/null && \
         echo \"built on $(hostname)\" > \"$FRACFLOW_OUT/built.txt\"\n  broken:\n    kind: command\n    \
         run: echo going down >&2; exit 3\n",
    );
    let mut engine = with_cluster(
        sandbox.command(&["run", "slow", "--testbed", "cluster"]),
        &cluster,
        &bin,
    )
    .spawn()
    .expect("start the engine");
    let id = running_job(&sandbox, &cluster, "slow");
    engine.kill().expect("SIGKILL the engine");
    let _ = engine.wait();
    let restarted = with_cluster(
        sandbox.command(&["run", "slow", "--testbed", "cluster"]),
        &cluster,
        &bin,
    )
    .output()
    .expect("restart");
    let output = text(&restarted);
    assert_eq!(restarted.status.code(), Some(0), "{output}");
    assert_eq!(
        submissions(&sandbox, "slow"),
        1,
        "re-attached, not resubmitted"
    );
    let log = std::fs::read_to_string(
        sandbox
            .latest_on("jobs", None, "cluster")
            .join("logs/slow.log"),
    )
    .expect("log");
    assert!(
        log.contains(&format!("re-attached to Slurm job {id}")),
        "{log}"
    );
    let built = std::fs::read_to_string(
        sandbox
            .latest_on("jobs", None, "cluster")
            .join("nodes/slow/built.txt"),
    )
    .expect("the job's output, collected");
    assert!(built.starts_with("built on "), "{built}");

    // 3. Ctrl-C while a job runs: the engine scancels the job it submitted, by id.
    let mut engine = with_cluster(
        sandbox.command(&["run", "slow", "--testbed", "cluster", "--rerun", "slow"]),
        &cluster,
        &bin,
    )
    .spawn()
    .expect("start the engine");
    let id = running_job(&sandbox, &cluster, "slow");
    // SAFETY: kill only sends SIGINT to the engine we started.
    unsafe {
        libc::kill(engine.id() as libc::pid_t, libc::SIGINT);
    }
    let status = engine.wait().expect("engine exits");
    assert_eq!(status.code(), Some(130), "interrupted");
    let state = with_cluster(
        Command::new("scontrol"),
        &cluster,
        Path::new("/nonexistent"),
    )
    .args(["show", "job", "-o", &id])
    .output()
    .expect("scontrol");
    let state = String::from_utf8_lossy(&state.stdout).into_owned();
    assert!(state.contains("JobState=CANCELLED"), "{state}");
    // The next run submits the node afresh rather than re-attaching to the job it cancelled.
    let again = with_cluster(
        sandbox.command(&["run", "slow", "--testbed", "cluster", "--rerun", "slow"]),
        &cluster,
        &bin,
    )
    .output()
    .expect("run after the interruption");
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert_eq!(submissions(&sandbox, "slow"), 3, "first, cancelled, afresh");

    // 4. A failing job: Slurm's state and exit code in the node's error.
    let broken = with_cluster(
        sandbox.command(&["run", "broken", "--testbed", "cluster"]),
        &cluster,
        &bin,
    )
    .output()
    .expect("run broken");
    let output = text(&broken);
    assert_ne!(broken.status.code(), Some(0), "{output}");
    assert!(
        output.contains("ended FAILED with exit code 1:0") && output.contains("exited with code 3"),
        "{output}"
    );
    drop(cluster);
}
