//! Reading a record a node left for another: one error that names the file and what is wrong with it.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// A record file that cannot be read, is not the record it should be, or is of a version this build does not know.
#[derive(Debug)]
pub struct RecordError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, e.g. serde's ``missing field `point` at line 1 column 80``.
    pub why: String,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

impl std::error::Error for RecordError {}

/// A record with a format version: readers refuse versions newer than theirs instead of misreading them.
pub trait Versioned {
    /// What the file holds, for messages (`measure summary`).
    const WHAT: &'static str;
    /// The version this build writes and the newest it reads.
    const VERSION: u32;
    /// The version of a record read back.
    fn version(&self) -> u32;
}

/// Reads and checks the record at `path`.
pub fn read_record<T: DeserializeOwned + Versioned>(path: &Path) -> Result<T, RecordError> {
    let error = |why: String| RecordError {
        path: path.to_path_buf(),
        why,
    };
    let bytes = std::fs::read(path).map_err(|e| error(e.to_string()))?;
    let record: T = serde_json::from_slice(&bytes)
        .map_err(|e| error(format!("not a {} record: {e}", T::WHAT)))?;
    if record.version() > T::VERSION {
        return Err(error(format!(
            "{} version {} is newer than this fracflow reads ({}); update fracflow",
            T::WHAT,
            record.version(),
            T::VERSION
        )));
    }
    Ok(record)
}

/// The version of records written before they carried one: their fields are those of version 1.
pub(crate) fn first_version() -> u32 {
    1
}

/// Writes `record` to `path` as one line of JSON.
pub fn write_record<T: serde::Serialize>(path: &Path, record: &T) -> Result<(), RecordError> {
    let error = |why: String| RecordError {
        path: path.to_path_buf(),
        why,
    };
    let bytes = serde_json::to_vec(record).map_err(|e| error(e.to_string()))?;
    std::fs::write(path, bytes).map_err(|e| error(e.to_string()))
}
