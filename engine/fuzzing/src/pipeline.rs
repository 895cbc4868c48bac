//! The pipeline loader on whole files: YAML, `base:`/`uses:`, params, sweeps, variants, templates and their
//! arithmetic, the kind registry's checks, and the DAG.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path};

use fracflow_loader::{LoadOptions, Loaded};

use crate::scratch::{inside, scratch};

/// Where the input is written in the scratch project: beside the real `frac/` pipelines, so a seed's
/// `uses: [build.yaml]` resolves as it does in the repository.
const ENTRY: &str = "pipelines/frac/fuzz_input.yaml";

thread_local! {
    static KINDS: fracflow_executors::Registry = fracflow_executors::Registry::builtin();
}

/// Writes the input as a pipeline file and loads it through the loader's public entry (with the real kind
/// registry), plainly and with its `smoke` variant. A pipeline it accepts must have an acyclic graph whose
/// every dependency and target names a node, unique node ids, every source file and input inside the project
/// (symlinks followed: the project holds one pointing out), and outputs that stay in the node's directory.
pub fn pipeline_load(data: &[u8]) {
    let scratch = scratch();
    if std::fs::write(scratch.root.join(ENTRY), data).is_err() {
        return;
    }
    for variant in [None, Some("smoke")] {
        let opts = LoadOptions {
            root: scratch.root.clone(),
            variant: variant.map(str::to_owned),
            ..LoadOptions::default()
        };
        let loaded = KINDS.with(|kinds| fracflow_loader::load(Path::new(ENTRY), &opts, kinds));
        if let Ok(loaded) = loaded {
            check_accepted(&scratch.root, &loaded);
        }
    }
}

fn check_accepted(root: &Path, loaded: &Loaded) {
    let pipeline = &loaded.pipeline;
    for source in &pipeline.sources {
        assert!(
            inside(root, source),
            "accepted a pipeline that reads {} from outside the project",
            source.display()
        );
    }
    // The nodes are in the graph; the specs are checked on their own here, the graph's structure after.
    let nodes: Vec<_> = loaded.graph.specs().collect();
    let mut ids = BTreeSet::new();
    for node in &nodes {
        assert!(ids.insert(node.id.as_str()), "two nodes are {}", node.id);
        for input in &node.inputs {
            assert!(
                inside(root, input),
                "node {} has the input {}, outside the project",
                node.id,
                input.display()
            );
        }
        for output in &node.outputs {
            let stays = !output.is_empty()
                && Path::new(output)
                    .components()
                    .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
            assert!(
                stays,
                "node {} has the output {output:?}, outside its directory",
                node.id
            );
        }
    }
    for (name, members) in &pipeline.targets {
        for member in members {
            assert!(
                ids.contains(member.as_str()),
                "target {name} names no node {member}"
            );
        }
    }
    // Kahn's algorithm over the specs, independent of the graph's own check.
    let mut waiting: BTreeMap<&str, usize> = BTreeMap::new();
    let mut dependents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for node in &nodes {
        waiting.insert(node.id.as_str(), node.deps.len());
        for dep in &node.deps {
            assert!(
                ids.contains(dep.as_str()),
                "node {} depends on no node {dep}",
                node.id
            );
            dependents
                .entry(dep.as_str())
                .or_default()
                .push(node.id.as_str());
        }
    }
    let mut ready: Vec<&str> = waiting
        .iter()
        .filter(|&(_, &n)| n == 0)
        .map(|(&id, _)| id)
        .collect();
    let mut done = 0;
    while let Some(id) = ready.pop() {
        done += 1;
        for &next in dependents.get(id).into_iter().flatten() {
            let count = waiting.entry(next).or_default();
            *count -= 1;
            if *count == 0 {
                ready.push(next);
            }
        }
    }
    assert_eq!(
        done,
        nodes.len(),
        "accepted a pipeline whose graph has a cycle"
    );
    // The graph the engine runs holds the same nodes in an order that puts every dependency first.
    let order = loaded.graph.topological();
    assert_eq!(order.len(), nodes.len());
    let mut seen = BTreeSet::new();
    for &index in order {
        for dep in loaded.graph.dependencies(index) {
            assert!(
                seen.contains(&dep),
                "the graph's order runs a node before its dependency"
            );
        }
        seen.insert(index);
    }
}
