//! The YAML declarations the build chain reads: `hw/shell.yaml` (cells and
//! their reconfigurable modules) and `hw/accelerators/<name>/unit.yaml`.

use std::collections::BTreeSet;
use std::path::Path;

use fracflow_proto::{SLOT_COUNT, Unit};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, io_err};

/// Longest unit name; the containers reserve 32 bytes for it.
pub const MAX_UNIT_NAME: usize = 32;

/// `hw/shell.yaml`: the static shell's reconfigurable cells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellSpec {
    /// Design name (`frac`).
    pub name: String,
    /// The cells, one per slot.
    pub cells: Vec<CellSpec>,
}

/// One reconfigurable cell (`C00`..`C03`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellSpec {
    /// Cell name, e.g. `C02`.
    pub name: String,
    /// The slot it serves (workload id N goes to slot N).
    pub slot_id: u8,
    /// The clock-region range of the real floorplan; informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The modules the cell may hold; the first is in the full image.
    pub rms: Vec<RmSpec>,
}

/// A reconfigurable module: a unit placed in a cell under a global id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmSpec {
    /// Global RM id: `YY` of `cXX_fYY`.
    pub id: u32,
    /// Unit name (a directory under `hw/accelerators/`).
    pub unit: String,
}

/// `hw/accelerators/<name>/unit.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitSpec {
    /// Unit name; equals its directory's name.
    pub name: String,
    /// Version of the unit's source, bumped by hand on interface changes.
    pub version: u32,
    /// fperf/trace function id (1 TOPK, 2 CNN, 3 LOGIT, 5 NORM); none for test units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<u32>,
    /// Resource estimate of the real unit.
    pub utilization: Utilization,
    /// Cells the unit may be placed in.
    pub cells: Vec<String>,
}

/// A resource estimate (out-of-context synthesis numbers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Utilization {
    /// Look-up tables.
    pub lut: u32,
    /// Flip-flops.
    pub ff: u32,
    /// 36 Kb block RAMs (halves count as .5).
    pub bram: f64,
    /// DSP slices.
    pub dsp: u32,
    /// UltraRAM blocks.
    #[serde(default)]
    pub uram: u32,
}

fn read_yaml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).map_err(io_err(format!("reading {}", path.display())))?;
    serde_saphyr::from_str(&text).map_err(|e| Error::Spec {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Whether `name` is a usable unit name: 1..=32 of `[a-z0-9_]`.
#[must_use]
pub fn valid_unit_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_UNIT_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The emulator's model of a unit's responses, found by name.
#[must_use]
pub fn unit_model(name: &str) -> Option<Unit> {
    Unit::ALL.into_iter().find(|u| u.name() == name)
}

impl ShellSpec {
    /// Reads and checks `hw/shell.yaml`.
    pub fn load(path: &Path) -> Result<ShellSpec> {
        let shell: ShellSpec = read_yaml(path)?;
        shell.check().map_err(|message| Error::Spec {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(shell)
    }

    /// Checks: 1..=4 cells with distinct names and slot ids below 4, each
    /// with at least one RM; RM ids unique across the shell; unit names valid.
    pub fn check(&self) -> Result<(), String> {
        if self.cells.is_empty() || self.cells.len() > usize::from(SLOT_COUNT) {
            return Err(format!(
                "the shell needs 1..={SLOT_COUNT} cells, it has {}",
                self.cells.len()
            ));
        }
        let mut names = BTreeSet::new();
        let mut slots = BTreeSet::new();
        let mut ids = BTreeSet::new();
        for cell in &self.cells {
            if !names.insert(cell.name.as_str()) {
                return Err(format!("cell {} is declared twice", cell.name));
            }
            if cell.slot_id >= SLOT_COUNT {
                return Err(format!(
                    "cell {}: slot_id {} is not below {SLOT_COUNT}",
                    cell.name, cell.slot_id
                ));
            }
            if !slots.insert(cell.slot_id) {
                return Err(format!("slot_id {} is used by two cells", cell.slot_id));
            }
            if cell.rms.is_empty() {
                return Err(format!("cell {} lists no RMs", cell.name));
            }
            for rm in &cell.rms {
                if !ids.insert(rm.id) {
                    return Err(format!("RM id {} is used twice (ids are global)", rm.id));
                }
                if !valid_unit_name(&rm.unit) {
                    return Err(format!("cell {}: bad unit name {:?}", cell.name, rm.unit));
                }
            }
        }
        Ok(())
    }
}

impl UnitSpec {
    /// Reads and checks `<unit_dir>/unit.yaml`: the name must equal the
    /// directory's, be a valid unit name and list at least one cell.
    pub fn load(unit_dir: &Path) -> Result<UnitSpec> {
        let path = unit_dir.join("unit.yaml");
        let spec: UnitSpec = read_yaml(&path)?;
        let fail = |message: String| Error::Spec {
            path: path.clone(),
            message,
        };
        if !valid_unit_name(&spec.name) {
            return Err(fail(format!(
                "unit name {:?} is not 1..=32 of [a-z0-9_]",
                spec.name
            )));
        }
        let dir_name = unit_dir.file_name().and_then(|n| n.to_str());
        if dir_name != Some(spec.name.as_str()) {
            return Err(fail(format!(
                "unit name {:?} differs from its directory {:?}",
                spec.name,
                dir_name.unwrap_or("?")
            )));
        }
        if spec.cells.is_empty() {
            return Err(fail("the unit lists no cells it may be placed in".into()));
        }
        Ok(spec)
    }
}
