//! A trial's power record: its energy figures from the samples and iteration records, and
//! whether the sensor refreshed often enough inside it.

use super::{energy, Baseline, PowerMonitor, Samples};
use crate::record::IterationRecord;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Fewer sensor updates than this inside a trial's measured window flag the trial
/// (`power_low_samples`): its energy then rests on a handful of readings.
pub(crate) const MIN_SENSOR_UPDATES: usize = 10;

/// Distinct sensor readings a trial's energy rests on: the samples taken inside the measured
/// window, but never more than the sensor refreshed in it (sampling faster than the sensor
/// reads the same value again).
pub(crate) fn sensor_updates(
    samples_in_window: usize,
    duration_s: f64,
    sensor_period: Duration,
) -> usize {
    if sensor_period.is_zero() {
        return samples_in_window;
    }
    let refreshes = (duration_s / sensor_period.as_secs_f64()).floor().max(0.0) as usize;
    samples_in_window.min(refreshes)
}

impl PowerMonitor {
    #[cfg(test)]
    /// The trial's power record from its samples and iteration records: per-rail,
    /// per-iteration and trial figures, or why there are none; the caller stores it. A trial
    /// with fewer than [`MIN_SENSOR_UPDATES`] sensor updates is flagged, and the first such
    /// trial of the run warns with the fix.
    pub(crate) fn assess_trial(
        &self,
        samples: &Samples,
        iterations: &[IterationRecord],
        warmup: usize,
        batch: usize,
        baseline: Option<&Baseline>,
    ) -> TrialPowerRecord {
        self.assess_trial_advising(
            samples,
            iterations,
            warmup,
            batch,
            baseline,
            "more images (--images) or epochs (--epochs)",
        )
    }

    /// [`PowerMonitor::assess_trial`], the warning about too few readings saying how to
    /// measure longer in the workload's own terms (`longer`, e.g. "more iterations
    /// (--iterations)").
    pub(crate) fn assess_trial_advising(
        &self,
        samples: &Samples,
        iterations: &[IterationRecord],
        warmup: usize,
        batch: usize,
        baseline: Option<&Baseline>,
        longer: &str,
    ) -> TrialPowerRecord {
        let e = energy::trial_energy(
            samples,
            iterations,
            warmup,
            batch,
            baseline.map(|b| b.power_w),
        );
        let reason = samples
            .lost
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let Some(e) = e else {
            return match energy::unmeasured_s(samples, iterations, warmup) {
                Some(gap_s) => {
                    self.count_incomplete(samples.lost.as_deref());
                    tracing::warn!(
                        "trial power not measured: no readings in {gap_s:.3} s of the measured \
                         interval{reason}; energy left empty, trial marked power_incomplete"
                    );
                    TrialPowerRecord::Unmeasured {
                        gap_s,
                        note: samples.lost.clone(),
                    }
                }
                None => TrialPowerRecord::Nothing,
            };
        };
        if e.incomplete {
            self.count_incomplete(samples.lost.as_deref());
            tracing::warn!(
                "trial power incomplete: {:.3} s of the {:.3} s measured interval without \
                 readings{reason}; the energy covers the rest",
                e.gap_s,
                e.duration_s
            );
        }
        let updates = sensor_updates(e.samples, e.duration_s, self.sensor_period);
        let low_samples = (updates < MIN_SENSOR_UPDATES).then_some(updates);
        if low_samples.is_some() && !self.warned_low_samples.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "a trial measured {:.2} s with only {updates} sensor update(s) (the sensor \
                 refreshes every {:.0} ms): its energy rests on too few readings and is \
                 flagged power_low_samples. Measure at least {:.1} s per trial: {longer}. \
                 Warned once per run.",
                e.duration_s,
                self.sensor_period.as_secs_f64() * 1e3,
                MIN_SENSOR_UPDATES as f64 * self.sensor_period.as_secs_f64()
            );
        }
        TrialPowerRecord::Measured(TrialPower {
            energy_j: e.energy_j,
            avg_power_w: e.avg_power_w,
            energy_per_image_j: e.energy_per_image_j,
            edp_js: e.edp_js,
            dynamic_energy_j: e.dynamic_energy_j,
            samples: e.samples,
            rate_hz: e.rate_hz,
            jitter_s: e.jitter_s,
            incomplete: e.incomplete,
            gap_s: e.gap_s,
            low_samples,
            note: e.incomplete.then(|| samples.lost.clone()).flatten(),
            rails: e.rail_energy_j.clone(),
            iterations: iterations
                .iter()
                .zip(&e.iteration_energy_j)
                .filter_map(|(r, j)| j.map(|j| (r.step, j)))
                .collect(),
        })
    }
}

/// A trial's power outcome, for the store.
#[derive(Debug, Clone, PartialEq)]
pub enum TrialPowerRecord {
    Measured(TrialPower),
    /// The sensors gave no reading in the measured interval (`gap_s` of it); `note` says why.
    Unmeasured {
        gap_s: f64,
        note: Option<String>,
    },
    /// No measured interval (no iteration finished).
    Nothing,
}

impl Samples {
    /// Every rail's samples, borrowed, for storing them raw.
    pub fn series(&self) -> Vec<PowerSeries<'_>> {
        self.series
            .iter()
            .map(|s| PowerSeries {
                source: &s.source,
                rail: &s.rail,
                t_ns: &s.t_ns,
                volts: &s.volts,
                amps: &s.amps,
                watts: &s.watts,
            })
            .collect()
    }
}

/// One rail's samples, borrowed from the sampler's buffers.
#[derive(Debug, Clone, Copy)]
pub struct PowerSeries<'a> {
    pub source: &'a str,
    pub rail: &'a str,
    pub t_ns: &'a [i64],
    pub volts: &'a [Option<f64>],
    pub amps: &'a [Option<f64>],
    pub watts: &'a [f64],
}

/// A trial's energy figures (see schema v2).
#[derive(Debug, Clone, PartialEq)]
pub struct TrialPower {
    pub energy_j: f64,
    pub avg_power_w: f64,
    pub energy_per_image_j: f64,
    pub edp_js: f64,
    pub dynamic_energy_j: Option<f64>,
    pub samples: usize,
    pub rate_hz: Option<f64>,
    pub jitter_s: Option<f64>,
    pub incomplete: bool,
    pub gap_s: f64,
    /// Sensor updates inside the measured interval when too few (< 10); None when enough.
    pub low_samples: Option<usize>,
    /// Why the record is incomplete (the failing sensor and its error), if it is.
    pub note: Option<String>,
    /// (rail, joules, part of the total)
    pub rails: Vec<(String, f64, bool)>,
    /// (step, joules)
    pub iterations: Vec<(usize, f64)>,
}

#[cfg(test)]
mod tests {
    use super::sensor_updates;
    use std::time::Duration;

    #[test]
    fn sensor_updates_count_refreshes_not_repeated_reads() {
        let period = Duration::from_millis(140);
        // A 0.15 s trial sampled at the sensor's rate: one update.
        assert_eq!(sensor_updates(1, 0.15, period), 1);
        // Sampled at 1 kHz over 0.15 s: 150 samples, still one refresh.
        assert_eq!(sensor_updates(150, 0.15, period), 1);
        // 2 s at 140 ms: 14 refreshes, 14 samples.
        assert_eq!(sensor_updates(14, 2.0, period), 14);
        // Sampled slower than the sensor: the samples are what the energy rests on.
        assert_eq!(sensor_updates(4, 2.0, period), 4);
        assert_eq!(sensor_updates(7, 1.0, Duration::ZERO), 7);
    }
}
