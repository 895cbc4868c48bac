//! Expectations: the paper's claims as data, judged against the summary tables.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::frame::COMPUTED_COLUMN;
use crate::{Cell, ExpectationResult, STATISTIC_COLUMNS, Table, metrics};

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

/// Judges every expectation; never panics. A claim without matching rows fails.
pub fn evaluate(
    expectations: &[Expectation],
    tables: &BTreeMap<String, Table>,
) -> Vec<ExpectationResult> {
    expectations
        .iter()
        .map(|expectation| judge(expectation, tables))
        .collect()
}

fn judge(expectation: &Expectation, tables: &BTreeMap<String, Table>) -> ExpectationResult {
    let verdict = |claim: String, passed: bool, measured: String| ExpectationResult {
        name: expectation.name.clone(),
        claim,
        passed,
        measured,
    };
    let claim = match expectation.claim() {
        Ok(claim) => claim,
        Err(why) => return verdict("(no single claim)".into(), false, why),
    };
    let scope = scope_words(&expectation.filter, &expectation.table);
    let claim_words = claim_words(&claim, &scope);
    let Some(table) = tables.get(&expectation.table) else {
        let known: Vec<&str> = tables.keys().map(String::as_str).collect();
        return verdict(
            claim_words,
            false,
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
            return verdict(claim_words, false, format!("no rows match {scope}"));
        }
        Err(why) => return verdict(claim_words, false, format!("no rows match {scope}: {why}")),
    };
    let view = View {
        table,
        rows,
        hidden: expectation.filter.keys().cloned().collect(),
    };
    let (passed, measured) = match claim {
        Claim::Within(bound) => view.per_row(&[&bound.column], |v| {
            let value = v[0];
            (
                value.abs() <= bound.limit,
                format!("{} (limit ±{})", number(value), number(bound.limit)),
            )
        }),
        Claim::Below(bound) => view.per_row(&[&bound.column], |v| {
            (
                v[0] < bound.limit,
                format!("{} (limit {})", number(v[0]), number(bound.limit)),
            )
        }),
        Claim::Above(bound) => view.per_row(&[&bound.column], |v| {
            (
                v[0] > bound.limit,
                format!("{} (limit {})", number(v[0]), number(bound.limit)),
            )
        }),
        Claim::Near(near) => view.per_row(&[&near.a, &near.b], |v| {
            let gap = v[0] - v[1];
            (
                gap.abs() <= near.limit,
                format!(
                    "{} − {} = {} (limit ±{})",
                    number(v[0]),
                    number(v[1]),
                    number(gap),
                    number(near.limit)
                ),
            )
        }),
        Claim::Sublinear(curve) => view.per_group(&curve.by, |group| sublinear(group, curve)),
        Claim::Grows(curve) => view.per_group(&curve.by, |group| {
            let growth = group.growth(&curve.x, &curve.y)?;
            Ok((growth.y1 > growth.y0, growth.describe(&curve.x, &curve.y)))
        }),
        Claim::SlowerGrowth(claim) => {
            view.per_group(&claim.by, |group| slower_growth(group, claim))
        }
        Claim::Flatter(claim) => view.per_group(&claim.by, |group| flatter(group, claim)),
    };
    verdict(claim_words, passed, measured)
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
struct View<'a> {
    table: &'a Table,
    rows: Vec<usize>,
    /// Columns fixed by `where`: not repeated when a row is named.
    hidden: Vec<String>,
}

impl View<'_> {
    fn number(&self, row: usize, column: &str) -> Result<f64, String> {
        match self.table.get(row, column) {
            None => Err(format!("the table has no column `{column}`")),
            Some(cell) => cell.as_f64().filter(|v| v.is_finite()).ok_or_else(|| {
                format!(
                    "{column} is not a number ({:?}) at {}",
                    cell.label(),
                    self.name(row)
                )
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

    /// A per-row claim: every row must pass; `check` gets the row's values of `columns`.
    fn per_row(
        &self,
        columns: &[&String],
        check: impl Fn(&[f64]) -> (bool, String),
    ) -> (bool, String) {
        let mut passed = true;
        let mut lines = Vec::new();
        for &row in &self.rows {
            let values: Result<Vec<f64>, String> =
                columns.iter().map(|c| self.number(row, c)).collect();
            match values {
                Ok(values) => {
                    let (ok, words) = check(&values);
                    passed &= ok;
                    let what = columns
                        .iter()
                        .map(|c| c.as_str())
                        .collect::<Vec<_>>()
                        .join(", ");
                    lines.push(format!("{what} {words} at {}{}", self.name(row), mark(ok)));
                }
                Err(why) => {
                    passed = false;
                    lines.push(why);
                }
            }
        }
        (passed, lines.join("; "))
    }

    /// A per-group claim: rows grouped by the `by` columns; every group must pass.
    fn per_group(
        &self,
        by: &[String],
        check: impl Fn(&Group<'_>) -> Result<(bool, String), String>,
    ) -> (bool, String) {
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
        let mut passed = true;
        let mut lines = Vec::new();
        for (key, rows) in groups {
            let group = Group { view: self, rows };
            let label = if key.is_empty() {
                "all rows".to_string()
            } else {
                key
            };
            match check(&group) {
                Ok((ok, words)) => {
                    passed &= ok;
                    lines.push(format!("{label}: {words}{}", mark(ok)));
                }
                Err(why) => {
                    passed = false;
                    lines.push(format!("{label}: {why} ✗"));
                }
            }
        }
        (passed, lines.join("; "))
    }
}

fn mark(ok: bool) -> &'static str {
    if ok { " ✓" } else { " ✗" }
}

struct Group<'a> {
    view: &'a View<'a>,
    rows: Vec<usize>,
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
    ) -> Result<Vec<(f64, f64)>, String> {
        let mut points = Vec::new();
        for &row in self.rows.iter().filter(|&&row| keep(row)) {
            points.push((self.view.number(row, x)?, self.view.number(row, y)?));
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let Some(pair) = points.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(format!(
                "several rows at {x}={}; add the label that tells them apart to `by`",
                number(pair[0].0)
            ));
        }
        if points.len() < 2 {
            return Err(format!("fewer than two values of {x}"));
        }
        Ok(points)
    }

    fn growth_where(
        &self,
        x: &str,
        y: &str,
        keep: impl Fn(usize) -> bool,
    ) -> Result<Growth, String> {
        let points = self.curve(x, y, keep)?;
        let (x0, y0) = points[0];
        let (x1, y1) = points[points.len() - 1];
        if y0 <= 0.0 {
            return Err(format!(
                "{y} at the smallest {x} is {}, so no growth ratio",
                number(y0)
            ));
        }
        Ok(Growth { x0, y0, x1, y1 })
    }

    fn growth(&self, x: &str, y: &str) -> Result<Growth, String> {
        self.growth_where(x, y, |_| true)
    }
}

fn sublinear(group: &Group<'_>, curve: &Curve) -> Result<(bool, String), String> {
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
        ));
    }
    let mut passed = true;
    let mut words = Vec::new();
    for &(x, y) in &points[1..] {
        let (y_ratio, x_ratio) = (y / y0, x / x0);
        passed &= y_ratio < x_ratio;
        words.push(format!(
            "{} ×{} at {} ×{}",
            curve.y,
            number(y_ratio),
            curve.x,
            number(x_ratio)
        ));
    }
    Ok((passed, words.join(", ")))
}

fn slower_growth(group: &Group<'_>, claim: &SlowerGrowth) -> Result<(bool, String), String> {
    let mut values: Vec<f64> = group
        .rows
        .iter()
        .map(|&row| group.view.number(row, &claim.group))
        .collect::<Result<_, _>>()?;
    values.sort_by(f64::total_cmp);
    values.dedup();
    let (Some(&smallest), Some(&largest)) = (values.first(), values.last()) else {
        return Err(format!("no values of {}", claim.group));
    };
    if smallest == largest {
        return Err(format!("only {}={}", claim.group, number(smallest)));
    }
    let at = |value: f64| {
        group.growth_where(&claim.x, &claim.y, |row| {
            group.view.number(row, &claim.group).ok() == Some(value)
        })
    };
    let (low, high) = (at(smallest)?, at(largest)?);
    Ok((
        high.ratio() < low.ratio(),
        format!(
            "×{} at {g}={}, ×{} at {g}={}",
            number(high.ratio()),
            number(largest),
            number(low.ratio()),
            number(smallest),
            g = claim.group
        ),
    ))
}

fn flatter(group: &Group<'_>, claim: &Flatter) -> Result<(bool, String), String> {
    let series = |wanted: &Cell| {
        group
            .growth_where(&claim.x, &claim.y, |row| {
                group
                    .view
                    .table
                    .get(row, &claim.series)
                    .is_some_and(|cell| cell_matches(cell, wanted))
            })
            .map_err(|why| format!("{}={}: {why}", claim.series, wanted.label()))
    };
    let (flat, steep) = (series(&claim.flat)?, series(&claim.steep)?);
    Ok((
        flat.ratio() < steep.ratio(),
        format!(
            "{}: {}; {}: {}",
            claim.flat.label(),
            flat.describe(&claim.x, &claim.y),
            claim.steep.label(),
            steep.describe(&claim.x, &claim.y)
        ),
    ))
}
