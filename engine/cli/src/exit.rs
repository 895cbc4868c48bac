//! The exit codes fracflow documents in the README ("Exit codes"); a test holds the two together.

use std::process::ExitCode;

/// How a command ended, as the shell sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything asked for was built or found in the cache.
    Ok,
    /// At least one node failed.
    NodeFailed,
    /// The pipeline, a profile or the command line is wrong; nothing ran.
    BadInput,
    /// Another run holds the testbed (or, for `cache gc`, is using the cache).
    TestbedBusy,
    /// `cache verify` found corrupt entries or blobs.
    CacheCorrupt,
    /// Every node succeeded, but at least one expectation (`check` node) failed: a result, listed in the
    /// summary and the report.
    ExpectationsFailed,
    /// fracflow itself failed on its own files.
    Internal,
    /// Interrupted by SIGINT, SIGTERM or SIGHUP; completed nodes are kept.
    Interrupted,
}

impl Exit {
    /// Every exit, for the test that compares them with the README.
    pub const ALL: [Exit; 8] = [
        Exit::Ok,
        Exit::NodeFailed,
        Exit::BadInput,
        Exit::TestbedBusy,
        Exit::CacheCorrupt,
        Exit::ExpectationsFailed,
        Exit::Internal,
        Exit::Interrupted,
    ];

    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::NodeFailed => 1,
            Exit::BadInput => 2,
            Exit::TestbedBusy => 3,
            Exit::CacheCorrupt => 4,
            Exit::ExpectationsFailed => 5,
            Exit::Internal => 70,
            Exit::Interrupted => 130,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes in the README's "Exit codes" table, in its order.
    fn documented_codes() -> Vec<u8> {
        let readme = include_str!("../../../README.md");
        let table = readme
            .split("### Exit codes")
            .nth(1)
            .unwrap_or_default()
            .lines()
            .skip_while(|line| !line.starts_with('|'))
            .take_while(|line| line.starts_with('|'));
        table
            .filter_map(|row| row.trim_start_matches('|').split('|').next())
            .filter_map(|cell| cell.trim().parse().ok())
            .collect()
    }

    #[test]
    fn every_exit_is_documented_and_every_documented_code_exists() {
        let ours: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(ours, documented_codes());
    }
}
