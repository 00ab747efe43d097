//! Sampler threads: one plain OS thread per source (no async runtime: a 1 kHz loop must not
//! share a scheduler with anything), each stamping its readings with CLOCK_MONOTONIC, the
//! clock the training loop stamps iterations with.

use super::{PowerSource, Reading};
use crate::train::monotonic_ns;
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
}

pub(super) type SharedSource = Arc<Mutex<Box<dyn PowerSource>>>;

struct ThreadResult {
    series: Vec<RailSeries>,
    errors: Vec<(i64, i64)>,
}

/// Sampling in progress; `stop` joins the threads and returns the samples.
pub struct RecordingHandle {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<ThreadResult>>,
    total: Vec<(String, String)>,
    period_ns: i64,
}

/// Absurd readings (a torn sysfs read, a glitching bus) are treated as errors, not as power.
fn plausible(r: &Reading) -> bool {
    r.watts.is_finite() && (-1.0..=10_000.0).contains(&r.watts)
}

fn sample_loop(src: SharedSource, period: Duration, stop: Arc<AtomicBool>) -> ThreadResult {
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
    let mut logged = false;
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
                }
                for (s, r) in series.iter_mut().zip(readings) {
                    s.t_ns.push(t);
                    s.volts.push(r.volts);
                    s.amps.push(r.amps);
                    s.watts.push(r.watts);
                }
            }
            other => {
                if failing_since.is_none() {
                    failing_since = Some(series[0].t_ns.last().copied().unwrap_or(t));
                }
                if !logged {
                    // Once per source and recording, not once per sample.
                    let why = match other {
                        Err(e) => format!("{e:#}"),
                        Ok(r) => format!("implausible reading {r:?}"),
                    };
                    tracing::warn!(
                        "power source {name}: {why}; the trial is marked power_incomplete"
                    );
                    logged = true;
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
    if let Some(since) = failing_since {
        errors.push((since, monotonic_ns()));
    }
    ThreadResult { series, errors }
}

impl RecordingHandle {
    pub(super) fn start(
        sources: &[(SharedSource, Duration)],
        total: Vec<(String, String)>,
    ) -> RecordingHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = sources
            .iter()
            .map(|(src, period)| {
                let (src, stop, period) = (Arc::clone(src), Arc::clone(&stop), *period);
                std::thread::Builder::new()
                    .name("edgebench-power".into())
                    .spawn(move || sample_loop(src, period, stop))
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
        for t in self.threads {
            match t.join() {
                Ok(r) => {
                    out.series.extend(r.series);
                    out.errors.extend(r.errors);
                }
                Err(_) => tracing::warn!("a power sampler thread panicked; its samples are lost"),
            }
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
