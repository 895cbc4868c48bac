//! Integration tests of the emulated fRAC device and its build chain.  The
//! real accelerators are compiled once per test binary with the system C++
//! compiler (`$CXX`, default `g++`).

mod bad_input;
mod build_chain;
mod common;
mod cpu_server;
mod incremental;
mod management;
mod models;
mod reconf;
mod units;
