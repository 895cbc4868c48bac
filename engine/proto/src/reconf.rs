//! The request sequence `reconfslots` sends to load a partial bitstream into
//! a slot (`docs/frac.md` §3, "Loading procedure").
//!
//! The file is padded with zeros to a multiple of 4 bytes, uploaded with
//! `WRITE_HBM` requests of `chunk_size` bytes each (the last one shorter;
//! each payload padded to whole lines; each awaits a status-0 line) at
//! consecutive addresses from `hbm_addr`, then one `RECONF_ICAP` of the padded
//! length from `hbm_addr`, then optionally one `QUERY_STATUS` (which
//! `reconfslots` sends `-status-delay` = 5 ms later; timing is the caller's).

use crate::controller::ControllerRequest;
use crate::error::ProtoError;
use crate::limits::{
    DEFAULT_CHUNK_SIZE, DEFAULT_HBM_ADDR, HBM_ADDR_BITS, HBM_ALIGN, ICAP_WORD, LINE,
    MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, SLOT_COUNT,
};

/// `reconfslots` parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReconfOptions {
    /// Slot to reload, below [`SLOT_COUNT`].
    pub slot: u8,
    /// `-hbm-addr`: start of the staging area.
    pub hbm_addr: u64,
    /// `-chunk-size`: raw bytes per `WRITE_HBM`, 64..=256 in multiples of 64.
    pub chunk_size: usize,
    /// Whether to end with a `QUERY_STATUS`.
    pub query_status: bool,
}

impl ReconfOptions {
    /// The harness defaults for `slot`: chunk 256 at HBM `0x10004000`, with
    /// the final query.
    #[must_use]
    pub const fn new(slot: u8) -> ReconfOptions {
        ReconfOptions {
            slot,
            hbm_addr: DEFAULT_HBM_ADDR,
            chunk_size: DEFAULT_CHUNK_SIZE,
            query_status: true,
        }
    }
}

/// Iterator over the controller requests that load one partial bitstream.
#[derive(Debug, Clone)]
pub struct ReconfUpload<'a> {
    bitstream: &'a [u8],
    padded_len: usize,
    options: ReconfOptions,
    /// Offset of the next chunk to write; `padded_len` once all are out.
    offset: usize,
    reconf_sent: bool,
    query_sent: bool,
}

/// Plans the upload of `bitstream` with `options`, checking: slot in range
/// ([`ProtoError::Slot`]), chunk size ([`ProtoError::ChunkSize`]), a nonempty
/// bitstream ([`ProtoError::EmptyBitstream`]), and a staging area that is
/// 32-byte aligned and ends within 33-bit addresses ([`ProtoError::HbmRange`]),
/// so that every request of the plan passes the controller's validation.
pub fn reconf_upload(
    bitstream: &[u8],
    options: ReconfOptions,
) -> Result<ReconfUpload<'_>, ProtoError> {
    if options.slot >= SLOT_COUNT {
        return Err(ProtoError::Slot { slot: options.slot });
    }
    let chunk = options.chunk_size;
    if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk) || !chunk.is_multiple_of(LINE) {
        return Err(ProtoError::ChunkSize { chunk_size: chunk });
    }
    if bitstream.is_empty() {
        return Err(ProtoError::EmptyBitstream);
    }
    let padded_len = bitstream.len().div_ceil(ICAP_WORD) * ICAP_WORD;
    let len = padded_len as u64;
    let fits = options
        .hbm_addr
        .checked_add(len)
        .is_some_and(|end| end <= 1u64 << HBM_ADDR_BITS);
    if !options.hbm_addr.is_multiple_of(HBM_ALIGN) || !fits {
        return Err(ProtoError::HbmRange {
            addr: options.hbm_addr,
            len,
        });
    }
    Ok(ReconfUpload {
        bitstream,
        padded_len,
        options,
        offset: 0,
        reconf_sent: false,
        query_sent: !options.query_status,
    })
}

impl ReconfUpload<'_> {
    /// The bitstream length padded to 4 bytes: the `RECONF_ICAP` size.
    #[must_use]
    pub fn padded_len(&self) -> usize {
        self.padded_len
    }

    /// Number of `WRITE_HBM` requests in the whole plan.
    #[must_use]
    pub fn write_count(&self) -> usize {
        self.padded_len.div_ceil(self.options.chunk_size)
    }
}

impl Iterator for ReconfUpload<'_> {
    type Item = ControllerRequest;

    fn next(&mut self) -> Option<ControllerRequest> {
        if self.offset < self.padded_len {
            let start = self.offset;
            let end = (start + self.options.chunk_size).min(self.padded_len);
            let real_end = end.min(self.bitstream.len());
            let mut data = Vec::with_capacity(end - start);
            if start < real_end {
                data.extend_from_slice(&self.bitstream[start..real_end]);
            }
            // Zeros for the padding to 4 bytes.
            data.resize(end - start, 0);
            self.offset = end;
            return Some(ControllerRequest::WriteHbm {
                addr: self.options.hbm_addr + start as u64,
                data,
            });
        }
        if !self.reconf_sent {
            self.reconf_sent = true;
            return Some(ControllerRequest::ReconfIcap {
                slot: self.options.slot,
                addr: self.options.hbm_addr,
                len: self.padded_len as u64,
            });
        }
        if !self.query_sent {
            self.query_sent = true;
            return Some(ControllerRequest::QueryStatus);
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let writes = (self.padded_len - self.offset).div_ceil(self.options.chunk_size);
        let n = writes + usize::from(!self.reconf_sent) + usize::from(!self.query_sent);
        (n, Some(n))
    }
}

impl ExactSizeIterator for ReconfUpload<'_> {}
