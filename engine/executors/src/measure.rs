//! The `measure` kind: the embedded load client run in-process against the testbed's device (programmed and
//! loaded as the node requires) or against a fresh CPU baseline server, its records kept as outputs.
//!
//! Outputs: `console.log` (fperf's per-second lines, one section per client process), `seconds.jsonl`
//! (per-second records, each with its `member`), `samples.parquet` (one row per request; threads numbered
//! across members, as the artifact renumbers `hugepage_thread_*.txt`) and `summary.json` (a
//! `fracflow_record::MeasureSummary`: the point, its labels, what was programmed and loaded, and where the
//! numbers came from: testbed, host, client mode).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fracflow_client::{
    ClientConfig, ClientError, FperfConsole, JsonLines, Observer, RunReport, RunStatus, Sample,
    SecondRecord,
};
use fracflow_core::{
    ConfigProblem, Executor, Job, KindInfo, NodeError, NodeSpec, Outcome, PathSegment,
};
use fracflow_record::SAMPLES_BY_THREAD_FILE;
use fracflow_record::measure::{
    CONSOLE_FILE, EmbeddedReport, FperfReport, MeasureSource, MeasureSummary, MemberClient,
    MemberSummary, SAMPLES_FILE, SECONDS_FILE, SUMMARY_FILE,
};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::config::{self, Count, Whole};

use crate::testbed::{DeviceState, Session};

/// `measure`: runs the embedded load client in-process with fperf's flags against the testbed's device (after
/// programming `image` and loading `slots` unless the device already holds them), a fixed `addr`, or a fresh CPU
/// baseline server; keeps its fperf-format console log, per-second records, per-request samples (Parquet) and a
/// summary.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MeasureConfig {
    /// A fixed device (or server) `IP:PORT`; default: the testbed's device (an emulated testbed starts one).
    #[serde(default)]
    pub addr: Option<Target>,
    /// fperf's arguments without `-c`/`-p`, e.g. `-t rr -d {d} -n {n} -m {m} -X {m} -R 64 -Z 1 -K {slot}`; a
    /// list runs one client per entry at the same time (the artifact's `together`).
    pub fperf: FperfArgs,
    /// The artifact's `instances`: one client per slot 0..N at once, each with `clients / N` threads (`-n` and
    /// `-K` are added to `fperf`).
    #[serde(default)]
    pub instances: Option<Count>,
    /// Total client threads over the instances.
    #[serde(default)]
    pub clients: Option<Count>,
    /// The full image to program first: a file of the `image` dependency (`jtag/frac.bit`, `bypass/frac.bit`).
    #[serde(default)]
    pub image: Option<String>,
    /// Slot → partial (`c00_f00.bin`) of a `partials` dependency, loaded first unless already in that slot.
    #[serde(default)]
    pub slots: BTreeMap<String, String>,
    /// Measure a fresh CPU baseline server (`fracflow cpu-server -n CORES` on this host) instead of the device.
    #[serde(default)]
    pub server: Option<ServerConfig>,
    /// Replay a trace (written as output `trace.csv`): a file in the artifact's `processed_trace.csv` format,
    /// or a synthetic one with the Azure trace's apps and sizes where the testbed allows it.
    #[serde(default)]
    pub trace: Option<TraceConfig>,
    /// Labels for aggregation beside the sweep point, e.g. `{series: fRAC, clients: "{n}"}`.
    #[serde(default)]
    pub labels: BTreeMap<String, serde_json::Value>,
    /// Labels of each client process run at once (one entry per `fperf` string or instance), e.g. the function
    /// each one drives; aggregation then splits the point by process.
    #[serde(default)]
    pub member_labels: Vec<BTreeMap<String, serde_json::Value>>,
    /// Seconds at the start left out of the samples (warm-up).
    #[serde(default)]
    pub skip_s: Option<Whole>,
    /// Open loop instead of fperf's closed loop: `RATE[:poisson|:fixed]` requests per second.
    #[serde(default)]
    pub open_loop: Option<String>,
}

/// A fixed measurement target: an IP address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target(pub SocketAddr);

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Target, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.trim().parse().map(Target).map_err(|_| {
            config::custom_with_hint(
                format_args!("expected an address `IP:PORT`, found `{text}`"),
                Some("e.g. `127.0.0.1:7000` or `[::1]:7000`".to_owned()),
            )
        })
    }
}

crate::config::inline_schema!(Target, {
    schemars::json_schema!({ "type": "string", "description": "`IP:PORT`, e.g. `127.0.0.1:7000`." })
});

/// One fperf argument string, or several run at once.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum FperfArgs {
    One(String),
    Together(Vec<String>),
}

/// The CPU baseline server of a `measure` node.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Compute threads of the server (`fracflow cpu-server -n K`).
    pub cores: Count,
}

/// The trace a `measure` node replays (`trace_input` says which one is used, and when).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceConfig {
    /// The trace file, relative to the project root, in the artifact's `processed_trace.csv` format
    /// (`eval/azure_trace/processed_trace.csv`); an input of the node. Replayed whenever it exists.
    #[serde(default)]
    pub file: Option<String>,
    /// The points' `trace` label when the file is replayed (default `file`), e.g. `azure-2021`.
    #[serde(default)]
    pub name: Option<String>,
    /// With a file: replay its first `rows` requests (all when absent). Without it, where the testbed allows
    /// a synthetic trace (`adapt.synthetic_trace`): the synthetic trace's requests.
    #[serde(default)]
    pub rows: Option<Count>,
    /// Seed of the synthetic trace.
    #[serde(default)]
    pub seed: u64,
}

fn config(spec: &NodeSpec) -> Result<MeasureConfig, NodeError> {
    config::typed(spec)
}

/// Stands in for the device while flags are checked at load: the target is not known before the run.
const CHECK_TARGET: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 1);

impl MeasureConfig {
    /// Each client process's flags for the embedded client (without `-c`/`-p`), in member order.
    fn members(&self) -> Result<Vec<Vec<String>>, String> {
        let mut members = self.fperf_members()?;
        for args in &mut members {
            if let Some(Whole(skip)) = self.skip_s {
                args.extend(["--skip".to_owned(), skip.to_string()]);
            }
            if let Some(rate) = &self.open_loop {
                args.extend(["--open-loop".to_owned(), rate.clone()]);
            }
        }
        Ok(members)
    }

    /// Each client process's fperf flags (without `-c`/`-p`), in member order: what the real fperf takes.
    fn fperf_members(&self) -> Result<Vec<Vec<String>>, String> {
        let split = |text: &str| text.split_whitespace().map(str::to_owned).collect();
        let mut members: Vec<Vec<String>> = match &self.fperf {
            FperfArgs::One(text) => vec![split(text)],
            FperfArgs::Together(list) if list.is_empty() => {
                return Err("`fperf` lists no client".to_owned());
            }
            FperfArgs::Together(list) => list.iter().map(|t| split(t)).collect(),
        };
        if let Some(Count(instances)) = self.instances {
            let [base] = members.as_slice() else {
                return Err("`instances` takes one `fperf` string".to_owned());
            };
            let Some(Count(clients)) = self.clients else {
                return Err("`instances` needs `clients` (the total over the instances)".to_owned());
            };
            if clients % instances != 0 {
                return Err(format!(
                    "{clients} clients do not divide evenly over {instances} instances"
                ));
            }
            let per = clients / instances;
            members = (0..instances)
                .map(|slot| {
                    let mut args = base.clone();
                    args.extend(["-n".into(), per.to_string(), "-K".into(), slot.to_string()]);
                    args
                })
                .collect();
        }
        Ok(members)
    }

    /// Every problem the run would meet before its first request: the shape of `fperf` and `instances`,
    /// the slots, the member labels, and each client's flags.
    fn check(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let not_a_slot = |s: &String| {
            !s.parse::<u8>()
                .is_ok_and(|n| n < fracflow_proto::limits::SLOT_COUNT)
        };
        if let Some(trace) = &self.trace {
            problems.extend(crate::trace_input::shape_problems(trace));
        }
        for slot in self.slots.keys().filter(|s| not_a_slot(s)) {
            let mut problem = ConfigProblem::at(
                vec![
                    PathSegment::Key("slots".to_owned()),
                    PathSegment::Key(slot.clone()),
                ],
                format!("slot {slot} does not exist"),
            )
            .with_hint(Some("the device has four slots, 0–3".to_owned()));
            problem.at_key = true;
            problems.push(problem);
        }
        let members = match self.members() {
            Ok(members) => members,
            Err(why) => {
                let key = if self.instances.is_some() {
                    "instances"
                } else {
                    "fperf"
                };
                problems.push(ConfigProblem::key(key, why));
                return problems;
            }
        };
        if !self.member_labels.is_empty() && self.member_labels.len() != members.len() {
            problems.push(ConfigProblem::key(
                "member_labels",
                format!(
                    "`member_labels` has {} entries for {} client processes",
                    self.member_labels.len(),
                    members.len()
                ),
            ));
        }
        // The written flags first (at `fperf`), then what the node adds to them (at `open_loop`).
        let written = self.fperf_members().unwrap_or_default();
        let slots = fracflow_proto::limits::SLOT_COUNT;
        for (index, (args, full)) in written.iter().zip(&members).enumerate() {
            let (why, key) = match client_config(args, CHECK_TARGET, None) {
                Err(why) => (why, "fperf"),
                // The client takes any 16-bit slot; the device has four.
                Ok(client) if client.slot >= u16::from(slots) => (
                    format!("`-K {}`: the device has slots 0–{}", client.slot, slots - 1),
                    "fperf",
                ),
                Ok(_) => match client_config(full, CHECK_TARGET, None) {
                    Err(why) => (why, "open_loop"),
                    Ok(_) => continue,
                },
            };
            let mut path = vec![PathSegment::Key(key.to_owned())];
            if key == "fperf" && matches!(self.fperf, FperfArgs::Together(_)) {
                path.push(PathSegment::Index(index));
            }
            let problem = ConfigProblem::at(path, format!("fperf flags: {why}"));
            // With `instances`, every member has the same flags: once is enough.
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
        problems
    }
}

/// One client process's configuration against `target` (`-c`/`-p` prepended; `-E` when replaying).
fn client_config(
    args: &[String],
    target: SocketAddr,
    trace: Option<&PathBuf>,
) -> Result<ClientConfig, String> {
    let mut full = vec![
        "-c".to_owned(),
        target.ip().to_string(),
        "-p".to_owned(),
        target.port().to_string(),
    ];
    full.extend(args.iter().cloned());
    if let Some(trace) = trace {
        full.extend(["-E".to_owned(), trace.display().to_string()]);
    }
    ClientConfig::from_fperf_args(&full).map_err(|e| e.to_string())
}

/// Collects one client's console and per-second lines in memory.
#[derive(Default)]
struct Captured {
    console: Vec<u8>,
    seconds: Vec<u8>,
}

struct Both<'a>(FperfConsole<&'a mut Vec<u8>>, JsonLines<&'a mut Vec<u8>>);

impl Observer for Both<'_> {
    fn on_start(&mut self, config: &ClientConfig) {
        self.0.on_start(config);
        self.1.on_start(config);
    }
    fn on_second(&mut self, record: &SecondRecord) {
        self.0.on_second(record);
        self.1.on_second(record);
    }
    fn on_finish(&mut self, report: &RunReport) {
        self.0.on_finish(report);
        self.1.on_finish(report);
    }
}

fn run_client(client: &ClientConfig) -> (Captured, Result<RunReport, ClientError>) {
    let mut captured = Captured::default();
    let Captured { console, seconds } = &mut captured;
    let mut observer = Both(FperfConsole::new(console), JsonLines::new(seconds));
    let result = fracflow_client::run(client, &mut observer);
    (captured, result)
}

/// The `measure` kind, bound to the run's testbed session (None: only nodes with a fixed `addr` can run).
#[derive(Debug, Default)]
pub struct MeasureKind {
    pub session: Option<Arc<Session>>,
}

impl MeasureKind {
    fn adaptation(&self) -> Option<&crate::testbed::Adaptation> {
        self.session.as_ref().map(|s| &s.profile().adapt)
    }

    /// The testbed's name and whether it replays synthetic traces; None without a testbed (nothing is
    /// measured on a device then, and nothing refuses a synthetic trace).
    fn trace_testbed(&self) -> Option<(&str, bool)> {
        self.session
            .as_ref()
            .map(|s| (s.name(), s.profile().adapt.synthetic_trace))
    }
}

impl Executor for MeasureKind {
    fn check(&self, spec: &NodeSpec, root: &std::path::Path) -> Vec<ConfigProblem> {
        config::check_with::<MeasureConfig>(spec, |config| {
            let mut problems = config.check();
            if let Some(trace) = &config.trace {
                problems.extend(crate::trace_input::project_problems(
                    trace,
                    root,
                    self.trace_testbed(),
                ));
            }
            problems
        })
    }

    fn implied_inputs(&self, spec: &NodeSpec, root: &std::path::Path) -> Vec<String> {
        let Ok(config) = config(spec) else {
            return Vec::new();
        };
        config
            .trace
            .as_ref()
            .and_then(|trace| crate::trace_input::implied_input(trace, root))
            .into_iter()
            .collect()
    }

    fn config_schema(&self) -> serde_json::Value {
        crate::config::schema_of::<MeasureConfig>()
    }

    /// The samples' sidecar, written with `samples.parquet` for aggregation to read instead (the Parquet file
    /// stays the declared output pipelines name).
    fn implied_outputs(&self, _spec: &NodeSpec) -> Vec<String> {
        vec![SAMPLES_BY_THREAD_FILE.to_owned()]
    }

    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        let config = config(spec)?;
        if let Some(problem) = config.check().first() {
            return Err(config::node_error(spec, problem));
        }
        let tools = BTreeMap::from([(
            "client".to_owned(),
            format!("fracflow-client {}", env!("CARGO_PKG_VERSION")),
        )]);
        Ok(KindInfo {
            version: 2,
            tools,
            cacheable: true,
        })
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        let Ok(config) = config(spec) else {
            return "<invalid measure config>".to_owned();
        };
        let target = match (&config.server, &config.addr) {
            (Some(server), _) => format!("a fresh cpu-server -n {}", server.cores.0),
            (None, Some(addr)) => addr.0.to_string(),
            (None, None) => "the testbed's device".to_owned(),
        };
        match config.members() {
            Ok(members) => members
                .iter()
                .map(|args| format!("fracflow client {} → {target}", args.join(" ")))
                .collect::<Vec<_>>()
                .join(" & "),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let spec = job.spec;
        let io = |e: std::io::Error| node_error(spec, e);
        let config = config(spec)?;
        let members = config.members().map_err(|e| node_error(spec, e))?;
        let mut actions = Vec::new();
        let mut labels = config.labels.clone();
        let trace = match &config.trace {
            Some(t) => {
                let synthetic_allowed = self.trace_testbed().is_none_or(|(_, allowed)| allowed);
                let prepared =
                    crate::trace_input::prepare(t, job.root, synthetic_allowed, job.out_dir)
                        .map_err(|e| node_error(spec, e))?;
                // Which trace a point replayed is a label, so every table and figure made from it says so.
                labels.insert("trace".to_owned(), serde_json::json!(prepared.label));
                Some(prepared.path)
            }
            None => None,
        };
        // A CPU baseline gets a fresh server per point: the artifact's server leaks request buffers.
        let mut server = None;
        let target = if let Some(s) = &config.server {
            let started = self.start_server(job, s.cores.0 as usize)?;
            let addr = started.addr();
            server = Some(started);
            addr
        } else if let Some(Target(addr)) = config.addr {
            addr
        } else {
            let session = self.session.as_ref().ok_or_else(|| {
                node_error(spec, "no testbed session and no `addr`: nothing to measure")
            })?;
            session.prepare(&self.wanted_state(job, &config)?, job, &mut actions)?
        };
        let mut adapted = Vec::new();
        let runs = match self.real_fperf() {
            Some(client) => {
                let runs = self.run_real_fperf(job, &config, client, target, trace.as_ref());
                if let Some(server) = server {
                    server.stop(job)?;
                }
                runs?
            }
            None => {
                let (runs, notes) = self.run_embedded(job, &members, target, trace.as_ref());
                adapted = notes;
                if let Some(server) = server {
                    server.stop(job)?;
                }
                runs?
            }
        };
        let mut console = Vec::new();
        let mut seconds = Vec::new();
        let mut samples: Vec<Sample> = Vec::new();
        let mut requests = 0u64;
        let mut saturated = false;
        let mut member_summaries = Vec::new();
        for (member, run) in runs.into_iter().enumerate() {
            if members.len() > 1 {
                writeln!(console, "# client {member}: {}", run.command).map_err(io)?;
            }
            console.extend_from_slice(&run.console);
            for record in run.seconds {
                let mut record = record;
                if let Some(object) = record.as_object_mut() {
                    object.insert("member".to_owned(), serde_json::json!(member));
                }
                writeln!(seconds, "{record}").map_err(io)?;
            }
            let offset = samples.iter().map(|s| s.thread + 1).max().unwrap_or(0);
            samples.extend(run.samples.iter().map(|s| Sample {
                thread: s.thread + offset,
                ..*s
            }));
            requests += run.requests;
            saturated |= run.saturated;
            member_summaries.push(MemberSummary {
                labels: config.member_labels.get(member).cloned(),
                threads: [offset, offset + run.threads],
                fperf: run.command,
                requests: run.requests,
                client: run.client,
            });
        }
        std::fs::write(job.out_dir.join(CONSOLE_FILE), &console).map_err(io)?;
        std::fs::write(job.out_dir.join(SECONDS_FILE), &seconds).map_err(io)?;
        fracflow_client::write_samples_parquet(&job.out_dir.join(SAMPLES_FILE), &samples)
            .map_err(|e| node_error(spec, format!("samples: {e}")))?;
        let summary = MeasureSummary {
            version: MeasureSummary::VERSION,
            point: spec.point.to_btree_map(),
            labels,
            source: self.source(&config, target),
            device: actions,
            adapted,
            requests,
            cpu_saturated: saturated,
            members: member_summaries,
        };
        fracflow_record::write_record(&job.out_dir.join(SUMMARY_FILE), &summary)
            .map_err(|e| node_error(spec, e))?;
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(job.log)
            .map_err(io)?;
        for action in &summary.device {
            writeln!(
                log,
                "{} {} (blake3 {})",
                action.action, action.file, action.sha
            )
            .map_err(io)?;
        }
        for note in &summary.adapted {
            writeln!(log, "adapted to the testbed: {note}").map_err(io)?;
        }
        writeln!(log, "{requests} requests measured against {target}").map_err(io)?;
        let metrics = BTreeMap::from([
            ("requests".to_owned(), serde_json::json!(requests)),
            ("cpu_saturated".to_owned(), serde_json::json!(saturated)),
        ]);
        Ok(Outcome { metrics })
    }
}

/// One client process's records, whichever client made them.
struct MemberRun {
    /// Its flags, as the console header and the summary show them.
    command: String,
    console: Vec<u8>,
    /// Per-second records (JSON objects of [`SecondRecord`]).
    seconds: Vec<serde_json::Value>,
    samples: Vec<Sample>,
    threads: u32,
    requests: u64,
    saturated: bool,
    /// Which client ran it and what that client reported, for the member's summary.
    client: MemberClient,
}

impl MemberRun {
    /// The embedded client's run, or the node's error.
    fn embedded(
        spec: &NodeSpec,
        member: usize,
        args: &[String],
        client: &ClientConfig,
        captured: Captured,
        result: Result<RunReport, ClientError>,
    ) -> Result<MemberRun, NodeError> {
        let report = result.map_err(|e| match e {
            // The device may not be up yet (a link settling after programming): worth a retry.
            ClientError::Connect { .. } => {
                NodeError::transient(format!("node `{}`: client {member}: {e}", spec.id))
            }
            other => node_error(spec, format!("client {member}: {other}")),
        })?;
        if let RunStatus::Failed { reason } = &report.status {
            return Err(node_error(
                spec,
                format!(
                    "client {member}: the measurement failed: {reason} ({} requests measured before)",
                    report.measured_completions
                ),
            ));
        }
        let seconds = captured
            .seconds
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(serde_json::from_slice)
            .collect::<Result<Vec<serde_json::Value>, _>>()
            .map_err(|e| node_error(spec, e))?;
        Ok(MemberRun {
            command: args.join(" "),
            console: captured.console,
            seconds,
            threads: client.threads,
            requests: report.measured_completions,
            saturated: report.cpu_saturated,
            client: MemberClient::Embedded(EmbeddedReport {
                timeouts: report.timeouts,
                from_send: report.from_send,
                last_piece: report.last_piece,
                open_loop: report.open_loop,
                trace: report.trace,
                host_load1: report.host_load1,
                elapsed_s: report.elapsed_s,
            }),
            samples: report.samples,
        })
    }
}

/// The point's CPU baseline server: in this process, or on the testbed's server host over ssh.
enum Server {
    Local(fracflow_emulator::RunningCpuServer),
    // Boxed: the remote server carries its launch description and ssh session, five times the local one.
    Remote(Box<crate::remote::RemoteServer>),
}

impl Server {
    fn addr(&self) -> SocketAddr {
        match self {
            Server::Local(server) => server.addr(),
            Server::Remote(server) => server.addr(),
        }
    }

    /// Stops it; a remote server that died while the clients ran fails the point (its numbers would mix a
    /// live server's answers with refused connections).
    fn stop(self, job: &Job<'_>) -> Result<(), NodeError> {
        match self {
            Server::Local(server) => {
                server.stop();
                Ok(())
            }
            Server::Remote(server) => {
                let pid = server.pid();
                let stopped = server
                    .stop(job.out_dir, job.log)
                    .map_err(|e| node_error(job.spec, e))?;
                if stopped.died {
                    return Err(node_error(
                        job.spec,
                        format!(
                            "the CPU server (pid {pid}) exited during the run ({:?}); the point is not kept",
                            stopped.ending
                        ),
                    ));
                }
                Ok(())
            }
        }
    }
}

impl MeasureKind {
    /// The profile's client when it names the real fperf (real testbeds and doubles only: an emulated
    /// testbed always measures with the embedded client).
    fn real_fperf(&self) -> Option<&crate::testbed::ClientProfile> {
        let profile = self.session.as_ref()?.profile();
        profile.measures_with_fperf().then_some(&profile.client)
    }

    /// Every member with the embedded client, at once, adapted to the testbed; also the adaptation notes.
    fn run_embedded(
        &self,
        job: &Job<'_>,
        members: &[Vec<String>],
        target: SocketAddr,
        trace: Option<&PathBuf>,
    ) -> (Result<Vec<MemberRun>, NodeError>, Vec<String>) {
        let spec = job.spec;
        let mut clients = Vec::with_capacity(members.len());
        let mut adapted = Vec::new();
        for args in members {
            let mut client = match client_config(args, target, trace) {
                Ok(client) => client,
                Err(e) => return (Err(node_error(spec, e)), adapted),
            };
            if let Some(adapt) = self.adaptation() {
                let mut share = adapt.clone();
                // Members run at once: they share the thread budget.
                if let Some(limit) = adapt.client_threads() {
                    let each = (limit / members.len() as u32).max(1);
                    share.client_threads = Some(crate::testbed::ThreadLimit::Count(each));
                }
                if let Some(note) = share.apply(&mut client) {
                    adapted.push(note);
                }
            }
            clients.push(client);
        }
        let results: Vec<(Captured, Result<RunReport, ClientError>)> =
            std::thread::scope(|scope| {
                let handles: Vec<_> = clients
                    .iter()
                    .map(|client| scope.spawn(move || run_client(client)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            (
                                Captured::default(),
                                Err(ClientError::Spawn(std::io::Error::other(
                                    "a client thread panicked",
                                ))),
                            )
                        })
                    })
                    .collect()
            });
        let runs = results
            .into_iter()
            .zip(members.iter().zip(&clients))
            .enumerate()
            .map(|(member, ((captured, result), (args, client)))| {
                MemberRun::embedded(spec, member, args, client, captured, result)
            })
            .collect();
        (runs, adapted)
    }

    /// Every member with the real fperf through the adapter, at once, as the artifact runs them: its own
    /// `TPA_ID` and cores each, under the profile's sudo, with `timeout`.
    fn run_real_fperf(
        &self,
        job: &Job<'_>,
        config: &MeasureConfig,
        client: &crate::testbed::ClientProfile,
        target: SocketAddr,
        trace: Option<&PathBuf>,
    ) -> Result<Vec<MemberRun>, NodeError> {
        let spec = job.spec;
        let Some(session) = self.session.as_ref() else {
            return Err(node_error(spec, "the real fperf needs a testbed session"));
        };
        if config.open_loop.is_some() {
            return Err(node_error(
                spec,
                "`open_loop` is a mode of the embedded client; fperf has none (remove `client.fperf` from the \
                 profile to measure this node)",
            ));
        }
        session.ensure_root()?;
        let profile = session.profile();
        let host = target.ip().to_string();
        let board_nic = profile.board.as_ref().map_or("", |b| b.nic.as_str());
        let nic = crate::testbed::client_nic(board_nic, &host).map_err(|e| node_error(spec, e))?;
        let invocations = fperf_invocations(config, client, profile, &nic, target, trace)
            .map_err(|e| node_error(spec, e))?;
        let results: Vec<Result<crate::fperf::FperfResult, String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = invocations
                .iter()
                .enumerate()
                .map(|(index, inv)| {
                    let work = job.out_dir.join(format!("fperf-{index}"));
                    let log = job.out_dir.join(format!("fperf-{index}.log"));
                    scope.spawn(move || {
                        crate::fperf::run_fperf(inv, &work, &log, job.cancel)
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("an fperf thread panicked".to_owned()))
                })
                .collect()
        });
        let mut runs = Vec::with_capacity(results.len());
        for (index, (result, inv)) in results.into_iter().zip(&invocations).enumerate() {
            let result = result.map_err(|e| node_error(spec, format!("fperf {index}: {e}")))?;
            if result.status != crate::fperf::FperfStatus::Ok {
                return Err(node_error(
                    spec,
                    format!(
                        "fperf {index} {}; its log is kept at {} (stderr: {})",
                        result.status.label(),
                        result.log.display(),
                        result.stderr_log.display()
                    ),
                ));
            }
            let console = std::fs::read(&result.log)
                .map_err(|e| node_error(spec, format!("{}: {e}", result.log.display())))?;
            let seconds = result
                .seconds
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| node_error(spec, e))?;
            runs.push(MemberRun {
                command: result.command.argv().join(" "),
                console,
                seconds,
                threads: inv.threads().map_err(|e| node_error(spec, e))?,
                requests: result.samples.len() as u64,
                saturated: false,
                client: MemberClient::Fperf(FperfReport {
                    tpa_id: inv.tpa_id.clone(),
                    status: result.status.label(),
                    skipped_per_thread: result
                        .skipped
                        .iter()
                        .map(|(thread, skipped)| (thread.to_string(), *skipped))
                        .collect(),
                }),
                samples: result.samples,
            });
        }
        Ok(runs)
    }

    /// A fresh CPU server with `cores` workers: on the profile's server host when it names one.
    fn start_server(&self, job: &Job<'_>, cores: usize) -> Result<Server, NodeError> {
        let remote = self
            .session
            .as_ref()
            .and_then(|s| s.profile().server.as_ref());
        let Some(profile) = remote else {
            let listen: SocketAddr = ([127, 0, 0, 1], 0).into();
            return fracflow_emulator::CpuServer::start(fracflow_emulator::CpuServerConfig::new(
                listen, cores,
            ))
            .map(Server::Local)
            .map_err(|e| node_error(job.spec, format!("starting the CPU server: {e}")));
        };
        let connect = crate::remote::ServerLaunch::resolve(&profile.addr, profile.port)
            .map_err(|e| node_error(job.spec, e))?;
        let launch = crate::remote::ServerLaunch {
            host: profile.ssh(),
            fracflow: profile.fracflow.clone(),
            listen: connect,
            connect,
            workers: cores,
            start_cpu: Some(profile.start_cpu),
            token: crate::remote::server_token(&job.run.run_id),
            start_timeout: std::time::Duration::from_secs_f64(profile.start_timeout_s.max(0.1)),
        };
        let server = crate::remote::RemoteServer::start(&launch, job.out_dir, job.log, job.cancel)
            .map_err(|e| node_error(job.spec, e))?;
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(job.log)
            .map_err(|e| node_error(job.spec, e))?;
        for note in &server.notes {
            writeln!(log, "{note}").map_err(|e| node_error(job.spec, e))?;
        }
        Ok(Server::Remote(Box::new(server)))
    }

    /// The image and partials this node needs in the device, found among its dependencies' outputs.
    fn wanted_state(
        &self,
        job: &Job<'_>,
        config: &MeasureConfig,
    ) -> Result<DeviceState, NodeError> {
        let mut want = DeviceState::default();
        if let Some(image) = &config.image {
            want.image = Some(crate::fpga::dep_file(job, image)?);
        }
        for (slot, partial) in &config.slots {
            let slot: u8 = slot
                .parse()
                .ok()
                .filter(|s| *s < fracflow_proto::limits::SLOT_COUNT)
                .ok_or_else(|| node_error(job.spec, format!("slot `{slot}` is not 0–3")))?;
            want.slots.insert(
                slot,
                crate::fpga::dep_file(job, &format!("icap/{partial}"))?,
            );
        }
        Ok(want)
    }

    /// Where the numbers came from, for every table and figure made of them.
    fn source(&self, config: &MeasureConfig, target: SocketAddr) -> MeasureSource {
        let (testbed, kind) = match &self.session {
            Some(s) => (s.name().to_owned(), s.profile().kind.as_str()),
            None => ("none".to_owned(), "unknown"),
        };
        let remote = self
            .session
            .as_ref()
            .and_then(|s| s.profile().server.as_ref());
        let against = match (&config.server, remote) {
            (Some(_), Some(server)) => format!(
                "CPU baseline server (fracflow cpu-server on {} over ssh)",
                server.host
            ),
            (Some(_), None) => "CPU baseline server (fracflow cpu-server, this host)".to_owned(),
            (None, _) if kind == "emulated" => {
                "emulated fRAC device (software, this host)".to_owned()
            }
            (None, _) => "fRAC device".to_owned(),
        };
        let client = if self.real_fperf().is_some() {
            "real fperf (libtpa/DPDK) through the adapter"
        } else if config.open_loop.is_some() {
            "embedded client, open loop"
        } else {
            "embedded client, closed loop (fperf rr)"
        };
        MeasureSource {
            testbed,
            testbed_kind: kind.to_owned(),
            host: crate::host::name(),
            target: target.to_string(),
            against,
            client: client.to_owned(),
        }
    }
}

fn node_error(spec: &NodeSpec, what: impl std::fmt::Display) -> NodeError {
    NodeError::permanent(format!("node `{}`: {what}", spec.id))
}

/// Each member's fperf invocation as the artifact runs them: its own `TPA_ID` and cores each when several run
/// together, under the profile's sudo (docs/frac.md §6.1). The embedded client's `--skip` becomes the
/// adapter's warm-up cut.
fn fperf_invocations(
    config: &MeasureConfig,
    client: &crate::testbed::ClientProfile,
    profile: &crate::testbed::TestbedProfile,
    nic: &str,
    target: SocketAddr,
    trace: Option<&PathBuf>,
) -> Result<Vec<crate::fperf::FperfInvocation>, String> {
    let (host, port) = (target.ip().to_string(), target.port());
    let members = config.fperf_members()?;
    let together = members.len() > 1;
    let mut invocations = Vec::with_capacity(members.len());
    let mut next_cpu = client.start_cpu as usize;
    for (index, args) in members.iter().enumerate() {
        let mut inv = crate::fperf::FperfInvocation::new(
            client.tpa.clone().unwrap_or_else(|| "tpa".to_owned()),
            client.fperf.clone().unwrap_or_default(),
            nic,
            &host,
            port,
            args.clone(),
        );
        inv.sudo = crate::sudo::words(&profile.sudo);
        if together {
            inv.tpa_id = format!("client{index}");
        }
        if let Some(cfg) = &client.tpa_cfg {
            inv.tpa_cfg = cfg.clone();
        }
        inv.start_cpu = next_cpu;
        inv.trace = trace.cloned();
        inv.skip_s = config.skip_s.map_or(0, |Whole(skip)| skip);
        next_cpu += inv.threads().map_err(|e| e.to_string())? as usize;
        invocations.push(inv);
    }
    Ok(invocations)
}

/// What the device holds as `plan` walks the nodes in order: the session's state, predicted.
#[derive(Debug, Default)]
pub struct PlannedDevice {
    image: Option<String>,
    slots: BTreeMap<u8, String>,
}

/// One command of a real testbed's session, as `plan` shows it, with its estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedStep {
    pub command: String,
    pub seconds: f64,
}

/// The artifact's estimate of programming and link-up (`PROGRAM_SECONDS`), and of one slot load with its
/// check, 2 s (docs/frac.md §6.1); a server started over ssh is estimated at 15 s (`SERVER_SECONDS`).
const PROGRAM_SECONDS: f64 = 70.0;
const LOAD_SECONDS: f64 = 2.0;
const SERVER_SECONDS: f64 = 15.0;

/// The session's commands for `spec` on a real or doubles testbed, in order: programming with the exact
/// image, each slot load with its round trips and check, the CPU server over ssh, the real fperf command
/// lines. `pinned` maps each pinned file's name to its output path, sha256 and size (the `prebuilt` nodes'
/// configs); `device` advances as the session would.
pub fn planned_steps(
    spec: &NodeSpec,
    session: &Session,
    pinned: &BTreeMap<String, (String, String, u64)>,
    device: &mut PlannedDevice,
) -> Vec<PlannedStep> {
    let Ok(config) = config(spec) else {
        return Vec::new();
    };
    let profile = session.profile();
    let board = profile
        .board
        .clone()
        .unwrap_or_else(crate::testbed::default_board);
    let mut steps = Vec::new();
    let located = |name: &str| {
        let file = name.rsplit('/').next().unwrap_or(name);
        Some(match pinned.get(file) {
            Some((output, sha, size)) => {
                let path = session
                    .pinned_source(sha)
                    .map_or_else(|| output.clone(), |p| p.display().to_string());
                (path, sha.clone(), Some(*size))
            }
            // Built by this run (the vivado source): its bytes are not known before it runs.
            None => (format!("{name} (built by this run)"), name.to_owned(), None),
        })
    };
    let addr = profile.device.addr.clone().unwrap_or_default();
    let host = addr
        .rsplit_once(':')
        .map_or(addr.as_str(), |(h, _)| h)
        .to_owned();
    if let Some((path, sha, _)) = config.image.as_deref().and_then(located)
        && device.image.as_deref() != Some(sha.as_str())
    {
        device.image = Some(sha);
        device.slots.clear();
        if session.no_program() {
            steps.push(PlannedStep {
                command: format!("# --no-program: the board is taken to hold {path}"),
                seconds: 0.0,
            });
        } else {
            let root = if board.vivado_root.is_empty() {
                String::new()
            } else {
                format!("VIVADO_ROOT={} ", board.vivado_root)
            };
            let target = if board.jtag.is_empty() {
                String::new()
            } else {
                format!("HW_TARGET={} ", board.jtag)
            };
            steps.push(PlannedStep {
                command: format!(
                    "{root}{target}{} {path}  # then ping {host} every 2 s (≤ {} s), settle {} s",
                    board.programfpga, board.ready_timeout_s, board.settle_s
                ),
                seconds: PROGRAM_SECONDS + board.settle_s,
            });
        }
    }
    for (slot, name) in &config.slots {
        let (Ok(slot), Some((path, sha, size))) = (slot.parse::<u8>(), located(name)) else {
            continue;
        };
        if device.slots.get(&slot) == Some(&sha) {
            continue;
        }
        device.slots.insert(slot, sha);
        let writes = size.map_or_else(
            || "size / 256".to_owned(),
            |size| {
                (size.div_ceil(4) * 4)
                    .div_ceil(DEFAULT_CHUNK_BYTES)
                    .to_string()
            },
        );
        let unit = session
            .unit_of_partial(name)
            .map_or_else(|| "its unit".to_owned(), |u| u.to_owned());
        steps.push(PlannedStep {
            command: format!(
                "load slot {slot}: {path} ({writes} WRITE_HBM round trips of {DEFAULT_CHUNK_BYTES} B at HBM \
                 0x10004000, RECONF_ICAP, QUERY_STATUS), then check it answers as {unit}"
            ),
            seconds: LOAD_SECONDS,
        });
    }
    if let Some(server) = &config.server {
        // Only a server over ssh takes the artifact's start-up time; a local one starts in-process.
        let (command, seconds) = match &profile.server {
            Some(remote) => (
                format!(
                    "ssh -o BatchMode=yes {} {} cpu-server --listen {}:{} -n {} --token fracflow-<run>-<pid>-<n>  \
                     # waited for over TCP, stopped by its pid after the point",
                    remote.host, remote.fracflow, remote.addr, remote.port, server.cores.0
                ),
                SERVER_SECONDS,
            ),
            None => (
                format!("fracflow cpu-server -n {} on this host", server.cores.0),
                0.0,
            ),
        };
        steps.push(PlannedStep { command, seconds });
    }
    if profile.measures_with_fperf() {
        let target = match (&config.server, &profile.server) {
            (Some(_), Some(remote)) => format!("{}:{}", remote.addr, remote.port),
            _ => addr.clone(),
        };
        let nic = if board.nic.is_empty() {
            "<NIC of the route to the board>".to_owned()
        } else {
            board.nic.clone()
        };
        let parsed = target.parse::<SocketAddr>();
        let trace = config.trace.as_ref().map(|_| PathBuf::from("trace.csv"));
        match parsed.map_err(|e| e.to_string()).and_then(|target| {
            fperf_invocations(
                &config,
                &profile.client,
                profile,
                &nic,
                target,
                trace.as_ref(),
            )
        }) {
            Ok(invocations) => {
                for inv in invocations {
                    if let Ok(command) = inv.command(Path::new("<latency dir>")) {
                        steps.push(PlannedStep {
                            command: command.argv().join(" "),
                            seconds: 0.0,
                        });
                    }
                }
            }
            Err(why) => steps.push(PlannedStep {
                command: format!("# fperf: {why}"),
                seconds: 0.0,
            }),
        }
    }
    steps
}

/// `reconfslots`' chunk: 256 bytes per WRITE_HBM (docs/frac.md §3).
const DEFAULT_CHUNK_BYTES: u64 = 256;
