//! Shared fixtures: the compiled design, a programmed device, tiny servers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::Duration;

use fracflow_client::ClientConfig;
use fracflow_emulator::{BitstreamSet, Device, DeviceConfig, RunningDevice, build_design};

/// The design built from `hw/` once per test binary.
pub fn built() -> &'static BitstreamSet {
    static BUILT: OnceLock<BitstreamSet> = OnceLock::new();
    BUILT.get_or_init(|| {
        let hw = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hw");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("client-hw-build");
        let _ = std::fs::remove_dir_all(&dir);
        let cxx = std::env::var_os("CXX").map_or_else(|| PathBuf::from("g++"), PathBuf::from);
        let (_, _, set) = build_design(&hw, &dir, &cxx).expect("the accelerators build");
        set
    })
}

/// A device on 127.0.0.1:0 programmed with the full image (top_k in every
/// slot), then `units` loaded as `(slot, unit)`.
pub fn device(units: &[(u8, &str)]) -> RunningDevice {
    let set = built();
    let mut config = DeviceConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.image = Some(set.full.clone());
    let dev = Device::start_with(config).expect("device starts");
    for (slot, unit) in units {
        let partial = set
            .partials
            .iter()
            .find(|p| p.cell == *slot && p.unit == *unit)
            .unwrap_or_else(|| panic!("no partial of {unit} for slot {slot}"));
        fracflow_emulator::load_partial(dev.addr(), *slot, &partial.path, 256, 0x1000_4000)
            .unwrap_or_else(|e| panic!("loading {unit} into slot {slot}: {e}"));
    }
    dev
}

/// fperf-style arguments for `addr`, then `rest`.
pub fn config(addr: SocketAddr, rest: &str) -> ClientConfig {
    let mut args: Vec<String> = vec![
        "-c".into(),
        addr.ip().to_string(),
        "-p".into(),
        addr.port().to_string(),
        "-t".into(),
        "rr".into(),
    ];
    args.extend(rest.split_whitespace().map(str::to_owned));
    ClientConfig::from_fperf_args(&args).expect("valid arguments")
}

/// What the tiny server does after `answers` answered requests.
#[derive(Debug, Clone, Copy)]
pub enum Then {
    /// Close the connection.
    Close,
    /// Keep reading, never answer (until the client goes away).
    Hang,
}

/// A tiny server: reads `req`-byte requests and answers `resp` bytes, for
/// `answers` requests per connection, then does `then`.  Accepts up to
/// `max_conns` connections; each is served on its own thread, bounded by a
/// 30-s read timeout.
pub fn tiny_server(
    answers: usize,
    req: usize,
    resp: usize,
    then: Then,
    max_conns: usize,
) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handle = std::thread::spawn(move || {
        let mut served = Vec::new();
        for stream in listener.incoming().take(max_conns) {
            let Ok(mut stream) = stream else { break };
            served.push(std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                let mut buf = vec![0u8; req];
                let answer = vec![0x5au8; resp];
                for _ in 0..answers {
                    if stream.read_exact(&mut buf).is_err() || stream.write_all(&answer).is_err() {
                        return;
                    }
                }
                match then {
                    Then::Close => {}
                    Then::Hang => {
                        let mut sink = [0u8; 4096];
                        while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
                    }
                }
            }));
        }
        for s in served {
            let _ = s.join();
        }
    });
    (addr, handle)
}
