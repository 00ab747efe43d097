//! The integration tests, one module per area, linked into one binary (`--test it`): one link
//! of the library and its dependencies instead of one per area. A single area runs with
//! `cargo test --test it -- store::`.

mod common;
mod fixtures;

mod annex_c;
mod architecture;
mod board;
mod cli;
mod daemon;
mod exec;
mod memory;
mod metrics;
mod models;
mod postgres;
mod power;
mod provenance;
mod report;
mod store;
mod sync;
mod window;
mod workloads;

// Each workload's own tests, kept in its folder: `src/workloads/<name>/it.rs` (build.rs).
include!(concat!(env!("OUT_DIR"), "/workload_tests.rs"));
