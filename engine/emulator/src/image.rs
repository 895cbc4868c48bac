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
//! Full image, format 1:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `FRACFULL` |
//! | 8 | 2 | format version, 1 |
//! | 10 | 1 | kind: 1 design, 2 bypass |
//! | 11 | 1 | cell count `N` (0 for bypass) |
//! | 12 | 4 | manifest length `M` (0 for bypass) |
//! | 16 | 32 | build id |
//! | 48 | `M` | design manifest, canonical JSON |
//! | ... | | `N` cell records: slot (1), reserved (3), initial RM id (4), unit name (32, NUL padded), plugin length `L` (8), plugin bytes (`L`) |
//! | end - 32 | 32 | blake3 of every byte before it |
//!
//! The bypass image's build id is blake3 of `fracflow-bypass/1`.

use crate::design::{BuildId, DesignManifest};
use crate::spec::MAX_UNIT_NAME;

/// Magic of a partial.
pub const PARTIAL_MAGIC: [u8; 8] = *b"FRACPART";
/// Magic of a full image.
pub const FULL_MAGIC: [u8; 8] = *b"FRACFULL";
/// The container format version this crate writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Largest plugin a container may carry (the real partials are 3-10 MB).
pub const MAX_PLUGIN_BYTES: u64 = 64 << 20;

const CHECKSUM_LEN: usize = 32;
const PARTIAL_HEADER_LEN: usize = 88;
const FULL_HEADER_LEN: usize = 48;
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
    /// A format version this crate does not know.
    #[error("{what} format version {version} is not supported (expected 1)")]
    Version {
        /// Which container.
        what: &'static str,
        /// The version found.
        version: u16,
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

/// A full image: a design with its cells' initial RMs, or the bypass image.
#[derive(Debug, Clone, PartialEq)]
pub enum FullImage {
    /// An fRAC design.
    Design {
        /// Its manifest (whose build id the header repeats).
        manifest: DesignManifest,
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
fn check_envelope(bytes: &[u8], magic: [u8; 8], what: &'static str) -> Result<(), ImageError> {
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
    if version != FORMAT_VERSION {
        return Err(ImageError::Version { what, version });
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
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
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
        check_envelope(bytes, PARTIAL_MAGIC, WHAT)?;
        let mut r = Reader {
            bytes,
            pos: 10,
            what: WHAT,
        };
        let cell = r.u8()?;
        let _reserved = r.u8()?;
        let rm_id = r.u32()?;
        let build_id = BuildId(r.array()?);
        let name_at = r.pos;
        r.take(MAX_UNIT_NAME as u64)?;
        let plugin = r.plugin()?;
        check_digest(bytes, r.pos, WHAT, 3)?;
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

    /// The container bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&FULL_MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        match self {
            FullImage::Design { manifest, cells } => {
                let json = manifest.to_json();
                out.push(KIND_DESIGN);
                out.push(u8::try_from(cells.len()).unwrap_or(u8::MAX));
                out.extend_from_slice(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_le_bytes());
                out.extend_from_slice(&self.build_id().0);
                out.extend_from_slice(&json);
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
            }
        }
        seal(out)
    }

    /// Decodes and verifies a full image: magic, version, structure,
    /// checksum, then consistency (the manifest's build id matches its
    /// content and the header; every cell record names the first RM of its
    /// cell with the unit and plugin hash the manifest records).
    pub fn decode(bytes: &[u8]) -> Result<FullImage, ImageError> {
        const WHAT: &str = "full image";
        check_envelope(bytes, FULL_MAGIC, WHAT)?;
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
                check_digest(bytes, r.pos, WHAT, 0)?;
                if count != 0 || manifest_len != 0 || build_id != FullImage::bypass_build_id() {
                    return Err(
                        r.malformed("bypass image with cells, manifest or a foreign build id")
                    );
                }
                Ok(FullImage::Bypass)
            }
            KIND_DESIGN => {
                let json = r.take(u64::from(manifest_len))?;
                let mut cells = Vec::with_capacity(usize::from(count));
                let mut name_positions = Vec::with_capacity(usize::from(count));
                for _ in 0..count {
                    let slot = r.u8()?;
                    r.take(3)?;
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
                for (cell, at) in cells.iter_mut().zip(name_positions) {
                    cell.unit = Reader {
                        bytes,
                        pos: at,
                        what: WHAT,
                    }
                    .name()?;
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
                check_cells(&manifest, &cells).map_err(|m| r.malformed(m))?;
                Ok(FullImage::Design { manifest, cells })
            }
            other => Err(r.malformed(format!("unknown image kind {other}"))),
        }
    }
}

/// Every manifest cell has exactly one record, naming its first RM, whose
/// plugin hashes to what the manifest records for the unit.
fn check_cells(manifest: &DesignManifest, cells: &[InitialCell]) -> Result<(), String> {
    if cells.len() != manifest.cells.len() {
        return Err(format!(
            "{} cell records for {} cells",
            cells.len(),
            manifest.cells.len()
        ));
    }
    for cell in cells {
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
        let unit = manifest
            .unit(&cell.unit)
            .ok_or_else(|| format!("unit {} not in the manifest", cell.unit))?;
        let hash = blake3::hash(&cell.plugin).to_hex();
        if unit.plugin_hash != hash.as_str() {
            return Err(format!(
                "plugin of slot {} does not hash to the manifest's {}",
                cell.slot, unit.plugin_hash
            ));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

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
                version: 2
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
        assert_eq!(bytes.len(), 48 + 32);
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
                plugin_hash: blake3::hash(&plugin).to_hex().to_string(),
                plugin_len: plugin.len() as u64,
            }],
            build_id: String::new(),
        };
        manifest.seal();
        let cell = InitialCell {
            slot: 0,
            rm_id: 0,
            unit: "top_k".into(),
            plugin: plugin.clone(),
        };
        let image = FullImage::Design {
            manifest: manifest.clone(),
            cells: vec![cell.clone()],
        };
        let bytes = image.encode();
        assert_eq!(FullImage::decode(&bytes), Ok(image.clone()));
        assert_eq!(image.build_id().to_hex(), manifest.build_id);

        // A cell record whose plugin is not the manifest's.
        let wrong = FullImage::Design {
            manifest: manifest.clone(),
            cells: vec![InitialCell {
                plugin: b"other".to_vec(),
                ..cell.clone()
            }],
        };
        assert!(matches!(
            FullImage::decode(&wrong.encode()),
            Err(ImageError::Malformed { .. })
        ));
        // A manifest edited after sealing.
        let mut edited = manifest;
        edited.name = "edited".into();
        let tampered = FullImage::Design {
            manifest: edited,
            cells: vec![cell],
        };
        let err = FullImage::decode(&tampered.encode()).expect_err("stale build id");
        assert!(err.to_string().contains("hashes to"), "{err}");
    }
}
