//! `fracflow client …`: the embedded load client with fperf's flags and console output.

use std::path::PathBuf;

use fracflow_client::{ClientConfig, FperfConsole, JsonLines, RunStatus};

use crate::{Failure, exit};

/// Runs the client with fperf-style `args`; `--samples FILE.parquet` and `--json` are handled here.
pub fn run(args: Vec<String>) -> Result<u8, Failure> {
    let mut samples: Option<PathBuf> = None;
    let mut json = false;
    let mut fperf_args = Vec::new();
    let mut rest = args.into_iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--samples" => {
                let file = rest.next().ok_or_else(|| {
                    Failure::new(exit::BAD_INPUT, "--samples needs a FILE.parquet")
                })?;
                samples = Some(PathBuf::from(file));
            }
            "--json" => json = true,
            _ => fperf_args.push(arg),
        }
    }
    let config = ClientConfig::from_fperf_args(&fperf_args)
        .map_err(|e| Failure::new(exit::BAD_INPUT, format!("fracflow client: {e}")))?;
    let stdout = std::io::stdout();
    let report = if json {
        fracflow_client::run(&config, &mut JsonLines::new(stdout.lock()))
    } else {
        fracflow_client::run(&config, &mut FperfConsole::new(stdout.lock()))
    }
    .map_err(|e| Failure::new(exit::NODE_FAILED, format!("fracflow client: {e}")))?;
    if let Some(path) = &samples {
        fracflow_client::write_samples_parquet(path, &report.samples).map_err(|e| {
            Failure::new(exit::INTERNAL, format!("writing {}: {e}", path.display()))
        })?;
        eprintln!(
            "fracflow client: {} per-request samples in {}",
            report.samples.len(),
            path.display()
        );
    }
    // Where the numbers came from, on stderr so fperf-format stdout stays parseable.
    eprintln!(
        "fracflow client: {} requests measured against {}:{} from host {} (load {:.2}); client CPU {}",
        report.measured_completions,
        config.host,
        config.port,
        fracflow_executors::host::name(),
        report.host_load1.unwrap_or(f64::NAN),
        if report.cpu_saturated {
            "SATURATED: the client was the bottleneck"
        } else {
            "not saturated"
        },
    );
    if let Some(open) = &report.open_loop {
        eprintln!(
            "fracflow client: open loop target {:.0}/s, achieved {:.0}/s, {} sends late by > 1 ms",
            open.target_rate, open.achieved_rate, open.late_sends
        );
    }
    if report.timeouts > 0 {
        eprintln!("fracflow client: {} requests timed out", report.timeouts);
    }
    match &report.status {
        RunStatus::Completed => Ok(exit::OK),
        RunStatus::Failed { reason } => {
            eprintln!("fracflow client: run failed: {reason} (samples taken so far are kept)");
            Ok(exit::NODE_FAILED)
        }
    }
}
