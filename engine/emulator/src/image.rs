//! The emulated bitstream containers: the full image (`jtag/frac.bit`, also
//! the bypass image) and the partial (`icap/cXX_fYY.bin`).
//!
//! Both are self-describing, little-endian, and end with a blake3 digest of
//! every byte before it.  No timestamps or paths are inside, so the same
//! design gives the same bytes on any machine.
//!
//! Partial, format 1:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `FRACPART` |
//! | 8 | 2 | format version, 1 |
//! | 10 | 1 | cell (slot id) |
//! | 11 | 1 | reserved, 0 |
//! | 12 | 4 | RM id (`YY` of `cXX_fYY`) |
//! | 16 | 32 | build id of the design |
//! | 48 | 32 | unit name, NUL padded |
//! | 80 | 8 | plugin length `L` |
//! | 88 | `L` | kernel plugin (`.so`) bytes |
//! | 88 + `L` | 32 | blake3 of bytes `0 .. 88 + L` |
//!
//! Up to three zero bytes may follow: the load client pads a partial to whole
//! 32-bit ICAP words, and `RECONF_ICAP` streams the padded length.
//!
//! The partial's build id is the static shell's ([`DesignManifest`]
//! `build_id`), which does not depend on any plugin: a partial changes only
//! when its own unit's plugin (or the shell) does.
//!
//! Full image, format 2:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `FRACFULL` |
//! | 8 | 2 | format version, 2 |
//! | 10 | 1 | kind: 1 design, 2 bypass |
//! | 11 | 1 | cell count `N` (0 for bypass) |
//! | 12 | 4 | manifest length `M` (0 for bypass) |
//! | 16 | 32 | build id |
//! | 48 | `M` | design manifest, canonical JSON |
//! | ... | 4 | allowlist count `A` (0 for bypass) |
//! | ... | `A` x 64 | allowlist, by unit name: unit name (32, NUL padded), blake3 of its plugin (32) |
//! | ... | | `N` cell records: slot (1), reserved (3), initial RM id (4), unit name (32, NUL padded), plugin length `L` (8), plugin bytes (`L`) |
//! | end - 32 | 32 | blake3 of every byte before it |
//!
//! The allowlist names exactly one plugin per unit of the manifest: the
//! plugins built into this image.  The device loads a partial's plugin only
//! if it is its unit's allowlisted plugin, so the full image depends on
//! every plugin while the build id depends on none.  (Format 1 had no
//! allowlist; the plugin hashes were in the manifest.)
//!
//! The bypass image's build id is blake3 of `fracflow-bypass/1`.

use crate::design::{BuildId, DesignManifest};
use crate::spec::MAX_UNIT_NAME;

/// Magic of a partial.
pub const PARTIAL_MAGIC: [u8; 8] = *b"FRACPART";
/// Magic of a full image.
pub const FULL_MAGIC: [u8; 8] = *b"FRACFULL";
/// The partial format version this crate writes and reads.
pub const PARTIAL_FORMAT_VERSION: u16 = 1;
/// The full image format version this crate writes and reads.
pub const FULL_FORMAT_VERSION: u16 = 2;
/// Largest plugin a container may carry (the real partials are 3-10 MB).
pub const MAX_PLUGIN_BYTES: u64 = 64 << 20;

const CHECKSUM_LEN: usize = 32;
const PARTIAL_HEADER_LEN: usize = 88;
const FULL_HEADER_LEN: usize = 48;
/// Bytes of one allowlist entry: unit name and plugin hash.
const ALLOW_ENTRY_LEN: u64 = MAX_UNIT_NAME as u64 + 32;
const KIND_DESIGN: u8 = 1;
const KIND_BYPASS: u8 = 2;
const BYPASS_SEED: &[u8] = b"fracflow-bypass/1";

/// What is wrong with container bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Fewer bytes than the structure needs.
    #[error("truncated {what}: needs {need} bytes, has {have}")]
    Truncated {
        /// Which container.
        what: &'static str,
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// The first 8 bytes are not the expected magic.
    #[error("bad magic {found:02x?}: not a fracflow {what}")]
    BadMagic {
        /// Which container was expected.
        what: &'static str,
        /// The bytes found.
        found: Vec<u8>,
    },
    /// A real Xilinx bitstream where the emulated device expects its own container.
    #[error(
        "{what} is a real Xilinx bitstream ({detail}): the emulated device runs only the images the emulated flow \
         builds (FRACFULL/FRACPART); a real bitstream belongs on a board (a `real` testbed profile)"
    )]
    RealBitstream { what: &'static str, detail: String },
    /// A Xilinx bitstream given to the board double that does not wrap an emulated container.
    #[error(
        "{what} is a Xilinx bitstream without an emulated design inside: the board double computes only test fixtures that wrap one"
    )]
    NothingInside { what: &'static str },
    /// A format version this crate does not know.
    #[error("{what} format version {version} is not supported (expected {expected})")]
    Version {
        /// Which container.
        what: &'static str,
        /// The version found.
        version: u16,
        /// The version this crate reads.
        expected: u16,
    },
    /// The trailing blake3 digest does not match the content.
    #[error("{what} checksum mismatch: the container is corrupt")]
    BadChecksum {
        /// Which container.
        what: &'static str,
    },
    /// Bytes after the checksum other than up to three zero padding bytes.
    #[error("{what}: {extra} unexpected bytes after the checksum")]
    TrailingBytes {
        /// Which container.
        what: &'static str,
        /// How many.
        extra: u64,
    },
    /// A field holds an impossible value.
    #[error("malformed {what}: {message}")]
    Malformed {
        /// Which container.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// A partial bitstream: one unit's plugin for one cell of one design.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialImage {
    /// The cell (slot id) it may be loaded into.
    pub cell: u8,
    /// Its RM id.
    pub rm_id: u32,
    /// The design it belongs to.
    pub build_id: BuildId,
    /// The unit's name.
    pub unit: String,
    /// The kernel plugin's bytes.
    pub plugin: Vec<u8>,
}

/// The initial RM of one cell inside a full image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialCell {
    /// Slot id.
    pub slot: u8,
    /// RM id.
    pub rm_id: u32,
    /// Unit name.
    pub unit: String,
    /// Plugin bytes.
    pub plugin: Vec<u8>,
}

/// One entry of a full image's allowlist: the plugin built for a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedPlugin {
    /// Unit name.
    pub unit: String,
    /// blake3 of the plugin's bytes.
    pub hash: BuildId,
}

/// A full image: a design with its plugin allowlist and its cells' initial
/// RMs, or the bypass image.
#[derive(Debug, Clone, PartialEq)]
pub enum FullImage {
    /// An fRAC design.
    Design {
        /// Its manifest (whose build id the header repeats).
        manifest: DesignManifest,
        /// One plugin per unit of the manifest, by unit name: the only
        /// plugins a partial may carry into this design.
        allowlist: Vec<AllowedPlugin>,
        /// Every cell's initial RM, by slot.
        cells: Vec<InitialCell>,
    },
    /// The baseline without fRAC: the network layer echoes every byte.
    Bypass,
}

fn put_name(out: &mut Vec<u8>, name: &str) {
    let mut field = [0u8; MAX_UNIT_NAME];
    let n = name.len().min(MAX_UNIT_NAME);
    field[..n].copy_from_slice(&name.as_bytes()[..n]);
    out.extend_from_slice(&field);
}

fn seal(mut out: Vec<u8>) -> Vec<u8> {
    let digest = blake3::hash(&out);
    out.extend_from_slice(digest.as_bytes());
    out
}

/// A cursor over container bytes that reports truncation precisely.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64) -> Result<&'a [u8], ImageError> {
        let have = (self.bytes.len() - self.pos) as u64;
        if n > have {
            return Err(ImageError::Truncated {
                what: self.what,
                need: self.pos as u64 + n,
                have: self.bytes.len() as u64,
            });
        }
        // n <= have <= usize::MAX here.
        let n = n as usize;
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ImageError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, ImageError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, ImageError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, ImageError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, ImageError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn name(&mut self) -> Result<String, ImageError> {
        let field = self.array::<MAX_UNIT_NAME>()?;
        let end = field.iter().position(|&b| b == 0).unwrap_or(MAX_UNIT_NAME);
        if field[end..].iter().any(|&b| b != 0) || end == 0 {
            return Err(self.malformed("unit name field is not a NUL-padded name"));
        }
        let name = std::str::from_utf8(&field[..end])
            .map_err(|_| self.malformed("unit name is not UTF-8"))?;
        if !crate::spec::valid_unit_name(name) {
            return Err(self.malformed(format!("bad unit name {name:?}")));
        }
        Ok(name.to_owned())
    }

    fn plugin(&mut self) -> Result<Vec<u8>, ImageError> {
        let len = self.u64()?;
        if len > MAX_PLUGIN_BYTES {
            return Err(self.malformed(format!(
                "plugin of {len} bytes exceeds the {MAX_PLUGIN_BYTES}-byte limit"
            )));
        }
        Ok(self.take(len)?.to_vec())
    }

    fn malformed(&self, message: impl Into<String>) -> ImageError {
        ImageError::Malformed {
            what: self.what,
            message: message.into(),
        }
    }
}

/// Checks magic and version.  They come before the checksum so that a
/// wrong file says what it is not, rather than "bad checksum".
fn check_envelope(
    bytes: &[u8],
    magic: [u8; 8],
    expected: u16,
    what: &'static str,
) -> Result<(), ImageError> {
    let mut r = Reader {
        bytes,
        pos: 0,
        what,
    };
    let found = r.take(8).map_err(|_| ImageError::Truncated {
        what,
        need: 8,
        have: bytes.len() as u64,
    })?;
    if found != magic {
        return Err(ImageError::BadMagic {
            what,
            found: found.to_vec(),
        });
    }
    let version = r.u16()?;
    if version != expected {
        return Err(ImageError::Version {
            what,
            version,
            expected,
        });
    }
    Ok(())
}

fn check_digest(
    bytes: &[u8],
    content_len: usize,
    what: &'static str,
    allowed_padding: u64,
) -> Result<(), ImageError> {
    let end = content_len + CHECKSUM_LEN;
    if bytes.len() < end {
        return Err(ImageError::Truncated {
            what,
            need: end as u64,
            have: bytes.len() as u64,
        });
    }
    if blake3::hash(&bytes[..content_len]).as_bytes() != &bytes[content_len..end] {
        return Err(ImageError::BadChecksum { what });
    }
    let extra = &bytes[end..];
    if extra.len() as u64 > allowed_padding || extra.iter().any(|&b| b != 0) {
        return Err(ImageError::TrailingBytes {
            what,
            extra: extra.len() as u64,
        });
    }
    Ok(())
}

impl PartialImage {
    /// The container bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(PARTIAL_HEADER_LEN + self.plugin.len() + CHECKSUM_LEN);
        out.extend_from_slice(&PARTIAL_MAGIC);
        out.extend_from_slice(&PARTIAL_FORMAT_VERSION.to_le_bytes());
        out.push(self.cell);
        out.push(0);
        out.extend_from_slice(&self.rm_id.to_le_bytes());
        out.extend_from_slice(&self.build_id.0);
        put_name(&mut out, &self.unit);
        out.extend_from_slice(&(self.plugin.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.plugin);
        seal(out)
    }

    /// Decodes and verifies a partial, checking in this order: magic,
    /// version, length, checksum, padding, then the fields.  Up to three zero
    /// bytes after the checksum (ICAP word padding) are accepted.
    pub fn decode(bytes: &[u8]) -> Result<PartialImage, ImageError> {
        const WHAT: &str = "partial";
        check_envelope(bytes, PARTIAL_MAGIC, PARTIAL_FORMAT_VERSION, WHAT)?;
        let mut r = Reader {
            bytes,
            pos: 10,
            what: WHAT,
        };
        let cell = r.u8()?;
        let reserved = r.u8()?;
        let rm_id = r.u32()?;
        let build_id = BuildId(r.array()?);
        let name_at = r.pos;
        r.take(MAX_UNIT_NAME as u64)?;
        let plugin = r.plugin()?;
        check_digest(bytes, r.pos, WHAT, 3)?;
        // Otherwise two different files would be one partial: the container has one encoding.
        if reserved != 0 {
            return Err(r.malformed(format!("reserved byte 11 is {reserved}, not 0")));
        }
        let unit = Reader {
            bytes,
            pos: name_at,
            what: WHAT,
        }
        .name()?;
        Ok(PartialImage {
            cell,
            rm_id,
            build_id,
            unit,
            plugin,
        })
    }

    /// `cXX_fYY.bin`.
    #[must_use]
    pub fn file_name(&self) -> String {
        crate::design::partial_file_name(self.cell, self.rm_id)
    }
}

impl FullImage {
    /// The build id of the bypass image.
    #[must_use]
    pub fn bypass_build_id() -> BuildId {
        BuildId::of(BYPASS_SEED)
    }

    /// The image's build id (the manifest's for a design).
    #[must_use]
    pub fn build_id(&self) -> BuildId {
        match self {
            FullImage::Design { manifest, .. } => manifest
                .build_id
                .parse()
                .unwrap_or_else(|_| manifest.compute_build_id()),
            FullImage::Bypass => FullImage::bypass_build_id(),
        }
    }

    /// The allowlisted plugin hash of `unit`, if the image is a design that
    /// lists it.
    #[must_use]
    pub fn allowed_plugin(&self, unit: &str) -> Option<BuildId> {
        match self {
            FullImage::Design { allowlist, .. } => {
                allowlist.iter().find(|a| a.unit == unit).map(|a| a.hash)
            }
            FullImage::Bypass => None,
        }
    }

    /// The container bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&FULL_MAGIC);
        out.extend_from_slice(&FULL_FORMAT_VERSION.to_le_bytes());
        match self {
            FullImage::Design {
                manifest,
                allowlist,
                cells,
            } => {
                let json = manifest.to_json();
                out.push(KIND_DESIGN);
                out.push(u8::try_from(cells.len()).unwrap_or(u8::MAX));
                out.extend_from_slice(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_le_bytes());
                out.extend_from_slice(&self.build_id().0);
                out.extend_from_slice(&json);
                out.extend_from_slice(
                    &u32::try_from(allowlist.len())
                        .unwrap_or(u32::MAX)
                        .to_le_bytes(),
                );
                for entry in allowlist {
                    put_name(&mut out, &entry.unit);
                    out.extend_from_slice(&entry.hash.0);
                }
                for cell in cells {
                    out.push(cell.slot);
                    out.extend_from_slice(&[0; 3]);
                    out.extend_from_slice(&cell.rm_id.to_le_bytes());
                    put_name(&mut out, &cell.unit);
                    out.extend_from_slice(&(cell.plugin.len() as u64).to_le_bytes());
                    out.extend_from_slice(&cell.plugin);
                }
            }
            FullImage::Bypass => {
                out.push(KIND_BYPASS);
                out.push(0);
                out.extend_from_slice(&0u32.to_le_bytes());
                out.extend_from_slice(&FullImage::bypass_build_id().0);
                out.extend_from_slice(&0u32.to_le_bytes());
            }
        }
        seal(out)
    }

    /// Decodes and verifies a full image: magic, version, structure,
    /// checksum, then consistency (the manifest's build id matches its
    /// content and the header; the allowlist names each unit of the manifest
    /// exactly once, in name order; every cell record names the first RM of
    /// its cell with its unit's allowlisted plugin).
    pub fn decode(bytes: &[u8]) -> Result<FullImage, ImageError> {
        const WHAT: &str = "full image";
        check_envelope(bytes, FULL_MAGIC, FULL_FORMAT_VERSION, WHAT)?;
        let mut r = Reader {
            bytes,
            pos: 10,
            what: WHAT,
        };
        let kind = r.u8()?;
        let count = r.u8()?;
        let manifest_len = r.u32()?;
        let build_id = BuildId(r.array()?);
        debug_assert_eq!(r.pos, FULL_HEADER_LEN);
        match kind {
            KIND_BYPASS => {
                let allowed = r.u32()?;
                check_digest(bytes, r.pos, WHAT, 0)?;
                if count != 0
                    || manifest_len != 0
                    || allowed != 0
                    || build_id != FullImage::bypass_build_id()
                {
                    return Err(r.malformed(
                        "bypass image with cells, manifest, allowlist or a foreign build id",
                    ));
                }
                Ok(FullImage::Bypass)
            }
            KIND_DESIGN => {
                let json = r.take(u64::from(manifest_len))?;
                let allowed = r.u32()?;
                // Each entry is 64 bytes: the count cannot exceed what is left.
                let left = (bytes.len() - r.pos) as u64;
                if u64::from(allowed) * ALLOW_ENTRY_LEN > left {
                    return Err(ImageError::Truncated {
                        what: WHAT,
                        need: r.pos as u64 + u64::from(allowed) * ALLOW_ENTRY_LEN,
                        have: bytes.len() as u64,
                    });
                }
                let mut allow_positions = Vec::with_capacity(allowed as usize);
                let mut hashes = Vec::with_capacity(allowed as usize);
                for _ in 0..allowed {
                    allow_positions.push(r.pos);
                    r.take(MAX_UNIT_NAME as u64)?;
                    hashes.push(BuildId(r.array()?));
                }
                let mut cells = Vec::with_capacity(usize::from(count));
                let mut name_positions = Vec::with_capacity(usize::from(count));
                let mut reserved_set = false;
                for _ in 0..count {
                    let slot = r.u8()?;
                    reserved_set |= r.take(3)?.iter().any(|&b| b != 0);
                    let rm_id = r.u32()?;
                    name_positions.push(r.pos);
                    r.take(MAX_UNIT_NAME as u64)?;
                    let plugin = r.plugin()?;
                    cells.push(InitialCell {
                        slot,
                        rm_id,
                        unit: String::new(),
                        plugin,
                    });
                }
                check_digest(bytes, r.pos, WHAT, 0)?;
                if reserved_set {
                    return Err(r.malformed("a cell record's reserved bytes are not 0"));
                }
                let name_at = |at: usize| {
                    Reader {
                        bytes,
                        pos: at,
                        what: WHAT,
                    }
                    .name()
                };
                let mut allowlist = Vec::with_capacity(hashes.len());
                for (at, hash) in allow_positions.into_iter().zip(hashes) {
                    allowlist.push(AllowedPlugin {
                        unit: name_at(at)?,
                        hash,
                    });
                }
                for (cell, at) in cells.iter_mut().zip(name_positions) {
                    cell.unit = name_at(at)?;
                }
                let manifest: DesignManifest = serde_json::from_slice(json)
                    .map_err(|e| r.malformed(format!("manifest is not valid JSON: {e}")))?;
                let recorded = manifest.verified_build_id().map_err(|m| r.malformed(m))?;
                if recorded != build_id {
                    return Err(r.malformed(format!(
                        "header build id {} differs from the manifest's {}",
                        build_id.short(),
                        recorded.short()
                    )));
                }
                check_allowlist(&manifest, &allowlist).map_err(|m| r.malformed(m))?;
                check_cells(&manifest, &allowlist, &cells).map_err(|m| r.malformed(m))?;
                Ok(FullImage::Design {
                    manifest,
                    allowlist,
                    cells,
                })
            }
            other => Err(r.malformed(format!("unknown image kind {other}"))),
        }
    }
}

/// The allowlist names every unit of the manifest exactly once, in name
/// order, and nothing else.
fn check_allowlist(manifest: &DesignManifest, allowlist: &[AllowedPlugin]) -> Result<(), String> {
    let listed: Vec<&str> = allowlist.iter().map(|a| a.unit.as_str()).collect();
    let mut declared: Vec<&str> = manifest.units.iter().map(|u| u.name.as_str()).collect();
    declared.sort_unstable();
    if listed != declared {
        return Err(format!(
            "the allowlist names [{}], the manifest's units are [{}]",
            listed.join(", "),
            declared.join(", ")
        ));
    }
    Ok(())
}

/// Every manifest cell has exactly one record, naming its first RM, whose
/// plugin is its unit's allowlisted one.
fn check_cells(
    manifest: &DesignManifest,
    allowlist: &[AllowedPlugin],
    cells: &[InitialCell],
) -> Result<(), String> {
    if cells.len() != manifest.cells.len() {
        return Err(format!(
            "{} cell records for {} cells",
            cells.len(),
            manifest.cells.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for cell in cells {
        if !seen.insert(cell.slot) {
            return Err(format!("two cell records for slot {}", cell.slot));
        }
        let design = manifest
            .cell(cell.slot)
            .ok_or_else(|| format!("cell record for slot {} not in the manifest", cell.slot))?;
        let first = design
            .rms
            .first()
            .ok_or_else(|| format!("cell {} has no RMs", design.name))?;
        if first.id != cell.rm_id || first.unit != cell.unit {
            return Err(format!(
                "slot {} starts with RM {} ({}), the manifest says {} ({})",
                cell.slot, cell.rm_id, cell.unit, first.id, first.unit
            ));
        }
        let allowed = allowlist
            .iter()
            .find(|a| a.unit == cell.unit)
            .ok_or_else(|| format!("unit {} is not in the allowlist", cell.unit))?;
        if BuildId::of(&cell.plugin) != allowed.hash {
            return Err(format!(
                "plugin of slot {} is not the allowlisted {} plugin {}",
                cell.slot,
                cell.unit,
                allowed.hash.short()
            ));
        }
    }
    Ok(())
}

/// The length of the partial container at the start of `bytes` (header, plugin, checksum), from its
/// plugin length field; `None` when it is not one or is cut short.
fn partial_len(bytes: &[u8]) -> Option<usize> {
    if bytes.get(..8)? != PARTIAL_MAGIC {
        return None;
    }
    let field: [u8; 8] = bytes
        .get(PARTIAL_HEADER_LEN - 8..PARTIAL_HEADER_LEN)?
        .try_into()
        .ok()?;
    let plugin = usize::try_from(u64::from_le_bytes(field)).ok()?;
    let len = PARTIAL_HEADER_LEN
        .checked_add(plugin)?
        .checked_add(CHECKSUM_LEN)?;
    (len <= bytes.len()).then_some(len)
}

/// Tells a full image from a partial by its magic.
#[must_use]
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    match bytes.get(..8) {
        Some(m) if m == PARTIAL_MAGIC => Some("partial"),
        Some(m) if m == FULL_MAGIC => Some("full image"),
        _ => None,
    }
}

/// How the device treats a real Xilinx bitstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fidelity {
    /// The emulated device: only its own containers; a real bitstream is refused by name.
    #[default]
    Emulated,
    /// A stand-in for the board in tests: it takes Xilinx-framed files (a `.bit` header, or the `.bin` sync word)
    /// whose configuration data is an emulated container, and, like the board, answers success to a partial of
    /// another build and leaves the slot as it was (docs/frac.md §3).
    BoardDouble,
}

/// The emulated container in `bytes`: the bytes themselves when they are one; for a board double, the
/// configuration data of a Xilinx-framed fixture. Anything else is handed on for the decoder to name.
pub fn container_of<'a>(
    bytes: &'a [u8],
    fidelity: Fidelity,
    what: &'static str,
) -> Result<&'a [u8], ImageError> {
    use fracflow_proto::bitstream::{BitstreamKind, SYNC_WORD, classify};
    match (classify(bytes), fidelity) {
        (BitstreamKind::XilinxBit(header), Fidelity::Emulated) => Err(ImageError::RealBitstream {
            what,
            detail: format!(
                "a .bit of design `{}` for part `{}`",
                header.design, header.part
            ),
        }),
        (BitstreamKind::XilinxBin { sync_offset }, Fidelity::Emulated) => {
            Err(ImageError::RealBitstream {
                what,
                detail: format!("a raw .bin with the sync word at byte {sync_offset}"),
            })
        }
        (BitstreamKind::XilinxBit(header), Fidelity::BoardDouble) => {
            let length = usize::try_from(header.data_length).unwrap_or(usize::MAX);
            let data = bytes
                .len()
                .checked_sub(length)
                .map(|start| &bytes[start..])
                .ok_or(ImageError::NothingInside { what })?;
            sniff(data)
                .map(|_| data)
                .ok_or(ImageError::NothingInside { what })
        }
        (BitstreamKind::XilinxBin { sync_offset }, Fidelity::BoardDouble) => {
            let data = &bytes[sync_offset + SYNC_WORD.len()..];
            sniff(data).ok_or(ImageError::NothingInside { what })?;
            // Zero fill after a partial stands in for the frames of a real one, so a fixture can have a real
            // partial's size (about 3 MB, docs/frac.md §3) and its upload the real number of round trips.
            Ok(match partial_len(data) {
                Some(len) if data[len..].iter().all(|&b| b == 0) => &data[..len],
                _ => data,
            })
        }
        _ => Ok(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fracflow_proto::bitstream` repeats these magics (it cannot depend on this crate); keep them equal.
    #[test]
    fn the_container_magics_match_what_the_bitstream_classifier_knows() {
        use fracflow_proto::bitstream::{self, BitstreamKind};
        assert_eq!(PARTIAL_MAGIC, bitstream::EMULATED_PARTIAL_MAGIC);
        assert_eq!(FULL_MAGIC, bitstream::EMULATED_FULL_MAGIC);
        assert_eq!(
            bitstream::classify(&partial().encode()),
            BitstreamKind::Emulated("partial")
        );
    }

    fn partial() -> PartialImage {
        PartialImage {
            cell: 2,
            rm_id: 20,
            build_id: BuildId::of(b"design"),
            unit: "cnn".into(),
            plugin: (0..=255u8).cycle().take(1000).collect(),
        }
    }

    #[test]
    fn a_partial_with_its_reserved_byte_set_is_refused_even_when_sealed() {
        // It decoded to the same partial as the zero byte: two files, one image (found by fuzzing).
        let bytes = partial().encode();
        let mut content = bytes[..bytes.len() - CHECKSUM_LEN].to_vec();
        content[11] = 5;
        assert!(matches!(
            PartialImage::decode(&seal(content)),
            Err(ImageError::Malformed { .. })
        ));
    }

    #[test]
    fn partial_round_trip_and_padding() {
        let p = partial();
        let bytes = p.encode();
        assert_eq!(bytes.len(), 88 + 1000 + 32);
        assert_eq!(&bytes[..8], b"FRACPART");
        assert_eq!(PartialImage::decode(&bytes), Ok(p.clone()));
        assert_eq!(p.file_name(), "c02_f20.bin");
        // ICAP word padding: up to three zero bytes.
        let mut padded = bytes.clone();
        padded.extend_from_slice(&[0, 0, 0]);
        assert_eq!(PartialImage::decode(&padded), Ok(p));
        padded.push(0);
        assert!(matches!(
            PartialImage::decode(&padded),
            Err(ImageError::TrailingBytes { extra: 4, .. })
        ));
        let mut dirty = bytes;
        dirty.push(1);
        assert!(matches!(
            PartialImage::decode(&dirty),
            Err(ImageError::TrailingBytes { .. })
        ));
    }

    #[test]
    fn a_real_bitstream_is_refused_by_name_and_a_board_double_finds_the_design_inside() {
        use fracflow_proto::bitstream::{make_bin_file, make_bit_file};
        let container = partial().encode();
        let bit = make_bit_file(
            "frac_top",
            "xcu280-fsvh2892-2L-e",
            "2026/10/03",
            "12:00:00",
            &container,
        );
        let bin = make_bin_file(&container);
        let refused =
            container_of(&bit, Fidelity::Emulated, "the image").map_err(|e| e.to_string());
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("real Xilinx bitstream")
                    && e.contains("frac_top")
                    && e.contains("xcu280")),
            "{refused:?}"
        );
        assert!(container_of(&bin, Fidelity::Emulated, "the partial").is_err());
        assert_eq!(
            container_of(&bit, Fidelity::BoardDouble, "x"),
            Ok(&container[..])
        );
        assert_eq!(
            container_of(&bin, Fidelity::BoardDouble, "x"),
            Ok(&container[..])
        );
        let mut real_size = bin.clone();
        real_size.resize(3_139_996, 0);
        assert_eq!(
            container_of(&real_size, Fidelity::BoardDouble, "x"),
            Ok(&container[..]),
            "zero fill after the partial stands in for frames"
        );
        let mut dirty_fill = real_size;
        dirty_fill[3_000_000] = 1;
        assert!(
            container_of(&dirty_fill, Fidelity::BoardDouble, "x")
                .is_ok_and(|c| c.len() > container.len()),
            "anything but zero fill is left for the decoder to refuse"
        );
        assert_eq!(
            container_of(&container, Fidelity::Emulated, "x"),
            Ok(&container[..])
        );
        let empty_bit = make_bit_file("frac_top", "xcu280", "d", "t", &[0x20; 64]);
        assert!(matches!(
            container_of(&empty_bit, Fidelity::BoardDouble, "the image"),
            Err(ImageError::NothingInside { .. })
        ));
    }

    #[test]
    fn partial_errors_in_order() {
        let bytes = partial().encode();
        assert!(matches!(
            PartialImage::decode(&bytes[..5]),
            Err(ImageError::Truncated { need: 8, .. })
        ));
        let mut magic = bytes.clone();
        magic[0] = b'X';
        assert!(matches!(
            PartialImage::decode(&magic),
            Err(ImageError::BadMagic { .. })
        ));
        let mut version = bytes.clone();
        version[8] = 2;
        assert_eq!(
            PartialImage::decode(&version),
            Err(ImageError::Version {
                what: "partial",
                version: 2,
                expected: 1
            })
        );
        let mut flipped = bytes.clone();
        flipped[500] ^= 0x80;
        assert_eq!(
            PartialImage::decode(&flipped),
            Err(ImageError::BadChecksum { what: "partial" })
        );
        assert!(matches!(
            PartialImage::decode(&bytes[..bytes.len() - 1]),
            Err(ImageError::Truncated { .. })
        ));
        assert!(matches!(
            PartialImage::decode(&bytes[..100]),
            Err(ImageError::Truncated { .. })
        ));
        // A full image is not a partial.
        assert!(matches!(
            PartialImage::decode(&FullImage::Bypass.encode()),
            Err(ImageError::BadMagic { .. })
        ));
        // A huge declared plugin length is refused before anything is read.
        let mut huge = bytes;
        huge[80..88].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            PartialImage::decode(&huge),
            Err(ImageError::Malformed { .. })
        ));
    }

    #[test]
    fn bypass_round_trip() {
        let bytes = FullImage::Bypass.encode();
        assert_eq!(bytes.len(), 48 + 4 + 32);
        assert_eq!(sniff(&bytes), Some("full image"));
        assert_eq!(FullImage::decode(&bytes), Ok(FullImage::Bypass));
        let mut flipped = bytes;
        flipped[20] ^= 1;
        assert!(matches!(
            FullImage::decode(&flipped),
            Err(ImageError::BadChecksum { .. })
        ));
    }

    #[test]
    fn design_image_round_trip_and_consistency() {
        use crate::design::{CellDesign, DESIGN_FORMAT, RmDesign, UnitDesign};
        use crate::spec::Utilization;
        let plugin = b"not really an ELF file".to_vec();
        let mut manifest = DesignManifest {
            format: DESIGN_FORMAT.into(),
            name: "frac".into(),
            cells: vec![CellDesign {
                name: "C00".into(),
                slot: 0,
                rms: vec![RmDesign {
                    id: 0,
                    unit: "top_k".into(),
                    partial: "icap/c00_f00.bin".into(),
                }],
            }],
            units: vec![UnitDesign {
                name: "top_k".into(),
                version: 1,
                function: Some(1),
                utilization: Utilization {
                    lut: 1,
                    ff: 2,
                    bram: 0.5,
                    dsp: 0,
                    uram: 0,
                },
                cells: vec!["C00".into()],
            }],
            build_id: String::new(),
        };
        manifest.seal();
        let allowlist = vec![AllowedPlugin {
            unit: "top_k".into(),
            hash: BuildId::of(&plugin),
        }];
        let cell = InitialCell {
            slot: 0,
            rm_id: 0,
            unit: "top_k".into(),
            plugin: plugin.clone(),
        };
        let image = FullImage::Design {
            manifest: manifest.clone(),
            allowlist: allowlist.clone(),
            cells: vec![cell.clone()],
        };
        let bytes = image.encode();
        assert_eq!(bytes[8], 2, "full image format 2");
        assert_eq!(FullImage::decode(&bytes), Ok(image.clone()));
        assert_eq!(image.build_id().to_hex(), manifest.build_id);
        assert_eq!(image.allowed_plugin("top_k"), Some(BuildId::of(&plugin)));
        assert_eq!(image.allowed_plugin("norm"), None);

        // A cell record whose plugin is not the allowlisted one.
        let wrong = FullImage::Design {
            manifest: manifest.clone(),
            allowlist: allowlist.clone(),
            cells: vec![InitialCell {
                plugin: b"other".to_vec(),
                ..cell.clone()
            }],
        };
        let err = FullImage::decode(&wrong.encode()).expect_err("foreign initial plugin");
        assert!(err.to_string().contains("allowlisted"), "{err}");
        // An allowlist that misses a unit of the manifest, or names another.
        for list in [
            vec![],
            vec![
                allowlist[0].clone(),
                AllowedPlugin {
                    unit: "norm".into(),
                    hash: BuildId::of(b"x"),
                },
            ],
        ] {
            let bad = FullImage::Design {
                manifest: manifest.clone(),
                allowlist: list,
                cells: vec![cell.clone()],
            };
            let err = FullImage::decode(&bad.encode()).expect_err("allowlist mismatch");
            assert!(err.to_string().contains("allowlist"), "{err}");
        }
        // An allowlist count beyond the bytes present is refused before
        // anything is allocated for it.
        let mut huge = bytes.clone();
        let at = FULL_HEADER_LEN + manifest.to_json().len();
        huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            FullImage::decode(&huge),
            Err(ImageError::Truncated { .. })
        ));
        // A manifest edited after sealing.
        let mut edited = manifest;
        edited.name = "edited".into();
        let tampered = FullImage::Design {
            manifest: edited,
            allowlist,
            cells: vec![cell],
        };
        let err = FullImage::decode(&tampered.encode()).expect_err("stale build id");
        assert!(err.to_string().contains("hashes to"), "{err}");
    }

    #[test]
    fn full_image_format_1_is_refused_by_version() {
        let mut bytes = FullImage::Bypass.encode();
        bytes[8] = 1;
        assert!(matches!(
            FullImage::decode(&bytes),
            Err(ImageError::Version {
                version: 1,
                expected: 2,
                ..
            })
        ));
    }
}
