//! What the real fperf leaves: its console log and its `hugepage_thread_<i>.txt` latency files.

use std::collections::BTreeMap;

use fracflow_client::run::latency_log_text;
use fracflow_client::{SecondRecord, format_second, parse_fperf_log};
use fracflow_executors::fperf::{Shape, parse_thread_file, second_records};

use crate::text;

/// Whether `printed`, read back from a `{:.2}` or `{:.3}` rendering, is `value`.
fn close(printed: f64, value: f64) -> bool {
    (printed - value).abs() <= 0.0051 + value.abs() * 1e-12
}

/// The input as fperf's console log. What parses becomes the adapter's per-second records, and each record,
/// rendered as the embedded client prints it, parses back to the same seconds, threads and counts, with the
/// latencies and rates it holds (to the printed precision). A line that fails is named by its number.
pub fn fperf_console(data: &[u8]) {
    let text = text(data);
    let log = match parse_fperf_log(&text) {
        Ok(log) => log,
        Err(e) => {
            assert!(
                e.line >= 1 && e.line <= text.lines().count(),
                "error names line {}",
                e.line
            );
            return;
        }
    };
    assert!(log.threads.len() + log.totals.len() + log.conns.len() <= text.lines().count());
    let records = second_records(&log, &BTreeMap::new(), 0);
    for record in &records {
        check_rendering(record);
    }
}

fn check_rendering(record: &SecondRecord) {
    let rendered = format_second(record);
    let again = match parse_fperf_log(&rendered) {
        Ok(again) => again,
        Err(e) => panic!("the client's own per-second lines do not parse: {e}\n{rendered}"),
    };
    assert_eq!(again.threads.len(), record.threads.len(), "{rendered}");
    assert_eq!(again.totals.len(), 1, "{rendered}");
    for (line, thread) in again.threads.iter().zip(&record.threads) {
        assert_eq!(
            (line.second, line.thread, line.count),
            (record.second, thread.thread, thread.count),
            "{rendered}"
        );
        let us = |ns: u64| ns as f64 / 1000.0;
        assert!(close(line.min_us, us(thread.min_ns)), "min: {rendered}");
        assert!(close(line.avg_us, us(thread.avg_ns())), "avg: {rendered}");
        assert!(close(line.max_us, us(thread.max_ns)), "max: {rendered}");
        let gbps = |bytes: u64| bytes as f64 * 8.0 / 1e9;
        assert!(
            close(line.read_gbps, gbps(thread.bytes_read)),
            "read: {rendered}"
        );
        assert!(
            close(line.write_gbps, gbps(thread.bytes_written)),
            "write: {rendered}"
        );
    }
}

/// The input as one thread's `hugepage_thread_<i>.txt` (latency lines, with or without the trace replay's
/// `[stamp] trace_send …` / `trace_resp` lines). What parses has one sample per latency line, in order, with
/// that line's latency and consecutive sequence numbers; rendered as the embedded client writes the file, it
/// parses back to the same latencies.
pub fn fperf_hugepage(data: &[u8]) {
    let shape = Shape {
        slot: 2,
        request_bytes: 1088,
        response_bytes: 64,
    };
    let text = text(data);
    let Ok(samples) = parse_thread_file(&text, 0, shape) else {
        return;
    };
    let latencies: Vec<u64> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('['))
        .map(|l| {
            l.parse::<u64>()
                .unwrap_or_else(|_| panic!("accepted the latency line {l:?}"))
        })
        .collect();
    assert_eq!(
        samples
            .iter()
            .map(|s| s.latency_last_piece_ns)
            .collect::<Vec<_>>(),
        latencies
    );
    for (i, sample) in samples.iter().enumerate() {
        assert_eq!(sample.seq, i as u64);
        assert_eq!(sample.thread, 0);
    }
    let rendered = latency_log_text(&samples, 0);
    let again = match parse_thread_file(&rendered, 0, shape) {
        Ok(again) => again,
        Err(e) => panic!("the client's own latency file does not parse: {e}"),
    };
    assert_eq!(
        again
            .iter()
            .map(|s| s.latency_last_piece_ns)
            .collect::<Vec<_>>(),
        latencies
    );
}
