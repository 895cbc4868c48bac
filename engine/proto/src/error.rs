//! The one error type of the crate.

use crate::header::Route;

/// Everything that can be wrong with bytes or parameters handed to this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    // --- request header (also reported by the reassemblers) ---
    /// A line where a header is expected lacks the `FIRST` flag (byte 60 bit 0);
    /// the device drops such a line (frac §2.3).
    #[error("line where a header is expected lacks the FIRST flag (top config {top_config:#06x})")]
    MissingFirst {
        /// The line's bytes 60-61 read as the top config.
        top_config: u16,
    },
    /// A header byte in 0..56 is not `0xff`; slots would treat the line as data
    /// (frac §2.2).
    #[error("header prefix byte {offset} is {byte:#04x}, not 0xff")]
    BadPrefix {
        /// Offset of the first offending byte.
        offset: usize,
        /// Its value.
        byte: u8,
    },
    /// The declared size is not a whole number of 64-byte lines.
    #[error("declared size {declared} is not a whole number of 64-byte lines")]
    SizeNotWholeLines {
        /// The declared size field.
        declared: u32,
    },
    /// The declared size is too small for its route (an accelerator request
    /// includes its 64-byte header; a controller request needs a command line).
    #[error("declared size {declared} is below the minimum {minimum} for {route:?}")]
    SizeTooSmall {
        /// The declared size field.
        declared: u32,
        /// Smallest declared size accepted for this route.
        minimum: u32,
        /// Where the header routes.
        route: Route,
    },
    /// The request would occupy more than [`crate::MAX_REQUEST_BYTES`] on the wire.
    #[error("request of {wire_size} bytes exceeds the 65472-byte limit")]
    SizeTooLarge {
        /// Bytes on the wire, header included.
        wire_size: u64,
    },

    // --- segment-level model ---
    /// `pkt_receiver.v` drops a segment that is empty, not whole lines, or
    /// longer than the segment limit (frac §2.1).
    #[error("segment of {len} bytes dropped (must be 64..={max} bytes in whole lines)")]
    SegmentDropped {
        /// Segment length.
        len: usize,
        /// The segment limit in force.
        max: usize,
    },

    // --- client framing ---
    /// Workload `0x00ab` is the controller; clients refuse it as a slot (frac §2.2).
    #[error("workload 0x00ab is reserved for the reconfiguration controller")]
    ReservedWorkload,
    /// The piece (`-m`) size must be a positive multiple of 64 (fperf §1.2).
    #[error("piece size {piece_size} is not a positive multiple of 64")]
    PieceSize {
        /// The rejected piece size.
        piece_size: u32,
    },
    /// A caller-supplied payload does not match the request size.
    #[error("payload is {actual} bytes, the request needs {expected}")]
    PayloadLength {
        /// Bytes the framing needs.
        expected: usize,
        /// Bytes supplied.
        actual: usize,
    },
    /// An fperf `test_info` carries an unknown test mode (fperf §1.3).
    #[error("unknown fperf test mode {value}")]
    UnknownTestMode {
        /// The raw u32.
        value: u32,
    },

    // --- reconfiguration controller ---
    /// A request handed to the controller decoder is not routed to the controller.
    #[error("workload {workload:#06x} does not address the reconfiguration controller")]
    NotController {
        /// The header's workload id.
        workload: u16,
    },
    /// The controller body is shorter than one command line.
    #[error("controller body of {len} bytes holds no 64-byte command line")]
    MissingCommandLine {
        /// Body length.
        len: usize,
    },
    /// A `WRITE_HBM` count exceeds the payload the request carries; the real
    /// controller would wait forever for the rest (frac §2.8).
    #[error(
        "WRITE_HBM count {count} exceeds the {available} payload bytes (controller would hang)"
    )]
    WritePayloadShort {
        /// The command's byte count.
        count: u64,
        /// Payload bytes after the command line.
        available: usize,
    },
    /// A controller status byte is not one of the codes 0..=9 (frac §2.8).
    #[error("unknown controller error code {code}")]
    UnknownErrorCode {
        /// The raw byte.
        code: u8,
    },
    /// A standard status line has a nonzero byte after byte 0 (frac §2.8).
    #[error("status line byte {offset} is {byte:#04x}, expected 0")]
    StatusNotZero {
        /// Offset of the first nonzero byte in 1..64.
        offset: usize,
        /// Its value.
        byte: u8,
    },
    /// A 0/1 field of the query-status line holds another value.
    #[error("query-status byte {offset} is {byte}, expected 0 or 1")]
    QueryFlag {
        /// Offset in the line.
        offset: usize,
        /// Its value.
        byte: u8,
    },

    // --- reconfiguration upload plan ---
    /// `-chunk-size` must be 64..=256 and a multiple of 64 (frac §3).
    #[error("chunk size {chunk_size} is not 64..=256 in multiples of 64")]
    ChunkSize {
        /// The rejected chunk size.
        chunk_size: usize,
    },
    /// The staging area is unaligned or does not fit in 33-bit HBM addresses.
    #[error("HBM staging area at {addr:#x} of {len} bytes is unaligned or beyond 33 bits")]
    HbmRange {
        /// Start address.
        addr: u64,
        /// Bytes to stage.
        len: u64,
    },
    /// The slot id is not below [`crate::SLOT_COUNT`].
    #[error("slot {slot} out of range (there are 4 slots)")]
    Slot {
        /// The rejected slot.
        slot: u8,
    },
    /// An empty partial bitstream cannot be loaded (`RECONF_ICAP` size 0 is `ERR_SIZE`).
    #[error("partial bitstream is empty")]
    EmptyBitstream,
}
