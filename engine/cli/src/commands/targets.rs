//! `fracflow targets`: the pipelines of the project and their named targets.

use std::path::Path;

use crate::error::Result;
use crate::exit::Exit;
use crate::human::shown;

pub fn run(root: &Path) -> Result<Exit> {
    for entry in fracflow_loader::discover(root) {
        println!(
            "{:<24} {:<40} targets: {}",
            entry.name,
            shown(root, &entry.path),
            entry.targets.join(", ")
        );
    }
    Ok(Exit::Ok)
}
