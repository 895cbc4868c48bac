//! `fracflow cpu-server`: the software baseline of Figure 16, a stand-in for
//! fperf's CPU server (`fperf -s -n K`, `docs/tools.md` §1.10, "fperf
//! §"), speaking the `-Z 0` protocol our client (and fperf's) sends.
//!
//! # Protocol
//!
//! Every request starts with fperf's 64-byte `test_info`
//! ([`fracflow_proto::TestInfo`], fperf §1.9), counted in its `req_size`
//! (`-X`); the rest of the request is the data.  The server answers exactly
//! `response_size` (`-R`) bytes, the first `-R` bytes of the function's
//! answer, zero-padded when `-R` is longer (fperf answers the first `-R`
//! bytes of a 4096-byte mbuf):
//!
//! | `-F` | answer |
//! | --- | --- |
//! | 0 | `-R` zero bytes, no computation (a network-only baseline) |
//! | 1 top_k | the 16 largest u32 LE words of the data, unsigned, largest first (64 bytes); computed natively |
//! | 2 cnn, 3 logit, 5 norm | what the accelerator answers for the same data, computed by the same kernel plugin the emulated device runs |
//!
//! For 2/3/5 the request is re-framed as the accelerator sees it: the
//! `test_info` line is overwritten in place by an fRAC header (`FIRST|LAST`,
//! top config `0xffff`) and the data follows, so the arithmetic is identical
//! by construction.  Data that is not whole 64-byte lines is zero-padded for
//! top_k and logit (zeros never enter the top 16 ahead of a real word;
//! logit's extra outputs are cut off); norm and cnn need whole lines (a zero
//! would move norm's minimum), and a request that is not is bad input.
//!
//! # fperf's bugs, fixed (not reproduced)
//!
//! * **No fixed 4096-byte buffer**: any `-X` from 64 to
//!   [`fracflow_proto::MAX_REQUEST_BYTES`] and any `-R` from 1 to the same.
//! * **Correct unsigned order** (fperf's comparator returns `(int)(b - a)`).
//!   fperf also sorts the `test_info` words with the data; we rank the data
//!   only, as the accelerator does, so the two can be compared.
//! * **No leak**: each connection owns one request and one answer buffer,
//!   reused for every request; they only grow (up to the limits above), and
//!   [`CpuServerStats::buffer_grows`] counts every growth.
//! * norm computes on its input (fperf's reads an uninitialised buffer).
//!
//! # Threading
//!
//! * One acceptor thread.
//! * One I/O thread per connection (blocking reads and writes, small
//!   stack): it reads a whole request into the connection's buffers, queues
//!   them to the workers, waits for them to come back and writes the answer.
//!   It computes nothing.
//! * `K` worker threads, pinned to cores `start_cpu + i` (wrapping over the
//!   available cores) when `start_cpu` is given, take requests from one
//!   shared bounded queue and compute.  So at most `K` requests are computed
//!   at once, the quantity Figure 16 varies.  The queue is work-conserving:
//!   a request waits only while all `K` workers are busy.  fperf instead
//!   hashes each connection to one thread, where a request can wait behind
//!   its own thread while another idles; under closed-loop load with many
//!   clients the two coincide closely, at low load ours is a little better.
//!   Buffers move by ownership through the queue and back, never copied.
//! * Cost of the hand-off: two thread wake-ups per request (a few µs on
//!   loopback), which fperf's busy-polling threads do not pay.  We chose
//!   blocking I/O over busy-polling so idle servers do not burn K cores on a
//!   shared host.
//!
//! # Bad input and limits
//!
//! A header with an unknown test mode, a mode other than rr/crr, a size
//! outside the limits, an unknown function, a function without a loaded
//! kernel, or data the kernel cannot take closes only that connection, with
//! a [`Level::Warn`] log line.  At most `max_connections` connections are
//! open (extra ones are accepted and closed at once, with a log line), so
//! memory is bounded by `max_connections × 2 × 65 472` bytes of buffers.  A
//! request must arrive whole within `request_timeout` of its first byte and
//! its answer be taken within the same time; a connection idle between
//! requests for `idle_timeout` is closed.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fracflow_proto::{
    Flags, HEADER_LEN, LINE, LINE_U32, MAX_REQUEST_BYTES, RequestHeader, TestInfo, TestMode, Unit,
};

use crate::build::CompiledUnit;
use crate::error::{Error, Result, io_err};
use crate::kernel::Kernel;
use crate::log::{Level, LogEvent, LogSink, discard};

/// Default bound on open connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default time a connection may sit between requests.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default time a request has to arrive whole and its answer to be taken.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest `-R` answered: as large as the largest request, the protocol's
/// limit (the client's `MAX_RESPONSE_BYTES` is the same).
pub const MAX_RESPONSE_BYTES: u32 = MAX_REQUEST_BYTES;

/// Words top_k returns (fperf's fixed k, and the accelerator's one line).
const TOP_K: usize = 16;
/// Stack of a connection thread: it only moves bytes; buffers are on the heap.
const CONN_STACK: usize = 128 << 10;

/// How the CPU server is run.
#[derive(Clone)]
pub struct CpuServerConfig {
    /// Listen address; port 0 picks one.
    pub listen: SocketAddr,
    /// `-n K`: compute threads.
    pub workers: usize,
    /// Worker `i` is pinned to core `start_cpu + i`, wrapping over the
    /// available cores; `None` = not pinned (fperf's default `-S`).
    pub start_cpu: Option<usize>,
    /// Function id (2 cnn, 3 logit, 5 norm; 1 top_k is native and needs
    /// none) → a compiled unit directory (`plugin.so` + `unit.json`, as
    /// [`crate::compile_unit`] writes) or a `plugin.so` itself.
    pub kernels: BTreeMap<u8, PathBuf>,
    /// Where log lines go.
    pub log: LogSink,
    /// Open connections at most; extra ones are closed at once.
    pub max_connections: usize,
    /// A connection silent this long between requests is closed.
    pub idle_timeout: Duration,
    /// A request must arrive whole within this time of its first byte, and
    /// its answer be taken within it.
    pub request_timeout: Duration,
}

impl std::fmt::Debug for CpuServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuServerConfig")
            .field("listen", &self.listen)
            .field("workers", &self.workers)
            .field("start_cpu", &self.start_cpu)
            .field("kernels", &self.kernels)
            .field("max_connections", &self.max_connections)
            .field("idle_timeout", &self.idle_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl CpuServerConfig {
    /// `workers` unpinned workers on `listen`, no kernels (top_k and `-F 0`
    /// only), default limits, log discarded.
    #[must_use]
    pub fn new(listen: SocketAddr, workers: usize) -> CpuServerConfig {
        CpuServerConfig {
            listen,
            workers,
            start_cpu: None,
            kernels: BTreeMap::new(),
            log: discard(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// The kernels of a build's plugin directory, for `--kernels DIR`: every
/// subdirectory of `dir` (or of `dir/plugins`, as [`crate::build_design`]
/// lays it out) holding a compiled unit with a function id, by that id;
/// top_k (1) is left out, being computed natively.
pub fn kernels_in(dir: &Path) -> Result<BTreeMap<u8, PathBuf>> {
    let plugins = dir.join("plugins");
    let root = if plugins.is_dir() {
        plugins
    } else {
        dir.to_path_buf()
    };
    let mut out = BTreeMap::new();
    let entries =
        std::fs::read_dir(&root).map_err(io_err(format!("reading {}", root.display())))?;
    for entry in entries {
        let path = entry
            .map_err(io_err(format!("reading {}", root.display())))?
            .path();
        if !path.join("unit.json").is_file() {
            continue;
        }
        let unit = CompiledUnit::load(&path)?;
        if let Some(id) = unit.spec.function.and_then(|f| u8::try_from(f).ok())
            && id != 1
        {
            out.insert(id, path);
        }
    }
    Ok(out)
}

/// Counters of a running server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuServerStats {
    /// Connections accepted and served (refused ones not counted).
    pub connections: u64,
    /// Requests computed and answered (counted as the answer is written).
    pub requests: u64,
    /// Connections closed for bad input.
    pub bad_input: u64,
    /// Times a connection's request or answer buffer had to grow: at most
    /// two per connection per new largest size, never per request.
    pub buffer_grows: u64,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    requests: AtomicU64,
    bad_input: AtomicU64,
    buffer_grows: AtomicU64,
}

/// What a worker computes for one request.
#[derive(Debug, Clone, Copy)]
enum Work {
    Zeros,
    TopK,
    Kernel(u8),
}

/// One connection's buffers and its current request, moved to a worker and
/// back.
struct Job {
    work: Work,
    /// `request[64..64 + data_len]` is the data; for a kernel the first line
    /// is the fRAC header and the tail is padded to whole lines.
    request: Vec<u8>,
    data_len: usize,
    response: Vec<u8>,
    response_len: usize,
    /// Set by the worker when the request cannot be answered.
    failure: Option<String>,
    reply: SyncSender<Job>,
}

#[derive(Clone, Copy)]
struct ConnInfo {
    id: u64,
    peer: Option<SocketAddr>,
}

struct ConnEntry {
    stream: TcpStream,
    handle: Option<JoinHandle<()>>,
}

struct Shared {
    log: LogSink,
    stopping: AtomicBool,
    max_connections: usize,
    idle_timeout: Duration,
    request_timeout: Duration,
    next_id: AtomicU64,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    counters: Counters,
    /// Functions with a loaded kernel (besides the native ones).
    kernel_units: BTreeMap<u8, Unit>,
}

impl Shared {
    fn log(&self, level: Level, conn: Option<ConnInfo>, message: impl Into<String>) {
        (self.log)(&LogEvent {
            level,
            conn: conn.map(|c| c.id),
            peer: conn.and_then(|c| c.peer),
            message: message.into(),
        });
    }

    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, ConnEntry>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Read-timeout granularity: deadlines and the stop flag are checked at
    /// least this often.
    fn tick(&self) -> Duration {
        (self.request_timeout.min(self.idle_timeout) / 4).max(Duration::from_millis(1))
    }
}

/// Starts CPU servers.
#[derive(Debug)]
pub struct CpuServer;

/// A CPU server serving on its own threads; stopped by
/// [`RunningCpuServer::stop`] or on drop.
pub struct RunningCpuServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    cores: Vec<Option<usize>>,
}

impl std::fmt::Debug for RunningCpuServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningCpuServer")
            .field("addr", &self.addr)
            .field("cores", &self.cores)
            .finish_non_exhaustive()
    }
}

/// Loads one configured kernel: a compiled unit directory or a plugin file.
fn load_kernel(id: u8, path: &Path) -> Result<Kernel> {
    let plugin = if path.is_dir() {
        CompiledUnit::load(path)?.plugin
    } else {
        path.to_path_buf()
    };
    let kernel = Kernel::load(&plugin)?;
    // A plugin answering another function would silently compute the wrong
    // thing for every request; refuse it at start instead.
    if kernel.unit().function_id() != Some(u32::from(id)) {
        return Err(Error::Plugin {
            unit: plugin.display().to_string(),
            message: format!(
                "implements {} (function {:?}), configured for function {id}",
                kernel.unit().name(),
                kernel.unit().function_id()
            ),
        });
    }
    if id == 1 {
        return Err(Error::Plugin {
            unit: plugin.display().to_string(),
            message: "function 1 (top_k) is computed natively; configure no kernel for it".into(),
        });
    }
    Ok(kernel)
}

impl CpuServer {
    /// Loads the kernels, binds, starts the workers and the acceptor.
    pub fn start(config: CpuServerConfig) -> Result<RunningCpuServer> {
        if config.workers == 0 {
            return Err(Error::Io {
                context: "starting the CPU server".into(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "-n must be at least 1"),
            });
        }
        let mut kernels = BTreeMap::new();
        let mut kernel_units = BTreeMap::new();
        for (&id, path) in &config.kernels {
            let kernel = load_kernel(id, path)?;
            kernel_units.insert(id, kernel.unit());
            kernels.insert(id, kernel);
        }
        let kernels = Arc::new(kernels);
        let listener = TcpListener::bind(config.listen)
            .map_err(io_err(format!("binding {}", config.listen)))?;
        let addr = listener
            .local_addr()
            .map_err(io_err("reading the bound address"))?;
        let max_connections = config.max_connections.max(1);
        let shared = Arc::new(Shared {
            log: config.log.clone(),
            stopping: AtomicBool::new(false),
            max_connections,
            idle_timeout: config.idle_timeout,
            request_timeout: config.request_timeout,
            next_id: AtomicU64::new(1),
            conns: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            kernel_units,
        });

        // Each connection has at most one job queued, so a queue as deep as
        // the connection limit never blocks a sender.
        let (jobs_tx, jobs_rx) = sync_channel::<Job>(max_connections);
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let all_cores = core_affinity::get_core_ids().unwrap_or_default();
        let (pinned_tx, pinned_rx) = sync_channel::<(usize, Option<usize>)>(config.workers);
        let mut workers = Vec::with_capacity(config.workers);
        for i in 0..config.workers {
            let core = config
                .start_cpu
                .filter(|_| !all_cores.is_empty())
                .map(|s| all_cores[(s + i) % all_cores.len()]);
            let rx = Arc::clone(&jobs_rx);
            let kernels = Arc::clone(&kernels);
            let pinned_tx = pinned_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("cpu-server-worker-{i}"))
                .spawn(move || {
                    // Pin only the threads we spawn, never the caller's.
                    let pinned = core
                        .filter(|c| core_affinity::set_for_current(*c))
                        .map(|c| c.id);
                    let _ = pinned_tx.send((i, pinned));
                    drop(pinned_tx);
                    worker_loop(&rx, &kernels);
                })
                .map_err(io_err("starting a worker thread"))?;
            workers.push(handle);
        }
        drop(pinned_tx);
        let mut cores = vec![None; config.workers];
        // Bounded: one message per worker; a worker that died before
        // reporting ends the iteration when every sender is gone.
        for (i, pinned) in pinned_rx.iter().take(config.workers) {
            cores[i] = pinned;
        }

        let shared2 = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name("cpu-server-accept".into())
            .spawn(move || accept_loop(&listener, &shared2, &jobs_tx))
            .map_err(io_err("starting the accept thread"))?;
        shared.log(
            Level::Info,
            None,
            format!(
                "cpu-server listening on {addr}; {} worker(s), cores {:?}; kernels for functions {:?}",
                config.workers,
                cores,
                shared.kernel_units.keys().collect::<Vec<_>>()
            ),
        );
        Ok(RunningCpuServer {
            addr,
            shared,
            acceptor: Some(acceptor),
            workers,
            cores,
        })
    }
}

fn worker_loop(rx: &Mutex<Receiver<Job>>, kernels: &BTreeMap<u8, Kernel>) {
    loop {
        // The lock is held only while waiting for the next job; the others
        // wait on the lock meanwhile, so exactly one thread sleeps in recv.
        let next = {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
            rx.recv()
        };
        // Every sender is gone: the acceptor and all connections ended.
        let Ok(mut job) = next else { return };
        compute(&mut job, kernels);
        let reply = job.reply.clone();
        // The connection may have gone (stop); then the buffers are dropped.
        let _ = reply.send(job);
    }
}

/// Fills `job.response` with exactly `job.response_len` bytes.
fn compute(job: &mut Job, kernels: &BTreeMap<u8, Kernel>) {
    let data = HEADER_LEN..HEADER_LEN + job.data_len;
    match job.work {
        Work::Zeros => {
            job.response.clear();
        }
        Work::TopK => {
            let top = top_k(&job.request[data]);
            job.response.clear();
            for word in top {
                job.response.extend_from_slice(&word.to_le_bytes());
            }
        }
        Work::Kernel(id) => {
            let Some(kernel) = kernels.get(&id) else {
                job.failure = Some(format!("no kernel for function {id}"));
                return;
            };
            // The re-framed request: fRAC header line + data padded to lines.
            let framed_len = HEADER_LEN + job.data_len.div_ceil(LINE) * LINE;
            let Some(frame) = job.request.get(..framed_len) else {
                job.failure = Some("internal: request buffer shorter than its frame".into());
                return;
            };
            if let Err(e) = kernel.run_into(frame, u16::MAX, &mut job.response) {
                job.failure = Some(format!("function {id}: {e}"));
                return;
            }
            // logit over zero padding answers extra lines: keep only the
            // answer to the real data (norm and cnn need whole lines).
            if kernel.unit() == Unit::Log {
                job.response.truncate(job.data_len);
            }
        }
    }
    // The first -R bytes of the answer, zero-padded (resize writes zeros
    // into every byte it adds, whatever the buffer held before).
    job.response.resize(job.response_len, 0);
}

/// The 16 largest u32 LE words of `data` (a ragged last word zero-padded),
/// unsigned, largest first; zeros where there are fewer than 16 words.
#[must_use]
pub fn top_k(data: &[u8]) -> [u32; TOP_K] {
    let mut top = [0u32; TOP_K];
    for chunk in data.chunks(4) {
        let mut bytes = [0u8; 4];
        bytes[..chunk.len()].copy_from_slice(chunk);
        let word = u32::from_le_bytes(bytes);
        // Zeros fill the list already, so a word at most the smallest kept
        // one changes nothing; otherwise insert it in order.
        if word <= top[TOP_K - 1] {
            continue;
        }
        let mut i = TOP_K - 1;
        while i > 0 && top[i - 1] < word {
            top[i] = top[i - 1];
            i -= 1;
        }
        top[i] = word;
    }
    top
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, jobs: &SyncSender<Job>) {
    for incoming in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match incoming {
            Ok(stream) => stream,
            Err(e) => {
                shared.log(Level::Error, None, format!("accept failed: {e}"));
                // Out of descriptors or similar: back off instead of
                // spinning on the same error.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = ConnInfo {
            id,
            peer: stream.peer_addr().ok(),
        };
        let clone = match stream.try_clone() {
            Ok(clone) => clone,
            Err(e) => {
                shared.log(
                    Level::Error,
                    Some(conn),
                    format!("cannot clone socket: {e}"),
                );
                continue;
            }
        };
        {
            let mut conns = shared.conns();
            if conns.len() >= shared.max_connections {
                drop(conns);
                shared.log(
                    Level::Warn,
                    Some(conn),
                    format!(
                        "refused: {} connections are open, the limit; closing this one",
                        shared.max_connections
                    ),
                );
                continue;
            }
            conns.insert(
                id,
                ConnEntry {
                    stream: clone,
                    handle: None,
                },
            );
        }
        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
        let worker_shared = Arc::clone(shared);
        let jobs = jobs.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("cpu-server-conn-{id}"))
            .stack_size(CONN_STACK)
            .spawn(move || {
                serve(stream, conn, &worker_shared, jobs);
                worker_shared.conns().remove(&id);
            });
        match spawned {
            Ok(handle) => {
                if let Some(entry) = shared.conns().get_mut(&id) {
                    entry.handle = Some(handle);
                }
            }
            Err(e) => {
                shared.conns().remove(&id);
                shared.log(
                    Level::Error,
                    Some(conn),
                    format!("cannot start a connection thread ({e}); closing"),
                );
            }
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// How reading a request's first part ended.
enum Fill {
    Done,
    /// The peer closed cleanly before sending a byte of this request.
    Closed,
}

/// Reads `buf` whole.  With `request_deadline` unset the connection is
/// between requests: the first byte may take `idle_timeout`, and its
/// arrival sets the deadline of the whole request to `request_timeout`
/// later; a set deadline carries over to the request's later parts.  The
/// stop flag ends it.
fn fill(
    stream: &mut TcpStream,
    buf: &mut [u8],
    shared: &Shared,
    request_deadline: &mut Option<Instant>,
) -> Result<Fill, String> {
    let idle_until = Instant::now() + shared.idle_timeout;
    let mut got = 0;
    // Bounded: each iteration reads at least one byte, or times out on a
    // tick and checks the deadline and the stop flag.
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) if request_deadline.is_none() => return Ok(Fill::Closed),
            Ok(0) => return Err(format!("peer closed after {got} of {} bytes", buf.len())),
            Ok(n) => {
                if request_deadline.is_none() {
                    *request_deadline = Some(Instant::now() + shared.request_timeout);
                }
                got += n;
            }
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                if shared.stopping.load(Ordering::Relaxed) {
                    return Err("server stopping".into());
                }
                let now = Instant::now();
                match *request_deadline {
                    None if now >= idle_until => {
                        return Err(format!("idle for {:?}", shared.idle_timeout));
                    }
                    Some(deadline) if now >= deadline => {
                        return Err(format!(
                            "request incomplete after {:?} ({got} of {} bytes of this part)",
                            shared.request_timeout,
                            buf.len()
                        ));
                    }
                    _ => {}
                }
            }
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
    Ok(Fill::Done)
}

/// Checks a `test_info` and says what to compute, or why it is bad input.
fn plan(info: &TestInfo, shared: &Shared) -> Result<(Work, usize, usize), String> {
    if !matches!(info.test, TestMode::Rr | TestMode::Crr) {
        return Err(format!(
            "test mode {:?}: only rr and crr are served",
            info.test
        ));
    }
    if info.req_size < HEADER_LEN as u32 || info.req_size > MAX_REQUEST_BYTES {
        return Err(format!(
            "request size {} outside {HEADER_LEN}..={MAX_REQUEST_BYTES}",
            info.req_size
        ));
    }
    if info.response_size == 0 || info.response_size > MAX_RESPONSE_BYTES {
        return Err(format!(
            "response size {} outside 1..={MAX_RESPONSE_BYTES}",
            info.response_size
        ));
    }
    let data_len = info.req_size as usize - HEADER_LEN;
    let work = match info.func {
        0 => Work::Zeros,
        1 => Work::TopK,
        f => {
            let unit = u8::try_from(f)
                .ok()
                .and_then(|id| shared.kernel_units.get(&id).map(|u| (id, *u)));
            let Some((id, unit)) = unit else {
                return Err(match Unit::from_function_id(f) {
                    Some(u) => format!(
                        "function {f} ({}) has no kernel loaded (start the server with its plugin)",
                        u.name()
                    ),
                    None => format!("unknown function {f} (known: 0, 1, 2, 3, 5)"),
                });
            };
            if matches!(unit, Unit::Norm | Unit::Cnn) && !data_len.is_multiple_of(LINE) {
                return Err(format!(
                    "function {f} ({}) needs whole 64-byte data lines; got {data_len} bytes",
                    unit.name()
                ));
            }
            if unit
                .response_size(info.req_size.div_ceil(LINE_U32) * LINE_U32)
                .is_none()
            {
                return Err(format!(
                    "function {f} ({}) answers no {}-byte request",
                    unit.name(),
                    info.req_size
                ));
            }
            Work::Kernel(id)
        }
    };
    Ok((work, data_len, info.response_size as usize))
}

/// Resizes `buf` to `len`, counting growth of its allocation.
fn ensure_len(buf: &mut Vec<u8>, len: usize, shared: &Shared) {
    if buf.capacity() < len {
        shared.counters.buffer_grows.fetch_add(1, Ordering::Relaxed);
    }
    buf.resize(len, 0);
}

/// Serves one connection until it closes, breaks the protocol or the
/// server stops.
fn serve(mut stream: TcpStream, conn: ConnInfo, shared: &Shared, jobs: SyncSender<Job>) {
    // Small answers must leave at once, not wait for Nagle.
    let _ = stream.set_nodelay(true);
    if stream.set_read_timeout(Some(shared.tick())).is_err()
        || stream
            .set_write_timeout(Some(shared.request_timeout))
            .is_err()
    {
        shared.log(
            Level::Error,
            Some(conn),
            "cannot set socket timeouts; closing",
        );
        return;
    }
    let (reply_tx, reply_rx) = sync_channel::<Job>(1);
    let mut job = Job {
        work: Work::Zeros,
        request: Vec::new(),
        data_len: 0,
        response: Vec::new(),
        response_len: 0,
        failure: None,
        reply: reply_tx,
    };
    ensure_len(&mut job.request, HEADER_LEN, shared);
    let bad = |message: String| {
        shared.counters.bad_input.fetch_add(1, Ordering::Relaxed);
        shared.log(Level::Warn, Some(conn), format!("{message}; closing"));
    };
    // Bounded by the peer: each iteration consumes one whole request or ends.
    loop {
        let mut line = [0u8; HEADER_LEN];
        let mut deadline = None;
        match fill(&mut stream, &mut line, shared, &mut deadline) {
            Ok(Fill::Done) => {}
            Ok(Fill::Closed) => {
                shared.log(Level::Info, Some(conn), "closed by peer");
                return;
            }
            Err(why) => {
                shared.log(Level::Info, Some(conn), format!("closed: {why}"));
                return;
            }
        }
        let info = match TestInfo::decode(&line) {
            Ok(info) => info,
            Err(e) => return bad(format!("malformed test_info header: {e}")),
        };
        let (work, data_len, response_len) = match plan(&info, shared) {
            Ok(p) => p,
            Err(why) => return bad(why),
        };
        let framed_len = HEADER_LEN + data_len.div_ceil(LINE) * LINE;
        ensure_len(&mut job.request, framed_len, shared);
        if let Err(why) = fill(
            &mut stream,
            &mut job.request[HEADER_LEN..HEADER_LEN + data_len],
            shared,
            &mut deadline,
        ) {
            shared.log(Level::Info, Some(conn), format!("closed: {why}"));
            return;
        }
        // The padding of a ragged last line is zero, not a stale request.
        job.request[HEADER_LEN + data_len..].fill(0);
        if let Work::Kernel(_) = work {
            let header = RequestHeader::accelerator(
                0,
                u32::try_from(framed_len).unwrap_or(MAX_REQUEST_BYTES),
                Flags::FIRST_LAST,
            );
            job.request[..HEADER_LEN].copy_from_slice(&header.encode());
        }
        // Grown here on the connection's thread, so a worker never
        // allocates and the counter sees every growth.
        if job.response.capacity() < response_len.max(framed_len) {
            shared.counters.buffer_grows.fetch_add(1, Ordering::Relaxed);
            job.response
                .reserve(response_len.max(framed_len) - job.response.len());
        }
        job.work = work;
        job.data_len = data_len;
        job.response_len = response_len;
        job.failure = None;
        if jobs.send(job).is_err() {
            shared.log(Level::Error, Some(conn), "workers are gone; closing");
            return;
        }
        job = match reply_rx.recv() {
            Ok(job) => job,
            Err(_) => {
                shared.log(
                    Level::Error,
                    Some(conn),
                    "a worker lost the request; closing",
                );
                return;
            }
        };
        if let Some(why) = job.failure.take() {
            return bad(why);
        }
        // Counted before the write so a client that has its answer sees it.
        shared.counters.requests.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = stream.write_all(&job.response[..job.response_len]) {
            shared.log(
                Level::Info,
                Some(conn),
                format!("closed: answer not taken ({e})"),
            );
            return;
        }
        if info.test == TestMode::Crr {
            // crr: the client reconnects for every request.
            let _ = stream.shutdown(Shutdown::Write);
        }
    }
}

impl RunningCpuServer {
    /// The listening address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The core each worker is pinned to (`None`: not pinned).
    #[must_use]
    pub fn worker_cores(&self) -> &[Option<usize>] {
        &self.cores
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> CpuServerStats {
        let c = &self.shared.counters;
        CpuServerStats {
            connections: c.connections.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            bad_input: c.bad_input.load(Ordering::Relaxed),
            buffer_grows: c.buffer_grows.load(Ordering::Relaxed),
        }
    }

    /// Open connections.
    #[must_use]
    pub fn open_connections(&self) -> usize {
        self.shared.conns().len()
    }

    /// Stops accepting, closes every connection and joins every thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.shared.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut acceptor_left = false;
        if let Some(acceptor) = self.acceptor.take() {
            // Wake the blocking accept with a connection of our own; if that
            // fails the thread is left behind rather than joined forever.
            let ip = match self.addr.ip() {
                IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
                ip => ip,
            };
            let wake = SocketAddr::new(ip, self.addr.port());
            if TcpStream::connect_timeout(&wake, Duration::from_secs(2)).is_ok() {
                let _ = acceptor.join();
            } else {
                acceptor_left = true;
            }
        }
        let entries: Vec<ConnEntry> = self.shared.conns().drain().map(|(_, e)| e).collect();
        for entry in &entries {
            let _ = entry.stream.shutdown(Shutdown::Both);
        }
        for entry in entries {
            if let Some(handle) = entry.handle {
                let _ = handle.join();
            }
        }
        // The acceptor and every connection held the queue's senders; with
        // them gone the workers' recv fails and they exit.  An acceptor left
        // behind still holds a sender, so its workers are left behind too
        // rather than joined forever.
        if !acceptor_left {
            for worker in self.workers.drain(..) {
                let _ = worker.join();
            }
        }
        self.shared.log(Level::Info, None, "stopped");
    }
}

impl Drop for RunningCpuServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}
