//! The one error type of the crate; every message names the file or the spec field that is wrong.

use std::path::PathBuf;

/// Why aggregation, an export or a read-back failed.
#[derive(Debug, thiserror::Error)]
pub enum AggregateError {
    /// The `aggregate` node's config is inconsistent (a field that does not apply to its `stats`, a bad value).
    #[error("aggregate spec: {0}")]
    Spec(String),
    /// A point's labels disagree with the first point's label keys.
    #[error("point {dir}: {why}")]
    Labels { dir: PathBuf, why: String },
    /// An input or output file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `samples.parquet` is missing a column, has the wrong types, is corrupt, or is not in the expected order.
    #[error("{path}: {why}")]
    Samples { path: PathBuf, why: String },
    /// A line of `seconds.jsonl` does not parse.
    #[error("{path}:{line}: {why}")]
    Seconds {
        path: PathBuf,
        line: usize,
        why: String,
    },
    /// A `metrics.json` does not hold a `metrics` object of numbers.
    #[error("{path}: {why}")]
    Metrics { path: PathBuf, why: String },
    /// polars failed on a table (a join, an export, a read-back).
    #[error("table `{table}`: {why}")]
    Table { table: String, why: String },
}

impl AggregateError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> AggregateError {
        AggregateError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn samples(path: impl Into<PathBuf>, why: impl ToString) -> AggregateError {
        AggregateError::Samples {
            path: path.into(),
            why: why.to_string(),
        }
    }

    pub(crate) fn table(table: &str, why: impl ToString) -> AggregateError {
        AggregateError::Table {
            table: table.to_string(),
            why: why.to_string(),
        }
    }
}
