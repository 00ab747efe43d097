//! The store's row types: what is written (runs, trials, summaries) and what is read back
//! (`results` rows), with the conversions between their fields and SQLite columns.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ValueRef};
use serde::{Deserialize, Serialize};

use super::status::TrialStatus;
use crate::record::{Metrics, WorkItem};

/// Metadata of one `edgebench run` invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub uuid: String,
    pub host: String,
    pub started_at: String,
    pub config_toml: String,
    pub edgebench_version: String,
    pub git_commit: String,
    pub candle_version: String,
    pub cpu_threads: usize,
    pub cpu_model: Option<String>,
    pub os: String,
}

/// What makes two trials "the same measurement" (used to skip completed work on resume).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TrialKey {
    /// `cnn`, `mlp`, `ops`, `exec` (schema v6).
    pub workload: crate::record::WorkloadKind,
    pub net: String,
    pub device: String,
    pub batch: usize,
    pub epochs: usize,
    pub images: usize,
    pub dataset: String,
    /// The workload's own parameters: a JSON object with sorted keys, `{}` for `cnn`.
    pub params: String,
}

/// Outcome of a trial, written once when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialSummary {
    pub status: TrialStatus,
    pub error: Option<String>,
    pub ended_at: String,
    pub time_per_image_s: Option<f64>,
    pub time_per_image_spread_s: Option<f64>,
    pub images_per_s: Option<f64>,
    pub loss_first: Option<f64>,
    pub loss_last: Option<f64>,
    pub loss_anomaly: bool,
    pub metrics: Metrics,
}

/// One trial joined with its run: exactly the object `edgebench results --json` prints.
/// `Option` fields serialise as `null`, never omitted, so consumers can rely on every key.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ResultRow {
    /// The run's UUID.
    pub run_id: String,
    /// The trial's UUID.
    pub trial_id: String,
    pub host: String,
    /// The workload's name; `cnn` for trials recorded before workloads existed.
    pub workload: crate::record::WorkloadKind,
    pub net: String,
    pub device: String,
    pub batch: usize,
    /// The key's epochs and images as stored; `results --json` gives [`ResultRow::epochs_json`]
    /// and [`ResultRow::images_json`] under these names.
    #[serde(skip)]
    pub epochs: usize,
    #[serde(skip)]
    pub images: usize,
    /// Epochs over the data set: null where the workload has none (an MLP's iterations are
    /// `iterations_planned`, its samples `n`; an operator; the board at rest; a log).
    #[serde(rename = "epochs")]
    pub epochs_json: Option<usize>,
    /// Images of the data set: null where the workload has none.
    #[serde(rename = "images")]
    pub images_json: Option<usize>,
    pub dataset: String,
    /// Which repetition of its key the trial is, from 1 (`[sweep] repeat`; schema v9).
    pub repetition: usize,
    /// Iterations recorded (`trials.iterations_done`).
    pub iterations: usize,
    pub iterations_planned: usize,
    pub warmup_iterations: usize,
    pub status: TrialStatus,
    pub error: Option<String>,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub time_per_image_s: Option<f64>,
    pub time_per_image_spread_s: Option<f64>,
    pub images_per_s: Option<f64>,
    pub loss_first: Option<f64>,
    pub loss_last: Option<f64>,
    pub loss_anomaly: bool,
    pub energy_j: Option<f64>,
    pub avg_power_w: Option<f64>,
    /// Joules per image; null for workloads whose items are not images (`item`).
    pub energy_per_image_j: Option<f64>,
    pub edp_js: Option<f64>,
    /// What one item of the trial's work is, as its workload's profile says (`image`,
    /// `sample`, `execution`, `tick`); the `*_per_item_*` figures count these. Null for a
    /// workload this build does not know.
    pub item: Option<WorkItem>,
    /// Items in one iteration: the batch of images, the MLP's N samples, 1 execution; null
    /// when an external command's batch is not known.
    pub items_per_iteration: Option<usize>,
    /// Mean time per item over the trial's measured window (`window_s` over the items in
    /// it); trials recorded without a window give the median step's.
    pub time_per_item_s: Option<f64>,
    /// Energy of the measured window per item.
    pub energy_per_item_j: Option<f64>,
    /// EDP per unit of work (`energy_per_item_j` × `time_per_item_s`): comparable across
    /// trials of different lengths, unlike the trial's `edp_js`.
    pub edp_per_item_js: Option<f64>,
    /// Median step time per item, and the steps' interquartile range per item.
    pub time_per_item_median_s: Option<f64>,
    pub time_per_item_iqr_s: Option<f64>,
    pub swap_pressure: Option<bool>,
    pub peak_rss_bytes: Option<i64>,
    /// The most GPU memory the trial's process had allocated at once (schema v8); None on
    /// the CPU or when not measured.
    pub peak_gpu_bytes: Option<i64>,
    /// The rest of the memory record (all null when unmeasured).
    #[serde(flatten)]
    pub memory: MemoryColumns,
    pub dynamic_energy_j: Option<f64>,
    /// Per-rail energies over the measured interval (JSON object rail -> J); None without power.
    pub rail_energy_j: Option<std::collections::BTreeMap<String, f64>>,
    pub power_samples: Option<i64>,
    pub power_rate_hz: Option<f64>,
    pub power_jitter_s: Option<f64>,
    pub power_incomplete: Option<bool>,
    pub power_gap_s: Option<f64>,
    /// Sensor updates inside the measured interval, set only when fewer than 10 (schema v5).
    pub power_low_samples: Option<i64>,
    /// Whether the trial's energy rests on too few sensor readings (`power_low_samples` set),
    /// whatever their count, 0 included; null without a power record, or one stored before
    /// schema v5.
    pub power_few_readings: Option<bool>,
    /// Why the power record is incomplete (the failing sensor and its error); schema v5.
    pub power_note: Option<String>,
    pub board: Option<String>,
    pub power_total: Option<String>,
    /// `module` or `board`: what the run's total covers (schema v5); None without power.
    pub power_scope: Option<String>,
    pub baseline_power_w: Option<f64>,
    pub baseline_s: Option<f64>,
    /// 1 if the trial's clocks changed or dropped for temperature (schema v4); None if the
    /// host exposed no clocks or the trial predates v4.
    pub throttled: Option<bool>,
    pub throttle_note: Option<String>,
    /// Median step time of the measured iterations (schema v6).
    pub time_per_iteration_s: Option<f64>,
    pub time_per_iteration_spread_s: Option<f64>,
    /// Sum of the measured iterations' step times (schema v6).
    pub total_time_s: Option<f64>,
    pub gflop_per_s: Option<f64>,
    /// The workload's parameters (`trials.params`), each a key of the row.
    #[serde(flatten)]
    pub params: serde_json::Map<String, serde_json::Value>,
    /// The workload's other figures (`trials.metrics`), each a key of the row.
    #[serde(flatten)]
    pub metrics: serde_json::Map<String, serde_json::Value>,
    /// A short name of the trial for tables and figures (e.g. `alexnet`, `mlp tensors
    /// small`), from its workload; empty until the workloads describe the row. Not part of
    /// the JSON.
    #[serde(skip)]
    pub label: String,
    /// The engine that trained the trial's net (`edgebench`, or another framework), from its
    /// workload; None for workloads that train no net, and until the workloads describe the
    /// row. Not part of the JSON.
    #[serde(skip)]
    pub engine: Option<String>,
    /// `trials.params` as stored, for the resume key; not part of the JSON.
    #[serde(skip)]
    pub params_text: String,
    /// Local `trials.id`, for `Store::iterations`; not part of the JSON.
    #[serde(skip)]
    pub trial_rowid: i64,
}

/// How a workload's trials count their items: what [`ResultRow::derive_per_item`] needs to
/// know of the workload, which declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowItems {
    pub item: WorkItem,
    pub per_iteration: PerIteration,
    /// Whether its trials run epochs over a data set of images, so the key's epochs and
    /// images are the trial's (unless its metrics say the command was given none).
    pub over_dataset: bool,
}

/// How many items one iteration holds, and how the runner stored time and energy for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerIteration {
    /// The batch (or the images a command's step lines give, `images_per_step`), counted in
    /// the per-image columns; unknown for a command whose batch is not known.
    Batch,
    /// The batch, with the stored time and energy per iteration.
    BatchPerIteration,
    /// One item per iteration, stored per iteration.
    One,
}

impl PerIteration {
    /// Its name where the fleet's server keeps it (`trials.per_iteration`).
    pub fn name(self) -> &'static str {
        match self {
            PerIteration::Batch => "batch",
            PerIteration::BatchPerIteration => "batch_per_iteration",
            PerIteration::One => "one",
        }
    }
}

impl ResultRow {
    /// Fills the `*_per_item_*` figures from the stored ones, as the trial's workload counts
    /// its `items`. Time and energy per item are the measured window's (`window_s`,
    /// `window_steps` of the metrics) over the items in it, so their ratio is the window's
    /// mean power; a trial stored without a window keeps the median step time and the stored
    /// energy per iteration. The `energy_per_image_j` column holds energy per iteration for
    /// workloads that do not count a batch (their power record counts iterations), so theirs
    /// is left out as "per image".
    pub(crate) fn derive_per_item(&mut self, items: RowItems) {
        // A command's step lines say their images (`images=B`), which count before its batch.
        let logged_images = self
            .metrics
            .get("images_per_step")
            .and_then(|v| v.as_u64())
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0);
        let per_iteration = match items.per_iteration {
            PerIteration::Batch => logged_images.or((self.batch > 0).then_some(self.batch)),
            PerIteration::BatchPerIteration => Some(self.batch.max(1)),
            PerIteration::One => Some(1),
        };
        let n = per_iteration.unwrap_or(1) as f64;
        let (median, iqr, stored_energy) = match items.per_iteration {
            PerIteration::Batch => (
                self.time_per_image_s,
                self.time_per_image_spread_s,
                self.energy_per_image_j,
            ),
            PerIteration::BatchPerIteration | PerIteration::One => (
                self.time_per_iteration_s.map(|t| t / n),
                self.time_per_iteration_spread_s.map(|t| t / n),
                self.energy_per_image_j.take().map(|e| e / n),
            ),
        };
        let number = |key: &str| self.metrics.get(key).and_then(|v| v.as_f64());
        let window_items = number("window_steps")
            .zip(per_iteration)
            .map(|(steps, n)| steps * n as f64)
            .filter(|&items| items > 0.0);
        let (time, energy) = match (number("window_s"), window_items) {
            (Some(window_s), Some(items)) => {
                (Some(window_s / items), self.energy_j.map(|e| e / items))
            }
            _ => (median, stored_energy),
        };
        // Only trials over a data set have epochs and images: the other workloads' keys hold
        // placeholders there. An imported log does not say them, nor does a command its
        // metrics say was given none (trials recorded before commands said so keep the
        // sweep's values).
        let imported = self
            .metrics
            .get("imported_log")
            .is_some_and(|l| !l.is_null());
        let given = |key: &str| {
            items.over_dataset && !imported && self.metrics.get(key).is_none_or(|g| g != false)
        };
        self.epochs_json = given("given_epochs").then_some(self.epochs);
        self.images_json = given("given_images").then_some(self.images);
        self.item = Some(items.item);
        self.items_per_iteration = per_iteration;
        self.time_per_item_s = time;
        self.energy_per_item_j = energy;
        self.edp_per_item_js = energy.zip(time).map(|(e, t)| e * t);
        self.time_per_item_median_s = median;
        self.time_per_item_iqr_s = iqr;
    }

    pub fn key(&self) -> TrialKey {
        TrialKey {
            workload: self.workload.clone(),
            net: self.net.clone(),
            device: self.device.clone(),
            batch: self.batch,
            epochs: self.epochs,
            images: self.images,
            dataset: self.dataset.clone(),
            params: self.params_text.clone(),
        }
    }
}

/// Memory measurements of a trial (schema v2 `trial_memory`), flattened into `results --json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MemoryColumns {
    pub mem_estimate_bytes: Option<i64>,
    pub mem_limit_bytes: Option<i64>,
    pub swap_in_pages: Option<i64>,
    pub swap_out_pages: Option<i64>,
    pub major_faults: Option<i64>,
    pub swapped_bytes_max: Option<i64>,
    pub mem_available_min_bytes: Option<i64>,
    pub psi_memory_some_us: Option<i64>,
    pub psi_memory_full_us: Option<i64>,
    pub memory_note: Option<String>,
}

/// An iteration's loss and step time as its log wrote them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LoggedText {
    pub(crate) loss: Option<String>,
    pub(crate) step_s: Option<String>,
}

/// Counts are `usize` in Rust and INTEGER (i64) in SQLite; saturating is fine for counts.
pub(crate) fn int(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// An INTEGER count column read as `usize`; a negative one is out of range.
pub(crate) struct Count(pub(crate) usize);

impl FromSql for Count {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let v = i64::column_result(value)?;
        usize::try_from(v)
            .map(Count)
            .map_err(|_| FromSqlError::OutOfRange(v))
    }
}

/// The count in the named column of `row`.
pub(crate) fn uint(row: &rusqlite::Row<'_>, column: &str) -> rusqlite::Result<usize> {
    row.get::<_, Count>(column).map(|c| c.0)
}

/// A TEXT column holding a JSON object (NULL = empty); anything else is a conversion error
/// naming the column.
pub(crate) struct JsonObject(pub(crate) serde_json::Map<String, serde_json::Value>);

impl FromSql for JsonObject {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let Some(text) = Option::<String>::column_result(value)? else {
            return Ok(JsonObject(serde_json::Map::new()));
        };
        match serde_json::from_str(&text) {
            Ok(serde_json::Value::Object(map)) => Ok(JsonObject(map)),
            Ok(_) => Err(FromSqlError::Other(
                format!("not a JSON object: {text}").into(),
            )),
            Err(e) => Err(FromSqlError::Other(Box::new(e))),
        }
    }
}

/// The JSON object in the named column of `row`.
pub(crate) fn json_object(
    row: &rusqlite::Row<'_>,
    column: &str,
) -> rusqlite::Result<serde_json::Map<String, serde_json::Value>> {
    row.get::<_, JsonObject>(column).map(|o| o.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_convert_by_name_and_errors_name_the_column() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.query_row(
            "SELECT 3 AS ok, -1 AS negative, '[1]' AS list, NULL AS none, '{\"a\": 1}' AS object",
            [],
            |r| {
                assert_eq!(uint(r, "ok")?, 3);
                assert!(matches!(
                    uint(r, "negative"),
                    Err(rusqlite::Error::IntegralValueOutOfRange(1, -1))
                ));
                assert!(matches!(
                    json_object(r, "list"),
                    Err(rusqlite::Error::FromSqlConversionFailure(
                        2,
                        rusqlite::types::Type::Text,
                        _
                    ))
                ));
                assert!(json_object(r, "none")?.is_empty());
                assert_eq!(json_object(r, "object")?["a"], 1);
                Ok(())
            },
        )
        .unwrap();
    }
}
