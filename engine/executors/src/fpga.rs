//! The FPGA chain's node kinds — `hls`, `weave`, `partials`, `image`, `program`, `load` — each with the
//! emulated flow (the system C++ compiler and the software device) and the real one (Vitis HLS, spinhdl,
//! `programfpga.sh` and the board), chosen by the node's `tool`.
//!
//! Outputs pass between nodes as files: `hls` leaves `plugin.so` + `unit.json`, `weave` leaves `design.json`,
//! `partials` leaves `icap/cXX_fYY.bin`, `image` leaves `jtag/frac.bit` or `bypass/frac.bit`. `program` and
//! `load` are effects on a device: never taken from the cache, their outputs record what was done.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fracflow_core::suggest::{did_you_mean, list_names};
use fracflow_core::{ConfigProblem, Executor, Job, KindInfo, NodeError, NodeSpec, Outcome};
use fracflow_emulator::build as emulated;
use fracflow_emulator::design::DESIGN_FILE;
use fracflow_emulator::{CompiledUnit, DesignManifest};
use fracflow_proto::limits;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::{
    self as cfg, UnitName, check_with, custom_with_hint, integer_of, shown, typed as config,
};
use crate::process::{self, Ending, Grace, Spawn};

fn failed(spec: &NodeSpec, what: impl std::fmt::Display) -> NodeError {
    NodeError::permanent(format!("node `{}`: {what}", spec.id))
}

pub(crate) fn append_log(job: &Job<'_>, text: &str) {
    use std::io::Write;
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(job.log)
    {
        let _ = log.write_all(text.as_bytes());
    }
}

/// The one dependency directory holding `file` (e.g. the weave's `design.json`).
fn dep_with(job: &Job<'_>, file: &str) -> Result<PathBuf, NodeError> {
    let mut found: Vec<PathBuf> = job
        .inputs
        .dirs()
        .filter(|dir| dir.join(file).is_file())
        .collect();
    match found.as_slice() {
        [_] => Ok(found.remove(0)),
        [] => Err(failed(
            job.spec,
            format!("no dependency provides `{file}`; add the node that makes it to `deps`"),
        )),
        _ => Err(failed(
            job.spec,
            format!("several dependencies provide `{file}`; keep one"),
        )),
    }
}

/// The path of `relative` (e.g. `icap/c00_f00.bin`) in the one dependency that produced it.
pub(crate) fn dep_file(job: &Job<'_>, relative: &str) -> Result<PathBuf, NodeError> {
    Ok(dep_with(job, relative)?.join(relative))
}

/// Every compiled unit among the dependencies.
fn dep_units(job: &Job<'_>) -> Result<Vec<CompiledUnit>, NodeError> {
    job.inputs
        .dirs()
        .filter(|dir| dir.join("unit.json").is_file())
        .map(|dir| CompiledUnit::load(&dir).map_err(|e| failed(job.spec, e)))
        .collect()
}

/// Runs a real tool through the process helper; a non-zero exit fails the node with the tool's name.
fn run_tool(
    job: &Job<'_>,
    program: &str,
    args: &[String],
    env: &[(String, String)],
    cwd: &Path,
) -> Result<Vec<u8>, NodeError> {
    append_log(job, &format!("$ {program} {}\n", args.join(" ")));
    let spawn = Spawn {
        program: PathBuf::from(program),
        args: args.to_vec(),
        env: env.to_vec(),
        cwd: cwd.to_owned(),
        log: job.log.to_owned(),
        timeout: job.spec.timeout,
        grace: Grace::default(),
    };
    let finished = process::run(&spawn, job.cancel)
        .map_err(|e| failed(job.spec, format!("cannot run {program}: {e}")))?;
    match finished.ending {
        Ending::Exited(0) => Ok(finished.stdout),
        Ending::Exited(code) => Err(failed(
            job.spec,
            format!("{program} exited with code {code}"),
        )),
        Ending::Signalled(signal) => Err(failed(
            job.spec,
            format!("{program} was killed by signal {signal}"),
        )),
        Ending::TimedOut => Err(NodeError::transient(format!(
            "node `{}`: {program} timed out",
            job.spec.id
        ))),
        Ending::Cancelled => Err(failed(job.spec, format!("{program} was interrupted"))),
    }
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// First line of `tool ARG`, memoised per (tool, arg): the tool's identity for fingerprints.
#[derive(Debug, Default)]
struct ToolVersions(Mutex<HashMap<(String, String), String>>);

impl ToolVersions {
    fn of(&self, tool: &str, arg: &str) -> String {
        let key = (tool.to_owned(), arg.to_owned());
        if let Some(known) = self.0.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return known;
        }
        let version = duct::cmd(tool, [arg])
            .stderr_to_stdout()
            .unchecked()
            .read()
            .ok()
            .and_then(|text| text.lines().next().map(str::to_owned))
            .unwrap_or_else(|| format!("{tool}: not found"));
        if let Ok(mut known) = self.0.lock() {
            known.insert(key, version.clone());
        }
        version
    }
}

// ---------------------------------------------------------------------------------------------------- hls

/// `hls`: compiles one accelerator, `hw/accelerators/<unit>/`, into the kernel its partials carry. The
/// emulated flow builds a plugin with a C++ compiler; `vitis_hls` runs the HLS tool for `part`. List the unit's
/// files in `inputs` (e.g. `"hw/accelerators/{unit}/*"` and `hw/accelerators/frac_kernel.h`) so that an edit
/// rebuilds it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HlsConfig {
    /// The accelerator (`top_k`, `cnn`, …; 1–32 of `a-z 0-9 _`): its sources are `hw/accelerators/<unit>/`.
    pub unit: UnitName,
    /// The C++ compiler of the emulated flow (default: the executor's `$CXX`, else `g++`).
    #[serde(default)]
    pub compiler: Option<String>,
    /// The flow: `emulated` (default) or `vitis_hls`.
    #[serde(default)]
    pub tool: HlsTool,
    /// The FPGA part, for the real flow (e.g. `xcu280-fsvh2892-2L-e`).
    #[serde(default)]
    pub part: Option<String>,
}

cfg::words! {
    /// The flow of an `hls` node.
    HlsTool {
        /// The emulated flow: a C++ compiler builds the kernel plugin.
        #[default]
        Emulated = "emulated",
        /// AMD Vitis HLS (the real flow).
        VitisHls = "vitis_hls",
    }
}

cfg::words! {
    /// The flow of a `weave` or `partials` node.
    WeaveTool {
        #[default]
        Emulated = "emulated",
        Spinhdl = "spinhdl",
    }
}

/// Where the accelerators' sources are, relative to the project root.
const ACCELERATORS: &str = "hw/accelerators";

/// The directories directly under `dir`, sorted (for suggestions).
fn subdirectories(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A unit whose sources are missing, with the units that exist.
fn check_unit(unit: &str, root: &Path) -> Vec<ConfigProblem> {
    let dir = Path::new(ACCELERATORS).join(unit);
    if root.join(&dir).is_dir() {
        return Vec::new();
    }
    let known = subdirectories(&root.join(ACCELERATORS));
    let hint = did_you_mean(unit, known.iter().map(String::as_str)).or_else(|| {
        (!known.is_empty()).then(|| {
            format!(
                "units in `{ACCELERATORS}/`: {}",
                list_names(known.iter().map(String::as_str))
            )
        })
    });
    vec![
        ConfigProblem::key(
            "unit",
            format!(
                "unit `{unit}` has no sources: `{}/` is not a directory",
                dir.display()
            ),
        )
        .with_hint(hint),
    ]
}

/// The U280's part, as the artifact's `spinhdl.yaml` names it.
const DEFAULT_PART: &str = "xcu280-fsvh2892-2L-e";

#[derive(Debug, Default)]
pub struct HlsKind {
    versions: ToolVersions,
}

fn compiler(config: &HlsConfig) -> String {
    config
        .compiler
        .clone()
        .or_else(|| std::env::var("CXX").ok())
        .unwrap_or_else(|| "g++".to_owned())
}

impl Executor for HlsKind {
    fn check(&self, spec: &NodeSpec, root: &Path) -> Vec<ConfigProblem> {
        check_with::<HlsConfig>(spec, |c| check_unit(&c.unit.0, root))
    }

    fn config_schema(&self) -> serde_json::Value {
        cfg::schema_of::<HlsConfig>()
    }

    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        let config: HlsConfig = config(spec)?;
        let tools = match config.tool {
            HlsTool::VitisHls => BTreeMap::from([(
                "vitis_hls".to_owned(),
                self.versions.of("vitis_hls", "-version"),
            )]),
            _ => {
                let cxx = compiler(&config);
                BTreeMap::from([
                    ("cxx".to_owned(), self.versions.of(&cxx, "--version")),
                    ("cxx_flags".to_owned(), emulated::COMPILE_FLAGS.join(" ")),
                ])
            }
        };
        Ok(KindInfo {
            version: 1,
            tools,
            cacheable: true,
        })
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        match config::<HlsConfig>(spec) {
            Ok(c) if c.tool == HlsTool::VitisHls => format!("vitis_hls -f hls.tcl  # {}", c.unit.0),
            Ok(c) => format!(
                "{} {} hw/accelerators/{}/*.cpp -o plugin.so",
                compiler(&c),
                emulated::COMPILE_FLAGS.join(" "),
                c.unit.0
            ),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: HlsConfig = config(job.spec)?;
        let unit_dir = job.root.join(ACCELERATORS).join(&config.unit.0);
        if config.tool == HlsTool::VitisHls {
            let script = vitis_script(&config, &unit_dir);
            let tcl = job.out_dir.join("hls.tcl");
            std::fs::write(&tcl, script).map_err(|e| failed(job.spec, e))?;
            run_tool(
                job,
                "vitis_hls",
                &["-f".to_owned(), tcl.display().to_string()],
                &[],
                job.out_dir,
            )?;
            return Ok(Outcome::default());
        }
        let compiled =
            emulated::compile_unit(&unit_dir, job.out_dir, Path::new(&compiler(&config)))
                .map_err(|e| failed(job.spec, e))?;
        if !compiled.diagnostics.is_empty() {
            append_log(job, &compiled.diagnostics);
        }
        let metrics = BTreeMap::from([
            (
                "plugin_bytes".to_owned(),
                serde_json::json!(compiled.plugin_len),
            ),
            (
                "plugin_hash".to_owned(),
                serde_json::json!(compiled.plugin_hash),
            ),
        ]);
        Ok(Outcome { metrics })
    }
}

/// The Tcl that builds one HLS unit into an IP-catalog export, as a Vitis HLS user writes it.
fn vitis_script(config: &HlsConfig, unit_dir: &Path) -> String {
    let part = config.part.as_deref().unwrap_or(DEFAULT_PART);
    let source = unit_dir.join(format!("{}.cpp", config.unit.0));
    format!(
        "open_project -reset {unit}_prj\nset_top frac_kernel_run\nadd_files {source} -cflags \"-I{include}\"\nopen_solution -reset solution1 -flow_target vivado\nset_part {part}\ncreate_clock -period 4\ncsynth_design\nexport_design -format ip_catalog -output ip\nexit\n",
        unit = config.unit.0,
        source = source.display(),
        include = unit_dir.parent().unwrap_or(unit_dir).display(),
    )
}

// -------------------------------------------------------------------------------------------------- weave

/// `weave`: places the units into the cells of the shell and writes the design (`design.json`). It reads the
/// shell and each unit's `unit.yaml` (declarations, no C++): list them in `inputs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WeaveConfig {
    /// The shell: its cells and the modules each may hold, relative to the project root.
    #[serde(default = "default_shell")]
    pub shell: String,
    /// The directory of the units (one subdirectory each), relative to the project root.
    #[serde(default = "default_units")]
    pub units: String,
    /// The flow: `emulated` (default) or `spinhdl`.
    #[serde(default)]
    pub tool: WeaveTool,
}

impl WeaveConfig {
    fn check(&self, root: &Path) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if !root.join(&self.shell).is_file() {
            problems.push(
                ConfigProblem::key("shell", format!("shell `{}` is not a file", self.shell))
                    .with_hint(Some("`shell` is relative to the project root".to_owned())),
            );
        }
        if !root.join(&self.units).is_dir() {
            problems.push(
                ConfigProblem::key(
                    "units",
                    format!("units directory `{}` is not a directory", self.units),
                )
                .with_hint(Some("`units` is relative to the project root".to_owned())),
            );
        }
        problems
    }
}

fn default_shell() -> String {
    "hw/shell.yaml".to_owned()
}

fn default_units() -> String {
    ACCELERATORS.to_owned()
}

#[derive(Debug, Default)]
pub struct WeaveKind {
    versions: ToolVersions,
}

impl Executor for WeaveKind {
    fn check(&self, spec: &NodeSpec, root: &Path) -> Vec<ConfigProblem> {
        check_with::<WeaveConfig>(spec, |c| c.check(root))
    }

    fn config_schema(&self) -> serde_json::Value {
        cfg::schema_of::<WeaveConfig>()
    }

    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        let config: WeaveConfig = config(spec)?;
        let tools = match config.tool {
            WeaveTool::Spinhdl => BTreeMap::from([(
                "spinhdl".to_owned(),
                self.versions.of("spinhdl", "--version"),
            )]),
            _ => BTreeMap::new(),
        };
        Ok(KindInfo {
            version: 1,
            tools,
            cacheable: true,
        })
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        match config::<WeaveConfig>(spec) {
            Ok(c) if c.tool == WeaveTool::Spinhdl => {
                "spinhdl --parallel N weave spinhdl.yaml --units spin.yaml --static static.yaml"
                    .to_owned()
            }
            Ok(c) => format!("weave {} + {}/*/unit.yaml -> design.json", c.shell, c.units),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: WeaveConfig = config(job.spec)?;
        if config.tool == WeaveTool::Spinhdl {
            let parallel = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .to_string();
            let args: Vec<String> = [
                "--parallel",
                &parallel,
                "weave",
                "spinhdl.yaml",
                "--units",
                "spin.yaml",
                "--static",
                "static.yaml",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
            run_tool(job, "spinhdl", &args, &[], job.root)?;
            // spinhdl writes into the project's build tree; publish its images as this node's outputs.
            let products = job.root.join("build/frac/bitstreams");
            for sub in ["jtag", "icap"] {
                copy_dir(&products.join(sub), &job.out_dir.join(sub)).map_err(|e| {
                    failed(
                        job.spec,
                        format!("spinhdl left no {}: {e}", products.join(sub).display()),
                    )
                })?;
            }
            return Ok(Outcome::default());
        }
        let design = emulated::weave(&job.root.join(&config.shell), &job.root.join(&config.units))
            .map_err(|e| failed(job.spec, e))?;
        emulated::write_design(&design, job.out_dir).map_err(|e| failed(job.spec, e))?;
        Ok(Outcome {
            metrics: BTreeMap::from([("build_id".to_owned(), serde_json::json!(design.build_id))]),
        })
    }
}

// ----------------------------------------------------------------------------------------------- partials

/// `partials`: the partial bitstreams of one unit, `icap/cXX_fYY.bin` for each cell that may hold it. It reads
/// the design from its `weave` dependency and the kernel from its `hls` dependency.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartialsConfig {
    /// The unit whose partials are made (as in its `hls` dependency).
    pub unit: UnitName,
    /// The flow: `emulated` (default) or `spinhdl` (`spinhdl spin UNIT` against each cell's abstract shell).
    #[serde(default)]
    pub tool: WeaveTool,
}

#[derive(Debug, Default)]
pub struct PartialsKind;

impl Executor for PartialsKind {
    fn check(&self, spec: &NodeSpec, root: &Path) -> Vec<ConfigProblem> {
        check_with::<PartialsConfig>(spec, |c| check_unit(&c.unit.0, root))
    }

    fn config_schema(&self) -> serde_json::Value {
        cfg::schema_of::<PartialsConfig>()
    }

    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        config::<PartialsConfig>(spec)?;
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: true,
        })
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        match config::<PartialsConfig>(spec) {
            Ok(c) if c.tool == WeaveTool::Spinhdl => format!(
                "spinhdl spin {} --shell build/frac/abstract_shell/ab_sh_cNN_bbx_inst.dcp --cell CNN --out-dir . (each cell)",
                c.unit.0
            ),
            Ok(c) => format!(
                "partials of {} for every cell that may hold it -> icap/cXX_fYY.bin",
                c.unit.0
            ),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: PartialsConfig = config(job.spec)?;
        let unit_name = config.unit.0.as_str();
        if config.tool == WeaveTool::Spinhdl {
            // The real flow has no design.json: the cells come from the shell's declarations.
            let design = emulated::weave(
                &job.root.join(default_shell()),
                &job.root.join(default_units()),
            )
            .map_err(|e| failed(job.spec, e))?;
            for cell in design
                .cells
                .iter()
                .filter(|c| c.rms.iter().any(|rm| rm.unit == unit_name))
            {
                let shell = format!(
                    "build/frac/abstract_shell/ab_sh_c{:02}_bbx_inst.dcp",
                    cell.slot
                );
                let args: Vec<String> = vec![
                    "spin".into(),
                    unit_name.to_owned(),
                    "--shell".into(),
                    shell,
                    "--cell".into(),
                    cell.name.clone(),
                    "--out-dir".into(),
                    job.out_dir.display().to_string(),
                ];
                run_tool(job, "spinhdl", &args, &[], job.root)?;
            }
            return Ok(Outcome::default());
        }
        let design = DesignManifest::load(&dep_with(job, DESIGN_FILE)?.join(DESIGN_FILE))
            .map_err(|e| failed(job.spec, e))?;
        let unit = dep_units(job)?
            .into_iter()
            .find(|u| u.spec.name == unit_name)
            .ok_or_else(|| {
                failed(
                    job.spec,
                    format!("no `hls` dependency compiled `{unit_name}`"),
                )
            })?;
        let written = emulated::partials_for_unit(&design, &unit, job.out_dir)
            .map_err(|e| failed(job.spec, e))?;
        Ok(Outcome {
            metrics: BTreeMap::from([("partials".to_owned(), serde_json::json!(written.len()))]),
        })
    }
}

// -------------------------------------------------------------------------------------------------- image

/// `image`: the full image `jtag/frac.bit`, from the design of its `weave` dependency and the kernels of all its
/// `hls` dependencies; or, with `bypass: true`, the bypass image `bypass/frac.bit` (no fRAC; no dependencies).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageConfig {
    /// Make the bypass image instead of the full image.
    #[serde(default)]
    pub bypass: bool,
}

#[derive(Debug, Default)]
pub struct ImageKind;

impl Executor for ImageKind {
    fn check(&self, spec: &NodeSpec, _root: &Path) -> Vec<ConfigProblem> {
        check_with::<ImageConfig>(spec, |_| Vec::new())
    }

    fn config_schema(&self) -> serde_json::Value {
        cfg::schema_of::<ImageConfig>()
    }

    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        config::<ImageConfig>(spec)?;
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: true,
        })
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        match config::<ImageConfig>(spec) {
            Ok(c) if c.bypass => {
                "bypass image (no slots; the TCP layer echoes) -> bypass/frac.bit".to_owned()
            }
            Ok(_) => "full image (each cell's first RM + the plugin allowlist) -> jtag/frac.bit"
                .to_owned(),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: ImageConfig = config(job.spec)?;
        if config.bypass {
            emulated::bypass_image(job.out_dir).map_err(|e| failed(job.spec, e))?;
            return Ok(Outcome::default());
        }
        let design = DesignManifest::load(&dep_with(job, DESIGN_FILE)?.join(DESIGN_FILE))
            .map_err(|e| failed(job.spec, e))?;
        let image = emulated::full_image(&design, &dep_units(job)?, job.out_dir)
            .map_err(|e| failed(job.spec, e))?;
        Ok(Outcome {
            metrics: BTreeMap::from([("build_id".to_owned(), serde_json::json!(image.build_id))]),
        })
    }
}

// ------------------------------------------------------------------------------------------------ program

/// `program`: programs the device at `addr` with a full image (a side effect: it runs whenever its dependents
/// do).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProgramConfig {
    /// A full image file, relative to the project root (default: `jtag/frac.bit`, or `bypass/frac.bit`, of the
    /// `image` dependency).
    #[serde(default)]
    pub image: Option<String>,
    /// The device, `HOST:PORT`.
    pub addr: DeviceAddr,
    /// The flow: `emulated` (default: the emulator's management channel) or `vivado` (the programming script,
    /// then ping until the board answers, then settle).
    #[serde(default)]
    pub tool: ProgramTool,
    /// Real flow: the programming script, relative to the project root (default `scripts/programfpga.sh`).
    #[serde(default = "default_programfpga")]
    pub programfpga: String,
    /// Real flow: `VIVADO_ROOT` for the script.
    #[serde(default)]
    pub vivado_root: Option<String>,
    /// Real flow: `HW_TARGET` for the script (the JTAG target).
    #[serde(default)]
    pub hw_target: Option<String>,
    /// Real flow: seconds to wait after the board answers ping (default 10).
    #[serde(default = "default_settle")]
    pub settle_s: cfg::Number,
    /// Real flow: seconds to wait for the board to answer ping after programming (default 90).
    #[serde(default = "default_ready_timeout")]
    pub ready_timeout_s: cfg::Number,
}

impl ProgramConfig {
    fn check(&self, root: &Path) -> Vec<ConfigProblem> {
        match &self.image {
            Some(image) if !root.join(image).is_file() => vec![
                ConfigProblem::key("image", format!("image `{image}` is not a file")).with_hint(
                    Some(
                        "`image` is relative to the project root; leave it out to program the image of the `image` dependency"
                            .to_owned(),
                    ),
                ),
            ],
            _ => Vec::new(),
        }
    }
}

cfg::words! {
    /// The flow of a `program` node.
    ProgramTool {
        #[default]
        Emulated = "emulated",
        Vivado = "vivado",
    }
}

/// The device's network address, `HOST:PORT` (a name is resolved when the node runs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct DeviceAddr(pub String);

impl<'de> Deserialize<'de> for DeviceAddr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<DeviceAddr, D::Error> {
        let text = String::deserialize(deserializer)?;
        let valid = text.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && !host.contains(char::is_whitespace)
                && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if valid {
            Ok(DeviceAddr(text))
        } else {
            Err(serde::de::Error::custom(format_args!(
                "expected a device address `HOST:PORT` (e.g. `127.0.0.1:7000`), found `{text}`"
            )))
        }
    }
}

crate::config::inline_schema!(DeviceAddr, {
    schemars::json_schema!({ "type": "string", "description": "`HOST:PORT`, e.g. `127.0.0.1:7000`." })
});

fn default_programfpga() -> String {
    "scripts/programfpga.sh".to_owned()
}
fn default_settle() -> cfg::Number {
    cfg::Number(10.0)
}
fn default_ready_timeout() -> cfg::Number {
    cfg::Number(90.0)
}

/// Between readiness pings, as the artifact's `run.py` waits.
const PING_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
pub struct ProgramKind;

/// The image to program: the node's `image`, else the one image among its dependencies' outputs.
fn image_path(job: &Job<'_>, configured: Option<&str>) -> Result<PathBuf, NodeError> {
    if let Some(path) = configured {
        return Ok(job.root.join(path));
    }
    let found: Vec<PathBuf> = job
        .inputs
        .dirs()
        .flat_map(|dir| [dir.join("jtag/frac.bit"), dir.join("bypass/frac.bit")])
        .filter(|p| p.is_file())
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(failed(
            job.spec,
            "no image: set `image` or depend on an `image` node",
        )),
        _ => Err(failed(
            job.spec,
            "several images among the dependencies; keep one or set `image`",
        )),
    }
}

/// `HOST:PORT` resolved (a name such as `localhost` included), first address.
fn socket(spec: &NodeSpec, addr: &str) -> Result<SocketAddr, NodeError> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .map_err(|e| failed(spec, format!("device address `{addr}`: {e}")))?
        .next()
        .ok_or_else(|| failed(spec, format!("device address `{addr}` resolves to nothing")))
}

impl Executor for ProgramKind {
    fn check(&self, spec: &NodeSpec, root: &Path) -> Vec<ConfigProblem> {
        check_with::<ProgramConfig>(spec, |c| c.check(root))
    }

    fn config_schema(&self) -> serde_json::Value {
        cfg::schema_of::<ProgramConfig>()
    }

    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        config::<ProgramConfig>(spec)?;
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: false,
        })
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        match config::<ProgramConfig>(spec) {
            Ok(c) if c.tool == ProgramTool::Vivado => format!(
                "HW_TARGET={} VIVADO_ROOT={} {} IMAGE; then ping {} until ready, settle {}s",
                c.hw_target.as_deref().unwrap_or(""),
                c.vivado_root.as_deref().unwrap_or(""),
                c.programfpga,
                c.addr.0,
                c.settle_s.0
            ),
            Ok(c) => format!(
                "program the emulated device at {} (management channel)",
                c.addr.0
            ),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: ProgramConfig = config(job.spec)?;
        let image = image_path(job, config.image.as_deref())?;
        let image_hash =
            fracflow_core::statcache::hash_file(&image).map_err(|e| failed(job.spec, e))?;
        if config.tool == ProgramTool::Vivado {
            program_real(job, &config, &image)?;
        } else {
            let report = fracflow_emulator::program(socket(job.spec, &config.addr.0)?, &image)
                .map_err(|e| {
                    NodeError::transient(format!(
                        "node `{}`: device {}: {e}",
                        job.spec.id, config.addr.0
                    ))
                })?;
            append_log(
                job,
                &format!(
                    "programmed {} (build {})\n",
                    image.display(),
                    report.build_id
                ),
            );
        }
        // What dependents key on: the image now in the device, not when it was programmed.
        let record = serde_json::json!({"image_sha": image_hash, "addr": config.addr.0});
        std::fs::write(job.out_dir.join("programmed.json"), record.to_string())
            .map_err(|e| failed(job.spec, e))?;
        Ok(Outcome::default())
    }
}

/// `programfpga.sh IMAGE` with `VIVADO_ROOT` and `HW_TARGET`, then ping the board until it answers
/// (every 2 s up to the ready timeout), then let the link settle.
fn program_real(job: &Job<'_>, config: &ProgramConfig, image: &Path) -> Result<(), NodeError> {
    let addr = &config.addr.0;
    let host = addr
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(addr)
        .to_owned();
    program_board(
        job,
        &BoardProgramming {
            script: job.root.join(&config.programfpga),
            vivado_root: config.vivado_root.clone().unwrap_or_default(),
            hw_target: config.hw_target.clone().unwrap_or_default(),
            host,
            nic: None,
            ready_timeout_s: config.ready_timeout_s.0,
            settle_s: config.settle_s.0,
        },
        image,
    )
}

/// How a real board is programmed and when it counts as ready again.
#[derive(Debug, Clone)]
pub(crate) struct BoardProgramming {
    pub script: PathBuf,
    /// `VIVADO_ROOT`; empty: the script's default.
    pub vivado_root: String,
    /// `HW_TARGET`; empty: the first JTAG target.
    pub hw_target: String,
    /// The board's address, pinged until it answers.
    pub host: String,
    /// The client NIC that must hold an IPv4 address again (it goes down while the board reconfigures).
    pub nic: Option<String>,
    pub ready_timeout_s: f64,
    pub settle_s: f64,
}

/// Programs `image` with the script, waits until the NIC has its address and the board answers ping (every 2 s
/// up to the ready timeout), then lets the link settle. A board that never answers is a transient failure.
pub(crate) fn program_board(
    job: &Job<'_>,
    board: &BoardProgramming,
    image: &Path,
) -> Result<(), NodeError> {
    let mut env = Vec::new();
    if !board.vivado_root.is_empty() {
        env.push(("VIVADO_ROOT".to_owned(), board.vivado_root.clone()));
    }
    if !board.hw_target.is_empty() {
        env.push(("HW_TARGET".to_owned(), board.hw_target.clone()));
    }
    let script = job.root.join(&board.script);
    run_tool(
        job,
        &script.display().to_string(),
        &[image.display().to_string()],
        &env,
        job.root,
    )?;
    let deadline = Instant::now() + Duration::from_secs_f64(board.ready_timeout_s);
    loop {
        let nic_ready = board.nic.as_ref().is_none_or(|nic| {
            run_tool(
                job,
                "ip",
                &[
                    "-o".into(),
                    "-4".into(),
                    "addr".into(),
                    "show".into(),
                    "dev".into(),
                    nic.clone(),
                ],
                &[],
                job.root,
            )
            .is_ok_and(|out| String::from_utf8_lossy(&out).contains("inet "))
        });
        let answered = nic_ready
            && run_tool(
                job,
                "ping",
                &[
                    "-c".into(),
                    "1".into(),
                    "-W".into(),
                    "1".into(),
                    board.host.clone(),
                ],
                &[],
                job.root,
            )
            .is_ok();
        if answered {
            break;
        }
        if Instant::now() >= deadline || job.cancel.is_cancelled() {
            return Err(NodeError::transient(format!(
                "node `{}`: the board at {} did not answer ping{} within {}s of programming",
                job.spec.id,
                board.host,
                board
                    .nic
                    .as_ref()
                    .map(|n| format!(" (or {n} had no address)"))
                    .unwrap_or_default(),
                board.ready_timeout_s
            )));
        }
        std::thread::sleep(PING_INTERVAL);
    }
    append_log(
        job,
        &format!("board answers; settling {}s\n", board.settle_s),
    );
    let settle_until = Instant::now() + Duration::from_secs_f64(board.settle_s);
    while Instant::now() < settle_until && !job.cancel.is_cancelled() {
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

// --------------------------------------------------------------------------------------------------- load

/// `load`: loads a partial bitstream into a slot of the device at `addr` through the reconfiguration
/// controller: `WRITE_HBM` of `chunk_size` bytes each from `hbm_addr`, then `RECONF_ICAP`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadConfig {
    /// The slot (cell) to reload, 0–3.
    pub slot: cfg::Slot,
    /// The partial's file name (e.g. `c00_f00.bin`), found in a dependency's `icap/` outputs.
    pub partial: FileName,
    /// The device, `HOST:PORT`.
    pub addr: DeviceAddr,
    /// Bytes per `WRITE_HBM`: 64–256, a multiple of 64 (default 256).
    #[serde(default)]
    pub chunk_size: ChunkSize,
    /// Where the partial is staged in HBM: 32-byte aligned, below 2^33 (default `0x10004000`).
    #[serde(default)]
    pub hbm_addr: HbmAddr,
}

/// Bytes per `WRITE_HBM`: the reconfiguration controller's limits (`fracflow_proto::limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ChunkSize(pub usize);

impl Default for ChunkSize {
    fn default() -> ChunkSize {
        ChunkSize(limits::DEFAULT_CHUNK_SIZE)
    }
}

impl<'de> Deserialize<'de> for ChunkSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<ChunkSize, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let size = integer_of(&value).and_then(|v| usize::try_from(v).ok());
        match size {
            Some(size)
                if (limits::MIN_CHUNK_SIZE..=limits::MAX_CHUNK_SIZE).contains(&size)
                    && size % limits::LINE == 0 =>
            {
                Ok(ChunkSize(size))
            }
            _ => Err(custom_with_hint(
                format_args!(
                    "expected a chunk size of 64, 128, 192 or 256 bytes, found `{}`",
                    shown(&value)
                ),
                Some(format!(
                    "the reconfiguration controller takes {}–{} bytes per write, in multiples of {}",
                    limits::MIN_CHUNK_SIZE,
                    limits::MAX_CHUNK_SIZE,
                    limits::LINE
                )),
            )),
        }
    }
}

crate::config::inline_schema!(ChunkSize, {
    cfg::or_template(serde_json::json!({ "type": "integer", "enum": [64, 128, 192, 256] }))
});

/// An HBM address: 32-byte aligned, below 2^33; an integer or text (`"0x10004000"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct HbmAddr(pub u64);

impl Default for HbmAddr {
    fn default() -> HbmAddr {
        HbmAddr(limits::DEFAULT_HBM_ADDR)
    }
}

impl<'de> Deserialize<'de> for HbmAddr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<HbmAddr, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let addr = integer_of(&value).and_then(|v| u64::try_from(v).ok());
        match addr {
            Some(addr) if addr % limits::HBM_ALIGN == 0 && addr >> limits::HBM_ADDR_BITS == 0 => {
                Ok(HbmAddr(addr))
            }
            Some(addr) => Err(custom_with_hint(
                format_args!(
                    "expected a 32-byte aligned HBM address below 2^33, found `{addr:#x}`"
                ),
                Some(format!("the default is `{:#x}`", limits::DEFAULT_HBM_ADDR)),
            )),
            None => Err(serde::de::Error::custom(format_args!(
                "expected a 32-byte aligned HBM address below 2^33 (e.g. `0x10004000`), found `{}`",
                shown(&value)
            ))),
        }
    }
}

crate::config::inline_schema!(HbmAddr, {
    schemars::json_schema!({
        "anyOf": [
            { "type": "integer", "minimum": 0 },
            { "type": "string", "description": "`0x…` hexadecimal, a decimal integer expression, or a template." }
        ]
    })
});

/// A file name without a directory (`c00_f00.bin`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct FileName(pub String);

impl<'de> Deserialize<'de> for FileName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<FileName, D::Error> {
        let text = String::deserialize(deserializer)?;
        if !text.is_empty() && !text.contains(['/', '\\']) && text != "." && text != ".." {
            return Ok(FileName(text));
        }
        let hint = text
            .rsplit_once('/')
            .filter(|(_, name)| !name.is_empty())
            .map(|(_, name)| format!("write the name alone, `{name}`: it is looked up in the `icap/` outputs of the dependencies"));
        Err(custom_with_hint(
            format_args!("expected a file name such as `c00_f00.bin`, found `{text}`"),
            hint,
        ))
    }
}

crate::config::inline_schema!(FileName, { schemars::json_schema!({ "type": "string" }) });

#[derive(Debug, Default)]
pub struct LoadKind;

impl Executor for LoadKind {
    fn check(&self, spec: &NodeSpec, _root: &Path) -> Vec<ConfigProblem> {
        check_with::<LoadConfig>(spec, |_| Vec::new())
    }

    fn config_schema(&self) -> serde_json::Value {
        cfg::schema_of::<LoadConfig>()
    }

    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        config::<LoadConfig>(spec)?;
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: false,
        })
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        match config::<LoadConfig>(spec) {
            Ok(c) => format!(
                "reconfslots -addr {} -slot {} -chunk-size {} -hbm-addr {:#x} -query-status {}",
                c.addr.0, c.slot.0, c.chunk_size.0, c.hbm_addr.0, c.partial.0
            ),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: LoadConfig = config(job.spec)?;
        let (slot, name) = (config.slot.0, &config.partial.0);
        let relative = format!("icap/{name}");
        let partial = dep_with(job, &relative)?.join(&relative);
        let report = fracflow_emulator::load_partial(
            socket(job.spec, &config.addr.0)?,
            slot,
            &partial,
            config.chunk_size.0,
            config.hbm_addr.0,
        )
        .map_err(|e| failed(job.spec, format!("loading {name} into slot {slot}: {e}")))?;
        append_log(
            job,
            &format!(
                "loaded {name} into slot {slot}: upload {:?}, reconf {:?}, query {:?}\n",
                report.upload, report.reconf, report.query
            ),
        );
        let partial_hash =
            fracflow_core::statcache::hash_file(&partial).map_err(|e| failed(job.spec, e))?;
        let record =
            serde_json::json!({"slot": slot, "partial": name, "partial_sha": partial_hash});
        std::fs::write(job.out_dir.join("loaded.json"), record.to_string())
            .map_err(|e| failed(job.spec, e))?;
        let metrics = BTreeMap::from([
            (
                "upload_ms".to_owned(),
                serde_json::json!(report.upload.as_secs_f64() * 1e3),
            ),
            (
                "reconf_ms".to_owned(),
                serde_json::json!(report.reconf.as_secs_f64() * 1e3),
            ),
        ]);
        Ok(Outcome { metrics })
    }
}
