//! The operator study's part of a report: per device a table of every (op, size), the
//! rooflines and the figures of rate against size; one CSV file of its trials
//! (`ops_<machine>_edgebench.csv`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::render::aggregate::Repetitions;
use crate::render::plots::{Axis, Mark, Plot, Point, RefLine, Series};
use crate::render::select::{latest, num, text};
use crate::render::table::{with_runs_column, Table};
use crate::render::{rows, Context, Output, Section};
use crate::store::{ResultRow, Store, TrialStatus};
use serde_json::Value;

/// The ops workload's section.
pub(crate) struct Ops;

impl Section for Ops {
    fn name(&self) -> &'static str {
        "ops"
    }

    /// One file per engine of the `ops` trials.
    fn csv(
        &self,
        _store: &Store,
        rows: &[ResultRow],
        dir: &Path,
        machine: &str,
    ) -> anyhow::Result<Vec<PathBuf>> {
        rows::export(rows, "ops", dir, machine)
    }

    fn write(&self, rows: &[ResultRow], context: &Context, out: &mut Output) -> anyhow::Result<()> {
        out.plots.extend(roofline_plots(context.host, rows));
        out.plots.extend(ops_plots(context.host, rows));
        out.tables.extend(tables(context.host, rows));
        Ok(())
    }
}

/// The operator study's tables for one host's rows, two per device so that each fits a
/// narrow page: time and rate per (op, size), then its shares of the peaks and its energy.
/// Every figure is its key's mean over the `ok` repetitions; the time and the energies with
/// their 95 % confidence interval.
pub(crate) fn tables(host: &str, rows: &[ResultRow]) -> Vec<Table> {
    let of = |w: &str| -> Vec<&ResultRow> { rows.iter().filter(|r| r.workload == w).collect() };
    let mut out = Vec::new();
    let repetitions = Repetitions::of(rows);
    let repeated = repetitions.any_repeated();
    let ops = latest(&of("ops"));
    for device in ["cpu", "cuda"] {
        let rs: Vec<&ResultRow> = ops.iter().copied().filter(|r| r.device == device).collect();
        if rs.is_empty() {
            continue;
        }
        let mean = |r: &ResultRow, key: &'static str, digits: usize| {
            repetitions.mean_cell(r, |r| num(r, key), 1.0, digits)
        };
        out.push(Table {
            title: format!("Operators on {device} — {host}"),
            header: with_runs_column(
                vec![
                    "op",
                    "status",
                    "dtype",
                    "MiB",
                    "ms/execution",
                    "median ms",
                    "GFLOP/s",
                    "GB/s",
                    "FLOP/byte",
                    "flags",
                ],
                repeated,
                2,
                || "runs",
            ),
            rows: rs
                .iter()
                .map(|r| {
                    let row = vec![
                        text(r, "op"),
                        r.status.to_string(),
                        text(r, "dtype"),
                        text(r, "mb"),
                        repetitions.cell(r, |r| r.time_per_item_s, 1e3, 3),
                        repetitions.mean_cell(r, |r| r.time_per_item_median_s, 1e3, 3),
                        repetitions.mean_cell(r, |r| r.gflop_per_s, 1.0, 2),
                        mean(r, "gbyte_per_s", 2),
                        mean(r, "intensity_flop_per_byte", 3),
                        repetitions
                            .flags_with(r, |r| match above_memory_roof(r) {
                                true => vec!["CACHE".into()],
                                false => Vec::new(),
                            })
                            .join("; "),
                    ];
                    with_runs_column(row, repeated, 2, || repetitions.runs_cell(r))
                })
                .collect(),
        });
        out.push(Table {
            title: format!("Operators on {device}: share of peak and energy — {host}"),
            header: vec![
                "op",
                "dtype",
                "MiB",
                "% peak FLOP/s",
                "% peak GB/s",
                "% measured FLOP/s",
                "% measured GB/s",
                "mJ/execution",
                "J/GFLOP",
                "J/GB",
            ],
            rows: rs
                .iter()
                .map(|r| {
                    vec![
                        text(r, "op"),
                        text(r, "dtype"),
                        text(r, "mb"),
                        mean(r, "pct_peak_flops", 1),
                        mean(r, "pct_peak_bandwidth", 1),
                        mean(r, "pct_measured_peak_flops", 1),
                        mean(r, "pct_measured_peak_bandwidth", 1),
                        repetitions.cell(r, |r| r.energy_per_item_j, 1e3, 4),
                        repetitions.cell(r, |r| num(r, "joule_per_gflop"), 1.0, 4),
                        repetitions.cell(r, |r| num(r, "joule_per_gbyte"), 1.0, 4),
                    ]
                })
                .collect(),
        });
    }
    out
}

/// The operator study's figures per device (stems `ops_mflops_<device>`, `ops_peak_<device>`):
/// MFLOP/s and % of the peak FLOP/s of each op (one line per op and dtype) against its size in
/// MiB, both logarithmic; a trial that did not finish is in the no-value row.
pub(crate) fn ops_plots(host: &str, rows: &[ResultRow]) -> Vec<(String, Plot)> {
    let ops: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == super::KIND).collect();
    let ops = latest(&ops);
    let repetitions = Repetitions::of(rows);
    // A GEMM given as a shape: the MiB its three matrices take (the bytes it moves).
    let size_mb = |r: &ResultRow| {
        num(r, "mb").or_else(|| num(r, "bytes").map(|b| b / (1u64 << 20) as f64))
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
                let (y, err) = repetitions.point(r, value);
                by.entry((text(r, "op"), text(r, "dtype")))
                    .or_default()
                    .push(Point {
                        x,
                        y: (r.status == TrialStatus::Ok).then_some(y).flatten(),
                        mark: Mark::of(r),
                        err,
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
            x_desc: "size (MiB, log)".into(),
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

/// Whether an op ran faster than memory can feed it: above 100 % of the measured (STREAM)
/// bandwidth, its working set was served from a cache, whose roof is higher than memory's.
fn above_memory_roof(r: &ResultRow) -> bool {
    num(r, "pct_measured_peak_bandwidth").is_some_and(|p| p > 100.0)
}

/// One roofline per device and dtype with operator trials (stem `roofline_<device>` for f32,
/// `roofline_<device>_<dtype>` otherwise): x arithmetic intensity (FLOP/byte), y GFLOP/s, both
/// logarithmic; the measured roofs (the dtype's GEMM, the best STREAM rate the ops were judged
/// against) and the theoretical ones (the board's or the CPU's peaks), each op a line over its
/// sizes, and ringed the points above the memory roof (their working set fits in a cache).
pub(crate) fn roofline_plots(host: &str, rows: &[ResultRow]) -> Vec<(String, Plot)> {
    let ops: Vec<&ResultRow> = rows
        .iter()
        .filter(|r| r.workload == super::KIND && r.status == TrialStatus::Ok)
        .collect();
    let ops = latest(&ops);
    let mut groups: BTreeMap<(String, String), Vec<&ResultRow>> = BTreeMap::new();
    for r in ops {
        let dtype = match r.params.get("dtype") {
            Some(Value::String(d)) => d.clone(),
            _ => "f32".into(),
        };
        groups.entry((r.device.clone(), dtype)).or_default().push(r);
    }
    let mut plots = Vec::new();
    for ((device, dtype), rs) in groups {
        let point = |r: &&ResultRow| Some((num(r, "intensity_flop_per_byte")?, r.gflop_per_s?));
        let best = |rate: fn(&ResultRow) -> Option<f64>, pct_key: &str| {
            rs.iter()
                .filter_map(|r| roof(rate(r), num(r, pct_key)))
                .fold(f64::NAN, f64::max)
        };
        let compute = best(|r| r.gflop_per_s, "pct_measured_peak_flops");
        let bandwidth = best(|r| num(r, "gbyte_per_s"), "pct_measured_peak_bandwidth");
        let compute_theory = best(|r| r.gflop_per_s, "pct_peak_flops");
        let bandwidth_theory = best(|r| num(r, "gbyte_per_s"), "pct_peak_bandwidth");
        let xs: Vec<f64> = rs.iter().filter_map(point).map(|(x, _)| x).collect();
        if xs.is_empty() {
            continue;
        }
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min) / 4.0;
        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max) * 4.0;
        let gemm = match dtype.as_str() {
            "f64" => "DGEMM",
            _ => "SGEMM",
        };
        let mut roofs = Vec::new();
        for (compute, bandwidth, what) in [
            (compute, bandwidth, "measured"),
            (compute_theory, bandwidth_theory, "theoretical"),
        ] {
            roofs.extend(roof_lines(compute, bandwidth, lo, hi, what, gemm));
        }
        let mut series = Vec::new();
        let mut names: Vec<String> = rs.iter().map(|r| text(r, "op")).collect();
        names.sort();
        names.dedup();
        for name in names {
            let mut pts: Vec<(f64, f64)> = rs
                .iter()
                .filter(|r| text(r, "op") == name)
                .filter_map(point)
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let sizes: Vec<String> = rs
                .iter()
                .filter(|r| text(r, "op") == name)
                .map(|r| text(r, "mb"))
                .filter(|mb| mb != "-")
                .collect();
            series.push(Series {
                label: match sizes.is_empty() {
                    true => name,
                    false => format!("{name} ({} MiB)", sizes.join(", ")),
                },
                points: pts
                    .into_iter()
                    .map(|(x, y)| Point {
                        x,
                        y: Some(y),
                        mark: Mark::Ok,
                        err: None,
                    })
                    .collect(),
                markers: true,
            });
        }
        let highlights = rs
            .iter()
            .filter(|r| above_memory_roof(r))
            .filter_map(|r| {
                let (x, y) = point(r)?;
                Some((
                    x,
                    y,
                    format!(
                        "{} {} MiB: {:.0} % of memory bandwidth (cache)",
                        text(r, "op"),
                        text(r, "mb"),
                        num(r, "pct_measured_peak_bandwidth").unwrap_or(f64::NAN)
                    ),
                ))
            })
            .collect();
        // A ringed point's size is in its legend note already.
        let point_labels = rs
            .iter()
            .filter(|r| !above_memory_roof(r))
            .filter_map(|r| {
                let (x, y) = point(r)?;
                let mb = text(r, "mb");
                (mb != "-").then(|| (x, y, format!("{mb} MiB")))
            })
            .collect();
        let stem = match dtype.as_str() {
            "f32" => format!("roofline_{device}"),
            _ => format!("roofline_{device}_{dtype}"),
        };
        plots.push((
            stem,
            Plot {
                title: format!("Roofline — {dtype} operators on {device}, {host}"),
                x_desc: "arithmetic intensity, FLOP/byte".into(),
                y_desc: "GFLOP/s".into(),
                x_axis: Axis::Log(10.0),
                y_axis: Axis::Log(10.0),
                series,
                reference_lines: roofs,
                highlights,
                point_labels,
                caption: format!(
                    "Each {dtype} operator's rate against its arithmetic intensity, one line over \
                     its sizes, under the measured roofs ({gemm}, STREAM) and the theoretical \
                     ones; ringed: above the memory roof (the working set fits in a cache)."
                ),
                ..Default::default()
            },
        ));
    }
    plots
}

/// The two lines of one roofline: the compute roof from the ridge point on, the bandwidth roof
/// up to it; either left out when unknown (NaN). Theoretical roofs are dashed.
fn roof_lines(
    compute: f64,
    bandwidth: f64,
    lo: f64,
    hi: f64,
    what: &str,
    gemm: &str,
) -> Vec<RefLine> {
    let line = |label: String, pts: [(f64, f64); 2]| RefLine {
        label,
        points: pts.to_vec(),
        dashed: what != "measured",
    };
    let ridge = compute / bandwidth;
    let mut out = Vec::new();
    if compute.is_finite() {
        let start = if ridge.is_finite() { ridge.max(lo) } else { lo };
        let label = match what {
            "measured" => format!("{gemm} roof {compute:.1} GFLOP/s"),
            _ => format!("{what} compute roof {compute:.1} GFLOP/s"),
        };
        out.push(line(label, [(start, compute), (hi.max(start), compute)]));
    }
    if bandwidth.is_finite() {
        let end = if ridge.is_finite() { ridge.max(lo) } else { hi };
        out.push(line(
            format!("{what} bandwidth roof {bandwidth:.1} GB/s"),
            [(lo, bandwidth * lo), (end, bandwidth * end)],
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut rows = vec![
            op("add", 1.0 / 12.0, 1.0, 2.0, 60.0),
            op("dot", 100.0, 40.0, 80.0, 1.0),
        ];
        let plots = roofline_plots("tx2", &rows);
        assert_eq!(plots.len(), 1);
        assert!(plots[0].1.highlights.is_empty());
        let (stem, plot) = &plots[0];
        assert_eq!(stem, "roofline_cpu");
        let roofs: Vec<&str> = plot
            .reference_lines
            .iter()
            .map(|r| r.label.as_str())
            .collect();
        assert_eq!(roofs[0], "SGEMM roof 50.0 GFLOP/s");
        // dot's bandwidth share implies 40 GB/s, add's 20: the roof is the higher one.
        assert!(roofs[1].starts_with("measured bandwidth roof"), "{roofs:?}");
        // The roofs are lines, not data: no series, no marker; the measured ones solid.
        assert!(plot.reference_lines.iter().all(|r| !r.dashed));
        let labels: Vec<&str> = plot.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["add (8 MiB)", "dot (8 MiB)"]);
        let compute = &plot.reference_lines[0].points;
        assert!(compute.iter().all(|&(_, y)| (y - 50.0).abs() < 1e-9));
        assert_eq!(plot.series[1].line(), vec![(100.0, 40.0)]);

        // f64 ops get a roofline of their own under the DGEMM roof, beside the theoretical
        // roofs; an op above the memory roof is ringed and flagged.
        let f64_op = |name, intensity, gflops, pct_flops, pct_bw| {
            let mut r = op(name, intensity, gflops, pct_flops, pct_bw);
            r.params.insert("dtype".into(), "f64".into());
            r.params_text = serde_json::to_string(&r.params).unwrap();
            r.metrics
                .insert("pct_peak_flops".into(), (pct_flops / 2.0).into());
            r
        };
        rows.push(f64_op("scalar", 1.0 / 16.0, 2.0, 10.0, 180.0));
        rows.push(f64_op("dot", 50.0, 10.0, 50.0, 1.0));
        let plots = roofline_plots("tx2", &rows);
        let stems: Vec<&str> = plots.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(stems, ["roofline_cpu", "roofline_cpu_f64"]);
        let f64_plot = &plots[1].1;
        let roofs: Vec<(&str, bool)> = f64_plot
            .reference_lines
            .iter()
            .map(|r| (r.label.as_str(), r.dashed))
            .collect();
        assert_eq!(roofs[0], ("DGEMM roof 20.0 GFLOP/s", false), "{roofs:?}");
        assert!(
            roofs.contains(&("theoretical compute roof 40.0 GFLOP/s", true)),
            "{roofs:?}"
        );
        assert_eq!(f64_plot.highlights.len(), 1);
        assert!(f64_plot.highlights[0].2.starts_with("scalar 8 MiB: 180 %"));
        let t = tables("tx2", &rows);
        let col = |name: &str| t[0].header.iter().position(|h| *h == name).unwrap();
        let flags: Vec<&str> = t[0].rows.iter().map(|r| r[col("flags")].as_str()).collect();
        assert_eq!(flags, ["", "", "CACHE", ""]);
    }

    fn op_row(op: &str, mb: u32, status: TrialStatus, gflops: Option<f64>) -> ResultRow {
        let metrics: serde_json::Map<String, Value> =
            serde_json::from_str(r#"{"pct_peak_flops":12.5}"#).unwrap();
        let row = ResultRow {
            workload: "ops".into(),
            net: "ops".into(),
            device: "cpu".into(),
            status,
            host: "tx2".into(),
            gflop_per_s: gflops,
            metrics,
            ..Default::default()
        };
        crate::testkit::rows::with_params(
            row,
            serde_json::json!({"op": op, "dtype": "f32", "mb": mb}),
        )
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
