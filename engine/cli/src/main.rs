//! The `fracflow` command: parses arguments, wires the loader, the core and the executors together, renders
//! every error in one place and maps outcomes to the exit codes in `exit.rs`.

mod client;
mod device;
mod exit;
mod project;
mod reporter;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};
use fracflow_core::graph::NodeIndex;
use fracflow_core::plan::{Verdict, Why};
use fracflow_core::{Cache, Cancel, Engine, Graph, RunDir, RunOptions, StatCache, TestbedLock};
use fracflow_executors::Registry;
use fracflow_executors::testbed::{Session, TestbedProfile};
use fracflow_loader::{LoadOptions, Loaded};
use fracflow_record::RunStatus;

#[derive(Parser, Debug)]
#[command(
    name = "fracflow",
    version,
    about = "Rebuild, re-measure and re-plot hardware research artifacts as a content-hashed DAG"
)]
struct Cli {
    /// Project root (default: FRACFLOW_ROOT, else the nearest folder above with a `pipelines/` folder).
    #[arg(long, global = true)]
    root: Option<PathBuf>,
    /// Cache directory (default: FRACFLOW_CACHE, else <root>/.fracflow/cache).
    #[arg(long, global = true)]
    cache: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Clone)]
struct Select {
    /// A target (fig16), a pipeline name (demo), PIPELINE:TARGET, or a pipeline file.
    target: String,
    /// The reduced sweep declared under `variants: smoke`.
    #[arg(long)]
    smoke: bool,
    /// Any variant declared under `variants:`.
    #[arg(long, conflicts_with = "smoke")]
    variant: Option<String>,
    /// Keep only these swept values: KEY=V1,V2 (repeatable).
    #[arg(long = "only", value_name = "KEY=V1,V2")]
    only: Vec<String>,
    /// Override a parameter: KEY=VALUE (repeatable; VALUE is read as YAML).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Testbed profile from hw/testbeds/.
    #[arg(long, default_value = "emulated")]
    testbed: String,
    /// Run these nodes even when cached (node id or glob; repeatable).
    #[arg(long, value_name = "GLOB")]
    rerun: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Build, run and measure what TARGET needs; everything cached is reused.
    Run {
        #[command(flatten)]
        select: Select,
        /// Core budget for parallel nodes (default: the number of cores).
        #[arg(long, short = 'j')]
        jobs: Option<usize>,
        /// After a failure, go on with branches that do not depend on it.
        #[arg(long)]
        keep_going: bool,
        /// Keep writing into this run directory instead of a new one.
        #[arg(long, value_name = "RUN_DIR")]
        resume: Option<PathBuf>,
        /// Stream events as JSON lines on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Print what `run` would do and why, with estimated time and disk; touches nothing.
    Plan {
        #[command(flatten)]
        select: Select,
        #[arg(long)]
        json: bool,
    },
    /// Name the fingerprint fields of NODE that differ from its newest cached entry.
    Why {
        /// Node id, e.g. `measure[m=1024,n=4]`.
        node: String,
        /// The pipeline (or target) holding the node; default: every pipeline is searched.
        #[arg(long)]
        pipeline: Option<String>,
        #[arg(long, default_value = "emulated")]
        testbed: String,
        #[arg(long)]
        json: bool,
    },
    /// Re-draw TARGET's figures from a run's stored tables, without measuring anything.
    Plot {
        #[command(flatten)]
        select: Select,
        /// The run directory (default: results/<pipeline>/latest).
        #[arg(long, value_name = "RUN_DIR")]
        run: Option<PathBuf>,
        /// Where to write the figures (default: <RUN_DIR>/replot).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Print the DAG of TARGET.
    Graph {
        #[command(flatten)]
        select: Select,
        #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
        format: GraphFormat,
    },
    /// List the pipelines and their targets.
    Targets,
    /// The embedded load client: fperf's flags (-c -p -t rr -d -n -C -S -m -X -R -Z -K -F -L -D -E) and
    /// console output, plus --open-loop RATE[:poisson|:fixed], --skip S, --samples FILE.parquet, --json.
    #[command(disable_help_flag = true)]
    Client {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The software Top-K baseline server of Figure 16 (fperf's `-Z 0` protocol), K pinned workers.
    CpuServer(device::CpuServerArgs),
    /// The emulated fRAC device and its controller client.
    Device {
        #[command(subcommand)]
        action: device::DeviceCommand,
    },
    /// What a testbed profile needs, checked without touching the board.
    Testbed {
        #[command(subcommand)]
        action: TestbedAction,
    },
    /// Inspect or clean the cache.
    Cache {
        #[command(subcommand)]
        action: CacheAction,
    },
}

#[derive(Subcommand, Debug)]
enum CacheAction {
    /// Re-hash every blob, check every entry, name what is corrupt.
    Verify,
    /// Remove every entry and blob that none of the newest runs of each pipeline references.
    Gc {
        /// How many of each pipeline's newest runs keep their entries.
        #[arg(long, default_value_t = 5)]
        keep_runs: usize,
        /// Also keep every entry built or used within this many days, by any project sharing the cache.
        #[arg(long, default_value_t = 7.0)]
        keep_days: f64,
    },
}

#[derive(Subcommand, Debug)]
enum TestbedAction {
    /// List what is missing or unreachable (tools, NIC address, ping, sudo, ssh to the server host).
    Check {
        /// Testbed profile from hw/testbeds/.
        #[arg(long, default_value = "emulated")]
        testbed: String,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum GraphFormat {
    Dot,
    Mermaid,
}

/// An error with the exit code it maps to; everything the user sees goes through `main`'s one renderer.
#[derive(Debug)]
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Failure {
        Failure::new(exit::BAD_INPUT, format!("{error:#}"))
    }
}

fn internal(error: impl std::fmt::Display) -> Failure {
    Failure::new(exit::INTERNAL, format!("internal error: {error}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(fracflow_executors::process::TRAMPOLINE_VERB) {
        return trampoline(&args[2..]);
    }
    if let Ok(binary) = std::env::current_exe() {
        fracflow_executors::process::use_trampoline(binary);
    }
    if args.get(1).map(String::as_str) == Some(fracflow_executors::slurm::NODE_EXEC_VERB) {
        return node_exec(&args[2..]);
    }
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("{}", failure.message.trim_end());
            ExitCode::from(failure.code)
        }
    }
}

/// `fracflow __node-exec DIR`: one node inside a Slurm job (see `fracflow_executors::slurm`).
fn node_exec(args: &[String]) -> ExitCode {
    let [dir] = args else {
        eprintln!("fracflow: usage: fracflow __node-exec DIR (internal, run by Slurm jobs)");
        return ExitCode::from(exit::BAD_INPUT);
    };
    let kinds = fracflow_executors::Registry::builtin();
    match fracflow_executors::slurm::node_exec(std::path::Path::new(dir), &kinds) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("fracflow: {why}");
            ExitCode::from(1)
        }
    }
}

/// `fracflow __exec PPID PROGRAM ARGS…`: how the engine starts commands (see `fracflow_executors::trampoline`).
fn trampoline(args: &[String]) -> ExitCode {
    let (Some(parent), Some(program)) = (args.first().and_then(|p| p.parse().ok()), args.get(1))
    else {
        eprintln!("fracflow: usage: fracflow __exec PPID PROGRAM [ARGS…] (internal)");
        return ExitCode::from(exit::BAD_INPUT);
    };
    match fracflow_executors::trampoline::supervise(parent, program, &args[2..]) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("fracflow: cannot run {program}: {error}");
            // 127: the shell's code for a command that could not be run.
            ExitCode::from(127)
        }
    }
}

struct Project {
    root: PathBuf,
    cache: Cache,
    stat: StatCache,
    testbed: Option<Testbed>,
    kinds: Registry,
}

/// The testbed a command works on: its profile, and the session that drives its device during a run.
struct Testbed {
    name: String,
    profile: TestbedProfile,
    session: Arc<Session>,
}

impl Testbed {
    fn open(root: &Path, name: &str) -> Result<Testbed, Failure> {
        let profile = fracflow_executors::testbed::load_profile(root, name)
            .map_err(|e| Failure::new(exit::BAD_INPUT, e))?;
        Ok(Testbed {
            name: name.to_owned(),
            session: Arc::new(Session::new(name, profile.clone())),
            profile,
        })
    }

    /// The testbed fields that enter the keys of nodes touching the device.
    fn fingerprint_fields(&self) -> BTreeMap<String, serde_json::Value> {
        fracflow_executors::testbed::fingerprint_fields(&self.name, &self.profile)
    }

    /// The profile as used, for the manifest: kind, adaptation and the params it lowered.
    fn as_used(&self, adapted: &[fracflow_loader::Adaptation]) -> serde_json::Value {
        serde_json::json!({
            "kind": self.profile.kind.as_str(),
            "description": self.profile.description,
            "adapt": self.profile.adapt,
            "client_threads": self.profile.adapt.client_threads(),
            "lowered_params": adapted,
        })
    }

    /// What the testbed changes in a run, in words, one line each (empty when nothing).
    fn adaptation_lines(&self, adapted: &[fracflow_loader::Adaptation]) -> Vec<String> {
        let adapt = &self.profile.adapt;
        let mut lines: Vec<String> = adapted
            .iter()
            .map(|a| format!("param {}: {} → {}", a.param, a.from, a.to))
            .collect();
        if let Some(threads) = adapt.client_threads() {
            lines.push(format!(
                "clients: at most {threads} thread(s) per client process; more clients become connections on them"
            ));
        }
        if !adapt.pin {
            lines.push("client threads are not pinned".to_owned());
        }
        lines.extend(adapt.notes.iter().cloned());
        lines
    }
}

impl Project {
    /// The project; with `testbed`, ready to run on that profile (its device starts only when a node needs it).
    fn open(
        cli_root: Option<&Path>,
        cli_cache: Option<&Path>,
        testbed: Option<&str>,
    ) -> Result<Project, Failure> {
        let root = project::find_root(cli_root)?;
        let testbed = testbed.map(|name| Testbed::open(&root, name)).transpose()?;
        let kinds = match &testbed {
            Some(t) => Registry::for_testbed(Arc::clone(&t.session)),
            None => Registry::builtin(),
        };
        let cache_dir = project::cache_dir(&root, cli_cache);
        let cache = Cache::open(&cache_dir).map_err(|e| {
            Failure::new(
                exit::INTERNAL,
                format!("cache {}: {e}", cache_dir.display()),
            )
        })?;
        let stat = StatCache::load(&cache.stat_cache_file());
        Ok(Project {
            root,
            cache,
            stat,
            testbed,
            kinds,
        })
    }

    fn testbed(&self) -> Result<&Testbed, Failure> {
        self.testbed
            .as_ref()
            .ok_or_else(|| internal("this command was opened without a testbed"))
    }

    fn engine(&self) -> Engine<'_> {
        Engine {
            root: &self.root,
            cache: &self.cache,
            stat: &self.stat,
            kinds: &self.kinds,
        }
    }

    fn load(&self, select: &Select) -> Result<(Loaded, Vec<NodeIndex>), Failure> {
        let selection = project::resolve(&self.root, &select.target)?;
        let mut only = Vec::new();
        for text in &select.only {
            only.push(
                fracflow_loader::parse_only(text)
                    .map_err(|e| Failure::new(exit::BAD_INPUT, format!("--only {text}: {e}")))?,
            );
        }
        let mut set = BTreeMap::new();
        for text in &select.set {
            let (key, value) = fracflow_loader::parse_set(text)
                .map_err(|e| Failure::new(exit::BAD_INPUT, format!("--set {text}: {e}")))?;
            set.insert(key, value);
        }
        let variant = if select.smoke {
            Some("smoke".to_owned())
        } else {
            select.variant.clone()
        };
        let (caps, overrides) = self
            .testbed
            .as_ref()
            .map(|t| (t.profile.adapt.caps.clone(), t.profile.adapt.set.clone()))
            .unwrap_or_default();
        let options = LoadOptions {
            root: self.root.clone(),
            variant,
            only,
            set,
            caps,
            overrides,
        };
        let loaded = fracflow_loader::load(&selection.file, &options)
            .map_err(|diagnostics| Failure::new(exit::BAD_INPUT, diagnostics.to_string()))?;
        let targets = target_nodes(&loaded, selection.target.as_deref())?;
        Ok((loaded, targets))
    }
}

/// The node indices a target names, or every node.
fn target_nodes(loaded: &Loaded, target: Option<&str>) -> Result<Vec<NodeIndex>, Failure> {
    let graph: &Graph = &loaded.graph;
    match target {
        None => Ok(graph.topological().to_vec()),
        Some(name) => {
            let ids = loaded.pipeline.targets.get(name).ok_or_else(|| {
                Failure::new(
                    exit::BAD_INPUT,
                    format!("pipeline `{}` has no target `{name}`", loaded.pipeline.name),
                )
            })?;
            Ok(ids.iter().filter_map(|id| graph.index(id)).collect())
        }
    }
}

fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Run {
            select,
            jobs,
            keep_going,
            resume,
            json,
        } => {
            let project = Project::open(
                cli.root.as_deref(),
                cli.cache.as_deref(),
                Some(&select.testbed),
            )?;
            run(&project, &select, jobs, keep_going, resume.as_deref(), json)
        }
        Command::Plan { select, json } => {
            let project = Project::open(
                cli.root.as_deref(),
                cli.cache.as_deref(),
                Some(&select.testbed),
            )?;
            plan(&project, &select, json)
        }
        Command::Why {
            node,
            pipeline,
            testbed,
            json,
        } => {
            let project = Project::open(cli.root.as_deref(), cli.cache.as_deref(), Some(&testbed))?;
            why(&project, &node, pipeline.as_deref(), &testbed, json)
        }
        Command::Plot { select, run, out } => {
            let project = Project::open(
                cli.root.as_deref(),
                cli.cache.as_deref(),
                Some(&select.testbed),
            )?;
            replot(&project, &select, run.as_deref(), out.as_deref())
        }
        Command::Graph { select, format } => {
            let project = Project::open(
                cli.root.as_deref(),
                cli.cache.as_deref(),
                Some(&select.testbed),
            )?;
            let (loaded, targets) = project.load(&select)?;
            let closure = loaded.graph.closure(&targets);
            let text = match format {
                GraphFormat::Dot => loaded.graph.to_dot(Some(&closure)),
                GraphFormat::Mermaid => loaded.graph.to_mermaid(Some(&closure)),
            };
            print!("{text}");
            Ok(exit::OK)
        }
        Command::Targets => {
            let root = project::find_root(cli.root.as_deref())?;
            for entry in fracflow_loader::discover(&root) {
                let shown = entry
                    .path
                    .strip_prefix(&root)
                    .unwrap_or(&entry.path)
                    .display()
                    .to_string();
                println!(
                    "{:<24} {:<40} targets: {}",
                    entry.name,
                    shown,
                    entry.targets.join(", ")
                );
            }
            Ok(exit::OK)
        }
        Command::Device { action } => device::run(action),
        Command::Client { args } => client::run(args),
        Command::CpuServer(args) => device::cpu_server(args),
        Command::Testbed {
            action: TestbedAction::Check { testbed },
        } => {
            let root = project::find_root(cli.root.as_deref())?;
            let bed = Testbed::open(&root, &testbed)?;
            let findings = fracflow_executors::testbed::check(&root, &bed.name, &bed.profile);
            println!(
                "testbed `{}` ({}): {}",
                bed.name,
                bed.profile.kind.as_str(),
                bed.profile.description
            );
            for finding in &findings {
                println!(
                    "  {:<7} {}: {}",
                    if finding.ready { "ok" } else { "MISSING" },
                    finding.what,
                    finding.detail
                );
            }
            let missing = findings.iter().filter(|f| !f.ready).count();
            if missing == 0 {
                println!("ready");
                Ok(exit::OK)
            } else {
                println!("{missing} thing(s) missing or unreachable");
                Ok(exit::NODE_FAILED)
            }
        }
        Command::Cache { action } => {
            let project = Project::open(cli.root.as_deref(), cli.cache.as_deref(), None)?;
            cache(&project, action)
        }
    }
}

fn run_options(
    select: &Select,
    jobs: usize,
    keep_going: bool,
    testbed: BTreeMap<String, serde_json::Value>,
) -> RunOptions {
    RunOptions {
        jobs,
        keep_going,
        rerun: select.rerun.clone(),
        testbed,
    }
}

fn run(
    project: &Project,
    select: &Select,
    jobs: Option<usize>,
    keep_going: bool,
    resume: Option<&Path>,
    json: bool,
) -> Result<u8, Failure> {
    let (loaded, targets) = project.load(select)?;
    let testbed = project.testbed()?;
    let testbed_fields = testbed.fingerprint_fields();
    let command: Vec<String> = std::env::args().collect();
    // An emulated testbed's device belongs to each run (a fresh one on a free loopback port), so only runs of
    // one project exclude each other there; a real board is one for every project on this machine.
    let lock_name = match testbed.profile.kind {
        fracflow_executors::testbed::TestbedKind::Emulated => {
            let root =
                std::fs::canonicalize(&project.root).unwrap_or_else(|_| project.root.clone());
            let tag = blake3::hash(root.as_os_str().as_encoded_bytes()).to_hex();
            format!("{}-project-{}", select.testbed, &tag[..12])
        }
        _ => select.testbed.clone(),
    };
    let _lock = TestbedLock::acquire(&project::lock_dir(), &lock_name, &command.join(" "))
        .map_err(|e| match e {
            fracflow_core::LockError::Held { .. } => {
                Failure::new(exit::TESTBED_BUSY, e.to_string())
            }
            other => internal(other),
        })?;
    let cancel = Cancel::new();
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, cancel.flag()).map_err(internal)?;
    }
    let meta = fracflow_executors::host::run_meta(
        &project.root,
        command,
        &select.testbed,
        testbed.as_used(&loaded.adapted),
    );
    let results = project.root.join("results");
    let mut run_dir = match resume {
        Some(dir) => RunDir::resume(dir).map_err(|e| {
            Failure::new(exit::BAD_INPUT, format!("--resume {}: {e}", dir.display()))
        })?,
        None => RunDir::create(&results, &loaded.pipeline.name, &meta, &loaded.graph)
            .map_err(internal)?,
    };
    let jobs = jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let options = run_options(select, jobs, keep_going, testbed_fields);
    let mut reporter = reporter::Reporter::new(json);
    let summary = fracflow_core::scheduler::run(
        project.engine(),
        &loaded.graph,
        &targets,
        &options,
        &mut run_dir,
        &mut reporter,
        &cancel,
    )
    .map_err(internal)?;
    // The emulated device lives as long as the run.
    testbed.session.stop();
    let report = fracflow_executors::report::write_run_report(run_dir.dir(), &project.cache)
        .map_err(|e| Failure::new(exit::INTERNAL, format!("writing the run report: {e}")))?;
    let failed_expectations: Vec<_> = report.expectations.iter().filter(|e| !e.passed).collect();
    if !json {
        eprintln!(
            "{} built, {} cached, {} failed, {} skipped; results in {}",
            summary.built,
            summary.cached,
            summary.failed.len(),
            summary.skipped,
            run_dir
                .dir()
                .strip_prefix(&project.root)
                .unwrap_or(run_dir.dir())
                .display()
        );
        for (node, error) in &summary.failed {
            eprintln!(
                "error: node `{node}` failed: {error}\n  log: {}",
                run_dir.log_path(node).display()
            );
        }
        for figure in &report.figures {
            eprintln!("figure: {}", shown(&project.root, figure));
        }
        if !report.expectations.is_empty() {
            eprintln!(
                "expectations ({} testbed): {} of {} hold",
                select.testbed,
                report.expectations.len() - failed_expectations.len(),
                report.expectations.len()
            );
            for verdict in &report.expectations {
                eprintln!(
                    "  {} {}: {}",
                    if verdict.passed { "pass" } else { "FAIL" },
                    verdict.name,
                    verdict.measured
                );
            }
        }
        eprintln!("report: {}", shown(&project.root, &report.path));
    }
    Ok(match summary.status {
        RunStatus::Succeeded if !failed_expectations.is_empty() => exit::EXPECTATIONS_FAILED,
        RunStatus::Succeeded => exit::OK,
        RunStatus::Interrupted => {
            eprintln!(
                "fracflow: interrupted; completed nodes are cached, run the same command to continue"
            );
            exit::INTERRUPTED
        }
        RunStatus::Failed | RunStatus::Running => exit::NODE_FAILED,
    })
}

/// A path relative to the project root when it lies inside it.
fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// `fracflow plot`: every `plot` node TARGET needs, re-drawn from the tables its dependencies left in a run.
fn replot(
    project: &Project,
    select: &Select,
    run: Option<&Path>,
    out: Option<&Path>,
) -> Result<u8, Failure> {
    let started = std::time::Instant::now();
    let (loaded, targets) = project.load(select)?;
    let run_dir = match run {
        Some(dir) => dir.to_owned(),
        None => project
            .root
            .join("results")
            .join(&loaded.pipeline.name)
            .join("latest"),
    };
    let manifest = fracflow_core::run::read_manifest(&run_dir).map_err(|e| {
        Failure::new(
            exit::BAD_INPUT,
            format!("{e} (run the pipeline first, or name a run with --run)"),
        )
    })?;
    let out_dir = out.map_or_else(|| run_dir.join("replot"), Path::to_owned);
    std::fs::create_dir_all(&out_dir).map_err(internal)?;
    let provenance = fracflow_executors::report::provenance(&manifest, "embedded client");
    let graph = &loaded.graph;
    let mut drawn = 0;
    for index in graph.closure(&targets) {
        let spec = graph.spec(index);
        if spec.kind != "plot" {
            continue;
        }
        let dep_dirs: Vec<PathBuf> = graph
            .dependencies(index)
            .map(|d| {
                run_dir
                    .join("nodes")
                    .join(fracflow_core::run::node_dir_name(&graph.spec(d).id))
            })
            .collect();
        if let Some(missing) = dep_dirs.iter().find(|d| !d.is_dir()) {
            return Err(Failure::new(
                exit::BAD_INPUT,
                format!(
                    "node `{}`: the run {} has no outputs at {} (did that run finish?)",
                    spec.id,
                    run_dir.display(),
                    missing.display()
                ),
            ));
        }
        let files = fracflow_executors::analysis::redraw(spec, &dep_dirs, &provenance, &out_dir)
            .map_err(|e| Failure::new(exit::NODE_FAILED, format!("node `{}`: {e}", spec.id)))?;
        for file in files {
            println!("{}", shown(&project.root, &file));
        }
        drawn += 1;
    }
    eprintln!(
        "re-drew {drawn} figure(s) from run {} in {:.2}s",
        manifest.run_id,
        started.elapsed().as_secs_f64()
    );
    Ok(exit::OK)
}

fn human_seconds(seconds: f64) -> String {
    if seconds < 60.0 {
        format!("{seconds:.1}s")
    } else if seconds < 3600.0 {
        format!(
            "{}m{:02}s",
            (seconds / 60.0) as u64,
            (seconds % 60.0) as u64
        )
    } else {
        format!(
            "{}h{:02}m",
            (seconds / 3600.0) as u64,
            ((seconds % 3600.0) / 60.0) as u64
        )
    }
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn plan(project: &Project, select: &Select, json: bool) -> Result<u8, Failure> {
    let (loaded, targets) = project.load(select)?;
    let testbed = project.testbed()?;
    let options = run_options(select, 1, false, testbed.fingerprint_fields());
    let items = fracflow_core::plan::plan(project.engine(), &loaded.graph, &targets, &options);
    if json {
        for item in &items {
            println!("{}", serde_json::to_string(item).map_err(internal)?);
        }
        return Ok(exit::OK);
    }
    let to_run: Vec<_> = items.iter().filter(|i| i.will_run()).collect();
    let seconds: f64 = to_run.iter().filter_map(|i| i.estimate_seconds).sum();
    let unknown = to_run
        .iter()
        .filter(|i| i.estimate_seconds.is_none())
        .count();
    let bytes: u64 = to_run.iter().filter_map(|i| i.estimate_bytes).sum();
    println!(
        "plan: pipeline `{}`, testbed `{}` ({}): {} nodes, {} to run, {} cached",
        loaded.pipeline.name,
        select.testbed,
        testbed.profile.description,
        items.len(),
        to_run.len(),
        items.len() - to_run.len()
    );
    let adaptation = testbed.adaptation_lines(&loaded.adapted);
    if !adaptation.is_empty() {
        println!(
            "testbed `{}` adapts the paper's runs (recorded in the run manifest):",
            select.testbed
        );
        for line in &adaptation {
            println!("  - {line}");
        }
    }
    println!(
        "estimated time {}{}, estimated disk {}",
        human_seconds(seconds),
        if unknown > 0 {
            format!(" (+{unknown} nodes with no estimate)")
        } else {
            String::new()
        },
        human_bytes(bytes)
    );
    for item in &items {
        let (tag, reason) = match &item.verdict {
            Verdict::Cached { .. } => ("cached", String::new()),
            Verdict::Run { changes, .. } if changes.is_empty() => {
                ("run", "no cached entry".to_owned())
            }
            Verdict::Run { changes, .. } => (
                "run",
                format!(
                    "changed: {}",
                    changes
                        .iter()
                        .map(|c| c.field.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            Verdict::Forced { .. } => ("run", "forced by --rerun".to_owned()),
            Verdict::Always { .. } => ("run", "effect: runs before what needs it".to_owned()),
            Verdict::NotNeeded { .. } => ("skip", "effect: nothing that needs it runs".to_owned()),
            Verdict::AfterUpstream { upstream } => {
                ("run?", format!("after upstream: {}", upstream.join(", ")))
            }
            Verdict::Error { message } => ("error", message.clone()),
        };
        let estimate = match item.estimate_seconds {
            Some(s) => format!("{} ({})", human_seconds(s), item.estimate_source),
            None => "unknown".to_owned(),
        };
        if tag == "cached" {
            println!("  cached  {}", item.node);
        } else {
            println!(
                "  {tag:<6}  {} [{}] est {estimate}: {reason}",
                item.node, item.kind
            );
            println!("          $ {}", item.command);
        }
    }
    Ok(exit::OK)
}

fn why(
    project: &Project,
    node: &str,
    pipeline: Option<&str>,
    testbed: &str,
    json: bool,
) -> Result<u8, Failure> {
    let candidates: Vec<String> = match pipeline {
        Some(name) => vec![name.to_owned()],
        None => fracflow_loader::discover(&project.root)
            .into_iter()
            .map(|e| e.name)
            .collect(),
    };
    let testbed_fields = project.testbed()?.fingerprint_fields();
    for name in candidates {
        let select = Select {
            target: name,
            smoke: false,
            variant: None,
            only: Vec::new(),
            set: Vec::new(),
            testbed: testbed.to_owned(),
            rerun: Vec::new(),
        };
        let Ok((loaded, _)) = project.load(&select) else {
            continue;
        };
        let Some(index) = loaded.graph.index(node) else {
            continue;
        };
        let options = run_options(&select, 1, false, testbed_fields.clone());
        let answer = fracflow_core::plan::why(project.engine(), &loaded.graph, index, &options);
        if json {
            println!("{}", serde_json::to_string(&answer).map_err(internal)?);
            return Ok(exit::OK);
        }
        match answer {
            Why::UpToDate { key } => println!("{node}: up to date (key {})", &key[..16]),
            Why::NeverBuilt => println!("{node}: never built: no cached entry for this node"),
            Why::UpstreamPending { upstream } => {
                println!(
                    "{node}: its key depends on nodes that have no cached result yet: {}",
                    upstream.join(", ")
                );
            }
            Why::Error { message } => return Err(Failure::new(exit::BAD_INPUT, message)),
            Why::Changed {
                old_key,
                new_key,
                changes,
            } => {
                println!(
                    "{node}: key {} -> {}; changed since the newest cached entry:",
                    &old_key[..16],
                    &new_key[..16]
                );
                for change in changes {
                    println!(
                        "  {}: {} -> {}",
                        change.field,
                        change.old.as_deref().unwrap_or("(absent)"),
                        change.new.as_deref().unwrap_or("(absent)")
                    );
                }
            }
        }
        return Ok(exit::OK);
    }
    Err(Failure::new(
        exit::BAD_INPUT,
        format!("no pipeline has a node `{node}`"),
    ))
}

fn cache(project: &Project, action: CacheAction) -> Result<u8, Failure> {
    match action {
        CacheAction::Verify => {
            let report = project.cache.verify().map_err(internal)?;
            for corruption in &report.corrupt {
                println!(
                    "corrupt: {}: {}",
                    corruption.path.display(),
                    corruption.reason
                );
            }
            println!(
                "cache {}: {} entries, {} blobs, {} corrupt",
                project.cache.root().display(),
                report.entries,
                report.blobs,
                report.corrupt.len()
            );
            Ok(if report.corrupt.is_empty() {
                exit::OK
            } else {
                exit::CACHE_CORRUPT
            })
        }
        CacheAction::Gc {
            keep_runs,
            keep_days,
        } => {
            let keep = recent_keys(&project.root.join("results"), keep_runs).map_err(internal)?;
            if !(keep_days >= 0.0 && keep_days.is_finite()) {
                return Err(Failure::new(
                    exit::BAD_INPUT,
                    format!("--keep-days {keep_days}: a number of days >= 0"),
                ));
            }
            let used_within = std::time::Duration::from_secs_f64(keep_days * 86_400.0);
            let report = project.cache.gc(&keep, used_within).map_err(|e| {
                if e.kind() == std::io::ErrorKind::ResourceBusy {
                    // Another engine is running on this cache: deleting now could take blobs it is linking.
                    Failure::new(exit::TESTBED_BUSY, format!("cache gc: {e}"))
                } else {
                    internal(e)
                }
            })?;
            println!(
                "removed {} entries, {} blobs ({}) and {} stale key locks; kept what the newest {keep_runs} runs of \
                 each pipeline reference and what any project used within {keep_days} days",
                report.entries_removed,
                report.blobs_removed,
                human_bytes(report.bytes_freed),
                report.locks_removed
            );
            Ok(exit::OK)
        }
    }
}

/// Keys referenced by the newest `per_pipeline` runs of every pipeline under `results/`.
fn recent_keys(results: &Path, per_pipeline: usize) -> anyhow::Result<HashSet<String>> {
    let mut keep = HashSet::new();
    let Ok(pipelines) = std::fs::read_dir(results) else {
        return Ok(keep);
    };
    for pipeline in pipelines {
        let dir = pipeline?.path();
        if !dir.is_dir() {
            continue;
        }
        let mut runs: Vec<PathBuf> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("manifest.json").is_file() && !p.is_symlink())
            .collect();
        runs.sort();
        for run in runs.iter().rev().take(per_pipeline) {
            let manifest = fracflow_core::run::read_manifest(run)?;
            keep.extend(manifest.nodes.into_values().filter_map(|r| r.key));
        }
    }
    Ok(keep)
}
