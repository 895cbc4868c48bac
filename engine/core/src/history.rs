//! What earlier runs left under `results/<pipeline>/<run-id>/`: the keys the newest runs reference (what
//! `cache gc` keeps) and the output directories one run holds for a node's dependencies (what `plot`
//! re-draws from).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::graph::{Graph, NodeIndex};
use crate::run::{is_latest_link, read_manifest, view_of, views_in};
use fracflow_record::Digest;

/// The cache keys referenced by the newest `per_pipeline` runs of every pipeline under `results`.
///
/// A run counts when its directory holds a `manifest.json`; the `latest` symlinks are skipped so the run one
/// points at is not counted twice. A missing `results` folder references nothing. Run ids sort by their
/// start time (`RunDir::create` names them so), which is what "newest" means here. The run every `latest` link
/// points at ([`crate::run::latest_link`]) is kept too, however old: `fracflow plot` re-draws from it, and the
/// last full run must not lose its cache entries to a series of smoke runs.
pub fn recent_keys(results: &Path, per_pipeline: usize) -> io::Result<HashSet<Digest>> {
    let mut keep = HashSet::new();
    let pipelines = match fs::read_dir(results) {
        Ok(pipelines) => pipelines,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(keep),
        Err(e) => return Err(with_path(results, e)),
    };
    for pipeline in pipelines {
        let dir = pipeline.map_err(|e| with_path(results, e))?.path();
        if !dir.is_dir() {
            continue;
        }
        let mut runs: Vec<PathBuf> = fs::read_dir(&dir)
            .map_err(|e| with_path(&dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("manifest.json").is_file() && !p.is_symlink())
            .collect();
        runs.sort();
        let mut kept: Vec<PathBuf> = runs.iter().rev().take(per_pipeline).cloned().collect();
        for linked in latest_targets(&dir)? {
            if !kept.contains(&linked) {
                kept.push(linked);
            }
        }
        for run in &kept {
            let manifest = read_manifest(run)?;
            keep.extend(manifest.nodes.into_values().filter_map(|r| r.key));
        }
    }
    Ok(keep)
}

/// The run directories the `latest` links of one pipeline's folder point at (as `<dir>/<run-id>`, the form
/// `recent_keys` lists runs in); a link to a run that is gone points at nothing to keep.
fn latest_targets(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut targets = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| with_path(dir, e))? {
        let path = entry.map_err(|e| with_path(dir, e))?.path();
        let is_link = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(is_latest_link);
        if !is_link || !path.is_symlink() {
            continue;
        }
        let target = fs::read_link(&path).map_err(|e| with_path(&path, e))?;
        let run = dir.join(target);
        if run.join("manifest.json").is_file() {
            targets.push(run);
        }
    }
    Ok(targets)
}

/// A dependency whose outputs the run directory does not hold.
#[derive(Debug, thiserror::Error)]
#[error("the run {run} has no outputs of `{dependency}` at {missing} (did that run finish?)")]
pub struct MissingOutputs {
    pub run: PathBuf,
    pub dependency: String,
    pub missing: PathBuf,
}

/// The output directories that the run in `run_dir` holds for each dependency of `node`, in the order
/// `Graph::dependencies` yields them.
pub fn dependency_outputs(
    run_dir: &Path,
    graph: &Graph,
    node: NodeIndex,
) -> Result<Vec<PathBuf>, MissingOutputs> {
    graph
        .dependencies(node)
        .map(|dependency| {
            let id = &graph.spec(dependency).id;
            let dir = view_of(&views_in(run_dir), id);
            if dir.is_dir() {
                Ok(dir)
            } else {
                Err(MissingOutputs {
                    run: run_dir.to_owned(),
                    dependency: id.clone(),
                    missing: dir,
                })
            }
        })
        .collect()
}

fn with_path(path: &Path, error: io::Error) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::run::{RunDir, test_meta};
    use crate::spec::NodeSpec;

    /// The key a test names `name`.
    fn key(name: &str) -> Digest {
        Digest::of(name.as_bytes())
    }

    /// One run of `pipeline` whose node `a` has the key named `name`.
    fn run_with_key(results: &Path, pipeline: &str, name: &str) -> io::Result<PathBuf> {
        let mut run = RunDir::create(results, pipeline, &test_meta())?;
        run.record_mut("a", "command").key = Some(key(name));
        run.write_manifest()?;
        Ok(run.dir().to_owned())
    }

    #[test]
    fn keeps_the_keys_of_the_newest_runs_of_each_pipeline() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let results = dir.path().join("results");
        for key in ["old", "middle", "new"] {
            run_with_key(&results, "demo", key)?;
        }
        run_with_key(&results, "other", "other-only")?;
        let keep = recent_keys(&results, 2)?;
        let expected: HashSet<Digest> = ["middle", "new", "other-only"]
            .into_iter()
            .map(key)
            .collect();
        assert_eq!(keep, expected, "the oldest run of demo is not kept");
        Ok(())
    }

    #[test]
    fn keeps_the_run_each_latest_link_points_at_however_old() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let results = dir.path().join("results");
        let full = run_with_key(&results, "demo", "full")?;
        let mut smoke = test_meta();
        smoke.variant = Some("smoke".to_owned());
        for name in ["smoke-1", "smoke-2", "smoke-3"] {
            let mut run = RunDir::create(&results, "demo", &smoke)?;
            run.record_mut("a", "command").key = Some(key(name));
            run.write_manifest()?;
        }
        assert!(
            fs::read_link(results.join("demo/latest"))?
                .ends_with(full.file_name().ok_or_else(|| io::Error::other("run id"))?),
            "smoke runs leave `latest` alone"
        );
        let keep = recent_keys(&results, 1)?;
        let expected: HashSet<Digest> = ["full", "smoke-3"].into_iter().map(key).collect();
        assert_eq!(
            keep, expected,
            "the newest run, and the full run `latest` names"
        );
        Ok(())
    }

    #[test]
    fn no_results_folder_references_nothing() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        assert!(recent_keys(&dir.path().join("results"), 5)?.is_empty());
        Ok(())
    }

    #[test]
    fn an_unreadable_manifest_is_an_error_that_names_it() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let run = dir.path().join("results/demo/2026-01-01T000000");
        fs::create_dir_all(&run)?;
        fs::write(run.join("manifest.json"), b"{ not json")?;
        let error = recent_keys(&dir.path().join("results"), 5).expect_err("corrupt manifest");
        assert!(
            error.to_string().contains("manifest.json"),
            "names the file: {error}"
        );
        Ok(())
    }

    #[test]
    fn dependency_outputs_lists_each_dependency_or_names_the_missing_one() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let graph = Graph::build(vec![
            NodeSpec::for_test("a", &[]),
            NodeSpec::for_test("b/x", &[]),
            NodeSpec::for_test("plot", &["a", "b/x"]),
        ])
        .map_err(|e| io::Error::other(format!("{e:?}")))?;
        let plot = graph
            .index("plot")
            .ok_or_else(|| io::Error::other("no plot"))?;
        fs::create_dir_all(dir.path().join("nodes/a"))?;
        let missing = dependency_outputs(dir.path(), &graph, plot).expect_err("b/x has no outputs");
        assert_eq!(missing.dependency, "b/x");
        assert_eq!(missing.missing, dir.path().join("nodes/b_x"));
        assert!(
            missing.to_string().contains("did that run finish?"),
            "{missing}"
        );

        fs::create_dir_all(dir.path().join("nodes/b_x"))?;
        let mut found = dependency_outputs(dir.path(), &graph, plot).map_err(io::Error::other)?;
        found.sort();
        assert_eq!(
            found,
            vec![dir.path().join("nodes/a"), dir.path().join("nodes/b_x")]
        );
        Ok(())
    }
}
