//! The workloads beside the CNN training (`mlp`, `ops`): one CSV per workload,
//! `<workload>_<machine>_edgebench.csv`, one row per trial key (the latest `ok` trial, else the
//! latest, as the studies' files choose), with the common figures and then the workload's own
//! parameters and metrics as columns, in the names `results --json` uses.

use crate::report::build::Table;
use crate::report::csv::write_atomic;
use crate::report::plots::{Axis, Mark, Plot, Point, Series, Unit};
use crate::store::{ResultRow, TrialStatus};
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
    "peak_gpu_bytes",
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
        "exec" => format!("{} {}", param("engine").unwrap_or_default(), r.net)
            .trim_end()
            .to_string(),
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

/// The trial standing for each key among `rows` (oldest first): the latest `ok` one, else
/// the latest; in the order the keys first appear.
fn latest<'a>(rows: &[&'a ResultRow]) -> Vec<&'a ResultRow> {
    super::latest_per_key(rows.iter().copied(), |r| Some(r.key()))
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}

/// The file's text for one workload's rows (oldest first).
pub fn csv_text(rows: &[&ResultRow]) -> String {
    let rows = latest(rows);
    let params: BTreeSet<&String> = rows.iter().flat_map(|r| r.params.keys()).collect();
    let metrics: BTreeSet<&String> = rows.iter().flat_map(|r| r.metrics.keys()).collect();
    let mut columns: Vec<String> = COMMON.iter().map(|c| c.to_string()).collect();
    columns.extend(params.into_iter().cloned());
    columns.extend(metrics.into_iter().cloned());
    let mut out = format!("#{}\n", columns.join(","));
    for r in rows {
        let row = serde_json::to_value(r).expect("a results row serialises");
        let line: Vec<String> = columns.iter().map(|c| cell(row.get(c))).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

fn num(r: &ResultRow, key: &str) -> Option<f64> {
    r.params
        .get(key)
        .or_else(|| r.metrics.get(key))
        .and_then(Value::as_f64)
}

fn text(r: &ResultRow, key: &str) -> String {
    match r.params.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "-".into(),
    }
}

fn fmt(v: Option<f64>, scale: f64, digits: usize) -> String {
    v.map(|v| format!("{:.*}", digits, v * scale))
        .unwrap_or_else(|| "-".into())
}

fn flags(r: &ResultRow) -> String {
    let mut f = Vec::new();
    if r.swap_pressure == Some(true) {
        f.push("SWAP".to_string());
    }
    if r.throttled == Some(true) {
        f.push("THROTTLED".to_string());
    }
    if r.loss_anomaly {
        f.push("LOSS_ANOMALY".to_string());
    }
    if let Some(e) = &r.error {
        f.push(e.lines().next().unwrap_or("").to_string());
    }
    f.join("; ")
}

/// The MLP study's and the operator study's tables for one host's rows: per device, time,
/// rate and energy per (size, style) or (op, size), with the MLP's GPU/CPU speedup and EDP
/// ratio where both devices ran the same trial.
pub fn tables(host: &str, rows: &[ResultRow]) -> Vec<Table> {
    let of = |w: &str| -> Vec<&ResultRow> { rows.iter().filter(|r| r.workload == w).collect() };
    let mut out = Vec::new();
    let mlp = latest(&of("mlp"));
    // The same trial on the CPU, for the GPU rows' ratios.
    let on_cpu = |r: &ResultRow| {
        mlp.iter().copied().find(|c| {
            c.device == "cpu"
                && c.status == TrialStatus::Ok
                && c.params_text == r.params_text
                && c.epochs == r.epochs
        })
    };
    for device in ["cpu", "cuda"] {
        let rs: Vec<&ResultRow> = mlp.iter().copied().filter(|r| r.device == device).collect();
        if rs.is_empty() {
            continue;
        }
        out.push(Table {
            title: format!("MLP study on {device} — {host}"),
            header: vec![
                "size",
                "style",
                "status",
                "ms/iteration",
                "± IQR ms",
                "total s",
                "GFLOP/s",
                "J",
                "W",
                "EDP J·s",
                "GPU/CPU",
                "EDP CPU/GPU",
                "flags",
            ],
            rows: rs
                .iter()
                .map(|r| {
                    let cpu = (device == "cuda" && r.status == TrialStatus::Ok)
                        .then(|| on_cpu(r))
                        .flatten();
                    let ratio =
                        |f: fn(&ResultRow) -> Option<f64>| cpu.and_then(|c| Some(f(c)? / f(r)?));
                    vec![
                        text(r, "size"),
                        text(r, "style"),
                        r.status.to_string(),
                        fmt(r.time_per_iteration_s, 1e3, 2),
                        fmt(r.time_per_iteration_spread_s, 1e3, 2),
                        fmt(r.total_time_s, 1.0, 2),
                        fmt(r.gflop_per_s, 1.0, 2),
                        fmt(r.energy_j, 1.0, 2),
                        fmt(r.avg_power_w, 1.0, 2),
                        fmt(r.edp_js, 1.0, 2),
                        fmt(ratio(|x| x.time_per_iteration_s), 1.0, 2),
                        fmt(ratio(|x| x.edp_js), 1.0, 2),
                        flags(r),
                    ]
                })
                .collect(),
        });
    }
    let ops = latest(&of("ops"));
    for device in ["cpu", "cuda"] {
        let rs: Vec<&ResultRow> = ops.iter().copied().filter(|r| r.device == device).collect();
        if rs.is_empty() {
            continue;
        }
        out.push(Table {
            title: format!("Operators on {device} — {host}"),
            header: vec![
                "op",
                "status",
                "dtype",
                "MiB",
                "ms/execution",
                "GFLOP/s",
                "GB/s",
                "FLOP/byte",
                "% peak FLOP/s",
                "% peak GB/s",
                "% measured FLOP/s",
                "% measured GB/s",
                "J/GFLOP",
                "J/GB",
                "flags",
            ],
            rows: rs
                .iter()
                .map(|r| {
                    vec![
                        text(r, "op"),
                        r.status.to_string(),
                        text(r, "dtype"),
                        text(r, "mb"),
                        fmt(r.time_per_iteration_s, 1e3, 3),
                        fmt(r.gflop_per_s, 1.0, 2),
                        fmt(num(r, "gbyte_per_s"), 1.0, 2),
                        fmt(num(r, "intensity_flop_per_byte"), 1.0, 3),
                        fmt(num(r, "pct_peak_flops"), 1.0, 1),
                        fmt(num(r, "pct_peak_bandwidth"), 1.0, 1),
                        fmt(num(r, "pct_measured_peak_flops"), 1.0, 1),
                        fmt(num(r, "pct_measured_peak_bandwidth"), 1.0, 1),
                        fmt(num(r, "joule_per_gflop"), 1.0, 4),
                        fmt(num(r, "joule_per_gbyte"), 1.0, 4),
                        flags(r),
                    ]
                })
                .collect(),
        });
    }
    out
}

/// The MLP study's figures (stems `mlp_time`, `mlp_energy`, `mlp_edp`): time per iteration,
/// energy and EDP per size (in order of work), one line per style and device, so CPU and GPU
/// sit side by side; energy and EDP only where measured.
pub fn mlp_plots(host: &str, rows: &[ResultRow]) -> Vec<(String, Plot)> {
    let mlp: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == "mlp").collect();
    let mlp = latest(&mlp);
    // Sizes by multiply-adds per iteration, named sizes (small < medium < large) agreeing.
    let work = |r: &ResultRow| {
        let n = |k| num(r, k).unwrap_or(0.0);
        n("n") * (n("d_in") * n("h") + n("h") * n("d_out"))
    };
    let mut sizes: Vec<(f64, String)> = mlp.iter().map(|r| (work(r), text(r, "size"))).collect();
    sizes.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    let mut names: Vec<String> = sizes.into_iter().map(|(_, n)| n).collect();
    let mut seen = BTreeSet::new();
    names.retain(|n| seen.insert(n.clone()));
    let figure = |stem: &str, what: &str, unit: Unit, value: fn(&ResultRow) -> Option<f64>| {
        let mut by: BTreeMap<(String, String), Vec<Point>> = BTreeMap::new();
        for r in &mlp {
            let Some(x) = names.iter().position(|n| *n == text(r, "size")) else {
                continue;
            };
            by.entry((text(r, "style"), r.device.clone()))
                .or_default()
                .push(Point {
                    x: x as f64,
                    y: (r.status == TrialStatus::Ok).then(|| value(r)).flatten(),
                    mark: Mark::of(r),
                    err: None,
                });
        }
        let series = by
            .into_iter()
            .map(|((style, device), points)| Series {
                label: format!("{style} {device}"),
                points,
                markers: true,
            })
            .collect();
        (
            stem.to_string(),
            Plot {
                title: format!("MLP study: {what} per size, CPU and GPU — {host}"),
                x_desc: "network size".into(),
                y_desc: what.into(),
                y_unit: unit,
                x_axis: Axis::Linear,
                y_axis: Axis::Log(10.0),
                x_categories: names.clone(),
                series,
                caption: format!(
                    "MLP study: {what} of each style on each device, per network size."
                ),
                ..Default::default()
            },
        )
    };
    let mut out = vec![figure(
        "mlp_time",
        "time per iteration",
        Unit::Seconds,
        |r| r.time_per_iteration_s,
    )];
    if mlp.iter().any(|r| r.energy_j.is_some()) {
        out.push(figure("mlp_energy", "energy", Unit::Joules, |r| r.energy_j));
        out.push(figure("mlp_edp", "EDP", Unit::JouleSeconds, |r| r.edp_js));
    }
    out
}

/// The operator study's figures per device (stems `ops_mflops_<device>`, `ops_peak_<device>`):
/// MFLOP/s and % of the peak FLOP/s of each op (one line per op and dtype) against its size in
/// MB, both logarithmic; a trial that did not finish is in the no-value row.
pub fn ops_plots(host: &str, rows: &[ResultRow]) -> Vec<(String, Plot)> {
    let ops: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == "ops").collect();
    let ops = latest(&ops);
    // A GEMM's size is its three f32 matrices; the other ops name theirs.
    let size_mb = |r: &ResultRow| {
        num(r, "mb").or_else(|| {
            let (m, n, k) = (num(r, "m")?, num(r, "n")?, num(r, "k")?);
            Some((m * k + k * n + m * n) * 4.0 / 1e6)
        })
    };
    let pct =
        |r: &ResultRow| num(r, "pct_peak_flops").or_else(|| num(r, "pct_measured_peak_flops"));
    let mut out = Vec::new();
    for device in ["cpu", "cuda"] {
        let rs: Vec<&ResultRow> = ops.iter().copied().filter(|r| r.device == device).collect();
        let series = |value: &dyn Fn(&ResultRow) -> Option<f64>| -> Vec<Series> {
            let mut by: BTreeMap<(String, String), Vec<Point>> = BTreeMap::new();
            for r in &rs {
                let Some(x) = size_mb(r) else { continue };
                by.entry((text(r, "op"), text(r, "dtype")))
                    .or_default()
                    .push(Point {
                        x,
                        y: (r.status == TrialStatus::Ok).then(|| value(r)).flatten(),
                        mark: Mark::of(r),
                        err: None,
                    });
            }
            by.into_iter()
                .map(|((op, dtype), points)| Series {
                    label: format!("{op} {dtype}"),
                    points,
                    markers: true,
                })
                .collect()
        };
        let plot = |title: String, y_desc: &str, series: Vec<Series>, caption: &str| Plot {
            title,
            x_desc: "size (MB, log)".into(),
            y_desc: y_desc.into(),
            x_axis: Axis::Log(10.0),
            y_axis: Axis::Log(10.0),
            series,
            caption: caption.into(),
            ..Default::default()
        };
        out.push((
            format!("ops_mflops_{device}"),
            plot(
                format!("Operators on {device}: MFLOP/s per op and size — {host}"),
                "MFLOP/s",
                series(&|r| r.gflop_per_s.map(|g| g * 1e3)),
                "Operator study: the rate of each op and data type against its size.",
            ),
        ));
        let shares = series(&pct);
        // Without any share (no peak known) the figure would be a row of missing values.
        if shares.iter().any(|s| !s.line().is_empty()) {
            out.push((
                format!("ops_peak_{device}"),
                plot(
                    format!("Operators on {device}: % of peak FLOP/s per op and size — {host}"),
                    "% of peak FLOP/s",
                    shares,
                    "Operator study: each op's rate as a share of the device's peak FLOP/s \
                     (the data sheet's, else the measured SGEMM rate), against its size.",
                ),
            ));
        }
    }
    out
}

/// The roof a row's rate was judged against: its rate over its share of that roof.
fn roof(rate: Option<f64>, pct: Option<f64>) -> Option<f64> {
    Some(rate? * 100.0 / pct.filter(|p| *p > 0.0)?)
}

/// One roofline per device with operator trials (stem `roofline_<device>`): x arithmetic
/// intensity (FLOP/byte), y GFLOP/s, both logarithmic; the measured compute roof (SGEMM) and
/// bandwidth roof (the best STREAM rate the ops were judged against), and each op a line
/// over its sizes.
pub fn roofline_plots(host: &str, rows: &[ResultRow]) -> Vec<(String, Plot)> {
    let ops: Vec<&ResultRow> = rows
        .iter()
        .filter(|r| r.workload == "ops" && r.status == TrialStatus::Ok)
        .collect();
    let mut plots = Vec::new();
    for device in ["cpu", "cuda"] {
        let rs: Vec<&ResultRow> = latest(&ops)
            .into_iter()
            .filter(|r| r.device == device)
            .collect();
        let point = |r: &&ResultRow| Some((num(r, "intensity_flop_per_byte")?, r.gflop_per_s?));
        let compute = rs
            .iter()
            .filter_map(|r| roof(r.gflop_per_s, num(r, "pct_measured_peak_flops")))
            .fold(f64::NAN, f64::max);
        let bandwidth = rs
            .iter()
            .filter_map(|r| roof(num(r, "gbyte_per_s"), num(r, "pct_measured_peak_bandwidth")))
            .fold(f64::NAN, f64::max);
        let xs: Vec<f64> = rs.iter().filter_map(point).map(|(x, _)| x).collect();
        if xs.is_empty() {
            continue;
        }
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min) / 4.0;
        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max) * 4.0;
        let line = |label: String, pts: Vec<(f64, f64)>| Series {
            label,
            points: pts
                .into_iter()
                .map(|(x, y)| Point {
                    x,
                    y: Some(y),
                    mark: Mark::Ok,
                    err: None,
                })
                .collect(),
            markers: false,
        };
        let mut series = Vec::new();
        if compute.is_finite() {
            let start = if bandwidth.is_finite() {
                (compute / bandwidth).max(lo)
            } else {
                lo
            };
            series.push(line(
                format!("SGEMM roof {compute:.1} GFLOP/s"),
                vec![(start, compute), (hi.max(start), compute)],
            ));
        }
        if bandwidth.is_finite() {
            let ridge = if compute.is_finite() {
                compute / bandwidth
            } else {
                hi
            };
            series.push(line(
                format!("bandwidth roof {bandwidth:.1} GB/s"),
                vec![
                    (lo, bandwidth * lo),
                    (ridge.max(lo), bandwidth * ridge.max(lo)),
                ],
            ));
        }
        let mut names: Vec<String> = rs.iter().map(|r| text(r, "op")).collect();
        names.dedup();
        names.sort();
        names.dedup();
        for name in names {
            let pts: Vec<Point> = rs
                .iter()
                .filter(|r| text(r, "op") == name)
                .filter_map(point)
                .map(|(x, y)| Point {
                    x,
                    y: Some(y),
                    mark: Mark::Ok,
                    err: None,
                })
                .collect();
            series.push(Series {
                label: name,
                points: pts,
                markers: true,
            });
        }
        plots.push((
            format!("roofline_{device}"),
            Plot {
                title: format!("Roofline — operators on {device}, {host}"),
                x_desc: "arithmetic intensity, FLOP/byte (log)".into(),
                y_desc: "GFLOP/s (log)".into(),
                x_axis: Axis::Log(10.0),
                y_axis: Axis::Log(10.0),
                series,
                caption: "Each operator's rate against its arithmetic intensity, one line over \
                          its sizes, under the measured compute roof (SGEMM) and bandwidth roof \
                          (STREAM)."
                    .into(),
                ..Default::default()
            },
        ));
    }
    plots
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
        let mut b = mlp_row("autograd", TrialStatus::Ok, 0.25);
        b.peak_gpu_bytes = Some(123 << 20);
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
        assert_eq!(first[col("peak_gpu_bytes")], "");
        assert_eq!(
            lines[2].split(',').nth(col("peak_gpu_bytes")),
            Some("128974848")
        );
        assert_eq!(label(&a), "mlp tensors small");
    }

    #[test]
    fn mlp_tables_per_device_with_gpu_over_cpu_ratios() {
        let mut cpu = mlp_row("tensors", TrialStatus::Ok, 0.5);
        cpu.edp_js = Some(8.0);
        let mut gpu = mlp_row("tensors", TrialStatus::Ok, 0.01);
        gpu.device = "cuda".into();
        gpu.edp_js = Some(0.5);
        let other = mlp_row("autograd", TrialStatus::Ok, 0.4);
        let t = tables("tx2", &[cpu, gpu, other]);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].title, "MLP study on cpu — tx2");
        assert_eq!(t[0].rows.len(), 2);
        let col = |name: &str| t[1].header.iter().position(|h| *h == name).unwrap();
        let row = &t[1].rows[0];
        assert_eq!(row[col("ms/iteration")], "10.00");
        assert_eq!(row[col("GPU/CPU")], "50.00");
        assert_eq!(row[col("EDP CPU/GPU")], "16.00");
        // No ratio on the CPU's own rows.
        assert_eq!(t[0].rows[0][col("GPU/CPU")], "-");
    }

    #[test]
    fn roofline_has_both_measured_roofs_and_each_op() {
        let op = |name: &str, intensity: f64, gflops: f64, pct_flops: f64, pct_bw: f64| {
            let params: serde_json::Map<String, Value> =
                serde_json::from_str(&format!(r#"{{"op":"{name}","mb":8}}"#)).unwrap();
            let metrics: serde_json::Map<String, Value> = serde_json::from_str(&format!(
                r#"{{"intensity_flop_per_byte":{intensity},"gbyte_per_s":{},
                    "pct_measured_peak_flops":{pct_flops},"pct_measured_peak_bandwidth":{pct_bw}}}"#,
                gflops / intensity
            ))
            .unwrap();
            ResultRow {
                workload: "ops".into(),
                net: name.into(),
                device: "cpu".into(),
                status: TrialStatus::Ok,
                gflop_per_s: Some(gflops),
                params_text: serde_json::to_string(&params).unwrap(),
                params,
                metrics,
                ..Default::default()
            }
        };
        // add: 1/12 FLOP/byte at 1 GFLOP/s = 12 GB/s, 60 % of a 20 GB/s roof;
        // dot: 100 FLOP/byte at 40 GFLOP/s, 80 % of a 50 GFLOP/s roof.
        let rows = [
            op("add", 1.0 / 12.0, 1.0, 2.0, 60.0),
            op("dot", 100.0, 40.0, 80.0, 1.0),
        ];
        let plots = roofline_plots("tx2", &rows);
        assert_eq!(plots.len(), 1);
        let (stem, plot) = &plots[0];
        assert_eq!(stem, "roofline_cpu");
        let labels: Vec<&str> = plot.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels[0], "SGEMM roof 50.0 GFLOP/s");
        // dot's bandwidth share implies 40 GB/s, add's 20: the roof is the higher one.
        assert!(labels[1].starts_with("bandwidth roof"), "{labels:?}");
        assert_eq!(&labels[2..], ["add", "dot"]);
        let compute = plot.series[0].line();
        assert!(compute.iter().all(|&(_, y)| (y - 50.0).abs() < 1e-9));
        assert_eq!(plot.series[3].line(), vec![(100.0, 40.0)]);
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

    fn op_row(op: &str, mb: u32, status: TrialStatus, gflops: Option<f64>) -> ResultRow {
        let params: serde_json::Map<String, Value> =
            serde_json::from_str(&format!(r#"{{"op":"{op}","dtype":"f32","mb":{mb}}}"#)).unwrap();
        let metrics: serde_json::Map<String, Value> =
            serde_json::from_str(r#"{"pct_peak_flops":12.5}"#).unwrap();
        ResultRow {
            workload: "ops".into(),
            net: "ops".into(),
            device: "cpu".into(),
            status,
            host: "tx2".into(),
            gflop_per_s: gflops,
            params_text: serde_json::to_string(&params).unwrap(),
            params,
            metrics,
            ..Default::default()
        }
    }

    #[test]
    fn operator_figures_per_op_and_size_in_mflops() {
        let rows = [
            op_row("add", 8, TrialStatus::Ok, Some(0.5)),
            op_row("add", 32, TrialStatus::Ok, Some(0.75)),
            op_row("add", 128, TrialStatus::Oom, None),
        ];
        let plots = ops_plots("tx2", &rows);
        let stems: Vec<&str> = plots.iter().map(|(s, _)| s.as_str()).collect();
        assert!(stems.contains(&"ops_mflops_cpu") && stems.contains(&"ops_peak_cpu"));
        // No cuda trial: its figures have nothing to draw (the report leaves them out).
        for (stem, p) in &plots {
            if stem.ends_with("cuda") {
                assert!(!crate::report::plots::has_points(p), "{stem}");
            }
        }
        let (_, rate) = &plots[0];
        assert_eq!(rate.series.len(), 1);
        let s = &rate.series[0];
        assert_eq!(s.label, "add f32");
        assert_eq!(s.line(), [(8.0, 500.0), (32.0, 750.0)]);
        // The OOM trial is a point without a value, not left out.
        assert!(s.points.iter().any(|p| p.x == 128.0 && p.y.is_none()));
    }
}
