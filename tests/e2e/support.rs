//! A throwaway fracflow project and helpers to run the binary in it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        let sandbox = Sandbox { dir };
        sandbox.write(
            "hw/testbeds/emulated.yaml",
            // As the shipped emulated profile: a trace replay without its file uses a synthetic trace.
            "kind: emulated\ndescription: test\nadapt:\n  synthetic_trace: true\n",
        );
        sandbox.write(
            "hw/testbeds/other.yaml",
            "kind: emulated\ndescription: a second testbed\n",
        );
        std::fs::create_dir_all(sandbox.path().join("pipelines")).expect("pipelines dir");
        sandbox
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, relative: &str, text: &str) {
        let path = self.path().join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    /// `fracflow ARGS` in this project, with its own lock directory and cache.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_fracflow"));
        command
            .args(args)
            .current_dir(self.path())
            .env("FRACFLOW_ROOT", self.path())
            .env("FRACFLOW_LOCK_DIR", self.path().join("locks"))
            .env_remove("FRACFLOW_CACHE");
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("spawn fracflow")
    }

    pub fn results(&self, pipeline: &str) -> PathBuf {
        self.path().join("results").join(pipeline)
    }

    /// The `latest` link of `pipeline` that runs of `variant` (`Some("smoke")` for `--smoke`) on `testbed`
    /// replace: `latest`, `latest-smoke`, `latest-<testbed>`, `latest-smoke-<testbed>` (the engine's rule).
    pub fn latest_on(&self, pipeline: &str, variant: Option<&str>, testbed: &str) -> PathBuf {
        self.results(pipeline)
            .join(fracflow_core::run::latest_link(variant, testbed))
    }

    /// The `latest` link of `pipeline`'s `--smoke` runs on the emulated testbed.
    pub fn latest_smoke(&self, pipeline: &str) -> PathBuf {
        self.latest_on(pipeline, Some("smoke"), "emulated")
    }
}

/// A spawned process that is SIGKILLed and reaped when dropped, so a failing assertion leaves nothing running.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A small xorshift generator: the tests print their seed so a failure can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn from_env_or_time() -> Rng {
        let seed = std::env::var("FRACFLOW_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("random seed {seed} (set FRACFLOW_TEST_SEED to replay)");
        Rng(seed | 1)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// Copies a directory tree (the repository's hw/ or pipelines/ into a sandbox).
/// The repository's root (the e2e tests copy its pipelines and hardware sources).
pub fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// A project with the repository's hardware sources and fRAC pipelines.
pub fn frac_project() -> Sandbox {
    let sandbox = Sandbox::new();
    copy_tree(
        &repo().join("hw/accelerators"),
        &sandbox.path().join("hw/accelerators"),
    );
    std::fs::copy(
        repo().join("hw/shell.yaml"),
        sandbox.path().join("hw/shell.yaml"),
    )
    .expect("shell");
    copy_tree(
        &repo().join("pipelines/frac"),
        &sandbox.path().join("pipelines/frac"),
    );
    sandbox
}
