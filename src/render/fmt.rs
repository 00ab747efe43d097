//! Numbers as the report's tables write them, and the GPU-over-CPU speedup they show.

use std::collections::HashMap;
use std::hash::Hash;

use super::aggregate::Repetitions;
use super::select::label;
use crate::store::ResultRow;

/// `v` times `scale` with `digits` decimals, `-` when absent.
pub(crate) fn fmt(v: Option<f64>, scale: f64, digits: usize) -> String {
    v.map(|v| format!("{:.*}", digits, v * scale))
        .unwrap_or_else(|| "-".into())
}

/// A small figure (an EDP per item) in scientific notation, `-` when absent.
pub(crate) fn sci(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.3e}")).unwrap_or_else(|| "-".into())
}

/// GPU-over-CPU speedup per `key`: the CPU key's mean time per image over the CUDA key's,
/// each over its `ok` repetitions ([`Repetitions::mean`]), where both ran the same work
/// (epochs, images, data set). Among keys of one `key` and work the last in `rows` counts.
pub(crate) fn speedups<'a, K: Eq + Hash>(
    rows: impl IntoIterator<Item = &'a ResultRow> + Clone,
    key: impl Fn(&ResultRow) -> K,
) -> HashMap<K, f64> {
    let repetitions = Repetitions::of(rows.clone());
    let time = |device: &str, r: &ResultRow| {
        (r.device == device)
            .then(|| repetitions.mean(r, |r| r.time_per_image_s))
            .flatten()
    };
    let work = |r: &ResultRow| (r.epochs, r.images, r.dataset.clone());
    let mut cpu = HashMap::new();
    for r in rows.clone() {
        if let Some(t) = time("cpu", r) {
            cpu.insert((key(r), work(r)), t);
        }
    }
    let mut out = HashMap::new();
    for r in rows {
        if let Some(t) = time("cuda", r) {
            if let Some(c) = cpu.get(&(key(r), work(r))) {
                out.insert(key(r), c / t);
            }
        }
    }
    out
}

/// [`speedups`] of the trials that train a net (edgebench's own and other frameworks'), per
/// (host, label, batch): the label is the net, or `ENGINE NET` for another framework's trials
/// (whose commands differ per device).
pub(crate) fn training_speedups(rows: &[ResultRow]) -> HashMap<(String, String, usize), f64> {
    speedups(rows.iter().filter(|r| r.engine.is_some()), |r| {
        (r.host.clone(), label(r), r.batch)
    })
}
