//! The `aggregate` node's config: which statistics to compute and how to post-process the tables.

use std::collections::BTreeMap;

use fracflow_record::SampleColumn;
use serde::Deserialize;

use crate::Cell;
use crate::error::AggregateError;

/// Samples per point above which the quantiles come from an HDR histogram instead of the exact selection:
/// 24 M samples hold 288 MB (8 bytes of latency and 4 of thread id each) while they are cut and selected.
pub const DEFAULT_EXACT_MAX_SAMPLES: u64 = 24_000_000;

/// Rows per point of a `cdf` table unless `cdf.points` says otherwise.
pub const DEFAULT_CDF_POINTS: usize = 200;

/// The `aggregate` node's config (see the crate docs for the YAML shapes).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateSpec {
    /// Which input the statistics come from.
    pub stats: StatsKind,
    /// `stats: seconds`: only seconds `>= from_s` count.
    #[serde(default)]
    pub from_s: Option<u64>,
    /// `stats: samples | trace`: drop samples sent before `skip_s` seconds into the run.
    #[serde(default)]
    pub skip_s: Option<f64>,
    /// `stats: samples | trace`: then drop this fraction of each thread's remaining samples (first in seq order).
    #[serde(default)]
    pub drop_fraction: Option<f64>,
    /// `stats: samples | trace`: which latency the statistics use (default `last_piece`, fperf's).
    #[serde(default)]
    pub latency: LatencyField,
    /// `stats: samples | trace`: samples per point above which an HDR histogram replaces exact selection.
    #[serde(default)]
    pub exact_max_samples: Option<u64>,
    /// `stats: samples | trace`: a `cdf` table (always produced for `trace`; these settings then refine it).
    #[serde(default)]
    pub cdf: Option<CdfSpec>,
    /// `stats: samples`: also a `blocks` table, the summary's statistics per point per block of this many ms of
    /// send time, which a `check` bootstraps its intervals from.
    #[serde(default)]
    pub blocks_ms: Option<u64>,
    /// `stats: trace`: slot → function name.
    #[serde(default)]
    pub functions: BTreeMap<u32, String>,
    /// `stats: trace`: request piece size; fragments = (request_bytes − 64) / piece.
    #[serde(default)]
    pub piece: Option<u32>,
    /// Extra computed rows, applied in order to `summary`.
    #[serde(default)]
    pub derive: Vec<DeriveStep>,
    /// Delta, ratio or speedup columns against a baseline series, applied to `summary` after `derive`.
    #[serde(default)]
    pub compare: Option<CompareSpec>,
    /// `stats: metrics`: labels that tell repetitions apart; rows equal in every other label are reduced into one.
    #[serde(default)]
    pub over: Vec<String>,
}

/// Where the statistics come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatsKind {
    /// `seconds.jsonl`: per-second, per-thread averages (figures 13–15).
    Seconds,
    /// `samples.parquet`: raw per-request latencies (figures 16–17).
    Samples,
    /// `samples.parquet` of a trace replay, grouped by function and fragments (figure 18).
    Trace,
    /// `metrics.json`: the values a `command` node extracted from its output, one row per node (RPCNIC's
    /// speeds and timings), repetitions reduced to mean, sd and n.
    Metrics,
}

impl StatsKind {
    /// The name as written in YAML.
    pub fn name(self) -> &'static str {
        match self {
            StatsKind::Seconds => "seconds",
            StatsKind::Samples => "samples",
            StatsKind::Trace => "trace",
            StatsKind::Metrics => "metrics",
        }
    }
}

/// Which latency column of `samples.parquet` the statistics use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyField {
    /// `latency_ns`: from the first request byte (or the intended send time).
    FromSend,
    /// `latency_last_piece_ns`: fperf's, from the last request piece written.
    #[default]
    LastPiece,
}

impl LatencyField {
    pub(crate) fn column(self) -> SampleColumn {
        match self {
            LatencyField::FromSend => SampleColumn::LatencyNs,
            LatencyField::LastPiece => SampleColumn::LatencyLastPieceNs,
        }
    }
}

/// The `cdf:` block.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CdfSpec {
    /// Only points whose labels match every entry (numbers compare numerically).
    #[serde(default, rename = "where")]
    pub filter: BTreeMap<String, Cell>,
    /// The per-thread warm-up cut for the CDF (replaces the summary's `drop_fraction`).
    #[serde(default)]
    pub drop_fraction: Option<f64>,
    /// At most this many rows per point (or per trace group).
    #[serde(default)]
    pub points: Option<usize>,
}

/// One step of `derive:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum DeriveStep {
    /// Rows that scale a base row's values linearly in one label (figure 15's "without reassembly").
    ScaleBy(ScaleBy),
}

/// `scale_by: {column, base, factor_column, unit, columns}`: for every group of rows equal in the other label
/// columns, the measured row with `column == base` is copied to every other `column` value measured in that
/// group, with each of `columns` multiplied by `column / base`. Every row gets `factor_column = column / unit`
/// and `computed` (1 on the new rows, 0 on measured ones); the new rows' other statistics are null.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleBy {
    pub column: String,
    pub base: f64,
    pub factor_column: String,
    /// The divisor of `factor_column` (default: `base`).
    #[serde(default)]
    pub unit: Option<f64>,
    /// The statistics to scale (default: `[mean_us]`).
    #[serde(default = "default_scaled_columns")]
    pub columns: Vec<String>,
}

fn default_scaled_columns() -> Vec<String> {
    vec!["mean_us".to_string()]
}

/// The `compare:` block: for rows equal in `on`, each of `values` against the baseline row's value, as `op` says.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompareSpec {
    /// The label that names the series.
    pub column: String,
    /// The series every other one is compared with.
    pub baseline: Cell,
    /// Labels that must be equal between a row and its baseline row.
    pub on: Vec<String>,
    /// Statistic columns that get a `<op>_` column.
    pub values: Vec<String>,
    /// How a value is set against its baseline (default `delta`).
    #[serde(default)]
    pub op: CompareOp,
}

/// `compare.op`: the column each value gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareOp {
    /// `delta_X = X − baseline`.
    #[default]
    Delta,
    /// `ratio_X = X / baseline` (a rate against the baseline's rate, e.g. RPCNIC's deserializer speeds).
    Ratio,
    /// `speedup_X = baseline / X` (a time against the baseline's time).
    Speedup,
}

impl CompareOp {
    /// The prefix of the columns this op adds.
    pub fn prefix(self) -> &'static str {
        match self {
            CompareOp::Delta => "delta",
            CompareOp::Ratio => "ratio",
            CompareOp::Speedup => "speedup",
        }
    }
}

/// The validated, defaulted view of the spec's cut settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cuts {
    pub skip_ns: u64,
    pub drop_fraction: f64,
}

impl AggregateSpec {
    /// Rejects fields that do not apply to `stats`, and out-of-range values, before any file is read.
    pub(crate) fn validate(&self) -> Result<(), AggregateError> {
        let bad = |why: String| Err(AggregateError::Spec(why));
        let sample_only = [
            ("skip_s", self.skip_s.is_some()),
            ("drop_fraction", self.drop_fraction.is_some()),
            ("exact_max_samples", self.exact_max_samples.is_some()),
            ("cdf", self.cdf.is_some()),
            ("latency", self.latency != LatencyField::default()),
        ];
        match self.stats {
            StatsKind::Seconds | StatsKind::Metrics => {
                if let Some((field, _)) = sample_only.iter().find(|(_, set)| *set) {
                    return bad(format!(
                        "`{field}` applies to `stats: samples | trace`, not `{}`",
                        self.stats.name()
                    ));
                }
                if self.stats == StatsKind::Metrics && self.from_s.is_some() {
                    return bad("`from_s` applies to `stats: seconds`, not `metrics`".into());
                }
            }
            StatsKind::Samples | StatsKind::Trace => {
                if self.from_s.is_some() {
                    return bad(format!(
                        "`from_s` applies to `stats: seconds`; use `skip_s` for `{:?}`",
                        self.stats
                    )
                    .to_lowercase());
                }
            }
        }
        if self.stats != StatsKind::Metrics && !self.over.is_empty() {
            return bad(format!(
                "`over` applies to `stats: metrics`, not `{}`",
                self.stats.name()
            ));
        }
        if self.blocks_ms.is_some() && self.stats != StatsKind::Samples {
            return bad(format!(
                "`blocks_ms` applies to `stats: samples`, not `{}`",
                self.stats.name()
            ));
        }
        if self.blocks_ms == Some(0) {
            return bad("`blocks_ms` must be positive".into());
        }
        if self.stats != StatsKind::Trace {
            if !self.functions.is_empty() {
                return bad("`functions` applies to `stats: trace` only".into());
            }
            if self.piece.is_some() {
                return bad("`piece` applies to `stats: trace` only".into());
            }
        } else if self.piece == Some(0) {
            return bad("`piece` must be positive".into());
        }
        if let Some(skip) = self.skip_s
            && !(skip >= 0.0 && skip.is_finite())
        {
            return bad(format!(
                "`skip_s` must be a non-negative number, not {skip}"
            ));
        }
        let fractions = [
            self.drop_fraction,
            self.cdf.as_ref().and_then(|c| c.drop_fraction),
        ];
        if let Some(f) = fractions
            .into_iter()
            .flatten()
            .find(|f| !(0.0..1.0).contains(f))
        {
            return bad(format!("`drop_fraction` must be in [0, 1), not {f}"));
        }
        if let Some(cdf) = &self.cdf
            && cdf.points.is_some_and(|p| p < 2)
        {
            return bad("`cdf.points` must be at least 2".into());
        }
        for step in &self.derive {
            let DeriveStep::ScaleBy(scale) = step;
            let positive = |v: f64| v > 0.0 && v.is_finite();
            if !positive(scale.base) || scale.unit.is_some_and(|u| !positive(u)) {
                return bad("`scale_by.base` and `scale_by.unit` must be positive".into());
            }
        }
        Ok(())
    }

    pub(crate) fn summary_cuts(&self) -> Cuts {
        Cuts {
            skip_ns: (self.skip_s.unwrap_or(0.0) * 1e9).round() as u64,
            drop_fraction: self.drop_fraction.unwrap_or(0.0),
        }
    }

    pub(crate) fn cdf_cuts(&self) -> Cuts {
        let summary = self.summary_cuts();
        Cuts {
            drop_fraction: self
                .cdf
                .as_ref()
                .and_then(|c| c.drop_fraction)
                .unwrap_or(summary.drop_fraction),
            ..summary
        }
    }

    pub(crate) fn cdf_points(&self) -> usize {
        self.cdf
            .as_ref()
            .and_then(|c| c.points)
            .unwrap_or(DEFAULT_CDF_POINTS)
    }

    pub(crate) fn exact_max_samples(&self) -> u64 {
        self.exact_max_samples.unwrap_or(DEFAULT_EXACT_MAX_SAMPLES)
    }
}
