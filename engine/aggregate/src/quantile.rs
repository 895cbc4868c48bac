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

/// The exact selection's buckets keep this many bits below a value's leading bit: 2^11 buckets per power of
/// two, so a bucket spans at most 1/2048 of its values (4 ns around 10 µs) and holds few samples.
const SUB_BUCKET_BITS: u32 = 11;

/// Values below 2^(SUB_BUCKET_BITS + 1) get a bucket each; above, 2^SUB_BUCKET_BITS buckets per power of two.
const SELECT_BUCKETS: usize = select_bucket(u64::MAX) + 1;

/// Values per parallel task of the selection passes: about two tasks per thread, since each task zeroes its
/// own bucket counters (864 KiB), and at least 2^18 values so that small groups run in one task.
fn select_chunk(n: usize) -> usize {
    n.div_ceil(2 * rayon::current_num_threads()).max(1 << 18)
}

/// The log-linear bucket of `value`: monotone in `value`, so the k-th smallest value lies in the bucket where
/// the cumulative count passes k.
const fn select_bucket(value: u64) -> usize {
    let bits = 64 - value.leading_zeros();
    if bits <= SUB_BUCKET_BITS + 1 {
        value as usize
    } else {
        let shift = bits - (SUB_BUCKET_BITS + 1);
        ((shift as usize) << SUB_BUCKET_BITS) + (value >> shift) as usize
    }
}

/// Exact summary of `values`; `None` when empty.
///
/// A bucketed selection instead of `select_nth_unstable` over everything: one parallel pass sums the values,
/// finds the maximum and counts them in log-linear buckets, which tells the bucket holding each quantile's rank
/// and the rank inside it; a second parallel pass collects only those buckets' values, and
/// `select_nth_unstable` runs on them. Buckets are at most 1/2048 of their value wide, so they hold few
/// samples whatever the spread; many equal values in one bucket only make that last selection longer, never
/// wrong.
pub(crate) fn exact_summary(values: &[u64]) -> Option<LatencySummary> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    struct Pass {
        sum: u128,
        max: u64,
        counts: Vec<u64>,
    }
    let empty = || Pass {
        sum: 0,
        max: 0,
        counts: vec![0; SELECT_BUCKETS],
    };
    let first = values
        .par_chunks(select_chunk(n))
        .fold(empty, |mut pass, chunk| {
            let mut sum = 0u128;
            for &v in chunk {
                sum += u128::from(v);
                pass.max = pass.max.max(v);
                pass.counts[select_bucket(v)] += 1;
            }
            pass.sum += sum;
            pass
        })
        .reduce(empty, |mut a, b| {
            a.sum += b.sum;
            a.max = a.max.max(b.max);
            a.counts.iter_mut().zip(b.counts).for_each(|(x, y)| *x += y);
            a
        });

    // Each quantile's bucket (as an index into the distinct target buckets) and its rank inside the bucket.
    let mut target_buckets: Vec<usize> = Vec::with_capacity(QUANTILES.len());
    let mut targets: Vec<(usize, usize)> = Vec::with_capacity(QUANTILES.len());
    for (_, q) in QUANTILES {
        let mut rank = nearest_rank(n, q) as u64;
        let mut bucket = 0;
        while rank >= first.counts[bucket] {
            rank -= first.counts[bucket];
            bucket += 1;
        }
        let slot = match target_buckets.iter().position(|&b| b == bucket) {
            Some(slot) => slot,
            None => {
                target_buckets.push(bucket);
                target_buckets.len() - 1
            }
        };
        targets.push((slot, rank as usize));
    }
    let low = target_buckets.iter().copied().min().unwrap_or(0);
    let high = target_buckets.iter().copied().max().unwrap_or(0);
    let no_candidates = || vec![Vec::new(); target_buckets.len()];
    let mut candidates = values
        .par_chunks(select_chunk(n))
        .fold(no_candidates, |mut candidates, chunk| {
            for &v in chunk {
                let bucket = select_bucket(v);
                if (low..=high).contains(&bucket)
                    && let Some(slot) = target_buckets.iter().position(|&b| b == bucket)
                {
                    candidates[slot].push(v);
                }
            }
            candidates
        })
        .reduce(no_candidates, |mut a, b| {
            a.iter_mut().zip(b).for_each(|(x, mut y)| x.append(&mut y));
            a
        });
    let mut quantiles_ns = [0u64; QUANTILES.len()];
    for (value, (slot, rank)) in quantiles_ns.iter_mut().zip(targets) {
        *value = *candidates[slot].select_nth_unstable(rank).1;
    }
    Some(LatencySummary {
        requests: n as u64,
        mean_ns: first.sum as f64 / n as f64,
        quantiles_ns,
        max_ns: first.max,
        method: Method::Exact,
    })
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

/// At most `points` (latency_us, fraction) pairs of the empirical CDF of `values` (sorted in place):
/// the i-th pair is the sample at rank ⌈i·n/points⌉ − 1 and the fraction of samples at or below that rank,
/// so both columns are non-decreasing and the last pair is (max, 1).
pub(crate) fn exact_cdf(values: &mut [u64], points: usize) -> Vec<(f64, f64)> {
    values.sort_unstable();
    let n = values.len();
    let mut pairs: Vec<(f64, f64)> = Vec::with_capacity(points.min(n));
    let mut last_rank = None;
    for i in 1..=points {
        let rank = (i * n).div_ceil(points);
        if rank == 0 || last_rank == Some(rank) {
            continue;
        }
        last_rank = Some(rank);
        pairs.push((values[rank - 1] as f64 / 1e3, rank as f64 / n as f64));
    }
    pairs
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
