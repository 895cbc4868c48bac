//! What the device holds: the programmed image, the kernels in the slots, the
//! reconfiguration controller with its HBM, and the plugin store.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::Instant;

use fracflow_proto::{
    ControllerCommand, ControllerRequest, ControllerResponse, ErrorCode, QueryStatus,
    RequestHeader, SLOT_COUNT,
};

use crate::design::{BuildId, DesignManifest};
use crate::error::{Error, Result, io_err};
use crate::hbm::Hbm;
use crate::image::{Fidelity, container_of};
use crate::image::{FullImage, PartialImage};
use crate::kernel::Kernel;

/// A kernel in a slot and the RM it came from.
#[derive(Debug, Clone)]
pub(crate) struct SlotEntry {
    pub kernel: Arc<Kernel>,
    pub rm_id: u32,
}

/// The programmed image.
#[derive(Debug)]
pub(crate) enum Programmed {
    /// Nothing programmed yet.
    Empty,
    /// The bypass image: the network layer echoes every byte.
    Bypass,
    /// An fRAC design.
    Design(Box<DesignState>),
}

/// The reconfiguration controller's registers and its HBM.
#[derive(Debug)]
pub(crate) struct ControllerState {
    pub hbm: Hbm,
    last_slot_id: u8,
    last_error: ErrorCode,
    prdone_seen: bool,
    prerror_seen: bool,
    last_cycles: u64,
}

impl ControllerState {
    fn new(hbm_budget: usize) -> ControllerState {
        ControllerState {
            hbm: Hbm::new(hbm_budget),
            last_slot_id: 0,
            last_error: ErrorCode::Ok,
            prdone_seen: false,
            prerror_seen: false,
            last_cycles: 0,
        }
    }

    fn query(&self) -> QueryStatus {
        QueryStatus {
            query_result: ErrorCode::Ok,
            // A reconfiguration holds the controller lock, so a query can
            // never observe one in progress (as on the board, docs/frac.md §9).
            reconf_active: false,
            last_slot_id: self.last_slot_id,
            last_error: self.last_error,
            icap_avail: true,
            prdone_seen: self.prdone_seen,
            prerror_seen: self.prerror_seen,
            last_cycles: self.last_cycles,
            active_cycles: 0,
        }
    }
}

/// A programmed fRAC design.
#[derive(Debug)]
pub(crate) struct DesignState {
    pub build_id: BuildId,
    pub manifest: DesignManifest,
    /// The programmed image's allowlist: unit name → the one plugin hash a
    /// partial of that unit may carry.
    allowlist: HashMap<String, BuildId>,
    slots: RwLock<Vec<Option<SlotEntry>>>,
    controller: Mutex<ControllerState>,
    fidelity: Fidelity,
}

/// What the controller path wants the connection to do.
pub(crate) enum ControllerOutcome {
    /// Send this line; `note` is logged as a warning when present.
    Answer {
        line: [u8; 64],
        note: Option<String>,
        info: Option<String>,
    },
    /// Close the connection with this warning (the board would hang).
    Close(String),
}

impl DesignState {
    /// The kernel in `slot`, if the design has a cell there.
    pub fn slot(&self, slot: u8) -> Option<SlotEntry> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        slots.get(usize::from(slot)).cloned().flatten()
    }

    /// `(slot, rm id, unit)` of every occupied slot.
    pub fn occupancy(&self) -> Vec<Option<(u32, &'static str)>> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        slots
            .iter()
            .map(|s| s.as_ref().map(|e| (e.rm_id, e.kernel.unit().name())))
            .collect()
    }

    /// Serves one controller request: its header and body (command line and
    /// padded payload).
    pub fn controller(
        &self,
        header: &RequestHeader,
        body: &[u8],
        plugins: &Mutex<PluginStore>,
    ) -> ControllerOutcome {
        let command = match ControllerRequest::from_request(header, body) {
            Ok(command) => command,
            Err(e) => {
                return ControllerOutcome::Close(format!(
                    "controller request unusable ({e}); the board's controller would wait forever"
                ));
            }
        };
        let mut ctl = self.controller.lock().unwrap_or_else(|e| e.into_inner());
        let answer = |code: ErrorCode| ControllerResponse::Status(code).encode();
        match command {
            ControllerCommand::Rejected { command, code } => {
                ctl.last_error = code;
                ControllerOutcome::Answer {
                    line: answer(code),
                    note: Some(format!(
                        "controller command rejected with {code:?} (status {}): opcode {:#04x}, slot {}, addr {:#x}, count {}",
                        code as u8,
                        command.opcode,
                        command.slot,
                        command.hbm_addr,
                        command.byte_count
                    )),
                    info: None,
                }
            }
            ControllerCommand::Valid(ControllerRequest::QueryStatus) => ControllerOutcome::Answer {
                line: ControllerResponse::Query(ctl.query()).encode(),
                note: None,
                info: None,
            },
            ControllerCommand::Valid(ControllerRequest::WriteHbm { addr, data }) => {
                match ctl.hbm.write(addr, &data) {
                    Ok(()) => {
                        ctl.last_error = ErrorCode::Ok;
                        ControllerOutcome::Answer {
                            line: answer(ErrorCode::Ok),
                            note: None,
                            info: None,
                        }
                    }
                    Err(full) => {
                        ctl.last_error = ErrorCode::AxiBresp;
                        ControllerOutcome::Answer {
                            line: answer(ErrorCode::AxiBresp),
                            note: Some(format!(
                                "WRITE_HBM of {} bytes at {addr:#x} refused with ERR_AXI_BRESP: {full}",
                                data.len()
                            )),
                            info: None,
                        }
                    }
                }
            }
            ControllerCommand::Valid(ControllerRequest::ReadHbm { addr, len }) => {
                // Validation bounds a read to 64 bytes.
                let data = ctl
                    .hbm
                    .read(addr, usize::try_from(len).unwrap_or(64).min(64));
                ctl.last_error = ErrorCode::Ok;
                ControllerOutcome::Answer {
                    line: ControllerResponse::read_data(&data).encode(),
                    note: None,
                    info: None,
                }
            }
            ControllerCommand::Valid(ControllerRequest::ReconfIcap { slot, addr, len }) => {
                let started = Instant::now();
                let result = self.reconfigure(&ctl, plugins, slot, addr, len);
                // The board counts 200 MHz cycles; this counts wall time in
                // the same unit (5 ns), so query-status reports what the
                // emulated swap really took.
                let cycles = u64::try_from(started.elapsed().as_nanos() / 5).unwrap_or(u64::MAX);
                ctl.last_slot_id = slot;
                ctl.last_cycles = cycles;
                match result {
                    Ok(info) => {
                        ctl.last_error = ErrorCode::Ok;
                        ctl.prdone_seen = true;
                        ctl.prerror_seen = false;
                        ControllerOutcome::Answer {
                            line: answer(ErrorCode::Ok),
                            note: None,
                            info: Some(info),
                        }
                    }
                    Err(why) => {
                        ctl.last_error = ErrorCode::Icap;
                        ctl.prdone_seen = false;
                        ctl.prerror_seen = true;
                        ControllerOutcome::Answer {
                            line: answer(ErrorCode::Icap),
                            note: Some(format!(
                                "RECONF_ICAP of slot {slot} refused with ERR_ICAP: {why}; the slot keeps its module"
                            )),
                            info: None,
                        }
                    }
                }
            }
        }
    }

    /// Checks the partial staged at `addr` and swaps it into `slot`.
    fn reconfigure(
        &self,
        ctl: &ControllerState,
        plugins: &Mutex<PluginStore>,
        slot: u8,
        addr: u64,
        len: u64,
    ) -> Result<String, String> {
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= ctl.hbm.budget())
            .ok_or_else(|| {
                format!(
                    "{len} bytes exceed the HBM budget of {} bytes",
                    ctl.hbm.budget()
                )
            })?;
        let bytes = ctl.hbm.read(addr, len);
        let container =
            container_of(&bytes, self.fidelity, "the partial").map_err(|e| e.to_string())?;
        let partial = PartialImage::decode(container).map_err(|e| e.to_string())?;
        if partial.build_id != self.build_id && self.fidelity == Fidelity::BoardDouble {
            // The board's ICAP takes the frames, reports PRDONE, and the cell keeps what it had (docs/frac.md §3).
            return Ok(format!(
                "slot {slot} unchanged: partial {} of build {} on build {} reported success, as the board does",
                partial.file_name(),
                partial.build_id.short(),
                self.build_id.short()
            ));
        }
        if partial.build_id != self.build_id {
            return Err(format!(
                "partial from build {}, the device runs build {} (the board would report success and change nothing)",
                partial.build_id.short(),
                self.build_id.short()
            ));
        }
        if partial.cell != slot {
            return Err(format!(
                "partial {} is for cell C{:02}, not slot {slot}",
                partial.file_name(),
                partial.cell
            ));
        }
        let cell = self
            .manifest
            .cell(slot)
            .ok_or_else(|| format!("the design has no cell for slot {slot}"))?;
        let rm = cell
            .rms
            .iter()
            .find(|rm| rm.id == partial.rm_id && rm.unit == partial.unit)
            .ok_or_else(|| {
                format!(
                    "RM {} ({}) is not a module of cell {}",
                    partial.rm_id, partial.unit, cell.name
                )
            })?;
        // Only plugins the locally programmed full image allows are ever
        // loaded: a network peer can swap modules, not run code of its own.
        let allowed = self
            .allowlist
            .get(&rm.unit)
            .ok_or_else(|| format!("unit {} is not in the image's allowlist", rm.unit))?;
        let hash = BuildId::of(&partial.plugin);
        if hash != *allowed {
            return Err(format!(
                "plugin {} of {} is not the {} plugin the programmed image allows ({}): a partial of another compile of the unit, or a forged one",
                hash.short(),
                partial.file_name(),
                rm.unit,
                allowed.short()
            ));
        }
        let kernel = plugins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(hash, &partial.unit, &partial.plugin)
            .map_err(|e| e.to_string())?;
        let mut slots = self.slots.write().unwrap_or_else(|e| e.into_inner());
        let entry = slots
            .get_mut(usize::from(slot))
            .ok_or_else(|| format!("slot {slot} out of range"))?;
        *entry = Some(SlotEntry {
            kernel,
            rm_id: rm.id,
        });
        Ok(format!(
            "slot {slot} reconfigured with {} ({})",
            partial.file_name(),
            partial.unit
        ))
    }
}

/// Decodes `image` and loads its initial kernels.
pub(crate) fn load_image(
    image: &[u8],
    plugins: &Mutex<PluginStore>,
    hbm_budget: usize,
    fidelity: Fidelity,
) -> Result<Programmed> {
    match FullImage::decode(container_of(image, fidelity, "the image")?)? {
        FullImage::Bypass => Ok(Programmed::Bypass),
        FullImage::Design {
            manifest,
            allowlist,
            cells,
        } => {
            let build_id = manifest.verified_build_id().map_err(Error::Design)?;
            let mut slots = vec![None; usize::from(SLOT_COUNT)];
            let mut store = plugins.lock().unwrap_or_else(|e| e.into_inner());
            for cell in cells {
                let kernel = store.get(BuildId::of(&cell.plugin), &cell.unit, &cell.plugin)?;
                if let Some(entry) = slots.get_mut(usize::from(cell.slot)) {
                    *entry = Some(SlotEntry {
                        kernel,
                        rm_id: cell.rm_id,
                    });
                }
            }
            Ok(Programmed::Design(Box::new(DesignState {
                build_id,
                manifest,
                allowlist: allowlist.into_iter().map(|a| (a.unit, a.hash)).collect(),
                slots: RwLock::new(slots),
                controller: Mutex::new(ControllerState::new(hbm_budget)),
                fidelity,
            })))
        }
    }
}

/// Loaded plugins by hash.
///
/// A plugin is loaded from a sealed memory file (`memfd_create`), never from a
/// file on disk: a device that is killed, as the engine and the tests stop
/// theirs, leaves nothing behind in the temp directory, and nobody can change
/// a plugin's bytes between the check of its hash and its load.
#[derive(Debug, Default)]
pub(crate) struct PluginStore {
    loaded: HashMap<BuildId, Arc<Kernel>>,
}

/// Plugins kept loaded beyond those in the slots.
const PLUGIN_CACHE: usize = 64;

impl PluginStore {
    /// The kernel for `bytes` (whose blake3 is `hash`), loading it on first use
    /// and checking it implements `unit`.
    pub fn get(&mut self, hash: BuildId, unit: &str, bytes: &[u8]) -> Result<Arc<Kernel>> {
        if let Some(kernel) = self.loaded.get(&hash) {
            return Ok(Arc::clone(kernel));
        }
        let kernel = load_from_memory(hash, bytes)?;
        if kernel.unit().name() != unit {
            return Err(Error::Plugin {
                unit: unit.to_owned(),
                message: format!("the plugin implements {}", kernel.unit().name()),
            });
        }
        if self.loaded.len() >= PLUGIN_CACHE {
            // Slots hold their own references; dropping the cache only
            // unloads plugins nobody uses.
            self.loaded.clear();
        }
        let kernel = Arc::new(kernel);
        self.loaded.insert(hash, Arc::clone(&kernel));
        Ok(kernel)
    }
}

/// The sealed memory file of each plugin this process has loaded, kept open
/// for the life of the process.
///
/// The loader finds a library by the name it was opened with before it looks
/// at the file, and a memory file's only name is its descriptor's
/// `/proc/self/fd/N`. Were a descriptor closed, its number could name another
/// plugin's file while the first library is still mapped (a kernel still in a
/// slot, or a library the loader will not unload), and loading that name
/// would hand back the first library. Kept open, each name means one plugin's
/// bytes for as long as the process lives; the files are the plugins' size
/// (kilobytes) and a process loads a handful.
static PLUGIN_FILES: LazyLock<Mutex<HashMap<BuildId, std::fs::File>>> =
    LazyLock::new(Mutex::default);

/// Loads `bytes` (whose blake3 is `hash`) from its sealed memory file.
fn load_from_memory(hash: BuildId, bytes: &[u8]) -> Result<Kernel> {
    let path = {
        let mut files = PLUGIN_FILES.lock().unwrap_or_else(|e| e.into_inner());
        let file = match files.entry(hash) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(sealed_memory_file(hash, bytes).map_err(io_err(format!(
                    "holding plugin {} in memory",
                    hash.to_hex()
                )))?)
            }
        };
        PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
    };
    let kernel = Kernel::load(&path)?;
    if kernel.hash() != hash {
        return Err(Error::Plugin {
            unit: kernel.unit().name().to_owned(),
            message: format!(
                "the loaded plugin is {}, not {}",
                kernel.hash().short(),
                hash.short()
            ),
        });
    }
    Ok(kernel)
}

/// A memory file holding `bytes`, sealed against any change.
fn sealed_memory_file(hash: BuildId, bytes: &[u8]) -> std::io::Result<std::fs::File> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let name = format!("fracflow-plugin-{}", hash.to_hex());
    let fd = rustix::fs::memfd_create(&name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    rustix::fs::fcntl_add_seals(
        &file,
        SealFlags::SEAL | SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE,
    )?;
    Ok(file)
}
