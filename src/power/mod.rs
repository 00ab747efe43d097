//! Power measurement: sources behind one small trait (raw INA226 over I2C, the kernel's
//! ina3221/ina3221x/ina2xx, RAPL), discovery guided by the board profile, sampler threads and
//! the energy arithmetic.
//!
//! What the runner calls, in order:
//! 1. [`PowerMonitor::for_run`] before anything is written (no sensor = an error to exit 2 on);
//! 2. [`PowerMonitor::baseline`] once per run, stored with the run;
//! 3. per trial [`PowerMonitor::start`] before the first iteration, [`RecordingHandle::stop`]
//!    after the last, then [`PowerMonitor::assess_trial`] with the trial's iteration records.
//!
//! Files: `discovery` finds the sources, `rails` decides which of their rails make the total and
//! at what scope, `monitor` records and reads them over a run, `trial` makes a trial's power
//! record from its samples, `report` is `edgebench sensors`.

mod discovery;
pub(crate) mod energy;
pub(crate) mod hwmon;
pub(crate) mod ina226;
pub(crate) mod marker;
mod monitor;
mod rails;
pub(crate) mod rapl;
mod report;
pub(crate) mod sampler;
mod trial;

pub use discovery::Probe;
pub use monitor::PowerMonitor;
pub use report::RailNow;
pub use report::{sensors, sensors_text};
pub use report::{SensorsReport, SourceNow};
pub(crate) use sampler::Health;
pub use sampler::LiveSink;
pub use sampler::RecordingHandle;
pub use sampler::{RailSeries, Samples};
use serde::Serialize;
use std::time::Duration;
pub(crate) use trial::MIN_SENSOR_UPDATES;
pub use trial::{PowerSeries, TrialPower, TrialPowerRecord};

/// One rail's reading. Energy counters (RAPL) have no voltage or current.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub volts: Option<f64>,
    pub amps: Option<f64>,
    pub watts: f64,
}

/// A power monitor with one or more rails.
pub(crate) trait PowerSource: Send {
    /// Driver and location, e.g. `ina3221 1-0040 (/sys/.../hwmon3)`.
    fn describe(&self) -> String;
    fn rails(&self) -> &[String];
    /// One reading per rail, in `rails()` order.
    fn read(&mut self) -> anyhow::Result<Vec<Reading>>;
    /// The source's natural sampling period (its update interval).
    fn default_period(&self) -> Duration;
}

/// The idle power before the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Baseline {
    pub power_w: f64,
    pub duration_s: f64,
}
