//! The client's configuration: fperf's flags with fperf's meanings
//! (`docs/tools.md` §1.2, "fperf §") plus our own measurement options.

use std::path::PathBuf;
use std::time::Duration;

use fracflow_proto::{CONTROLLER_WORKLOAD, LINE_U32, MAX_REQUEST_BYTES, SLOT_COUNT};

/// Largest `-R` we accept: no unit answers more than the largest request
/// (`pattern_slot` echoes it), `docs/frac.md` §2.3/§2.5.
pub const MAX_RESPONSE_BYTES: u32 = MAX_REQUEST_BYTES;

/// Largest `-m`: fperf's `BATCH_SIZE × MBUF_SIZE` = 256 KiB (fperf §1.2).
pub const MAX_PIECE_BYTES: u32 = 256 << 10;

/// Piece size fperf forces in trace mode (`2f81dd4`, fperf §1.2).
pub const TRACE_PIECE_BYTES: u32 = 512;

/// Which header starts every request (`-Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// `-Z 0`: fperf's `test_info` for its CPU server (fperf §1.9).
    CpuServer,
    /// `-Z 1`: the fRAC header (fperf §1.8).
    Frac,
}

/// How open-loop send times are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Exactly `1/rate` apart.
    Fixed,
    /// Exponential gaps with mean `1/rate` (a Poisson process), from a seeded PRNG.
    Poisson,
}

/// Open-loop pacing: the whole run's target rate, split evenly over all
/// `n × C` connections.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OpenLoop {
    /// Requests per second, summed over every connection.
    pub rate: f64,
    /// Gap distribution.
    pub arrivals: Arrivals,
    /// PRNG seed for Poisson gaps (connection `k` uses `seed + k`).
    pub seed: u64,
}

/// Which latency the per-second lines report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyDef {
    /// fperf's: last request piece written → last response byte read.
    LastPiece,
    /// From the first request byte written (closed loop) or from the
    /// intended send time (open loop) → last response byte read.
    FromSend,
}

impl LatencyDef {
    /// One-line description for output headers.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            LatencyDef::LastPiece => {
                "last-piece (fperf: last request piece written -> last response byte read)"
            }
            LatencyDef::FromSend => {
                "from-send (intended send time, or first request byte written -> last response byte read)"
            }
        }
    }
}

/// Everything a run needs.  Field docs name the fperf flag.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClientConfig {
    /// `-c`: server host or address.
    pub host: String,
    /// `-p`: server port (fperf default 4096).
    pub port: u16,
    /// `-d`: number of 1-s reporting intervals; `None` only with a trace
    /// (run until it ends).
    pub duration_s: Option<u32>,
    /// `-n`: client threads.
    pub threads: u32,
    /// `-C`: connections per thread.
    pub conns_per_thread: u32,
    /// `-S`: thread `i` is pinned to core `S + i` (wrapping over the
    /// available cores); `None` = no pinning (fperf's −4096).
    pub start_cpu: Option<usize>,
    /// `-m`: bytes per write.
    pub piece_size: u32,
    /// `-X`: request bytes, header included.
    pub request_size: u32,
    /// `-R`: response bytes read back per request.
    pub response_size: u32,
    /// `-Z`.
    pub framing: Framing,
    /// `-K`: workload/slot in the fRAC header.
    pub slot: u16,
    /// `-F`: function for the CPU server (`-Z 0`).
    pub function: u32,
    /// `-L 1`: write per-request latency logs (`hugepage_thread_<i>.txt`).
    pub latency_log: bool,
    /// `-D`: directory of the per-request logs.
    pub log_dir: Option<PathBuf>,
    /// `-E`: trace CSV to replay.
    pub trace: Option<PathBuf>,
    /// `-q`: no per-second lines.
    pub quiet: bool,
    /// Ours: open-loop pacing (`None` = closed loop, fperf `rr`).
    pub open_loop: Option<OpenLoop>,
    /// Ours: leading seconds excluded from the samples and the merged
    /// histogram (still printed as per-second lines, like fperf).
    pub skip_s: u32,
    /// Ours: a response not complete this long after its send time counts
    /// as a timeout and its connection is reopened.
    pub request_timeout: Duration,
    /// Ours: busy-poll non-blocking sockets even with one connection per
    /// thread (fperf always busy-polls; blocking reads are kinder to a
    /// small shared host).
    pub busy_poll: bool,
    /// Ours: cap on samples kept per thread (memory bound); further
    /// completions are counted but not stored.
    pub max_samples_per_thread: usize,
    /// Ours: multiply every trace `sleep_time` by this (1.0 = as recorded).
    pub trace_time_scale: f64,
    /// Ours: the latency the per-second lines report, instead of the loop's default (`--latency`).
    pub console_latency_override: Option<LatencyDef>,
}

impl Default for ClientConfig {
    /// fperf's defaults in their newest form (`-X`/`-R` default to `-m`).
    fn default() -> ClientConfig {
        ClientConfig {
            host: "127.0.0.1".to_owned(),
            port: 4096,
            duration_s: Some(10),
            threads: 1,
            conns_per_thread: 1,
            start_cpu: None,
            piece_size: 1024,
            request_size: 1024,
            response_size: 1024,
            framing: Framing::CpuServer,
            slot: 0,
            function: 0,
            latency_log: false,
            log_dir: None,
            trace: None,
            quiet: false,
            open_loop: None,
            skip_s: 0,
            request_timeout: Duration::from_secs(5),
            busy_poll: false,
            max_samples_per_thread: 20_000_000,
            trace_time_scale: 1.0,
            console_latency_override: None,
        }
    }
}

/// A configuration that cannot run; found before any connection is made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The server address was not given.
    #[error("missing -c HOST: the server address is required")]
    MissingHost,
    /// An unknown flag.
    #[error("unknown flag {0}")]
    UnknownFlag(String),
    /// A flag without its value.
    #[error("flag {0} needs a value")]
    MissingValue(String),
    /// A value that does not parse.
    #[error("invalid value {value:?} for {flag}: {why}")]
    BadValue {
        /// The flag.
        flag: String,
        /// What was given.
        value: String,
        /// Why it was refused.
        why: String,
    },
    /// Only `rr` is implemented.
    #[error("test mode {0:?} is not supported (only -t rr)")]
    UnsupportedTest(String),
    /// `-t` missing.
    #[error("missing -t: the test mode is required in client mode (use -t rr)")]
    MissingTest,
    /// `-X` not whole 64-byte lines with `-Z 1`.
    #[error(
        "-X {0} is not a whole number of 64-byte lines (the fRAC device drops such requests; -X includes the 64-byte header)"
    )]
    RequestNotWholeLines(u32),
    /// `-m` not whole 64-byte lines with `-Z 1`.
    #[error(
        "-m {0} is not a positive multiple of 64 (the fRAC device drops partial-line segments)"
    )]
    PieceNotWholeLines(u32),
    /// `-m` out of 1..=256 KiB.
    #[error("-m {0} is outside 1..=262144")]
    PieceSize(u32),
    /// `-X` below the header or above the device's limit.
    #[error("-X {0} is outside 64..=65472 (the 64-byte header is included)")]
    RequestSize(u32),
    /// `-R` zero or above the limit.
    #[error("-R {0} is outside 1..=65472 (no unit answers more than the largest request)")]
    ResponseSize(u32),
    /// `-K 0xab`.
    #[error("-K 0xab (171) is the reconfiguration controller's workload id, not a slot")]
    ControllerSlot,
    /// `-K` above the last slot.
    #[error(
        "-K {0} is not a slot: the device has slots 0..=3 (other ids are silently routed to slot 0)"
    )]
    SlotOutOfRange(u16),
    /// `-n`/`-C` zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// `-d 0` or no duration without a trace.
    #[error("-d must be at least 1 second (only a trace may run without -d)")]
    Duration,
    /// `-L 1` without `-D`.
    #[error("-L 1 needs -D DIR for the per-request logs")]
    LogDirMissing,
    /// Trace replay constraints (fperf §1.2 `-E`).
    #[error("-E needs -t rr -Z 1 -n 1 -C 1 and closed loop: {0}")]
    Trace(String),
    /// Open-loop rate not positive and finite.
    #[error("open-loop rate {0} is not a positive number of requests per second")]
    Rate(f64),
    /// `--skip` leaves no measured second.
    #[error("--skip {skip} leaves nothing of a {duration}-second run")]
    Skip {
        /// The skip.
        skip: u32,
        /// The duration.
        duration: u32,
    },
}

/// Parses fperf's numbers (`tpa_parse_num`): decimal or `0x` hex, with
/// binary suffixes `b`, `k/kb`, `m/mb`, `g/gb` (any case).
pub fn parse_size(flag: &str, text: &str) -> Result<u64, ConfigError> {
    let bad = |why: &str| ConfigError::BadValue {
        flag: flag.to_owned(),
        value: text.to_owned(),
        why: why.to_owned(),
    };
    let lower = text.trim().to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).map_err(|_| bad("not a hex number"));
    }
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, suffix) = lower.split_at(digits_end);
    let base: u64 = digits.parse().map_err(|_| bad("not a number"))?;
    let mult: u64 = match suffix {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        _ => return Err(bad("unknown suffix (use b, k, m or g)")),
    };
    base.checked_mul(mult).ok_or_else(|| bad("too large"))
}

/// Parses `-d`: seconds, with `s`, `m` or `h`.
pub fn parse_duration_s(text: &str) -> Result<u64, ConfigError> {
    let bad = |why: &str| ConfigError::BadValue {
        flag: "-d".to_owned(),
        value: text.to_owned(),
        why: why.to_owned(),
    };
    let t = text.trim();
    let (num, mult) = match t.chars().last() {
        Some('s') => (&t[..t.len() - 1], 1),
        Some('m') => (&t[..t.len() - 1], 60),
        Some('h') => (&t[..t.len() - 1], 3600),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| bad("not a whole number of seconds"))?;
    n.checked_mul(mult).ok_or_else(|| bad("too large"))
}

fn narrow<T: TryFrom<u64>>(flag: &str, text: &str, v: u64) -> Result<T, ConfigError> {
    T::try_from(v).map_err(|_| ConfigError::BadValue {
        flag: flag.to_owned(),
        value: text.to_owned(),
        why: "out of range".to_owned(),
    })
}

/// Parses `RATE[:poisson|:fixed]` (`--open-loop`).
pub fn parse_open_loop(text: &str, seed: u64) -> Result<OpenLoop, ConfigError> {
    let (rate, kind) = text.split_once(':').unwrap_or((text, "fixed"));
    let arrivals = match kind {
        "fixed" => Arrivals::Fixed,
        "poisson" => Arrivals::Poisson,
        _ => {
            return Err(ConfigError::BadValue {
                flag: "--open-loop".to_owned(),
                value: text.to_owned(),
                why: "arrivals must be fixed or poisson".to_owned(),
            });
        }
    };
    let rate: f64 = rate.parse().map_err(|_| ConfigError::BadValue {
        flag: "--open-loop".to_owned(),
        value: text.to_owned(),
        why: "rate is not a number".to_owned(),
    })?;
    Ok(OpenLoop {
        rate,
        arrivals,
        seed,
    })
}

impl ClientConfig {
    /// Parses fperf-style arguments (without the program name), e.g.
    /// `-c 127.0.0.1 -p 2888 -t rr -d 5 -n 2 -m 1024 -X 4096 -R 64 -Z 1 -K 0`,
    /// plus ours: `--open-loop RATE[:fixed|:poisson]`, `--seed N`,
    /// `--skip S`, `--timeout-ms MS`, `--busy-poll`, `--trace-time-scale F`,
    /// `--latency from-send|last-piece` (what the per-second lines report).
    /// `-X` and `-R` default to `-m` (fperf `17ec7ac`+); `-E` forces
    /// `-m 512` unless given.  Validates with [`ClientConfig::validate`].
    pub fn from_fperf_args(args: &[String]) -> Result<ClientConfig, ConfigError> {
        let mut c = ClientConfig::default();
        let mut host = None;
        let mut test = None;
        let (mut m, mut x, mut r) = (None, None, None);
        let mut duration_given = false;
        let mut open = None;
        let mut seed = 1u64;
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let flag = flag.as_str();
            if matches!(flag, "-q" | "--busy-poll") {
                if flag == "-q" {
                    c.quiet = true;
                } else {
                    c.busy_poll = true;
                }
                continue;
            }
            let value = it
                .next()
                .ok_or_else(|| ConfigError::MissingValue(flag.to_owned()))?
                .as_str();
            let size = |f: &str| parse_size(f, value);
            match flag {
                "-c" => host = Some(value.to_owned()),
                "-p" => {
                    let p: u16 = narrow("-p", value, size("-p")?)?;
                    if p == 0 {
                        return Err(ConfigError::BadValue {
                            flag: "-p".into(),
                            value: value.into(),
                            why: "port must be 1..=65535".into(),
                        });
                    }
                    c.port = p;
                }
                "-t" => test = Some(value.to_owned()),
                "-d" => {
                    c.duration_s = Some(narrow("-d", value, parse_duration_s(value)?)?);
                    duration_given = true;
                }
                "-n" => c.threads = narrow("-n", value, size("-n")?)?,
                "-C" => c.conns_per_thread = narrow("-C", value, size("-C")?)?,
                "-S" => {
                    // fperf: negative means "no pinning".
                    c.start_cpu = if value.starts_with('-') {
                        None
                    } else {
                        Some(narrow("-S", value, size("-S")?)?)
                    };
                }
                "-m" => m = Some(narrow::<u32>("-m", value, size("-m")?)?),
                "-X" => x = Some(narrow::<u32>("-X", value, size("-X")?)?),
                "-R" => r = Some(narrow::<u32>("-R", value, size("-R")?)?),
                "-Z" => {
                    c.framing = match value {
                        "0" => Framing::CpuServer,
                        "1" => Framing::Frac,
                        _ => {
                            return Err(ConfigError::BadValue {
                                flag: "-Z".into(),
                                value: value.into(),
                                why: "must be 0 (CPU server) or 1 (fRAC)".into(),
                            });
                        }
                    }
                }
                "-K" => c.slot = narrow("-K", value, size("-K")?)?,
                "-F" => c.function = narrow("-F", value, size("-F")?)?,
                "-L" => {
                    c.latency_log = match value {
                        "0" => false,
                        "1" => true,
                        _ => {
                            return Err(ConfigError::BadValue {
                                flag: "-L".into(),
                                value: value.into(),
                                why: "must be 0 or 1".into(),
                            });
                        }
                    }
                }
                "-D" => c.log_dir = Some(PathBuf::from(value)),
                "-E" => c.trace = Some(PathBuf::from(value)),
                "--open-loop" => open = Some(value.to_owned()),
                "--seed" => seed = size("--seed")?,
                "--skip" => c.skip_s = narrow("--skip", value, parse_duration_s(value)?)?,
                "--timeout-ms" => {
                    c.request_timeout = Duration::from_millis(size("--timeout-ms")?);
                }
                "--latency" => {
                    c.console_latency_override = Some(match value {
                        "from-send" | "from_send" => LatencyDef::FromSend,
                        "last-piece" | "last_piece" => LatencyDef::LastPiece,
                        _ => {
                            return Err(ConfigError::BadValue {
                                flag: flag.into(),
                                value: value.into(),
                                why: "expected from-send or last-piece".into(),
                            });
                        }
                    });
                }
                "--trace-time-scale" => {
                    c.trace_time_scale = value.parse().map_err(|_| ConfigError::BadValue {
                        flag: flag.into(),
                        value: value.into(),
                        why: "not a number".into(),
                    })?;
                }
                other => return Err(ConfigError::UnknownFlag(other.to_owned())),
            }
        }
        c.host = host.ok_or(ConfigError::MissingHost)?;
        match test.as_deref() {
            None => return Err(ConfigError::MissingTest),
            Some("rr") => {}
            Some(other) => return Err(ConfigError::UnsupportedTest(other.to_owned())),
        }
        if c.trace.is_some() && m.is_none() {
            m = Some(TRACE_PIECE_BYTES);
        }
        if let Some(m) = m {
            c.piece_size = m;
        }
        c.request_size = x.unwrap_or(c.piece_size);
        c.response_size = r.unwrap_or(c.piece_size);
        if c.trace.is_some() && !duration_given {
            c.duration_s = None;
        }
        if let Some(open) = open {
            c.open_loop = Some(parse_open_loop(&open, seed)?);
        }
        c.validate()?;
        Ok(c)
    }

    /// Checks everything that can be checked without connecting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.host.is_empty() {
            return Err(ConfigError::MissingHost);
        }
        if self.threads == 0 {
            return Err(ConfigError::Zero("-n"));
        }
        if self.conns_per_thread == 0 {
            return Err(ConfigError::Zero("-C"));
        }
        if self.piece_size == 0 || self.piece_size > MAX_PIECE_BYTES {
            return Err(ConfigError::PieceSize(self.piece_size));
        }
        if self.latency_log && self.log_dir.is_none() {
            return Err(ConfigError::LogDirMissing);
        }
        match self.duration_s {
            Some(0) => return Err(ConfigError::Duration),
            None if self.trace.is_none() => return Err(ConfigError::Duration),
            Some(d) if self.skip_s >= d => {
                return Err(ConfigError::Skip {
                    skip: self.skip_s,
                    duration: d,
                });
            }
            _ => {}
        }
        if let Some(open) = &self.open_loop
            && !(open.rate.is_finite() && open.rate > 0.0)
        {
            return Err(ConfigError::Rate(open.rate));
        }
        if self.trace.is_some() {
            let why = if self.framing != Framing::Frac {
                Some("-Z must be 1")
            } else if self.threads != 1 || self.conns_per_thread != 1 {
                Some("-n and -C must be 1")
            } else if self.open_loop.is_some() {
                Some("the trace paces itself; drop --open-loop")
            } else if !(self.trace_time_scale.is_finite() && self.trace_time_scale >= 0.0) {
                Some("--trace-time-scale must be a non-negative number")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(ConfigError::Trace(why.to_owned()));
            }
            if !self.piece_size.is_multiple_of(LINE_U32) {
                return Err(ConfigError::PieceNotWholeLines(self.piece_size));
            }
            // The trace supplies sizes and slots per row.
            return Ok(());
        }
        if self.request_size < LINE_U32 || self.request_size > MAX_REQUEST_BYTES {
            return Err(ConfigError::RequestSize(self.request_size));
        }
        if self.response_size == 0 || self.response_size > MAX_RESPONSE_BYTES {
            return Err(ConfigError::ResponseSize(self.response_size));
        }
        if self.framing == Framing::Frac {
            if !self.request_size.is_multiple_of(LINE_U32) {
                return Err(ConfigError::RequestNotWholeLines(self.request_size));
            }
            if !self.piece_size.is_multiple_of(LINE_U32) {
                return Err(ConfigError::PieceNotWholeLines(self.piece_size));
            }
            if self.slot == CONTROLLER_WORKLOAD {
                return Err(ConfigError::ControllerSlot);
            }
            if self.slot >= u16::from(SLOT_COUNT) {
                return Err(ConfigError::SlotOutOfRange(self.slot));
            }
        }
        Ok(())
    }

    /// Which latency the per-second lines use: fperf's in closed loop (for
    /// comparability), from the intended send time in open loop (the point
    /// of open loop: no coordinated omission).
    #[must_use]
    pub fn console_latency(&self) -> LatencyDef {
        if let Some(chosen) = self.console_latency_override {
            chosen
        } else if self.open_loop.is_some() {
            LatencyDef::FromSend
        } else {
            LatencyDef::LastPiece
        }
    }

    /// Total connections, `n × C`.
    #[must_use]
    pub fn total_conns(&self) -> u64 {
        u64::from(self.threads) * u64::from(self.conns_per_thread)
    }
}
