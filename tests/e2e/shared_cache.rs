//! Two engines, two projects, one `FRACFLOW_CACHE`: each key is built once, both runs complete, the cache
//! verifies clean, and an engine killed while it builds a key does not block the other.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Sandbox, text};

/// Every node runs this script: it appends `<node id> <its pid> <engine pid>` to `built.log` beside it (its
/// parent is its supervisor, whose parent is the engine's spawner, whose parent is the engine). `src` then
/// holds its key until the test creates `go`; the `slow` node of the crash case sleeps the first time it runs
/// (until its engine is killed, when the supervisor kills it).
const NODE_SCRIPT: &str = r#"#!/bin/sh
here=$(dirname "$0")
spawner=$(cut -d' ' -f4 "/proc/$PPID/stat")
engine=$(cut -d' ' -f4 "/proc/$spawner/stat")
echo "$FRACFLOW_NODE $$ $engine" >> "$here/built.log"
if [ "$FRACFLOW_NODE" = src ]; then
  i=0
  while [ ! -e "$here/go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
fi
if [ "$FRACFLOW_NODE" = slow ] && [ ! -e "$here/slow-started" ]; then
  touch "$here/slow-started"
  exec sleep 120
fi
case "$FRACFLOW_NODE" in work*) sleep 0.2 ;; esac
echo "$FRACFLOW_NODE" > "$FRACFLOW_OUT/out"
"#;

const UNITS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

/// src → work[unit=a..f] → join: after src the two engines compete for six independent keys.
fn fan_out_pipeline(script: &Path) -> String {
    let run = format!("[sh, \"{}\"]", script.display());
    format!(
        "pipeline: shared\nnodes:\n\
         \x20 src:\n    kind: command\n    outputs: [out]\n    run: {run}\n\
         \x20 work:\n    kind: command\n    foreach: {{unit: [{units}]}}\n    deps: [src]\n    outputs: [out]\n    \
         run: {run}\n    env: {{UNIT: \"{{unit}}\"}}\n\
         \x20 join:\n    kind: command\n    deps: [work]\n    outputs: [out]\n    run: {run}\n",
        units = UNITS.join(", ")
    )
}

fn crash_pipeline(script: &Path) -> String {
    let run = format!("[sh, \"{}\"]", script.display());
    format!(
        "pipeline: crash\nnodes:\n\
         \x20 slow:\n    kind: command\n    outputs: [out]\n    run: {run}\n\
         \x20 after:\n    kind: command\n    deps: [slow]\n    outputs: [out]\n    run: {run}\n"
    )
}

/// The directory both projects share: the cache, the script, the build log and the gate.
struct Shared {
    dir: tempfile::TempDir,
}

impl Shared {
    fn new() -> Shared {
        let shared = Shared {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        std::fs::write(shared.script(), NODE_SCRIPT).expect("script");
        shared
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn cache(&self) -> PathBuf {
        self.path().join("cache")
    }
    fn script(&self) -> PathBuf {
        self.path().join("node.sh")
    }
    /// `fracflow ARGS` in `project` on the shared cache, stderr kept in `<shared>/<name>.err`.
    fn engine(&self, project: &Sandbox, name: &str, args: &[&str]) -> Command {
        let mut command = project.command(args);
        let stderr = std::fs::File::create(self.stderr_path(name)).expect("stderr file");
        command
            .env("FRACFLOW_CACHE", self.cache())
            .stdout(Stdio::null())
            .stderr(stderr);
        command
    }
    fn stderr_path(&self, name: &str) -> PathBuf {
        self.path().join(format!("{name}.err"))
    }
    fn stderr(&self, name: &str) -> String {
        std::fs::read_to_string(self.stderr_path(name)).unwrap_or_default()
    }
    /// node id → the engine pids (parents of the node's shell) of each time it ran.
    fn builds(&self) -> BTreeMap<String, Vec<u32>> {
        let log = std::fs::read_to_string(self.path().join("built.log")).unwrap_or_default();
        let mut builds: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for line in log.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let [node, _shell, engine] = fields[..] else {
                panic!("malformed log line {line:?}");
            };
            builds
                .entry(node.to_owned())
                .or_default()
                .push(engine.parse().expect("engine pid"));
        }
        builds
    }
}

/// The project's newest run's events, as far as they are written.
fn events(project: &Sandbox, pipeline: &str) -> Vec<serde_json::Value> {
    let path = project.results(pipeline).join("latest/events.jsonl");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// The first `node_waiting` event for `node` in the project's newest run.
fn waiting_for(project: &Sandbox, pipeline: &str, node: &str) -> Option<serde_json::Value> {
    events(project, pipeline)
        .into_iter()
        .find(|e| e["event"] == "node_waiting" && e["node"] == node)
}

fn manifest(project: &Sandbox, pipeline: &str) -> serde_json::Value {
    let path = project.results(pipeline).join("latest/manifest.json");
    serde_json::from_slice(&std::fs::read(&path).expect("manifest")).expect("manifest JSON")
}

/// Waits for `child` for at most `limit`; a run that never ends is killed and fails the test.
fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `probe` until it yields a value, for at most a minute.
fn eventually<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_verifies_clean(project: &Sandbox, shared: &Shared) {
    let verify = project
        .command(&["cache", "verify"])
        .env("FRACFLOW_CACHE", shared.cache())
        .output()
        .expect("cache verify");
    assert!(verify.status.success(), "cache verify:\n{}", text(&verify));
    assert!(text(&verify).contains(" 0 corrupt"), "{}", text(&verify));
}

/// Key locks left in the cache: `<key>.lock` files (engines before the key lock table made them), and the slots
/// of the table `locks/keys.table` still locked, as another engine would find them.
fn key_locks_left(shared: &Shared) -> (Vec<PathBuf>, usize) {
    let locks = shared.cache().join("locks");
    let files = std::fs::read_dir(&locks)
        .expect("locks dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "lock"))
        .filter(|p| p.file_name().is_some_and(|n| n != "in-use.lock"))
        .collect();
    assert!(locks.join("keys.table").is_file(), "the key lock table");
    let held = fracflow_core::keylock::held_slots(&locks).expect("probe the key lock table");
    (files, held)
}

#[test]
fn two_engines_on_one_cache_build_each_key_once() {
    let shared = Shared::new();
    let pipeline = fan_out_pipeline(&shared.script());
    let projects = [Sandbox::new(), Sandbox::new()];
    for project in &projects {
        project.write("pipelines/shared.yaml", &pipeline);
    }
    let args = ["run", "shared", "--jobs", "2"];
    let mut engines: Vec<Child> = projects
        .iter()
        .zip(["a", "b"])
        .map(|(project, name)| {
            shared
                .engine(project, name, &args)
                .spawn()
                .expect("spawn engine")
        })
        .collect();
    let pids: Vec<u32> = engines.iter().map(Child::id).collect();

    // One engine builds src and holds it until the other has said it waits for it: the runs overlap.
    let (waiter, event) = eventually("an engine waits for the other's src", || {
        (0..2).find_map(|i| waiting_for(&projects[i], "shared", "src").map(|e| (i, e)))
    });
    std::fs::write(shared.path().join("go"), b"").expect("open the gate");
    let statuses: Vec<ExitStatus> = engines
        .iter_mut()
        .map(|child| wait_bounded(child, Duration::from_secs(120), "an engine"))
        .collect();
    for (i, status) in statuses.iter().enumerate() {
        assert!(
            status.success(),
            "engine {i} failed:\n{}",
            shared.stderr(["a", "b"][i])
        );
    }
    let holder = pids[1 - waiter];
    assert_eq!(
        event["holder_pid"], holder,
        "the wait names the engine that builds src: {event}"
    );
    let message = shared.stderr(["a", "b"][waiter]);
    assert!(
        message.contains(&format!(
            "waiting  for `src`, being built by pid {holder} on host "
        )),
        "{message}"
    );

    let mut ids = vec!["src".to_owned(), "join".to_owned()];
    ids.extend(UNITS.iter().map(|u| format!("work[unit={u}]")));
    ids.sort();
    let builds = shared.builds();
    assert_eq!(
        builds.keys().cloned().collect::<Vec<_>>(),
        ids,
        "every node ran"
    );
    for (node, engines) in &builds {
        assert_eq!(engines.len(), 1, "{node} was built {} times", engines.len());
        assert!(pids.contains(&engines[0]), "{node} built by {engines:?}");
    }
    let mut built = 0;
    for project in &projects {
        let manifest = manifest(project, "shared");
        assert_eq!(manifest["status"], "succeeded");
        for id in &ids {
            let status = manifest["nodes"][id]["status"].as_str().unwrap_or("");
            assert!(status == "built" || status == "cached", "{id}: {status}");
            built += usize::from(status == "built");
            let out = project
                .results("shared")
                .join("latest/nodes")
                .join(id)
                .join("out");
            assert_eq!(
                std::fs::read_to_string(&out).expect("output").trim(),
                id,
                "{}",
                out.display()
            );
        }
    }
    assert_eq!(
        built,
        ids.len(),
        "each key built by exactly one of the runs"
    );
    assert_eq!(
        key_locks_left(&shared),
        (Vec::new(), 0),
        "released locks are gone"
    );
    assert_verifies_clean(&projects[0], &shared);
}

#[test]
fn an_engine_killed_while_building_a_key_does_not_block_the_other() {
    let shared = Shared::new();
    let pipeline = crash_pipeline(&shared.script());
    let (first, second) = (Sandbox::new(), Sandbox::new());
    first.write("pipelines/crash.yaml", &pipeline);
    second.write("pipelines/crash.yaml", &pipeline);

    let mut doomed = shared
        .engine(&first, "doomed", &["run", "crash"])
        .spawn()
        .expect("spawn the first engine");
    // The first engine holds slow's lock and sleeps in it.
    eventually("the first engine holds slow's key lock", || {
        shared.builds().contains_key("slow").then_some(())
    });
    let mut survivor = shared
        .engine(&second, "survivor", &["run", "crash"])
        .spawn()
        .expect("spawn the second engine");
    let event = eventually("the second engine waits for slow", || {
        waiting_for(&second, "crash", "slow")
    });
    assert_eq!(event["holder_pid"], doomed.id(), "{event}");

    doomed.kill().expect("SIGKILL the holder");
    doomed.wait().expect("reap the holder");
    let status = wait_bounded(&mut survivor, Duration::from_secs(120), "the second engine");
    assert!(status.success(), "{}", shared.stderr("survivor"));

    let builds = shared.builds();
    assert_eq!(
        builds["slow"],
        vec![doomed.id(), survivor.id()],
        "started by the killed engine, then built by the survivor"
    );
    assert_eq!(builds["after"], vec![survivor.id()]);
    let manifest = manifest(&second, "crash");
    assert_eq!(manifest["status"], "succeeded");
    assert_eq!(manifest["nodes"]["slow"]["status"], "built");
    assert_eq!(manifest["nodes"]["after"]["status"], "built");
    assert_eq!(
        key_locks_left(&shared),
        (Vec::new(), 0),
        "released locks are gone"
    );
    assert_verifies_clean(&second, &shared);
}

/// A cache whose key lock table cannot be opened (here a directory stands at its name) still builds: the run
/// says once that it builds without per-key locks, and why, and every node is built.
#[test]
fn a_key_lock_table_that_cannot_be_opened_is_reported_and_the_run_builds() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "pipelines/unlocked.yaml",
        "pipeline: unlocked\nnodes:\n  a:\n    kind: command\n    outputs: [o]\n    run: echo a > \"$FRACFLOW_OUT/o\"\n  \
         b:\n    kind: command\n    outputs: [o]\n    run: echo b > \"$FRACFLOW_OUT/o\"\n",
    );
    std::fs::create_dir_all(sandbox.path().join(".fracflow/cache/locks/keys.table"))
        .expect("a directory where the table goes");
    let output = sandbox.run(&["run", "unlocked"]);
    let shown = text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(shown.contains("2 built"), "{shown}");
    assert_eq!(
        shown.matches("cannot lock keys in ").count(),
        1,
        "one warning: {shown}"
    );
    assert!(shown.contains("building without per-key locks"), "{shown}");
}
