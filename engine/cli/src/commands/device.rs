//! `fracflow device …`: the emulated fRAC device and the controller client, as a researcher drives a board.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Subcommand;
use fracflow_emulator::{Device, DeviceConfig, LogEvent};

use crate::{Failure, exit};

/// The artifact's device port.
const DEFAULT_ADDR: &str = "127.0.0.1:2888";

#[derive(Subcommand, Debug)]
pub enum DeviceCommand {
    /// Run the emulated fRAC device until Ctrl-C (loopback by default; port 0 picks a free port).
    Serve {
        #[arg(long, default_value = DEFAULT_ADDR)]
        listen: SocketAddr,
        /// Full image to program at start (`jtag/frac.bit` or `bypass/frac.bit`).
        #[arg(long)]
        image: Option<PathBuf>,
    },
    /// Program a full image (the JTAG stand-in: the device's management channel); resets every slot.
    Program {
        #[arg(long, default_value = DEFAULT_ADDR)]
        addr: SocketAddr,
        image: PathBuf,
    },
    /// Upload a partial bitstream into a slot over the controller protocol, then query its status.
    Load {
        #[arg(long, default_value = DEFAULT_ADDR)]
        addr: SocketAddr,
        #[arg(long)]
        slot: u8,
        #[arg(long, default_value_t = 256)]
        chunk_size: usize,
        #[arg(long, default_value = "0x10004000", value_parser = parse_hex_or_decimal)]
        hbm_addr: u64,
        partial: PathBuf,
    },
    /// Ask each slot a known question and name the unit that answers (like the artifact's testfuncs).
    Probe {
        #[arg(long, default_value = DEFAULT_ADDR)]
        addr: SocketAddr,
        #[arg(long, value_delimiter = ',', default_value = "0,1,2,3")]
        slots: Vec<u8>,
    },
}

fn parse_hex_or_decimal(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|e| format!("`{text}` is not a number: {e}"))
}

fn device_error(addr: SocketAddr, error: fracflow_emulator::Error) -> Failure {
    // Only a failure to talk to the device suggests that none is there; a refusal is the device's answer.
    let hint = match error {
        fracflow_emulator::Error::Io { .. } => {
            "\n  check that a device is listening there (`fracflow device serve`)"
        }
        _ => "",
    };
    Failure::new(exit::NODE_FAILED, format!("device {addr}: {error}{hint}"))
}

pub fn run(command: DeviceCommand) -> Result<u8, Failure> {
    match command {
        DeviceCommand::Serve { listen, image } => serve(listen, image),
        DeviceCommand::Program { addr, image } => {
            let report =
                fracflow_emulator::program(addr, &image).map_err(|e| device_error(addr, e))?;
            println!(
                "programmed {} image {} (build {}) in {:.1} ms",
                report.image.as_str(),
                image.display(),
                report.build_id,
                report.elapsed.as_secs_f64() * 1e3
            );
            Ok(exit::OK)
        }
        DeviceCommand::Load {
            addr,
            slot,
            chunk_size,
            hbm_addr,
            partial,
        } => {
            let report =
                fracflow_emulator::load_partial(addr, slot, &partial, chunk_size, hbm_addr)
                    .map_err(|e| device_error(addr, e))?;
            println!(
                "loaded {} into slot {slot}: {} bytes in {} WRITE_HBM of {chunk_size} B",
                partial.display(),
                report.bytes,
                report.writes
            );
            println!(
                "  upload {:.3} ms, reconf {:.3} ms, query {:.3} ms; status: {:?}",
                report.upload.as_secs_f64() * 1e3,
                report.reconf.as_secs_f64() * 1e3,
                report.query.as_secs_f64() * 1e3,
                report.status
            );
            Ok(exit::OK)
        }
        DeviceCommand::Probe { addr, slots } => {
            let probes =
                fracflow_emulator::probe(addr, &slots).map_err(|e| device_error(addr, e))?;
            for probe in probes {
                let unit = probe
                    .unit
                    .map(|u| format!("{u:?}"))
                    .unwrap_or_else(|| "no known unit".to_owned());
                println!(
                    "slot {}: {unit} ({}; {:.1} us)",
                    probe.slot,
                    probe.detail,
                    probe.elapsed.as_secs_f64() * 1e6
                );
            }
            Ok(exit::OK)
        }
    }
}

/// A flag SIGINT and SIGTERM set: registered before a server announces itself, so no signal is missed.
fn stop_on_signal() -> Result<Arc<AtomicBool>, Failure> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(crate::internal)?;
    }
    Ok(stop)
}

fn wait_until(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn serve(listen: SocketAddr, image: Option<PathBuf>) -> Result<u8, Failure> {
    let mut config = DeviceConfig::new(listen);
    config.image = image;
    config.log = Arc::new(|event: &LogEvent| eprintln!("device: {event}"));
    let device = Device::start_with(config).map_err(|e| {
        Failure::new(
            exit::BAD_INPUT,
            format!("cannot start the device on {listen}: {e}"),
        )
    })?;
    let stop = stop_on_signal()?;
    // One line on stdout with the bound address, so scripts and tests can find a port-0 device.
    println!(
        "listening {} management {} (emulated fRAC device)",
        device.addr(),
        device.management_addr()
    );
    wait_until(&stop);
    eprintln!("device: stopping");
    device.stop();
    Ok(exit::OK)
}

/// `fracflow cpu-server`: the software Top-K baseline of Figure 16, answering `-Z 0` requests.
#[derive(clap::Args, Debug)]
pub struct CpuServerArgs {
    /// Port on 127.0.0.1 (0 picks a free one); see --listen for another address.
    #[arg(short = 'p', long, default_value_t = 4096)]
    port: u16,
    /// Worker threads (the "cores" of the CPU baseline).
    #[arg(short = 'n', long, default_value_t = 1)]
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

pub fn cpu_server(args: CpuServerArgs) -> Result<u8, Failure> {
    use fracflow_emulator::cpu_server::{CpuServer, CpuServerConfig, kernels_in};
    let listen = args
        .listen
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], args.port)));
    let mut config = CpuServerConfig::new(listen, args.workers.max(1));
    config.start_cpu = args.start_cpu;
    if let Some(dir) = &args.kernels {
        config.kernels = kernels_in(dir).map_err(|e| {
            Failure::new(exit::BAD_INPUT, format!("--kernels {}: {e}", dir.display()))
        })?;
    }
    config.log = Arc::new(|event: &LogEvent| eprintln!("cpu-server: {event}"));
    let server = CpuServer::start(config).map_err(|e| {
        Failure::new(
            exit::BAD_INPUT,
            format!("cannot start the CPU server on {listen}: {e}"),
        )
    })?;
    let stop = stop_on_signal()?;
    println!(
        "listening {} workers {} (CPU baseline server){}",
        server.addr(),
        args.workers.max(1),
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
    Ok(exit::OK)
}
