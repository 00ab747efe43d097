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
    pub(crate) avg_power_w: Option<Spread>,
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

/// The repetitions of every key, for tables and figures: a table's cell stands for its key's
/// mean over the `ok` repetitions (± the 95 % confidence interval where the table shows one),
/// a figure's point for the mean with the interval as its error bar.
pub struct Repetitions<'a> {
    /// The groups in the order they first appear.
    order: Vec<Group>,
    /// The `ok` repetitions of each key, by index: each one's newest `ok` trial.
    by_group: HashMap<Group, BTreeMap<usize, &'a ResultRow>>,
    /// Every repetition run of each key, by index: its newest `ok` trial, else its newest.
    run_by_group: HashMap<Group, BTreeMap<usize, &'a ResultRow>>,
}

/// Whether a time or energy figure of `ok` repetitions varies more than [`SPREAD_CV`]
/// between them. EDP is left out: it multiplies the two, so its spread only repeats theirs.
fn spread_flag(ok: &[&ResultRow]) -> bool {
    let figure = |f: fn(&ResultRow) -> Option<f64>| {
        stats::spread(&ok.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
    };
    [
        figure(|r| r.time_per_item_s),
        figure(|r| r.time_per_iteration_s),
        figure(|r| r.energy_per_item_j),
        figure(|r| r.energy_j),
    ]
    .into_iter()
    .flatten()
    .filter_map(|s| s.cv)
    .any(|cv| cv > SPREAD_CV)
}

/// The longest error text a runs cell quotes of a failed repetition.
const RUN_ERROR_CHARS: usize = 80;

impl<'a> Repetitions<'a> {
    /// The repetitions of `rows` (oldest first). A repetition run more than once (`--force`)
    /// counts with its newest `ok` trial.
    pub fn of(rows: impl IntoIterator<Item = &'a ResultRow>) -> Repetitions<'a> {
        let mut order: Vec<Group> = Vec::new();
        let mut by_group: HashMap<Group, BTreeMap<usize, &'a ResultRow>> = HashMap::new();
        let mut run_by_group: HashMap<Group, BTreeMap<usize, &'a ResultRow>> = HashMap::new();
        for row in rows {
            let group = group_of(row);
            let runs = run_by_group.entry(group.clone()).or_insert_with(|| {
                order.push(group.clone());
                BTreeMap::new()
            });
            match runs.get(&row.repetition) {
                Some(kept) if kept.status == TrialStatus::Ok && row.status != TrialStatus::Ok => {}
                _ => {
                    runs.insert(row.repetition, row);
                }
            }
            let ok = by_group.entry(group).or_default();
            if row.status == TrialStatus::Ok {
                ok.insert(row.repetition, row);
            }
        }
        Repetitions {
            order,
            by_group,
            run_by_group,
        }
    }

    /// The `ok` repetitions of `row`'s key, in repetition order.
    fn ok(&self, row: &ResultRow) -> Vec<&'a ResultRow> {
        self.by_group
            .get(&group_of(row))
            .map(|reps| reps.values().copied().collect())
            .unwrap_or_default()
    }

    /// `value` over the `ok` repetitions of `row`'s key that measured it: the one definition
    /// of a key's figure every table, CSV file and figure reads.
    pub(crate) fn spread(
        &self,
        row: &ResultRow,
        value: impl Fn(&ResultRow) -> Option<f64>,
    ) -> Option<Spread> {
        let values: Vec<f64> = self.ok(row).into_iter().filter_map(value).collect();
        stats::spread(&values)
    }

    /// The mean of `value` over the `ok` repetitions of `row`'s key; None where none of them
    /// measured it (or none ended `ok`).
    pub(crate) fn mean(
        &self,
        row: &ResultRow,
        value: impl Fn(&ResultRow) -> Option<f64>,
    ) -> Option<f64> {
        self.spread(row, value).map(|s| s.mean)
    }

    /// A table's cell of `value` for `row`'s key with its interval: with two or more `ok`
    /// repetitions measuring it "mean ± CI half-width" (scaled), with one its value, else `-`.
    pub(crate) fn cell(
        &self,
        row: &ResultRow,
        value: impl Fn(&ResultRow) -> Option<f64>,
        scale: f64,
        digits: usize,
    ) -> String {
        self.cell_shown(row, value, |v| format!("{:.digits$}", v * scale))
    }

    /// [`Repetitions::cell`] with each number shown by `show` (scientific notation, say).
    pub(crate) fn cell_shown(
        &self,
        row: &ResultRow,
        value: impl Fn(&ResultRow) -> Option<f64>,
        show: impl Fn(f64) -> String,
    ) -> String {
        match self.spread(row, value) {
            None => "-".into(),
            Some(s) => match s.ci95_half().filter(|_| s.n >= 2) {
                Some(half) => format!("{} ± {}", show(s.mean), show(half)),
                None => show(s.mean),
            },
        }
    }

    /// A table's cell of the mean of `value` over `row`'s key's `ok` repetitions, scaled,
    /// without its interval; `-` where none measured it.
    pub(crate) fn mean_cell(
        &self,
        row: &ResultRow,
        value: impl Fn(&ResultRow) -> Option<f64>,
        scale: f64,
        digits: usize,
    ) -> String {
        self.mean(row, value)
            .map_or_else(|| "-".into(), |v| format!("{:.digits$}", v * scale))
    }

    /// The ratio of two keys' means of `value` (`numerator`'s over `denominator`'s), each
    /// over its own `ok` repetitions; None where either has none or the ratio is not finite.
    pub(crate) fn ratio(
        &self,
        numerator: &ResultRow,
        denominator: &ResultRow,
        value: impl Fn(&ResultRow) -> Option<f64>,
    ) -> Option<f64> {
        let ratio = self.mean(numerator, &value)? / self.mean(denominator, &value)?;
        ratio.is_finite().then_some(ratio)
    }

    /// "n ok / N run" of `row`'s key, naming each repetition that did not end `ok` and how it
    /// ended, e.g. `2 ok / 3 run; repetition 3 failed: oom`.
    pub(crate) fn runs_cell(&self, row: &ResultRow) -> String {
        let Some(runs) = self.run_by_group.get(&group_of(row)) else {
            return "-".into();
        };
        let ok = runs
            .values()
            .filter(|r| r.status == TrialStatus::Ok)
            .count();
        let mut cell = format!("{ok} ok / {} run", runs.len());
        for (rep, r) in runs.iter().filter(|(_, r)| r.status != TrialStatus::Ok) {
            // A failure names its error (its first line); any other end is its status.
            let error = r.error.as_deref().and_then(|e| e.lines().next());
            let why = match (&r.status, error.map(str::trim)) {
                (TrialStatus::Failed, Some(e)) if !e.is_empty() => {
                    format!(": {}", crate::text::ellipsis(e, RUN_ERROR_CHARS))
                }
                (TrialStatus::Failed, _) => String::new(),
                (status, _) => format!(": {status}"),
            };
            cell.push_str(&format!("; repetition {rep} failed{why}"));
        }
        cell
    }

    /// The flags of `row`'s key: every flag of its `ok` repetitions (of the row itself when
    /// none is `ok`), each once, then `SPREAD` when its time or energy varies more than
    /// [`SPREAD_CV`] between them.
    pub(crate) fn flags(&self, row: &ResultRow) -> Vec<String> {
        self.flags_with(row, |_| Vec::new())
    }

    /// [`Repetitions::flags`] with a workload's own flags of each trial (`own`) first.
    pub(crate) fn flags_with(
        &self,
        row: &ResultRow,
        own: impl Fn(&ResultRow) -> Vec<String>,
    ) -> Vec<String> {
        let ok = self.ok(row);
        let of: Vec<&ResultRow> = match ok.is_empty() {
            true => vec![row],
            false => ok.clone(),
        };
        let mut flags: Vec<String> = Vec::new();
        for r in of {
            let trial = crate::render::flags::trial_flags(r)
                .into_iter()
                .map(|f| f.into_owned());
            for f in own(r).into_iter().chain(trial) {
                if !flags.contains(&f) {
                    flags.push(f);
                }
            }
        }
        if spread_flag(&ok) {
            flags.push("SPREAD".into());
        }
        flags
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

    /// Whether some key was run more than once: tables add the runs column then.
    pub(crate) fn any_repeated(&self) -> bool {
        self.run_by_group.values().any(|reps| reps.len() >= 2)
    }

    /// One aggregate per (host, key), in the order the keys first appear.
    fn aggregates(&self) -> Vec<KeyAggregate> {
        self.order
            .iter()
            .map(|group| {
                let ok: Vec<&ResultRow> = self.by_group[group].values().copied().collect();
                let figure = |f: fn(&ResultRow) -> Option<f64>| {
                    stats::spread(&ok.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
                };
                KeyAggregate {
                    group: group.clone(),
                    n: ok.len(),
                    time_per_item_s: figure(|r| r.time_per_item_s),
                    time_per_iteration_s: figure(|r| r.time_per_iteration_s),
                    energy_per_item_j: figure(|r| r.energy_per_item_j),
                    energy_j: figure(|r| r.energy_j),
                    avg_power_w: figure(|r| r.avg_power_w),
                    edp_js: figure(|r| r.edp_js),
                    edp_per_item_js: figure(|r| r.edp_per_item_js),
                    spread_flag: spread_flag(&ok),
                }
            })
            .collect()
    }
}

/// One aggregate per (host, key) of `rows` (oldest first), in the order the keys first appear.
/// A repetition run more than once (`--force`) counts with its newest `ok` trial.
pub(crate) fn aggregate(rows: &[ResultRow]) -> Vec<KeyAggregate> {
    Repetitions::of(rows).aggregates()
}

/// A figure of a trial, for the means file.
type Figure = fn(&ResultRow) -> Option<f64>;

/// The figures the means file gives per key, by their `results --json` names.
const MEAN_FIGURES: [(&str, Figure); 8] = [
    ("time_per_item_s", |r| r.time_per_item_s),
    ("time_per_iteration_s", |r| r.time_per_iteration_s),
    ("energy_j", |r| r.energy_j),
    ("avg_power_w", |r| r.avg_power_w),
    ("energy_per_item_j", |r| r.energy_per_item_j),
    ("edp_js", |r| r.edp_js),
    ("edp_per_item_js", |r| r.edp_per_item_js),
    ("window_s", |r| {
        r.metrics.get("window_s").and_then(|v| v.as_f64())
    }),
];

/// The means file of `rows` (`means_<machine>.csv`): one line per (host, key, figure) with
/// the key's runs and the figure's n, mean, median, sd, 95 % CI and CV over its `ok`
/// repetitions (empty cells where fewer than two measured it).
pub(crate) fn means_csv(rows: &[ResultRow]) -> anyhow::Result<Vec<u8>> {
    let repetitions = Repetitions::of(rows);
    let mut records: Vec<Vec<String>> = vec![[
        "#host",
        "workload",
        "label",
        "device",
        "batch",
        "params",
        "runs",
        "figure",
        "n",
        "mean",
        "median",
        "sd",
        "ci95_low",
        "ci95_high",
        "cv",
    ]
    .map(String::from)
    .to_vec()];
    let mut seen = std::collections::HashSet::new();
    for row in rows {
        if !seen.insert(group_of(row)) {
            continue;
        }
        for (figure, value) in MEAN_FIGURES {
            let Some(s) = repetitions.spread(row, value) else {
                continue;
            };
            let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
            records.push(vec![
                row.host.clone(),
                row.workload.to_string(),
                crate::render::select::label(row),
                row.device.clone(),
                row.batch.to_string(),
                row.params_text.clone(),
                repetitions.runs_cell(row),
                figure.to_string(),
                s.n.to_string(),
                s.mean.to_string(),
                s.median.to_string(),
                opt(s.sd),
                opt(s.ci95_low),
                opt(s.ci95_high),
                opt(s.cv),
            ]);
        }
    }
    crate::render::table::csv_bytes(records, crate::render::table::LineEnd::Lf)
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
        crate::testkit::rows::described(ResultRow {
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
        })
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
    fn table_cells_give_a_repeated_keys_mean_and_its_runs() {
        let mut rows = vec![
            row(8, 1, TrialStatus::Ok, 1.0),
            row(8, 2, TrialStatus::Ok, 3.0),
            row(8, 3, TrialStatus::Failed, 50.0),
            row(16, 1, TrialStatus::Ok, 5.0),
        ];
        rows[1].power_low_samples = Some(4);
        rows[2].error = Some("command exited with status 1\nits output".into());
        let reps = Repetitions::of(&rows);
        let latest = &rows[2];
        // J of the two ok repetitions (100 and 300): the mean ± t(0.975, 1) x sd / sqrt(2).
        let half = stats::t95(1) * (20000.0f64).sqrt() / 2f64.sqrt();
        assert_eq!(
            reps.cell(latest, |r| r.energy_j, 1.0, 1),
            format!("200.0 ± {half:.1}")
        );
        assert_eq!(
            reps.runs_cell(latest),
            "2 ok / 3 run; repetition 3 failed: command exited with status 1"
        );
        // Every figure of the table is the key's mean, with or without its interval.
        assert_eq!(reps.mean_cell(latest, |r| r.energy_j, 1.0, 1), "200.0");
        assert_eq!(reps.mean(&rows[0], |r| r.time_per_image_s), Some(2.0));
        // The ok repetitions' flags, not the failed one's error; their spread.
        assert_eq!(reps.flags(latest), ["FEW_READINGS(4)", "SPREAD"]);
        // A single repetition: its own value, no SPREAD; a key without an ok one: no value.
        let oom = ResultRow {
            status: TrialStatus::Oom,
            ..row(32, 1, TrialStatus::Ok, 1.0)
        };
        let with_oom = [rows.clone(), vec![oom.clone()]].concat();
        let reps_oom = Repetitions::of(&with_oom);
        assert_eq!(reps_oom.cell(&oom, |r| r.energy_j, 1.0, 1), "-");
        assert_eq!(
            reps_oom.runs_cell(&oom),
            "0 ok / 1 run; repetition 1 failed: oom"
        );
        assert_eq!(reps.cell(&rows[3], |r| r.energy_j, 1.0, 1), "500.0");
        assert_eq!(reps.runs_cell(&rows[3]), "1 ok / 1 run");
        assert!(reps.flags(&rows[3]).is_empty());
    }

    #[test]
    fn the_means_file_gives_each_keys_figures_over_its_ok_repetitions() {
        let rows = [
            row(8, 1, TrialStatus::Ok, 1.0),
            row(8, 2, TrialStatus::Ok, 3.0),
            row(8, 3, TrialStatus::Failed, 50.0),
        ];
        let text = String::from_utf8(means_csv(&rows).unwrap()).unwrap();
        let energy = text
            .lines()
            .find(|l| l.contains(",energy_j,"))
            .unwrap_or_else(|| panic!("{text}"));
        let cells: Vec<&str> = energy.split(',').collect();
        // host, workload, label, device, batch, params, runs, figure, n, mean, median, sd...
        assert_eq!(
            cells[..9],
            [
                "tx2",
                "cnn",
                "alexnet",
                "cpu",
                "8",
                "{}",
                "2 ok / 3 run; repetition 3 failed",
                "energy_j",
                "2"
            ]
        );
        assert_eq!(cells[9].parse::<f64>().unwrap(), 200.0);
        let sd: f64 = cells[11].parse().unwrap();
        assert!((sd - 20000f64.sqrt()).abs() < 1e-9, "{energy}");
        // No power was measured: no line for it.
        assert!(!text.contains(",avg_power_w,"), "{text}");
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
