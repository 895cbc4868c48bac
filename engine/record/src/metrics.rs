//! `metrics.json`: what a `command` node extracted from its tool's output, as one row for `stats: metrics`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::read::{Versioned, first_version, is_first_version};
use crate::table::Cell;

/// The file a `command` node with `metrics` or `labels` writes into its outputs.
pub const METRICS_FILE: &str = "metrics.json";

/// `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsRecord {
    /// [`MetricsRecord::VERSION`] (written from version 2 on; without it a record is
    /// version 1, the format from before records were typed).
    #[serde(default = "first_version", skip_serializing_if = "is_first_version")]
    pub version: u32,
    /// The node's sweep point.
    pub point: BTreeMap<String, serde_json::Value>,
    /// The node's `labels`, beside the point (they win over a point coordinate of the same name).
    pub labels: BTreeMap<String, serde_json::Value>,
    /// Each metric's value as extracted: a number, or text or JSON when the metric has no `base` and the
    /// capture is no number (aggregation refuses those, naming the metric).
    pub metrics: BTreeMap<String, serde_json::Value>,
}

impl MetricsRecord {
    /// The version this build writes and the newest it reads.
    pub const VERSION: u32 = 1;
}

impl Versioned for MetricsRecord {
    const WHAT: &'static str = "command metrics";
    const VERSION: u32 = Self::VERSION;
    fn version(&self) -> u32 {
        self.version
    }
}

impl MetricsRecord {
    /// The row's labels as cells: the sweep point, then the node's labels, which win.
    pub fn label_cells(&self) -> BTreeMap<String, Cell> {
        crate::measure::point_label_cells(&self.point, &self.labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::{read_record, write_record};

    #[test]
    fn a_metrics_record_survives_a_round_trip_and_keeps_its_fields() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join(METRICS_FILE);
        let written = MetricsRecord {
            version: MetricsRecord::VERSION,
            point: BTreeMap::from([("bench".to_owned(), 3.into())]),
            labels: BTreeMap::from([("design".to_owned(), "one-shot".into())]),
            metrics: BTreeMap::from([
                ("speed".to_owned(), 92.5.into()),
                ("tool".to_owned(), "v1.2".into()),
            ]),
        };
        write_record(&path, &written).map_err(|e| e.to_string())?;
        let back: MetricsRecord = read_record(&path).map_err(|e| e.to_string())?;
        assert_eq!(back, written);
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        assert_eq!(
            raw,
            serde_json::json!({
                "point": {"bench": 3},
                "labels": {"design": "one-shot"},
                "metrics": {"speed": 92.5, "tool": "v1.2"},
            })
        );
        Ok(())
    }

    #[test]
    fn a_metrics_file_without_metrics_names_the_file_and_the_field() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join(METRICS_FILE);
        std::fs::write(&path, r#"{"point": {}, "labels": {}}"#).map_err(|e| e.to_string())?;
        let message = read_record::<MetricsRecord>(&path)
            .err()
            .ok_or("refused")?
            .to_string();
        assert_eq!(
            message,
            format!(
                "{}: not a command metrics record: missing field `metrics` at line 1 column 27",
                path.display()
            )
        );
        Ok(())
    }
}
