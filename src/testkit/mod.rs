//! What the tests share: prepared Jetson sysfs/procfs/rootfs trees (`jetson`, also for the
//! integration tests through the `testkit` feature) and, for the unit tests, result rows and
//! iteration records (`rows`). Not part of what the crate offers.

pub mod jetson;
#[cfg(test)]
pub(crate) mod rows;
