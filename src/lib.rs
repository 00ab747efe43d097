//! edgebench: a benchmark agent for Jetson-class boards and Linux hosts. It runs workloads
//! (CNN training and inference, the MLP and operator studies, any framework's training command,
//! the idle board; `src/workloads/`, one folder each) while it samples power, memory and
//! clocks, logs every iteration to SQLite, and turns the results into tables, CSV files and
//! figures. `docs/architecture.md` walks through the layers and how to add a workload.
//!
//! Layers, each importing only from those below it:
//!
//! - `daemon` (and the binary's `main`/`cli`): the control plane; both start sweeps through
//!   [`runner::sweep`]. Beside them at the top, `fuzz`: the fuzz targets over what is read
//!   from outside.
//! - `runner` (parent: lock, preflight, one worker process per trial, classification,
//!   summary) over `plan` (config -> trials and resume keys) and `worker` (the child process
//!   that runs one trial of one workload).
//! - `workloads` (each: config section, plan, run in the worker, metrics, report section) over
//!   `train` and `models` (BVLC specs -> candle graphs, on the `edgebench-kernels` crate).
//! - `render` (tables, figures, CSV files of the store's rows; the `Section` a workload's
//!   report implements) over `store` (SQLite, one writer); reading the store only, `report`
//!   (running every section) and `sync`.
//! - measurement beside the runner: `power`, `memory`, `provenance`; above them `metrics`
//!   (the live Prometheus view of what they read, served over HTTP).
//! - the bottom: `config`, `record` (iteration records, metrics), `stats`, `board`, `host`,
//!   `clock`, `text` (text from outside made fit to show: long text cut, passwords masked).

pub mod board;
mod clock;
pub mod config;
pub mod daemon;
// The fuzz targets, for crates/edgebench-fuzz: not part of what the crate offers.
#[doc(hidden)]
pub mod fuzz;
pub mod host;
pub mod memory;
pub mod metrics;
pub mod models;
mod plan;
pub mod power;
pub mod provenance;
pub mod record;
pub(crate) mod render;
pub mod report;
pub mod runner;
mod stats;
pub mod store;
pub mod sync;
// What the tests share; the integration tests reach it through the `testkit` feature.
#[cfg(any(test, feature = "testkit"))]
#[doc(hidden)]
pub mod testkit;
mod text;
pub mod train;
pub mod worker;
pub mod workloads;
