//! Integration tests of the load client against the emulated fRAC device
//! (started in-process on 127.0.0.1:0) and tiny in-test TCP servers.

mod common;
mod config_errors;
mod faults;
mod format;
mod load;
mod trace_replay;
