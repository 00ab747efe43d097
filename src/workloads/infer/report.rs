//! The inference workload's part of a report: per device a table of every (model, scenario,
//! batch) with latency percentiles, throughput, energy and EDP per inference; a latency CDF per
//! model and device from the stored queries; throughput and energy per inference against the
//! batch; one CSV file of its trials (`infer_<machine>_edgebench.csv`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::render::aggregate::Repetitions;
use crate::render::plots::{Axis, Mark, Plot, Point, Series, Unit};
use crate::render::select::{latest, num, text};
use crate::render::table::{with_runs_column, Table};
use crate::render::{rows, Context, Output, Section};
use crate::store::{ResultRow, Store, TrialStatus};

/// The most points one CDF line draws (evenly spaced quantiles of its queries).
const CDF_POINTS: usize = 200;

/// The infer workload's section.
pub(crate) struct Infer;

/// EDP per inference: energy per inference × mean latency (J·s).
pub(crate) fn edp_per_inference(r: &ResultRow) -> Option<f64> {
    Some(num(r, "energy_per_inference_j")? * num(r, "latency_mean_s")?)
}

impl Section for Infer {
    fn name(&self) -> &'static str {
        "infer"
    }

    fn csv(
        &self,
        _store: &Store,
        rows: &[ResultRow],
        dir: &Path,
        machine: &str,
    ) -> anyhow::Result<Vec<PathBuf>> {
        rows::export(rows, "infer", dir, machine)
    }

    fn write(&self, rows: &[ResultRow], context: &Context, out: &mut Output) -> anyhow::Result<()> {
        let infer: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == super::KIND).collect();
        if infer.is_empty() {
            return Ok(());
        }
        let infer = latest(&infer);
        out.tables.extend(tables(context.host, rows));
        out.plots.extend(cdf_plots(context, &infer)?);
        out.plots.extend(batch_plots(context.host, rows, &infer));
        Ok(())
    }
}

/// Per device: model, scenario, batch, p50/p90/p99 ms, samples/s, mJ/inference, EDP per
/// inference, flags. Every figure is its key's mean over the `ok` repetitions; p50 and the
/// energies with their 95 % confidence interval, and a column of each key's runs when a key
/// was run more than once (`--repeat`).
pub(crate) fn tables(host: &str, rows: &[ResultRow]) -> Vec<Table> {
    let infer: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == super::KIND).collect();
    let infer = latest(&infer);
    let repetitions = Repetitions::of(rows);
    let repeated = repetitions.any_repeated();
    let mut devices: Vec<&str> = infer.iter().map(|r| r.device.as_str()).collect();
    devices.sort_unstable();
    devices.dedup();
    devices
        .into_iter()
        .map(|device| Table {
            title: format!("Inference on {device} — {host}"),
            header: with_runs_column(
                vec![
                    "model",
                    "scenario",
                    "batch",
                    "status",
                    "queries",
                    "p50 ms",
                    "p90 ms",
                    "p99 ms",
                    "samples/s",
                    "mJ/inference",
                    "EDP µJ·s/inference",
                    "flags",
                ],
                repeated,
                4,
                || "runs",
            ),
            rows: infer
                .iter()
                .filter(|r| r.device == device)
                .map(|r| {
                    let mean = |key: &'static str, scale: f64, digits: usize| {
                        repetitions.mean_cell(r, |r| num(r, key), scale, digits)
                    };
                    let mut flags = repetitions.flags_with(r, |r| {
                        match r.metrics.get("latency_bound_held").and_then(|v| v.as_bool()) {
                            Some(true) => vec!["p99 held".into()],
                            Some(false) => vec!["p99 OVER BOUND".into()],
                            None => Vec::new(),
                        }
                    });
                    // The bound held only where every repetition held it.
                    if flags.iter().any(|f| f == "p99 OVER BOUND") {
                        flags.retain(|f| f != "p99 held");
                    }
                    let row = vec![
                        r.net.clone(),
                        text(r, "scenario"),
                        r.batch.to_string(),
                        r.status.to_string(),
                        mean("queries", 1.0, 0),
                        repetitions.cell(r, |r| num(r, "latency_p50_s"), 1e3, 3),
                        mean("latency_p90_s", 1e3, 3),
                        mean("latency_p99_s", 1e3, 3),
                        mean("samples_per_s", 1.0, 1),
                        repetitions.cell(r, |r| num(r, "energy_per_inference_j"), 1e3, 3),
                        repetitions.cell(r, edp_per_inference, 1e6, 3),
                        flags.join("; "),
                    ];
                    with_runs_column(row, repeated, 4, || repetitions.runs_cell(r))
                })
                .collect(),
        })
        .collect()
}

/// The measured queries' latencies of a trial, sorted (warm-up and, for a search, the other
/// probes left out as the trial's figures leave them: the queries counted are the last
/// `queries` of its epoch).
fn measured_latencies(store: &Store, r: &ResultRow) -> anyhow::Result<Vec<f64>> {
    let records = store.iterations(r.trial_rowid)?;
    let queries = num(r, "queries").unwrap_or(0.0) as usize;
    let epoch = match r.metrics.get("found_qps").and_then(|v| v.as_f64()) {
        Some(found) => r
            .metrics
            .get("probes")
            .and_then(|p| p.as_array())
            .and_then(|p| {
                p.iter()
                    .position(|p| p.get("qps").and_then(|q| q.as_f64()) == Some(found))
            })
            .map(|i| i + 1),
        None => None,
    };
    let mut lat: Vec<f64> = records
        .iter()
        .filter(|q| epoch.is_none_or(|e| q.epoch == e))
        .map(|q| q.step_s)
        .collect();
    lat = lat.split_off(lat.len().saturating_sub(queries));
    lat.sort_by(f64::total_cmp);
    Ok(lat)
}

/// One latency CDF per model and device (stem `infer_cdf_<model>_<device>`): a line per
/// scenario and batch, latency on a log axis against the fraction of queries at most that
/// long.
fn cdf_plots(context: &Context, infer: &[&ResultRow]) -> anyhow::Result<Vec<(String, Plot)>> {
    let mut by: BTreeMap<(String, String), Vec<Series>> = BTreeMap::new();
    for r in infer.iter().filter(|r| r.status == TrialStatus::Ok) {
        let lat = measured_latencies(context.store, r)?;
        if lat.is_empty() {
            continue;
        }
        let n = lat.len();
        let step = n.div_ceil(CDF_POINTS).max(1);
        let points = (0..n)
            .step_by(step)
            .chain(std::iter::once(n - 1))
            .map(|i| Point {
                x: lat[i],
                y: Some((i + 1) as f64 / n as f64),
                mark: Mark::Ok,
                err: None,
            })
            .collect();
        by.entry((r.net.clone(), r.device.clone()))
            .or_default()
            .push(Series {
                label: format!("{} batch {}", text(r, "scenario"), r.batch),
                points,
                markers: false,
            });
    }
    let host = context.host;
    Ok(by
        .into_iter()
        .map(|((model, device), series)| {
            let stem: String = format!("infer_cdf_{model}_{device}")
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
                .collect();
            (
                stem,
                Plot {
                    title: format!("Latency CDF: {model} on {device} — {host}"),
                    x_desc: "query latency".into(),
                    y_desc: "fraction of queries".into(),
                    y_unit: Unit::None,
                    x_axis: Axis::Log(10.0),
                    y_axis: Axis::Linear,
                    series,
                    caption: format!(
                        "Share of the measured queries of {model} on {device} answered within a \
                         latency, per scenario and batch (every query from the iterations \
                         table)."
                    ),
                    ..Default::default()
                },
            )
        })
        .collect())
}

/// Offline throughput and energy per inference against the batch (stems `infer_throughput`,
/// `infer_energy`), a line per model and device, mean and spread over `--repeat`.
fn batch_plots(host: &str, rows: &[ResultRow], infer: &[&ResultRow]) -> Vec<(String, Plot)> {
    let repetitions = Repetitions::of(rows);
    let offline: Vec<&ResultRow> = infer
        .iter()
        .copied()
        .filter(|r| text(r, "scenario") == "offline")
        .collect();
    if offline.is_empty() {
        return Vec::new();
    }
    let figure = |stem: &str, what: &str, unit: Unit, value: fn(&ResultRow) -> Option<f64>| {
        let mut by: BTreeMap<(String, String), Vec<Point>> = BTreeMap::new();
        for r in &offline {
            let (y, err) = repetitions.point(r, value);
            by.entry((r.net.clone(), r.device.clone()))
                .or_default()
                .push(Point {
                    x: r.batch as f64,
                    y: (r.status == TrialStatus::Ok).then_some(y).flatten(),
                    mark: Mark::of(r),
                    err,
                });
        }
        let series = by
            .into_iter()
            .map(|((model, device), mut points)| {
                points.sort_by(|a, b| a.x.total_cmp(&b.x));
                Series {
                    label: format!("{model} {device}"),
                    points,
                    markers: true,
                }
            })
            .collect();
        (
            stem.to_string(),
            Plot {
                title: format!("Inference (offline): {what} per batch — {host}"),
                x_desc: "batch".into(),
                y_desc: what.into(),
                y_unit: unit,
                x_axis: Axis::Log(2.0),
                y_axis: Axis::Log(10.0),
                series,
                caption: format!("Offline scenario: {what} of each model on each device per batch."),
                ..Default::default()
            },
        )
    };
    let mut out = vec![figure(
        "infer_throughput",
        "samples per second",
        Unit::None,
        |r| num(r, "samples_per_s"),
    )];
    if offline.iter().any(|r| num(r, "energy_per_inference_j").is_some()) {
        out.push(figure(
            "infer_energy",
            "energy per inference",
            Unit::Joules,
            |r| num(r, "energy_per_inference_j"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn row(device: &str, scenario: &str, batch: usize, p50: f64, held: Option<bool>) -> ResultRow {
        let mut metrics: serde_json::Map<String, Value> = serde_json::from_value(json!({
            "latency_p50_s": p50, "latency_p90_s": 2.0 * p50, "latency_p99_s": 3.0 * p50,
            "latency_mean_s": p50, "samples_per_s": batch as f64 / p50, "queries": 100,
            "energy_per_inference_j": 0.5
        }))
        .unwrap();
        if let Some(h) = held {
            metrics.insert("latency_bound_held".into(), h.into());
        }
        let row = ResultRow {
            workload: "infer".into(),
            net: "resnet".into(),
            device: device.into(),
            batch,
            status: TrialStatus::Ok,
            host: "orin".into(),
            metrics,
            ..Default::default()
        };
        crate::testkit::rows::with_params(row, json!({"scenario": scenario}))
    }

    #[test]
    fn one_table_per_device_with_percentiles_energy_edp_and_the_bound() {
        let rows = [
            row("cpu", "single-stream", 1, 0.004, None),
            row("cpu", "server", 1, 0.010, Some(false)),
            row("cuda", "offline", 8, 0.002, None),
        ];
        let t = tables("orin", &rows);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].title, "Inference on cpu — orin");
        let col = |name: &str| t[0].header.iter().position(|h| *h == name).unwrap();
        let first = &t[0].rows[0];
        assert_eq!(first[col("p50 ms")], "4.000");
        assert_eq!(first[col("p99 ms")], "12.000");
        assert_eq!(first[col("samples/s")], "250.0");
        assert_eq!(first[col("mJ/inference")], "500.000");
        // 0.5 J x 4 ms = 2000 µJ·s.
        assert_eq!(first[col("EDP µJ·s/inference")], "2000.000");
        assert!(t[0].rows[1][col("flags")].contains("OVER BOUND"));
        assert_eq!(t[1].rows[0][col("scenario")], "offline");
    }
}
