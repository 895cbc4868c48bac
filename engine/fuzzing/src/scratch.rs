//! The scratch project the file-reading targets share: a copy of the repository's `pipelines/` and `hw/`, with
//! bait outside it that no accepted path may reach.
//!
//! Layout, under one temporary directory per process (in `/dev/shm` where it exists, so the loader's fsyncs
//! cost little):
//!
//! ```text
//! bait.yaml, bait_set.yaml outside the project: a pipeline and a node set that would load
//! bait.txt                 outside the project: a file an input could name
//! project/                 the root every target loads from
//!   pipelines/, hw/        copies of the repository's
//!   escape -> ..           a symlink out of the project (inputs: [escape/bait.txt] must be refused)
//! ```

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The repository this crate lives in (its seeds and the files the scratch project copies).
pub(crate) fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[derive(Debug)]
pub(crate) struct Scratch {
    /// The temporary directory; kept for the process's life (libFuzzer exits without running destructors).
    top: PathBuf,
    /// `top/project`, canonical.
    pub root: PathBuf,
}

static SCRATCH: OnceLock<Scratch> = OnceLock::new();

/// The process's scratch project, made on first use.
pub(crate) fn scratch() -> &'static Scratch {
    SCRATCH.get_or_init(|| match make() {
        Ok(scratch) => scratch,
        // A fuzz harness without its scratch directory cannot run at all; say why once.
        Err(e) => panic!("cannot make the fuzz scratch project: {e}"),
    })
}

/// Removes the scratch project, if this process made one (the corpus test calls it at its end).
pub fn remove_scratch() {
    if let Some(scratch) = SCRATCH.get() {
        let _ = std::fs::remove_dir_all(&scratch.top);
    }
}

fn make() -> std::io::Result<Scratch> {
    let shm = Path::new("/dev/shm");
    let parent = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let top = tempfile::Builder::new()
        .prefix("fracflow-fuzz-")
        .tempdir_in(parent)?
        .keep();
    std::fs::write(top.join("bait.yaml"), "pipeline: bait\nnodes: {}\n")?;
    std::fs::write(
        top.join("bait_set.yaml"),
        "nodes:\n  outside: {kind: command, run: \"true\"}\n",
    )?;
    std::fs::write(top.join("bait.txt"), "outside the project\n")?;
    let project = top.join("project");
    std::fs::create_dir(&project)?;
    let repository = repository();
    for dir in ["pipelines", "hw"] {
        copy_tree(&repository.join(dir), &project.join(dir))?;
    }
    #[cfg(unix)]
    std::os::unix::fs::symlink("..", project.join("escape"))?;
    let root = std::fs::canonicalize(&project)?;
    Ok(Scratch { top, root })
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Whether `path` (absolute, or relative to `root`) exists and resolves, symlinks followed, to somewhere under
/// `root` (which is canonical).
pub(crate) fn inside(root: &Path, path: &Path) -> bool {
    std::fs::canonicalize(root.join(path)).is_ok_and(|real| real.starts_with(root))
}
