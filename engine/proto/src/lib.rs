//! Pure, I/O-free model of the fRAC device's wire protocol, shared by the emulated device and the load client.
//!
//! Facts come from the repository's `docs/frac.md` §2–§3 (cited as "frac §N" in
//! every module of this crate) and `docs/tools.md` §1 ("fperf §N").
//!
//! * [`bitstream`]: recognising real Xilinx bitstreams and emulated containers;
//! * [`header`]: the 64-byte request header, its flags and workload routing;
//! * [`reassembly`]: device-side request reassembly (byte stream and segments);
//! * [`controller`]: reconfiguration-controller commands and answers;
//! * [`reconf`]: the request sequence that loads a partial bitstream;
//! * [`client`]: fperf's `-Z 1` and `-Z 0` request framing;
//! * [`response`]: response sizes per unit;
//! * [`limits`]: sizes and limits.

pub mod bitstream;
pub mod client;
pub mod controller;
pub mod error;
pub mod header;
pub mod limits;
pub mod reassembly;
pub mod reconf;
pub mod response;

pub use client::{FracFraming, FramedRequest, TestInfo, TestMode};
pub use controller::{
    CommandLine, ControllerCommand, ControllerRequest, ControllerResponse, ErrorCode, Opcode,
    QueryStatus,
};
pub use error::ProtoError;
pub use header::{Flags, RequestHeader, Route};
pub use limits::*;
pub use reassembly::{Reassembler, Request, SegmentReassembler};
pub use reconf::{ReconfOptions, ReconfUpload, reconf_upload};
pub use response::Unit;
