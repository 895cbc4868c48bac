//! `fracflow cpu-server`: the software Top-K baseline server of Figure 16 (fperf's `-Z 0` protocol).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use fracflow_emulator::LogEvent;
use fracflow_emulator::cpu_server::{CpuServer, CpuServerConfig, kernels_in};

use super::device::{stop_on_signal, wait_until};
use crate::error::{Error, Result};
use crate::exit::Exit;

/// The flags of `fracflow cpu-server`.
#[derive(clap::Args, Debug)]
pub struct CpuServerArgs {
    /// Port on 127.0.0.1 (0 picks a free one); see --listen for another address.
    #[arg(short = 'p', long, default_value_t = 4096)]
    port: u16,
    /// Worker threads (the "cores" of the CPU baseline), at least 1.
    #[arg(short = 'n', long, default_value_t = 1, value_parser = parse_workers)]
    workers: usize,
    /// Pin worker i to core S+i (wrapping over the available cores).
    #[arg(short = 'S', long)]
    start_cpu: Option<usize>,
    /// Full listen address; overrides -p.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Compiled kernels for -F 2/3/5 (cnn, logit, norm): a directory of `hls` outputs, e.g.
    /// results/frac-bitstreams/latest/nodes. top_k (-F 1) needs none.
    #[arg(long)]
    kernels: Option<PathBuf>,
    /// A mark in this process's argv (`fracflow-<run>-…`): a run that starts the server over ssh stops it by
    /// pid only while the pid still carries its token, and finds leftovers by it. The server itself ignores it.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
}

pub fn run(args: CpuServerArgs) -> Result<Exit> {
    let listen = args
        .listen
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], args.port)));
    let mut config = CpuServerConfig::new(listen, args.workers);
    config.start_cpu = args.start_cpu;
    if let Some(dir) = &args.kernels {
        config.kernels = kernels_in(dir)
            .map_err(|e| Error::bad_input(format!("--kernels {}: {e}", dir.display())))?;
    }
    config.log = Arc::new(|event: &LogEvent| eprintln!("cpu-server: {event}"));
    let server = CpuServer::start(config)
        .map_err(|e| Error::bad_input(format!("cannot start the CPU server on {listen}: {e}")))?;
    let stop = stop_on_signal()?;
    println!(
        "listening {} workers {} (CPU baseline server){}",
        server.addr(),
        args.workers,
        args.token
            .as_deref()
            .map(|t| format!(" token {t}"))
            .unwrap_or_default()
    );
    wait_until(&stop);
    let stats = server.stats();
    eprintln!(
        "cpu-server: stopping after {} requests on {} connections ({} refused as bad input)",
        stats.requests, stats.connections, stats.bad_input
    );
    server.stop();
    Ok(Exit::Ok)
}

/// `-n K`: a server with no worker would accept connections and never answer.
fn parse_workers(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("at least 1 worker is needed".to_owned()),
        Ok(workers) => Ok(workers),
        Err(e) => Err(format!("not a number of workers: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_must_be_a_positive_number() {
        assert_eq!(parse_workers("4"), Ok(4));
        assert_eq!(
            parse_workers("0"),
            Err("at least 1 worker is needed".to_owned())
        );
        assert!(parse_workers("-1").is_err());
    }
}
