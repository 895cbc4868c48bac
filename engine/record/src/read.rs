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

/// Version 1 is the format from before records were typed, which had no version field; it is written without
/// one, so that a record's bytes are those the same node wrote before and cached outputs keep their hashes.
pub(crate) fn first_version() -> u32 {
    1
}

/// See [`first_version`]: the field is written from version 2 on.
pub(crate) fn is_first_version(version: &u32) -> bool {
    *version == 1
}

/// Writes `record` to `path` as one line of canonical JSON: object keys sorted at every level, whatever the
/// order of the struct's fields. The bytes depend only on the values, and they are those the nodes wrote when
/// they built these files as JSON maps, so outputs cached before the records were typed keep their hashes.
pub fn write_record<T: serde::Serialize>(path: &Path, record: &T) -> Result<(), RecordError> {
    let error = |why: String| RecordError {
        path: path.to_path_buf(),
        why,
    };
    // A `serde_json::Value` object is a sorted map (the crate's `preserve_order` feature is off in this workspace).
    let canonical = serde_json::to_value(record).map_err(|e| error(e.to_string()))?;
    let bytes = canonical.to_string();
    std::fs::write(path, bytes).map_err(|e| error(e.to_string()))
}
