//! Pure energy arithmetic: power samples + iteration timestamps -> joules, J/image, EDP.
//!
//! Trapezoidal rule on CLOCK_MONOTONIC timestamps over exactly the interval asked for, the
//! power at the interval's edges linearly interpolated between the neighbouring samples.
//! Only measured time counts: a span between two samples is bridged when it is short (a
//! scheduling delay) and holds no failed read; beyond a series' first and last samples the
//! power is held for at most one sampling period. Everything else is a gap: reported, never
//! filled in.

use super::sampler::{RailSeries, Samples};
use crate::record::{IterationRecord, MeasuredWindow};

const NS: f64 = 1e-9;

/// What counts as measured between and around samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bridging {
    /// Widest span between two good samples that is interpolated rather than a gap.
    pub max_step_ns: i64,
    /// How far the first/last sample's power is held beyond it.
    pub hold_ns: i64,
}

impl Bridging {
    /// A gap is a span without samples longer than 10 nominal periods and 100 ms: shorter
    /// ones are scheduling delays on a busy host, which interpolation bridges well.
    pub(crate) fn for_period(period_ns: i64) -> Bridging {
        Bridging {
            max_step_ns: (period_ns * 10).max(100_000_000),
            hold_ns: period_ns.max(0),
        }
    }
}

/// What one series measured of an interval.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Measured {
    pub joules: f64,
    /// Spans of the interval without a measurement, ascending and disjoint, ns.
    pub uncovered: Vec<(i64, i64)>,
}

impl Measured {
    pub(crate) fn uncovered_ns(&self) -> i64 {
        self.uncovered.iter().map(|(lo, hi)| hi - lo).sum()
    }
}

fn overlaps_failure(failed: &[(i64, i64)], lo: i64, hi: i64) -> bool {
    failed.iter().any(|&(f0, f1)| f0 < hi && f1 > lo)
}

/// Joules a series measured over `[a, b]` (timestamps ascending, ns; watts) and the spans it
/// did not measure. `failed` are the spans of failed reads (last good sample, next good one).
pub(crate) fn measure(
    t_ns: &[i64],
    watts: &[f64],
    failed: &[(i64, i64)],
    a: i64,
    b: i64,
    rule: Bridging,
) -> Measured {
    let mut joules = 0.0;
    let mut covered: Vec<(i64, i64)> = Vec::new();
    if b > a && !t_ns.is_empty() && t_ns.len() == watts.len() {
        // Linear pieces (t0, w0, t1, w1) whose time is measured.
        let mut pieces: Vec<(i64, f64, i64, f64)> = Vec::new();
        let (first, last) = (t_ns[0], t_ns[t_ns.len() - 1]);
        if rule.hold_ns > 0 && !overlaps_failure(failed, first - rule.hold_ns, first) {
            pieces.push((first - rule.hold_ns, watts[0], first, watts[0]));
        }
        // Only the sample pairs that can touch [a, b].
        let lo = t_ns.partition_point(|&t| t <= a).saturating_sub(1);
        let hi = (t_ns.partition_point(|&t| t < b) + 1).min(t_ns.len());
        for i in lo..hi.saturating_sub(1) {
            let (t0, t1) = (t_ns[i], t_ns[i + 1]);
            if t1 - t0 <= rule.max_step_ns && !overlaps_failure(failed, t0, t1) {
                pieces.push((t0, watts[i], t1, watts[i + 1]));
            }
        }
        if rule.hold_ns > 0 && !overlaps_failure(failed, last, last + rule.hold_ns) {
            let w = watts[t_ns.len() - 1];
            pieces.push((last, w, last + rule.hold_ns, w));
        }
        for (t0, w0, t1, w1) in pieces {
            let (lo, hi) = (t0.max(a), t1.min(b));
            if hi <= lo {
                continue;
            }
            let at = |x: i64| w0 + (w1 - w0) * (x - t0) as f64 / (t1 - t0) as f64;
            joules += 0.5 * (at(lo) + at(hi)) * (hi - lo) as f64 * NS;
            match covered.last_mut() {
                Some(c) if c.1 >= lo => c.1 = c.1.max(hi),
                _ => covered.push((lo, hi)),
            }
        }
    }
    let mut uncovered = Vec::new();
    let mut at = a;
    for (lo, hi) in covered {
        if lo > at {
            uncovered.push((at, lo));
        }
        at = at.max(hi);
    }
    if b > at {
        uncovered.push((at, b));
    }
    Measured { joules, uncovered }
}

fn measure_series(s: &RailSeries, a: i64, b: i64, rule: Bridging) -> Measured {
    measure(&s.t_ns, &s.watts, &s.failed, a, b, rule)
}

/// Total length of the union of spans, ns.
fn union_ns(mut spans: Vec<(i64, i64)>) -> i64 {
    spans.sort_unstable();
    let mut sum = 0;
    let mut reach = i64::MIN;
    for (lo, hi) in spans {
        let lo = lo.max(reach);
        if hi > lo {
            sum += hi - lo;
        }
        reach = reach.max(hi);
    }
    sum
}

/// What the total rails measured of an interval.
struct TotalMeasured {
    joules: f64,
    /// Time any total rail went unmeasured, ns.
    gap_ns: i64,
    /// Sum of each total rail's mean power over its own measured time; None if some total
    /// rail measured nothing.
    mean_w: Option<f64>,
}

/// None without total rails or for an empty interval.
fn total_measured(samples: &Samples, a: i64, b: i64) -> Option<TotalMeasured> {
    if samples.total.is_empty() || b <= a {
        return None;
    }
    let rule = Bridging::for_period(samples.period_ns);
    let mut joules = 0.0;
    let mut mean_w = Some(0.0);
    let mut uncovered = Vec::new();
    for &k in &samples.total {
        let m = measure_series(&samples.series[k], a, b, rule);
        let measured_ns = b - a - m.uncovered_ns();
        mean_w = mean_w
            .filter(|_| measured_ns > 0)
            .map(|w| w + m.joules / (measured_ns as f64 * NS));
        joules += m.joules;
        uncovered.extend(m.uncovered);
    }
    Some(TotalMeasured {
        joules,
        gap_ns: union_ns(uncovered),
        mean_w,
    })
}

/// Achieved rate (Hz) and jitter (standard deviation of the sample spacing, s) of the samples
/// inside `[a, b]`; None with fewer than 3 samples.
pub(crate) fn rate_and_jitter(t_ns: &[i64], a: i64, b: i64) -> Option<(f64, f64)> {
    let lo = t_ns.partition_point(|&t| t < a);
    let hi = t_ns.partition_point(|&t| t <= b);
    let inside = &t_ns[lo..hi];
    if inside.len() < 3 {
        return None;
    }
    let d: Vec<f64> = inside
        .windows(2)
        .map(|p| (p[1] - p[0]) as f64 * NS)
        .collect();
    let mean = d.iter().sum::<f64>() / d.len() as f64;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / d.len() as f64;
    Some((1.0 / mean, var.sqrt()))
}

/// Mean power of the total over the measured part of `[a, b]` (the idle baseline uses it);
/// None when nothing of it was measured.
pub(crate) fn mean_total_power(samples: &Samples, a: i64, b: i64) -> Option<f64> {
    total_measured(samples, a, b)?.mean_w
}

/// What a trial cost, over its measured (post-warm-up) iterations.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TrialEnergy {
    /// The [`MeasuredWindow`]'s length: from the first measured iteration's start to the last
    /// one's end (includes the data loading between steps: the board spent that energy on
    /// training too).
    pub duration_s: f64,
    /// Energy over the time the sensors measured; with a gap it leaves the gap out.
    pub energy_j: f64,
    /// Mean power over the measured time (each total rail over its own measured time).
    pub avg_power_w: f64,
    pub energy_per_image_j: f64,
    /// Energy-delay product: energy x duration (J*s).
    pub edp_js: f64,
    /// energy - baseline power x measured time, when a baseline was measured.
    pub dynamic_energy_j: Option<f64>,
    /// Every rail's measured energy over the same interval, with whether it is part of the
    /// total (rails without any measurement there are left out).
    pub rail_energy_j: Vec<(String, f64, bool)>,
    /// Energy of each iteration (same order as the records; warm-up ones too), over its step
    /// interval `[t_start_ns, t_end_ns]`; None unless that interval was fully measured.
    pub iteration_energy_j: Vec<Option<f64>>,
    /// Samples of the first total rail inside the interval, achieved rate and jitter.
    pub samples: usize,
    pub rate_hz: Option<f64>,
    pub jitter_s: Option<f64>,
    /// Seconds of the interval some total rail went unmeasured (failed reads, a lost sensor,
    /// spans without samples longer than 10 periods and 100 ms).
    pub gap_s: f64,
    /// True when `gap_s` > 0: the energy covers only part of the interval.
    pub incomplete: bool,
}

/// The measured interval of a trial: its [`MeasuredWindow`], the one window of its time too.
fn measured_interval(iterations: &[IterationRecord], warmup: usize) -> Option<(i64, i64)> {
    MeasuredWindow::of(iterations, warmup).map(|w| (w.from_ns, w.to_ns))
}

/// Seconds of a trial's measured interval without any total-rail measurement at all, for a
/// trial whose energy cannot be given ([`trial_energy`] None). None when the trial has no
/// measured iteration or there is no total rail.
pub(crate) fn unmeasured_s(
    samples: &Samples,
    iterations: &[IterationRecord],
    warmup: usize,
) -> Option<f64> {
    let (a, b) = measured_interval(iterations, warmup)?;
    total_measured(samples, a, b).map(|m| m.gap_ns as f64 * NS)
}

/// Energy of a trial from its samples and iteration records. `warmup` leading records are
/// excluded from the trial figures (but get per-iteration energies). `batch` items per
/// iteration, counted over the iterations the measured records stand for (a record may cover
/// several logged steps); 0 = not known, so no energy per image (NaN). None when there is no
/// measured iteration, no total rail, or no measured time at all.
pub(crate) fn trial_energy(
    samples: &Samples,
    iterations: &[IterationRecord],
    warmup: usize,
    batch: usize,
    baseline_w: Option<f64>,
) -> Option<TrialEnergy> {
    let window = MeasuredWindow::of(iterations, warmup)?;
    let (a, b, measured_steps) = (window.from_ns, window.to_ns, window.steps);
    let total = total_measured(samples, a, b)?;
    let (energy_j, gap_ns) = (total.joules, total.gap_ns);
    // A total rail without any measurement leaves no total to give.
    let avg_power_w = total.mean_w?;
    let measured_s = (b - a - gap_ns) as f64 * NS;
    let duration_s = (b - a) as f64 * NS;
    let images = (batch * measured_steps) as f64;
    let rule = Bridging::for_period(samples.period_ns);
    let rail_energy_j = samples
        .series
        .iter()
        .enumerate()
        .filter_map(|(k, s)| {
            let m = measure_series(s, a, b, rule);
            (m.uncovered_ns() < b - a)
                .then(|| (s.rail.clone(), m.joules, samples.total.contains(&k)))
        })
        .collect();
    let iteration_energy_j = iterations
        .iter()
        .map(|r| {
            total_measured(samples, r.t_start_ns, r.t_end_ns)
                .filter(|m| m.gap_ns == 0)
                .map(|m| m.joules)
        })
        .collect();
    let first_total = &samples.series[samples.total[0]];
    let lo = first_total.t_ns.partition_point(|&t| t < a);
    let hi = first_total.t_ns.partition_point(|&t| t <= b);
    let rj = rate_and_jitter(&first_total.t_ns, a, b);
    let gap_s = gap_ns as f64 * NS;
    Some(TrialEnergy {
        duration_s,
        energy_j,
        avg_power_w,
        energy_per_image_j: if images > 0.0 {
            energy_j / images
        } else {
            f64::NAN
        },
        edp_js: energy_j * duration_s,
        dynamic_energy_j: baseline_w.map(|p| energy_j - p * measured_s.max(0.0)),
        rail_energy_j,
        iteration_energy_j,
        samples: hi - lo,
        rate_hz: rj.map(|r| r.0),
        jitter_s: rj.map(|r| r.1),
        gap_s,
        incomplete: gap_ns > 0,
    })
}

#[cfg(test)]
mod tests {
    use super::super::sampler::{RailSeries, RecordingHandle};
    use super::*;
    use crate::power::{PowerSource, Reading};
    use crate::testkit::rows::iteration_ms as iter;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    const MS: i64 = 1_000_000;

    fn series(rail: &str, t_ms: &[f64], w: &[f64]) -> RailSeries {
        RailSeries {
            source: "test".into(),
            rail: rail.into(),
            t_ns: t_ms.iter().map(|t| (t * MS as f64) as i64).collect(),
            volts: vec![None; w.len()],
            amps: vec![None; w.len()],
            watts: w.to_vec(),
            failed: vec![],
        }
    }

    const RULE_10MS: Bridging = Bridging {
        max_step_ns: 100 * MS,
        hold_ns: 10 * MS,
    };

    fn joules(s: &RailSeries, a: i64, b: i64) -> f64 {
        measure(&s.t_ns, &s.watts, &s.failed, a, b, RULE_10MS).joules
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn constant_power_gives_p_times_t() {
        let t: Vec<f64> = (0..=100).map(|k| k as f64 * 10.0).collect();
        let s = series("VDD_IN", &t, &vec![5.0; t.len()]);
        // 123 ms .. 877 ms, neither edge on a sample.
        let e = joules(&s, 123 * MS, 877 * MS);
        assert!(close(e, 5.0 * 0.754), "{e}");
    }

    #[test]
    fn linear_ramp_is_exact_with_interpolated_edges() {
        // P(t) = 2 + 3 t (t in s), sampled every 100 ms; integral over [0.05, 0.73]
        // = 2 (0.68) + 1.5 (0.73^2 - 0.05^2).
        let t: Vec<f64> = (0..=10).map(|k| k as f64 * 100.0).collect();
        let w: Vec<f64> = t.iter().map(|ms| 2.0 + 3.0 * ms / 1e3).collect();
        let s = series("r", &t, &w);
        let e = joules(&s, 50 * MS, 730 * MS);
        let exact = 2.0 * 0.68 + 1.5 * (0.73f64.powi(2) - 0.05f64.powi(2));
        assert!(close(e, exact), "{e} vs {exact}");
        // Both edges between the same two samples.
        let e = joules(&s, 410 * MS, 440 * MS);
        let exact = 2.0 * 0.03 + 1.5 * (0.44f64.powi(2) - 0.41f64.powi(2));
        assert!(close(e, exact), "{e} vs {exact}");
    }

    #[test]
    fn step_change_is_within_a_tenth_of_a_percent() {
        // 1 kHz samples of a 4 W -> 10 W step at 0.5 s: the trapezoid smears one 1 ms sample.
        let t: Vec<f64> = (0..=1000).map(|k| k as f64).collect();
        let w: Vec<f64> = t
            .iter()
            .map(|&ms| if ms < 500.0 { 4.0 } else { 10.0 })
            .collect();
        let s = series("r", &t, &w);
        let e = joules(&s, 0, 1000 * MS);
        assert!((e - 7.0).abs() / 7.0 < 1e-3, "{e}");
    }

    #[test]
    fn gaps_and_edges_are_left_out_not_filled_in() {
        // Samples at 0, 100, 400 ms (a 300 ms gap, over the 150 ms bridge), interval 50..500,
        // power held 20 ms past the last sample: 50..100 at 1 W and 400..420 at 4 W measured.
        let rule = Bridging {
            max_step_ns: 150 * MS,
            hold_ns: 20 * MS,
        };
        let s = series("r", &[0.0, 100.0, 400.0], &[1.0, 1.0, 4.0]);
        let m = measure(&s.t_ns, &s.watts, &[], 50 * MS, 500 * MS, rule);
        assert!(close(m.joules, 1.0 * 0.05 + 4.0 * 0.02), "{m:?}");
        assert_eq!(m.uncovered, [(100 * MS, 400 * MS), (420 * MS, 500 * MS)]);
        // A short span is bridged, unless a read failed inside it.
        let s = series("r", &[0.0, 100.0, 200.0], &[1.0, 1.0, 3.0]);
        let m = measure(&s.t_ns, &s.watts, &[], 0, 200 * MS, rule);
        assert!(
            close(m.joules, 0.1 + 0.2) && m.uncovered.is_empty(),
            "{m:?}"
        );
        let m = measure(
            &s.t_ns,
            &s.watts,
            &[(100 * MS, 200 * MS)],
            0,
            200 * MS,
            rule,
        );
        assert!(close(m.joules, 0.1), "{m:?}");
        assert_eq!(m.uncovered, [(100 * MS, 200 * MS)]);
        let nothing = measure(&[], &[], &[], 0, 5, rule);
        assert_eq!((nothing.joules, nothing.uncovered), (0.0, vec![(0, 5)]));
    }

    #[test]
    fn a_lost_sensor_gives_the_true_gap_and_measured_energy_only() {
        // 6 W sampled every 10 ms until 1000 ms, then the sensor is lost until the recording
        // stops at 3000 ms. The trial runs 500..2500 ms: 0.5 s measured, a 1.5 s gap.
        let t: Vec<f64> = (0..=100).map(|k| k as f64 * 10.0).collect();
        let mut s = series("VDD_IN", &t, &vec![6.0; t.len()]);
        s.failed = vec![(1000 * MS, 3000 * MS)];
        let samples = Samples {
            series: vec![s],
            total: vec![0],
            errors: vec![(1000 * MS, 3000 * MS)],
            period_ns: 10 * MS,
            lost: None,
        };
        let e = trial_energy(&samples, &[iter(0, 500, 2500)], 0, 2, None).unwrap();
        assert!(e.incomplete && close(e.gap_s, 1.5), "{e:?}");
        assert!(close(e.energy_j, 6.0 * 0.5), "{e:?}");
        assert!(close(e.avg_power_w, 6.0), "{e:?}");
        assert_eq!(e.iteration_energy_j, [None]);

        // The next trial, wholly inside the loss: no energy, its whole interval a gap.
        let later = [iter(0, 2600, 2900)];
        assert_eq!(trial_energy(&samples, &later, 0, 2, None), None);
        assert!(close(unmeasured_s(&samples, &later, 0).unwrap(), 0.3));
        let mut empty = samples.clone();
        empty.series[0] = RailSeries {
            failed: vec![(2550 * MS, 3000 * MS)],
            ..series("VDD_IN", &[], &[])
        };
        assert_eq!(trial_energy(&empty, &later, 0, 2, None), None);
        assert!(close(unmeasured_s(&empty, &later, 0).unwrap(), 0.3));
    }

    #[test]
    fn trial_energy_uses_only_measured_iterations() {
        // 10 W until 200 ms, then 20 W; samples every 10 ms; two rails, VDD_IN is the total.
        let t: Vec<f64> = (0..=100).map(|k| k as f64 * 10.0).collect();
        let w: Vec<f64> = t
            .iter()
            .map(|&ms| if ms < 200.0 { 10.0 } else { 20.0 })
            .collect();
        let samples = Samples {
            series: vec![
                series("VDD_IN", &t, &w),
                series("VDD_SOC", &t, &vec![1.0; t.len()]),
            ],
            total: vec![0],
            errors: vec![],
            period_ns: 10 * MS,
            lost: None,
        };
        // Warm-up 0..150 ms at 10 W; measured 250..450 and 460..650 at 20 W.
        let iters = [iter(0, 0, 150), iter(1, 250, 450), iter(2, 460, 650)];
        let e = trial_energy(&samples, &iters, 1, 4, Some(5.0)).unwrap();
        assert!(close(e.duration_s, 0.4));
        assert!(close(e.energy_j, 8.0), "{e:?}");
        assert!(close(e.avg_power_w, 20.0));
        assert!(close(e.energy_per_image_j, 1.0)); // 8 J / (4 x 2 images)
        assert!(close(e.edp_js, 3.2));
        assert!(close(e.dynamic_energy_j.unwrap(), 8.0 - 2.0));
        assert_eq!(e.rail_energy_j.len(), 2);
        assert!(e.rail_energy_j[0].2 && !e.rail_energy_j[1].2);
        assert!(close(e.rail_energy_j[1].1, 0.4));
        assert!(close(e.iteration_energy_j[0].unwrap(), 1.5));
        assert!(close(e.iteration_energy_j[2].unwrap(), 20.0 * 0.19));
        assert_eq!(e.samples, 41); // 250, 260, ..., 650
        assert!(close(e.rate_hz.unwrap(), 100.0));
        assert!(e.jitter_s.unwrap() < 1e-9);
        assert!(!e.incomplete && e.gap_s == 0.0);
        assert_eq!(trial_energy(&samples, &iters, 3, 4, None), None);
    }

    #[test]
    fn totals_sum_rails_and_errors_mark_the_trial_incomplete() {
        let t: Vec<f64> = (0..=100).map(|k| k as f64 * 10.0).collect();
        // CPU's reads failed between its samples at 300 and 360 ms.
        let cpu_t: Vec<f64> = t
            .iter()
            .copied()
            .filter(|&ms| !(300.0 < ms && ms < 360.0))
            .collect();
        let mut cpu = series("CPU", &cpu_t, &vec![2.0; cpu_t.len()]);
        cpu.failed = vec![(300 * MS, 360 * MS)];
        let samples = Samples {
            series: vec![cpu, series("GPU", &t, &vec![3.0; t.len()])],
            total: vec![0, 1],
            errors: vec![(300 * MS, 360 * MS)],
            period_ns: 10 * MS,
            lost: None,
        };
        let e = trial_energy(&samples, &[iter(0, 100, 600)], 0, 1, None).unwrap();
        // CPU measured 0.44 s at 2 W, GPU the whole 0.5 s at 3 W.
        assert!(close(e.energy_j, 2.0 * 0.44 + 3.0 * 0.5), "{e:?}");
        assert!(e.incomplete && close(e.gap_s, 0.06), "{e:?}");
        assert_eq!(e.dynamic_energy_j, None);
        assert!(close(
            mean_total_power(&samples, 0, 1000 * MS).unwrap(),
            5.0
        ));
    }

    /// A sampler whose sensor fails for a while keeps sampling, and the trial over that
    /// stretch is marked incomplete with its gap.
    #[test]
    fn sampler_marks_errors_and_keeps_going() {
        struct Flaky(u32, Vec<String>);
        impl PowerSource for Flaky {
            fn describe(&self) -> String {
                "flaky".into()
            }
            fn rails(&self) -> &[String] {
                &self.1
            }
            fn read(&mut self) -> anyhow::Result<Vec<Reading>> {
                self.0 += 1;
                // Reads 5..=9 fail, read 12 is absurd.
                anyhow::ensure!(!(5..10).contains(&self.0), "EIO");
                let watts = if self.0 == 12 { f64::NAN } else { 2.0 };
                Ok(vec![Reading {
                    volts: None,
                    amps: None,
                    watts,
                }])
            }
            fn default_period(&self) -> Duration {
                Duration::from_millis(2)
            }
        }
        let src: Box<dyn PowerSource> = Box::new(Flaky(0, vec!["R".into()]));
        let h = RecordingHandle::start(
            &[(Arc::new(Mutex::new(src)), Duration::from_millis(2))],
            vec![("flaky".into(), "R".into())],
            None,
        );
        std::thread::sleep(Duration::from_millis(60));
        let s = h.stop();
        assert_eq!(s.errors.len(), 2, "{:?}", s.errors);
        assert!(s.series[0].watts.iter().all(|&w| w == 2.0));
        let t = &s.series[0].t_ns;
        let e = trial_energy(
            &s,
            &[IterationRecord {
                step: 0,
                epoch: 0,
                loss: 1.0,
                lr: 0.1,
                data_s: 0.0,
                step_s: 0.0,
                t_start_ns: t[0],
                t_end_ns: *t.last().unwrap(),
            }],
            0,
            1,
            None,
        )
        .unwrap();
        assert!(e.incomplete && e.gap_s > 0.008, "{e:?}");
    }
}
