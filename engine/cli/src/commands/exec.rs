//! `fracflow __exec PPID PROGRAM ARGS…` (hidden): how the engine starts commands, a trampoline that ties the
//! program's life to the engine's (see `fracflow_executors::process::use_trampoline`).

use std::process::ExitCode;

use crate::exit::Exit;

/// Runs before any argument parsing and never returns on success: the program replaces this process.
pub fn run(args: &[String]) -> ExitCode {
    let (Some(parent), Some(program)) = (args.first().and_then(|p| p.parse().ok()), args.get(1))
    else {
        eprintln!("error: usage: fracflow __exec PPID PROGRAM [ARGS…] (internal)");
        return Exit::BadInput.into();
    };
    let error =
        fracflow_executors::process::exec_with_parent_death_signal(parent, program, &args[2..]);
    eprintln!("error: cannot run {program}\ncaused by: {error}");
    // 127: the shell's code for a command that could not be run.
    ExitCode::from(127)
}
