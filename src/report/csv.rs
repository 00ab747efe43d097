//! CSV export in the format of the source studies' log parser, so their plotting scripts run
//! unchanged on edgebench data, one pair of files per engine: `edgebench` for edgebench's own
//! trainer (the `cnn` workload), and each framework measured with `edgebench exec` or imported
//! from its logs under its engine name ([`super::engines`]):
//!
//! - `loss_<machine>_<engine>.csv`: `#network,mode,batch,step,loss,time`, one row per
//!   iteration record; `time` is the step's seconds (forward+backward+update for edgebench).
//! - `times_<machine>_<engine>.csv`: `#network,mode,batch,avg_time`, one row per trial;
//!   `avg_time` is the mean step time over all its iterations (the parser's
//!   `sum(times)/len(times)`); the consumer divides by batch for per-image time.
//!
//! A framework's log may show only every K-th step (Caffe's `display`): such a record stands
//! for K iterations and its `time` is per iteration, and `avg_time` weighs each record by the
//! iterations it stands for, so both stay per iteration whatever K was.
//!
//! `mode` is `CPU` for device `cpu` and `GPU` for `cuda`; `batch` is zero-padded to 3 digits.
//! The `edgebench` files are always written; another engine's only when it has trials.
//!
//! Written as the parser's Python `csv` module writes (annex C of the thesis,
//! `bench/study/annex_c.py`), so that its files and these compare byte for byte: lines end in
//! `\r\n`, an imported iteration's `loss` and `time` are the text its log wrote (`0.5000`),
//! and `avg_time` is Python's `repr` of the float, summed one record after the other (as `sum`
//! did before Python 3.12).
//! Other numbers are Rust's shortest form.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::record::IterationRecord;
use crate::report::engines::{engine_of, file_name_part, OWN};
use crate::store::{ResultRow, Store};
use crate::workloads::exec::{steps_covered, total_time_s};

pub const LOSS_HEADER: &str = "#network,mode,batch,step,loss,time";
pub const TIMES_HEADER: &str = "#network,mode,batch,avg_time";

/// Writes both CSV files of every engine for `machine` into `out_dir` (created if needed),
/// and one file per workload other than the CNN training ([`super::workloads`]); returns their
/// paths, edgebench's loss and times files first, then each other engine's.
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
    // Engine (as a file name part) -> its trials; edgebench's files are always written.
    let mut by_engine: BTreeMap<String, Vec<ResultRow>> = BTreeMap::new();
    by_engine.insert(OWN.to_string(), Vec::new());
    for row in rows {
        if let Some(engine) = engine_of(&row) {
            by_engine
                .entry(file_name_part(&engine))
                .or_default()
                .push(row);
        }
    }
    // edgebench first, then the others by name.
    let own = by_engine.remove(OWN).unwrap_or_default();
    let mut written = Vec::new();
    for (engine, rows) in std::iter::once((OWN.to_string(), own)).chain(by_engine) {
        let (loss, times) = engine_files(store, rows)?;
        let loss_path = out_dir.join(format!("loss_{machine}_{engine}.csv"));
        let times_path = out_dir.join(format!("times_{machine}_{engine}.csv"));
        write_atomic(&loss_path, loss)?;
        write_atomic(&times_path, times)?;
        written.extend([loss_path, times_path]);
    }
    Ok(written.into_iter().chain(others).collect())
}

/// The loss and times files' text of one engine's trials.
fn engine_files(store: &Store, rows: Vec<ResultRow>) -> anyhow::Result<(String, String)> {
    let chosen = choose_trials(rows);
    let mut loss = format!("{LOSS_HEADER}{EOL}");
    let mut times = format!("{TIMES_HEADER}{EOL}");
    for ((net, mode, batch), row) in &chosen {
        let iters = store.iterations(row.trial_rowid)?;
        if iters.is_empty() {
            continue;
        }
        let logged = store.logged_text(row.trial_rowid)?;
        for (i, it) in iters.iter().enumerate() {
            let text = logged.get(i);
            let value = text.and_then(|t| t.loss.clone());
            let step_s = text.and_then(|t| t.step_s.clone());
            loss.push_str(&format!(
                "{net},{mode},{batch:03},{},{},{}{EOL}",
                it.step,
                value.unwrap_or_else(|| it.loss.to_string()),
                step_s.unwrap_or_else(|| it.step_s.to_string()),
            ));
        }
        let avg = py_repr(avg_time(&row.workload, &iters));
        times.push_str(&format!("{net},{mode},{batch:03},{avg}{EOL}"));
    }
    Ok((loss, times))
}

/// Python's `csv` writer ends its lines so.
const EOL: &str = "\r\n";

/// `x` as Python 3's `repr` (and so `str` and the `csv` module) writes it: the shortest digits
/// that read back as `x`, as Rust's formatting finds them, laid out as Python does: an
/// exponent of two digits or more with its sign below 1e-4 and from 1e16 on, `.0` on a whole
/// number.
pub(crate) fn py_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').expect("LowerExp writes an exponent");
    let exp: i32 = exp.parse().expect("LowerExp writes a whole exponent");
    if (-4..16).contains(&exp) {
        let fixed = x.to_string();
        if fixed.contains('.') {
            fixed
        } else {
            fixed + ".0"
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

/// Mean seconds per iteration of a trial's records. edgebench records every step, so the
/// plain mean; an external command's record may stand for several iterations (a log showing
/// every K-th step) and counts for as many.
fn avg_time(workload: &str, iters: &[IterationRecord]) -> f64 {
    if workload == "exec" {
        let covered: usize = steps_covered(iters).iter().sum();
        total_time_s(iters, 0) / covered as f64
    } else {
        iters.iter().map(|it| it.step_s).sum::<f64>() / iters.len() as f64
    }
}

/// The studies' files have one series per (network, mode, batch): when a sweep was repeated
/// or resumed, keep the latest `ok` trial, else the latest one. Trials without iterations are
/// ignored so that an aborted retry cannot hide an earlier trial that has data. `results()`
/// is ordered oldest first, so "latest" is the last seen. The map's order gives the file's
/// order (net, mode, batch).
fn choose_trials(rows: Vec<ResultRow>) -> BTreeMap<(String, String, usize), ResultRow> {
    super::latest_per_key(rows, |r| {
        (r.iterations > 0).then(|| (r.net.clone(), mode(&r.device), r.batch))
    })
    .into_iter()
    .collect()
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
    fn avg_time_is_per_iteration_when_a_record_stands_for_several() {
        let rec = |step, step_s| IterationRecord {
            step,
            epoch: 0,
            loss: 1.0,
            lr: 0.01,
            data_s: 0.0,
            step_s,
            t_start_ns: 0,
            t_end_ns: 0,
        };
        // A first iteration of 1 s, then two records of 10 iterations at 0.25 s each.
        let logged = [rec(0, 1.0), rec(10, 0.25), rec(20, 0.25)];
        assert_eq!(avg_time("exec", &logged), (1.0 + 20.0 * 0.25) / 21.0);
        // edgebench's records are one step each: the plain mean.
        let own = [rec(0, 1.0), rec(1, 0.25), rec(2, 0.25)];
        assert_eq!(avg_time("cnn", &own), 1.5 / 3.0);
        assert_eq!(avg_time("exec", &own), 1.5 / 3.0);
    }

    #[test]
    fn floats_as_python_writes_them() {
        for (x, python) in [
            (0.5, "0.5"),
            (2.0, "2.0"),
            (-0.0, "-0.0"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (-2.5e-7, "-2.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345678901234567e123, "1.2345678901234567e+123"),
            (5e-324, "5e-324"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(py_repr(x), python, "{x:e}");
        }
    }

    #[test]
    fn modes() {
        assert_eq!(mode("cpu"), "CPU");
        assert_eq!(mode("cuda"), "GPU");
    }
}
