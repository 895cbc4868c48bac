//! Device-side request reassembly as pure state machines, one per connection.
//!
//! What `docs/frac.md` says (§2.3, §2.7; "frac §" below):
//!
//! * a request is one header line (`FIRST` set) followed by data up to the
//!   size the header declares; the client writes it in `-m`-byte pieces and
//!   the header is at the start of the FIRST piece only: later pieces are
//!   plain data and are never inspected for flags (filler `0x9f` lines have
//!   both flag bits set and must not be taken for headers);
//! * while a header is expected, a line without `FIRST` is dropped;
//! * a segment that holds only a header flagged `FIRST|LAST` ends the request
//!   there, even if the declared size is larger; bytes beyond the declared
//!   size in a request's last segment are not a new request.
//!
//! The last two rules depend on TCP segment boundaries, which a host-side
//! emulator reading a byte stream cannot see.  Hence two machines:
//!
//! * [`Reassembler`] works on the byte stream, split anywhere; its output
//!   depends only on the bytes, never on how they were split.  It delimits
//!   requests by declared size alone: `LAST` is ignored, and bytes after a
//!   request are the next request's header.
//! * [`SegmentReassembler`] is fed whole TCP segments and applies the
//!   segment rules as the device does.
//!
//! Both hold at most one request: the header line plus at most
//! `MAX_REQUEST_BYTES - 64` payload bytes.

use crate::error::ProtoError;
use crate::header::{RequestHeader, Route};
use crate::limits::{HEADER_LEN, LINE, MAX_SEGMENT_BYTES};

/// One complete request as the device sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The decoded header line.
    pub header: RequestHeader,
    /// The bytes after the header: `header.body_len()` bytes, except after a
    /// header-only `FIRST|LAST` segment ([`SegmentReassembler`]), where it is
    /// empty whatever the declared size.
    pub payload: Vec<u8>,
}

impl Request {
    /// Where the request goes.
    #[must_use]
    pub fn route(&self) -> Route {
        self.header.route()
    }

    /// Header line followed by the payload, e.g. what an echo unit answers.
    #[must_use]
    pub fn wire_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.payload.len());
        out.extend_from_slice(&self.header.encode());
        out.extend_from_slice(&self.payload);
        out
    }
}

/// `body_len` of a header that passed validation; bounded by the request limit.
fn body_len(header: &RequestHeader) -> usize {
    // validate() bounds wire_size by MAX_REQUEST_BYTES (< 2^16), so this fits.
    header.body_len() as usize
}

/// A request whose header is in and whose payload is being collected.
#[derive(Debug)]
struct Partial {
    header: RequestHeader,
    payload: Vec<u8>,
    /// Payload bytes the request needs in all.
    len: usize,
}

impl Partial {
    fn new(header: RequestHeader, len: usize) -> Partial {
        Partial {
            header,
            payload: Vec::with_capacity(len),
            len,
        }
    }

    /// Appends what fits of `bytes`; returns how many bytes were taken.
    fn fill(&mut self, bytes: &[u8]) -> usize {
        let take = (self.len - self.payload.len()).min(bytes.len());
        self.payload.extend_from_slice(&bytes[..take]);
        take
    }

    fn is_complete(&self) -> bool {
        self.payload.len() == self.len
    }

    fn into_request(self) -> Request {
        Request {
            header: self.header,
            payload: self.payload,
        }
    }
}

/// Byte-stream reassembler for one connection.
///
/// Feed bytes in any split; complete requests come out in order.  Errors are
/// per line and not fatal: a header line that fails
/// [`RequestHeader::decode`] is reported and discarded (64 bytes), and the
/// machine keeps expecting a header at the next line, as the device drops a
/// line without `FIRST` and looks at the next.  A caller that prefers to fail
/// fast closes the connection on the first error.
#[derive(Debug)]
pub struct Reassembler {
    /// The header line being collected; `filled` bytes are valid.
    line: [u8; HEADER_LEN],
    filled: usize,
    /// The request whose payload is being collected, if its header is in.
    current: Option<Partial>,
}

impl Default for Reassembler {
    fn default() -> Self {
        Reassembler::new()
    }
}

impl Reassembler {
    /// A reassembler expecting a header.
    #[must_use]
    pub const fn new() -> Reassembler {
        Reassembler {
            line: [0; HEADER_LEN],
            filled: 0,
            current: None,
        }
    }

    /// Consumes a prefix of `input` and reports at most one outcome: the
    /// number of bytes consumed, and `Some` when that completed a request or
    /// rejected a header line.  Consumes at least one byte of a nonempty
    /// input; call again with the rest.
    pub fn advance(&mut self, input: &[u8]) -> (usize, Option<Result<Request, ProtoError>>) {
        if let Some(partial) = &mut self.current {
            let take = partial.fill(input);
            if !partial.is_complete() {
                return (take, None);
            }
            let outcome = self.current.take().map(|p| Ok(p.into_request()));
            return (take, outcome);
        }
        let take = (HEADER_LEN - self.filled).min(input.len());
        self.line[self.filled..self.filled + take].copy_from_slice(&input[..take]);
        self.filled += take;
        if self.filled < HEADER_LEN {
            return (take, None);
        }
        self.filled = 0;
        let header = match RequestHeader::decode(&self.line) {
            Ok(header) => header,
            Err(e) => return (take, Some(Err(e))),
        };
        let partial = Partial::new(header, body_len(&header));
        if partial.is_complete() {
            return (take, Some(Ok(partial.into_request())));
        }
        self.current = Some(partial);
        (take, None)
    }

    /// Feeds all of `input`; returns every outcome it produced, in order.
    pub fn feed(&mut self, mut input: &[u8]) -> Vec<Result<Request, ProtoError>> {
        let mut out = Vec::new();
        while !input.is_empty() {
            let (used, outcome) = self.advance(input);
            input = &input[used..];
            out.extend(outcome);
        }
        out
    }

    /// Whether the machine sits between requests with nothing buffered (at a
    /// connection close, anything else is a truncated request).
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.filled == 0 && self.current.is_none()
    }

    /// Bytes of the current, unfinished request held so far (header included).
    #[must_use]
    pub fn buffered(&self) -> usize {
        match &self.current {
            Some(p) => HEADER_LEN + p.payload.len(),
            None => self.filled,
        }
    }

    /// The header of the request being collected, if its header line is in.
    #[must_use]
    pub fn current_header(&self) -> Option<&RequestHeader> {
        self.current.as_ref().map(|p| &p.header)
    }
}

/// Segment-level reassembler for one connection, modelling the device's
/// dispatcher and scheduler for callers that know TCP segment boundaries.
///
/// Rules, per [`SegmentReassembler::feed_segment`] call:
///
/// * a segment that is empty, not whole lines or longer than the segment
///   limit is dropped ([`ProtoError::SegmentDropped`]) and changes nothing
///   (frac §2.1: its request goes unanswered);
/// * between requests the segment's first line must decode as a header;
///   otherwise the whole segment is dropped with that error (a
///   simplification: the device drops the lines without `FIRST` one by one,
///   but a request must start at a segment boundary anyway);
/// * a segment that is only a header flagged `FIRST|LAST` completes the
///   request with an empty payload (frac §2.3 rule (a));
/// * otherwise the request completes in the segment that brings the
///   accumulated length to the wire size; bytes past it are discarded, not
///   taken as a new request (frac §2.3 rule (b));
/// * lines of later segments are data whatever their flags.
#[derive(Debug)]
pub struct SegmentReassembler {
    max_segment: usize,
    current: Option<Partial>,
}

impl Default for SegmentReassembler {
    fn default() -> Self {
        SegmentReassembler::new()
    }
}

impl SegmentReassembler {
    /// A segment reassembler with the current build's segment limit,
    /// [`MAX_SEGMENT_BYTES`].
    #[must_use]
    pub const fn new() -> SegmentReassembler {
        SegmentReassembler::with_max_segment(MAX_SEGMENT_BYTES)
    }

    /// A segment reassembler with another segment limit (older builds used
    /// 4096 or 512, frac §2.1).
    #[must_use]
    pub const fn with_max_segment(max_segment: usize) -> SegmentReassembler {
        SegmentReassembler {
            max_segment,
            current: None,
        }
    }

    /// Feeds one whole TCP segment; returns the request it completed, if any.
    pub fn feed_segment(&mut self, segment: &[u8]) -> Result<Option<Request>, ProtoError> {
        let len = segment.len();
        if len == 0 || !len.is_multiple_of(LINE) || len > self.max_segment {
            return Err(ProtoError::SegmentDropped {
                len,
                max: self.max_segment,
            });
        }
        match self.current.take() {
            None => {
                let Some(line) = segment.first_chunk::<HEADER_LEN>() else {
                    return Err(ProtoError::SegmentDropped {
                        len,
                        max: self.max_segment,
                    });
                };
                let header = RequestHeader::decode(line)?;
                let rest = &segment[HEADER_LEN..];
                if rest.is_empty() && header.flags().is_last() {
                    return Ok(Some(Request {
                        header,
                        payload: Vec::new(),
                    }));
                }
                let mut partial = Partial::new(header, body_len(&header));
                partial.fill(rest);
                if partial.is_complete() {
                    return Ok(Some(partial.into_request()));
                }
                self.current = Some(partial);
                Ok(None)
            }
            Some(mut partial) => {
                partial.fill(segment);
                if partial.is_complete() {
                    return Ok(Some(partial.into_request()));
                }
                self.current = Some(partial);
                Ok(None)
            }
        }
    }

    /// Whether no request is in progress.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.current.is_none()
    }

    /// The header of the request in progress, if any.
    #[must_use]
    pub fn current_header(&self) -> Option<&RequestHeader> {
        self.current.as_ref().map(|p| &p.header)
    }
}
