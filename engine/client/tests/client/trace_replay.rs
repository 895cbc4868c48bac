//! Trace replay against all four units.

use fracflow_client::{
    FperfConsole, RunStatus, parse_fperf_log, parse_trace, run, synthetic_trace,
    synthetic_trace_with_mean_sleep,
};

use crate::common::{config, device};

#[test]
fn synthetic_trace_has_the_azure_shape() {
    let rows = parse_trace(&synthetic_trace(1000, 42)).expect("parses");
    assert_eq!(rows.len(), 1000);
    assert_eq!(
        synthetic_trace(1000, 42),
        synthetic_trace(1000, 42),
        "seeded"
    );
    for app in [1, 2, 3, 5] {
        assert!(rows.iter().any(|r| r.app == app), "app {app} present");
    }
    for r in &rows {
        let ok = match r.app {
            1 | 3 => [512, 1024, 2048, 4096].contains(&r.request_size),
            5 => r.request_size == 4096,
            _ => r.request_size == 24_576,
        };
        assert!(ok, "{r:?}");
        assert_eq!(r.response_size, r.expected_response_size(), "{r:?}");
        assert!(r.sleep_s >= 0.0 && r.sleep_s <= 15.0);
    }
    assert_eq!(rows.last().map(|r| r.app), Some(3), "logit at the end");
    assert!(parse_trace("app,sleep\n1,0").is_err());
    assert!(parse_trace("app,sleep_time,request_size,response_size\n4,0,512,64").is_err());
}

#[test]
fn replays_a_200_row_trace_on_all_units() {
    let dev = device(&[(1, "log"), (2, "cnn"), (3, "norm")]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("trace.csv");
    // Gaps of ~1 ms on average, so the replay takes well under a second of sleeping.
    let text = synthetic_trace_with_mean_sleep(200, 9, 0.001);
    std::fs::write(&path, &text).expect("write");
    let rows = parse_trace(&text).expect("parses");
    let cfg = config(
        dev.addr(),
        &format!("-Z 1 -E {} --timeout-ms 5000", path.display()),
    );
    let mut console = FperfConsole::new(Vec::new());
    let report = run(&cfg, &mut console).expect("runs");
    let out = String::from_utf8(console.into_inner()).expect("utf8");
    assert_eq!(report.status, RunStatus::Completed, "{out}");
    let trace = report.trace.as_ref().expect("trace report");
    assert_eq!((trace.rows, trace.replayed), (200, 200));
    assert_eq!(trace.line(), "trace: all 200 rows replayed");
    assert!(out.ends_with("trace: all 200 rows replayed\n"), "{out}");
    assert_eq!(report.samples.len(), 200);
    for (s, r) in report.samples.iter().zip(&rows) {
        assert_eq!(s.slot, r.slot());
        assert_eq!(s.request_bytes, r.request_size + 64);
        assert_eq!(s.response_bytes, r.response_size);
    }
    let log = parse_fperf_log(&out).expect("parses");
    assert_eq!(log.count_from(0), 200);
    dev.stop();
}
