//! Pure statistics over a trial's iterations: what "time per image" means is decided here.

/// Linear-interpolated quantile (the "type 7" of R and numpy's default) of sorted data.
fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Median and interquartile range; None for no data.
pub fn median_iqr(values: &[f64]) -> Option<(f64, f64)> {
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

/// A loss the studies would have flagged: negative (Caffe's overfitting bug) or not finite.
pub fn loss_is_anomalous(loss: f64) -> bool {
    !loss.is_finite() || loss < 0.0
}

/// Warm-up iterations actually excluded: the configured count, but always leaving at least
/// one measured iteration when the trial has any.
pub fn effective_warmup(configured: usize, iterations: usize) -> usize {
    configured.min(iterations.saturating_sub(1))
}

#[derive(Debug, Clone, PartialEq)]
pub struct TimeSummary {
    /// Median step seconds / batch over the measured (post-warm-up) iterations.
    pub time_per_image_s: f64,
    /// IQR of step seconds / batch.
    pub time_per_image_spread_s: f64,
    /// batch / median step seconds.
    pub images_per_s: f64,
}

/// Summarises step times (seconds, one per iteration in order), skipping `warmup` leading ones.
pub fn time_summary(step_s: &[f64], warmup: usize, batch: usize) -> Option<TimeSummary> {
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

#[cfg(test)]
mod tests {
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
    fn anomalous_losses() {
        assert!(loss_is_anomalous(-0.1));
        assert!(loss_is_anomalous(f64::NAN));
        assert!(loss_is_anomalous(f64::INFINITY));
        assert!(!loss_is_anomalous(0.0));
        assert!(!loss_is_anomalous(6.9));
    }
}
