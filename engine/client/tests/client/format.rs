//! fperf's console format, byte for byte, and the parser.

use fracflow_client::config::LatencyDef;
use fracflow_client::{
    ConnCounts, SecondRecord, ThreadSecond, format_closing, format_second, parse_fperf_log,
};

fn record(threads: Vec<ThreadSecond>) -> SecondRecord {
    SecondRecord {
        second: 2,
        latency: LatencyDef::LastPiece,
        count: threads.iter().map(|t| t.count).sum(),
        threads,
        p50_ns: 0,
        p99_ns: 0,
        min_ns: 0,
        max_ns: 0,
        read_gbps: 0.0,
        write_gbps: 0.0,
        warmup: false,
    }
}

fn doc_thread(thread: u32) -> ThreadSecond {
    // The example of docs/tools.md §1.6: 126025 completions of 4096 B in one second.
    ThreadSecond {
        thread,
        count: 126_025,
        sum_ns: 7_830 * 126_025 + 17,
        min_ns: 6_912,
        max_ns: 842_240,
        bytes_read: 126_025 * 4096,
        bytes_written: 126_025 * 4096,
        ..ThreadSecond::default()
    }
}

#[test]
fn matches_the_documented_lines() {
    let text = format_second(&record(vec![doc_thread(0)]));
    assert_eq!(
        text,
        "    2 RR .0 min=6.91us avg=7.83us max=842.24us read(Gbits/sec)=4.130 write(Gbits/sec)=4.130 count=126025\n\
         \x20   2 RR Total-Throughput read(Gbits/sec)=4.130 write(Gbits/sec)=4.130\n"
    );
    // Two threads: an empty line after the total.
    let two = format_second(&record(vec![doc_thread(0), doc_thread(1)]));
    assert!(
        two.ends_with("Total-Throughput read(Gbits/sec)=8.259 write(Gbits/sec)=8.259\n\n"),
        "{two}"
    );
    // An idle second prints zeros, as fperf does after resetting min/max.
    let idle = format_second(&record(vec![ThreadSecond::default()]));
    assert!(idle.starts_with("    2 RR .0 min=0.00us avg=0.00us max=0.00us read(Gbits/sec)=0.000"));
}

#[test]
fn closing_block_and_parse_round_trip() {
    let mut text = format_second(&record(vec![doc_thread(0), doc_thread(1)]));
    text.push_str(&format_closing(
        &[
            ConnCounts {
                nr_conn: 1,
                nr_zero_io_conn: 0,
            },
            ConnCounts {
                nr_conn: 2,
                nr_zero_io_conn: 1,
            },
        ],
        Some("trace: all 5 rows replayed"),
    ));
    assert!(text.contains("\n\n---\n 0 nr_conn=1 nr_zero_io_conn=0\n 1 nr_conn=2 nr_zero_io_conn=1\nexiting client: 0\nexiting client: 1\ntrace: all 5 rows replayed\n"), "{text}");
    let log = parse_fperf_log(&text).expect("parses");
    assert_eq!(log.threads.len(), 2);
    assert_eq!(log.threads[1].thread, 1);
    assert_eq!(log.threads[0].count, 126_025);
    assert!((log.threads[0].max_us - 842.24).abs() < 1e-9);
    assert_eq!(log.totals.len(), 1);
    assert_eq!(log.conns, vec![(0, 1, 0), (1, 2, 1)]);
    assert_eq!(log.trace.as_deref(), Some("trace: all 5 rows replayed"));
    // fperf's own example line parses too; a mangled one is an error.
    assert!(parse_fperf_log("   2 RR .0 min=6.91us avg=7.83us max=842.24us read(Gbits/sec)=4.130 write(Gbits/sec)=4.130 count=x").is_err());
}
