//! No leaked staging: the staging directories of killed runs are removed by the next run or by `cache gc`, and
//! never one that a live engine is using.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::{KillOnDrop, Sandbox, text};

const PATIENCE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(10);

/// Two nodes (with different commands, so different keys) that each wait for a file the test never creates, so
/// every run is killed with its staging in use.
const STUCK: &str = "pipeline: stuck\nnodes:\n  a:\n    kind: command\n    outputs: [o]\n    run: true a; while [ ! -e \"$FRACFLOW_ROOT/never\" ]; do sleep 0.05; done\n  b:\n    kind: command\n    outputs: [o]\n    run: true b; while [ ! -e \"$FRACFLOW_ROOT/never\" ]; do sleep 0.05; done\n";

/// A node that writes its output into staging, then waits until the test creates `go`.
const GATED: &str = "pipeline: gated\nnodes:\n  gated:\n    kind: command\n    outputs: [o]\n    run: echo staged > \"$FRACFLOW_OUT/o\"; while [ ! -e \"$FRACFLOW_ROOT/go\" ]; do sleep 0.05; done\n";

fn staging_root(sandbox: &Sandbox) -> PathBuf {
    sandbox.path().join(".fracflow/cache/tmp")
}

fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.sort();
    paths
}

fn staging_dirs(sandbox: &Sandbox) -> Vec<PathBuf> {
    listing(&staging_root(sandbox))
        .into_iter()
        .filter(|p| p.is_dir())
        .collect()
}

/// Waits until at least `count` staging directories not in `known` exist, and returns those, or fails after
/// [`PATIENCE`].
fn wait_for_new_staging(sandbox: &Sandbox, known: &[PathBuf], count: usize) -> Vec<PathBuf> {
    let start = Instant::now();
    loop {
        let new: Vec<PathBuf> = staging_dirs(sandbox)
            .into_iter()
            .filter(|dir| !known.contains(dir))
            .collect();
        if new.len() >= count {
            return new;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{count} new staging directories within {PATIENCE:?}: {new:?}"
        );
        std::thread::sleep(POLL);
    }
}

/// Three runs of `stuck`, each SIGKILLed once both its nodes are staging. Each run's start sweeps what the
/// run killed before it left, so the last one's two directories remain.
fn kill_three_runs(sandbox: &Sandbox) {
    sandbox.write("pipelines/stuck.yaml", STUCK);
    let mut last_killed = Vec::new();
    for _ in 0..3 {
        let engine = KillOnDrop(
            sandbox
                .command(&["run", "stuck", "--jobs", "2"])
                .spawn()
                .expect("spawn"),
        );
        last_killed = wait_for_new_staging(sandbox, &last_killed, 2);
        drop(engine); // SIGKILL
    }
    assert_eq!(
        staging_dirs(sandbox),
        last_killed,
        "only the last killed run's staging is left"
    );
}

#[test]
fn cache_gc_removes_the_staging_of_killed_runs() {
    let sandbox = Sandbox::new();
    kill_three_runs(&sandbox);
    let gc = sandbox.run(&["cache", "gc"]);
    assert!(gc.status.success(), "{}", text(&gc));
    assert_eq!(listing(&staging_root(&sandbox)), Vec::<PathBuf>::new());
}

#[test]
fn the_next_run_removes_the_staging_of_killed_runs() {
    let sandbox = Sandbox::new();
    kill_three_runs(&sandbox);
    sandbox.write(
        "pipelines/quick.yaml",
        "pipeline: quick\nnodes:\n  q:\n    kind: command\n    outputs: [o]\n    run: echo done > \"$FRACFLOW_OUT/o\"\n",
    );
    let next = sandbox.run(&["run", "quick"]);
    assert!(next.status.success(), "{}", text(&next));
    // What is left is the finished run's own lock file (no engine holds it now; the next sweep takes it).
    let left = listing(&staging_root(&sandbox));
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(
        left[0].is_file() && left[0].extension().is_some_and(|e| e == "lock"),
        "{left:?}"
    );
}

#[test]
fn a_live_engines_staging_survives_a_concurrent_gc_and_run_start() {
    let sandbox = Sandbox::new();
    sandbox.write("pipelines/gated.yaml", GATED);
    let mut engine = KillOnDrop(
        sandbox
            .command(&["run", "gated"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn"),
    );
    let staged = wait_for_new_staging(&sandbox, &[], 1);
    let gc = sandbox.run(&["cache", "gc"]);
    assert_eq!(
        gc.status.code(),
        Some(3),
        "gc is refused while a run uses the cache: {}",
        text(&gc)
    );
    // `cache verify` marks the cache in use as a run's start does, which sweeps dead engines' staging.
    let verify = sandbox.run(&["cache", "verify"]);
    assert!(verify.status.success(), "{}", text(&verify));
    assert_eq!(staging_dirs(&sandbox), staged, "the live staging is kept");
    sandbox.write("go", "");
    let status = engine.0.wait().expect("engine");
    assert!(status.success(), "the gated run failed");
    let published = sandbox.results("gated").join("latest/nodes/gated/o");
    assert_eq!(
        std::fs::read_to_string(&published).ok().as_deref(),
        Some("staged\n"),
        "what the node staged was published"
    );
}
