//! The `measure` kind: the embedded load client run in-process against a device, its records kept as outputs.
//!
//! Outputs: `console.log` (fperf's per-second lines), `seconds.jsonl` (per-second p50/p99), `samples.parquet`
//! (one row per request) and `summary.json` (both latency definitions, counts, and where the numbers came
//! from: host, device address, client mode).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};

use fracflow_client::{
    ClientConfig, ClientError, FperfConsole, JsonLines, Observer, RunReport, RunStatus,
    SecondRecord,
};
use fracflow_core::{Executor, Job, KindInfo, NodeError, NodeSpec, Outcome};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct MeasureConfig {
    addr: String,
    fperf: String,
    skip_s: Option<u32>,
    open_loop: Option<String>,
}

fn config(spec: &NodeSpec) -> Result<MeasureConfig, NodeError> {
    let value =
        serde_json::to_value(&spec.config).map_err(|e| NodeError::permanent(e.to_string()))?;
    serde_json::from_value(value)
        .map_err(|e| NodeError::permanent(format!("node `{}` (at {}): {e}", spec.id, spec.origin)))
}

/// The full fperf-style argument list: `-c HOST -p PORT`, the node's flags, then our own options.
fn arguments(config: &MeasureConfig) -> Result<Vec<String>, String> {
    let (host, port) = config
        .addr
        .rsplit_once(':')
        .ok_or_else(|| format!("`{}` is not HOST:PORT", config.addr))?;
    let mut args = vec![
        "-c".to_owned(),
        host.to_owned(),
        "-p".to_owned(),
        port.to_owned(),
    ];
    args.extend(config.fperf.split_whitespace().map(str::to_owned));
    if let Some(skip) = config.skip_s {
        args.extend(["--skip".to_owned(), skip.to_string()]);
    }
    if let Some(rate) = &config.open_loop {
        args.extend(["--open-loop".to_owned(), rate.clone()]);
    }
    Ok(args)
}

/// Feeds the fperf console and the JSON lines at once.
struct Both<A, B>(A, B);

impl<A: Observer, B: Observer> Observer for Both<A, B> {
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

#[derive(Debug, Default)]
pub struct MeasureKind;

impl Executor for MeasureKind {
    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        let config = config(spec)?;
        let args = arguments(&config).map_err(NodeError::permanent)?;
        // Bad flags are a load-time problem: report them before anything runs.
        ClientConfig::from_fperf_args(&args)
            .map_err(|e| NodeError::permanent(format!("node `{}`: {e}", spec.id)))?;
        let tools = BTreeMap::from([(
            "client".to_owned(),
            format!("fracflow-client {}", env!("CARGO_PKG_VERSION")),
        )]);
        Ok(KindInfo {
            version: 1,
            tools,
            cacheable: true,
        })
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        match config(spec)
            .map_err(|e| e.to_string())
            .and_then(|c| arguments(&c))
        {
            Ok(args) => format!("fracflow client {}", args.join(" ")),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let spec = job.spec;
        let io = |e: std::io::Error| NodeError::permanent(format!("node `{}`: {e}", spec.id));
        let config = config(spec)?;
        let args = arguments(&config).map_err(NodeError::permanent)?;
        let client = ClientConfig::from_fperf_args(&args)
            .map_err(|e| NodeError::permanent(format!("node `{}`: {e}", spec.id)))?;
        let console = BufWriter::new(File::create(job.out_dir.join("console.log")).map_err(io)?);
        let seconds = BufWriter::new(File::create(job.out_dir.join("seconds.jsonl")).map_err(io)?);
        let mut observer = Both(FperfConsole::new(console), JsonLines::new(seconds));
        let report = fracflow_client::run(&client, &mut observer).map_err(|e| match e {
            // The device may not be up yet (a link settling after programming): worth a retry.
            ClientError::Connect { .. } => NodeError::transient(format!("node `{}`: {e}", spec.id)),
            other => NodeError::permanent(format!("node `{}`: {other}", spec.id)),
        })?;
        let Both(console, seconds) = observer;
        console.into_inner().flush().map_err(io)?;
        seconds.into_inner().flush().map_err(io)?;
        if let RunStatus::Failed { reason } = &report.status {
            return Err(NodeError::permanent(format!(
                "node `{}`: the measurement failed: {reason} ({} requests measured before)",
                spec.id, report.measured_completions
            )));
        }
        fracflow_client::write_samples_parquet(
            &job.out_dir.join("samples.parquet"),
            &report.samples,
        )
        .map_err(|e| NodeError::permanent(format!("node `{}`: samples: {e}", spec.id)))?;
        let summary = serde_json::json!({
            "source": {
                "host": crate::host::name(),
                "device": config.addr,
                "client": if config.open_loop.is_some() { "embedded, open loop" } else { "embedded, closed loop (fperf rr)" },
                "latency_on_console": format!("{:?}", report.latency),
            },
            "requests": report.measured_completions,
            "timeouts": report.timeouts,
            "from_send": report.from_send,
            "last_piece": report.last_piece,
            "open_loop": report.open_loop,
            "cpu_saturated": report.cpu_saturated,
            "host_load1": report.host_load1,
            "elapsed_s": report.elapsed_s,
        });
        std::fs::write(job.out_dir.join("summary.json"), summary.to_string()).map_err(io)?;
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(job.log)
            .map_err(io)?;
        writeln!(
            log,
            "fracflow client {}: {} requests",
            args.join(" "),
            report.measured_completions
        )
        .map_err(io)?;
        let metrics = BTreeMap::from([
            (
                "requests".to_owned(),
                serde_json::json!(report.measured_completions),
            ),
            (
                "cpu_saturated".to_owned(),
                serde_json::json!(report.cpu_saturated),
            ),
        ]);
        Ok(Outcome { metrics })
    }
}
