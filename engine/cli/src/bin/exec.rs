//! `fracflow-exec __exec PPID PROGRAM ARGS…`: the trampoline every node command starts through (see
//! `fracflow_executors::trampoline`), as a binary of its own. It does what `fracflow __exec` does; being small,
//! it starts in a fraction of the time the full `fracflow` takes to be loaded, once per node that runs.

use std::process::ExitCode;

use fracflow_executors::process::TRAMPOLINE_VERB;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(TRAMPOLINE_VERB) {
        eprintln!("error: fracflow-exec is started by the engine, never by hand");
        return ExitCode::from(2);
    }
    fracflow_cli::commands::exec::run(&args[2..])
}
