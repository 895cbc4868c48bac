//! `fracflow testbed check`: what a testbed profile needs, checked without touching the board.

use std::path::Path;

use clap::Subcommand;

use crate::error::Result;
use crate::exit::Exit;
use crate::project::Testbed;

#[derive(Subcommand, Debug)]
pub enum TestbedAction {
    /// List what is missing or unreachable (tools, NIC address and MTU, ping, sudo, hugepages for the real
    /// fperf, ssh to the server host).
    Check {
        /// Testbed profile from hw/testbeds/.
        #[arg(long, default_value = "emulated")]
        testbed: String,
    },
}

pub fn run(root: &Path, action: &TestbedAction) -> Result<Exit> {
    let TestbedAction::Check { testbed } = action;
    let bed = Testbed::open(root, testbed)?;
    let findings = fracflow_executors::testbed::check(root, &bed.name, &bed.profile);
    println!(
        "testbed `{}` ({}): {}",
        bed.name,
        bed.profile.kind.as_str(),
        bed.profile.description
    );
    for finding in &findings {
        println!(
            "  {:<7} {}: {}",
            if finding.ready { "ok" } else { "MISSING" },
            finding.what,
            finding.detail
        );
    }
    let missing = findings.iter().filter(|f| !f.ready).count();
    if missing == 0 {
        println!("ready");
        Ok(Exit::Ok)
    } else {
        println!("{missing} thing(s) missing or unreachable");
        Ok(Exit::NodeFailed)
    }
}
