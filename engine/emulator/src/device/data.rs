//! One data connection: reassembles requests from the byte stream, routes
//! them to a slot's kernel or to the controller, and writes the answers.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fracflow_proto::{HEADER_LEN, Reassembler, RequestHeader, Route};

use super::state::{ControllerOutcome, Programmed};
use super::{ConnInfo, Shared};
use crate::kernel::KernelError;
use crate::log::Level;

/// Bytes read per `read` call.
const READ_BUF: usize = 16 << 10;

/// Whether to keep the connection.
enum Next {
    Continue,
    Close,
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Explains a read that ended the connection.
fn closed_by_peer_or_device(shared: &Shared, kicked: &AtomicBool) -> &'static str {
    if shared.stopping.load(Ordering::SeqCst) {
        "the device is stopping"
    } else if kicked.load(Ordering::SeqCst) {
        "the device was reprogrammed"
    } else {
        "the client closed the connection"
    }
}

pub(super) fn serve(mut stream: TcpStream, conn: ConnInfo, shared: &Shared, kicked: &AtomicBool) {
    let programmed = shared.current();
    // Small answers must leave at once, not wait for Nagle.
    let _ = stream.set_nodelay(true);
    if stream.set_read_timeout(Some(shared.tick())).is_err()
        || stream
            .set_write_timeout(Some(shared.request_timeout))
            .is_err()
    {
        shared.log(
            Level::Error,
            Some(conn),
            "cannot set socket timeouts; closing",
        );
        return;
    }
    match &*programmed {
        Programmed::Bypass => bypass(&mut stream, conn, shared, kicked),
        _ => requests(&mut stream, conn, shared, &programmed, kicked),
    }
}

/// The bypass image: the network layer echoes every byte as it arrives.
fn bypass(stream: &mut TcpStream, conn: ConnInfo, shared: &Shared, kicked: &AtomicBool) {
    let mut buf = vec![0u8; READ_BUF];
    let mut last = Instant::now();
    loop {
        match stream.read(&mut buf) {
            Ok(0) => {
                let why = closed_by_peer_or_device(shared, kicked);
                shared.log(Level::Info, Some(conn), format!("closed: {why}"));
                return;
            }
            Ok(n) => {
                last = Instant::now();
                if let Err(e) = stream.write_all(&buf[..n]) {
                    shared.log(
                        Level::Warn,
                        Some(conn),
                        format!("bypass echo failed ({e}); closing"),
                    );
                    return;
                }
            }
            Err(e) if is_timeout(&e) => {
                if last.elapsed() > shared.idle_timeout {
                    shared.log(
                        Level::Info,
                        Some(conn),
                        format!("idle for {:?}; closing", shared.idle_timeout),
                    );
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let why = closed_by_peer_or_device(shared, kicked);
                shared.log(Level::Info, Some(conn), format!("closed: {why} ({e})"));
                return;
            }
        }
    }
}

/// Per-connection buffers reused across requests.
struct Buffers {
    request: Vec<u8>,
    response: Vec<u8>,
}

fn requests(
    stream: &mut TcpStream,
    conn: ConnInfo,
    shared: &Shared,
    programmed: &Programmed,
    kicked: &AtomicBool,
) {
    let mut reassembler = Reassembler::new();
    let mut buf = vec![0u8; READ_BUF];
    let mut bufs = Buffers {
        request: Vec::new(),
        response: Vec::new(),
    };
    let mut last_activity = Instant::now();
    // When the request now being collected sent its first byte.
    let mut request_started: Option<Instant> = None;
    loop {
        let read = stream.read(&mut buf);
        let now = Instant::now();
        let n = match read {
            Ok(0) => {
                if reassembler.is_idle() {
                    let why = closed_by_peer_or_device(shared, kicked);
                    shared.log(Level::Info, Some(conn), format!("closed: {why}"));
                } else {
                    let want = reassembler
                        .current_header()
                        .map_or(HEADER_LEN as u64, |h| h.wire_size());
                    shared.log(
                        Level::Warn,
                        Some(conn),
                        format!(
                            "truncated request: {} of {want} bytes arrived before the connection closed ({}); dropped",
                            reassembler.buffered(),
                            closed_by_peer_or_device(shared, kicked)
                        ),
                    );
                }
                return;
            }
            Ok(n) => n,
            Err(e) if is_timeout(&e) => 0,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let why = closed_by_peer_or_device(shared, kicked);
                let held = if reassembler.is_idle() {
                    String::new()
                } else {
                    format!(" with {} bytes of a request held", reassembler.buffered())
                };
                shared.log(
                    Level::Info,
                    Some(conn),
                    format!("closed: {why}{held} ({e})"),
                );
                return;
            }
        };
        let mut input = &buf[..n];
        while !input.is_empty() {
            // Fast path: a whole request at the start of what was read is
            // served straight from the read buffer.  It applies the same
            // header check as the reassembler, which is idle here, so the
            // outcome is the same minus two copies of the request.
            if reassembler.is_idle()
                && let Some(line) = input.first_chunk::<HEADER_LEN>()
                && let Ok(header) = RequestHeader::decode(line)
                && let Some(whole) = usize::try_from(header.wire_size())
                    .ok()
                    .and_then(|len| input.get(..len))
            {
                input = &input[whole.len()..];
                request_started = None;
                if let Next::Close =
                    dispatch(stream, conn, shared, programmed, &header, whole, &mut bufs)
                {
                    return;
                }
                continue;
            }
            let (used, outcome) = reassembler.advance(input);
            input = &input[used..];
            match outcome {
                None => {}
                Some(Err(e)) => {
                    shared.log(
                        Level::Warn,
                        Some(conn),
                        format!("bad request header: {e}; closing the connection"),
                    );
                    return;
                }
                Some(Ok(request)) => {
                    request_started = None;
                    // Kernels take the request as the slot sees it: header
                    // line first, then the data, contiguous.
                    let mut whole = std::mem::take(&mut bufs.request);
                    whole.clear();
                    whole.extend_from_slice(&request.header.encode());
                    whole.extend_from_slice(&request.payload);
                    let next = dispatch(
                        stream,
                        conn,
                        shared,
                        programmed,
                        &request.header,
                        &whole,
                        &mut bufs,
                    );
                    bufs.request = whole;
                    if let Next::Close = next {
                        return;
                    }
                }
            }
        }
        if n > 0 {
            // Taken after the dispatches above: time the device spent
            // computing and writing answers does not count against the
            // client's next request.
            let after = Instant::now();
            last_activity = after;
            if reassembler.is_idle() {
                request_started = None;
            } else if request_started.is_none() {
                request_started = Some(after);
            }
        }
        if let Some(started) = request_started {
            if now.duration_since(started) > shared.request_timeout {
                shared.log(
                    Level::Warn,
                    Some(conn),
                    format!(
                        "slow client: request still incomplete after {} ({} of {} bytes); closing",
                        fmt_duration(shared.request_timeout),
                        reassembler.buffered(),
                        reassembler
                            .current_header()
                            .map_or(HEADER_LEN as u64, |h| h.wire_size())
                    ),
                );
                return;
            }
        } else if now.duration_since(last_activity) > shared.idle_timeout {
            shared.log(
                Level::Info,
                Some(conn),
                format!(
                    "idle for {} between requests; closing",
                    fmt_duration(shared.idle_timeout)
                ),
            );
            return;
        }
    }
}

fn fmt_duration(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

fn send(stream: &mut TcpStream, conn: ConnInfo, shared: &Shared, bytes: &[u8]) -> Next {
    match stream.write_all(bytes) {
        Ok(()) => Next::Continue,
        Err(e) if is_timeout(&e) => {
            shared.log(
                Level::Warn,
                Some(conn),
                format!(
                    "client took no answer for {}; closing",
                    fmt_duration(shared.request_timeout)
                ),
            );
            Next::Close
        }
        Err(e) => {
            shared.log(
                Level::Info,
                Some(conn),
                format!("answer not delivered ({e}); closing"),
            );
            Next::Close
        }
    }
}

/// Serves one complete request; `whole` is its header line and body.
fn dispatch(
    stream: &mut TcpStream,
    conn: ConnInfo,
    shared: &Shared,
    programmed: &Programmed,
    header: &RequestHeader,
    whole: &[u8],
    bufs: &mut Buffers,
) -> Next {
    let design = match programmed {
        Programmed::Design(design) => design,
        Programmed::Empty => {
            shared.log(
                Level::Warn,
                Some(conn),
                format!(
                    "request for {:?} but no image is programmed; closing the connection",
                    header.route()
                ),
            );
            return Next::Close;
        }
        // Bypass connections never reach the request path.
        Programmed::Bypass => return Next::Close,
    };
    match header.route() {
        Route::Controller => match design.controller(header, &whole[HEADER_LEN..], &shared.plugins)
        {
            ControllerOutcome::Answer { line, note, info } => {
                if let Some(note) = note {
                    shared.log(Level::Warn, Some(conn), note);
                }
                if let Some(info) = info {
                    shared.log(Level::Info, Some(conn), info);
                }
                send(stream, conn, shared, &line)
            }
            ControllerOutcome::Close(why) => {
                shared.log(Level::Warn, Some(conn), format!("{why}; closing"));
                Next::Close
            }
        },
        Route::Slot(slot) => {
            let Some(entry) = design.slot(slot) else {
                shared.log(
                    Level::Warn,
                    Some(conn),
                    format!("the design has no cell for slot {slot}; closing the connection"),
                );
                return Next::Close;
            };
            match entry
                .kernel
                .run_into(whole, header.top_config, &mut bufs.response)
            {
                // log and norm answer a header-only request with nothing.
                Ok(()) if bufs.response.is_empty() => Next::Continue,
                Ok(()) => send(stream, conn, shared, &bufs.response),
                Err(e @ KernelError::NoAnswer { .. }) => {
                    shared.log(
                        Level::Warn,
                        Some(conn),
                        format!(
                            "slot {slot}: {e} (the board's slot would hang until reloaded); closing the connection"
                        ),
                    );
                    Next::Close
                }
                Err(e) => {
                    shared.log(
                        Level::Error,
                        Some(conn),
                        format!("slot {slot}: {e}; closing the connection"),
                    );
                    Next::Close
                }
            }
        }
    }
}
