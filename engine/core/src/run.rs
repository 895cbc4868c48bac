//! A run's directory under `results/<pipeline>/<run-id>/`: manifest, events, logs and output views.

use std::collections::BTreeMap;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use fracflow_record::{
    AppendFile, Digest, Event, EventKind, FORMAT_VERSION, Files, NodeRecord, NodeStatus, Prepared,
    Publish, RunManifest, RunStatus,
};

use crate::cache::{Cache, Hit, Staged};
use crate::graph::{Graph, NodeIndex, NodeMap};
use crate::spec::{NodeSpec, Settings};

/// While nodes run, the manifest is rewritten at most this often; `events.jsonl` is appended for every node.
const MANIFEST_INTERVAL: Duration = Duration::from_millis(200);
/// While only cache hits come in, the manifest is rewritten at most this often: a no-op of 10 000 nodes takes
/// a few hundred ms, and one more rewrite of a 3 MB manifest was a twentieth of it. Hits are in the event
/// journal at once (`status` reads that), and a run cut off meanwhile finds them in the cache again.
const HITS_MANIFEST_INTERVAL: Duration = Duration::from_secs(2);
/// After a checkpoint, the next waits at least this many times as long as making that one's bytes took, on top of
/// the intervals above. Making the bytes of a manifest is linear in the pipeline's size and happens on the
/// scheduler's thread: for a million-point sweep it took seconds, and at one every 200 ms the thread did nothing
/// else (530 nodes built in four minutes). This keeps it to a fiftieth of the thread whatever the size.
const CHECKPOINT_COST_FACTOR: u32 = 50;
/// Below this many nodes the manifest is written indented, to be read by eye.
const SMALL_PIPELINE: usize = 1000;

/// The buffer a manifest is serialized through, a few bytes per call, on its way to the file.
const MANIFEST_BUFFER: usize = 256 * 1024;

/// The file holding a run's [`RunDir::views_digest`].
const VIEWS_DIGEST: &str = "views.digest";

/// A run's manifest; a repeat's is a link to the manifest of the run it repeated.
const MANIFEST_FILE: &str = "manifest.json";

/// A repeat's own manifest fields (its id, command, times, status and the run it repeated), without params or
/// nodes (see [`read_manifest`]).
const REPEAT_FILE: &str = "repeat.json";

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

/// The manifest of the run in `dir`, complete: a run that repeated another ([`RunManifest::repeats`]) has its
/// own fields in `repeat.json` and links `manifest.json` to that run's, whose params and nodes it takes, each
/// node `cached`. A parse error names the file.
pub fn read_manifest(dir: &Path) -> io::Result<RunManifest> {
    let manifest_file = dir.join(MANIFEST_FILE);
    let linked = fs::symlink_metadata(&manifest_file).is_ok_and(|m| m.file_type().is_symlink());
    let head_file = dir.join(REPEAT_FILE);
    if !linked || !head_file.is_file() {
        return read_manifest_file(&manifest_file);
    }
    let mut manifest = read_manifest_file(&head_file)?;
    let repeated = read_manifest_file(&manifest_file)?;
    if manifest.repeats.as_deref() != Some(repeated.run_id.as_str()) || repeated.repeats.is_some() {
        return Err(io::Error::other(format!(
            "{}: links to the manifest of run {}, not of the run it repeats ({})",
            manifest_file.display(),
            repeated.run_id,
            manifest.repeats.as_deref().unwrap_or("none")
        )));
    }
    manifest.params = repeated.params;
    manifest.nodes = repeated
        .nodes
        .into_iter()
        .map(|(id, record)| (id, repeated_record(record)))
        .collect();
    Ok(manifest)
}

fn read_manifest_file(path: &Path) -> io::Result<RunManifest> {
    let bytes =
        fs::read(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&bytes).map_err(|e| io::Error::other(format!("{}: {e}", path.display())))
}

/// A node of the repeated run as the repeat served it: from the cache, under the key, outputs and metrics that
/// run recorded; its log and seconds are that run's (the repeat's `logs/` is that run's).
fn repeated_record(record: NodeRecord) -> NodeRecord {
    NodeRecord {
        status: NodeStatus::Cached,
        started: None,
        error: None,
        reason: None,
        ..record
    }
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

/// The folder of a run's views, in the run directory `run_dir`.
pub(crate) fn views_in(run_dir: &Path) -> PathBuf {
    run_dir.join("nodes")
}

/// The view of node `id`'s outputs in a run's `views` folder ([`views_in`]): where the run shows them and where
/// its dependents read them.
pub(crate) fn view_of(views: &Path, id: &str) -> PathBuf {
    views.join(node_dir_name(id))
}

/// Writes one run's records. Every write is atomic or an append of whole lines, and goes through `files`.
#[derive(Debug)]
pub struct RunDir {
    dir: PathBuf,
    manifest: RunManifest<RunParams>,
    files: Files,
    /// `events.jsonl`, appended to in whole lines. Held open for the whole run: that is how `status` tells a
    /// live run from a dead one.
    events: Box<dyn AppendFile>,
    /// Cache-hit events not appended yet, kept unwritten: a repeat journals one line for all of them (see
    /// [`RunDir::event`]).
    pending_hits: Vec<PendingHit>,
    last_manifest_write: Instant,
    /// How long after `last_manifest_write` the next checkpoint may be made at the earliest, from what the last
    /// one cost (see [`CHECKPOINT_COST_FACTOR`]).
    checkpoint_spacing: Duration,
    /// Cache hits whose views are not linked yet, by node index, with the blob of each one's log (the rest of
    /// what the views show is in its record): made when a dependent that runs needs them, or when the run ends
    /// (see [`RunDir::finish`]), so a no-op does not write a directory per node. By index rather than in a map
    /// by id: the map and its copies of the ids were 10 MB of a 100 000-node no-op. Made at the first hit.
    deferred: Option<NodeMap<DeferredViews>>,
    /// The run this one's `latest` link pointed at before it: a run that only repeats it borrows its views.
    previous: Option<PathBuf>,
}

impl RunDir {
    /// Creates `results/<pipeline>/<run-id>/` (a fresh id) and points its variant's and testbed's `latest` link
    /// ([`latest_link`]) at it.
    pub fn create(results: &Path, pipeline: &str, meta: &RunMeta) -> io::Result<RunDir> {
        RunDir::create_with(Files::real(), results, pipeline, meta)
    }

    /// [`RunDir::create`], changing files through `files` (a test's recording layer).
    pub fn create_with(
        files: Files,
        results: &Path,
        pipeline: &str,
        meta: &RunMeta,
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
            repeats: None,
            // Filled when a whole manifest is first written (`fill_params`): a no-op that repeats the previous
            // run never writes one, and building every node's params was a sixth of its memory.
            params: RunParams::Unfilled,
            nodes: BTreeMap::new(),
        };
        let mut run = RunDir::with_manifest(files, dir, manifest)?;
        // The first write says only that the run exists: the params come with the first checkpoint, so a
        // no-op writes a manifest whose size does not grow with the pipeline.
        run.write_manifest_as(ManifestForm::Head, None)?;
        let link = latest_link(meta.variant.as_deref(), &meta.testbed);
        run.previous = fs::read_link(base.join(&link))
            .ok()
            .map(|target| base.join(target))
            .filter(|previous| previous.is_dir());
        point_latest(&run.files, &base, &link, &run_id)?;
        Ok(run)
    }

    /// Continues writing into an existing run directory (`--resume RUN_DIR`); `graph` gives the params of a run
    /// stopped before its manifest held them.
    pub fn resume(dir: &Path, graph: &Graph) -> io::Result<RunDir> {
        let mut manifest = read_manifest(dir)?.map_params(RunParams::recorded);
        manifest.resumed.push(now_rfc3339());
        manifest.status = RunStatus::Running;
        manifest.finished = None;
        // Resumed, it is no longer a repeat: what it builds now is its own (its whole manifest replaces the
        // link, and its repeat.json goes).
        manifest.repeats = None;
        manifest.params.fill(graph)?;
        let files = Files::real();
        files.create_dir_all(&dir.join("logs"))?;
        let mut run = RunDir::with_manifest(files, dir.to_owned(), manifest)?;
        run.write_manifest_with(Some(graph))?;
        remove_repeat_head(&run.files, dir)?;
        Ok(run)
    }

    fn with_manifest(
        files: Files,
        dir: PathBuf,
        manifest: RunManifest<RunParams>,
    ) -> io::Result<RunDir> {
        Ok(RunDir {
            events: files.open_append(&dir.join("events.jsonl"))?,
            dir,
            manifest,
            files,
            pending_hits: Vec::new(),
            last_manifest_write: Instant::now(),
            checkpoint_spacing: Duration::ZERO,
            deferred: None,
            previous: None,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn run_id(&self) -> &str {
        &self.manifest.run_id
    }

    pub fn manifest(&self) -> &RunManifest<RunParams> {
        &self.manifest
    }

    pub fn log_path(&self, id: &str) -> PathBuf {
        self.dir
            .join("logs")
            .join(format!("{}.log", node_dir_name(id)))
    }

    /// Where a finished node's outputs are visible to people and to its dependents.
    pub fn outputs_dir(&self, id: &str) -> PathBuf {
        view_of(&self.views_dir(), id)
    }

    /// The folder of every node's [`RunDir::outputs_dir`].
    pub fn views_dir(&self) -> PathBuf {
        views_in(&self.dir)
    }

    /// Makes the folder of a node's views while the node runs, so that publishing them when it ends is one link
    /// per output: on a chain, making the folder then sat between a node's end and its dependent's start. Best
    /// effort: publishing makes the folder itself when this could not.
    pub fn prepare_views(&self, id: &str) {
        let dir = self.outputs_dir(id);
        if let Err(e) = self.files.create_dir(&dir)
            && e.kind() == io::ErrorKind::NotFound
        {
            let _ = self.files.create_dir_all(&dir);
        }
    }

    /// Removes the folder [`RunDir::prepare_views`] made for a node that then failed, if it is still empty.
    pub fn discard_empty_views(&self, id: &str) {
        let _ = self.files.remove_dir(&self.outputs_dir(id));
    }

    pub fn record_mut(&mut self, id: &str, kind: &str) -> &mut NodeRecord {
        record_in(&mut self.manifest.nodes, id, kind)
    }

    /// Gives each of `nodes` (id and kind) that has no record yet a pending one. A map grown one insert at a
    /// time keeps its leaves a little over half full (16 MB more of a 100 000-node run's records), and
    /// collecting into a map sorts a vector of every whole record first (a 25 MB buffer at that size, whose
    /// pages a 10 000-node no-op then kept: 10 MB more RSS). So the new records are inserted in id order into a
    /// map of their own, the last one held back, and merged by `append`, which builds the tree again from the
    /// two sorted maps with full leaves, taking the old tree apart as it goes.
    pub fn add_pending<'s>(&mut self, nodes: impl Iterator<Item = (&'s str, &'s str)>) {
        let records = &mut self.manifest.nodes;
        let mut missing: Vec<(&str, &str)> =
            nodes.filter(|(id, _)| !records.contains_key(*id)).collect();
        missing.sort_unstable();
        missing.dedup_by_key(|(id, _)| *id);
        let Some((last_id, last_kind)) = missing.pop() else {
            return;
        };
        let mut new: BTreeMap<String, NodeRecord> = BTreeMap::new();
        for (id, kind) in missing {
            new.insert(id.to_owned(), NodeRecord::pending(kind));
        }
        let mut last = BTreeMap::from([(last_id.to_owned(), NodeRecord::pending(last_kind))]);
        new.append(&mut last);
        records.append(&mut new);
    }

    /// Appends an event line (one write of a whole line, so a kill leaves whole lines only).
    ///
    /// Cache hits wait in memory for the next other event, which appends them first: a kill may lose them,
    /// which the cache holds anyway, and a run that repeats another exactly writes one `run_repeated` line for
    /// them instead of one line per node (see [`RunDir::settle_views`]).
    pub fn event(&mut self, kind: EventKind) -> io::Result<()> {
        let event = Event {
            at_ms: now_ms(),
            kind,
        };
        if let EventKind::NodeCached { node, key } = event.kind {
            self.pending_hits.push(PendingHit {
                at_ms: event.at_ms,
                node: node.into_boxed_str(),
                key,
            });
            return Ok(());
        }
        let mut lines = Vec::new();
        if let Some(base) = self.manifest.repeats.clone() {
            self.pending_hits.clear();
            let repeated = Event {
                at_ms: event.at_ms,
                kind: EventKind::RunRepeated {
                    run_id: base,
                    nodes: self.manifest.nodes.len(),
                },
            };
            push_line(&mut lines, &repeated)?;
        }
        for hit in std::mem::take(&mut self.pending_hits) {
            push_line(&mut lines, &hit.event())?;
        }
        push_line(&mut lines, &event)?;
        self.events.append(&lines)
    }

    fn flush_events(&mut self) -> io::Result<()> {
        if self.pending_hits.is_empty() {
            return Ok(());
        }
        let mut lines = Vec::new();
        for hit in std::mem::take(&mut self.pending_hits) {
            push_line(&mut lines, &hit.event())?;
        }
        self.events.append(&lines)
    }

    /// Records a node that ran and links its views to the staged files of its outputs, which the commit then
    /// names in the cache (the same files: a view made now stays the output after the commit).
    pub fn publish_staged(&mut self, node: &str, kind: &str, staged: &Staged) -> io::Result<()> {
        record_hit(&mut self.manifest.nodes, node, kind, staged.entry.hit());
        let out = self.outputs_dir(node);
        for (name, file) in &staged.files {
            self.link_or_copy(file, &out.join(name))?;
        }
        Ok(())
    }

    /// Records a cache hit, as the outputs of `node` (not always the node named in the entry: two nodes doing
    /// identical work share one key, and the second is served the first one's entry), returning its record;
    /// its views are linked when [`RunDir::materialize`] or [`RunDir::finish`] needs them.
    pub fn publish_hit(&mut self, graph: &Graph, index: NodeIndex, hit: Hit) -> &mut NodeRecord {
        let log = hit.log.as_ref().map(|log| log.hash);
        self.deferred
            .get_or_insert_with(|| NodeMap::for_graph(graph))
            .insert(index, DeferredViews { log });
        let spec = graph.spec(index);
        record_hit(&mut self.manifest.nodes, &spec.id, &spec.kind, hit)
    }

    /// Links the views of a deferred hit, node `index` of `graph`, for a dependent that is about to run and
    /// reads them.
    pub fn materialize(
        &mut self,
        cache: &Cache,
        graph: &Graph,
        index: NodeIndex,
    ) -> io::Result<()> {
        match self
            .deferred
            .as_mut()
            .and_then(|deferred| deferred.remove(index))
        {
            Some(views) => self.link_views(cache, &graph.spec(index).id, views.log.as_ref()),
            None => Ok(()),
        }
    }

    /// A view of a file: a hard link, or a copy where the run directory is on another filesystem. The link is
    /// tried first and its folder made, or a file already there removed, only when it fails for that reason: a
    /// node's first view cost five calls (two `stat`s before the `mkdir`, one before the link) and each other one
    /// three, where they now cost three and one.
    fn link_or_copy(&self, from: &Path, to: &Path) -> io::Result<()> {
        match self.files.hard_link(from, to) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(parent) = to.parent() {
                    // The node's folder of views, new at its first view; the folders above it made only when
                    // they are missing too.
                    match self.files.create_dir(parent) {
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {
                            self.files.create_dir_all(parent)?
                        }
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        made => made?,
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => self.files.remove_file(to)?,
            // Another filesystem, or no hard links there: the copy below.
            Err(_) => {}
        }
        self.files
            .hard_link(from, to)
            .or_else(|_| self.files.copy_new(from, to).map(|_| ()))
    }

    /// Links the views of hit `node`: the outputs its record names, and its log's blob.
    fn link_views(&self, cache: &Cache, node: &str, log: Option<&Digest>) -> io::Result<()> {
        let out = self.outputs_dir(node);
        if let Some(record) = self.manifest.nodes.get(node) {
            for (name, hash) in &record.outputs {
                self.link_or_copy(&cache.blob_path(hash), &out.join(name))?;
            }
        }
        if let Some(log) = log {
            let target = self.dir.join(format!("logs/{}.log", node_dir_name(node)));
            if !target.exists() {
                self.link_or_copy(&cache.blob_path(log), &target)?;
            }
        }
        Ok(())
    }

    /// Makes the views of every deferred hit, before the run's last event. When every node of this run is a hit
    /// and the run that made the views of the previous run of its variant and testbed recorded exactly these
    /// nodes, keys, outputs, metrics and params (its `views.digest`), this run repeats that one: its `nodes/` and
    /// `logs/` are one link each to that run's, and its manifest and journal name that run instead of listing
    /// every node, so a no-op writes a fixed number of files of a fixed size. Otherwise each view is linked
    /// from the cache.
    pub fn settle_views(&mut self, cache: &Cache, graph: &Graph) -> io::Result<()> {
        let Some(deferred) = self.deferred.take() else {
            return Ok(());
        };
        let count = deferred.values().count();
        if count == 0 {
            return Ok(());
        }
        if count == self.manifest.nodes.len()
            && let Some(base) = self.repeat_previous(graph)
        {
            self.manifest.repeats = Some(base);
            return Ok(());
        }
        for (index, views) in deferred.iter() {
            self.link_views(cache, &graph.spec(index).id, views.log.as_ref())?;
        }
        Ok(())
    }

    /// What a run's views and records hold: a hash over every node's id, kind, key, outputs and metrics, in id
    /// order, and its params. Only a run whose every node was built or served has one, in `views.digest`; a
    /// run whose digest equals another's can be read as that run, each node cached. Hashed as one buffer:
    /// thousands of small hasher updates cost a tenth of a no-op.
    fn views_digest(&self, graph: &Graph) -> io::Result<String> {
        // Hashed 64 KiB at a time: this runs at the end of a run, when it holds the most, and the whole text of a
        // 100 000-node run was 19 MB of it.
        const CHUNK: usize = 64 << 10;
        let mut hasher = blake3::Hasher::new();
        let mut text = Vec::with_capacity(CHUNK + 4096);
        fn field(text: &mut Vec<u8>, bytes: &[u8]) {
            text.extend_from_slice(bytes);
            text.push(0);
        }
        for (node, record) in &self.manifest.nodes {
            field(&mut text, node.as_bytes());
            field(&mut text, record.kind.as_bytes());
            // Hashes in hex, as when they were held as text: a NUL-separated field of raw bytes could hold a
            // NUL, and a run made before still repeats.
            match &record.key {
                Some(key) => field(&mut text, key.to_hex().as_bytes()),
                None => field(&mut text, b""),
            }
            for (name, hash) in &record.outputs {
                field(&mut text, name.as_bytes());
                field(&mut text, hash.to_hex().as_bytes());
            }
            if !record.metrics.is_empty() {
                serde_json::to_writer(&mut text, &record.metrics).map_err(io::Error::other)?;
            }
            text.push(1);
            if text.len() >= CHUNK {
                hasher.update(&text);
                text.clear();
            }
        }
        // Then every node of the pipeline with its params. A keyed node's params (its point and config) are part
        // of its key, whose fingerprint holds both whole, so its id says enough; a node without a key here
        // (outside the run's targets) is hashed whole. Both in id order: one pass over each.
        let mut specs: Vec<&NodeSpec> =
            graph.topological().iter().map(|&i| graph.spec(i)).collect();
        specs.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        let mut records = self.manifest.nodes.iter().peekable();
        for spec in specs {
            let node = &spec.id;
            field(&mut text, node.as_bytes());
            while records.next_if(|(id, _)| *id < node).is_some() {}
            let keyed = records
                .next_if(|(id, _)| *id == node)
                .is_some_and(|(_, record)| record.key.is_some());
            if !keyed {
                serde_json::to_writer(&mut text, &NodeParams::of(spec))
                    .map_err(io::Error::other)?;
            }
            text.push(2);
            if text.len() >= CHUNK {
                hasher.update(&text);
                text.clear();
            }
        }
        Ok(hasher.update(&text).finalize().to_hex().to_string())
    }

    /// The id of the run that made the previous run's views, with `nodes/` and `logs/` linked to its, when its
    /// `views.digest` equals this run's.
    fn repeat_previous(&self, graph: &Graph) -> Option<String> {
        let previous = self.previous.as_ref()?;
        // The run that made the views: the previous run itself, or the run it repeated.
        let nodes = fs::canonicalize(previous.join("nodes")).ok()?;
        let base = nodes.parent()?;
        let logs = fs::canonicalize(previous.join("logs")).ok()?;
        if logs.parent()? != base || nodes.file_name()? != "nodes" || logs.file_name()? != "logs" {
            return None;
        }
        // Relative, and only to a sibling (as runs under results/<pipeline>/ always are), so the project can
        // be moved or copied with its results and the manifest can name the run by its id.
        let here = fs::canonicalize(self.dir.parent()?).ok()?;
        if base.parent()? != here {
            return None;
        }
        let base_id = base.file_name()?.to_str()?.to_owned();
        let theirs = fs::read_to_string(base.join(VIEWS_DIGEST)).ok()?;
        if self.views_digest(graph).ok()? != theirs || self.dir.join("nodes").exists() {
            return None;
        }
        let run = Path::new("..").join(&base_id);
        self.files
            .symlink(&run.join("nodes"), &self.dir.join("nodes"))
            .ok()?;
        // `logs/` was made empty at creation (a hit writes no log of its own); if it cannot be replaced, the
        // views are made one by one instead, never into the other run's folders.
        let logs_replaced = self
            .files
            .remove_dir(&self.dir.join("logs"))
            .and_then(|()| {
                self.files
                    .symlink(&run.join("logs"), &self.dir.join("logs"))
            });
        if logs_replaced.is_err() {
            let _ = self.files.remove_file(&self.dir.join("nodes"));
            let _ = self.files.create_dir_all(&self.dir.join("logs"));
            return None;
        }
        Some(base_id)
    }

    /// The manifest as it stands, when its last write is old enough: `ran` (a node finished or failed) at most
    /// every `MANIFEST_INTERVAL`, a cache hit at most every `HITS_MANIFEST_INTERVAL`, and never sooner than
    /// [`CHECKPOINT_COST_FACTOR`] times what making the last one took. It is written into a temporary file here;
    /// the caller publishes it ([`Checkpoint::write`]) off the scheduler's thread, since that syncs.
    pub fn checkpoint(&mut self, ran: bool, graph: &Graph) -> io::Result<Option<Checkpoint>> {
        let interval = if ran {
            MANIFEST_INTERVAL
        } else {
            HITS_MANIFEST_INTERVAL
        };
        if self.last_manifest_write.elapsed() < interval.max(self.checkpoint_spacing) {
            return Ok(None);
        }
        let making = Instant::now();
        self.manifest.params.fill(graph)?;
        let file = self.prepare_manifest(
            MANIFEST_FILE,
            ManifestForm::Whole,
            Publish::Whole,
            Some(graph),
        )?;
        self.last_manifest_write = Instant::now();
        self.checkpoint_spacing = (self.last_manifest_write - making) * CHECKPOINT_COST_FACTOR;
        Ok(Some(Checkpoint(file)))
    }

    /// Writes the manifest durably. A repeat's own fields go to `repeat.json` and `manifest.json` becomes a
    /// link to the manifest of the run it repeated, so a no-op writes a fixed number of bytes, and a reader of
    /// the file itself still finds every node there (that run's records).
    pub fn write_manifest(&mut self) -> io::Result<()> {
        self.write_manifest_with(None)
    }

    /// [`RunDir::write_manifest`], with the graph whose params the manifest holds in id order, if it does.
    fn write_manifest_with(&mut self, graph: Option<&Graph>) -> io::Result<()> {
        let Some(base) = self.manifest.repeats.clone() else {
            return self.write_manifest_as(ManifestForm::Whole, graph);
        };
        self.prepare_manifest(REPEAT_FILE, ManifestForm::Head, Publish::Durable, None)?
            .publish()?;
        let target = Path::new("..").join(&base).join(MANIFEST_FILE);
        replace_with_link(&self.files, &self.dir, MANIFEST_FILE, &target)
    }

    fn write_manifest_as(&mut self, form: ManifestForm, graph: Option<&Graph>) -> io::Result<()> {
        self.prepare_manifest(MANIFEST_FILE, form, Publish::Durable, graph)?
            .publish()
    }

    /// The manifest written in `form` into a temporary beside `<run>/<name>`, to be published there: written
    /// as it is serialized, where the bytes of a large run's manifest held whole were its largest allocation.
    fn prepare_manifest(
        &mut self,
        name: &str,
        form: ManifestForm,
        how: Publish,
        graph: Option<&Graph>,
    ) -> io::Result<Prepared> {
        let path = self.dir.join(name);
        let files = self.files.clone();
        files.prepare(&path, how, |file| {
            let mut out = io::BufWriter::with_capacity(MANIFEST_BUFFER, file);
            self.serialize_manifest(form, &mut out, graph)?;
            io::Write::flush(&mut out)
        })
    }

    /// Indented for a pipeline small enough to be read by eye; one line for a large one, where indentation
    /// was half the bytes a no-op wrote.
    fn serialize_manifest(
        &mut self,
        form: ManifestForm,
        out: &mut dyn io::Write,
        graph: Option<&Graph>,
    ) -> io::Result<()> {
        let small = self.manifest.params.is_small();
        // The params and records are moved out, the head (a few strings) copied into a manifest whose params
        // are written through `graph`, and the records moved in and back out: nothing per node is copied.
        let params = std::mem::take(&mut self.manifest.params);
        let mut nodes = std::mem::take(&mut self.manifest.nodes);
        let unfilled = RunParams::Unfilled;
        let whole = matches!(form, ManifestForm::Whole);
        let mut view = self.manifest.clone().map_params(|_| ParamsView {
            params: if whole { &params } else { &unfilled },
            graph,
        });
        if whole {
            std::mem::swap(&mut view.nodes, &mut nodes);
        }
        let written = if small {
            serde_json::to_writer_pretty(&mut *out, &view)
        } else {
            serde_json::to_writer(&mut *out, &view)
        };
        if whole {
            std::mem::swap(&mut view.nodes, &mut nodes);
        }
        drop(view);
        self.manifest.nodes = nodes;
        self.manifest.params = params;
        written.map_err(io::Error::other)
    }

    /// Makes the deferred views, records the final status and writes the manifest one last time; saves the
    /// cache's hit index for the next run.
    pub fn finish(&mut self, cache: &Cache, status: RunStatus, graph: &Graph) -> io::Result<()> {
        self.settle_views(cache, graph)?;
        for record in self.manifest.nodes.values_mut() {
            if matches!(record.status, NodeStatus::Pending | NodeStatus::Running) {
                record.status = NodeStatus::Skipped;
            }
        }
        self.manifest.status = status;
        self.manifest.finished = Some(now_rfc3339());
        self.flush_events()?;
        self.events.sync()?;
        if self.manifest.repeats.is_none() {
            self.manifest.params.fill(graph)?;
        }
        self.write_manifest_with(Some(graph))?;
        let complete = self.manifest.nodes.values().all(|record| {
            matches!(record.status, NodeStatus::Built | NodeStatus::Cached) && record.key.is_some()
        });
        // A repeat's views are its base run's, which holds the digest the next run compares with.
        if complete && self.manifest.repeats.is_none() {
            // The digest vouches for the views a later no-op borrows: the views this run made are durable
            // before it is written (one syncfs for all of them), or power loss could keep the digest and lose
            // views. The digest itself is not synced: a lost one only means the next no-op links its views
            // one by one.
            self.files.sync_fs(&self.dir)?;
            self.files.publish(
                &self.dir.join(VIEWS_DIGEST),
                self.views_digest(graph)?.as_bytes(),
                Publish::Unsynced,
            )?;
        }
        cache.save_index();
        Ok(())
    }
}

/// A run's manifest between two nodes, written beside `manifest.json`, to be published by [`Checkpoint::write`].
#[derive(Debug)]
pub struct Checkpoint(Prepared);

impl Checkpoint {
    /// Publishes it (dropped instead, its file goes) whole but not durably (its data synced, its rename not): power loss may bring back an
    /// older manifest, never a torn one. The cache is the durable record of completed work, the manifest a
    /// view of it, written durably by [`RunDir::finish`].
    pub fn write(self) -> io::Result<()> {
        self.0.publish()
    }
}

impl Drop for RunDir {
    /// A run that ends by an error still leaves every event it had.
    fn drop(&mut self) {
        let _ = self.flush_events();
    }
}

/// The record of node `id` among `nodes`, made pending if it has none.
fn record_in<'a>(
    nodes: &'a mut BTreeMap<String, NodeRecord>,
    id: &str,
    kind: &str,
) -> &'a mut NodeRecord {
    nodes
        .entry(id.to_owned())
        .or_insert_with(|| NodeRecord::pending(kind))
}

/// Records a cache hit of `node` (its key, outputs, metrics and log) and returns its record.
fn record_hit<'a>(
    nodes: &'a mut BTreeMap<String, NodeRecord>,
    node: &str,
    kind: &str,
    hit: Hit,
) -> &'a mut NodeRecord {
    let record = record_in(nodes, node, kind);
    record.key = Some(hit.key);
    record.outputs = hit
        .outputs
        .into_iter()
        .map(|(name, blob)| (name, blob.hash))
        .collect();
    record.metrics = hit.metrics;
    if hit.log.is_some() {
        record.log = Some(format!("logs/{}.log", node_dir_name(node)));
    }
    record
}

/// What the views of a hit whose views are deferred need besides its record.
#[derive(Debug, Clone, Copy)]
struct DeferredViews {
    log: Option<Digest>,
}

/// A `node_cached` event not written yet, in half the room of an [`Event`] (whose size is its largest kind's):
/// a no-op holds one per node until the run's next other event.
#[derive(Debug)]
struct PendingHit {
    at_ms: u64,
    node: Box<str>,
    key: Digest,
}

impl PendingHit {
    fn event(self) -> Event {
        Event {
            at_ms: self.at_ms,
            kind: EventKind::NodeCached {
                node: self.node.into_string(),
                key: self.key,
            },
        }
    }
}

/// Appends `event` to `lines` as one JSON line.
fn push_line(lines: &mut Vec<u8>, event: &Event) -> io::Result<()> {
    serde_json::to_writer(&mut *lines, event).map_err(io::Error::other)?;
    lines.push(b'\n');
    Ok(())
}

/// How much of the manifest a write holds.
#[derive(Debug, Clone, Copy)]
enum ManifestForm {
    Whole,
    /// Without `params` and `nodes`: a run's first write, and a repeat's, whose records are its base run's.
    Head,
}

/// A running run's node params, in the manifest's `params`: each node's point and config, by id.
#[derive(Debug, Clone, Default)]
pub enum RunParams {
    /// Not recorded yet (written as `{}`): a run's first manifest, and a no-op that repeats the previous run
    /// and never writes its own.
    #[default]
    Unfilled,
    /// As values: read back from the manifest of a resumed run, or made for a pipeline small enough to be
    /// written indented.
    Values(BTreeMap<String, serde_json::Value>),
    /// A large pipeline's nodes in id order, their params written from the graph each time the manifest is
    /// (see [`ParamsView`]). Held as their compact JSON they were about 100 bytes a node (29 MB of a
    /// 300 000-node run, from its first checkpoint to its end); a value per node took six times that.
    Ordered(Box<[NodeIndex]>),
}

impl RunParams {
    /// The params a manifest recorded; none (a run stopped before its first checkpoint) is not filled yet.
    fn recorded(params: BTreeMap<String, serde_json::Value>) -> RunParams {
        if params.is_empty() {
            RunParams::Unfilled
        } else {
            RunParams::Values(params)
        }
    }

    /// Records every node's params from `graph`, once, before the first whole manifest is written.
    fn fill(&mut self, graph: &Graph) -> io::Result<()> {
        if !matches!(self, RunParams::Unfilled) {
            return Ok(());
        }
        let mut ids: Vec<NodeIndex> = graph.topological().to_vec();
        ids.sort_unstable_by(|&a, &b| graph.spec(a).id.cmp(&graph.spec(b).id));
        *self = if ids.len() < SMALL_PIPELINE {
            let params = ids.iter().map(|&i| {
                let spec = graph.spec(i);
                serde_json::to_value(NodeParams::of(spec)).map(|value| (spec.id.clone(), value))
            });
            RunParams::Values(params.collect::<Result<_, _>>().map_err(io::Error::other)?)
        } else {
            RunParams::Ordered(ids.into_boxed_slice())
        };
        Ok(())
    }

    /// Whether the manifest is written indented: not when it holds a large pipeline's params.
    fn is_small(&self) -> bool {
        match self {
            RunParams::Unfilled => true,
            RunParams::Values(params) => params.len() < SMALL_PIPELINE,
            RunParams::Ordered(_) => false,
        }
    }
}

impl Serialize for RunParams {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RunParams::Unfilled => serializer.serialize_map(Some(0))?.end(),
            RunParams::Values(params) => params.serialize(serializer),
            RunParams::Ordered(_) => Err(serde::ser::Error::custom(
                "params kept in id order are written with their graph",
            )),
        }
    }
}

/// A manifest's params as written: those held in id order from `graph`, the others as they are.
struct ParamsView<'a> {
    params: &'a RunParams,
    graph: Option<&'a Graph>,
}

impl Serialize for ParamsView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match (self.params, self.graph) {
            (RunParams::Ordered(ids), Some(graph)) => {
                ParamsInOrder { graph, ids }.serialize(serializer)
            }
            (params, _) => params.serialize(serializer),
        }
    }
}

/// What the manifest records as a node's params; fields in the order a JSON object's keys sort.
#[derive(Serialize)]
struct NodeParams<'a> {
    config: &'a Settings,
    point: &'a Settings,
}

impl<'a> NodeParams<'a> {
    fn of(spec: &'a NodeSpec) -> NodeParams<'a> {
        NodeParams {
            config: &spec.config,
            point: &spec.point,
        }
    }
}

/// The params of the nodes `ids` (sorted by id), as a map from id, written without a map of their own.
struct ParamsInOrder<'a> {
    graph: &'a Graph,
    ids: &'a [NodeIndex],
}

impl Serialize for ParamsInOrder<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.ids.iter().map(|&i| {
            let spec = self.graph.spec(i);
            (&spec.id, NodeParams::of(spec))
        }))
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

/// Removes a former repeat's `repeat.json` (its whole manifest has replaced the link); none is fine.
fn remove_repeat_head(files: &Files, dir: &Path) -> io::Result<()> {
    match files.remove_file(&dir.join(REPEAT_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Replaces `<base>/<link>` atomically with a link to the run `run_id`.
fn point_latest(files: &Files, base: &Path, link: &str, run_id: &str) -> io::Result<()> {
    replace_with_link(files, base, link, Path::new(run_id))
}

/// Replaces `<dir>/<name>` atomically: a new symlink to `target` under a temporary name, renamed over the old
/// file or link.
fn replace_with_link(files: &Files, dir: &Path, name: &str, target: &Path) -> io::Result<()> {
    // Unique per machine too: two engines on one project may point a link at the same moment.
    let tmp = dir.join(format!(".{name}.{}", fracflow_record::unique_suffix()));
    files.symlink(target, &tmp)?;
    files.rename(&tmp, &dir.join(name))
}

/// The facts of a plain `fracflow run` on the emulated testbed, for this crate's tests.
#[cfg(test)]
pub(crate) fn test_meta() -> RunMeta {
    RunMeta {
        engine_version: "test".to_owned(),
        command: vec!["fracflow".to_owned(), "run".to_owned()],
        host: "test-host".to_owned(),
        testbed: "emulated".to_owned(),
        variant: None,
        testbed_profile: serde_json::Value::Null,
        git: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock is moved by rewriting when the last checkpoint was made, never by sleeping.
    #[test]
    fn a_checkpoint_waits_for_its_interval_and_for_what_the_last_one_cost() -> io::Result<()> {
        let top = tempfile::tempdir()?;
        let mut run = RunDir::create(&top.path().join("results"), "test", &test_meta())?;
        let graph = Graph::default();
        let ago = |run: &mut RunDir, since: Duration| {
            run.last_manifest_write = Instant::now()
                .checked_sub(since)
                .expect("the clock is past the interval");
        };
        // Within the interval after the run's first write: none. Past it: one, which sets the spacing.
        ago(&mut run, MANIFEST_INTERVAL / 2);
        assert!(run.checkpoint(true, &graph)?.is_none());
        ago(&mut run, MANIFEST_INTERVAL);
        assert!(run.checkpoint(true, &graph)?.is_some());
        // A last checkpoint that cost a second holds the next one back for fifty, past every interval.
        run.checkpoint_spacing = Duration::from_secs(1) * CHECKPOINT_COST_FACTOR;
        ago(&mut run, HITS_MANIFEST_INTERVAL * 2);
        assert!(run.checkpoint(true, &graph)?.is_none());
        assert!(run.checkpoint(false, &graph)?.is_none());
        let spacing = run.checkpoint_spacing;
        ago(&mut run, spacing);
        assert!(run.checkpoint(true, &graph)?.is_some());
        // That one cost what an empty manifest costs: far below the interval, which governs again.
        assert!(run.checkpoint_spacing < MANIFEST_INTERVAL);
        ago(&mut run, MANIFEST_INTERVAL);
        assert!(run.checkpoint(true, &graph)?.is_some());
        Ok(())
    }

    /// A view is linked into a node folder that is new, made on the way (and the folders above it), and one
    /// already there is replaced by the new link.
    #[test]
    fn a_view_makes_its_folders_and_replaces_what_is_there() -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let top = tempfile::tempdir()?;
        let run = RunDir::create(&top.path().join("results"), "test", &test_meta())?;
        let (first, second) = (top.path().join("first"), top.path().join("second"));
        fs::write(&first, "1")?;
        fs::write(&second, "2")?;
        let view = run.dir.join("nodes/deep/node/o");
        run.link_or_copy(&first, &view)?;
        assert_eq!(fs::read_to_string(&view)?, "1");
        run.link_or_copy(&second, &view)?;
        assert_eq!(fs::read_to_string(&view)?, "2");
        assert_eq!(
            fs::metadata(&view)?.ino(),
            fs::metadata(&second)?.ino(),
            "a link"
        );
        // A second output of the same node, into the folder the first made.
        run.link_or_copy(&first, &run.dir.join("nodes/deep/node/p"))?;
        assert_eq!(fs::read_to_string(run.dir.join("nodes/deep/node/p"))?, "1");
        // A source that is not there is an error, whatever the order of the attempts.
        let missing = run.link_or_copy(&top.path().join("missing"), &run.dir.join("nodes/x/o"));
        assert_eq!(missing.map_err(|e| e.kind()), Err(io::ErrorKind::NotFound));
        Ok(())
    }

    /// Pending records are added for the nodes without one, once each, in any order given; a record already
    /// there (a resumed run's) is kept as it is.
    #[test]
    fn pending_records_are_added_once_and_existing_ones_kept() -> io::Result<()> {
        let top = tempfile::tempdir()?;
        let mut run = RunDir::create(&top.path().join("results"), "test", &test_meta())?;
        run.record_mut("p[a=5]", "command").status = NodeStatus::Built;
        let ids: Vec<String> = (0..40).rev().map(|i| format!("p[a={i}]")).collect();
        run.add_pending(
            ids.iter()
                .chain(&ids[..3])
                .map(|id| (id.as_str(), "command")),
        );
        run.add_pending(std::iter::once(("agg", "plot")));
        let nodes = &run.manifest.nodes;
        assert_eq!(nodes.len(), 41);
        assert_eq!(nodes["p[a=5]"].status, NodeStatus::Built, "kept");
        assert_eq!(nodes["p[a=39]"], NodeRecord::pending("command"));
        assert_eq!(nodes["agg"], NodeRecord::pending("plot"));
        let mut sorted = ids.clone();
        sorted.push("agg".to_owned());
        sorted.sort();
        assert!(nodes.keys().eq(sorted.iter()));
        Ok(())
    }

    /// The digest is hashed a chunk at a time: a change to any node's record, in the first chunk or the last,
    /// changes it, so a run that differs anywhere is never taken for a repeat.
    #[test]
    fn a_change_anywhere_in_a_large_run_changes_its_views_digest() -> io::Result<()> {
        let top = tempfile::tempdir()?;
        let mut run = RunDir::create(&top.path().join("results"), "test", &test_meta())?;
        let graph = Graph::default();
        let ids: Vec<String> = (0..3_000).map(|i| format!("p[a={i:04}]")).collect();
        for (i, id) in ids.iter().enumerate() {
            let record = run.record_mut(id, "command");
            record.key = Some(Digest::of(id.as_bytes()));
            record.outputs = [("o".to_owned(), Digest::of(&i.to_le_bytes()))]
                .into_iter()
                .collect();
        }
        let before = run.views_digest(&graph)?;
        assert_eq!(
            run.views_digest(&graph)?,
            before,
            "the same records, the same digest"
        );
        for id in [&ids[0], &ids[1_500], &ids[2_999]] {
            let record = run.record_mut(id, "command");
            let key = record.key;
            record.key = Some(Digest::of(b"another"));
            assert_ne!(run.views_digest(&graph)?, before, "{id} changed");
            run.record_mut(id, "command").key = key;
        }
        assert_eq!(run.views_digest(&graph)?, before);
        Ok(())
    }

    /// A large pipeline's params are written from the graph as compact JSON, a small one's held as values; in
    /// both, the manifest says what a map of each node's `{"config", "point"}` values says, byte for byte.
    #[test]
    fn params_are_written_as_a_map_of_values_says_them() -> io::Result<()> {
        for nodes in [3, SMALL_PIPELINE + 1] {
            let specs: Vec<NodeSpec> = (0..nodes)
                .rev()
                .map(|i| {
                    let mut spec = NodeSpec::for_test(&format!("p[a={i},b=x]"), &[]);
                    spec.point = Settings::from([
                        ("b".to_owned(), serde_json::json!("x")),
                        ("a".to_owned(), serde_json::json!(i)),
                    ]);
                    spec.config = Settings::from([(
                        "run".to_owned(),
                        serde_json::json!(format!("echo {i} > \"$FRACFLOW_OUT/o\"")),
                    )]);
                    spec
                })
                .collect();
            let graph = Graph::build(specs).map_err(|e| io::Error::other(format!("{e:?}")))?;
            let as_values: BTreeMap<String, serde_json::Value> = graph
                .specs()
                .map(|spec| {
                    let value = serde_json::json!({"point": spec.point, "config": spec.config});
                    (spec.id.clone(), value)
                })
                .collect();
            let mut params = RunParams::Unfilled;
            params.fill(&graph)?;
            assert_eq!(params.is_small(), nodes < SMALL_PIPELINE);
            let expected = if params.is_small() {
                serde_json::to_string_pretty(&as_values)
            } else {
                serde_json::to_string(&as_values)
            };
            let view = ParamsView {
                params: &params,
                graph: Some(&graph),
            };
            let written = if params.is_small() {
                serde_json::to_string_pretty(&view)
            } else {
                serde_json::to_string(&view)
            };
            assert_eq!(
                written.map_err(io::Error::other)?,
                expected.map_err(io::Error::other)?
            );
        }
        Ok(())
    }

    /// A large pipeline's params, kept as the nodes' id order, reach the manifest written from the graph, in
    /// a resumed run's first write, a checkpoint and the last write alike.
    #[test]
    fn a_large_pipelines_params_are_written_from_its_graph() -> io::Result<()> {
        let specs: Vec<NodeSpec> = (0..=SMALL_PIPELINE)
            .map(|i| {
                let mut spec = NodeSpec::for_test(&format!("p[a={i}]"), &[]);
                spec.point = Settings::from([("a".to_owned(), serde_json::json!(i))]);
                spec
            })
            .collect();
        let graph = Graph::build(specs).map_err(|e| io::Error::other(format!("{e:?}")))?;
        let top = tempfile::tempdir()?;
        let dir = RunDir::create(&top.path().join("results"), "test", &test_meta())?
            .dir
            .clone();
        let mut run = RunDir::resume(&dir, &graph)?;
        assert!(matches!(run.manifest.params, RunParams::Ordered(_)));
        let params = read_manifest(&dir)?.params;
        assert_eq!(params.len(), SMALL_PIPELINE + 1);
        assert_eq!(params["p[a=7]"]["point"]["a"], serde_json::json!(7));
        run.last_manifest_write = Instant::now() - Duration::from_secs(3600);
        run.checkpoint(true, &graph)?
            .ok_or_else(|| io::Error::other("no checkpoint was due"))?
            .write()?;
        assert_eq!(read_manifest(&dir)?.params, params);
        // Without the graph, such params cannot be written: an error, never a manifest without them.
        let error = run
            .write_manifest()
            .err()
            .ok_or_else(|| io::Error::other("written without the graph"))?;
        assert!(
            error
                .to_string()
                .contains("params kept in id order are written with their graph"),
            "{error}"
        );
        assert_eq!(read_manifest(&dir)?.params, params);
        Ok(())
    }

    /// A run stopped before its first checkpoint recorded no params; resumed, its manifest gets the graph's.
    /// One that recorded them keeps what it recorded.
    #[test]
    fn a_resumed_run_records_the_params_it_lacked() -> io::Result<()> {
        let top = tempfile::tempdir()?;
        let dir = RunDir::create(&top.path().join("results"), "test", &test_meta())?
            .dir
            .clone();
        let mut spec = NodeSpec::for_test("p[a=1]", &[]);
        spec.point = Settings::from([("a".to_owned(), serde_json::json!(1))]);
        let graph = Graph::build(vec![spec]).map_err(|e| io::Error::other(format!("{e:?}")))?;
        assert!(read_manifest(&dir)?.params.is_empty());
        drop(RunDir::resume(&dir, &graph)?);
        let recorded = read_manifest(&dir)?.params;
        assert_eq!(
            recorded["p[a=1]"],
            serde_json::json!({"config": {}, "point": {"a": 1}})
        );
        let other = Graph::build(vec![NodeSpec::for_test("q", &[])])
            .map_err(|e| io::Error::other(format!("{e:?}")))?;
        drop(RunDir::resume(&dir, &other)?);
        assert_eq!(read_manifest(&dir)?.params, recorded);
        Ok(())
    }

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
