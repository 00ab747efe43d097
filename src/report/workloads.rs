//! The workloads beside the CNN training (`mlp`, `ops`): one CSV per workload,
//! `<workload>_<machine>_edgebench.csv`, one row per trial key (the latest `ok` trial, else the
//! latest, as the studies' files choose), with the common figures and then the workload's own
//! parameters and metrics as columns, in the names `results --json` uses.

use crate::report::csv::write_atomic;
use crate::store::{ResultRow, TrialKey, TrialStatus};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The columns every workload's file starts with.
pub const COMMON: &[&str] = &[
    "host",
    "device",
    "status",
    "iterations",
    "time_per_iteration_s",
    "time_per_iteration_spread_s",
    "total_time_s",
    "gflop_per_s",
    "energy_j",
    "avg_power_w",
    "edp_js",
    "swap_pressure",
    "throttled",
    "peak_rss_bytes",
];

/// A short name for a trial of any workload, e.g. `alexnet`, `mlp tensors small`,
/// `add f32 32MB`.
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
                Some(mb) => format!("{mb}MB"),
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
        _ => r.net.clone(),
    }
}

fn cell(v: Option<&Value>) -> String {
    let text = match v {
        None | Some(Value::Null) => return String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// The file's text for one workload's rows (oldest first).
pub fn csv_text(rows: &[&ResultRow]) -> String {
    let mut chosen: BTreeMap<TrialKey, &ResultRow> = BTreeMap::new();
    let mut order: Vec<TrialKey> = Vec::new();
    for &r in rows {
        let key = r.key();
        match chosen.get(&key) {
            Some(prev) if r.status != TrialStatus::Ok && prev.status == TrialStatus::Ok => {}
            Some(_) => {
                chosen.insert(key, r);
            }
            None => {
                order.push(key.clone());
                chosen.insert(key, r);
            }
        }
    }
    let params: BTreeSet<&String> = rows.iter().flat_map(|r| r.params.keys()).collect();
    let metrics: BTreeSet<&String> = rows.iter().flat_map(|r| r.metrics.keys()).collect();
    let mut columns: Vec<String> = COMMON.iter().map(|c| c.to_string()).collect();
    columns.extend(params.into_iter().cloned());
    columns.extend(metrics.into_iter().cloned());
    let mut out = format!("#{}\n", columns.join(","));
    for key in &order {
        let row = serde_json::to_value(chosen[key]).expect("a results row serialises");
        let line: Vec<String> = columns.iter().map(|c| cell(row.get(c))).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

/// Writes one file per workload other than `cnn` present in `rows`; returns their paths.
pub fn export(rows: &[ResultRow], out_dir: &Path, machine: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut by_workload: BTreeMap<&str, Vec<&ResultRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.workload != "cnn") {
        by_workload.entry(r.workload.as_str()).or_default().push(r);
    }
    let mut written = Vec::new();
    for (workload, rows) in by_workload {
        let path = out_dir.join(format!("{workload}_{machine}_edgebench.csv"));
        write_atomic(&path, csv_text(&rows))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mlp_row(style: &str, status: TrialStatus, secs: f64) -> ResultRow {
        let params: serde_json::Map<String, Value> =
            serde_json::from_str(&format!(r#"{{"style":"{style}","size":"small","n":64}}"#))
                .unwrap();
        ResultRow {
            workload: "mlp".into(),
            net: "mlp".into(),
            device: "cpu".into(),
            batch: 64,
            status,
            host: "tx2".into(),
            time_per_iteration_s: Some(secs),
            params_text: serde_json::to_string(&params).unwrap(),
            params,
            ..Default::default()
        }
    }

    #[test]
    fn one_row_per_key_preferring_ok_with_params_as_columns() {
        let a = mlp_row("tensors", TrialStatus::Ok, 0.5);
        let b = mlp_row("autograd", TrialStatus::Ok, 0.25);
        let retried = mlp_row("tensors", TrialStatus::Failed, 9.0);
        let text = csv_text(&[&a, &b, &retried]);
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
        assert_eq!(label(&a), "mlp tensors small");
    }

    #[test]
    fn cells_with_commas_or_quotes_are_quoted() {
        assert_eq!(cell(Some(&Value::String("a,b".into()))), "\"a,b\"");
        assert_eq!(
            cell(Some(&Value::String("say \"x\"".into()))),
            "\"say \"\"x\"\"\""
        );
        assert_eq!(cell(Some(&Value::Null)), "");
    }
}
