//! The exit codes fracflow documents in the README.

/// Everything asked for was built or found in the cache.
pub const OK: u8 = 0;
/// At least one node failed.
pub const NODE_FAILED: u8 = 1;
/// The pipeline, a profile or the command line is wrong; nothing ran.
pub const BAD_INPUT: u8 = 2;
/// Another run holds the testbed (or, for `cache gc`, is using the cache).
pub const TESTBED_BUSY: u8 = 3;
/// `cache verify` found corrupt entries or blobs.
pub const CACHE_CORRUPT: u8 = 4;
/// Every node succeeded, but at least one expectation (`check` node) failed: a result, listed in the summary
/// and the report.
pub const EXPECTATIONS_FAILED: u8 = 5;
/// fracflow itself failed (I/O error on its own files).
pub const INTERNAL: u8 = 70;
/// Interrupted by SIGINT, SIGTERM or SIGHUP; completed nodes are kept.
pub const INTERRUPTED: u8 = 130;
