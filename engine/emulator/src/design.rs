//! The design manifest the emulated weave produces: which RMs each cell may
//! hold, the units behind them and their plugin hashes, identified by a
//! `build_id` that every bitstream of the design carries.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::spec::Utilization;

/// `format` of a manifest this crate writes and reads.
pub const DESIGN_FORMAT: &str = "fracflow-design/1";

/// A blake3 digest naming a design (or a plugin).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BuildId(pub [u8; 32]);

impl BuildId {
    /// The blake3 digest of `bytes`.
    #[must_use]
    pub fn of(bytes: &[u8]) -> BuildId {
        BuildId(*blake3::hash(bytes).as_bytes())
    }

    /// Lower-case hex, 64 digits.
    #[must_use]
    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    /// The first 12 hex digits, for log lines.
    #[must_use]
    pub fn short(&self) -> String {
        let mut hex = self.to_hex();
        hex.truncate(12);
        hex
    }
}

impl fmt::Display for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BuildId({})", self.short())
    }
}

impl FromStr for BuildId {
    type Err = String;
    fn from_str(s: &str) -> Result<BuildId, String> {
        blake3::Hash::from_hex(s)
            .map(|h| BuildId(*h.as_bytes()))
            .map_err(|e| format!("{s:?} is not a 64-digit hex digest: {e}"))
    }
}

/// The woven design.  Serialised with serde_json in field order; vectors are
/// kept sorted (cells by slot, RMs in shell order, units by name), so the
/// JSON is canonical and `build_id` is reproducible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesignManifest {
    /// [`DESIGN_FORMAT`].
    pub format: String,
    /// The shell's name.
    pub name: String,
    /// Cells by slot.
    pub cells: Vec<CellDesign>,
    /// The units the cells use, by name.
    pub units: Vec<UnitDesign>,
    /// blake3 (hex) of the canonical JSON of this manifest with `build_id` empty.
    pub build_id: String,
}

/// A cell of the design.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellDesign {
    /// Cell name, e.g. `C00`.
    pub name: String,
    /// Slot id.
    pub slot: u8,
    /// Its RMs in shell order; the first is in the full image.
    pub rms: Vec<RmDesign>,
}

/// An RM of a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmDesign {
    /// Global RM id.
    pub id: u32,
    /// Unit name.
    pub unit: String,
    /// Path of its partial relative to the bitstream directory, e.g. `icap/c02_f20.bin`.
    pub partial: String,
}

/// A unit of the design and the plugin that implements it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitDesign {
    /// Unit name.
    pub name: String,
    /// `unit.yaml` version.
    pub version: u32,
    /// fperf function id, if any.
    pub function: Option<u32>,
    /// Resource estimate from `unit.yaml`.
    pub utilization: Utilization,
    /// Cells `unit.yaml` allows.
    pub cells: Vec<String>,
    /// blake3 (hex) of the kernel plugin's bytes.
    pub plugin_hash: String,
    /// Size of the plugin in bytes.
    pub plugin_len: u64,
}

/// The file name of the partial for RM `rm_id` in `slot`: `cXX_fYY.bin`.
#[must_use]
pub fn partial_file_name(slot: u8, rm_id: u32) -> String {
    format!("c{slot:02}_f{rm_id:02}.bin")
}

impl DesignManifest {
    /// The canonical JSON with `build_id` blanked: what the build id hashes.
    #[must_use]
    pub fn canonical_body(&self) -> Vec<u8> {
        let mut body = self.clone();
        body.build_id = String::new();
        // Serialising plain structs of strings and numbers cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The build id the content hashes to.
    #[must_use]
    pub fn compute_build_id(&self) -> BuildId {
        BuildId::of(&self.canonical_body())
    }

    /// Sets `build_id` from the content.
    pub fn seal(&mut self) {
        self.build_id = self.compute_build_id().to_hex();
    }

    /// The recorded build id, checked against the content.
    pub fn verified_build_id(&self) -> Result<BuildId, String> {
        let recorded: BuildId = self.build_id.parse()?;
        let computed = self.compute_build_id();
        if recorded != computed {
            return Err(format!(
                "manifest records build id {} but its content hashes to {}",
                recorded.short(),
                computed.short()
            ));
        }
        if self.format != DESIGN_FORMAT {
            return Err(format!(
                "manifest format {:?}, expected {DESIGN_FORMAT:?}",
                self.format
            ));
        }
        Ok(recorded)
    }

    /// The canonical JSON of the whole manifest, `build_id` included.
    #[must_use]
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The cell serving `slot`.
    #[must_use]
    pub fn cell(&self, slot: u8) -> Option<&CellDesign> {
        self.cells.iter().find(|c| c.slot == slot)
    }

    /// The unit named `name`.
    #[must_use]
    pub fn unit(&self, name: &str) -> Option<&UnitDesign> {
        self.units.iter().find(|u| u.name == name)
    }
}
