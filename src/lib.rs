//! edgebench: trains the classic CNNs with candle, sweeping batch sizes, and logs every
//! iteration to SQLite. Data flows one way: config -> plan -> runner/train -> store -> report.

pub mod board;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod host;
pub mod memory;
pub mod models;
pub mod plan;
pub mod power;
pub mod provenance;
pub mod report;
pub mod runner;
pub mod stats;
pub mod store;
pub mod sync;
pub mod train;
pub mod worker;
pub mod workloads;
