//! Reading a point through its `samples.by-thread` sidecar: each thread's cuts are a range of its rows (the
//! send-time cut from a binary search over the send times, the warm-up cut from the count that remains), so only
//! the kept rows of the needed columns are read. The results are those of the Parquet reader in `samples`: the
//! same kept samples, and grouped the same way.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use fracflow_record::SampleColumn;
use fracflow_record::by_thread::{ByThreadError, RowValue, SamplesByThread};
use rayon::prelude::*;

use crate::quantile::{CountedValues, HdrAccumulator, Latency};
use crate::samples::{GroupKey, GroupLatencies, SampleQuery, merge_hdr_groups, trace_group};
use crate::spec::Cuts;

/// Rows read at once on the histogram path, per thread.
const HDR_BATCH_ROWS: u64 = 64 * 1024;

/// Rows of slots, request sizes and latencies read at once for a trace's groups, per thread.
const KEY_BATCH_ROWS: u64 = 16 * 1024;

/// Each thread's kept rows under `cuts`, in [`SamplesByThread::threads`] order: the rows sent at or after
/// `skip_ns`, less the first ⌊kept · drop_fraction⌋ of them (the Parquet reader's `drop_counts`).
fn kept_ranges(file: &SamplesByThread, cuts: Cuts) -> Result<Vec<Range<u64>>, ByThreadError> {
    let rows: Vec<u64> = file.threads().map(|(_, rows)| rows).collect();
    rows.par_iter()
        .enumerate()
        .map(|(index, &rows)| {
            let skipped = if cuts.skip_ns == 0 {
                0
            } else {
                file.first_row_sent_from(index, cuts.skip_ns)?
            };
            let kept = rows - skipped;
            let dropped = if cuts.drop_fraction > 0.0 {
                ((kept as f64 * cuts.drop_fraction).floor() as u64).min(kept)
            } else {
                0
            };
            Ok(skipped + dropped..rows)
        })
        .collect()
}

/// The values of `column` at `ranges` (one per thread), thread after thread, read in parallel.
fn read_ranges<T: RowValue>(
    file: &SamplesByThread,
    column: SampleColumn,
    ranges: &[Range<u64>],
) -> Result<Vec<T>, ByThreadError> {
    let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
    let mut values = vec![T::default(); total as usize];
    let mut slices = Vec::with_capacity(ranges.len());
    let mut rest = values.as_mut_slice();
    for range in ranges {
        let (head, tail) =
            std::mem::take(&mut rest).split_at_mut((range.end - range.start) as usize);
        slices.push(head);
        rest = tail;
    }
    slices
        .into_par_iter()
        .zip(ranges.par_iter())
        .enumerate()
        .try_for_each(|(index, (out, range))| file.read_rows(index, column, range.clone(), out))?;
    Ok(values)
}

/// Whether `column` is stored in at most 4 bytes, so that its values are read into `u32`s.
pub(crate) fn narrow(file: &SamplesByThread, column: SampleColumn) -> bool {
    file.width(column)
        .is_some_and(|width| width <= u32::MAX_WIDTH)
}

/// One point's groups, as [`crate::samples::read_point`] returns them from the Parquet file.
pub(crate) fn read_point(
    file: &SamplesByThread,
    query: &SampleQuery,
) -> Result<Vec<(GroupKey, GroupLatencies)>, ByThreadError> {
    let ranges = kept_ranges(file, query.cuts)?;
    let latency = query.latency.column();
    // A trace's groups count their values in u32s: a point of 2^32 rows or more (over 16 GiB of latencies)
    // goes to histograms even if the budget would hold it.
    let counted_max = if query.trace_piece.is_some() {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    };
    if file.rows() > query.exact_max_samples.min(counted_max) {
        return read_hdr(file, query, &ranges);
    }
    let narrow = narrow(file, latency);
    let Some(piece) = query.trace_piece else {
        let values = if narrow {
            GroupLatencies::ExactNarrow(read_ranges(file, latency, &ranges)?)
        } else {
            GroupLatencies::Exact(read_ranges(file, latency, &ranges)?)
        };
        let key = GroupKey {
            slot: 0,
            fragments: 0,
        };
        return Ok(vec![(key, values)]);
    };
    Ok(if narrow {
        read_trace_groups(file, &ranges, latency, piece, query.trace_runs)?
            .into_iter()
            .map(|(key, values)| (key, GroupLatencies::CountedNarrow(values)))
            .collect()
    } else {
        read_trace_groups(file, &ranges, latency, piece, query.trace_runs)?
            .into_iter()
            .map(|(key, values)| (key, GroupLatencies::Counted(values)))
            .collect()
    })
}

/// A trace's kept latencies by group, in key order, counted a piece at a time as they are read
/// ([`CountedValues`]): one pass over the slots, request sizes and latencies of each thread, in `runs` runs of
/// threads of about the same rows read side by side, and each group's counts and pieces put together in
/// parallel. Giving each row its group in one pass, making each group's vector and copying the latencies into
/// it in a second, then counting the group in two more took 80 % of a trace's aggregation
/// (`bench/aggregate_100m.sh`, mode `trace`).
fn read_trace_groups<T: RowValue + Latency>(
    file: &SamplesByThread,
    ranges: &[Range<u64>],
    latency: SampleColumn,
    piece: u32,
    runs: usize,
) -> Result<Vec<(GroupKey, CountedValues<T>)>, ByThreadError> {
    let runs = thread_runs(ranges, runs);
    let keyed = file.keyed();
    let per_run: Vec<TraceGroups<T>> = runs
        .into_par_iter()
        .map(|threads| {
            let mut groups = TraceGroups::new(piece);
            for index in threads {
                if keyed {
                    groups.read_keyed_thread(file, index, ranges[index].start, latency)?;
                } else {
                    groups.read_thread(file, index, ranges[index].clone(), latency)?;
                }
            }
            Ok(groups)
        })
        .collect::<Result<_, ByThreadError>>()?;
    let mut parts: BTreeMap<GroupKey, Vec<CountedValues<T>>> = BTreeMap::new();
    for run in per_run {
        for (key, group) in run.keys.into_iter().zip(run.groups) {
            parts.entry(key).or_default().push(group);
        }
    }
    Ok(parts
        .into_par_iter()
        .map(|(key, parts)| (key, CountedValues::merged(parts)))
        .collect())
}

/// The threads (indexes into `ranges`) cut into at most `runs` runs of consecutive threads with about the same
/// number of rows each.
fn thread_runs(ranges: &[Range<u64>], runs: usize) -> Vec<Range<usize>> {
    let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
    let per_run = total.div_ceil(runs.max(1) as u64).max(1);
    let mut cut = Vec::new();
    let (mut first, mut rows) = (0, 0u64);
    for (index, range) in ranges.iter().enumerate() {
        rows += range.end - range.start;
        if rows >= per_run {
            cut.push(first..index + 1);
            (first, rows) = (index + 1, 0);
        }
    }
    if first < ranges.len() {
        cut.push(first..ranges.len());
    }
    cut
}

/// One run of threads' kept latencies by trace group, each group's id its index in `keys` and `groups`.
struct TraceGroups<T> {
    piece: u32,
    /// The id of each key with a slot below [`DENSE_SLOTS`] and fewer fragments than [`DENSE_FRAGMENTS`] (at
    /// `slot * DENSE_FRAGMENTS + fragments`), or [`TraceGroups::NO_ID`]; other keys' ids are in `sparse`.
    dense: Box<[u32; (DENSE_SLOTS * DENSE_FRAGMENTS) as usize]>,
    sparse: HashMap<u64, u32>,
    keys: Vec<GroupKey>,
    groups: Vec<CountedValues<T>>,
}

impl<T: RowValue + Latency> TraceGroups<T> {
    const NO_ID: u32 = u32::MAX;

    fn new(piece: u32) -> TraceGroups<T> {
        TraceGroups {
            piece,
            dense: Box::new([Self::NO_ID; (DENSE_SLOTS * DENSE_FRAGMENTS) as usize]),
            sparse: HashMap::new(),
            keys: Vec::new(),
            groups: Vec::new(),
        }
    }

    /// The id of `key`: a table lookup for every key seen before with a dense id, [`TraceGroups::id_slowly`]
    /// otherwise.
    #[inline]
    fn id(&mut self, key: GroupKey) -> usize {
        if let Some(index) = Self::dense_index(key) {
            let id = self.dense[index];
            if id != Self::NO_ID {
                return id as usize;
            }
        }
        self.id_slowly(key)
    }

    /// Where `key`'s id is in `dense`, when it has its place there.
    #[inline]
    fn dense_index(key: GroupKey) -> Option<usize> {
        (key.slot < DENSE_SLOTS && key.fragments < DENSE_FRAGMENTS)
            .then(|| (key.slot * DENSE_FRAGMENTS + key.fragments) as usize)
    }

    /// The id of a key new to this run or outside the dense table, made for it when it is new.
    #[cold]
    fn id_slowly(&mut self, key: GroupKey) -> usize {
        let (keys, groups) = (&mut self.keys, &mut self.groups);
        let mut new_id = || {
            keys.push(key);
            groups.push(CountedValues::new());
            (keys.len() - 1) as u32
        };
        let id = if let Some(index) = Self::dense_index(key) {
            let entry = &mut self.dense[index];
            if *entry == Self::NO_ID {
                *entry = new_id();
            }
            *entry
        } else {
            *self.sparse.entry(key.packed()).or_insert_with(new_id)
        };
        id as usize
    }

    /// Adds thread `index`'s rows from `from` on from the file's keyed columns: each key's kept rows are one
    /// range of them, read straight into its group's pieces. Without them, each row's latency went to its group
    /// one row at a time ([`TraceGroups::read_thread`]), most of what a trace's aggregation had left.
    fn read_keyed_thread(
        &mut self,
        file: &SamplesByThread,
        index: usize,
        from: u64,
        latency: SampleColumn,
    ) -> Result<(), ByThreadError> {
        let kept = file.keyed_rows_from(index, from)?;
        for (key, rows) in file.keys(index).iter().zip(kept) {
            if rows.is_empty() {
                continue;
            }
            let id = self.id(trace_group(key.slot, key.request_bytes, self.piece));
            self.groups[id].fill(rows.end - rows.start, |done, out| {
                let start = rows.start + done;
                file.read_keyed_rows(index, latency, start..start + out.len() as u64, out)
            })?;
        }
        Ok(())
    }

    /// Adds thread `index`'s `rows`, reading its slots, request sizes and latencies a batch at a time.
    fn read_thread(
        &mut self,
        file: &SamplesByThread,
        index: usize,
        rows: Range<u64>,
        latency: SampleColumn,
    ) -> Result<(), ByThreadError> {
        let batch = KEY_BATCH_ROWS.min(rows.end - rows.start) as usize;
        let mut slots = vec![0u32; batch];
        let mut bytes = vec![0u32; batch];
        let mut values = vec![T::default(); batch];
        let mut start = rows.start;
        while start < rows.end {
            let end = (start + KEY_BATCH_ROWS).min(rows.end);
            let len = (end - start) as usize;
            let (slots, bytes, values) = (&mut slots[..len], &mut bytes[..len], &mut values[..len]);
            file.read_rows(index, SampleColumn::Slot, start..end, slots)?;
            file.read_rows(index, SampleColumn::RequestBytes, start..end, bytes)?;
            file.read_rows(index, latency, start..end, values)?;
            for ((&slot, &bytes), &value) in slots.iter().zip(&*bytes).zip(&*values) {
                let id = self.id(trace_group(slot, bytes, self.piece));
                self.groups[id].push(value);
            }
            start = end;
        }
        Ok(())
    }
}

/// Keys with a slot below this and fewer fragments than [`DENSE_FRAGMENTS`] get their id from a table, without
/// hashing (every real trace: four functions, a few fragment counts).
const DENSE_SLOTS: u32 = 16;
const DENSE_FRAGMENTS: u32 = 256;

/// Points above `exact_max_samples`: the kept rows streamed into histograms, a batch of each thread at a time.
fn read_hdr(
    file: &SamplesByThread,
    query: &SampleQuery,
    ranges: &[Range<u64>],
) -> Result<Vec<(GroupKey, GroupLatencies)>, ByThreadError> {
    let per_thread: Vec<BTreeMap<GroupKey, HdrAccumulator>> = ranges
        .par_iter()
        .enumerate()
        .map(|(index, range)| {
            let mut groups: BTreeMap<GroupKey, HdrAccumulator> = BTreeMap::new();
            let mut start = range.start;
            while start < range.end {
                let end = (start + HDR_BATCH_ROWS).min(range.end);
                let len = (end - start) as usize;
                let mut values = vec![0u64; len];
                file.read_rows(index, query.latency.column(), start..end, &mut values)?;
                let keys: Vec<GroupKey> = match query.trace_piece {
                    Some(piece) => {
                        let mut slots = vec![0u64; len];
                        let mut bytes = vec![0u64; len];
                        file.read_rows(index, SampleColumn::Slot, start..end, &mut slots)?;
                        file.read_rows(index, SampleColumn::RequestBytes, start..end, &mut bytes)?;
                        slots
                            .iter()
                            .zip(&bytes)
                            .map(|(&slot, &bytes)| trace_group(slot as u32, bytes as u32, piece))
                            .collect()
                    }
                    None => Vec::new(),
                };
                if keys.is_empty() {
                    let accumulator = groups
                        .entry(GroupKey {
                            slot: 0,
                            fragments: 0,
                        })
                        .or_insert_with(HdrAccumulator::new);
                    values.iter().for_each(|&v| accumulator.record(v));
                } else {
                    for (&value, key) in values.iter().zip(keys) {
                        groups
                            .entry(key)
                            .or_insert_with(HdrAccumulator::new)
                            .record(value);
                    }
                }
                start = end;
            }
            Ok(groups)
        })
        .collect::<Result<_, ByThreadError>>()?;
    Ok(merge_hdr_groups(per_thread, query))
}

/// One point's kept latencies by block of `block_ns` of send time, as [`crate::samples::read_blocks`] returns
/// them from the Parquet file.
///
/// In two passes, neither of which holds a column of the whole point. The first reads each thread's send times a
/// batch at a time and notes where each of its blocks starts: its send times do not decrease, so a block is a run
/// of its rows. The second makes each block's vector at its final size and fills it with the thread's latencies
/// run by run, the blocks split into a few spans of time read side by side, each reading every thread's rows of
/// its span in order. Reading both columns of the whole point into vectors and growing the blocks from them
/// took three quarters of Figure 16's block statistics (`bench/aggregate_100m.sh`, mode `fig16`).
pub(crate) fn read_blocks<T: RowValue>(
    file: &SamplesByThread,
    query: &SampleQuery,
    block_ns: u64,
) -> Result<BTreeMap<u64, Vec<T>>, ByThreadError> {
    let ranges = kept_ranges(file, query.cuts)?;
    let block_ns = block_ns.max(1);
    let starts: Vec<Vec<(u64, u64)>> = ranges
        .par_iter()
        .enumerate()
        .map(|(index, range)| block_starts(file, index, range.clone(), block_ns))
        .collect::<Result<_, ByThreadError>>()?;
    // Each thread's runs as (block, rows).
    let runs: Vec<Vec<(u64, Range<u64>)>> = starts
        .iter()
        .zip(&ranges)
        .map(|(starts, range)| {
            starts
                .iter()
                .enumerate()
                .map(|(i, &(block, first))| {
                    let end = starts.get(i + 1).map_or(range.end, |&(_, next)| next);
                    (block, first..end)
                })
                .collect()
        })
        .collect();
    let mut sizes: BTreeMap<u64, usize> = BTreeMap::new();
    for (block, rows) in runs.iter().flatten() {
        *sizes.entry(*block).or_default() += (rows.end - rows.start) as usize;
    }
    let total: usize = sizes.values().sum();
    let spans = block_spans(&sizes, total.div_ceil(rayon::current_num_threads().max(1)));
    let latency = query.latency.column();
    let filled: Vec<Vec<(u64, Vec<T>)>> = spans
        .par_iter()
        .map(|span| {
            let mut blocks: Vec<(u64, Vec<T>)> = span
                .iter()
                .map(|(&block, &size)| (block, Vec::with_capacity(size)))
                .collect();
            let (first, last) = match (blocks.first(), blocks.last()) {
                (Some(first), Some(last)) => (first.0, last.0),
                _ => return Ok(blocks),
            };
            let mut batch = vec![T::default(); BLOCK_BATCH_ROWS as usize];
            for (index, thread_runs) in runs.iter().enumerate() {
                // This thread's runs in the span: consecutive rows, read a batch at a time (a read checks whole
                // pages, so reading run by run would check each page many times).
                let from = thread_runs.partition_point(|(block, _)| *block < first);
                let to = thread_runs.partition_point(|(block, _)| *block <= last);
                let span_runs = &thread_runs[from..to];
                let (Some((_, head)), Some((_, tail))) = (span_runs.first(), span_runs.last())
                else {
                    continue;
                };
                let (mut slot, mut run) = (0, 0);
                let mut start = head.start;
                while start < tail.end {
                    let end = (start + BLOCK_BATCH_ROWS).min(tail.end);
                    let values = &mut batch[..(end - start) as usize];
                    file.read_rows(index, latency, start..end, values)?;
                    // Each run's rows in this batch go to its block.
                    while run < span_runs.len() && span_runs[run].1.start < end {
                        let (block, rows) = &span_runs[run];
                        while blocks[slot].0 < *block {
                            slot += 1;
                        }
                        let (lo, hi) = (rows.start.max(start), rows.end.min(end));
                        blocks[slot].1.extend_from_slice(
                            &values[(lo - start) as usize..(hi - start) as usize],
                        );
                        if rows.end > end {
                            break;
                        }
                        run += 1;
                    }
                    start = end;
                }
            }
            Ok(blocks)
        })
        .collect::<Result<_, ByThreadError>>()?;
    Ok(filled.into_iter().flatten().collect())
}

/// Rows of one thread's send times, or latencies, read at once for blocks.
const BLOCK_BATCH_ROWS: u64 = 16 * 1024;

/// Where each block of thread `index`'s `rows` starts: (block, first row), in row order. An error if its send
/// times decrease, which a sound file never holds.
fn block_starts(
    file: &SamplesByThread,
    index: usize,
    rows: Range<u64>,
    block_ns: u64,
) -> Result<Vec<(u64, u64)>, ByThreadError> {
    let mut starts: Vec<(u64, u64)> = Vec::new();
    let mut sends = vec![0u64; BLOCK_BATCH_ROWS as usize];
    let mut last_sent = 0u64;
    let mut start = rows.start;
    while start < rows.end {
        let end = (start + BLOCK_BATCH_ROWS).min(rows.end);
        let sends = &mut sends[..(end - start) as usize];
        file.read_rows(index, SampleColumn::TSendNs, start..end, sends)?;
        if sends.first().is_some_and(|&first| first < last_sent) || !sends.is_sorted() {
            return Err(file.corrupt_thread(index, "send times decrease"));
        }
        last_sent = sends.last().copied().unwrap_or(last_sent);
        // Each run found by a binary search for the first row sent after its block's window.
        let mut at = 0;
        while at < sends.len() {
            let block = sends[at] / block_ns;
            let window_end = (block + 1).saturating_mul(block_ns);
            // At least the row itself: a send time of u64::MAX has a window that ends at it.
            let run = sends[at..]
                .partition_point(|&sent| sent < window_end)
                .max(1);
            if starts.last().is_none_or(|&(last, _)| last != block) {
                starts.push((block, start + at as u64));
            }
            at += run;
        }
        start = end;
    }
    Ok(starts)
}

/// `sizes` (rows per block, in block order) cut into consecutive spans of about `target` rows each.
fn block_spans(sizes: &BTreeMap<u64, usize>, target: usize) -> Vec<BTreeMap<u64, usize>> {
    let mut spans = vec![BTreeMap::new()];
    let mut rows = 0;
    for (&block, &size) in sizes {
        if rows >= target.max(1) {
            spans.push(BTreeMap::new());
            rows = 0;
        }
        if let Some(span) = spans.last_mut() {
            span.insert(block, size);
        }
        rows += size;
    }
    spans
}
