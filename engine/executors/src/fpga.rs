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

use fracflow_core::{Executor, Job, KindInfo, NodeError, NodeSpec, Outcome};
use fracflow_emulator::build as emulated;
use fracflow_emulator::design::DESIGN_FILE;
use fracflow_emulator::{CompiledUnit, DesignManifest};
use serde::Deserialize;

use crate::kind_config as config;
use crate::process::{self, Ending, Grace, Spawn};

fn failed(spec: &NodeSpec, what: impl std::fmt::Display) -> NodeError {
    NodeError::permanent(format!("node `{}`: {what}", spec.id))
}

fn append_log(job: &Job<'_>, text: &str) {
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
fn dep_with<'a>(job: &'a Job<'_>, file: &str) -> Result<&'a Path, NodeError> {
    let found: Vec<&PathBuf> = job
        .inputs
        .values()
        .filter(|dir| dir.join(file).is_file())
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
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
        .values()
        .filter(|dir| dir.join("unit.json").is_file())
        .map(|dir| CompiledUnit::load(dir).map_err(|e| failed(job.spec, e)))
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

#[derive(Debug, Deserialize)]
struct HlsConfig {
    unit: String,
    compiler: Option<String>,
    #[serde(default)]
    tool: BuildTool,
    part: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum BuildTool {
    #[default]
    Emulated,
    VitisHls,
    Spinhdl,
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
    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        let config: HlsConfig = config(spec)?;
        let tools = match config.tool {
            BuildTool::VitisHls => BTreeMap::from([(
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
            Ok(c) if c.tool == BuildTool::VitisHls => format!("vitis_hls -f hls.tcl  # {}", c.unit),
            Ok(c) => format!(
                "{} {} hw/accelerators/{}/*.cpp -o plugin.so",
                compiler(&c),
                emulated::COMPILE_FLAGS.join(" "),
                c.unit
            ),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: HlsConfig = config(job.spec)?;
        let unit_dir = job.root.join("hw/accelerators").join(&config.unit);
        if config.tool == BuildTool::VitisHls {
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
    let source = unit_dir.join(format!("{}.cpp", config.unit));
    format!(
        "open_project -reset {unit}_prj\nset_top frac_kernel_run\nadd_files {source} -cflags \"-I{include}\"\nopen_solution -reset solution1 -flow_target vivado\nset_part {part}\ncreate_clock -period 4\ncsynth_design\nexport_design -format ip_catalog -output ip\nexit\n",
        unit = config.unit,
        source = source.display(),
        include = unit_dir.parent().unwrap_or(unit_dir).display(),
    )
}

// -------------------------------------------------------------------------------------------------- weave

#[derive(Debug, Deserialize)]
struct WeaveConfig {
    #[serde(default = "default_shell")]
    shell: String,
    #[serde(default = "default_units")]
    units: String,
    #[serde(default)]
    tool: BuildTool,
}

fn default_shell() -> String {
    "hw/shell.yaml".to_owned()
}

fn default_units() -> String {
    "hw/accelerators".to_owned()
}

#[derive(Debug, Default)]
pub struct WeaveKind {
    versions: ToolVersions,
}

impl Executor for WeaveKind {
    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        let config: WeaveConfig = config(spec)?;
        let tools = match config.tool {
            BuildTool::Spinhdl => BTreeMap::from([(
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
            Ok(c) if c.tool == BuildTool::Spinhdl => {
                "spinhdl --parallel N weave spinhdl.yaml --units spin.yaml --static static.yaml"
                    .to_owned()
            }
            Ok(c) => format!("weave {} + {}/*/unit.yaml -> design.json", c.shell, c.units),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: WeaveConfig = config(job.spec)?;
        if config.tool == BuildTool::Spinhdl {
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

#[derive(Debug, Deserialize)]
struct PartialsConfig {
    unit: String,
    #[serde(default)]
    tool: BuildTool,
}

#[derive(Debug, Default)]
pub struct PartialsKind;

impl Executor for PartialsKind {
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
            Ok(c) if c.tool == BuildTool::Spinhdl => format!(
                "spinhdl spin {} --shell build/frac/abstract_shell/ab_sh_cNN_bbx_inst.dcp --cell CNN --out-dir . (each cell)",
                c.unit
            ),
            Ok(c) => format!(
                "partials of {} for every cell that may hold it -> icap/cXX_fYY.bin",
                c.unit
            ),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: PartialsConfig = config(job.spec)?;
        if config.tool == BuildTool::Spinhdl {
            // The real flow has no design.json: the cells come from the shell's declarations.
            let design = emulated::weave(
                &job.root.join(default_shell()),
                &job.root.join(default_units()),
            )
            .map_err(|e| failed(job.spec, e))?;
            for cell in design
                .cells
                .iter()
                .filter(|c| c.rms.iter().any(|rm| rm.unit == config.unit))
            {
                let shell = format!(
                    "build/frac/abstract_shell/ab_sh_c{:02}_bbx_inst.dcp",
                    cell.slot
                );
                let args: Vec<String> = vec![
                    "spin".into(),
                    config.unit.clone(),
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
            .find(|u| u.spec.name == config.unit)
            .ok_or_else(|| {
                failed(
                    job.spec,
                    format!("no `hls` dependency compiled `{}`", config.unit),
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

#[derive(Debug, Deserialize)]
struct ImageConfig {
    #[serde(default)]
    bypass: bool,
}

#[derive(Debug, Default)]
pub struct ImageKind;

impl Executor for ImageKind {
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

#[derive(Debug, Deserialize)]
struct ProgramConfig {
    image: Option<String>,
    addr: String,
    #[serde(default)]
    tool: ProgramTool,
    /// Real flow: the programming script, its environment and the board's readiness checks.
    #[serde(default = "default_programfpga")]
    programfpga: String,
    vivado_root: Option<String>,
    hw_target: Option<String>,
    #[serde(default = "default_settle")]
    settle_s: f64,
    #[serde(default = "default_ready_timeout")]
    ready_timeout_s: f64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ProgramTool {
    #[default]
    Emulated,
    Vivado,
}

fn default_programfpga() -> String {
    "scripts/programfpga.sh".to_owned()
}
fn default_settle() -> f64 {
    10.0
}
fn default_ready_timeout() -> f64 {
    90.0
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
        .values()
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
                c.addr,
                c.settle_s
            ),
            Ok(c) => format!(
                "program the emulated device at {} (management channel)",
                c.addr
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
            let report = fracflow_emulator::program(socket(job.spec, &config.addr)?, &image)
                .map_err(|e| {
                    NodeError::transient(format!(
                        "node `{}`: device {}: {e}",
                        job.spec.id, config.addr
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
        let record = serde_json::json!({"image_sha": image_hash, "addr": config.addr});
        std::fs::write(job.out_dir.join("programmed.json"), record.to_string())
            .map_err(|e| failed(job.spec, e))?;
        Ok(Outcome::default())
    }
}

/// `programfpga.sh IMAGE` with `VIVADO_ROOT` and `HW_TARGET`, then ping the board until it answers
/// (every 2 s up to the ready timeout), then let the link settle.
fn program_real(job: &Job<'_>, config: &ProgramConfig, image: &Path) -> Result<(), NodeError> {
    let host = config
        .addr
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(&config.addr)
        .to_owned();
    program_board(
        job,
        &BoardProgramming {
            script: job.root.join(&config.programfpga),
            vivado_root: config.vivado_root.clone().unwrap_or_default(),
            hw_target: config.hw_target.clone().unwrap_or_default(),
            host,
            nic: None,
            ready_timeout_s: config.ready_timeout_s,
            settle_s: config.settle_s,
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

#[derive(Debug, Deserialize)]
struct LoadConfig {
    slot: u8,
    partial: String,
    addr: String,
    #[serde(default = "default_chunk")]
    chunk_size: usize,
    #[serde(default = "default_hbm")]
    hbm_addr: serde_json::Value,
}

fn default_chunk() -> usize {
    256
}
fn default_hbm() -> serde_json::Value {
    serde_json::json!("0x10004000")
}

fn hbm_address(spec: &NodeSpec, value: &serde_json::Value) -> Result<u64, NodeError> {
    match value {
        serde_json::Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| failed(spec, format!("hbm_addr {n} is not a whole number"))),
        serde_json::Value::String(text) => {
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.map_err(|e| failed(spec, format!("hbm_addr `{text}`: {e}")))
        }
        other => Err(failed(spec, format!("hbm_addr {other} is not a number"))),
    }
}

#[derive(Debug, Default)]
pub struct LoadKind;

impl Executor for LoadKind {
    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        let config: LoadConfig = config(spec)?;
        hbm_address(spec, &config.hbm_addr)?;
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: false,
        })
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        match config::<LoadConfig>(spec) {
            Ok(c) => format!(
                "reconfslots -addr {} -slot {} -chunk-size {} -hbm-addr {} -query-status {}",
                c.addr,
                c.slot,
                c.chunk_size,
                c.hbm_addr
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| c.hbm_addr.to_string()),
                c.partial
            ),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: LoadConfig = config(job.spec)?;
        let relative = format!("icap/{}", config.partial);
        let partial = dep_with(job, &relative)?.join(&relative);
        let report = fracflow_emulator::load_partial(
            socket(job.spec, &config.addr)?,
            config.slot,
            &partial,
            config.chunk_size,
            hbm_address(job.spec, &config.hbm_addr)?,
        )
        .map_err(|e| {
            failed(
                job.spec,
                format!("loading {} into slot {}: {e}", config.partial, config.slot),
            )
        })?;
        append_log(
            job,
            &format!(
                "loaded {} into slot {}: upload {:?}, reconf {:?}, query {:?}\n",
                config.partial, config.slot, report.upload, report.reconf, report.query
            ),
        );
        let partial_hash =
            fracflow_core::statcache::hash_file(&partial).map_err(|e| failed(job.spec, e))?;
        let record = serde_json::json!({"slot": config.slot, "partial": config.partial, "partial_sha": partial_hash});
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
