//! On-disk formats and shared vocabulary of fracflow: run manifests, event lines, summary tables, provenance,
//! expectation verdicts, the records nodes hand each other (measure summaries, the samples schema and its
//! by-thread sidecar, command metrics), the small sorted map their named values are kept in, and the narrow
//! layer of file operations with the atomic publish they share and the checksum unsynced files carry.

pub mod atomic;
pub mod by_thread;
pub mod digest;
pub mod event;
pub mod manifest;
pub mod measure;
pub mod metrics;
pub mod prebuilt;
pub mod read;
pub mod samples;
pub mod sealed;
pub mod sortedmap;
pub mod table;

pub use atomic::{
    AppendFile, FileOps, Files, Prepared, Publish, RealFiles, atomic_replace, atomic_write,
    fsync_dir, unique_suffix,
};
pub use by_thread::SAMPLES_BY_THREAD_FILE;
pub use digest::Digest;
pub use event::{Event, EventKind};
pub use manifest::{NodeRecord, NodeStatus, RunManifest, RunStatus};
pub use measure::{
    CONSOLE_FILE, MeasureSource, MeasureSummary, PROVENANCE_COLUMNS, SAMPLES_FILE, SECONDS_FILE,
    SUMMARY_FILE,
};
pub use metrics::{METRICS_FILE, MetricsRecord};
pub use read::{RecordError, Versioned, read_record, write_record};
pub use samples::{ColumnType, SampleColumn};
pub use sortedmap::SortedMap;
pub use table::{Cell, ExpectationResult, PaperComparison, Provenance, Table, Verdict};

/// Version of the run formats in this crate (manifest, events, tables); bump it when a field changes meaning.
/// The records nodes hand each other carry their own ([`Versioned`]).
pub const FORMAT_VERSION: u32 = 1;
