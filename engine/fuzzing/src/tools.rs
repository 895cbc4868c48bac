//! Output of tools fracflow does not control (Slurm's, a node's stdout, the host's `/proc/meminfo` and `ip`),
//! and the trace files users bring.

use fracflow_client::{format_trace, parse_trace};
use fracflow_executors::command::{Metric, extract};
use fracflow_executors::slurm::{Ended, parse_show_job, submitted_job_id};
use fracflow_executors::testbed::TestbedProfile;
use fracflow_executors::testbed_check::{
    Hugepages, MAX_CONCURRENT_FPERF, hugepage_finding, mtu_of_ip_link, socket_mem_mb,
};

use crate::{Input, text};

/// The first byte is the exit code Slurm's tool gave (0 or 1), the rest its output, read as `sbatch
/// --parsable`'s, `scontrol show job -o`'s and a job's exit file. A submitted id is digits after exit 0; a
/// job state is one word, and its fields, printed back as `scontrol` prints them, parse to the same state.
pub fn scontrol_show_job(data: &[u8]) {
    let mut input = Input::new(data);
    let code = i32::from(input.byte() & 1);
    let out = text(input.rest());
    if let Some(id) = submitted_job_id(code, &out) {
        assert!(code == 0 && !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()));
    }
    match parse_show_job("42", code, &out) {
        Ok(Some(ended)) => {
            assert_eq!(code, 0);
            for field in [&ended.state, &ended.exit_code, &ended.reason] {
                assert!(
                    !field.contains(char::is_whitespace),
                    "a field of many words: {field:?}"
                );
            }
            assert!(!ended.state.is_empty());
            let printed = format!(
                "JobId=42 JobState={} Reason={} ExitCode={}",
                ended.state, ended.reason, ended.exit_code
            );
            assert_eq!(
                parse_show_job("42", 0, &printed),
                Ok(Some(ended)),
                "{printed}"
            );
        }
        Ok(None) => assert!(code != 0 && out.contains("Invalid job id")),
        Err(_) => {}
    }
    let from_file = Ended::from_exit_file(&out);
    assert!(from_file.is_final());
    let first = out.split_whitespace().next();
    assert_eq!(from_file.state == "COMPLETED", first == Some("0"));
}

/// How the repository's pipelines read metrics from a node's stdout, one per first byte.
const METRICS: &[&str] = &[
    r#"{"regex": "(?m)^result\\.throughput_mbps=([0-9.]+)$", "base": 10}"#,
    r#"{"regex": "Serialize\\(\\) timeing: *(\\S+) us", "match": 2, "base": 10}"#,
    r#"{"regex": "host_serialized_len = *(\\S+)", "base": 16}"#,
    r#"{"regex": "(?m)^speed: *(?P<value>\\S+)", "match": -2, "base": "auto"}"#,
    r#"{"regex": "tps=(\\S+)"}"#,
    r#"{"json": "$.lat.p[1]"}"#,
    r#"{"json": "$"}"#,
];

/// The first byte picks one of the repository's metric definitions, the rest is the node's stdout. A metric
/// read with a base is a number (hex: an unsigned integer), one without is a number or the captured text, and
/// a JSON metric is a value of a document the output holds (the whole output, or a line of it).
pub fn metric_extract(data: &[u8]) {
    let mut input = Input::new(data);
    let which = usize::from(input.byte()) % METRICS.len();
    let stdout = text(input.rest());
    let metric: Metric = match serde_json::from_str(METRICS[which]) {
        Ok(metric) => metric,
        Err(e) => panic!("metric {which} does not parse: {e}"),
    };
    let Ok(value) = extract(&metric, &stdout) else {
        return;
    };
    match which {
        0 | 1 | 3 => assert!(value.is_number(), "{value}"),
        2 => assert!(value.is_u64(), "{value}"),
        4 => assert!(value.is_number() || value.is_string(), "{value}"),
        6 => {
            let documents = std::iter::once(stdout.as_str()).chain(stdout.lines());
            assert!(
                documents
                    .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                    .any(|d| d == value),
                "the JSON metric {value} is no document of the output"
            );
        }
        _ => {}
    }
}

/// A profile measuring with the real fperf, whose `TPA_CFG` the input sets (the rest parsed once).
fn fperf_profile(tpa_cfg: &str) -> Option<TestbedProfile> {
    static PROFILE: std::sync::OnceLock<Option<TestbedProfile>> = std::sync::OnceLock::new();
    let mut profile = PROFILE
        .get_or_init(|| {
            serde_saphyr::from_str("kind: real\nclient: {fperf: /opt/fperf/fperf}\n").ok()
        })
        .clone()?;
    profile.client.tpa_cfg = Some(tpa_cfg.to_owned());
    Some(profile)
}

/// The first line is a profile's `TPA_CFG`, the rest the host's `/proc/meminfo` (and an `ip -o link` line).
/// The hugepage finding is always made, ready exactly when the free hugepage memory covers four fperf
/// processes' `socket-mem`; an MTU read is the number after the word `mtu`.
pub fn host_facts(data: &[u8]) {
    let text = text(data);
    let (tpa_cfg, meminfo) = text.split_once('\n').unwrap_or((&text, ""));
    if let Some(mtu) = mtu_of_ip_link(meminfo) {
        let words: Vec<&str> = meminfo.split_whitespace().collect();
        let after = words
            .iter()
            .position(|w| *w == "mtu")
            .and_then(|at| words.get(at + 1));
        assert_eq!(after.and_then(|w| w.parse::<u32>().ok()), Some(mtu));
    }
    let Some(profile) = fperf_profile(tpa_cfg) else {
        panic!("the fixed fperf profile does not parse");
    };
    let Some(finding) = hugepage_finding(&profile, meminfo) else {
        panic!("no hugepage finding for a profile that measures with fperf");
    };
    assert_eq!(finding.what, "hugepages");
    let per_process = socket_mem_mb(Some(tpa_cfg));
    let needed = u128::from(per_process) * u128::from(MAX_CONCURRENT_FPERF);
    let expected = Hugepages::parse(meminfo).is_some_and(|p| u128::from(p.free_mb()) >= needed);
    assert_eq!(finding.ready, expected, "{}", finding.detail);
}

/// The input as a trace CSV. Parsed rows are valid requests for the device (whole lines that fit its limit,
/// a known app, a finite non-negative sleep), and formatted back they parse to the same rows.
pub fn trace_csv(data: &[u8]) {
    let Ok(rows) = parse_trace(&text(data)) else {
        return;
    };
    for row in &rows {
        assert!(row.request_size > 0 && row.request_size.is_multiple_of(64));
        assert!(
            u64::from(row.request_size) + 64 <= u64::from(fracflow_proto::MAX_REQUEST_BYTES),
            "a {}-byte request does not fit the device",
            row.request_size
        );
        assert!(row.sleep_s.is_finite() && row.sleep_s >= 0.0);
    }
    let formatted = format_trace(&rows);
    match parse_trace(&formatted) {
        Ok(again) => assert_eq!(again, rows, "{formatted}"),
        Err(e) => panic!("formatted rows do not parse: {e}\n{formatted}"),
    }
}
