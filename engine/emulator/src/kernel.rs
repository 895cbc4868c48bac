//! Loading and calling kernel plugins: the shared objects the build chain
//! compiles from `hw/accelerators/<name>/*.cpp`, behind the C ABI of
//! `hw/accelerators/frac_kernel.h`.

use std::ffi::{CStr, c_char};
use std::fmt;
use std::path::Path;

use fracflow_proto::Unit;
use libloading::Library;

use crate::design::BuildId;
use crate::error::{Error, Result, io_err};
use crate::spec::unit_model;

/// `FRAC_KERNEL_ABI_VERSION` this crate speaks.
pub const KERNEL_ABI_VERSION: i32 = 1;

/// `frac_kernel_run`'s signature.
type RunFn = unsafe extern "C" fn(*const u8, u32, u16, *mut u8, u32) -> i64;
type VersionFn = unsafe extern "C" fn() -> i32;
type NameFn = unsafe extern "C" fn() -> *const c_char;

/// Why a kernel gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// The unit never answers this request (norm beyond 256 data lines).
    #[error("{unit} gives no answer to a {request_len}-byte request")]
    NoAnswer {
        /// Unit name.
        unit: &'static str,
        /// Request size, header included.
        request_len: usize,
    },
    /// The request is not whole lines, empty, or larger than 16 bits.
    #[error("request of {0} bytes is not 64..=65472 bytes in whole lines")]
    BadRequest(usize),
    /// The kernel returned an error code.
    #[error("{unit} kernel failed with code {code}")]
    Failed {
        /// Unit name.
        unit: &'static str,
        /// The negative return value.
        code: i64,
    },
    /// The kernel's answer length differs from the unit's response size.
    #[error("{unit} kernel answered {got} bytes, the unit answers {expected}")]
    WrongLength {
        /// Unit name.
        unit: &'static str,
        /// The response size of the table in `docs/frac.md` §2.5.
        expected: usize,
        /// What the kernel returned.
        got: i64,
    },
}

/// A loaded kernel plugin.
pub struct Kernel {
    unit: Unit,
    hash: BuildId,
    run: RunFn,
    // Declared last so it is dropped last: `run` points into it.
    _library: Library,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("unit", &self.unit.name())
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

impl Kernel {
    /// Loads the plugin at `path` and checks its ABI version and that its
    /// name is a unit the emulator models.
    ///
    /// Loading runs the plugin's initialisers: only load plugins built from
    /// this project's sources (the device loads only plugins whose hash the
    /// programmed full image's allowlist names).
    pub fn load(path: &Path) -> Result<Kernel> {
        let bytes = std::fs::read(path).map_err(io_err(format!("reading {}", path.display())))?;
        let hash = BuildId::of(&bytes);
        let fail = |message: String| Error::Plugin {
            unit: path.display().to_string(),
            message,
        };
        // SAFETY: loading a shared object runs its ELF initialisers.  Callers
        // only pass plugins compiled by `build::compile_unit` from the
        // project's accelerator sources (the device checks the plugin's
        // blake3 against the programmed full image's allowlist first, and
        // only the loopback management channel programs images); those
        // initialisers are
        // the C++ runtime's and have no preconditions.
        let library = unsafe { Library::new(path.as_os_str()) }
            .map_err(|e| fail(format!("cannot load: {e}")))?;
        // SAFETY: the symbol types are those `frac_kernel.h` declares for ABI
        // version 1; the version is checked before `frac_kernel_run` is used.
        let (version, name, run) = unsafe {
            let version = library
                .get::<VersionFn>(b"frac_kernel_abi_version\0")
                .map_err(|e| fail(format!("no frac_kernel_abi_version: {e}")))?;
            let name = library
                .get::<NameFn>(b"frac_kernel_name\0")
                .map_err(|e| fail(format!("no frac_kernel_name: {e}")))?;
            let run = library
                .get::<RunFn>(b"frac_kernel_run\0")
                .map_err(|e| fail(format!("no frac_kernel_run: {e}")))?;
            (*version, *name, *run)
        };
        // SAFETY: both functions take no arguments and touch no state (ABI
        // contract); the library is loaded.
        let abi = unsafe { version() };
        if abi != KERNEL_ABI_VERSION {
            return Err(fail(format!(
                "ABI version {abi}, this emulator speaks {KERNEL_ABI_VERSION}"
            )));
        }
        // SAFETY: as above; the ABI promises a NUL-terminated static string.
        let name_ptr = unsafe { name() };
        if name_ptr.is_null() {
            return Err(fail("frac_kernel_name returned NULL".into()));
        }
        // SAFETY: non-null, NUL-terminated, static storage in the loaded
        // library (ABI contract); copied out before anything can unload it.
        let name = unsafe { CStr::from_ptr(name_ptr) }
            .to_string_lossy()
            .into_owned();
        let unit = unit_model(&name).ok_or_else(|| fail(format!("unknown unit name {name:?}")))?;
        Ok(Kernel {
            unit,
            hash,
            run,
            _library: library,
        })
    }

    /// The unit the plugin implements.
    #[must_use]
    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// blake3 of the plugin file.
    #[must_use]
    pub fn hash(&self) -> BuildId {
        self.hash
    }

    /// Runs the kernel on one whole request (header line first) and returns
    /// the answer, whose length is checked against the unit's response size
    /// ([`Unit::response_size`]).
    pub fn run(&self, request: &[u8], top_config: u16) -> Result<Vec<u8>, KernelError> {
        let mut out = Vec::new();
        self.run_into(request, top_config, &mut out)?;
        Ok(out)
    }

    /// [`Kernel::run`] into a reused buffer, resized to the answer.  Its old
    /// contents are overwritten by the kernel, not zeroed first; on error it
    /// is left empty.
    pub fn run_into(
        &self,
        request: &[u8],
        top_config: u16,
        out: &mut Vec<u8>,
    ) -> Result<(), KernelError> {
        let len = request.len();
        let request_len = u32::try_from(len)
            .ok()
            .filter(|&n| n >= 64 && n.is_multiple_of(64) && n <= fracflow_proto::MAX_REQUEST_BYTES)
            .ok_or(KernelError::BadRequest(len))?;
        let unit = self.unit.name();
        let expected = self
            .unit
            .response_size(request_len)
            .ok_or(KernelError::NoAnswer {
                unit,
                request_len: len,
            })?;
        // expected <= request_len <= 65472 for every unit.
        let expected_len = expected as usize;
        // Not cleared first: the kernel writes all `expected` bytes of an
        // answer it returns, so re-zeroing a reused buffer on every request
        // would be wasted work; only growth is zero-filled.
        out.resize(expected_len, 0);
        // SAFETY: `request` is valid for `request_len` bytes and `out` for
        // `expected` bytes, the capacity passed; the ABI promises the kernel
        // reads and writes only within those bounds, keeps no pointer after
        // returning and is safe to call from several threads at once.  `run`
        // stays valid while `self._library` is loaded, i.e. while `self` lives.
        let got = unsafe {
            (self.run)(
                request.as_ptr(),
                request_len,
                top_config,
                out.as_mut_ptr(),
                expected,
            )
        };
        if got == i64::from(expected) {
            return Ok(());
        }
        out.clear();
        Err(match got {
            -3 => KernelError::NoAnswer {
                unit,
                request_len: len,
            },
            code if code < 0 => KernelError::Failed { unit, code },
            got => KernelError::WrongLength {
                unit,
                expected: expected_len,
                got,
            },
        })
    }
}
