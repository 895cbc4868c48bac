//! `fracflow __exec PPID PROGRAM ARGS…` (hidden): how the engine starts commands, a supervising trampoline that
//! ties the life of the program and of everything it starts to the engine's (see
//! `fracflow_executors::trampoline`).

use std::process::ExitCode;

use crate::exit::Exit;

/// Runs before any argument parsing; ends as the program ended (its exit code, or death by its signal).
pub fn run(args: &[String]) -> ExitCode {
    let (Some(parent), Some(program)) = (args.first().and_then(|p| p.parse().ok()), args.get(1))
    else {
        eprintln!("error: usage: fracflow __exec PPID PROGRAM [ARGS…] (internal)");
        return Exit::BadInput.into();
    };
    match fracflow_executors::trampoline::supervise(parent, program, &args[2..]) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("error: cannot run {program}\ncaused by: {error}");
            // 127: the shell's code for a command that could not be run.
            ExitCode::from(127)
        }
    }
}
