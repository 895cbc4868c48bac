//! The command line: the global flags and one variant per command, whose flags live with the command.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::commands::{
    bitstreams::BitstreamsAction,
    cache::CacheAction,
    clean::CleanArgs,
    completions::{CompletionsArgs, ManArgs},
    cpu_server::CpuServerArgs,
    device::DeviceCommand,
    diff::DiffArgs,
    export::ExportArgs,
    graph::GraphArgs,
    logs::LogsArgs,
    plan::PlanArgs,
    plot::PlotArgs,
    run::RunArgs,
    runs::RunsArgs,
    status::StatusArgs,
    testbed::TestbedAction,
    verify::VerifyArgs,
    why::WhyArgs,
};

#[derive(Parser, Debug)]
#[command(
    name = "fracflow",
    version,
    about = "Rebuild, re-measure and re-plot hardware research artifacts as a content-hashed DAG"
)]
pub struct Cli {
    #[command(flatten)]
    pub globals: Globals,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug)]
pub struct Globals {
    /// Project root (default: FRACFLOW_ROOT, else the nearest folder above with a `pipelines/` folder).
    #[arg(long, global = true)]
    pub root: Option<PathBuf>,
    /// Cache directory (default: FRACFLOW_CACHE, else <root>/.fracflow/cache).
    #[arg(long, global = true)]
    pub cache: Option<PathBuf>,
    #[command(flatten)]
    pub remote: RemoteFlags,
}

/// The lab's remote cache behind the local one (`run` and `plan` use it).
#[derive(Args, Debug, Clone, Default)]
pub struct RemoteFlags {
    /// http(s)://HOST/PATH (WebDAV PUT/GET/HEAD) or s3://BUCKET/PREFIX (default: FRACFLOW_REMOTE_CACHE, else
    /// the testbed profile's `remote_cache.url`). Credentials: FRACFLOW_REMOTE_CACHE_USER and
    /// FRACFLOW_REMOTE_CACHE_PASSWORD, or netrc; for S3 the AWS_* variables.
    #[arg(long, global = true, value_name = "URL")]
    pub remote_cache: Option<String>,
    /// `read` only downloads; `read-write` (default) also uploads what this machine builds (default:
    /// FRACFLOW_REMOTE_CACHE_MODE, else the profile's).
    #[arg(long, global = true, value_name = "MODE", value_parser = ["read", "read-write"])]
    pub remote_cache_mode: Option<String>,
    /// Entries larger than this many MiB are not uploaded (default: the profile's, else 256).
    #[arg(long, global = true, value_name = "MIB")]
    pub remote_cache_max_upload: Option<u64>,
    /// Never upload nodes of this kind (repeatable; added to the profile's `skip_kinds`).
    #[arg(long, global = true, value_name = "KIND")]
    pub remote_cache_skip_kind: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build, run and measure what TARGET needs; everything cached is reused.
    Run(RunArgs),
    /// Print what `run` would do and why, with estimated time and disk; touches nothing.
    Plan(PlanArgs),
    /// Name the fingerprint fields of NODE that differ from its newest cached entry.
    Why(WhyArgs),
    /// Re-draw TARGET's figures from a run's stored tables, without measuring anything.
    Plot(PlotArgs),
    /// Print the DAG of TARGET.
    Graph(GraphArgs),
    /// List the pipelines and their targets.
    Targets,
    /// The embedded load client: fperf's flags (-c -p -t rr -d -n -C -S -m -X -R -Z -K -F -L -D -E) and
    /// console output, plus --open-loop RATE[:poisson|:fixed], --skip S, --samples FILE.parquet, --json.
    #[command(disable_help_flag = true)]
    Client {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The software Top-K baseline server of Figure 16 (fperf's `-Z 0` protocol), K pinned workers.
    CpuServer(CpuServerArgs),
    /// The emulated fRAC device and its controller client.
    Device {
        #[command(subcommand)]
        action: DeviceCommand,
    },
    /// What a testbed profile needs, checked without touching the board.
    Testbed {
        #[command(subcommand)]
        action: TestbedAction,
    },
    /// Pin prebuilt Xilinx images by sha256 in bitstreams/NAME.yaml, and re-check them.
    Bitstreams {
        #[command(subcommand)]
        action: BitstreamsAction,
    },
    /// Inspect or clean the cache.
    Cache {
        #[command(subcommand)]
        action: CacheAction,
    },
    /// List the runs under results/, newest first: status, duration, node counts, claims, git commit.
    Runs(RunsArgs),
    /// The runs in progress on this machine: nodes done, running and left, and an estimate of the time left.
    Status(StatusArgs),
    /// Print a node's log from a run (default: the newest run holding the node).
    Logs(LogsArgs),
    /// Remove old run directories; never one a `latest` link points at, a running one, or one a kept run borrows.
    Clean(CleanArgs),
    /// What differed between two runs of a pipeline, and per summary point whether it improved, regressed or
    /// did not change (95 % bootstrap intervals from the raw records: resampled seconds or blocks of requests).
    Diff(DiffArgs),
    /// Write an artifact-evaluation bundle of a run: report, figures, tables, provenance, logs, SHA256SUMS.
    Export(ExportArgs),
    /// Check a bundle written by `export`: every hash, nothing unlisted, and every figure re-drawn from its tables.
    Verify(VerifyArgs),
    /// Print a completion script for bash, zsh or fish.
    Completions(CompletionsArgs),
    /// Write the man pages.
    Man(ManArgs),
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_values_are_refused_while_parsing_with_exit_2() {
        for argv in [
            &["fracflow", "run", "demo", "--jobs", "0"][..],
            &["fracflow", "run", "demo", "--rerun", "["],
            &["fracflow", "plan", "demo", "--rerun", "a[b"],
            &["fracflow", "cpu-server", "-n", "0"],
            &["fracflow", "cache", "gc", "--keep-days", "inf"],
            &["fracflow", "clean", "--older-than", "7 days"],
            &["fracflow", "completions", "powershell"],
        ] {
            let error = Cli::try_parse_from(argv).expect_err("a bad value");
            assert_eq!(error.exit_code(), 2, "{argv:?}: {error}");
        }
        let fine = Cli::try_parse_from(["fracflow", "run", "demo", "-j", "2", "--rerun", "gen*"]);
        assert!(fine.is_ok(), "{fine:?}");
    }
}
