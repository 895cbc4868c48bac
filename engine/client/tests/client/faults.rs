//! Connection refused, server closing mid-run, responses that never come.

use std::net::TcpListener;
use std::time::Instant;

use fracflow_client::{ClientError, RunStatus, run};

use crate::common::{Then, config, tiny_server};

#[test]
fn connection_refused_names_the_address() {
    // A port that was free a moment ago: nothing listens there.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let err = run(&config(addr, "-d 1 -m 1024 -X 1024 -R 64 -Z 1"), &mut ()).expect_err("refused");
    assert!(matches!(err, ClientError::Connect { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&addr.to_string()), "{text}");
    assert!(text.contains("check -c, -p"), "{text}");
}

#[test]
fn server_closing_mid_run_fails_the_run_and_keeps_samples() {
    let (addr, _server) = tiny_server(50, 1024, 64, Then::Close, 1);
    let started = Instant::now();
    let report = run(&config(addr, "-d 5 -m 1024 -X 1024 -R 64 -Z 1"), &mut ()).expect("runs");
    match &report.status {
        RunStatus::Failed { reason } => assert!(reason.contains("closed"), "{reason}"),
        other => panic!("expected a failed run, got {other:?}"),
    }
    assert_eq!(
        report.samples.len(),
        50,
        "the 50 answered requests are kept"
    );
    assert_eq!(report.seconds.iter().map(|s| s.count).sum::<u64>(), 50);
    assert!(started.elapsed().as_secs() < 5, "stopped early");
}

#[test]
fn responses_that_never_come_time_out_and_are_counted() {
    // Answers 3 requests per connection, then reads without answering.
    let (addr, _server) = tiny_server(3, 1024, 64, Then::Hang, 64);
    let report = run(
        &config(addr, "-d 2 -m 1024 -X 1024 -R 64 -Z 1 --timeout-ms 300"),
        &mut (),
    )
    .expect("runs");
    assert_eq!(report.status, RunStatus::Completed);
    assert!(report.timeouts >= 3, "{} timeouts", report.timeouts);
    assert_eq!(report.samples.len() as u64 % 3, 0);
    assert!(report.samples.len() >= 9);
    let per_second: u64 = report
        .seconds
        .iter()
        .flat_map(|s| &s.threads)
        .map(|t| t.timeouts)
        .sum();
    assert_eq!(per_second, report.timeouts);
    assert_eq!(
        report.threads[0].conns.nr_conn,
        report.timeouts + 1,
        "reopened after each timeout"
    );
}
