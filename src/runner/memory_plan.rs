//! What a run knows about memory before its first trial: the cgroup to put trials in, the cap,
//! the host's swap devices, whether the GPU shares system RAM, and the capacity each trial's
//! estimate is checked against; and the two judgements made with it, before a trial (does it
//! fit?) and after (did swap spoil it?).

use crate::board::BoardProfile;
use crate::config::{Config, DeviceKind};
use crate::host::HostPaths;
use crate::memory::procfs::ProcReader;
use crate::memory::{assess, cgroup, estimate, MemoryReport, MemorySample, SwapThresholds};
use crate::workloads::PlannedTrial;
use std::time::Duration;

/// The memory plan of a sweep of `config` on `board` (the sweep's one resolved profile).
pub(super) fn plan(
    config: &Config,
    host: &HostPaths,
    board: &BoardProfile,
) -> anyhow::Result<MemoryPlan> {
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
        gpu_integrated: board.gpu_integrated,
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
    /// The board's GPU allocates from system RAM (its profile's `gpu_integrated`).
    pub gpu_integrated: bool,
}

/// What the memory check before a trial decided.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Preflight {
    /// Run it; the warning says it is predicted to swap.
    Run { warning: Option<String> },
    /// Record it `skipped_memory` without running it, for this reason.
    Skip(String),
}

/// The memory verdict of a trial that ran.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Assessed {
    pub report: MemoryReport,
    /// `trials.swap_pressure`: None when nothing was sampled or no iteration was measured.
    pub swap_pressure: Option<bool>,
    /// `trial_memory.memory_note`.
    pub note: String,
}

impl MemoryPlan {
    pub(super) fn capacity(&self, host: &HostPaths) -> Option<estimate::Capacity> {
        let m = ProcReader::new(host).meminfo()?;
        let ram = self.limit.map_or(m.mem_total, |l| l.min(m.mem_total));
        Some(estimate::Capacity {
            ram_bytes: ram,
            available_bytes: m.mem_available.min(ram),
            swap_bytes: self.swap_limit.map_or(m.swap_free, |s| s.min(m.swap_free)),
        })
    }

    /// A CUDA trial on a GPU that shares the CPU's DRAM: what it allocates on the device is
    /// system RAM.
    pub(super) fn gpu_shares_ram(&self, trial: &PlannedTrial) -> bool {
        self.gpu_integrated && trial.key.device == DeviceKind::Cuda.as_str()
    }

    /// The trial's estimate against RAM and swap. A CPU trial's tensors (weights, gradients,
    /// momentum, activations) are its process's memory; on an integrated GPU a CUDA trial's
    /// are the same bytes, allocated on the device but out of the same DRAM, so they count
    /// against RAM alike. A CUDA trial on a discrete GPU or an unknown board is checked the
    /// same way too, which is conservative there: its tensors live in the GPU's own memory.
    pub(super) fn preflight(&self, host: &HostPaths, trial: &PlannedTrial) -> Preflight {
        let Some(cap) = self.capacity(host) else {
            return Preflight::Run { warning: None };
        };
        let need = trial.memory_estimate_bytes;
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let on_gpu = match self.gpu_shares_ram(trial) {
            true => " (GPU memory, taken from RAM on this integrated GPU)",
            false => "",
        };
        match estimate::fit(need, cap) {
            estimate::Fit::TooLarge if !self.try_anyway => Preflight::Skip(format!(
                "predicted to need {:.2} GiB{on_gpu}, more than RAM {:.2} GiB + swap {:.2} GiB; \
                 skipped (--try-anyway runs it)",
                gib(need),
                gib(cap.ram_bytes),
                gib(cap.swap_bytes)
            )),
            estimate::Fit::NeedsSwap | estimate::Fit::TooLarge => Preflight::Run {
                warning: Some(format!(
                    "predicted to need {:.2} GiB{on_gpu}, more than the {:.2} GiB available: it \
                     will swap",
                    gib(need),
                    gib(cap.available_bytes)
                )),
            },
            estimate::Fit::Fits => Preflight::Run { warning: None },
        }
    }

    /// What an OOM kill's error adds where the cap, not a full swap, ended the trial: under
    /// `--mem-limit` with the host's swap (no `--mem-swap-limit`), the kernel's memory cgroup
    /// kills a trial whose paging outruns the cgroup's reclaim although swap is free, where a
    /// board without the cap would have swapped on. None when swap ran short at some sample
    /// (under 64 MiB free), when the cap has its own swap limit, or without a cap.
    pub(super) fn oom_with_swap_free(&self, samples: &[MemorySample]) -> Option<String> {
        let limit = self.limit.filter(|_| self.swap_limit.is_none())?;
        let least_free = samples
            .iter()
            .filter_map(|s| s.system.map(|m| m.swap_free))
            .min()?;
        (least_free >= 64 << 20).then(|| {
            format!(
                "; but swap never ran short ({} MiB free at the least): under the {} MiB cap the \
                 kernel's memory cgroup kills a trial whose paging outruns its reclaim, so a \
                 larger --mem-limit may let it finish (its time would be swap-spoiled)",
                least_free >> 20,
                limit >> 20
            )
        })
    }

    /// The swap verdict over the trial's measured iterations (`from_ns`..`to_ns`, `measured`
    /// of them): one rule for every trial. A CUDA trial on an integrated GPU is judged like a
    /// CPU trial: its device memory is the RAM whose shortage pages the worker out.
    pub(super) fn assess(
        &self,
        trial: &PlannedTrial,
        samples: &[MemorySample],
        from_ns: i64,
        to_ns: i64,
        measured: usize,
    ) -> Assessed {
        let report = assess(samples, from_ns, to_ns, measured, &self.thresholds);
        let swap_pressure = (!samples.is_empty() && measured > 0).then_some(report.swap_pressure);
        let mut note = format!("{}; {}", report.note, self.swap_devices);
        if self.gpu_shares_ram(trial) {
            // The worker's RSS leaves out its device allocations; say where they are.
            note.push_str(
                "; integrated GPU: the trial's GPU memory (peak_gpu_bytes) is system RAM too, \
                 outside the worker's RSS",
            );
        }
        Assessed {
            report,
            swap_pressure,
            note,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::procfs::{MemInfo, ProcMemory, VmStat};
    use crate::testkit::jetson;
    use crate::workloads;

    /// A host tree: a device tree saying `compatible` (none when empty) and a meminfo of
    /// `ram_mib` total, `available_mib` available and no swap.
    fn host(compatible: &str, ram_mib: u64, available_mib: u64) -> (tempfile::TempDir, HostPaths) {
        let root = tempfile::tempdir().unwrap();
        let paths = jetson::host_under(root.path());
        if !compatible.is_empty() {
            jetson::write(
                &paths.sysfs,
                "firmware/devicetree/base/compatible",
                compatible,
            );
        }
        std::fs::create_dir_all(&paths.procfs).unwrap();
        std::fs::write(
            paths.proc("meminfo"),
            format!(
                "MemTotal: {} kB\nMemFree: 1000 kB\nMemAvailable: {} kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
                ram_mib << 10,
                available_mib << 10
            ),
        )
        .unwrap();
        (root, paths)
    }

    const NANO: &str = jetson::NANO_COMPATIBLE;

    /// AlexNet at batch 1 as a sweep plans it on `device`: about 0.95 GB predicted.
    fn alexnet(device: DeviceKind) -> PlannedTrial {
        let mut c = Config::default();
        c.sweep.nets = vec!["alexnet".into()];
        c.sweep.devices = vec![device];
        c.sweep.batches = vec![1];
        let prepared = crate::workloads::Prepared::of(
            crate::workloads::cnn::Cnn,
            crate::workloads::Preparation {
                dataset: "synthetic".into(),
                ..Default::default()
            },
        );
        workloads::plan(&prepared.plan_input(&c, &HostPaths::default())).remove(0)
    }

    /// The plan on the board `config` forces, else the one `host` detects as.
    fn memory_plan(config: &Config, host: &HostPaths) -> MemoryPlan {
        let board = crate::runner::board(config, host).unwrap();
        plan(config, host, board.profile).unwrap()
    }

    #[test]
    fn a_cuda_trial_on_an_integrated_gpu_counts_its_tensors_against_ram() {
        let (cuda, cpu) = (alexnet(DeviceKind::Cuda), alexnet(DeviceKind::Cpu));
        // The same tensors wherever they are allocated.
        assert_eq!(cuda.memory_estimate_bytes, cpu.memory_estimate_bytes);
        assert!(cuda.memory_estimate_bytes > 512 << 20);
        let config = Config::default();

        // 512 MiB of RAM and no swap: too small.
        let (_keep, small) = host(NANO, 512, 400);
        let p = memory_plan(&config, &small);
        assert!(p.gpu_integrated);
        assert!(p.gpu_shares_ram(&cuda) && !p.gpu_shares_ram(&cpu));
        match p.preflight(&small, &cuda) {
            Preflight::Skip(why) => assert!(
                why.contains("integrated GPU")
                    && why.contains("more than RAM 0.50 GiB")
                    && why.contains("--try-anyway"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        match p.preflight(&small, &cpu) {
            Preflight::Skip(why) => assert!(!why.contains("GPU"), "{why}"),
            other => panic!("{other:?}"),
        }

        // 4 GiB, of which 512 MiB available now: it runs, with a swap warning.
        let (_keep, busy) = host(NANO, 4096, 512);
        match p.preflight(&busy, &cuda) {
            Preflight::Run { warning: Some(w) } => assert!(
                w.contains("it will swap") && w.contains("integrated GPU"),
                "{w}"
            ),
            other => panic!("{other:?}"),
        }
        // Plenty free: no word.
        let (_keep, idle) = host(NANO, 4096, 3500);
        assert_eq!(p.preflight(&idle, &cuda), Preflight::Run { warning: None });

        // --try-anyway runs what does not fit, still warned.
        let mut anyway = config.clone();
        anyway.memory.try_anyway = true;
        let p = memory_plan(&anyway, &small);
        assert!(matches!(
            p.preflight(&small, &cuda),
            Preflight::Run { warning: Some(_) }
        ));
    }

    #[test]
    fn a_cuda_trial_elsewhere_is_checked_against_ram_as_it_always_was() {
        let cuda = alexnet(DeviceKind::Cuda);
        // No device tree: the generic profile, whose GPU (if any) is not known to share RAM.
        let (_keep, small) = host("", 512, 400);
        let p = memory_plan(&Config::default(), &small);
        assert!(!p.gpu_integrated && !p.gpu_shares_ram(&cuda));
        match p.preflight(&small, &cuda) {
            Preflight::Skip(why) => assert!(
                why.starts_with("predicted to need 0.") && !why.contains("GPU"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        // A forced board profile decides like a detected one.
        let mut forced = Config::default();
        forced.power.board = Some("orin-nx".into());
        assert!(memory_plan(&forced, &small).gpu_shares_ram(&cuda));
        // Without a readable meminfo there is nothing to check against.
        let none = HostPaths {
            procfs: small.sysfs.join("no-proc"),
            ..small.clone()
        };
        assert_eq!(p.preflight(&none, &cuda), Preflight::Run { warning: None });
    }

    /// The worker's pages read back from swap at `faults` per sample after the first.
    fn paging(faults: u64) -> Vec<MemorySample> {
        (0..4)
            .map(|k| MemorySample {
                t_ns: k * 100,
                vm: Some(VmStat {
                    pswpin: k as u64 * faults,
                    ..Default::default()
                }),
                process: Some(ProcMemory {
                    rss_bytes: 300 << 20,
                    hwm_bytes: 300 << 20,
                    major_faults: k as u64 * faults,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect()
    }

    /// Samples whose meminfo says `swap_free_mib` of swap is free, in turn.
    fn swap_free(swap_free_mib: &[u64]) -> Vec<MemorySample> {
        swap_free_mib
            .iter()
            .map(|&free| MemorySample {
                system: Some(MemInfo {
                    swap_total: 2048 << 20,
                    swap_free: free << 20,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn an_oom_kill_under_a_cap_with_swap_free_says_so() {
        let (_keep, nano) = host(NANO, 4096, 3500);
        // The plan of `--mem-limit 600M` (its cgroup parent does not matter here).
        let mut p = memory_plan(&Config::default(), &nano);
        p.limit = Some(600 << 20);
        let note = p
            .oom_with_swap_free(&swap_free(&[2000, 1700, 1900]))
            .unwrap();
        assert!(
            note.contains("1700 MiB free") && note.contains("600 MiB cap"),
            "{note}"
        );
        assert!(note.contains("--mem-limit"), "{note}");
        // Swap that ran out at one sample: the kill was a real shortage.
        assert_eq!(p.oom_with_swap_free(&swap_free(&[2000, 10, 1900])), None);
        // Without meminfo nothing can be said.
        assert_eq!(p.oom_with_swap_free(&[MemorySample::default()]), None);
        // A cap with its own swap limit: the host's free swap is not the trial's.
        p.swap_limit = Some(0);
        assert_eq!(p.oom_with_swap_free(&swap_free(&[2000])), None);
        // No cap: the kernel's own OOM killer, nothing to add.
        p.swap_limit = None;
        p.limit = None;
        assert_eq!(p.oom_with_swap_free(&swap_free(&[2000])), None);
    }

    #[test]
    fn the_swap_verdict_judges_a_cuda_trial_on_an_integrated_gpu() {
        let (_keep, nano) = host(NANO, 4096, 3500);
        let p = memory_plan(&Config::default(), &nano);
        let (cuda, cpu) = (alexnet(DeviceKind::Cuda), alexnet(DeviceKind::Cpu));
        // 3 measured iterations, 10 000 faults each, every one a swap-in: spoiled.
        let spoiled = paging(10_000);
        let a = p.assess(&cuda, &spoiled, 0, 300, 3);
        assert_eq!(a.swap_pressure, Some(true), "{}", a.note);
        assert!(a.note.starts_with("swap-spoiled"), "{}", a.note);
        assert!(a.note.contains("integrated GPU"), "{}", a.note);
        assert_eq!(a.report.major_faults, 30_000);
        // The same rule as for the CPU trial, which gets no GPU remark.
        let c = p.assess(&cpu, &spoiled, 0, 300, 3);
        assert_eq!(c.swap_pressure, Some(true));
        assert!(!c.note.contains("GPU"), "{}", c.note);
        // A resident CUDA trial is not spoiled; one without measured iterations has no verdict.
        assert_eq!(
            p.assess(&cuda, &paging(2), 0, 300, 3).swap_pressure,
            Some(false)
        );
        assert_eq!(p.assess(&cuda, &spoiled, 0, 300, 0).swap_pressure, None);
        assert_eq!(p.assess(&cuda, &[], 0, 300, 3).swap_pressure, None);
    }
}
