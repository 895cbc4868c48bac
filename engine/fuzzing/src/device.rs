//! The emulated device's inputs from any loopback peer (the management channel, the image containers it is
//! programmed with) and the client helpers' reading of any server's answers.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use fracflow_emulator::client::{load_partial, probe_with_timeout, program, status};
use fracflow_emulator::image::{Fidelity, container_of};
use fracflow_emulator::{Device, DeviceConfig, DeviceStatus, FullImage, PartialImage};
use fracflow_proto::{
    ControllerResponse, ErrorCode, Flags, HEADER_LEN, LINE, QueryStatus, RequestHeader, Unit,
};

use crate::Input;
use crate::scratch::scratch;

/// How long a target waits on its loopback peer before taking it for hung (libFuzzer's own timeout is longer).
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// The first byte chooses: bit 0 seals the rest with its blake3 digest (so the decoder gets past the checksum
/// and into the structure), bit 1 reads it as a partial rather than a full image, bit 2 unwraps it as a board
/// double does (Xilinx `.bit`/`.bin` framing) rather than as the emulated device. A decoded container encodes
/// to bytes that decode to it again; a partial encodes to exactly the bytes it came from, less the ICAP padding.
pub fn device_image(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.byte();
    let mut bytes = input.rest().to_vec();
    if mode & 1 != 0 {
        let digest = blake3::hash(&bytes);
        bytes.extend_from_slice(digest.as_bytes());
    }
    let fidelity = if mode & 4 != 0 {
        Fidelity::BoardDouble
    } else {
        Fidelity::Emulated
    };
    let what = if mode & 2 != 0 {
        "partial"
    } else {
        "full image"
    };
    let Ok(container) = container_of(&bytes, fidelity, what) else {
        return;
    };
    if mode & 2 != 0 {
        if let Ok(partial) = PartialImage::decode(container) {
            let encoded = partial.encode();
            assert_eq!(PartialImage::decode(&encoded), Ok(partial));
            assert!(
                container.starts_with(&encoded),
                "a partial re-encodes to other bytes"
            );
            let padding = &container[encoded.len()..];
            assert!(padding.len() <= 3 && padding.iter().all(|&b| b == 0));
        }
    } else if let Ok(full) = FullImage::decode(container) {
        let encoded = full.encode();
        assert_eq!(FullImage::decode(&encoded), Ok(full));
    }
}

/// The data address of this process's emulated device (started on first use, on loopback, and kept).
fn device_management() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        let listen = SocketAddr::from(([127, 0, 0, 1], 0));
        match Device::start_with(DeviceConfig::new(listen)) {
            Ok(device) => {
                let addr = device.management_addr();
                // Kept for the process's life: every input talks to the same device.
                Box::leak(Box::new(device));
                addr
            }
            Err(e) => panic!("cannot start the emulated device: {e}"),
        }
    })
}

/// Sends `bytes` on a fresh connection, closes the sending side, and returns everything the peer answered.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, PEER_TIMEOUT) else {
        panic!("the device's management channel at {addr} refused a connection");
    };
    let _ = stream.set_read_timeout(Some(PEER_TIMEOUT));
    let _ = stream.set_write_timeout(Some(PEER_TIMEOUT));
    // The device may close early (an unknown command): a failed write is its answer, not ours to judge.
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(Shutdown::Write);
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    reply
}

/// The input is what a loopback peer sends the management channel (`PROGRAM <len>\n<image>`, `STATUS\n`, …).
/// Every answer is one line, `OK …` or `ERR …`, and no command line (an unfinished last one included) gets more
/// than one; a `STATUS` answer is JSON the client's type reads. Afterwards the device still answers `STATUS` on a
/// new connection, and it holds what the last successful `PROGRAM` of the input said it programmed.
pub fn management_channel(data: &[u8]) {
    let addr = device_management();
    let reply = exchange(addr, data);
    let reply = match String::from_utf8(reply) {
        Ok(reply) => reply,
        Err(e) => panic!("the management channel answered bytes that are not text: {e}"),
    };
    let mut programmed: Option<(String, String)> = None;
    let mut answers = 0;
    for line in reply.split_inclusive('\n') {
        answers += 1;
        let Some(line) = line.strip_suffix('\n') else {
            panic!("a management answer does not end its line: {line:?}");
        };
        if let Some(json) = line.strip_prefix("OK {") {
            let parsed = serde_json::from_str::<DeviceStatus>(&format!("{{{json}"));
            assert!(
                parsed.is_ok(),
                "a STATUS answer the client cannot read: {line}"
            );
        } else if let Some(rest) = line.strip_prefix("OK ") {
            let mut words = rest.split(' ');
            match (words.next(), words.next(), words.next()) {
                (Some(kind @ ("design" | "bypass")), Some(id), None) => {
                    programmed = Some((kind.to_owned(), id.to_owned()));
                }
                _ => panic!("a PROGRAM answer of an unknown shape: {line:?}"),
            }
        } else {
            assert!(line.starts_with("ERR "), "neither OK nor ERR: {line:?}");
        }
    }
    // Each newline-ended line gets at most one answer, and so does an unfinished last line (`ERR`).
    let command_lines = data.iter().filter(|&&b| b == b'\n').count() + 1;
    assert!(
        answers <= command_lines,
        "{answers} answers to at most {command_lines} command lines"
    );
    let after = exchange(addr, b"STATUS\n");
    let after = String::from_utf8_lossy(&after);
    let Some(json) = after.strip_prefix("OK ").map(str::trim_end) else {
        panic!("the device no longer answers STATUS: {after:?}");
    };
    let status: DeviceStatus = match serde_json::from_str(json) {
        Ok(status) => status,
        Err(e) => panic!("unreadable STATUS after the input: {e}: {json}"),
    };
    if let Some((kind, id)) = programmed {
        assert_eq!(status.image.as_str(), kind);
        assert_eq!(status.build_id.as_deref().unwrap_or("-"), id);
    }
}

/// A fake device on loopback: a data port and its management port (data + 1) that answer every connection
/// with the current [`ANSWER`], close their sending side, and read until the client hangs up (so the client's
/// requests are never cut off by a reset).
struct FakeDevice {
    data: SocketAddr,
}

static ANSWER: Mutex<Vec<u8>> = Mutex::new(Vec::new());

fn fake_device() -> SocketAddr {
    static DEVICE: OnceLock<FakeDevice> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            for _ in 0..100 {
                let Ok(data) = TcpListener::bind(("127.0.0.1", 0)) else {
                    continue;
                };
                let Ok(addr) = data.local_addr() else {
                    continue;
                };
                let Some(next) = addr.port().checked_add(1) else {
                    continue;
                };
                let Ok(management) = TcpListener::bind(("127.0.0.1", next)) else {
                    continue;
                };
                for listener in [data, management] {
                    std::thread::spawn(move || serve_answers(&listener));
                }
                return FakeDevice { data: addr };
            }
            panic!("no two adjacent loopback ports for the fake device");
        })
        .data
}

fn serve_answers(listener: &TcpListener) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else {
            continue;
        };
        let answer = ANSWER.lock().map(|a| a.clone()).unwrap_or_default();
        let _ = stream.set_read_timeout(Some(PEER_TIMEOUT));
        let _ = stream.write_all(&answer);
        let _ = stream.shutdown(Shutdown::Write);
        let mut sink = [0u8; 4096];
        while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    }
}

/// The bytes of the partial the `load_partial` case uploads: 200 bytes, so 4 `WRITE_HBM`s of 64 bytes.
const PARTIAL_BYTES: usize = 200;
const CHUNK: usize = 64;

/// The first byte chooses a client helper (`status`, `program`, `load_partial`, `probe`), the rest is what the
/// fake device answers it. What a helper accepts must be what the answer says: `status` the JSON of an
/// `OK` line, `program` the kind and build id of one, `load_partial` exactly when the answer starts with one
/// `ERR_OK` status line per request and a query-status line (that it reports), `probe` one verdict per slot,
/// a pattern only when the header came back.
pub fn client_replies(data: &[u8]) {
    let mut input = Input::new(data);
    let helper = input.byte() % 4;
    let answer = input.rest();
    let addr = fake_device();
    if let Ok(mut current) = ANSWER.lock() {
        current.clear();
        current.extend_from_slice(answer);
    }
    let first_line = || {
        let end = answer
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or(answer.len());
        String::from_utf8_lossy(&answer[..end])
            .trim_end()
            .to_owned()
    };
    match helper {
        0 => {
            if let Ok(got) = status(addr) {
                let line = first_line();
                let json = line.strip_prefix("OK ").unwrap_or_else(|| {
                    panic!("status accepted an answer that is not OK: {line:?}")
                });
                let expected: Result<DeviceStatus, _> = serde_json::from_str(json);
                assert_eq!(expected.ok(), Some(got));
            }
        }
        1 => {
            let image = scratch().root.join("fuzz_image.bit");
            if std::fs::write(&image, FullImage::Bypass.encode()).is_err() {
                return;
            }
            if let Ok(report) = program(addr, &image) {
                let line = first_line();
                let mut words = line
                    .strip_prefix("OK ")
                    .unwrap_or_default()
                    .split_whitespace();
                assert_eq!(words.next(), Some(report.image.as_str()));
                assert_eq!(words.next().unwrap_or("-"), report.build_id);
            }
        }
        2 => {
            let partial = scratch().root.join("fuzz_partial.bin");
            if std::fs::write(&partial, [0x5a; PARTIAL_BYTES]).is_err() {
                return;
            }
            let result = load_partial(addr, 1, &partial, CHUNK, fracflow_proto::DEFAULT_HBM_ADDR);
            let writes = PARTIAL_BYTES.div_ceil(CHUNK);
            let lines: Vec<[u8; LINE]> = answer
                .chunks_exact(LINE)
                .map(|c| {
                    let mut line = [0u8; LINE];
                    line.copy_from_slice(c);
                    line
                })
                .collect();
            let statuses_ok = lines.len() > writes + 1
                && lines[..=writes]
                    .iter()
                    .all(|l| ControllerResponse::decode_status(l) == Ok(ErrorCode::Ok));
            let query = lines.get(writes + 1).map(QueryStatus::decode);
            match (result, statuses_ok, query) {
                (Ok(report), true, Some(Ok(query))) => {
                    assert_eq!(report.writes, writes);
                    assert_eq!(report.status, query);
                }
                (Ok(report), ok, query) => {
                    panic!(
                        "load_partial accepted {report:?} from statuses ok={ok}, query {query:?}"
                    )
                }
                (Err(e), true, Some(Ok(_))) => {
                    panic!("load_partial refused a correct answer: {e}")
                }
                (Err(_), _, _) => {}
            }
        }
        _ => {
            let slots = [0u8, 3];
            let Ok(found) = probe_with_timeout(addr, &slots, PEER_TIMEOUT) else {
                return;
            };
            assert_eq!(found.iter().map(|p| p.slot).collect::<Vec<_>>(), slots);
            for probe in &found {
                let header = RequestHeader::accelerator(
                    u16::from(probe.slot),
                    (HEADER_LEN + LINE) as u32,
                    Flags::FIRST_LAST,
                )
                .encode();
                if probe.unit == Some(Unit::Pattern) {
                    assert!(
                        answer.starts_with(&header),
                        "a pattern unit without the echoed header"
                    );
                }
                assert!(!probe.detail.is_empty());
            }
        }
    }
}
