//! Finding the project, the pipeline a name refers to, and the cache and lock directories; opening the
//! project (cache, testbed, kinds) and loading the selected pipeline.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fracflow_core::graph::NodeIndex;
use fracflow_core::{Cache, Engine, StatCache};
use fracflow_executors::Registry;
use fracflow_executors::images::ImageChoice;
use fracflow_executors::testbed::{Session, TestbedProfile};
use fracflow_loader::{LoadOptions, Loaded};

use crate::cli::RemoteFlags;
use crate::error::{Error, Result};
use crate::select::Select;
use fracflow_core::remote::{RemoteMode, RemoteTier, UploadPolicy};

/// The project root: `--root`, else `FRACFLOW_ROOT`, else the nearest ancestor of the current directory
/// that holds a `pipelines/` folder.
pub fn find_root(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(root) = explicit
        .map(Path::to_owned)
        .or_else(|| std::env::var_os("FRACFLOW_ROOT").map(PathBuf::from))
    {
        return root
            .canonicalize()
            .map_err(|e| Error::io("cannot open the project root", &root, e));
    }
    let start = std::env::current_dir()
        .map_err(|e| Error::io("cannot read the current directory", Path::new("."), e))?;
    for dir in start.ancestors() {
        if dir.join("pipelines").is_dir() {
            return Ok(dir.to_owned());
        }
    }
    Err(Error::bad_input_with_hint(
        format!(
            "no fracflow project here: no `pipelines/` folder in {} or above",
            start.display()
        ),
        "run fracflow inside a project, or name one with --root or FRACFLOW_ROOT",
    ))
}

/// What a TARGET argument resolved to: the pipeline file and the target within it (None: every node).
#[derive(Debug, Clone)]
pub struct Selection {
    pub file: PathBuf,
    pub target: Option<String>,
}

/// Resolves TARGET: a YAML path, a pipeline name, `pipeline:target`, or a target name unique across pipelines.
pub fn resolve(root: &Path, name: &str) -> Result<Selection> {
    let as_path = Path::new(name);
    if name.ends_with(".yaml") || name.ends_with(".yml") {
        let file = if as_path.is_absolute() {
            as_path.to_owned()
        } else {
            std::env::current_dir()
                .map_err(|e| Error::io("cannot read the current directory", Path::new("."), e))?
                .join(as_path)
        };
        if !file.is_file() {
            return Err(Error::bad_input(format!(
                "pipeline file {} does not exist",
                file.display()
            )));
        }
        return Ok(Selection { file, target: None });
    }
    let entries = fracflow_loader::discover(root);
    let (pipeline, target) = match name.split_once(':') {
        Some((p, t)) => (Some(p), Some(t)),
        None => (None, None),
    };
    if let (Some(pipeline), Some(target)) = (pipeline, target) {
        let entry = entries.iter().find(|e| e.name == pipeline).ok_or_else(|| {
            Error::bad_input(format!(
                "no pipeline named `{pipeline}` under {}",
                root.join("pipelines").display()
            ))
        })?;
        if !entry.targets.iter().any(|t| t == target) {
            return Err(Error::bad_input(format!(
                "pipeline `{pipeline}` has no target `{target}`; it has: {}",
                entry.targets.join(", ")
            )));
        }
        return Ok(Selection {
            file: entry.path.clone(),
            target: Some(target.to_owned()),
        });
    }
    if let Some(entry) = entries.iter().find(|e| e.name == name) {
        return Ok(Selection {
            file: entry.path.clone(),
            target: None,
        });
    }
    let owners: Vec<_> = entries
        .iter()
        .filter(|e| e.targets.iter().any(|t| t == name))
        .collect();
    match owners.as_slice() {
        [one] => Ok(Selection {
            file: one.path.clone(),
            target: Some(name.to_owned()),
        }),
        [] => {
            let mut known: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
            known.extend(entries.iter().flat_map(|e| e.targets.iter().cloned()));
            known.sort();
            known.dedup();
            Err(Error::bad_input(format!(
                "`{name}` is neither a pipeline nor a target; known: {}",
                known.join(", ")
            )))
        }
        many => Err(Error::bad_input(format!(
            "target `{name}` is defined by several pipelines ({}); write PIPELINE:{name}",
            many.iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The cache directory: `--cache`, else `FRACFLOW_CACHE`, else `<root>/.fracflow/cache`.
pub fn cache_dir(root: &Path, explicit: Option<&Path>) -> PathBuf {
    explicit
        .map(Path::to_owned)
        .or_else(|| std::env::var_os("FRACFLOW_CACHE").map(PathBuf::from))
        .unwrap_or_else(|| root.join(".fracflow").join("cache"))
}

/// Where testbed locks live: `FRACFLOW_LOCK_DIR`, else the system temporary directory, so every checkout on
/// this machine shares them (a board is a machine-wide resource).
pub fn lock_dir() -> PathBuf {
    std::env::var_os("FRACFLOW_LOCK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// Whether this process may create files in the directory `dir`, found by creating and removing one (the
/// permission bits do not tell: root ignores them, and a read-only mount keeps them). The name holds the pid
/// and the time in nanoseconds and is created exclusively, so engines on other hosts probing a shared cache
/// at once do not take each other's probe.
pub fn check_writable(dir: &Path) -> std::io::Result<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let probe = dir.join(format!(
        ".fracflow-write-test-{}-{nanos}",
        std::process::id()
    ));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// A project opened for a command: its root, cache and kinds, and the testbed when the command runs on one.
#[derive(Debug)]
pub struct Project {
    pub root: PathBuf,
    pub cache: Cache,
    pub stat: StatCache,
    testbed: Option<Testbed>,
    pub kinds: Registry,
}

/// The testbed a command works on: its profile, and the session that drives its device during a run.
#[derive(Debug)]
pub struct Testbed {
    pub name: String,
    pub profile: TestbedProfile,
    pub session: Arc<Session>,
    /// What the image source chose for the loaded pipeline (set by `Project::load`).
    images: std::sync::Mutex<Option<ImageChoice>>,
}

impl Testbed {
    pub fn open(root: &Path, name: &str) -> Result<Testbed> {
        let profile =
            fracflow_executors::testbed::load_profile(root, name).map_err(Error::bad_input)?;
        Ok(Testbed {
            name: name.to_owned(),
            session: Arc::new(Session::new(name, profile.clone())),
            profile,
            images: std::sync::Mutex::new(None),
        })
    }

    /// The image source's choice for the loaded pipeline: what `plan` shows and the manifest records.
    pub fn images(&self) -> Option<ImageChoice> {
        self.images
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The testbed fields that enter the keys of nodes touching the device. A board taken as programmed
    /// (`--no-program`) may hold anything: its measurements are not those of a programmed one.
    pub fn fingerprint_fields(&self) -> BTreeMap<String, serde_json::Value> {
        let mut fields = fracflow_executors::testbed::fingerprint_fields(&self.name, &self.profile);
        if self.images().is_some_and(|c| c.no_program) {
            fields.insert("programmed".to_owned(), serde_json::json!(false));
        }
        fields
    }

    /// The profile as used, for the manifest: kind, adaptation and the params it lowered.
    pub fn as_used(&self, adapted: &[fracflow_loader::Adaptation]) -> serde_json::Value {
        serde_json::json!({
            "kind": self.profile.kind.as_str(),
            "description": self.profile.description,
            "adapt": self.profile.adapt,
            "client_threads": self.profile.adapt.client_threads(),
            "lowered_params": adapted,
            "images": self.images(),
        })
    }

    /// What the testbed changes in a run, in words, one line each (empty when nothing).
    pub fn adaptation_lines(&self, adapted: &[fracflow_loader::Adaptation]) -> Vec<String> {
        let adapt = &self.profile.adapt;
        let mut lines: Vec<String> = adapted
            .iter()
            .map(|a| format!("param {}: {} → {}", a.param, a.from, a.to))
            .collect();
        if let Some(threads) = adapt.client_threads() {
            lines.push(format!(
                "clients: at most {threads} thread(s) per client process; more clients become connections on them"
            ));
        }
        if !adapt.pin {
            lines.push("client threads are not pinned".to_owned());
        }
        lines.extend(adapt.notes.iter().cloned());
        lines
    }
}

impl Project {
    /// The project; with `testbed`, ready to run on that profile (its device starts only when a node needs it).
    pub fn open(
        cli_root: Option<&Path>,
        cli_cache: Option<&Path>,
        testbed: Option<&str>,
    ) -> Result<Project> {
        let root = find_root(cli_root)?;
        let testbed = testbed.map(|name| Testbed::open(&root, name)).transpose()?;
        let kinds = match &testbed {
            Some(t) => Registry::for_testbed(Arc::clone(&t.session)),
            None => Registry::builtin(),
        };
        let cache_dir = cache_dir(&root, cli_cache);
        let cache = Cache::open(&cache_dir)
            .map_err(|e| Error::io("cannot open the cache", &cache_dir, e))?;
        let stat = StatCache::load(&cache.stat_cache_file());
        Ok(Project {
            root,
            cache,
            stat,
            testbed,
            kinds,
        })
    }

    /// The project with the remote cache tier the flags, `FRACFLOW_REMOTE_CACHE*` or the testbed profile name
    /// (in that order), if any. A URL that cannot be used is an error; a remote that fails later only warns.
    pub fn with_remote(mut self, flags: &RemoteFlags) -> Result<Project> {
        let profile = self
            .testbed
            .as_ref()
            .and_then(|t| t.profile.remote_cache.clone())
            .unwrap_or_default();
        let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let Some(url) = flags
            .remote_cache
            .clone()
            .or_else(|| from_env("FRACFLOW_REMOTE_CACHE"))
            .or(profile.url)
        else {
            return Ok(self);
        };
        let mode = match flags
            .remote_cache_mode
            .clone()
            .or_else(|| from_env("FRACFLOW_REMOTE_CACHE_MODE"))
            .or(profile.mode)
            .as_deref()
        {
            None | Some("read-write") => RemoteMode::ReadWrite,
            Some("read") => RemoteMode::Read,
            Some(other) => {
                return Err(Error::bad_input(format!(
                    "remote cache mode `{other}` is neither `read` nor `read-write`"
                )));
            }
        };
        let mut policy = UploadPolicy::default();
        if let Some(mib) = flags.remote_cache_max_upload.or(profile.max_upload_mib) {
            policy.max_entry_bytes = mib.saturating_mul(1 << 20);
        }
        policy.skip_kinds = profile
            .skip_kinds
            .into_iter()
            .chain(flags.remote_cache_skip_kind.iter().cloned())
            .collect();
        let store = fracflow_remote::open(&url).map_err(|e| Error::bad_input(e.to_string()))?;
        // The engine does not print: the tier's warnings reach the terminal here.
        let warn: Arc<dyn Fn(&str) + Send + Sync> =
            Arc::new(|message: &str| eprintln!("warning: {message}"));
        let tier = RemoteTier::new(Arc::new(store), mode, policy, warn);
        self.cache = self.cache.with_remote(Arc::new(tier));
        Ok(self)
    }

    /// The testbed the project was opened with.
    pub fn testbed(&self) -> Result<&Testbed> {
        self.testbed.as_ref().ok_or_else(|| {
            Error::internal(
                "the project was opened without a testbed",
                "a command that runs nodes needs one",
            )
        })
    }

    pub fn engine(&self) -> Engine<'_> {
        Engine {
            root: &self.root,
            cache: &self.cache,
            stat: &self.stat,
            kinds: &self.kinds,
        }
    }

    /// Loads the pipeline `select` names, with its variant, filters, overrides and the testbed's adaptation,
    /// and the nodes its target asks for.
    pub fn load(&self, select: &Select) -> Result<(Loaded, Vec<NodeIndex>)> {
        let selection = resolve(&self.root, &select.target)?;
        let (caps, overrides) = self
            .testbed
            .as_ref()
            .map(|t| (t.profile.adapt.caps.clone(), t.profile.adapt.set.clone()))
            .unwrap_or_default();
        let options = LoadOptions {
            root: self.root.clone(),
            variant: select.variant(),
            only: select.only_filters()?,
            set: select.overrides()?,
            caps,
            overrides,
        };
        let mut loaded = fracflow_loader::load(&selection.file, &options, &self.kinds)?;
        let mut targets = target_nodes(&loaded, selection.target.as_deref())?;
        if let Some(testbed) = &self.testbed {
            let needed: BTreeSet<String> = loaded
                .graph
                .closure(&targets)
                .into_iter()
                .map(|index| loaded.graph.spec(index).id.to_string())
                .collect();
            let choice = fracflow_executors::images::apply(
                &self.root,
                &testbed.name,
                testbed.profile.kind,
                &testbed.profile.images(),
                &select.images.overrides()?,
                &mut loaded.graph,
                &needed,
                Some(&testbed.session),
            )
            .map_err(|refusals| refused_images(&testbed.name, &refusals))?;
            if choice.rewrote_pipeline {
                targets = target_nodes(&loaded, selection.target.as_deref())?;
            }
            *testbed.images.lock().unwrap_or_else(|e| e.into_inner()) = Some(choice);
        }
        if loaded.graph.len() >= RELEASE_AFTER_LOAD_NODES {
            release_freed_memory();
        }
        Ok((loaded, targets))
    }
}

/// From this many nodes, what loading freed is handed back before the run (see [`release_freed_memory`]). At
/// 100 000 nodes that took a no-op's peak RSS from 232 to 216 MiB at the same speed; at 10 000 the no-op was
/// 5 % slower and its peak no lower (the pages handed back are faulted in again).
const RELEASE_AFTER_LOAD_NODES: usize = 50_000;

/// Hands back to the system the pages this thread freed while loading: a large pipeline's memo (12 MB at
/// 100 000 nodes), its nodes as loaded before they moved into the graph (30 MB) and the loader's scratch.
/// mimalloc keeps a thread's freed pages for that thread to reuse, and the run allocates on its own threads,
/// so they stayed in the process's memory to its end.
fn release_freed_memory() {
    // SAFETY: `mi_collect` takes no pointers; it frees or purges what the calling thread's heap no longer
    // uses. Where mimalloc is not the global allocator (the library's tests) it has nothing to release.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// Every image the testbed must not get, at once, before anything runs (exit 2).
fn refused_images(testbed: &str, refusals: &[String]) -> Error {
    let mut message = format!(
        "testbed `{testbed}`: {} refused before anything runs:",
        if refusals.len() == 1 {
            "an image is"
        } else {
            "images are"
        }
    );
    for refusal in refusals {
        message.push_str("\n  - ");
        message.push_str(refusal);
    }
    Error::bad_input_with_hint(
        message,
        "a board gets only real Xilinx bitstreams whose sha256 is pinned in bitstreams/ (docs/frac.md §4.2)",
    )
}

/// The node indices a target names, or every node.
fn target_nodes(loaded: &Loaded, target: Option<&str>) -> Result<Vec<NodeIndex>> {
    let graph = &loaded.graph;
    match target {
        None => Ok(graph.topological().to_vec()),
        Some(name) => {
            let ids = loaded.pipeline.targets.get(name).ok_or_else(|| {
                Error::bad_input(format!(
                    "pipeline `{}` has no target `{name}`",
                    loaded.pipeline.name
                ))
            })?;
            Ok(ids.iter().filter_map(|id| graph.index(id)).collect())
        }
    }
}
