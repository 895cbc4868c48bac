//! The trace a `measure` node replays (`trace:`): a file in the artifact's `processed_trace.csv` format
//! (docs/frac.md §7), an input of the node hashed into its key, or, only where the testbed profile allows it
//! (`adapt.synthetic_trace`), a synthetic trace of the same shape.
//!
//! Which one is used: the file whenever it exists, on every profile, so a researcher who puts the real trace
//! in place gets it replayed on the emulated device too; the synthetic trace only when the file is absent (or
//! not named) and the profile allows it. The key says which: the file's hash is among the node's inputs
//! ([`implied_input`]) exactly when the file is replayed. The `trace` label of the point says it as well:
//! `synthetic`, or the config's `name` (`azure-2021`).

use std::path::{Component, Path, PathBuf};

use fracflow_core::{ConfigProblem, PathSegment};

use crate::measure::TraceConfig;

/// The `trace` label of a point replaying a synthetic trace; figures are marked when they show one.
pub const SYNTHETIC_LABEL: &str = "synthetic";

/// Where the real trace comes from, for messages.
const ARTIFACT_TRACE: &str = "the artifact's `eval/azure_trace/processed_trace.csv` (from \
                              frac_evaluation_script, docs/frac.md §7)";

/// The trace a node replays, ready for the client.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// The `trace.csv` written into the node's outputs.
    pub path: PathBuf,
    /// The point's `trace` label.
    pub label: String,
    /// Rows in it.
    pub rows: usize,
}

fn at_file(message: String) -> ConfigProblem {
    ConfigProblem::at(
        vec![
            PathSegment::Key("trace".to_owned()),
            PathSegment::Key("file".to_owned()),
        ],
        message,
    )
}

/// A project-relative path that stays inside the project: no root, no `..`.
fn inside_project(file: &str) -> bool {
    !file.is_empty()
        && Path::new(file)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// Problems of the `trace` section judged without the project: it names a file or a row count, and the file
/// is a project-relative path.
pub fn shape_problems(trace: &TraceConfig) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    match &trace.file {
        None if trace.rows.is_none() => problems.push(
            ConfigProblem::key(
                "trace",
                "`trace` names neither a `file` to replay nor the `rows` of a synthetic one",
            )
            .with_hint(Some(format!(
                "e.g. `trace: {{file: eval/azure_trace/processed_trace.csv, name: azure-2021}}`: {ARTIFACT_TRACE}"
            ))),
        ),
        Some(file) if !inside_project(file) => problems.push(
            at_file(format!(
                "trace file `{file}` must be a relative path inside the project"
            ))
            .with_hint(Some(
                "paths are relative to the project root; `..` and absolute paths are not allowed".to_owned(),
            )),
        ),
        _ => {}
    }
    problems
}

/// The trace file when the node will replay it (it exists): an input of the node, hashed into its key.
pub fn implied_input(trace: &TraceConfig, root: &Path) -> Option<String> {
    let file = trace.file.as_deref().filter(|f| inside_project(f))?;
    root.join(file).is_file().then(|| file.to_owned())
}

/// Problems judged against the project and the testbed before anything runs: a file that does not parse (its
/// line named), and a missing file or a synthetic trace where `testbed` (its name, and whether it allows
/// synthetic traces) does not allow one.
pub fn project_problems(
    trace: &TraceConfig,
    root: &Path,
    testbed: Option<(&str, bool)>,
) -> Vec<ConfigProblem> {
    let synthetic_allowed = testbed.is_none_or(|(_, allowed)| allowed);
    let testbed_name = testbed.map_or("", |(name, _)| name);
    match &trace.file {
        Some(file) if inside_project(file) => {
            let path = root.join(file);
            if path.is_file() {
                return match fracflow_client::read_trace(&path) {
                    Ok(_) => Vec::new(),
                    Err(error) => vec![at_file(format!("trace file `{file}`: {error}"))],
                };
            }
            if synthetic_allowed && trace.rows.is_some() {
                return Vec::new();
            }
            let why = if synthetic_allowed {
                "and `trace` has no `rows` for a synthetic trace instead".to_owned()
            } else {
                format!("and testbed `{testbed_name}` replays only a real trace")
            };
            vec![
                at_file(format!("trace file `{file}` does not exist, {why}")).with_hint(Some(
                    format!(
                        "put {ARTIFACT_TRACE} at {}; a synthetic trace is replayed only on a profile with \
                         `adapt: {{synthetic_trace: true}}`",
                        path.display()
                    ),
                )),
            ]
        }
        // A bad path is a shape problem, reported already.
        Some(_) => Vec::new(),
        None if synthetic_allowed => Vec::new(),
        None => vec![
            ConfigProblem::key(
                "trace",
                format!("testbed `{testbed_name}` replays only a real trace, and `trace` names no `file`"),
            )
            .with_hint(Some(format!(
                "name {ARTIFACT_TRACE} in `trace.file`, placed under the project root"
            ))),
        ],
    }
}

/// Writes the trace the node replays into `out_dir/trace.csv`: the file's first `rows` rows when it exists,
/// else a synthetic trace when `synthetic_allowed`.
pub fn prepare(
    trace: &TraceConfig,
    root: &Path,
    synthetic_allowed: bool,
    out_dir: &Path,
) -> Result<Prepared, String> {
    let path = out_dir.join("trace.csv");
    let write = |text: String| {
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    };
    let limit = trace.rows.map(|rows| rows.0 as usize);
    if let Some(file) = implied_input(trace, root) {
        let mut rows = fracflow_client::read_trace(&root.join(&file))
            .map_err(|e| format!("trace file `{file}`: {e}"))?;
        rows.truncate(limit.unwrap_or(usize::MAX));
        write(fracflow_client::format_trace(&rows))?;
        return Ok(Prepared {
            path,
            label: trace.name.clone().unwrap_or_else(|| "file".to_owned()),
            rows: rows.len(),
        });
    }
    let (Some(rows), true) = (limit, synthetic_allowed) else {
        return Err(match &trace.file {
            Some(file) => format!(
                "trace file `{file}` does not exist, and this testbed replays only a real trace: put \
                 {ARTIFACT_TRACE} there"
            ),
            None => {
                "this testbed replays only a real trace, and `trace` names no `file`".to_owned()
            }
        });
    };
    write(fracflow_client::synthetic_trace(rows, trace.seed))?;
    Ok(Prepared {
        path,
        label: SYNTHETIC_LABEL.to_owned(),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Count;

    fn config(file: Option<&str>, rows: Option<u32>) -> TraceConfig {
        TraceConfig {
            file: file.map(str::to_owned),
            name: Some("azure-2021".to_owned()),
            rows: rows.map(Count),
            seed: 3,
        }
    }

    const TRACE: &str =
        "app,sleep_time,request_size,response_size\n1,0,512,64\n3,0.5,1024,1024\n2,0,24576,64\n";

    #[test]
    fn the_file_is_replayed_when_present_whatever_the_profile() {
        let root = tempfile::tempdir().expect("tempdir");
        let out = tempfile::tempdir().expect("tempdir");
        std::fs::write(root.path().join("t.csv"), TRACE).expect("write");
        let trace = config(Some("t.csv"), Some(2));
        assert_eq!(implied_input(&trace, root.path()).as_deref(), Some("t.csv"));
        for allowed in [true, false] {
            let prepared = prepare(&trace, root.path(), allowed, out.path()).expect("prepared");
            assert_eq!((prepared.label.as_str(), prepared.rows), ("azure-2021", 2));
            let written = std::fs::read_to_string(&prepared.path).expect("trace.csv");
            assert_eq!(
                fracflow_client::parse_trace(&written).expect("parses"),
                fracflow_client::parse_trace(TRACE).expect("parses")[..2]
            );
        }
        assert!(project_problems(&trace, root.path(), Some(("real", false))).is_empty());
    }

    #[test]
    fn without_the_file_only_an_allowing_profile_replays_a_synthetic_trace() {
        let root = tempfile::tempdir().expect("tempdir");
        let out = tempfile::tempdir().expect("tempdir");
        let trace = config(Some("eval/azure_trace/processed_trace.csv"), Some(50));
        assert_eq!(implied_input(&trace, root.path()), None);
        let prepared = prepare(&trace, root.path(), true, out.path()).expect("synthetic");
        assert_eq!(
            (prepared.label.as_str(), prepared.rows),
            (SYNTHETIC_LABEL, 50)
        );
        assert!(project_problems(&trace, root.path(), Some(("emulated", true))).is_empty());
        let refused = project_problems(&trace, root.path(), Some(("u280-switched", false)));
        let [problem] = refused.as_slice() else {
            panic!("{refused:?}")
        };
        assert_eq!(
            problem.message,
            "trace file `eval/azure_trace/processed_trace.csv` does not exist, and testbed `u280-switched` \
             replays only a real trace"
        );
        assert!(
            problem.hint.as_deref().is_some_and(
                |h| h.contains("the artifact's `eval/azure_trace/processed_trace.csv`")
            ),
            "{problem:?}"
        );
        let error = prepare(&trace, root.path(), false, out.path()).expect_err("refused");
        assert!(error.contains("does not exist"), "{error}");
        let none = config(None, Some(5));
        let refused = project_problems(&none, root.path(), Some(("board", false)));
        assert!(
            refused[0].message.contains("`trace` names no `file`"),
            "{refused:?}"
        );
    }

    #[test]
    fn a_bad_row_and_a_bad_path_are_problems_before_the_run() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::write(root.path().join("t.csv"), format!("{TRACE}7,0,512,64\n")).expect("write");
        let problems = project_problems(&config(Some("t.csv"), None), root.path(), None);
        assert_eq!(
            problems[0].message,
            "trace file `t.csv`: trace line 5: app 7 is not 1 (top_k), 2 (cnn), 3 (logit) or 5 (norm)"
        );
        for bad in ["../t.csv", "/etc/passwd", ""] {
            let problems = shape_problems(&config(Some(bad), None));
            assert!(
                problems[0]
                    .message
                    .contains("must be a relative path inside the project"),
                "{bad}: {problems:?}"
            );
        }
        let problems = shape_problems(&config(None, None));
        assert!(
            problems[0].message.contains("names neither"),
            "{problems:?}"
        );
    }
}
