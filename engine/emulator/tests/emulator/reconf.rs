//! Reconfiguration end to end: probe, load, probe; partials that must be
//! refused; the controller's other commands.

use std::io::{Read, Write};

use fracflow_emulator::build::{bitstreams, weave_shell};
use fracflow_emulator::spec::ShellSpec;
use fracflow_emulator::{Error, PartialImage, load_partial, probe};
use fracflow_proto::{
    CommandLine, ControllerRequest, ControllerResponse, ErrorCode, QueryStatus, RequestHeader, Unit,
};

use crate::common::{
    assert_served, built, connect, device, device_with, hw_dir, partial, wait_for_log,
};

fn units(dev: &fracflow_emulator::RunningDevice) -> Vec<Option<Unit>> {
    probe(dev.addr(), &[0, 1, 2, 3])
        .expect("probe connects")
        .into_iter()
        .map(|p| p.unit)
        .collect()
}

#[test]
fn partial_names_follow_the_artifact() {
    for (slot, unit, name) in [
        (0, "top_k", "c00_f00.bin"),
        (0, "pattern_slot", "c00_f07.bin"),
        (1, "top_k", "c01_f03.bin"),
        (1, "log", "c01_f05.bin"),
        (2, "top_k", "c02_f10.bin"),
        (2, "cnn", "c02_f20.bin"),
        (3, "top_k", "c03_f15.bin"),
        (3, "norm", "c03_f16.bin"),
    ] {
        let path = partial(slot, unit);
        assert_eq!(path.file_name().and_then(|n| n.to_str()), Some(name));
        assert!(path.parent().is_some_and(|p| p.ends_with("icap")));
    }
    // The CNN only fits C02; every other unit is in every cell.
    let set = &built().set;
    assert_eq!(set.partials.iter().filter(|p| p.unit == "cnn").count(), 1);
    assert_eq!(set.partials.len(), 4 * 5 + 1);
}

#[test]
fn probe_load_probe() {
    let (dev, log) = device();
    assert_eq!(
        units(&dev),
        vec![Some(Unit::TopK); 4],
        "the full image starts with top_k"
    );
    let plan = [
        (1, "pattern_slot", Unit::Pattern),
        (2, "cnn", Unit::Cnn),
        (3, "norm", Unit::Norm),
        (0, "or_slot", Unit::Or),
        (1, "log", Unit::Log),
    ];
    let mut expected = vec![Some(Unit::TopK); 4];
    for (slot, unit, model) in plan {
        let report = load_partial(dev.addr(), slot, &partial(slot, unit), 256, 0x1000_4000)
            .expect("the partial loads");
        assert_eq!(report.writes, report.padded_len.div_ceil(256));
        assert_eq!(report.status.last_error, ErrorCode::Ok);
        assert_eq!(report.status.last_slot_id, slot);
        assert!(report.status.prdone_seen && !report.status.prerror_seen);
        assert!(report.status.last_cycles > 0);
        expected[usize::from(slot)] = Some(model);
        assert_eq!(
            units(&dev),
            expected,
            "after loading {unit} into slot {slot}"
        );
        wait_for_log(&log, &format!("slot {slot} reconfigured"));
    }
    let status = dev.status();
    assert_eq!(status.slots.len(), 4);
    assert_eq!(status.slots[2].unit, "cnn");
    assert_eq!(status.slots[2].rm_id, 20);
    // Chunk size 64 and another staging address work too.
    load_partial(dev.addr(), 0, &partial(0, "top_k"), 64, 0x4000).expect("chunk 64");
    assert_eq!(units(&dev)[0], Some(Unit::TopK));
}

fn refused(result: fracflow_emulator::Result<fracflow_emulator::LoadReport>) {
    match result {
        Err(Error::Controller {
            op: "RECONF_ICAP",
            code: ErrorCode::Icap,
        }) => {}
        other => panic!("expected RECONF_ICAP to answer ERR_ICAP, got {other:?}"),
    }
}

fn query(dev: &fracflow_emulator::RunningDevice) -> QueryStatus {
    let mut stream = connect(dev.addr());
    let request = ControllerRequest::QueryStatus;
    stream.write_all(&request.encode()).expect("send");
    let mut line = [0u8; 64];
    stream.read_exact(&mut line).expect("answer");
    match ControllerResponse::decode(&request.command_line(), &line).expect("decodes") {
        ControllerResponse::Query(q) => q,
        other => panic!("{other:?}"),
    }
}

#[test]
fn foreign_partial_refused() {
    // Another build: the same units woven into a shell of another name.
    let mut shell = ShellSpec::load(&hw_dir().join("shell.yaml")).expect("shell");
    shell.name = "another-build".into();
    let specs: Vec<_> = built().units.iter().map(|u| u.spec.clone()).collect();
    let other = weave_shell(&shell, &specs).expect("weaves");
    assert_ne!(other.build_id, built().design.build_id);
    let dir = tempfile::tempdir().expect("tempdir");
    let set = bitstreams(&other, &built().units, dir.path()).expect("bitstreams");
    let foreign = set
        .partials
        .iter()
        .find(|p| p.cell == 1 && p.unit == "pattern_slot")
        .expect("partial");

    let (dev, log) = device();
    refused(load_partial(dev.addr(), 1, &foreign.path, 256, 0x1000_4000));
    let line = wait_for_log(&log, "ERR_ICAP");
    assert!(line.contains("build"), "{line}");
    assert_eq!(
        units(&dev)[1],
        Some(Unit::TopK),
        "the slot keeps its module"
    );
    let q = query(&dev);
    assert_eq!(q.last_error, ErrorCode::Icap);
    assert!(q.prerror_seen && !q.prdone_seen);
    assert_eq!(q.last_slot_id, 1);
    assert_served(dev.addr());
}

#[test]
fn wrong_cell_refused() {
    let (dev, log) = device();
    refused(load_partial(
        dev.addr(),
        1,
        &partial(0, "pattern_slot"),
        256,
        0x1000_4000,
    ));
    let line = wait_for_log(&log, "ERR_ICAP");
    assert!(line.contains("cell C00, not slot 1"), "{line}");
    assert_eq!(units(&dev)[1], Some(Unit::TopK));
    // The CNN partial exists for C02 only.
    refused(load_partial(
        dev.addr(),
        3,
        &partial(2, "cnn"),
        256,
        0x1000_4000,
    ));
    assert_eq!(units(&dev)[3], Some(Unit::TopK));
}

#[test]
fn corrupt_and_forged_partials_refused() {
    let (dev, log) = device();
    let dir = tempfile::tempdir().expect("tempdir");
    let good = std::fs::read(partial(1, "pattern_slot")).expect("partial");

    // One flipped bit in the plugin: checksum.
    let mut corrupt = good.clone();
    corrupt[200] ^= 1;
    let path = dir.path().join("corrupt.bin");
    std::fs::write(&path, &corrupt).expect("write");
    refused(load_partial(dev.addr(), 1, &path, 256, 0x1000_4000));
    wait_for_log(&log, "checksum");

    // Not a partial at all: magic.
    let path = dir.path().join("junk.bin");
    std::fs::write(&path, vec![0x5a; 1000]).expect("write");
    refused(load_partial(dev.addr(), 1, &path, 256, 0x1000_4000));
    wait_for_log(&log, "bad magic");

    // Truncated.
    let path = dir.path().join("short.bin");
    std::fs::write(&path, &good[..good.len() / 2]).expect("write");
    refused(load_partial(dev.addr(), 1, &path, 256, 0x1000_4000));
    wait_for_log(&log, "truncated partial");

    // A well-formed partial of the right build and cell whose plugin is not
    // the one the image allows for its unit (here: or_slot's plugin, which
    // the image does allow, but for or_slot, under pattern_slot's RM id).
    let mut forged = PartialImage::decode(&good).expect("decodes");
    let or_plugin = PartialImage::decode(&std::fs::read(partial(1, "or_slot")).expect("read"))
        .expect("decodes")
        .plugin;
    forged.plugin = or_plugin;
    let path = dir.path().join("forged.bin");
    std::fs::write(&path, forged.encode()).expect("write");
    refused(load_partial(dev.addr(), 1, &path, 256, 0x1000_4000));
    wait_for_log(
        &log,
        "is not the pattern_slot plugin the programmed image allows",
    );

    // An RM id that is not a module of the cell.
    let mut stray = PartialImage::decode(&good).expect("decodes");
    stray.rm_id = 7;
    let path = dir.path().join("stray.bin");
    std::fs::write(&path, stray.encode()).expect("write");
    refused(load_partial(dev.addr(), 1, &path, 256, 0x1000_4000));
    wait_for_log(&log, "is not a module of cell C01");

    assert_eq!(units(&dev)[1], Some(Unit::TopK));
    assert_served(dev.addr());
}

fn controller_round_trip(stream: &mut std::net::TcpStream, bytes: &[u8]) -> [u8; 64] {
    stream.write_all(bytes).expect("send");
    let mut line = [0u8; 64];
    stream.read_exact(&mut line).expect("answer");
    line
}

#[test]
fn controller_commands() {
    let (dev, log) = device_with(|c| c.hbm_budget = 8192);
    let mut stream = connect(dev.addr());
    let data: Vec<u8> = (0..100u8).collect();
    let write = ControllerRequest::WriteHbm {
        addr: 0x20,
        data: data.clone(),
    };
    assert_eq!(
        controller_round_trip(&mut stream, &write.encode()),
        [0u8; 64]
    );
    let read = ControllerRequest::ReadHbm {
        addr: 0x40,
        len: 64,
    };
    let line = controller_round_trip(&mut stream, &read.encode());
    assert_eq!(&line[..], &data[0x20..0x20 + 64]);
    // Validation errors answer their status and keep the connection.
    for (command, code) in [
        (
            CommandLine {
                opcode: 9,
                slot: 0,
                hbm_addr: 0,
                byte_count: 4,
            },
            ErrorCode::Opcode,
        ),
        (
            CommandLine {
                opcode: 2,
                slot: 0,
                hbm_addr: 0x21,
                byte_count: 4,
            },
            ErrorCode::Align,
        ),
        (
            CommandLine {
                opcode: 2,
                slot: 0,
                hbm_addr: 0,
                byte_count: 65,
            },
            ErrorCode::Size,
        ),
        (
            CommandLine {
                opcode: 3,
                slot: 4,
                hbm_addr: 0,
                byte_count: 4,
            },
            ErrorCode::Slot,
        ),
        (
            CommandLine {
                opcode: 1,
                slot: 0,
                hbm_addr: 1 << 33,
                byte_count: 4,
            },
            ErrorCode::Addr,
        ),
    ] {
        let mut bytes = RequestHeader::controller(64).encode().to_vec();
        bytes.extend_from_slice(&command.encode());
        let line = controller_round_trip(&mut stream, &bytes);
        assert_eq!(line[0], code as u8, "{command:?}");
        assert!(line[1..].iter().all(|&b| b == 0));
    }
    wait_for_log(&log, "rejected with Opcode");
    let q = query(&dev);
    assert_eq!(
        q.last_error,
        ErrorCode::Addr,
        "byte 3 holds the previous result"
    );
    // Beyond the HBM budget: ERR_AXI_BRESP.
    let far = ControllerRequest::WriteHbm {
        addr: 0x10_0000,
        data: vec![1; 64],
    };
    let far2 = ControllerRequest::WriteHbm {
        addr: 0x20_0000,
        data: vec![1; 64],
    };
    assert_eq!(controller_round_trip(&mut stream, &far.encode())[0], 0);
    assert_eq!(
        controller_round_trip(&mut stream, &far2.encode())[0],
        ErrorCode::AxiBresp as u8
    );
    wait_for_log(&log, "ERR_AXI_BRESP");
    // The connection still serves accelerator requests.
    drop(stream);
    assert_served(dev.addr());
}
