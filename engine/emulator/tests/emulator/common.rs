//! Shared fixtures: the compiled design, devices, framing helpers.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fracflow_emulator::{
    BitstreamSet, CompiledUnit, DesignManifest, Device, DeviceConfig, MemoryLog, RunningDevice,
    build_design,
};
use fracflow_proto::{Flags, HEADER_LEN, RequestHeader};

/// The repository's `hw/` directory.
pub fn hw_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hw")
}

/// The C++ compiler the tests use.
pub fn compiler() -> PathBuf {
    std::env::var_os("CXX").map_or_else(|| PathBuf::from("g++"), PathBuf::from)
}

/// The design built from `hw/` once per test binary.
#[derive(Debug)]
pub struct Built {
    pub dir: PathBuf,
    pub units: Vec<CompiledUnit>,
    pub design: DesignManifest,
    pub set: BitstreamSet,
}

pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        // A fixed directory under cargo's per-target temp dir, rebuilt on
        // every run, so nothing accumulates in /tmp.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("emulator-hw-build");
        let _ = std::fs::remove_dir_all(&dir);
        let (units, design, set) =
            build_design(&hw_dir(), &dir, &compiler()).expect("the accelerators build");
        Built {
            dir,
            units,
            design,
            set,
        }
    })
}

/// The partial of `unit` for `slot` in the shared build.
pub fn partial(slot: u8, unit: &str) -> PathBuf {
    built()
        .set
        .partials
        .iter()
        .find(|p| p.cell == slot && p.unit == unit)
        .unwrap_or_else(|| panic!("no partial of {unit} for slot {slot}"))
        .path
        .clone()
}

pub fn localhost() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A device programmed with the shared full image; `tune` adjusts the config.
pub fn device_with(tune: impl FnOnce(&mut DeviceConfig)) -> (RunningDevice, Arc<MemoryLog>) {
    let log = MemoryLog::new(20_000);
    let mut config = DeviceConfig::new(localhost());
    config.image = Some(built().set.full.clone());
    config.log = log.sink();
    tune(&mut config);
    (Device::start_with(config).expect("device starts"), log)
}

pub fn device() -> (RunningDevice, Arc<MemoryLog>) {
    device_with(|_| {})
}

/// Loads `unit`'s partial into `slot`.
pub fn load(dev: &RunningDevice, slot: u8, unit: &str) {
    fracflow_emulator::load_partial(dev.addr(), slot, &partial(slot, unit), 256, 0x1000_4000)
        .unwrap_or_else(|e| panic!("loading {unit} into slot {slot}: {e}"));
}

/// Waits (bounded) until a log line contains `needle`; returns it.
pub fn wait_for_log(log: &MemoryLog, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(line) = log.lines().into_iter().find(|l| l.contains(needle)) {
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "no log line contains {needle:?}; log:\n{}",
            log.lines().join("\n")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connects");
    stream.set_nodelay(true).expect("nodelay");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    stream
        .set_write_timeout(Some(Duration::from_secs(20)))
        .expect("write timeout");
    stream
}

/// How a request is cut into writes (checkfuncs' three framings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// The header alone (`FIRST`), then the data in 1 KiB pieces.
    HeaderAlone,
    /// Header with the first data (`FIRST`), the rest in 1 KiB pieces.
    HeaderWithFirst,
    /// One write (`FIRST|LAST`).
    Whole,
}

pub const FRAMINGS: [Framing; 3] = [
    Framing::HeaderAlone,
    Framing::HeaderWithFirst,
    Framing::Whole,
];

/// The header line for `workload` and `payload_len` bytes of data, top config
/// `top` with the framing's flags in bits 1:0.
pub fn header(workload: u16, payload_len: usize, top: u16, framing: Framing) -> [u8; 64] {
    let flags = if framing == Framing::Whole {
        Flags::FIRST_LAST
    } else {
        Flags::FIRST
    };
    RequestHeader {
        declared_size: u32::try_from(HEADER_LEN + payload_len).expect("fits"),
        top_config: top,
        workload,
    }
    .with_flags(flags)
    .encode()
}

/// Writes a request in `framing`'s pieces.
pub fn send_framed(stream: &mut TcpStream, header: &[u8; 64], payload: &[u8], framing: Framing) {
    const PIECE: usize = 1024;
    match framing {
        Framing::Whole => {
            let mut all = header.to_vec();
            all.extend_from_slice(payload);
            stream.write_all(&all).expect("write");
        }
        Framing::HeaderAlone => {
            stream.write_all(header).expect("write header");
            for piece in payload.chunks(PIECE) {
                stream.write_all(piece).expect("write piece");
            }
        }
        Framing::HeaderWithFirst => {
            let first = payload.len().min(PIECE - HEADER_LEN);
            let mut head = header.to_vec();
            head.extend_from_slice(&payload[..first]);
            stream.write_all(&head).expect("write first piece");
            for piece in payload[first..].chunks(PIECE) {
                stream.write_all(piece).expect("write piece");
            }
        }
    }
}

pub fn read_n(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    stream.read_exact(&mut out).expect("answer arrives");
    out
}

/// Whether the device closed `stream` (EOF or reset) within 10 s.
pub fn closed_by_device(stream: &mut TcpStream) -> bool {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                return true;
            }
            Err(_) => return false,
        }
    }
}

/// A tiny deterministic generator (xorshift64*), so failures reproduce.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    pub fn below(&mut self, n: u32) -> u32 {
        self.next_u32() % n
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next_u64() >> 56) as u8).collect()
    }
}

/// A well-behaved client: one top_k request to slot 0 (which the full image
/// starts with top_k), checked against the model.
pub fn assert_served(addr: SocketAddr) {
    let mut stream = connect(addr);
    let words: Vec<u32> = (1..=32u32).map(|i| i * 1000).collect();
    let payload: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let head = header(0, payload.len(), 0xffff, Framing::Whole);
    send_framed(&mut stream, &head, &payload, Framing::Whole);
    let answer = read_n(&mut stream, 64);
    assert_eq!(
        answer,
        crate::models::top_k(&payload, 0xffff).to_vec(),
        "a well-behaved client is served"
    );
}

/// Copies a directory tree.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Every file under `dir`, by relative path.
pub fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).expect("prefix").to_path_buf();
                out.insert(rel, std::fs::read(&path).expect("read"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}
