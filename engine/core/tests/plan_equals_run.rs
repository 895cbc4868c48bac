//! `plan` predicts what the following run does, node by node: over random DAGs of cacheable nodes, eager and
//! lazy effects (some failing, some leaving the same output after an edit, so early cutoff happens), random
//! targets, random edits between runs and random `--rerun` patterns. Every kind is a fake that writes a file
//! or fails, so a case takes milliseconds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Mutex;

use fracflow_core::plan::{self, Verdict};
use fracflow_core::run::RunMeta;
use fracflow_core::{
    Cache, Cancel, Engine, Executor, Graph, Job, KindInfo, Kinds, NodeError, NodeSpec, Observer,
    Origin, Outcome, RunDir, RunOptions, RunSummary, StatCache,
};
use fracflow_record::{EventKind, NodeStatus};
use proptest::prelude::*;

const NOT_NEEDED: &str = "nothing that needs it runs";
const STOPPED: &str = "run stopped after a failure";

/// The kinds of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Output: a hash of its value, its input file and its dependencies' outputs.
    Mixing,
    /// Output: its `out` setting alone, so editing its value re-runs it to the same output (early cutoff).
    Constant,
    /// Never cached; writes its `out` setting, which its dependents key on.
    Eager,
    /// Never cached, no outputs; runs only for dependents that run.
    Lazy,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Mixing => "mixing",
            Kind::Constant => "constant",
            Kind::Eager => "eager",
            Kind::Lazy => "lazy",
        }
    }
}

/// Every kind of a case; records which nodes executed, in order.
#[derive(Default)]
struct Fakes {
    executed: Mutex<Vec<String>>,
}

impl Executor for Fakes {
    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: matches!(spec.kind.as_str(), "mixing" | "constant"),
        })
    }
    fn describe(&self, spec: &NodeSpec) -> String {
        format!("{} {}", spec.kind, spec.id)
    }
    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let fail = |e: std::io::Error| NodeError::permanent(e.to_string());
        self.executed
            .lock()
            .map_err(|e| NodeError::permanent(e.to_string()))?
            .push(job.spec.id.clone());
        if job.spec.config.contains_key("fail") {
            return Err(NodeError::permanent("configured to fail"));
        }
        let out = match job.spec.kind.as_str() {
            "lazy" => return Ok(Outcome::default()),
            "mixing" => {
                let mut hasher = blake3::Hasher::new();
                hasher.update(job.spec.config["value"].to_string().as_bytes());
                for path in &job.spec.inputs {
                    hasher.update(&std::fs::read(path).map_err(fail)?);
                }
                for dir in job.inputs.dirs() {
                    // A lazy effect leaves no output.
                    if let Ok(bytes) = std::fs::read(dir.join("out")) {
                        hasher.update(&bytes);
                    }
                }
                hasher.finalize().to_hex().to_string()
            }
            _ => job.spec.config["out"].to_string(),
        };
        std::fs::write(job.out_dir.join("out"), out).map_err(fail)?;
        Ok(Outcome::default())
    }
    fn lazy(&self, spec: &NodeSpec) -> bool {
        spec.kind == "lazy"
    }
}

impl Kinds for Fakes {
    fn executor(&self, kind: &str) -> Option<&dyn Executor> {
        matches!(kind, "mixing" | "constant" | "eager" | "lazy").then_some(self as &dyn Executor)
    }
}

struct Quiet;
impl Observer for Quiet {
    fn event(&mut self, _event: &EventKind) {}
}

/// One node's settings in one run.
#[derive(Debug, Clone, PartialEq)]
struct Settings {
    value: u64,
    out: u64,
    fail: bool,
}

#[derive(Debug, Clone)]
struct Case {
    kinds: Vec<Kind>,
    /// For each node, the indices (< its own) it depends on.
    deps: Vec<Vec<usize>>,
    before: Vec<Settings>,
    after: Vec<Settings>,
    /// Nodes whose input file changes between the runs.
    edit_files: Vec<usize>,
    /// Nodes the runs are asked for (with what they need).
    targets: Vec<usize>,
    rerun_first: Vec<String>,
    rerun_second: Vec<String>,
    keep_going: bool,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        3 => Just(Kind::Mixing),
        2 => Just(Kind::Constant),
        1 => Just(Kind::Eager),
        2 => Just(Kind::Lazy),
    ]
}

fn settings() -> impl Strategy<Value = Settings> {
    (0u64..3, 0u64..2, proptest::bool::weighted(0.12)).prop_map(|(value, out, fail)| Settings {
        value,
        out,
        fail,
    })
}

/// An edit: usually nothing, else a new value (a new key; a constant node's output stays), a new output or a
/// failure toggled.
fn edited(settings: Settings) -> impl Strategy<Value = Settings> {
    let same = settings.clone();
    prop_oneof![
        4 => Just(same),
        1 => (10u64..20).prop_map({
            let s = settings.clone();
            move |value| Settings { value, ..s.clone() }
        }),
        1 => Just(Settings { out: settings.out + 1, ..settings.clone() }),
        1 => Just(Settings { fail: !settings.fail, ..settings }),
    ]
}

fn reruns() -> impl Strategy<Value = Vec<String>> {
    let pattern = prop_oneof![
        Just("n1".to_owned()),
        Just("n3".to_owned()),
        Just("n1*".to_owned()),
        Just("n[0-4]".to_owned()),
        Just("n?".to_owned()),
        Just("*".to_owned()),
        Just("[".to_owned()),
        Just("absent".to_owned()),
    ];
    proptest::collection::vec(pattern, 0..=2)
}

fn case() -> impl Strategy<Value = Case> {
    (2usize..12).prop_flat_map(|n| {
        let deps = (0..n)
            .map(|i| {
                proptest::collection::vec(0..i.max(1), 0..=i.min(3))
                    .prop_map(move |v| if i == 0 { vec![] } else { v })
            })
            .collect::<Vec<_>>();
        (
            proptest::collection::vec(kind(), n),
            deps,
            proptest::collection::vec(settings(), n),
            proptest::collection::vec(0..n, 0..3),
            proptest::collection::vec(0..n, 1..=3),
            reruns(),
            reruns(),
            proptest::bool::ANY,
        )
            .prop_flat_map(
                |(kinds, deps, before, edit_files, targets, first, second, keep_going)| {
                    let after: Vec<_> = before.iter().cloned().map(edited).collect();
                    (
                        Just(kinds),
                        Just(deps),
                        Just(before),
                        after,
                        Just(edit_files),
                        Just(targets),
                        Just(first),
                        Just(second),
                        Just(keep_going),
                    )
                },
            )
            .prop_map(
                |(kinds, deps, before, after, edit_files, targets, first, second, keep_going)| {
                    Case {
                        kinds,
                        deps,
                        before,
                        after,
                        edit_files,
                        targets,
                        rerun_first: first,
                        rerun_second: second,
                        keep_going,
                    }
                },
            )
    })
}

fn nodes(root: &Path, case: &Case, settings: &[Settings]) -> Vec<NodeSpec> {
    (0..case.kinds.len())
        .map(|i| {
            let kind = case.kinds[i];
            let mut deps: Vec<String> = case.deps[i].iter().map(|d| format!("n{d}")).collect();
            deps.sort();
            deps.dedup();
            // The node's own number keeps fingerprints distinct: two nodes doing identical work share one
            // key, and which of them builds it and which finds it cached depends on which launches first,
            // which `plan` does not predict.
            let mut config = BTreeMap::from([
                ("node".to_owned(), serde_json::json!(i)),
                ("value".to_owned(), serde_json::json!(settings[i].value)),
                ("out".to_owned(), serde_json::json!(settings[i].out)),
            ]);
            if settings[i].fail {
                config.insert("fail".into(), serde_json::json!(true));
            }
            NodeSpec {
                id: format!("n{i}"),
                name: format!("n{i}"),
                kind: kind.name().to_owned(),
                config: config.into_iter().collect(),
                point: fracflow_core::Settings::new(),
                deps,
                inputs: if kind == Kind::Mixing {
                    vec![root.join(format!("input{i}.txt"))]
                } else {
                    Vec::new()
                },
                outputs: if kind == Kind::Lazy {
                    Vec::new()
                } else {
                    vec!["out".into()]
                },
                resources: Vec::new(),
                retries: 0,
                timeout: None,
                estimate: None,
                origin: Origin::default(),
            }
        })
        .collect()
}

/// What one run did.
struct RunResult {
    summary: RunSummary,
    /// Node id → status and skip reason.
    nodes: BTreeMap<String, (NodeStatus, Option<String>)>,
    /// Executed node ids, in order.
    executed: Vec<String>,
}

/// Plans, then runs, `targets` of `nodes` against the cache in `root`.
fn plan_then_run(
    root: &Path,
    nodes: &[NodeSpec],
    targets: &[usize],
    rerun: &[String],
    keep_going: bool,
) -> (Vec<plan::PlanItem>, RunResult) {
    let graph = Graph::build(nodes.to_vec()).expect("valid graph");
    let targets: Vec<_> = targets
        .iter()
        .filter_map(|i| graph.index(&format!("n{i}")))
        .collect();
    let cache = Cache::open(&root.join("cache")).expect("cache");
    let stat = StatCache::load(&cache.stat_cache_file());
    let kinds = Fakes::default();
    let engine = Engine {
        root,
        cache: &cache,
        stat: &stat,
        kinds: &kinds,
    };
    let options = RunOptions {
        jobs: 3,
        keep_going,
        rerun: rerun.to_vec(),
        testbed: BTreeMap::new(),
    };
    let predicted = plan::plan(engine, &graph, &targets, &options);
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
    let summary = fracflow_core::scheduler::run(
        engine,
        &graph,
        &targets,
        &options,
        &mut run_dir,
        &mut Quiet,
        &Cancel::new(),
    )
    .expect("run");
    let selected: BTreeSet<String> = predicted.iter().map(|i| i.node.clone()).collect();
    let nodes = run_dir
        .manifest()
        .nodes
        .iter()
        .filter(|(id, _)| selected.contains(*id))
        .map(|(id, record)| (id.clone(), (record.status, record.reason.clone())))
        .collect();
    let executed = kinds.executed.into_inner().expect("lock");
    (
        predicted,
        RunResult {
            summary,
            nodes,
            executed,
        },
    )
}

/// Every node upstream of `id` (exclusive).
fn ancestors(nodes: &[NodeSpec], id: &str) -> BTreeSet<String> {
    let deps: HashMap<&str, &[String]> = nodes
        .iter()
        .map(|n| (n.id.as_str(), n.deps.as_slice()))
        .collect();
    let mut seen = BTreeSet::new();
    let mut stack: Vec<&str> = deps[id].iter().map(String::as_str).collect();
    while let Some(next) = stack.pop() {
        if seen.insert(next.to_owned()) {
            stack.extend(deps[next].iter().map(String::as_str));
        }
    }
    seen
}

/// Checks the run against the plan node by node; `Err` names the first disagreement.
fn agree(
    nodes: &[NodeSpec],
    predicted: &[plan::PlanItem],
    run: &RunResult,
    keep_going: bool,
) -> Result<(), String> {
    let spec: HashMap<&str, &NodeSpec> = nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let failed: BTreeSet<&str> = run
        .nodes
        .iter()
        .filter(|(_, (status, _))| *status == NodeStatus::Failed)
        .map(|(id, _)| id.as_str())
        .collect();
    // What plan cannot foresee: failures. A node downstream of one that failed is skipped; without
    // --keep-going, once a node failed nothing new starts; a lazy effect that only such nodes needed is not
    // needed. Dependents come later in `nodes`.
    let mut skipped_for_failure: BTreeSet<&str> = BTreeSet::new();
    for node in nodes.iter().rev() {
        let id = node.id.as_str();
        let Some((NodeStatus::Skipped, Some(reason))) = run.nodes.get(id) else {
            continue;
        };
        let because = match reason.as_str() {
            STOPPED => !keep_going && !failed.is_empty(),
            NOT_NEEDED => {
                node.kind == "lazy"
                    && nodes.iter().any(|d| {
                        d.deps.contains(&node.id) && skipped_for_failure.contains(d.id.as_str())
                    })
            }
            reason => reason
                .strip_prefix("dependency `")
                .and_then(|r| r.strip_suffix("` failed"))
                .is_some_and(|dep| failed.contains(dep) && ancestors(nodes, id).contains(dep)),
        };
        if because {
            skipped_for_failure.insert(id);
        }
    }
    for item in predicted {
        let id = item.node.as_str();
        let (status, reason) = run
            .nodes
            .get(id)
            .ok_or_else(|| format!("{id} is planned but not in the run"))?;
        let reason = reason.as_deref();
        let fails = spec[id].config.contains_key("fail");
        let lazy = spec[id].kind == "lazy";
        let ran = if fails {
            NodeStatus::Failed
        } else {
            NodeStatus::Built
        };
        let matches = skipped_for_failure.contains(id)
            || match &item.verdict {
                Verdict::Cached { .. } | Verdict::Remote { .. } => *status == NodeStatus::Cached,
                Verdict::Run { .. } | Verdict::Forced { .. } | Verdict::Always { .. } => {
                    *status == ran
                }
                Verdict::NotNeeded { .. } => {
                    *status == NodeStatus::Skipped && reason == Some(NOT_NEEDED)
                }
                // Known only once upstream nodes have run: early cutoff may make it a hit.
                Verdict::AfterUpstream { .. } => {
                    *status == ran
                        || (!lazy && *status == NodeStatus::Cached)
                        || (lazy && *status == NodeStatus::Skipped && reason == Some(NOT_NEEDED))
                }
                Verdict::Error { .. } => *status == NodeStatus::Failed,
            };
        if !matches {
            return Err(format!(
                "{id}: plan said {:?}, the run {status:?} ({reason:?})",
                item.verdict
            ));
        }
        let executions = run.executed.iter().filter(|e| *e == id).count();
        let expected = usize::from(matches!(status, NodeStatus::Built | NodeStatus::Failed));
        if executions != expected {
            return Err(format!(
                "{id} executed {executions} times but is {status:?}"
            ));
        }
        if executions > 0 && !item.will_run() {
            return Err(format!("{id} executed, but plan counted it as not to run"));
        }
    }
    // A lazy effect runs before every node that needs it.
    for (at, id) in run.executed.iter().enumerate() {
        for dep in &spec[id.as_str()].deps {
            if spec[dep.as_str()].kind == "lazy"
                && let Some(effect_at) = run.executed.iter().position(|e| e == dep)
                && effect_at > at
            {
                return Err(format!("{id} executed before its effect {dep}"));
            }
        }
    }
    let count = |wanted: NodeStatus| run.nodes.values().filter(|(s, _)| *s == wanted).count();
    if (run.summary.built, run.summary.cached)
        != (count(NodeStatus::Built), count(NodeStatus::Cached))
    {
        return Err(format!(
            "summary {:?} disagrees with the manifest",
            run.summary
        ));
    }
    Ok(())
}

/// A scratch directory in memory when the machine has one: the cache fsyncs every file it publishes.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("tempdir")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// For every node, on an empty cache and again after edits, `plan`'s verdict is what the run then did.
    #[test]
    fn plan_predicts_every_node_of_the_following_run(case in case()) {
        let dir = scratch();
        let root = dir.path();
        for i in 0..case.kinds.len() {
            std::fs::write(root.join(format!("input{i}.txt")), format!("input {i}")).expect("write input");
        }
        let before = nodes(root, &case, &case.before);
        let (predicted, first) =
            plan_then_run(root, &before, &case.targets, &case.rerun_first, case.keep_going);
        if let Err(disagreement) = agree(&before, &predicted, &first, case.keep_going) {
            return Err(TestCaseError::fail(format!("first run: {disagreement}")));
        }

        for &i in &case.edit_files {
            std::fs::write(root.join(format!("input{i}.txt")), format!("edited input {i}")).expect("edit");
        }
        let after = nodes(root, &case, &case.after);
        let (predicted, second) =
            plan_then_run(root, &after, &case.targets, &case.rerun_second, case.keep_going);
        if let Err(disagreement) = agree(&after, &predicted, &second, case.keep_going) {
            return Err(TestCaseError::fail(format!("second run: {disagreement}")));
        }

        // Nothing changed since: no cacheable node that the second run built or found executes again.
        let (predicted, third) = plan_then_run(root, &after, &case.targets, &[], case.keep_going);
        if let Err(disagreement) = agree(&after, &predicted, &third, case.keep_going) {
            return Err(TestCaseError::fail(format!("third run: {disagreement}")));
        }
        for id in &third.executed {
            let kind = &after.iter().find(|n| &n.id == id).expect("a node").kind;
            let before = second.nodes.get(id).map(|(status, _)| *status);
            prop_assert!(
                !(matches!(kind.as_str(), "mixing" | "constant")
                    && matches!(before, Some(NodeStatus::Built | NodeStatus::Cached))),
                "{} executed again: {:?}", id, third.executed
            );
        }
    }
}

/// One settings value for every node of a hand-written case.
fn plain(n: usize) -> Vec<Settings> {
    vec![
        Settings {
            value: 0,
            out: 0,
            fail: false,
        };
        n
    ]
}

fn hand_written(kinds: Vec<Kind>, deps: Vec<Vec<usize>>) -> Case {
    let n = kinds.len();
    Case {
        kinds,
        deps,
        before: plain(n),
        after: Vec::new(),
        edit_files: Vec::new(),
        targets: vec![n - 1],
        rerun_first: Vec::new(),
        rerun_second: Vec::new(),
        keep_going: false,
    }
}

/// Keeps the helper types honest: an edit of a constant node re-runs it and cuts its dependents off.
#[test]
fn a_constant_node_edited_reruns_to_the_same_output_and_its_dependent_is_a_hit() {
    let dir = scratch();
    let root = dir.path();
    std::fs::write(root.join("input1.txt"), "input").expect("write input");
    let case = hand_written(vec![Kind::Constant, Kind::Mixing], vec![vec![], vec![0]]);
    let mut edited = case.before.clone();
    edited[0].value = 7;
    let (_, first) = plan_then_run(root, &nodes(root, &case, &case.before), &[1], &[], false);
    assert_eq!(first.executed, ["n0", "n1"]);
    let after = nodes(root, &case, &edited);
    let (predicted, second) = plan_then_run(root, &after, &[1], &[], false);
    assert_eq!(second.executed, ["n0"]);
    assert!(matches!(
        predicted[1].verdict,
        Verdict::AfterUpstream { .. }
    ));
    assert_eq!(second.nodes["n1"].0, NodeStatus::Cached);
    agree(&after, &predicted, &second, false).expect("plan and run agree");
}

/// The plan ≡ run check itself fails when they disagree.
#[test]
fn a_disagreement_is_reported() {
    let dir = scratch();
    let root = dir.path();
    let case = hand_written(vec![Kind::Constant], vec![vec![]]);
    let nodes = nodes(root, &case, &case.before);
    let (mut predicted, run) = plan_then_run(root, &nodes, &[0], &[], false);
    predicted[0].verdict = Verdict::Cached {
        key: fracflow_record::Digest::of(b"k"),
    };
    let error = agree(&nodes, &predicted, &run, false).expect_err("a disagreement");
    assert!(error.starts_with("n0: plan said Cached"), "{error}");
}

/// `--rerun` on a set-up step whose dependent is cached runs it; plan used to call it not needed.
#[test]
fn a_lazy_effect_named_by_rerun_runs_though_what_needs_it_is_cached() {
    let dir = scratch();
    let root = dir.path();
    // n0 (effect) → n1 (constant).
    let case = hand_written(vec![Kind::Lazy, Kind::Constant], vec![vec![], vec![0]]);
    let nodes = nodes(root, &case, &case.before);
    plan_then_run(root, &nodes, &[1], &[], false);
    let (predicted, run) = plan_then_run(root, &nodes, &[1], &["n0".to_owned()], false);
    assert!(
        matches!(predicted[0].verdict, Verdict::Forced { .. }),
        "{:?}",
        predicted[0].verdict
    );
    assert!(matches!(predicted[1].verdict, Verdict::Cached { .. }));
    assert_eq!(run.executed, ["n0"]);
    agree(&nodes, &predicted, &run, false).expect("plan and run agree");
}

/// Whether a set-up step runs can hang on early cutoff upstream of what needs it: plan says `run?`, and the
/// run skips it when the dependent turns out cached (plan used to say it runs).
#[test]
fn a_lazy_effect_whose_dependent_waits_for_upstream_is_run_maybe_and_skipped_after_a_cutoff() {
    let dir = scratch();
    let root = dir.path();
    // n0 (effect) and n1 (constant) → n2 (constant); n1's value changes, its output does not.
    let case = hand_written(
        vec![Kind::Lazy, Kind::Constant, Kind::Constant],
        vec![vec![], vec![], vec![0, 1]],
    );
    plan_then_run(root, &nodes(root, &case, &case.before), &[2], &[], false);
    let mut edited = case.before.clone();
    edited[1].value = 5;
    let after = nodes(root, &case, &edited);
    let (predicted, run) = plan_then_run(root, &after, &[2], &[], false);
    let upstream = vec!["n1".to_owned()];
    assert_eq!(
        predicted[0].verdict,
        Verdict::AfterUpstream {
            upstream: upstream.clone()
        }
    );
    assert_eq!(predicted[2].verdict, Verdict::AfterUpstream { upstream });
    assert_eq!(run.executed, ["n1"]);
    assert_eq!(
        run.nodes["n0"],
        (NodeStatus::Skipped, Some(NOT_NEEDED.to_owned()))
    );
    agree(&after, &predicted, &run, false).expect("plan and run agree");
}
