//! Client-side helpers the CLI wraps: program a device over the management
//! channel, load a partial over the controller protocol (like the artifact's
//! `reconfslots`), and probe which unit answers each slot (like `testfuncs`).
//! They return data and never print.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use fracflow_proto::{
    ControllerRequest, ControllerResponse, ErrorCode, Flags, HEADER_LEN, LINE, QueryStatus,
    ReconfOptions, RequestHeader, SLOT_COUNT, Unit, reconf_upload,
};

use crate::device::{DeviceStatus, ImageKind, management_addr};
use crate::error::{Error, Result, io_err};

/// Connect, read and write timeout of the helpers (`reconfslots -timeout`).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`probe`] waits for a slot's answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(io_err(format!("connecting to {addr}")))?;
    stream
        .set_nodelay(true)
        .and_then(|()| stream.set_read_timeout(Some(timeout)))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(io_err(format!("configuring the connection to {addr}")))?;
    Ok(stream)
}

fn mgmt_connect(addr: SocketAddr) -> Result<(TcpStream, SocketAddr)> {
    let mgmt = management_addr(addr)
        .ok_or_else(|| Error::Management(format!("{addr} has no management port above it")))?;
    match connect(mgmt, CLIENT_TIMEOUT) {
        Ok(stream) => Ok((stream, mgmt)),
        Err(e) => Err(Error::Management(format!(
            "{e} (the management channel listens on loopback at the data port + 1; run this on the device's host)"
        ))),
    }
}

fn mgmt_reply(stream: &TcpStream) -> Result<String> {
    let mut line = String::new();
    BufReader::new(stream)
        .take(1 << 20)
        .read_line(&mut line)
        .map_err(io_err("reading the management reply"))?;
    let line = line.trim_end();
    if let Some(rest) = line.strip_prefix("OK ") {
        Ok(rest.to_owned())
    } else if let Some(rest) = line.strip_prefix("ERR ") {
        Err(Error::Management(rest.to_owned()))
    } else {
        Err(Error::Management(format!("unexpected reply {line:?}")))
    }
}

/// What [`program`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramReport {
    /// What is now programmed.
    pub image: ImageKind,
    /// The image's build id (hex).
    pub build_id: String,
    /// Time from connecting to the device's answer.
    pub elapsed: Duration,
}

/// Programs the full image at `image_path` into the device whose data port
/// is `addr`, over its management channel.
pub fn program(addr: SocketAddr, image_path: &Path) -> Result<ProgramReport> {
    let image =
        std::fs::read(image_path).map_err(io_err(format!("reading {}", image_path.display())))?;
    let started = Instant::now();
    let (mut stream, mgmt) = mgmt_connect(addr)?;
    // Programming loads plugins; allow more than one timeout for big images.
    let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT * 3));
    stream
        .write_all(format!("PROGRAM {}\n", image.len()).as_bytes())
        .and_then(|()| stream.write_all(&image))
        .map_err(io_err(format!("sending the image to {mgmt}")))?;
    let reply = mgmt_reply(&stream)?;
    let mut words = reply.split_whitespace();
    let image = match words.next() {
        Some("design") => ImageKind::Design,
        Some("bypass") => ImageKind::Bypass,
        _ => return Err(Error::Management(format!("unexpected reply OK {reply}"))),
    };
    let build_id = words.next().unwrap_or("-").to_owned();
    Ok(ProgramReport {
        image,
        build_id,
        elapsed: started.elapsed(),
    })
}

/// The device's status over its management channel.
pub fn status(addr: SocketAddr) -> Result<DeviceStatus> {
    let (mut stream, mgmt) = mgmt_connect(addr)?;
    stream
        .write_all(b"STATUS\n")
        .map_err(io_err(format!("sending STATUS to {mgmt}")))?;
    let reply = mgmt_reply(&stream)?;
    serde_json::from_str(&reply)
        .map_err(|e| Error::Management(format!("unreadable status {reply:?}: {e}")))
}

/// Per-phase timing of [`load_partial`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadReport {
    /// Bytes of the partial file.
    pub bytes: usize,
    /// Its length padded to 4 bytes: the `RECONF_ICAP` size.
    pub padded_len: usize,
    /// `WRITE_HBM` requests sent.
    pub writes: usize,
    /// Time for all `WRITE_HBM` round trips.
    pub upload: Duration,
    /// Time for the `RECONF_ICAP` round trip.
    pub reconf: Duration,
    /// Time for the `QUERY_STATUS` round trip.
    pub query: Duration,
    /// The controller's state afterwards.
    pub status: QueryStatus,
}

fn round_trip(stream: &mut TcpStream, request: &ControllerRequest) -> Result<ControllerResponse> {
    stream
        .write_all(&request.encode())
        .map_err(io_err("sending a controller request"))?;
    let mut line = [0u8; LINE];
    stream
        .read_exact(&mut line)
        .map_err(io_err("reading the controller's answer"))?;
    Ok(ControllerResponse::decode(&request.command_line(), &line)?)
}

fn expect_ok(op: &'static str, response: ControllerResponse) -> Result<()> {
    match response {
        ControllerResponse::Status(ErrorCode::Ok) => Ok(()),
        ControllerResponse::Status(code) => Err(Error::Controller { op, code }),
        other => Err(Error::Protocol(format!(
            "{op} answered {other:?}, not a status line"
        ))),
    }
}

/// Loads the partial at `partial_path` into `slot` the way `reconfslots`
/// does: `WRITE_HBM` chunks of `chunk_size` bytes from `hbm_addr`, one
/// `RECONF_ICAP`, one `QUERY_STATUS`, each awaiting its answer on one
/// connection.  A non-zero status is an [`Error::Controller`].
pub fn load_partial(
    addr: SocketAddr,
    slot: u8,
    partial_path: &Path,
    chunk_size: usize,
    hbm_addr: u64,
) -> Result<LoadReport> {
    let bytes = std::fs::read(partial_path)
        .map_err(io_err(format!("reading {}", partial_path.display())))?;
    let plan = reconf_upload(
        &bytes,
        ReconfOptions {
            slot,
            hbm_addr,
            chunk_size,
            query_status: true,
        },
    )?;
    let padded_len = plan.padded_len();
    let writes = plan.write_count();
    let mut stream = connect(addr, CLIENT_TIMEOUT)?;
    let mut upload = Duration::ZERO;
    let mut reconf = Duration::ZERO;
    let mut query = Duration::ZERO;
    let mut status = None;
    for request in plan {
        let started = Instant::now();
        let response = round_trip(&mut stream, &request)?;
        let took = started.elapsed();
        match request {
            ControllerRequest::WriteHbm { .. } => {
                upload += took;
                expect_ok("WRITE_HBM", response)?;
            }
            ControllerRequest::ReconfIcap { .. } => {
                reconf = took;
                expect_ok("RECONF_ICAP", response)?;
            }
            ControllerRequest::QueryStatus => {
                query = took;
                match response {
                    ControllerResponse::Query(q) => status = Some(q),
                    other => {
                        return Err(Error::Protocol(format!("QUERY_STATUS answered {other:?}")));
                    }
                }
            }
            ControllerRequest::ReadHbm { .. } => {}
        }
    }
    let status = status.ok_or_else(|| Error::Protocol("no QUERY_STATUS answer".into()))?;
    Ok(LoadReport {
        bytes: bytes.len(),
        padded_len,
        writes,
        upload,
        reconf,
        query,
        status,
    })
}

/// What [`probe`] found in one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotProbe {
    /// The slot (= workload id).
    pub slot: u8,
    /// The unit recognised from the answer, if any.
    pub unit: Option<Unit>,
    /// How the answer was judged, e.g. `16/16 words match top_k`.
    pub detail: String,
    /// Time from sending the request to the judged answer.
    pub elapsed: Duration,
}

/// The probe's 16 data floats: distinct values in (0.05, 0.95), not sorted,
/// so that every unit answers differently.
fn probe_values() -> [f32; 16] {
    let mut out = [0f32; 16];
    for (i, v) in out.iter_mut().enumerate() {
        // 7 is coprime with 16: a fixed permutation of 0..16.
        let k = (i * 7 + 3) % 16;
        *v = 0.05 + 0.9 * (k as f32 + 0.5) / 16.0;
    }
    out
}

fn ftz(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else {
        v
    }
}

fn ulp_distance(a: f32, b: f32) -> u32 {
    if a.is_nan() || b.is_nan() || a.is_sign_negative() != b.is_sign_negative() {
        return if a == b { 0 } else { u32::MAX };
    }
    a.to_bits().abs_diff(b.to_bits())
}

/// Judges a 64-byte answer to the probe request against the units that
/// answer one line.
fn judge_line(line: &[u8], values: &[f32; 16]) -> (Option<Unit>, String) {
    let got: Vec<u32> = line
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let count = |expected: &[u32], ulps: u32| {
        got.iter()
            .zip(expected)
            .filter(|&(&g, &e)| ulp_distance(f32::from_bits(g), f32::from_bits(e)) <= ulps)
            .count()
    };
    // top_k: the words sorted descending (mask all ones: FIRST|LAST set).
    let mut top: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
    top.sort_unstable_by(|a, b| b.cmp(a));
    // log: ln(x / (1 - x)) per value.
    let logit: Vec<u32> = values
        .iter()
        .map(|&x| ftz(ftz(x / ftz(1.0 - x)).ln()).to_bits())
        .collect();
    // norm: (x - min) / (max - min).
    let lo = values.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let norm: Vec<u32> = values
        .iter()
        .map(|&x| ftz(ftz(x - lo) / ftz(hi - lo)).to_bits())
        .collect();
    let candidates = [
        (Unit::TopK, count(&top, 0)),
        (Unit::Log, count(&logit, 4)),
        (Unit::Norm, count(&norm, 1)),
    ];
    for (unit, n) in candidates {
        if n == 16 {
            return (Some(unit), format!("16/16 words match {}", unit.name()));
        }
    }
    // The CNN's ten scores leave bytes 20..64 zero; the others fill them.
    if line[20..].iter().all(|&b| b == 0) && line[..20].iter().any(|&b| b != 0) {
        return (
            Some(Unit::Cnn),
            "ten 16-bit scores, rest zero: cnn".to_owned(),
        );
    }
    let (unit, n) = candidates
        .iter()
        .copied()
        .max_by_key(|&(_, n)| n)
        .unwrap_or((Unit::TopK, 0));
    (
        None,
        format!("unrecognised; closest is {} ({n}/16 words)", unit.name()),
    )
}

fn probe_one(addr: SocketAddr, slot: u8, timeout: Duration) -> Result<SlotProbe> {
    let values = probe_values();
    let size = (HEADER_LEN + LINE) as u32;
    let header = RequestHeader::accelerator(u16::from(slot), size, Flags::FIRST_LAST).encode();
    let mut request = header.to_vec();
    for v in values {
        request.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    let mut stream = connect(addr, timeout)?;
    let started = Instant::now();
    stream
        .write_all(&request)
        .map_err(io_err(format!("sending the probe to slot {slot}")))?;
    let finish = |unit: Option<Unit>, detail: String| SlotProbe {
        slot,
        unit,
        detail,
        elapsed: started.elapsed(),
    };
    let mut first = [0u8; LINE];
    if let Err(e) = stream.read_exact(&mut first) {
        return Ok(finish(None, format!("no answer ({e})")));
    }
    let second_line = |stream: &mut TcpStream| {
        let mut line = [0u8; LINE];
        stream.read_exact(&mut line).map(|()| line)
    };
    if first == header {
        return Ok(match second_line(&mut stream) {
            Ok(line) if line[..] == request[LINE..] => finish(
                Some(Unit::Pattern),
                "header and data echoed: pattern_slot".to_owned(),
            ),
            Ok(_) => finish(None, "header echoed, data changed".to_owned()),
            Err(e) => finish(None, format!("header echoed, then nothing ({e})")),
        });
    }
    if first.iter().all(|&b| b == 0xff) {
        return Ok(match second_line(&mut stream) {
            Ok(line) if line.iter().all(|&b| b == 0xff) => {
                finish(Some(Unit::Or), "every line all ones: or_slot".to_owned())
            }
            Ok(_) => finish(None, "one all-ones line, then data".to_owned()),
            Err(e) => finish(None, format!("one all-ones line, then nothing ({e})")),
        });
    }
    let (unit, detail) = judge_line(&first, &values);
    Ok(finish(unit, detail))
}

/// Sends one known request to each slot in `slots`, each on a fresh
/// connection, and recognises the unit from its answer (top_k, log, norm,
/// cnn, pattern_slot, or_slot).  A slot that does not answer within
/// [`PROBE_TIMEOUT`] or answers something else gets `unit: None`; failing
/// to connect is an error.
pub fn probe(addr: SocketAddr, slots: &[u8]) -> Result<Vec<SlotProbe>> {
    probe_with_timeout(addr, slots, PROBE_TIMEOUT)
}

/// [`probe`] with another answer timeout.
pub fn probe_with_timeout(
    addr: SocketAddr,
    slots: &[u8],
    timeout: Duration,
) -> Result<Vec<SlotProbe>> {
    slots
        .iter()
        .map(|&slot| {
            if slot >= SLOT_COUNT {
                return Err(Error::Proto(fracflow_proto::ProtoError::Slot { slot }));
            }
            probe_one(addr, slot, timeout)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_values_are_distinct_and_in_range() {
        let v = probe_values();
        for (i, a) in v.iter().enumerate() {
            assert!(*a > 0.05 && *a < 0.95);
            for b in &v[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn judge_recognises_top_k() {
        let v = probe_values();
        let mut words: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
        words.sort_unstable_by(|a, b| b.cmp(a));
        let line: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(judge_line(&line, &v).0, Some(Unit::TopK));
        let mut cnn = vec![0u8; 64];
        cnn[0] = 5;
        assert_eq!(judge_line(&cnn, &v).0, Some(Unit::Cnn));
        assert_eq!(judge_line(&[0u8; 64], &v).0, None);
    }
}
