//! What a running trial reports: one record per iteration, and the loop's control words. Every
//! workload emits these; the runner, the power accounting and the store read them.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// Which workload a trial ran, by the name the database and JSON store ("cnn", "mlp", ...).
/// Each workload names itself with a constant and the registry in `workloads` knows them all,
/// so a new workload needs no edit here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkloadKind(Cow<'static, str>);

impl WorkloadKind {
    pub const fn named(name: &'static str) -> WorkloadKind {
        WorkloadKind(Cow::Borrowed(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for WorkloadKind {
    fn from(name: String) -> WorkloadKind {
        WorkloadKind(Cow::Owned(name))
    }
}

impl From<&str> for WorkloadKind {
    fn from(name: &str) -> WorkloadKind {
        WorkloadKind(Cow::Owned(name.to_string()))
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for WorkloadKind {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for WorkloadKind {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl rusqlite::types::ToSql for WorkloadKind {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        self.as_str().to_sql()
    }
}

impl rusqlite::types::FromSql for WorkloadKind {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        String::column_result(value).map(WorkloadKind::from)
    }
}

/// One training step. A NaN `loss` or `lr` (a log that gives none) is stored as NULL (SQLite has
/// no NaN) and reads back as NaN.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IterationRecord {
    pub step: usize,
    pub epoch: usize,
    #[serde(deserialize_with = "null_as_nan")]
    pub loss: f64,
    #[serde(deserialize_with = "null_as_nan")]
    pub lr: f64,
    pub data_s: f64,
    pub step_s: f64,
    pub t_start_ns: i64,
    pub t_end_ns: i64,
}

/// Iterations each record stands for: the step numbers' differences (a log may show only every
/// K-th step, e.g. Caffe's `display`), 1 for the first. Consecutive steps give 1 each.
pub(crate) fn steps_covered(records: &[IterationRecord]) -> Vec<usize> {
    let mut previous = None;
    records
        .iter()
        .map(|r| {
            let n = previous.map_or(1, |p: usize| r.step.saturating_sub(p).max(1));
            previous = Some(r.step);
            n
        })
        .collect()
}

/// The measured window of a trial: from the first measured (post-warm-up) record's start to
/// the last one's end, gaps between steps included (a board spends that time on the work
/// too). Energy is integrated over exactly this window, and time per item and EDP are its
/// length over the items it holds, so energy per item / time per item is the window's mean
/// power. The median step time stays a figure of its own (`time_per_item_median_s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MeasuredWindow {
    pub from_ns: i64,
    pub to_ns: i64,
    /// Iterations inside it, counting the steps a record stands for ([`steps_covered`]).
    pub steps: usize,
}

impl MeasuredWindow {
    /// The window of `records` after `warmup` leading ones; None without a measured record.
    pub(crate) fn of(records: &[IterationRecord], warmup: usize) -> Option<MeasuredWindow> {
        let measured = records.get(warmup..).filter(|m| !m.is_empty())?;
        let steps = steps_covered(records)[warmup..].iter().sum();
        Some(MeasuredWindow {
            from_ns: measured.first()?.t_start_ns,
            to_ns: measured.last()?.t_end_ns,
            steps,
        })
    }

    /// Its length in seconds (0 for a window whose clock went backwards).
    pub(crate) fn duration_s(&self) -> f64 {
        (self.to_ns - self.from_ns).max(0) as f64 * 1e-9
    }

    #[cfg(test)]
    /// Mean seconds per item: the window over `items_per_step` x its steps; None without items.
    pub(crate) fn time_per_item_s(&self, items_per_step: usize) -> Option<f64> {
        let items = items_per_step.checked_mul(self.steps).filter(|&n| n > 0)?;
        Some(self.duration_s() / items as f64)
    }
}

/// JSON has no NaN: serde_json writes it as `null`, which reads back as NaN here.
fn null_as_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// What the callback tells the loop after each iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Continue,
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialEnd {
    Completed,
    /// The callback asked to stop (an interrupt) at an iteration boundary.
    Stopped,
}

/// What a workload makes of its measured iterations (warm-up excluded), beside the time per
/// image and losses every trial gets. Stored in typed columns of `trials`, `extra` as JSON.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Metrics {
    /// Median step time.
    pub time_per_iteration_s: Option<f64>,
    /// Interquartile range of the step times.
    pub time_per_iteration_spread_s: Option<f64>,
    /// Sum of the measured step times.
    pub total_time_s: Option<f64>,
    /// Floating-point operations per second, where the workload counts them.
    pub gflop_per_s: Option<f64>,
    /// The workload's own figures (e.g. `gbyte_per_s`), each a key of its own in `results
    /// --json`; a null value keeps its key.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Metrics {
    /// Records the trial's [`MeasuredWindow`] as `window_s` (its length) and `window_steps`
    /// (the iterations in it), null without one: what time per item and EDP rest on.
    pub(crate) fn set_window(&mut self, window: Option<MeasuredWindow>) {
        self.extra
            .insert("window_s".into(), window.map(|w| w.duration_s()).into());
        self.extra
            .insert("window_steps".into(), window.map(|w| w.steps).into());
    }
}

/// What one item of a workload's work is, so every figure "per item" says per what: an image
/// of a CNN (edgebench's or an external engine's), a sample of the MLP or of an inference
/// query, an execution of an operator, a one-second tick of the board at rest. Each workload
/// names its own (`WorkloadProfile::items` in `workloads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkItem {
    Image,
    Sample,
    Execution,
    Tick,
}

impl WorkItem {
    /// The name as a unit, as in "ms/img".
    pub fn unit(self) -> &'static str {
        match self {
            WorkItem::Image => "img",
            WorkItem::Sample => "sample",
            WorkItem::Execution => "exec",
            WorkItem::Tick => "tick",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            WorkItem::Image => "image",
            WorkItem::Sample => "sample",
            WorkItem::Execution => "execution",
            WorkItem::Tick => "tick",
        }
    }
}

/// Iteration records for the unit tests (re-exported by `testkit::rows`); here, beside their
/// type, so that this module's own tests need nothing from the test kit.
#[cfg(test)]
pub(crate) mod test_records {
    use super::IterationRecord;

    /// Step `step` taking `step_s`, starting at 0 on the clock; loss 1.0, learning rate 0.01.
    pub(crate) fn iteration(step: usize, step_s: f64) -> IterationRecord {
        IterationRecord {
            step,
            epoch: 0,
            loss: 1.0,
            lr: 0.01,
            data_s: 0.0,
            step_s,
            t_start_ns: 0,
            t_end_ns: (step_s * 1e9) as i64,
        }
    }

    /// Step `step` from `from_ns` to `to_ns` on the monotonic clock; loss 1.0, learning rate 0.01.
    pub(crate) fn iteration_ns(step: usize, from_ns: i64, to_ns: i64) -> IterationRecord {
        IterationRecord {
            step_s: (to_ns - from_ns) as f64 * 1e-9,
            t_start_ns: from_ns,
            t_end_ns: to_ns,
            ..iteration(step, 0.0)
        }
    }

    /// Step `step` from `from_ms` to `to_ms` (milliseconds on the monotonic clock), with neither
    /// loss nor learning rate, as a workload that trains nothing records it.
    pub(crate) fn iteration_ms(step: usize, from_ms: i64, to_ms: i64) -> IterationRecord {
        IterationRecord {
            loss: f64::NAN,
            lr: f64::NAN,
            step_s: (to_ms - from_ms) as f64 * 1e-3,
            ..iteration_ns(step, from_ms * 1_000_000, to_ms * 1_000_000)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_records::iteration_ms as rec;
    use super::*;

    #[test]
    fn the_window_spans_the_measured_records_gaps_included() {
        // Warm-up 0..100 ms; measured steps 200..300 and 500..600 with a 200 ms gap between.
        let records = [rec(0, 0, 100), rec(1, 200, 300), rec(2, 500, 600)];
        let w = MeasuredWindow::of(&records, 1).unwrap();
        assert_eq!((w.from_ns, w.to_ns, w.steps), (200_000_000, 600_000_000, 2));
        assert!((w.duration_s() - 0.4).abs() < 1e-12);
        // Two steps of 4 items: 0.4 s over 8 items, not the 0.1 s median step over 4.
        assert!((w.time_per_item_s(4).unwrap() - 0.05).abs() < 1e-12);
        assert_eq!(w.time_per_item_s(0), None);
        assert_eq!(MeasuredWindow::of(&records, 3), None);
        // A record standing for several logged steps counts them.
        let logged = [rec(0, 0, 100), rec(20, 100, 200), rec(40, 200, 300)];
        assert_eq!(MeasuredWindow::of(&logged, 1).unwrap().steps, 40);
    }
}
