//! A small column-named table: the currency between aggregation (which computes it with polars) and the figures
//! and reports (which only read it), so that neither side needs the other's crates.

use serde::{Deserialize, Serialize};

/// One cell of a summary table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Cell {
    Num(f64),
    Text(String),
    Null,
}

impl Cell {
    /// A label read from a record (a sweep coordinate, a `labels` entry): numbers, and text that parses as one,
    /// become numbers (so `m: "1024"` and `m: 1024` sort and compare alike), booleans 0 or 1.
    pub fn from_json(value: &serde_json::Value) -> Cell {
        match value {
            serde_json::Value::Number(n) => n.as_f64().map_or(Cell::Null, Cell::Num),
            serde_json::Value::String(text) => match text.trim().parse::<f64>() {
                Ok(number) => Cell::Num(number),
                Err(_) => Cell::Text(text.clone()),
            },
            serde_json::Value::Bool(b) => Cell::Num(f64::from(u8::from(*b))),
            serde_json::Value::Null => Cell::Null,
            other => Cell::Text(other.to_string()),
        }
    }

    /// The number in the cell; text that parses as a number counts too (sweep values read back from CSV).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Cell::Num(v) => Some(*v),
            Cell::Text(t) => t.trim().parse().ok(),
            Cell::Null => None,
        }
    }

    /// The cell as the text a label or a legend shows: integers without a decimal point.
    pub fn label(&self) -> String {
        match self {
            Cell::Num(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{}", *v as i64),
            Cell::Num(v) => format!("{v}"),
            Cell::Text(t) => t.clone(),
            Cell::Null => String::new(),
        }
    }
}

/// Named columns, rows of cells; every row has one cell per column.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    /// The label columns, those that name a row (sweep coordinates, `labels`, grouping keys) as opposed to the
    /// values computed for it, when the table's producer said which they are (an aggregation, or a Parquet export
    /// of one); `None` when nobody did (a CSV read back, a table made by hand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

impl Table {
    pub fn new(columns: Vec<String>) -> Table {
        Table {
            columns,
            rows: Vec::new(),
            labels: None,
        }
    }

    /// The index of column `name`.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }

    /// Whether the table was made from measurements: it carries every column of
    /// [`crate::measure::PROVENANCE_COLUMNS`]. Its `source` column then names a testbed's device and client,
    /// not a pipeline's tools, and none of the three tells its rows apart.
    pub fn is_measured(&self) -> bool {
        crate::measure::PROVENANCE_COLUMNS
            .iter()
            .all(|column| self.column(column).is_some())
    }

    /// The cell of `row` in column `name`.
    pub fn get(&self, row: usize, name: &str) -> Option<&Cell> {
        let col = self.column(name)?;
        self.rows.get(row)?.get(col)
    }
}

/// Where a number came from; every figure's footer and every report shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Provenance {
    pub pipeline: String,
    pub run_id: String,
    /// The testbed profile's name (`emulated`, `u280-direct`, …).
    pub testbed: String,
    /// `emulated` or `real`.
    pub testbed_kind: String,
    pub host: String,
    /// How requests were generated, e.g. `embedded client, closed loop`.
    pub client: String,
}

impl Provenance {
    /// The one-line footer every figure carries.
    pub fn footer(&self) -> String {
        let mut line = format!(
            "{} · run {} · testbed {} ({}) · host {}",
            self.pipeline,
            self.run_id,
            self.testbed,
            // Doubles print numbers too; the footer must not let them pass for measurements.
            if self.testbed_kind == "doubles" {
                "tool doubles, not measured"
            } else {
                &self.testbed_kind
            },
            self.host
        );
        if !self.client.is_empty() {
            line.push_str(&format!(" · {}", self.client));
        }
        line
    }
}

/// The verdict on one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The claim holds (beyond its margin, with 95 % confidence where it has an interval).
    Pass,
    /// The claim does not hold (the opposite holds beyond its margin, where it has an interval). The only verdict
    /// that fails a run.
    Fail,
    /// The interval reaches into the margin: the measurements cannot tell. Not a failure.
    Inconclusive,
    /// This host cannot give what the claim needs (its `needs:`). Neither pass nor failure.
    NotTestable,
}

impl Verdict {
    /// The verdict as a run's summary and its report print it.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NotTestable => "not testable here",
        }
    }
}

/// The verdict on one expectation (a claim of the paper, as data) against measured values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "StoredExpectationResult")]
pub struct ExpectationResult {
    /// Short name from the pipeline, e.g. `fRAC within 0.3 µs of the baseline`.
    pub name: String,
    /// The claim in words, with its limits filled in.
    pub claim: String,
    pub verdict: Verdict,
    /// The measured values the verdict rests on, in words (`median 7.9 µs at n=28, limit 10 µs`), with each
    /// interval and, for a claim that could not be judged here, the reason.
    pub measured: String,
    /// The paper's numbers the claim carries (`paper:`), each beside the value this run measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paper: Vec<PaperComparison>,
}

impl ExpectationResult {
    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Pass
    }

    pub fn failed(&self) -> bool {
        self.verdict == Verdict::Fail
    }
}

/// `expectations.json` as written before verdicts had four values (`passed: bool`), or since.
#[derive(Deserialize)]
struct StoredExpectationResult {
    name: String,
    claim: String,
    #[serde(default)]
    verdict: Option<Verdict>,
    #[serde(default)]
    passed: bool,
    measured: String,
    #[serde(default)]
    paper: Vec<PaperComparison>,
}

impl From<StoredExpectationResult> for ExpectationResult {
    fn from(stored: StoredExpectationResult) -> ExpectationResult {
        let verdict = stored.verdict.unwrap_or(if stored.passed {
            Verdict::Pass
        } else {
            Verdict::Fail
        });
        ExpectationResult {
            name: stored.name,
            claim: stored.claim,
            verdict,
            measured: stored.measured,
            paper: stored.paper,
        }
    }
}

/// One number of the paper beside what this run measured at the same place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaperComparison {
    /// The paper's value as it states it (`146`, `10–12`).
    pub paper: String,
    /// Its unit (`µs`).
    pub unit: String,
    /// Where the paper says it (`Fig. 16, 1 core, 28 clients, 1 KiB`).
    pub source: String,
    /// What was measured: column and row (`median_us at series=CPU, units=1, clients=28, m=1024`).
    pub at: String,
    /// The measured value, `None` when this run has no such row (a smoke run leaves points out).
    pub measured: Option<f64>,
    /// The testbed kind the measured value came from (the row's `testbed_kind`), `None` without a row.
    pub testbed_kind: Option<String>,
}
