//! `fracflow completions SHELL` and `fracflow man [--out DIR]`: shell completions and man pages generated
//! from the same clap definitions the command parses with, so they never drift from it.

use std::path::PathBuf;

use clap::{Args, CommandFactory, ValueEnum};

use crate::cli::Cli;
use crate::error::{Error, Result};
use crate::exit::Exit;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for; the script goes to stdout.
    pub shell: Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write `fracflow.1` and one `fracflow-<command>.1` per command into DIR (default: `fracflow.1` on stdout).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn completions(args: &CompletionsArgs) -> Result<Exit> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut command = Cli::command();
    // Generated into memory first: the generator panics on a failed write, and a closed pipe (`| head`) is not
    // an error of ours.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "fracflow", &mut script);
    super::runs::print_out(&script)?;
    Ok(Exit::Ok)
}

pub fn man(args: &ManArgs) -> Result<Exit> {
    let command = Cli::command();
    match &args.out {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut page)
                .map_err(|e| Error::internal("writing the man page", e))?;
            super::runs::print_out(&page)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io("cannot write the man pages into", dir, e))?;
            clap_mangen::generate_to(command, dir)
                .map_err(|e| Error::io("cannot write the man pages into", dir, e))?;
            println!("man pages written to {}", dir.display());
        }
    }
    Ok(Exit::Ok)
}
