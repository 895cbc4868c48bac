//! Per-request samples as Parquet (readable by pandas, polars, pyarrow), in the columns `fracflow_record::samples`
//! defines.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use fracflow_record::SampleColumn;
use fracflow_record::by_thread::{self, sidecar_path};
use fracflow_record::samples::samples_schema;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::run::Sample;

/// Rows per record batch: bounds the writer's transient copy.
const BATCH_ROWS: usize = 1 << 20;

/// Writing or reading a samples file failed.
#[derive(Debug, thiserror::Error)]
#[error("samples file {path}: {why}")]
pub struct SamplesError {
    /// The file.
    pub path: PathBuf,
    /// What failed.
    pub why: String,
}

/// Writes `samples` to `path` (zstd-compressed Parquet), and beside it their sidecar (`samples.by-thread` beside
/// `samples.parquet`), which aggregation reads instead when it belongs to that file (`fracflow_record::by_thread`).
pub fn write_samples_parquet(path: &Path, samples: &[Sample]) -> Result<(), SamplesError> {
    let sidecar = sidecar_path(path);
    let sidecar_error = |e: std::io::Error| SamplesError {
        path: sidecar.clone(),
        why: e.to_string(),
    };
    // The sidecar's data is written on a second thread while the Parquet file is compressed, so that it adds
    // little to the end of a point; its directory names the Parquet file, so it is finished last.
    std::thread::scope(|scope| {
        let pending = scope.spawn(|| by_thread::begin(&sidecar, samples, Sample::by_thread_row));
        write_parquet_alone(path, samples)?;
        let pending = pending
            .join()
            .map_err(|_| sidecar_error(std::io::Error::other("the sidecar's writer panicked")))?
            .map_err(sidecar_error)?;
        pending.finish(path).map_err(sidecar_error)
    })
}

/// Writes `samples` to `path` as zstd-compressed Parquet without the sidecar (what the client wrote before it
/// wrote one; the aggregation bench times it against [`write_samples_parquet`]).
pub fn write_parquet_alone(path: &Path, samples: &[Sample]) -> Result<(), SamplesError> {
    let err = |why: String| SamplesError {
        path: path.to_path_buf(),
        why,
    };
    let schema = Arc::new(samples_schema());
    let file = File::create(path).map_err(|e| err(e.to_string()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props))
        .map_err(|e| err(e.to_string()))?;
    for chunk in samples.chunks(BATCH_ROWS) {
        let u32c = |f: fn(&Sample) -> u32| -> ArrayRef {
            Arc::new(UInt32Array::from_iter_values(chunk.iter().map(f)))
        };
        let u64c = |f: fn(&Sample) -> u64| -> ArrayRef {
            Arc::new(UInt64Array::from_iter_values(chunk.iter().map(f)))
        };
        // In the schema's column order; the match makes a new column a compile error here until it is written.
        let columns = SampleColumn::ALL
            .iter()
            .map(|column| match column {
                SampleColumn::Thread => u32c(|s| s.thread),
                SampleColumn::Seq => u64c(|s| s.seq),
                SampleColumn::TSendNs => u64c(|s| s.t_send_ns),
                SampleColumn::LatencyNs => u64c(|s| s.latency_ns),
                SampleColumn::LatencyLastPieceNs => u64c(|s| s.latency_last_piece_ns),
                SampleColumn::Slot => u32c(|s| u32::from(s.slot)),
                SampleColumn::RequestBytes => u32c(|s| s.request_bytes),
                SampleColumn::ResponseBytes => u32c(|s| s.response_bytes),
            })
            .collect();
        let batch =
            RecordBatch::try_new(Arc::clone(&schema), columns).map_err(|e| err(e.to_string()))?;
        writer.write(&batch).map_err(|e| err(e.to_string()))?;
    }
    writer.close().map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// Reads a samples file back.
pub fn read_samples_parquet(path: &Path) -> Result<Vec<Sample>, SamplesError> {
    let err = |why: String| SamplesError {
        path: path.to_path_buf(),
        why,
    };
    let file = File::open(path).map_err(|e| err(e.to_string()))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| err(e.to_string()))?;
    if let Some(problem) = fracflow_record::samples::footer_problem(builder.metadata()) {
        return Err(err(problem));
    }
    let mut reader = builder.build().map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    while let Some(batch) =
        fracflow_record::samples::next_batch(&mut reader).map_err(|why| err(why.to_owned()))?
    {
        let batch = batch.map_err(|e| err(e.to_string()))?;
        let u32c = |column: SampleColumn| {
            let name = column.name();
            batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<UInt32Array>())
                .cloned()
                .ok_or_else(|| err(format!("column {name} missing or not u32")))
        };
        let u64c = |column: SampleColumn| {
            let name = column.name();
            batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
                .cloned()
                .ok_or_else(|| err(format!("column {name} missing or not u64")))
        };
        let (thread, seq, t_send, lat, lat_last) = (
            u32c(SampleColumn::Thread)?,
            u64c(SampleColumn::Seq)?,
            u64c(SampleColumn::TSendNs)?,
            u64c(SampleColumn::LatencyNs)?,
            u64c(SampleColumn::LatencyLastPieceNs)?,
        );
        let (slot, req, resp) = (
            u32c(SampleColumn::Slot)?,
            u32c(SampleColumn::RequestBytes)?,
            u32c(SampleColumn::ResponseBytes)?,
        );
        for i in 0..batch.num_rows() {
            out.push(Sample {
                thread: thread.value(i),
                seq: seq.value(i),
                t_send_ns: t_send.value(i),
                latency_ns: lat.value(i),
                latency_last_piece_ns: lat_last.value(i),
                slot: u16::try_from(slot.value(i)).map_err(|_| err("slot beyond u16".into()))?,
                request_bytes: req.value(i),
                response_bytes: resp.value(i),
            });
        }
    }
    Ok(out)
}
