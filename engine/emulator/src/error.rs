//! The crate's error type.

use std::io;
use std::path::PathBuf;

use fracflow_proto::{ErrorCode, ProtoError};

use crate::image::ImageError;

/// Everything the build chain, the device and the client helpers can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation failed; `context` says which and on what.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, e.g. "reading hw/shell.yaml".
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// `hw/shell.yaml` or a `unit.yaml` is unreadable or inconsistent.
    #[error("{}: {message}", path.display())]
    Spec {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The C++ compiler failed on a unit; `stderr` is its output.
    #[error("compiling unit {unit} with `{compiler}` failed ({status}):\n{stderr}")]
    Compile {
        /// The unit.
        unit: String,
        /// The compiler as invoked.
        compiler: String,
        /// Its exit status.
        status: String,
        /// Its standard error (cut to 64 KiB).
        stderr: String,
    },
    /// Weaving or writing the bitstreams found an inconsistency.
    #[error("design: {0}")]
    Design(String),
    /// A full image or partial container is malformed.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// A kernel plugin could not be loaded or misbehaved.
    #[error("kernel plugin {unit}: {message}")]
    Plugin {
        /// The unit the plugin claims or should be.
        unit: String,
        /// What went wrong.
        message: String,
    },
    /// A wire-format rule was broken (bad parameters to a client helper).
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// The reconfiguration controller answered an error status.
    #[error("{op} answered {code:?} (status {})", *code as u8)]
    Controller {
        /// The command, e.g. `RECONF_ICAP`.
        op: &'static str,
        /// The status it answered.
        code: ErrorCode,
    },
    /// The management channel refused a command or answered nonsense.
    #[error("management channel: {0}")]
    Management(String),
    /// The device answered something the protocol does not allow.
    #[error("device protocol: {0}")]
    Protocol(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wraps an `io::Error` with what was being done.
pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}
