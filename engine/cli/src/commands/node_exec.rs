//! `fracflow __node-exec DIR` (hidden): one node inside a Slurm job (see `fracflow_executors::slurm`).

use std::path::Path;

use crate::error::{Error, Result};
use crate::exit::Exit;

pub fn run(args: &[String]) -> Result<Exit> {
    let [dir] = args else {
        return Err(Error::bad_input(
            "usage: fracflow __node-exec DIR (internal, run by Slurm jobs)",
        ));
    };
    let kinds = fracflow_executors::Registry::builtin();
    fracflow_executors::slurm::node_exec(Path::new(dir), &kinds).map_err(Error::failed)?;
    Ok(Exit::Ok)
}
