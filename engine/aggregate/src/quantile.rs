//! Quantiles: exact nearest-rank selection, an HDR histogram for points above the memory budget, and the
//! summary statistics of small f64 samples (per-second averages).

use hdrhistogram::Histogram;
use rayon::prelude::*;

/// The quantile columns of a latency summary.
pub(crate) const QUANTILES: [(&str, f64); 6] = [
    ("p99_us", 0.99),
    ("p95_us", 0.95),
    ("p90_us", 0.90),
    ("p75_us", 0.75),
    ("median_us", 0.50),
    ("p25_us", 0.25),
];

/// Significant digits of the HDR histograms: values are bucketed to within 10^-3 relative (≈ 0.1 %).
const HDR_SIGNIFICANT_DIGITS: u8 = 3;

/// How a summary's quantiles were computed; shown in the `method` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// Exact order statistics at rank round((n−1)·q).
    Exact,
    /// HDR histogram, 3 significant digits: each quantile within 0.1 % of an exact one.
    Hdr,
}

impl Method {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Method::Exact => "exact",
            Method::Hdr => "hdr-3-digits",
        }
    }
}

/// The statistics of one group of per-request latencies, in nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LatencySummary {
    pub requests: u64,
    pub mean_ns: f64,
    /// In the order of [`QUANTILES`].
    pub quantiles_ns: [u64; QUANTILES.len()],
    pub max_ns: u64,
    pub method: Method,
}

/// The rank of quantile `q` among `n` sorted values: round((n−1)·q), half away from zero — the definition of
/// polars' `QuantileMethod::Nearest` and of numpy's `method="nearest"` except at exact halves.
pub(crate) fn nearest_rank(n: usize, q: f64) -> usize {
    ((n - 1) as f64 * q).round() as usize
}

/// The exact selection's buckets keep at most this many bits below a value's leading bit: 2^11 buckets per
/// power of two, so a bucket spans at most 1/2048 of its values (4 ns around 10 µs) and holds few samples.
const MAX_SUB_BUCKET_BITS: u32 = 11;

/// Values per parallel task of the selection passes: about two tasks per thread, and at least 2^18 values so
/// that small groups run in one task.
fn select_chunk(n: usize) -> usize {
    n.div_ceil(2 * rayon::current_num_threads()).max(1 << 18)
}

/// The log-linear buckets of one selection: `sub_bits` bits below a value's leading bit, counted from the
/// bucket of the smallest value to that of the largest.
#[derive(Debug, Clone, Copy)]
struct Buckets {
    sub_bits: u32,
    first: usize,
    count: usize,
}

/// From this many values on, a selection counts in buckets over the whole range of u64.
const WHOLE_RANGE_MIN_VALUES: usize = 1 << 18;

impl Buckets {
    /// 2^[`MAX_SUB_BUCKET_BITS`] buckets per power of two, over every value up to `max`.
    fn whole_range(max: u64) -> Buckets {
        let unbounded = Buckets {
            sub_bits: MAX_SUB_BUCKET_BITS,
            first: 0,
            count: 0,
        };
        Buckets {
            count: unbounded.of(max) + 1,
            ..unbounded
        }
    }

    /// About four values per bucket over the powers of two that `min..=max` spans, so that the buckets holding
    /// the ranks hold few values, and zeroing the counters costs less than counting.
    fn spanning(n: usize, min: u64, max: u64) -> Buckets {
        let octaves = (min.leading_zeros() - max.leading_zeros() + 1) as usize;
        let per_octave = (n / 4 / octaves).max(1);
        let sub_bits = per_octave.ilog2().clamp(2, MAX_SUB_BUCKET_BITS);
        let unbounded = Buckets {
            sub_bits,
            first: 0,
            count: 0,
        };
        let first = unbounded.of(min);
        Buckets {
            first,
            count: unbounded.of(max) - first + 1,
            ..unbounded
        }
    }

    /// The bucket of `value` (between `min` and `max`): monotone in `value`, so the k-th smallest value lies in
    /// the bucket where the cumulative count passes k. Values below 2^(sub_bits + 1) get a bucket each.
    #[inline]
    fn of(self, value: u64) -> usize {
        let bits = 64 - value.leading_zeros();
        let absolute = if bits <= self.sub_bits + 1 {
            value as usize
        } else {
            let shift = bits - (self.sub_bits + 1);
            ((shift as usize) << self.sub_bits) + (value >> shift) as usize
        };
        absolute - self.first
    }

    /// The values [`Buckets::of`] puts in `bucket`: `low..=high`.
    fn values_of(self, bucket: usize) -> (u64, u64) {
        let absolute = (bucket + self.first) as u64;
        if absolute < 1 << (self.sub_bits + 1) {
            return (absolute, absolute);
        }
        // `of` made `absolute` (shift << sub_bits) + (value >> shift), the second term in
        // [2^sub_bits, 2^(sub_bits + 1)).
        let shift = (absolute >> self.sub_bits) - 1;
        let low = (absolute - (shift << self.sub_bits)) << shift;
        (low, low + ((1 << shift) - 1))
    }
}

/// A latency as an exact selection holds it: `u32` when the point's column is stored in at most 4 bytes (half
/// the memory, and half the bytes every pass over the values reads), `u64` otherwise.
pub(crate) trait Latency: Copy + Default + Ord + Send + Sync + Into<u64> {
    /// The largest value of the type.
    const MAX: u64;

    /// The sum and the maximum (0 when empty) of `values`.
    fn sum_and_max(values: &[Self]) -> (u128, u64);

    /// `value`, or the type's largest value when it does not fit.
    fn saturating_from(value: u64) -> Self;

    /// `self - other`, wrapping: with it one comparison tells whether a value lies in a range.
    fn wrapping_sub(self, other: Self) -> Self;
}

impl Latency for u32 {
    const MAX: u64 = u32::MAX as u64;

    /// Summed in u64s, 2^32 values at a time (they cannot overflow one), which vectorizes.
    fn sum_and_max(values: &[u32]) -> (u128, u64) {
        let sum = values
            .chunks(1 << 32)
            .map(|chunk| u128::from(chunk.iter().map(|&v| u64::from(v)).sum::<u64>()))
            .sum();
        (sum, values.iter().copied().max().map_or(0, u64::from))
    }

    fn saturating_from(value: u64) -> u32 {
        u32::try_from(value).unwrap_or(u32::MAX)
    }

    fn wrapping_sub(self, other: u32) -> u32 {
        u32::wrapping_sub(self, other)
    }
}

impl Latency for u64 {
    const MAX: u64 = u64::MAX;

    fn sum_and_max(values: &[u64]) -> (u128, u64) {
        let sum = values.iter().map(|&v| u128::from(v)).sum();
        (sum, values.iter().copied().max().unwrap_or(0))
    }

    fn saturating_from(value: u64) -> u64 {
        value
    }

    fn wrapping_sub(self, other: u64) -> u64 {
        u64::wrapping_sub(self, other)
    }
}

/// The sum, the maximum and the values at `ranks` (0-based, each below `values.len()`) of `values`, which is
/// not empty.
///
/// A bucketed selection instead of sorting or `select_nth_unstable` over everything: a parallel pass counts the
/// values in log-linear buckets (for few values, between their minimum and maximum, found first), which tells
/// the bucket holding each rank and the rank inside it; [`select_counted`] then collects only those buckets'
/// values. Buckets are a small fraction of their value wide, so they hold few samples whatever the spread; many
/// equal values in one bucket only make that last selection longer, never wrong.
fn select_ranks<T: Latency>(values: &[T], ranks: &[usize]) -> (u128, u64, Vec<u64>) {
    let n = values.len();
    // Many values: buckets over the whole range of their type at the finest resolution (at most a MiB of
    // counters, little beside the values), counted in one pass. Few values: a first pass finds the range, so
    // that the counters are few.
    let buckets = if n >= WHOLE_RANGE_MIN_VALUES {
        Buckets::whole_range(T::MAX)
    } else {
        let (min, max) = values.iter().fold((u64::MAX, 0u64), |(min, max), &v| {
            let v: u64 = v.into();
            (min.min(v), max.max(v))
        });
        Buckets::spanning(n, min, max)
    };
    let empty = || vec![0u64; buckets.count];
    let counts = values
        .par_chunks(select_chunk(n))
        .fold(empty, |mut counts, chunk| {
            for &v in chunk {
                counts[buckets.of(v.into())] += 1;
            }
            counts
        })
        .reduce(empty, |mut a, b| {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
            a
        });
    select_counted(&[values], buckets, &counts, ranks)
}

/// The sum, the maximum and the values at `ranks` (0-based, each below the number of values) of the values in
/// `pieces`, which `counts` counts in `buckets`: one walk over the counts finds the bucket holding each rank
/// and the rank inside it, one parallel pass over the values sums them, finds the maximum and collects the
/// values of those buckets only, and `select_nth_unstable` runs on each bucket's.
fn select_counted<T: Latency, C: Copy + Into<u64>>(
    pieces: &[&[T]],
    buckets: Buckets,
    counts: &[C],
    ranks: &[usize],
) -> (u128, u64, Vec<u64>) {
    let n: usize = pieces.iter().map(|piece| piece.len()).sum();
    // Each rank's bucket (as an index among the distinct target buckets) and its rank inside the bucket, found by
    // one walk over the cumulative counts in rank order.
    let mut order: Vec<usize> = (0..ranks.len()).collect();
    order.sort_by_key(|&i| ranks[i]);
    let mut target_buckets: Vec<usize> = Vec::new();
    let mut targets = vec![(0usize, 0usize); ranks.len()];
    let (mut bucket, mut below) = (0usize, 0u64);
    for i in order {
        let rank = ranks[i] as u64;
        while rank >= below + counts[bucket].into() {
            below += counts[bucket].into();
            bucket += 1;
        }
        if target_buckets.last() != Some(&bucket) {
            target_buckets.push(bucket);
        }
        targets[i] = (target_buckets.len() - 1, (rank - below) as usize);
    }
    let collect = Collect::new(buckets, &target_buckets);
    struct Pass<T> {
        sum: u128,
        max: u64,
        candidates: Vec<Vec<T>>,
    }
    let empty = || Pass {
        sum: 0,
        max: 0,
        candidates: vec![Vec::new(); target_buckets.len()],
    };
    let add = |mut pass: Pass<T>, chunk: &[T]| {
        // The sum and the maximum in a loop of their own, which vectorizes.
        let (sum, max) = T::sum_and_max(chunk);
        pass.sum += sum;
        pass.max = pass.max.max(max);
        collect.candidates(chunk, &mut pass.candidates);
        pass
    };
    let chunk = select_chunk(n);
    // Few values (a trace's group, whose neighbours run in parallel) in one task.
    let Pass {
        sum,
        max,
        mut candidates,
    } = if n <= chunk {
        pieces.iter().copied().fold(empty(), add)
    } else {
        pieces
            .par_iter()
            .flat_map(|piece| piece.par_chunks(chunk))
            .fold(empty, add)
            .reduce(empty, |mut a, b| {
                a.sum += b.sum;
                a.max = a.max.max(b.max);
                a.candidates
                    .iter_mut()
                    .zip(b.candidates)
                    .for_each(|(x, mut y)| x.append(&mut y));
                a
            })
    };
    let selected = targets
        .into_iter()
        .map(|(slot, rank)| (*candidates[slot].select_nth_unstable(rank).1).into())
        .collect();
    (sum, max, selected)
}

/// Up to this many target buckets, a value's is found by comparing it with each one's range of values, in
/// blocks that vectorize; with more, by a table from bucket to target.
const COMPARED_TARGETS: usize = 8;

/// Values per block of [`Collect::Compared`]: a block none of whose values is in a target is passed over after
/// its compares alone, and a few targets' buckets hold a small fraction of the values.
const COMPARED_BLOCK: usize = 64;

/// How [`select_counted`]'s pass finds the values of the target buckets.
enum Collect<T> {
    /// Each target's values as `(low, high - low)`, padded with copies of the first: a value `v` is in a target
    /// when `v - low` (wrapping) is at most the width. Per value, a compare per target without a branch, where
    /// computing its bucket and looking it up took more than half of a 100 M-row summary's time
    /// (`bench/aggregate_100m.sh`, mode `all`).
    Compared([(T, T); COMPARED_TARGETS]),
    /// Per bucket from the first target's to the last's, its target or `NO_TARGET`.
    Table {
        buckets: Buckets,
        first: usize,
        target_of_bucket: Vec<u32>,
    },
}

const NO_TARGET: u32 = u32::MAX;

impl<T: Latency> Collect<T> {
    /// `targets`: distinct buckets in increasing order, not empty.
    fn new(buckets: Buckets, targets: &[usize]) -> Collect<T> {
        if targets.len() <= COMPARED_TARGETS {
            let range = |bucket: usize| {
                let (low, high) = buckets.values_of(bucket);
                let low = T::saturating_from(low);
                (low, T::saturating_from(high).wrapping_sub(low))
            };
            let first = range(targets.first().copied().unwrap_or(0));
            let mut ranges = [first; COMPARED_TARGETS];
            for (slot, &bucket) in ranges.iter_mut().zip(targets) {
                *slot = range(bucket);
            }
            return Collect::Compared(ranges);
        }
        let first = targets.first().copied().unwrap_or(0);
        let last = targets.last().copied().unwrap_or(0);
        let mut target_of_bucket = vec![NO_TARGET; last - first + 1];
        for (target, &bucket) in targets.iter().enumerate() {
            target_of_bucket[bucket - first] = target as u32;
        }
        Collect::Table {
            buckets,
            first,
            target_of_bucket,
        }
    }

    /// Appends each of `values` that lies in a target bucket to that target's candidates.
    fn candidates(&self, values: &[T], candidates: &mut [Vec<T>]) {
        match self {
            Collect::Compared(ranges) => {
                let target = |v: T| {
                    ranges
                        .iter()
                        .position(|&(low, width)| v.wrapping_sub(low) <= width)
                };
                let mut push = |block: &[T]| {
                    for &v in block {
                        if let Some(target) = target(v) {
                            candidates[target].push(v);
                        }
                    }
                };
                let blocks = values.chunks_exact(COMPARED_BLOCK);
                let rest = blocks.remainder();
                for block in blocks {
                    // Every compare, without stopping at the first hit: that is what vectorizes.
                    let mut hit = false;
                    for &v in block {
                        for &(low, width) in ranges {
                            hit |= v.wrapping_sub(low) <= width;
                        }
                    }
                    if hit {
                        push(block);
                    }
                }
                push(rest);
            }
            Collect::Table {
                buckets,
                first,
                target_of_bucket,
            } => {
                for &v in values {
                    let Some(offset) = buckets.of(v.into()).checked_sub(*first) else {
                        continue;
                    };
                    match target_of_bucket.get(offset) {
                        Some(&target) if target != NO_TARGET => candidates[target as usize].push(v),
                        _ => {}
                    }
                }
            }
        }
    }
}

/// Values in pieces (the order of values does not matter to a summary or a CDF), counted in buckets over their
/// type's whole range a piece at a time as each fills. A trace's groups are filled this way while the
/// sidecar is read, so that their summaries and CDFs ([`counted_summary_and_cdf`]) take one more pass over the
/// values instead of three passes and a copy into one vector per group: the copy and the passes took 60 % of a
/// trace's aggregation (`bench/aggregate_100m.sh`, mode `trace`). Pieces of a fixed size, so that the runs of
/// threads a point was read in merge without copying, and a group is counted once it holds a piece's worth (one
/// growing vector per group measured the same). A full piece is counted as it is put aside, while it is still
/// in the cache, rather than each value as it arrives: a row's increment then lands in one group's counters at a
/// time instead of any of a point's groups' (1.57 → 1.45 CPU seconds and 0.93 → 0.79 s, medians of 12
/// alternating runs of `bench/aggregate_100m.sh`'s `trace` mode). Keeping the pieces of dropped groups for the
/// next point's, which took the point's 55 000 page faults down to 1 700, did not change the CPU time.
#[derive(Debug)]
pub(crate) struct CountedValues<T> {
    /// Per bucket of [`Buckets::whole_range`] of `T`, the values of the full pieces, once there is one: below
    /// that, the counters (176 KiB for `u32`s) would outweigh the values, and selecting them counts them over
    /// their own range. The reader keeps a point's groups below 2^32 values.
    counts: Option<Vec<u32>>,
    /// The piece being filled, at most [`PIECE_VALUES`] long, not counted in `counts`.
    values: Vec<T>,
    /// Full pieces, and the pieces of merged [`CountedValues`].
    full: Vec<Vec<T>>,
}

/// Values per piece of [`CountedValues`] (64 KiB of `u32`s).
const PIECE_VALUES: usize = 16 * 1024;

impl<T: Latency> CountedValues<T> {
    fn buckets() -> Buckets {
        Buckets::whole_range(T::MAX)
    }

    pub(crate) fn new() -> CountedValues<T> {
        CountedValues {
            counts: None,
            values: Vec::new(),
            full: Vec::new(),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, value: T) {
        if self.values.len() == PIECE_VALUES {
            self.next_piece();
        }
        self.values.push(value);
    }

    /// Adds `count` values that `read` writes, a piece's room at a time: `read(done, out)` fills `out` with
    /// the values from the `done`-th on.
    pub(crate) fn fill<E>(
        &mut self,
        count: u64,
        mut read: impl FnMut(u64, &mut [T]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut done = 0u64;
        while done < count {
            if self.values.len() == PIECE_VALUES {
                self.next_piece();
            }
            let len = self.values.len();
            let take =
                (PIECE_VALUES - len).min(usize::try_from(count - done).unwrap_or(usize::MAX));
            self.values.resize(len + take, T::default());
            read(done, &mut self.values[len..])?;
            done += take as u64;
        }
        Ok(())
    }

    /// Counts the full piece, puts it aside and starts another.
    #[cold]
    fn next_piece(&mut self) {
        let counts = self
            .counts
            .get_or_insert_with(|| vec![0; Self::buckets().count]);
        Self::count(counts, &self.values);
        let full = std::mem::replace(&mut self.values, Vec::with_capacity(PIECE_VALUES));
        self.full.push(full);
    }

    fn count(counts: &mut [u32], values: &[T]) {
        for &v in values {
            counts[Self::buckets().of(v.into())] += 1;
        }
    }

    /// The values of `parts` together: counted when there are at least a piece's worth of them.
    pub(crate) fn merged(parts: Vec<CountedValues<T>>) -> CountedValues<T> {
        let total: usize = parts.iter().map(CountedValues::len).sum();
        if total < PIECE_VALUES && parts.iter().all(|part| part.counts.is_none()) {
            let mut merged = CountedValues::new();
            for part in parts {
                merged.values.extend(part.values);
            }
            return merged;
        }
        let mut counts = vec![0; Self::buckets().count];
        let mut full = Vec::new();
        for part in parts {
            if let Some(part_counts) = &part.counts {
                counts
                    .iter_mut()
                    .zip(part_counts)
                    .for_each(|(x, &y)| *x += y);
            }
            // The piece being filled is not counted yet, whether or not full pieces were.
            Self::count(&mut counts, &part.values);
            full.extend(part.full);
            full.push(part.values);
        }
        full.retain(|piece| !piece.is_empty());
        CountedValues {
            counts: Some(counts),
            values: Vec::new(),
            full,
        }
    }

    fn len(&self) -> usize {
        self.values.len() + self.full.iter().map(Vec::len).sum::<usize>()
    }

    fn pieces(&self) -> Vec<&[T]> {
        std::iter::once(self.values.as_slice())
            .chain(self.full.iter().map(Vec::as_slice))
            .filter(|piece| !piece.is_empty())
            .collect()
    }
}

/// Exact summary of `values`, which it reorders; `None` when empty. For the many small groups of a `blocks`
/// table (a few thousand values each): one pass for the sum and the maximum, then `select_nth_unstable` per
/// quantile in rank order, each over the values at or above the rank before it. On such groups this is
/// cheaper than [`exact_summary_and_cdf`]'s bucketed selection, which is made for large groups and many ranks
/// (a point's summary with a CDF's 200): Figure 16's aggregation (`bench/aggregate_100m.sh`, mode
/// `fig16`, 9 632 blocks) spent 27 % of its profile selecting blocks by buckets and 15 % in place.
pub(crate) fn exact_summary_in_place<T: Latency>(values: &mut [T]) -> Option<LatencySummary> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let (sum, max) = values.iter().fold((0u128, 0u64), |(sum, max), &v| {
        let v: u64 = v.into();
        (sum + u128::from(v), max.max(v))
    });
    let mut by_rank: Vec<(usize, usize)> = QUANTILES
        .iter()
        .enumerate()
        .map(|(column, &(_, q))| (nearest_rank(n, q), column))
        .collect();
    by_rank.sort_unstable();
    let mut quantiles_ns = [0u64; QUANTILES.len()];
    // Every value before `settled` is at most the one at `settled`, every value after it at least.
    let mut settled = 0;
    for (rank, column) in by_rank {
        quantiles_ns[column] = (*values[settled..].select_nth_unstable(rank - settled).1).into();
        settled = rank;
    }
    Some(LatencySummary {
        requests: n as u64,
        mean_ns: sum as f64 / n as f64,
        quantiles_ns,
        max_ns: max,
        method: Method::Exact,
    })
}

/// The 1-based ranks of a CDF of `points` pairs over `n` values: ⌈i·n/points⌉, without repeats.
fn cdf_ranks(n: usize, points: usize) -> Vec<usize> {
    let mut ranks: Vec<usize> = (1..=points).map(|i| (i * n).div_ceil(points)).collect();
    ranks.dedup();
    ranks.retain(|&rank| rank > 0);
    ranks
}

/// [`exact_summary_in_place`]'s statistics of `values` and at most `points` (latency_us, fraction) pairs of
/// their empirical CDF, from one selection: the i-th pair is the sample at rank ⌈i·n/points⌉ − 1 and the
/// fraction of samples at or below that rank, so both columns are non-decreasing and the last pair is (max, 1).
pub(crate) fn exact_summary_and_cdf<T: Latency>(
    values: &[T],
    points: usize,
) -> (Option<LatencySummary>, Vec<(f64, f64)>) {
    summary_and_cdf(values.len(), points, |ranks| select_ranks(values, ranks))
}

/// [`exact_summary_and_cdf`] of counted values as [`CountedValues::merged`] leaves them: every value counted.
pub(crate) fn counted_summary_and_cdf<T: Latency>(
    values: &CountedValues<T>,
    points: usize,
) -> (Option<LatencySummary>, Vec<(f64, f64)>) {
    let Some(counts) = &values.counts else {
        // Never counted: fewer than a piece's values, all in one piece.
        return exact_summary_and_cdf(&values.values, points);
    };
    let pieces = values.pieces();
    let n = pieces.iter().map(|piece| piece.len()).sum();
    debug_assert_eq!(
        counts.iter().map(|&count| count as usize).sum::<usize>(),
        n,
        "summarised before merging"
    );
    summary_and_cdf(n, points, |ranks| {
        select_counted(&pieces, CountedValues::<T>::buckets(), counts, ranks)
    })
}

/// The summary and CDF of `n` values from `select`, which gives their sum, their maximum and the values at
/// the ranks it is given.
fn summary_and_cdf(
    n: usize,
    points: usize,
    select: impl FnOnce(&[usize]) -> (u128, u64, Vec<u64>),
) -> (Option<LatencySummary>, Vec<(f64, f64)>) {
    if n == 0 {
        return (None, Vec::new());
    }
    let cdf = cdf_ranks(n, points);
    let ranks: Vec<usize> = QUANTILES
        .iter()
        .map(|&(_, q)| nearest_rank(n, q))
        .chain(cdf.iter().map(|rank| rank - 1))
        .collect();
    let (sum, max, selected) = select(&ranks);
    let mut quantiles_ns = [0u64; QUANTILES.len()];
    quantiles_ns.copy_from_slice(&selected[..QUANTILES.len()]);
    let summary = LatencySummary {
        requests: n as u64,
        mean_ns: sum as f64 / n as f64,
        quantiles_ns,
        max_ns: max,
        method: Method::Exact,
    };
    let pairs = cdf
        .iter()
        .zip(&selected[QUANTILES.len()..])
        .map(|(&rank, &value)| (value as f64 / 1e3, rank as f64 / n as f64))
        .collect();
    (Some(summary), pairs)
}

/// Streaming accumulator for points above the memory budget: approximate quantiles, exact count, mean and max.
#[derive(Debug, Clone)]
pub(crate) struct HdrAccumulator {
    histogram: Histogram<u64>,
    sum_ns: u128,
    max_ns: u64,
}

impl HdrAccumulator {
    pub(crate) fn new() -> HdrAccumulator {
        HdrAccumulator {
            histogram: new_histogram(),
            sum_ns: 0,
            max_ns: 0,
        }
    }

    pub(crate) fn record(&mut self, latency_ns: u64) {
        // The histogram auto-resizes; only values beyond its largest possible range (> 2^62 ns, 146 years)
        // fail, and those are clamped rather than lost (the exact maximum is kept beside it).
        if self.histogram.record(latency_ns).is_err() {
            self.histogram.saturating_record(latency_ns);
        }
        self.sum_ns += u128::from(latency_ns);
        self.max_ns = self.max_ns.max(latency_ns);
    }

    pub(crate) fn merge(&mut self, other: &HdrAccumulator) {
        // Both histograms auto-resize, so adding can only fail on allocation, which aborts anyway.
        let _ = self.histogram.add(&other.histogram);
        self.sum_ns += other.sum_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    pub(crate) fn summary(&self) -> Option<LatencySummary> {
        let n = self.histogram.len();
        if n == 0 {
            return None;
        }
        let mut quantiles_ns = [0u64; QUANTILES.len()];
        for (slot, (_, q)) in quantiles_ns.iter_mut().zip(QUANTILES) {
            *slot = self.histogram.value_at_quantile(q).min(self.max_ns);
        }
        Some(LatencySummary {
            requests: n,
            mean_ns: self.sum_ns as f64 / n as f64,
            quantiles_ns,
            max_ns: self.max_ns,
            method: Method::Hdr,
        })
    }

    /// At most `points` (latency_us, fraction) pairs of the empirical CDF, evenly spaced in fraction.
    pub(crate) fn cdf(&self, points: usize) -> Vec<(f64, f64)> {
        if self.histogram.is_empty() {
            return Vec::new();
        }
        (1..=points)
            .map(|i| {
                let fraction = i as f64 / points as f64;
                let value = self.histogram.value_at_quantile(fraction).min(self.max_ns);
                (value as f64 / 1e3, fraction)
            })
            .collect()
    }
}

fn new_histogram() -> Histogram<u64> {
    let mut histogram = Histogram::new(HDR_SIGNIFICANT_DIGITS)
        .unwrap_or_else(|_| unreachable!("3 significant digits is a valid precision"));
    histogram.auto(true);
    histogram
}

/// Mean, sample standard deviation and nearest-rank quantiles of a small set of f64 values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ValueSummary {
    pub count: usize,
    pub mean: f64,
    /// `None` below two values.
    pub std: Option<f64>,
    pub p25: f64,
    pub median: f64,
    pub p75: f64,
}

pub(crate) fn value_summary(values: &mut [f64]) -> Option<ValueSummary> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let std = (n > 1).then(|| {
        let squares: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
        (squares / (n - 1) as f64).sqrt()
    });
    let mut at = |q: f64| {
        let rank = nearest_rank(n, q);
        *values.select_nth_unstable_by(rank, f64::total_cmp).1
    };
    let (p75, median, p25) = (at(0.75), at(0.5), at(0.25));
    Some(ValueSummary {
        count: n,
        mean,
        std,
        p25,
        median,
        p75,
    })
}
