//! The `measure` kind: the embedded load client run in-process against the testbed's device (programmed and
//! loaded as the node requires) or against a fresh CPU baseline server, its records kept as outputs.
//!
//! Outputs: `console.log` (fperf's per-second lines, one section per client process), `seconds.jsonl`
//! (per-second records, each with its `member`), `samples.parquet` (one row per request; threads numbered
//! across members, as the artifact renumbers `hugepage_thread_*.txt`) and `summary.json` (the point, its
//! labels, what was programmed and loaded, and where the numbers came from: testbed, host, client mode).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use fracflow_client::{
    ClientConfig, ClientError, FperfConsole, JsonLines, Observer, RunReport, RunStatus, Sample,
    SecondRecord,
};
use fracflow_core::{Executor, Job, KindInfo, NodeError, NodeSpec, Outcome};
use serde::Deserialize;

use crate::testbed::{DeviceState, Session};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MeasureConfig {
    /// A fixed `HOST:PORT`; default: the testbed's device.
    addr: Option<String>,
    fperf: FperfArgs,
    /// The artifact's `instances`: one client per slot 0..k, each with `clients / k` threads.
    instances: Option<u32>,
    clients: Option<u32>,
    /// The full image to program first, a file of the `image` dependency (`jtag/frac.bit`).
    image: Option<String>,
    /// Slot → partial (`c00_f00.bin`) from a `partials` dependency, loaded first unless already there.
    #[serde(default)]
    slots: BTreeMap<String, String>,
    /// Measure a fresh CPU baseline server instead of the device.
    server: Option<ServerConfig>,
    /// A synthetic trace replayed with `-E` (written as `trace.csv`).
    trace: Option<TraceConfig>,
    /// Labels for aggregation (`series: fRAC`), beside the sweep point.
    #[serde(default)]
    labels: BTreeMap<String, serde_json::Value>,
    /// Labels of each client process when several run at once (one entry per `fperf` string or instance).
    #[serde(default)]
    member_labels: Vec<BTreeMap<String, serde_json::Value>>,
    skip_s: Option<u32>,
    open_loop: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum FperfArgs {
    One(String),
    Together(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerConfig {
    /// Compute threads of the server (`fracflow cpu-server -n K`).
    cores: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceConfig {
    rows: usize,
    #[serde(default)]
    seed: u64,
}

fn config(spec: &NodeSpec) -> Result<MeasureConfig, NodeError> {
    crate::kind_config(spec)
}

impl MeasureConfig {
    /// Each client process's fperf flags (without `-c`/`-p`), in member order.
    fn members(&self) -> Result<Vec<Vec<String>>, String> {
        let split = |text: &str| text.split_whitespace().map(str::to_owned).collect();
        let mut members: Vec<Vec<String>> = match &self.fperf {
            FperfArgs::One(text) => vec![split(text)],
            FperfArgs::Together(list) if list.is_empty() => {
                return Err("`fperf` lists no client".to_owned());
            }
            FperfArgs::Together(list) => list.iter().map(|t| split(t)).collect(),
        };
        if let Some(instances) = self.instances {
            let [base] = members.as_slice() else {
                return Err("`instances` takes one `fperf` string".to_owned());
            };
            let clients = self.clients.ok_or("`instances` needs `clients`")?;
            if instances == 0 || clients % instances != 0 {
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
        for args in &mut members {
            if let Some(skip) = self.skip_s {
                args.extend(["--skip".to_owned(), skip.to_string()]);
            }
            if let Some(rate) = &self.open_loop {
                args.extend(["--open-loop".to_owned(), rate.clone()]);
            }
        }
        Ok(members)
    }
}

/// One client process's configuration against `addr` (`-c`/`-p` prepended; `-E` when replaying).
fn client_config(
    args: &[String],
    addr: &str,
    trace: Option<&PathBuf>,
) -> Result<ClientConfig, String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("`{addr}` is not HOST:PORT"))?;
    let mut full = vec![
        "-c".to_owned(),
        host.to_owned(),
        "-p".to_owned(),
        port.to_owned(),
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
}

impl Executor for MeasureKind {
    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        let config = config(spec)?;
        let members = config.members().map_err(|e| node_error(spec, e))?;
        if !config.member_labels.is_empty() && config.member_labels.len() != members.len() {
            return Err(node_error(
                spec,
                format!(
                    "`member_labels` has {} entries for {} client processes",
                    config.member_labels.len(),
                    members.len()
                ),
            ));
        }
        // Bad flags are a load-time problem: report them before anything runs.
        for args in &members {
            client_config(args, "127.0.0.1:1", None).map_err(|e| node_error(spec, e))?;
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
            (Some(server), _) => format!("a fresh cpu-server -n {}", server.cores),
            (None, Some(addr)) => addr.clone(),
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
        let trace = match &config.trace {
            Some(t) => {
                let path = job.out_dir.join("trace.csv");
                std::fs::write(&path, fracflow_client::synthetic_trace(t.rows, t.seed))
                    .map_err(io)?;
                Some(path)
            }
            None => None,
        };
        // A CPU baseline gets a fresh server per point: the artifact's server leaks request buffers.
        let mut server = None;
        let target = if let Some(s) = &config.server {
            let listen: SocketAddr = ([127, 0, 0, 1], 0).into();
            let started = fracflow_emulator::CpuServer::start(
                fracflow_emulator::CpuServerConfig::new(listen, s.cores),
            )
            .map_err(|e| node_error(spec, format!("starting the CPU server: {e}")))?;
            let addr = started.addr().to_string();
            server = Some(started);
            addr
        } else if let Some(addr) = &config.addr {
            addr.clone()
        } else {
            let session = self.session.as_ref().ok_or_else(|| {
                node_error(spec, "no testbed session and no `addr`: nothing to measure")
            })?;
            session
                .prepare(&self.wanted_state(job, &config)?, job, &mut actions)?
                .to_string()
        };
        let mut clients = Vec::with_capacity(members.len());
        let mut adapted = Vec::new();
        for args in &members {
            let mut client =
                client_config(args, &target, trace.as_ref()).map_err(|e| node_error(spec, e))?;
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
        if let Some(server) = server {
            server.stop();
        }
        let mut console = Vec::new();
        let mut seconds = Vec::new();
        let mut samples: Vec<Sample> = Vec::new();
        let mut requests = 0u64;
        let mut saturated = false;
        let mut member_summaries = Vec::new();
        for (member, ((captured, result), args)) in results.into_iter().zip(&members).enumerate() {
            if members.len() > 1 {
                writeln!(console, "# client {member}: {}", args.join(" ")).map_err(io)?;
            }
            console.extend_from_slice(&captured.console);
            for line in captured
                .seconds
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
            {
                let mut record: serde_json::Value =
                    serde_json::from_slice(line).map_err(|e| node_error(spec, e))?;
                if let Some(object) = record.as_object_mut() {
                    object.insert("member".to_owned(), serde_json::json!(member));
                }
                writeln!(seconds, "{record}").map_err(io)?;
            }
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
            let offset = samples.iter().map(|s| s.thread + 1).max().unwrap_or(0);
            samples.extend(report.samples.iter().map(|s| Sample {
                thread: s.thread + offset,
                ..*s
            }));
            let threads_end = offset + clients[member].threads;
            requests += report.measured_completions;
            saturated |= report.cpu_saturated;
            member_summaries.push(serde_json::json!({
                "labels": config.member_labels.get(member),
                "threads": [offset, threads_end],
                "fperf": args.join(" "),
                "requests": report.measured_completions,
                "timeouts": report.timeouts,
                "from_send": report.from_send,
                "last_piece": report.last_piece,
                "open_loop": report.open_loop,
                "trace": report.trace,
                "host_load1": report.host_load1,
                "elapsed_s": report.elapsed_s,
            }));
        }
        std::fs::write(job.out_dir.join("console.log"), &console).map_err(io)?;
        std::fs::write(job.out_dir.join("seconds.jsonl"), &seconds).map_err(io)?;
        fracflow_client::write_samples_parquet(&job.out_dir.join("samples.parquet"), &samples)
            .map_err(|e| node_error(spec, format!("samples: {e}")))?;
        let summary = serde_json::json!({
            "point": spec.point,
            "labels": config.labels,
            "source": self.source(&config, &target),
            "device": actions,
            "adapted": adapted,
            "requests": requests,
            "cpu_saturated": saturated,
            "members": member_summaries,
        });
        std::fs::write(job.out_dir.join("summary.json"), summary.to_string()).map_err(io)?;
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(job.log)
            .map_err(io)?;
        for action in &actions {
            writeln!(
                log,
                "{} {} (blake3 {})",
                action.action, action.file, action.sha
            )
            .map_err(io)?;
        }
        for note in &adapted {
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

impl MeasureKind {
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
                .filter(|s| *s < 4)
                .ok_or_else(|| node_error(job.spec, format!("slot `{slot}` is not 0–3")))?;
            want.slots.insert(
                slot,
                crate::fpga::dep_file(job, &format!("icap/{partial}"))?,
            );
        }
        Ok(want)
    }

    /// Where the numbers came from, for every table and figure made of them.
    fn source(&self, config: &MeasureConfig, target: &str) -> serde_json::Value {
        let (testbed, kind) = match &self.session {
            Some(s) => (s.name().to_owned(), s.profile().kind.as_str()),
            None => ("none".to_owned(), "unknown"),
        };
        let against = if config.server.is_some() {
            "CPU baseline server (fracflow cpu-server, this host)"
        } else if kind == "emulated" {
            "emulated fRAC device (software, this host)"
        } else {
            "fRAC device"
        };
        serde_json::json!({
            "testbed": testbed,
            "testbed_kind": kind,
            "host": crate::host::name(),
            "target": target,
            "against": against,
            "client": if config.open_loop.is_some() { "embedded client, open loop" } else { "embedded client, closed loop (fperf rr)" },
        })
    }
}

fn node_error(spec: &NodeSpec, what: impl std::fmt::Display) -> NodeError {
    NodeError::permanent(format!("node `{}`: {what}", spec.id))
}
