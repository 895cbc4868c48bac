//! Ready-made observers: fperf's console lines and JSON lines.

use std::io::Write;

use crate::config::ClientConfig;
use crate::output::SecondRecord;
use crate::output::{format_preamble, format_second, json_line};
use crate::run::{Observer, RunReport};

/// Prints what fperf prints (per-second lines unless quiet, the closing
/// block), after our one preamble line naming the latency definition.
/// Write errors are ignored: a closed stdout must not abort a measurement.
#[derive(Debug)]
pub struct FperfConsole<W: Write> {
    out: W,
    quiet: bool,
}

impl<W: Write> FperfConsole<W> {
    /// Prints to `out`.
    pub fn new(out: W) -> FperfConsole<W> {
        FperfConsole { out, quiet: false }
    }

    /// The writer back.
    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> Observer for FperfConsole<W> {
    fn on_start(&mut self, config: &ClientConfig) {
        self.quiet = config.quiet;
        let _ = self
            .out
            .write_all(format_preamble(config.console_latency()).as_bytes());
    }

    fn on_second(&mut self, record: &SecondRecord) {
        if !self.quiet {
            let _ = self.out.write_all(format_second(record).as_bytes());
            let _ = self.out.flush();
        }
    }

    fn on_finish(&mut self, report: &RunReport) {
        let _ = self.out.write_all(report.closing().as_bytes());
        let _ = self.out.flush();
    }
}

/// One JSON object per second, one per line.
#[derive(Debug)]
pub struct JsonLines<W: Write> {
    out: W,
}

impl<W: Write> JsonLines<W> {
    /// Prints to `out`.
    pub fn new(out: W) -> JsonLines<W> {
        JsonLines { out }
    }

    /// The writer back.
    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> Observer for JsonLines<W> {
    fn on_second(&mut self, record: &SecondRecord) {
        let _ = writeln!(self.out, "{}", json_line(record));
    }
}
