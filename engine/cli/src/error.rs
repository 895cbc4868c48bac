//! The one error type of the `fracflow` command: every way a command can end other than by its own outcome.
//! Each variant maps to one exit code of the README, and every error renders one way, wherever it arose:
//!
//! ```text
//! error: what went wrong, naming the path or value
//! caused by: the underlying error, one line per level
//! hint: what to do about it
//! ```
//!
//! Loader diagnostics keep their own `error:` / `-->` file:line:col / caret rendering.

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use fracflow_loader::Diagnostics;

use crate::exit::Exit;

type Source = Box<dyn StdError + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A value on the command line, a profile or the project's layout is wrong (exit 2).
    #[error("{message}")]
    BadInput {
        message: String,
        #[source]
        source: Option<Source>,
        hint: Option<String>,
    },
    /// The pipeline does not load: every problem found, each with its file:line:col (exit 2).
    #[error("{0}")]
    Pipeline(Diagnostics),
    /// A file or directory the user named, or that lives in the user's project, cannot be used as asked
    /// (exit 2): a file where a directory is wanted, a read-only `results/`, an unreadable run.
    #[error("{action} {}", path.display())]
    Path {
        action: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Another run holds the testbed or the cache (exit 3).
    #[error("{message}")]
    Busy { message: String },
    /// A node, the device or the client failed at its work (exit 1).
    #[error("{message}")]
    Failed {
        message: String,
        hint: Option<String>,
    },
    /// fracflow failed on its own files (exit 70).
    #[error("internal error: {context}")]
    Internal {
        context: String,
        #[source]
        source: Source,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn bad_input(message: impl Into<String>) -> Error {
        Error::BadInput {
            message: message.into(),
            source: None,
            hint: None,
        }
    }

    pub fn bad_input_with_hint(message: impl Into<String>, hint: impl Into<String>) -> Error {
        Error::BadInput {
            message: message.into(),
            source: None,
            hint: Some(hint.into()),
        }
    }

    /// Bad input found through an underlying error (an unreadable run named on the command line).
    pub fn bad_input_because(
        message: impl Into<String>,
        source: impl Into<Source>,
        hint: impl Into<String>,
    ) -> Error {
        Error::BadInput {
            message: message.into(),
            source: Some(source.into()),
            hint: Some(hint.into()),
        }
    }

    pub fn failed(message: impl Into<String>) -> Error {
        Error::Failed {
            message: message.into(),
            hint: None,
        }
    }

    pub fn internal(context: impl Into<String>, source: impl Into<Source>) -> Error {
        Error::Internal {
            context: context.into(),
            source: source.into(),
        }
    }

    /// An I/O error on `path`: the user's problem (exit 2, the path named) when the path is in the way or
    /// not permitted, fracflow's own (exit 70) otherwise. `action` says what was being done: "cannot create
    /// the run directory".
    pub fn io(action: impl Into<String>, path: &Path, source: io::Error) -> Error {
        if is_users_problem(source.kind()) {
            Error::Path {
                action: action.into(),
                path: path.to_owned(),
                source,
            }
        } else {
            Error::Internal {
                context: format!("{} {}", action.into(), path.display()),
                source: source.into(),
            }
        }
    }

    pub fn exit(&self) -> Exit {
        match self {
            Error::BadInput { .. } | Error::Pipeline(_) | Error::Path { .. } => Exit::BadInput,
            Error::Busy { .. } => Exit::TestbedBusy,
            Error::Failed { .. } => Exit::NodeFailed,
            Error::Internal { .. } => Exit::Internal,
        }
    }

    pub fn hint(&self) -> Option<String> {
        match self {
            Error::BadInput { hint, .. } | Error::Failed { hint, .. } => hint.clone(),
            Error::Path { path, source, .. } => path_hint(path, source.kind()),
            Error::Pipeline(_) | Error::Busy { .. } | Error::Internal { .. } => None,
        }
    }

    /// The text printed on stderr: `error:`, one `caused by:` per underlying error, then `hint:`.
    pub fn render(&self) -> String {
        if let Error::Pipeline(diagnostics) = self {
            return diagnostics.to_string().trim_end().to_owned();
        }
        let mut text = format!("error: {}", self.to_string().trim_end());
        let mut cause = self.source();
        while let Some(error) = cause {
            let _ = write!(text, "\ncaused by: {}", error.to_string().trim_end());
            cause = error.source();
        }
        if let Some(hint) = self.hint() {
            let _ = write!(text, "\nhint: {hint}");
        }
        text
    }
}

/// Errors of a path the user controls: in the way, missing, or not permitted. Everything else on a path
/// (an interrupted read, a corrupt file system) is fracflow's to report as internal.
fn is_users_problem(kind: io::ErrorKind) -> bool {
    use io::ErrorKind::*;
    matches!(
        kind,
        NotFound
            | PermissionDenied
            | ReadOnlyFilesystem
            | AlreadyExists
            | NotADirectory
            | IsADirectory
            | StorageFull
    )
}

fn path_hint(path: &Path, kind: io::ErrorKind) -> Option<String> {
    let shown = path.display();
    match kind {
        io::ErrorKind::AlreadyExists | io::ErrorKind::NotADirectory if path.is_file() => {
            Some(format!("{shown} is a file; name a directory instead"))
        }
        io::ErrorKind::NotADirectory => Some(format!(
            "a part of {shown} is a file; name a path under a directory"
        )),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => Some(format!(
            "check that this user may read and write {}, or work in a copy of the project",
            nearest_existing(path).display()
        )),
        io::ErrorKind::StorageFull => Some("free some disk space (`fracflow cache gc`)".to_owned()),
        _ => None,
    }
}

/// `path` or its closest ancestor that exists: the directory a refused `create_dir_all` could not write into.
fn nearest_existing(path: &Path) -> &Path {
    path.ancestors().find(|p| p.exists()).unwrap_or(path)
}

impl From<Diagnostics> for Error {
    fn from(diagnostics: Diagnostics) -> Error {
        Error::Pipeline(diagnostics)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_error_then_each_cause_then_the_hint() -> io::Result<()> {
        let project = tempfile::tempdir()?;
        let results = project.path().join("results");
        std::fs::create_dir(&results)?;
        let inner = io::Error::new(
            io::ErrorKind::PermissionDenied,
            "Permission denied (os error 13)",
        );
        let error = Error::io(
            "cannot create the run directory under",
            &results.join("demo"),
            inner,
        );
        let results = results.display();
        assert_eq!(
            error.render(),
            format!(
                "error: cannot create the run directory under {results}/demo\n\
                 caused by: Permission denied (os error 13)\n\
                 hint: check that this user may read and write {results}, or work in a copy of the project"
            ),
            "the hint names the directory that exists and refused the write"
        );
        assert_eq!(error.exit(), Exit::BadInput);
        Ok(())
    }

    #[test]
    fn a_chain_of_causes_is_one_line_each() {
        #[derive(Debug, thiserror::Error)]
        #[error("the manifest is unreadable")]
        struct Outer(#[source] io::Error);
        let error = Error::internal(
            "writing the run report",
            Outer(io::Error::other("disk on fire")),
        );
        assert_eq!(
            error.render(),
            "error: internal error: writing the run report\n\
             caused by: the manifest is unreadable\n\
             caused by: disk on fire"
        );
    }

    #[test]
    fn without_cause_or_hint_it_is_one_line() {
        assert_eq!(
            Error::bad_input("--jobs 0: at least one job").render(),
            "error: --jobs 0: at least one job"
        );
        assert_eq!(
            Error::bad_input_with_hint("no target `x`", "see `fracflow targets`").render(),
            "error: no target `x`\nhint: see `fracflow targets`"
        );
    }

    #[test]
    fn a_file_where_a_directory_is_wanted_says_so() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let readme = dir.path().join("README.md");
        std::fs::write(&readme, "# a file")?;
        let source = std::fs::create_dir_all(&readme).expect_err("README.md is a file");
        let error = Error::io("cannot write the figures into", &readme, source);
        assert_eq!(error.exit(), Exit::BadInput);
        assert_eq!(
            error.hint(),
            Some(format!(
                "{} is a file; name a directory instead",
                readme.display()
            ))
        );
        Ok(())
    }

    #[test]
    fn other_io_errors_on_a_path_are_internal() {
        let error = Error::io(
            "cannot read",
            Path::new("/x"),
            io::Error::new(io::ErrorKind::Interrupted, "interrupted"),
        );
        assert_eq!(error.exit(), Exit::Internal);
        assert!(
            error
                .render()
                .starts_with("error: internal error: cannot read /x\ncaused by: interrupted")
        );
    }

    #[test]
    fn loader_diagnostics_keep_their_own_rendering() {
        let diagnostic = fracflow_loader::Diagnostic::new("node `agg`: unknown field `stats`")
            .with_hint(Some("did you mean `stat`?".to_owned()));
        let error = Error::from(Diagnostics(vec![diagnostic.clone(), diagnostic.clone()]));
        assert_eq!(
            error.render(),
            format!("{diagnostic}\n\n{diagnostic}"),
            "every diagnostic, each under its own `error:` head, nothing added"
        );
        assert!(error.render().starts_with("error: node `agg`"));
        assert_eq!(error.exit(), Exit::BadInput);
    }

    #[test]
    fn each_variant_maps_to_its_documented_exit_code() {
        let cases = [
            (Error::bad_input("x"), 2),
            (
                Error::io(
                    "cannot open",
                    Path::new("/x"),
                    io::Error::from(io::ErrorKind::NotFound),
                ),
                2,
            ),
            (
                Error::Busy {
                    message: "x".into(),
                },
                3,
            ),
            (Error::failed("x"), 1),
            (Error::internal("x", io::Error::other("y")), 70),
        ];
        for (error, code) in cases {
            assert_eq!(error.exit().code(), code, "{error:?}");
        }
    }
}
