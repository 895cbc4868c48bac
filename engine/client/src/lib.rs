//! fracflow's embedded, fperf-compatible load client: closed and open loop over TCP, fperf's console output, per-request samples and trace replay.
//!
//! Facts come from the repository's `docs/tools.md` §1 ("fperf §N" in this
//! crate) and `docs/frac.md` §2.7, §7 ("frac §N").
//!
//! * [`ClientConfig`] mirrors fperf's flags ([`ClientConfig::from_fperf_args`]);
//! * [`run`] drives `-n` pinned threads × `-C` connections and returns a
//!   [`RunReport`]; an [`Observer`] sees each second as it completes
//!   ([`FperfConsole`], [`JsonLines`]);
//! * [`output`] formats and parses fperf's console lines;
//! * [`samples`] writes and reads the per-request Parquet file;
//! * [`trace`] reads `-E` traces and generates synthetic ones.
//!
//! # Latency
//!
//! Every request records two latencies on a monotonic clock (fperf uses
//! `CLOCK_REALTIME`): `latency_ns` from the send time (the first byte
//! written in closed loop; the *intended* send time in open loop, so a
//! stalled server shows up in the tail instead of slowing the sender) and
//! `latency_last_piece_ns`, fperf's, from the last request piece written.
//! The per-second lines use fperf's in closed loop and the from-send one in
//! open loop ([`ClientConfig::console_latency`]); the console preamble and
//! every [`SecondRecord`] say which.
//!
//! # Where it departs from fperf
//!
//! * Only `-t rr`.  Blocking sockets with one connection per thread (fperf
//!   busy-polls always; `--busy-poll` does too); non-blocking polling with
//!   `-C > 1` or open loop.
//! * Requests in flight when `-d` ends are abandoned and not counted, so
//!   the `count=` of the lines equals the samples.
//! * `-L 1` files hold the measured seconds only (after `--skip`).
//! * Trace rows wait for the unit's response size (newer fperf's rule);
//!   disagreeing `response_size` columns are counted in [`TraceReport`].

pub mod config;
pub mod observe;
pub mod output;
pub mod rng;
pub mod run;
pub mod samples;
pub mod trace;

pub use config::{Arrivals, ClientConfig, ConfigError, Framing, LatencyDef, OpenLoop};
pub use observe::{FperfConsole, JsonLines};
pub use output::{
    ConnCounts, ParsedLog, SecondRecord, ThreadSecond, format_closing, format_second,
    parse_fperf_log,
};
pub use run::{
    ClientError, Observer, OpenLoopReport, RunReport, RunStatus, Sample, Summary, ThreadReport,
    TraceReport, run,
};
pub use samples::{read_samples_parquet, write_samples_parquet};
pub use trace::{
    MAX_TRACE_BYTES, TraceError, TraceRow, format_trace, parse_trace, read_trace,
    read_trace_bounded, synthetic_trace, synthetic_trace_with_mean_sleep,
};
