//! Which trials a report shows and how it names them: the trial standing for each key, the
//! engine a trial measures, a trial's short label.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde_json::Value;

use crate::store::{ResultRow, TrialStatus};

/// For each key, the trial standing for it among `rows` (oldest first), as the studies'
/// files choose: the latest `ok` one, else the latest. Rows keyed `None` are left out; keys in
/// the order they first appear.
pub(crate) fn latest_per_key<K: Ord + Clone, R: Borrow<ResultRow>>(
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
pub(crate) const OWN: &str = "edgebench";

/// The engine a trial measures, as its workload names it ([`ResultRow::engine`]):
/// `edgebench` for the CNN training, the framework of an external command's trial; None for
/// workloads that train no net.
pub(crate) fn engine_of(r: &ResultRow) -> Option<String> {
    r.engine.clone()
}

/// A short name for a trial of any workload, as its workload names it ([`ResultRow::label`]),
/// e.g. `alexnet`, `mlp tensors small`, `add f32 32MiB`.
pub(crate) fn label(r: &ResultRow) -> String {
    r.label.clone()
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
