//! The management channel (JTAG stand-in), the bypass image and programming.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use fracflow_emulator::device::management_addr;
use fracflow_emulator::{Device, ImageKind, client};

use crate::common::{
    Framing, assert_served, built, closed_by_device, connect, device, header, localhost, read_n,
    wait_for_log,
};

fn mgmt_command(dev: &fracflow_emulator::RunningDevice, bytes: &[u8]) -> String {
    let stream = TcpStream::connect(dev.management_addr()).expect("connects");
    (&stream).write_all(bytes).expect("write");
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).expect("reply");
    line
}

#[test]
fn management_port_is_data_port_plus_one_on_loopback() {
    let (dev, _log) = device();
    assert_eq!(dev.management_addr().port(), dev.addr().port() + 1);
    assert!(dev.management_addr().ip().is_loopback());
    assert_eq!(management_addr(dev.addr()), Some(dev.management_addr()));
    let status = client::status(dev.addr()).expect("status");
    assert_eq!(status.image, ImageKind::Design);
    assert_eq!(
        status.build_id.as_deref(),
        Some(built().set.build_id.as_str())
    );
    assert_eq!(status.slots.len(), 4);
    assert!(status.slots.iter().all(|s| s.unit == "top_k"));
}

#[test]
fn program_resets_slots_and_closes_connections() {
    let (dev, log) = device();
    crate::common::load(&dev, 1, "pattern_slot");
    assert_eq!(dev.status().slots[1].unit, "pattern_slot");
    // The load's controller connection may still be registered for a moment; counting it as ours would let
    // programming run before our connection is registered (seen once under a loaded CI host).
    let settled = |want: usize, what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while dev.open_connections() != want {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };
    settled(0, "the load's connection never closed");
    let mut open = connect(dev.addr());
    // connect() returns after the handshake; the device registers the connection a moment later, and only a
    // registered connection can be dropped by programming.
    settled(1, "the device never registered the connection");
    let report = client::program(dev.addr(), &built().set.full).expect("programs");
    assert_eq!(report.image, ImageKind::Design);
    assert_eq!(report.build_id, built().set.build_id);
    assert_eq!(
        dev.status().slots[1].unit,
        "top_k",
        "every slot back to its first RM"
    );
    assert!(
        closed_by_device(&mut open),
        "programming drops data connections"
    );
    wait_for_log(&log, "the device was reprogrammed");
    assert_served(dev.addr());
}

#[test]
fn bad_images_and_commands_are_refused() {
    let (dev, log) = device();
    let reply = mgmt_command(&dev, b"PROGRAM 16\nhello, not a bit");
    assert!(reply.contains("bad magic"), "{reply}");
    let reply = mgmt_command(&dev, b"PROGRAM 5\nhello");
    assert!(reply.contains("truncated full image"), "{reply}");
    wait_for_log(&log, "PROGRAM refused");
    // A partial is not a full image.
    let partial = std::fs::read(crate::common::partial(0, "top_k")).expect("read");
    let mut bytes = format!("PROGRAM {}\n", partial.len()).into_bytes();
    bytes.extend_from_slice(&partial);
    let reply = mgmt_command(&dev, &bytes);
    assert!(reply.starts_with("ERR "), "{reply}");
    // A corrupt full image.
    let mut full = std::fs::read(&built().set.full).expect("read");
    let mid = full.len() / 2;
    full[mid] ^= 0x10;
    let mut bytes = format!("PROGRAM {}\n", full.len()).into_bytes();
    bytes.extend_from_slice(&full);
    let reply = mgmt_command(&dev, &bytes);
    assert!(reply.contains("checksum"), "{reply}");
    let reply = mgmt_command(&dev, b"ERASE\n");
    assert!(reply.starts_with("ERR unknown command"), "{reply}");
    let reply = mgmt_command(&dev, b"PROGRAM 999999999999\n");
    assert!(reply.starts_with("ERR PROGRAM length"), "{reply}");
    // The design programmed before is untouched.
    assert_eq!(dev.status().image, ImageKind::Design);
    assert_served(dev.addr());
}

#[test]
fn bypass_image_echoes_bytes() {
    let dev = Device::start(localhost(), Some(&built().set.bypass)).expect("starts");
    assert_eq!(dev.status().image, ImageKind::Bypass);
    let mut stream = connect(dev.addr());
    // Anything at all comes back, fRAC framing or not.
    for piece in [&b"not a header"[..], &[0x42; 5000][..]] {
        stream.write_all(piece).expect("write");
        assert_eq!(read_n(&mut stream, piece.len()), piece);
    }
    let head = header(0, 4032, 0xffff, Framing::Whole);
    let mut request = head.to_vec();
    request.extend_from_slice(&[9u8; 4032]);
    stream.write_all(&request).expect("write");
    assert_eq!(read_n(&mut stream, 4096), request);
    drop(stream);
    // Programming the design over it turns the slots on.
    client::program(dev.addr(), &built().set.full).expect("programs");
    assert_served(dev.addr());
    let report = client::program(dev.addr(), &built().set.bypass).expect("back to bypass");
    assert_eq!(report.image, ImageKind::Bypass);
}
