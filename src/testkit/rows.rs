//! Result rows and iteration records for the unit tests of the tables, figures and metrics.

use crate::record::IterationRecord;
use crate::store::{ResultRow, TrialStatus};
use serde_json::Value;

/// `row` with `params` (a JSON object) as its parameters, and their text as stored.
pub(crate) fn with_params(row: ResultRow, params: Value) -> ResultRow {
    let params: serde_json::Map<String, Value> = serde_json::from_value(params).unwrap();
    ResultRow {
        params_text: serde_json::to_string(&params).unwrap(),
        params,
        ..row
    }
}

/// `row` with its workload's names and units filled in, as the store's reader leaves it.
pub(crate) fn described(mut row: ResultRow) -> ResultRow {
    crate::workloads::describe(std::slice::from_mut(&mut row));
    row
}

/// An MLP trial on a TX2's CPU: `style`, the small network over 64 samples, `secs` per
/// iteration.
pub(crate) fn mlp_row(style: &str, status: TrialStatus, secs: f64) -> ResultRow {
    with_params(
        ResultRow {
            workload: "mlp".into(),
            net: "mlp".into(),
            device: "cpu".into(),
            batch: 64,
            status,
            host: "tx2".into(),
            time_per_iteration_s: Some(secs),
            ..Default::default()
        },
        serde_json::json!({"style": style, "size": "small", "n": 64}),
    )
}

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
