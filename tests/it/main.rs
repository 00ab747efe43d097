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
mod infer;
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
