//! `stats: metrics`: one row per node that extracted numbers from a tool's output (`metrics.json`, a
//! [`MetricsRecord`] written by the `command` kind), rows that differ only in the `over` labels (the
//! repetitions of a single-shot run) reduced to their mean, sample standard deviation and count.

use std::path::Path;

use fracflow_record::{METRICS_FILE, MetricsRecord};
use polars::prelude::DataFrame;

use crate::error::AggregateError;
use crate::spec::AggregateSpec;
use crate::{Cell, PointSource, Table, frame, label_cells};

/// The column of a reduced row that counts the rows it came from.
pub(crate) const COUNT_COLUMN: &str = "n";

/// The `_sd` column of metric `name`.
pub(crate) fn sd_column(name: &str) -> String {
    format!("{name}_sd")
}

/// The summary of `stats: metrics` and its label columns (the points' labels minus `over`).
pub(crate) fn summary(
    spec: &AggregateSpec,
    points: &[PointSource],
    labels: &[String],
) -> Result<(DataFrame, Vec<String>), AggregateError> {
    if let Some(missing) = spec.over.iter().find(|o| !labels.contains(o)) {
        return Err(AggregateError::Spec(format!(
            "`over` names `{missing}`, which is not a label of the rows (labels: {})",
            labels.join(", ")
        )));
    }
    let group: Vec<String> = labels
        .iter()
        .filter(|l| !spec.over.contains(l))
        .cloned()
        .collect();
    let mut rows = Vec::with_capacity(points.len());
    let mut names: Vec<String> = Vec::new();
    for point in points {
        let values = read(&point.dir.join(METRICS_FILE))?;
        for name in values.iter().map(|(n, _)| n) {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        rows.push((point, values));
    }
    check_names(&group, &names)?;
    let mut raw = Table::new(labels.iter().chain(&names).cloned().collect());
    for (point, values) in rows {
        let mut row = label_cells(point, labels);
        row.extend(names.iter().map(|name| {
            values
                .iter()
                .find(|(n, _)| n == name)
                .map_or(Cell::Null, |(_, v)| v.map_or(Cell::Null, Cell::Num))
        }));
        raw.rows.push(row);
    }
    let frame = frame::table_to_frame("summary", &raw)?;
    let reduced = frame::reduce("summary", frame, &group, &names, COUNT_COLUMN, sd_column)?;
    Ok((reduced, group))
}

/// A `metrics.json`'s metrics in name order; each a number or null.
fn read(path: &Path) -> Result<Vec<(String, Option<f64>)>, AggregateError> {
    let record: MetricsRecord =
        fracflow_record::read_record(path).map_err(|e| AggregateError::Metrics {
            path: e.path,
            why: e.why,
        })?;
    let bad = |why: String| AggregateError::Metrics {
        path: path.to_path_buf(),
        why,
    };
    record
        .metrics
        .into_iter()
        .map(|(name, value)| match value {
            serde_json::Value::Null => Ok((name, None)),
            serde_json::Value::Number(n) => Ok((name, n.as_f64())),
            other => Err(bad(format!(
                "metric `{name}` is {other}, not a number (give the metric a `base:` so that a capture that is no number fails its node)"
            ))),
        })
        .collect()
}

/// Every column of the reduced table is named once: labels, each metric and its `_sd`, and `n`.
fn check_names(group: &[String], metrics: &[String]) -> Result<(), AggregateError> {
    let mut seen: Vec<String> = group.to_vec();
    let produced = metrics
        .iter()
        .flat_map(|m| [m.clone(), sd_column(m)])
        .chain([COUNT_COLUMN.to_owned()]);
    for column in produced {
        if seen.contains(&column) {
            return Err(AggregateError::Spec(format!(
                "`stats: metrics` would make two columns named `{column}` (a metric named like a label, like another metric's `_sd`, or `n`); rename the metric"
            )));
        }
        seen.push(column);
    }
    Ok(())
}
