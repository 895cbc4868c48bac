//! The management channel, the JTAG stand-in: a line protocol on a loopback
//! port (data port + 1).
//!
//! ```text
//! PROGRAM <len>\n<len bytes of a full image>   ->  OK <kind> <build id>\n
//! STATUS\n                                     ->  OK <status JSON on one line>\n
//! anything else, or a failure                  ->  ERR <message>\n
//! ```
//!
//! `<kind>` is `design` or `bypass`.  Several commands may share a
//! connection; an unknown command or a malformed line closes it.  Peers that
//! are not loopback addresses are refused.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use super::{ConnInfo, MAX_IMAGE_BYTES, Shared};
use crate::log::Level;

/// Longest command line, newline included.
const MAX_LINE: u64 = 256;

pub(super) fn serve(stream: TcpStream, conn: ConnInfo, shared: &Shared) {
    if !conn.peer.is_some_and(|p| p.ip().is_loopback()) {
        shared.log(
            Level::Warn,
            Some(conn),
            "management channel refused: the peer is not a loopback address",
        );
        let _ = (&stream).write_all(b"ERR the management channel is loopback only\n");
        return;
    }
    if stream
        .set_read_timeout(Some(shared.request_timeout))
        .is_err()
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
    let mut reader = BufReader::new(&stream);
    let mut writer = &stream;
    loop {
        let mut line = Vec::new();
        match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) if line.last() != Some(&b'\n') => {
                let why = if line.len() as u64 >= MAX_LINE {
                    "command line too long"
                } else {
                    "connection closed inside a command line"
                };
                refuse(&mut writer, conn, shared, why);
                return;
            }
            Ok(_) => {}
            Err(e) => {
                shared.log(
                    Level::Info,
                    Some(conn),
                    format!("management connection closed ({e})"),
                );
                return;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let mut words = text.split_whitespace();
        let reply = match (words.next(), words.next(), words.next()) {
            (Some("PROGRAM"), Some(len), None) => match len.parse::<usize>() {
                Ok(len) if len > 0 && len <= MAX_IMAGE_BYTES => {
                    match read_image(&mut reader, len) {
                        Ok(image) => match shared.program(&image) {
                            Ok(status) => format!(
                                "OK {} {}\n",
                                status.image.as_str(),
                                status.build_id.as_deref().unwrap_or("-")
                            ),
                            Err(e) => {
                                shared.log(
                                    Level::Warn,
                                    Some(conn),
                                    format!("PROGRAM refused: {e}"),
                                );
                                format!("ERR {}\n", one_line(&e.to_string()))
                            }
                        },
                        Err(e) => {
                            refuse(
                                &mut writer,
                                conn,
                                shared,
                                &format!("image of {len} bytes not received ({e})"),
                            );
                            return;
                        }
                    }
                }
                _ => {
                    refuse(
                        &mut writer,
                        conn,
                        shared,
                        &format!("PROGRAM length must be 1..={MAX_IMAGE_BYTES} bytes"),
                    );
                    return;
                }
            },
            (Some("STATUS"), None, None) => match serde_json::to_string(&shared.status()) {
                Ok(json) => format!("OK {json}\n"),
                Err(e) => format!("ERR {e}\n"),
            },
            _ => {
                refuse(
                    &mut writer,
                    conn,
                    shared,
                    &format!("unknown command {:?}", one_line(text.trim_end())),
                );
                return;
            }
        };
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn read_image(reader: &mut impl Read, len: usize) -> io::Result<Vec<u8>> {
    let mut image = Vec::new();
    // Grow as bytes arrive rather than trusting the announced length.
    reader.take(len as u64).read_to_end(&mut image)?;
    if image.len() != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("only {} bytes arrived", image.len()),
        ));
    }
    Ok(image)
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

fn refuse(writer: &mut &TcpStream, conn: ConnInfo, shared: &Shared, why: &str) {
    shared.log(
        Level::Warn,
        Some(conn),
        format!("management command refused: {why}; closing"),
    );
    let _ = writer.write_all(format!("ERR {}\n", one_line(why)).as_bytes());
}
