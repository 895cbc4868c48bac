//! Echo benchmark: the emulated device's pattern_slot against a minimal
//! blocking echo server, with the same client, in the same run.
//!
//! ```text
//! cargo bench -p fracflow-emulator --bench echo
//! ```
//!
//! The emulator is built from `hw/` into a temporary directory, started on
//! 127.0.0.1, programmed with the full image over its management channel,
//! and slot 0 is loaded with pattern_slot (which answers every line of a
//! request unchanged).  Each transaction is one fperf `-Z 1` request of
//! 4 KiB (header + `0x9f` filler, built with `fracflow_proto::FracFraming`),
//! written whole in one write, followed by reading exactly the 4 KiB answer,
//! which is checked against the request.  The bare server reads a whole
//! 4 KiB request and writes it back, one thread per connection.
//!
//! Each case (server x connection count) gets `ECHO_BENCH_WARMUP` (default
//! 0.5 s) of warm-up, then `ECHO_BENCH_SECS` (default 3 s) of measurement
//! on persistent connections, each keeping one transaction in flight.  The
//! measurement of the emulator and the bare server with the same
//! connection count is cut into twelve slices run alternately (ABBA), so that
//! load from elsewhere on a shared host falls on both alike.  Transactions
//! per second are the measured transactions over the slices' summed wall
//! time; percentiles are nearest-rank over every measured transaction's
//! latency (write start to last byte read).

use std::error::Error;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use fracflow_emulator::{Device, build_design, load_partial, program};
use fracflow_proto::FracFraming;

type BoxResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Request (and answer) size, header included.
const REQUEST_BYTES: u32 = 4096;

fn secs_from_env(name: &str, default: f64) -> Duration {
    let secs = std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 3600.0)
        .unwrap_or(default);
    Duration::from_secs_f64(secs)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |e| format!("unavailable ({e})"),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// The minimal blocking echo server: one thread per connection, each
/// reading a whole request and writing it back.
fn start_bare_echo() -> BoxResult<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new()
        .name("bare-accept".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = std::thread::Builder::new()
                    .name("bare-conn".into())
                    .spawn(move || bare_connection(stream));
            }
        })?;
    Ok(addr)
}

fn bare_connection(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut buf = vec![0u8; REQUEST_BYTES as usize];
    while stream.read_exact(&mut buf).is_ok() {
        if stream.write_all(&buf).is_err() {
            return;
        }
    }
}

/// One case's measurements.
struct CaseResult {
    name: &'static str,
    conns: usize,
    transactions: usize,
    window: Duration,
    /// Sorted latencies in nanoseconds.
    latencies: Vec<u64>,
}

impl CaseResult {
    fn tps(&self) -> f64 {
        self.transactions as f64 / self.window.as_secs_f64()
    }

    /// Nearest-rank percentile, in microseconds.
    fn percentile_us(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let n = self.latencies.len();
        let rank = ((p / 100.0) * n as f64).ceil().max(1.0) as usize;
        self.latencies[rank.min(n) - 1] as f64 / 1000.0
    }
}

/// What one connection measured in one slice: the latencies of the
/// transactions it started in the slice, and when its last one finished.
struct SliceRun {
    latencies: Vec<u64>,
    last_end: Instant,
}

/// A command to a client connection: run transactions that start in
/// `start..until`, recording their latencies if `record`.
struct Slice {
    start: Instant,
    until: Instant,
    record: bool,
}

/// The client loop, identical for both servers: one request written whole,
/// exactly the answer read, checked against the request.
fn run_slice(
    stream: &mut TcpStream,
    request: &[u8],
    answer: &mut [u8],
    slice: &Slice,
) -> BoxResult<SliceRun> {
    let mut latencies = Vec::new();
    let mut last_end = slice.start;
    if let Some(wait) = slice.start.checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
    loop {
        let t0 = Instant::now();
        if t0 >= slice.until {
            break;
        }
        stream.write_all(request)?;
        stream.read_exact(answer)?;
        let t1 = Instant::now();
        if answer != request {
            return Err("the answer differs from the request".into());
        }
        if slice.record {
            latencies.push(u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX));
        }
        last_end = t1;
    }
    Ok(SliceRun {
        latencies,
        last_end,
    })
}

/// A client connection on its own thread, driven slice by slice.
struct Client {
    commands: mpsc::Sender<Slice>,
    results: mpsc::Receiver<BoxResult<SliceRun>>,
}

impl Client {
    fn start(addr: SocketAddr, request: Arc<Vec<u8>>) -> BoxResult<Client> {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.set_write_timeout(Some(Duration::from_secs(10)))?;
        let (commands, inbox) = mpsc::channel::<Slice>();
        let (outbox, results) = mpsc::channel();
        std::thread::Builder::new()
            .name("echo-client".into())
            .spawn(move || {
                let mut answer = vec![0u8; request.len()];
                for slice in inbox {
                    let run = run_slice(&mut stream, &request, &mut answer, &slice);
                    let failed = run.is_err();
                    if outbox.send(run).is_err() || failed {
                        return;
                    }
                }
            })?;
        Ok(Client { commands, results })
    }
}

/// Runs one slice of `length` on every client of a case, all starting
/// together; returns the latencies and the slice's wall time.
fn slice(clients: &[Client], length: Duration, record: bool) -> BoxResult<(Vec<u64>, Duration)> {
    // A little lead so that every thread is waiting before the start.
    let start = Instant::now() + Duration::from_millis(2);
    let until = start + length;
    for client in clients {
        client.commands.send(Slice {
            start,
            until,
            record,
        })?;
    }
    let mut latencies = Vec::new();
    let mut last_end = start;
    for client in clients {
        let run = client.results.recv()??;
        latencies.extend(run.latencies);
        last_end = last_end.max(run.last_end);
    }
    Ok((latencies, last_end.saturating_duration_since(start)))
}

/// Measures emulator and bare with `conns` connections each: a warm-up
/// of each, then `SLICES` alternating slices per server (ABBA order), so
/// that load from elsewhere on the host falls on both alike.
fn run_pair(
    targets: [(&'static str, SocketAddr); 2],
    conns: usize,
    request: &Arc<Vec<u8>>,
    warmup: Duration,
    measure: Duration,
) -> BoxResult<[CaseResult; 2]> {
    const SLICES: u32 = 12;
    let mut clients = Vec::new();
    for (_, addr) in targets {
        let case = (0..conns)
            .map(|_| Client::start(addr, Arc::clone(request)))
            .collect::<BoxResult<Vec<_>>>()?;
        clients.push(case);
    }
    for case in &clients {
        slice(case, warmup, false)?;
    }
    let mut latencies = [Vec::new(), Vec::new()];
    let mut windows = [Duration::ZERO; 2];
    for round in 0..SLICES {
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (l, w) = slice(&clients[i], measure / SLICES, true)?;
            latencies[i].extend(l);
            windows[i] += w;
        }
    }
    let [mut a, mut b] = latencies;
    a.sort_unstable();
    b.sort_unstable();
    let result = |i: usize, latencies: Vec<u64>| CaseResult {
        name: targets[i].0,
        conns,
        transactions: latencies.len(),
        window: windows[i].max(Duration::from_micros(1)),
        latencies,
    };
    Ok([result(0, a), result(1, b)])
}

fn main() -> BoxResult<()> {
    let load_start = loadavg();
    let warmup = secs_from_env("ECHO_BENCH_WARMUP", 0.5);
    let measure = secs_from_env("ECHO_BENCH_SECS", 3.0);
    println!("echo bench: {REQUEST_BYTES}-byte -Z 1 requests, whole in one write, 127.0.0.1");
    println!(
        "warm-up {:.1} s, measure {:.1} s per case; loadavg at start: {load_start}",
        warmup.as_secs_f64(),
        measure.as_secs_f64()
    );

    let hw = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hw");
    let compiler = std::env::var_os("CXX").map_or_else(|| PathBuf::from("g++"), PathBuf::from);
    let tmp = tempfile::tempdir()?;
    let (_, _, set) = build_design(&hw, tmp.path(), &compiler)?;
    let dev = Device::start(SocketAddr::from(([127, 0, 0, 1], 0)), None)?;
    program(dev.addr(), &set.full)?;
    let pattern = set
        .partials
        .iter()
        .find(|p| p.cell == 0 && p.unit == "pattern_slot")
        .ok_or("no pattern_slot partial for slot 0")?;
    load_partial(dev.addr(), 0, &pattern.path, 256, 0x1000_4000)?;
    let bare = start_bare_echo()?;

    // fperf -Z 1 -K 0 -X 4096 -m 4096: the whole request is one piece.
    let framed = FracFraming::new(0, REQUEST_BYTES, REQUEST_BYTES).build()?;
    assert_eq!(framed.piece_count(), 1, "one write per request");
    let request = Arc::new(framed.into_bytes());

    let mut results = Vec::new();
    for conns in [1, 2] {
        let targets = [("emulator", dev.addr()), ("bare", bare)];
        results.extend(run_pair(targets, conns, &request, warmup, measure)?);
    }
    dev.stop();

    println!();
    println!(
        "{:<10} {:>5} {:>14} {:>10} {:>10} {:>12}",
        "case", "conns", "transactions/s", "p50 µs", "p99 µs", "transactions"
    );
    for r in &results {
        println!(
            "{:<10} {:>5} {:>14.0} {:>10.1} {:>10.1} {:>12}",
            r.name,
            r.conns,
            r.tps(),
            r.percentile_us(50.0),
            r.percentile_us(99.0),
            r.transactions
        );
    }
    println!();
    println!("emulator / bare (tps: higher is better, goal >= 0.9; p50: lower is better)");
    for conns in [1, 2] {
        let find = |name: &str| results.iter().find(|r| r.name == name && r.conns == conns);
        if let (Some(e), Some(b)) = (find("emulator"), find("bare")) {
            println!(
                "  {conns} conn(s): tps {:.3}, p50 {:.3}",
                e.tps() / b.tps(),
                e.percentile_us(50.0) / b.percentile_us(50.0)
            );
        }
    }
    println!("loadavg at end: {}", loadavg());
    Ok(())
}
