//! Result rows and iteration records for the unit tests of the tables, figures and metrics.

pub(crate) use crate::record::test_records::{iteration, iteration_ms, iteration_ns};
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
