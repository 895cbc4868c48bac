//! The emulated fRAC device: one TCP port for accelerator and controller
//! requests, and a loopback-only management channel (the JTAG stand-in).
//!
//! See the crate documentation for the behaviour and where it departs from
//! the board.
//!
//! # Management channel
//!
//! It listens on a loopback address at the data port + 1 (the data address
//! itself if that is loopback, else `127.0.0.1` / `::1`) and refuses peers
//! that are not loopback.  A line protocol, several commands per connection:
//!
//! ```text
//! PROGRAM <len>\n<len bytes of a full image>  ->  OK <design|bypass> <build id hex>\n
//! STATUS\n                                    ->  OK <DeviceStatus as one-line JSON>\n
//! failure                                     ->  ERR <message>\n
//! ```
//!
//! `<len>` is 1..=[`MAX_IMAGE_BYTES`].  Programming decodes and verifies the
//! image, loads the first RM of every cell, resets the controller and HBM
//! and closes every data connection.  A failed `PROGRAM` leaves the device
//! as it was and keeps the connection; an unknown command or a malformed
//! line answers `ERR` and closes it.  Every command line is at most 256
//! bytes; a silent connection is closed after `request_timeout`.

mod conns;
mod data;
mod mgmt;
mod state;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, io_err};
use crate::log::{Level, LogEvent, LogSink, discard};
use conns::{ConnGuard, ConnTable};
use state::{PluginStore, Programmed};

/// Default bound on concurrent data connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default time a connection may sit between requests without sending a byte.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default time a started request (or management command) has to arrive
/// whole, and a response to be taken by the client.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Default emulated HBM budget (the staging area of the partials; ours are
/// ~100 KB, the board's 3-10 MB).
pub const DEFAULT_HBM_BUDGET: usize = 256 << 20;
/// Concurrent management connections.
pub const MAX_MANAGEMENT_CONNECTIONS: usize = 8;
/// Largest full image the management channel accepts.
pub const MAX_IMAGE_BYTES: usize = 256 << 20;

/// Stack of a connection thread: the kernels keep their working memory on
/// the heap, so a small stack keeps 1024 threads cheap.
const CONN_STACK: usize = 256 << 10;

/// How the device is run.
#[derive(Clone)]
pub struct DeviceConfig {
    /// Data port address; port 0 picks one.  The management channel listens
    /// on the loopback address at the data port + 1.
    pub listen: SocketAddr,
    /// Full image to program at start (else the device starts unprogrammed).
    pub image: Option<PathBuf>,
    /// Concurrent data connections; extra ones are accepted and closed at
    /// once with a log line.
    pub max_connections: usize,
    /// A connection silent this long between requests is closed.
    pub idle_timeout: Duration,
    /// A request must arrive whole within this time of its first byte, and
    /// a response must be taken within it (slow clients are closed).
    pub request_timeout: Duration,
    /// Bytes of emulated HBM; writes beyond it answer `ERR_AXI_BRESP`.
    pub hbm_budget: usize,
    /// Where log lines go.
    pub log: LogSink,
    /// The emulated device, or a board double that takes Xilinx-framed fixtures and ignores a partial of
    /// another build as the board does.
    pub fidelity: crate::image::Fidelity,
}

impl std::fmt::Debug for DeviceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceConfig")
            .field("listen", &self.listen)
            .field("image", &self.image)
            .field("max_connections", &self.max_connections)
            .field("idle_timeout", &self.idle_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("hbm_budget", &self.hbm_budget)
            .field("fidelity", &self.fidelity)
            .finish_non_exhaustive()
    }
}

impl DeviceConfig {
    /// Defaults: no image, 1024 connections, 300 s idle, 10 s per request,
    /// 256 MiB of HBM, log discarded.
    #[must_use]
    pub fn new(listen: SocketAddr) -> DeviceConfig {
        DeviceConfig {
            listen,
            image: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            hbm_budget: DEFAULT_HBM_BUDGET,
            log: discard(),
            fidelity: crate::image::Fidelity::Emulated,
        }
    }
}

/// What is programmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
    /// Nothing yet.
    Empty,
    /// The bypass image.
    Bypass,
    /// An fRAC design.
    Design,
}

impl ImageKind {
    /// `empty`, `bypass` or `design`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ImageKind::Empty => "empty",
            ImageKind::Bypass => "bypass",
            ImageKind::Design => "design",
        }
    }
}

/// A slot's module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotStatus {
    /// Slot id.
    pub slot: u8,
    /// RM id of the module.
    pub rm_id: u32,
    /// Its unit.
    pub unit: String,
}

/// The device's state as the management channel reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStatus {
    /// What is programmed.
    pub image: ImageKind,
    /// Its build id (hex), if any.
    pub build_id: Option<String>,
    /// Occupied slots.
    pub slots: Vec<SlotStatus>,
}

/// The address the management channel of a device whose data port is
/// `data` listens on: the data port + 1 on a loopback address (the data
/// address itself if it is loopback).  `None` for port 65535.
#[must_use]
pub fn management_addr(data: SocketAddr) -> Option<SocketAddr> {
    let port = data.port().checked_add(1)?;
    let ip = match data.ip() {
        ip if ip.is_loopback() => ip,
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    };
    Some(SocketAddr::new(ip, port))
}

/// Identifies one connection in log lines.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnInfo {
    pub id: u64,
    pub peer: Option<SocketAddr>,
}

/// State shared by the acceptors and the connection threads.
pub(crate) struct Shared {
    pub idle_timeout: Duration,
    pub request_timeout: Duration,
    hbm_budget: usize,
    fidelity: crate::image::Fidelity,
    log: LogSink,
    state: RwLock<Arc<Programmed>>,
    program_lock: Mutex<()>,
    pub plugins: Mutex<PluginStore>,
    pub data_conns: Arc<ConnTable>,
    pub mgmt_conns: Arc<ConnTable>,
    next_id: AtomicU64,
    pub stopping: AtomicBool,
}

impl Shared {
    pub fn log(&self, level: Level, conn: Option<ConnInfo>, message: impl Into<String>) {
        (self.log)(&LogEvent {
            level,
            conn: conn.map(|c| c.id),
            peer: conn.and_then(|c| c.peer),
            message: message.into(),
        });
    }

    /// The programmed image.
    pub fn current(&self) -> Arc<Programmed> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        Arc::clone(&state)
    }

    /// Read-timeout granularity: deadlines are checked at least this often.
    pub fn tick(&self) -> Duration {
        (self.request_timeout.min(self.idle_timeout) / 4).max(Duration::from_millis(1))
    }

    /// Programs a full image: every slot gets its cell's first RM, the
    /// controller and HBM are reset, and every data connection is closed
    /// (as the board's network stack restarts).
    pub fn program(&self, image: &[u8]) -> Result<DeviceStatus> {
        let _serialised = self.program_lock.lock().unwrap_or_else(|e| e.into_inner());
        let programmed = state::load_image(image, &self.plugins, self.hbm_budget, self.fidelity)?;
        {
            let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
            *state = Arc::new(programmed);
        }
        let closed = self.data_conns.close_all();
        let status = self.status();
        self.log(
            Level::Info,
            None,
            format!(
                "programmed {} image {}; {} slot(s): {}; closed {closed} data connection(s)",
                status.image.as_str(),
                status
                    .build_id
                    .as_deref()
                    .map_or("-", |b| &b[..12.min(b.len())]),
                status.slots.len(),
                status
                    .slots
                    .iter()
                    .map(|s| format!("{}={}", s.slot, s.unit))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        );
        Ok(status)
    }

    pub fn status(&self) -> DeviceStatus {
        let state = self.current();
        match &*state {
            Programmed::Empty => DeviceStatus {
                image: ImageKind::Empty,
                build_id: None,
                slots: Vec::new(),
            },
            Programmed::Bypass => DeviceStatus {
                image: ImageKind::Bypass,
                build_id: Some(crate::image::FullImage::bypass_build_id().to_hex()),
                slots: Vec::new(),
            },
            Programmed::Design(design) => DeviceStatus {
                image: ImageKind::Design,
                build_id: Some(design.build_id.to_hex()),
                slots: design
                    .occupancy()
                    .into_iter()
                    .enumerate()
                    .filter_map(|(slot, s)| {
                        s.map(|(rm_id, unit)| SlotStatus {
                            slot: u8::try_from(slot).unwrap_or(u8::MAX),
                            rm_id,
                            unit: unit.to_owned(),
                        })
                    })
                    .collect(),
            },
        }
    }
}

/// Starts devices.
#[derive(Debug)]
pub struct Device;

/// A device serving on its own threads; stopped by [`RunningDevice::stop`]
/// or on drop.
pub struct RunningDevice {
    addr: SocketAddr,
    mgmt_addr: SocketAddr,
    shared: Arc<Shared>,
    acceptors: Vec<(SocketAddr, JoinHandle<()>)>,
}

impl std::fmt::Debug for RunningDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningDevice")
            .field("addr", &self.addr)
            .field("mgmt_addr", &self.mgmt_addr)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy)]
enum Channel {
    Data,
    Management,
}

fn bind_pair(listen: SocketAddr) -> Result<(TcpListener, TcpListener)> {
    // With port 0 the data port is the kernel's choice and its neighbour may
    // be taken; try a few choices.  A fixed port gets one attempt.
    let attempts = if listen.port() == 0 { 32 } else { 1 };
    let mut last = None;
    for _ in 0..attempts {
        let data = TcpListener::bind(listen).map_err(io_err(format!("binding {listen}")))?;
        let addr = data
            .local_addr()
            .map_err(io_err("reading the bound address"))?;
        let Some(mgmt) = management_addr(addr) else {
            last = Some(Error::Io {
                context: format!("binding the management channel above {addr}"),
                source: io::Error::new(io::ErrorKind::AddrNotAvailable, "no port above 65535"),
            });
            continue;
        };
        match TcpListener::bind(mgmt) {
            Ok(m) => return Ok((data, m)),
            Err(e) => {
                last = Some(io_err(format!(
                    "binding the management channel on {mgmt} (data port + 1)"
                ))(e));
            }
        }
    }
    Err(last.unwrap_or_else(|| Error::Management("no port pair found".into())))
}

impl Device {
    /// Starts a device on `listen` (port 0 picks one), programmed with
    /// `image` if given, with the default limits and no log output.
    pub fn start(listen: SocketAddr, image: Option<&Path>) -> Result<RunningDevice> {
        let mut config = DeviceConfig::new(listen);
        config.image = image.map(Path::to_path_buf);
        Device::start_with(config)
    }

    /// Starts a device with `config`.
    pub fn start_with(config: DeviceConfig) -> Result<RunningDevice> {
        let plugins = PluginStore::default();
        let (data, mgmt) = bind_pair(config.listen)?;
        let addr = data
            .local_addr()
            .map_err(io_err("reading the data address"))?;
        let mgmt_addr = mgmt
            .local_addr()
            .map_err(io_err("reading the management address"))?;
        let shared = Arc::new(Shared {
            idle_timeout: config.idle_timeout,
            request_timeout: config.request_timeout,
            hbm_budget: config.hbm_budget,
            fidelity: config.fidelity,
            log: config.log.clone(),
            state: RwLock::new(Arc::new(Programmed::Empty)),
            program_lock: Mutex::new(()),
            plugins: Mutex::new(plugins),
            data_conns: Arc::new(ConnTable::new(config.max_connections.max(1))),
            mgmt_conns: Arc::new(ConnTable::new(MAX_MANAGEMENT_CONNECTIONS)),
            next_id: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
        });
        if let Some(image) = &config.image {
            let bytes =
                std::fs::read(image).map_err(io_err(format!("reading {}", image.display())))?;
            shared.program(&bytes)?;
        }
        let mut acceptors = Vec::new();
        for (listener, channel, at) in [
            (data, Channel::Data, addr),
            (mgmt, Channel::Management, mgmt_addr),
        ] {
            let shared2 = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(match channel {
                    Channel::Data => "frac-accept".into(),
                    Channel::Management => "frac-mgmt-accept".into(),
                })
                .spawn(move || accept_loop(&listener, &shared2, channel))
                .map_err(io_err("starting an accept thread"))?;
            acceptors.push((at, handle));
        }
        shared.log(
            Level::Info,
            None,
            format!("listening on {addr}; management channel on {mgmt_addr}"),
        );
        Ok(RunningDevice {
            addr,
            mgmt_addr,
            shared,
            acceptors,
        })
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, channel: Channel) {
    for incoming in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match incoming {
            Ok(stream) => stream,
            Err(e) => {
                shared.log(Level::Error, None, format!("accept failed: {e}"));
                // Out of file descriptors or similar: back off briefly
                // instead of spinning on the same error.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = ConnInfo {
            id,
            peer: stream.peer_addr().ok(),
        };
        let table = match channel {
            Channel::Data => Arc::clone(&shared.data_conns),
            Channel::Management => Arc::clone(&shared.mgmt_conns),
        };
        let registered = match stream.try_clone() {
            Ok(clone) => table.try_register(id, clone),
            Err(e) => {
                shared.log(
                    Level::Error,
                    Some(conn),
                    format!("cannot clone socket: {e}"),
                );
                continue;
            }
        };
        let Some(kicked) = registered else {
            shared.log(
                Level::Warn,
                Some(conn),
                format!(
                    "refused: {} connections are open, the limit; closing this one",
                    table.limit()
                ),
            );
            continue;
        };
        let worker = Arc::clone(shared);
        let guard_table = Arc::clone(&table);
        let spawned = std::thread::Builder::new()
            .name(format!("frac-conn-{id}"))
            .stack_size(CONN_STACK)
            .spawn(move || {
                let _guard = ConnGuard {
                    table: guard_table,
                    id,
                };
                match channel {
                    Channel::Data => data::serve(stream, conn, &worker, &kicked),
                    Channel::Management => mgmt::serve(stream, conn, &worker),
                }
            });
        match spawned {
            Ok(handle) => table.set_handle(id, handle),
            Err(e) => {
                table.remove(id);
                shared.log(
                    Level::Error,
                    Some(conn),
                    format!("cannot start a connection thread ({e}); closing"),
                );
            }
        }
    }
}

impl RunningDevice {
    /// The data (accelerator + controller) address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The management channel's address (loopback, data port + 1).
    #[must_use]
    pub fn management_addr(&self) -> SocketAddr {
        self.mgmt_addr
    }

    /// What is programmed and which module each slot holds.
    #[must_use]
    pub fn status(&self) -> DeviceStatus {
        self.shared.status()
    }

    /// Programs a full image in-process, as the management channel does.
    pub fn program(&self, image: &[u8]) -> Result<DeviceStatus> {
        self.shared.program(image)
    }

    /// Open data connections.
    #[must_use]
    pub fn open_connections(&self) -> usize {
        self.shared.data_conns.len()
    }

    /// Stops accepting, closes every connection and joins every thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.shared.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        for (at, handle) in self.acceptors.drain(..) {
            // Wake the blocking accept with a connection of our own; if that
            // fails the thread is left behind rather than joined forever.
            let wake = SocketAddr::new(
                if at.ip().is_unspecified() {
                    match at.ip() {
                        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
                    }
                } else {
                    at.ip()
                },
                at.port(),
            );
            if TcpStream::connect_timeout(&wake, Duration::from_secs(2)).is_ok() {
                let _ = handle.join();
            }
        }
        self.shared.data_conns.close_and_join();
        self.shared.mgmt_conns.close_and_join();
        self.shared.log(Level::Info, None, "stopped");
    }
}

impl Drop for RunningDevice {
    fn drop(&mut self) {
        self.shutdown();
    }
}
