//! `fracflow-exec __spawner ENGINE_PID`: the spawner every node command starts through (see
//! `fracflow_executors::spawner`), as a binary of its own. It does what `fracflow __spawner` does; being small,
//! the supervisors it forks are small processes.

use std::process::ExitCode;

use fracflow_executors::spawner::{SPAWNER_VERB, serve};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(SPAWNER_VERB) {
        eprintln!("error: fracflow-exec is started by the engine, never by hand");
        return ExitCode::from(2);
    }
    serve(&args[2..])
}
