//! Did memory spoil a trial? A pure function of the sampler's readings over the trial's
//! measured iterations.
//!
//! The rule (thresholds in `[memory]` of the config):
//! a trial is **swap-spoiled** when, during its measured (post-warm-up) iterations, the worker
//! itself took at least `major_faults_per_iteration` major page faults per iteration **and** the
//! system swapped in at least half that many pages. Major faults of the worker mean its own
//! pages had to be read back; the swap-in count says they came from swap, not from files. A
//! trial while some other process swaps a few pages, or whose cold pages sit in swap untouched,
//! is not spoiled: neither slows its steps. The default, 256 faults (1 MiB of 4 KiB pages) per
//! iteration, is far above what a resident trial shows after warm-up (a handful) and far below
//! what a paged-out working set costs (tens of thousands per step for AlexNet at batch 64).

use super::sampler::MemorySample;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct SwapThresholds {
    pub major_faults_per_iteration: f64,
}

impl Default for SwapThresholds {
    fn default() -> Self {
        SwapThresholds {
            major_faults_per_iteration: 256.0,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct MemoryReport {
    pub swap_pressure: bool,
    pub swap_in_pages: u64,
    pub swap_out_pages: u64,
    /// The worker's own major faults over the measured iterations.
    pub major_faults: u64,
    /// The worker's peak resident set over the whole trial.
    pub peak_rss_bytes: Option<u64>,
    /// The worker's largest amount of its own memory in swap.
    pub swapped_bytes_max: Option<u64>,
    pub mem_available_min_bytes: Option<u64>,
    /// Time some task stalled on memory (PSI), where the kernel has PSI.
    pub psi_some_us: Option<u64>,
    pub psi_full_us: Option<u64>,
    pub note: String,
}

fn at_or_before(samples: &[MemorySample], t: i64) -> Option<&MemorySample> {
    samples
        .iter()
        .rev()
        .find(|s| s.t_ns <= t)
        .or(samples.first())
}

fn at_or_after(samples: &[MemorySample], t: i64) -> Option<&MemorySample> {
    samples.iter().find(|s| s.t_ns >= t).or(samples.last())
}

fn delta<T>(
    a: Option<&MemorySample>,
    b: Option<&MemorySample>,
    f: impl Fn(&MemorySample) -> Option<T>,
) -> Option<u64>
where
    T: Into<u64>,
{
    let (a, b) = (f(a?)?.into(), f(b?)?.into());
    Some(b.saturating_sub(a))
}

/// Assesses the samples over `[from_ns, to_ns]`, the measured iterations (`iterations` of them).
pub(crate) fn assess(
    samples: &[MemorySample],
    from_ns: i64,
    to_ns: i64,
    iterations: usize,
    t: &SwapThresholds,
) -> MemoryReport {
    if samples.is_empty() {
        return MemoryReport {
            note: "no memory samples: procfs could not be read, so no verdict".into(),
            ..Default::default()
        };
    }
    let (start, end) = (at_or_before(samples, from_ns), at_or_after(samples, to_ns));
    let inside: Vec<&MemorySample> = samples
        .iter()
        .filter(|s| s.t_ns >= from_ns && s.t_ns <= to_ns)
        .collect();
    // The worker may be gone at the end (OOM): then its last reading is the best we have.
    let with_process = || samples.iter().filter(|s| s.process.is_some());
    let first_process = with_process()
        .rev()
        .find(|s| s.t_ns <= from_ns)
        .or_else(|| with_process().next());
    let last_process = with_process()
        .find(|s| s.t_ns >= to_ns)
        .or_else(|| with_process().next_back());
    let swap_in = delta(start, end, |s| s.vm.map(|v| v.pswpin)).unwrap_or(0);
    let swap_out = delta(start, end, |s| s.vm.map(|v| v.pswpout)).unwrap_or(0);
    let faults = delta(first_process, last_process, |s| {
        s.process.map(|p| p.major_faults)
    })
    .unwrap_or(0);
    let peak_rss = samples
        .iter()
        .filter_map(|s| s.process.map(|p| p.hwm_bytes.max(p.rss_bytes)))
        .max();
    let swapped = samples
        .iter()
        .filter_map(|s| s.process.map(|p| p.swap_bytes))
        .max();
    let available = inside
        .iter()
        .chain([start, end].iter().flatten())
        .filter_map(|s| s.system.map(|m| m.mem_available))
        .min();
    let psi_some = delta(start, end, |s| s.psi.map(|p| p.some_total_us));
    let psi_full = delta(start, end, |s| s.psi.map(|p| p.full_total_us));

    let per_iteration = faults as f64 / iterations.max(1) as f64;
    let from_swap = swap_in as f64 >= faults as f64 / 2.0;
    let spoiled = iterations > 0 && per_iteration >= t.major_faults_per_iteration && from_swap;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let note = if iterations == 0 {
        "no measured iterations: no verdict".to_string()
    } else if spoiled {
        format!(
            "swap-spoiled: the worker took {faults} major page faults in {iterations} measured \
             iterations ({per_iteration:.0} per iteration, threshold {:.0}) while {swap_in} pages \
             were swapped in; its own memory was paged out and read back{}, so its time is not a speed",
            t.major_faults_per_iteration,
            swapped.map(|b| format!(" (up to {:.0} MiB of it in swap)", mib(b))).unwrap_or_default()
        )
    } else if per_iteration >= t.major_faults_per_iteration {
        format!(
            "not swap-spoiled: {faults} major page faults of the worker in {iterations} measured \
             iterations, but only {swap_in} pages swapped in, so they were file reads, not swap"
        )
    } else {
        format!(
            "not swap-spoiled: {faults} major page faults of the worker in {iterations} measured \
             iterations ({per_iteration:.1} per iteration, threshold {:.0}); {swap_in} pages swapped \
             in and {swap_out} out system-wide",
            t.major_faults_per_iteration
        )
    };
    MemoryReport {
        swap_pressure: spoiled,
        swap_in_pages: swap_in,
        swap_out_pages: swap_out,
        major_faults: faults,
        peak_rss_bytes: peak_rss,
        swapped_bytes_max: swapped,
        mem_available_min_bytes: available,
        psi_some_us: psi_some,
        psi_full_us: psi_full,
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::procfs::{MemInfo, ProcMemory, Psi, VmStat};

    fn s(t: i64, pswpin: u64, majflt: u64, avail: u64, psi: Option<u64>) -> MemorySample {
        MemorySample {
            t_ns: t,
            system: Some(MemInfo {
                mem_total: 4 << 30,
                mem_available: avail,
                swap_total: 1 << 30,
                swap_free: 1 << 29,
            }),
            vm: Some(VmStat {
                pswpin,
                pswpout: pswpin * 2,
                pgmajfault: majflt,
                oom_kill: 0,
            }),
            psi: psi.map(|p| Psi {
                some_total_us: p,
                full_total_us: p / 2,
            }),
            process: Some(ProcMemory {
                rss_bytes: 100 << 20,
                hwm_bytes: 120 << 20,
                swap_bytes: 10 << 20,
                major_faults: majflt,
                reaped_major_faults: 0,
            }),
        }
    }

    #[test]
    fn paged_out_working_set_is_spoiled() {
        // warm-up until t=100, measured 100..400 (3 iterations)
        let samples = vec![
            s(0, 0, 0, 900, Some(0)),
            s(90, 5000, 5000, 500, Some(10)),
            s(200, 9000, 9000, 300, Some(50)),
            s(410, 20000, 20000, 400, Some(90)),
        ];
        let r = assess(&samples, 100, 400, 3, &SwapThresholds::default());
        assert!(r.swap_pressure, "{}", r.note);
        assert_eq!(r.swap_in_pages, 15000);
        assert_eq!(r.swap_out_pages, 30000);
        assert_eq!(r.major_faults, 15000);
        assert_eq!(r.mem_available_min_bytes, Some(300));
        assert_eq!(r.psi_some_us, Some(80));
        assert_eq!(r.peak_rss_bytes, Some(120 << 20));
        assert!(r.note.starts_with("swap-spoiled"));
    }

    #[test]
    fn someone_elses_swapping_does_not_spoil() {
        // the system swaps a little, the worker faults a handful of times
        let samples = vec![
            s(0, 0, 0, 900, None),
            s(90, 10, 2, 900, None),
            s(410, 40, 5, 880, None),
        ];
        let r = assess(&samples, 100, 400, 3, &SwapThresholds::default());
        assert!(!r.swap_pressure);
        assert_eq!(r.major_faults, 3);
        assert_eq!(r.psi_some_us, None); // no PSI on this kernel
        assert!(r.note.contains("not swap-spoiled"), "{}", r.note);
    }

    #[test]
    fn file_backed_faults_are_not_swap() {
        let mut samples = vec![s(0, 0, 0, 900, None), s(410, 0, 5000, 900, None)];
        samples[1].vm.as_mut().unwrap().pswpin = 10;
        let r = assess(&samples, 100, 400, 3, &SwapThresholds::default());
        assert!(!r.swap_pressure);
        assert!(r.note.contains("file reads"), "{}", r.note);
    }

    #[test]
    fn thresholds_are_configurable_and_empty_input_is_handled() {
        // 600 faults in 3 iterations: 200 per iteration, under the default 256
        let samples = vec![s(0, 0, 0, 900, None), s(410, 600, 600, 900, None)];
        assert!(!assess(&samples, 100, 400, 3, &SwapThresholds::default()).swap_pressure);
        let low = SwapThresholds {
            major_faults_per_iteration: 100.0,
        };
        assert!(assess(&samples, 100, 400, 3, &low).swap_pressure);
        let none = assess(&[], 0, 1, 3, &low);
        assert!(!none.swap_pressure && none.note.contains("no memory samples"));
    }
}
