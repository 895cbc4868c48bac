//! The `fracflow` command as a library, so its parts are testable: `cli` is the command line, `commands`
//! holds one module per command, `error` the one error type every command returns and `exit` the codes it
//! maps to. `main.rs` only parses and dispatches.

pub mod bundle;
pub mod cli;
pub mod commands;
pub mod compare;
pub mod error;
pub mod exit;
pub mod human;
pub mod project;
pub mod reporter;
pub mod rundirs;
pub mod select;

pub use error::{Error, Result};
pub use exit::Exit;
