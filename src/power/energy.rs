//! Pure energy arithmetic: power samples + iteration timestamps -> joules, J/image, EDP.
//!
//! Trapezoidal rule on CLOCK_MONOTONIC timestamps over exactly the interval asked for, the
//! power at the interval's edges linearly interpolated between the neighbouring samples (held
//! constant beyond the first/last sample, and that uncovered span reported as a gap).

use super::sampler::Samples;
use crate::store::IterationRecord;

const NS: f64 = 1e-9;

/// Power at `x` by linear interpolation, held constant outside the samples.
fn power_at(t: &[i64], w: &[f64], x: i64) -> f64 {
    match t.partition_point(|&ti| ti <= x) {
        0 => w[0],
        i if i == t.len() => w[t.len() - 1],
        i => {
            let (t0, t1) = (t[i - 1], t[i]);
            w[i - 1] + (w[i] - w[i - 1]) * (x - t0) as f64 / (t1 - t0) as f64
        }
    }
}

/// Joules over `[a_ns, b_ns]` of one power series (timestamps ascending, ns; watts).
/// None without samples or for an empty/inverted interval.
pub fn integrate(t_ns: &[i64], watts: &[f64], a_ns: i64, b_ns: i64) -> Option<f64> {
    if t_ns.is_empty() || t_ns.len() != watts.len() || b_ns <= a_ns {
        return None;
    }
    let first = t_ns.partition_point(|&t| t <= a_ns);
    let last = t_ns.partition_point(|&t| t < b_ns);
    let mut prev = (a_ns, power_at(t_ns, watts, a_ns));
    let mut sum = 0.0;
    for i in first..last {
        sum += 0.5 * (prev.1 + watts[i]) * (t_ns[i] - prev.0) as f64;
        prev = (t_ns[i], watts[i]);
    }
    sum += 0.5 * (prev.1 + power_at(t_ns, watts, b_ns)) * (b_ns - prev.0) as f64;
    Some(sum * NS)
}

/// Seconds of `[a, b]` not covered by samples of a series: before its first sample, after
/// its last, plus spans between consecutive samples wider than `max_step_ns`.
pub fn uncovered_s(t_ns: &[i64], a: i64, b: i64, max_step_ns: i64) -> f64 {
    let (Some(&first), Some(&last)) = (t_ns.first(), t_ns.last()) else {
        return (b - a).max(0) as f64 * NS;
    };
    let mut gap = (first.min(b) - a).max(0) + (b - last.max(a)).max(0);
    for pair in t_ns.windows(2) {
        let (lo, hi) = (pair[0].max(a), pair[1].min(b));
        if pair[1] - pair[0] > max_step_ns && hi > lo {
            gap += hi - lo;
        }
    }
    gap as f64 * NS
}

/// Achieved rate (Hz) and jitter (standard deviation of the sample spacing, s) of the samples
/// inside `[a, b]`; None with fewer than 3 samples.
pub fn rate_and_jitter(t_ns: &[i64], a: i64, b: i64) -> Option<(f64, f64)> {
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

/// Mean power of the total over `[a, b]` (the idle baseline uses it).
pub fn mean_total_power(samples: &Samples, a: i64, b: i64) -> Option<f64> {
    total_energy(samples, a, b).map(|e| e / ((b - a) as f64 * NS))
}

fn total_energy(samples: &Samples, a: i64, b: i64) -> Option<f64> {
    let mut sum = 0.0;
    for &k in &samples.total {
        let s = &samples.series[k];
        sum += integrate(&s.t_ns, &s.watts, a, b)?;
    }
    (!samples.total.is_empty()).then_some(sum)
}

/// What a trial cost, over its measured (post-warm-up) iterations.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialEnergy {
    /// From the first measured iteration's start to the last one's end (includes the data
    /// loading between steps: the board spent that energy on training too).
    pub duration_s: f64,
    pub energy_j: f64,
    pub avg_power_w: f64,
    pub energy_per_image_j: f64,
    /// Energy-delay product: energy x duration (J*s).
    pub edp_js: f64,
    /// energy - baseline power x duration, when a baseline was measured.
    pub dynamic_energy_j: Option<f64>,
    /// Every rail's energy over the same interval, with whether it is part of the total.
    pub rail_energy_j: Vec<(String, f64, bool)>,
    /// Energy of each iteration (same order as the records; warm-up ones too), over its step
    /// interval `[t_start_ns, t_end_ns]`.
    pub iteration_energy_j: Vec<Option<f64>>,
    /// Samples of the first total rail inside the interval, achieved rate and jitter.
    pub samples: usize,
    pub rate_hz: Option<f64>,
    pub jitter_s: Option<f64>,
    /// Seconds of the interval without valid samples (sensor errors, missing coverage).
    pub gap_s: f64,
    /// True when `gap_s` > 0 (sensor errors, or spans without samples longer than 10 periods
    /// and 100 ms): the energy leans on interpolation there.
    pub incomplete: bool,
}

/// Energy of a trial from its samples and iteration records. `warmup` leading records are
/// excluded from the trial figures (but get per-iteration energies). None when there is no
/// measured iteration or no total-rail sample.
pub fn trial_energy(
    samples: &Samples,
    iterations: &[IterationRecord],
    warmup: usize,
    batch: usize,
    baseline_w: Option<f64>,
) -> Option<TrialEnergy> {
    let measured = iterations.get(warmup..).filter(|m| !m.is_empty())?;
    let a = measured.first()?.t_start_ns;
    let b = measured.last()?.t_end_ns;
    let energy_j = total_energy(samples, a, b)?;
    let duration_s = (b - a) as f64 * NS;
    let images = (batch * measured.len()) as f64;
    let rail_energy_j = samples
        .series
        .iter()
        .enumerate()
        .filter_map(|(k, s)| {
            integrate(&s.t_ns, &s.watts, a, b)
                .map(|e| (s.rail.clone(), e, samples.total.contains(&k)))
        })
        .collect();
    let iteration_energy_j = iterations
        .iter()
        .map(|r| total_energy(samples, r.t_start_ns, r.t_end_ns))
        .collect();
    let first_total = &samples.series[samples.total[0]];
    let lo = first_total.t_ns.partition_point(|&t| t < a);
    let hi = first_total.t_ns.partition_point(|&t| t <= b);
    let rj = rate_and_jitter(&first_total.t_ns, a, b);
    // A gap is a span without samples longer than 10 nominal periods and 100 ms: shorter
    // ones are scheduling delays on a busy host, which interpolation bridges well.
    let max_step = (samples.period_ns * 10).max(100_000_000);
    let gap_ns = samples
        .total
        .iter()
        .map(|&k| uncovered_s(&samples.series[k].t_ns, a, b, max_step))
        .fold(0.0, f64::max);
    let gap_s = gap_ns
        + samples
            .errors
            .iter()
            .map(|&(lo, hi)| (hi.min(b) - lo.max(a)).max(0) as f64 * NS)
            .sum::<f64>();
    Some(TrialEnergy {
        duration_s,
        energy_j,
        avg_power_w: energy_j / duration_s,
        energy_per_image_j: energy_j / images,
        edp_js: energy_j * duration_s,
        dynamic_energy_j: baseline_w.map(|p| energy_j - p * duration_s),
        rail_energy_j,
        iteration_energy_j,
        samples: hi - lo,
        rate_hz: rj.map(|r| r.0),
        jitter_s: rj.map(|r| r.1),
        gap_s,
        incomplete: gap_s > 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::super::sampler::RailSeries;
    use super::*;

    const MS: i64 = 1_000_000;

    fn series(rail: &str, t_ms: &[f64], w: &[f64]) -> RailSeries {
        RailSeries {
            source: "test".into(),
            rail: rail.into(),
            t_ns: t_ms.iter().map(|t| (t * MS as f64) as i64).collect(),
            volts: vec![None; w.len()],
            amps: vec![None; w.len()],
            watts: w.to_vec(),
        }
    }

    fn iter(step: usize, a_ms: i64, b_ms: i64) -> IterationRecord {
        IterationRecord {
            step,
            epoch: 0,
            loss: 1.0,
            lr: 0.01,
            data_s: 0.0,
            step_s: (b_ms - a_ms) as f64 * 1e-3,
            t_start_ns: a_ms * MS,
            t_end_ns: b_ms * MS,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn constant_power_gives_p_times_t() {
        let t: Vec<f64> = (0..=100).map(|k| k as f64 * 10.0).collect();
        let s = series("VDD_IN", &t, &vec![5.0; t.len()]);
        // 123 ms .. 877 ms, neither edge on a sample.
        let e = integrate(&s.t_ns, &s.watts, 123 * MS, 877 * MS).unwrap();
        assert!(close(e, 5.0 * 0.754), "{e}");
    }

    #[test]
    fn linear_ramp_is_exact_with_interpolated_edges() {
        // P(t) = 2 + 3 t (t in s), sampled every 100 ms; integral over [0.05, 0.73]
        // = 2 (0.68) + 1.5 (0.73^2 - 0.05^2).
        let t: Vec<f64> = (0..=10).map(|k| k as f64 * 100.0).collect();
        let w: Vec<f64> = t.iter().map(|ms| 2.0 + 3.0 * ms / 1e3).collect();
        let s = series("r", &t, &w);
        let e = integrate(&s.t_ns, &s.watts, 50 * MS, 730 * MS).unwrap();
        let exact = 2.0 * 0.68 + 1.5 * (0.73f64.powi(2) - 0.05f64.powi(2));
        assert!(close(e, exact), "{e} vs {exact}");
        // Both edges between the same two samples.
        let e = integrate(&s.t_ns, &s.watts, 410 * MS, 440 * MS).unwrap();
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
        let e = integrate(&s.t_ns, &s.watts, 0, 1000 * MS).unwrap();
        assert!((e - 7.0).abs() / 7.0 < 1e-3, "{e}");
    }

    #[test]
    fn gaps_and_edges_outside_the_samples() {
        // Samples at 0, 100, 400 ms (a 300 ms gap), interval 50..500: the gap is bridged
        // linearly, the uncovered tail after 400 ms is held at the last value and reported.
        let s = series("r", &[0.0, 100.0, 400.0], &[1.0, 1.0, 4.0]);
        let e = integrate(&s.t_ns, &s.watts, 50 * MS, 500 * MS).unwrap();
        let exact = 1.0 * 0.05 + 0.5 * (1.0 + 4.0) * 0.3 + 4.0 * 0.1;
        assert!(close(e, exact), "{e} vs {exact}");
        let gap = uncovered_s(&s.t_ns, 50 * MS, 500 * MS, 150 * MS);
        assert!(close(gap, 0.3 + 0.1), "{gap}");
        assert_eq!(integrate(&[], &[], 0, 1), None);
        assert_eq!(integrate(&s.t_ns, &s.watts, 5, 5), None);
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
        let samples = Samples {
            series: vec![
                series("CPU", &t, &vec![2.0; t.len()]),
                series("GPU", &t, &vec![3.0; t.len()]),
            ],
            total: vec![0, 1],
            errors: vec![(300 * MS, 360 * MS)],
            period_ns: 10 * MS,
        };
        let e = trial_energy(&samples, &[iter(0, 100, 600)], 0, 1, None).unwrap();
        assert!(close(e.energy_j, 2.5));
        assert!(e.incomplete && close(e.gap_s, 0.06), "{e:?}");
        assert_eq!(e.dynamic_energy_j, None);
        assert!(close(
            mean_total_power(&samples, 0, 1000 * MS).unwrap(),
            5.0
        ));
    }
}
