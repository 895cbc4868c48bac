//! The statistics of `fracflow diff`: a measured point's per-second records, a bootstrap 95 % interval for the
//! relative change of a statistic between two runs, and the verdict drawn from it (criterion's change report is
//! the model: change, interval, noise threshold).
//!
//! The unit of resampling is one second of the client's per-second records (`seconds.jsonl`), not one request:
//! latencies within a second are correlated, so resampling requests would give intervals that are too narrow.
//! Each statistic of a summary table that has a per-second counterpart is estimated from the seconds the
//! aggregate used; the others get their change, without an interval or a verdict.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// Bootstrap resamples per interval: the 2.5 % and 97.5 % percentiles of 2000 resamples move by well under
/// a tenth of the interval's width from one seed to another.
pub const RESAMPLES: usize = 2000;
/// Fewer seconds than this on either side: no interval (the resamples of a handful of seconds take only a few
/// distinct values, and their percentiles are not an interval).
pub const MIN_SECONDS: usize = 5;
/// The largest `seconds.jsonl` read (a day of seconds of many client processes is a few hundred MB).
const MAX_SECONDS_FILE: u64 = 1 << 30;

/// Which way a statistic is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Lower,
    Higher,
}

impl Better {
    pub fn as_str(self) -> &'static str {
        match self {
            Better::Lower => "lower",
            Better::Higher => "higher",
        }
    }
}

/// Which way a summary column is better: throughput higher, latencies (`…_us`) lower; counts (`requests`,
/// `values`) neither.
pub fn better(column: &str) -> Option<Better> {
    if column.contains("gbps") || column.contains("throughput") {
        Some(Better::Higher)
    } else if column.ends_with("_us") {
        Some(Better::Lower)
    } else {
        None
    }
}

/// What a second contributes to a statistic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// Its threads' average latencies (µs): what `stats: seconds` tables are computed over.
    ThreadAverages,
    /// Its mean latency over all completions (µs).
    Mean,
    /// Its median latency (µs), from the client's histogram of the second.
    P50,
    /// Its 99th percentile (µs).
    P99,
    /// Its write throughput summed over client processes (Gbit/s).
    Throughput,
}

/// How the values of the resampled seconds make the statistic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Estimator {
    Mean,
    /// The nearest-rank quantile (the aggregate's definition).
    Quantile(f64),
}

/// How one summary column is estimated from seconds: which values, reduced how.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counterpart {
    pub values: Values,
    pub estimator: Estimator,
}

impl Counterpart {
    /// The counterpart of a summary column of an aggregate with `stats: <stats>`, if it has one. A `seconds`
    /// table is computed over the seconds' thread averages, so its latency columns are re-computed exactly
    /// from resampled seconds; a `samples` table is over the raw requests, whose per-second medians and p99s
    /// the client recorded (resampling requests would treat correlated latencies as independent).
    pub fn of(stats: &str, column: &str) -> Option<Counterpart> {
        use Estimator::{Mean, Quantile};
        let (values, estimator) = match (stats, column) {
            (_, "throughput_gbps") => (Values::Throughput, Mean),
            ("seconds", "mean_us") => (Values::ThreadAverages, Mean),
            ("seconds", "median_us") => (Values::ThreadAverages, Quantile(0.5)),
            ("seconds", "p25_us") => (Values::ThreadAverages, Quantile(0.25)),
            ("seconds", "p75_us") => (Values::ThreadAverages, Quantile(0.75)),
            ("seconds", _) => return None,
            (_, "mean_us") => (Values::Mean, Mean),
            (_, "median_us") => (Values::P50, Quantile(0.5)),
            (_, "p99_us") => (Values::P99, Quantile(0.5)),
            _ => return None,
        };
        Some(Counterpart { values, estimator })
    }

    /// How the interval was made, in words.
    pub fn words(self) -> &'static str {
        match (self.values, self.estimator) {
            (Values::ThreadAverages, Estimator::Mean) => "mean of thread averages, as the table",
            (Values::ThreadAverages, _) => "quantile of thread averages, as the table",
            (Values::Mean, _) => "mean of their means",
            (Values::P50, _) => "median of their medians",
            (Values::P99, _) => "median of their p99s",
            (Values::Throughput, _) => "mean of their throughputs",
        }
    }

    fn estimate(self, values: &mut [f64]) -> Option<f64> {
        match self.estimator {
            Estimator::Mean => mean(values),
            Estimator::Quantile(q) => quantile(values, q),
        }
    }
}

/// What one second of a point holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Second {
    pub thread_averages_us: Vec<f64>,
    pub mean_us: Option<f64>,
    pub p50_us: f64,
    pub p99_us: f64,
    pub throughput_gbps: f64,
}

impl Second {
    /// The second's values for `values` (several for thread averages, else one).
    pub fn values(&self, values: Values) -> Vec<f64> {
        match values {
            Values::ThreadAverages => self.thread_averages_us.clone(),
            Values::Mean => self.mean_us.into_iter().collect(),
            Values::P50 => vec![self.p50_us],
            Values::P99 => vec![self.p99_us],
            Values::Throughput => vec![self.throughput_gbps],
        }
    }
}

/// One point's seconds in the window the aggregate used.
pub type PerSecond = Vec<Second>;

#[derive(Debug, Deserialize)]
struct SecondLine {
    second: u64,
    #[serde(default)]
    member: u64,
    #[serde(default)]
    warmup: bool,
    #[serde(default)]
    count: u64,
    #[serde(default)]
    p50_ns: u64,
    #[serde(default)]
    p99_ns: u64,
    #[serde(default)]
    write_gbps: f64,
    #[serde(default)]
    threads: Vec<ThreadLine>,
}

#[derive(Debug, Deserialize)]
struct ThreadLine {
    count: u64,
    sum_ns: u64,
}

/// Sums of one second over the client processes it has lines of.
#[derive(Debug, Default)]
struct SecondSums {
    count: u64,
    sum_ns: f64,
    p50_weighted: f64,
    p99_weighted: f64,
    gbps: f64,
    thread_averages_us: Vec<f64>,
}

/// Reads a point's `seconds.jsonl`: the seconds `>= from_s` that are not warm-up, of client process `member`
/// only when given. A second with lines of several client processes is one second: their summed throughput,
/// all their threads, their mean latency over all completions, and their medians and p99s weighted by
/// completions (the merged histogram is not recorded).
pub fn read_seconds(path: &Path, from_s: u64, member: Option<u64>) -> Result<PerSecond, String> {
    let size = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if size > MAX_SECONDS_FILE {
        return Err(format!(
            "{}: {size} bytes, more than the {MAX_SECONDS_FILE} read",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut seconds: BTreeMap<u64, SecondSums> = BTreeMap::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: SecondLine = serde_json::from_str(line)
            .map_err(|e| format!("{}:{}: {e}", path.display(), index + 1))?;
        if record.warmup || record.second < from_s || member.is_some_and(|m| m != record.member) {
            continue;
        }
        let sums = seconds.entry(record.second).or_default();
        let mut count = 0;
        for thread in record.threads.iter().filter(|t| t.count > 0) {
            count += thread.count;
            sums.sum_ns += thread.sum_ns as f64;
            sums.thread_averages_us
                .push(thread.sum_ns as f64 / thread.count as f64 / 1e3);
        }
        // Lines written before threads were recorded carry only the totals.
        let count = if count == 0 { record.count } else { count };
        sums.count += count;
        sums.p50_weighted += record.p50_ns as f64 * count as f64;
        sums.p99_weighted += record.p99_ns as f64 * count as f64;
        sums.gbps += record.write_gbps;
    }
    Ok(seconds
        .into_values()
        .filter(|s| s.count > 0)
        .map(|sums| {
            let count = sums.count as f64;
            Second {
                mean_us: (sums.sum_ns > 0.0).then(|| sums.sum_ns / count / 1e3),
                p50_us: sums.p50_weighted / count / 1e3,
                p99_us: sums.p99_weighted / count / 1e3,
                throughput_gbps: sums.gbps,
                thread_averages_us: sums.thread_averages_us,
            }
        })
        .collect())
}

/// A point's raw samples are cut into this many blocks of consecutive send times, the resampling unit when the
/// seconds are too few: a run the emulated testbed caps at 4 s leaves 3 seconds, but 20 blocks of 150 ms.
pub const SAMPLE_BLOCKS: usize = 20;
/// The largest `samples.parquet` read (about 15 M requests).
const MAX_SAMPLES_FILE: u64 = 512 << 20;

/// The aggregate's cuts of a point's raw samples (its `skip_s`, `drop_fraction` and `latency`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleCuts {
    pub skip_ns: u64,
    pub drop_fraction: f64,
    /// `latency: last_piece` (fperf's, the default) rather than `from_send`.
    pub last_piece: bool,
}

/// Reads a point's `samples.parquet` and cuts it as the aggregate did (samples sent before `skip_ns`, then the
/// first `drop_fraction` of each thread's samples in seq order), then splits the kept samples into
/// [`SAMPLE_BLOCKS`] blocks of equal send-time span; each block is one [`Second`] (its mean, median and p99).
pub fn read_sample_blocks(path: &Path, cuts: SampleCuts) -> Result<PerSecond, String> {
    let size = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if size > MAX_SAMPLES_FILE {
        return Err(format!(
            "{}: {size} bytes, more than the {MAX_SAMPLES_FILE} a diff reads",
            path.display()
        ));
    }
    let mut samples = fracflow_client::read_samples_parquet(path).map_err(|e| e.to_string())?;
    samples.retain(|s| s.t_send_ns >= cuts.skip_ns);
    if cuts.drop_fraction > 0.0 {
        samples.sort_by_key(|s| (s.thread, s.seq));
        let mut kept = Vec::with_capacity(samples.len());
        for run in samples.chunk_by(|x, y| x.thread == y.thread) {
            let drop = (run.len() as f64 * cuts.drop_fraction).floor() as usize;
            kept.extend_from_slice(&run[drop.min(run.len())..]);
        }
        samples = kept;
    }
    let (Some(first), Some(last)) = (
        samples.iter().map(|s| s.t_send_ns).min(),
        samples.iter().map(|s| s.t_send_ns).max(),
    ) else {
        return Ok(Vec::new());
    };
    let span = (last - first) / SAMPLE_BLOCKS as u64 + 1;
    let mut blocks: Vec<Vec<f64>> = vec![Vec::new(); SAMPLE_BLOCKS];
    for sample in &samples {
        let index = (((sample.t_send_ns - first) / span) as usize).min(SAMPLE_BLOCKS - 1);
        let latency = if cuts.last_piece {
            sample.latency_last_piece_ns
        } else {
            sample.latency_ns
        };
        blocks[index].push(latency as f64 / 1e3);
    }
    Ok(blocks
        .into_iter()
        .filter(|b| !b.is_empty())
        .map(|mut block| Second {
            thread_averages_us: Vec::new(),
            mean_us: mean(&block),
            p50_us: quantile(&mut block, 0.5).unwrap_or_default(),
            p99_us: quantile(&mut block, 0.99).unwrap_or_default(),
            throughput_gbps: 0.0,
        })
        .collect())
}

/// A relative change (`b / a − 1`, a fraction) and its bootstrap 95 % percentile interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

/// The relative change of `counterpart`'s estimate from seconds `a` to seconds `b` and its 95 % interval: both
/// sides' seconds resampled independently with replacement (each second with all its values), [`RESAMPLES`]
/// times, from a generator seeded with `seed`. `None` when a side has fewer than [`MIN_SECONDS`] seconds with
/// values or `a`'s estimate is zero.
pub fn bootstrap(
    a: &[Second],
    b: &[Second],
    counterpart: Counterpart,
    seed: u64,
) -> Option<Interval> {
    let blocks = |seconds: &[Second]| -> Vec<Vec<f64>> {
        seconds
            .iter()
            .map(|s| s.values(counterpart.values))
            .filter(|v| !v.is_empty())
            .collect()
    };
    let (a, b) = (blocks(a), blocks(b));
    if a.len() < MIN_SECONDS || b.len() < MIN_SECONDS {
        return None;
    }
    let change = |a: &mut Vec<f64>, b: &mut Vec<f64>| {
        let base = counterpart.estimate(a)?;
        let new = counterpart.estimate(b)?;
        (base != 0.0).then(|| new / base - 1.0)
    };
    let (mut all_a, mut all_b) = (a.concat(), b.concat());
    let estimate = change(&mut all_a, &mut all_b)?;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut draw = |blocks: &[Vec<f64>], into: &mut Vec<f64>| {
        into.clear();
        for _ in 0..blocks.len() {
            into.extend_from_slice(&blocks[rng.usize(..blocks.len())]);
        }
    };
    let mut changes = Vec::with_capacity(RESAMPLES);
    for _ in 0..RESAMPLES {
        draw(&a, &mut all_a);
        draw(&b, &mut all_b);
        if let Some(change) = change(&mut all_a, &mut all_b) {
            changes.push(change);
        }
    }
    if changes.is_empty() {
        return None;
    }
    changes.sort_by(f64::total_cmp);
    let at = |q: f64| changes[((changes.len() - 1) as f64 * q).round() as usize];
    Some(Interval {
        estimate,
        low: at(0.025),
        high: at(0.975),
    })
}

/// What a change means for the point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    NoChange,
    Improved,
    Regressed,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::NoChange => "no change",
            Verdict::Improved => "improved",
            Verdict::Regressed => "regressed",
        }
    }
}

/// criterion's rule: a change is real only when the whole interval lies beyond the noise threshold (a
/// fraction) on one side; an interval that reaches into `±noise` is no change.
pub fn verdict(interval: &Interval, noise: f64, better: Better) -> Verdict {
    let worse = match better {
        Better::Lower => interval.low > noise,
        Better::Higher => interval.high < -noise,
    };
    let improved = match better {
        Better::Lower => interval.high < -noise,
        Better::Higher => interval.low > noise,
    };
    if worse {
        Verdict::Regressed
    } else if improved {
        Verdict::Improved
    } else {
        Verdict::NoChange
    }
}

/// A seed for one interval, from the user's seed and what the interval is of, so every interval is
/// reproducible whatever else the diff compares.
pub fn seed_for(seed: u64, what: &str) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&seed.to_le_bytes());
    hasher.update(what.as_bytes());
    let bytes = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&bytes.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The nearest-rank quantile: the value at 0-based rank round((n − 1)·q) (the aggregate's definition).
fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let rank = ((values.len() - 1) as f64 * q).round() as usize;
    let (_, value, _) = values.select_nth_unstable_by(rank, f64::total_cmp);
    Some(*value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds of two threads whose averages lie around `centre` with a deterministic spread of ±5 %.
    fn seconds(centre: f64, n: usize, seed: u64) -> Vec<Second> {
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..n)
            .map(|_| {
                let v = centre * (1.0 + (rng.f64() - 0.5) * 0.1);
                Second {
                    thread_averages_us: vec![v, v * 1.01],
                    mean_us: Some(v),
                    p50_us: v,
                    p99_us: v * 1.5,
                    throughput_gbps: 1.0,
                }
            })
            .collect()
    }

    fn shifted(seconds: &[Second], by: f64) -> Vec<Second> {
        seconds
            .iter()
            .map(|s| Second {
                thread_averages_us: s.thread_averages_us.iter().map(|v| v + by).collect(),
                mean_us: s.mean_us.map(|v| v + by),
                p50_us: s.p50_us + by,
                p99_us: s.p99_us + by,
                throughput_gbps: s.throughput_gbps,
            })
            .collect()
    }

    fn median_of(seconds: &[Second], values: Values) -> f64 {
        let mut all: Vec<f64> = seconds.iter().flat_map(|s| s.values(values)).collect();
        quantile(&mut all, 0.5).expect("values")
    }

    #[test]
    fn a_known_shift_is_inside_the_interval_and_judged_by_direction() {
        let a = seconds(10.0, 40, 1);
        let b = shifted(&a, 3.0);
        for stats in ["seconds", "samples"] {
            let counterpart = Counterpart::of(stats, "median_us").expect("a counterpart");
            let interval = bootstrap(&a, &b, counterpart, 7).expect("enough seconds");
            let truth = 3.0 / median_of(&a, counterpart.values);
            assert!(
                interval.low <= truth && truth <= interval.high,
                "{stats}: {interval:?} vs {truth}"
            );
            assert_eq!(verdict(&interval, 0.02, Better::Lower), Verdict::Regressed);
            assert_eq!(verdict(&interval, 0.02, Better::Higher), Verdict::Improved);
        }
        let mean = Counterpart::of("seconds", "mean_us").expect("a counterpart");
        let back = bootstrap(&b, &a, mean, 7).expect("enough seconds");
        assert_eq!(verdict(&back, 0.02, Better::Lower), Verdict::Improved);
    }

    #[test]
    fn equal_runs_are_no_change_and_the_seed_makes_it_reproducible() {
        let a = seconds(10.0, 30, 2);
        let b = seconds(10.0, 30, 3);
        let median = Counterpart::of("seconds", "median_us").expect("a counterpart");
        let first = bootstrap(&a, &b, median, 11).expect("enough seconds");
        assert!(first.low < 0.0 && first.high > 0.0, "{first:?}");
        assert_eq!(verdict(&first, 0.02, Better::Lower), Verdict::NoChange);
        assert_eq!(bootstrap(&a, &b, median, 11), Some(first));
        assert_ne!(seed_for(1, "m=1024"), seed_for(1, "m=2048"));
    }

    #[test]
    fn a_seconds_table_is_re_computed_exactly_from_its_seconds() {
        let a = seconds(10.0, 20, 4);
        let b = shifted(&a, 1.0);
        let p25 = Counterpart::of("seconds", "p25_us").expect("a counterpart");
        let interval = bootstrap(&a, &b, p25, 1).expect("enough seconds");
        let mut all_a: Vec<f64> = a
            .iter()
            .flat_map(|s| s.thread_averages_us.clone())
            .collect();
        let mut all_b: Vec<f64> = b
            .iter()
            .flat_map(|s| s.thread_averages_us.clone())
            .collect();
        let exact =
            quantile(&mut all_b, 0.25).expect("b") / quantile(&mut all_a, 0.25).expect("a") - 1.0;
        assert_eq!(interval.estimate, exact);
        assert_eq!(Counterpart::of("seconds", "p99_us"), None);
        assert_eq!(Counterpart::of("samples", "requests"), None);
        assert_eq!(better("requests"), None);
    }

    #[test]
    fn a_change_inside_the_noise_threshold_is_no_change() {
        let interval = Interval {
            estimate: 0.012,
            low: 0.008,
            high: 0.016,
        };
        assert_eq!(verdict(&interval, 0.02, Better::Lower), Verdict::NoChange);
        assert_eq!(verdict(&interval, 0.005, Better::Lower), Verdict::Regressed);
    }

    #[test]
    fn too_few_seconds_give_no_interval() {
        let median = Counterpart::of("samples", "median_us").expect("a counterpart");
        let few = seconds(10.0, MIN_SECONDS - 1, 5);
        assert_eq!(bootstrap(&few, &seconds(10.0, 30, 6), median, 1), None);
    }

    #[test]
    fn raw_samples_are_cut_as_the_aggregate_cuts_them_and_split_into_blocks() -> std::io::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("samples.parquet");
        // Two threads, one request per ms for 2 s; the first second is slow (warm-up) on thread 0.
        let samples: Vec<fracflow_client::Sample> = (0..2000u64)
            .flat_map(|ms| {
                (0..2u32).map(move |thread| fracflow_client::Sample {
                    thread,
                    seq: ms,
                    t_send_ns: ms * 1_000_000,
                    latency_ns: if ms < 1000 && thread == 0 {
                        99_000
                    } else {
                        10_000
                    },
                    latency_last_piece_ns: 5_000,
                    slot: 0,
                    request_bytes: 1024,
                    response_bytes: 64,
                })
            })
            .collect();
        fracflow_client::write_samples_parquet(&path, &samples).map_err(std::io::Error::other)?;
        let cuts = SampleCuts {
            skip_ns: 1_000_000_000,
            drop_fraction: 0.0,
            last_piece: false,
        };
        let blocks = read_sample_blocks(&path, cuts).map_err(std::io::Error::other)?;
        assert_eq!(blocks.len(), SAMPLE_BLOCKS);
        assert!(blocks.iter().all(|b| b.p99_us == 10.0), "{blocks:?}");
        // Without the skip, dropping half of each thread's samples (in seq order) removes the slow second.
        let dropped = SampleCuts {
            skip_ns: 0,
            drop_fraction: 0.5,
            last_piece: false,
        };
        let blocks = read_sample_blocks(&path, dropped).map_err(std::io::Error::other)?;
        assert!(blocks.iter().all(|b| b.p99_us == 10.0), "{blocks:?}");
        let uncut = SampleCuts {
            skip_ns: 0,
            ..dropped
        };
        let uncut = read_sample_blocks(
            &path,
            SampleCuts {
                drop_fraction: 0.0,
                ..uncut
            },
        )
        .map_err(std::io::Error::other)?;
        assert_eq!(
            uncut[0].p99_us, 99.0,
            "the slow second is in the first blocks"
        );
        let last_piece = read_sample_blocks(
            &path,
            SampleCuts {
                last_piece: true,
                ..cuts
            },
        )
        .map_err(std::io::Error::other)?;
        assert!(last_piece.iter().all(|b| b.mean_us == Some(5.0)));
        Ok(())
    }

    #[test]
    fn seconds_skip_the_warm_up_and_merge_client_processes() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("seconds.jsonl");
        let lines = [
            r#"{"second":0,"warmup":true,"count":10,"p50_ns":99000,"p99_ns":99000,"write_gbps":1.0,"threads":[{"count":10,"sum_ns":990000}]}"#,
            r#"{"second":1,"member":0,"count":10,"p50_ns":10000,"p99_ns":20000,"write_gbps":1.0,"threads":[{"count":10,"sum_ns":100000}]}"#,
            r#"{"second":1,"member":1,"count":30,"p50_ns":20000,"p99_ns":40000,"write_gbps":2.0,"threads":[{"count":30,"sum_ns":600000},{"count":0,"sum_ns":0}]}"#,
        ];
        std::fs::write(&path, lines.join("\n"))?;
        let all = read_seconds(&path, 0, None).map_err(std::io::Error::other)?;
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].throughput_gbps, 3.0);
        assert_eq!(all[0].p50_us, 17.5);
        assert_eq!(all[0].mean_us, Some(17.5));
        assert_eq!(all[0].thread_averages_us, vec![10.0, 20.0]);
        let first = read_seconds(&path, 1, Some(0)).map_err(std::io::Error::other)?;
        assert_eq!(first[0].p99_us, 20.0);
        Ok(())
    }
}
