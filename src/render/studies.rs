//! The source studies' CSV files, in the format of their log parser, so their plotting scripts
//! run unchanged on edgebench data; one pair per engine:
//!
//! - `loss_<machine>_<engine>.csv`: `#network,mode,batch,step,loss,time`, one row per
//!   iteration record; `time` is the step's seconds (forward+backward+update for edgebench).
//! - `times_<machine>_<engine>.csv`: `#network,mode,batch,avg_time`, one row per trial;
//!   `avg_time` is the mean step time over all its iterations (the parser's
//!   `sum(times)/len(times)`); the consumer divides by batch for per-image time.
//!
//! `mode` is `CPU` for device `cpu` and `GPU` for `cuda`; `batch` is zero-padded to 3 digits.
//!
//! Written as the parser's Python `csv` module writes (annex C of the thesis,
//! `bench/study/annex_c.py`), so that its files and these compare byte for byte: lines end in
//! `\r\n`, an imported iteration's `loss` and `time` are the text its log wrote (`0.5000`),
//! and `avg_time` is Python's `repr` of the float, summed one record after the other (as `sum`
//! did before Python 3.12).
//! Other numbers are Rust's shortest form.

use std::collections::BTreeMap;

use super::select::latest_per_key;
use super::table::{csv_bytes, LineEnd};
use crate::record::IterationRecord;
use crate::store::{ResultRow, Store};

pub(crate) const LOSS_HEADER: &str = "#network,mode,batch,step,loss,time";
pub(crate) const TIMES_HEADER: &str = "#network,mode,batch,avg_time";

/// The loss and times files' bytes of one engine's trials; `avg_time` gives a trial's mean
/// seconds per iteration from its records.
pub(crate) fn engine_files(
    store: &Store,
    rows: Vec<ResultRow>,
    avg_time: impl Fn(&ResultRow, &[IterationRecord]) -> f64,
) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let chosen = choose_trials(rows);
    let header = |h: &str| h.split(',').map(str::to_string).collect::<Vec<_>>();
    let mut loss = vec![header(LOSS_HEADER)];
    let mut times = vec![header(TIMES_HEADER)];
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
            loss.push(vec![
                net.clone(),
                mode.clone(),
                format!("{batch:03}"),
                it.step.to_string(),
                value.unwrap_or_else(|| it.loss.to_string()),
                step_s.unwrap_or_else(|| it.step_s.to_string()),
            ]);
        }
        let avg = py_repr(avg_time(row, &iters));
        times.push(vec![net.clone(), mode.clone(), format!("{batch:03}"), avg]);
    }
    Ok((
        csv_bytes(loss, LineEnd::CrLf)?,
        csv_bytes(times, LineEnd::CrLf)?,
    ))
}

/// The mean of the records' step seconds: a trial's mean seconds per iteration where every
/// record is one step (edgebench's own).
pub(crate) fn mean_step_s(iters: &[IterationRecord]) -> f64 {
    iters.iter().map(|it| it.step_s).sum::<f64>() / iters.len() as f64
}

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

/// The studies' files have one series per (network, mode, batch): when a sweep was repeated
/// or resumed, keep the latest `ok` trial, else the latest one. Trials without iterations are
/// ignored so that an aborted retry cannot hide an earlier trial that has data. `results()`
/// is ordered oldest first, so "latest" is the last seen. The map's order gives the file's
/// order (net, mode, batch).
fn choose_trials(rows: Vec<ResultRow>) -> BTreeMap<(String, String, usize), ResultRow> {
    latest_per_key(rows, |r| {
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
