//! Bad input: each case gets a log line, only its connection is closed, and
//! a well-behaved client keeps being served.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use fracflow_emulator::{Device, DeviceConfig, MemoryLog};
use fracflow_proto::{CommandLine, RequestHeader};

use crate::common::{
    Framing, assert_served, closed_by_device, connect, device, device_with, header, localhost,
    wait_for_log,
};

/// Runs `bad` on its own connection while another connection, opened first,
/// stays usable; then checks the log and a fresh client.
fn isolated(bad: impl FnOnce(&mut TcpStream), needle: &str) {
    let (dev, log) = device();
    let mut good = connect(dev.addr());
    let mut stream = connect(dev.addr());
    bad(&mut stream);
    assert!(
        closed_by_device(&mut stream),
        "the bad connection is closed"
    );
    let line = wait_for_log(&log, needle);
    assert!(line.starts_with("warn"), "{line}");
    // The connection opened before is still served, and so is a new one.
    let payload = vec![7u8; 64];
    good.write_all(&header(0, 64, 0xffff, Framing::Whole))
        .and_then(|()| good.write_all(&payload))
        .expect("write");
    let answer = crate::common::read_n(&mut good, 64);
    assert_eq!(answer, crate::models::top_k(&payload, 0xffff).to_vec());
    assert_served(dev.addr());
}

#[test]
fn line_without_first() {
    isolated(
        |s| {
            let mut line = header(0, 64, 0xffff, Framing::Whole);
            line[60] &= !1;
            s.write_all(&line).expect("write");
        },
        "lacks the FIRST flag",
    );
}

#[test]
fn size_not_whole_lines() {
    isolated(
        |s| {
            let line = RequestHeader {
                declared_size: 100,
                top_config: 0xffff,
                workload: 0,
            }
            .encode();
            s.write_all(&line).expect("write");
        },
        "not a whole number of 64-byte lines",
    );
}

#[test]
fn size_over_the_limit() {
    isolated(
        |s| {
            let line = RequestHeader {
                declared_size: 65_536,
                top_config: 0xffff,
                workload: 2,
            }
            .encode();
            s.write_all(&line).expect("write");
        },
        "exceeds the 65472-byte limit",
    );
}

#[test]
fn bad_prefix() {
    isolated(
        |s| {
            let mut line = header(0, 64, 0xffff, Framing::Whole);
            line[3] = 0;
            s.write_all(&line).expect("write");
        },
        "prefix byte 3",
    );
}

#[test]
fn write_hbm_count_beyond_payload() {
    isolated(
        |s| {
            let command = CommandLine {
                opcode: 1,
                slot: 0,
                hbm_addr: 0,
                byte_count: 1000,
            };
            let mut bytes = RequestHeader::controller(128).encode().to_vec();
            bytes.extend_from_slice(&command.encode());
            bytes.extend_from_slice(&[0u8; 64]);
            s.write_all(&bytes).expect("write");
        },
        "would wait forever",
    );
}

#[test]
fn truncated_request_then_close() {
    let (dev, log) = device();
    let mut good = connect(dev.addr());
    {
        let mut stream = connect(dev.addr());
        stream
            .write_all(&header(0, 4032, 0xffff, Framing::HeaderAlone))
            .and_then(|()| stream.write_all(&[1u8; 100]))
            .expect("write");
        // Dropped here: the client closes mid-request.
    }
    let line = wait_for_log(&log, "truncated request");
    assert!(line.contains("164 of 4096 bytes"), "{line}");
    good.write_all(&header(0, 0, 0xffff, Framing::Whole))
        .expect("write");
    assert_eq!(crate::common::read_n(&mut good, 64), vec![0u8; 64]);
    assert_served(dev.addr());
}

#[test]
fn unknown_opcode_answers_and_keeps_the_connection() {
    let (dev, log) = device();
    let mut stream = connect(dev.addr());
    let command = CommandLine {
        opcode: 0x77,
        slot: 0,
        hbm_addr: 0,
        byte_count: 0,
    };
    let mut bytes = RequestHeader::controller(64).encode().to_vec();
    bytes.extend_from_slice(&command.encode());
    stream.write_all(&bytes).expect("write");
    let line = crate::common::read_n(&mut stream, 64);
    assert_eq!(line[0], 1, "ERR_OPCODE");
    wait_for_log(&log, "opcode 0x77");
    // Same connection, next request.
    stream
        .write_all(&header(0, 0, 0xffff, Framing::Whole))
        .expect("write");
    assert_eq!(crate::common::read_n(&mut stream, 64), vec![0u8; 64]);
    assert_served(dev.addr());
}

#[test]
fn slowloris_and_idle_clients_are_closed() {
    let (dev, log) = device_with(|c| {
        c.request_timeout = Duration::from_millis(400);
        c.idle_timeout = Duration::from_millis(600);
    });
    let mut slow = connect(dev.addr());
    let mut idle = connect(dev.addr());
    let started = Instant::now();
    // A header, then a byte now and then: never a whole request.
    slow.write_all(&header(0, 4032, 0xffff, Framing::HeaderAlone))
        .expect("write");
    let mut closed = false;
    for _ in 0..100 {
        if slow.write_all(&[0u8]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        closed || closed_by_device(&mut slow),
        "the slow client is cut off"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let line = wait_for_log(&log, "slow client");
    assert!(line.contains("of 4096 bytes"), "{line}");
    // The idle one goes too, with an info line.
    assert!(closed_by_device(&mut idle));
    wait_for_log(&log, "between requests");
    assert_served(dev.addr());
}

#[test]
fn client_that_never_reads_is_closed() {
    let (dev, log) = device_with(|c| {
        c.request_timeout = Duration::from_millis(500);
    });
    crate::common::load(&dev, 1, "pattern_slot");
    let addr = dev.addr();
    let writer = std::thread::spawn(move || {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let payload = vec![3u8; 65_472 - 64];
        let mut request = header(1, payload.len(), 0xffff, Framing::Whole).to_vec();
        request.extend_from_slice(&payload);
        // Echo answers pile up unread until the device gives up.
        for _ in 0..2000 {
            if (&stream).write_all(&request).is_err() {
                return true;
            }
        }
        false
    });
    wait_for_log(&log, "took no answer");
    assert!(
        writer.join().expect("writer thread"),
        "the writer sees the close"
    );
    assert_served(dev.addr());
}

#[test]
fn unprogrammed_device_closes_with_a_log_line() {
    let log = MemoryLog::new(1000);
    let mut config = DeviceConfig::new(localhost());
    config.log = log.sink();
    let dev = Device::start_with(config).expect("starts");
    let mut stream = connect(dev.addr());
    stream
        .write_all(&header(0, 0, 0xffff, Framing::Whole))
        .expect("write");
    assert!(closed_by_device(&mut stream));
    wait_for_log(&log, "no image is programmed");
    fracflow_emulator::program(dev.addr(), &crate::common::built().set.full).expect("programs");
    assert_served(dev.addr());
}

fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn a_thousand_connections_at_once() {
    let (dev, log) = device();
    let before = rss_bytes();
    // Each holds a half-sent maximal request: the worst case per connection.
    let mut hogs = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let mut s = TcpStream::connect(dev.addr()).expect("connect");
        s.write_all(&header(0, 65_472 - 64, 0xffff, Framing::HeaderAlone))
            .and_then(|()| s.write_all(&[0u8; 1024]))
            .expect("write");
        hogs.push(s);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while dev.open_connections() < 1000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(dev.open_connections(), 1000);
    assert_served(dev.addr());
    if let (Some(before), Some(after)) = (before, rss_bytes()) {
        // 1000 x (64 KiB request + 16 KiB buffer + stack) is ~100 MB at most.
        let grown = after.saturating_sub(before);
        assert!(grown < 400 << 20, "memory grew by {grown} bytes");
    }
    drop(hogs);
    wait_for_log(&log, "truncated request");
    let deadline = Instant::now() + Duration::from_secs(20);
    while dev.open_connections() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(dev.open_connections(), 0);
    assert_served(dev.addr());
}

#[test]
fn connections_beyond_the_limit_are_refused() {
    let (dev, log) = device_with(|c| c.max_connections = 16);
    let mut first = connect(dev.addr());
    first
        .write_all(&header(0, 0, 0xffff, Framing::Whole))
        .expect("write");
    assert_eq!(crate::common::read_n(&mut first, 64), vec![0u8; 64]);
    let mut extra: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(dev.addr()).expect("connect"))
        .collect();
    // 15 more fit under the limit; the acceptor takes connections in order,
    // so the last 25 are refused, each with its own line.
    let deadline = Instant::now() + Duration::from_secs(10);
    let count = || {
        log.lines()
            .iter()
            .filter(|l| l.contains("refused: 16 connections are open"))
            .count()
    };
    while count() < 25 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(count(), 25);
    let last = extra.last_mut().expect("40 connections");
    assert!(closed_by_device(last));
    // The connection opened first keeps being served.
    first
        .write_all(&header(0, 0, 0xffff, Framing::Whole))
        .expect("write");
    assert_eq!(crate::common::read_n(&mut first, 64), vec![0u8; 64]);
    drop(extra);
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    while dev.open_connections() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_served(dev.addr());
}
