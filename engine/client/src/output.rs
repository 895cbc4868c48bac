//! Per-second records, fperf's console format (`docs/tools.md` §1.6) and its parser,
//! and JSON lines.

use std::fmt::Write as _;

use crate::config::LatencyDef;

/// One thread's second.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct ThreadSecond {
    /// Thread index (fperf's `.i`).
    pub thread: u32,
    /// Completions in this second.
    pub count: u64,
    /// Sum of their latencies (the console definition), ns.
    pub sum_ns: u64,
    /// Smallest latency, ns (0 when `count == 0`, as fperf resets it).
    pub min_ns: u64,
    /// Largest latency, ns.
    pub max_ns: u64,
    /// Median from the second's histogram, ns.
    pub p50_ns: u64,
    /// 99th percentile from the second's histogram, ns.
    pub p99_ns: u64,
    /// Response bytes read in this second.
    pub bytes_read: u64,
    /// Request bytes written in this second.
    pub bytes_written: u64,
    /// Requests that hit the per-request timeout in this second.
    pub timeouts: u64,
}

impl ThreadSecond {
    /// fperf's avg: integer ns (`sum / count`, truncated).
    #[must_use]
    pub fn avg_ns(&self) -> u64 {
        self.sum_ns.checked_div(self.count).unwrap_or(0)
    }
}

/// One reporting second over all threads.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SecondRecord {
    /// fperf's loop index `L`, from 0.
    pub second: u32,
    /// Which latency the fields describe.
    pub latency: LatencyDef,
    /// Per thread, by index.
    pub threads: Vec<ThreadSecond>,
    /// Completions over all threads.
    pub count: u64,
    /// Median over all threads (merged histograms), ns.
    pub p50_ns: u64,
    /// 99th percentile over all threads, ns.
    pub p99_ns: u64,
    /// Smallest latency over all threads, ns.
    pub min_ns: u64,
    /// Largest latency over all threads, ns.
    pub max_ns: u64,
    /// Read Gbit/s (decimal, bytes × 8 / 1e9 over the second).
    pub read_gbps: f64,
    /// Write Gbit/s.
    pub write_gbps: f64,
    /// Within `--skip` (excluded from the samples).
    pub warmup: bool,
}

/// Gbit/s of `bytes` over one second, as fperf computes it.
#[must_use]
pub fn gbps(bytes: u64) -> f64 {
    bytes as f64 * 8.0 / 1e9
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The console lines of one second, exactly as fperf prints them for
/// `rr` (`RR` is the test's short name): one line per thread, the
/// `Total-Throughput` line, and an empty line when `n > 1`.
#[must_use]
pub fn format_second(rec: &SecondRecord) -> String {
    let mut out = String::new();
    let mut read = 0u64;
    let mut write = 0u64;
    for t in &rec.threads {
        // Saturating: records parsed back from a log (the fperf adapter's) may hold any byte counts.
        read = read.saturating_add(t.bytes_read);
        write = write.saturating_add(t.bytes_written);
        let _ = writeln!(
            out,
            "{:5} {:<2} .{} min={:.2}us avg={:.2}us max={:.2}us read(Gbits/sec)={:.3} write(Gbits/sec)={:.3} count={}",
            rec.second,
            "RR",
            t.thread,
            us(t.min_ns),
            us(t.avg_ns()),
            us(t.max_ns),
            gbps(t.bytes_read),
            gbps(t.bytes_written),
            t.count
        );
    }
    let _ = writeln!(
        out,
        "{:5} {:<2} Total-Throughput read(Gbits/sec)={:.3} write(Gbits/sec)={:.3}",
        rec.second,
        "RR",
        gbps(read),
        gbps(write)
    );
    if rec.threads.len() > 1 {
        out.push('\n');
    }
    out
}

/// Per-thread connection counts for the closing block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConnCounts {
    /// Connections the thread opened (reopens after a timeout included).
    pub nr_conn: u64,
    /// Connections that never read or wrote a byte.
    pub nr_zero_io_conn: u64,
}

/// fperf's end of run: an empty line, `---`, per thread
/// `%2d nr_conn=%lu nr_zero_io_conn=%lu`, then `exiting client: <i>` per
/// thread; with a trace, the trace line last.
#[must_use]
pub fn format_closing(conns: &[ConnCounts], trace_line: Option<&str>) -> String {
    let mut out = String::from("\n---\n");
    for (i, c) in conns.iter().enumerate() {
        let _ = writeln!(
            out,
            "{:2} nr_conn={} nr_zero_io_conn={}",
            i, c.nr_conn, c.nr_zero_io_conn
        );
    }
    for i in 0..conns.len() {
        let _ = writeln!(out, "exiting client: {i}");
    }
    if let Some(line) = trace_line {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Our one preamble line (fperf prints none; parsers that look for
/// `Total-Throughput` and `count=` skip it): which latency the lines use.
#[must_use]
pub fn format_preamble(latency: LatencyDef) -> String {
    format!(
        "# fracflow client: per-second latency = {}\n",
        latency.describe()
    )
}

/// One JSON line for a second (no trailing newline).
#[must_use]
pub fn json_line(rec: &SecondRecord) -> String {
    // Serialising plain structs of numbers and strings cannot fail.
    serde_json::to_string(rec).unwrap_or_default()
}

/// A per-thread line parsed back.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedThreadLine {
    /// `L`.
    pub second: u32,
    /// `.i`.
    pub thread: u32,
    /// µs, as printed.
    pub min_us: f64,
    /// µs.
    pub avg_us: f64,
    /// µs.
    pub max_us: f64,
    /// Gbit/s.
    pub read_gbps: f64,
    /// Gbit/s.
    pub write_gbps: f64,
    /// Completions.
    pub count: u64,
}

/// A `Total-Throughput` line parsed back.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedTotalLine {
    /// `L`.
    pub second: u32,
    /// Gbit/s.
    pub read_gbps: f64,
    /// Gbit/s.
    pub write_gbps: f64,
}

/// Everything an fperf `rr` log says, parsed back.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedLog {
    /// Per-thread lines in order.
    pub threads: Vec<ParsedThreadLine>,
    /// Total lines in order.
    pub totals: Vec<ParsedTotalLine>,
    /// Closing `nr_conn` lines: (thread, nr_conn, nr_zero_io_conn).
    pub conns: Vec<(u32, u64, u64)>,
    /// The `trace:` line, if any.
    pub trace: Option<String>,
}

impl ParsedLog {
    /// Sum of `count=` over every per-thread line of seconds `>= from`.
    #[must_use]
    pub fn count_from(&self, from: u32) -> u64 {
        self.threads
            .iter()
            .filter(|t| t.second >= from)
            .map(|t| t.count)
            .fold(0, u64::saturating_add)
    }
}

/// A line the parser cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fperf log line {line}: {why}: {text:?}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// The line.
    pub text: String,
    /// What is wrong.
    pub why: String,
}

fn field<T: std::str::FromStr>(token: &str, key: &str, suffix: &str) -> Option<T> {
    token.strip_prefix(key)?.strip_suffix(suffix)?.parse().ok()
}

/// Parses fperf `rr`/`crr` console output (ours or fperf's).  Lines that
/// are neither per-second, closing nor trace lines (preambles, `---`,
/// `exiting client`, blank) are skipped; a line that looks like a
/// per-second line but does not parse is an error.
pub fn parse_fperf_log(text: &str) -> Result<ParsedLog, ParseError> {
    let mut log = ParsedLog::default();
    for (i, line) in text.lines().enumerate() {
        let err = |why: &str| ParseError {
            line: i + 1,
            text: line.to_owned(),
            why: why.to_owned(),
        };
        let tokens: Vec<&str> = line.split_whitespace().collect();
        if line.starts_with("trace:") {
            log.trace = Some(line.to_owned());
            continue;
        }
        if tokens.len() == 3 && tokens[1].starts_with("nr_conn=") {
            let thread = tokens[0].parse().map_err(|_| err("bad thread"))?;
            let nr: u64 = field(tokens[1], "nr_conn=", "").ok_or_else(|| err("bad nr_conn"))?;
            let zero: u64 = field(tokens[2], "nr_zero_io_conn=", "")
                .ok_or_else(|| err("bad nr_zero_io_conn"))?;
            log.conns.push((thread, nr, zero));
            continue;
        }
        let Some(second) = tokens.first().and_then(|t| t.parse::<u32>().ok()) else {
            continue;
        };
        if tokens.get(2) == Some(&"Total-Throughput") {
            if tokens.len() != 5 {
                return Err(err("total line needs 5 fields"));
            }
            log.totals.push(ParsedTotalLine {
                second,
                read_gbps: field(tokens[3], "read(Gbits/sec)=", "")
                    .ok_or_else(|| err("bad read"))?,
                write_gbps: field(tokens[4], "write(Gbits/sec)=", "")
                    .ok_or_else(|| err("bad write"))?,
            });
        } else if tokens.len() == 9 && tokens[2].starts_with('.') {
            log.threads.push(ParsedThreadLine {
                second,
                thread: tokens[2][1..].parse().map_err(|_| err("bad thread"))?,
                min_us: field(tokens[3], "min=", "us").ok_or_else(|| err("bad min"))?,
                avg_us: field(tokens[4], "avg=", "us").ok_or_else(|| err("bad avg"))?,
                max_us: field(tokens[5], "max=", "us").ok_or_else(|| err("bad max"))?,
                read_gbps: field(tokens[6], "read(Gbits/sec)=", "")
                    .ok_or_else(|| err("bad read"))?,
                write_gbps: field(tokens[7], "write(Gbits/sec)=", "")
                    .ok_or_else(|| err("bad write"))?,
                count: field(tokens[8], "count=", "").ok_or_else(|| err("bad count"))?,
            });
        } else {
            return Err(err("not an rr per-second line"));
        }
    }
    Ok(log)
}
