//! What a `measure` node leaves for the nodes after it: the names of its files and `summary.json`, the record of
//! the point (its sweep point and labels, what the session did to the device, where the numbers came from, and
//! per client process what it ran and what it reported).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::read::{Versioned, first_version, is_first_version};
use crate::table::Cell;

/// The point's record, a [`MeasureSummary`].
pub const SUMMARY_FILE: &str = "summary.json";
/// fperf's per-second console lines, one section per client process.
pub const CONSOLE_FILE: &str = "console.log";
/// Per-second records, one JSON line per second and client process (with its `member`).
pub const SECONDS_FILE: &str = "seconds.jsonl";
/// One row per request, in the columns of [`crate::samples::SampleColumn`].
pub const SAMPLES_FILE: &str = "samples.parquet";

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasureSummary {
    /// [`MeasureSummary::VERSION`] (written from version 2 on; without it a record is
    /// version 1, the format from before records were typed).
    #[serde(default = "first_version", skip_serializing_if = "is_first_version")]
    pub version: u32,
    /// The sweep point.
    pub point: BTreeMap<String, serde_json::Value>,
    /// The node's `labels`, beside the point (they win over a point coordinate of the same name).
    pub labels: BTreeMap<String, serde_json::Value>,
    /// Where the numbers came from.
    pub source: MeasureSource,
    /// What the session programmed and loaded for this point, in order (empty: the device already held it).
    pub device: Vec<DeviceAction>,
    /// How the testbed's adaptation changed the client (fewer threads, pinning), in words.
    pub adapted: Vec<String>,
    /// Completions measured over all client processes.
    pub requests: u64,
    /// A client thread was the bottleneck in some client process.
    pub cpu_saturated: bool,
    /// One per client process, in the order of the node's `fperf` strings (or instances).
    pub members: Vec<MemberSummary>,
}

impl MeasureSummary {
    /// The version this build writes and the newest it reads.
    pub const VERSION: u32 = 1;
}

impl Versioned for MeasureSummary {
    const WHAT: &'static str = "measure summary";
    const VERSION: u32 = Self::VERSION;
    fn version(&self) -> u32 {
        self.version
    }
}

impl MeasureSummary {
    /// The point's labels as cells: the sweep point, then the node's labels, which win.
    pub fn label_cells(&self) -> BTreeMap<String, Cell> {
        point_label_cells(&self.point, &self.labels)
    }

    /// The labels of each client process when several ran at once and every one has its own
    /// (`member_labels`); `None` when the point is one row.
    pub fn member_labels(&self) -> Option<Vec<&BTreeMap<String, serde_json::Value>>> {
        let labelled: Vec<_> = self
            .members
            .iter()
            .filter_map(|m| m.labels.as_ref())
            .collect();
        (self.members.len() > 1 && labelled.len() == self.members.len()).then_some(labelled)
    }

    /// The rows this point makes, with the member each comes from: one per client process when every one
    /// has labels of its own ([`MeasureSummary::member_labels`], laid over the point's), else the point's.
    pub fn rows(&self) -> Vec<(Option<u64>, BTreeMap<String, Cell>)> {
        let labels = self.label_cells();
        match self.member_labels() {
            Some(members) => members
                .into_iter()
                .enumerate()
                .map(|(member, own)| {
                    let mut labels = labels.clone();
                    labels.extend(own.iter().map(|(k, v)| (k.clone(), Cell::from_json(v))));
                    (Some(member as u64), labels)
                })
                .collect(),
            None => vec![(None, labels)],
        }
    }
}

/// A row's labels as cells: its sweep point, then `labels` (which win).
pub fn point_label_cells(
    point: &BTreeMap<String, serde_json::Value>,
    labels: &BTreeMap<String, serde_json::Value>,
) -> BTreeMap<String, Cell> {
    point
        .iter()
        .chain(labels)
        .map(|(name, value)| (name.clone(), Cell::from_json(value)))
        .collect()
}

/// Where a point's numbers came from; figures and reports show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasureSource {
    /// The testbed profile's name.
    pub testbed: String,
    /// `emulated`, `real`, `doubles`, or `unknown` without a session.
    pub testbed_kind: String,
    /// The host that ran the client.
    pub host: String,
    /// The `HOST:PORT` measured.
    pub target: String,
    /// What answered, in words (`emulated fRAC device (software, this host)`).
    pub against: String,
    /// Which client in which mode, in words (`embedded client, closed loop (fperf rr)`).
    pub client: String,
}

/// The columns every table made from measurements carries, in this order, from each point's [`MeasureSource`]
/// ([`MeasureSource::columns`]): a table copied out of its run still says where its numbers came from.
pub const PROVENANCE_COLUMNS: [&str; 3] = ["testbed", "testbed_kind", "source"];

impl MeasureSource {
    /// The `source` column: what answered and which client asked, each without the details in parentheses and
    /// without commas, so that a table split naively on commas stays aligned (`emulated fRAC device; embedded
    /// client closed loop`, `fRAC device; real fperf through the adapter`).
    pub fn words(&self) -> String {
        format!("{}; {}", headline(&self.against), headline(&self.client))
    }

    /// The client half of a `source` column's value ([`MeasureSource::words`]): `embedded client closed loop`,
    /// `real fperf through the adapter`; a value not written so is returned whole.
    pub fn client_in(source_column: &str) -> &str {
        source_column
            .split_once("; ")
            .map_or(source_column, |(_, client)| client)
    }

    /// The values of [`PROVENANCE_COLUMNS`] for this point.
    pub fn columns(&self) -> [(&'static str, String); 3] {
        let [testbed, kind, source] = PROVENANCE_COLUMNS;
        [
            (testbed, self.testbed.clone()),
            (kind, self.testbed_kind.clone()),
            (source, self.words()),
        ]
    }
}

/// A phrase without its parenthesised details and commas: `embedded client, closed loop (fperf rr)` →
/// `embedded client closed loop`; `real fperf (libtpa/DPDK) through the adapter` → `real fperf through the
/// adapter`.
fn headline(words: &str) -> String {
    let mut kept = String::with_capacity(words.len());
    let mut depth = 0usize;
    for c in words.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' => {}
            _ if depth == 0 => kept.push(c),
            _ => {}
        }
    }
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One thing the session did to the device: programmed an image or loaded a partial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAction {
    /// `programmed`, `loaded slot N`, … as the log shows it.
    pub action: String,
    /// The file, relative to its dependency's outputs.
    pub file: String,
    /// Its blake3 hash: dependents key on what the device held.
    pub sha: String,
}

/// One client process of a point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberSummary {
    /// Its own labels (`member_labels`), if the node gave some.
    pub labels: Option<BTreeMap<String, serde_json::Value>>,
    /// Its threads in the samples' numbering: first, and one past the last.
    pub threads: [u32; 2],
    /// Its flags, as run.
    pub fperf: String,
    /// Completions it measured.
    pub requests: u64,
    /// Which client ran it and what that client reported.
    #[serde(flatten)]
    pub client: MemberClient,
}

/// The client of one process, tagged `client: embedded | fperf` beside the member's other fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "client", rename_all = "snake_case")]
pub enum MemberClient {
    Embedded(EmbeddedReport),
    Fperf(FperfReport),
}

/// What the embedded client reported about its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddedReport {
    /// Per-request timeouts over the whole run.
    pub timeouts: u64,
    /// `latency_ns` (from send) over the measured seconds.
    pub from_send: LatencySummary,
    /// `latency_last_piece_ns` (fperf's) over the measured seconds.
    pub last_piece: LatencySummary,
    /// Open loop only.
    pub open_loop: Option<OpenLoopReport>,
    /// Trace replay only.
    pub trace: Option<TraceReport>,
    /// 1-minute load average of the host at the end.
    pub host_load1: Option<f64>,
    /// Wall time of the run.
    pub elapsed_s: f64,
}

/// What the fperf adapter reported about a run of the real fperf.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FperfReport {
    /// The `TPA_ID` it ran under.
    pub tpa_id: String,
    /// How it ended (`ok`: a failed run fails the node before a summary is written).
    pub status: String,
    /// Latency lines the warm-up cut dropped, by thread (a JSON object, so the thread is its key's text).
    pub skipped_per_thread: BTreeMap<String, u64>,
}

/// Percentiles of a latency distribution, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Values.
    pub count: u64,
    /// Smallest.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

/// Open-loop outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenLoopReport {
    /// Target requests/s.
    pub target_rate: f64,
    /// Completions/s over the measured seconds.
    pub achieved_rate: f64,
    /// Sends later than 1 ms.
    pub late_sends: u64,
    /// Requests sent.
    pub sends: u64,
    /// Largest send lag, ns.
    pub max_send_lag_ns: u64,
    /// Achieved ≥ 98 % of the target and no send more than 100 ms behind.
    pub rate_kept: bool,
}

/// Trace replay outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceReport {
    /// Rows in the trace.
    pub rows: u64,
    /// Rows answered.
    pub replayed: u64,
    /// Rows whose `response_size` column disagreed with the unit's size (the unit's size was used).
    pub response_size_overrides: u64,
}

impl TraceReport {
    /// fperf's closing trace line.
    #[must_use]
    pub fn line(&self) -> String {
        if self.replayed == self.rows {
            format!("trace: all {} rows replayed", self.rows)
        } else {
            format!(
                "trace: connection closed after {} of {} rows",
                self.replayed, self.rows
            )
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_source_column_says_what_answered_and_who_asked_without_details() {
        let source = |against: &str, client: &str| super::MeasureSource {
            testbed: "emulated".into(),
            testbed_kind: "emulated".into(),
            host: "h".into(),
            target: "127.0.0.1:2888".into(),
            against: against.into(),
            client: client.into(),
        };
        let emulated = source(
            "emulated fRAC device (software, this host)",
            "embedded client, closed loop (fperf rr)",
        );
        assert_eq!(
            emulated.words(),
            "emulated fRAC device; embedded client closed loop"
        );
        let board = source(
            "fRAC device",
            "real fperf (libtpa/DPDK) through the adapter",
        );
        assert_eq!(board.words(), "fRAC device; real fperf through the adapter");
        assert_eq!(
            super::MeasureSource::client_in(&board.words()),
            "real fperf through the adapter"
        );
        assert_eq!(super::MeasureSource::client_in("measured"), "measured");
        let columns = emulated.columns();
        assert_eq!(columns.map(|(name, _)| name), super::PROVENANCE_COLUMNS);
        assert_eq!(emulated.columns()[1].1, "emulated");
    }

    use super::*;
    use crate::read::{RecordError, read_record, write_record};

    fn embedded(labels: Option<BTreeMap<String, serde_json::Value>>) -> MemberSummary {
        MemberSummary {
            labels,
            threads: [0, 4],
            fperf: "-t rr -n 4 -d 2".to_owned(),
            requests: 1200,
            client: MemberClient::Embedded(EmbeddedReport {
                timeouts: 1,
                from_send: LatencySummary {
                    count: 1200,
                    min_ns: 5_000,
                    p50_ns: 7_900,
                    p99_ns: 12_000,
                    p999_ns: 15_000,
                    max_ns: 40_000,
                },
                last_piece: LatencySummary::default(),
                open_loop: Some(OpenLoopReport {
                    target_rate: 1000.0,
                    achieved_rate: 998.5,
                    late_sends: 2,
                    sends: 2000,
                    max_send_lag_ns: 1_500_000,
                    rate_kept: true,
                }),
                trace: Some(TraceReport {
                    rows: 10,
                    replayed: 10,
                    response_size_overrides: 0,
                }),
                host_load1: Some(0.25),
                elapsed_s: 2.0,
            }),
        }
    }

    fn summary() -> MeasureSummary {
        let json = |v: serde_json::Value| v;
        MeasureSummary {
            version: MeasureSummary::VERSION,
            point: BTreeMap::from([
                ("m".to_owned(), json(4096.into())),
                ("n".to_owned(), json(4.into())),
            ]),
            labels: BTreeMap::from([("series".to_owned(), json("fRAC".into()))]),
            source: MeasureSource {
                testbed: "emulated".to_owned(),
                testbed_kind: "emulated".to_owned(),
                host: "lab1".to_owned(),
                target: "127.0.0.1:4000".to_owned(),
                against: "emulated fRAC device (software, this host)".to_owned(),
                client: "embedded client, closed loop (fperf rr)".to_owned(),
            },
            device: vec![DeviceAction {
                action: "programmed".to_owned(),
                file: "jtag/frac.bit".to_owned(),
                sha: "ab12".to_owned(),
            }],
            adapted: vec!["-n 28 → 4 threads".to_owned()],
            requests: 2400,
            cpu_saturated: false,
            members: vec![
                embedded(Some(BTreeMap::from([("units".to_owned(), json(1.into()))]))),
                MemberSummary {
                    labels: Some(BTreeMap::from([("units".to_owned(), json(2.into()))])),
                    threads: [4, 8],
                    fperf: "-t rr -n 4".to_owned(),
                    requests: 1200,
                    client: MemberClient::Fperf(FperfReport {
                        tpa_id: "client1".to_owned(),
                        status: "ok".to_owned(),
                        skipped_per_thread: BTreeMap::from([
                            ("0".to_owned(), 12),
                            ("3".to_owned(), 9),
                        ]),
                    }),
                },
            ],
        }
    }

    #[test]
    fn a_summary_survives_a_round_trip_through_its_file() -> Result<(), RecordError> {
        let dir = tempfile::tempdir().map_err(|e| RecordError {
            path: "tempdir".into(),
            why: e.to_string(),
        })?;
        let path = dir.path().join(SUMMARY_FILE);
        let written = summary();
        write_record(&path, &written)?;
        let back: MeasureSummary = read_record(&path)?;
        assert_eq!(back, written);
        Ok(())
    }

    #[test]
    fn the_client_tag_sits_beside_the_member_fields_as_before() {
        let value = serde_json::to_value(summary()).unwrap_or_default();
        let members = &value["members"];
        assert_eq!(members[0]["client"], "embedded");
        assert_eq!(members[0]["from_send"]["p50_ns"], 7_900);
        assert_eq!(members[0]["labels"]["units"], 1);
        assert_eq!(members[1]["client"], "fperf");
        assert_eq!(members[1]["skipped_per_thread"]["3"], 9);
        assert_eq!(value["device"][0]["sha"], "ab12");
        assert_eq!(
            value["source"]["client"],
            "embedded client, closed loop (fperf rr)"
        );
    }

    /// The bytes are what `measure` wrote with `json!` before the summary was typed (sorted keys, no version
    /// field), so cached measurements keep their output hashes and their dependents' keys.
    #[test]
    fn a_version_1_summary_is_written_as_before_it_was_typed() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join(SUMMARY_FILE);
        write_record(&path, &summary()).map_err(|e| e.to_string())?;
        let written = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
        let before = serde_json::json!({
            "point": {"m": 4096, "n": 4},
            "labels": {"series": "fRAC"},
            "source": {
                "testbed": "emulated",
                "testbed_kind": "emulated",
                "host": "lab1",
                "target": "127.0.0.1:4000",
                "against": "emulated fRAC device (software, this host)",
                "client": "embedded client, closed loop (fperf rr)",
            },
            "device": [{"action": "programmed", "file": "jtag/frac.bit", "sha": "ab12"}],
            "adapted": ["-n 28 → 4 threads"],
            "requests": 2400,
            "cpu_saturated": false,
            "members": [
                {
                    "labels": {"units": 1},
                    "threads": [0, 4],
                    "fperf": "-t rr -n 4 -d 2",
                    "requests": 1200,
                    "client": "embedded",
                    "timeouts": 1,
                    "from_send": {"count": 1200, "min_ns": 5000, "p50_ns": 7900, "p99_ns": 12000,
                                  "p999_ns": 15000, "max_ns": 40000},
                    "last_piece": {"count": 0, "min_ns": 0, "p50_ns": 0, "p99_ns": 0, "p999_ns": 0,
                                   "max_ns": 0},
                    "open_loop": {"target_rate": 1000.0, "achieved_rate": 998.5, "late_sends": 2,
                                  "sends": 2000, "max_send_lag_ns": 1_500_000, "rate_kept": true},
                    "trace": {"rows": 10, "replayed": 10, "response_size_overrides": 0},
                    "host_load1": 0.25,
                    "elapsed_s": 2.0,
                },
                {
                    "labels": {"units": 2},
                    "threads": [4, 8],
                    "fperf": "-t rr -n 4",
                    "requests": 1200,
                    "client": "fperf",
                    "tpa_id": "client1",
                    "status": "ok",
                    "skipped_per_thread": {"0": 12, "3": 9},
                },
            ],
        });
        assert_eq!(written, before.to_string());
        let back: MeasureSummary = read_record(&path).map_err(|e| e.to_string())?;
        assert_eq!(back.version, 1, "no version field is version 1");
        Ok(())
    }

    #[test]
    fn a_later_version_is_written_with_its_number() -> Result<(), String> {
        let mut later = summary();
        later.version = 2;
        let value = serde_json::to_value(&later).map_err(|e| e.to_string())?;
        assert_eq!(value["version"], 2);
        Ok(())
    }

    #[test]
    fn a_summary_without_its_point_is_one_error_naming_file_and_field() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join(SUMMARY_FILE);
        let mut value = serde_json::to_value(summary()).map_err(|e| e.to_string())?;
        value.as_object_mut().and_then(|o| o.remove("point"));
        std::fs::write(&path, value.to_string()).map_err(|e| e.to_string())?;
        let error = read_record::<MeasureSummary>(&path)
            .err()
            .ok_or("a summary without `point` is refused")?;
        let message = error.to_string();
        let expected_head = format!(
            "{}: not a measure summary record: missing field `point`",
            path.display()
        );
        assert!(message.starts_with(&expected_head), "{message}");
        Ok(())
    }

    #[test]
    fn a_mistyped_field_names_the_field_and_a_newer_version_asks_for_an_update()
    -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join(SUMMARY_FILE);
        let mut value = serde_json::to_value(summary()).map_err(|e| e.to_string())?;
        value["requests"] = "many".into();
        std::fs::write(&path, value.to_string()).map_err(|e| e.to_string())?;
        let message = read_record::<MeasureSummary>(&path)
            .err()
            .ok_or("text requests are refused")?
            .to_string();
        assert!(
            message.contains("invalid type: string \"many\", expected u64"),
            "{message}"
        );

        value["requests"] = 1.into();
        value["version"] = (MeasureSummary::VERSION + 1).into();
        std::fs::write(&path, value.to_string()).map_err(|e| e.to_string())?;
        let message = read_record::<MeasureSummary>(&path)
            .err()
            .ok_or("a newer version is refused")?
            .to_string();
        assert_eq!(
            message,
            format!(
                "{}: measure summary version 2 is newer than this fracflow reads (1); update fracflow",
                path.display()
            )
        );
        Ok(())
    }

    #[test]
    fn a_point_makes_a_row_per_labelled_member_else_one() {
        let mut summary = summary();
        let members: Vec<Option<u64>> = summary.rows().into_iter().map(|(m, _)| m).collect();
        assert_eq!(members, vec![Some(0), Some(1)]);
        summary.members[1].labels = None;
        let rows = summary.rows();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0], (None, summary.label_cells()));
    }

    #[test]
    fn member_labels_count_only_when_every_one_of_several_members_has_them() {
        let mut summary = summary();
        assert_eq!(summary.member_labels().map(|l| l.len()), Some(2));
        summary.members[1].labels = None;
        assert_eq!(summary.member_labels(), None);
        summary.members.truncate(1);
        assert_eq!(
            summary.member_labels(),
            None,
            "a single member is the point itself"
        );
    }

    #[test]
    fn labels_win_over_point_coordinates_and_numeric_text_is_a_number() {
        let mut summary = summary();
        summary.labels.insert("m".to_owned(), "1024".into());
        let cells = summary.label_cells();
        assert_eq!(cells["m"], Cell::Num(1024.0));
        assert_eq!(cells["n"], Cell::Num(4.0));
        assert_eq!(cells["series"], Cell::Text("fRAC".to_owned()));
    }
}
