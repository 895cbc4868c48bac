//! The embedded software fRAC device: the emulated HLS → weave → bitstream build chain, the device server that speaks the real wire and controller protocol, and the client helpers that program, load and probe it.
//!
//! Facts come from the repository's `docs/frac.md` ("frac §N" in this crate);
//! the wire format itself is [`fracflow_proto`].
//!
//! # Build chain ([`build`])
//!
//! Each step is a pure function of its inputs, so the engine caches each as
//! its own node and passes outputs between nodes as files:
//!
//! * [`build::compile_unit`] compiles `hw/accelerators/<name>/*.cpp` with the
//!   system C++ compiler into a kernel plugin (`plugin.so`, with `unit.json`
//!   beside it; [`CompiledUnit::load`] reads the pair back) behind the C ABI
//!   of `hw/accelerators/frac_kernel.h`, as HLS C-simulation runs the same
//!   source; [`build::compiler_version`] is for the fingerprint.
//! * [`build::weave`] reads `hw/shell.yaml` and every `unit.yaml` and
//!   returns the [`DesignManifest`], the static shell: declarations only, no
//!   plugin contents.  Its `build_id` therefore does not change when an
//!   accelerator's C++ does.  [`build::write_design`] writes `design.json`.
//! * [`build::partials_for_unit`] writes `icap/cXX_fYY.bin` for every cell
//!   the unit is an RM of; [`build::full_image`] writes `jtag/frac.bit`
//!   (each cell's first RM and the allowlist of every unit's plugin hash);
//!   [`build::bypass_image`] writes `bypass/frac.bit`.  The containers are
//!   in [`image`].
//! * [`build::build_design`] runs it all.  Same sources and compiler → same
//!   bytes; editing one unit's C++ changes its plugin, its partials and the
//!   full image, and no other file.
//!
//! # Device ([`Device`])
//!
//! One TCP port serves accelerator requests (workloads 0-3 → slots 0-3, other
//! ids → slot 0) and the reconfiguration controller (workload `0x00ab`);
//! answers follow frac §2.5 exactly, computed for real by the slot's kernel,
//! with no sleeps.  A loopback-only management channel on the data port + 1
//! stands in for JTAG; its protocol is in the [`device`] module docs.
//!
//! ## Where the emulator departs from the board, and why
//!
//! * **Byte stream, not segments.**  Requests are delimited by their declared
//!   size alone ([`fracflow_proto::Reassembler`]): `LAST` on a header-only
//!   segment does not end a request early, and pieces that are not whole
//!   64-byte lines are not dropped — a host-side server cannot see TCP
//!   segment boundaries.
//! * **No 4-queue limit.**  The board has four reassembly queues; a fifth
//!   concurrent multi-segment request stalls its receive path for good
//!   (frac §2.3).  Here every connection reassembles into its own buffer, so
//!   no connection can stall another.  Memory stays bounded instead by the
//!   connection limit (default 1024; extra connections are accepted and
//!   closed at once with a log line) times the largest request (65 472 B).
//! * **Concurrent units.**  Requests of different connections run their
//!   kernels concurrently; answers on one connection stay in request order.
//! * **Bad input closes only its connection, with a log line.**  The board
//!   silently drops a line without `FIRST` where a header is expected; here
//!   a header that fails [`fracflow_proto::RequestHeader::decode`] (no
//!   `FIRST`, bad prefix, size not whole lines, below 64 or above 65 472)
//!   closes the connection.  Controller commands that the protocol answers
//!   with an error status (unknown opcode, misalignment, ...) get that
//!   status and the connection stays open.  A `WRITE_HBM` whose count
//!   exceeds its payload (the board's controller waits forever) closes it.
//! * **Timeouts the board lacks.**  A request must arrive whole within
//!   `request_timeout` (10 s) of its first byte and its answer be taken
//!   within the same time (slowloris and non-reading clients are closed); a
//!   connection idle between requests for `idle_timeout` (300 s) is closed.
//! * **Foreign or misplaced partials are refused.**  `RECONF_ICAP` checks the
//!   container (magic, version, checksum), that its build id is the
//!   programmed image's (the static shell's), that its cell is the slot,
//!   that its RM belongs to that cell and that its plugin's hash is the one
//!   the programmed full image allowlists for the unit.  Any failure answers
//!   `ERR_ICAP` (9) with a log line and leaves the slot unchanged; the board
//!   reports success for a partial of another build and changes nothing
//!   (frac §3).  The build id alone no longer pins the plugin (a partial of
//!   the same shell built from edited C++ has the same build id), so the
//!   allowlist check is what keeps the device from loading it: only images
//!   programmed over the loopback management channel name loadable
//!   plugins, and a network peer can swap modules but never make the device
//!   load code of its own.
//! * **`norm` beyond 256 data lines** closes the connection with a log line;
//!   on the board the slot hangs until reloaded.
//! * **Reprogramming closes every data connection** (the board's network
//!   stack restarts) and clears HBM and the controller's registers.
//! * **An unprogrammed device** closes a connection at its first complete
//!   request, with a log line.  The **bypass image** echoes every byte as it
//!   arrives, parsing nothing (the board's baseline has no fRAC at all).
//! * **HBM** is a sparse map with a byte budget (default 256 MiB); a write
//!   beyond it answers `ERR_AXI_BRESP` (5).
//! * **Query status** reports the reconfiguration's wall time in 5 ns
//!   "cycles"; a reconfiguration is never observed in progress (nor on the
//!   board).  In-flight requests finish on the old module (the board loses
//!   them).
//!
//! # Client helpers ([`client`])
//!
//! [`client::program`], [`client::load_partial`] (per-phase timing, like
//! `reconfslots`) and [`client::probe`] (like `testfuncs`, recognising every
//! unit).

pub mod build;
pub mod client;
pub mod cpu_server;
pub mod design;
pub mod device;
pub mod error;
pub mod hbm;
pub mod image;
pub mod kernel;
pub mod log;
pub mod spec;

pub use build::{
    BitstreamSet, CompiledUnit, FullImageFile, PartialFile, bitstreams, build_design, bypass_image,
    compile_unit, compiler_version, full_image, partials_for_unit, weave, write_design,
};
pub use client::{LoadReport, ProgramReport, SlotProbe, load_partial, probe, program};
pub use cpu_server::{CpuServer, CpuServerConfig, CpuServerStats, RunningCpuServer};
pub use design::{BuildId, DesignManifest};
pub use device::{Device, DeviceConfig, DeviceStatus, ImageKind, RunningDevice, SlotStatus};
pub use error::{Error, Result};
pub use image::{AllowedPlugin, FullImage, ImageError, PartialImage};
pub use kernel::{Kernel, KernelError};
pub use log::{Level, LogEvent, LogSink, MemoryLog};
