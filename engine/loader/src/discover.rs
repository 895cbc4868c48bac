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
    // The file alone first: a node set is skipped, a broken file is listed. The tree parsed here is the one
    // merged over its bases, and the one a load of this file on this thread takes: parsing a 10 000-node file
    // is most of what discovering it costs.
    let parsed = loader
        .src
        .read(&path)
        .map_err(|error| {
            Box::new(crate::Diagnostic::new(format!(
                "cannot read `{}`: {error}",
                path.display()
            )))
        })
        .and_then(|file| Ok((file, loader.src.parse_and_keep(file)?)));
    let (file, own) = match parsed {
        Ok(parsed) => parsed,
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
    let Some(tree) = loader.with_base(&path, file, own, &mut Vec::new()) else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::PARSES;

    /// Discovering a pipeline parses its file once, base merging included: the second parse it made was a
    /// quarter of the instructions of a `fracflow plan` of a 10 000-node file without a load memo.
    #[test]
    fn a_pipeline_file_is_parsed_once() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let pipelines = dir.path().join("pipelines");
        std::fs::create_dir_all(&pipelines).expect("pipelines directory");
        std::fs::write(
            pipelines.join("demo.yaml"),
            "pipeline: demo\ndescription: the demo\ntargets: {all: [gen]}\nnodes: {}\n",
        )
        .expect("pipeline file");
        PARSES.with(|parses| parses.set(0));
        let found = discover(dir.path());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].description.as_deref(), Some("the demo"));
        assert_eq!(found[0].targets, ["all"]);
        assert_eq!(PARSES.with(std::cell::Cell::get), 1);
    }

    /// Loading a pipeline just discovered takes the tree the discovery parsed, and only while the file is as
    /// it was: a file changed in between is parsed again.
    #[test]
    fn a_load_after_a_discovery_parses_the_file_no_more() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let pipelines = dir.path().join("pipelines");
        std::fs::create_dir_all(&pipelines).expect("pipelines directory");
        let text = "pipeline: demo\nnodes:\n  gen:\n    kind: command\n    run: 'echo {x}'\n";
        std::fs::write(pipelines.join("other.yaml"), "pipeline: other\nnodes: {}\n")
            .expect("pipeline file");
        std::fs::write(pipelines.join("demo.yaml"), text).expect("pipeline file");
        let load = |path: &std::path::Path| {
            let opts = LoadOptions {
                root: dir.path().to_path_buf(),
                ..LoadOptions::default()
            };
            crate::load(path, &opts, &crate::NoKinds)
        };
        PARSES.with(|parses| parses.set(0));
        let found = discover(dir.path());
        let demo = found.iter().find(|e| e.name == "demo").expect("demo found");
        assert_eq!(PARSES.with(std::cell::Cell::get), 2, "one parse a file");
        // The tree kept is the file's, positions and all: an error points where a fresh parse would.
        let problems = load(&demo.path).expect_err("`{x}` names no param");
        assert_eq!(
            PARSES.with(std::cell::Cell::get),
            2,
            "the load parsed again"
        );
        let shown = problems.to_string();
        assert!(shown.contains("demo.yaml:5:"), "{shown}");
        // Changed after the discovery: parsed again, the change seen. (The other file changes too, so that
        // the discovery is not taken from its memo.)
        std::fs::write(
            pipelines.join("other.yaml"),
            "pipeline: other\nnodes: {}\n# new\n",
        )
        .expect("pipeline file");
        PARSES.with(|parses| parses.set(0));
        let found = discover(dir.path());
        let demo = found.iter().find(|e| e.name == "demo").expect("demo found");
        std::fs::write(&demo.path, text.replace("{x}", "hi")).expect("pipeline file");
        let problems = load(&demo.path).map_or_else(|p| p.to_string(), |_| String::new());
        assert!(
            !problems.contains("`x`"),
            "the old text was loaded: {problems}"
        );
        assert_eq!(
            PARSES.with(std::cell::Cell::get),
            3,
            "the changed file was not parsed"
        );
    }
}
