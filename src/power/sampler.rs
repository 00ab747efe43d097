//! Sampler threads: one plain OS thread per source (no async runtime: a 1 kHz loop must not
//! share a scheduler with anything), each stamping its readings with CLOCK_MONOTONIC, the
//! clock the training loop stamps iterations with.

use super::{PowerSource, Reading};
use crate::clock::monotonic_ns;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One rail's samples, in time order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RailSeries {
    pub source: String,
    pub rail: String,
    pub t_ns: Vec<i64>,
    pub volts: Vec<Option<f64>>,
    pub amps: Vec<Option<f64>>,
    pub watts: Vec<f64>,
    /// Spans of failed reads of its source: (last good sample or first failed read, next
    /// good sample or the recording's end), ns.
    pub failed: Vec<(i64, i64)>,
}

/// Everything recorded between `start` and `stop`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Samples {
    pub series: Vec<RailSeries>,
    /// Indices into `series` whose sum is the board's total power.
    pub total: Vec<usize>,
    /// Spans (last good sample, next good sample) around failed reads, ns.
    pub errors: Vec<(i64, i64)>,
    /// The nominal sampling period of the slowest source, ns (0 if unknown).
    pub period_ns: i64,
    /// The first failed read, with its source, when any read failed.
    pub lost: Option<String>,
}

/// What went wrong with the sensors over a run, for the warning at its end.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// The failure behind the first trial marked power_incomplete, with its source.
    pub first_error: Option<String>,
    /// Trials marked power_incomplete: readings missing inside their measured interval. A
    /// recording's failed reads outside that interval (while the worker starts, after the
    /// last iteration) leave the trial complete and are not counted.
    pub incomplete_trials: usize,
    /// Whether the last recording ended with its sources reading again.
    pub recovered: bool,
}

pub(super) type SharedSource = Arc<Mutex<Box<dyn PowerSource>>>;

/// Takes a source's readings as its sampler thread makes them, for a live view outside the
/// recording (the metrics endpoint). It runs on the sampler thread at the sampling rate, so it
/// must neither block nor allocate.
pub trait LiveSink: Send {
    /// One good reading of every rail (in the source's rail order) at `t_ns`, or `None` for a
    /// failed or implausible read.
    fn sample(&mut self, t_ns: i64, readings: Option<&[Reading]>);
}

struct ThreadResult {
    series: Vec<RailSeries>,
    errors: Vec<(i64, i64)>,
    first_error: Option<String>,
    /// Still failing when the recording stopped.
    failing_at_end: bool,
}

/// Sampling in progress; `stop` joins the threads and returns the samples.
pub struct RecordingHandle {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<ThreadResult>>,
    total: Vec<(String, String)>,
    period_ns: i64,
    /// Where a trial recording reports its failures; None for the idle baseline.
    health: Option<Arc<Mutex<Health>>>,
}

/// Absurd readings (a torn sysfs read, a glitching bus) are treated as errors, not as power.
fn plausible(r: &Reading) -> bool {
    r.watts.is_finite() && (-1.0..=10_000.0).contains(&r.watts)
}

fn sample_loop(
    src: SharedSource,
    period: Duration,
    stop: Arc<AtomicBool>,
    mut live: Option<Box<dyn LiveSink>>,
) -> ThreadResult {
    let mut src = src.lock().unwrap_or_else(|e| e.into_inner());
    let name = src.describe();
    let mut series: Vec<RailSeries> = src
        .rails()
        .iter()
        .map(|r| RailSeries {
            source: name.clone(),
            rail: r.clone(),
            ..Default::default()
        })
        .collect();
    let mut errors = Vec::new();
    let mut failing_since: Option<i64> = None;
    let mut first_error: Option<String> = None;
    let period_ns = period.as_nanos() as i64;
    let mut next = monotonic_ns();
    loop {
        // One last reading after stop is asked, so the samples cover the trial's end.
        let last = stop.load(Ordering::Acquire);
        let t0 = monotonic_ns();
        let result = src.read();
        let t = t0 + (monotonic_ns() - t0) / 2;
        match result {
            Ok(readings) if readings.len() == series.len() && readings.iter().all(plausible) => {
                if let Some(since) = failing_since.take() {
                    errors.push((since, t));
                    tracing::info!(
                        "power source {name}: reading again after {:.3} s without samples",
                        (t - since) as f64 * 1e-9
                    );
                }
                if let Some(live) = live.as_mut() {
                    live.sample(t, Some(&readings));
                }
                for (s, r) in series.iter_mut().zip(readings) {
                    s.t_ns.push(t);
                    s.volts.push(r.volts);
                    s.amps.push(r.amps);
                    s.watts.push(r.watts);
                }
            }
            other => {
                if let Some(live) = live.as_mut() {
                    live.sample(t, None);
                }
                if failing_since.is_none() {
                    failing_since = Some(series[0].t_ns.last().copied().unwrap_or(t));
                }
                if first_error.is_none() {
                    // Once per source and recording, not once per sample. The source keeps
                    // being read (a kernel source re-probes its device), so it can come back.
                    let why = match other {
                        Err(e) => format!("{e:#}"),
                        Ok(r) => format!("implausible reading {r:?}"),
                    };
                    tracing::warn!(
                        "power source {name}: {why}; the time without readings is left out of \
                         the energy and the trial is marked power_incomplete"
                    );
                    first_error = Some(format!("{name}: {why}"));
                }
            }
        }
        if last {
            break;
        }
        next += period_ns;
        let now = monotonic_ns();
        if next < now {
            next = now; // fell behind (a slow read): do not burst to catch up
        }
        while !stop.load(Ordering::Acquire) {
            let left = next - monotonic_ns();
            if left <= 0 {
                break;
            }
            std::thread::park_timeout(Duration::from_nanos(left as u64));
        }
    }
    let failing_at_end = failing_since.is_some();
    if let Some(since) = failing_since {
        errors.push((since, monotonic_ns()));
    }
    for s in &mut series {
        s.failed = errors.clone();
    }
    ThreadResult {
        series,
        errors,
        first_error,
        failing_at_end,
    }
}

impl RecordingHandle {
    pub(super) fn start(
        sources: &[(SharedSource, Duration)],
        total: Vec<(String, String)>,
        health: Option<Arc<Mutex<Health>>>,
    ) -> RecordingHandle {
        Self::start_live(sources, total, health, Vec::new())
    }

    /// As [`RecordingHandle::start`], the k-th source's readings also going to `live[k]`.
    pub(super) fn start_live(
        sources: &[(SharedSource, Duration)],
        total: Vec<(String, String)>,
        health: Option<Arc<Mutex<Health>>>,
        live: Vec<Box<dyn LiveSink>>,
    ) -> RecordingHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let mut live = live.into_iter();
        let threads = sources
            .iter()
            .map(|(src, period)| {
                let (src, stop, period) = (Arc::clone(src), Arc::clone(&stop), *period);
                let live = live.next();
                std::thread::Builder::new()
                    .name("edgebench-power".into())
                    .spawn(move || sample_loop(src, period, stop, live))
                    .expect("spawn power sampler thread")
            })
            .collect();
        let period_ns = sources
            .iter()
            .map(|(_, p)| p.as_nanos() as i64)
            .max()
            .unwrap_or(0);
        RecordingHandle {
            stop,
            threads,
            total,
            period_ns,
            health,
        }
    }

    /// Stops the threads (each takes one final reading) and returns what they recorded.
    pub fn stop(self) -> Samples {
        self.stop.store(true, Ordering::Release);
        for t in &self.threads {
            t.thread().unpark();
        }
        let mut out = Samples {
            period_ns: self.period_ns,
            ..Default::default()
        };
        let mut first_error = None;
        let mut failing_at_end = false;
        for t in self.threads {
            match t.join() {
                Ok(r) => {
                    out.series.extend(r.series);
                    out.errors.extend(r.errors);
                    first_error = first_error.or(r.first_error);
                    failing_at_end |= r.failing_at_end;
                }
                Err(_) => tracing::warn!("a power sampler thread panicked; its samples are lost"),
            }
        }
        out.lost = first_error;
        // Which trials lost readings is known once their samples are assessed
        // (PowerMonitor::assess_trial), not here.
        if let Some(health) = &self.health {
            health.lock().unwrap_or_else(|e| e.into_inner()).recovered = !failing_at_end;
        }
        out.total = out
            .series
            .iter()
            .enumerate()
            .filter(|(_, s)| self.total.contains(&(s.source.clone(), s.rail.clone())))
            .map(|(k, _)| k)
            .collect();
        out
    }
}
