//! Closed and open loop against the emulated device; samples and output agree.

use fracflow_client::{
    FperfConsole, JsonLines, RunStatus, SecondRecord, parse_fperf_log, read_samples_parquet, run,
    write_samples_parquet,
};

use crate::common::{config, device};

#[test]
fn closed_loop_pieces_against_pattern_slot() {
    let dev = device(&[(1, "pattern_slot")]);
    // 4 KiB echoed, written in 1 KiB pieces (FIRST only), one and several
    // connections per thread.
    for flags in [
        "-d 2 -n 1 -C 1 -m 1024 -X 4096 -R 4096 -Z 1 -K 1",
        "-d 2 -n 2 -C 2 -S 0 -m 1024 -X 4096 -R 4096 -Z 1 -K 1",
    ] {
        let cfg = config(dev.addr(), flags);
        let report = run(&cfg, &mut ()).expect("runs");
        assert_eq!(report.status, RunStatus::Completed, "{flags}");
        assert_eq!(report.timeouts, 0, "{flags}");
        assert!(
            report.samples.len() > 10,
            "{flags}: {} samples",
            report.samples.len()
        );
        assert_eq!(report.seconds.len(), 2, "{flags}");
        assert_eq!(report.threads.len(), cfg.threads as usize);
        for s in &report.samples {
            assert_eq!((s.request_bytes, s.response_bytes, s.slot), (4096, 4096, 1));
            assert!(
                s.latency_ns >= s.latency_last_piece_ns,
                "first byte precedes last piece"
            );
        }
        let total: u64 = report.seconds.iter().map(|s| s.count).sum();
        assert_eq!(total, report.samples.len() as u64, "{flags}");
        // Bytes: every completion read exactly -R.
        let read: u64 = report
            .seconds
            .iter()
            .flat_map(|s| &s.threads)
            .map(|t| t.bytes_read)
            .sum();
        assert_eq!(read, total * 4096, "{flags}");
        // Pinned from -S upward, wrapping over the cores; CPU use measured.
        if cfg.start_cpu.is_some() {
            let cores: Vec<Option<usize>> = report.threads.iter().map(|t| t.core).collect();
            assert!(cores.iter().all(Option::is_some), "{cores:?}");
            assert_ne!(cores[0], cores[1], "consecutive cores");
        }
        assert!(report.threads.iter().all(|t| t.cpu_fraction.is_some()));
    }
    dev.stop();
}

#[test]
fn closed_loop_top_k_single_and_multi_piece() {
    let dev = device(&[]);
    for flags in [
        "-d 1 -m 1024 -X 1024 -R 64 -Z 1 -K 0",
        "-d 1 -m 256 -X 4096 -R 64 -Z 1 -K 0",
    ] {
        let report = run(&config(dev.addr(), flags), &mut ()).expect("runs");
        assert_eq!(report.status, RunStatus::Completed, "{flags}");
        assert_eq!(report.timeouts, 0);
        assert!(!report.samples.is_empty());
        assert!(report.samples.iter().all(|s| s.response_bytes == 64));
    }
    dev.stop();
}

#[test]
fn fperf_output_parses_back_to_the_sample_counts() {
    let dev = device(&[]);
    let cfg = config(
        dev.addr(),
        "-d 3 -n 2 -m 512 -X 1024 -R 64 -Z 1 -K 0 --skip 1",
    );
    let mut console = FperfConsole::new(Vec::new());
    let report = run(&cfg, &mut console).expect("runs");
    let text = String::from_utf8(console.into_inner()).expect("utf8");
    let log = parse_fperf_log(&text).expect("our output parses");
    assert_eq!(log.threads.len(), 3 * 2, "{text}");
    assert_eq!(log.totals.len(), 3);
    assert_eq!(log.conns.len(), 2);
    assert!(text.contains("\n---\n"));
    assert!(
        text.lines()
            .any(|l| l.starts_with("    2 RR Total-Throughput read(Gbits/sec)="))
    );
    assert_eq!(log.count_from(1), report.samples.len() as u64, "{text}");
    assert_eq!(log.count_from(1), report.measured_completions);
    assert!(
        log.count_from(0) > log.count_from(1),
        "warm-up second printed but not sampled"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("samples.parquet");
    write_samples_parquet(&path, &report.samples).expect("writes");
    let back = read_samples_parquet(&path).expect("reads");
    assert_eq!(back, report.samples);
    assert_eq!(back.len() as u64, log.count_from(1));
    // Per thread, seq grows with completion order.
    for t in 0..2 {
        let seqs: Vec<u64> = back
            .iter()
            .filter(|s| s.thread == t)
            .map(|s| s.seq)
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    }
    python_reads(&path, back.len());

    // JSON lines carry the histogram percentiles.
    let mut json = JsonLines::new(Vec::new());
    let report2 = run(
        &config(dev.addr(), "-d 1 -m 1024 -X 1024 -R 64 -Z 1"),
        &mut json,
    )
    .expect("runs");
    let text = String::from_utf8(json.into_inner()).expect("utf8");
    let recs: Vec<SecondRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].count, report2.samples.len() as u64);
    assert!(recs[0].p50_ns > 0 && recs[0].p50_ns <= recs[0].p99_ns);
    dev.stop();
}

/// Reads the Parquet file with pandas/pyarrow when they are installed.
fn python_reads(path: &std::path::Path, rows: usize) {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import pandas, pyarrow"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED python check: python3 with pandas and pyarrow is not installed");
        return;
    }
    let script = format!(
        "import pandas as pd; d = pd.read_parquet({:?}); print(len(d), list(d.columns))",
        path.display().to_string()
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with(&format!("{rows} ")), "{text}");
    assert!(text.contains("latency_last_piece_ns"));
}

#[test]
fn open_loop_keeps_a_fixed_rate() {
    let dev = device(&[]);
    let cfg = config(
        dev.addr(),
        "-d 5 -m 1024 -X 1024 -R 64 -Z 1 --open-loop 2000:fixed",
    );
    let report = run(&cfg, &mut ()).expect("runs");
    assert_eq!(report.status, RunStatus::Completed);
    let open = report.open_loop.as_ref().expect("open-loop report");
    let err = (open.achieved_rate - 2000.0).abs() / 2000.0;
    assert!(
        err <= 0.02,
        "achieved {} /s against 2000 /s: {open:?}",
        open.achieved_rate
    );
    assert!(open.rate_kept, "{open:?}");
    // Samples start at their intended times: fixed 0.5 ms apart.
    let t: Vec<u64> = report.samples.iter().map(|s| s.t_send_ns).collect();
    assert!(
        t.windows(2)
            .all(|w| w[1] - w[0] == 500_000 || w[1] - w[0] == 499_999 || w[1] - w[0] == 500_001)
    );
    dev.stop();
}

#[test]
fn open_loop_poisson_is_seeded() {
    let dev = device(&[]);
    let a = run(
        &config(
            dev.addr(),
            "-d 1 -m 1024 -X 1024 -R 64 -Z 1 --open-loop 500:poisson --seed 7",
        ),
        &mut (),
    )
    .expect("runs");
    let b = run(
        &config(
            dev.addr(),
            "-d 1 -m 1024 -X 1024 -R 64 -Z 1 --open-loop 500:poisson --seed 7",
        ),
        &mut (),
    )
    .expect("runs");
    let ta: Vec<u64> = a.samples.iter().map(|s| s.t_send_ns).collect();
    let tb: Vec<u64> = b.samples.iter().map(|s| s.t_send_ns).collect();
    let n = ta.len().min(tb.len());
    assert!(n > 300, "{n}");
    assert_eq!(ta[..n], tb[..n], "same seed, same intended times");
    dev.stop();
}

#[test]
fn latency_logs_and_cpu_server_framing() {
    // -Z 0 against a tiny server that answers -R bytes: the test_info header
    // leads every request; -L 1 writes fperf's per-thread files.
    let (addr, _server) =
        crate::common::tiny_server(usize::MAX, 1024, 64, crate::common::Then::Close, 4);
    let dir = tempfile::tempdir().expect("tempdir");
    let flags = format!(
        "-d 1 -n 2 -m 1024 -X 1024 -R 64 -Z 0 -F 1 -L 1 -D {}",
        dir.path().display()
    );
    let report = run(&config(addr, &flags), &mut ()).expect("runs");
    assert_eq!(report.status, RunStatus::Completed);
    for t in 0..2u32 {
        let text = std::fs::read_to_string(dir.path().join(format!("hugepage_thread_{t}.txt")))
            .expect("log written");
        let n = text.lines().filter(|l| l.parse::<u64>().is_ok()).count();
        let samples = report.samples.iter().filter(|s| s.thread == t).count();
        assert_eq!(n, samples);
    }
}
