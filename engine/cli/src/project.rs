//! Finding the project, the pipeline a name refers to, and the cache and lock directories.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The project root: `--root`, else `FRACFLOW_ROOT`, else the nearest ancestor of the current directory
/// that holds a `pipelines/` folder.
pub fn find_root(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(root) = explicit
        .map(Path::to_owned)
        .or_else(|| std::env::var_os("FRACFLOW_ROOT").map(PathBuf::from))
    {
        return root
            .canonicalize()
            .with_context(|| format!("project root {}", root.display()));
    }
    let start = std::env::current_dir().context("current directory")?;
    for dir in start.ancestors() {
        if dir.join("pipelines").is_dir() {
            return Ok(dir.to_owned());
        }
    }
    bail!(
        "no fracflow project here: no `pipelines/` folder in {} or above (set --root)",
        start.display()
    )
}

/// What a TARGET argument resolved to: the pipeline file and the target within it (None: every node).
#[derive(Debug, Clone)]
pub struct Selection {
    pub file: PathBuf,
    pub target: Option<String>,
}

/// Resolves TARGET: a YAML path, a pipeline name, `pipeline:target`, or a target name unique across pipelines.
pub fn resolve(root: &Path, name: &str) -> anyhow::Result<Selection> {
    let as_path = Path::new(name);
    if name.ends_with(".yaml") || name.ends_with(".yml") {
        let file = if as_path.is_absolute() {
            as_path.to_owned()
        } else {
            std::env::current_dir()?.join(as_path)
        };
        if !file.is_file() {
            bail!("pipeline file {} does not exist", file.display());
        }
        return Ok(Selection { file, target: None });
    }
    let entries = fracflow_loader::discover(root);
    let (pipeline, target) = match name.split_once(':') {
        Some((p, t)) => (Some(p), Some(t)),
        None => (None, None),
    };
    if let (Some(pipeline), Some(target)) = (pipeline, target) {
        let entry = entries
            .iter()
            .find(|e| e.name == pipeline)
            .with_context(|| {
                format!(
                    "no pipeline named `{pipeline}` under {}",
                    root.join("pipelines").display()
                )
            })?;
        if !entry.targets.iter().any(|t| t == target) {
            bail!(
                "pipeline `{pipeline}` has no target `{target}`; it has: {}",
                entry.targets.join(", ")
            );
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
            bail!(
                "`{name}` is neither a pipeline nor a target; known: {}",
                known.join(", ")
            )
        }
        many => bail!(
            "target `{name}` is defined by several pipelines ({}); write PIPELINE:{name}",
            many.iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
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
