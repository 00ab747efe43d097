//! The memory sampler: a thread in the parent that reads procfs at a fixed interval while a
//! worker trains, so it keeps running even if the worker is killed.

use super::procfs::{MemInfo, ProcMemory, ProcReader, Psi, VmStat};
use crate::clock::monotonic_ns;
use crate::host::HostPaths;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// One reading, on the same CLOCK_MONOTONIC as the iteration records.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct MemorySample {
    pub t_ns: i64,
    pub system: Option<MemInfo>,
    pub vm: Option<VmStat>,
    pub psi: Option<Psi>,
    /// The worker (with every process below it, for a command); `None` once it has exited.
    pub process: Option<ProcMemory>,
}

/// Which processes a sample's `process` covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    /// The process alone (a worker that trains in-process).
    Process(u32),
    /// The process and everything it started (a worker running a command).
    Tree(u32),
}

pub(crate) fn sample(reader: &ProcReader, watch: Option<Watch>) -> MemorySample {
    MemorySample {
        t_ns: monotonic_ns(),
        system: reader.meminfo(),
        vm: reader.vmstat(),
        psi: reader.psi(),
        process: watch.and_then(|w| match w {
            Watch::Process(pid) => reader.process(pid),
            Watch::Tree(pid) => reader.process_tree(pid),
        }),
    }
}

/// Shown each sample on the sampler's thread as it is taken.
pub(crate) type MemoryObserver = Box<dyn FnMut(&MemorySample) + Send>;

pub(crate) struct MemorySampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<MemorySample>>,
}

impl MemorySampler {
    /// Samples now and then every `interval` until stopped, each sample also shown to
    /// `observe` on the sampler's thread as it is taken (a live view of the same reads).
    pub(crate) fn start_observed(
        paths: &HostPaths,
        watch: Watch,
        interval: Duration,
        mut observe: Option<MemoryObserver>,
    ) -> std::io::Result<MemorySampler> {
        let stop = Arc::new(AtomicBool::new(false));
        let reader = ProcReader::new(paths);
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("memory-sampler".into())
            .spawn(move || {
                let mut samples = Vec::new();
                let mut take = |samples: &mut Vec<MemorySample>| {
                    let s = sample(&reader, Some(watch));
                    if let Some(observe) = observe.as_mut() {
                        observe(&s);
                    }
                    samples.push(s);
                };
                loop {
                    take(&mut samples);
                    crate::host::sleep_unless(&flag, interval);
                    if flag.load(Ordering::Relaxed) {
                        take(&mut samples);
                        return samples;
                    }
                }
            })?;
        Ok(MemorySampler { stop, thread })
    }

    pub(crate) fn stop(self) -> Vec<MemorySample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}
