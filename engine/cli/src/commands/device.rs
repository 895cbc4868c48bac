//! `fracflow device …`: the emulated fRAC device and the controller client, as a researcher drives a board.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Subcommand;
use fracflow_emulator::{Device, DeviceConfig, LogEvent};
use fracflow_executors::slotcheck;
use fracflow_executors::slotcheck::Unit;

use crate::error::{Error, Result};
use crate::exit::Exit;

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
        /// Stand in for the board in tests: take Xilinx-framed fixtures wrapping an emulated design, and answer
        /// success to a partial of another build while leaving the slot unchanged, as the board does.
        #[arg(long)]
        board_double: bool,
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
    /// Check what each slot computes against references (like the artifact's checkfuncs); exit 1 when a
    /// slot computes wrong or answers as another unit than `--expect` says.
    Check {
        #[arg(long, default_value = DEFAULT_ADDR)]
        addr: SocketAddr,
        #[arg(long, value_delimiter = ',', default_value = "0,1,2,3")]
        slots: Vec<u8>,
        /// The unit each slot must answer as, e.g. `0=top_k,1=log` (names as in the artifact).
        #[arg(long, value_delimiter = ',')]
        expect: Vec<String>,
    },
}

fn parse_hex_or_decimal(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|e| format!("`{text}` is not a number: {e}"))
}

fn device_error(addr: SocketAddr, error: fracflow_emulator::Error) -> Error {
    // Only a failure to talk to the device suggests that none is there; a refusal is the device's answer.
    let hint = match error {
        fracflow_emulator::Error::Io { .. } => {
            Some("check that a device is listening there (`fracflow device serve`)".to_owned())
        }
        _ => None,
    };
    Error::Failed {
        message: format!("device {addr}: {error}"),
        hint,
    }
}

pub fn run(command: DeviceCommand) -> Result<Exit> {
    match command {
        DeviceCommand::Serve {
            listen,
            image,
            board_double,
        } => serve(listen, image, board_double),
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
            Ok(Exit::Ok)
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
            Ok(Exit::Ok)
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
            Ok(Exit::Ok)
        }
        DeviceCommand::Check {
            addr,
            slots,
            expect,
        } => check(addr, &slots, &expect),
    }
}

/// How long one check waits for an answer: log and norm answer nothing to a request they swallow.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// `--expect SLOT=UNIT` entries, refused (exit 2) before anything is sent.
fn parse_expectations(slots: &[u8], expect: &[String]) -> Result<Vec<(u8, Unit)>> {
    let units = || {
        Unit::ALL
            .iter()
            .map(|u| u.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    expect
        .iter()
        .map(|entry| {
            let (slot, unit) = entry.split_once('=').ok_or_else(|| {
                Error::bad_input_with_hint(
                    format!("--expect `{entry}` is not SLOT=UNIT"),
                    "write e.g. `--expect 0=top_k,1=log`",
                )
            })?;
            let slot: u8 = slot.trim().parse().map_err(|_| {
                Error::bad_input(format!("--expect `{entry}`: `{slot}` is not a slot number"))
            })?;
            if !slots.contains(&slot) {
                return Err(Error::bad_input_with_hint(
                    format!("--expect names slot {slot}, which is not among the checked slots"),
                    "add it to --slots",
                ));
            }
            let unit = slotcheck::unit_by_name(unit.trim()).ok_or_else(|| {
                Error::bad_input_with_hint(
                    format!("--expect `{entry}`: `{unit}` is not a unit"),
                    format!("units are {}", units()),
                )
            })?;
            Ok((slot, unit))
        })
        .collect()
}

fn check(addr: SocketAddr, slots: &[u8], expect: &[String]) -> Result<Exit> {
    let expectations = parse_expectations(slots, expect)?;
    let mut problems = Vec::new();
    for &slot in slots {
        let verdict =
            slotcheck::check_slot(addr, slot, CHECK_TIMEOUT).map_err(|e| Error::Failed {
                message: format!("device {addr}: {e}"),
                hint: Some(
                    "check that a device is listening there (`fracflow device serve`)".to_owned(),
                ),
            })?;
        let answers_as = verdict.unit.map_or("no known unit", Unit::name);
        let passed = verdict.checks.iter().filter(|c| c.passed).count();
        println!(
            "slot {slot}: {answers_as}, {passed}/{} checks passed",
            verdict.checks.len()
        );
        for failed in verdict.checks.iter().filter(|c| !c.passed) {
            println!("  FAIL {}: {}", failed.name, failed.detail);
            problems.push(format!(
                "slot {slot} ({answers_as}) fails `{}`",
                failed.name
            ));
        }
        let expected = expectations
            .iter()
            .find(|(s, _)| *s == slot)
            .map(|(_, u)| *u);
        match expected {
            Some(unit) if verdict.unit != Some(unit) => problems.push(format!(
                "slot {slot} answers as {answers_as}, expected {}",
                unit.name()
            )),
            None if verdict.unit.is_none() => {
                problems.push(format!("slot {slot} answers as no known unit"));
            }
            _ => {}
        }
    }
    if problems.is_empty() {
        Ok(Exit::Ok)
    } else {
        Err(Error::Failed {
            message: problems.join("; "),
            hint: Some(
                "load the slot's partial again, from the build of the programmed image".to_owned(),
            ),
        })
    }
}

/// A flag SIGINT and SIGTERM set: registered before a server announces itself, so no signal is missed.
pub(super) fn stop_on_signal() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| Error::internal("cannot watch for SIGINT and SIGTERM", e))?;
    }
    Ok(stop)
}

pub(super) fn wait_until(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn serve(listen: SocketAddr, image: Option<PathBuf>, board_double: bool) -> Result<Exit> {
    let mut config = DeviceConfig::new(listen);
    config.image = image;
    if board_double {
        config.fidelity = fracflow_emulator::image::Fidelity::BoardDouble;
    }
    config.log = Arc::new(|event: &LogEvent| eprintln!("device: {event}"));
    let device = Device::start_with(config)
        .map_err(|e| Error::bad_input(format!("cannot start the device on {listen}: {e}")))?;
    let stop = stop_on_signal()?;
    // One line on stdout with the bound address, so scripts and tests can find a port-0 device.
    println!(
        "listening {} management {} ({})",
        device.addr(),
        device.management_addr(),
        if board_double {
            "board double: the emulated fRAC device behind Xilinx-framed fixtures"
        } else {
            "emulated fRAC device"
        }
    );
    wait_until(&stop);
    eprintln!("device: stopping");
    device.stop();
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(expect: &[&str]) -> String {
        let expect: Vec<String> = expect.iter().map(|e| (*e).to_owned()).collect();
        match parse_expectations(&[0, 1, 2, 3], &expect) {
            Ok(parsed) => panic!("accepted {expect:?} as {parsed:?}"),
            Err(error) => error.render(),
        }
    }

    #[test]
    fn expectations_name_slots_by_number_and_units_by_artifact_name_or_alias() {
        let expect = ["0=top_k".to_owned(), "3=logit".to_owned()];
        let parsed = parse_expectations(&[0, 3], &expect).map_err(|e| e.render());
        assert_eq!(parsed, Ok(vec![(0, Unit::TopK), (3, Unit::Log)]));
    }

    #[test]
    fn malformed_expectations_are_refused_with_what_to_write() {
        let shown = refusal(&["top_k"]);
        assert!(
            shown.contains("error: --expect `top_k` is not SLOT=UNIT"),
            "{shown}"
        );
        assert!(
            shown.contains("hint: write e.g. `--expect 0=top_k,1=log`"),
            "{shown}"
        );
        let shown = refusal(&["x=top_k"]);
        assert!(shown.contains("`x` is not a slot number"), "{shown}");
        let shown = refusal(&["1=fft"]);
        assert!(shown.contains("`fft` is not a unit"), "{shown}");
        assert!(
            shown.contains("hint: units are top_k, log, norm, cnn"),
            "{shown}"
        );
        let expect = ["2=log".to_owned()];
        let outside = parse_expectations(&[0], &expect).map_err(|e| e.render());
        assert!(
            outside.is_err_and(|shown| shown.contains("slot 2, which is not among the checked")),
        );
    }
}
