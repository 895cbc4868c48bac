//! The columns of `samples.parquet`, one row per request: the one definition that the client's writer, the
//! fperf adapter (through that writer), aggregation's reader and the tests use. Names and a small enum of types,
//! so that knowing the schema costs no Arrow; with the `arrow` feature, the Arrow form of the same definition.

/// A column's type; no column is nullable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    UInt32,
    UInt64,
}

/// The columns, in file order ([`SampleColumn::ALL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleColumn {
    /// The client thread, numbered across the client processes of a point.
    Thread,
    /// Per-thread sequence number of the request (0-based, send order).
    Seq,
    /// Send time, ns since the run started: the intended time in open loop, the first write otherwise.
    TSendNs,
    /// From `t_send_ns` to the last response byte read.
    LatencyNs,
    /// fperf's latency: from the last request piece written to the last response byte.
    LatencyLastPieceNs,
    /// The slot (workload) that served the request.
    Slot,
    /// Request bytes, header included.
    RequestBytes,
    /// Response bytes read.
    ResponseBytes,
}

impl SampleColumn {
    /// Every column, in the order the file holds them.
    pub const ALL: [SampleColumn; 8] = [
        SampleColumn::Thread,
        SampleColumn::Seq,
        SampleColumn::TSendNs,
        SampleColumn::LatencyNs,
        SampleColumn::LatencyLastPieceNs,
        SampleColumn::Slot,
        SampleColumn::RequestBytes,
        SampleColumn::ResponseBytes,
    ];

    /// The column's name in the file.
    pub const fn name(self) -> &'static str {
        match self {
            SampleColumn::Thread => "thread",
            SampleColumn::Seq => "seq",
            SampleColumn::TSendNs => "t_send_ns",
            SampleColumn::LatencyNs => "latency_ns",
            SampleColumn::LatencyLastPieceNs => "latency_last_piece_ns",
            SampleColumn::Slot => "slot",
            SampleColumn::RequestBytes => "request_bytes",
            SampleColumn::ResponseBytes => "response_bytes",
        }
    }

    /// The column's type.
    pub const fn column_type(self) -> ColumnType {
        match self {
            SampleColumn::Seq
            | SampleColumn::TSendNs
            | SampleColumn::LatencyNs
            | SampleColumn::LatencyLastPieceNs => ColumnType::UInt64,
            SampleColumn::Thread
            | SampleColumn::Slot
            | SampleColumn::RequestBytes
            | SampleColumn::ResponseBytes => ColumnType::UInt32,
        }
    }
}

#[cfg(feature = "arrow")]
mod arrow {
    use arrow_schema::{DataType, Field, Schema};

    use super::{ColumnType, SampleColumn};

    impl ColumnType {
        /// The Arrow type of a column of this type.
        pub fn arrow(self) -> DataType {
            match self {
                ColumnType::UInt32 => DataType::UInt32,
                ColumnType::UInt64 => DataType::UInt64,
            }
        }
    }

    impl SampleColumn {
        /// The column's Arrow type.
        pub fn arrow_type(self) -> DataType {
            self.column_type().arrow()
        }
    }

    /// The file's Arrow schema: every column of [`SampleColumn::ALL`], in order, none nullable.
    pub fn samples_schema() -> Schema {
        Schema::new(
            SampleColumn::ALL
                .iter()
                .map(|column| Field::new(column.name(), column.arrow_type(), false))
                .collect::<Vec<_>>(),
        )
    }
}

#[cfg(feature = "arrow")]
pub use arrow::samples_schema;

/// What every reader of a samples file guards parquet with: a file from anywhere (a copied result, a peer's
/// bundle) must be refused with an error, and parquet 60 panics on some malformed ones.
#[cfg(feature = "parquet")]
mod guard {
    use parquet::file::metadata::ParquetMetaData;

    /// What a panic of parquet's page decoder is reported as.
    pub const MALFORMED_PAGE: &str = "a malformed page the Parquet decoder cannot read";

    /// Why the footer cannot be read safely: parquet's page reader asserts (panics) on a column chunk whose
    /// footer gives a negative offset or size.
    pub fn footer_problem(metadata: &ParquetMetaData) -> Option<String> {
        let bad = metadata
            .row_groups()
            .iter()
            .flat_map(|group| group.columns())
            .find(|c| {
                c.dictionary_page_offset().unwrap_or(c.data_page_offset()) < 0
                    || c.compressed_size() < 0
            })?;
        Some(format!(
            "column {} has a negative offset or size in the footer",
            bad.column_path()
        ))
    }

    /// The reader's next batch, with a panic of parquet's decoder (a dictionary-encoded page in a chunk without
    /// a dictionary page) turned into [`MALFORMED_PAGE`]: that is the file's error, not the process's end.
    pub fn next_batch<T>(reader: &mut impl Iterator<Item = T>) -> Result<Option<T>, &'static str> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader.next()))
            .map_err(|_| MALFORMED_PAGE)
    }
}

#[cfg(feature = "parquet")]
pub use guard::{MALFORMED_PAGE, footer_problem, next_batch};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_columns_are_the_files_columns_in_order() {
        let names: Vec<&str> = SampleColumn::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "thread",
                "seq",
                "t_send_ns",
                "latency_ns",
                "latency_last_piece_ns",
                "slot",
                "request_bytes",
                "response_bytes"
            ]
        );
        let wide: Vec<&str> = SampleColumn::ALL
            .iter()
            .filter(|c| c.column_type() == ColumnType::UInt64)
            .map(|c| c.name())
            .collect();
        assert_eq!(
            wide,
            ["seq", "t_send_ns", "latency_ns", "latency_last_piece_ns"]
        );
    }

    #[cfg(feature = "arrow")]
    #[test]
    fn the_arrow_schema_is_the_same_definition() {
        let schema = samples_schema();
        assert_eq!(schema.fields().len(), SampleColumn::ALL.len());
        for (field, column) in schema.fields().iter().zip(SampleColumn::ALL) {
            assert_eq!(field.name(), column.name());
            assert_eq!(*field.data_type(), column.arrow_type());
            assert!(!field.is_nullable());
        }
    }
}
