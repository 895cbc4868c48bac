//! The CPU server (`fracflow cpu-server`): answers equal the accelerators'
//! for the same data, the real client runs against it, bad input closes only
//! its connection, memory stays flat.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use fracflow_client::{ClientConfig, RunStatus, run};
use fracflow_emulator::cpu_server::kernels_in;
use fracflow_emulator::{CpuServer, CpuServerConfig, MemoryLog, RunningCpuServer};
use fracflow_proto::{TestInfo, TestMode};

use crate::common::{
    Framing, Rng, built, closed_by_device, connect, device, header, load, localhost, read_n,
    send_framed, wait_for_log,
};
use crate::models;

/// Serialises the tests that measure the process (RSS) or load it (the
/// client run), so they do not disturb each other.
fn heavy() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The plugins of the shared build, by function id (cnn, logit, norm).
fn kernels() -> BTreeMap<u8, PathBuf> {
    let map = kernels_in(&built().dir).expect("the build's plugins are found");
    assert_eq!(
        map.keys().copied().collect::<Vec<_>>(),
        vec![2, 3, 5],
        "cnn, logit and norm; top_k is native"
    );
    map
}

fn server(workers: usize, kernels: BTreeMap<u8, PathBuf>) -> (RunningCpuServer, Arc<MemoryLog>) {
    let log = MemoryLog::new(10_000);
    let mut config = CpuServerConfig::new(localhost(), workers);
    config.kernels = kernels;
    config.log = log.sink();
    (CpuServer::start(config).expect("cpu server starts"), log)
}

/// One `-Z 0` request: `test_info` then `data`, answer of `response` bytes.
fn ask_cpu(stream: &mut TcpStream, func: u32, data: &[u8], response: usize) -> Vec<u8> {
    let size = u32::try_from(64 + data.len()).expect("fits");
    let info = TestInfo::rr(size, size, u32::try_from(response).expect("fits"), func);
    let mut request = info.encode().to_vec();
    request.extend_from_slice(data);
    stream.write_all(&request).expect("write");
    read_n(stream, response)
}

/// One fRAC request to `slot`, written whole (`FIRST|LAST`).
fn ask_device(stream: &mut TcpStream, slot: u16, data: &[u8], response: usize) -> Vec<u8> {
    let head = header(slot, data.len(), 0xffff, Framing::Whole);
    send_framed(stream, &head, data, Framing::Whole);
    read_n(stream, response)
}

fn words(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn top_k_equals_the_accelerator() {
    // The full image starts with top_k in slot 0.
    let (dev, _dlog) = device();
    let (cpu, _log) = server(2, BTreeMap::new());
    let mut on_dev = connect(dev.addr());
    let mut on_cpu = connect(cpu.addr());
    let mut rng = Rng::new(16);
    for size in [128usize, 1024, 4096, 8192, 65_472] {
        let n = (size - 64) / 4;
        let shapes: Vec<(&str, Vec<u32>)> = vec![
            ("random", (0..n).map(|_| rng.next_u32()).collect()),
            // Words >= 2^31 against small ones: fperf's signed comparator
            // misorders exactly these.
            (
                "high bit",
                (0..n)
                    .map(|i| {
                        if i % 3 == 0 {
                            0x8000_0000 | rng.next_u32()
                        } else {
                            rng.below(100)
                        }
                    })
                    .collect(),
            ),
            ("ties", (0..n).map(|_| 0x9f9f_9f9f + rng.below(2)).collect()),
            ("ascending", (0..n as u32).collect()),
            ("filler", vec![0x9f9f_9f9f; n]),
        ];
        for (shape, values) in shapes {
            let data = words(&values);
            let accel = ask_device(&mut on_dev, 0, &data, 64);
            let soft = ask_cpu(&mut on_cpu, 1, &data, 64);
            assert_eq!(soft, accel, "top_k {size} B {shape}");
            assert_eq!(soft, models::top_k(&data, 0xffff).to_vec(), "{shape}");
        }
    }
    // Beyond the accelerator's framing: fewer than 16 words, data not whole
    // lines (the ragged tail zero-padded), and -R longer than the answer.
    let few = words(&[7, 0xffff_fff0, 3]);
    let answer = ask_cpu(&mut on_cpu, 1, &few, 128);
    let mut padded = few.clone();
    padded.resize(64, 0);
    assert_eq!(answer[..64], models::top_k(&padded, 0xffff));
    assert!(answer[64..].iter().all(|&b| b == 0), "-R padded with zeros");
    let ragged = rng.bytes(1001);
    let mut padded = ragged.clone();
    padded.resize(1024, 0);
    assert_eq!(
        ask_cpu(&mut on_cpu, 1, &ragged, 64),
        models::top_k(&padded, 0xffff).to_vec()
    );
    // -F 0: -R zeros, nothing computed.
    assert_eq!(ask_cpu(&mut on_cpu, 0, &ragged, 200), vec![0u8; 200]);
    assert_eq!(cpu.stats().bad_input, 0);
    cpu.stop();
    dev.stop();
}

#[test]
fn logit_norm_and_cnn_equal_the_accelerators() {
    let (dev, _dlog) = device();
    load(&dev, 1, "log");
    load(&dev, 2, "cnn");
    load(&dev, 3, "norm");
    let (cpu, _log) = server(2, kernels());
    let mut on_dev = connect(dev.addr());
    let mut on_cpu = connect(cpu.addr());
    let mut rng = Rng::new(35);
    for size in [128usize, 1024, 4096, 16_448] {
        let n = (size - 64) / 4;
        // logit's domain is (0, 1); norm takes any finite values.
        let unit: Vec<u32> = (0..n)
            .map(|_| {
                (f32::from(u16::try_from(rng.below(65_535) + 1).expect("fits")) / 65_536.0)
                    .to_bits()
            })
            .collect();
        let data = words(&unit);
        let accel = ask_device(&mut on_dev, 1, &data, size - 64);
        assert_eq!(
            ask_cpu(&mut on_cpu, 3, &data, size - 64),
            accel,
            "logit {size} B"
        );
        let spread: Vec<u32> = (0..n)
            .map(|_| ((rng.next_u32() % 2_000_000) as f32 - 1_000_000.0).to_bits())
            .collect();
        let data = words(&spread);
        let accel = ask_device(&mut on_dev, 3, &data, size - 64);
        assert_eq!(
            ask_cpu(&mut on_cpu, 5, &data, size - 64),
            accel,
            "norm {size} B"
        );
        // -R 64 (the figure's): the first line of the same answer.
        assert_eq!(
            ask_cpu(&mut on_cpu, 5, &data, 64),
            accel[..64],
            "norm -R 64"
        );
    }
    for size in [1024usize, 24_640] {
        let data = rng.bytes(size - 64);
        let accel = ask_device(&mut on_dev, 2, &data, 64);
        assert_eq!(ask_cpu(&mut on_cpu, 2, &data, 64), accel, "cnn {size} B");
    }
    // logit over data that is not whole lines: the answer to the real data.
    let data = words(&[0.25f32.to_bits(), 0.5f32.to_bits(), 0.75f32.to_bits()]);
    let mut padded = data.clone();
    padded.resize(64, 0);
    let accel = ask_device(&mut on_dev, 1, &padded, 64);
    assert_eq!(ask_cpu(&mut on_cpu, 3, &data, 12), accel[..12]);
    assert_eq!(cpu.stats().bad_input, 0);
    cpu.stop();
    dev.stop();
}

#[test]
fn closed_loop_client_run_completes() {
    let _heavy = heavy();
    let mut config = CpuServerConfig::new(localhost(), 2);
    config.start_cpu = Some(0);
    let cpu = CpuServer::start(config).expect("cpu server starts");
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    if cores.len() >= 2 {
        let pinned = cpu.worker_cores();
        assert!(pinned.iter().all(Option::is_some), "{pinned:?}");
        assert_ne!(pinned[0], pinned[1], "one core per worker");
    }
    let addr: SocketAddr = cpu.addr();
    let args: Vec<String> = format!(
        "-c {} -p {} -t rr -Z 0 -F 1 -m 1024 -X 1024 -R 64 -d 2 -n 2",
        addr.ip(),
        addr.port()
    )
    .split_whitespace()
    .map(str::to_owned)
    .collect();
    let cfg = ClientConfig::from_fperf_args(&args).expect("valid arguments");
    let report = run(&cfg, &mut ()).expect("runs");
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(report.timeouts, 0);
    assert_eq!(report.threads.len(), 2);
    for t in &report.threads {
        assert!(t.completed > 0, "thread {} completed nothing", t.thread);
    }
    let total: u64 = report.seconds.iter().map(|s| s.count).sum();
    assert!(total > 0);
    let read: u64 = report
        .seconds
        .iter()
        .flat_map(|s| &s.threads)
        .map(|t| t.bytes_read)
        .sum();
    assert_eq!(read, total * 64, "exactly -R bytes per request");
    let stats = cpu.stats();
    assert!(stats.requests >= total, "{stats:?} vs {total}");
    assert_eq!(stats.bad_input, 0);
    cpu.stop();
}

#[test]
fn bad_input_closes_only_its_connection() {
    // No kernels: logit/norm/cnn requests are bad input here.
    let (cpu, log) = server(1, BTreeMap::new());
    let mut good = connect(cpu.addr());
    let data = words(&(0..240u32).collect::<Vec<_>>());
    assert_eq!(
        ask_cpu(&mut good, 1, &data, 64),
        models::top_k(&data, 0xffff).to_vec()
    );
    let rr = |req: u32, resp: u32, func: u32| TestInfo::rr(req, req, resp, func).encode();
    let mut unknown_mode = rr(1024, 64, 1);
    unknown_mode[0] = 9;
    let write_mode = TestInfo {
        test: TestMode::Write,
        ..TestInfo::rr(1024, 1024, 64, 1)
    }
    .encode();
    let cases: Vec<(&str, [u8; 64], &str)> = vec![
        ("unknown test mode", unknown_mode, "malformed test_info"),
        ("write mode", write_mode, "only rr and crr"),
        ("oversize request", rr(65_536, 64, 1), "request size 65536"),
        ("undersize request", rr(32, 64, 1), "request size 32"),
        ("oversize response", rr(1024, 1 << 20, 1), "response size"),
        ("zero response", rr(1024, 0, 1), "response size 0"),
        ("unknown function", rr(1024, 64, 4), "unknown function 4"),
        ("no kernel", rr(1024, 64, 3), "no kernel loaded"),
    ];
    for (what, head, needle) in &cases {
        let mut bad = connect(cpu.addr());
        bad.write_all(head).expect("write");
        // The rest of the declared request; the server closes at the header.
        let _ = bad.write_all(&[0x9f; 960]);
        assert!(closed_by_device(&mut bad), "{what}: closed");
        let line = wait_for_log(&log, needle);
        assert!(line.contains("closing"), "{what}: {line}");
        // The well-behaved connection is still served, answers in order.
        assert_eq!(
            ask_cpu(&mut good, 1, &data, 64),
            models::top_k(&data, 0xffff).to_vec(),
            "{what}: others still served"
        );
    }
    // A peer that closes mid-request harms nobody either.
    let mut partial = connect(cpu.addr());
    partial.write_all(&rr(4096, 64, 1)).expect("write");
    partial.write_all(&[1; 100]).expect("write");
    drop(partial);
    wait_for_log(&log, "peer closed after 100 of 4032 bytes");
    assert_eq!(
        ask_cpu(&mut good, 1, &data, 64),
        models::top_k(&data, 0xffff).to_vec()
    );
    assert_eq!(cpu.stats().bad_input, cases.len() as u64);
    cpu.stop();
}

#[test]
fn norm_and_cnn_need_whole_lines_and_norm_its_limit() {
    let (cpu, log) = server(1, kernels());
    for (what, req, func, needle) in [
        ("ragged norm", 64 + 100, 5, "needs whole 64-byte data lines"),
        ("ragged cnn", 64 + 100, 2, "needs whole 64-byte data lines"),
        (
            "norm beyond 256 lines",
            64 + 257 * 64,
            5,
            "answers no 16512-byte",
        ),
    ] {
        let mut bad = connect(cpu.addr());
        bad.write_all(&TestInfo::rr(req, req, 64, func).encode())
            .expect("write");
        assert!(closed_by_device(&mut bad), "{what}: closed");
        wait_for_log(&log, needle);
    }
    let mut good = connect(cpu.addr());
    let data = words(&[1.0f32.to_bits(), 3.0f32.to_bits()].repeat(8));
    let answer = ask_cpu(&mut good, 5, &data, 64);
    let expected: Vec<u8> = words(&[0.0f32.to_bits(), 1.0f32.to_bits()].repeat(8));
    assert_eq!(answer, expected, "norm of 1,3,1,3,...");
    cpu.stop();
}

/// Resident set size of this process, from /proc/self/status.
fn vm_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn memory_stays_flat_over_20000_requests() {
    const SIZE: usize = 8192;
    let _heavy = heavy();
    let (cpu, _log) = server(2, BTreeMap::new());
    let mut stream = connect(cpu.addr());
    let mut rng = Rng::new(20_000);
    let data = rng.bytes(SIZE - 64);
    let expected = models::top_k(&data, 0xffff).to_vec();
    let info = TestInfo::rr(SIZE as u32, SIZE as u32, 64, 1).encode();
    let mut request = info.to_vec();
    request.extend_from_slice(&data);
    let mut answer = [0u8; 64];
    let mut ask = |stream: &mut TcpStream| {
        stream.write_all(&request).expect("write");
        std::io::Read::read_exact(stream, &mut answer).expect("answer");
        assert_eq!(answer[..], expected[..]);
    };
    for _ in 0..2_000 {
        ask(&mut stream);
    }
    let grows = cpu.stats().buffer_grows;
    let rss = vm_rss_kib();
    for _ in 2_000..20_000 {
        ask(&mut stream);
    }
    let stats = cpu.stats();
    assert_eq!(stats.requests, 20_000);
    assert_eq!(
        stats.buffer_grows, grows,
        "no buffer grew after warm-up: buffers are reused"
    );
    // fperf's leak would hold 18 000 x 8 KiB = 140 MiB here; other tests of
    // this binary run concurrently, hence the generous bound.
    if let (Some(before), Some(after)) = (rss, vm_rss_kib()) {
        assert!(
            after.saturating_sub(before) < 48 << 10,
            "RSS grew from {before} KiB to {after} KiB"
        );
    }
    cpu.stop();
}

#[test]
fn a_stalled_request_is_closed_after_the_request_timeout() {
    let log = MemoryLog::new(100);
    let mut config = CpuServerConfig::new(localhost(), 1);
    config.request_timeout = std::time::Duration::from_millis(300);
    config.log = log.sink();
    let cpu = CpuServer::start(config).expect("cpu server starts");
    let mut slow = connect(cpu.addr());
    // The header, then part of the data, then nothing: a slowloris.
    slow.write_all(&TestInfo::rr(4096, 4096, 64, 1).encode())
        .expect("write");
    slow.write_all(&[1; 10]).expect("write");
    assert!(closed_by_device(&mut slow), "closed");
    wait_for_log(&log, "request incomplete after 300ms");
    let mut good = connect(cpu.addr());
    let data = words(&[5, 9, 1]);
    assert_eq!(ask_cpu(&mut good, 1, &data, 64)[..8], words(&[9, 5])[..]);
    cpu.stop();
}
