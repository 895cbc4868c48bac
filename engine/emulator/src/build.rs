//! The emulated build chain: "HLS" (compile each accelerator's C++ into a
//! kernel plugin, as HLS C-simulation runs the same source on a CPU), "weave"
//! (the design manifest, i.e. the static shell, from `hw/shell.yaml` and the
//! units' `unit.yaml` declarations) and "bitstream" (one partial per cell x
//! RM, the full image, the bypass image, in the artifact's layout
//! `icap/cXX_fYY.bin`, `jtag/frac.bit`, `bypass/frac.bit`).
//!
//! Each step is a pure function of its inputs, so the engine can cache each
//! as its own node and pass outputs between nodes as files:
//!
//! | step | inputs | outputs |
//! | --- | --- | --- |
//! | [`compile_unit`] | one unit directory ([`unit_sources`]), the compiler | `plugin.so`, `unit.json` ([`CompiledUnit::load`] reads them back) |
//! | [`weave`] | `shell.yaml`, every `unit.yaml` ([`weave_sources`]) | the [`DesignManifest`]; [`write_design`] writes `design.json`, [`DesignManifest::load`] reads it |
//! | [`partials_for_unit`] | the manifest, one compiled unit | `icap/cXX_fYY.bin` of every cell the unit is an RM of |
//! | [`full_image`] | the manifest, every compiled unit | `jtag/frac.bit` (each cell's first RM, and the allowlist of every plugin) |
//! | [`bypass_image`] | nothing | `bypass/frac.bit` |
//!
//! The build id hashes the manifest, which holds declarations only, so
//! editing one accelerator's C++ changes its plugin, its partials and the
//! full image, and nothing else: as in the real flow, where partials are
//! built against the abstract static shell.  [`build_design`] runs the whole
//! chain in one call.
//!
//! Everything here is deterministic: the same sources and compiler give the
//! same bytes on any machine.  The compiler runs in the unit's directory on
//! relative file names, without debug information, build id or symbol table
//! (see [`COMPILE_FLAGS`]), so no path or timestamp reaches the plugin; the
//! containers and JSON files hold none either.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::design::{
    BuildId, CellDesign, DESIGN_FILE, DESIGN_FORMAT, DesignManifest, RmDesign, UnitDesign,
    partial_file_name,
};
use crate::error::{Error, Result, io_err};
use crate::image::{AllowedPlugin, FullImage, InitialCell, PartialImage};
use crate::spec::{ShellSpec, UnitSpec, unit_model, valid_unit_name};

/// The kernel ABI header every unit includes, in `hw/accelerators/`.
pub const KERNEL_HEADER: &str = "frac_kernel.h";

/// Flags of every unit compile, in order (the engine puts them in the
/// fingerprint with [`compiler_version`]).  Besides these, each compile gets
/// `-ffile-prefix-map=<unit dir>=.`, `-frandom-seed=<unit>` and `-I..`, and
/// runs in the unit's directory on relative source names.
pub const COMPILE_FLAGS: &[&str] = &[
    "-std=c++17",
    "-O2",
    // No debug information: it would carry paths and the producer string.
    "-g0",
    "-shared",
    "-fPIC",
    // Only the three `frac_kernel_*` functions are exported.
    "-fvisibility=hidden",
    // The ABI is C: nothing may unwind across it.
    "-fno-exceptions",
    "-fno-rtti",
    "-Wall",
    "-Wextra",
    // `#pragma HLS ...` lines are for the synthesis tool, as in C-simulation.
    "-Wno-unknown-pragmas",
    // No random build id note, no symbol table (it names the source file).
    "-Wl,--build-id=none",
    "-s",
];

/// Cap on the compiler output kept in an error or in `diagnostics`.
const MAX_DIAGNOSTICS: usize = 64 << 10;

/// File name of a compiled unit's plugin in its output directory.
pub const PLUGIN_FILE: &str = "plugin.so";
/// File name of a compiled unit's record in its output directory.
pub const UNIT_RECORD_FILE: &str = "unit.json";
/// `format` of `unit.json`.
pub const UNIT_RECORD_FORMAT: &str = "fracflow-unit/1";

/// A unit compiled into a kernel plugin.
#[derive(Debug, Clone)]
pub struct CompiledUnit {
    /// Its `unit.yaml`.
    pub spec: UnitSpec,
    /// The plugin, `<out_dir>/plugin.so`.
    pub plugin: PathBuf,
    /// blake3 (hex) of the plugin's bytes.
    pub plugin_hash: String,
    /// The plugin's size.
    pub plugin_len: u64,
    /// Every file the compile read (sources, local headers, the ABI header,
    /// `unit.yaml`), sorted: the node's inputs.  Empty for a unit read back
    /// with [`CompiledUnit::load`] (`unit.json` holds no paths).
    pub sources: Vec<PathBuf>,
    /// [`compiler_version`] of the compiler used.
    pub compiler_version: String,
    /// Warnings the compiler printed (empty when clean).
    pub diagnostics: String,
}

/// `unit.json`: what [`compile_unit`] leaves beside `plugin.so`, so that
/// later steps can take the compile's output directory as their input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UnitRecord {
    format: String,
    spec: UnitSpec,
    plugin: String,
    plugin_hash: String,
    plugin_len: u64,
    compiler_version: String,
    diagnostics: String,
}

impl CompiledUnit {
    /// Reads back a directory [`compile_unit`] wrote: `unit.json` and
    /// `plugin.so`, checking that the plugin still hashes to the record.
    pub fn load(dir: &Path) -> Result<CompiledUnit> {
        let record_path = dir.join(UNIT_RECORD_FILE);
        let bytes = std::fs::read(&record_path)
            .map_err(io_err(format!("reading {}", record_path.display())))?;
        let fail = |message: String| Error::Spec {
            path: record_path.clone(),
            message,
        };
        let record: UnitRecord = serde_json::from_slice(&bytes)
            .map_err(|e| fail(format!("not a compiled-unit record: {e}")))?;
        if record.format != UNIT_RECORD_FORMAT {
            return Err(fail(format!(
                "format {:?}, expected {UNIT_RECORD_FORMAT:?}",
                record.format
            )));
        }
        if !valid_unit_name(&record.spec.name) {
            return Err(fail(format!("bad unit name {:?}", record.spec.name)));
        }
        // The plugin is always beside the record, under its fixed name.
        if record.plugin != PLUGIN_FILE {
            return Err(fail(format!(
                "plugin {:?}, expected {PLUGIN_FILE:?}",
                record.plugin
            )));
        }
        let plugin = dir.join(PLUGIN_FILE);
        let unit = CompiledUnit {
            spec: record.spec,
            plugin,
            plugin_hash: record.plugin_hash,
            plugin_len: record.plugin_len,
            sources: Vec::new(),
            compiler_version: record.compiler_version,
            diagnostics: record.diagnostics,
        };
        unit.plugin_bytes()?;
        Ok(unit)
    }

    /// The plugin's bytes, checked against [`CompiledUnit::plugin_hash`]
    /// (a plugin rebuilt or edited since its compile is refused).
    pub fn plugin_bytes(&self) -> Result<Vec<u8>> {
        let bytes = std::fs::read(&self.plugin)
            .map_err(io_err(format!("reading {}", self.plugin.display())))?;
        let hash = BuildId::of(&bytes).to_hex();
        if hash != self.plugin_hash || bytes.len() as u64 != self.plugin_len {
            return Err(Error::Design(format!(
                "plugin {} ({} bytes, {}) is not the {} bytes hashing to {} its compile recorded",
                self.plugin.display(),
                bytes.len(),
                &hash[..12],
                self.plugin_len,
                self.plugin_hash
            )));
        }
        Ok(bytes)
    }

    /// The plugin's hash as a digest.
    pub fn plugin_digest(&self) -> Result<BuildId> {
        self.plugin_hash
            .parse()
            .map_err(|e: String| Error::Design(format!("unit {}: plugin hash {e}", self.spec.name)))
    }

    fn record(&self) -> UnitRecord {
        UnitRecord {
            format: UNIT_RECORD_FORMAT.to_owned(),
            spec: self.spec.clone(),
            plugin: PLUGIN_FILE.to_owned(),
            plugin_hash: self.plugin_hash.clone(),
            plugin_len: self.plugin_len,
            compiler_version: self.compiler_version.clone(),
            diagnostics: self.diagnostics.clone(),
        }
    }
}

fn clip(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    if text.len() <= MAX_DIAGNOSTICS {
        return text.into_owned();
    }
    let mut cut = MAX_DIAGNOSTICS;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}\n[... cut at {MAX_DIAGNOSTICS} bytes]", &text[..cut])
}

/// The first line of `<compiler> --version`, e.g.
/// `g++ (Debian 12.2.0-14+deb12u1) 12.2.0`.
pub fn compiler_version(compiler: &Path) -> Result<String> {
    let out = Command::new(compiler)
        .arg("--version")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("running {} --version", compiler.display())))?;
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_owned();
    if !out.status.success() || first.is_empty() {
        return Err(Error::Compile {
            unit: "(none)".into(),
            compiler: format!("{} --version", compiler.display()),
            status: out.status.to_string(),
            stderr: clip(&out.stderr),
        });
    }
    Ok(first)
}

fn has_ext(path: &Path, exts: &[&str]) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| exts.contains(&e))
}

/// The unit's C++ sources (`*.cpp`, `*.cc`), sorted by name.
fn cpp_sources(unit_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let entries =
        std::fs::read_dir(unit_dir).map_err(io_err(format!("listing {}", unit_dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(io_err(format!("listing {}", unit_dir.display())))?;
        let path = entry.path();
        if path.is_file() && has_ext(&path, &["cpp", "cc"]) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// Every file a compile of `unit_dir` reads: its `unit.yaml`, its `*.cpp`,
/// `*.cc`, `*.h`, `*.hpp` and the ABI header beside the unit directories,
/// sorted.  The engine declares these as the `hls` node's inputs.
pub fn unit_sources(unit_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = vec![unit_dir.join("unit.yaml")];
    let entries =
        std::fs::read_dir(unit_dir).map_err(io_err(format!("listing {}", unit_dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(io_err(format!("listing {}", unit_dir.display())))?;
        let path = entry.path();
        if path.is_file() && has_ext(&path, &["cpp", "cc", "h", "hpp"]) {
            out.push(path);
        }
    }
    out.push(kernel_header(unit_dir));
    out.sort();
    Ok(out)
}

fn kernel_header(unit_dir: &Path) -> PathBuf {
    unit_dir
        .parent()
        .unwrap_or(Path::new(".."))
        .join(KERNEL_HEADER)
}

/// Compiles `unit_dir` (`hw/accelerators/<name>/`) with `compiler` into the
/// kernel plugin `<out_dir>/plugin.so` and writes `<out_dir>/unit.json` (the
/// unit's declaration, the plugin's hash and size, the compiler version and
/// its warnings; no paths).  `out_dir` holds one unit.  The compiler's
/// standard error is in the error on failure and in
/// [`CompiledUnit::diagnostics`] otherwise.
pub fn compile_unit(unit_dir: &Path, out_dir: &Path, compiler: &Path) -> Result<CompiledUnit> {
    let spec = UnitSpec::load(unit_dir)?;
    let cpp = cpp_sources(unit_dir)?;
    if cpp.is_empty() {
        return Err(Error::Spec {
            path: unit_dir.to_path_buf(),
            message: "the unit has no .cpp source".into(),
        });
    }
    let header = kernel_header(unit_dir);
    if !header.is_file() {
        return Err(Error::Spec {
            path: header,
            message: "the kernel ABI header is missing".into(),
        });
    }
    let compiler_version = compiler_version(compiler)?;
    std::fs::create_dir_all(out_dir).map_err(io_err(format!("creating {}", out_dir.display())))?;
    let out_dir = std::path::absolute(out_dir).map_err(io_err("resolving the output directory"))?;
    let abs_unit = std::path::absolute(unit_dir).map_err(io_err("resolving the unit directory"))?;
    let plugin = out_dir.join(PLUGIN_FILE);
    // Unique per process and call: the engine may compile in parallel.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = out_dir.join(format!(
        ".{}.so.{}-{call}.tmp",
        spec.name,
        std::process::id()
    ));

    let mut prefix_map = OsString::from("-ffile-prefix-map=");
    prefix_map.push(abs_unit.as_os_str());
    prefix_map.push("=.");
    let mut cmd = Command::new(compiler);
    cmd.current_dir(&abs_unit)
        .args(COMPILE_FLAGS)
        .arg(prefix_map)
        .arg(format!("-frandom-seed={}", spec.name))
        .arg("-I..")
        .arg("-o")
        .arg(&tmp)
        .args(cpp.iter().filter_map(|p| p.file_name()))
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    let out = cmd
        .output()
        .map_err(io_err(format!("running {}", compiler.display())))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::Compile {
            unit: spec.name.clone(),
            compiler: compiler.display().to_string(),
            status: out.status.to_string(),
            stderr: clip(&out.stderr),
        });
    }
    let bytes = std::fs::read(&tmp).map_err(io_err(format!("reading {}", tmp.display())));
    let bytes = match bytes {
        Ok(bytes) => bytes,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    std::fs::rename(&tmp, &plugin).map_err(io_err(format!("publishing {}", plugin.display())))?;
    let unit = CompiledUnit {
        plugin_hash: BuildId::of(&bytes).to_hex(),
        plugin_len: bytes.len() as u64,
        sources: unit_sources(unit_dir)?,
        compiler_version,
        diagnostics: clip(&out.stderr),
        plugin,
        spec,
    };
    let mut json = serde_json::to_vec_pretty(&unit.record())
        .map_err(|e| Error::Design(format!("serialising {UNIT_RECORD_FILE}: {e}")))?;
    json.push(b'\n');
    write_file(&out_dir.join(UNIT_RECORD_FILE), &json)?;
    Ok(unit)
}

/// Every directory under `units_dir` that holds a `unit.yaml`, sorted.
pub fn unit_dirs(units_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let entries =
        std::fs::read_dir(units_dir).map_err(io_err(format!("listing {}", units_dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(io_err(format!("listing {}", units_dir.display())))?;
        if entry.path().join("unit.yaml").is_file() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Every file [`weave`] reads: `shell_yaml` and each
/// `<units_dir>/*/unit.yaml`, sorted after the shell.  The engine declares
/// these as the weave node's inputs; no C++ source is among them.
pub fn weave_sources(shell_yaml: &Path, units_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = vec![shell_yaml.to_path_buf()];
    out.extend(
        unit_dirs(units_dir)?
            .into_iter()
            .map(|dir| dir.join("unit.yaml")),
    );
    Ok(out)
}

/// Weaves the static shell: reads `shell_yaml` and the `unit.yaml` of every
/// unit directory under `units_dir`, and places the units into the cells.
///
/// Only declarations are read (names, versions, function ids, resource
/// estimates, allowed cells), never plugin contents, so the manifest's
/// `build_id` names the static shell and does not change when an
/// accelerator's C++ does.  See [`weave_shell`] for the checks.
pub fn weave(shell_yaml: &Path, units_dir: &Path) -> Result<DesignManifest> {
    let shell = ShellSpec::load(shell_yaml)?;
    let units = unit_dirs(units_dir)?
        .iter()
        .map(|dir| UnitSpec::load(dir))
        .collect::<Result<Vec<_>>>()?;
    weave_shell(&shell, &units)
}

/// [`weave`] on an already loaded shell and unit declarations.
///
/// Checks that every RM's unit is declared, that the unit's `unit.yaml`
/// allows the cell, and that the emulator has a response model for the unit
/// (top_k, log, norm, cnn, pattern_slot, or_slot).  Units no cell uses are
/// left out of the manifest.
pub fn weave_shell(shell: &ShellSpec, units: &[UnitSpec]) -> Result<DesignManifest> {
    shell.check().map_err(Error::Design)?;
    let mut by_name = BTreeMap::new();
    for unit in units {
        if by_name.insert(unit.name.as_str(), unit).is_some() {
            return Err(Error::Design(format!("unit {} was given twice", unit.name)));
        }
    }
    let mut cells_in = shell.cells.clone();
    cells_in.sort_by_key(|c| c.slot_id);
    let mut used = BTreeMap::new();
    let mut cells = Vec::with_capacity(cells_in.len());
    for cell in &cells_in {
        let mut rms = Vec::with_capacity(cell.rms.len());
        for rm in &cell.rms {
            let unit = by_name.get(rm.unit.as_str()).ok_or_else(|| {
                Error::Design(format!(
                    "cell {} RM {} uses unit {}, which is not declared (no unit.yaml)",
                    cell.name, rm.id, rm.unit
                ))
            })?;
            if !unit.cells.iter().any(|c| c == &cell.name) {
                return Err(Error::Design(format!(
                    "unit {} may not be placed in cell {} (its unit.yaml allows {})",
                    rm.unit,
                    cell.name,
                    unit.cells.join(", ")
                )));
            }
            if unit_model(&rm.unit).is_none() {
                return Err(Error::Design(format!(
                    "the emulated device has no response model for unit {}",
                    rm.unit
                )));
            }
            used.insert(rm.unit.as_str(), *unit);
            rms.push(RmDesign {
                id: rm.id,
                unit: rm.unit.clone(),
                partial: format!("icap/{}", partial_file_name(cell.slot_id, rm.id)),
            });
        }
        cells.push(CellDesign {
            name: cell.name.clone(),
            slot: cell.slot_id,
            rms,
        });
    }
    let mut manifest = DesignManifest {
        format: DESIGN_FORMAT.to_owned(),
        name: shell.name.clone(),
        cells,
        units: used.values().map(|u| UnitDesign::from_spec(u)).collect(),
        build_id: String::new(),
    };
    manifest.seal();
    // What the weave built, the device and the later steps check again.
    manifest.verified_build_id().map_err(Error::Design)?;
    Ok(manifest)
}

/// Writes `<out_dir>/design.json` (the manifest, like the real build's
/// `spinhdl.yaml`); [`DesignManifest::load`] reads it back.
pub fn write_design(design: &DesignManifest, out_dir: &Path) -> Result<PathBuf> {
    design.verified_build_id().map_err(Error::Design)?;
    let path = out_dir.join(DESIGN_FILE);
    write_file(&path, &design.to_pretty_json())?;
    Ok(path)
}

/// One partial written by [`partials_for_unit`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartialFile {
    /// Cell (slot id).
    pub cell: u8,
    /// RM id.
    pub rm_id: u32,
    /// Unit name.
    pub unit: String,
    /// The file, `<out_dir>/icap/cXX_fYY.bin`.
    pub path: PathBuf,
}

/// What [`full_image`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FullImageFile {
    /// The design's build id (hex).
    pub build_id: String,
    /// `<out_dir>/jtag/frac.bit`.
    pub path: PathBuf,
    /// The allowlist it embeds: unit name → blake3 (hex) of its plugin.
    pub allowlist: BTreeMap<String, String>,
}

/// What [`bitstreams`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BitstreamSet {
    /// The design's build id.
    pub build_id: String,
    /// `<out_dir>/jtag/frac.bit`.
    pub full: PathBuf,
    /// The plugins the full image allows: unit name → blake3 (hex).
    pub allowlist: BTreeMap<String, String>,
    /// `<out_dir>/bypass/frac.bit`.
    pub bypass: PathBuf,
    /// `<out_dir>/design.json`, the manifest (like the build's own `spinhdl.yaml`).
    pub manifest: PathBuf,
    /// Every partial, in cell then shell order.
    pub partials: Vec<PartialFile>,
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    fracflow_record::atomic_write(path, bytes)
        .map_err(io_err(format!("writing {}", path.display())))
}

/// `unit` as the design declares it, refusing a unit compiled from another
/// `unit.yaml` than the woven one.
fn declared<'a>(design: &'a DesignManifest, unit: &CompiledUnit) -> Result<&'a UnitDesign> {
    let declared = design.unit(&unit.spec.name).ok_or_else(|| {
        Error::Design(format!(
            "unit {} is not in design {} (no cell uses it)",
            unit.spec.name,
            design.build_id.get(..12).unwrap_or(&design.build_id)
        ))
    })?;
    if !declared.matches(&unit.spec) {
        return Err(Error::Design(format!(
            "unit {} was compiled from a unit.yaml that differs from the woven one; weave and compile the same sources",
            unit.spec.name
        )));
    }
    Ok(declared)
}

/// Writes `<out_dir>/icap/cXX_fYY.bin` for every cell in which `unit` is an
/// RM, in cell order.  Each partial carries the design's build id (the
/// static shell's), its cell and RM id, the unit's name and its plugin; so
/// it depends on the shell and this one plugin only.
pub fn partials_for_unit(
    design: &DesignManifest,
    unit: &CompiledUnit,
    out_dir: &Path,
) -> Result<Vec<PartialFile>> {
    let build_id = design.verified_build_id().map_err(Error::Design)?;
    declared(design, unit)?;
    let plugin = unit.plugin_bytes()?;
    let mut out = Vec::new();
    for cell in &design.cells {
        for rm in cell.rms.iter().filter(|rm| rm.unit == unit.spec.name) {
            let partial = PartialImage {
                cell: cell.slot,
                rm_id: rm.id,
                build_id,
                unit: rm.unit.clone(),
                plugin: plugin.clone(),
            };
            // Named from the numbers, not from the manifest's string.
            let path = out_dir.join("icap").join(partial.file_name());
            write_file(&path, &partial.encode())?;
            out.push(PartialFile {
                cell: cell.slot,
                rm_id: rm.id,
                unit: rm.unit.clone(),
                path,
            });
        }
    }
    Ok(out)
}

/// Writes `<out_dir>/jtag/frac.bit`: the design with every cell's first RM,
/// and the allowlist of every unit's plugin hash (the only plugins the
/// device will load into this design).  `units` must hold every unit of the
/// design, each once, compiled from the woven `unit.yaml`; units the design
/// does not use are ignored.
pub fn full_image(
    design: &DesignManifest,
    units: &[CompiledUnit],
    out_dir: &Path,
) -> Result<FullImageFile> {
    let build_id = design.verified_build_id().map_err(Error::Design)?;
    let mut by_name: BTreeMap<&str, &CompiledUnit> = BTreeMap::new();
    for unit in units {
        if by_name.insert(unit.spec.name.as_str(), unit).is_some() {
            return Err(Error::Design(format!(
                "unit {} was given twice",
                unit.spec.name
            )));
        }
    }
    let mut allowlist = Vec::with_capacity(design.units.len());
    for declared_unit in &design.units {
        let unit = by_name.get(declared_unit.name.as_str()).ok_or_else(|| {
            Error::Design(format!("no compiled unit given for {}", declared_unit.name))
        })?;
        declared(design, unit)?;
        allowlist.push(AllowedPlugin {
            unit: declared_unit.name.clone(),
            hash: unit.plugin_digest()?,
        });
    }
    allowlist.sort_by(|a, b| a.unit.cmp(&b.unit));
    let mut initial = Vec::with_capacity(design.cells.len());
    for cell in &design.cells {
        let first = cell
            .rms
            .first()
            .ok_or_else(|| Error::Design(format!("cell {} has no RMs", cell.name)))?;
        let unit = by_name
            .get(first.unit.as_str())
            .ok_or_else(|| Error::Design(format!("no compiled unit given for {}", first.unit)))?;
        initial.push(InitialCell {
            slot: cell.slot,
            rm_id: first.id,
            unit: first.unit.clone(),
            plugin: unit.plugin_bytes()?,
        });
    }
    let listed = allowlist
        .iter()
        .map(|a| (a.unit.clone(), a.hash.to_hex()))
        .collect();
    let path = out_dir.join("jtag").join("frac.bit");
    write_file(
        &path,
        &FullImage::Design {
            manifest: design.clone(),
            allowlist,
            cells: initial,
        }
        .encode(),
    )?;
    Ok(FullImageFile {
        build_id: build_id.to_hex(),
        path,
        allowlist: listed,
    })
}

/// Writes `<out_dir>/bypass/frac.bit`, the baseline image without fRAC (it
/// depends on nothing).
pub fn bypass_image(out_dir: &Path) -> Result<PathBuf> {
    let path = out_dir.join("bypass").join("frac.bit");
    write_file(&path, &FullImage::Bypass.encode())?;
    Ok(path)
}

/// Every image of the design into `out_dir`, composed from the steps above:
/// [`partials_for_unit`] for each unit, [`full_image`], [`bypass_image`] and
/// [`write_design`].
pub fn bitstreams(
    design: &DesignManifest,
    units: &[CompiledUnit],
    out_dir: &Path,
) -> Result<BitstreamSet> {
    let full = full_image(design, units, out_dir)?;
    let mut partials = Vec::new();
    for unit in units {
        if design.unit(&unit.spec.name).is_some() {
            partials.extend(partials_for_unit(design, unit, out_dir)?);
        }
    }
    // Cell, then shell order.
    let order = |p: &PartialFile| {
        design
            .cell(p.cell)
            .and_then(|c| c.rms.iter().position(|rm| rm.id == p.rm_id))
    };
    partials.sort_by_key(|p| (p.cell, order(p)));
    Ok(BitstreamSet {
        build_id: full.build_id,
        full: full.path,
        allowlist: full.allowlist,
        bypass: bypass_image(out_dir)?,
        manifest: write_design(design, out_dir)?,
        partials,
    })
}

/// The whole chain in one call, for tests and ad-hoc use: weaves
/// `<hw_dir>/shell.yaml` with `<hw_dir>/accelerators/*/unit.yaml`, compiles
/// every unit into `<out_dir>/plugins/<name>/` and writes the images into
/// `<out_dir>/bitstreams`.
pub fn build_design(
    hw_dir: &Path,
    out_dir: &Path,
    compiler: &Path,
) -> Result<(Vec<CompiledUnit>, DesignManifest, BitstreamSet)> {
    let units_dir = hw_dir.join("accelerators");
    let design = weave(&hw_dir.join("shell.yaml"), &units_dir)?;
    let plugin_dir = out_dir.join("plugins");
    let units = unit_dirs(&units_dir)?
        .iter()
        .map(|dir| {
            let name = dir.file_name().unwrap_or(dir.as_os_str());
            compile_unit(dir, &plugin_dir.join(name), compiler)
        })
        .collect::<Result<Vec<_>>>()?;
    let set = bitstreams(&design, &units, &out_dir.join("bitstreams"))?;
    Ok((units, design, set))
}
