//! Streaming reads of `samples.parquet`: only the needed columns, one row group per task, cut as the spec says
//! (the `skip_s` send-time cut, then the per-thread `drop_fraction` warm-up cut in seq order), into either the
//! point's latencies (exact quantiles) or HDR histograms (points above the memory budget). Row groups whose
//! footer statistics put every send before `skip_s` are not decoded, and those entirely after it skip the
//! `t_send_ns` column. A point with a sound `samples.by-thread` sidecar is read through it instead (`by_thread`).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::{Array, RecordBatch, UInt32Array, UInt64Array};
use fracflow_record::SampleColumn;
use fracflow_record::by_thread::{ByThreadError, SamplesByThread, sidecar_path};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::file::statistics::Statistics;
use rayon::prelude::*;

use crate::by_thread;
use crate::error::AggregateError;
use crate::quantile::{
    CountedValues, HdrAccumulator, Latency, LatencySummary, exact_summary_in_place,
};
use crate::spec::{Cuts, LatencyField};

/// Rows per decoded batch: large enough that per-batch overhead vanishes, small enough to stay in cache.
const BATCH_ROWS: usize = 64 * 1024;

/// Thread ids index per-thread arrays; anything larger is a corrupt file, not a real client.
const MAX_THREAD_ID: u32 = 1 << 16;

/// The fRAC request header every trace request carries before its payload (docs/frac.md §2.2).
const TRACE_HEADER_BYTES: u32 = 64;

/// What to read from one point's samples.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SampleQuery {
    pub latency: LatencyField,
    pub cuts: Cuts,
    /// `Some(piece)` for a trace: samples are grouped by (slot, fragments).
    pub trace_piece: Option<u32>,
    /// Points with more rows than this use HDR histograms.
    pub exact_max_samples: u64,
    /// Into how many runs of threads, read side by side, a point's trace groups are read: one when points are
    /// read side by side themselves (each run's groups have their own counters, merged at the end).
    pub trace_runs: usize,
}

/// A trace group: the slot that served the request and the number of request fragments beyond the first piece.
/// Plain samples form the single group `(0, 0)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct GroupKey {
    pub slot: u32,
    pub fragments: u32,
}

impl GroupKey {
    pub(crate) fn packed(self) -> u64 {
        (u64::from(self.slot) << 32) | u64::from(self.fragments)
    }

    pub(crate) fn unpack(packed: u64) -> GroupKey {
        GroupKey {
            slot: (packed >> 32) as u32,
            fragments: packed as u32,
        }
    }
}

/// The latencies (ns) of one group after the cuts.
#[derive(Debug)]
pub(crate) enum GroupLatencies {
    Exact(Vec<u64>),
    /// Exact, from a column stored in at most 4 bytes (a sidecar's): half the memory.
    ExactNarrow(Vec<u32>),
    /// Exact, counted as read (a trace's groups from a sidecar).
    Counted(CountedValues<u64>),
    CountedNarrow(CountedValues<u32>),
    Hdr(HdrAccumulator),
}

/// The point's `samples.by-thread` sidecar when there is one and it belongs to `path`; why it is not used goes to
/// `notes` (a sidecar that is missing is no news: older runs and other writers have none).
fn sidecar(path: &Path, notes: &mut Vec<String>) -> Option<SamplesByThread> {
    let sidecar = sidecar_path(path);
    if !sidecar.exists() {
        return None;
    }
    SamplesByThread::open(&sidecar, path)
        .map_err(|e| notes.push(fallback_note(path, &e)))
        .ok()
}

fn fallback_note(path: &Path, why: &ByThreadError) -> String {
    format!("{why}; read {} instead", path.display())
}

/// Reads one point's samples: its groups in key order (one group unless the query is a trace). From the
/// point's sidecar when it has a sound one of this file; otherwise, or when reading the sidecar fails, from the
/// Parquet file, with the reason in `notes`.
pub(crate) fn read_point(
    path: &Path,
    query: &SampleQuery,
    notes: &mut Vec<String>,
) -> Result<Vec<(GroupKey, GroupLatencies)>, AggregateError> {
    if let Some(file) = sidecar(path, notes) {
        match by_thread::read_point(&file, query) {
            Ok(groups) => return Ok(groups),
            Err(e) => notes.push(fallback_note(path, &e)),
        }
    }
    let file = SamplesFile::open(path, query)?;
    let rows: u64 = file.row_group_rows.iter().sum();
    if rows > query.exact_max_samples {
        file.read_hdr(query)
    } else {
        file.read_exact(query, false)
    }
}

/// The per-thread order of the kept samples of one chunk (or, merged, of the file).
#[derive(Debug, Clone, Default)]
struct ThreadRuns(Vec<ThreadRun>);

#[derive(Debug, Clone, Copy)]
struct ThreadRun {
    kept: u64,
    first_seq: u64,
    last_seq: u64,
    /// Every seq so far was larger than the one before it in file order.
    ordered: bool,
}

impl ThreadRuns {
    fn run_mut(&mut self, thread: u32) -> &mut ThreadRun {
        let index = thread as usize;
        if index >= self.0.len() {
            self.0.resize(
                index + 1,
                ThreadRun {
                    kept: 0,
                    first_seq: 0,
                    last_seq: 0,
                    ordered: true,
                },
            );
        }
        &mut self.0[index]
    }

    fn observe(&mut self, thread: u32, seq: u64) {
        let run = self.run_mut(thread);
        if run.kept == 0 {
            run.first_seq = seq;
        } else if seq <= run.last_seq {
            run.ordered = false;
        }
        run.last_seq = seq;
        run.kept += 1;
    }

    /// Appends the runs of the chunk that follows this one in the file.
    fn append(&mut self, later: &ThreadRuns) {
        for (thread, next) in later.0.iter().enumerate() {
            if next.kept == 0 {
                continue;
            }
            let run = self.run_mut(thread as u32);
            if run.kept == 0 {
                *run = *next;
            } else {
                run.ordered = run.ordered && next.ordered && run.last_seq < next.first_seq;
                run.last_seq = next.last_seq;
                run.kept += next.kept;
            }
        }
    }

    fn all_ordered(&self) -> bool {
        self.0.iter().all(|run| run.ordered)
    }

    /// How many of each thread's first samples the warm-up cut drops: ⌊kept · fraction⌋, like the figure
    /// scripts' `data[int(len(data) * fraction):]`.
    fn drop_counts(&self, fraction: f64) -> Vec<u64> {
        self.0
            .iter()
            .map(|run| (run.kept as f64 * fraction).floor() as u64)
            .collect()
    }
}

/// The columns of one decoded batch that the query needs.
struct BatchColumns<'a> {
    thread: Option<&'a [u32]>,
    seq: Option<&'a [u64]>,
    t_send: Option<&'a [u64]>,
    latency: Option<&'a [u64]>,
    slot: Option<&'a [u32]>,
    request_bytes: Option<&'a [u32]>,
}

/// Which columns a read decodes.
#[derive(Debug, Clone, Copy)]
struct Wanted {
    thread_and_seq: bool,
    t_send: bool,
    latency: Option<SampleColumn>,
    trace: bool,
}

impl Wanted {
    fn names(&self) -> Vec<&'static str> {
        let mut columns = Vec::new();
        if self.thread_and_seq {
            columns.extend([SampleColumn::Thread, SampleColumn::Seq]);
        }
        if self.t_send {
            columns.push(SampleColumn::TSendNs);
        }
        columns.extend(self.latency);
        if self.trace {
            columns.extend([SampleColumn::Slot, SampleColumn::RequestBytes]);
        }
        columns.into_iter().map(SampleColumn::name).collect()
    }
}

/// The output buffers of one row group in the exact path (empty slices for columns the query does not keep).
struct ChunkBuffers<'a> {
    row_group: usize,
    latency: &'a mut [u64],
    thread: &'a mut [u32],
    key: &'a mut [u64],
    seq: &'a mut [u64],
}

struct ChunkKept {
    kept: usize,
    runs: ThreadRuns,
}

struct SamplesFile {
    path: PathBuf,
    metadata: ArrowReaderMetadata,
    row_group_rows: Vec<u64>,
    /// Each row group's (min, max) `t_send_ns` from the footer statistics, when written.
    send_ranges: Vec<Option<(u64, u64)>>,
}

/// What the `skip_s` cut does to one row group, known from its statistics before decoding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendCut {
    /// Every sample was sent before the cut: the row group is not read at all.
    DropsAll,
    /// No sample was sent before the cut: `t_send_ns` need not be decoded.
    KeepsAll,
    /// Decode `t_send_ns` and compare row by row.
    PerRow,
}

impl SamplesFile {
    fn open(path: &Path, query: &SampleQuery) -> Result<SamplesFile, AggregateError> {
        let file = File::open(path).map_err(|e| AggregateError::io(path, e))?;
        let metadata =
            ArrowReaderMetadata::load(&file, ArrowReaderOptions::new()).map_err(|e| {
                AggregateError::samples(path, format!("not a readable Parquet file: {e}"))
            })?;
        if let Some(problem) = fracflow_record::samples::footer_problem(metadata.metadata()) {
            return Err(AggregateError::samples(path, problem));
        }
        let mut needed = vec![
            SampleColumn::Thread,
            SampleColumn::Seq,
            SampleColumn::TSendNs,
            query.latency.column(),
        ];
        if query.trace_piece.is_some() {
            needed.extend([SampleColumn::Slot, SampleColumn::RequestBytes]);
        }
        let schema = metadata.schema();
        for column in needed {
            let (name, data_type) = (column.name(), column.arrow_type());
            match schema.field_with_name(name) {
                Ok(field) if *field.data_type() == data_type => {}
                Ok(field) => {
                    return Err(AggregateError::samples(
                        path,
                        format!(
                            "column `{name}` is {}, expected {data_type}",
                            field.data_type()
                        ),
                    ));
                }
                Err(_) => {
                    return Err(AggregateError::samples(path, format!("no column `{name}`")));
                }
            }
        }
        let row_group_rows = metadata
            .metadata()
            .row_groups()
            .iter()
            .map(|group| group.num_rows().max(0) as u64)
            .collect();
        let send_column = metadata
            .parquet_schema()
            .columns()
            .iter()
            .position(|column| column.name() == SampleColumn::TSendNs.name());
        // u64 columns are stored as INT64; the statistics hold the same bits (ns values stay below 2^63).
        let send_ranges = metadata
            .metadata()
            .row_groups()
            .iter()
            .map(|group| match group.column(send_column?).statistics()? {
                Statistics::Int64(stats) => {
                    Some((*stats.min_opt()? as u64, *stats.max_opt()? as u64))
                }
                _ => None,
            })
            .collect();
        Ok(SamplesFile {
            path: path.to_path_buf(),
            metadata,
            row_group_rows,
            send_ranges,
        })
    }

    fn send_cut(&self, row_group: usize, skip_ns: u64) -> SendCut {
        if skip_ns == 0 {
            return SendCut::KeepsAll;
        }
        match self.send_ranges.get(row_group).copied().flatten() {
            Some((_, max)) if max < skip_ns => SendCut::DropsAll,
            Some((min, _)) if min >= skip_ns => SendCut::KeepsAll,
            _ => SendCut::PerRow,
        }
    }

    fn error(&self, why: impl ToString) -> AggregateError {
        AggregateError::samples(&self.path, why)
    }

    /// Decodes the `wanted` columns of one row group, batch by batch.
    fn for_each_batch(
        &self,
        row_group: usize,
        wanted: Wanted,
        mut visit: impl FnMut(&BatchColumns<'_>) -> Result<(), AggregateError>,
    ) -> Result<(), AggregateError> {
        // A fresh open, not `try_clone`: clones share one file offset, and the reader seeks, so row groups
        // read in parallel through clones would read each other's bytes.
        let file = File::open(&self.path).map_err(|e| AggregateError::io(&self.path, e))?;
        let mask = ProjectionMask::columns(self.metadata.parquet_schema(), wanted.names());
        let mut reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.metadata.clone())
                .with_projection(mask)
                .with_row_groups(vec![row_group])
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(|e| self.error(format!("row group {row_group}: {e}")))?;
        while let Some(batch) = fracflow_record::samples::next_batch(&mut reader)
            .map_err(|why| self.error(format!("row group {row_group}: {why}")))?
        {
            let batch = batch.map_err(|e| self.error(format!("row group {row_group}: {e}")))?;
            let u32s = |column: SampleColumn, on: bool| {
                on.then(|| self.u32_column(&batch, column)).transpose()
            };
            let u64s = |column: SampleColumn, on: bool| {
                on.then(|| self.u64_column(&batch, column)).transpose()
            };
            let columns = BatchColumns {
                thread: u32s(SampleColumn::Thread, wanted.thread_and_seq)?,
                seq: u64s(SampleColumn::Seq, wanted.thread_and_seq)?,
                t_send: u64s(SampleColumn::TSendNs, wanted.t_send)?,
                latency: wanted
                    .latency
                    .map(|column| self.u64_column(&batch, column))
                    .transpose()?,
                slot: u32s(SampleColumn::Slot, wanted.trace)?,
                request_bytes: u32s(SampleColumn::RequestBytes, wanted.trace)?,
            };
            if let Some(&thread) = columns.thread.and_then(|t| t.iter().max())
                && thread > MAX_THREAD_ID
            {
                return Err(self.error(format!("thread id {thread} is not plausible")));
            }
            visit(&columns)?;
        }
        Ok(())
    }

    fn u64_column<'b>(
        &self,
        batch: &'b RecordBatch,
        column: SampleColumn,
    ) -> Result<&'b [u64], AggregateError> {
        let name = column.name();
        let array = batch
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
            .ok_or_else(|| self.error(format!("column `{name}` is not u64")))?;
        if array.null_count() > 0 {
            return Err(self.error(format!("column `{name}` has nulls")));
        }
        Ok(array.values())
    }

    fn u32_column<'b>(
        &self,
        batch: &'b RecordBatch,
        column: SampleColumn,
    ) -> Result<&'b [u32], AggregateError> {
        let name = column.name();
        let array = batch
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<UInt32Array>())
            .ok_or_else(|| self.error(format!("column `{name}` is not u32")))?;
        if array.null_count() > 0 {
            return Err(self.error(format!("column `{name}` has nulls")));
        }
        Ok(array.values())
    }

    /// Exact path: every kept latency of the point in memory: 8 bytes per row, 4 more (thread) while the
    /// warm-up cut runs, 8 more for a trace's group, and 16 more in the fallback for files whose seqs do not
    /// increase per thread in file order (`keep_seq`, a second read that also keeps and sorts the seqs).
    fn read_exact(
        &self,
        query: &SampleQuery,
        keep_seq: bool,
    ) -> Result<Vec<(GroupKey, GroupLatencies)>, AggregateError> {
        let dropping = query.cuts.drop_fraction > 0.0;
        let trace = query.trace_piece.is_some();
        let rows = self.row_group_rows.iter().sum::<u64>() as usize;
        let sized = |on: bool| if on { rows } else { 0 };
        let mut latency = vec![0u64; rows];
        let mut thread = vec![0u32; sized(dropping)];
        let mut key = vec![0u64; sized(trace)];
        let mut seq = vec![0u64; sized(dropping && keep_seq)];

        let lens: Vec<usize> = self.row_group_rows.iter().map(|&r| r as usize).collect();
        let chunks: Vec<ChunkBuffers<'_>> = split_by(&lens, &mut latency)
            .into_iter()
            .zip(split_by(&lens, &mut thread))
            .zip(split_by(&lens, &mut key))
            .zip(split_by(&lens, &mut seq))
            .enumerate()
            .map(
                |(row_group, (((latency, thread), key), seq))| ChunkBuffers {
                    row_group,
                    latency,
                    thread,
                    key,
                    seq,
                },
            )
            .collect();
        let kept: Vec<ChunkKept> = chunks
            .into_par_iter()
            .map(|chunk| self.read_chunk_exact(query, chunk))
            .collect::<Result<_, _>>()?;

        // Move each chunk's kept rows down behind the previous chunk's.
        let mut write = 0;
        let mut start = 0;
        let mut runs = ThreadRuns::default();
        for (chunk, len) in kept.iter().zip(&lens) {
            let range = start..start + chunk.kept;
            latency.copy_within(range.clone(), write);
            for column in [&mut key, &mut seq] {
                if !column.is_empty() {
                    column.copy_within(range.clone(), write);
                }
            }
            if !thread.is_empty() {
                thread.copy_within(range, write);
            }
            runs.append(&chunk.runs);
            write += chunk.kept;
            start += len;
        }
        for column in [&mut latency, &mut key, &mut seq] {
            column.truncate(write.min(column.len()));
        }
        thread.truncate(write.min(thread.len()));

        if dropping {
            if !runs.all_ordered() && !keep_seq {
                // Free this attempt's buffers before the second read holds its own.
                drop((latency, thread, key, seq));
                return self.read_exact(query, true);
            }
            let drop_first = runs.drop_counts(query.cuts.drop_fraction);
            let kept_rows = if runs.all_ordered() {
                // Per-thread file order is seq order: drop each thread's first rows.
                let mut seen = vec![0u64; drop_first.len()];
                retain_rows(&mut latency, &mut key, |row| {
                    let t = thread[row] as usize;
                    seen[t] += 1;
                    seen[t] > drop_first[t]
                })
            } else {
                let first_kept_seq = seq_thresholds(&thread, &seq, &runs, &drop_first);
                retain_rows(&mut latency, &mut key, |row| {
                    seq[row] >= first_kept_seq[thread[row] as usize]
                })
            };
            latency.truncate(kept_rows);
            key.truncate(kept_rows.min(key.len()));
        }
        drop((thread, seq));

        if !trace {
            return Ok(vec![(
                GroupKey {
                    slot: 0,
                    fragments: 0,
                },
                GroupLatencies::Exact(latency),
            )]);
        }
        let mut groups: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for (&packed, &value) in key.iter().zip(&latency) {
            groups.entry(packed).or_default().push(value);
        }
        Ok(groups
            .into_iter()
            .map(|(packed, values)| (GroupKey::unpack(packed), GroupLatencies::Exact(values)))
            .collect())
    }

    fn read_chunk_exact(
        &self,
        query: &SampleQuery,
        chunk: ChunkBuffers<'_>,
    ) -> Result<ChunkKept, AggregateError> {
        let ChunkBuffers {
            row_group,
            latency,
            thread,
            key,
            seq,
        } = chunk;
        let mut kept = 0;
        let mut runs = ThreadRuns::default();
        let send_cut = self.send_cut(row_group, query.cuts.skip_ns);
        if send_cut == SendCut::DropsAll {
            return Ok(ChunkKept { kept, runs });
        }
        let wanted = Wanted {
            thread_and_seq: !thread.is_empty(),
            t_send: send_cut == SendCut::PerRow,
            latency: Some(query.latency.column()),
            trace: !key.is_empty(),
        };
        self.for_each_batch(row_group, wanted, |columns| {
            let Some(values) = columns.latency else {
                return Ok(());
            };
            if kept + values.len() > latency.len() {
                return Err(self.error(format!(
                    "row group {row_group} has more rows than its metadata says"
                )));
            }
            if columns.thread.is_none() && columns.slot.is_none() {
                // The common figure-16 case, without per-row bookkeeping: a copy, or a branch-free compaction
                // that writes every value and advances only past the kept ones.
                let out = &mut latency[kept..kept + values.len()];
                match columns.t_send {
                    None => {
                        out.copy_from_slice(values);
                        kept += values.len();
                    }
                    Some(t_send) => {
                        let mut written = 0;
                        for (&value, &sent) in values.iter().zip(t_send) {
                            out[written] = value;
                            written += usize::from(sent >= query.cuts.skip_ns);
                        }
                        kept += written;
                    }
                }
                return Ok(());
            }
            for row in 0..values.len() {
                if let Some(t_send) = columns.t_send
                    && t_send[row] < query.cuts.skip_ns
                {
                    continue;
                }
                latency[kept] = values[row];
                if let (Some(threads), Some(seqs)) = (columns.thread, columns.seq) {
                    thread[kept] = threads[row];
                    runs.observe(threads[row], seqs[row]);
                    if !seq.is_empty() {
                        seq[kept] = seqs[row];
                    }
                }
                if let (Some(slots), Some(bytes), Some(piece)) =
                    (columns.slot, columns.request_bytes, query.trace_piece)
                {
                    key[kept] = trace_group(slots[row], bytes[row], piece).packed();
                }
                kept += 1;
            }
            Ok(())
        })?;
        Ok(ChunkKept { kept, runs })
    }

    /// HDR path: bounded memory whatever the point's size. The warm-up cut needs each thread's kept count
    /// first, so it costs a first pass over (thread, seq, t_send), and it requires seqs that increase per
    /// thread in file order (the measure node writes them so).
    fn read_hdr(
        &self,
        query: &SampleQuery,
    ) -> Result<Vec<(GroupKey, GroupLatencies)>, AggregateError> {
        let dropping = query.cuts.drop_fraction > 0.0;
        let row_groups: Vec<usize> = (0..self.row_group_rows.len()).collect();
        // Per chunk, how many kept rows of each thread precede it, and how many of each thread to drop.
        let (preceding, drop) = if dropping {
            let chunk_runs: Vec<ThreadRuns> = row_groups
                .par_iter()
                .map(|&row_group| {
                    let mut runs = ThreadRuns::default();
                    let send_cut = self.send_cut(row_group, query.cuts.skip_ns);
                    if send_cut == SendCut::DropsAll {
                        return Ok(runs);
                    }
                    let wanted = Wanted {
                        thread_and_seq: true,
                        t_send: send_cut == SendCut::PerRow,
                        latency: None,
                        trace: false,
                    };
                    self.for_each_batch(row_group, wanted, |columns| {
                        if let (Some(threads), Some(seqs)) = (columns.thread, columns.seq) {
                            for row in 0..threads.len() {
                                if columns.t_send.is_some_and(|t| t[row] < query.cuts.skip_ns) {
                                    continue;
                                }
                                runs.observe(threads[row], seqs[row]);
                            }
                        }
                        Ok(())
                    })?;
                    Ok(runs)
                })
                .collect::<Result<_, AggregateError>>()?;
            let mut total = ThreadRuns::default();
            let mut preceding = Vec::with_capacity(chunk_runs.len());
            for runs in &chunk_runs {
                preceding.push(total.0.iter().map(|run| run.kept).collect::<Vec<u64>>());
                total.append(runs);
            }
            if !total.all_ordered() {
                return Err(self.error(
                    "seq does not increase per thread in file order, which the histogram path (points \
                     above `exact_max_samples`) needs for `drop_fraction`; raise `exact_max_samples`",
                ));
            }
            (preceding, total.drop_counts(query.cuts.drop_fraction))
        } else {
            (vec![Vec::new(); row_groups.len()], Vec::new())
        };

        let per_chunk: Vec<BTreeMap<GroupKey, HdrAccumulator>> = row_groups
            .par_iter()
            .zip(preceding)
            .map(|(&row_group, mut seen)| {
                seen.resize(drop.len(), 0);
                let mut groups: BTreeMap<GroupKey, HdrAccumulator> = BTreeMap::new();
                let send_cut = self.send_cut(row_group, query.cuts.skip_ns);
                if send_cut == SendCut::DropsAll {
                    return Ok(groups);
                }
                let wanted = Wanted {
                    thread_and_seq: dropping,
                    t_send: send_cut == SendCut::PerRow,
                    latency: Some(query.latency.column()),
                    trace: query.trace_piece.is_some(),
                };
                self.for_each_batch(row_group, wanted, |columns| {
                    let Some(values) = columns.latency else {
                        return Ok(());
                    };
                    for row in 0..values.len() {
                        if columns.t_send.is_some_and(|t| t[row] < query.cuts.skip_ns) {
                            continue;
                        }
                        if let Some(threads) = columns.thread {
                            let t = threads[row] as usize;
                            seen[t] += 1;
                            if seen[t] <= drop[t] {
                                continue;
                            }
                        }
                        let key = match (columns.slot, columns.request_bytes, query.trace_piece) {
                            (Some(slots), Some(bytes), Some(piece)) => {
                                trace_group(slots[row], bytes[row], piece)
                            }
                            _ => GroupKey {
                                slot: 0,
                                fragments: 0,
                            },
                        };
                        groups
                            .entry(key)
                            .or_insert_with(HdrAccumulator::new)
                            .record(values[row]);
                    }
                    Ok(())
                })?;
                Ok(groups)
            })
            .collect::<Result<_, AggregateError>>()?;
        Ok(merge_hdr_groups(per_chunk, query))
    }
}

/// The histograms of each group, merged over the parts (chunks or threads) read in parallel. A point with no
/// kept sample still has its one group, empty, unless groups are trace pieces (a piece without samples is
/// left out).
pub(crate) fn merge_hdr_groups(
    parts: Vec<BTreeMap<GroupKey, HdrAccumulator>>,
    query: &SampleQuery,
) -> Vec<(GroupKey, GroupLatencies)> {
    let mut merged: BTreeMap<GroupKey, HdrAccumulator> = BTreeMap::new();
    for groups in parts {
        for (key, accumulator) in groups {
            merged
                .entry(key)
                .or_insert_with(HdrAccumulator::new)
                .merge(&accumulator);
        }
    }
    if merged.is_empty() && query.trace_piece.is_none() {
        merged.insert(
            GroupKey {
                slot: 0,
                fragments: 0,
            },
            HdrAccumulator::new(),
        );
    }
    merged
        .into_iter()
        .map(|(key, accumulator)| (key, GroupLatencies::Hdr(accumulator)))
        .collect()
}

pub(crate) fn trace_group(slot: u32, request_bytes: u32, piece: u32) -> GroupKey {
    let payload = request_bytes.saturating_sub(TRACE_HEADER_BYTES);
    // A shift for the usual power-of-two pieces: a division per row was a tenth of a trace's grouping.
    let fragments = if piece.is_power_of_two() {
        payload >> piece.trailing_zeros()
    } else {
        payload / piece
    };
    GroupKey { slot, fragments }
}

/// Splits `buffer` into consecutive slices of `lens`; an empty buffer (a column not kept) into empty slices.
fn split_by<'a, T>(lens: &[usize], mut buffer: &'a mut [T]) -> Vec<&'a mut [T]> {
    lens.iter()
        .map(|&len| {
            let len = len.min(buffer.len());
            let (head, tail) = std::mem::take(&mut buffer).split_at_mut(len);
            buffer = tail;
            head
        })
        .collect()
}

/// Keeps the rows for which `keep(row)` holds (called once per row, in order), compacting `latency` and, when
/// present, `key` in place; returns how many rows remain.
fn retain_rows(latency: &mut [u64], key: &mut [u64], mut keep: impl FnMut(usize) -> bool) -> usize {
    let mut write = 0;
    for row in 0..latency.len() {
        if keep(row) {
            latency[write] = latency[row];
            if !key.is_empty() {
                key[write] = key[row];
            }
            write += 1;
        }
    }
    write
}

/// For files not in seq order per thread: each thread's first kept seq, i.e. its `drop[t]`-th smallest seq
/// (seqs are unique per thread), found by grouping the seqs by thread and selecting within each group.
fn seq_thresholds(thread: &[u32], seq: &[u64], runs: &ThreadRuns, drop: &[u64]) -> Vec<u64> {
    let mut offsets = Vec::with_capacity(runs.0.len() + 1);
    let mut total = 0usize;
    for run in &runs.0 {
        offsets.push(total);
        total += run.kept as usize;
    }
    offsets.push(total);
    let mut next = offsets.clone();
    let mut by_thread = vec![0u64; total];
    for (&t, &s) in thread.iter().zip(seq) {
        by_thread[next[t as usize]] = s;
        next[t as usize] += 1;
    }
    (0..runs.0.len())
        .map(|t| {
            let group = &mut by_thread[offsets[t]..offsets[t + 1]];
            let rank = drop[t] as usize;
            if rank == 0 || group.is_empty() {
                0
            } else {
                *group.select_nth_unstable(rank).1
            }
        })
        .collect()
}

/// The number of rows in a samples file, from its footer.
pub(crate) fn row_count(path: &Path) -> Result<u64, AggregateError> {
    let file = File::open(path).map_err(|e| AggregateError::io(path, e))?;
    let metadata = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
        .map_err(|e| AggregateError::samples(path, format!("not a readable Parquet file: {e}")))?;
    Ok(metadata
        .metadata()
        .row_groups()
        .iter()
        .map(|group| group.num_rows().max(0) as u64)
        .sum())
}

/// One point's exact summary per block, in block order: samples sent in `[b·block_ns, (b+1)·block_ns)` form
/// block `b`. The cuts are the summary's (the `skip_s` send-time cut, then each thread's first
/// ⌊kept · drop_fraction⌋ in seq order), so the blocks partition exactly the samples the point's summary row
/// is over. The point's kept samples are held in memory; the caller reads blocks only for points on the exact
/// path.
pub(crate) fn block_summaries(
    path: &Path,
    query: &SampleQuery,
    block_ns: u64,
    notes: &mut Vec<String>,
) -> Result<Vec<(u64, Option<LatencySummary>)>, AggregateError> {
    if let Some(file) = sidecar(path, notes) {
        let summaries = if by_thread::narrow(&file, query.latency.column()) {
            by_thread::read_blocks::<u32>(&file, query, block_ns).map(summarize_blocks)
        } else {
            by_thread::read_blocks::<u64>(&file, query, block_ns).map(summarize_blocks)
        };
        match summaries {
            Ok(summaries) => return Ok(summaries),
            Err(e) => notes.push(fallback_note(path, &e)),
        }
    }
    read_blocks(path, query, block_ns).map(summarize_blocks)
}

/// Each block's exact summary. Blocks are small (a few thousand samples): one selection each, many at once.
fn summarize_blocks<T: Latency>(
    blocks: BTreeMap<u64, Vec<T>>,
) -> Vec<(u64, Option<LatencySummary>)> {
    blocks
        .into_par_iter()
        .map(|(block, mut latencies)| (block, exact_summary_in_place(&mut latencies)))
        .collect()
}

/// [`block_summaries`]' blocks, from the Parquet file.
fn read_blocks(
    path: &Path,
    query: &SampleQuery,
    block_ns: u64,
) -> Result<BTreeMap<u64, Vec<u64>>, AggregateError> {
    let file = SamplesFile::open(path, query)?;
    let skip_ns = query.cuts.skip_ns;
    let mut rows: Vec<(u32, u64, u64, u64)> = Vec::new();
    for row_group in 0..file.row_group_rows.len() {
        if file.send_cut(row_group, skip_ns) == SendCut::DropsAll {
            continue;
        }
        let wanted = Wanted {
            thread_and_seq: true,
            t_send: true,
            latency: Some(query.latency.column()),
            trace: false,
        };
        file.for_each_batch(row_group, wanted, |columns| {
            let (Some(thread), Some(seq), Some(t_send), Some(latency)) =
                (columns.thread, columns.seq, columns.t_send, columns.latency)
            else {
                return Ok(());
            };
            for row in 0..latency.len() {
                if t_send[row] >= skip_ns {
                    rows.push((thread[row], seq[row], t_send[row], latency[row]));
                }
            }
            Ok(())
        })?;
    }
    rows.sort_unstable_by_key(|&(thread, seq, _, _)| (thread, seq));
    let mut blocks: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for thread_rows in rows.chunk_by(|a, b| a.0 == b.0) {
        let dropped = (thread_rows.len() as f64 * query.cuts.drop_fraction).floor() as usize;
        for &(_, _, t_send, latency) in &thread_rows[dropped.min(thread_rows.len())..] {
            blocks
                .entry(t_send / block_ns.max(1))
                .or_default()
                .push(latency);
        }
    }
    Ok(blocks)
}
