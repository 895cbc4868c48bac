//! The engine's work on a no-op does not grow with the graph: a run of a pipeline whose every node is cached
//! writes the same number of files for a chain of 40 nodes as for one of 160, and as many bytes (up to the
//! digits of a count and a duration) for a fan-in of 40, 160 or 640 nodes (counts, not timings, so noise cannot
//! move them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::support::{Sandbox, text};

/// `nodes - 1` independent nodes and one that reads them all.
fn fan_in(nodes: usize) -> String {
    let mut yaml = String::from("pipeline: chain\nnodes:\n");
    for i in 0..nodes {
        yaml.push_str(&format!(
            "  n{i}:\n    kind: command\n    outputs: [o]\n    run: 'echo {i} > \"$FRACFLOW_OUT/o\"'\n"
        ));
    }
    let all: Vec<String> = (0..nodes - 1).map(|i| format!("n{i}")).collect();
    yaml.push_str(&format!("    deps: [{}]\n", all.join(", ")));
    yaml
}

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
        // A folder counts when it changes, but its size is the file system's, not bytes anyone wrote.
        let size = if meta.is_dir() { 0 } else { meta.len() };
        into.insert(path, (modified, size));
    }
}

/// What a no-op wrote into the project: files and links created or changed, and their bytes (a link's are its
/// target's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Written {
    files: usize,
    bytes: u64,
}

/// What a no-op run of the `nodes`-node pipeline `yaml` (named `chain`) creates or changes in the project.
fn written_by_a_noop(yaml: &str, nodes: usize) -> Written {
    let sandbox = Sandbox::new();
    sandbox.write("pipelines/chain.yaml", yaml);
    let first = sandbox.run(&["run", "chain"]);
    assert!(first.status.success(), "{}", text(&first));
    // The second run makes the memo of the load; it and the third repeat the first.
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
    let written: Vec<u64> = after
        .iter()
        .filter(|(path, state)| {
            !path.starts_with(sandbox.path().join("locks")) && before.get(*path) != Some(*state)
        })
        .map(|(_, (_, size))| *size)
        .collect();
    Written {
        files: written.len(),
        bytes: written.iter().sum(),
    }
}

#[test]
fn a_noop_writes_as_many_files_for_160_nodes_as_for_40() {
    let small = written_by_a_noop(&chain(40), 40).files;
    let large = written_by_a_noop(&chain(160), 160).files;
    assert_eq!(
        small, large,
        "a no-op must write O(1) files: {small} for 40 nodes, {large} for 160"
    );
    assert!(
        small <= 12,
        "a no-op writes a run directory's few files, not {small}"
    );
}

/// Bytes, not only files: a run record that lists every node (a manifest, a journal line or a report row
/// per node) grows by tens of bytes a node, 600 nodes apart. What may differ is the digits of the node count
/// and of the run's seconds.
#[test]
fn a_noop_writes_as_many_bytes_for_640_nodes_as_for_40() {
    let sizes: Vec<(usize, Written)> = [40, 160, 640]
        .into_iter()
        .map(|nodes| (nodes, written_by_a_noop(&fan_in(nodes), nodes)))
        .collect();
    let (_, smallest) = sizes[0];
    for &(nodes, written) in &sizes {
        assert_eq!(
            written.files, smallest.files,
            "a no-op writes O(1) files: {sizes:?}"
        );
        assert!(
            written.bytes.abs_diff(smallest.bytes) <= 48,
            "a no-op of {nodes} nodes wrote {} bytes, one of 40 {}: its work grows with the graph ({sizes:?})",
            written.bytes,
            smallest.bytes
        );
    }
}
