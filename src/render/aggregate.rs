//! Repetitions of a trial key summarised: mean, median, standard deviation, 95 % confidence
//! interval of the mean and coefficient of variation of each measured figure, over the key's
//! `ok` repetitions (`[sweep] repeat`). The summary table, `results --json` and the figures
//! read them from here.

use crate::stats::{self, Spread};
use crate::store::{ResultRow, TrialKey, TrialStatus};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// A key whose time or energy varies more than this between repetitions (coefficient of
/// variation) is flagged `SPREAD`: on a quiet board repeated trials agree within a few per
/// cent, so more points at heat, a neighbour's load or a clock change.
pub(crate) const SPREAD_CV: f64 = 0.05;

/// Where a trial's repetitions are grouped: its host and key (a key measured on two boards is
/// two measurements).
pub(crate) type Group = (String, TrialKey);

pub(crate) fn group_of(row: &ResultRow) -> Group {
    (row.host.clone(), row.key())
}

/// One key's repetitions. Every figure is None where no `ok` repetition measured it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct KeyAggregate {
    #[serde(skip)]
    pub(crate) group: Group,
    /// `ok` repetitions counted (the newest trial of each repetition index).
    pub(crate) n: usize,
    /// Time per item of work (`ResultRow::item`: image, MLP sample, operator execution).
    pub(crate) time_per_item_s: Option<Spread>,
    /// Time per step: also where an item is not known (a command without a batch).
    pub(crate) time_per_iteration_s: Option<Spread>,
    pub(crate) energy_per_item_j: Option<Spread>,
    pub(crate) energy_j: Option<Spread>,
    pub(crate) edp_js: Option<Spread>,
    pub(crate) edp_per_item_js: Option<Spread>,
    /// A time or energy figure's coefficient of variation is above [`SPREAD_CV`]. EDP is left
    /// out: it multiplies the two, so its spread only repeats theirs.
    pub(crate) spread_flag: bool,
}

impl KeyAggregate {
    /// The per-item time, else per step.
    pub(crate) fn time(&self) -> Option<&Spread> {
        self.time_per_item_s
            .as_ref()
            .or(self.time_per_iteration_s.as_ref())
    }

    /// The energy per item where there is one, else the whole trial's.
    pub(crate) fn energy(&self) -> Option<&Spread> {
        self.energy_per_item_j.as_ref().or(self.energy_j.as_ref())
    }
}

/// The newest `ok` trial of each repetition of each (host, key) among `rows` (oldest first),
/// and the groups in the order they first appear.
fn ok_repetitions(rows: &[ResultRow]) -> (Vec<Group>, HashMap<Group, BTreeMap<usize, &ResultRow>>) {
    let mut order: Vec<Group> = Vec::new();
    let mut repetitions: HashMap<Group, BTreeMap<usize, &ResultRow>> = HashMap::new();
    for row in rows {
        let group = group_of(row);
        let slot = repetitions.entry(group.clone()).or_insert_with(|| {
            order.push(group);
            BTreeMap::new()
        });
        if row.status == TrialStatus::Ok {
            slot.insert(row.repetition, row);
        }
    }
    (order, repetitions)
}

/// The repetitions of every key, for figures: a point stands for its key's mean with the 95 %
/// confidence interval as its error bar.
pub struct Repetitions<'a> {
    by_group: HashMap<Group, BTreeMap<usize, &'a ResultRow>>,
}

impl<'a> Repetitions<'a> {
    pub fn of(rows: &'a [ResultRow]) -> Repetitions<'a> {
        Repetitions {
            by_group: ok_repetitions(rows).1,
        }
    }

    /// `value` of `row` as a figure draws it: with two or more `ok` repetitions of its key
    /// measuring it, their mean and its 95 % confidence interval; else the row's own value.
    pub fn point(
        &self,
        row: &ResultRow,
        value: impl Fn(&ResultRow) -> Option<f64>,
    ) -> (Option<f64>, Option<(f64, f64)>) {
        match self.spread(row, &value) {
            Some(s) if s.n >= 2 && row.status == TrialStatus::Ok => {
                (Some(s.mean), s.ci95_low.zip(s.ci95_high))
            }
            _ => (value(row), None),
        }
    }
}

impl Repetitions<'_> {
    /// `value` over the `ok` repetitions of `row`'s key that measured it.
    fn spread(&self, row: &ResultRow, value: impl Fn(&ResultRow) -> Option<f64>) -> Option<Spread> {
        let values: Vec<f64> = self
            .by_group
            .get(&group_of(row))
            .map(|reps| reps.values().filter_map(|r| value(r)).collect())
            .unwrap_or_default();
        stats::spread(&values)
    }

    /// Whether some key has two or more `ok` repetitions: tables add a mean ± CI column then.
    pub(crate) fn any_repeated(&self) -> bool {
        self.by_group.values().any(|reps| reps.len() >= 2)
    }

    /// "mean ± CI half-width (n)" of `value` over `row`'s key's `ok` repetitions, scaled, or
    /// `-` with fewer than two.
    pub(crate) fn mean_ci_cell(
        &self,
        row: &ResultRow,
        value: impl Fn(&ResultRow) -> Option<f64>,
        scale: f64,
        digits: usize,
    ) -> String {
        match self
            .spread(row, value)
            .and_then(|s| Some((s.mean, s.ci95_half()?, s.n)))
        {
            Some((mean, half, n)) => format!(
                "{:.digits$} ± {:.digits$} ({n})",
                mean * scale,
                half * scale
            ),
            None => "-".into(),
        }
    }
}

/// One aggregate per (host, key) of `rows` (oldest first), in the order the keys first appear.
/// A repetition run more than once (`--force`) counts with its newest `ok` trial.
pub(crate) fn aggregate(rows: &[ResultRow]) -> Vec<KeyAggregate> {
    let (order, repetitions) = ok_repetitions(rows);
    order
        .into_iter()
        .map(|group| {
            let ok: Vec<&ResultRow> = repetitions[&group].values().copied().collect();
            let figure = |f: fn(&ResultRow) -> Option<f64>| {
                stats::spread(&ok.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            let time_per_item_s = figure(|r| r.time_per_item_s);
            let time_per_iteration_s = figure(|r| r.time_per_iteration_s);
            let energy_per_item_j = figure(|r| r.energy_per_item_j);
            let energy_j = figure(|r| r.energy_j);
            let spread_flag = [
                &time_per_item_s,
                &time_per_iteration_s,
                &energy_per_item_j,
                &energy_j,
            ]
            .into_iter()
            .flatten()
            .filter_map(|s| s.cv)
            .any(|cv| cv > SPREAD_CV);
            KeyAggregate {
                group,
                n: ok.len(),
                time_per_item_s,
                time_per_iteration_s,
                energy_per_item_j,
                energy_j,
                edp_js: figure(|r| r.edp_js),
                edp_per_item_js: figure(|r| r.edp_per_item_js),
                spread_flag,
            }
        })
        .collect()
}

/// [`aggregate`] indexed by group.
pub(crate) fn by_group(rows: &[ResultRow]) -> HashMap<Group, KeyAggregate> {
    aggregate(rows)
        .into_iter()
        .map(|a| (a.group.clone(), a))
        .collect()
}

/// What `edgebench results --json` prints: every trial as [`ResultRow`] serialises it, plus
/// `repeat`, the aggregate of its key's repetitions.
pub fn results_json(rows: &[ResultRow]) -> serde_json::Result<serde_json::Value> {
    let aggregates = by_group(rows);
    rows.iter()
        .map(|row| {
            let mut value = serde_json::to_value(row)?;
            if let serde_json::Value::Object(map) = &mut value {
                map.insert(
                    "repeat".into(),
                    serde_json::to_value(&aggregates[&group_of(row)])?,
                );
            }
            Ok(value)
        })
        .collect::<serde_json::Result<Vec<_>>>()
        .map(serde_json::Value::Array)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(batch: usize, repetition: usize, status: TrialStatus, tpi: f64) -> ResultRow {
        let mut r = ResultRow {
            host: "tx2".into(),
            workload: "cnn".into(),
            net: "alexnet".into(),
            device: "cpu".into(),
            batch,
            repetition,
            status,
            time_per_image_s: Some(tpi),
            energy_j: Some(tpi * 100.0),
            params_text: "{}".into(),
            ..Default::default()
        };
        r.derive_per_item();
        r
    }

    #[test]
    fn a_key_aggregates_its_ok_repetitions_newest_first() {
        let rows = [
            row(8, 1, TrialStatus::Ok, 1.0),
            row(16, 1, TrialStatus::Ok, 5.0),
            row(8, 2, TrialStatus::Ok, 9.0),
            // Forced again: repetition 2's newest ok trial replaces it.
            row(8, 2, TrialStatus::Ok, 2.0),
            // Failed: not a measurement.
            row(8, 3, TrialStatus::Failed, 100.0),
            row(8, 3, TrialStatus::Ok, 4.0),
        ];
        let all = aggregate(&rows);
        assert_eq!(all.len(), 2);
        let a = &all[0];
        assert_eq!((a.group.1.batch, a.n), (8, 3));
        let t = a.time_per_item_s.unwrap();
        assert_eq!(t, stats::spread(&[1.0, 2.0, 4.0]).unwrap());
        assert!(t.ci95_low.unwrap() <= t.mean && t.mean <= t.ci95_high.unwrap());
        assert_eq!(a.time().unwrap(), &t);
        // No energy per image was measured: the whole trial's energy stands for it.
        assert_eq!(a.energy_per_item_j, None);
        assert_eq!(a.energy().unwrap().n, 3);
        assert_eq!(a.edp_js, None);
        // 1, 2, 4 vary by far more than 5 %.
        assert!(a.spread_flag);
        let single = &all[1];
        assert_eq!((single.n, single.spread_flag), (1, false));
        assert_eq!(single.time_per_item_s.unwrap().sd, None);
        // The same key on another board is another group.
        let mut other = row(8, 1, TrialStatus::Ok, 1.0);
        other.host = "nano".into();
        assert_eq!(aggregate(&[rows[0].clone(), other]).len(), 2);
    }

    #[test]
    fn close_repetitions_are_not_flagged_and_a_key_without_ok_ones_has_no_figures() {
        let calm = [
            row(8, 1, TrialStatus::Ok, 1.00),
            row(8, 2, TrialStatus::Ok, 1.01),
            row(8, 3, TrialStatus::Ok, 0.99),
        ];
        assert!(!aggregate(&calm)[0].spread_flag);
        let none = aggregate(&[row(8, 1, TrialStatus::Oom, 1.0)]);
        assert_eq!(none[0].n, 0);
        assert_eq!((none[0].time(), none[0].energy()), (None, None));
    }

    #[test]
    fn results_json_adds_the_keys_aggregate_to_every_trial() {
        let rows = [
            row(8, 1, TrialStatus::Ok, 1.0),
            row(8, 2, TrialStatus::Ok, 3.0),
            row(16, 1, TrialStatus::Failed, 1.0),
        ];
        let json = results_json(&rows).unwrap();
        let list = json.as_array().unwrap();
        assert_eq!(list.len(), 3);
        let first = &list[0];
        assert_eq!(first["repetition"], 1);
        assert_eq!(first["time_per_image_s"], 1.0);
        let repeat = &first["repeat"];
        assert_eq!(repeat["n"], 2);
        assert_eq!(repeat, &list[1]["repeat"]);
        let t = &repeat["time_per_item_s"];
        for k in ["n", "mean", "median", "sd", "ci95_low", "ci95_high", "cv"] {
            assert!(t[k].is_number(), "{k}: {t}");
        }
        assert_eq!(t["mean"], 2.0);
        assert!(repeat["energy_per_item_j"].is_null());
        assert_eq!(repeat["spread_flag"], true);
        assert_eq!(list[2]["repeat"]["n"], 0);
        assert!(list[2]["repeat"]["time_per_item_s"].is_null());
    }
}
