//! `fracflow`: parses the command line and dispatches to one module of `commands` per command; every error
//! is rendered here, one way (see `error.rs`), and mapped to the exit codes in `exit.rs`.

use std::process::ExitCode;

use clap::Parser;
use fracflow_cli::cli::{Cli, Command};
use fracflow_cli::commands;
use fracflow_cli::project::{self, Project};
use fracflow_cli::{Exit, Result};
use fracflow_executors::{process, slurm, spawner};

/// A run allocates and frees per node (specs, keys, manifest records); glibc's allocator made that a quarter of
/// a 10 000-node no-op (`bench/engine_vs_peers.sh`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    // The hidden verbs run before clap: they are started by the engine, never typed.
    if args.get(1).map(String::as_str) == Some(spawner::SPAWNER_VERB) {
        return spawner::serve(&args[2..]);
    }
    if let Ok(binary) = std::env::current_exe() {
        // The small spawner built beside this binary when there is one (`cargo build` makes both; `cargo run`
        // only this one), otherwise this binary's own hidden verb.
        let small = binary.with_file_name("fracflow-exec");
        process::use_spawner(if small.is_file() { small } else { binary });
    }
    let outcome = if args.get(1).map(String::as_str) == Some(slurm::NODE_EXEC_VERB) {
        commands::node_exec::run(&args[2..])
    } else {
        dispatch(Cli::parse())
    };
    match outcome {
        Ok(exit) => exit.into(),
        Err(error) => {
            eprintln!("{}", error.render());
            error.exit().into()
        }
    }
}

fn dispatch(cli: Cli) -> Result<Exit> {
    let root = cli.globals.root.as_deref();
    let cache = cli.globals.cache.as_deref();
    match cli.command {
        Command::Run(args) => commands::run::run(
            &Project::open(root, cache, Some(&args.select.testbed))?
                .with_remote(&cli.globals.remote)?,
            &args,
        ),
        Command::Plan(args) => commands::plan::run(
            &Project::open(root, cache, Some(&args.select.testbed))?
                .with_remote(&cli.globals.remote)?,
            &args,
        ),
        Command::Why(args) => {
            commands::why::run(&Project::open(root, cache, Some(&args.testbed))?, &args)
        }
        Command::Plot(args) => commands::plot::run(
            &Project::open(root, cache, Some(&args.select.testbed))?,
            &args,
        ),
        Command::Graph(args) => commands::graph::run(
            &Project::open(root, cache, Some(&args.select.testbed))?,
            &args,
        ),
        Command::Targets => commands::targets::run(&project::find_root(root)?),
        Command::Client { args } => commands::client::run(args),
        Command::CpuServer(args) => commands::cpu_server::run(args),
        Command::Device { action } => commands::device::run(action),
        Command::Testbed { action } => commands::testbed::run(&project::find_root(root)?, &action),
        Command::Bitstreams { action } => {
            commands::bitstreams::run(&project::find_root(root)?, &action)
        }
        Command::Cache { action } => {
            commands::cache::run(&Project::open(root, cache, None)?, &action)
        }
        Command::Runs(args) => commands::runs::run(&project::find_root(root)?, &args),
        Command::Status(args) => commands::status::run(cache, &args),
        Command::Logs(args) => commands::logs::run(&project::find_root(root)?, &args),
        Command::Clean(args) => commands::clean::run(&project::find_root(root)?, &args),
        Command::Diff(args) => commands::diff::run(&Project::open(root, cache, None)?, &args),
        Command::Export(args) => commands::export::run(&Project::open(root, cache, None)?, &args),
        Command::Verify(args) => commands::verify::run(&args),
        Command::Completions(args) => commands::completions::completions(&args),
        Command::Man(args) => commands::completions::man(&args),
    }
}
