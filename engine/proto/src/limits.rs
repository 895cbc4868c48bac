//! Sizes and limits of the fRAC wire format, as named constants.
//!
//! Section numbers refer to `docs/frac.md` ("frac §N") and `docs/tools.md`
//! ("fperf §N", its §1).

/// One 64-byte line: one 512-bit AXI-Stream beat; everything on the wire is
/// counted in whole lines (frac §2.1).
pub const LINE: usize = 64;

/// [`LINE`] as a `u32`, for arithmetic on the header's 32-bit size field.
pub const LINE_U32: u32 = 64;

/// Length of the fRAC request header: exactly one line (frac §2.2).
pub const HEADER_LEN: usize = LINE;

/// Bytes 0..56 of the header are the all-`0xff` prefix (frac §2.2).
pub const PREFIX_LEN: usize = 56;

/// The byte every prefix byte must hold.
pub const PREFIX_BYTE: u8 = 0xff;

/// Largest request the device handles, header included.
///
/// frac §2.3: the size that reaches the slots is 16 bits wide (`rx_req_size`),
/// so the largest request is 65535 rounded down to whole lines, 65472 bytes
/// (the figure `checkfuncs.go` uses).  The limit is inclusive:
/// 65 472 bytes is accepted, 65 536 is not.  This crate applies it to the bytes
/// a request occupies on the wire, so for the reconfiguration controller (whose
/// declared size excludes the header) the declared size may be at most
/// `MAX_REQUEST_BYTES - 64`.
pub const MAX_REQUEST_BYTES: u32 = 65_472;

/// Largest TCP segment `pkt_receiver.v` accepts in the current build
/// (frac §2.1: `MAX_PACKET_BYTES`, 8192 per `scripts/checkfuncs.go`; one RTL
/// version used 4096, the oldest clients 512).  Only the segment-level model
/// ([`crate::SegmentReassembler`]) uses it.
pub const MAX_SEGMENT_BYTES: usize = 8192;

/// Number of accelerator slots (cells C00..C03) in the current build
/// (frac §2.2, §2.8; the older `.md` docs say 3).
pub const SLOT_COUNT: u8 = 4;

/// Workload id that addresses the reconfiguration controller (frac §2.2).
pub const CONTROLLER_WORKLOAD: u16 = 0x00ab;

/// Top config clients write before overwriting bits 1:0 with the flags
/// (frac §2.2, §2.7).
pub const DEFAULT_TOP_CONFIG: u16 = 0xffff;

/// Payload filler byte fperf writes after the header (frac §2.7, fperf §1.8).
pub const FILLER_BYTE: u8 = 0x9f;

/// HBM addresses are 33 bits wide; a larger address gives `ERR_ADDR`
/// (frac §2.8, §3).
pub const HBM_ADDR_BITS: u32 = 33;

/// HBM command addresses must be 32-byte aligned (frac §2.8).
pub const HBM_ALIGN: u64 = 32;

/// `READ_HBM` reads 1..=64 bytes (frac §2.8).
pub const READ_HBM_MAX: u64 = 64;

/// `RECONF_ICAP` byte counts must be a multiple of 4 (32-bit ICAP words,
/// frac §2.8); `reconfslots` pads the partial bitstream to this (frac §3).
pub const ICAP_WORD: usize = 4;

/// `reconfslots -chunk-size` default used by the harness (frac §3).
pub const DEFAULT_CHUNK_SIZE: usize = 256;

/// Smallest `-chunk-size` `reconfslots` accepts (frac §3: 64..256, multiple of 64).
pub const MIN_CHUNK_SIZE: usize = 64;

/// Largest `-chunk-size` `reconfslots` accepts (frac §3).
pub const MAX_CHUNK_SIZE: usize = 256;

/// `reconfslots -hbm-addr` default used by the harness (frac §3).
pub const DEFAULT_HBM_ADDR: u64 = 0x1000_4000;

/// `norm` holds at most 256 data lines; a longer request never finishes
/// (frac §2.5, fperf §1.8 `FRAC_NORM_MAX_REQ_SIZE`).
pub const NORM_MAX_DATA_LINES: u32 = 256;

/// Largest `norm` request that gets an answer: 64 + 256 x 64 = 16 448 bytes.
pub const NORM_MAX_REQUEST_BYTES: u32 = LINE_U32 + NORM_MAX_DATA_LINES * LINE_U32;

/// Rounds `n` up to whole lines.
#[must_use]
pub const fn pad_to_line(n: usize) -> usize {
    n.div_ceil(LINE) * LINE
}
