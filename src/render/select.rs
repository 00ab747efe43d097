//! Which trials a report shows and how it names them: the trial standing for each key, the
//! engine a trial measures, a trial's short label.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde_json::Value;

use crate::store::{ResultRow, TrialStatus};

/// For each key, the trial standing for it among `rows` (oldest first), as the studies'
/// files choose: the latest `ok` one, else the latest. Rows keyed `None` are left out; keys in
/// the order they first appear.
pub fn latest_per_key<K: Ord + Clone, R: Borrow<ResultRow>>(
    rows: impl IntoIterator<Item = R>,
    key: impl Fn(&ResultRow) -> Option<K>,
) -> Vec<(K, R)> {
    let mut index: BTreeMap<K, usize> = BTreeMap::new();
    let mut chosen: Vec<(K, R)> = Vec::new();
    for r in rows {
        let Some(k) = key(r.borrow()) else { continue };
        match index.get(&k) {
            // A later trial wins unless it would replace an ok one with one that is not.
            Some(&i) => {
                let prev = chosen[i].1.borrow();
                if r.borrow().status == TrialStatus::Ok || prev.status != TrialStatus::Ok {
                    chosen[i].1 = r;
                }
            }
            None => {
                index.insert(k.clone(), chosen.len());
                chosen.push((k, r));
            }
        }
    }
    chosen
}

/// The trial standing for each trial key among `rows` (oldest first): the latest `ok` one,
/// else the latest; in the order the keys first appear.
pub(crate) fn latest<'a>(rows: &[&'a ResultRow]) -> Vec<&'a ResultRow> {
    latest_per_key(rows.iter().copied(), |r| Some(r.key()))
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}

/// The engine of edgebench's own trainer.
pub const OWN: &str = "edgebench";

/// The engine a trial measures: `edgebench` for the CNN training, the `engine` parameter of
/// an external command's trial; None for the other workloads (MLP study, operators).
pub fn engine_of(r: &ResultRow) -> Option<String> {
    match r.workload.as_str() {
        "cnn" => Some(OWN.to_string()),
        "exec" => Some(match r.params.get("engine") {
            Some(Value::String(e)) if !e.is_empty() => e.clone(),
            _ => "exec".to_string(),
        }),
        _ => None,
    }
}

/// A short name for a trial of any workload, e.g. `alexnet`, `mlp tensors small`,
/// `add f32 32MiB`.
pub fn label(r: &ResultRow) -> String {
    let param = |k: &str| match r.params.get(k) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    match r.workload.as_str() {
        "mlp" => format!(
            "mlp {} {}",
            param("style").unwrap_or_default(),
            param("size").unwrap_or_default()
        ),
        "ops" => {
            let size = match param("mb") {
                Some(mb) => format!("{mb}MiB"),
                None => format!(
                    "{}x{}x{}",
                    param("m").unwrap_or_default(),
                    param("n").unwrap_or_default(),
                    param("k").unwrap_or_default()
                ),
            };
            format!(
                "{} {} {size}",
                param("op").unwrap_or_default(),
                param("dtype").unwrap_or_default()
            )
        }
        "exec" => format!("{} {}", param("engine").unwrap_or_default(), r.net)
            .trim_end()
            .to_string(),
        _ => r.net.clone(),
    }
}

/// A parameter or metric of a trial as a number.
pub(crate) fn num(r: &ResultRow, key: &str) -> Option<f64> {
    r.params
        .get(key)
        .or_else(|| r.metrics.get(key))
        .and_then(Value::as_f64)
}

/// A parameter of a trial as text, `-` when absent.
pub(crate) fn text(r: &ResultRow, key: &str) -> String {
    match r.params.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "-".into(),
    }
}
