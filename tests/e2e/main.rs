//! End-to-end tests: the real `fracflow` binary on throwaway projects.

mod support;

mod bad_config;
mod bitstreams;
mod board_double;
mod demo;
mod device_check;
mod diffexport;
mod figures;
mod fpga;
mod injection;
mod kill;
mod lock;
mod noop;
mod orphans;
mod plan_why;
mod provenance;
mod realflow;
mod refused;
mod remote_cache;
mod rpcnic;
mod shared_cache;
mod slurm;
mod ssh;
mod staging;
mod sume;
mod testbed;
mod tidy;
mod trace;
mod workbench;
