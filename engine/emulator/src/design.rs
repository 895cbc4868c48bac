//! The design manifest the emulated weave produces: which RMs each cell may
//! hold and the declarations of the units behind them, identified by a
//! `build_id` that every bitstream of the design carries.
//!
//! The manifest is the *static shell*: it holds no plugin contents, so its
//! build id depends on `hw/shell.yaml` and the units' `unit.yaml`
//! declarations only.  Editing an accelerator's C++ leaves it (and every
//! partial of the other units) unchanged, as partials of the real flow are
//! built against the abstract shell.  Which plugins the device may load is
//! fixed by the full image's allowlist instead ([`crate::image::FullImage`]).

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, io_err};
use crate::spec::{UnitSpec, Utilization};

/// `format` of a manifest this crate writes and reads.  Format 1 recorded
/// the plugin hashes in the manifest (so every partial depended on every
/// plugin); format 2 holds declarations only.
pub const DESIGN_FORMAT: &str = "fracflow-design/2";

/// File name of the manifest the weave step writes.
pub const DESIGN_FILE: &str = "design.json";

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

/// A unit of the design as its `unit.yaml` declares it (no plugin contents).
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
}

impl UnitDesign {
    /// The declaration of `spec`.
    #[must_use]
    pub fn from_spec(spec: &UnitSpec) -> UnitDesign {
        UnitDesign {
            name: spec.name.clone(),
            version: spec.version,
            function: spec.function,
            utilization: spec.utilization.clone(),
            cells: spec.cells.clone(),
        }
    }

    /// Whether `spec` declares exactly this unit (a unit compiled from a
    /// `unit.yaml` other than the woven one does not).
    #[must_use]
    pub fn matches(&self, spec: &UnitSpec) -> bool {
        *self == UnitDesign::from_spec(spec)
    }
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
        self.check_structure()?;
        Ok(recorded)
    }

    /// What the weave guarantees and the device relies on: 1..=4 cells with
    /// distinct slots below 4, each with at least one RM; RM ids unique; each
    /// RM's partial named `icap/cXX_fYY.bin`; every RM's unit declared once
    /// with a valid name and allowed in the cell.
    fn check_structure(&self) -> Result<(), String> {
        use std::collections::BTreeSet;
        let slots = usize::from(fracflow_proto::SLOT_COUNT);
        if self.cells.is_empty() || self.cells.len() > slots {
            return Err(format!("manifest has {} cells", self.cells.len()));
        }
        let mut units = BTreeSet::new();
        for unit in &self.units {
            if !crate::spec::valid_unit_name(&unit.name) || !units.insert(unit.name.as_str()) {
                return Err(format!("unit {:?} is invalid or declared twice", unit.name));
            }
        }
        let mut seen_slots = BTreeSet::new();
        let mut ids = BTreeSet::new();
        for cell in &self.cells {
            if usize::from(cell.slot) >= slots || !seen_slots.insert(cell.slot) {
                return Err(format!("cell {} has a bad or repeated slot", cell.name));
            }
            if cell.rms.is_empty() {
                return Err(format!("cell {} has no RMs", cell.name));
            }
            for rm in &cell.rms {
                if !ids.insert(rm.id) {
                    return Err(format!("RM id {} is used twice", rm.id));
                }
                if rm.partial != format!("icap/{}", partial_file_name(cell.slot, rm.id)) {
                    return Err(format!("RM {} names partial {:?}", rm.id, rm.partial));
                }
                let unit = self
                    .unit(&rm.unit)
                    .ok_or_else(|| format!("RM {} uses undeclared unit {:?}", rm.id, rm.unit))?;
                if !unit.cells.contains(&cell.name) {
                    return Err(format!(
                        "unit {} is not allowed in cell {}",
                        rm.unit, cell.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// The canonical JSON of the whole manifest, `build_id` included.
    #[must_use]
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The manifest as `design.json` holds it: pretty JSON and a newline.
    #[must_use]
    pub fn to_pretty_json(&self) -> Vec<u8> {
        let mut json = serde_json::to_vec_pretty(self).unwrap_or_default();
        json.push(b'\n');
        json
    }

    /// Reads a manifest written by [`crate::build::write_design`] (or any
    /// JSON of it) and checks its format and build id.
    pub fn load(path: &Path) -> Result<DesignManifest> {
        let bytes = std::fs::read(path).map_err(io_err(format!("reading {}", path.display())))?;
        let fail = |message: String| Error::Spec {
            path: path.to_path_buf(),
            message,
        };
        let manifest: DesignManifest = serde_json::from_slice(&bytes)
            .map_err(|e| fail(format!("not a design manifest: {e}")))?;
        manifest.verified_build_id().map_err(fail)?;
        Ok(manifest)
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
