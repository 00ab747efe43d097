//! The flags that qualify a trial's figures in every table, and their legend.

use std::borrow::Cow;

use crate::store::ResultRow;

/// What qualifies a trial's figures, as every table shows it: `SWAP` (the time measures the
/// swap device), `THROTTLED`, `POWER_GAP` (readings missing inside the measured window),
/// `FEW_READINGS(n)` (the energy rests on n < 10 sensor updates), `STALL`, `LOSS_ANOMALY`,
/// `ABOVE_PEAK` (a FLOP rate above the measured peak), then the error's first line.
pub(crate) fn trial_flags(r: &ResultRow) -> Vec<Cow<'static, str>> {
    let mut flags: Vec<Cow<'static, str>> = Vec::new();
    if r.swap_pressure == Some(true) {
        flags.push("SWAP".into());
    }
    if r.throttled == Some(true) {
        flags.push("THROTTLED".into());
    }
    if r.power_incomplete == Some(true) {
        flags.push("POWER_GAP".into());
    }
    if let Some(n) = r.power_low_samples {
        flags.push(format!("FEW_READINGS({n})").into());
    }
    if r.metrics
        .get("stalled_steps")
        .and_then(|v| v.as_u64())
        .is_some_and(|n| n > 0)
    {
        flags.push("STALL".into());
    }
    if r.loss_anomaly {
        flags.push("LOSS_ANOMALY".into());
    }
    if r.metrics
        .get("pct_measured_peak_flops")
        .and_then(|v| v.as_f64())
        .is_some_and(|pct| pct > 100.0)
    {
        flags.push("ABOVE_PEAK".into());
    }
    if let Some(e) = &r.error {
        flags.push(e.lines().next().unwrap_or("").to_string().into());
    }
    flags
}

/// The flags' meanings, for the legend under the tables.
pub(crate) const FLAGS_LEGEND: &str = "SWAP: the trial's own memory was paged out while it \
trained; its time measures the swap device, not the board. THROTTLED: a clock changed, or \
dropped for temperature, while the trial ran (`edgebench results --json` gives the reason in \
`throttle_note`). POWER_GAP: the power sensor gave no readings for part of the measured \
window; the energy leaves that part out. FEW_READINGS(n): the energy rests on n < 10 sensor \
updates; measure longer. STALL: some steps took far longer than the trial's median \
(`stall_note`). LOSS_ANOMALY: the loss diverged or did not change. CACHE: an operator above \
100 % of the measured memory bandwidth; its working set was served from a cache, whose roof \
is higher than memory's. ABOVE_PEAK: a FLOP rate above 100 % of the measured peak (`edgebench peaks`); the peak was measured below what the board reaches (other threads or clocks: measure it again as the trial ran), or the op's FLOP count credits work its kernel does not do (exp counted as one FLOP).";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flop_rate_above_the_measured_peak_is_flagged_with_its_cause() {
        let mut r = ResultRow::default();
        r.metrics
            .insert("pct_measured_peak_flops".into(), serde_json::json!(99.5));
        assert!(!trial_flags(&r).iter().any(|f| f == "ABOVE_PEAK"));
        r.metrics
            .insert("pct_measured_peak_flops".into(), serde_json::json!(236.0));
        assert!(trial_flags(&r).iter().any(|f| f == "ABOVE_PEAK"));
        assert!(FLAGS_LEGEND.contains("ABOVE_PEAK: a FLOP rate above 100 %"));
    }
}
