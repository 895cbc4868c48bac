//! The load generator: pinned worker threads, per-connection request state
//! machines, per-second histograms, samples, faults.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fracflow_proto::{FILLER_BYTE, FracFraming, TestInfo};
use hdrhistogram::Histogram;

use crate::config::{Arrivals, ClientConfig, ConfigError, Framing, LatencyDef};
use crate::output::{ConnCounts, SecondRecord, ThreadSecond, gbps};
use crate::rng::SplitMix64;
use crate::trace::{TraceError, TraceRow, read_trace};

/// One completed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// Client thread.
    pub thread: u32,
    /// Per-thread sequence number of the request (0-based, send order).
    pub seq: u64,
    /// Send time, ns since the run started: the intended time in open
    /// loop, the first write otherwise.
    pub t_send_ns: u64,
    /// From `t_send_ns` to the last response byte read.
    pub latency_ns: u64,
    /// fperf's: from the last request piece written to the last response byte.
    pub latency_last_piece_ns: u64,
    /// Workload/slot of the request.
    pub slot: u16,
    /// Request bytes, header included.
    pub request_bytes: u32,
    /// Response bytes read.
    pub response_bytes: u32,
}

impl Sample {
    /// What the `samples.by-thread` sidecar keeps of this request.
    pub fn by_thread_row(&self) -> fracflow_record::by_thread::SampleRow {
        fracflow_record::by_thread::SampleRow {
            thread: self.thread,
            seq: self.seq,
            t_send_ns: self.t_send_ns,
            latency_ns: self.latency_ns,
            latency_last_piece_ns: self.latency_last_piece_ns,
            slot: u32::from(self.slot),
            request_bytes: self.request_bytes,
        }
    }
}

/// Receives results while a run is going on (called on the caller's thread).
pub trait Observer {
    /// Before the first second.
    fn on_start(&mut self, _config: &ClientConfig) {}
    /// After each complete second, in order.
    fn on_second(&mut self, _record: &SecondRecord) {}
    /// Once, with the final report.
    fn on_finish(&mut self, _report: &RunReport) {}
}

impl Observer for () {}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The trace is unreadable.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// `-c`/`-p` does not resolve.
    #[error("cannot resolve {target}: {source} (check -c HOST and -p PORT)")]
    Resolve {
        /// `host:port`.
        target: String,
        /// Why.
        source: std::io::Error,
    },
    /// Connecting failed.
    #[error(
        "cannot connect to {addr}: {source} (is the device or server running and listening on that address? check -c, -p and that the device is programmed)"
    )]
    Connect {
        /// The address tried.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error("cannot start client thread: {0}")]
    Spawn(std::io::Error),
    /// Writing per-request logs failed.
    #[error("cannot write {path}: {source}")]
    Log {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Internal histogram setup failed (bounds are constants; not expected).
    #[error("histogram: {0}")]
    Histogram(String),
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum RunStatus {
    /// Ran for its duration or replayed its whole trace.
    Completed,
    /// Stopped early; the samples taken so far are kept.
    Failed {
        /// What happened.
        reason: String,
    },
}

/// One thread's totals.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThreadReport {
    /// Index.
    pub thread: u32,
    /// Core it was pinned to, if pinned.
    pub core: Option<usize>,
    /// Connection counts for fperf's closing block.
    pub conns: ConnCounts,
    /// Completions (warm-up included).
    pub completed: u64,
    /// Requests abandoned after the per-request timeout.
    pub timeouts: u64,
    /// Thread CPU time / wall time (from `/proc/thread-self/schedstat`).
    pub cpu_fraction: Option<f64>,
    /// 1 − (time in loop passes that made no progress) / wall: how busy a
    /// polling thread really was.
    pub work_fraction: f64,
    /// Whether this thread polls non-blocking sockets (CPU is then 100 % by design).
    pub polling: bool,
    /// Open loop: sends more than 1 ms after their intended time.
    pub late_sends: u64,
    /// Open loop: requests sent.
    pub sends: u64,
    /// Open loop: largest send lag, ns.
    pub max_send_lag_ns: u64,
    /// Completions not stored because of `max_samples_per_thread`.
    pub samples_dropped: u64,
    /// Requests in flight when the run ended (not counted anywhere else).
    pub abandoned_at_end: u64,
}

/// The latency percentiles, open-loop and trace outcomes of a run: the records a measure summary carries.
pub use fracflow_record::measure::{LatencySummary as Summary, OpenLoopReport, TraceReport};

fn summarize(h: &Histogram<u64>) -> Summary {
    if h.is_empty() {
        return Summary::default();
    }
    Summary {
        count: h.len(),
        min_ns: h.min(),
        p50_ns: h.value_at_quantile(0.5),
        p99_ns: h.value_at_quantile(0.99),
        p999_ns: h.value_at_quantile(0.999),
        max_ns: h.max(),
    }
}

/// Everything a run produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    /// How it ended.
    pub status: RunStatus,
    /// Which latency the per-second records use.
    pub latency: LatencyDef,
    /// Every second, warm-up included.
    pub seconds: Vec<SecondRecord>,
    /// Per-request samples of the measured seconds (after `--skip`), by
    /// thread then completion order.
    #[serde(skip)]
    pub samples: Vec<Sample>,
    /// Merged histogram of the console latency over the measured seconds.
    #[serde(skip)]
    pub histogram: Histogram<u64>,
    /// Summary of `latency_ns` (from send) over the measured seconds.
    pub from_send: Summary,
    /// Summary of `latency_last_piece_ns` (fperf's) over the measured seconds.
    pub last_piece: Summary,
    /// Per thread.
    pub threads: Vec<ThreadReport>,
    /// Completions over the measured seconds.
    pub measured_completions: u64,
    /// Per-request timeouts over the whole run.
    pub timeouts: u64,
    /// Open loop only.
    pub open_loop: Option<OpenLoopReport>,
    /// Trace replay only.
    pub trace: Option<TraceReport>,
    /// A client thread was the bottleneck (see [`ThreadReport`]).
    pub cpu_saturated: bool,
    /// 1-minute load average of the host at the end (`/proc/loadavg`).
    pub host_load1: Option<f64>,
    /// Wall time of the run.
    pub elapsed_s: f64,
}

impl RunReport {
    /// fperf's closing block (`---`, `nr_conn` lines, trace line).
    #[must_use]
    pub fn closing(&self) -> String {
        let conns: Vec<ConnCounts> = self.threads.iter().map(|t| t.conns).collect();
        let trace = self.trace.as_ref().map(TraceReport::line);
        crate::output::format_closing(&conns, trace.as_deref())
    }
}

/// Histogram bounds: 1 ns .. 100 s, 3 significant digits; larger values
/// saturate (a timeout is far below).
fn new_histogram() -> Result<Histogram<u64>, ClientError> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3)
        .map_err(|e| ClientError::Histogram(e.to_string()))
}

/// What a worker sends each second.
struct SecondMsg {
    thread: u32,
    second: u32,
    stats: ThreadSecond,
    hist: Histogram<u64>,
}

/// What a worker returns.
struct WorkerOut {
    report: ThreadReport,
    samples: Vec<Vec<Sample>>,
    from_send: Histogram<u64>,
    last_piece: Histogram<u64>,
    failure: Option<String>,
    trace: Option<TraceReport>,
}

/// Samples per growth chunk: ~3 MiB, allocated only between requests.
const SAMPLE_CHUNK: usize = 65_536;
/// Open loop: requests in flight per connection before sending stalls.
const MAX_OUTSTANDING: usize = 1024;
/// Open loop: a sender this far behind its schedule has lost the rate.
const MAX_KEPT_LAG_NS: u64 = 100_000_000;
/// A send this late counts as late.
const LATE_NS: u64 = 1_000_000;
/// Read/write timeout of blocking sockets: how often a blocked thread
/// looks at the clock (second boundaries, request timeouts, stop flag).
const BLOCKING_SLICE: Duration = Duration::from_millis(10);

/// Runs the client.  Connection and configuration problems are errors
/// (nothing was measured); a fault during the run ends it early with
/// [`RunStatus::Failed`] and keeps what was measured.
pub fn run(config: &ClientConfig, observer: &mut dyn Observer) -> Result<RunReport, ClientError> {
    config.validate()?;
    let trace = match &config.trace {
        Some(path) => Some(Arc::new(read_trace(path)?)),
        None => None,
    };
    let target = format!("{}:{}", config.host, config.port);
    let addr = target
        .to_socket_addrs()
        .map_err(|source| ClientError::Resolve {
            target: target.clone(),
            source,
        })?
        .next()
        .ok_or_else(|| ClientError::Resolve {
            target: target.clone(),
            source: std::io::Error::new(ErrorKind::NotFound, "no address"),
        })?;
    // Connect everything first so a wrong address fails before any thread
    // starts and before the clock does.
    let mut per_thread: Vec<Vec<TcpStream>> = Vec::with_capacity(config.threads as usize);
    for _ in 0..config.threads {
        let mut conns = Vec::with_capacity(config.conns_per_thread as usize);
        for _ in 0..config.conns_per_thread {
            conns.push(open(addr)?);
        }
        per_thread.push(conns);
    }
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<SecondMsg>();
    let (recycle_tx, recycle_rx) = (0..config.threads)
        .map(|_| mpsc::channel::<Histogram<u64>>())
        .unzip::<_, _, Vec<_>, Vec<_>>();
    observer.on_start(config);
    let start = Instant::now();
    let mut handles = Vec::with_capacity(per_thread.len());
    for ((i, conns), recycle) in per_thread.into_iter().enumerate().zip(recycle_rx) {
        let thread = i as u32;
        let core = config
            .start_cpu
            .filter(|_| !cores.is_empty())
            .map(|s| cores[(s + i) % cores.len()]);
        let worker = Worker::new(
            config,
            thread,
            addr,
            trace.clone(),
            start,
            Arc::clone(&stop),
            tx.clone(),
            recycle,
        )?;
        let handle = std::thread::Builder::new()
            .name(format!("fracflow-client-{i}"))
            .spawn(move || {
                // Pin only the threads we spawn: pinning the caller would
                // shrink every pool it creates later (docs/rust-stack.md §4).
                let pinned = core
                    .filter(|c| core_affinity::set_for_current(*c))
                    .map(|c| c.id);
                worker.run(conns, pinned)
            })
            .map_err(ClientError::Spawn)?;
        handles.push(handle);
    }
    drop(tx);

    // Assemble seconds in order as every thread reports them.
    let latency = config.console_latency();
    let n = config.threads as usize;
    let mut pending: std::collections::BTreeMap<u32, Vec<Option<SecondMsg>>> = Default::default();
    let mut seconds = Vec::new();
    let mut histogram = new_histogram()?;
    let mut second_hist = new_histogram()?;
    let mut next_second = 0u32;
    let mut emit = |msgs: Vec<Option<SecondMsg>>,
                    second: u32,
                    seconds: &mut Vec<SecondRecord>,
                    observer: &mut dyn Observer| {
        second_hist.reset();
        let mut threads = Vec::with_capacity(n);
        for (t, msg) in msgs.into_iter().enumerate() {
            match msg {
                Some(mut m) => {
                    let _ = second_hist.add(&m.hist);
                    if second >= config.skip_s {
                        let _ = histogram.add(&m.hist);
                    }
                    threads.push(m.stats);
                    m.hist.reset();
                    let _ = recycle_tx[t].send(m.hist);
                }
                None => threads.push(ThreadSecond {
                    thread: t as u32,
                    ..ThreadSecond::default()
                }),
            }
        }
        let rec = second_record(
            second,
            latency,
            threads,
            &second_hist,
            second < config.skip_s,
        );
        observer.on_second(&rec);
        seconds.push(rec);
    };
    for msg in rx.iter() {
        let slot = pending
            .entry(msg.second)
            .or_insert_with(|| (0..n).map(|_| None).collect());
        let t = msg.thread as usize;
        slot[t] = Some(msg);
        while pending
            .get(&next_second)
            .is_some_and(|v| v.iter().all(Option::is_some))
        {
            if let Some(msgs) = pending.remove(&next_second) {
                emit(msgs, next_second, &mut seconds, observer);
            }
            next_second += 1;
        }
    }
    // Threads that stopped early leave seconds incomplete: emit what exists.
    while let Some((second, msgs)) = pending.pop_first() {
        emit(msgs, second, &mut seconds, observer);
    }

    let mut outs = Vec::with_capacity(handles.len());
    for h in handles {
        match h.join() {
            Ok(out) => outs.push(out),
            Err(_) => {
                return Err(ClientError::Spawn(std::io::Error::other(
                    "a client thread panicked",
                )));
            }
        }
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    let mut from_send = new_histogram()?;
    let mut last_piece = new_histogram()?;
    let mut samples = Vec::new();
    let mut threads = Vec::new();
    let mut failure = None;
    let mut trace_report = None;
    for out in outs {
        let _ = from_send.add(&out.from_send);
        let _ = last_piece.add(&out.last_piece);
        for chunk in out.samples {
            samples.extend(chunk);
        }
        if failure.is_none() {
            failure = out.failure;
        }
        if out.trace.is_some() {
            trace_report = out.trace;
        }
        threads.push(out.report);
    }
    if config.latency_log
        && let Some(dir) = &config.log_dir
    {
        write_latency_logs(dir, &samples, config.threads)?;
    }
    let measured_completions = seconds
        .iter()
        .filter(|s| !s.warmup)
        .map(|s| s.count)
        .sum::<u64>();
    let measured_s =
        f64::from(config.duration_s.unwrap_or(0).saturating_sub(config.skip_s)).max(1.0);
    let open_loop = config.open_loop.map(|o| {
        let sends: u64 = threads.iter().map(|t| t.sends).sum();
        let late: u64 = threads.iter().map(|t| t.late_sends).sum();
        let achieved = measured_completions as f64 / measured_s;
        let max_lag = threads.iter().map(|t| t.max_send_lag_ns).max().unwrap_or(0);
        OpenLoopReport {
            target_rate: o.rate,
            achieved_rate: achieved,
            late_sends: late,
            sends,
            max_send_lag_ns: max_lag,
            // Late single sends (a loaded host oversleeping) cost latency,
            // which is measured from the intended time anyway; the rate is
            // lost when the completions fall short or the sender falls
            // behind for good.
            rate_kept: achieved >= 0.98 * o.rate && max_lag < MAX_KEPT_LAG_NS,
        }
    });
    let cpu_saturated = threads.iter().any(|t| {
        if t.polling {
            t.work_fraction > 0.9
        } else {
            t.cpu_fraction.is_some_and(|c| c > 0.9)
        }
    }) || open_loop.as_ref().is_some_and(|o| !o.rate_kept);
    let report = RunReport {
        status: match failure {
            None => RunStatus::Completed,
            Some(reason) => RunStatus::Failed { reason },
        },
        latency,
        seconds,
        samples,
        from_send: summarize(&from_send),
        last_piece: summarize(&last_piece),
        histogram,
        threads,
        measured_completions,
        timeouts: 0,
        open_loop,
        trace: trace_report,
        cpu_saturated,
        host_load1: load1(),
        elapsed_s,
    };
    let report = RunReport {
        timeouts: report.threads.iter().map(|t| t.timeouts).sum(),
        ..report
    };
    observer.on_finish(&report);
    Ok(report)
}

fn second_record(
    second: u32,
    latency: LatencyDef,
    threads: Vec<ThreadSecond>,
    hist: &Histogram<u64>,
    warmup: bool,
) -> SecondRecord {
    let count = threads.iter().map(|t| t.count).sum();
    let active = threads.iter().filter(|t| t.count > 0);
    let min_ns = active.clone().map(|t| t.min_ns).min().unwrap_or(0);
    let max_ns = active.map(|t| t.max_ns).max().unwrap_or(0);
    let read = threads.iter().map(|t| t.bytes_read).sum();
    let write = threads.iter().map(|t| t.bytes_written).sum();
    let s = summarize(hist);
    SecondRecord {
        second,
        latency,
        count,
        p50_ns: s.p50_ns,
        p99_ns: s.p99_ns,
        min_ns,
        max_ns,
        read_gbps: gbps(read),
        write_gbps: gbps(write),
        threads,
        warmup,
    }
}

/// `-L 1`: fperf's `hugepage_thread_<i>.txt`, one latency (fperf's
/// definition, ns) per line in completion order, measured seconds only.
fn write_latency_logs(
    dir: &std::path::Path,
    samples: &[Sample],
    threads: u32,
) -> Result<(), ClientError> {
    for t in 0..threads {
        let path = dir.join(format!("hugepage_thread_{t}.txt"));
        std::fs::write(&path, latency_log_text(samples, t))
            .map_err(|source| ClientError::Log { path, source })?;
    }
    Ok(())
}

/// The text of thread `thread`'s `hugepage_thread_<i>.txt`: its samples' latencies (fperf's definition, ns),
/// one per line, in the order given.
#[must_use]
pub fn latency_log_text(samples: &[Sample], thread: u32) -> String {
    let mut text = String::new();
    for s in samples.iter().filter(|s| s.thread == thread) {
        text.push_str(&s.latency_last_piece_ns.to_string());
        text.push('\n');
    }
    text
}

fn load1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// This thread's CPU time in ns (`/proc/thread-self/schedstat`, first field).
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn open(addr: SocketAddr) -> Result<TcpStream, ClientError> {
    let stream =
        TcpStream::connect(addr).map_err(|source| ClientError::Connect { addr, source })?;
    // Requests are written piece by piece on purpose; Nagle would merge them.
    stream
        .set_nodelay(true)
        .map_err(|source| ClientError::Connect { addr, source })?;
    Ok(stream)
}

/// A request on the wire, oldest first.
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    seq: u64,
    /// Intended (open loop) or first-write time, ns since start.
    t_send: u64,
    /// Last piece written; 0 while still writing.
    t_last_piece: u64,
    slot: u16,
    request_bytes: u32,
    response_bytes: u32,
    /// Response bytes still to read.
    remaining: u32,
}

/// One connection's state.
struct Conn {
    stream: TcpStream,
    /// Request bytes (fixed per connection, or rebuilt per trace row
    /// between requests, reusing the allocation).
    request: Vec<u8>,
    /// Bytes of the request being written; `None` when not writing.
    write_off: Option<usize>,
    inflight: VecDeque<Outstanding>,
    /// Next intended send time (ns since start); `None` = nothing to send.
    next_send: Option<u64>,
    /// Open-loop generator state (ns as f64 so gaps do not drift).
    schedule_ns: f64,
    rng: SplitMix64,
    did_io: bool,
}

struct Worker {
    thread: u32,
    addr: SocketAddr,
    piece: usize,
    request_size: u32,
    response_size: u32,
    slot: u16,
    framing: Framing,
    function: u32,
    duration_ns: Option<u64>,
    skip_s: u32,
    stored: usize,
    timeout_ns: u64,
    polling: bool,
    open_gap_ns: Option<(f64, Arrivals)>,
    open_seed: u64,
    trace: Option<Arc<Vec<TraceRow>>>,
    trace_scale: f64,
    latency: LatencyDef,
    max_samples: usize,
    first_chunk: usize,
    conns_per_thread: u32,
    total_conns: u64,
    start: Instant,
    stop: Arc<AtomicBool>,
    tx: mpsc::Sender<SecondMsg>,
    recycle: mpsc::Receiver<Histogram<u64>>,
    // Per-second state.
    second: u32,
    cur: ThreadSecond,
    hist: Histogram<u64>,
    pool: Vec<Histogram<u64>>,
    // Run state.
    from_send: Histogram<u64>,
    last_piece: Histogram<u64>,
    samples: Vec<Vec<Sample>>,
    report: ThreadReport,
    seq: u64,
    trace_next: usize,
    trace_done: u64,
    trace_overrides: u64,
}

impl Worker {
    #[allow(clippy::too_many_arguments)]
    fn new(
        config: &ClientConfig,
        thread: u32,
        addr: SocketAddr,
        trace: Option<Arc<Vec<TraceRow>>>,
        start: Instant,
        stop: Arc<AtomicBool>,
        tx: mpsc::Sender<SecondMsg>,
        recycle: mpsc::Receiver<Histogram<u64>>,
    ) -> Result<Worker, ClientError> {
        let duration_ns = config.duration_s.map(|d| u64::from(d) * 1_000_000_000);
        let per_conn_rate = config
            .open_loop
            .map(|o| o.rate / config.total_conns() as f64);
        // Open loop knows how many samples to expect: reserve them up front
        // (+5 %), capped; closed loop starts with one chunk.
        let first_chunk = match (per_conn_rate, config.duration_s) {
            (Some(r), Some(d)) => {
                let est = r * f64::from(config.conns_per_thread) * f64::from(d) * 1.05;
                (est as usize).clamp(1024, config.max_samples_per_thread.max(1))
            }
            _ => SAMPLE_CHUNK.min(config.max_samples_per_thread.max(1)),
        };
        let mut pool = Vec::with_capacity(4);
        for _ in 0..3 {
            pool.push(new_histogram()?);
        }
        Ok(Worker {
            thread,
            addr,
            piece: config.piece_size as usize,
            request_size: config.request_size,
            response_size: config.response_size,
            slot: config.slot,
            framing: config.framing,
            function: config.function,
            duration_ns,
            skip_s: config.skip_s,
            stored: 0,
            timeout_ns: u64::try_from(config.request_timeout.as_nanos()).unwrap_or(u64::MAX),
            polling: config.busy_poll || config.conns_per_thread > 1 || config.open_loop.is_some(),
            open_gap_ns: config
                .open_loop
                .map(|o| (1e9 / (o.rate / config.total_conns() as f64), o.arrivals)),
            open_seed: config.open_loop.map_or(0, |o| o.seed),
            trace,
            trace_scale: config.trace_time_scale,
            latency: config.console_latency(),
            max_samples: config.max_samples_per_thread,
            first_chunk,
            conns_per_thread: config.conns_per_thread,
            total_conns: config.total_conns(),
            start,
            stop,
            tx,
            recycle,
            second: 0,
            cur: ThreadSecond {
                thread,
                ..ThreadSecond::default()
            },
            hist: new_histogram()?,
            pool,
            from_send: new_histogram()?,
            last_piece: new_histogram()?,
            samples: Vec::new(),
            report: ThreadReport {
                thread,
                core: None,
                conns: ConnCounts {
                    nr_conn: 0,
                    nr_zero_io_conn: 0,
                },
                completed: 0,
                timeouts: 0,
                cpu_fraction: None,
                work_fraction: 0.0,
                polling: false,
                late_sends: 0,
                sends: 0,
                max_send_lag_ns: 0,
                samples_dropped: 0,
                abandoned_at_end: 0,
            },
            seq: 0,
            trace_next: 0,
            trace_done: 0,
            trace_overrides: 0,
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The fixed request of this run.
    fn fixed_request(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.request_size as usize);
        match self.framing {
            Framing::Frac => {
                // Validated in ClientConfig::validate.
                let framing = FracFraming::new(self.slot, self.request_size, self.piece as u32);
                if let Ok(h) = framing.header() {
                    bytes.extend_from_slice(&h.encode());
                }
            }
            Framing::CpuServer => {
                let info = TestInfo::rr(
                    self.piece as u32,
                    self.request_size,
                    self.response_size,
                    self.function,
                );
                bytes.extend_from_slice(&info.encode());
            }
        }
        bytes.resize(self.request_size as usize, FILLER_BYTE);
        bytes
    }

    fn configure(&self, stream: &TcpStream) -> std::io::Result<()> {
        if self.polling {
            stream.set_nonblocking(true)
        } else {
            stream.set_nonblocking(false)?;
            stream.set_read_timeout(Some(BLOCKING_SLICE))?;
            stream.set_write_timeout(Some(BLOCKING_SLICE))
        }
    }

    fn run(mut self, streams: Vec<TcpStream>, core: Option<usize>) -> WorkerOut {
        self.report.core = core;
        self.report.polling = self.polling;
        self.samples.push(Vec::with_capacity(self.first_chunk));
        let cpu0 = thread_cpu_ns();
        let mut failure = None;
        let mut conns = Vec::with_capacity(streams.len());
        for (k, stream) in streams.into_iter().enumerate() {
            if let Err(e) = self.configure(&stream) {
                failure = Some(format!("cannot configure socket: {e}"));
            }
            let global = u64::from(self.thread) * u64::from(self.conns_per_thread) + k as u64;
            let mut conn = Conn {
                stream,
                request: Vec::new(),
                write_off: None,
                inflight: VecDeque::with_capacity(if self.open_gap_ns.is_some() {
                    MAX_OUTSTANDING
                } else {
                    1
                }),
                next_send: Some(0),
                schedule_ns: 0.0,
                rng: SplitMix64::new(self.open_seed.wrapping_add(global)),
                did_io: false,
            };
            if self.trace.is_none() {
                conn.request = self.fixed_request();
            }
            if let Some((gap, _)) = self.open_gap_ns {
                // Stagger connections so the merged stream is evenly spread.
                conn.schedule_ns = gap * global as f64 / self.total_conns as f64;
                conn.next_send = Some(conn.schedule_ns as u64);
            }
            self.report.conns.nr_conn += 1;
            conns.push(conn);
        }
        let mut idle_ns = 0u64;
        if failure.is_none() {
            failure = self.event_loop(&mut conns, &mut idle_ns);
        }
        if failure.is_some() {
            self.stop.store(true, Ordering::Relaxed);
        }
        let end = self.now();
        for c in &conns {
            self.report.abandoned_at_end += c.inflight.len() as u64;
            if !c.did_io {
                self.report.conns.nr_zero_io_conn += 1;
            }
        }
        // A full-length run reports exactly -d seconds (the loop already
        // flushed the last one when it saw the deadline); a trace or a
        // failed run reports its partial last second.
        match self.duration_ns {
            Some(d) if !self.stop.load(Ordering::Relaxed) => {
                while u64::from(self.second) * 1_000_000_000 < d {
                    self.flush_second();
                }
            }
            _ => self.flush_second(),
        }
        let wall = end.max(1);
        self.report.work_fraction = 1.0 - (idle_ns as f64 / wall as f64).min(1.0);
        self.report.cpu_fraction = match (cpu0, thread_cpu_ns()) {
            (Some(a), Some(b)) => Some((b.saturating_sub(a)) as f64 / wall as f64),
            _ => None,
        };
        let trace = self.trace.as_ref().map(|rows| TraceReport {
            rows: rows.len() as u64,
            replayed: self.trace_done,
            response_size_overrides: self.trace_overrides,
        });
        WorkerOut {
            report: self.report,
            samples: self.samples,
            from_send: self.from_send,
            last_piece: self.last_piece,
            failure,
            trace,
        }
    }

    /// Sends the finished second and starts the next.
    fn flush_second(&mut self) {
        let next = self
            .pool
            .pop()
            .or_else(|| self.recycle.try_recv().ok())
            .or_else(|| new_histogram().ok());
        let Some(next) = next else { return };
        let hist = std::mem::replace(&mut self.hist, next);
        let mut stats = std::mem::take(&mut self.cur);
        stats.thread = self.thread;
        if !hist.is_empty() {
            stats.p50_ns = hist.value_at_quantile(0.5);
            stats.p99_ns = hist.value_at_quantile(0.99);
        }
        let _ = self.tx.send(SecondMsg {
            thread: self.thread,
            second: self.second,
            stats,
            hist,
        });
        self.second += 1;
        while let Ok(h) = self.recycle.try_recv() {
            self.pool.push(h);
        }
    }

    fn roll_seconds(&mut self, now: u64) {
        while now >= (u64::from(self.second) + 1) * 1_000_000_000 {
            self.flush_second();
        }
    }

    /// Prepares the next request of `conn` if its time has come; returns
    /// false when the connection has nothing more to send.
    fn trace_prepare(&mut self, conn: &mut Conn) -> Option<(u16, u32, u32)> {
        let rows = self.trace.as_ref()?;
        let row = *rows.get(self.trace_next)?;
        let wire = row.wire_request_size();
        let response = row.expected_response_size();
        if response != row.response_size {
            self.trace_overrides += 1;
        }
        let framing = FracFraming::new(row.slot(), wire, self.piece as u32);
        conn.request.clear();
        if let Ok(h) = framing.header() {
            conn.request.extend_from_slice(&h.encode());
        }
        conn.request.resize(wire as usize, FILLER_BYTE);
        Some((row.slot(), wire, response))
    }

    /// The main loop; returns a failure description if the run ends early.
    fn event_loop(&mut self, conns: &mut [Conn], idle_ns: &mut u64) -> Option<String> {
        let mut scratch = vec![0u8; 64 << 10];
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            let pass_start = self.now();
            self.roll_seconds(pass_start);
            let sending_over = self.duration_ns.is_some_and(|d| pass_start >= d);
            if sending_over {
                return None;
            }
            let mut progress = false;
            let mut all_done = true;
            let mut earliest_send = u64::MAX;
            for conn in conns.iter_mut() {
                // --- start a request ---
                if conn.write_off.is_none()
                    && let Some(at) = conn.next_send
                {
                    let now = self.now();
                    let open = self.open_gap_ns.is_some();
                    let room = conn.inflight.len() < if open { MAX_OUTSTANDING } else { 1 };
                    if now >= at && room && self.duration_ns.is_none_or(|d| at < d) {
                        let (slot, req, resp) = if self.trace.is_some() {
                            match self.trace_prepare(conn) {
                                Some(x) => x,
                                None => {
                                    conn.next_send = None;
                                    continue;
                                }
                            }
                        } else {
                            (self.slot, self.request_size, self.response_size)
                        };
                        let now = self.now();
                        let t_send = if open {
                            let lag = now.saturating_sub(at);
                            self.report.sends += 1;
                            if lag > LATE_NS {
                                self.report.late_sends += 1;
                            }
                            self.report.max_send_lag_ns = self.report.max_send_lag_ns.max(lag);
                            at
                        } else {
                            now
                        };
                        conn.inflight.push_back(Outstanding {
                            seq: self.seq,
                            t_send,
                            t_last_piece: 0,
                            slot,
                            request_bytes: req,
                            response_bytes: resp,
                            remaining: resp,
                        });
                        self.seq += 1;
                        conn.write_off = Some(0);
                        conn.next_send = match self.open_gap_ns {
                            Some((gap, arrivals)) => {
                                conn.schedule_ns += match arrivals {
                                    Arrivals::Fixed => gap,
                                    Arrivals::Poisson => conn.rng.exponential(gap),
                                };
                                Some(conn.schedule_ns as u64)
                            }
                            // Closed loop / trace: set at completion.
                            None => None,
                        };
                    } else if now < at {
                        earliest_send = earliest_send.min(at);
                    }
                }
                // --- write: one piece per write call ---
                if let Some(off) = conn.write_off {
                    let len = conn.request.len();
                    let piece_end = ((off / self.piece + 1) * self.piece).min(len);
                    match conn.stream.write(&conn.request[off..piece_end]) {
                        Ok(0) => return Some(self.closed_msg("write returned 0")),
                        Ok(w) => {
                            progress = true;
                            conn.did_io = true;
                            self.cur.bytes_written += w as u64;
                            let off = off + w;
                            if off == len {
                                conn.write_off = None;
                                let now = self.now();
                                if let Some(o) = conn.inflight.back_mut() {
                                    o.t_last_piece = now;
                                }
                            } else {
                                conn.write_off = Some(off);
                            }
                        }
                        Err(e) if would_block(&e) => {}
                        Err(e) => return Some(self.closed_msg(&io_reason(&e))),
                    }
                }
                // --- read ---
                let want: u64 = conn.inflight.iter().map(|o| u64::from(o.remaining)).sum();
                // A blocking read must not wait for an answer to a request
                // that is still being written.
                if want > 0 && (self.polling || conn.write_off.is_none()) {
                    let cap = (want as usize).min(scratch.len());
                    match conn.stream.read(&mut scratch[..cap]) {
                        Ok(0) => {
                            return Some(self.closed_msg("the server closed the connection"));
                        }
                        Ok(mut got) => {
                            progress = true;
                            conn.did_io = true;
                            self.cur.bytes_read += got as u64;
                            let now = self.now();
                            while got > 0 {
                                let Some(head) = conn.inflight.front_mut() else {
                                    break;
                                };
                                let take = got.min(head.remaining as usize);
                                head.remaining -= take as u32;
                                got -= take;
                                if head.remaining == 0
                                    && let Some(done) = conn.inflight.pop_front()
                                {
                                    self.complete(done, now);
                                    if self.open_gap_ns.is_none() {
                                        conn.next_send = Some(self.after_response(now));
                                    }
                                }
                            }
                        }
                        Err(e) if would_block(&e) => {}
                        Err(e) => return Some(self.closed_msg(&io_reason(&e))),
                    }
                }
                // --- per-request timeout ---
                if let Some(head) = conn.inflight.front() {
                    let now = self.now();
                    if now.saturating_sub(head.t_send) > self.timeout_ns {
                        // Bytes of a late answer would be taken for the next
                        // request's: reopen the connection instead.
                        let lost = conn.inflight.len() as u64;
                        self.report.timeouts += lost;
                        self.cur.timeouts += lost;
                        conn.inflight.clear();
                        conn.write_off = None;
                        match open(self.addr).and_then(|s| {
                            self.configure(&s).map_err(|source| ClientError::Connect {
                                addr: self.addr,
                                source,
                            })?;
                            Ok(s)
                        }) {
                            Ok(s) => {
                                conn.stream = s;
                                self.report.conns.nr_conn += 1;
                            }
                            Err(e) => return Some(format!("after a request timeout: {e}")),
                        }
                        if self.trace.is_some() {
                            // The row is given up; replay goes on with the next.
                            self.trace_next += 1;
                        }
                        if self.open_gap_ns.is_none() {
                            conn.next_send = Some(self.after_response(now));
                        }
                        progress = true;
                    }
                }
                if conn.next_send.is_some() || !conn.inflight.is_empty() || conn.write_off.is_some()
                {
                    all_done = false;
                }
            }
            if all_done {
                return None;
            }
            if !progress {
                let now = self.now();
                *idle_ns += now.saturating_sub(pass_start);
                let nothing_owed = conns.iter().all(|c| c.inflight.is_empty());
                if nothing_owed && earliest_send != u64::MAX && earliest_send > now + 200_000 {
                    // Pacing (open loop, trace sleep): nothing to read, the next
                    // send is far off; wake a little early and spin the rest.
                    let until = (earliest_send - 100_000).min(now + 10_000_000);
                    std::thread::sleep(Duration::from_nanos(until - now));
                    *idle_ns += self.now().saturating_sub(now);
                } else if self.polling {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Closed loop: next send time after a response (trace: `sleep_time` later).
    fn after_response(&mut self, now: u64) -> u64 {
        match &self.trace {
            Some(rows) => {
                let sleep = rows.get(self.trace_next).map_or(0.0, |r| r.sleep_s);
                now + (sleep * self.trace_scale * 1e9) as u64
            }
            None => now,
        }
    }

    fn closed_msg(&self, what: &str) -> String {
        format!(
            "thread {}: connection to {} failed mid-run after {} completions: {what}",
            self.thread, self.addr, self.report.completed
        )
    }

    fn complete(&mut self, o: Outstanding, now: u64) {
        let from_send = now.saturating_sub(o.t_send);
        let last = now.saturating_sub(o.t_last_piece.max(o.t_send));
        let console = match self.latency {
            LatencyDef::LastPiece => last,
            LatencyDef::FromSend => from_send,
        };
        self.report.completed += 1;
        if self.trace.is_some() {
            self.trace_done += 1;
            self.trace_next += 1;
        }
        let c = &mut self.cur;
        if c.count == 0 || console < c.min_ns {
            c.min_ns = console;
        }
        c.max_ns = c.max_ns.max(console);
        c.count += 1;
        c.sum_ns += console;
        self.hist.saturating_record(console.max(1));
        // Completions counted in a warm-up second are excluded from the
        // samples (same attribution as the per-second lines).
        if self.second < self.skip_s {
            return;
        }
        self.from_send.saturating_record(from_send.max(1));
        self.last_piece.saturating_record(last.max(1));
        if self.stored >= self.max_samples {
            self.report.samples_dropped += 1;
            return;
        }
        let sample = Sample {
            thread: self.thread,
            seq: o.seq,
            t_send_ns: o.t_send,
            latency_ns: from_send,
            latency_last_piece_ns: last,
            slot: o.slot,
            request_bytes: o.request_bytes,
            response_bytes: o.response_bytes,
        };
        if let Some(chunk) = self.samples.last_mut() {
            chunk.push(sample);
            self.stored += 1;
            // Grow now, after the completion, never inside a timed request.
            if chunk.len() == chunk.capacity() {
                self.samples.push(Vec::with_capacity(SAMPLE_CHUNK));
            }
        }
    }
}

/// Names a peer that went away as such; other errors as they are.
fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            format!("the server closed the connection ({e})")
        }
        _ => e.to_string(),
    }
}

fn would_block(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}
