//! CSV export in the format of the source studies' log parser, so their plotting scripts run
//! unchanged on edgebench data:
//!
//! - `loss_<machine>_edgebench.csv`: `#network,mode,batch,step,loss,time`, one row per
//!   iteration; `time` is the step's forward+backward+update seconds.
//! - `times_<machine>_edgebench.csv`: `#network,mode,batch,avg_time`, one row per trial;
//!   `avg_time` is the mean step time over all its iterations (the parser's
//!   `sum(times)/len(times)`); the consumer divides by batch for per-image time.
//!
//! `mode` is `CPU` for device `cpu` and `GPU` for `cuda`; `batch` is zero-padded to 3 digits.

use crate::store::TrialStatus;
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::store::{ResultRow, Store};

pub const LOSS_HEADER: &str = "#network,mode,batch,step,loss,time";
pub const TIMES_HEADER: &str = "#network,mode,batch,avg_time";

/// Writes both CSV files of the CNN trials for `machine` into `out_dir` (created if needed),
/// and one file per other workload ([`super::workloads`]); returns their paths, loss file
/// first.
pub fn export_csv(store: &Store, out_dir: &Path, machine: &str) -> anyhow::Result<Vec<PathBuf>> {
    export_csv_rows(store, store.results()?, out_dir, machine)
}

/// [`export_csv`] for some of the store's trials (e.g. one host's, for `edgebench report`).
pub fn export_csv_rows(
    store: &Store,
    rows: Vec<ResultRow>,
    out_dir: &Path,
    machine: &str,
) -> anyhow::Result<Vec<PathBuf>> {
    if machine.is_empty() || machine.contains(['/', '\\']) || machine.starts_with('.') {
        bail!("machine name {machine:?} cannot be used in a file name; pass a plain name");
    }
    fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create output directory {}", out_dir.display()))?;

    let others = super::workloads::export(&rows, out_dir, machine)?;
    let chosen = choose_trials(rows.into_iter().filter(|r| r.workload == "cnn").collect());

    let mut loss = String::from(LOSS_HEADER);
    loss.push('\n');
    let mut times = String::from(TIMES_HEADER);
    times.push('\n');
    for ((net, mode, batch), row) in &chosen {
        let iters = store.iterations(row.trial_rowid)?;
        if iters.is_empty() {
            continue;
        }
        for it in &iters {
            loss.push_str(&format!(
                "{net},{mode},{batch:03},{},{},{}\n",
                it.step, it.loss, it.step_s
            ));
        }
        let avg = iters.iter().map(|it| it.step_s).sum::<f64>() / iters.len() as f64;
        times.push_str(&format!("{net},{mode},{batch:03},{avg}\n"));
    }

    let loss_path = out_dir.join(format!("loss_{machine}_edgebench.csv"));
    let times_path = out_dir.join(format!("times_{machine}_edgebench.csv"));
    write_atomic(&loss_path, loss)?;
    write_atomic(&times_path, times)?;
    Ok([loss_path, times_path].into_iter().chain(others).collect())
}

/// The studies' files have one series per (network, mode, batch): when a sweep was repeated
/// or resumed, keep the latest `ok` trial, else the latest one. Trials without iterations are
/// ignored so that an aborted retry cannot hide an earlier trial that has data. `results()`
/// is ordered oldest first, so "latest" is the last seen. The map's order gives the file's
/// order (net, mode, batch).
fn choose_trials(rows: Vec<ResultRow>) -> BTreeMap<(String, String, usize), ResultRow> {
    let mut chosen: BTreeMap<(String, String, usize), ResultRow> = BTreeMap::new();
    for row in rows.into_iter().filter(|r| r.iterations > 0) {
        let key = (row.net.clone(), mode(&row.device), row.batch);
        let replace = match chosen.get(&key) {
            None => true,
            // A later trial wins unless it would replace an ok one with a non-ok one.
            Some(prev) => row.status == TrialStatus::Ok || prev.status != TrialStatus::Ok,
        };
        if replace {
            chosen.insert(key, row);
        }
    }
    chosen
}

fn mode(device: &str) -> String {
    match device {
        "cpu" => "CPU".to_string(),
        "cuda" => "GPU".to_string(),
        other => other.to_ascii_uppercase(),
    }
}

/// Write to a temporary file and rename, so a reader never sees a half-written file.
pub(crate) fn write_atomic(path: &Path, contents: impl AsRef<[u8]>) -> anyhow::Result<()> {
    let tmp = std::path::PathBuf::from(format!("{}.tmp", path.display()));
    let write = || -> std::io::Result<()> {
        let mut f = BufWriter::new(fs::File::create(&tmp)?);
        f.write_all(contents.as_ref())?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TrialStatus;

    fn row(id: i64, status: &str, iterations: usize) -> ResultRow {
        ResultRow {
            trial_id: format!("t{id}"),
            workload: "cnn".into(),
            net: "alexnet".into(),
            device: "cpu".into(),
            batch: 8,
            epochs: 1,
            images: 64,
            iterations,
            iterations_planned: 8,
            warmup_iterations: 1,
            status: TrialStatus::parse(status).unwrap(),
            trial_rowid: id,
            ..Default::default()
        }
    }

    fn pick(rows: Vec<ResultRow>) -> i64 {
        let chosen = choose_trials(rows);
        assert_eq!(chosen.len(), 1);
        chosen.into_values().next().unwrap().trial_rowid
    }

    #[test]
    fn latest_ok_wins_over_later_failure() {
        assert_eq!(
            pick(vec![row(1, "ok", 8), row(2, "ok", 8), row(3, "failed", 3)]),
            2
        );
    }

    #[test]
    fn latest_wins_without_ok() {
        assert_eq!(pick(vec![row(1, "failed", 2), row(2, "interrupted", 3)]), 2);
    }

    #[test]
    fn empty_trials_are_ignored() {
        assert_eq!(pick(vec![row(1, "failed", 2), row(2, "failed", 0)]), 1);
    }

    #[test]
    fn modes() {
        assert_eq!(mode("cpu"), "CPU");
        assert_eq!(mode("cuda"), "GPU");
    }
}
