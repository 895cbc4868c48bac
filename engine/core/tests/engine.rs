//! Engine behaviour over in-memory kinds: the incremental oracle, early cutoff, transient retries.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use fracflow_core::run::RunMeta;
use fracflow_core::{
    Cache, Cancel, Engine, Executor, Graph, Job, KindInfo, Kinds, NodeError, NodeSpec, Observer,
    Origin, Outcome, RunDir, RunOptions, StatCache,
};
use fracflow_record::{EventKind, RunStatus};
use proptest::prelude::*;

/// Output = blake3(own `value` + each dependency's `out`), or only `value` when `constant` (early cutoff);
/// `flaky: N` fails transiently on the first N attempts.
#[derive(Default)]
struct Pure {
    executed: Mutex<Vec<String>>,
}

impl Executor for Pure {
    fn info(&self, _spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: true,
        })
    }
    fn describe(&self, spec: &NodeSpec) -> String {
        format!("pure {}", spec.id)
    }
    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        self.executed
            .lock()
            .map_err(|e| NodeError::permanent(e.to_string()))?
            .push(job.spec.id.clone());
        let flaky = job
            .spec
            .config
            .get("flaky")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        if u64::from(job.attempt) < flaky {
            return Err(NodeError::transient("flaky"));
        }
        let mut hasher = blake3::Hasher::new();
        hasher.update(job.spec.config["value"].to_string().as_bytes());
        for path in &job.spec.inputs {
            hasher.update(&std::fs::read(path).map_err(|e| NodeError::permanent(e.to_string()))?);
        }
        if !job.spec.config.contains_key("constant") {
            for dir in job.inputs.dirs() {
                let bytes = std::fs::read(dir.join("out"))
                    .map_err(|e| NodeError::permanent(e.to_string()))?;
                hasher.update(&bytes);
            }
        }
        std::fs::write(
            job.out_dir.join("out"),
            hasher.finalize().to_hex().as_bytes(),
        )
        .map_err(|e| NodeError::permanent(e.to_string()))?;
        Ok(Outcome::default())
    }
}

impl Kinds for Pure {
    fn executor(&self, kind: &str) -> Option<&dyn Executor> {
        (kind == "pure").then_some(self as &dyn Executor)
    }
}

struct Quiet;
impl Observer for Quiet {
    fn event(&mut self, _event: &EventKind) {}
}

fn node(id: &str, deps: &[String], value: u64, inputs: Vec<PathBuf>) -> NodeSpec {
    NodeSpec {
        id: id.to_owned(),
        name: id.to_owned(),
        kind: "pure".into(),
        config: fracflow_core::Settings::from([("value".to_owned(), serde_json::json!(value))]),
        point: fracflow_core::Settings::new(),
        deps: deps.to_vec(),
        inputs,
        outputs: vec!["out".into()],
        resources: Vec::new(),
        retries: 0,
        timeout: None,
        estimate: None,
        origin: Origin::default(),
    }
}

/// Runs every node of `nodes` with `kinds`, `jobs` cores and the cache at `cache_dir`.
fn run_with(
    kinds: &dyn Kinds,
    jobs: usize,
    root: &Path,
    cache_dir: &Path,
    nodes: &[NodeSpec],
) -> (fracflow_core::RunSummary, RunDir) {
    let graph = Graph::build(nodes.to_vec()).expect("valid graph");
    let cache = Cache::open(cache_dir).expect("cache");
    let stat = StatCache::load(&cache.stat_cache_file());
    let engine = Engine {
        root,
        cache: &cache,
        stat: &stat,
        kinds,
    };
    let meta = RunMeta {
        engine_version: "test".into(),
        command: vec![],
        host: "test".into(),
        testbed: "none".into(),
        variant: None,
        testbed_profile: serde_json::Value::Null,
        git: None,
    };
    let mut run_dir = RunDir::create(&root.join("results"), "test", &meta).expect("run dir");
    let options = RunOptions {
        jobs,
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
        &mut Quiet,
        &Cancel::new(),
    )
    .expect("run");
    (summary, run_dir)
}

/// Runs every node of `nodes` with the pure kind; returns the executed ids and each node's output.
fn run_all(
    root: &Path,
    cache_dir: &Path,
    nodes: &[NodeSpec],
) -> (Vec<String>, BTreeMap<String, String>) {
    let kinds = Pure::default();
    let (summary, run_dir) = run_with(&kinds, 2, root, cache_dir, nodes);
    assert_eq!(summary.status, RunStatus::Succeeded, "{summary:?}");
    let outputs = nodes
        .iter()
        .map(|n| {
            let text = std::fs::read_to_string(run_dir.outputs_dir(&n.id).join("out"))
                .expect("published output");
            (n.id.clone(), text)
        })
        .collect();
    let executed = kinds.executed.into_inner().expect("lock");
    (executed, outputs)
}

/// Every node reachable downstream from `edited` (inclusive).
fn downstream(nodes: &[NodeSpec], edited: &BTreeSet<String>) -> BTreeSet<String> {
    let mut dependents: HashMap<&str, Vec<&str>> = HashMap::new();
    for n in nodes {
        for d in &n.deps {
            dependents.entry(d.as_str()).or_default().push(&n.id);
        }
    }
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut stack: Vec<&str> = edited.iter().map(String::as_str).collect();
    while let Some(id) = stack.pop() {
        if seen.insert(id.to_owned()) {
            stack.extend(dependents.get(id).into_iter().flatten().copied());
        }
    }
    seen
}

#[derive(Debug, Clone)]
struct Case {
    /// For each node, the indices (< its own) it depends on.
    deps: Vec<Vec<usize>>,
    /// Nodes whose `value` changes in the edit.
    edit_values: Vec<usize>,
    /// Nodes whose input file changes in the edit.
    edit_files: Vec<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    (2usize..18).prop_flat_map(|n| {
        let deps = (0..n)
            .map(|i| {
                proptest::collection::vec(0..i.max(1), 0..=i.min(3))
                    .prop_map(move |v| if i == 0 { vec![] } else { v })
            })
            .collect::<Vec<_>>();
        (
            deps,
            proptest::collection::vec(0..n, 0..3),
            proptest::collection::vec(0..n, 0..3),
        )
            .prop_map(|(deps, edit_values, edit_files)| Case {
                deps,
                edit_values,
                edit_files,
            })
    })
}

fn build_nodes(root: &Path, case: &Case, bump: &BTreeSet<usize>) -> Vec<NodeSpec> {
    case.deps
        .iter()
        .enumerate()
        .map(|(i, deps)| {
            let mut deps: Vec<String> = deps.iter().map(|d| format!("n{d}")).collect();
            deps.sort();
            deps.dedup();
            let value = if bump.contains(&i) {
                1000 + i as u64
            } else {
                i as u64
            };
            node(
                &format!("n{i}"),
                &deps,
                value,
                vec![root.join(format!("input{i}.txt"))],
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// An incremental run after random edits gives a clean rebuild's outputs, and re-runs only what is
    /// downstream of an edit.
    #[test]
    fn incremental_equals_clean_and_reruns_only_downstream(case in case()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for i in 0..case.deps.len() {
            std::fs::write(root.join(format!("input{i}.txt")), format!("input {i}")).expect("write input");
        }
        let before = build_nodes(root, &case, &BTreeSet::new());
        let (first, _) = run_all(root, &root.join("cache"), &before);
        prop_assert_eq!(first.len(), before.len());

        let bumped: BTreeSet<usize> = case.edit_values.iter().copied().collect();
        for &i in &case.edit_files {
            std::fs::write(root.join(format!("input{i}.txt")), format!("edited input {i}, longer")).expect("edit");
        }
        let after = build_nodes(root, &case, &bumped);
        let (incremental, outputs) = run_all(root, &root.join("cache"), &after);
        let (_, clean) = run_all(root, &root.join("clean-cache"), &after);
        prop_assert_eq!(&outputs, &clean);

        let edited: BTreeSet<String> =
            case.edit_values.iter().chain(&case.edit_files).map(|i| format!("n{i}")).collect();
        let allowed = downstream(&after, &edited);
        for id in &incremental {
            prop_assert!(allowed.contains(id), "{} re-ran but is not downstream of {:?}", id, edited);
        }
        for id in &edited {
            prop_assert!(incremental.contains(id), "edited node {} did not re-run", id);
        }
    }
}

/// Two nodes doing identical work share one key: one builds it, the other is served its entry, and each finds
/// the outputs in its own directory of the run, in the run that builds and in the run that finds both cached.
#[test]
fn nodes_sharing_a_key_each_get_their_outputs_published() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let nodes = vec![
        node("twin_a", &[], 7, vec![]),
        node("twin_b", &[], 7, vec![]),
    ];
    for _ in 0..2 {
        let (_, outputs) = run_all(root, &root.join("cache"), &nodes);
        assert_eq!(outputs["twin_a"], outputs["twin_b"]);
    }
}

#[test]
fn equal_outputs_cut_off_downstream_rebuilds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    // a → b (ignores a's output) → c. Changing a re-runs a and b; b's output is unchanged, so c is a hit.
    let make = |a_value: u64| {
        let mut b = node("b", &["a".to_owned()], 2, vec![]);
        b.config.insert("constant".into(), serde_json::json!(true));
        vec![
            node("a", &[], a_value, vec![]),
            b,
            node("c", &["b".to_owned()], 3, vec![]),
        ]
    };
    let (first, _) = run_all(root, &root.join("cache"), &make(1));
    assert_eq!(first.len(), 3);
    let (second, _) = run_all(root, &root.join("cache"), &make(2));
    let second: BTreeSet<String> = second.into_iter().collect();
    assert_eq!(second, BTreeSet::from(["a".to_owned(), "b".to_owned()]));
}

#[test]
fn transient_failures_are_retried_and_only_success_is_cached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut flaky = node("flaky", &[], 1, vec![]);
    flaky.config.insert("flaky".into(), serde_json::json!(2));
    flaky.retries = 2;
    let (executed, outputs) = run_all(root, &root.join("cache"), std::slice::from_ref(&flaky));
    assert_eq!(executed.len(), 3, "two transient failures, then success");
    assert!(outputs.contains_key("flaky"));
    let (again, _) = run_all(root, &root.join("cache"), &[flaky]);
    assert!(again.is_empty(), "the success was cached");
}

#[test]
fn verify_names_corrupt_blobs_ignores_torn_temporaries_and_gc_frees_unreferenced() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let cache_dir = root.join("cache");
    run_all(
        root,
        &cache_dir,
        &[node("a", &[], 1, vec![]), node("b", &[], 2, vec![])],
    );
    let cache = Cache::open(&cache_dir).expect("cache");
    let clean = cache.verify().expect("verify");
    assert_eq!((clean.entries, clean.corrupt.len()), (2, 0));

    // A write cut short by a kill leaves a temporary: not an entry, not corruption.
    let entries = cache_dir.join("entries");
    let some_dir = std::fs::read_dir(&entries)
        .expect("entries")
        .flatten()
        .next()
        .expect("a shard")
        .path();
    std::fs::write(some_dir.join("deadbeef.json.123.part"), b"{ torn").expect("write temp");
    assert!(cache.verify().expect("verify").corrupt.is_empty());

    // A blob whose content changed is named.
    let a = cache.latest_for("a").expect("entry of a");
    let blob = cache.blob_path(&a.outputs["out"].hash);
    std::fs::set_permissions(&blob, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::write(&blob, b"bit rot").expect("corrupt");
    let report = cache.verify().expect("verify");
    assert_eq!(report.corrupt.len(), 1, "{report:?}");
    assert_eq!(report.corrupt[0].path, blob);

    let freed = cache
        .gc(
            &std::collections::HashSet::from([a.key]),
            std::time::Duration::ZERO,
        )
        .expect("gc");
    assert_eq!(freed.entries_removed, 1, "b's entry goes, a's stays");
    assert!(cache.get(&a.key).is_some());
    assert!(cache.latest_for("b").is_none());
}

/// Records when each node ran; holds for `hold_ms` so overlaps are observable.
#[derive(Default)]
struct Timed {
    spans: Mutex<Vec<(String, std::time::Instant, std::time::Instant)>>,
}

impl Executor for Timed {
    fn info(&self, _spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: true,
        })
    }
    fn describe(&self, spec: &NodeSpec) -> String {
        spec.id.clone()
    }
    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let start = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(60));
        std::fs::write(job.out_dir.join("out"), job.spec.id.as_bytes())
            .map_err(|e| NodeError::permanent(e.to_string()))?;
        self.spans
            .lock()
            .map_err(|e| NodeError::permanent(e.to_string()))?
            .push((job.spec.id.clone(), start, std::time::Instant::now()));
        Ok(Outcome::default())
    }
}

impl Kinds for Timed {
    fn executor(&self, _kind: &str) -> Option<&dyn Executor> {
        Some(self)
    }
}

fn overlaps(spans: &[(String, std::time::Instant, std::time::Instant)], a: &str, b: &str) -> bool {
    let find = |id: &str| {
        spans
            .iter()
            .find(|s| s.0 == id)
            .map(|s| (s.1, s.2))
            .expect("span")
    };
    let (a0, a1) = find(a);
    let (b0, b1) = find(b);
    a0 < b1 && b0 < a1
}

#[test]
fn exclusive_resources_serialise_and_the_core_budget_bounds_parallelism() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    // Distinct values: identical fingerprints would rightly share one cached result.
    let with = |id: &str, resources: &[&str]| {
        let value = id.bytes().fold(0u64, |acc, b| {
            acc.wrapping_mul(131).wrapping_add(u64::from(b))
        });
        let mut spec = node(id, &[], value, vec![]);
        spec.resources = resources
            .iter()
            .map(|r| fracflow_core::Resource::parse(r).expect("resource"))
            .collect();
        spec
    };
    let nodes = vec![
        with("dev_a", &["device:fpga0"]),
        with("dev_b", &["device:fpga0"]),
        with("other_device", &["device:fpga1"]),
        with("wide", &["cores:4"]),
        with("free", &[]),
    ];
    let kinds = Timed::default();
    let (summary, run_dir) = run_with(&kinds, 4, root, &root.join("cache"), &nodes);
    let events = std::fs::read_to_string(run_dir.dir().join("events.jsonl")).expect("events");
    assert_eq!(summary.built, 5, "{summary:?}\n{events}");
    let spans = kinds.spans.into_inner().expect("lock");
    assert!(
        !overlaps(&spans, "dev_a", "dev_b"),
        "one device, one node at a time"
    );
    assert!(
        overlaps(&spans, "dev_a", "other_device") || overlaps(&spans, "dev_b", "other_device"),
        "other devices run beside it"
    );
    for other in ["dev_a", "dev_b", "other_device", "free"] {
        assert!(
            !overlaps(&spans, "wide", other),
            "cores:4 of a budget of 4 runs alone"
        );
    }
}

/// Writes its id; `src` holds its key until some engine has reported waiting for it, so two engines are
/// known to overlap on it (bounded: after 30 s it goes on, and the test's assertion on waiting fails).
struct Gated {
    executed: Mutex<Vec<String>>,
    someone_waited: std::sync::atomic::AtomicBool,
}

impl Executor for Gated {
    fn info(&self, _spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: true,
        })
    }
    fn describe(&self, spec: &NodeSpec) -> String {
        spec.id.clone()
    }
    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        self.executed
            .lock()
            .map_err(|e| NodeError::permanent(e.to_string()))?
            .push(job.spec.id.clone());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while job.spec.id == "src"
            && !self
                .someone_waited
                .load(std::sync::atomic::Ordering::SeqCst)
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::fs::write(job.out_dir.join("out"), job.spec.id.as_bytes())
            .map_err(|e| NodeError::permanent(e.to_string()))?;
        Ok(Outcome::default())
    }
}

impl Kinds for Gated {
    fn executor(&self, _kind: &str) -> Option<&dyn Executor> {
        Some(self)
    }
}

/// Sets the gate when its engine reports waiting for another engine's key.
struct WaitWatcher<'a>(&'a std::sync::atomic::AtomicBool);

impl Observer for WaitWatcher<'_> {
    fn event(&mut self, event: &EventKind) {
        if let EventKind::NodeWaiting { holder_pid, .. } = event {
            assert_eq!(*holder_pid, Some(std::process::id()), "the holder is named");
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

#[test]
fn two_engines_on_one_cache_build_each_key_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let cache_dir = root.join("cache");
    // src → w0..w5 → join: after src, both engines compete for six independent keys.
    let mut nodes = vec![node("src", &[], 0, vec![])];
    let fan: Vec<String> = (0..6).map(|i| format!("w{i}")).collect();
    for (i, id) in fan.iter().enumerate() {
        nodes.push(node(id, &["src".to_owned()], 1 + i as u64, vec![]));
    }
    nodes.push(node("join", &fan, 99, vec![]));
    let graph = Graph::build(nodes.clone()).expect("valid graph");
    let kinds = Gated {
        executed: Mutex::new(Vec::new()),
        someone_waited: std::sync::atomic::AtomicBool::new(false),
    };
    let engine_run = |results: &str| {
        // Its own cache handle and run directory, as a second process would have.
        let cache = Cache::open(&cache_dir).expect("cache");
        let stat = StatCache::load(&cache.stat_cache_file());
        let engine = Engine {
            root,
            cache: &cache,
            stat: &stat,
            kinds: &kinds,
        };
        let meta = RunMeta {
            engine_version: "test".into(),
            command: vec![],
            host: "test".into(),
            testbed: "none".into(),
            variant: None,
            testbed_profile: serde_json::Value::Null,
            git: None,
        };
        let mut run_dir = RunDir::create(&root.join(results), "test", &meta).expect("run dir");
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
            &mut WaitWatcher(&kinds.someone_waited),
            &Cancel::new(),
        )
        .expect("run");
        let published = nodes
            .iter()
            .all(|n| run_dir.outputs_dir(&n.id).join("out").is_file());
        (summary, published)
    };
    let (first, second) = std::thread::scope(|scope| {
        let a = scope.spawn(|| engine_run("results-a"));
        let b = scope.spawn(|| engine_run("results-b"));
        (a.join().expect("engine a"), b.join().expect("engine b"))
    });
    assert!(
        kinds
            .someone_waited
            .load(std::sync::atomic::Ordering::SeqCst),
        "one engine waited for the other's src"
    );
    for (summary, published) in [&first, &second] {
        assert_eq!(summary.status, RunStatus::Succeeded, "{summary:?}");
        assert!(published, "every node's output is in both runs");
    }
    let mut executed = kinds.executed.into_inner().expect("lock");
    executed.sort();
    let mut expected: Vec<String> = nodes.iter().map(|n| n.id.clone()).collect();
    expected.sort();
    assert_eq!(executed, expected, "each key built exactly once");
    assert_eq!(first.0.built + second.0.built, nodes.len());
    let report = Cache::open(&cache_dir)
        .expect("cache")
        .verify()
        .expect("verify");
    assert!(report.corrupt.is_empty(), "{:?}", report.corrupt);
    assert_eq!(report.entries, nodes.len());
}

/// The pure kind beside `effect`, a lazy effect (never cached, run only for dependents that run) that does
/// nothing but fail when its config says `fail: true`. Executions of both kinds are logged in order.
#[derive(Default)]
struct WithEffects {
    pure: Pure,
}

impl Executor for WithEffects {
    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: spec.kind != "effect",
        })
    }
    fn describe(&self, spec: &NodeSpec) -> String {
        format!("{} {}", spec.kind, spec.id)
    }
    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        if job.spec.kind != "effect" {
            return self.pure.execute(job);
        }
        self.pure
            .executed
            .lock()
            .map_err(|e| NodeError::permanent(e.to_string()))?
            .push(job.spec.id.clone());
        if job.spec.config.contains_key("fail") {
            return Err(NodeError::permanent("the board did not come back"));
        }
        Ok(Outcome::default())
    }
    fn lazy(&self, spec: &NodeSpec) -> bool {
        spec.kind == "effect"
    }
}

impl Kinds for WithEffects {
    fn executor(&self, kind: &str) -> Option<&dyn Executor> {
        matches!(kind, "pure" | "effect").then_some(self as &dyn Executor)
    }
}

fn effect(id: &str, deps: &[&str], value: u64) -> NodeSpec {
    let deps: Vec<String> = deps.iter().map(|d| (*d).to_owned()).collect();
    let mut spec = node(id, &deps, value, vec![]);
    spec.kind = "effect".into();
    spec.outputs = Vec::new();
    spec
}

/// A pure node that keys on its dependencies but does not read their outputs (an effect has none).
fn measured(id: &str, deps: &[&str], value: u64) -> NodeSpec {
    let deps: Vec<String> = deps.iter().map(|d| (*d).to_owned()).collect();
    let mut spec = node(id, &deps, value, vec![]);
    spec.config
        .insert("constant".into(), serde_json::json!(true));
    spec
}

/// Runs `nodes` with the effect kinds; returns the summary, the executed ids in order and the run directory.
fn run_effects(
    root: &Path,
    nodes: &[NodeSpec],
) -> (fracflow_core::RunSummary, Vec<String>, RunDir) {
    let kinds = WithEffects::default();
    let (summary, run_dir) = run_with(&kinds, 2, root, &root.join("cache"), nodes);
    let executed = kinds.pure.executed.into_inner().expect("lock");
    (summary, executed, run_dir)
}

/// Where `id` was executed in `executed`; fails unless exactly once.
fn once(executed: &[String], id: &str) -> usize {
    let at: Vec<usize> = (0..executed.len()).filter(|&i| executed[i] == id).collect();
    assert_eq!(at.len(), 1, "{id} runs once: {executed:?}");
    at[0]
}

/// The manifest's status and skip reason of `id`, and the reason its `node_skipped` event gave.
fn skip_of(
    run_dir: &RunDir,
    id: &str,
) -> (fracflow_record::NodeStatus, Option<String>, Option<String>) {
    let record = &run_dir.manifest().nodes[id];
    let events = std::fs::read_to_string(run_dir.dir().join("events.jsonl")).expect("events");
    let event = events
        .lines()
        .filter_map(|l| serde_json::from_str::<fracflow_record::Event>(l).ok())
        .find_map(|e| match e.kind {
            EventKind::NodeSkipped { node, reason } if node == id => Some(reason),
            _ => None,
        });
    (record.status, record.reason.clone(), event)
}

#[test]
fn lazy_effects_run_once_before_what_needs_them_and_not_for_cache_hits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    // order → program → reboot → driver → a, b: a cached node the chain waits for, then a chain of effects.
    let make = |order: u64, program: u64, extra: bool| {
        let mut nodes = vec![
            node("order", &[], order, vec![]),
            effect("program", &["order"], program),
            effect("reboot", &["program"], 2),
            effect("driver", &["reboot"], 3),
            measured("a", &["driver"], 4),
            measured("b", &["driver"], 5),
        ];
        if extra {
            nodes.push(measured("c", &["driver"], 6));
        }
        nodes
    };
    let chain = ["program", "reboot", "driver"];

    let (summary, executed, _) = run_effects(root, &make(1, 1, false));
    assert_eq!(summary.status, RunStatus::Succeeded, "{summary:?}");
    let at: Vec<usize> = ["order", "program", "reboot", "driver"]
        .iter()
        .map(|id| once(&executed, id))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "in order: {executed:?}");
    assert!(once(&executed, "a") > at[3] && once(&executed, "b") > at[3]);

    // Everything that needs the chain is a hit: no effect runs, each says why.
    let (summary, executed, run_dir) = run_effects(root, &make(1, 1, false));
    assert!(executed.is_empty(), "{executed:?}");
    assert_eq!((summary.cached, summary.skipped, summary.built), (3, 3, 0));
    for id in chain {
        let reason = Some("nothing that needs it runs".to_owned());
        assert_eq!(
            skip_of(&run_dir, id),
            (fracflow_record::NodeStatus::Skipped, reason.clone(), reason),
            "{id}"
        );
    }

    // A new dependent: the chain runs once more, before it alone.
    let (summary, executed, _) = run_effects(root, &make(1, 1, true));
    assert_eq!(summary.status, RunStatus::Succeeded, "{summary:?}");
    assert_eq!(executed, ["program", "reboot", "driver", "c"]);

    // What the chain waits for changed: it runs again, but effects key on their own spec, so the measured nodes
    // stay hits and nothing needs the chain.
    let (_, executed, _) = run_effects(root, &make(9, 1, true));
    assert_eq!(executed, ["order"]);

    // The first effect's spec changed: through the chain, every measured node's key changed.
    let (_, executed, _) = run_effects(root, &make(9, 7, true));
    assert_eq!(executed[..3], chain);
    let measured: BTreeSet<&str> = executed[3..].iter().map(String::as_str).collect();
    assert_eq!(measured, BTreeSet::from(["a", "b", "c"]));
}

#[test]
fn a_failed_effect_skips_what_needs_it_and_runs_nothing_after_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut program = effect("program", &[], 1);
    program
        .config
        .insert("fail".into(), serde_json::json!(true));
    let nodes = vec![
        program,
        effect("driver", &["program"], 2),
        measured("a", &["driver"], 3),
        measured("b", &["driver"], 4),
    ];
    let (summary, executed, run_dir) = run_effects(root, &nodes);
    assert_eq!(summary.status, RunStatus::Failed);
    assert_eq!(executed, ["program"]);
    assert_eq!(summary.failed.len(), 1, "{summary:?}");
    assert_eq!(summary.failed[0].0, "program");
    for id in ["driver", "a", "b"] {
        let reason = Some("dependency `program` failed".to_owned());
        assert_eq!(
            skip_of(&run_dir, id),
            (fracflow_record::NodeStatus::Skipped, reason.clone(), reason),
            "{id}"
        );
    }
}

#[test]
fn an_effect_nothing_in_the_run_depends_on_runs_for_its_own_sake() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    // `fracflow run setup` where setup is the last effect of a chain: it was asked for, and so is what it needs.
    let nodes = vec![effect("program", &[], 1), effect("driver", &["program"], 2)];
    for _ in 0..2 {
        let (summary, executed, _) = run_effects(root, &nodes);
        assert_eq!(summary.status, RunStatus::Succeeded, "{summary:?}");
        assert_eq!(executed, ["program", "driver"]);
    }
}

/// A node that fails leaves no folder of views behind: the scheduler makes a running node's folder while it
/// runs, ahead of its outputs, and removes it again when the node fails.
#[test]
fn a_failed_node_leaves_no_folder_of_views() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut failing = node("failing", &[], 1, vec![]);
    // A transient failure with no retries left fails the node.
    failing.config.insert("flaky".into(), serde_json::json!(1));
    let kinds = Pure::default();
    let (summary, run_dir) = run_with(&kinds, 2, root, &root.join("cache"), &[failing]);
    assert_eq!(summary.status, RunStatus::Failed, "{summary:?}");
    let folder = run_dir.outputs_dir("failing");
    assert!(!folder.exists(), "{} was left behind", folder.display());
}
