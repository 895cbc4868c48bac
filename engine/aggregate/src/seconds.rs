//! `seconds.jsonl`: one line per second per client member. The artifact's figures 13–15 use per-second
//! values: the total write throughput of each second, and each thread's average latency in each second.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::AggregateError;
use crate::quantile::{ValueSummary, value_summary};

/// The fields of a per-second line that the statistics use; every other field is ignored.
#[derive(Debug, Deserialize)]
struct SecondLine {
    second: u64,
    #[serde(default)]
    member: u64,
    write_gbps: f64,
    #[serde(default)]
    threads: Vec<ThreadSecond>,
}

#[derive(Debug, Deserialize)]
struct ThreadSecond {
    count: u64,
    sum_ns: u64,
}

/// One point's per-second statistics.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SecondsSummary {
    /// Mean over the used seconds of the per-second total write throughput (summed over members).
    pub throughput_gbps: Option<f64>,
    /// Over the per-thread per-second average latencies (µs) of the used seconds.
    pub latency_us: Option<ValueSummary>,
    /// Requests completed in the used seconds.
    pub requests: u64,
}

/// Reads `path` and summarises the seconds `>= from_s`, of client process `member` only when given.
pub(crate) fn summarise(
    path: &Path,
    from_s: u64,
    member: Option<u64>,
) -> Result<SecondsSummary, AggregateError> {
    let text = std::fs::read_to_string(path).map_err(|e| AggregateError::io(path, e))?;
    let mut write_gbps_by_second: BTreeMap<u64, f64> = BTreeMap::new();
    let mut members_by_second: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut averages_us = Vec::new();
    let mut requests = 0;
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: SecondLine =
            serde_json::from_str(line).map_err(|e| AggregateError::Seconds {
                path: path.to_path_buf(),
                line: index + 1,
                why: e.to_string(),
            })?;
        if record.second < from_s || member.is_some_and(|m| m != record.member) {
            continue;
        }
        let members = members_by_second.entry(record.second).or_default();
        if members.contains(&record.member) {
            return Err(AggregateError::Seconds {
                path: path.to_path_buf(),
                line: index + 1,
                why: format!(
                    "second {} of member {} appears twice",
                    record.second, record.member
                ),
            });
        }
        members.push(record.member);
        *write_gbps_by_second.entry(record.second).or_default() += record.write_gbps;
        for thread in record.threads.iter().filter(|t| t.count > 0) {
            averages_us.push(thread.sum_ns as f64 / thread.count as f64 / 1e3);
            requests += thread.count;
        }
    }
    let seconds = write_gbps_by_second.len();
    let throughput_gbps =
        (seconds > 0).then(|| write_gbps_by_second.values().sum::<f64>() / seconds as f64);
    Ok(SecondsSummary {
        throughput_gbps,
        latency_us: value_summary(&mut averages_us),
        requests,
    })
}
