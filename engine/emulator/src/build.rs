//! The emulated build chain: "HLS" (compile each accelerator's C++ into a
//! kernel plugin, as HLS C-simulation runs the same source on a CPU), "weave"
//! (the design manifest from `hw/shell.yaml` and the units) and "bitstream"
//! (the full image, the bypass image and one partial per cell x RM, in the
//! artifact's layout `jtag/frac.bit`, `icap/cXX_fYY.bin`, `bypass/frac.bit`).
//!
//! Everything here is deterministic: the same sources and compiler give the
//! same bytes on any machine.  The compiler runs in the unit's directory on
//! relative file names, without debug information, build id or symbol table
//! (see [`COMPILE_FLAGS`]), so no path or timestamp reaches the plugin; the
//! containers hold none either.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::design::{
    BuildId, CellDesign, DESIGN_FORMAT, DesignManifest, RmDesign, UnitDesign, partial_file_name,
};
use crate::error::{Error, Result, io_err};
use crate::image::{FullImage, InitialCell, PartialImage};
use crate::spec::{ShellSpec, UnitSpec, unit_model};

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

/// A unit compiled into a kernel plugin.
#[derive(Debug, Clone)]
pub struct CompiledUnit {
    /// Its `unit.yaml`.
    pub spec: UnitSpec,
    /// The plugin, `<out_dir>/<name>.so`.
    pub plugin: PathBuf,
    /// blake3 (hex) of the plugin's bytes.
    pub plugin_hash: String,
    /// The plugin's size.
    pub plugin_len: u64,
    /// Every file the compile read (sources, local headers, the ABI header,
    /// `unit.yaml`), sorted: the node's inputs.
    pub sources: Vec<PathBuf>,
    /// [`compiler_version`] of the compiler used.
    pub compiler_version: String,
    /// Warnings the compiler printed (empty when clean).
    pub diagnostics: String,
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
/// kernel plugin `<out_dir>/<name>.so`.  The compiler's standard error is in
/// the error on failure and in [`CompiledUnit::diagnostics`] otherwise.
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
    let plugin = out_dir.join(format!("{}.so", spec.name));
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
    std::fs::rename(&tmp, &plugin).map_err(io_err(format!("publishing {}", plugin.display())))?;
    let bytes = std::fs::read(&plugin).map_err(io_err(format!("reading {}", plugin.display())))?;
    Ok(CompiledUnit {
        plugin_hash: blake3::hash(&bytes).to_hex().to_string(),
        plugin_len: bytes.len() as u64,
        sources: unit_sources(unit_dir)?,
        compiler_version,
        diagnostics: clip(&out.stderr),
        plugin,
        spec,
    })
}

/// Weaves the design: reads `shell_yaml` and places `units` into its cells.
///
/// Checks that every RM's unit was compiled, that the unit's `unit.yaml`
/// allows the cell, and that the emulator has a response model for the unit
/// (top_k, log, norm, cnn, pattern_slot, or_slot).  Units no cell uses are
/// left out of the manifest.
pub fn weave(shell_yaml: &Path, units: &[CompiledUnit]) -> Result<DesignManifest> {
    let shell = ShellSpec::load(shell_yaml)?;
    weave_shell(&shell, units)
}

/// [`weave`] on an already loaded shell.
pub fn weave_shell(shell: &ShellSpec, units: &[CompiledUnit]) -> Result<DesignManifest> {
    shell.check().map_err(Error::Design)?;
    let mut by_name = BTreeMap::new();
    for unit in units {
        if by_name.insert(unit.spec.name.as_str(), unit).is_some() {
            return Err(Error::Design(format!(
                "unit {} was given twice",
                unit.spec.name
            )));
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
                    "cell {} RM {} uses unit {}, which was not compiled",
                    cell.name, rm.id, rm.unit
                ))
            })?;
            if !unit.spec.cells.iter().any(|c| c == &cell.name) {
                return Err(Error::Design(format!(
                    "unit {} may not be placed in cell {} (its unit.yaml allows {})",
                    rm.unit,
                    cell.name,
                    unit.spec.cells.join(", ")
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
    let units = used
        .values()
        .map(|u| UnitDesign {
            name: u.spec.name.clone(),
            version: u.spec.version,
            function: u.spec.function,
            utilization: u.spec.utilization.clone(),
            cells: u.spec.cells.clone(),
            plugin_hash: u.plugin_hash.clone(),
            plugin_len: u.plugin_len,
        })
        .collect();
    let mut manifest = DesignManifest {
        format: DESIGN_FORMAT.to_owned(),
        name: shell.name.clone(),
        cells,
        units,
        build_id: String::new(),
    };
    manifest.seal();
    Ok(manifest)
}

/// One partial written by [`bitstreams`].
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

/// What [`bitstreams`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BitstreamSet {
    /// The design's build id.
    pub build_id: String,
    /// `<out_dir>/jtag/frac.bit`.
    pub full: PathBuf,
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

/// Writes the design's images into `out_dir`: `jtag/frac.bit` (every cell
/// with its first RM), `icap/cXX_fYY.bin` for every cell x RM,
/// `bypass/frac.bit` and `design.json`.  `plugins` must hold every unit of
/// the design with the plugin hash the manifest records (a plugin rebuilt
/// since the weave is refused).
pub fn bitstreams(
    design: &DesignManifest,
    plugins: &[CompiledUnit],
    out_dir: &Path,
) -> Result<BitstreamSet> {
    let build_id: BuildId = design.verified_build_id().map_err(Error::Design)?;
    let mut bytes_of = BTreeMap::new();
    for unit in &design.units {
        let compiled = plugins
            .iter()
            .find(|p| p.spec.name == unit.name)
            .ok_or_else(|| Error::Design(format!("no plugin given for unit {}", unit.name)))?;
        let bytes = std::fs::read(&compiled.plugin)
            .map_err(io_err(format!("reading {}", compiled.plugin.display())))?;
        if blake3::hash(&bytes).to_hex().as_str() != unit.plugin_hash {
            return Err(Error::Design(format!(
                "plugin {} no longer hashes to {} recorded by the weave",
                compiled.plugin.display(),
                unit.plugin_hash
            )));
        }
        bytes_of.insert(unit.name.as_str(), bytes);
    }
    let plugin = |name: &str| {
        bytes_of
            .get(name)
            .cloned()
            .ok_or_else(|| Error::Design(format!("unit {name} is not in the manifest")))
    };

    let mut initial = Vec::with_capacity(design.cells.len());
    let mut partials = Vec::new();
    for cell in &design.cells {
        let first = cell
            .rms
            .first()
            .ok_or_else(|| Error::Design(format!("cell {} has no RMs", cell.name)))?;
        initial.push(InitialCell {
            slot: cell.slot,
            rm_id: first.id,
            unit: first.unit.clone(),
            plugin: plugin(&first.unit)?,
        });
        for rm in &cell.rms {
            let partial = PartialImage {
                cell: cell.slot,
                rm_id: rm.id,
                build_id,
                unit: rm.unit.clone(),
                plugin: plugin(&rm.unit)?,
            };
            let path = out_dir.join(&rm.partial);
            write_file(&path, &partial.encode())?;
            partials.push(PartialFile {
                cell: cell.slot,
                rm_id: rm.id,
                unit: rm.unit.clone(),
                path,
            });
        }
    }
    let full = out_dir.join("jtag").join("frac.bit");
    write_file(
        &full,
        &FullImage::Design {
            manifest: design.clone(),
            cells: initial,
        }
        .encode(),
    )?;
    let bypass = out_dir.join("bypass").join("frac.bit");
    write_file(&bypass, &FullImage::Bypass.encode())?;
    let manifest = out_dir.join("design.json");
    let mut json = serde_json::to_vec_pretty(design)
        .map_err(|e| Error::Design(format!("serialising the manifest: {e}")))?;
    json.push(b'\n');
    write_file(&manifest, &json)?;
    Ok(BitstreamSet {
        build_id: build_id.to_hex(),
        full,
        bypass,
        manifest,
        partials,
    })
}

/// The whole chain in one call, for tests and ad-hoc use: compiles every
/// `<hw_dir>/accelerators/*/` holding a `unit.yaml` into `<out_dir>/plugins`,
/// weaves `<hw_dir>/shell.yaml` and writes the images into
/// `<out_dir>/bitstreams`.
pub fn build_design(
    hw_dir: &Path,
    out_dir: &Path,
    compiler: &Path,
) -> Result<(Vec<CompiledUnit>, DesignManifest, BitstreamSet)> {
    let acc = hw_dir.join("accelerators");
    let mut unit_dirs = Vec::new();
    for entry in std::fs::read_dir(&acc).map_err(io_err(format!("listing {}", acc.display())))? {
        let entry = entry.map_err(io_err(format!("listing {}", acc.display())))?;
        if entry.path().join("unit.yaml").is_file() {
            unit_dirs.push(entry.path());
        }
    }
    unit_dirs.sort();
    let plugin_dir = out_dir.join("plugins");
    let units = unit_dirs
        .iter()
        .map(|dir| compile_unit(dir, &plugin_dir, compiler))
        .collect::<Result<Vec<_>>>()?;
    let design = weave(&hw_dir.join("shell.yaml"), &units)?;
    let set = bitstreams(&design, &units, &out_dir.join("bitstreams"))?;
    Ok((units, design, set))
}
