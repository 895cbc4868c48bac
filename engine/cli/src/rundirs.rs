//! The run directories under `results/<pipeline>/` as the workbench commands (`runs`, `status`, `logs`,
//! `clean`) read them: which exist, which one a live engine is writing, and how far it got. Everything here
//! only reads; a run in progress is recognised without touching its lock, so asking never disturbs a run.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use fracflow_core::{LockScope, lock_name};
use fracflow_record::{Event, EventKind, NodeStatus, RunManifest};

use crate::error::{Error, Result};

/// What became of a run, as far as its files and its lock tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Succeeded,
    Failed,
    /// A live engine holds the testbed lock and writes this run's event journal.
    Running,
    /// No `finished` time and nobody writes it: killed, or stopped by a signal.
    Interrupted,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Running => "running",
            RunState::Interrupted => "interrupted",
        }
    }
}

/// One run directory and what its manifest says.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub dir: PathBuf,
    pub manifest: RunManifest,
    pub state: RunState,
}

impl RunInfo {
    /// `smoke` for a `--smoke` run, the `--variant` it was given, or `None` for the pipeline as written; read
    /// from the command line the manifest records, which is what chose the variant.
    pub fn variant(&self) -> Option<String> {
        let mut words = self.manifest.command.iter();
        let mut variant = None;
        while let Some(word) = words.next() {
            if word == "--smoke" {
                variant = Some("smoke".to_owned());
            } else if word == "--variant" {
                variant = words.next().cloned();
            } else if let Some(value) = word.strip_prefix("--variant=") {
                variant = Some(value.to_owned());
            }
        }
        variant
    }

    /// The testbed's kind as the manifest recorded the profile (`emulated`, `real`, `doubles`).
    pub fn testbed_kind(&self) -> String {
        self.manifest.testbed_profile["kind"]
            .as_str()
            .unwrap_or("unknown")
            .to_owned()
    }

    /// How many nodes were built, taken from the cache, and failed.
    pub fn node_counts(&self) -> (usize, usize, usize) {
        let count = |status| {
            self.manifest
                .nodes
                .values()
                .filter(|n| n.status == status)
                .count()
        };
        (
            count(NodeStatus::Built),
            count(NodeStatus::Cached),
            count(NodeStatus::Failed),
        )
    }

    /// The verdicts of the run's `check` nodes (held, failed), `None` when the run has no claims checked.
    pub fn verdicts(&self) -> Option<(usize, usize)> {
        let mut found = None;
        for (id, record) in &self.manifest.nodes {
            if record.kind != "check" {
                continue;
            }
            let path = self
                .dir
                .join("nodes")
                .join(fracflow_core::run::node_dir_name(id))
                .join(fracflow_executors::analysis::EXPECTATIONS_FILE);
            let Ok(bytes) = fs::read(&path) else { continue };
            let Ok(verdicts) =
                serde_json::from_slice::<Vec<fracflow_record::ExpectationResult>>(&bytes)
            else {
                continue;
            };
            let (held, failed) = found.get_or_insert((0, 0));
            for verdict in verdicts {
                // Inconclusive and not-testable verdicts neither held nor failed.
                if verdict.passed() {
                    *held += 1;
                } else if verdict.failed() {
                    *failed += 1;
                }
            }
        }
        found
    }

    /// Seconds from the first event to `RunFinished` (or to the last event of a run that never finished, or to
    /// now for a running one).
    pub fn seconds(&self) -> Option<f64> {
        let events = read_events(&self.dir);
        let first = events.first()?.at_ms;
        if let Some(seconds) = events.iter().rev().find_map(|e| match &e.kind {
            EventKind::RunFinished { seconds, .. } => Some(*seconds),
            _ => None,
        }) {
            return Some(seconds);
        }
        let end = if self.state == RunState::Running {
            now_ms()
        } else {
            events.last()?.at_ms
        };
        Some(end.saturating_sub(first) as f64 / 1000.0)
    }

    pub fn commit(&self) -> String {
        match &self.manifest.git {
            Some(git) => {
                let short: String = git.commit.chars().take(10).collect();
                if git.dirty {
                    format!("{short}+dirty")
                } else {
                    short
                }
            }
            None => "-".to_owned(),
        }
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Every event line of the run's journal that parses; a line a kill cut short is left out.
pub fn read_events(dir: &Path) -> Vec<Event> {
    fs::read_to_string(dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// The pipelines that have a folder under `results/`, sorted.
pub fn pipelines(results: &Path) -> Result<Vec<String>> {
    let entries = match fs::read_dir(results) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("cannot read the runs under", results, e)),
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort();
    Ok(names)
}

/// Every run of `pipeline` (or of every pipeline), newest first. Links (`latest*`), hidden names (a link's
/// temporary, a `clean` in progress) and folders without a readable manifest are not runs.
pub fn list_runs(root: &Path, pipeline: Option<&str>) -> Result<Vec<RunInfo>> {
    let results = root.join("results");
    let names = match pipeline {
        Some(name) => vec![name.to_owned()],
        None => pipelines(&results)?,
    };
    let live = live_run_dirs(&crate::project::lock_dir());
    let live_dirs: Vec<PathBuf> = live.iter().filter_map(|run| run.dir.clone()).collect();
    let mut runs = Vec::new();
    for name in names {
        let base = results.join(&name);
        let entries = match fs::read_dir(&base) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("cannot read the runs under", &base, e)),
        };
        for entry in entries.flatten() {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if !is_dir || file_name.starts_with('.') {
                continue;
            }
            let dir = entry.path();
            let Ok(manifest) = fracflow_core::run::read_manifest(&dir) else {
                continue;
            };
            let state = state_of(root, &dir, &manifest, &live);
            runs.push(RunInfo {
                dir,
                manifest,
                state,
            });
        }
    }
    runs.sort_by(|a, b| {
        (&b.manifest.started, &b.manifest.run_id).cmp(&(&a.manifest.started, &a.manifest.run_id))
    });
    // Where a lock's holder could not be matched to its journal, only the newest unfinished run of that lock
    // is taken as the live one; older unfinished runs there were interrupted.
    let mut claimed = std::collections::BTreeSet::new();
    for info in &mut runs {
        if info.state == RunState::Running && !live_dirs.contains(&canonical(&info.dir)) {
            let lock = run_lock_path(root, &info.manifest);
            if !claimed.insert(lock) {
                info.state = RunState::Interrupted;
            }
        }
    }
    Ok(runs)
}

fn state_of(root: &Path, dir: &Path, manifest: &RunManifest, live: &[LiveRun]) -> RunState {
    if manifest.finished.is_some() {
        return match manifest.status {
            fracflow_record::RunStatus::Succeeded => RunState::Succeeded,
            fracflow_record::RunStatus::Failed => RunState::Failed,
            fracflow_record::RunStatus::Interrupted | fracflow_record::RunStatus::Running => {
                RunState::Interrupted
            }
        };
    }
    let canonical = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    if live
        .iter()
        .any(|run| run.dir.as_deref() == Some(&canonical))
    {
        return RunState::Running;
    }
    // The holder's open files could not be read (another user's process): a held lock of this run's testbed
    // still means the newest unfinished run there is the live one, so it is not called interrupted.
    let lock = run_lock_path(root, manifest);
    if live.iter().any(|run| run.dir.is_none() && run.lock == lock) {
        return RunState::Running;
    }
    RunState::Interrupted
}

fn canonical(path: &Path) -> PathBuf {
    fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}

/// The testbed lock file a run of this manifest held (the rule `fracflow run` takes it by).
fn run_lock_path(root: &Path, manifest: &RunManifest) -> PathBuf {
    let kind = manifest.testbed_profile["kind"].as_str().unwrap_or("");
    let scope = if kind == "emulated" {
        LockScope::Project(root)
    } else {
        LockScope::Machine
    };
    crate::project::lock_dir().join(format!(
        "fracflow-testbed-{}.lock",
        lock_name(&manifest.testbed, scope)
    ))
}

/// A testbed lock some live process holds, and the run directory it writes when that can be seen.
#[derive(Debug, Clone)]
pub struct LiveRun {
    pub lock: PathBuf,
    pub pid: u32,
    /// The holder's command line, as it wrote it into the lock file.
    pub command: String,
    /// The run directory whose `events.jsonl` the holder has open (canonical), if its open files are readable.
    pub dir: Option<PathBuf>,
}

/// Every held testbed lock in `lock_dir`. A lock is held when the kernel lists a flock on the file's inode in
/// `/proc/locks`; reading that takes no lock, so a run starting meanwhile is never refused because of us.
pub fn live_run_dirs(lock_dir: &Path) -> Vec<LiveRun> {
    let Ok(entries) = fs::read_dir(lock_dir) else {
        return Vec::new();
    };
    let held = held_flocks();
    let mut live = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("fracflow-testbed-") && name.ends_with(".lock")) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        let Some(&pid) = held.get(&(device_numbers(meta.dev()), meta.ino())) else {
            continue;
        };
        let text = fs::read_to_string(&path).unwrap_or_default();
        let mut lines = text.lines();
        // The file names the process that took the lock; /proc/locks may name a thread or child of it.
        let pid = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(pid);
        let command = lines.next().unwrap_or("").to_owned();
        live.push(LiveRun {
            lock: path,
            pid,
            command,
            dir: journal_of(pid),
        });
    }
    live
}

/// A device's (major, minor) numbers from `st_dev`, in the Linux encoding `/proc/locks` prints them from.
fn device_numbers(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

/// (device, inode) → pid of every FLOCK in `/proc/locks`, whose lines read
/// `1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF` (major and minor in hex, the inode in decimal).
fn held_flocks() -> BTreeMap<((u64, u64), u64), u32> {
    parse_locks(&fs::read_to_string("/proc/locks").unwrap_or_default())
}

fn parse_locks(text: &str) -> BTreeMap<((u64, u64), u64), u32> {
    let mut held = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // A blocked waiter's line starts `1: ->`; it does not hold the lock.
        if fields.get(1) != Some(&"FLOCK") {
            continue;
        }
        let (Some(pid), Some(device_inode)) = (fields.get(4), fields.get(5)) else {
            continue;
        };
        let parts: Vec<&str> = device_inode.split(':').collect();
        let [major, minor, inode] = parts.as_slice() else {
            continue;
        };
        let (Ok(major), Ok(minor), Ok(inode), Ok(pid)) = (
            u64::from_str_radix(major, 16),
            u64::from_str_radix(minor, 16),
            inode.parse(),
            pid.parse(),
        ) else {
            continue;
        };
        held.insert(((major, minor), inode), pid);
    }
    held
}

/// The run directory whose `events.jsonl` process `pid` has open.
fn journal_of(pid: u32) -> Option<PathBuf> {
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    fds.flatten()
        .filter_map(|fd| fs::read_link(fd.path()).ok())
        .find(|target| target.file_name().is_some_and(|n| n == "events.jsonl"))
        .and_then(|journal| journal.parent().map(Path::to_owned))
}

/// How far a run in progress is, from its event journal (the live record) and its manifest (the nodes left).
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub total: usize,
    pub done: usize,
    pub failed: usize,
    /// Running nodes and the time (ms since the epoch) each started.
    pub running: Vec<(String, u64)>,
    /// Nodes not started yet, as the manifest lists them.
    pub pending: Vec<String>,
}

pub fn progress(dir: &Path) -> Progress {
    /// Where a node stands after the events read so far; a failed attempt that is retried starts again.
    enum Seen {
        Running(u64),
        Done,
        Failed,
    }
    let mut progress = Progress::default();
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    for event in read_events(dir) {
        let (node, now) = match &event.kind {
            EventKind::RunStarted { nodes, .. } => {
                progress.total = *nodes;
                continue;
            }
            // The run's last events: every node was a hit.
            EventKind::RunRepeated { nodes, .. } => {
                progress.done += nodes;
                continue;
            }
            EventKind::NodeStarted { node, .. } | EventKind::NodeWaiting { node, .. } => {
                if matches!(seen.get(node), Some(Seen::Running(_))) {
                    continue;
                }
                (node, Seen::Running(event.at_ms))
            }
            EventKind::NodeCached { node, .. }
            | EventKind::NodeFinished { node, .. }
            | EventKind::NodeSkipped { node, .. } => (node, Seen::Done),
            EventKind::NodeFailed { node, .. } => (node, Seen::Failed),
            EventKind::RunFinished { .. } | EventKind::Warning { .. } => continue,
        };
        seen.insert(node.clone(), now);
    }
    let mut running = BTreeMap::new();
    for (node, state) in &seen {
        match state {
            Seen::Running(since) => {
                running.insert(node.clone(), *since);
            }
            Seen::Done => progress.done += 1,
            Seen::Failed => {
                progress.done += 1;
                progress.failed += 1;
            }
        }
    }
    if let Ok(manifest) = fracflow_core::run::read_manifest(dir) {
        progress.total = progress.total.max(manifest.nodes.len());
        progress.pending = manifest
            .nodes
            .iter()
            .filter(|(id, record)| {
                matches!(record.status, NodeStatus::Pending | NodeStatus::Running)
                    && !seen.contains_key(*id)
            })
            .map(|(id, _)| id.clone())
            .collect();
    }
    progress.running = running.into_iter().collect();
    progress
}

/// The run `wanted` names, for the commands that take one or two runs (`diff`, `export`): a path to a run
/// directory, a run id as `fracflow runs` prints it, or a `latest*` link name. `pipeline` narrows ids and links
/// to one pipeline's runs (`diff` passes the other run's); a name matching runs of several pipelines is refused.
pub fn resolve_run(root: &Path, wanted: &str, pipeline: Option<&str>) -> Result<RunInfo> {
    let as_path = Path::new(wanted);
    if !is_plain_name(wanted) {
        let dir = fs::canonicalize(as_path).map_err(|e| {
            Error::bad_input_because(
                format!("no run directory at {wanted}"),
                e,
                "name a folder under results/<pipeline>/, or a run id as `fracflow runs` prints it",
            )
        })?;
        let manifest = fracflow_core::run::read_manifest(&dir).map_err(|e| {
            Error::bad_input_because(
                format!("{wanted} is not a run directory (no readable manifest.json)"),
                e,
                "name a folder under results/<pipeline>/, or a run id as `fracflow runs` prints it",
            )
        })?;
        let live = live_run_dirs(&crate::project::lock_dir());
        let state = state_of(root, &dir, &manifest, &live);
        return Ok(RunInfo {
            dir,
            manifest,
            state,
        });
    }
    let runs = list_runs(root, None)?;
    let results = root.join("results");
    let linked: Vec<PathBuf> = if fracflow_core::run::is_latest_link(wanted) {
        pipelines(&results)?
            .iter()
            .filter(|p| pipeline.is_none_or(|wanted_pipeline| wanted_pipeline == p.as_str()))
            .filter_map(|p| {
                let base = results.join(p);
                fs::read_link(base.join(wanted))
                    .ok()
                    .map(|target| canonical(&base.join(target)))
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut matching: Vec<RunInfo> = runs
        .iter()
        .filter(|info| pipeline.is_none_or(|p| info.manifest.pipeline == p))
        .filter(|info| info.manifest.run_id == wanted || linked.contains(&canonical(&info.dir)))
        .cloned()
        .collect();
    match matching.len() {
        1 => Ok(matching.remove(0)),
        0 => {
            let hint = unknown_run_hint(wanted, &runs);
            let scope = pipeline.map_or_else(String::new, |p| format!(" of pipeline `{p}`"));
            Err(Error::bad_input_with_hint(
                format!("no run `{wanted}`{scope} under results/"),
                hint,
            ))
        }
        _ => {
            let names: Vec<String> = matching
                .iter()
                .map(|info| info.dir.display().to_string())
                .collect();
            Err(Error::bad_input_with_hint(
                format!(
                    "`{wanted}` names {} runs: {}",
                    matching.len(),
                    names.join(", ")
                ),
                "name the run directory as a path, e.g. results/<pipeline>/<run id>",
            ))
        }
    }
}

/// One path component that is not a relative step: a run id or link name, never a path.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".."
}

/// The kinds whose cache entries record tools (the report's rule: command and group nodes record none).
fn records_tools(kind: &str) -> bool {
    !matches!(kind, "command" | "group")
}

/// Tool → version over the run's nodes, from their cache entries (the first version seen of each tool).
pub fn tool_versions(cache: &fracflow_core::Cache, info: &RunInfo) -> BTreeMap<String, String> {
    let mut tools = BTreeMap::new();
    for record in info.manifest.nodes.values() {
        if !records_tools(&record.kind) {
            continue;
        }
        if let Some(entry) = record.key.as_ref().and_then(|k| cache.get(k)) {
            for (tool, version) in entry.fingerprint.tools {
                tools.entry(tool).or_insert(version);
            }
        }
    }
    tools
}

/// File → blake3 of every image and partial the device held for the run's measurements.
pub fn device_images(info: &RunInfo) -> BTreeMap<String, String> {
    let mut images = BTreeMap::new();
    for (id, record) in &info.manifest.nodes {
        if record.kind != "measure" {
            continue;
        }
        let path = info
            .dir
            .join("nodes")
            .join(fracflow_core::run::node_dir_name(id))
            .join(fracflow_record::SUMMARY_FILE);
        if let Ok(summary) = fracflow_record::read_record::<fracflow_record::MeasureSummary>(&path)
        {
            for action in summary.device {
                images.insert(action.file, action.sha);
            }
        }
    }
    images
}

/// The project root a run directory `<root>/results/<pipeline>/<run>` belongs to.
pub fn root_of(run_dir: &Path) -> Option<&Path> {
    run_dir.parent()?.parent()?.parent()
}

/// The hint for a run id that names no run: the nearest id, else the ids there are, else how to make one.
pub fn unknown_run_hint(wanted: &str, runs: &[RunInfo]) -> String {
    let ids: Vec<&str> = runs.iter().map(|r| r.manifest.run_id.as_str()).collect();
    match fracflow_core::suggest::did_you_mean(wanted, ids.iter().copied()) {
        Some(suggestion) => suggestion,
        None if ids.is_empty() => {
            "there are no runs yet; `fracflow run TARGET` makes one".to_owned()
        }
        None => format!(
            "runs: {} (see `fracflow runs`)",
            fracflow_core::suggest::list_names(ids.iter().take(10).copied())
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_flocks_are_read_with_their_device_and_waiters_are_not() {
        let text = "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 4343 08:01:1234 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 77 00:2a:99 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 5 fd:0a:7 0 EOF\n";
        let held = parse_locks(text);
        assert_eq!(held.len(), 2, "{held:?}");
        assert_eq!(held.get(&((8, 1), 1234)), Some(&4242));
        assert_eq!(held.get(&((0xfd, 0x0a), 7)), Some(&5));
        assert_eq!(device_numbers((8 << 8) | 1), (8, 1));
    }

    #[test]
    fn progress_counts_a_retried_node_once_and_running_again() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let lines = [
            r#"{"at_ms":1000,"event":"run_started","pipeline":"p","run_id":"r","nodes":3,"testbed":"emulated"}"#,
            r#"{"at_ms":1001,"event":"node_cached","node":"a","key":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#,
            r#"{"at_ms":1002,"event":"node_started","node":"b","key":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","attempt":1}"#,
            r#"{"at_ms":1003,"event":"node_failed","node":"b","error":"transient"}"#,
            r#"{"at_ms":1500,"event":"node_started","node":"b","key":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","attempt":2}"#,
            r#"{"at_ms":1501,"event":"node_fin"#,
        ];
        fs::write(dir.path().join("events.jsonl"), lines.join("\n"))?;
        let progress = progress(dir.path());
        assert_eq!(progress.total, 3);
        assert_eq!(progress.done, 1, "{progress:?}");
        assert_eq!(progress.failed, 0, "{progress:?}");
        assert_eq!(progress.running, vec![("b".to_owned(), 1500)]);
        Ok(())
    }

    #[test]
    fn a_repeat_counts_every_node_done() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let lines = [
            r#"{"at_ms":1000,"event":"run_started","pipeline":"p","run_id":"r","nodes":3,"testbed":"emulated"}"#,
            r#"{"at_ms":1002,"event":"run_repeated","run_id":"q","nodes":3}"#,
            r#"{"at_ms":1002,"event":"run_finished","status":"succeeded","seconds":0.002}"#,
        ];
        fs::write(dir.path().join("events.jsonl"), lines.join("\n"))?;
        let progress = progress(dir.path());
        assert_eq!((progress.total, progress.done), (3, 3), "{progress:?}");
        assert!(progress.running.is_empty() && progress.failed == 0);
        Ok(())
    }
}
