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

/// The name, where text is wanted (file names, labels, SQL).
impl std::ops::Deref for WorkloadKind {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
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
pub fn steps_covered(records: &[IterationRecord]) -> Vec<usize> {
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

/// What one item of a workload's work is, so every figure "per item" says per what: an image
/// of a CNN (edgebench's or an external engine's), a sample of the MLP, an execution of an
/// operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkItem {
    Image,
    Sample,
    Execution,
}

impl WorkItem {
    /// The item of a trial of `workload` (`results --json`'s `workload`).
    pub fn of_workload(workload: &str) -> WorkItem {
        match workload {
            "mlp" => WorkItem::Sample,
            "ops" => WorkItem::Execution,
            _ => WorkItem::Image,
        }
    }

    /// The name as a unit, as in "ms/img".
    pub fn unit(self) -> &'static str {
        match self {
            WorkItem::Image => "img",
            WorkItem::Sample => "sample",
            WorkItem::Execution => "exec",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            WorkItem::Image => "image",
            WorkItem::Sample => "sample",
            WorkItem::Execution => "execution",
        }
    }
}
