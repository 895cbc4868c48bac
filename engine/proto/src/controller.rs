//! The reconfiguration-controller protocol, workload `0x00ab` (`docs/frac.md` §2.8, §3: "frac §").
//!
//! A controller request is the fRAC header (declared size = command line +
//! padded payload, header excluded; `FIRST|LAST`) followed by one 64-byte
//! command line and, for `WRITE_HBM`, the payload padded to whole lines.  The
//! answer is always one 64-byte line.
//!
//! Command line, little-endian: byte 0 opcode, byte 1 slot, bytes 2..8
//! reserved, 8..16 HBM byte address (u64), 16..24 byte count (u64), 24..64
//! reserved.  Reserved bytes are written as zero and ignored on decode.

use crate::error::ProtoError;
use crate::header::{RequestHeader, Route};
use crate::limits::{
    HBM_ADDR_BITS, HBM_ALIGN, HEADER_LEN, ICAP_WORD, LINE, READ_HBM_MAX, SLOT_COUNT, pad_to_line,
};

const ADDR_AT: usize = 8;
const COUNT_AT: usize = 16;

/// Command opcodes (frac §2.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Write the payload to HBM; answered by a status line.
    WriteHbm = 1,
    /// Read 1..=64 bytes of HBM; answered by the raw data, zero-padded, with
    /// no status byte.
    ReadHbm = 2,
    /// Stream HBM bytes into ICAP to reload a slot; answered by a status line
    /// after PRDONE (0) or PRERROR (9).
    ReconfIcap = 3,
    /// Report the controller state; answered by a query-status line.
    QueryStatus = 4,
}

impl Opcode {
    /// The opcode for a byte, if it is one.
    #[must_use]
    pub const fn from_u8(byte: u8) -> Option<Opcode> {
        match byte {
            1 => Some(Opcode::WriteHbm),
            2 => Some(Opcode::ReadHbm),
            3 => Some(Opcode::ReconfIcap),
            4 => Some(Opcode::QueryStatus),
            _ => None,
        }
    }
}

/// Controller status codes (frac §2.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ErrorCode {
    /// `ERR_OK`.
    Ok = 0,
    /// `ERR_OPCODE`: unknown opcode.
    Opcode = 1,
    /// `ERR_ALIGN`: address not 32-byte aligned.
    Align = 2,
    /// `ERR_SIZE`: size zero, read over 64, or reconf size not a multiple of 4.
    Size = 3,
    /// `ERR_ADDR`: address beyond the 33-bit width.
    Addr = 4,
    /// `ERR_AXI_BRESP`: HBM write response error.
    AxiBresp = 5,
    /// `ERR_AXI_RRESP`: HBM read response error.
    AxiRresp = 6,
    /// `ERR_RLAST`: HBM read burst ended wrongly.
    Rlast = 7,
    /// `ERR_SLOT`: slot id out of range.
    Slot = 8,
    /// `ERR_ICAP`: PRERROR observed.
    Icap = 9,
}

impl ErrorCode {
    /// The code for a byte, if it is one.
    #[must_use]
    pub const fn from_u8(byte: u8) -> Option<ErrorCode> {
        match byte {
            0 => Some(ErrorCode::Ok),
            1 => Some(ErrorCode::Opcode),
            2 => Some(ErrorCode::Align),
            3 => Some(ErrorCode::Size),
            4 => Some(ErrorCode::Addr),
            5 => Some(ErrorCode::AxiBresp),
            6 => Some(ErrorCode::AxiRresp),
            7 => Some(ErrorCode::Rlast),
            8 => Some(ErrorCode::Slot),
            9 => Some(ErrorCode::Icap),
            _ => None,
        }
    }

    fn decode(byte: u8) -> Result<ErrorCode, ProtoError> {
        ErrorCode::from_u8(byte).ok_or(ProtoError::UnknownErrorCode { code: byte })
    }
}

/// A command line's fields as raw values, valid or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommandLine {
    /// Byte 0.
    pub opcode: u8,
    /// Byte 1 (used by `RECONF_ICAP` only).
    pub slot: u8,
    /// Bytes 8..16.
    pub hbm_addr: u64,
    /// Bytes 16..24.
    pub byte_count: u64,
}

impl CommandLine {
    /// The 64-byte line; reserved bytes zero.
    #[must_use]
    pub fn encode(&self) -> [u8; LINE] {
        let mut line = [0u8; LINE];
        line[0] = self.opcode;
        line[1] = self.slot;
        line[ADDR_AT..COUNT_AT].copy_from_slice(&self.hbm_addr.to_le_bytes());
        line[COUNT_AT..COUNT_AT + 8].copy_from_slice(&self.byte_count.to_le_bytes());
        line
    }

    /// Reads the fields of a line; reserved bytes are ignored, as the
    /// controller ignores them, so this cannot fail.
    #[must_use]
    pub fn decode(line: &[u8; LINE]) -> CommandLine {
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&line[ADDR_AT..COUNT_AT]);
        let mut count = [0u8; 8];
        count.copy_from_slice(&line[COUNT_AT..COUNT_AT + 8]);
        CommandLine {
            opcode: line[0],
            slot: line[1],
            hbm_addr: u64::from_le_bytes(addr),
            byte_count: u64::from_le_bytes(count),
        }
    }

    /// The controller's validation, in its order, first failure wins
    /// (frac §2.8): opcode known (`ERR_OPCODE`); `QUERY_STATUS` accepted at
    /// once; address below 2^33 (`ERR_ADDR`); 32-byte aligned (`ERR_ALIGN`);
    /// size nonzero, read size <= 64, reconf size a multiple of 4
    /// (`ERR_SIZE`); reconf slot below [`SLOT_COUNT`] (`ERR_SLOT`).  The slot
    /// byte of other commands is ignored.  Runtime failures (AXI errors,
    /// PRERROR) are not predicted.
    pub fn validate(&self) -> Result<Opcode, ErrorCode> {
        let opcode = Opcode::from_u8(self.opcode).ok_or(ErrorCode::Opcode)?;
        if opcode == Opcode::QueryStatus {
            return Ok(opcode);
        }
        if self.hbm_addr >> HBM_ADDR_BITS != 0 {
            return Err(ErrorCode::Addr);
        }
        if !self.hbm_addr.is_multiple_of(HBM_ALIGN) {
            return Err(ErrorCode::Align);
        }
        if self.byte_count == 0 {
            return Err(ErrorCode::Size);
        }
        if opcode == Opcode::ReadHbm && self.byte_count > READ_HBM_MAX {
            return Err(ErrorCode::Size);
        }
        if opcode == Opcode::ReconfIcap {
            if !self.byte_count.is_multiple_of(ICAP_WORD as u64) {
                return Err(ErrorCode::Size);
            }
            if self.slot >= SLOT_COUNT {
                return Err(ErrorCode::Slot);
            }
        }
        Ok(opcode)
    }
}

/// A controller command, typed.  Constructing one does not validate it (a
/// client may send a bad command on purpose); see
/// [`ControllerRequest::validate`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ControllerRequest {
    /// `WRITE_HBM`: the byte count is `data.len()`; the payload travels
    /// padded to whole lines.
    WriteHbm {
        /// HBM byte address.
        addr: u64,
        /// The meaningful bytes.
        data: Vec<u8>,
    },
    /// `READ_HBM` of `len` bytes.
    ReadHbm {
        /// HBM byte address.
        addr: u64,
        /// Bytes to read (1..=64 to be valid).
        len: u64,
    },
    /// `RECONF_ICAP` of `slot` from `len` bytes at `addr`.
    ReconfIcap {
        /// Slot to reload.
        slot: u8,
        /// HBM byte address of the staged partial.
        addr: u64,
        /// Bytes to stream (multiple of 4 to be valid).
        len: u64,
    },
    /// `QUERY_STATUS`.
    QueryStatus,
}

/// What a controller body decodes to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ControllerCommand {
    /// A command that passes validation.
    Valid(ControllerRequest),
    /// A command the controller answers with a status line carrying `code`.
    Rejected {
        /// The raw command.
        command: CommandLine,
        /// The status code the controller sends.
        code: ErrorCode,
    },
}

impl ControllerRequest {
    /// The command line's fields (reserved and unused fields zero).
    #[must_use]
    pub fn command_line(&self) -> CommandLine {
        match self {
            ControllerRequest::WriteHbm { addr, data } => CommandLine {
                opcode: Opcode::WriteHbm as u8,
                slot: 0,
                hbm_addr: *addr,
                byte_count: data.len() as u64,
            },
            ControllerRequest::ReadHbm { addr, len } => CommandLine {
                opcode: Opcode::ReadHbm as u8,
                slot: 0,
                hbm_addr: *addr,
                byte_count: *len,
            },
            ControllerRequest::ReconfIcap { slot, addr, len } => CommandLine {
                opcode: Opcode::ReconfIcap as u8,
                slot: *slot,
                hbm_addr: *addr,
                byte_count: *len,
            },
            ControllerRequest::QueryStatus => CommandLine {
                opcode: Opcode::QueryStatus as u8,
                slot: 0,
                hbm_addr: 0,
                byte_count: 0,
            },
        }
    }

    /// The opcode.
    #[must_use]
    pub fn opcode(&self) -> Opcode {
        match self {
            ControllerRequest::WriteHbm { .. } => Opcode::WriteHbm,
            ControllerRequest::ReadHbm { .. } => Opcode::ReadHbm,
            ControllerRequest::ReconfIcap { .. } => Opcode::ReconfIcap,
            ControllerRequest::QueryStatus => Opcode::QueryStatus,
        }
    }

    /// The status code the controller's validation gives this command.
    pub fn validate(&self) -> Result<(), ErrorCode> {
        self.command_line().validate().map(|_| ())
    }

    /// The body: the command line, then (for `WRITE_HBM`) the data padded with
    /// zeros to whole lines.
    #[must_use]
    pub fn body(&self) -> Vec<u8> {
        let data: &[u8] = match self {
            ControllerRequest::WriteHbm { data, .. } => data,
            _ => &[],
        };
        let mut body = Vec::with_capacity(LINE + pad_to_line(data.len()));
        body.extend_from_slice(&self.command_line().encode());
        body.extend_from_slice(data);
        body.resize(LINE + pad_to_line(data.len()), 0);
        body
    }

    /// The header: declared size = body length (header excluded),
    /// `FIRST|LAST`, workload `0x00ab`.  The declared size saturates for a
    /// body beyond 4 GiB, which the header would reject anyway.
    #[must_use]
    pub fn header(&self) -> RequestHeader {
        let data_len = match self {
            ControllerRequest::WriteHbm { data, .. } => data.len(),
            _ => 0,
        };
        let body_len = LINE.saturating_add(pad_to_line(data_len));
        RequestHeader::controller(u32::try_from(body_len).unwrap_or(u32::MAX))
    }

    /// The whole request as TCP payload bytes: header, command line, padded data.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + LINE);
        out.extend_from_slice(&self.header().encode());
        out.extend_from_slice(&self.body());
        out
    }

    /// Decodes a request the reassembler delivered for the controller.
    pub fn from_request(
        header: &RequestHeader,
        body: &[u8],
    ) -> Result<ControllerCommand, ProtoError> {
        if header.route() != Route::Controller {
            return Err(ProtoError::NotController {
                workload: header.workload,
            });
        }
        ControllerRequest::decode_body(body)
    }

    /// Decodes a body (command line + payload) as the controller does:
    /// a structurally incomplete body is an error (no command line, or a
    /// valid `WRITE_HBM` whose count exceeds the payload: the controller would
    /// wait forever); a command that fails validation is
    /// [`ControllerCommand::Rejected`] with the status code it earns; payload
    /// lines beyond what the command needs are ignored (drained).
    pub fn decode_body(body: &[u8]) -> Result<ControllerCommand, ProtoError> {
        let Some(line) = body.first_chunk::<LINE>() else {
            return Err(ProtoError::MissingCommandLine { len: body.len() });
        };
        let command = CommandLine::decode(line);
        let opcode = match command.validate() {
            Ok(opcode) => opcode,
            Err(code) => return Ok(ControllerCommand::Rejected { command, code }),
        };
        let payload = &body[LINE..];
        let request = match opcode {
            Opcode::WriteHbm => {
                let data = usize::try_from(command.byte_count)
                    .ok()
                    .and_then(|count| payload.get(..count))
                    .ok_or(ProtoError::WritePayloadShort {
                        count: command.byte_count,
                        available: payload.len(),
                    })?;
                ControllerRequest::WriteHbm {
                    addr: command.hbm_addr,
                    data: data.to_vec(),
                }
            }
            Opcode::ReadHbm => ControllerRequest::ReadHbm {
                addr: command.hbm_addr,
                len: command.byte_count,
            },
            Opcode::ReconfIcap => ControllerRequest::ReconfIcap {
                slot: command.slot,
                addr: command.hbm_addr,
                len: command.byte_count,
            },
            Opcode::QueryStatus => ControllerRequest::QueryStatus,
        };
        Ok(ControllerCommand::Valid(request))
    }
}

/// The query-status line (frac §2.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryStatus {
    /// Byte 0: the query's own result, always `ERR_OK` when accepted.
    pub query_result: ErrorCode,
    /// Byte 1: a reconfiguration is active.
    pub reconf_active: bool,
    /// Byte 2: most recently completed slot id.
    pub last_slot_id: u8,
    /// Byte 3: result of the previous operation (read this, not byte 0).
    pub last_error: ErrorCode,
    /// Byte 4: ICAP AVAIL.
    pub icap_avail: bool,
    /// Byte 5: PRDONE observed.
    pub prdone_seen: bool,
    /// Byte 6: PRERROR observed.
    pub prerror_seen: bool,
    /// Bytes 8..16: cycles of the last reconfiguration (200 MHz, 5 ns each).
    pub last_cycles: u64,
    /// Bytes 16..24: current cycle count if active, else 0.
    pub active_cycles: u64,
}

impl QueryStatus {
    /// The 64-byte line; byte 7 and bytes 24..64 zero.
    #[must_use]
    pub fn encode(&self) -> [u8; LINE] {
        let mut line = [0u8; LINE];
        line[0] = self.query_result as u8;
        line[1] = u8::from(self.reconf_active);
        line[2] = self.last_slot_id;
        line[3] = self.last_error as u8;
        line[4] = u8::from(self.icap_avail);
        line[5] = u8::from(self.prdone_seen);
        line[6] = u8::from(self.prerror_seen);
        line[8..16].copy_from_slice(&self.last_cycles.to_le_bytes());
        line[16..24].copy_from_slice(&self.active_cycles.to_le_bytes());
        line
    }

    /// Decodes a query-status line: codes must be known, flags 0 or 1;
    /// reserved bytes are ignored.
    pub fn decode(line: &[u8; LINE]) -> Result<QueryStatus, ProtoError> {
        let flag = |offset: usize| match line[offset] {
            0 => Ok(false),
            1 => Ok(true),
            byte => Err(ProtoError::QueryFlag { offset, byte }),
        };
        let mut last = [0u8; 8];
        last.copy_from_slice(&line[8..16]);
        let mut active = [0u8; 8];
        active.copy_from_slice(&line[16..24]);
        Ok(QueryStatus {
            query_result: ErrorCode::decode(line[0])?,
            reconf_active: flag(1)?,
            last_slot_id: line[2],
            last_error: ErrorCode::decode(line[3])?,
            icap_avail: flag(4)?,
            prdone_seen: flag(5)?,
            prerror_seen: flag(6)?,
            last_cycles: u64::from_le_bytes(last),
            active_cycles: u64::from_le_bytes(active),
        })
    }

    /// Duration of the last reconfiguration in nanoseconds (5 ns per cycle).
    #[must_use]
    pub const fn last_reconf_ns(&self) -> u64 {
        self.last_cycles.saturating_mul(5)
    }
}

/// The controller's one-line answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControllerResponse {
    /// Standard status line: byte 0 the code, bytes 1..64 zero.
    Status(ErrorCode),
    /// `READ_HBM` success: raw HBM bytes, zero-padded to the line.
    ReadData([u8; LINE]),
    /// `QUERY_STATUS` answer.
    Query(QueryStatus),
}

impl ControllerResponse {
    /// A `READ_HBM` answer from up to 64 bytes of data (more are cut off).
    #[must_use]
    pub fn read_data(data: &[u8]) -> ControllerResponse {
        let mut line = [0u8; LINE];
        let n = data.len().min(LINE);
        line[..n].copy_from_slice(&data[..n]);
        ControllerResponse::ReadData(line)
    }

    /// The 64-byte line.
    #[must_use]
    pub fn encode(&self) -> [u8; LINE] {
        match self {
            ControllerResponse::Status(code) => {
                let mut line = [0u8; LINE];
                line[0] = *code as u8;
                line
            }
            ControllerResponse::ReadData(line) => *line,
            ControllerResponse::Query(q) => q.encode(),
        }
    }

    /// Decodes a standard status line strictly, as `reconfslots` checks it:
    /// known code in byte 0, bytes 1..64 zero.
    pub fn decode_status(line: &[u8; LINE]) -> Result<ErrorCode, ProtoError> {
        if let Some((i, &byte)) = line.iter().enumerate().skip(1).find(|&(_, &b)| b != 0) {
            return Err(ProtoError::StatusNotZero { offset: i, byte });
        }
        ErrorCode::decode(line[0])
    }

    /// Decodes the answer to `sent`, the command line this connection sent
    /// last (answers come in request order).  If `sent` fails validation the
    /// answer is a status line; otherwise `WRITE_HBM` and `RECONF_ICAP` get a
    /// status line, `QUERY_STATUS` a query line and `READ_HBM` raw data.
    ///
    /// The wire cannot tell a `READ_HBM` runtime failure (a status line) from
    /// data that happens to look like one, so a valid read always decodes as
    /// [`ControllerResponse::ReadData`].
    pub fn decode(sent: &CommandLine, line: &[u8; LINE]) -> Result<ControllerResponse, ProtoError> {
        match sent.validate() {
            Err(_) | Ok(Opcode::WriteHbm | Opcode::ReconfIcap) => {
                ControllerResponse::decode_status(line).map(ControllerResponse::Status)
            }
            Ok(Opcode::ReadHbm) => Ok(ControllerResponse::ReadData(*line)),
            Ok(Opcode::QueryStatus) => QueryStatus::decode(line).map(ControllerResponse::Query),
        }
    }
}
