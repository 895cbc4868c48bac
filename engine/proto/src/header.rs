//! The 64-byte fRAC request header (`docs/frac.md` §2.2, "frac §") and workload routing.
//!
//! Layout, all little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..56 | prefix, all `0xff` |
//! | 56..60 | declared size, u32 |
//! | 60..62 | top config, u16; bits 1:0 are the flags `FIRST` (0x1) and `LAST` (0x2) |
//! | 62..64 | workload id, u16 |
//!
//! For accelerator workloads the declared size INCLUDES the header; for the
//! reconfiguration controller (workload `0x00ab`) it EXCLUDES it and the
//! dispatcher adds 64 back.  [`RequestHeader::wire_size`] is the one place
//! that difference is resolved.

use std::ops::BitOr;

use crate::error::ProtoError;
use crate::limits::{
    CONTROLLER_WORKLOAD, DEFAULT_TOP_CONFIG, HEADER_LEN, LINE_U32, MAX_REQUEST_BYTES, PREFIX_BYTE,
    PREFIX_LEN, SLOT_COUNT,
};

const SIZE_AT: usize = 56;
const TOP_CONFIG_AT: usize = 60;
const WORKLOAD_AT: usize = 62;
const FLAG_MASK: u16 = 0x3;

/// The request flags held in bits 1:0 of the top config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    /// Neither flag.
    pub const NONE: Flags = Flags(0);
    /// `FIRST` (0x1): the line is a request header; the dispatcher recognises
    /// headers only by this bit (frac §2.3).
    pub const FIRST: Flags = Flags(0x1);
    /// `LAST` (0x2): the whole request is in this piece; on a header-only
    /// segment it ends the request (frac §2.3).
    pub const LAST: Flags = Flags(0x2);
    /// `FIRST | LAST`, what a request sent in one piece carries.
    pub const FIRST_LAST: Flags = Flags(0x3);

    /// The flags held in bits 1:0 of a top config; other bits are ignored.
    #[must_use]
    pub const fn from_top_config(top_config: u16) -> Flags {
        // Masked to two bits, so the narrowing cannot lose anything.
        Flags((top_config & FLAG_MASK) as u8)
    }

    /// The flags as bits 1:0.
    #[must_use]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every flag of `other` is set in `self`.
    #[must_use]
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether `FIRST` is set.
    #[must_use]
    pub const fn is_first(self) -> bool {
        self.contains(Flags::FIRST)
    }

    /// Whether `LAST` is set.
    #[must_use]
    pub const fn is_last(self) -> bool {
        self.contains(Flags::LAST)
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

/// Where the device sends a request, decided by the workload id alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// Accelerator slot 0..=3 (cells C00..C03).
    Slot(u8),
    /// The reconfiguration controller (workload `0x00ab`).
    Controller,
}

impl Route {
    /// Workloads 0..=3 go to slots 0..=3, `0x00ab` to the controller, every
    /// other id falls through to slot 0 (frac §2.2, §3).
    #[must_use]
    pub const fn from_workload(workload: u16) -> Route {
        if workload == CONTROLLER_WORKLOAD {
            Route::Controller
        } else if workload < SLOT_COUNT as u16 {
            // workload < 4, so it fits in a u8.
            Route::Slot(workload as u8)
        } else {
            Route::Slot(0)
        }
    }
}

/// The decoded fields of a request header.
///
/// `top_config` is the whole 16-bit field, flags included: `top_k` reads all
/// of it as its result mask (frac §2.2), so the flags are not split off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestHeader {
    /// The declared size field, as written (see [`RequestHeader::wire_size`]).
    pub declared_size: u32,
    /// The top config field; bits 1:0 are the [`Flags`].
    pub top_config: u16,
    /// The workload id; see [`Route::from_workload`].
    pub workload: u16,
}

impl RequestHeader {
    /// A header for an accelerator workload the way clients write it: top
    /// config `0xffff` with bits 1:0 replaced by `flags`, and `request_size`
    /// counting the header.
    #[must_use]
    pub const fn accelerator(workload: u16, request_size: u32, flags: Flags) -> RequestHeader {
        RequestHeader {
            declared_size: request_size,
            top_config: (DEFAULT_TOP_CONFIG & !FLAG_MASK) | flags.0 as u16,
            workload,
        }
    }

    /// A controller header for a body (command line + padded payload) of
    /// `body_len` bytes: declared size `body_len` (the header excluded),
    /// `FIRST|LAST` as clients always send (frac §2.8), workload `0x00ab`.
    #[must_use]
    pub const fn controller(body_len: u32) -> RequestHeader {
        RequestHeader {
            declared_size: body_len,
            top_config: DEFAULT_TOP_CONFIG,
            workload: CONTROLLER_WORKLOAD,
        }
    }

    /// The flags in bits 1:0 of the top config.
    #[must_use]
    pub const fn flags(&self) -> Flags {
        Flags::from_top_config(self.top_config)
    }

    /// The same header with bits 1:0 of the top config replaced by `flags`.
    #[must_use]
    pub const fn with_flags(self, flags: Flags) -> RequestHeader {
        RequestHeader {
            top_config: (self.top_config & !FLAG_MASK) | flags.0 as u16,
            ..self
        }
    }

    /// Where the workload id routes the request.
    #[must_use]
    pub const fn route(&self) -> Route {
        Route::from_workload(self.workload)
    }

    /// Bytes the whole request occupies on the wire, header included: the
    /// declared size for accelerator workloads, declared size + 64 for the
    /// controller (the dispatcher adds the header back, frac §2.3 step 1).
    #[must_use]
    pub const fn wire_size(&self) -> u64 {
        match self.route() {
            Route::Controller => self.declared_size as u64 + HEADER_LEN as u64,
            Route::Slot(_) => self.declared_size as u64,
        }
    }

    /// Bytes after the header line: the accelerator's data lines, or the
    /// controller's command line and padded payload.
    #[must_use]
    pub const fn body_len(&self) -> u64 {
        self.wire_size().saturating_sub(HEADER_LEN as u64)
    }

    /// The 64 header bytes: `0xff` prefix, then the three fields little-endian.
    #[must_use]
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut line = [PREFIX_BYTE; HEADER_LEN];
        line[SIZE_AT..TOP_CONFIG_AT].copy_from_slice(&self.declared_size.to_le_bytes());
        line[TOP_CONFIG_AT..WORKLOAD_AT].copy_from_slice(&self.top_config.to_le_bytes());
        line[WORKLOAD_AT..HEADER_LEN].copy_from_slice(&self.workload.to_le_bytes());
        line
    }

    /// Reads the three fields of any line without checking anything (the
    /// dispatcher's view: it looks at bytes 56..64 only).
    #[must_use]
    pub fn read_fields(line: &[u8; HEADER_LEN]) -> RequestHeader {
        RequestHeader {
            declared_size: u32::from_le_bytes([line[56], line[57], line[58], line[59]]),
            top_config: u16::from_le_bytes([line[TOP_CONFIG_AT], line[TOP_CONFIG_AT + 1]]),
            workload: u16::from_le_bytes([line[WORKLOAD_AT], line[WORKLOAD_AT + 1]]),
        }
    }

    /// Decodes a header line, rejecting, in this order (the first failure is
    /// reported):
    ///
    /// 1. [`ProtoError::MissingFirst`]: bit 0 of byte 60 is clear (the
    ///    dispatcher does not take the line as a header);
    /// 2. [`ProtoError::BadPrefix`]: a byte in 0..56 is not `0xff` (slots
    ///    would treat the line as data, frac §2.2);
    /// 3. the size checks of [`RequestHeader::validate`].
    ///
    /// `LAST`, the other top-config bits and unknown workload ids (routed to
    /// slot 0) are accepted.  A decoded header re-encodes to the same bytes.
    pub fn decode(line: &[u8; HEADER_LEN]) -> Result<RequestHeader, ProtoError> {
        let header = RequestHeader::read_fields(line);
        if !header.flags().is_first() {
            return Err(ProtoError::MissingFirst {
                top_config: header.top_config,
            });
        }
        if let Some((offset, &byte)) = line[..PREFIX_LEN]
            .iter()
            .enumerate()
            .find(|&(_, &b)| b != PREFIX_BYTE)
        {
            return Err(ProtoError::BadPrefix { offset, byte });
        }
        header.validate()?;
        Ok(header)
    }

    /// Checks the fields the way [`RequestHeader::decode`] does, prefix aside:
    /// `FIRST` set ([`ProtoError::MissingFirst`]); declared size a multiple of
    /// 64 ([`ProtoError::SizeNotWholeLines`]); at least 64, i.e. the header
    /// itself for an accelerator or one command line for the controller
    /// ([`ProtoError::SizeTooSmall`]); and at most [`MAX_REQUEST_BYTES`] on
    /// the wire ([`ProtoError::SizeTooLarge`]).
    pub fn validate(&self) -> Result<(), ProtoError> {
        if !self.flags().is_first() {
            return Err(ProtoError::MissingFirst {
                top_config: self.top_config,
            });
        }
        if !self.declared_size.is_multiple_of(LINE_U32) {
            return Err(ProtoError::SizeNotWholeLines {
                declared: self.declared_size,
            });
        }
        if self.declared_size < LINE_U32 {
            return Err(ProtoError::SizeTooSmall {
                declared: self.declared_size,
                minimum: LINE_U32,
                route: self.route(),
            });
        }
        let wire_size = self.wire_size();
        if wire_size > u64::from(MAX_REQUEST_BYTES) {
            return Err(ProtoError::SizeTooLarge { wire_size });
        }
        Ok(())
    }
}
