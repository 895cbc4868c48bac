//! Per-request samples and per-second records → summary tables (polars), fast quantiles, CSV/Parquet exports, and expectation verdicts.
//!
//! # The `aggregate` node
//!
//! [`aggregate`] reads one directory per measured point ([`PointSource`]) and writes `<table>.csv` and
//! `<table>.parquet` (each atomically) for every table it returns. Every table starts with the points' label
//! columns (in the order of the first point's labels; every point must have the same keys), then statistics.
//! Each table says which columns are its labels ([`Table::labels`]: the points' labels, minus `over`, plus
//! `function` and `fragments` of a trace); the Parquet export records them in its key-value metadata
//! (`fracflow.label_columns`, a JSON list, which pandas and polars ignore) and [`read_table`] reads them back. A
//! CSV export has no place for them. Latencies are in µs. The config ([`AggregateSpec`]) has three shapes, chosen by `stats`:
//!
//! ```yaml
//! stats: seconds        # seconds.jsonl (figs 13–15)
//! from_s: 10            # use seconds >= from_s (default 0)
//! # → summary: throughput_gbps, mean_us, std_us, p25_us, median_us, p75_us, values, requests
//! ```
//! `throughput_gbps` is the mean over the used seconds of each second's total `write_gbps` (summed over client
//! members); the latency columns are over the per-thread per-second averages `sum_ns / count` (threads with
//! `count == 0` skipped) of the used seconds, `std_us` is the sample standard deviation (n − 1; null below two
//! values), `values` how many averages there were, `requests` the sum of their counts. The per-second lines
//! carry whichever latency the client reported (their `latency` field), so `latency:` does not apply here.
//!
//! ```yaml
//! stats: samples        # samples.parquet (figs 16–17)
//! blocks_ms: 100        # optional → table blocks: labels, block_ms, the summary's statistics per block of send time
//! skip_s: 10            # drop samples with t_send_ns < skip_s·1e9 (default 0)
//! drop_fraction: 0.25   # then drop ⌊n·f⌋ first samples (in seq order) of each thread (default 0)
//! latency: last_piece   # or from_send (default last_piece: fperf's latency_last_piece_ns)
//! exact_max_samples: 24000000   # points with more rows use an HDR histogram (default 24 M ≈ 288 MB)
//! cdf:                  # optional → table cdf: labels, latency_us, fraction
//!   where: {m: 4096, clients: 28}   # only these points (numbers compare numerically)
//!   drop_fraction: 0.1  # replaces the summary's drop_fraction for the cdf (skip_s still applies)
//!   points: 200         # at most this many rows per point (default 200)
//! # → summary: requests, mean_us, p25_us, median_us, p75_us, p90_us, p95_us, p99_us, max_us, method
//! ```
//!
//! ```yaml
//! stats: trace          # samples.parquet of a trace replay (fig 18)
//! functions: {0: Top-K, 1: Logit, 2: CNN, 3: Norm}   # slot → name (other slots are named `slot N`)
//! piece: 512            # fragments = (request_bytes − 64) / piece, rounded down (default 512)
//! # (skip_s, drop_fraction, latency, exact_max_samples as for samples)
//! # → summary: labels, function, fragments, then the samples columns; one row per (function, fragments)
//! # → cdf: labels, function, fragments, latency_us, fraction (always; `cdf:` refines it)
//! ```
//!
//! ```yaml
//! stats: metrics        # metrics.json: what `command` nodes extracted from their tools' output (RPCNIC)
//! over: [rep]           # labels that tell repetitions apart (default none)
//! # → summary: the labels except `over`, then per metric <metric> (mean), <metric>_sd, and n
//! ```
//! Each row source's labels are its sweep point and its node's `labels`; its metrics are numbers (or null).
//! Rows equal in every label but those in `over` are reduced into one, in order of first appearance:
//! `<metric>` is the mean of its non-null values, `<metric>_sd` their sample standard deviation (n − 1; null
//! below two values) and `n` the number of rows. The metrics are the union over all rows.
//!
//! Any shape may add, applied to `summary` in this order:
//!
//! ```yaml
//! derive:
//!   - scale_by:             # fig 15 "without reassembly"
//!       column: X           # the label to scale along
//!       base: 1024          # the measured row each group scales from
//!       factor_column: pieces
//!       unit: 1024          # factor_column = X / unit (default: base)
//!       columns: [mean_us]  # the statistics multiplied by X / base (default [mean_us])
//! compare:
//!   column: series          # the label naming the series
//!   baseline: Transport
//!   on: [n]                 # labels a row and its baseline row share
//!   values: [median_us]     # → delta_median_us = value − baseline's value (0 on baseline rows)
//!   op: delta               # or ratio: ratio_X = X / baseline; or speedup: speedup_X = baseline / X
//! ```
//! `scale_by` groups the measured rows by every other label; in each group the row with `X == base` is
//! copied to each other `X` measured in that group, with `columns` multiplied by `X / base`, the other
//! statistics null, `factor_column = X / unit` and `computed = 1`; measured rows get `factor_column` and
//! `computed = 0`. Rows without a baseline row get a null delta (ratio, speedup), as does a quotient by zero; two
//! baseline rows for one key are an error.
//!
//! # Quantiles
//!
//! One definition everywhere: the nearest rank, the value at 0-based rank round((n − 1)·q) of the sorted
//! values (rounding halves away from zero), identical to polars' `QuantileMethod::Nearest`. It always returns
//! a measured value; for an even count the median is the upper-middle or lower-middle value, not numpy's
//! average of the two (the difference is at most the gap between neighbouring samples).
//!
//! A point is read through its `samples.by-thread` sidecar when it has one that belongs to its `samples.parquet`
//! (`fracflow_record::by_thread`: the client writes it beside the Parquet file, each thread's rows in seq order in
//! checksummed pages of raw integers). There each thread's cuts are one range of its rows, found from the send
//! times of one page, and only the kept rows of the latency column are read. A sidecar that is stale (of another
//! Parquet file), corrupt, or that says it could not index the samples is not used: the point is read from the
//! Parquet file, and [`Aggregated::notes`] says which sidecar and why. Both readers give the same tables.
//!
//! The Parquet file is read row group by row group with a column projection (only the columns the cuts need), the
//! row groups of a point in parallel. Either way memory holds at most one point's kept latencies (8 bytes each,
//! plus 4 bytes of thread id while the Parquet reader's warm-up cut runs). The exact path selects each rank in
//! log-linear buckets: one pass counts, a second collects the few values of the buckets that hold the ranks.
//! A point with more rows than `exact_max_samples` is streamed into HDR histograms
//! instead (3 significant digits: values are bucketed to 0.1 %, and HDR's quantile is the sample at 1-based
//! rank ⌈q·n⌉, at most one rank from the nearest rank; count, mean and max stay exact); its `method` column
//! says `hdr-3-digits` instead of `exact`. The warm-up cut of the HDR path needs
//! seqs that increase per thread in file order (the measure node writes them so); the exact path handles any
//! order (seqs must be unique per thread).
//!
//! # Expectations
//!
//! [`evaluate`] judges [`Expectation`]s (a `check` node's claims) against the tables; each names a table
//! (default `summary`), an optional `where` filter on its cells and exactly one claim:
//!
//! ```yaml
//! - name: "fRAC within 0.3 µs of the baseline"
//!   table: summary
//!   where: {series: "Transport+fRAC"}
//!   within: {column: delta_median_us, limit: 0.3}   # |value| <= limit on every row
//! - {name: "median below 10 µs", below: {column: median_us, limit: 10}}   # value < limit; `above`: >
//! - {name: "tail", near: {a: p99_us, b: median_us, limit: 1.0}}        # |a − b| <= limit per row
//! - {name: "sub-linear", sublinear: {x: pieces, y: mean_us, by: [f]}}   # y(x)/y(xmin) < x/xmin, computed == 0 rows
//! - {name: "grows", grows: {x: clients, y: median_us, by: [units, m]}}  # y(xmax) > y(xmin)
//! - {name: "slower", slower_growth: {x: clients, y: median_us, group: units, by: [m]}}
//! - {name: "flatter", flatter: {x: clients, y: median_us, series: series, flat: fRAC, steep: CPU, by: [units, m]}}
//! ```
//! Growth is y(xmax)/y(xmin); a group needs two distinct x values, one row per x, and y(xmin) > 0. A claim
//! whose filter matches no row fails, as does a group that cannot be judged. A verdict names each row by its
//! label columns (minus those of `where`); a table that does not say which they are (a CSV file read back) is
//! taken to have as labels the columns before the first statistic or metric (a column beside its `_sd`).
//!
//! Each row (per-row claims) or group (the others) gets a [`fracflow_record::Verdict`] and the claim the worst:
//! fail, inconclusive, pass, or not testable here when no unit could be judged on this [`Host`] (`needs:
//! {cores: …}`). Every claim has a contrast, positive exactly when it holds (`limit − value` for `below`, the
//! ratio − 1 for the ratio claims); with a `blocks` table (`blocks_ms:`, `stats: samples`) beside `summary` it
//! gets a 95 % bootstrap interval over each point's blocks (2000 resamplings drawn from blake3's output over the
//! claim's data, so the same data always draws the same), and passes when the interval lies above `margin`,
//! fails when it lies below −`margin`, and is inconclusive otherwise. `paper:` values are matched to the one row
//! their `at` selects. The full rules, as a pipeline writes them: `pipelines/README.md`, "Verdicts".

mod by_thread;
mod error;
mod expect;
mod frame;
mod metrics;
mod quantile;
mod samples;
mod seconds;
mod spec;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use error::AggregateError;
pub use expect::{
    Amount, Bound, CoreParts, CoresNeeded, Curve, Expectation, Flatter, Host, MIN_BLOCKS, Near,
    Needs, PaperNumber, PaperValue, SlowerGrowth, evaluate,
};
pub use fracflow_record::{Cell, ExpectationResult, Table};
use fracflow_record::{SAMPLES_FILE, SECONDS_FILE};
pub use spec::{
    AggregateSpec, CdfSpec, CompareOp, CompareSpec, DEFAULT_CDF_POINTS, DEFAULT_EXACT_MAX_SAMPLES,
    DeriveStep, LatencyField, ScaleBy, StatsKind,
};

use quantile::{LatencySummary, QUANTILES, counted_summary_and_cdf, exact_summary_and_cdf};
use rayon::prelude::*;
use samples::{GroupKey, GroupLatencies, SampleQuery, read_point};

/// Columns this crate computes. A table that does not say which columns are its labels (a CSV file read back)
/// is taken to have as labels the columns before the first of these or of a metric (a column with an `_sd` twin).
pub(crate) const STATISTIC_COLUMNS: &[&str] = &[
    "throughput_gbps",
    "requests",
    "mean_us",
    "std_us",
    "p25_us",
    "median_us",
    "p75_us",
    "p90_us",
    "p95_us",
    "p99_us",
    "max_us",
    "values",
    "method",
    "latency_us",
    "fraction",
    frame::COMPUTED_COLUMN,
];

/// The table of per-block statistics (`blocks_ms:`) a `check` bootstraps its intervals from.
pub const BLOCKS_TABLE: &str = "blocks";

/// The column of [`BLOCKS_TABLE`] naming a block: the start of its send-time window, in ms.
pub const BLOCK_COLUMN: &str = "block_ms";

/// Fragment size of a trace replay when the spec gives none (the artifact's `m 512`).
const DEFAULT_TRACE_PIECE: u32 = 512;

/// One measured point: its labels (sweep coordinates and series labels, e.g.
/// `{"series": Text("fRAC"), "m": Num(4096.), "clients": Num(28.)}`) and its directory.
#[derive(Debug, Clone, PartialEq)]
pub struct PointSource {
    pub labels: BTreeMap<String, Cell>,
    pub dir: PathBuf,
    /// One client process of a point where several ran at once (the `member` of its per-second lines); `None`:
    /// the whole point. Only `stats: seconds` can split a point this way.
    pub member: Option<u64>,
}

/// The tables an `aggregate` node produced, by name (`summary`, and `cdf` when asked for).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Aggregated {
    pub tables: BTreeMap<String, Table>,
    /// What the caller should know but that changed no number: a point's `samples.by-thread` sidecar that was
    /// not used (stale, corrupt, not indexed), and why.
    pub notes: Vec<String>,
}

/// Computes the spec's tables over `points` and writes `<table>.csv` and `<table>.parquet` into `out_dir`.
pub fn aggregate(
    spec: &AggregateSpec,
    points: &[PointSource],
    out_dir: &Path,
) -> Result<Aggregated, AggregateError> {
    spec.validate()?;
    if spec.stats != StatsKind::Seconds
        && let Some(point) = points.iter().find(|p| p.member.is_some())
    {
        return Err(AggregateError::Spec(format!(
            "{}: splitting a point by client process needs `stats: seconds`; its raw samples are not split",
            point.dir.display()
        )));
    }
    let labels = label_names(points)?;
    let mut notes = Vec::new();
    let (summary_frame, cdf, summary_labels) = match spec.stats {
        StatsKind::Seconds => {
            let summary = seconds_summary(spec, points, &labels)?;
            (frame::table_to_frame("summary", &summary)?, None, labels)
        }
        StatsKind::Samples | StatsKind::Trace => {
            let (summary, cdf) = sample_tables(spec, points, &labels, &mut notes)?;
            let wants_cdf = spec.stats == StatsKind::Trace || spec.cdf.is_some();
            let mut summary_labels = labels;
            if spec.stats == StatsKind::Trace {
                summary_labels.extend(["function".to_string(), "fragments".to_string()]);
            }
            (
                frame::table_to_frame("summary", &summary)?,
                wants_cdf.then_some(cdf),
                summary_labels,
            )
        }
        StatsKind::Metrics => {
            let (summary, kept_labels) = metrics::summary(spec, points, &labels)?;
            (summary, None, kept_labels)
        }
    };
    // The summary as a frame (polars may have derived and compared it); the CDF and blocks as the tables they
    // were made as, which are exported without waiting for the summary's polars steps.
    let mut tables_made = Vec::new();
    if let Some(cdf) = cdf {
        // A CDF's rows carry the labels of the summary row they belong to.
        tables_made.push(("cdf", cdf, summary_labels.clone()));
    }
    if let Some(block_ms) = spec.blocks_ms {
        let blocks = blocks_table(spec, block_ms, points, &summary_labels, &mut notes)?;
        let mut labels = summary_labels.clone();
        labels.push(BLOCK_COLUMN.to_string());
        tables_made.push((BLOCKS_TABLE, blocks, labels));
    }
    // Every table's exports and the table returned side by side: one after the other they were a fifth of a
    // trace's aggregation (`bench/aggregate_100m.sh`, mode `trace`: 204 800 CDF rows). A table is returned as
    // its exports read back without reading them (`frame::as_read_back`): the read-back took 45–100 ms of a
    // trace's export phase.
    let summary = || {
        let mut frame = frame::derive("summary", summary_frame, &spec.derive, &summary_labels)?;
        if let Some(compare) = &spec.compare {
            frame = frame::compare("summary", frame, compare)?;
        }
        let (exported, table) = rayon::join(
            || frame::export("summary", &frame, &summary_labels, out_dir),
            || frame::frame_to_table("summary", &frame, Some(&summary_labels)),
        );
        exported.and(table).map(|table| ("summary", table))
    };
    let others = || -> Vec<Result<(&str, Table), AggregateError>> {
        tables_made
            .into_par_iter()
            .map(|(name, table, labels)| {
                frame::export_table(name, table, &labels, out_dir).map(|table| (name, table))
            })
            .collect()
    };
    let (summary, others) = rayon::join(summary, others);
    let mut tables = BTreeMap::new();
    let exported = std::iter::once(summary).chain(others);
    for named in exported {
        let (name, table) = named?;
        tables.insert(name.to_string(), table);
    }
    // A point read twice (its CDF's cuts, its blocks) says the same thing twice.
    let mut seen = std::collections::BTreeSet::new();
    notes.retain(|note| seen.insert(note.clone()));
    Ok(Aggregated { tables, notes })
}

/// Reads a `.csv` or `.parquet` table (an export of [`aggregate`]) back. A Parquet export says which columns are
/// labels ([`Table::labels`]); a CSV file cannot, and reads back with `labels: None`.
pub fn read_table(path: &Path) -> Result<Table, AggregateError> {
    let (frame, labels) = frame::read_frame(path)?;
    frame::frame_to_table(&path.display().to_string(), &frame, labels.as_deref())
}

/// The first point's label keys; every other point must have exactly these.
fn label_names(points: &[PointSource]) -> Result<Vec<String>, AggregateError> {
    let Some(first) = points.first() else {
        return Ok(Vec::new());
    };
    let names: Vec<String> = first.labels.keys().cloned().collect();
    for point in &points[1..] {
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !point.labels.contains_key(*n))
            .collect();
        let extra: Vec<&String> = point.labels.keys().filter(|k| !names.contains(k)).collect();
        if !missing.is_empty() || !extra.is_empty() {
            return Err(AggregateError::Labels {
                dir: point.dir.clone(),
                why: format!(
                    "labels differ from the first point's ({}): missing {missing:?}, extra {extra:?}",
                    first.dir.display()
                ),
            });
        }
    }
    Ok(names)
}

pub(crate) fn label_cells(point: &PointSource, labels: &[String]) -> Vec<Cell> {
    labels
        .iter()
        .map(|name| point.labels.get(name).cloned().unwrap_or(Cell::Null))
        .collect()
}

fn columns(labels: &[String], statistics: &[&str]) -> Vec<String> {
    labels
        .iter()
        .cloned()
        .chain(statistics.iter().map(|s| s.to_string()))
        .collect()
}

fn optional(value: Option<f64>) -> Cell {
    value.map_or(Cell::Null, Cell::Num)
}

fn seconds_summary(
    spec: &AggregateSpec,
    points: &[PointSource],
    labels: &[String],
) -> Result<Table, AggregateError> {
    let mut table = Table::new(columns(
        labels,
        &[
            "throughput_gbps",
            "mean_us",
            "std_us",
            "p25_us",
            "median_us",
            "p75_us",
            "values",
            "requests",
        ],
    ));
    for point in points {
        let summary = seconds::summarise(
            &point.dir.join(SECONDS_FILE),
            spec.from_s.unwrap_or(0),
            point.member,
        )?;
        let latency = summary.latency_us.as_ref();
        let mut row = label_cells(point, labels);
        row.extend([
            optional(summary.throughput_gbps),
            optional(latency.map(|l| l.mean)),
            optional(latency.and_then(|l| l.std)),
            optional(latency.map(|l| l.p25)),
            optional(latency.map(|l| l.median)),
            optional(latency.map(|l| l.p75)),
            Cell::Num(latency.map_or(0, |l| l.count) as f64),
            Cell::Num(summary.requests as f64),
        ]);
        table.rows.push(row);
    }
    Ok(table)
}

/// The statistic columns of a samples summary, in output order.
const SAMPLE_STATISTICS: [&str; 10] = [
    "requests",
    "mean_us",
    "p25_us",
    "median_us",
    "p75_us",
    "p90_us",
    "p95_us",
    "p99_us",
    "max_us",
    "method",
];

fn latency_cells(summary: Option<&LatencySummary>) -> Vec<Cell> {
    let Some(summary) = summary else {
        let mut cells = vec![Cell::Num(0.0)];
        cells.extend(std::iter::repeat_n(Cell::Null, SAMPLE_STATISTICS.len() - 1));
        return cells;
    };
    let us = |ns: u64| Cell::Num(ns as f64 / 1e3);
    let quantile = |name: &str| {
        QUANTILES
            .iter()
            .position(|(column, _)| *column == name)
            .map_or(Cell::Null, |index| us(summary.quantiles_ns[index]))
    };
    vec![
        Cell::Num(summary.requests as f64),
        Cell::Num(summary.mean_ns / 1e3),
        quantile("p25_us"),
        quantile("median_us"),
        quantile("p75_us"),
        quantile("p90_us"),
        quantile("p95_us"),
        quantile("p99_us"),
        us(summary.max_ns),
        Cell::Text(summary.method.name().to_string()),
    ]
}

/// A CDF's (latency_us, fraction) pairs.
type Cdf = Vec<(f64, f64)>;

/// A group's summary and, when `cdf_points` is not 0, its CDF.
fn group_statistics(
    latencies: &GroupLatencies,
    cdf_points: usize,
) -> (Option<LatencySummary>, Cdf) {
    match latencies {
        GroupLatencies::Exact(values) => exact_summary_and_cdf(values, cdf_points),
        GroupLatencies::ExactNarrow(values) => exact_summary_and_cdf(values, cdf_points),
        GroupLatencies::Counted(values) => counted_summary_and_cdf(values, cdf_points),
        GroupLatencies::CountedNarrow(values) => counted_summary_and_cdf(values, cdf_points),
        GroupLatencies::Hdr(accumulator) => (
            accumulator.summary(),
            if cdf_points == 0 {
                Vec::new()
            } else {
                accumulator.cdf(cdf_points)
            },
        ),
    }
}

/// One point's statistics by group, and the notes its reading left.
struct PointStatistics {
    keys: Vec<GroupKey>,
    summaries: Vec<Option<LatencySummary>>,
    /// The groups and CDFs of a point that wants them.
    cdfs: Option<(Vec<GroupKey>, Vec<Cdf>)>,
    notes: Vec<String>,
}

/// The `summary` and `cdf` tables of `stats: samples | trace`.
fn sample_tables(
    spec: &AggregateSpec,
    points: &[PointSource],
    labels: &[String],
    notes: &mut Vec<String>,
) -> Result<(Table, Table), AggregateError> {
    let trace = spec.stats == StatsKind::Trace;
    let group_columns: &[&str] = if trace {
        &["function", "fragments"]
    } else {
        &[]
    };
    let mut summary_columns = group_columns.to_vec();
    summary_columns.extend(SAMPLE_STATISTICS);
    let mut summary = Table::new(columns(labels, &summary_columns));
    let mut cdf_columns = group_columns.to_vec();
    cdf_columns.extend(["latency_us", "fraction"]);
    let mut cdf = Table::new(columns(labels, &cdf_columns));

    let query = |cuts| SampleQuery {
        latency: spec.latency,
        cuts,
        trace_piece: trace.then(|| spec.piece.unwrap_or(DEFAULT_TRACE_PIECE)),
        exact_max_samples: spec.exact_max_samples(),
        // Points are read side by side below; fewer points than workers split their own reading.
        trace_runs: if points.len() >= rayon::current_num_threads() {
            1
        } else {
            rayon::current_num_threads()
        },
    };
    let (summary_cuts, cdf_cuts) = (spec.summary_cuts(), spec.cdf_cuts());
    let same_cuts = summary_cuts.drop_fraction == cdf_cuts.drop_fraction;
    let group_cells = |key: GroupKey| -> Vec<Cell> {
        if !trace {
            return Vec::new();
        }
        let function = spec
            .functions
            .get(&key.slot)
            .cloned()
            .unwrap_or_else(|| format!("slot {}", key.slot));
        vec![Cell::Text(function), Cell::Num(f64::from(key.fragments))]
    };
    // Points side by side, each holding its samples only while its statistics are computed: a point's own
    // passes are parallel too, but their joins and merges left a sixth of two cores idle on a trace's small
    // groups (1.94 CPU seconds in 1.17 s, `bench/aggregate_100m.sh`, mode `trace`).
    let per_point: Vec<PointStatistics> = points
        .par_iter()
        .map(|point| {
            let path = point.dir.join(SAMPLES_FILE);
            let wants_cdf = (trace || spec.cdf.is_some())
                && spec.cdf.as_ref().is_none_or(|cdf| {
                    cdf.filter.iter().all(|(name, wanted)| {
                        point
                            .labels
                            .get(name)
                            .is_some_and(|cell| expect::cell_matches(cell, wanted))
                    })
                });
            let mut notes = Vec::new();
            // A trace's groups are many and small: their statistics are computed side by side, the CDF from the
            // same selection as the summary when the cuts are the same.
            let groups = read_point(&path, &query(summary_cuts), &mut notes)?;
            let cdf_points = if wants_cdf && same_cuts {
                spec.cdf_points()
            } else {
                0
            };
            let (summaries, cdfs): (Vec<Option<LatencySummary>>, Vec<Cdf>) = groups
                .par_iter()
                .map(|(_, latencies)| group_statistics(latencies, cdf_points))
                .unzip();
            let keys: Vec<GroupKey> = groups.iter().map(|(key, _)| *key).collect();
            drop(groups);
            let cdfs = if !wants_cdf {
                None
            } else if same_cuts {
                Some((keys.clone(), cdfs))
            } else {
                let groups = read_point(&path, &query(cdf_cuts), &mut notes)?;
                Some((
                    groups.iter().map(|(key, _)| *key).collect(),
                    groups
                        .par_iter()
                        .map(|(_, latencies)| group_statistics(latencies, spec.cdf_points()).1)
                        .collect(),
                ))
            };
            Ok(PointStatistics {
                keys,
                summaries,
                cdfs,
                notes,
            })
        })
        .collect::<Result<_, AggregateError>>()?;
    for (point, statistics) in points.iter().zip(per_point) {
        notes.extend(statistics.notes);
        for (key, group) in statistics.keys.into_iter().zip(&statistics.summaries) {
            let mut row = label_cells(point, labels);
            row.extend(group_cells(key));
            row.extend(latency_cells(group.as_ref()));
            summary.rows.push(row);
        }
        for (key, pairs) in statistics
            .cdfs
            .into_iter()
            .flat_map(|(keys, cdfs)| keys.into_iter().zip(cdfs))
        {
            // The group's cells once, each row a copy made at its final size: 204 800 rows of a trace.
            let mut group = label_cells(point, labels);
            group.extend(group_cells(key));
            for (latency_us, fraction) in pairs {
                let mut row = Vec::with_capacity(group.len() + 2);
                row.extend_from_slice(&group);
                row.extend([Cell::Num(latency_us), Cell::Num(fraction)]);
                cdf.rows.push(row);
            }
        }
    }
    Ok((summary, cdf))
}

/// The `blocks` table of `stats: samples` with `blocks_ms`: per point and block of `block_ms` of send time, the
/// summary's statistics over the block's kept samples. A point above `exact_max_samples` has no blocks (its raw
/// samples do not fit in memory at once), so its claims are judged without an interval.
fn blocks_table(
    spec: &AggregateSpec,
    block_ms: u64,
    points: &[PointSource],
    labels: &[String],
    notes: &mut Vec<String>,
) -> Result<Table, AggregateError> {
    let mut statistics = vec![BLOCK_COLUMN];
    statistics.extend(SAMPLE_STATISTICS);
    let mut table = Table::new(columns(labels, &statistics));
    let query = SampleQuery {
        latency: spec.latency,
        cuts: spec.summary_cuts(),
        trace_piece: None,
        exact_max_samples: spec.exact_max_samples(),
        trace_runs: 1,
    };
    for point in points {
        let path = point.dir.join(SAMPLES_FILE);
        if samples::row_count(&path)? > spec.exact_max_samples() {
            continue;
        }
        for (block, summary) in
            samples::block_summaries(&path, &query, block_ms * 1_000_000, notes)?
        {
            let mut row = label_cells(point, labels);
            row.push(Cell::Num((block * block_ms) as f64));
            row.extend(latency_cells(summary.as_ref()));
            table.rows.push(row);
        }
    }
    Ok(table)
}
