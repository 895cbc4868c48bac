//! The bodies of the fuzz targets: one function per surface that reads hostile bytes, each asserting that surface's invariants.
//!
//! Every `pub fn NAME(data: &[u8])` here is a fuzz target: `fuzz/fuzz_targets/NAME.rs` hands it libFuzzer's
//! input, and `tests/corpus.rs` replays every file of `fuzz/corpus/NAME/` and `fuzz/regressions/NAME/` through it
//! on the stable toolchain. A target panics only when the surface breaks an invariant (a panic inside the surface
//! is a finding too); bad input that the surface refuses with an error is the expected case.
//!
//! The targets that need files (the loader, the profile and declaration loaders, the Parquet reader) share one
//! scratch project per process, made on first use ([`scratch`]); those that need a peer (the management channel,
//! the client helpers) start it once per process on loopback.

mod device;
mod fperf;
mod hw;
mod pipeline;
mod proto;
mod samples;
mod scratch;
mod tools;

pub use device::{client_replies, device_image, management_channel};
pub use fperf::{fperf_console, fperf_hugepage};
pub use hw::{hw_shell, hw_unit, testbed_profile};
pub use pipeline::pipeline_load;
pub use proto::{proto_controller, proto_reassembly};
pub use samples::{
    by_thread_sidecar, let_parquet_panics_unwind, samples_by_thread, samples_parquet,
};
pub use scratch::remove_scratch;
pub use tools::{host_facts, metric_extract, scontrol_show_job, trace_csv};

/// A fuzz target's body: it gets libFuzzer's input and panics when an invariant breaks.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/` and the corpus directories name them.
pub const TARGETS: &[(&str, Target)] = &[
    ("client_replies", client_replies),
    ("device_image", device_image),
    ("fperf_console", fperf_console),
    ("fperf_hugepage", fperf_hugepage),
    ("host_facts", host_facts),
    ("hw_shell", hw_shell),
    ("hw_unit", hw_unit),
    ("management_channel", management_channel),
    ("metric_extract", metric_extract),
    ("pipeline_load", pipeline_load),
    ("proto_controller", proto_controller),
    ("proto_reassembly", proto_reassembly),
    ("samples_by_thread", samples_by_thread),
    ("samples_parquet", samples_parquet),
    ("scontrol_show_job", scontrol_show_job),
    ("testbed_profile", testbed_profile),
    ("trace_csv", trace_csv),
];

/// Reads a fuzz input front to back: control bytes first (zero once exhausted), then the rest as the payload.
#[derive(Debug)]
struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    fn new(bytes: &'a [u8]) -> Input<'a> {
        Input { bytes }
    }

    fn byte(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&first, rest)) => {
                self.bytes = rest;
                first
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn rest(self) -> &'a [u8] {
        self.bytes
    }
}

/// Input bytes as text the way the surfaces read files: lossy, so invalid UTF-8 still exercises the parser.
fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}
