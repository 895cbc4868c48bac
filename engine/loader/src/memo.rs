//! A remembered load: the expanded pipeline of a previous load, reused when nothing it was made from changed,
//! so a run whose pipeline is unchanged does not parse and expand its YAML again (a 10 000-node file takes
//! most of a second). Never trusted blindly: before reuse, every YAML file read is re-hashed, every `inputs:`
//! pattern is looked up again and must name the same files, the options, the kinds and the `fracflow` binary
//! must be the same, and every kind re-checks every node and names no input it did not name before. A memo that is missing, unreadable or stale is a miss:
//! the pipeline is loaded from its sources, and the memo is rewritten. Stored as MessagePack: every run of an
//! unchanged pipeline reads it whole, and parsing the JSON of 10 000 expanded nodes was a tenth of a no-op.
//! Fields by position, not by name: decoding the names of every node's fields was a twentieth of a no-op too.
//! The blake3 of the MessagePack comes first, because the memo is written without fsync and a file torn by
//! power loss can still parse, as nodes with other settings; a memo whose checksum fails is a miss.

use std::path::{Path, PathBuf};

use fracflow_core::{Graph, Kinds, Pipeline};
use fracflow_record::{Files, Prepared, Publish};
use serde::{Deserialize, Serialize};

use crate::{Adaptation, LoadOptions, Loaded};

/// Bumped when the memo's meaning changes, and whenever a field of what it stores is added, removed or moved
/// (it stores them by position).
const FORMAT: u32 = 3;

/// The memos' file extension; files of the JSON memos before them are pruned as memos too.
const MEMO_EXTENSION: &str = "msgpack";

#[derive(Serialize, Deserialize)]
struct Memo {
    format: u32,
    /// What the memo was made under: entry, options, kinds and binary (see [`identity`]).
    identity: String,
    /// Each YAML file read and the blake3 of its content.
    sources: Vec<(PathBuf, String)>,
    input_lookups: Vec<(String, Vec<PathBuf>)>,
    pipeline: Pipeline,
    adapted: Vec<Adaptation>,
}

/// Where the memo of a load under these options lives.
fn memo_path(root: &Path, identity: &str) -> PathBuf {
    root.join(".fracflow").join("loaded").join(format!(
        "{}.{MEMO_EXTENSION}",
        &blake3::hash(identity.as_bytes()).to_hex()[..32]
    ))
}

/// Everything besides the files that decides what a load yields: the entry, the options, the kinds, and this
/// binary (its size and modification time: a rebuilt `fracflow` may expand differently).
fn identity(root: &Path, entry: &Path, opts: &LoadOptions, kinds: &dyn Kinds) -> Option<String> {
    Some(format!(
        "{FORMAT}\n{}\n{}\n{opts:?}\n{:?}\n{}",
        root.display(),
        entry.display(),
        kinds.names(),
        binary()?
    ))
}

fn root_of(opts: &LoadOptions) -> Option<PathBuf> {
    let given = if opts.root.as_os_str().is_empty() {
        Path::new(".")
    } else {
        opts.root.as_path()
    };
    std::fs::canonicalize(given).ok()
}

fn hash_file(path: &Path) -> Option<String> {
    fracflow_core::statcache::hash_file(path).ok()
}

/// The remembered load, if everything it was made from is as it was.
pub(crate) fn recall(entry: &Path, opts: &LoadOptions, kinds: &dyn Kinds) -> Option<Loaded> {
    let root = root_of(opts)?;
    let identity = identity(&root, entry, opts, kinds)?;
    let bytes = std::fs::read(memo_path(&root, &identity)).ok()?;
    let memo: Memo = rmp_serde::from_slice(fracflow_record::sealed::unseal(&bytes)?).ok()?;
    let same_sources = memo
        .sources
        .iter()
        .all(|(path, hash)| hash_file(path).as_deref() == Some(hash.as_str()));
    let same_inputs = memo.input_lookups.iter().all(|(pattern, files)| {
        crate::expand::look_up_inputs(&root, pattern).is_ok_and(|found| &found == files)
    });
    if memo.format != FORMAT || memo.identity != identity || !same_sources || !same_inputs {
        return None;
    }
    // The kinds' checks look at the project too (files a config names); any problem means a full load, which
    // reports it with its position.
    // A kind may imply an input only when its file exists (a trace file): one that appeared since is a miss.
    let looked_up = |file: &String| {
        let pattern = glob::Pattern::escape(file);
        memo.input_lookups.iter().any(|(p, _)| *p == pattern)
    };
    let accepted = memo.pipeline.nodes.iter().all(|spec| {
        kinds.executor(&spec.kind).is_some_and(|kind| {
            kind.check(spec, &root).is_empty()
                && kind.implied_inputs(spec, &root).iter().all(looked_up)
        })
    });
    if !accepted {
        return None;
    }
    let mut pipeline = memo.pipeline;
    let graph = Graph::from_pipeline(&mut pipeline).ok()?;
    Some(Loaded {
        pipeline,
        graph,
        adapted: memo.adapted,
        input_lookups: memo.input_lookups,
    })
}

/// Remembers `loaded` for the next load with the same options. Best effort: a project that cannot be written
/// (read-only, full) is loaded from its sources every time.
pub(crate) fn remember(entry: &Path, opts: &LoadOptions, kinds: &dyn Kinds, loaded: &Loaded) {
    let Some(root) = root_of(opts) else {
        return;
    };
    let Some(identity) = identity(&root, entry, opts, kinds) else {
        return;
    };
    let Some(sources) = loaded
        .pipeline
        .sources
        .iter()
        .map(|path| hash_file(path).map(|hash| (path.clone(), hash)))
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let memo = Memo {
        format: FORMAT,
        identity: identity.clone(),
        sources,
        input_lookups: loaded.input_lookups.clone(),
        // The nodes are in the graph.
        pipeline: Pipeline {
            nodes: loaded.graph.specs().cloned().collect(),
            ..loaded.pipeline.clone()
        },
        adapted: loaded.adapted.clone(),
    };
    let path = memo_path(&root, &identity);
    let Ok(body) = rmp_serde::to_vec(&memo) else {
        return;
    };
    if let Some(dir) = path.parent()
        && std::fs::create_dir_all(dir).is_ok()
    {
        // Unsynced: a memo torn by power loss fails its checksum and is made again.
        let _ = Files::real()
            .prepare(&path, Publish::Unsynced, |out| {
                fracflow_record::sealed::write_sealed(out, &body)
            })
            .and_then(Prepared::publish);
        prune(dir);
    }
}

/// How many load memos a project keeps: one per pipeline, variant and testbed in use, and a rebuilt binary
/// makes new ones, so the folder would otherwise grow by a pipeline's expanded size per rebuild.
const MEMO_LIMIT: usize = 32;

/// Removes the oldest memos beyond [`MEMO_LIMIT`]; a removed one is only a slower next load.
fn prune(dir: &Path) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    let mut memos: Vec<(std::time::SystemTime, PathBuf)> = listing
        .filter_map(|item| item.ok())
        .map(|item| item.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|e| e == MEMO_EXTENSION || e == "json")
                && path.file_name() != discovery_path(Path::new("")).file_name()
        })
        .filter_map(|path| Some((std::fs::metadata(&path).ok()?.modified().ok()?, path)))
        .collect();
    if memos.len() <= MEMO_LIMIT {
        return;
    }
    memos.sort();
    for (_, path) in &memos[..memos.len() - MEMO_LIMIT] {
        let _ = std::fs::remove_file(path);
    }
}

/// What discovery found, with the content hash of every pipeline file it looked at (a `base:` may name any
/// of them, so any change is a miss).
#[derive(Serialize, Deserialize)]
struct DiscoveryMemo {
    format: u32,
    binary: String,
    files: Vec<(PathBuf, String)>,
    entries: Vec<crate::PipelineEntry>,
}

fn binary() -> Option<String> {
    let exe = std::env::current_exe().ok()?.metadata().ok()?;
    let built = exe
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some(format!(
        "{} {built} {}",
        exe.len(),
        env!("CARGO_PKG_VERSION")
    ))
}

fn discovery_path(root: &Path) -> PathBuf {
    root.join(".fracflow").join("loaded").join("discovery.json")
}

fn hashed(files: &[PathBuf]) -> Option<Vec<(PathBuf, String)>> {
    files
        .iter()
        .map(|path| hash_file(path).map(|hash| (path.clone(), hash)))
        .collect()
}

/// The pipelines discovery found last time, if every file under `pipelines/` is as it was.
pub(crate) fn recall_discovery(
    root: &Path,
    files: &[PathBuf],
) -> Option<Vec<crate::PipelineEntry>> {
    let bytes = std::fs::read(discovery_path(root)).ok()?;
    let memo: DiscoveryMemo = serde_json::from_slice(&bytes).ok()?;
    (memo.format == FORMAT && Some(memo.binary) == binary() && Some(memo.files) == hashed(files))
        .then_some(memo.entries)
}

/// Remembers what discovery found when every file was read without problems (problems are reported fresh).
pub(crate) fn remember_discovery(root: &Path, files: &[PathBuf], entries: &[crate::PipelineEntry]) {
    if entries.iter().any(|e| e.problems.is_some()) {
        return;
    }
    let (Some(binary), Some(files)) = (binary(), hashed(files)) else {
        return;
    };
    let memo = DiscoveryMemo {
        format: FORMAT,
        binary,
        files,
        entries: entries.to_vec(),
    };
    let path = discovery_path(root);
    if let (Ok(bytes), Some(dir)) = (serde_json::to_vec(&memo), path.parent())
        && std::fs::create_dir_all(dir).is_ok()
    {
        let _ = fracflow_record::atomic::atomic_replace(&path, &bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_keeps_the_newest_memos_and_discovery() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let start = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        for i in 0..MEMO_LIMIT + 5 {
            let path = dir.path().join(format!("{i:02}.json"));
            std::fs::write(&path, b"{}")?;
            let file = std::fs::File::options().append(true).open(&path)?;
            file.set_modified(start + std::time::Duration::from_secs(i as u64))?;
        }
        std::fs::write(dir.path().join("discovery.json"), b"{}")?;
        prune(dir.path());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())?
            .filter_map(|item| Some(item.ok()?.file_name().to_string_lossy().into_owned()))
            .collect();
        left.sort();
        assert_eq!(left.len(), MEMO_LIMIT + 1);
        assert!(left.contains(&"discovery.json".to_owned()));
        assert!(!left.contains(&"04.json".to_owned()) && left.contains(&"05.json".to_owned()));
        Ok(())
    }
}
