//! Finding the pipelines of a project: every `pipelines/**/*.yaml` with a `pipeline:` key.

use std::path::{Path, PathBuf};

use crate::LoadOptions;
use crate::diag::Diagnostics;
use crate::load::Loader;

/// A pipeline file found by [`discover`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PipelineEntry {
    /// The `pipeline:` name (the file stem when the file could not be read).
    pub name: String,
    /// Absolute path of the file.
    pub path: PathBuf,
    pub description: Option<String>,
    /// Target names, including those inherited through `base:`.
    pub targets: Vec<String>,
    /// Why the file (or its `base:` chain) could not be read; the other files are unaffected.
    #[serde(skip)]
    pub problems: Option<Diagnostics>,
}

/// Every pipeline under `root/pipelines` (recursively), sorted by path. Files without `pipeline:` (node sets)
/// are skipped; a file that does not parse is listed with its problems, without stopping the others.
pub fn discover(root: &Path) -> Vec<PipelineEntry> {
    let Ok(root) = std::fs::canonicalize(root) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    collect_yaml(&root.join("pipelines"), &mut files);
    files.sort();
    if let Some(entries) = crate::memo::recall_discovery(&root, &files) {
        return entries;
    }
    let entries: Vec<PipelineEntry> = files
        .iter()
        .cloned()
        .filter_map(|path| inspect(&root, path))
        .collect();
    crate::memo::remember_discovery(&root, &files, &entries);
    entries
}

fn collect_yaml(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if hidden {
            continue;
        }
        if path.is_dir() {
            collect_yaml(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

fn inspect(root: &Path, path: PathBuf) -> Option<PipelineEntry> {
    let opts = LoadOptions {
        root: root.to_path_buf(),
        ..LoadOptions::default()
    };
    let mut loader = Loader::new(root.to_path_buf(), &opts, &crate::NoKinds);
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut entry = PipelineEntry {
        name: stem,
        path: path.clone(),
        description: None,
        targets: Vec::new(),
        problems: None,
    };
    // The file alone first: a node set is skipped, a broken file is listed.
    let own = match loader.src.read(&path) {
        Ok(file) => loader.src.parse(file),
        Err(error) => Err(Box::new(crate::Diagnostic::new(format!(
            "cannot read `{}`: {error}",
            path.display()
        )))),
    };
    let own = match own {
        Ok(own) => own,
        Err(diagnostic) => {
            entry.problems = Some((*diagnostic).into());
            return Some(entry);
        }
    };
    let name = own.get("pipeline")?;
    match name.as_str() {
        Some(name) => entry.name = name.to_owned(),
        None => {
            loader.error(name.loc, "`pipeline:` must be a name", None);
            entry.problems = Some(loader.finish());
            return Some(entry);
        }
    }
    let Some(tree) = loader.load_with_base(&path, None, &mut Vec::new()) else {
        entry.problems = Some(loader.finish());
        return Some(entry);
    };
    entry.description = tree
        .get("description")
        .and_then(|d| d.as_str())
        .map(str::to_owned);
    if let Some(targets) = tree.get("targets") {
        entry.targets = targets
            .entries()
            .iter()
            .filter_map(|(k, _)| k.as_str().map(str::to_owned))
            .collect();
    }
    Some(entry)
}
