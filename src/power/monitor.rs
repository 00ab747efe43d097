//! A run's power monitor: the sources found, the rails of the total, the sampler threads it
//! starts per trial, the idle baseline and the sensors' health over the run.

use super::sampler::SharedSource;
use super::{energy, marker, Baseline, Health, RecordingHandle};
use crate::board::Detection;
use crate::clock::monotonic_ns;
use crate::config::PowerScope;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct PowerMonitor {
    pub(super) sources: Vec<(SharedSource, Duration)>,
    /// (source description, rail) pairs summed as the board's total.
    pub(super) total: Vec<(String, String)>,
    pub total_how: String,
    /// What the total covers (recorded with the run: numbers of different scopes never compare).
    pub scope: PowerScope,
    pub board: Detection,
    pub warnings: Vec<String>,
    /// The slowest refresh among the sources of the total: how often a new value exists.
    pub sensor_period: Duration,
    /// Set once a trial too short for the sensor has been warned about (once per run).
    pub(super) warned_low_samples: AtomicBool,
    /// `power.gpio_marker`: high during each trial's measured iterations.
    pub(super) marker: Option<Mutex<marker::GpioMarker>>,
    /// Sensor failures over the run's trials.
    pub(super) health: Arc<Mutex<Health>>,
}

impl PowerMonitor {
    /// How often a new reading of the total exists: the sensors' refresh, or the sampling
    /// period where `power.rate_hz` samples the total's sources more slowly than they
    /// refresh. Locks the sources: call it between recordings, never while one runs.
    pub(crate) fn reading_period(&self) -> Duration {
        self.sources
            .iter()
            .filter(|(src, _)| {
                let name = src.lock().unwrap_or_else(|e| e.into_inner()).describe();
                self.total.iter().any(|(s, _)| *s == name)
            })
            .map(|(_, sampling)| *sampling)
            .chain(std::iter::once(self.sensor_period))
            .max()
            .unwrap_or_default()
    }

    /// Drives the GPIO marker (if configured): high from the first measured iteration's start
    /// to the trial's end. A failure is logged, not fatal: the measurement itself is intact.
    pub fn mark(&self, high: bool) {
        if let Some(m) = &self.marker {
            if let Err(e) = m.lock().unwrap_or_else(|e| e.into_inner()).set(high) {
                tracing::warn!("{e:#}");
            }
        }
    }

    /// Starts one sampler thread per source, for a trial.
    pub fn start(&self) -> RecordingHandle {
        RecordingHandle::start(
            &self.sources,
            self.total.clone(),
            Some(Arc::clone(&self.health)),
        )
    }

    /// As [`PowerMonitor::start`], each source's readings also going to its sink (in the order
    /// of [`PowerMonitor::rails_by_source`]) as they are taken.
    pub fn start_live(&self, live: Vec<Box<dyn super::LiveSink>>) -> RecordingHandle {
        RecordingHandle::start_live(
            &self.sources,
            self.total.clone(),
            Some(Arc::clone(&self.health)),
            live,
        )
    }

    /// Every source's rails in reading order, each with whether it is part of the total.
    /// Locks the sources: call it between recordings, never while one runs.
    pub fn rails_by_source(&self) -> Vec<Vec<(String, bool)>> {
        self.sources
            .iter()
            .map(|(src, _)| {
                let src = src.lock().unwrap_or_else(|e| e.into_inner());
                let name = src.describe();
                src.rails()
                    .iter()
                    .map(|r| {
                        let in_total = self.total.iter().any(|(s, t)| *s == name && t == r);
                        (r.clone(), in_total)
                    })
                    .collect()
            })
            .collect()
    }

    /// Counts a trial marked power_incomplete, for the warning at the run's end; `error` is its
    /// recording's first failed read.
    pub(super) fn count_incomplete(&self, error: Option<&str>) {
        let mut h = self.health.lock().unwrap_or_else(|e| e.into_inner());
        h.incomplete_trials += 1;
        if h.first_error.is_none() {
            h.first_error = error.map(str::to_string);
        }
    }

    /// The warning for the end of a run whose trials lost power readings; None if none did.
    pub(crate) fn run_warning(&self) -> Option<String> {
        let h = self.health.lock().unwrap_or_else(|e| e.into_inner());
        if h.incomplete_trials == 0 {
            return None;
        }
        let error = h
            .first_error
            .as_ref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        Some(format!(
            "power readings failed during {} trial(s){error}; {}. Those trials are marked \
             power_incomplete: their energy covers only the time with readings, power_gap_s is \
             the time without",
            h.incomplete_trials,
            if h.recovered {
                "the sensor was reading again by the last trial"
            } else {
                "the sensor was still failing at the end of the run: check the power monitor \
                 (its driver, wiring, or --sysfs)"
            }
        ))
    }

    /// Mean total power over `duration` of idling; None for a zero duration, no samples, or
    /// when `stop` is raised meanwhile (an interrupt must not wait out a long baseline).
    pub fn baseline(&self, duration: Duration, stop: &AtomicBool) -> Option<Baseline> {
        if duration.is_zero() {
            return None;
        }
        let handle = RecordingHandle::start(&self.sources, self.total.clone(), None);
        let a = monotonic_ns();
        let deadline = std::time::Instant::now() + duration;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            if stop.load(Ordering::SeqCst) {
                handle.stop();
                return None;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
        let b = monotonic_ns();
        let samples = handle.stop();
        energy::mean_total_power(&samples, a, b).map(|power_w| Baseline {
            power_w,
            duration_s: (b - a) as f64 * 1e-9,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::clock::monotonic_ns;
    use crate::config::PowerConfig;
    use crate::power::energy::{self, trial_energy};
    use crate::power::{PowerSource, Reading, TrialPowerRecord};
    use crate::testkit::jetson as fixtures;
    use crate::testkit::power::for_run;
    use crate::testkit::rows::iteration_ns;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[test]
    fn orin_nx_total_is_vdd_in_alone_and_sampling_matches_the_fixture() {
        let root = tempfile::tempdir().unwrap();
        fixtures::orin_nx_rails(
            root.path(),
            &[
                ("VDD_IN", 5000, 1500),
                ("VDD_CPU_GPU_CV", 5000, 600),
                ("VDD_SOC", 5000, 400),
            ],
        );
        let m = for_run(root.path(), &PowerConfig::default()).unwrap();
        assert_eq!(m.board.profile.name, "orin-nx");
        assert_eq!(m.total.len(), 1);
        assert_eq!(m.total[0].1, "VDD_IN");
        let h = m.start();
        let a = monotonic_ns();
        std::thread::sleep(Duration::from_millis(60));
        let b = monotonic_ns();
        let s = h.stop();
        assert_eq!(s.series.len(), 3);
        assert_eq!(s.total.len(), 1);
        // 7 ms update interval over 60 ms: about 9 samples, plus the final one.
        assert!(s.series[0].t_ns.len() >= 5, "{}", s.series[0].t_ns.len());
        assert!(s.series[0].t_ns.windows(2).all(|w| w[0] < w[1]));
        let p = energy::mean_total_power(&s, a, b).unwrap();
        assert!((p - 7.5).abs() < 1e-9, "{p}");
        let base = m
            .baseline(Duration::from_millis(30), &AtomicBool::new(false))
            .unwrap();
        assert!((base.power_w - 7.5).abs() < 1e-9);
    }

    #[test]
    fn a_lost_sensor_is_probed_again_and_its_readings_resume() {
        let root = tempfile::tempdir().unwrap();
        fixtures::orin_nx_rails(root.path(), &[("VDD_IN", 5000, 1500)]);
        let m = for_run(root.path(), &PowerConfig::default()).unwrap();
        let dev = root.path().join("bus/i2c/drivers/ina3221/1-0040/hwmon");
        let ms = |n| Duration::from_millis(n);
        let h = m.start();
        let a = monotonic_ns();
        std::thread::sleep(ms(100));
        // The driver goes away, then comes back with another hwmon index.
        std::fs::rename(dev.join("hwmon5"), root.path().join("away")).unwrap();
        let lost = monotonic_ns();
        std::thread::sleep(ms(600));
        std::fs::rename(root.path().join("away"), dev.join("hwmon6")).unwrap();
        let back = monotonic_ns();
        std::thread::sleep(ms(500));
        let b = monotonic_ns();
        let s = h.stop();
        let t = &s.series[0].t_ns;
        assert!(t.iter().any(|&x| x < lost), "samples before the loss");
        assert!(
            t.iter().filter(|&&x| x > back).count() >= 10,
            "readings resumed after the sensor came back: {} after",
            t.iter().filter(|&&x| x > back).count()
        );
        assert_eq!(s.errors.len(), 1, "{:?}", s.errors);
        assert!(
            s.lost.as_deref().unwrap().contains("hwmon5"),
            "{:?}",
            s.lost
        );
        // The gap is the time without readings once, not counted twice, and the energy covers
        // only the measured rest at the fixture's 7.5 W.
        let rec = iteration_ns(0, a, b);
        let e = trial_energy(&s, &[rec], 0, 1, None).unwrap();
        let (gone, window) = ((back - lost) as f64 * 1e-9, (b - a) as f64 * 1e-9);
        assert!(
            e.incomplete && e.gap_s >= gone - 0.05 && e.gap_s <= gone + 0.4,
            "gap {} s for {gone:.3} s gone in {window:.3} s",
            e.gap_s
        );
        assert!((e.avg_power_w - 7.5).abs() < 1e-9, "{e:?}");
        assert!(
            (e.energy_j - 7.5 * (window - e.gap_s)).abs() < 1e-6,
            "{} J",
            e.energy_j
        );
        let record = m.assess_trial(&s, &[rec], 0, 1, None);
        assert!(
            matches!(&record, TrialPowerRecord::Measured(p) if p.incomplete),
            "{record:?}"
        );
        let warning = m.run_warning().unwrap();
        assert!(
            warning.contains("during 1 trial(s)") && warning.contains("reading again"),
            "{warning}"
        );
    }

    /// A source that fails its reads while `fail` is set, counting every read.
    struct Switchable {
        fail: Arc<AtomicBool>,
        reads: Arc<AtomicUsize>,
        rails: Vec<String>,
    }

    impl PowerSource for Switchable {
        fn describe(&self) -> String {
            "switchable".into()
        }
        fn rails(&self) -> &[String] {
            &self.rails
        }
        fn read(&mut self) -> anyhow::Result<Vec<Reading>> {
            let failing = self.fail.load(Ordering::SeqCst);
            self.reads.fetch_add(1, Ordering::SeqCst);
            anyhow::ensure!(!failing, "EIO");
            Ok(vec![Reading {
                volts: None,
                amps: None,
                watts: 5.0,
            }])
        }
        fn default_period(&self) -> Duration {
            Duration::from_millis(1)
        }
    }

    #[test]
    fn the_run_warning_counts_only_trials_marked_power_incomplete() {
        let root = tempfile::tempdir().unwrap();
        fixtures::orin_nx_rails(root.path(), &[("VDD_IN", 5000, 1500)]);
        let mut m = for_run(root.path(), &PowerConfig::default()).unwrap();
        let (fail, reads) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let source: Box<dyn PowerSource> = Box::new(Switchable {
            fail: Arc::clone(&fail),
            reads: Arc::clone(&reads),
            rails: vec!["VDD_IN".into()],
        });
        m.sources = vec![(Arc::new(Mutex::new(source)), Duration::from_millis(1))];
        m.total = vec![("switchable".into(), "VDD_IN".into())];
        // Waits for `n` more reads: a read counted after a switch of `fail` may have looked
        // before it, the ones after it did not.
        let after_reads = |n: usize| {
            let target = reads.load(Ordering::SeqCst) + n;
            while reads.load(Ordering::SeqCst) < target {
                std::thread::sleep(Duration::from_millis(1));
            }
        };

        // Reads fail only before the measured interval (as while a worker starts): the trial is
        // complete, though its recording had failed reads.
        fail.store(true, Ordering::SeqCst);
        let h = m.start();
        after_reads(3);
        fail.store(false, Ordering::SeqCst);
        after_reads(3);
        let a = monotonic_ns();
        after_reads(5);
        let b = monotonic_ns();
        after_reads(3);
        let s = h.stop();
        assert!(s.lost.is_some(), "the recording had failed reads");
        let record = m.assess_trial(&s, &[iteration_ns(0, a, b)], 0, 1, None);
        assert!(
            matches!(&record, TrialPowerRecord::Measured(p) if !p.incomplete),
            "{record:?}"
        );
        assert_eq!(m.run_warning(), None);

        // Reads fail inside the measured interval: this trial is marked power_incomplete.
        let h = m.start();
        after_reads(3);
        let a = monotonic_ns();
        after_reads(3);
        fail.store(true, Ordering::SeqCst);
        after_reads(3);
        fail.store(false, Ordering::SeqCst);
        after_reads(3);
        let b = monotonic_ns();
        after_reads(3);
        let s = h.stop();
        let record = m.assess_trial(&s, &[iteration_ns(0, a, b)], 0, 1, None);
        assert!(
            matches!(&record, TrialPowerRecord::Measured(p) if p.incomplete),
            "{record:?}"
        );
        let warning = m.run_warning().expect("a trial lost readings");
        assert!(
            warning.contains("during 1 trial(s) (switchable: EIO)")
                && warning.contains("reading again"),
            "{warning}"
        );
    }
}
