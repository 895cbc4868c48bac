//! The engine's work on a no-op does not grow with the graph: a run of a pipeline whose every node is cached
//! writes the same number of files for a chain of 40 nodes as for one of 160 (a count, not a timing, so noise
//! cannot move it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::support::{Sandbox, text};

fn chain(nodes: usize) -> String {
    let mut yaml = String::from("pipeline: chain\nnodes:\n");
    for i in 0..nodes {
        yaml.push_str(&format!(
            "  n{i}:\n    kind: command\n    outputs: [o]\n    run: 'echo {i} > \"$FRACFLOW_OUT/o\"'\n"
        ));
        if i > 0 {
            yaml.push_str(&format!("    deps: [n{}]\n", i - 1));
        }
    }
    yaml
}

/// Every file and link under `dir` with its modification time and size.
fn snapshot(dir: &Path, into: &mut BTreeMap<PathBuf, (SystemTime, u64)>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            snapshot(&path, into);
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        into.insert(path, (modified, meta.len()));
    }
}

/// How many files and links a no-op run of an `nodes`-long chain creates or changes in the project.
fn written_by_a_noop(nodes: usize) -> usize {
    let sandbox = Sandbox::new();
    sandbox.write("pipelines/chain.yaml", &chain(nodes));
    let first = sandbox.run(&["run", "chain"]);
    assert!(first.status.success(), "{}", text(&first));
    // The second run repeats the first: it makes the memo of the load and links the views once.
    let second = sandbox.run(&["run", "chain"]);
    assert!(second.status.success(), "{}", text(&second));
    let mut before = BTreeMap::new();
    snapshot(sandbox.path(), &mut before);
    let noop = sandbox.run(&["run", "chain"]);
    assert!(noop.status.success(), "{}", text(&noop));
    assert!(
        text(&noop).contains(&format!("0 built, {nodes} cached")),
        "{}",
        text(&noop)
    );
    let mut after = BTreeMap::new();
    snapshot(sandbox.path(), &mut after);
    after
        .iter()
        .filter(|(path, state)| {
            !path.starts_with(sandbox.path().join("locks")) && before.get(*path) != Some(*state)
        })
        .count()
}

#[test]
fn a_noop_writes_as_many_files_for_160_nodes_as_for_40() {
    let small = written_by_a_noop(40);
    let large = written_by_a_noop(160);
    assert_eq!(
        small, large,
        "a no-op must write O(1) files: {small} for 40 nodes, {large} for 160"
    );
    assert!(
        small <= 12,
        "a no-op writes a run directory's few files, not {small}"
    );
}
