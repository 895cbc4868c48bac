//! `fracflow client …`: the embedded load client with fperf's flags and console output.

use std::path::{Path, PathBuf};

use fracflow_client::{ClientConfig, FperfConsole, JsonLines, RunStatus};

use crate::error::{Error, Result};
use crate::exit::Exit;

/// Runs the client with fperf-style `args`; `--samples FILE.parquet` and `--json` are handled here.
pub fn run(args: Vec<String>) -> Result<Exit> {
    let mut samples: Option<PathBuf> = None;
    let mut json = false;
    let mut fperf_args = Vec::new();
    let mut rest = args.into_iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--samples" => {
                let file = rest
                    .next()
                    .ok_or_else(|| Error::bad_input("--samples needs a FILE.parquet"))?;
                samples = Some(PathBuf::from(file));
            }
            "--json" => json = true,
            _ => fperf_args.push(arg),
        }
    }
    let config = ClientConfig::from_fperf_args(&fperf_args)
        .map_err(|e| Error::bad_input(format!("fracflow client: {e}")))?;
    if let Some(path) = &samples {
        check_writable(path)?;
    }
    let stdout = std::io::stdout();
    let report = if json {
        fracflow_client::run(&config, &mut JsonLines::new(stdout.lock()))
    } else {
        fracflow_client::run(&config, &mut FperfConsole::new(stdout.lock()))
    }
    .map_err(|e| Error::failed(format!("fracflow client: {e}")))?;
    if let Some(path) = &samples {
        fracflow_client::write_samples_parquet(path, &report.samples)
            .map_err(|e| Error::internal("writing the samples", e))?;
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
        RunStatus::Completed => Ok(Exit::Ok),
        RunStatus::Failed { reason } => {
            eprintln!("fracflow client: run failed: {reason} (samples taken so far are kept)");
            Ok(Exit::NodeFailed)
        }
    }
}

/// `--samples FILE` can be written, checked before measuring: a wrong path is the user's to fix, and finding
/// out after a 30-s run would throw the run away.
fn check_writable(path: &Path) -> Result<()> {
    let refused = |e| Error::io("cannot write the samples to", path, e);
    std::fs::File::create(path).map_err(refused)?;
    std::fs::remove_file(path).map_err(refused)
}
