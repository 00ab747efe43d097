//! Memory: procfs counters, the sampler that reads them while a worker trains, the swap
//! verdict, the pre-trial estimate, and the per-trial memory cgroup.

pub mod cgroup;
pub(crate) mod estimate;
pub mod procfs;
pub(crate) mod sampler;
pub(crate) mod verdict;

pub(crate) use sampler::{MemoryObserver, MemorySample, MemorySampler, Watch};
pub(crate) use verdict::{assess, MemoryReport, SwapThresholds};
