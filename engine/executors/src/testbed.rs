//! Testbed profiles (`hw/testbeds/<name>.yaml`) and the session a run holds on one: the device it drives, started
//! on first use when the testbed is emulated, and what that device holds now, so each measurement programs and
//! loads only what differs from the state it needs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use fracflow_core::NodeError;
use serde::{Deserialize, Serialize};

/// A testbed profile as written in `hw/testbeds/<name>.yaml`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TestbedProfile {
    /// `emulated` (the embedded device on this machine), `real` (a board) or `doubles` (fake tools).
    pub kind: TestbedKind,
    #[serde(default)]
    pub description: String,
    /// The device: on an emulated testbed it is started by the run; a real one is reached at `addr`.
    #[serde(default)]
    pub device: DeviceProfile,
    /// What this machine cannot do as the paper did, and how the runs are adapted instead.
    #[serde(default)]
    pub adapt: Adaptation,
    /// A real board: how it is programmed and how the run knows it is up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board: Option<BoardProfile>,
    /// The client host: where its threads start, and the real fperf when the profile uses it.
    #[serde(default)]
    pub client: ClientProfile,
    /// The host of the CPU baseline server (absent: this host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerProfile>,
    /// How root is obtained for DPDK and programming (`sudo`, `sudo -n`, or empty when running as root).
    #[serde(default = "default_sudo")]
    pub sudo: String,
    /// Node kinds handed to a Slurm cluster, and the resources their jobs ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<crate::slurm::SlurmProfile>,
    /// Seconds between `sudo -n -v` refreshes while a run uses this testbed (the artifact's 60).
    #[serde(default = "default_sudo_refresh")]
    pub sudo_refresh_s: f64,
    /// Where the fRAC images come from (absent: the emulated build chain on an emulated testbed, the
    /// artifact's images pinned in `bitstreams/frac-example.yaml` elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<crate::images::ImagesProfile>,
    /// The cores a claim's `needs:` may count on (a real testbed whose server and clients run on other machines
    /// says how many they have); absent: this machine's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    /// The lab's remote cache for runs on this testbed (`--remote-cache` and `FRACFLOW_REMOTE_CACHE` win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_cache: Option<RemoteCacheProfile>,
}

/// `remote_cache:` of a profile: where the lab's cache is and what travels to it.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RemoteCacheProfile {
    /// `http(s)://HOST/PATH` or `s3://BUCKET/PREFIX`; credentials never go here.
    #[serde(default)]
    pub url: Option<String>,
    /// `read` downloads only; `read-write` (default) also uploads what this machine builds.
    #[serde(default)]
    pub mode: Option<String>,
    /// Entries whose outputs sum to more than this many MiB are not uploaded (default 256).
    #[serde(default)]
    pub max_upload_mib: Option<u64>,
    /// Node kinds whose entries are never uploaded (e.g. `measure`, whose raw samples are large).
    #[serde(default)]
    pub skip_kinds: Vec<String>,
}

impl TestbedProfile {
    /// The image source as it applies: the profile's, or its kind's default.
    pub fn images(&self) -> crate::images::ImagesProfile {
        self.images
            .clone()
            .unwrap_or_else(|| crate::images::ImagesProfile::default_for(self.kind))
    }

    /// Measurements use the real fperf: a real (or doubles) testbed whose profile names it. An emulated testbed
    /// always measures with the embedded client.
    pub fn measures_with_fperf(&self) -> bool {
        self.kind != TestbedKind::Emulated
            && self.client.fperf.as_deref().is_some_and(|f| !f.is_empty())
    }
}

fn default_sudo_refresh() -> f64 {
    60.0
}

fn default_sudo() -> String {
    "sudo".to_owned()
}

/// How a real board is programmed and reached (docs/frac.md §6.1, §8).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BoardProfile {
    /// The JTAG target (`HW_TARGET`); empty: the first one.
    #[serde(default)]
    pub jtag: String,
    /// `VIVADO_ROOT` for the programming script; empty: `vivado` on PATH.
    #[serde(default)]
    pub vivado_root: String,
    /// The programming script, relative to the project root.
    #[serde(default = "default_programfpga")]
    pub programfpga: String,
    /// The client NIC facing the board; empty: the one `ip route get` picks for the board's address.
    #[serde(default)]
    pub nic: String,
    /// Seconds to wait after the board answers ping.
    #[serde(default = "default_settle")]
    pub settle_s: f64,
    /// Seconds to wait for the NIC address and the board's ping after programming.
    #[serde(default = "default_ready_timeout")]
    pub ready_timeout_s: f64,
}

/// A board section with every default: the artifact's script, no JTAG target, NIC from the route.
pub fn default_board() -> BoardProfile {
    BoardProfile {
        jtag: String::new(),
        vivado_root: String::new(),
        programfpga: default_programfpga(),
        nic: String::new(),
        settle_s: default_settle(),
        ready_timeout_s: default_ready_timeout(),
    }
}

fn default_programfpga() -> String {
    "scripts/programfpga.sh".to_owned()
}
fn default_settle() -> f64 {
    10.0
}
fn default_ready_timeout() -> f64 {
    90.0
}

/// The client host's settings.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientProfile {
    /// First core for client threads (`-S`).
    #[serde(default)]
    pub start_cpu: u32,
    /// The real fperf's `tpa` launcher and binary; when `fperf` is set, measurements use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpa: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fperf: Option<String>,
    /// `TPA_CFG` for fperf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpa_cfg: Option<String>,
}

/// The CPU baseline server's host.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerProfile {
    /// ssh destination (`user@host`).
    pub host: String,
    /// The address clients connect to.
    pub addr: String,
    #[serde(default = "default_server_port")]
    pub port: u16,
    #[serde(default)]
    pub nic: String,
    #[serde(default = "default_sudo")]
    pub sudo: String,
    #[serde(default)]
    pub start_cpu: u32,
    /// `fracflow` on the server host (the CPU baseline server is `fracflow cpu-server`).
    #[serde(default = "default_fracflow")]
    pub fracflow: String,
    /// Extra ssh options before the host (`-p 2222`, `-i ~/.ssh/testbed`); `BatchMode=yes` is always set.
    #[serde(default)]
    pub ssh_options: Vec<String>,
    /// Seconds a started server gets to accept TCP connections.
    #[serde(default = "default_server_start_timeout")]
    pub start_timeout_s: f64,
}

impl ServerProfile {
    pub fn ssh(&self) -> crate::remote::SshHost {
        crate::remote::SshHost {
            destination: self.host.clone(),
            options: self.ssh_options.clone(),
        }
    }
}

fn default_fracflow() -> String {
    "fracflow".to_owned()
}
fn default_server_start_timeout() -> f64 {
    20.0
}

fn default_server_port() -> u16 {
    4096
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TestbedKind {
    Emulated,
    Real,
    /// Scripts standing in for the hardware tools (tests and demos of the hardware steps): driven like `real`,
    /// and every figure and report says its numbers come from doubles.
    Doubles,
}

impl TestbedKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TestbedKind::Emulated => "emulated",
            TestbedKind::Real => "real",
            TestbedKind::Doubles => "doubles",
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// `HOST:PORT` of the device's data port. Emulated: where to start it (default `127.0.0.1:0`, a free
    /// loopback port). Real: the board.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
}

/// A testbed's adaptation of the paper's runs.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Adaptation {
    /// Param caps: a pipeline param above its cap is lowered to it (`d: 4` shortens 30-s points to 4 s).
    #[serde(default)]
    pub caps: BTreeMap<String, f64>,
    /// Param replacements: a pipeline param of that name takes this value on this testbed.
    #[serde(default)]
    pub set: BTreeMap<String, serde_json::Value>,
    /// Client threads at most per client process: `-n N` clients become `N` connections spread over this many
    /// threads (`cores` = the machine's core count). Absent: one thread per client, as fperf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_threads: Option<ThreadLimit>,
    /// Pin client threads to cores (`-S`); off where the clients share two cores with the device.
    #[serde(default = "yes")]
    pub pin: bool,
    /// Why, in words: shown by `plan` and kept in the manifest.
    #[serde(default)]
    pub notes: Vec<String>,
    /// A trace replay may use a synthetic trace when its trace file is absent (`trace_input`); elsewhere a
    /// missing trace file is an error before the run. The emulated profile says yes.
    #[serde(default)]
    pub synthetic_trace: bool,
}

fn yes() -> bool {
    true
}

impl Default for Adaptation {
    /// No adaptation: the paper's values, one pinned thread per client.
    fn default() -> Adaptation {
        Adaptation {
            caps: BTreeMap::new(),
            set: BTreeMap::new(),
            client_threads: None,
            pin: true,
            notes: Vec::new(),
            synthetic_trace: false,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum ThreadLimit {
    Count(u32),
    Named(CoresKeyword),
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CoresKeyword {
    Cores,
}

impl Adaptation {
    /// The thread limit as a number on this machine.
    pub fn client_threads(&self) -> Option<u32> {
        self.client_threads.map(|limit| match limit {
            ThreadLimit::Count(n) => n.max(1),
            ThreadLimit::Named(CoresKeyword::Cores) => std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
        })
    }

    /// Rewrites a client's `-n THREADS -C CONNS` so at most `client_threads` threads carry the same number of
    /// connections; unpins when the profile says so. Returns a note of what changed, if anything.
    pub fn apply(&self, client: &mut fracflow_client::ClientConfig) -> Option<String> {
        let mut changes = Vec::new();
        if let Some(limit) = self.client_threads() {
            let clients = client.threads * client.conns_per_thread;
            // The most threads ≤ limit that divide the client count evenly, so every thread carries as
            // many connections as the next and the total stays exactly the paper's.
            let threads = (1..=limit.min(client.threads))
                .rev()
                .find(|t| client.threads.is_multiple_of(*t))
                .unwrap_or(1);
            if threads != client.threads {
                client.conns_per_thread = clients / threads;
                changes.push(format!(
                    "{} clients as {} thread(s) × {} connection(s)",
                    clients, threads, client.conns_per_thread
                ));
                client.threads = threads;
                // A polling thread records "last piece written" when its loop gets there, not when the bytes
                // left: with several connections per thread only the send time is sound.
                if client.console_latency_override.is_none() {
                    client.console_latency_override = Some(fracflow_client::LatencyDef::FromSend);
                    changes.push("per-second lines report the latency from the send".to_owned());
                }
            }
        }
        if !self.pin && client.start_cpu.is_some() {
            client.start_cpu = None;
            changes.push("threads not pinned".to_owned());
        }
        (!changes.is_empty()).then(|| changes.join(", "))
    }
}

/// Reads `hw/testbeds/<name>.yaml` under `root`.
pub fn load_profile(root: &Path, name: &str) -> Result<TestbedProfile, String> {
    let file = root
        .join("hw")
        .join("testbeds")
        .join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&file).map_err(|e| {
        let known = known_profiles(root);
        format!(
            "testbed profile {}: {e}{}",
            file.display(),
            if known.is_empty() {
                String::new()
            } else {
                format!(" (known: {})", known.join(", "))
            }
        )
    })?;
    serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// Profile names under `hw/testbeds/`.
pub fn known_profiles(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("hw").join("testbeds"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".yaml"))
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

/// The fields of a testbed that change measured results: they enter the key of every node that touches the
/// device or a host. The device's address does not (an emulated device gets a new port every run).
pub fn fingerprint_fields(
    name: &str,
    profile: &TestbedProfile,
) -> BTreeMap<String, serde_json::Value> {
    let mut fields = BTreeMap::from([
        ("name".to_owned(), serde_json::json!(name)),
        ("kind".to_owned(), serde_json::json!(profile.kind.as_str())),
    ]);
    if let Some(threads) = profile.adapt.client_threads() {
        fields.insert("client_threads".to_owned(), serde_json::json!(threads));
    }
    fields.insert("pin".to_owned(), serde_json::json!(profile.adapt.pin));
    // Another server host is another baseline machine; how ssh reaches it (port, key) changes no number.
    if let Some(server) = &profile.server {
        fields.insert(
            "server".to_owned(),
            serde_json::json!(format!("{} ({}:{})", server.host, server.addr, server.port)),
        );
    }
    fields
}

/// What a measurement needs the device to hold: a full image and partials in some slots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceState {
    pub image: Option<PathBuf>,
    pub slots: BTreeMap<u8, PathBuf>,
}

/// One thing the session did to the device, for the node's log and its summary.
pub use fracflow_record::measure::DeviceAction;

/// Holds the run's device: started on first use (emulated), programmed and loaded as measurements require.
#[derive(Debug)]
pub struct Session {
    name: String,
    profile: TestbedProfile,
    device: Mutex<DeviceHold>,
    /// Root for the board's tools, asked for on first need and kept fresh until the session ends.
    root: Mutex<Option<crate::sudo::SudoKeeper>>,
    /// What the run's image source pinned: where each file is, by sha256 (never part of a key), which unit
    /// each RM id is (what a slot must answer as after a load), and whether the board is programmed at all.
    pinned: Mutex<Pinning>,
}

#[derive(Debug, Default)]
struct Pinning {
    sources: BTreeMap<String, PathBuf>,
    units: BTreeMap<u8, String>,
    no_program: bool,
}

#[derive(Debug, Default)]
struct DeviceHold {
    started: Option<fracflow_emulator::RunningDevice>,
    /// Content hash of the programmed image; programming clears the slots.
    image: Option<String>,
    slots: BTreeMap<u8, String>,
}

impl Session {
    pub fn new(name: &str, profile: TestbedProfile) -> Session {
        Session {
            name: name.to_owned(),
            profile,
            device: Mutex::new(DeviceHold::default()),
            root: Mutex::new(None),
            pinned: Mutex::new(Pinning::default()),
        }
    }

    fn pinning(&self) -> std::sync::MutexGuard<'_, Pinning> {
        self.pinned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records where the pinned file with this sha256 is on this machine.
    pub fn pin_source(&self, sha256: &str, path: &Path) {
        self.pinning()
            .sources
            .insert(sha256.to_owned(), path.to_owned());
    }

    pub fn pinned_source(&self, sha256: &str) -> Option<PathBuf> {
        self.pinning().sources.get(sha256).cloned()
    }

    /// The unit of each RM id (`hw/shell.yaml`), for the functional check after each slot load.
    pub fn set_partial_units(&self, units: BTreeMap<u8, String>) {
        self.pinning().units = units;
    }

    pub fn no_program(&self) -> bool {
        self.pinning().no_program
    }

    /// The unit a partial `cXX_fYY.bin` holds, by its RM id in the shell declaration.
    pub fn unit_of_partial(&self, name: &str) -> Option<String> {
        let (_, rm) = fracflow_record::prebuilt::parse_partial_name(name.rsplit('/').next()?)?;
        self.pinning().units.get(&rm).cloned()
    }

    /// `--no-program`: the board holds the image already; slots are still loaded and checked.
    pub fn set_no_program(&self, no_program: bool) {
        self.pinning().no_program = no_program;
    }

    /// Makes sure the profile's sudo works (asking once per run at most) and keeps it fresh from then on.
    pub fn ensure_root(&self) -> Result<(), NodeError> {
        if crate::sudo::words(&self.profile.sudo).is_empty() {
            return Ok(());
        }
        let mut keeper = self
            .root
            .lock()
            .map_err(|_| NodeError::permanent("the sudo keep-alive was poisoned by a crash"))?;
        if keeper.is_none() {
            let refresh = std::time::Duration::from_secs_f64(self.profile.sudo_refresh_s.max(1.0));
            *keeper = crate::sudo::SudoKeeper::start(&self.profile.sudo, refresh)
                .map_err(|e| NodeError::permanent(format!("testbed `{}`: {e}", self.name)))?;
        }
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn profile(&self) -> &TestbedProfile {
        &self.profile
    }

    /// Brings the device to `want` (programming when the image differs, loading each slot whose partial
    /// differs) and returns its data address. The caller holds the device resource, so nothing else changes
    /// the device meanwhile.
    pub fn prepare(
        &self,
        want: &DeviceState,
        job: &fracflow_core::Job<'_>,
        actions: &mut Vec<DeviceAction>,
    ) -> Result<SocketAddr, NodeError> {
        let mut hold = self
            .device
            .lock()
            .map_err(|_| NodeError::permanent("the device session was poisoned by a crash"))?;
        let addr = self.address(&mut hold)?;
        let board = self.profile.kind != TestbedKind::Emulated;
        if let Some(image) = &want.image {
            let sha = fracflow_core::statcache::hash_file(image)
                .map_err(|e| NodeError::permanent(format!("{}: {e}", image.display())))?;
            if hold.image.as_deref() != Some(sha.as_str()) {
                if board {
                    refuse_unless_xilinx(image)?;
                }
                let no_program = self.pinning().no_program;
                match self.profile.kind {
                    _ if no_program => {}
                    TestbedKind::Real | TestbedKind::Doubles => {
                        self.ensure_root()?;
                        crate::fpga::program_board(job, &self.board_programming(addr), image)?
                    }
                    TestbedKind::Emulated => {
                        fracflow_emulator::program(addr, image).map_err(|e| {
                            NodeError::transient(format!("programming the device at {addr}: {e}"))
                        })?;
                    }
                }
                hold.image = Some(sha.clone());
                hold.slots.clear();
                actions.push(DeviceAction {
                    action: if no_program {
                        "taken as programmed (--no-program)".to_owned()
                    } else {
                        "program".to_owned()
                    },
                    file: file_name(image),
                    sha,
                });
            }
        }
        for (slot, partial) in &want.slots {
            let sha = fracflow_core::statcache::hash_file(partial)
                .map_err(|e| NodeError::permanent(format!("{}: {e}", partial.display())))?;
            if hold.slots.get(slot) == Some(&sha) {
                continue;
            }
            if board {
                refuse_unless_xilinx(partial)?;
            }
            // Until it is loaded and checked, the slot holds nothing this session can vouch for.
            hold.slots.remove(slot);
            let expected = self.expected_unit(partial);
            let mut attempts = 0;
            loop {
                attempts += 1;
                let report = load_slot(addr, *slot, partial)?;
                actions.push(DeviceAction {
                    action: format!(
                        "load slot {slot} ({} WRITE_HBM of {DEFAULT_CHUNK_SIZE} B in {:.1} ms, RECONF_ICAP {:.1} ms)",
                        report.writes,
                        report.upload.as_secs_f64() * 1e3,
                        report.reconf.as_secs_f64() * 1e3
                    ),
                    file: file_name(partial),
                    sha: sha.clone(),
                });
                // A board reports success for a partial of another build and leaves the slot as it was
                // (docs/frac.md §3): what the slot computes is checked before anything is measured on it.
                let Some(expected) = expected.filter(|_| board) else {
                    break;
                };
                match check_loaded_slot(addr, *slot, expected)? {
                    Ok(summary) => {
                        actions.push(DeviceAction {
                            action: format!("check slot {slot}: {summary}"),
                            file: file_name(partial),
                            sha: sha.clone(),
                        });
                        break;
                    }
                    Err(why) if attempts < 2 => {
                        crate::fpga::append_log(job, &format!("{why}; loading it once more\n"));
                    }
                    Err(why) => {
                        return Err(NodeError::permanent(format!(
                            "{why} after loading {} twice; nothing is measured on it (a partial of another \
                             build reports success and leaves the slot unchanged)",
                            file_name(partial)
                        )));
                    }
                }
            }
            hold.slots.insert(*slot, sha.clone());
        }
        Ok(addr)
    }

    /// The unit a partial must make its slot answer as: its RM id (`cXX_fYY`) in the shell declaration.
    fn expected_unit(&self, partial: &Path) -> Option<crate::slotcheck::Unit> {
        crate::slotcheck::unit_by_name(&self.unit_of_partial(&file_name(partial))?)
    }

    /// How this real testbed's board is programmed and when it is ready.
    fn board_programming(&self, addr: SocketAddr) -> crate::fpga::BoardProgramming {
        let board = self.profile.board.clone().unwrap_or_else(default_board);
        crate::fpga::BoardProgramming {
            script: PathBuf::from(&board.programfpga),
            vivado_root: board.vivado_root,
            hw_target: board.jtag,
            host: addr.ip().to_string(),
            nic: (!board.nic.is_empty()).then_some(board.nic),
            ready_timeout_s: board.ready_timeout_s,
            settle_s: board.settle_s,
        }
    }

    /// The device's data address, starting the emulated device on first use.
    fn address(&self, hold: &mut DeviceHold) -> Result<SocketAddr, NodeError> {
        if let Some(device) = &hold.started {
            return Ok(device.addr());
        }
        let configured = self.profile.device.addr.as_deref();
        match self.profile.kind {
            TestbedKind::Emulated => {
                let listen = configured.unwrap_or("127.0.0.1:0");
                let listen: SocketAddr = listen.parse().map_err(|e| {
                    NodeError::permanent(format!(
                        "testbed `{}`: device.addr `{listen}`: {e}",
                        self.name
                    ))
                })?;
                let device = fracflow_emulator::Device::start(listen, None).map_err(|e| {
                    NodeError::permanent(format!(
                        "testbed `{}`: starting the emulated device on {listen}: {e}",
                        self.name
                    ))
                })?;
                let addr = device.addr();
                hold.started = Some(device);
                Ok(addr)
            }
            TestbedKind::Real | TestbedKind::Doubles => {
                let text = configured.ok_or_else(|| {
                    NodeError::permanent(format!(
                        "testbed `{}` is real but names no device.addr",
                        self.name
                    ))
                })?;
                use std::net::ToSocketAddrs;
                text.to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| {
                        NodeError::permanent(format!(
                            "testbed `{}`: device.addr `{text}` does not resolve",
                            self.name
                        ))
                    })
            }
        }
    }

    /// Stops an emulated device this session started.
    pub fn stop(&self) {
        if let Ok(mut hold) = self.device.lock()
            && let Some(device) = hold.started.take()
        {
            device.stop();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop();
    }
}

fn load_slot(
    addr: SocketAddr,
    slot: u8,
    partial: &Path,
) -> Result<fracflow_emulator::LoadReport, NodeError> {
    fracflow_emulator::load_partial(addr, slot, partial, DEFAULT_CHUNK_SIZE, DEFAULT_HBM_ADDR)
        .map_err(|e| {
            NodeError::permanent(format!(
                "loading {} into slot {slot} of {addr}: {e}",
                partial.display()
            ))
        })
}

/// How long one check request may take (the artifact's checkfuncs uses 2 s, docs/frac.md §8).
const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether `slot` answers as `expected` and computes what its references say: `Ok(Ok(summary))`, or
/// `Ok(Err(what it did))`; `Err` when the device could not be asked.
fn check_loaded_slot(
    addr: SocketAddr,
    slot: u8,
    expected: crate::slotcheck::Unit,
) -> Result<Result<String, String>, NodeError> {
    let verdict = crate::slotcheck::check_slot(addr, slot, CHECK_TIMEOUT).map_err(|e| {
        NodeError::permanent(format!("checking slot {slot} at {addr} after loading: {e}"))
    })?;
    Ok(match verdict.unit {
        Some(found) if found != expected => Err(format!(
            "slot {slot} answers as {}, expected {}",
            found.name(),
            expected.name()
        )),
        None => Err(format!(
            "slot {slot} answers as no known unit, expected {}",
            expected.name()
        )),
        Some(found) => match verdict.checks.iter().find(|c| !c.passed) {
            Some(wrong) => Err(format!(
                "slot {slot} answers as {} but computes wrong: {}: {}",
                found.name(),
                wrong.name,
                wrong.detail
            )),
            None => Ok(format!(
                "{} ok ({} checks against the Rust references)",
                found.name(),
                verdict.checks.len()
            )),
        },
    })
}

/// A board takes only real Xilinx bitstreams; the plan refuses other files, and this is the last guard before
/// one is handed to the programming tool or the controller (a file may have changed since).
fn refuse_unless_xilinx(path: &Path) -> Result<(), NodeError> {
    let kind = crate::images::classify_file(path)
        .map_err(|e| NodeError::permanent(format!("{}: {e}", path.display())))?;
    match kind {
        kind if kind.is_xilinx() => Ok(()),
        other => Err(NodeError::permanent(format!(
            "{} is {}: it never reaches a board",
            path.display(),
            crate::images::describe_kind(&other)
        ))),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// `reconfslots`' defaults: 256-byte chunks staged at HBM 0x10004000 (docs/frac.md §6.1).
const DEFAULT_CHUNK_SIZE: usize = 256;
const DEFAULT_HBM_ADDR: u64 = 0x1000_4000;

/// One line of `fracflow testbed check`: what was looked at, whether it is ready, and what was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub what: String,
    pub ready: bool,
    pub detail: String,
}

impl Finding {
    pub(crate) fn new(what: impl Into<String>, ready: bool, detail: impl Into<String>) -> Finding {
        Finding {
            what: what.into(),
            ready,
            detail: detail.into(),
        }
    }
}

/// Runs `program args`, bounded by the tool's own timeout flags; (exit 0, combined output) or why it could not run.
fn probe(program: &str, args: &[&str]) -> Result<(bool, String), String> {
    crate::process::ask(program, args)
        .map(|answer| (answer.code == Some(0), answer.text.trim().to_owned()))
}

/// The client NIC facing `host`: the profile's when it names one, else the one `ip route get` leaves by.
pub fn client_nic(named: &str, host: &str) -> Result<String, String> {
    if !named.is_empty() {
        return Ok(named.to_owned());
    }
    match probe("ip", &["-o", "route", "get", host]) {
        Ok((true, route)) => route
            .split_whitespace()
            .skip_while(|w| *w != "dev")
            .nth(1)
            .map(str::to_owned)
            .ok_or_else(|| format!("`ip route get {host}` names no device: {route}")),
        Ok((false, out)) | Err(out) => Err(format!("no route to {host}: {out}")),
    }
}

/// Whether `program` is an executable file or a command on PATH.
pub(crate) fn on_path(program: &str) -> bool {
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(Path::new(program));
    }
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| executable(&dir.join(program)))
    })
}

/// What a run on this testbed needs, checked without touching the board: tools, the NIC, its address and MTU,
/// the board's ping, sudo, hugepages (`testbed_check`), and the server host over ssh.
pub fn check(root: &Path, name: &str, profile: &TestbedProfile) -> Vec<Finding> {
    let mut found = Vec::new();
    let tool = |found: &mut Vec<Finding>, what: &str, program: &str| {
        let ready = on_path(program);
        found.push(Finding::new(
            what,
            ready,
            if ready {
                program.to_owned()
            } else {
                format!("{program} not found")
            },
        ));
    };
    if profile.kind == TestbedKind::Emulated {
        found.push(Finding::new(
            "device",
            true,
            "emulated: each run starts it on a free loopback port",
        ));
        tool(&mut found, "C++ compiler (hls, emulated flow)", "g++");
        found.extend(server_findings(profile));
        return found;
    }
    if profile.device.addr.is_none() && profile.board.is_none() {
        // A profile of a tool-driven artifact (RPCNIC, SUME, loopback): no fRAC board to reach; its pipelines'
        // first steps check the tools they drive (and fail naming what is missing).
        found.push(Finding::new(
            "device",
            true,
            "none: this profile drives other tools (their pipelines check them as they run)",
        ));
        if !profile.sudo.trim().is_empty() {
            found.push(sudo_finding("sudo", &profile.sudo, None));
        }
        found.extend(server_findings(profile));
        return found;
    }
    let Some(addr) = profile.device.addr.as_deref() else {
        found.push(Finding::new(
            "device.addr",
            false,
            format!("testbed `{name}` is real but names no device.addr (HOST:PORT)"),
        ));
        return found;
    };
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).to_owned();
    found.push(Finding::new("device.addr", true, addr));
    let board = profile.board.clone().unwrap_or_else(default_board);
    let script = root.join(&board.programfpga);
    tool(
        &mut found,
        "programming script",
        &script.display().to_string(),
    );
    let vivado = if board.vivado_root.is_empty() {
        "vivado".to_owned()
    } else {
        Path::new(&board.vivado_root)
            .join("bin/vivado")
            .display()
            .to_string()
    };
    tool(&mut found, "Vivado", &vivado);
    // `tpa` and `fperf` matter only where they measure; a profile naming them but measuring with the
    // embedded client does not need them.
    if profile.measures_with_fperf() {
        for (what, path) in [
            ("tpa", profile.client.tpa.as_deref()),
            ("fperf", profile.client.fperf.as_deref()),
        ] {
            if let Some(path) = path.filter(|p| !p.is_empty()) {
                tool(&mut found, what, path);
            }
        }
    }
    // The NIC: named, or the one the route to the board leaves by; then it must hold an IPv4 address.
    let nic = match client_nic(&board.nic, &host) {
        Ok(nic) => Some(nic),
        Err(why) => {
            found.push(Finding::new("NIC", false, why));
            None
        }
    };
    if let Some(nic) = nic {
        match probe("ip", &["-o", "-4", "addr", "show", "dev", &nic]) {
            Ok((true, out)) if out.contains("inet ") => {
                let address = out
                    .split_whitespace()
                    .skip_while(|w| *w != "inet")
                    .nth(1)
                    .unwrap_or("?");
                found.push(Finding::new("NIC", true, format!("{nic} {address}")));
            }
            Ok((_, out)) => found.push(Finding::new(
                "NIC",
                false,
                format!("{nic} has no IPv4 address {out}")
                    .trim_end()
                    .to_owned(),
            )),
            Err(e) => found.push(Finding::new("NIC", false, e)),
        }
        found.push(crate::testbed_check::mtu_finding(&nic));
    }
    match probe("ping", &["-c", "1", "-W", "1", &host]) {
        Ok((true, _)) => found.push(Finding::new("board ping", true, format!("{host} answers"))),
        Ok((false, _)) => found.push(Finding::new(
            "board ping",
            false,
            format!("{host} does not answer ping (programmed? link up?)"),
        )),
        Err(e) => found.push(Finding::new("board ping", false, e)),
    }
    found.push(sudo_finding("sudo", &profile.sudo, None));
    crate::testbed_check::real_run_findings(root, profile, &mut found);
    found.extend(server_findings(profile));
    found
}

/// The server host: ssh without a password, `fracflow` there, and its sudo.
fn server_findings(profile: &TestbedProfile) -> Vec<Finding> {
    let Some(server) = &profile.server else {
        return Vec::new();
    };
    let ssh = server.ssh();
    let args = ssh.args(
        &format!("command -v {}", crate::remote::quote(&server.fracflow)),
        crate::remote::Mux::Start,
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match probe("ssh", &args) {
        Ok((true, _)) => vec![
            Finding::new(
                "server ssh",
                true,
                format!("{} ({} found there)", server.host, server.fracflow),
            ),
            sudo_finding("server sudo", &server.sudo, Some(&ssh)),
        ],
        Ok((false, out)) | Err(out) => vec![Finding::new(
            "server ssh",
            false,
            format!(
                "ssh -o BatchMode=yes {} `command -v {}` failed: {out}",
                server.host, server.fracflow
            ),
        )],
    }
}

/// Whether `sudo` works without asking (locally, or on `host` over ssh). Locally a password may be asked once
/// per run, unless the command itself says `-n`; a remote server needs passwordless sudo.
fn sudo_finding(what: &str, sudo: &str, host: Option<&crate::remote::SshHost>) -> Finding {
    if sudo.trim().is_empty() {
        return Finding::new(what, true, "not needed (runs as root)");
    }
    let mut words: Vec<&str> = sudo.split_whitespace().collect();
    if !words.contains(&"-n") {
        words.push("-n");
    }
    words.push("true");
    let result = match host {
        Some(host) => {
            let args = host.args(&words.join(" "), crate::remote::Mux::Start);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            probe("ssh", &args)
        }
        None => probe(words[0], &words[1..]),
    };
    match result {
        Ok((true, _)) => Finding::new(what, true, format!("`{sudo}` works without a password")),
        Ok((false, _)) if host.is_none() && !sudo.split_whitespace().any(|w| w == "-n") => {
            Finding::new(
                what,
                true,
                format!("`{sudo}` will ask for a password once per run"),
            )
        }
        Ok((false, out)) | Err(out) => Finding::new(
            what,
            false,
            format!(
                "`{sudo} -n true` failed{}: {out}",
                host.map(|h| format!(" on {}", h.destination))
                    .unwrap_or_default()
            ),
        ),
    }
}
