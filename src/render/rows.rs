//! A workload's trials as a CSV file, `<workload>_<machine>_<engine>.csv` (`edgebench` for what
//! edgebench computes itself, the framework for `exec`, e.g. `exec_tx1_caffe.csv`): one row per
//! trial key and repetition (`repetition`; the latest `ok` trial of it, else the latest, as the
//! studies' files choose), with the common figures (for `exec` also `net` and `batch`, which
//! tell its trials apart) and then the workload's own parameters and metrics as columns, in
//! the names `results --json` uses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::files::{file_name_part, write_atomic};
use super::select::{engine_of, latest_per_key, OWN};
use super::table::{csv_bytes, LineEnd};
use crate::store::ResultRow;

/// The columns every workload's file starts with.
pub(crate) const COMMON: &[&str] = &[
    "host",
    "device",
    "status",
    "repetition",
    "iterations",
    "time_per_iteration_s",
    "time_per_iteration_spread_s",
    "total_time_s",
    "gflop_per_s",
    "energy_j",
    "avg_power_w",
    "edp_js",
    "item",
    "items_per_iteration",
    "time_per_item_s",
    "energy_per_item_j",
    "edp_per_item_js",
    "swap_pressure",
    "throttled",
    "peak_rss_bytes",
    "peak_gpu_bytes",
];

fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// The file's bytes for one workload's rows (oldest first).
pub(crate) fn csv_text(rows: &[&ResultRow]) -> anyhow::Result<Vec<u8>> {
    let rows: Vec<&ResultRow> =
        latest_per_key(rows.iter().copied(), |r| Some((r.key(), r.repetition)))
            .into_iter()
            .map(|(_, r)| r)
            .collect();
    let params: BTreeSet<&String> = rows.iter().flat_map(|r| r.params.keys()).collect();
    let metrics: BTreeSet<&String> = rows.iter().flat_map(|r| r.metrics.keys()).collect();
    let mut columns: Vec<String> = COMMON.iter().map(|c| c.to_string()).collect();
    if rows
        .iter()
        .any(|r| r.engine.as_deref().is_some_and(|e| e != OWN))
    {
        // Another framework's trials (a command's) differ by net and batch, which their
        // parameters do not hold.
        columns.splice(1..1, ["net".to_string()]);
        let after_device = columns
            .iter()
            .position(|c| c == "device")
            .map_or(0, |i| i + 1);
        columns.insert(after_device, "batch".to_string());
    }
    columns.extend(params.into_iter().cloned());
    columns.extend(metrics.into_iter().cloned());
    let mut header = columns.clone();
    header[0] = format!("#{}", header[0]);
    let mut records = vec![header];
    for r in rows {
        let row = serde_json::to_value(r)?;
        records.push(columns.iter().map(|c| cell(row.get(c))).collect());
    }
    csv_bytes(records, LineEnd::Lf)
}

/// Writes one file per engine of the trials of `workload` in `rows` into `out_dir`, in the
/// engines' order; returns their paths.
pub(crate) fn export(
    rows: &[ResultRow],
    workload: &str,
    out_dir: &Path,
    machine: &str,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut by_engine: BTreeMap<String, Vec<&ResultRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.workload == workload) {
        let engine = engine_of(r).unwrap_or_else(|| OWN.to_string());
        by_engine
            .entry(file_name_part(&engine))
            .or_default()
            .push(r);
    }
    let mut written = Vec::new();
    for (engine, rows) in by_engine {
        let path = out_dir.join(format!("{workload}_{machine}_{engine}.csv"));
        write_atomic(&path, csv_text(&rows)?)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::select::label;
    use crate::store::TrialStatus;
    use crate::testkit::rows::{self, described, with_params};

    /// The kit's MLP row, described as the store's reader leaves it.
    fn mlp_row(style: &str, status: TrialStatus, secs: f64) -> ResultRow {
        described(rows::mlp_row(style, status, secs))
    }

    #[test]
    fn one_row_per_key_preferring_ok_with_params_as_columns() {
        let a = mlp_row("tensors", TrialStatus::Ok, 0.5);
        let mut b = mlp_row("autograd", TrialStatus::Ok, 0.25);
        b.peak_gpu_bytes = Some(123 << 20);
        let retried = mlp_row("tensors", TrialStatus::Failed, 9.0);
        let text = String::from_utf8(csv_text(&[&a, &b, &retried]).unwrap()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let header: Vec<&str> = lines[0].trim_start_matches('#').split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let first: Vec<&str> = lines[1].split(',').collect();
        assert_eq!(first[col("style")], "tensors");
        assert_eq!(first[col("status")], "ok");
        assert_eq!(first[col("time_per_iteration_s")], "0.5");
        assert_eq!(first[col("energy_j")], "");
        assert_eq!(lines[2].split(',').nth(col("style")), Some("autograd"));
        assert_eq!(first[col("peak_gpu_bytes")], "");
        assert_eq!(
            lines[2].split(',').nth(col("peak_gpu_bytes")),
            Some("128974848")
        );
        assert_eq!(label(&a), "mlp tensors small");
    }

    #[test]
    fn every_repetition_is_a_row_of_its_own() {
        let rep = |repetition: usize, status: TrialStatus, secs: f64| ResultRow {
            repetition,
            ..mlp_row("tensors", status, secs)
        };
        let rows = [
            rep(1, TrialStatus::Ok, 0.5),
            rep(2, TrialStatus::Ok, 0.6),
            rep(3, TrialStatus::Failed, 9.0),
            // Repetition 2 run again: its latest ok trial stands for it.
            rep(2, TrialStatus::Ok, 0.7),
        ];
        let refs: Vec<&ResultRow> = rows.iter().collect();
        let text = String::from_utf8(csv_text(&refs).unwrap()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        let header: Vec<&str> = lines[0].trim_start_matches('#').split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let cells = |i: usize, c: &str| lines[i].split(',').nth(col(c)).unwrap().to_string();
        assert_eq!(
            (1..4)
                .map(|i| (
                    cells(i, "repetition"),
                    cells(i, "status"),
                    cells(i, "time_per_iteration_s")
                ))
                .collect::<Vec<_>>(),
            [
                ("1".into(), "ok".into(), "0.5".into()),
                ("2".into(), "ok".into(), "0.7".into()),
                ("3".into(), "failed".into(), "9.0".into())
            ]
        );
    }

    #[test]
    fn exec_files_per_engine_with_net_and_batch() {
        let exec = |engine: &str, net: &str, batch: usize| {
            described(with_params(
                ResultRow {
                    workload: "exec".into(),
                    net: net.into(),
                    device: "cuda".into(),
                    batch,
                    status: TrialStatus::Ok,
                    host: "tx1".into(),
                    ..Default::default()
                },
                serde_json::json!({"command": [], "engine": engine}),
            ))
        };
        let rows = [
            exec("caffe", "alexnet", 16),
            exec("caffe", "googlenet", 32),
            exec("tensorflow", "alexnet", 16),
            mlp_row("tensors", TrialStatus::Ok, 0.5),
        ];
        let dir = tempfile::tempdir().unwrap();
        let mut written = export(&rows, "exec", dir.path(), "tx1").unwrap();
        written.extend(export(&rows, "mlp", dir.path(), "tx1").unwrap());
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "exec_tx1_caffe.csv",
                "exec_tx1_tensorflow.csv",
                "mlp_tx1_edgebench.csv"
            ]
        );
        let caffe = std::fs::read_to_string(&written[0]).unwrap();
        let lines: Vec<&str> = caffe.lines().collect();
        assert_eq!(lines.len(), 3, "{caffe}");
        let header: Vec<&str> = lines[0].trim_start_matches('#').split(',').collect();
        assert_eq!(header[..4], ["host", "net", "device", "batch"]);
        assert!(lines[1].starts_with("tx1,alexnet,cuda,16,"), "{caffe}");
        assert!(lines[2].starts_with("tx1,googlenet,cuda,32,"), "{caffe}");
        // Other workloads keep their columns.
        let mlp = std::fs::read_to_string(&written[2]).unwrap();
        assert!(mlp.starts_with("#host,device,status,"), "{mlp}");
    }

    #[test]
    fn cells_with_commas_or_quotes_are_quoted() {
        let mut r = mlp_row("a,b", TrialStatus::Ok, 0.5);
        r.params
            .insert("note".into(), Value::String("say \"x\"".into()));
        let text = String::from_utf8(csv_text(&[&r]).unwrap()).unwrap();
        let line = text.lines().nth(1).unwrap();
        assert!(line.contains(",\"say \"\"x\"\"\","), "{line}");
        assert!(line.ends_with(",\"a,b\""), "{line}");
        assert_eq!(cell(Some(&Value::Null)), "");
    }
}
