//! Pure statistics over a trial's iterations: what "time per image" means is decided here.

/// Linear-interpolated quantile (the "type 7" of R and numpy's default) of sorted data.
pub(crate) fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Median and interquartile range; None for no data.
pub(crate) fn median_iqr(values: &[f64]) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some((
        quantile_sorted(&sorted, 0.5),
        quantile_sorted(&sorted, 0.75) - quantile_sorted(&sorted, 0.25),
    ))
}

/// How far above the trial's median step time a step may take before it is flagged as a
/// stall (SIGSTOP, a swap storm, a thermal emergency): a stall multiplies a step's time, noise
/// does not.
pub(crate) const STALL_FACTOR: f64 = 10.0;

/// A stall must also cost this much more than the median: a 1 ms operator step preempted for
/// 15 ms is scheduling noise, not a stall.
pub(crate) const STALL_MIN_EXCESS_S: f64 = 1.0;

/// The steps of `step_s` far above its median (more than [`STALL_FACTOR`] times it and at
/// least [`STALL_MIN_EXCESS_S`] longer): their count and words about the longest; None when
/// there is none.
pub(crate) fn stalls(step_s: &[f64]) -> Option<(usize, String)> {
    let (median, _) = median_iqr(step_s)?;
    let stalled = |s: f64| s > STALL_FACTOR * median && s - median >= STALL_MIN_EXCESS_S;
    let count = step_s.iter().filter(|&&s| stalled(s)).count();
    let (index, longest) = step_s
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, s)| stalled(s))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some((
        count,
        format!(
            "measured step {index} took {longest:.2} s, {:.0}x the median {median:.3} s",
            longest / median.max(f64::MIN_POSITIVE)
        ),
    ))
}

/// A loss the studies would have flagged: negative (Caffe's overfitting bug) or not finite.
pub(crate) fn loss_is_anomalous(loss: f64) -> bool {
    !loss.is_finite() || loss < 0.0
}

/// How far above its running median a loss may jump before it is flagged: a diverging step
/// (a blown-up learning rate, corrupt data) jumps by orders of magnitude, noise does not.
pub(crate) const LOSS_SPIKE_FACTOR: f64 = 100.0;

/// Why a trial's loss series is anomalous, naming the first offending step; None if it is
/// not. Flags a negative or non-finite loss, and a loss above [`LOSS_SPIKE_FACTOR`] x the
/// median of the losses before it.
pub(crate) fn loss_anomaly(losses: &[f64]) -> Option<String> {
    // The running median from two heaps: the lower half (max-heap) and the upper half
    // (min-heap). Finite non-negative f64 order like their bit patterns.
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut lower: BinaryHeap<u64> = BinaryHeap::new();
    let mut upper: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    for (step, &loss) in losses.iter().enumerate() {
        if loss_is_anomalous(loss) {
            return Some(format!("loss {loss} at step {step}"));
        }
        let median = match (lower.peek(), upper.peek()) {
            (Some(&lo), Some(&Reverse(hi))) if lower.len() == upper.len() => {
                Some((f64::from_bits(lo) + f64::from_bits(hi)) / 2.0)
            }
            (Some(&lo), _) => Some(f64::from_bits(lo)),
            _ => None,
        };
        if let Some(median) = median.filter(|&m| m > 0.0) {
            if loss > LOSS_SPIKE_FACTOR * median {
                return Some(format!(
                    "loss {loss:.4} at step {step} is {:.0}x the running median {median:.4}",
                    loss / median
                ));
            }
        }
        // + 0.0 turns -0.0 into 0.0, whose bits sort first.
        let bits = (loss + 0.0).to_bits();
        match lower.peek() {
            Some(&lo) if bits > lo => upper.push(Reverse(bits)),
            _ => lower.push(bits),
        }
        if lower.len() > upper.len() + 1 {
            upper.push(Reverse(lower.pop().expect("lower is not empty")));
        } else if upper.len() > lower.len() {
            lower.push(upper.pop().expect("upper is not empty").0);
        }
    }
    None
}

/// Warm-up iterations actually excluded: the configured count, but always leaving at least
/// one measured iteration when the trial has any.
pub(crate) fn effective_warmup(configured: usize, iterations: usize) -> usize {
    configured.min(iterations.saturating_sub(1))
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TimeSummary {
    /// Median step seconds / batch over the measured (post-warm-up) iterations.
    pub time_per_image_s: f64,
    /// IQR of step seconds / batch.
    pub time_per_image_spread_s: f64,
    /// batch / median step seconds.
    pub images_per_s: f64,
}

/// Summarises step times (seconds, one per iteration in order), skipping `warmup` leading ones.
pub(crate) fn time_summary(step_s: &[f64], warmup: usize, batch: usize) -> Option<TimeSummary> {
    let measured = step_s.get(warmup..)?;
    let (median, iqr) = median_iqr(measured)?;
    Some(TimeSummary {
        time_per_image_s: median / batch as f64,
        time_per_image_spread_s: iqr / batch as f64,
        images_per_s: if median > 0.0 {
            batch as f64 / median
        } else {
            f64::INFINITY
        },
    })
}

/// Two-sided 95 % quantiles of Student's t (0.975 one-sided) for 1 to 30 degrees of freedom.
const T95: [f64; 30] = [
    12.706204736,
    4.302652730,
    3.182446305,
    2.776445105,
    2.570581836,
    2.446911851,
    2.364624252,
    2.306004135,
    2.262157163,
    2.228138852,
    2.200985160,
    2.178812830,
    2.160368656,
    2.144786688,
    2.131449546,
    2.119905299,
    2.109815578,
    2.100922040,
    2.093024054,
    2.085963447,
    2.079613845,
    2.073873068,
    2.068657610,
    2.063898562,
    2.059538553,
    2.055529439,
    2.051830516,
    2.048407142,
    2.045229642,
    2.042272456,
];

/// The 0.975 quantile of Student's t with `dof` degrees of freedom (`dof` >= 1): the table up
/// to 30, beyond it the Cornish-Fisher expansion around the normal quantile (within 2e-6 of
/// the exact value from 31 on, where the table stops).
pub(crate) fn t95(dof: usize) -> f64 {
    if let Some(&t) = dof.checked_sub(1).and_then(|i| T95.get(i)) {
        return t;
    }
    let z: f64 = 1.959_963_984_540_054;
    let v = dof as f64;
    z + (z.powi(3) + z) / (4.0 * v)
        + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * v * v)
        + (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / (384.0 * v.powi(3))
}

/// Repeated measurements of one quantity summarised: what a mean of repetitions is worth.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub(crate) struct Spread {
    pub(crate) n: usize,
    pub(crate) mean: f64,
    pub(crate) median: f64,
    /// Sample standard deviation (n - 1 in the denominator); None below 2 values.
    pub(crate) sd: Option<f64>,
    /// 95 % confidence interval of the mean, mean -+ t(0.975, n - 1) * sd / sqrt(n); None
    /// below 2 values.
    pub(crate) ci95_low: Option<f64>,
    pub(crate) ci95_high: Option<f64>,
    /// Coefficient of variation, sd / |mean|; None below 2 values or for a zero mean.
    pub(crate) cv: Option<f64>,
}

impl Spread {
    /// Half the width of the confidence interval (the "±" of mean ± CI).
    pub(crate) fn ci95_half(&self) -> Option<f64> {
        Some((self.ci95_high? - self.ci95_low?) / 2.0)
    }
}

/// Summarises `values` (non-finite ones left out); None when none is left.
pub(crate) fn spread(values: &[f64]) -> Option<Spread> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let n = finite.len();
    let (median, _) = median_iqr(&finite)?;
    let mean = finite.iter().sum::<f64>() / n as f64;
    let sd = (n >= 2).then(|| {
        let ss: f64 = finite.iter().map(|v| (v - mean).powi(2)).sum();
        (ss / (n - 1) as f64).sqrt()
    });
    let half = sd.map(|sd| t95(n - 1) * sd / (n as f64).sqrt());
    Some(Spread {
        n,
        mean,
        median,
        sd,
        ci95_low: half.map(|h| mean - h),
        ci95_high: half.map(|h| mean + h),
        cv: sd.filter(|_| mean != 0.0).map(|sd| sd / mean.abs()),
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_step_far_above_the_median_is_a_stall_and_noise_is_not() {
        let mut steps = vec![0.5; 20];
        assert_eq!(stalls(&steps), None);
        // A worker stopped for 20 s in step 7.
        steps[7] = 20.4;
        let (count, why) = stalls(&steps).unwrap();
        assert_eq!(count, 1);
        assert!(why.contains("step 7") && why.contains("20.40 s"), "{why}");
        // Tiny steps preempted for a few milliseconds are not stalls, however many times longer.
        let mut tiny = vec![0.001; 20];
        tiny[3] = 0.05;
        assert_eq!(stalls(&tiny), None);
        assert_eq!(stalls(&[]), None);
    }

    use super::*;

    #[test]
    fn median_and_iqr_match_numpy() {
        // numpy: median 3.5, percentile 75 - 25 = 4.75 - 2.25 = 2.5
        assert_eq!(
            median_iqr(&[6.0, 1.0, 3.0, 4.0, 2.0, 5.0]),
            Some((3.5, 2.5))
        );
        assert_eq!(median_iqr(&[2.0]), Some((2.0, 0.0)));
        assert_eq!(median_iqr(&[]), None);
    }

    #[test]
    fn warmup_is_excluded_from_time_per_image() {
        let steps = [10.0, 9.0, 1.0, 1.2, 0.8];
        let s = time_summary(&steps, 2, 4).unwrap();
        assert!((s.time_per_image_s - 0.25).abs() < 1e-12);
        assert!((s.time_per_image_spread_s - 0.05).abs() < 1e-12);
        assert!((s.images_per_s - 4.0).abs() < 1e-12);
        assert_eq!(time_summary(&steps, 5, 4), None);
        assert_eq!(effective_warmup(2, 5), 2);
        assert_eq!(effective_warmup(2, 2), 1);
        assert_eq!(effective_warmup(2, 0), 0);
    }

    #[test]
    fn a_loss_spike_over_its_running_median_is_flagged() {
        // A normal curve with noise: never flagged.
        let calm: Vec<f64> = (0..200)
            .map(|k| 6.9 * (-(k as f64) / 80.0).exp() + 0.05 * ((k * 7919 % 13) as f64 / 13.0))
            .collect();
        assert_eq!(loss_anomaly(&calm), None);
        // The same curve with a jump of three orders of magnitude at step 150.
        let mut spiked = calm.clone();
        spiked[150] = calm[150] * 1000.0;
        let why = loss_anomaly(&spiked).expect("the spike is flagged");
        assert!(why.contains("step 150") && why.contains("median"), "{why}");
        // Just under the factor is not a spike; negative and NaN still are.
        let mut under = vec![1.0; 10];
        under.push(99.0);
        assert_eq!(loss_anomaly(&under), None);
        under.push(f64::NAN);
        assert!(loss_anomaly(&under).unwrap().contains("step 11"));
        assert!(loss_anomaly(&[2.0, -0.1]).is_some());
        assert_eq!(loss_anomaly(&[]), None);
    }

    #[test]
    fn anomalous_losses() {
        assert!(loss_is_anomalous(-0.1));
        assert!(loss_is_anomalous(f64::NAN));
        assert!(loss_is_anomalous(f64::INFINITY));
        assert!(!loss_is_anomalous(0.0));
        assert!(!loss_is_anomalous(6.9));
    }

    #[test]
    fn spread_matches_pythons_statistics_and_students_t() {
        // python3: statistics.mean([1, 2, 4]) = 2.3333..., statistics.stdev = 1.5275252316519468;
        // t(0.975, 2) = 4.302652730, so the half-width is 4.302652730 * sd / sqrt(3).
        let s = spread(&[4.0, 1.0, 2.0]).unwrap();
        assert_eq!(s.n, 3);
        assert!((s.mean - 7.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.median, 2.0);
        let sd = s.sd.unwrap();
        assert!((sd - 1.5275252316519468).abs() < 1e-12);
        let half = 4.302652730 * sd / 3f64.sqrt();
        assert!((s.ci95_low.unwrap() - (7.0 / 3.0 - half)).abs() < 1e-9);
        assert!((s.ci95_high.unwrap() - (7.0 / 3.0 + half)).abs() < 1e-9);
        assert!((s.ci95_half().unwrap() - half).abs() < 1e-9);
        assert!((s.cv.unwrap() - sd / (7.0 / 3.0)).abs() < 1e-12);
        // One value has a mean and a median but no spread; a NaN is not a value.
        let one = spread(&[0.5, f64::NAN]).unwrap();
        assert_eq!((one.n, one.mean, one.median), (1, 0.5, 0.5));
        assert_eq!((one.sd, one.ci95_low, one.cv), (None, None, None));
        assert_eq!(spread(&[]), None);
        // Identical values: no spread at all, the interval is the mean itself.
        let same = spread(&[2.0; 4]).unwrap();
        assert_eq!(
            (same.sd, same.ci95_low, same.ci95_high, same.cv),
            (Some(0.0), Some(2.0), Some(2.0), Some(0.0))
        );
        // A zero mean has no coefficient of variation.
        assert_eq!(spread(&[-1.0, 1.0]).unwrap().cv, None);
    }

    #[test]
    fn students_t_from_the_table_and_beyond_it() {
        assert_eq!(t95(1), 12.706204736);
        assert_eq!(t95(30), 2.042272456);
        // Exact values (numerical inversion of the t CDF): 31 -> 2.0395134, 120 -> 1.9799304.
        assert!((t95(31) - 2.0395134).abs() < 1e-5);
        assert!((t95(120) - 1.9799304).abs() < 1e-6);
        // Decreasing towards the normal quantile.
        assert!((1..200).all(|d| t95(d) > t95(d + 1) && t95(d + 1) > 1.959_963));
    }
}
