//! Expectations: the paper's claims as data, judged against the summary tables.

use std::cell::RefCell;
use std::collections::BTreeMap;

use fracflow_record::{PaperComparison, Verdict};
use serde::Deserialize;

use crate::frame::COMPUTED_COLUMN;
use crate::{BLOCKS_TABLE, Cell, ExpectationResult, STATISTIC_COLUMNS, Table, metrics};

/// One claim of the paper against one table (see the crate docs for the YAML shapes). Exactly one of the
/// claim fields (`within`, `below`, `above`, `near`, `sublinear`, `grows`, `slower_growth`, `flatter`) is set.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    pub name: String,
    /// The table the claim is about (default `summary`).
    #[serde(default = "default_table")]
    pub table: String,
    /// Only rows whose cells match every entry (numbers compare numerically).
    #[serde(default, rename = "where")]
    pub filter: BTreeMap<String, Cell>,
    /// `|column| <= limit` on every row.
    #[serde(default)]
    pub within: Option<Bound>,
    /// `column < limit` on every row.
    #[serde(default)]
    pub below: Option<Bound>,
    /// `column > limit` on every row.
    #[serde(default)]
    pub above: Option<Bound>,
    /// `|a − b| <= limit` on every row.
    #[serde(default)]
    pub near: Option<Near>,
    /// Per group, `y(x) / y(xmin) < x / xmin` for every measured `x > xmin`.
    #[serde(default)]
    pub sublinear: Option<Curve>,
    /// Per group, `y(xmax) > y(xmin)`.
    #[serde(default)]
    pub grows: Option<Curve>,
    /// Per group, the growth `y(xmax) / y(xmin)` at the largest `group` value is below the one at the smallest.
    #[serde(default)]
    pub slower_growth: Option<SlowerGrowth>,
    /// Per group, the growth of series `flat` is below that of series `steep`.
    #[serde(default)]
    pub flatter: Option<Flatter>,
    /// What the host must give for the claim to be testable; on a host that cannot, the verdict is
    /// `not testable here`.
    #[serde(default)]
    pub needs: Option<Needs>,
    /// The smallest difference that counts, in the claim's contrast (see the crate docs): a ratio claim's is
    /// relative (`0.1`: 10 %), a limit claim's is in the column's unit. Default 0.
    #[serde(default)]
    pub margin: Option<f64>,
    /// The paper's numbers the claim rests on, each shown beside the value measured at the same place.
    #[serde(default)]
    pub paper: Vec<PaperValue>,
}

/// `needs:` of a claim.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Needs {
    pub cores: CoresNeeded,
}

/// `cores: 6`, or `cores: {server: units, client: 2}`: the sum of the parts, each a number or a column whose
/// largest value among the rows one verdict compares is taken.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum CoresNeeded {
    Total(u32),
    Parts(CoreParts),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreParts {
    #[serde(default)]
    pub server: Option<Amount>,
    #[serde(default)]
    pub client: Option<Amount>,
}

/// A number of cores, or the column that holds it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Amount {
    Count(u32),
    Column(String),
}

/// `paper:` entry: the paper's value of `column` at the rows the claim's `where` and `at` select.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperValue {
    /// A number, or `[low, high]` where the paper gives a range.
    pub value: PaperNumber,
    pub unit: String,
    /// Where the paper says it (figure, panel, point).
    pub source: String,
    pub column: String,
    #[serde(default)]
    pub at: BTreeMap<String, Cell>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum PaperNumber {
    One(f64),
    Range([f64; 2]),
}

/// What this host can give a claim: its cores, and where that number came from (`available_parallelism`,
/// `FRACFLOW_HOST_CORES`, the testbed profile).
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    pub cores: u32,
    pub from: String,
}

fn default_table() -> String {
    "summary".to_string()
}

/// `{column, limit}` of `within`, `below`, `above`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bound {
    pub column: String,
    pub limit: f64,
}

/// `{a, b, limit}` of `near`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Near {
    pub a: String,
    pub b: String,
    pub limit: f64,
}

/// `{x, y, by}` of `sublinear` and `grows`: one curve y(x) per combination of the `by` columns.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Curve {
    pub x: String,
    pub y: String,
    #[serde(default)]
    pub by: Vec<String>,
}

/// `{x, y, group, by}` of `slower_growth`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowerGrowth {
    pub x: String,
    pub y: String,
    /// The column whose smallest and largest values are compared (e.g. `units`).
    pub group: String,
    #[serde(default)]
    pub by: Vec<String>,
}

/// `{x, y, series, flat, steep, by}` of `flatter`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flatter {
    pub x: String,
    pub y: String,
    /// The column naming the series.
    pub series: String,
    pub flat: Cell,
    pub steep: Cell,
    #[serde(default)]
    pub by: Vec<String>,
}

enum Claim<'a> {
    Within(&'a Bound),
    Below(&'a Bound),
    Above(&'a Bound),
    Near(&'a Near),
    Sublinear(&'a Curve),
    Grows(&'a Curve),
    SlowerGrowth(&'a SlowerGrowth),
    Flatter(&'a Flatter),
}

impl Expectation {
    fn claim(&self) -> Result<Claim<'_>, String> {
        let claims: Vec<Claim<'_>> = [
            self.within.as_ref().map(Claim::Within),
            self.below.as_ref().map(Claim::Below),
            self.above.as_ref().map(Claim::Above),
            self.near.as_ref().map(Claim::Near),
            self.sublinear.as_ref().map(Claim::Sublinear),
            self.grows.as_ref().map(Claim::Grows),
            self.slower_growth.as_ref().map(Claim::SlowerGrowth),
            self.flatter.as_ref().map(Claim::Flatter),
        ]
        .into_iter()
        .flatten()
        .collect();
        let count = claims.len();
        match claims.into_iter().next() {
            Some(claim) if count == 1 => Ok(claim),
            _ => Err(format!(
                "the expectation states {count} claims; it needs exactly one of within, below, above, near, \
                 sublinear, grows, slower_growth, flatter"
            )),
        }
    }
}

/// Judges every expectation on `host` (`None`: its cores are unknown, so a claim with `needs:` is not testable);
/// never panics. A claim without matching rows fails.
pub fn evaluate(
    expectations: &[Expectation],
    tables: &BTreeMap<String, Table>,
    host: Option<&Host>,
) -> Vec<ExpectationResult> {
    expectations
        .iter()
        .map(|expectation| judge(expectation, tables, host))
        .collect()
}

fn judge(
    expectation: &Expectation,
    tables: &BTreeMap<String, Table>,
    host: Option<&Host>,
) -> ExpectationResult {
    let verdict = |claim: String, verdict: Verdict, measured: String| ExpectationResult {
        name: expectation.name.clone(),
        claim,
        verdict,
        measured,
        paper: paper_comparisons(expectation, tables),
    };
    let claim = match expectation.claim() {
        Ok(claim) => claim,
        Err(why) => return verdict("(no single claim)".into(), Verdict::Fail, why),
    };
    let scope = scope_words(&expectation.filter, &expectation.table);
    let claim_words = claim_words(&claim, &scope);
    if let Some(margin) = expectation.margin
        && !(margin >= 0.0 && margin.is_finite())
    {
        return verdict(
            claim_words,
            Verdict::Fail,
            format!("`margin` must be a non-negative number, not {margin}"),
        );
    }
    let Some(table) = tables.get(&expectation.table) else {
        let known: Vec<&str> = tables.keys().map(String::as_str).collect();
        return verdict(
            claim_words,
            Verdict::Fail,
            format!(
                "no table `{}` (tables: {})",
                expectation.table,
                known.join(", ")
            ),
        );
    };
    let rows = match matching_rows(table, &expectation.filter) {
        Ok(rows) if !rows.is_empty() => rows,
        Ok(_) => {
            return verdict(claim_words, Verdict::Fail, format!("no rows match {scope}"));
        }
        Err(why) => {
            return verdict(
                claim_words,
                Verdict::Fail,
                format!("no rows match {scope}: {why}"),
            );
        }
    };
    let blocks = (expectation.table == "summary")
        .then(|| tables.get(BLOCKS_TABLE))
        .flatten()
        .map(|blocks| BlockIndex::new(table, blocks));
    let view = View {
        table,
        rows,
        hidden: expectation.filter.keys().cloned().collect(),
        sample: None,
    };
    let judging = Judging {
        expectation,
        claim: &claim,
        view: &view,
        blocks: blocks.as_ref(),
        host,
        margin: expectation.margin.unwrap_or(0.0),
    };
    let (verdict_of_all, measured) = judging.units();
    verdict(claim_words, verdict_of_all, measured)
}

/// One claim being judged: its rows split into units (a row, or a group of rows), each judged on its own.
struct Judging<'a> {
    expectation: &'a Expectation,
    claim: &'a Claim<'a>,
    view: &'a View<'a>,
    blocks: Option<&'a BlockIndex>,
    host: Option<&'a Host>,
    margin: f64,
}

/// What one unit's numbers say: whether the claim holds on the point values as stated (`<`, `≤`), the contrast
/// (positive exactly when the claim holds; a ratio claim's is the ratio − 1) and the measured values in words.
struct Judged {
    holds: bool,
    contrast: f64,
    /// What the contrast is, in words (`10 − median_us`, `growth(CPU) / growth(fRAC) − 1`).
    contrast_words: String,
    /// A ratio claim shows its contrast as the ratio (contrast + 1).
    ratio: bool,
    words: String,
}

/// Why a unit's numbers could not be judged. A claim that does not fit its table (a missing column, text where a
/// number belongs) fails: the pipeline is wrong. A point with no value, because no samples were left after the
/// cuts (a starved client under load), says nothing either way: the claim is inconclusive, not failed.
struct Unjudged {
    why: String,
    no_data: bool,
}

impl Unjudged {
    fn no_data(why: String) -> Unjudged {
        Unjudged { why, no_data: true }
    }

    fn context(self, scope: &str) -> Unjudged {
        Unjudged {
            why: format!("{scope}: {}", self.why),
            ..self
        }
    }
}

impl From<String> for Unjudged {
    fn from(why: String) -> Unjudged {
        Unjudged {
            why,
            no_data: false,
        }
    }
}

/// A unit of judgement: its rows, and how its line starts.
struct Unit {
    rows: Vec<usize>,
    /// A per-row claim names its row after the values; a per-group claim names its group first.
    label: String,
    per_row: bool,
}

impl Judging<'_> {
    /// Every unit's verdict, and the claim's: a failed unit fails the claim; else an inconclusive one makes it
    /// inconclusive; else it passes when any unit passed; not testable when none could be judged here.
    fn units(&self) -> (Verdict, String) {
        let units = match self.claim {
            Claim::Within(_) | Claim::Below(_) | Claim::Above(_) | Claim::Near(_) => self
                .view
                .rows
                .iter()
                .map(|&row| Unit {
                    rows: vec![row],
                    label: self.view.name(row),
                    per_row: true,
                })
                .collect(),
            Claim::Sublinear(c) | Claim::Grows(c) => self.view.groups(&c.by),
            Claim::SlowerGrowth(c) => self.view.groups(&c.by),
            Claim::Flatter(c) => self.view.groups(&c.by),
        };
        let mut verdicts = Vec::new();
        let mut lines = Vec::new();
        for unit in units {
            let (verdict, line) = self.unit(&unit);
            verdicts.push(verdict);
            lines.push(line);
        }
        let overall = if verdicts.contains(&Verdict::Fail) {
            Verdict::Fail
        } else if verdicts.contains(&Verdict::Inconclusive) {
            Verdict::Inconclusive
        } else if verdicts.contains(&Verdict::Pass) {
            Verdict::Pass
        } else {
            Verdict::NotTestable
        };
        (overall, lines.join("; "))
    }

    fn unit(&self, unit: &Unit) -> (Verdict, String) {
        let line = |words: &str, tail: &str| {
            if unit.per_row {
                format!("{words} at {}{tail}", unit.label)
            } else {
                format!("{}: {words}{tail}", unit.label)
            }
        };
        if let Some(why) = self.not_testable(&unit.rows) {
            return (
                Verdict::NotTestable,
                line("not testable here", &format!(" ({why})")),
            );
        }
        let point = match judge_rows(self.claim, self.view, &unit.rows) {
            Ok(point) => point,
            Err(Unjudged { why, no_data: true }) if unit.per_row => {
                return (Verdict::Inconclusive, format!("{why} (inconclusive)"));
            }
            Err(Unjudged { why, no_data: true }) => {
                return (Verdict::Inconclusive, line(&why, " (inconclusive)"));
            }
            Err(Unjudged { why, .. }) if unit.per_row => return (Verdict::Fail, why),
            Err(Unjudged { why, .. }) => return (Verdict::Fail, line(&why, " ✗")),
        };
        let (verdict, interval_words) = match self.blocks.map(|blocks| self.interval(blocks, unit))
        {
            Some(Ok(interval)) => {
                let verdict = if interval.lo > self.margin {
                    Verdict::Pass
                } else if interval.hi < -self.margin {
                    Verdict::Fail
                } else {
                    Verdict::Inconclusive
                };
                (
                    verdict,
                    format!("; {}", interval.words(&point, self.margin)),
                )
            }
            unavailable => {
                let verdict = if self.margin == 0.0 {
                    if point.holds {
                        Verdict::Pass
                    } else {
                        Verdict::Fail
                    }
                } else if point.contrast > self.margin {
                    Verdict::Pass
                } else if point.contrast < -self.margin {
                    Verdict::Fail
                } else {
                    Verdict::Inconclusive
                };
                let why = match unavailable {
                    Some(Err(why)) => format!("; no interval: {why}"),
                    _ => String::new(),
                };
                (verdict, why)
            }
        };
        let mark = match verdict {
            Verdict::Pass => " ✓",
            Verdict::Fail => " ✗",
            Verdict::Inconclusive => " (inconclusive)",
            Verdict::NotTestable => "",
        };
        (
            verdict,
            line(&point.words, &format!("{interval_words}{mark}")),
        )
    }

    /// Why this host cannot give the unit's rows what the claim needs, if it cannot.
    fn not_testable(&self, rows: &[usize]) -> Option<String> {
        let needs = self.expectation.needs.as_ref()?;
        let (cores, parts) = match needed_cores(&needs.cores, self.view, rows) {
            Ok(needed) => needed,
            Err(why) => return Some(format!("cannot tell what it needs: {why}")),
        };
        let need = format!("needs ≥ {cores} cores{parts}");
        match self.host {
            Some(host) if host.cores >= cores => None,
            Some(host) => Some(format!("{need}; host has {} ({})", host.cores, host.from)),
            None => Some(format!("{need}; this host's cores were not given")),
        }
    }

    /// The contrast's 95 % bootstrap interval over the blocks of the unit's rows.
    fn interval(&self, blocks: &BlockIndex, unit: &Unit) -> Result<Interval, String> {
        let mut seed = blake3::Hasher::new();
        seed.update(b"fracflow bootstrap 1\0");
        seed.update(self.expectation.name.as_bytes());
        seed.update(b"\0");
        seed.update(unit.label.as_bytes());
        for &row in &unit.rows {
            blocks.hash_row(row, &mut seed);
        }
        let draws = RefCell::new(Draws::new(seed.finalize_xof()));
        let replicate = |resample: bool| -> Result<f64, String> {
            let sample = Sample {
                blocks,
                resample,
                draws: &draws,
                chosen: RefCell::new(BTreeMap::new()),
            };
            let view = View {
                sample: Some(&sample),
                ..self.view.clone()
            };
            judge_rows(self.claim, &view, &unit.rows)
                .map(|judged| judged.contrast)
                .map_err(|unjudged| unjudged.why)
        };
        let estimate = replicate(false)?;
        let mut contrasts = Vec::with_capacity(BOOTSTRAP_REPLICATES);
        for _ in 0..BOOTSTRAP_REPLICATES {
            contrasts.push(replicate(true)?);
        }
        contrasts.sort_by(f64::total_cmp);
        let at = |q: f64| contrasts[((contrasts.len() - 1) as f64 * q).round() as usize];
        let blocks_per_row = unit
            .rows
            .iter()
            .filter_map(|&row| blocks.of(row).map(<[usize]>::len))
            .min()
            .unwrap_or(0);
        Ok(Interval {
            estimate,
            lo: at(0.025),
            hi: at(0.975),
            blocks: blocks_per_row,
        })
    }
}

/// Resamplings of a unit's blocks; 2000 put the 2.5 % and 97.5 % quantiles of the contrast within a few
/// hundredths of their limit.
const BOOTSTRAP_REPLICATES: usize = 2000;

/// Blocks a point needs for an interval: with fewer, a resampling is mostly the same few values.
pub const MIN_BLOCKS: usize = 5;

/// A contrast's bootstrap estimate and 95 % percentile interval.
struct Interval {
    estimate: f64,
    lo: f64,
    hi: f64,
    /// The fewest blocks any of the unit's rows had.
    blocks: usize,
}

impl Interval {
    fn words(&self, point: &Judged, margin: f64) -> String {
        let shown = |c: f64| number(if point.ratio { c + 1.0 } else { c });
        let margin = if margin > 0.0 {
            format!(", margin {}", number(margin))
        } else {
            String::new()
        };
        format!(
            "{} = {} over blocks, 95 % CI [{}, {}] (≥ {} blocks per point{margin})",
            point.contrast_words,
            shown(self.estimate),
            shown(self.lo),
            shown(self.hi),
            self.blocks
        )
    }
}

/// The cores a unit needs (`needs.cores`), and its parts in words (` : 4 server + 2 client`).
fn needed_cores(
    needed: &CoresNeeded,
    view: &View<'_>,
    rows: &[usize],
) -> Result<(u32, String), String> {
    let parts = match needed {
        CoresNeeded::Total(cores) => return Ok((*cores, String::new())),
        CoresNeeded::Parts(parts) => parts,
    };
    let amount = |amount: &Amount| -> Result<u32, String> {
        match amount {
            Amount::Count(count) => Ok(*count),
            Amount::Column(column) if view.table.column(column).is_some() => {
                let mut largest = 0.0f64;
                for &row in rows {
                    largest = largest.max(view.number(row, column).map_err(|e| e.why)?);
                }
                Ok(largest.ceil() as u32)
            }
            Amount::Column(text) => text.trim().parse().map_err(|_| {
                format!("`{text}` is neither a number of cores nor a column of the table")
            }),
        }
    };
    let mut total = 0;
    let mut words = Vec::new();
    for (name, part) in [("server", &parts.server), ("client", &parts.client)] {
        if let Some(part) = part {
            let cores = amount(part)?;
            total += cores;
            words.push(format!("{cores} {name}"));
        }
    }
    Ok((total, format!(": {}", words.join(" + "))))
}

/// Each `paper:` value beside the value measured at its rows.
fn paper_comparisons(
    expectation: &Expectation,
    tables: &BTreeMap<String, Table>,
) -> Vec<PaperComparison> {
    expectation
        .paper
        .iter()
        .map(|paper| {
            let mut filter = expectation.filter.clone();
            filter.extend(paper.at.clone());
            let rows = tables
                .get(&expectation.table)
                .map(|table| (table, matching_rows(table, &filter).unwrap_or_default()));
            let (measured, testbed_kind, note) = match rows {
                Some((table, rows)) if rows.len() == 1 => (
                    table.get(rows[0], &paper.column).and_then(Cell::as_f64),
                    table
                        .get(rows[0], "testbed_kind")
                        .map(Cell::label)
                        .filter(|kind| !kind.is_empty()),
                    String::new(),
                ),
                Some((_, rows)) if rows.len() > 1 => (
                    None,
                    None,
                    format!(" ({} rows match; `at:` must name one)", rows.len()),
                ),
                _ => (None, None, String::new()),
            };
            let at = if filter.is_empty() {
                paper.column.clone()
            } else {
                let terms: Vec<String> = filter
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.label()))
                    .collect();
                format!("{} at {}{note}", paper.column, terms.join(", "))
            };
            PaperComparison {
                // As the paper writes it: `8.4`, not the verdicts' `8.400`.
                paper: match paper.value {
                    PaperNumber::One(value) => Cell::Num(value).label(),
                    PaperNumber::Range([low, high]) => {
                        format!("{}–{}", Cell::Num(low).label(), Cell::Num(high).label())
                    }
                },
                unit: paper.unit.clone(),
                source: paper.source.clone(),
                at,
                measured,
                testbed_kind,
            }
        })
        .collect()
}

/// Judges one unit's rows on `view`'s numbers (the table's, or one resampling of the blocks).
fn judge_rows(claim: &Claim<'_>, view: &View<'_>, rows: &[usize]) -> Result<Judged, Unjudged> {
    let row_values = |columns: &[&String]| -> Result<Vec<f64>, Unjudged> {
        columns.iter().map(|c| view.number(rows[0], c)).collect()
    };
    let bound = |bound: &Bound, kind: &str| -> Result<Judged, Unjudged> {
        let (v, l, column) = (row_values(&[&bound.column])?[0], bound.limit, &bound.column);
        let (holds, contrast, contrast_words, sign) = match kind {
            "within" => (
                v.abs() <= l,
                l - v.abs(),
                format!("{} − |{column}|", number(l)),
                "±",
            ),
            "below" => (v < l, l - v, format!("{} − {column}", number(l)), ""),
            _ => (v > l, v - l, format!("{column} − {}", number(l)), ""),
        };
        Ok(Judged {
            holds,
            contrast,
            contrast_words,
            ratio: false,
            words: format!("{column} {} (limit {sign}{})", number(v), number(l)),
        })
    };
    match claim {
        Claim::Within(b) => bound(b, "within"),
        Claim::Below(b) => bound(b, "below"),
        Claim::Above(b) => bound(b, "above"),
        Claim::Near(near) => {
            let v = row_values(&[&near.a, &near.b])?;
            let gap = v[0] - v[1];
            Ok(Judged {
                holds: gap.abs() <= near.limit,
                contrast: near.limit - gap.abs(),
                contrast_words: format!("{} − |{} − {}|", number(near.limit), near.a, near.b),
                ratio: false,
                words: format!(
                    "{}, {} {} − {} = {} (limit ±{})",
                    near.a,
                    near.b,
                    number(v[0]),
                    number(v[1]),
                    number(gap),
                    number(near.limit)
                ),
            })
        }
        Claim::Sublinear(curve) => sublinear(&Group { view, rows }, curve),
        Claim::Grows(curve) => {
            let growth = Group { view, rows }.growth(&curve.x, &curve.y)?;
            Ok(Judged {
                holds: growth.y1 > growth.y0,
                contrast: growth.ratio() - 1.0,
                contrast_words: format!("growth of {}", curve.y),
                ratio: true,
                words: growth.describe(&curve.x, &curve.y),
            })
        }
        Claim::SlowerGrowth(claim) => slower_growth(&Group { view, rows }, claim),
        Claim::Flatter(claim) => flatter(&Group { view, rows }, claim),
    }
}

/// A summary table's rows → their rows in the blocks table (same label cells).
struct BlockIndex {
    blocks: Table,
    of_row: Vec<Option<Vec<usize>>>,
    /// The summary's label columns: taken from the table even in a resampling.
    labels: Vec<String>,
}

impl BlockIndex {
    fn new(summary: &Table, blocks: &Table) -> BlockIndex {
        let labels: Vec<String> = label_columns(summary).into_iter().cloned().collect();
        let key = |table: &Table, row: usize| -> Option<Vec<String>> {
            labels
                .iter()
                .map(|c| table.get(row, c).map(Cell::label))
                .collect()
        };
        let mut by_key: BTreeMap<Vec<String>, Vec<usize>> = BTreeMap::new();
        for row in 0..blocks.rows.len() {
            if let Some(key) = key(blocks, row) {
                by_key.entry(key).or_default().push(row);
            }
        }
        let of_row = (0..summary.rows.len())
            .map(|row| key(summary, row).and_then(|key| by_key.get(&key).cloned()))
            .collect();
        BlockIndex {
            blocks: blocks.clone(),
            of_row,
            labels,
        }
    }

    fn of(&self, row: usize) -> Option<&[usize]> {
        self.of_row.get(row)?.as_deref()
    }

    /// Feeds a row's block values to the bootstrap's seed, so the same data draws the same resamplings.
    fn hash_row(&self, row: usize, seed: &mut blake3::Hasher) {
        for &block in self.of(row).unwrap_or(&[]) {
            for cell in &self.blocks.rows[block] {
                match cell {
                    Cell::Num(v) => seed.update(&v.to_bits().to_le_bytes()),
                    Cell::Text(t) => seed.update(t.as_bytes()),
                    Cell::Null => seed.update(b"\0"),
                };
            }
        }
    }
}

/// Random draws from the seed's extendable output: the same seed, the same draws on every platform.
struct Draws {
    reader: blake3::OutputReader,
    buffer: [u8; 4096],
    at: usize,
}

impl Draws {
    fn new(reader: blake3::OutputReader) -> Draws {
        Draws {
            reader,
            buffer: [0; 4096],
            at: 4096,
        }
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias of 64 random bits is far below the bootstrap's own noise).
    fn below(&mut self, n: usize) -> usize {
        if self.at + 8 > self.buffer.len() {
            self.reader.fill(&mut self.buffer);
            self.at = 0;
        }
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&self.buffer[self.at..self.at + 8]);
        self.at += 8;
        (u64::from_le_bytes(bytes) % n.max(1) as u64) as usize
    }
}

/// A point's statistics recomputed from its blocks: all of them once (`resample: false`), or as many drawn
/// with replacement. A row's draw is made once and shared by every column read from it.
struct Sample<'a> {
    blocks: &'a BlockIndex,
    resample: bool,
    draws: &'a RefCell<Draws>,
    chosen: RefCell<BTreeMap<usize, Vec<usize>>>,
}

impl Sample<'_> {
    /// `column` of summary row `row` over the chosen blocks: the request-weighted mean for `mean_us`, the sum
    /// for `requests`, the request-weighted median of the blocks' values for the quantiles.
    fn number(&self, row: usize, column: &str, name: &str) -> Result<f64, String> {
        let rows = self
            .blocks
            .of(row)
            .ok_or_else(|| format!("no blocks at {name}"))?;
        if rows.len() < MIN_BLOCKS {
            return Err(format!(
                "{} block(s) at {name}, an interval needs {MIN_BLOCKS}",
                rows.len()
            ));
        }
        let table = &self.blocks.blocks;
        if table.column(column).is_none() {
            return Err(format!("the blocks table has no {column}"));
        }
        let mut chosen = self.chosen.borrow_mut();
        let picked = chosen.entry(row).or_insert_with(|| {
            if self.resample {
                let mut draws = self.draws.borrow_mut();
                (0..rows.len())
                    .map(|_| rows[draws.below(rows.len())])
                    .collect()
            } else {
                rows.to_vec()
            }
        });
        let value = |block: usize, column: &str| table.get(block, column).and_then(Cell::as_f64);
        match column {
            "requests" => Ok(picked.iter().filter_map(|&b| value(b, column)).sum()),
            "mean_us" => {
                let (mut sum, mut count) = (0.0, 0.0);
                for &block in picked.iter() {
                    if let (Some(mean), Some(requests)) =
                        (value(block, column), value(block, "requests"))
                    {
                        sum += mean * requests;
                        count += requests;
                    }
                }
                (count > 0.0)
                    .then(|| sum / count)
                    .ok_or_else(|| format!("no requests in the blocks at {name}"))
            }
            _ => {
                // Weighted by requests: a stalled block holds few requests of a closed loop, and must count as
                // little in the point's statistic as its requests do in the pooled one.
                let mut values: Vec<(f64, f64)> = picked
                    .iter()
                    .filter_map(|&b| Some((value(b, column)?, value(b, "requests")?)))
                    .collect();
                let total: f64 = values.iter().map(|(_, weight)| weight).sum();
                if values.is_empty() || total <= 0.0 {
                    return Err(format!("no {column} in the blocks at {name}"));
                }
                values.sort_by(|a, b| a.0.total_cmp(&b.0));
                let mut seen = 0.0;
                for &(v, weight) in &values {
                    seen += weight;
                    if seen >= total / 2.0 {
                        return Ok(v);
                    }
                }
                Ok(values[values.len() - 1].0)
            }
        }
    }
}
fn scope_words(filter: &BTreeMap<String, Cell>, table: &str) -> String {
    if filter.is_empty() {
        format!("table {table}")
    } else {
        let terms: Vec<String> = filter
            .iter()
            .map(|(k, v)| format!("{k}={}", v.label()))
            .collect();
        format!("{} in table {table}", terms.join(", "))
    }
}

fn claim_words(claim: &Claim<'_>, scope: &str) -> String {
    let by = |by: &[String]| {
        if by.is_empty() {
            String::new()
        } else {
            format!(" for each {}", by.join(", "))
        }
    };
    match claim {
        Claim::Within(b) => format!(
            "|{}| ≤ {} on every row of {scope}",
            b.column,
            number(b.limit)
        ),
        Claim::Below(b) => format!("{} < {} on every row of {scope}", b.column, number(b.limit)),
        Claim::Above(b) => format!("{} > {} on every row of {scope}", b.column, number(b.limit)),
        Claim::Near(n) => format!(
            "|{} − {}| ≤ {} on every row of {scope}",
            n.a,
            n.b,
            number(n.limit)
        ),
        Claim::Sublinear(c) => format!(
            "{y}(x)/{y}(min) < {x}/{x}(min) for every measured {x} above the smallest{} ({scope})",
            by(&c.by),
            x = c.x,
            y = c.y
        ),
        Claim::Grows(c) => format!(
            "{y} at the largest {x} > {y} at the smallest{} ({scope})",
            by(&c.by),
            x = c.x,
            y = c.y
        ),
        Claim::SlowerGrowth(c) => format!(
            "growth {y}(max {x})/{y}(min {x}) at the largest {g} < at the smallest {g}{} ({scope})",
            by(&c.by),
            x = c.x,
            y = c.y,
            g = c.group
        ),
        Claim::Flatter(c) => format!(
            "growth {y}(max {x})/{y}(min {x}) of {s}={} < of {s}={}{} ({scope})",
            c.flat.label(),
            c.steep.label(),
            by(&c.by),
            x = c.x,
            y = c.y,
            s = c.series
        ),
    }
}

/// A number as a verdict shows it: integers without decimals, others with three.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value:.3}")
    }
}

/// Whether a table cell matches a `where` value: numerically when both are numbers, by text otherwise.
pub(crate) fn cell_matches(cell: &Cell, wanted: &Cell) -> bool {
    match (cell.as_f64(), wanted.as_f64()) {
        (Some(a), Some(b)) => a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
        _ => cell.label() == wanted.label(),
    }
}

fn matching_rows(table: &Table, filter: &BTreeMap<String, Cell>) -> Result<Vec<usize>, String> {
    let mut columns = Vec::new();
    for (name, wanted) in filter {
        let index = table
            .column(name)
            .ok_or_else(|| format!("the table has no column `{name}`"))?;
        columns.push((index, wanted));
    }
    Ok((0..table.rows.len())
        .filter(|&row| {
            columns
                .iter()
                .all(|(index, wanted)| cell_matches(&table.rows[row][*index], wanted))
        })
        .collect())
}

/// The columns that name a table's rows, in table order: those the table says are labels ([`Table::labels`]: an
/// aggregation and its Parquet export say so). A table that does not say (a CSV file read back) is taken to have
/// as labels the columns before the first statistic this crate computes or the first metric of `stats: metrics`
/// (a column `X` beside its `X_sd`).
fn label_columns(table: &Table) -> Vec<&String> {
    match &table.labels {
        Some(labels) => table
            .columns
            .iter()
            .filter(|c| labels.contains(c))
            .collect(),
        None => table
            .columns
            .iter()
            .take_while(|c| {
                !STATISTIC_COLUMNS.contains(&c.as_str())
                    && table.column(&metrics::sd_column(c)).is_none()
            })
            .collect(),
    }
}

/// The rows a claim is about, and how to name them.
/// The rows a claim is about, how to name them, and where their numbers come from.
#[derive(Clone)]
struct View<'a> {
    table: &'a Table,
    rows: Vec<usize>,
    /// Columns fixed by `where`: not repeated when a row is named.
    hidden: Vec<String>,
    /// `Some`: the statistics come from a resampling of the blocks (labels stay the table's).
    sample: Option<&'a Sample<'a>>,
}

impl View<'_> {
    fn number(&self, row: usize, column: &str) -> Result<f64, Unjudged> {
        if let Some(sample) = self.sample
            && !sample.blocks.labels.iter().any(|label| label == column)
        {
            return Ok(sample.number(row, column, &self.name(row))?);
        }
        match self.table.get(row, column) {
            None => Err(format!("the table has no column `{column}`").into()),
            Some(Cell::Null) => Err(Unjudged::no_data(format!(
                "no {column} at {} (no samples were left to compute it)",
                self.name(row)
            ))),
            Some(Cell::Num(v)) if !v.is_finite() => Err(Unjudged::no_data(format!(
                "{column} is {v} at {} (no samples were left to compute it)",
                self.name(row)
            ))),
            Some(cell) => cell.as_f64().filter(|v| v.is_finite()).ok_or_else(|| {
                format!(
                    "{column} is not a number ({:?}) at {}",
                    cell.label(),
                    self.name(row)
                )
                .into()
            }),
        }
    }

    /// A row named by its label columns ([`label_columns`]), minus the `where` ones and, in a table made from
    /// measurements, the provenance columns (the same on every row of one testbed, and long).
    fn name(&self, row: usize) -> String {
        let measured = self.table.is_measured();
        let terms: Vec<String> = label_columns(self.table)
            .into_iter()
            .filter(|c| !self.hidden.contains(c))
            .filter(|c| !(measured && fracflow_record::PROVENANCE_COLUMNS.contains(&c.as_str())))
            .filter_map(|c| Some(format!("{c}={}", self.table.get(row, c)?.label())))
            .collect();
        if terms.is_empty() {
            format!("row {}", row + 1)
        } else {
            terms.join(", ")
        }
    }

    /// The rows grouped by the `by` columns, each group a unit of judgement.
    fn groups(&self, by: &[String]) -> Vec<Unit> {
        let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for &row in &self.rows {
            let key: Vec<String> = by
                .iter()
                .map(|c| {
                    let value = self
                        .table
                        .get(row, c)
                        .map_or("(missing)".to_string(), Cell::label);
                    format!("{c}={value}")
                })
                .collect();
            groups.entry(key.join(", ")).or_default().push(row);
        }
        groups
            .into_iter()
            .map(|(key, rows)| Unit {
                rows,
                label: if key.is_empty() {
                    "all rows".to_string()
                } else {
                    key
                },
                per_row: false,
            })
            .collect()
    }
}

struct Group<'a> {
    view: &'a View<'a>,
    rows: &'a [usize],
}

/// y at the smallest and the largest x of a curve.
struct Growth {
    x0: f64,
    y0: f64,
    x1: f64,
    y1: f64,
}

impl Growth {
    fn ratio(&self) -> f64 {
        self.y1 / self.y0
    }

    fn describe(&self, x: &str, y: &str) -> String {
        format!(
            "{y} {} → {} ({x} {} → {}, ×{})",
            number(self.y0),
            number(self.y1),
            number(self.x0),
            number(self.x1),
            number(self.ratio())
        )
    }
}

impl Group<'_> {
    /// The (x, y) points of the group's rows that pass `keep`, sorted by x; one row per x.
    fn curve(
        &self,
        x: &str,
        y: &str,
        keep: impl Fn(usize) -> bool,
    ) -> Result<Vec<(f64, f64)>, Unjudged> {
        let mut points = Vec::new();
        for &row in self.rows.iter().filter(|&&row| keep(row)) {
            points.push((self.view.number(row, x)?, self.view.number(row, y)?));
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let Some(pair) = points.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(format!(
                "several rows at {x}={}; add the label that tells them apart to `by`",
                number(pair[0].0)
            )
            .into());
        }
        if points.len() < 2 {
            return Err(format!("fewer than two values of {x}").into());
        }
        Ok(points)
    }

    fn growth_where(
        &self,
        x: &str,
        y: &str,
        keep: impl Fn(usize) -> bool,
    ) -> Result<Growth, Unjudged> {
        let points = self.curve(x, y, keep)?;
        let (x0, y0) = points[0];
        let (x1, y1) = points[points.len() - 1];
        if y0 <= 0.0 {
            return Err(format!(
                "{y} at the smallest {x} is {}, so no growth ratio",
                number(y0)
            )
            .into());
        }
        Ok(Growth { x0, y0, x1, y1 })
    }

    fn growth(&self, x: &str, y: &str) -> Result<Growth, Unjudged> {
        self.growth_where(x, y, |_| true)
    }
}

/// Sub-linear: for every x, `(x/x0) / (y/y0) > 1`; the contrast is the smallest of these ratios − 1.
fn sublinear(group: &Group<'_>, curve: &Curve) -> Result<Judged, Unjudged> {
    let measured = |row: usize| {
        group
            .view
            .table
            .get(row, COMPUTED_COLUMN)
            .is_none_or(|cell| cell.as_f64() == Some(0.0))
    };
    let points = group.curve(&curve.x, &curve.y, measured)?;
    let (x0, y0) = points[0];
    if x0 <= 0.0 || y0 <= 0.0 {
        return Err(format!(
            "{}={} and {}={} at the smallest x; ratios need positive values",
            curve.x,
            number(x0),
            curve.y,
            number(y0)
        )
        .into());
    }
    let mut holds = true;
    let mut tightest = f64::INFINITY;
    let mut words = Vec::new();
    for &(x, y) in &points[1..] {
        let (y_ratio, x_ratio) = (y / y0, x / x0);
        holds &= y_ratio < x_ratio;
        tightest = tightest.min(x_ratio / y_ratio);
        words.push(format!(
            "{} ×{} at {} ×{}",
            curve.y,
            number(y_ratio),
            curve.x,
            number(x_ratio)
        ));
    }
    Ok(Judged {
        holds,
        contrast: tightest - 1.0,
        contrast_words: format!("least ({x} ratio) / ({y} ratio)", x = curve.x, y = curve.y),
        ratio: true,
        words: words.join(", "),
    })
}

fn slower_growth(group: &Group<'_>, claim: &SlowerGrowth) -> Result<Judged, Unjudged> {
    let mut values: Vec<f64> = group
        .rows
        .iter()
        .map(|&row| group.view.number(row, &claim.group))
        .collect::<Result<_, _>>()?;
    values.sort_by(f64::total_cmp);
    values.dedup();
    let (Some(&smallest), Some(&largest)) = (values.first(), values.last()) else {
        return Err(format!("no values of {}", claim.group).into());
    };
    if smallest == largest {
        return Err(format!("only {}={}", claim.group, number(smallest)).into());
    }
    let at = |value: f64| {
        group.growth_where(&claim.x, &claim.y, |row| {
            group.view.number(row, &claim.group).ok() == Some(value)
        })
    };
    let (low, high) = (at(smallest)?, at(largest)?);
    Ok(Judged {
        holds: high.ratio() < low.ratio(),
        contrast: low.ratio() / high.ratio() - 1.0,
        contrast_words: format!(
            "growth at {g}={} / at {g}={}",
            number(smallest),
            number(largest),
            g = claim.group
        ),
        ratio: true,
        words: format!(
            "×{} at {g}={}, ×{} at {g}={}",
            number(high.ratio()),
            number(largest),
            number(low.ratio()),
            number(smallest),
            g = claim.group
        ),
    })
}

fn flatter(group: &Group<'_>, claim: &Flatter) -> Result<Judged, Unjudged> {
    let series = |wanted: &Cell| {
        group
            .growth_where(&claim.x, &claim.y, |row| {
                group
                    .view
                    .table
                    .get(row, &claim.series)
                    .is_some_and(|cell| cell_matches(cell, wanted))
            })
            .map_err(|unjudged| unjudged.context(&format!("{}={}", claim.series, wanted.label())))
    };
    let (flat, steep) = (series(&claim.flat)?, series(&claim.steep)?);
    Ok(Judged {
        holds: flat.ratio() < steep.ratio(),
        contrast: steep.ratio() / flat.ratio() - 1.0,
        contrast_words: format!(
            "growth of {} / of {}",
            claim.steep.label(),
            claim.flat.label()
        ),
        ratio: true,
        words: format!(
            "{}: {}; {}: {}",
            claim.flat.label(),
            flat.describe(&claim.x, &claim.y),
            claim.steep.label(),
            steep.describe(&claim.x, &claim.y)
        ),
    })
}
