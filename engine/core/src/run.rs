//! A run's directory under `results/<pipeline>/<run-id>/`: manifest, events, logs and output views.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fracflow_record::{
    AppendFile, Event, EventKind, FORMAT_VERSION, Files, NodeRecord, NodeStatus, Publish,
    RunManifest, RunStatus,
};

use crate::cache::{Cache, Hit, Staged};
use crate::graph::Graph;

/// While nodes run, the manifest is rewritten at most this often; `events.jsonl` is appended for every node.
const MANIFEST_INTERVAL: Duration = Duration::from_millis(200);
/// While only cache hits come in, the manifest is rewritten at most this often: a no-op of 10 000 nodes takes
/// a few hundred ms, and one more rewrite of a 3 MB manifest was a twentieth of it. Hits are in the event
/// journal at once (`status` reads that), and a run cut off meanwhile finds them in the cache again.
const HITS_MANIFEST_INTERVAL: Duration = Duration::from_secs(2);
/// Below this many nodes the manifest is written indented, to be read by eye.
const SMALL_PIPELINE: usize = 1000;

/// The longest an appended cache-hit event waits in memory.
const EVENTS_FLUSH: Duration = Duration::from_millis(100);

/// The file holding a run's [`RunDir::views_digest`].
const VIEWS_DIGEST: &str = "views.digest";

/// Facts about the run that the engine cannot know by itself.
#[derive(Debug, Clone)]
pub struct RunMeta {
    pub engine_version: String,
    pub command: Vec<String>,
    pub host: String,
    pub testbed: String,
    /// The variant laid over the pipeline (`smoke` for `--smoke`), `None` for the pipeline as written; with
    /// `testbed` it names the run's `latest` link ([`latest_link`]).
    pub variant: Option<String>,
    /// The profile as used (kind, adaptation, lowered params), recorded in the manifest.
    pub testbed_profile: serde_json::Value,
    pub git: Option<fracflow_record::manifest::GitState>,
}

/// The manifest of the run in `dir`; a parse error names the file.
pub fn read_manifest(dir: &Path) -> io::Result<RunManifest> {
    let path = dir.join("manifest.json");
    let bytes = fs::read(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&bytes).map_err(|e| io::Error::other(format!("{}: {e}", path.display())))
}

pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// File-system-safe form of a node id (ids may hold `[`, `=` and `,`, which are fine; `/` is not).
pub fn node_dir_name(id: &str) -> String {
    id.replace('/', "_")
}

/// Writes one run's records. Every write is atomic or an append of whole lines, and goes through `files`.
#[derive(Debug)]
pub struct RunDir {
    dir: PathBuf,
    manifest: RunManifest,
    files: Files,
    /// `events.jsonl`, appended to in whole lines. Held open for the whole run: that is how `status` tells a
    /// live run from a dead one.
    events: Box<dyn AppendFile>,
    /// Whole event lines not appended yet (see [`RunDir::event`]).
    pending_events: Vec<u8>,
    events_flushed: Instant,
    last_manifest_write: Instant,
    /// Cache hits whose views are not linked yet: made when a dependent that runs needs them, or when the run
    /// ends (see [`RunDir::finish`]), so a no-op does not write a directory per node.
    deferred: BTreeMap<String, Hit>,
    /// The run this one's `latest` link pointed at before it: a run that only repeats it borrows its views.
    previous: Option<PathBuf>,
    /// This run's `nodes/` and `logs/` are links to the previous run's: it made no views of its own.
    borrowed_views: bool,
}

impl RunDir {
    /// Creates `results/<pipeline>/<run-id>/` (a fresh id) and points its variant's and testbed's `latest` link
    /// ([`latest_link`]) at it.
    pub fn create(
        results: &Path,
        pipeline: &str,
        meta: &RunMeta,
        graph: &Graph,
    ) -> io::Result<RunDir> {
        RunDir::create_with(Files::real(), results, pipeline, meta, graph)
    }

    /// [`RunDir::create`], changing files through `files` (a test's recording layer).
    pub fn create_with(
        files: Files,
        results: &Path,
        pipeline: &str,
        meta: &RunMeta,
        graph: &Graph,
    ) -> io::Result<RunDir> {
        let base = results.join(pipeline);
        files.create_dir_all(&base)?;
        let stamp = chrono::Local::now().format("%Y-%m-%dT%H%M%S").to_string();
        // `create_dir` claims the id: two engines starting in the same second (another testbed, or another
        // machine sharing the project) must not both take a free-looking id and write into one directory.
        let mut suffix = 1;
        let (run_id, dir) = loop {
            let run_id = if suffix == 1 {
                stamp.clone()
            } else {
                format!("{stamp}-{suffix}")
            };
            let dir = base.join(&run_id);
            match files.create_dir(&dir) {
                Ok(()) => break (run_id, dir),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => suffix += 1,
                Err(e) => return Err(e),
            }
        };
        files.create_dir_all(&dir.join("logs"))?;
        let manifest = RunManifest {
            format_version: FORMAT_VERSION,
            engine_version: meta.engine_version.clone(),
            pipeline: pipeline.to_owned(),
            run_id: run_id.clone(),
            command: meta.command.clone(),
            host: meta.host.clone(),
            testbed: meta.testbed.clone(),
            testbed_profile: meta.testbed_profile.clone(),
            git: meta.git.clone(),
            started: now_rfc3339(),
            resumed: Vec::new(),
            finished: None,
            status: RunStatus::Running,
            params: graph
                .topological()
                .iter()
                .map(|&i| {
                    let spec = graph.spec(i);
                    (
                        spec.id.clone(),
                        serde_json::json!({"point": spec.point, "config": spec.config}),
                    )
                })
                .collect(),
            nodes: BTreeMap::new(),
        };
        let mut run = RunDir::with_manifest(files, dir, manifest)?;
        run.write_manifest()?;
        let link = latest_link(meta.variant.as_deref(), &meta.testbed);
        run.previous = fs::read_link(base.join(&link))
            .ok()
            .map(|target| base.join(target))
            .filter(|previous| previous.is_dir());
        point_latest(&run.files, &base, &link, &run_id)?;
        Ok(run)
    }

    /// Continues writing into an existing run directory (`--resume RUN_DIR`).
    pub fn resume(dir: &Path) -> io::Result<RunDir> {
        let mut manifest = read_manifest(dir)?;
        manifest.resumed.push(now_rfc3339());
        manifest.status = RunStatus::Running;
        manifest.finished = None;
        let files = Files::real();
        files.create_dir_all(&dir.join("logs"))?;
        let run = RunDir::with_manifest(files, dir.to_owned(), manifest)?;
        run.write_manifest()?;
        Ok(run)
    }

    fn with_manifest(files: Files, dir: PathBuf, manifest: RunManifest) -> io::Result<RunDir> {
        Ok(RunDir {
            events: files.open_append(&dir.join("events.jsonl"))?,
            dir,
            manifest,
            files,
            pending_events: Vec::new(),
            events_flushed: Instant::now(),
            last_manifest_write: Instant::now(),
            deferred: BTreeMap::new(),
            previous: None,
            borrowed_views: false,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn run_id(&self) -> &str {
        &self.manifest.run_id
    }

    pub fn manifest(&self) -> &RunManifest {
        &self.manifest
    }

    pub fn log_path(&self, id: &str) -> PathBuf {
        self.dir
            .join("logs")
            .join(format!("{}.log", node_dir_name(id)))
    }

    /// Where a finished node's outputs are visible to people and to its dependents.
    pub fn outputs_dir(&self, id: &str) -> PathBuf {
        self.dir.join("nodes").join(node_dir_name(id))
    }

    pub fn record_mut(&mut self, id: &str, kind: &str) -> &mut NodeRecord {
        self.manifest
            .nodes
            .entry(id.to_owned())
            .or_insert_with(|| NodeRecord::pending(kind))
    }

    /// Appends an event line (one write of a whole line, so a kill leaves whole lines only).
    ///
    /// Cache hits are appended in batches (with the next other event, with the first hit `EVENTS_FLUSH` after
    /// the last write, and at the end; a hit is always followed by one of those): a
    /// kill may lose the last few, which the cache holds anyway, and a no-op of 10 000 nodes makes a handful of
    /// writes instead of 10 000.
    pub fn event(&mut self, kind: EventKind) -> io::Result<Event> {
        let hit = matches!(kind, EventKind::NodeCached { .. });
        let event = Event {
            at_ms: now_ms(),
            kind,
        };
        serde_json::to_writer(&mut self.pending_events, &event).map_err(io::Error::other)?;
        self.pending_events.push(b'\n');
        if !hit || self.events_flushed.elapsed() >= EVENTS_FLUSH {
            self.flush_events()?;
        }
        Ok(event)
    }

    fn flush_events(&mut self) -> io::Result<()> {
        if !self.pending_events.is_empty() {
            self.events.append(&self.pending_events)?;
            self.pending_events.clear();
        }
        self.events_flushed = Instant::now();
        Ok(())
    }

    /// Records a node that ran and links its views to the staged files of its outputs, which the commit then
    /// names in the cache (the same files: a view made now stays the output after the commit).
    pub fn publish_staged(&mut self, node: &str, kind: &str, staged: &Staged) -> io::Result<()> {
        self.record_hit(node, kind, &staged.entry.hit());
        let out = self.outputs_dir(node);
        for (name, file) in &staged.files {
            self.link_or_copy(file, &out.join(name))?;
        }
        Ok(())
    }

    /// Records a cache hit; its views are linked when [`RunDir::materialize`] or [`RunDir::finish`] needs them.
    pub fn publish_hit(&mut self, node: &str, kind: &str, hit: Hit) {
        self.record_hit(node, kind, &hit);
        self.deferred.insert(node.to_owned(), hit);
    }

    /// Links the views of a deferred hit, for a dependent that is about to run and reads them.
    pub fn materialize(&mut self, cache: &Cache, node: &str) -> io::Result<()> {
        match self.deferred.remove(node) {
            Some(hit) => self.link_views(cache, node, &hit),
            None => Ok(()),
        }
    }

    fn record_hit(&mut self, node: &str, kind: &str, hit: &Hit) {
        let has_log = hit.log.is_some();
        let record = self.record_mut(node, kind);
        record.key = Some(hit.key.clone());
        record.outputs = hit
            .outputs
            .iter()
            .map(|(n, b)| (n.clone(), b.hash.clone()))
            .collect();
        record.metrics = hit.metrics.clone();
        if has_log {
            record.log = Some(format!("logs/{}.log", node_dir_name(node)));
        }
    }

    /// A view of a blob: a hard link, or a copy where the run directory is on another filesystem.
    fn link_or_copy(&self, from: &Path, to: &Path) -> io::Result<()> {
        if let Some(parent) = to.parent() {
            self.files.create_dir_all(parent)?;
        }
        if to.exists() {
            self.files.remove_file(to)?;
        }
        self.files
            .hard_link(from, to)
            .or_else(|_| self.files.copy_new(from, to).map(|_| ()))
    }

    fn link_views(&self, cache: &Cache, node: &str, entry: &Hit) -> io::Result<()> {
        let out = self.outputs_dir(node);
        for (name, blob) in &entry.outputs {
            self.link_or_copy(&cache.blob_path(&blob.hash), &out.join(name))?;
        }
        if let Some(log) = &entry.log {
            let target = self.dir.join(format!("logs/{}.log", node_dir_name(node)));
            if !target.exists() {
                self.link_or_copy(&cache.blob_path(&log.hash), &target)?;
            }
        }
        Ok(())
    }

    /// Makes the views of every deferred hit. When every node of this run is a hit, and the previous run of
    /// its variant and testbed made views for exactly these nodes under the same keys (its `views.digest`),
    /// this run's `nodes/` and `logs/` are one link each to that run's (followed to the run that made them),
    /// so a no-op writes a fixed number of files; otherwise each view is linked from the cache.
    fn materialize_all(&mut self, cache: &Cache) -> io::Result<()> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        if self.deferred.len() == self.manifest.nodes.len() && self.borrow_previous_views() {
            self.deferred.clear();
            self.borrowed_views = true;
            return Ok(());
        }
        for (node, hit) in std::mem::take(&mut self.deferred) {
            self.link_views(cache, &node, &hit)?;
        }
        Ok(())
    }

    /// What a run's views hold: a hash over every node id and key, in id order. Only a run whose every node
    /// was built or served has one, in `views.digest`.
    fn views_digest<'a>(nodes: impl Iterator<Item = (&'a String, &'a str)>) -> String {
        let mut hasher = blake3::Hasher::new();
        for (node, key) in nodes {
            hasher.update(node.as_bytes());
            hasher.update(&[0]);
            hasher.update(key.as_bytes());
            hasher.update(&[0]);
        }
        hasher.finalize().to_hex().to_string()
    }

    /// Links `nodes/` and `logs/` to the previous run's when its views hold exactly this run's nodes and keys.
    fn borrow_previous_views(&self) -> bool {
        let Some(previous) = &self.previous else {
            return false;
        };
        let ours = Self::views_digest(self.deferred.iter().map(|(n, hit)| (n, hit.key.as_str())));
        let same =
            fs::read_to_string(previous.join(VIEWS_DIGEST)).is_ok_and(|theirs| theirs == ours);
        let (Ok(nodes), Ok(logs)) = (
            fs::canonicalize(previous.join("nodes")),
            fs::canonicalize(previous.join("logs")),
        ) else {
            return false;
        };
        if !same || self.dir.join("nodes").exists() {
            return false;
        }
        // Relative when the run that made the views is a sibling (as it always is under results/<pipeline>/),
        // so the project can be moved or copied with its results.
        let sibling = |target: PathBuf| {
            let base = fs::canonicalize(self.dir.parent()?).ok()?;
            let run = target.parent()?;
            let (run_name, leaf) = (run.file_name()?, target.file_name()?);
            (run.parent()? == base).then(|| Path::new("..").join(run_name).join(leaf))
        };
        let (nodes, logs) = (
            sibling(nodes.clone()).unwrap_or(nodes),
            sibling(logs.clone()).unwrap_or(logs),
        );
        if self.files.symlink(&nodes, &self.dir.join("nodes")).is_err() {
            return false;
        }
        // `logs/` was made empty at creation (a hit writes no log of its own); if it cannot be replaced, the
        // views are made one by one instead, never into the previous run's folders.
        let logs_replaced = self
            .files
            .remove_dir(&self.dir.join("logs"))
            .and_then(|()| self.files.symlink(&logs, &self.dir.join("logs")));
        if logs_replaced.is_err() {
            let _ = self.files.remove_file(&self.dir.join("nodes"));
            let _ = self.files.create_dir_all(&self.dir.join("logs"));
            return false;
        }
        true
    }

    /// The manifest as it stands, when its last write is old enough: `ran` (a node finished or failed) at most
    /// every `MANIFEST_INTERVAL`, a cache hit at most every `HITS_MANIFEST_INTERVAL`. The caller writes it
    /// ([`Checkpoint::write`]) off the scheduler's thread, since the write syncs.
    pub fn checkpoint(&mut self, ran: bool) -> io::Result<Option<Checkpoint>> {
        let interval = if ran {
            MANIFEST_INTERVAL
        } else {
            HITS_MANIFEST_INTERVAL
        };
        if self.last_manifest_write.elapsed() < interval {
            return Ok(None);
        }
        self.last_manifest_write = Instant::now();
        Ok(Some(Checkpoint {
            files: self.files.clone(),
            path: self.dir.join("manifest.json"),
            bytes: self.manifest_bytes()?,
        }))
    }

    /// Writes the manifest durably.
    pub fn write_manifest(&self) -> io::Result<()> {
        self.files.publish(
            &self.dir.join("manifest.json"),
            &self.manifest_bytes()?,
            Publish::Durable,
        )
    }

    /// Indented for a pipeline small enough to be read by eye; one line for a large one, where indentation
    /// was half the bytes a no-op wrote.
    fn manifest_bytes(&self) -> io::Result<Vec<u8>> {
        if self.manifest.params.len() < SMALL_PIPELINE {
            serde_json::to_vec_pretty(&self.manifest)
        } else {
            serde_json::to_vec(&self.manifest)
        }
        .map_err(io::Error::other)
    }

    /// Makes the deferred views, records the final status and writes the manifest one last time; saves the
    /// cache's hit index for the next run.
    pub fn finish(&mut self, cache: &Cache, status: RunStatus) -> io::Result<()> {
        self.materialize_all(cache)?;
        for record in self.manifest.nodes.values_mut() {
            if matches!(record.status, NodeStatus::Pending | NodeStatus::Running) {
                record.status = NodeStatus::Skipped;
            }
        }
        self.manifest.status = status;
        self.manifest.finished = Some(now_rfc3339());
        self.flush_events()?;
        self.events.sync()?;
        self.write_manifest()?;
        let complete = self.manifest.nodes.values().all(|record| {
            matches!(record.status, NodeStatus::Built | NodeStatus::Cached) && record.key.is_some()
        });
        if complete {
            let digest = Self::views_digest(
                self.manifest
                    .nodes
                    .iter()
                    .filter_map(|(node, record)| Some((node, record.key.as_deref()?))),
            );
            // The digest vouches for the views a later no-op borrows: the views this run made are durable
            // before it is written (one syncfs for all of them), or power loss could keep the digest and lose
            // views. The digest itself is not synced: a lost one only means the next no-op links its views
            // one by one.
            if !self.borrowed_views {
                self.files.sync_fs(&self.dir)?;
            }
            self.files.publish(
                &self.dir.join(VIEWS_DIGEST),
                digest.as_bytes(),
                Publish::Unsynced,
            )?;
        }
        cache.save_index();
        Ok(())
    }
}

/// A run's manifest between two nodes, to be written by [`Checkpoint::write`].
#[derive(Debug)]
pub struct Checkpoint {
    files: Files,
    path: PathBuf,
    bytes: Vec<u8>,
}

impl Checkpoint {
    /// Publishes it whole but not durably (its data synced, its rename not): power loss may bring back an
    /// older manifest, never a torn one. The cache is the durable record of completed work, the manifest a
    /// view of it, written durably by [`RunDir::finish`].
    pub fn write(self) -> io::Result<()> {
        self.files.publish(&self.path, &self.bytes, Publish::Whole)
    }
}

impl Drop for RunDir {
    /// A run that ends by an error still leaves every event it had.
    fn drop(&mut self) {
        let _ = self.flush_events();
    }
}

/// The testbed whose runs own the plain `latest` link (the CLI's default `--testbed`).
pub const DEFAULT_TESTBED: &str = "emulated";

/// The name of the link under `results/<pipeline>/` that points at the newest run of `variant` on `testbed`:
/// `latest` (no variant, the default testbed), `latest-<variant>` (`latest-smoke`), `latest-<testbed>`, and
/// `latest-<variant>-<testbed>`. Names are used as written, except that a `/` becomes `_` so a link stays in
/// its pipeline's folder. A smoke run, or a run on another testbed, thus never replaces what `fracflow plot`
/// re-draws by default.
pub fn latest_link(variant: Option<&str>, testbed: &str) -> String {
    let mut name = String::from(LATEST);
    for part in [variant, (testbed != DEFAULT_TESTBED).then_some(testbed)]
        .into_iter()
        .flatten()
    {
        name.push('-');
        name.push_str(&part.replace('/', "_"));
    }
    name
}

/// Every `latest` link's name starts so ([`latest_link`]).
const LATEST: &str = "latest";

/// Whether `name` (an entry of `results/<pipeline>/`) is one of the `latest` links [`latest_link`] names.
pub fn is_latest_link(name: &str) -> bool {
    name == LATEST || name.starts_with("latest-")
}

/// Replaces `<base>/<link>` atomically: a new symlink under a temporary name, renamed over the old one.
fn point_latest(files: &Files, base: &Path, link: &str, run_id: &str) -> io::Result<()> {
    // Unique per machine too: two engines on one project may point a link at the same moment.
    let tmp = base.join(format!(".{link}.{}", fracflow_record::unique_suffix()));
    files.symlink(Path::new(run_id), &tmp)?;
    files.rename(&tmp, &base.join(link))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_variant_and_testbed_has_its_own_latest_link() {
        assert_eq!(latest_link(None, DEFAULT_TESTBED), "latest");
        assert_eq!(latest_link(Some("smoke"), DEFAULT_TESTBED), "latest-smoke");
        assert_eq!(latest_link(None, "u280-direct"), "latest-u280-direct");
        assert_eq!(
            latest_link(Some("smoke"), "u280-direct"),
            "latest-smoke-u280-direct"
        );
        assert_eq!(latest_link(Some("a/b"), "emulated"), "latest-a_b");
        for name in ["latest", "latest-smoke", "latest-smoke-u280-direct"] {
            assert!(is_latest_link(name), "{name}");
        }
        for name in ["2026-01-01T000000", ".latest.x", "latestish"] {
            assert!(!is_latest_link(name), "{name}");
        }
    }
}
