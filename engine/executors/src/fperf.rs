//! An adapter for the real fperf (the libtpa/DPDK client) on a real testbed: builds the command line the fRAC
//! artifact's `eval/run.py` uses, runs it through [`crate::process::run`], publishes the log only when it is
//! complete, and turns the log and the per-thread `hugepage_thread_*.txt` files into the embedded client's
//! records ([`SecondRecord`], [`Sample`]), so both clients' results are written and read the same way.
//!
//! Facts: `docs/tools.md` §1.6–1.7, §1.11 ("§1.x" below) and `docs/frac.md` §2.7, §6.1.
//!
//! # The command
//!
//! `[sudo…] timeout -k 15 T env TPA_ID=… TPA_ETH_DEV=… TPA_CFG=… <tpa> run <fperf> -c HOST -p PORT -S CPU
//! <args…> [-E trace] [-L 1 -D dir]`, with `T = d + 120`, or `d + 120 + d/4` (integer division) with a
//! trace. The `TPA_*` variables travel in argv through `env` because sudo resets the environment.
//!
//! # Files
//!
//! * stdout is fperf's log. It is written to `<log>.part` and renamed to `<log>` only when fperf exited 0,
//!   the log has the artifact's completion line (the `Total-Throughput` line of second `d − 1`, or
//!   `trace: all N rows replayed`), it parses, and (with `-L 1`) every thread left latencies. So the final
//!   name exists after a call **if and only if** the status is [`FperfStatus::Ok`]. Otherwise the `.part`
//!   file is **kept** for diagnosis (as the artifact does) and a stale final log from an earlier attempt is
//!   removed first, so it can never be mistaken for this run's.
//! * stderr is appended to `<log>.stderr` (truncated at the start of each call).
//! * `-D` is a fresh short directory `/tmp/feXXXXXXXX`: old fperf joins `-D` and the file name in a 64-byte
//!   buffer (§1.7), so a long `$TMPDIR` or work directory would be cut. The per-thread files are moved
//!   from there into `work_dir` and the directory is removed.
//!
//! # What a `hugepage_thread_<i>.txt` holds, and what a [`Sample`] gets from it
//!
//! One decimal line per completed request: fperf's latency in ns (last request piece accepted → last
//! response byte read, `CLOCK_REALTIME`), in completion order, **no timestamp, no request id, no size**.
//! With a trace (`-E`) each request adds `[ns] trace_send func=F msg_bytes=M req_bytes=R resp_bytes=S
//! sleep_sec=T sid=C` before it (stamped when the first piece is written) and `[ns] trace_resp bytes=S
//! latency_us=L` after it (stamped when the response is in). A sample is filled as follows:
//!
//! | field | plain run | trace run |
//! |---|---|---|
//! | `thread` | the file's `<i>` | same |
//! | `seq` | line index among the thread's latency lines (skipped ones count) | same |
//! | `latency_last_piece_ns` | the line | the line |
//! | `latency_ns` (from send) | **the line too**: fperf does not measure from the first byte | `trace_resp` stamp − `trace_send` stamp |
//! | `t_send_ns` | **0: unknown** | `trace_send` stamp − the thread's first `trace_send` stamp |
//! | `slot` | `-K` (0 when absent) | `func` through the built-in map 1→0, 3→1, 2→2, 5→3 (a `-M` map is not read) |
//! | `request_bytes` | `-X` (else `-m`, else 1000) | `req_bytes` |
//! | `response_bytes` | `-R` (else `-m`, else 1000) | `resp_bytes` |
//!
//! # Warm-up
//!
//! The file has no timestamps, so the first `skip_s` seconds are cut as the artifact does: for thread `i`,
//! drop as many leading latency lines as the log's `count=` values of `.i` for seconds `< skip_s`.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fracflow_client::{LatencyDef, ParsedLog, Sample, SecondRecord, ThreadSecond, parse_fperf_log};
use fracflow_core::Cancel;

use crate::process::{self, Ending, Grace, Spawn};

/// The artifact's `TPA_ID` when one process runs.
pub const DEFAULT_TPA_ID: &str = "client";
/// The artifact's `TPA_CFG` default (no TSO; 8 GB of hugepages per process).
pub const DEFAULT_TPA_CFG: &str =
    "tcp {tso = 0; } dpdk { socket-mem = 8192; mbuf_mem_size = 6GB; }";
/// `timeout -k`: seconds between timeout's TERM and its KILL.
pub const KILL_AFTER_S: u64 = 15;
/// Seconds the artifact allows on top of the run length (DPDK start-up, hugepage mapping, log writing).
pub const SLACK_S: u64 = 120;
/// `timeout`'s exit code when the limit was hit.
pub const TIMEOUT_EXIT: i32 = 124;
/// fperf's `-d` default.
const DEFAULT_DURATION_S: u32 = 10;
/// Our own backstop beyond `timeout`'s limit and kill delay, in case `timeout` itself cannot be signalled
/// (it runs as root under sudo).
const BACKSTOP_S: u64 = 30;

/// One fperf client process, as the artifact launches it.
#[derive(Debug, Clone, PartialEq)]
pub struct FperfInvocation {
    /// libtpa's `tpa` wrapper.
    pub tpa: PathBuf,
    /// The fperf binary (`build/bin/app/fperf`).
    pub fperf: PathBuf,
    /// The privilege prefix: `["sudo"]`, `["sudo", "-n"]` (never prompt), or empty when already root.
    pub sudo: Vec<String>,
    /// `TPA_ID` (`client`; `client0`, `client1`… when several run together).
    pub tpa_id: String,
    /// `TPA_ETH_DEV`: the NIC's interface name.
    pub nic: String,
    /// `TPA_CFG`.
    pub tpa_cfg: String,
    /// `-S`: thread *i* is pinned to `start_cpu + i`.
    pub start_cpu: usize,
    /// `-c`.
    pub host: String,
    /// `-p`.
    pub port: u16,
    /// The template's arguments (`-t rr -d … -n … -m … -X … -R … -C … -Z … -K …`), without `-c -p -S -E -L -D`.
    pub args: Vec<String>,
    /// `-E`: a trace to replay.
    pub trace: Option<PathBuf>,
    /// `-L 1 -D <dir>`: keep per-request latencies.
    pub latency_log: bool,
    /// The run length `d` in seconds. `None`: the `-d` of `args`, else, with a trace, `ceil(Σ sleep_time)`
    /// (the artifact's rule), else fperf's default 10.
    pub duration_s: Option<u32>,
    /// Warm-up seconds cut from each thread's samples (the artifact's `samples.skip`).
    pub skip_s: u32,
    /// Extra environment for the spawned process (not fperf's: sudo resets it), e.g. `PATH`.
    pub spawn_env: Vec<(String, String)>,
}

impl FperfInvocation {
    /// The artifact's defaults: `sudo`, `TPA_ID=client`, the default `TPA_CFG`, no pinning offset, latency log on.
    pub fn new(
        tpa: impl Into<PathBuf>,
        fperf: impl Into<PathBuf>,
        nic: &str,
        host: &str,
        port: u16,
        args: Vec<String>,
    ) -> FperfInvocation {
        FperfInvocation {
            tpa: tpa.into(),
            fperf: fperf.into(),
            sudo: vec!["sudo".to_owned()],
            tpa_id: DEFAULT_TPA_ID.to_owned(),
            nic: nic.to_owned(),
            tpa_cfg: DEFAULT_TPA_CFG.to_owned(),
            start_cpu: 0,
            host: host.to_owned(),
            port,
            args,
            trace: None,
            latency_log: true,
            duration_s: None,
            skip_s: 0,
            spawn_env: Vec::new(),
        }
    }

    /// The command line for a run whose `-D` directory is `log_dir` (used only with `latency_log`).
    pub fn command(&self, log_dir: &Path) -> Result<FperfCommand, FperfError> {
        let d = self.duration()?;
        let d64 = u64::from(d);
        // A trace's rows wait on responses, so a slow server stretches the run: the artifact allows a quarter more.
        let timeout_s = d64 + SLACK_S + if self.trace.is_some() { d64 / 4 } else { 0 };
        let env = vec![
            ("TPA_ID".to_owned(), self.tpa_id.clone()),
            ("TPA_ETH_DEV".to_owned(), self.nic.clone()),
            ("TPA_CFG".to_owned(), self.tpa_cfg.clone()),
        ];
        let mut argv: Vec<String> = self.sudo.clone();
        argv.extend([
            "timeout".to_owned(),
            "-k".to_owned(),
            KILL_AFTER_S.to_string(),
            timeout_s.to_string(),
            "env".to_owned(),
        ]);
        argv.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
        argv.extend([
            self.tpa.display().to_string(),
            "run".to_owned(),
            self.fperf.display().to_string(),
            "-c".to_owned(),
            self.host.clone(),
            "-p".to_owned(),
            self.port.to_string(),
            "-S".to_owned(),
            self.start_cpu.to_string(),
        ]);
        argv.extend(self.args.iter().cloned());
        if let Some(trace) = &self.trace {
            argv.extend(["-E".to_owned(), trace.display().to_string()]);
        }
        if self.latency_log {
            argv.extend([
                "-L".to_owned(),
                "1".to_owned(),
                "-D".to_owned(),
                log_dir.display().to_string(),
            ]);
        }
        // `argv` starts with "timeout" at least, so the split always succeeds.
        let (program, args) = argv
            .split_first()
            .map(|(p, rest)| (p.clone(), rest.to_vec()))
            .unwrap_or_default();
        Ok(FperfCommand {
            program,
            args,
            env,
            timeout_s,
        })
    }

    /// `d`: explicit, else `-d`, else from the trace, else fperf's default.
    pub fn duration(&self) -> Result<u32, FperfError> {
        let from_args = match last_flag(&self.args, "-d") {
            Some(text) => Some(parse_duration(text).ok_or_else(|| {
                FperfError::Args(format!("-d {text:?} is not a duration (N, Ns, Nm or Nh)"))
            })?),
            None => None,
        };
        match (self.duration_s, from_args) {
            (Some(d), Some(a)) if d != a => Err(FperfError::Args(format!(
                "duration_s {d} disagrees with `-d {a}` in the fperf arguments"
            ))),
            (Some(d), _) | (None, Some(d)) => Ok(d),
            (None, None) => match &self.trace {
                Some(trace) => Ok(TraceSummary::read(trace)?.seconds),
                None => Ok(DEFAULT_DURATION_S),
            },
        }
    }

    /// `-n`, fperf's client threads (1 by default).
    pub fn threads(&self) -> Result<u32, FperfError> {
        match last_flag(&self.args, "-n") {
            None => Ok(1),
            Some(text) => parse_size(text)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| FperfError::Args(format!("-n {text:?} is not a thread count"))),
        }
    }

    /// What plain-run samples get for slot and sizes (fperf writes none of them per request).
    fn request_shape(&self) -> Result<Shape, FperfError> {
        let size = |flag: &str| -> Result<Option<u32>, FperfError> {
            last_flag(&self.args, flag)
                .map(|text| {
                    parse_size(text)
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| FperfError::Args(format!("{flag} {text:?} is not a size")))
                })
                .transpose()
        };
        let piece = size("-m")?;
        // Newer fperf defaults -X/-R to -m; older ones to 1000 whatever -m is. -m alone is the newer reading.
        let default = piece.unwrap_or(1000);
        let slot = match last_flag(&self.args, "-K") {
            None => 0,
            Some(text) => parse_int(text)
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| FperfError::Args(format!("-K {text:?} is not a slot")))?,
        };
        Ok(Shape {
            slot,
            request_bytes: size("-X")?.unwrap_or(default),
            response_bytes: size("-R")?.unwrap_or(default),
        })
    }
}

/// The request shape of a run (`-K`, `-X`, `-R`): what a latency line without its own `trace_send` stands for.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub slot: u16,
    pub request_bytes: u32,
    pub response_bytes: u32,
}

/// The process to start: `program args…`. `env` is the `TPA_*` triple exactly as `args` sets it through
/// `env` (for records such as a manifest); it is already in argv and needs no separate setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FperfCommand {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The limit given to `timeout`.
    pub timeout_s: u64,
}

impl FperfCommand {
    /// The whole command line, program first.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.clone())
            .chain(self.args.iter().cloned())
            .collect()
    }
}

/// What the artifact needs from a trace: its rows (for `trace: all N rows replayed`) and `d`. Read here
/// rather than with the embedded client's validating parser because fperf versions disagree on what
/// `request_size` means (§1.11); only the row count and `sleep_time` matter to the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceSummary {
    pub rows: u64,
    /// `ceil(Σ sleep_time)`.
    pub seconds: u32,
}

impl TraceSummary {
    pub fn read(path: &Path) -> Result<TraceSummary, FperfError> {
        let bad = |why: String| FperfError::Trace {
            path: path.to_path_buf(),
            why,
        };
        let text = fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let mut lines = text.lines();
        let header = lines.next().unwrap_or_default().replace(' ', "");
        if header.trim() != "app,sleep_time,request_size,response_size" {
            return Err(bad(format!(
                "header {header:?} is not app,sleep_time,request_size,response_size"
            )));
        }
        let (mut rows, mut sleep) = (0u64, 0f64);
        for (i, line) in lines.enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value = line
                .split(',')
                .nth(1)
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| bad(format!("line {}: no sleep_time >= 0", i + 2)))?;
            rows += 1;
            sleep += value;
        }
        let seconds = sleep.ceil();
        if seconds > f64::from(u32::MAX) {
            return Err(bad(format!("{sleep} s of sleep_time is too long")));
        }
        Ok(TraceSummary {
            rows,
            seconds: seconds as u32,
        })
    }
}

/// How a run ended, with the artifact's status words ([`FperfStatus::label`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FperfStatus {
    /// Exited 0 with a complete log (and every thread's latencies): the log is published.
    Ok,
    /// `timeout` hit its limit (exit 124), or our backstop beyond it.
    TimedOut,
    /// Non-zero exit, a signal, sudo refusing, or a log that does not parse.
    Failed { reason: String },
    /// Exited 0 but the log or the latency files lack something.
    Incomplete { reason: String },
    /// Cancelled by the engine.
    Interrupted,
}

impl FperfStatus {
    /// `ok`, `timed out`, `failed: …`, `incomplete: …`, `interrupted`.
    pub fn label(&self) -> String {
        match self {
            FperfStatus::Ok => "ok".to_owned(),
            FperfStatus::TimedOut => "timed out".to_owned(),
            FperfStatus::Failed { reason } => format!("failed: {reason}"),
            FperfStatus::Incomplete { reason } => format!("incomplete: {reason}"),
            FperfStatus::Interrupted => "interrupted".to_owned(),
        }
    }
}

/// What a run produced. Samples and records are filled from whatever fperf left, whatever the status.
#[derive(Debug, Clone)]
pub struct FperfResult {
    pub status: FperfStatus,
    /// How the process ended.
    pub ending: Ending,
    /// What was run.
    pub command: FperfCommand,
    /// The final log when the status is ok, else the kept `<log>.part`.
    pub log: PathBuf,
    /// stderr of the whole command (sudo, timeout, tpa, fperf).
    pub stderr_log: PathBuf,
    /// The log parsed back (empty when it does not parse).
    pub parsed: ParsedLog,
    /// Per-second records built from the log; p50/p99 come from the latency files (0 without them).
    pub seconds: Vec<SecondRecord>,
    /// Per-request samples after the warm-up cut, thread by thread.
    pub samples: Vec<Sample>,
    /// Latency lines dropped by the warm-up cut, per thread.
    pub skipped: BTreeMap<u32, u64>,
    /// The per-thread files, moved into the work directory.
    pub sample_files: Vec<PathBuf>,
}

impl FperfResult {
    /// Writes the samples like the embedded client's `--samples`.
    pub fn write_samples(&self, path: &Path) -> Result<(), fracflow_client::samples::SamplesError> {
        fracflow_client::write_samples_parquet(path, &self.samples)
    }
}

/// The adapter could not do its own part (bad arguments, files, spawning); fperf's failures are statuses.
#[derive(Debug)]
pub enum FperfError {
    /// The fperf arguments cannot be read.
    Args(String),
    /// The trace cannot be read.
    Trace { path: PathBuf, why: String },
    /// A file or directory operation failed.
    Io { path: PathBuf, source: io::Error },
    /// The command could not be started.
    Spawn { program: String, source: io::Error },
}

impl fmt::Display for FperfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FperfError::Args(why) => write!(f, "fperf arguments: {why}"),
            FperfError::Trace { path, why } => write!(f, "trace {}: {why}", path.display()),
            FperfError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            FperfError::Spawn { program, source } => write!(f, "cannot run {program}: {source}"),
        }
    }
}

impl std::error::Error for FperfError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FperfError::Io { source, .. } | FperfError::Spawn { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> FperfError + '_ {
    move |source| FperfError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `<log>` + `suffix`, keeping the whole file name (`run.log` → `run.log.part`).
fn sibling(log: &Path, suffix: &str) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Runs fperf once: `work_dir` is its working directory and receives the per-thread latency files; `log` is
/// the final name of its stdout (see the module docs for `.part`, `.stderr` and when `log` appears).
pub fn run_fperf(
    inv: &FperfInvocation,
    work_dir: &Path,
    log: &Path,
    cancel: &Cancel,
) -> Result<FperfResult, FperfError> {
    let mut inv = inv.clone();
    let trace = inv.trace.as_deref().map(TraceSummary::read).transpose()?;
    if inv.duration_s.is_none() && last_flag(&inv.args, "-d").is_none() {
        inv.duration_s = trace.map(|t| t.seconds);
    }
    let duration = inv.duration()?;
    let threads = inv.threads()?;
    let shape = inv.request_shape()?;

    let part = sibling(log, ".part");
    let stderr_log = sibling(log, ".stderr");
    if let Some(parent) = log.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    fs::create_dir_all(work_dir).map_err(io_err(work_dir))?;
    // An earlier attempt's log must not stand for this one's.
    for stale in [log, part.as_path()] {
        match fs::remove_file(stale) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(stale)(e)),
            _ => {}
        }
    }
    fs::write(&stderr_log, b"").map_err(io_err(&stderr_log))?;

    let log_dir = if inv.latency_log {
        Some(short_temp_dir()?)
    } else {
        None
    };
    let command = inv.command(log_dir.as_deref().unwrap_or(Path::new("")))?;
    let program = match resolve_program(&command.program, &inv.spawn_env) {
        Ok(p) => p,
        Err(source) => {
            if let Some(dir) = &log_dir {
                let _ = fs::remove_dir_all(dir);
            }
            return Err(FperfError::Spawn {
                program: command.program.clone(),
                source,
            });
        }
    };
    let spawn = Spawn {
        program,
        args: command.args.clone(),
        env: inv.spawn_env.clone(),
        cwd: work_dir.to_path_buf(),
        log: stderr_log.clone(),
        timeout: Some(Duration::from_secs(
            command.timeout_s + KILL_AFTER_S + BACKSTOP_S,
        )),
        grace: Grace::default(),
    };
    let finished = process::run(&spawn, cancel);
    let finished = match finished {
        Ok(f) => f,
        Err(source) => {
            if let Some(dir) = &log_dir {
                let _ = fs::remove_dir_all(dir);
            }
            return Err(FperfError::Spawn {
                program: command.program.clone(),
                source,
            });
        }
    };
    fs::write(&part, &finished.stdout).map_err(io_err(&part))?;
    let text = String::from_utf8_lossy(&finished.stdout);
    let stderr_text = fs::read_to_string(&stderr_log).unwrap_or_default();

    let mut status = status_of(&finished.ending, &stderr_text, &inv.sudo);
    if status == FperfStatus::Ok {
        let complete = match trace {
            Some(t) => {
                let line = format!("trace: all {} rows replayed", t.rows);
                text.lines().any(|l| l.trim() == line)
            }
            None => has_last_second(&text, duration),
        };
        if !complete {
            status = FperfStatus::Incomplete {
                reason: match trace {
                    Some(t) => format!("no `trace: all {} rows replayed` line", t.rows),
                    None => format!(
                        "no Total-Throughput line for second {} (of -d {duration})",
                        duration.saturating_sub(1)
                    ),
                },
            };
        }
    }
    let parsed = match parse_fperf_log(&text) {
        Ok(parsed) => parsed,
        Err(e) => {
            if status == FperfStatus::Ok {
                status = FperfStatus::Failed {
                    reason: format!("the log does not parse: {e}"),
                };
            }
            ParsedLog::default()
        }
    };

    let mut samples = Vec::new();
    let mut skipped = BTreeMap::new();
    let mut sample_files = Vec::new();
    let mut per_thread: BTreeMap<u32, Vec<Sample>> = BTreeMap::new();
    if let Some(dir) = &log_dir {
        let files = collect_thread_files(dir, work_dir);
        let _ = fs::remove_dir_all(dir);
        let files = files?;
        for (thread, path) in &files {
            let text = fs::read_to_string(path).map_err(io_err(path))?;
            match parse_thread_file(&text, *thread, shape) {
                Ok(all) => {
                    per_thread.insert(*thread, all);
                }
                Err(why) if status == FperfStatus::Ok => {
                    status = FperfStatus::Failed {
                        reason: format!("{}: {why}", path.display()),
                    };
                }
                Err(_) => {}
            }
            sample_files.push(path.clone());
        }
        for (thread, all) in &per_thread {
            let drop = warmup_count(&parsed, *thread, inv.skip_s);
            let cut = usize::try_from(drop).unwrap_or(usize::MAX).min(all.len());
            skipped.insert(*thread, cut as u64);
            samples.extend_from_slice(&all[cut..]);
        }
        if status == FperfStatus::Ok
            && let Some(reason) = sample_problem(threads, &per_thread, &skipped)
        {
            status = FperfStatus::Incomplete { reason };
        }
    }
    let seconds = second_records(&parsed, &per_thread, inv.skip_s);

    let published = if status == FperfStatus::Ok {
        fs::rename(&part, log).map_err(io_err(log))?;
        log.to_path_buf()
    } else {
        part
    };
    Ok(FperfResult {
        status,
        ending: finished.ending,
        command,
        log: published,
        stderr_log,
        parsed,
        seconds,
        samples,
        skipped,
        sample_files,
    })
}

/// `sudo`/`timeout` as an absolute path, looked up in the child's PATH (`spawn_env` first, else ours).
/// Needed because the process helper hands duct a `PathBuf`, which duct reads as `./name` when no
/// spawner is installed (library use and tests), and because the child's PATH is the one that should
/// decide.
fn resolve_program(name: &str, spawn_env: &[(String, String)]) -> io::Result<PathBuf> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let path = spawn_env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| std::ffi::OsString::from(v))
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("`{name}` is not on PATH ({})", path.to_string_lossy()),
            )
        })
}

/// The artifact's completion rule without a trace: a line `^\s*<d-1>\s+\S+\s+Total-Throughput`.
fn has_last_second(text: &str, duration: u32) -> bool {
    let last = duration.saturating_sub(1).to_string();
    text.lines().any(|line| {
        let mut tokens = line.split_whitespace();
        tokens.next() == Some(last.as_str())
            && tokens.next().is_some()
            && tokens.next() == Some("Total-Throughput")
    })
}

fn status_of(ending: &Ending, stderr: &str, sudo: &[String]) -> FperfStatus {
    let last_line = || {
        stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| format!(" ({})", l.trim()))
            .unwrap_or_default()
    };
    match *ending {
        Ending::Exited(0) => FperfStatus::Ok,
        Ending::Exited(TIMEOUT_EXIT) | Ending::TimedOut => FperfStatus::TimedOut,
        Ending::Cancelled => FperfStatus::Interrupted,
        Ending::Exited(code) => {
            // sudo -n says why on stderr and exits 1 before anything else runs.
            let refused = !sudo.is_empty()
                && stderr.lines().any(|l| {
                    l.starts_with("sudo:")
                        && (l.contains("password is required")
                            || l.contains("terminal is required"))
                });
            let reason = if refused {
                format!(
                    "sudo refused to run fperf without a password{}: allow this user passwordless sudo \
                     (`sudo -n true` must succeed), run `sudo -v` first, or run as root with an empty sudo prefix",
                    last_line()
                )
            } else {
                match code {
                    // GNU timeout's own codes: its KILL after `-k`, its own failure, the command not runnable.
                    137 => format!(
                        "killed (SIGKILL; timeout sends it {KILL_AFTER_S} s after the limit){}",
                        last_line()
                    ),
                    125 => format!("timeout itself failed{}", last_line()),
                    126 => format!("the command could not be executed{}", last_line()),
                    127 => format!("the command was not found{}", last_line()),
                    _ => format!("exited with code {code}{}", last_line()),
                }
            };
            FperfStatus::Failed { reason }
        }
        Ending::Signalled(signal) => FperfStatus::Failed {
            reason: format!("killed by signal {signal}{}", last_line()),
        },
    }
}

/// A fresh `/tmp/feXXXXXXXX` (see the module docs for why short and why `/tmp`).
fn short_temp_dir() -> Result<PathBuf, FperfError> {
    let base = Path::new("/tmp");
    let mut seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ (u64::from(std::process::id()) << 32);
    for _ in 0..64 {
        // splitmix64: distinct names for concurrent runs in one process without a random-number crate.
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let dir = base.join(format!("fe{:08x}", z as u32));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(&dir)(e)),
        }
    }
    Err(FperfError::Io {
        path: base.to_path_buf(),
        source: io::Error::new(io::ErrorKind::AlreadyExists, "no free fe* directory name"),
    })
}

/// Moves every `hugepage_thread_<i>.txt` from `from` into `to`, by thread.
fn collect_thread_files(from: &Path, to: &Path) -> Result<BTreeMap<u32, PathBuf>, FperfError> {
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(from).map_err(io_err(from))? {
        let entry = entry.map_err(io_err(from))?;
        let name = entry.file_name();
        let Some(thread) = name
            .to_str()
            .and_then(|n| n.strip_prefix("hugepage_thread_"))
            .and_then(|n| n.strip_suffix(".txt"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let target = to.join(&name);
        // /tmp is often another file system than the work directory; rename cannot cross it.
        if fs::rename(entry.path(), &target).is_err() {
            fs::copy(entry.path(), &target).map_err(io_err(&target))?;
            let _ = fs::remove_file(entry.path());
        }
        out.insert(thread, target);
    }
    Ok(out)
}

/// Every latency line of one thread's file as a sample (no warm-up cut).
pub fn parse_thread_file(text: &str, thread: u32, shape: Shape) -> Result<Vec<Sample>, String> {
    struct Send {
        stamp: u64,
        slot: u16,
        request_bytes: u32,
        response_bytes: u32,
    }
    let mut out: Vec<Sample> = Vec::new();
    let mut first_send: Option<u64> = None;
    let mut send: Option<Send> = None;
    // The send stamp of the last sample, for `trace_resp` to turn into a from-send latency.
    let mut last_send_stamp: Option<u64> = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why}: {line:?}", i + 1);
        if let Some(rest) = line.strip_prefix('[') {
            let (stamp, body) = rest.split_once(']').ok_or_else(|| bad("no `]`"))?;
            let stamp: u64 = stamp.trim().parse().map_err(|_| bad("bad stamp"))?;
            let mut words = body.split_whitespace();
            match words.next() {
                Some("trace_send") => {
                    let fields: BTreeMap<&str, &str> =
                        words.filter_map(|w| w.split_once('=')).collect();
                    let num = |key: &str| -> Result<u32, String> {
                        fields
                            .get(key)
                            .and_then(|v| v.parse().ok())
                            .ok_or_else(|| bad(&format!("no {key}=")))
                    };
                    let func = num("func")?;
                    send = Some(Send {
                        stamp,
                        // fperf's built-in function → slot map (§1.11); unknown functions keep -K's slot.
                        slot: match func {
                            1 => 0,
                            3 => 1,
                            2 => 2,
                            5 => 3,
                            _ => shape.slot,
                        },
                        request_bytes: num("req_bytes")?,
                        response_bytes: num("resp_bytes")?,
                    });
                    first_send.get_or_insert(stamp);
                }
                Some("trace_resp") => {
                    if let (Some(sent), Some(last)) = (last_send_stamp.take(), out.last_mut()) {
                        last.latency_ns = stamp.saturating_sub(sent);
                    }
                }
                _ => return Err(bad("unknown stamped line")),
            }
            continue;
        }
        let latency: u64 = line.parse().map_err(|_| bad("not a latency in ns"))?;
        let seq = out.len() as u64;
        let sample = match send.take() {
            Some(s) => {
                last_send_stamp = Some(s.stamp);
                Sample {
                    thread,
                    seq,
                    t_send_ns: s.stamp.saturating_sub(first_send.unwrap_or(s.stamp)),
                    latency_ns: latency,
                    latency_last_piece_ns: latency,
                    slot: s.slot,
                    request_bytes: s.request_bytes,
                    response_bytes: s.response_bytes,
                }
            }
            None => {
                last_send_stamp = None;
                Sample {
                    thread,
                    seq,
                    t_send_ns: 0,
                    latency_ns: latency,
                    latency_last_piece_ns: latency,
                    slot: shape.slot,
                    request_bytes: shape.request_bytes,
                    response_bytes: shape.response_bytes,
                }
            }
        };
        out.push(sample);
    }
    Ok(out)
}

/// The artifact's warm-up cut: `count=` of thread `thread` over seconds `< skip_s`.
fn warmup_count(log: &ParsedLog, thread: u32, skip_s: u32) -> u64 {
    log.threads
        .iter()
        .filter(|t| t.thread == thread && t.second < skip_s)
        .map(|t| t.count)
        .fold(0, u64::saturating_add)
}

/// The artifact's sample checks: one file per thread, and latencies left after the cut in each.
fn sample_problem(
    threads: u32,
    per_thread: &BTreeMap<u32, Vec<Sample>>,
    skipped: &BTreeMap<u32, u64>,
) -> Option<String> {
    let expected: Vec<u32> = (0..threads).collect();
    let found: Vec<u32> = per_thread.keys().copied().collect();
    if found != expected {
        return Some(format!(
            "fperf left latency files for threads {found:?}, expected 0..{threads}"
        ));
    }
    let empty: Vec<u32> = per_thread
        .iter()
        .filter(|(t, all)| all.len() as u64 <= skipped.get(t).copied().unwrap_or(0))
        .map(|(t, _)| *t)
        .collect();
    (!empty.is_empty()).then(|| format!("threads {empty:?} have no latency after the warm-up cut"))
}

/// The log's seconds as the embedded client's records. min/avg/max come from the printed µs (10 ns
/// resolution), bytes from the printed Gbit/s; p50/p99 from the latency lines the second's `count=` values
/// attribute to it (0 when there are no latency files or they are shorter than the counts).
pub fn second_records(
    log: &ParsedLog,
    per_thread: &BTreeMap<u32, Vec<Sample>>,
    skip_s: u32,
) -> Vec<SecondRecord> {
    let ns = |us: f64| (us * 1000.0).round().max(0.0) as u64;
    let bytes = |gbps: f64| (gbps * 1e9 / 8.0).round().max(0.0) as u64;
    let mut seconds: Vec<u32> = log.threads.iter().map(|t| t.second).collect();
    seconds.extend(log.totals.iter().map(|t| t.second));
    seconds.sort_unstable();
    seconds.dedup();
    // Where each thread's next second starts in its latency lines.
    let mut offsets: BTreeMap<u32, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for second in seconds {
        let mut threads = Vec::new();
        let mut pooled: Vec<u64> = Vec::new();
        for line in log.threads.iter().filter(|t| t.second == second) {
            let start = offsets.entry(line.thread).or_insert(0);
            let count = usize::try_from(line.count).unwrap_or(usize::MAX);
            let end = start.saturating_add(count);
            let mut mine: Vec<u64> = per_thread
                .get(&line.thread)
                .and_then(|all| all.get(*start..end))
                .map(|s| s.iter().map(|s| s.latency_last_piece_ns).collect())
                .unwrap_or_default();
            *start = end;
            mine.sort_unstable();
            pooled.extend_from_slice(&mine);
            threads.push(ThreadSecond {
                thread: line.thread,
                count: line.count,
                sum_ns: ns(line.avg_us).saturating_mul(line.count),
                min_ns: ns(line.min_us),
                max_ns: ns(line.max_us),
                p50_ns: percentile(&mine, 50.0),
                p99_ns: percentile(&mine, 99.0),
                bytes_read: bytes(line.read_gbps),
                bytes_written: bytes(line.write_gbps),
                timeouts: 0,
            });
        }
        pooled.sort_unstable();
        let total = log.totals.iter().find(|t| t.second == second);
        let sum_gbps = |f: fn(&ThreadSecond) -> u64| -> f64 {
            // As floats: a log's rates may print more bytes than a u64 holds when summed.
            threads.iter().map(|t| f(t) as f64).sum::<f64>() * 8.0 / 1e9
        };
        out.push(SecondRecord {
            second,
            latency: LatencyDef::LastPiece,
            count: threads.iter().fold(0, |sum, t| sum.saturating_add(t.count)),
            p50_ns: percentile(&pooled, 50.0),
            p99_ns: percentile(&pooled, 99.0),
            // fperf prints min=0 for a thread without completions; it is no latency.
            min_ns: threads
                .iter()
                .filter(|t| t.count > 0)
                .map(|t| t.min_ns)
                .min()
                .unwrap_or(0),
            max_ns: threads.iter().map(|t| t.max_ns).max().unwrap_or(0),
            read_gbps: total.map_or_else(|| sum_gbps(|t| t.bytes_read), |t| t.read_gbps),
            write_gbps: total.map_or_else(|| sum_gbps(|t| t.bytes_written), |t| t.write_gbps),
            warmup: second < skip_s,
            threads,
        });
    }
    out
}

/// Nearest-rank percentile of sorted values; 0 when empty.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The value of the last `flag` in `args` (getopt: the last one wins), as `-d 5` or `-d5`.
fn last_flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        if arg == flag {
            found = args.get(i + 1).map(String::as_str);
            i += 2;
            continue;
        }
        if let Some(rest) = arg.strip_prefix(flag).filter(|r| !r.is_empty()) {
            found = Some(rest);
        }
        i += 1;
    }
    found
}

/// A decimal or `0x` hexadecimal integer.
fn parse_int(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// libtpa's SIZE numbers: binary `k/K/kb/KB`, `m/M/…`, `g/G/…` and `b/B` suffixes.
fn parse_size(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (number, suffix) = lower.split_at(digits_end);
    let number: u64 = number.parse().ok()?;
    let scale: u64 = match suffix {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(scale)
}

/// libtpa's TIME numbers for `-d`: seconds, or `s`, `m`, `h` suffixes.
fn parse_duration(text: &str) -> Option<u32> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits_end);
    let number: u32 = number.parse().ok()?;
    let scale = match suffix {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return None,
    };
    number.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn flags_sizes_and_durations() {
        let a = args("-t rr -d5 -n 4 -m 4k -X 8192 -K 0x1 -d 7");
        assert_eq!(last_flag(&a, "-d"), Some("7"));
        assert_eq!(last_flag(&a, "-n"), Some("4"));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("1MB"), Some(1 << 20));
        assert_eq!(parse_size("3x"), None);
        assert_eq!(parse_duration("2m"), Some(120));
        assert_eq!(parse_int("0xab"), Some(171));
    }

    #[test]
    fn trace_file_lines() {
        let shape = Shape {
            slot: 7,
            request_bytes: 64,
            response_bytes: 64,
        };
        let text = "[1000] trace_send func=3 msg_bytes=512 req_bytes=1088 resp_bytes=1024 sleep_sec=0.000000 sid=0\n\
                    4000\n\
                    [6000] trace_resp bytes=1024 latency_us=4.000\n\
                    [9000] trace_send func=1 msg_bytes=512 req_bytes=128 resp_bytes=64 sleep_sec=0.001000 sid=0\n\
                    2500\n\
                    [12000] trace_resp bytes=64 latency_us=2.500\n";
        let s = parse_thread_file(text, 0, shape).expect("parses");
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].slot, s[0].request_bytes, s[0].response_bytes),
            (1, 1088, 1024)
        );
        assert_eq!(
            (s[0].t_send_ns, s[0].latency_ns, s[0].latency_last_piece_ns),
            (0, 5000, 4000)
        );
        assert_eq!(
            (s[1].slot, s[1].t_send_ns, s[1].latency_ns),
            (0, 8000, 3000)
        );
        assert!(parse_thread_file("12x\n", 0, shape).is_err());
    }

    #[test]
    fn a_log_whose_counts_and_rates_overflow_a_u64_gives_saturated_records() {
        // Two threads each printing more bytes than a u64 holds overflowed the sums (found by fuzzing).
        let line = |thread: u32| {
            format!(
                "    0 RR .{thread} min=1.00us avg=1.00us max=1.00us read(Gbits/sec)=1e30 \
                 write(Gbits/sec)=1e30 count=18446744073709551615\n"
            )
        };
        let log = parse_fperf_log(&(line(0) + &line(1))).expect("parses");
        assert_eq!(log.count_from(0), u64::MAX);
        let records = second_records(&log, &BTreeMap::new(), 0);
        assert_eq!(records[0].count, u64::MAX);
        assert!(records[0].read_gbps > 1e10);
    }

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
