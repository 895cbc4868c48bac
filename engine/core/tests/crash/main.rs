//! Crash consistency of the cache and the run directory under power loss.
//!
//! A workload (two runs of a small graph with a node in between changed, then a no-op that repeats the second,
//! concurrent `put`s of one key and of another, `gc`, and `latest` replaced) runs once on the real filesystem
//! through a recording file layer.
//! Then, for every crash point (after each recorded operation) and every state the model in `model` says
//! power loss may leave there, the state is written out and checked:
//! - `cache verify` finds nothing corrupt: every entry parses, names its own key and blobs that exist, and
//!   every blob hashes to its name;
//! - every run directory's `manifest.json` parses, `latest` leads to a run with a manifest, and every whole
//!   line of `events.jsonl` parses;
//! - a following run of the final graph succeeds, produces the same outputs as the workload's, and executes
//!   no node whose entry survived;
//! - every node the workload's runs reported finished before the crash point kept its entry.

mod model;
mod recorder;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fracflow_core::run::{RunMeta, RunParams};
use fracflow_core::{
    Cache, Cancel, Engine, Executor, Fingerprint, Graph, Job, KindInfo, Kinds, NodeError, NodeSpec,
    Observer, Origin, Outcome, RunDir, RunOptions, StatCache,
};
use fracflow_record::{
    AppendFile, Digest, EventKind, FileOps, Files, NodeStatus, RealFiles, RunManifest, RunStatus,
};

use recorder::Recorder;

/// Where a crash point has more states than this, each choice's options alone plus this many combinations
/// are checked (see `model`).
const STATES_PER_POINT: usize = 128;

/// Output = blake3 of the node's value and its dependencies' outputs; each execution is recorded.
#[derive(Default)]
struct Derive {
    executed: Mutex<Vec<String>>,
}

impl Executor for Derive {
    fn info(&self, _spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: true,
        })
    }
    fn describe(&self, spec: &NodeSpec) -> String {
        format!("derive {}", spec.id)
    }
    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let fail = |e: std::io::Error| NodeError::permanent(e.to_string());
        self.executed
            .lock()
            .map_err(|e| NodeError::permanent(e.to_string()))?
            .push(job.spec.id.clone());
        let mut hasher = blake3::Hasher::new();
        hasher.update(job.spec.config["value"].to_string().as_bytes());
        for dir in job.inputs.dirs() {
            hasher.update(&std::fs::read(dir.join("out")).map_err(fail)?);
        }
        std::fs::write(
            job.out_dir.join("out"),
            hasher.finalize().to_hex().as_bytes(),
        )
        .map_err(fail)?;
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(job.log)
            .map_err(fail)?;
        std::io::Write::write_all(&mut log, format!("derived {}\n", job.spec.id).as_bytes())
            .map_err(fail)?;
        Ok(Outcome::default())
    }
}

impl Kinds for Derive {
    fn executor(&self, kind: &str) -> Option<&dyn Executor> {
        (kind == "derive").then_some(self as &dyn Executor)
    }
}

/// The real filesystem without its syncs: the run that follows a crash state is checked for what it does,
/// not for how it survives another crash, and thousands of them are made.
#[derive(Debug)]
struct Unsynced;

impl FileOps for Unsynced {
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn std::io::Write + Send>> {
        RealFiles.create_new(path)
    }
    fn open_append(&self, path: &Path) -> std::io::Result<Box<dyn AppendFile>> {
        RealFiles.open_append(path)
    }
    fn sync_file(&self, _path: &Path) -> std::io::Result<()> {
        Ok(())
    }
    fn sync_dir(&self, _dir: &Path) -> std::io::Result<()> {
        Ok(())
    }
    fn sync_fs(&self, _path: &Path) -> std::io::Result<()> {
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        RealFiles.rename(from, to)
    }
    fn create_dir(&self, dir: &Path) -> std::io::Result<()> {
        RealFiles.create_dir(dir)
    }
    fn hard_link(&self, original: &Path, link: &Path) -> std::io::Result<()> {
        RealFiles.hard_link(original, link)
    }
    fn symlink(&self, target: &Path, link: &Path) -> std::io::Result<()> {
        RealFiles.symlink(target, link)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        RealFiles.remove_file(path)
    }
    fn remove_dir(&self, dir: &Path) -> std::io::Result<()> {
        RealFiles.remove_dir(dir)
    }
    fn set_readonly(&self, path: &Path) -> std::io::Result<()> {
        RealFiles.set_readonly(path)
    }
    fn set_modified(&self, path: &Path, when: std::time::SystemTime) -> std::io::Result<()> {
        RealFiles.set_modified(path, when)
    }
}

struct Quiet;
impl Observer for Quiet {
    fn event(&mut self, _event: &EventKind) {}
}

/// Notes, for each node the run reports finished, how many operations had been recorded by then.
struct Reported {
    recorder: Recorder,
    finished: Vec<(usize, Digest)>,
}

impl Observer for Reported {
    fn event(&mut self, event: &EventKind) {
        if let EventKind::NodeFinished { key, .. } = event {
            let done = self.recorder.log().ops.len();
            self.finished.push((done, *key));
        }
    }
}

fn node(id: &str, deps: &[&str], value: u64) -> NodeSpec {
    NodeSpec {
        id: id.to_owned(),
        name: id.to_owned(),
        kind: "derive".into(),
        config: fracflow_core::Settings::from([("value".to_owned(), serde_json::json!(value))]),
        point: fracflow_core::Settings::new(),
        deps: deps.iter().map(|d| (*d).to_owned()).collect(),
        inputs: Vec::new(),
        outputs: vec!["out".into()],
        resources: Vec::new(),
        retries: 0,
        timeout: None,
        estimate: None,
        origin: Origin::default(),
    }
}

/// a → b → d ← c: `b` and `c` may run at once; `d_value` is what the second run changes.
fn graph(d_value: u64) -> Vec<NodeSpec> {
    vec![
        node("a", &[], 1),
        node("b", &["a"], 2),
        node("c", &[], 3),
        node("d", &["b", "c"], d_value),
    ]
}

/// Runs every node of `nodes` in the project at `top` (cache in `top/cache`, runs in `top/results`) with
/// `files`; returns the run's manifest and the nodes the kind executed.
fn run(
    top: &Path,
    files: &Files,
    nodes: &[NodeSpec],
    observer: &mut dyn Observer,
) -> (RunStatus, RunManifest<RunParams>, Vec<String>) {
    let graph = Graph::build(nodes.to_vec()).expect("a valid graph");
    let cache = Cache::open_with(&top.join("cache"), files.clone()).expect("the cache opens");
    let stat = StatCache::load(&cache.stat_cache_file());
    let kinds = Derive::default();
    let engine = Engine {
        root: top,
        cache: &cache,
        stat: &stat,
        kinds: &kinds,
    };
    let meta = RunMeta {
        engine_version: "test".into(),
        command: vec![],
        host: "test".into(),
        testbed: "emulated".into(),
        variant: None,
        testbed_profile: serde_json::Value::Null,
        git: None,
    };
    let mut run_dir = RunDir::create_with(files.clone(), &top.join("results"), "crash", &meta)
        .expect("the run directory is made");
    let options = RunOptions {
        jobs: 2,
        keep_going: false,
        rerun: vec![],
        testbed: BTreeMap::new(),
    };
    let summary = fracflow_core::scheduler::run(
        engine,
        &graph,
        graph.topological(),
        &options,
        &mut run_dir,
        observer,
        &Cancel::new(),
    )
    .expect("the run ends");
    let executed = kinds
        .executed
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    (summary.status, run_dir.manifest().clone(), executed)
}

fn fingerprint(value: u64) -> Fingerprint {
    Fingerprint {
        version: 1,
        kind: "extra".into(),
        kind_version: 1,
        config: fracflow_core::Settings::from([("value".to_owned(), serde_json::json!(value))]),
        point: fracflow_core::Settings::new(),
        outputs: vec!["out".into()],
        inputs: BTreeMap::new(),
        upstream: BTreeMap::new(),
        tools: BTreeMap::new(),
        testbed: BTreeMap::new(),
        placement: Vec::new(),
    }
}

/// The recorded workload; returns the final graph's outputs by node.
fn workload(top: &Path, files: &Files, reported: &mut Reported) -> BTreeMap<String, Vec<u8>> {
    let (status, first, _) = run(top, files, &graph(4), reported);
    assert_eq!(status, RunStatus::Succeeded);
    let cache = Cache::open_with(&top.join("cache"), files.clone()).expect("the cache opens");
    // Three writers at once: two of one key (with equal content), one of another.
    std::thread::scope(|scope| {
        for value in [7, 7, 8] {
            let cache = &cache;
            scope.spawn(move || {
                let staged = cache.staging_dir("extra").expect("staging");
                std::fs::write(staged.join("out"), format!("extra {value}"))
                    .expect("staged output");
                cache
                    .put(
                        &format!("extra-{value}"),
                        &fingerprint(value),
                        &staged,
                        &["out".to_owned()],
                        BTreeMap::new(),
                        None,
                        0.1,
                        "now".into(),
                    )
                    .expect("put");
                files.remove_dir_all(&staged).expect("staging removed");
            });
        }
    });
    // Two results committed in one batch, one with a log: the recording layer says its `syncfs` is durable,
    // so the batch is synced by filesystem, and each crash point between its three syncfs calls is checked.
    let log = top.join("batch.log");
    std::fs::write(&log, "the log of a batched node").expect("log written");
    let batch: Vec<_> = [9, 10]
        .into_iter()
        .map(|value| {
            let staged = cache.staging_dir("batch").expect("staging");
            std::fs::write(staged.join("out"), format!("batch {value}")).expect("staged output");
            let result = cache
                .stage(
                    &format!("batch-{value}"),
                    &fingerprint(value),
                    &staged,
                    &["out".to_owned()],
                    BTreeMap::new(),
                    (value == 9).then_some(log.as_path()),
                    0.1,
                    "now".into(),
                )
                .expect("staged");
            (result, staged)
        })
        .collect();
    let count_syncfs = |reported: &Reported| {
        let log = reported.recorder.log();
        log.ops
            .iter()
            .filter(|op| matches!(op, recorder::Op::SyncFs))
            .count()
    };
    let syncs_before = count_syncfs(reported);
    let (batch, staging): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    for committed in cache.commit(batch) {
        committed.expect("the batch commits");
    }
    assert_eq!(
        count_syncfs(reported) - syncs_before,
        3,
        "three syncfs calls"
    );
    for staged in staging {
        files.remove_dir_all(&staged).expect("staging removed");
    }
    // The extra entries are in no run: gc removes them and their blobs.
    let keep: HashSet<Digest> = first.nodes.values().filter_map(|r| r.key).collect();
    let report = cache.gc(&keep, Duration::ZERO).expect("gc");
    assert_eq!(report.entries_removed, 4, "{report:?}");
    let (status, second, executed) = run(top, files, &graph(40), reported);
    assert_eq!(status, RunStatus::Succeeded);
    assert_eq!(executed, ["d"], "only the changed node runs");
    // A no-op repeats the second run: its manifest is a link to that run's, its views that run's.
    let (status, third, executed) = run(top, files, &graph(40), reported);
    assert_eq!(status, RunStatus::Succeeded);
    assert!(executed.is_empty(), "{executed:?}");
    assert_eq!(third.repeats.as_deref(), Some(second.run_id.as_str()));
    outputs(&top.join("results/crash").join(&second.run_id), &second)
        .expect("every node's output is in its run directory")
}

/// Each node's output as its run directory shows it; a missing one is an error that names it.
fn outputs<P>(
    run_dir: &Path,
    manifest: &RunManifest<P>,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    manifest
        .nodes
        .keys()
        .map(|id| {
            let path = run_dir.join("nodes").join(id).join("out");
            let out = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok((id.clone(), out))
        })
        .collect()
}

/// Every entry key the cache under `cache` holds.
fn entry_keys(cache: &Path) -> BTreeSet<Digest> {
    let mut keys = BTreeSet::new();
    for shard in std::fs::read_dir(cache.join("entries"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for file in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = file.file_name().to_string_lossy().into_owned();
            if let Some(key) = name.strip_suffix(".json").and_then(|k| k.parse().ok()) {
                keys.insert(key);
            }
        }
    }
    keys
}

/// The problems of the run directories under `results/crash`.
fn run_dir_problems(results: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let Ok(listing) = std::fs::read_dir(results) else {
        return problems;
    };
    for item in listing.flatten() {
        let path = item.path();
        let name = item.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if name.starts_with("latest") {
            let target = std::fs::read_link(&path).map(|t| results.join(t));
            match target {
                Ok(run) if run.join("manifest.json").is_file() => {}
                Ok(run) => problems.push(format!(
                    "{name} leads to {} without a manifest",
                    run.display()
                )),
                Err(e) => problems.push(format!("{name} is not a link: {e}")),
            }
            continue;
        }
        let manifest = path.join("manifest.json");
        if manifest.exists() {
            let parsed = std::fs::read(&manifest)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<RunManifest>(&b).map_err(|e| e.to_string()));
            if let Err(e) = parsed {
                problems.push(format!("{}: {e}", manifest.display()));
            }
        }
        if let Ok(text) = std::fs::read(path.join("events.jsonl")) {
            // A torn last line (no newline yet) is what an unsynced append may leave; readers skip it.
            let whole = text
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(&[][..], |end| &text[..end]);
            for line in whole.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                if serde_json::from_slice::<serde_json::Value>(line).is_err() {
                    problems.push(format!(
                        "{}: a whole line does not parse: {}",
                        path.join("events.jsonl").display(),
                        String::from_utf8_lossy(line)
                    ));
                }
            }
        }
    }
    problems
}

/// Checks one crash state written out at `top`; returns what is wrong with it. The following run is made only
/// when `resume` (no state checked before differs from this one only in what a run does not read).
fn check(
    top: &Path,
    expected: &BTreeMap<String, Vec<u8>>,
    reported: &[&Digest],
    resume: bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    let survived = entry_keys(&top.join("cache"));
    for key in reported {
        if !survived.contains(*key) {
            problems.push(format!(
                "the entry {key} of a node reported finished was lost"
            ));
        }
    }
    let cache = Cache::open(&top.join("cache")).expect("the cache opens");
    let report = cache.verify().expect("verify runs");
    problems.extend(
        report
            .corrupt
            .iter()
            .map(|c| format!("cache verify: {}: {}", c.path.display(), c.reason)),
    );
    problems.extend(run_dir_problems(&top.join("results/crash")));
    if !resume {
        return problems;
    }
    let (status, manifest, _) = run(top, &Files::new(Arc::new(Unsynced)), &graph(40), &mut Quiet);
    if status != RunStatus::Succeeded {
        problems.push(format!(
            "the following run ended {status:?}: {:?}",
            manifest.nodes
        ));
        return problems;
    }
    for (id, record) in &manifest.nodes {
        if record.status == NodeStatus::Built
            && let Some(key) = &record.key
            && survived.contains(key)
        {
            problems.push(format!(
                "`{id}` ran again although its entry {key} survived"
            ));
        }
    }
    match outputs(&top.join("results/crash").join(&manifest.run_id), &manifest) {
        Ok(got) if &got == expected => {}
        Ok(_) => problems.push("the following run's outputs differ from the workload's".into()),
        Err(missing) => problems.push(format!("the following run shows no output: {missing}")),
    }
    problems
}

/// A scratch directory in memory where there is one: thousands of small trees are written and removed, which
/// on a disk that other work keeps busy costs minutes of journal waits.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("fracflow-crash")
            .tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("temp dir")
}

#[test]
fn every_state_power_loss_can_leave_is_consistent_and_resumes() {
    let work = scratch();
    let top = work.path().join("project");
    std::fs::create_dir(&top).expect("project dir");
    let recorder = Recorder::start(&top).expect("recording starts");
    let files = Files::new(Arc::new(recorder.clone()));
    let mut reported = Reported {
        recorder: recorder.clone(),
        finished: Vec::new(),
    };
    let expected = workload(&top, &files, &mut reported);
    assert_eq!(
        reported.finished.len(),
        5,
        "four nodes, then the changed one"
    );
    let log = recorder.log();
    let points = log.ops.len();
    let mut seen = HashSet::new();
    let mut resumed = HashSet::new();
    let (mut states, mut distinct, mut exhaustive_points) = (0usize, 0usize, 0usize);
    let mut failures: Vec<String> = Vec::new();
    for point in 0..=points {
        let (crash_states, exhaustive) = model::states(&log, point, STATES_PER_POINT);
        exhaustive_points += usize::from(exhaustive);
        for state in crash_states {
            states += 1;
            // The node pointers (`cache/nodes`) serve estimates only, and the hit index is never used in a
            // state written out here (its records name the recorded files' inodes): states that differ only
            // there are one state to the checks. What a following run does depends on the cache and on the
            // previous run's views, not on the manifests and journals, which the other checks read.
            let everything = ["cache/entries", "cache/blobs", "cache/tmp", "results"];
            // Nodes reported finished by now: their entries must be there. A state met again after more
            // reports is checked again, against them all.
            let finished: Vec<&Digest> = reported
                .finished
                .iter()
                .filter(|(at, _)| *at <= point)
                .map(|(_, key)| key)
                .collect();
            if !seen.insert((state.fingerprint(&everything, &[]), finished.len())) {
                continue;
            }
            let resume =
                resumed.insert(state.fingerprint(&everything, &["manifest.json", "events.jsonl"]));
            distinct += 1;
            let dir = work.path().join(format!("state-{distinct}"));
            state.materialize(&dir).expect("the state is written out");
            let problems = check(&dir, &expected, &finished, resume);
            if !problems.is_empty() && failures.len() < 10 {
                let failure = format!(
                    "after operation {point} of {points} ({:?}):\n  {}",
                    log.ops.get(point.wrapping_sub(1)),
                    problems.join("\n  ")
                );
                eprintln!("{failure}");
                failures.push(failure);
            }
            std::fs::remove_dir_all(&dir).expect("the state is removed");
        }
    }
    eprintln!(
        "crash states: {points} operations recorded, {} crash points ({exhaustive_points} enumerated \
         exhaustively; at the others each choice alone and {STATES_PER_POINT} combinations), {states} states, \
         {distinct} distinct checked, {} of them resumed",
        points + 1,
        resumed.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        distinct > points,
        "the model yields more than one state per point"
    );
}

/// The model itself: a rename into a directory that was never synced may be lost, one into a synced
/// directory may not, and unsynced data may be torn.
#[test]
fn the_model_loses_what_was_not_synced_and_keeps_what_was() {
    let work = tempfile::tempdir().expect("temp dir");
    let top = work.path().join("t");
    std::fs::create_dir(&top).expect("dir");
    let recorder = Recorder::start(&top).expect("recording starts");
    let files = Files::new(Arc::new(recorder.clone()));
    let durable = top.join("durable");
    let loose = top.join("loose");
    files
        .publish(&durable, b"kept", fracflow_record::Publish::Durable)
        .expect("publish");
    files.write_new(&loose, b"maybe").expect("write");
    let log = recorder.log();
    let (states, exhaustive) = model::states(&log, log.ops.len(), 1000);
    assert!(exhaustive);
    // Per state: what `durable` and `loose` hold (None: no such name).
    type Contents = (Option<Vec<u8>>, Option<Vec<u8>>);
    let mut contents: BTreeSet<Contents> = BTreeSet::new();
    for (n, state) in states.iter().enumerate() {
        let dir = work.path().join(format!("s{n}"));
        state.materialize(&dir).expect("written out");
        contents.insert((
            std::fs::read(dir.join("durable")).ok(),
            std::fs::read(dir.join("loose")).ok(),
        ));
    }
    assert!(
        contents
            .iter()
            .all(|(d, _)| d.as_deref() == Some(&b"kept"[..])),
        "{contents:?}"
    );
    let loose_seen: BTreeSet<Option<Vec<u8>>> = contents.into_iter().map(|(_, l)| l).collect();
    for expected in [
        None,
        Some(b"".to_vec()),
        Some(b"ma".to_vec()),
        Some(b"maybe".to_vec()),
    ] {
        assert!(
            loose_seen.contains(&expected),
            "{expected:?} in {loose_seen:?}"
        );
    }
}
