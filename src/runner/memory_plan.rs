//! What a run knows about memory before its first trial: the cgroup to put trials in, the cap,
//! the host's swap devices, and the capacity each trial's estimate is checked against.

use crate::config::Config;
use crate::host::HostPaths;
use crate::memory::procfs::ProcReader;
use crate::memory::{cgroup, estimate, SwapThresholds};
use std::time::Duration;

pub(super) fn plan(config: &Config, host: &HostPaths) -> anyhow::Result<MemoryPlan> {
    let limit = config.memory.limit_bytes();
    let swaps = ProcReader::new(host).swaps();
    let swap_devices = if swaps.is_empty() {
        "no swap".to_string()
    } else {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let list: Vec<String> = swaps
            .iter()
            .map(|s| {
                let kind = if s.zram { "zram" } else { s.kind.as_str() };
                format!("{} ({kind}, {:.1} GiB)", s.name, gib(s.size_bytes))
            })
            .collect();
        format!("swap on {}", list.join(", "))
    };
    Ok(MemoryPlan {
        swap_devices,
        limit,
        swap_limit: config.memory.swap_limit_bytes(),
        // Without --mem-limit a cgroup is still worth having (it attributes OOM kills to the
        // trial), but not worth failing for.
        parent: match limit {
            Some(_) => Some(cgroup::locate(host)?),
            None => cgroup::locate(host).ok(),
        },
        thresholds: SwapThresholds {
            major_faults_per_iteration: config.memory.major_faults_per_iteration,
        },
        interval: Duration::from_millis(config.memory.sample_interval_ms),
        try_anyway: config.memory.try_anyway,
    })
}

/// What the run knows about memory before any trial: the host's capacity and the cgroup cap.
pub(super) struct MemoryPlan {
    /// The host's swap devices at the start of the run, in words (zram or disk matters).
    pub swap_devices: String,
    pub limit: Option<u64>,
    pub swap_limit: Option<u64>,
    pub parent: Option<cgroup::CgroupParent>,
    pub thresholds: SwapThresholds,
    pub interval: Duration,
    pub try_anyway: bool,
}

impl MemoryPlan {
    pub fn capacity(&self, host: &HostPaths) -> Option<estimate::Capacity> {
        let m = ProcReader::new(host).meminfo()?;
        let ram = self.limit.map_or(m.mem_total, |l| l.min(m.mem_total));
        Some(estimate::Capacity {
            ram_bytes: ram,
            available_bytes: m.mem_available.min(ram),
            swap_bytes: self.swap_limit.map_or(m.swap_free, |s| s.min(m.swap_free)),
        })
    }
}
