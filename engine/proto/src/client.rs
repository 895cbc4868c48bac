//! Client-side request framing: fperf `-Z 1` (fRAC header, frac §2.7 and
//! fperf §1.8) and fperf `-Z 0` (`struct test_info` for fperf's CPU server,
//! fperf §1.9).  "frac §N" is `docs/frac.md` §N, "fperf §N" `docs/tools.md` §N.

use crate::error::ProtoError;
use crate::header::{Flags, RequestHeader};
use crate::limits::{
    CONTROLLER_WORKLOAD, DEFAULT_TOP_CONFIG, FILLER_BYTE, HEADER_LEN, LINE, LINE_U32,
};

/// The parameters of an fperf `-Z 1` request: `-K` workload, `-X` request
/// size (header included), `-m` piece size, and the top config before the
/// flags are written into bits 1:0 (`0xffff` in fperf).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FracFraming {
    /// `-K`: header bytes 62..64.
    pub workload: u16,
    /// `-X`: bytes including the 64-byte header.
    pub request_size: u32,
    /// `-m`: bytes per write; the last piece may be shorter.
    pub piece_size: u32,
    /// Top config before the flags overwrite bits 1:0.
    pub top_config: u16,
}

impl FracFraming {
    /// fperf's framing: top config `0xffff`.
    #[must_use]
    pub const fn new(workload: u16, request_size: u32, piece_size: u32) -> FracFraming {
        FracFraming {
            workload,
            request_size,
            piece_size,
            top_config: DEFAULT_TOP_CONFIG,
        }
    }

    /// `FIRST` always; `LAST` too when the whole request fits in one piece
    /// (`-X <= -m`).
    #[must_use]
    pub const fn flags(&self) -> Flags {
        if self.request_size <= self.piece_size {
            Flags::FIRST_LAST
        } else {
            Flags::FIRST
        }
    }

    /// The header, after checking the parameters as fperf (commit `17ec7ac`
    /// on) and the device require: workload not `0x00ab`
    /// ([`ProtoError::ReservedWorkload`]); piece size a positive multiple of
    /// 64 ([`ProtoError::PieceSize`]); request size whole lines, at least
    /// the header, at most [`crate::MAX_REQUEST_BYTES`].
    pub fn header(&self) -> Result<RequestHeader, ProtoError> {
        if self.workload == CONTROLLER_WORKLOAD {
            return Err(ProtoError::ReservedWorkload);
        }
        if self.piece_size == 0 || !self.piece_size.is_multiple_of(LINE_U32) {
            return Err(ProtoError::PieceSize {
                piece_size: self.piece_size,
            });
        }
        let header = RequestHeader {
            declared_size: self.request_size,
            top_config: self.top_config,
            workload: self.workload,
        }
        .with_flags(self.flags());
        header.validate()?;
        Ok(header)
    }

    /// The request with fperf's `0x9f` filler after the header.
    pub fn build(&self) -> Result<FramedRequest, ProtoError> {
        let header = self.header()?;
        let mut bytes = Vec::with_capacity(header.wire_size() as usize);
        bytes.extend_from_slice(&header.encode());
        bytes.resize(self.request_size as usize, FILLER_BYTE);
        Ok(FramedRequest {
            bytes,
            piece_size: self.piece_size as usize,
        })
    }

    /// The request with `payload` (exactly `request_size - 64` bytes) after
    /// the header, e.g. unit-shaped data as in fperf's `-r` mode.
    pub fn build_with_payload(&self, payload: &[u8]) -> Result<FramedRequest, ProtoError> {
        let header = self.header()?;
        let expected = self.request_size as usize - HEADER_LEN;
        if payload.len() != expected {
            return Err(ProtoError::PayloadLength {
                expected,
                actual: payload.len(),
            });
        }
        let mut bytes = Vec::with_capacity(self.request_size as usize);
        bytes.extend_from_slice(&header.encode());
        bytes.extend_from_slice(payload);
        Ok(FramedRequest {
            bytes,
            piece_size: self.piece_size as usize,
        })
    }
}

/// A framed request and the pieces a client writes it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramedRequest {
    bytes: Vec<u8>,
    piece_size: usize,
}

impl FramedRequest {
    /// All bytes: header, then payload.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// All bytes, owned.
    #[must_use]
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// The writes, in order: `-m` bytes each, the last possibly shorter; the
    /// header is at the start of the first piece only.
    pub fn pieces(&self) -> std::slice::Chunks<'_, u8> {
        self.bytes.chunks(self.piece_size)
    }

    /// Number of writes.
    #[must_use]
    pub fn piece_count(&self) -> usize {
        self.bytes.len().div_ceil(self.piece_size)
    }
}

/// fperf's test mode, sent in `test_info` (fperf §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum TestMode {
    /// `read`.
    Read = 0,
    /// `write`.
    Write = 1,
    /// `rr`: request/response.
    Rr = 2,
    /// `crr`: request/response, reconnecting each time.
    Crr = 3,
    /// `rw`.
    Rw = 4,
}

impl TestMode {
    /// The mode for a raw value, if it is one.
    #[must_use]
    pub const fn from_u32(value: u32) -> Option<TestMode> {
        match value {
            0 => Some(TestMode::Read),
            1 => Some(TestMode::Write),
            2 => Some(TestMode::Rr),
            3 => Some(TestMode::Crr),
            4 => Some(TestMode::Rw),
            _ => None,
        }
    }
}

/// fperf's `-Z 0` header (`struct test_info`, 64 bytes, fperf §1.9), the
/// first 64 bytes of every request to fperf's CPU server, counted in `-X`.
///
/// | bytes | field |
/// | --- | --- |
/// | 0..4 | test mode |
/// | 4..8 | message size (`-m`) |
/// | 8..12 | bit 0 integrity enabled, bit 1 zero-copy write |
/// | 12..16 | integrity offset (effectively random) |
/// | 16..20 | response size (`-R`) |
/// | 20..24 | function (`-F`) |
/// | 24..28 | request size (`-X`) |
/// | 28..64 | zero |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TestInfo {
    /// Test mode.
    pub test: TestMode,
    /// `-m`.
    pub message_size: u32,
    /// Bit 0 of the flag word (`-i`; has no effect in fperf).
    pub integrity_enabled: bool,
    /// Bit 1 of the flag word (`-W`, default on).
    pub enable_zwrite: bool,
    /// Low 32 bits of the client's clock at connection creation.
    pub integrity_off: u32,
    /// `-R`.
    pub response_size: u32,
    /// `-F`: 1 TOPK, 2 CNN, 3 LOGIT, 5 NORM, 0 none.
    pub func: u32,
    /// `-X`.
    pub req_size: u32,
}

impl TestInfo {
    /// An `rr` header as fperf's client writes it with default flags
    /// (zero-copy write on, integrity off) and integrity offset 0.
    #[must_use]
    pub const fn rr(message_size: u32, req_size: u32, response_size: u32, func: u32) -> TestInfo {
        TestInfo {
            test: TestMode::Rr,
            message_size,
            integrity_enabled: false,
            enable_zwrite: true,
            integrity_off: 0,
            response_size,
            func,
            req_size,
        }
    }

    /// The 64 bytes, little-endian, padding zero.
    #[must_use]
    pub fn encode(&self) -> [u8; LINE] {
        let flags = u32::from(self.integrity_enabled) | u32::from(self.enable_zwrite) << 1;
        let words = [
            self.test as u32,
            self.message_size,
            flags,
            self.integrity_off,
            self.response_size,
            self.func,
            self.req_size,
        ];
        let mut line = [0u8; LINE];
        for (chunk, word) in line.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        line
    }

    /// Decodes the 64 bytes; rejects an unknown test mode.  Bits 2..32 of
    /// the flag word and the padding are ignored (the C bitfield leaves them
    /// unspecified).
    pub fn decode(line: &[u8; LINE]) -> Result<TestInfo, ProtoError> {
        let word = |i: usize| {
            u32::from_le_bytes([
                line[4 * i],
                line[4 * i + 1],
                line[4 * i + 2],
                line[4 * i + 3],
            ])
        };
        let test =
            TestMode::from_u32(word(0)).ok_or(ProtoError::UnknownTestMode { value: word(0) })?;
        let flags = word(2);
        Ok(TestInfo {
            test,
            message_size: word(1),
            integrity_enabled: flags & 1 != 0,
            enable_zwrite: flags & 2 != 0,
            integrity_off: word(3),
            response_size: word(4),
            func: word(5),
            req_size: word(6),
        })
    }
}
