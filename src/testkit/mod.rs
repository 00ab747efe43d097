//! What the tests share: prepared Jetson sysfs/procfs/rootfs trees (`jetson`, also for the
//! integration tests through the `testkit` feature) and, for the unit tests, power monitors on
//! those trees (`power`), result rows and iteration records (`rows`). Not part of what the crate
//! offers.

pub mod jetson;
#[cfg(test)]
pub(crate) mod power;
#[cfg(test)]
pub(crate) mod rows;
