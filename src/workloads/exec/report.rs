//! Engines as a series: the frameworks measured with `edgebench exec` or imported from their
//! logs beside edgebench's own trainer (the `cnn` workload, engine `edgebench`). Per engine:
//! time per image against batch, GPU-over-CPU speedup per (net, batch), loss against iteration
//! per (net, device), and energy and EDP where they were measured; the studies' CSV files of
//! every engine, edgebench's included (`{loss,times}_<machine>_<engine>.csv`), and one file of
//! the `exec` trials per engine (`exec_<machine>_<engine>.csv`).
//!
//! Each (engine, net, device, batch) is one point: the latest `ok` trial, else the latest (as
//! the CNN tables choose).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::record::IterationRecord;
use crate::render::aggregate::Repetitions;
use crate::render::figures::{loss_by_batch, loss_plot};
use crate::render::files::{file_name_part, safe_name, write_atomic};
use crate::render::fmt::{fmt, sci, speedups as gpu_over_cpu};
use crate::render::plots::{Axis, Mark, Plot, Point, Series, Unit};
use crate::render::select::{engine_of, latest_per_key, OWN};
use crate::render::studies::{engine_files, mean_step_s};
use crate::render::table::{with_runs_column, Table};
use crate::render::{rows, Context, Output, Section};
use crate::store::{ResultRow, Store, TrialStatus};
use crate::workloads::exec::{steps_covered, total_time_s};

/// The engines' section (the `exec` workload beside edgebench's own trainer).
pub(crate) struct Exec;

impl Section for Exec {
    fn name(&self) -> &'static str {
        "exec"
    }

    /// The studies' files of every engine, edgebench's first (always written), then each other
    /// engine's by name; then the `exec` trials' files.
    fn csv(
        &self,
        store: &Store,
        rows: &[ResultRow],
        dir: &Path,
        machine: &str,
    ) -> anyhow::Result<Vec<PathBuf>> {
        // Engine (as a file name part) -> its trials.
        let mut by_engine: BTreeMap<String, Vec<ResultRow>> = BTreeMap::new();
        for row in rows {
            if let Some(engine) = engine_of(row) {
                by_engine
                    .entry(file_name_part(&engine))
                    .or_default()
                    .push(row.clone());
            }
        }
        let own = by_engine.remove(OWN).unwrap_or_default();
        let mut written = Vec::new();
        for (engine, rows) in std::iter::once((OWN.to_string(), own)).chain(by_engine) {
            let (loss, times) = engine_files(store, rows, avg_time)?;
            let loss_path = dir.join(format!("loss_{machine}_{engine}.csv"));
            let times_path = dir.join(format!("times_{machine}_{engine}.csv"));
            write_atomic(&loss_path, loss)?;
            write_atomic(&times_path, times)?;
            written.extend([loss_path, times_path]);
        }
        written.extend(rows::export(rows, "exec", dir, machine)?);
        Ok(written)
    }

    fn write(&self, rows: &[ResultRow], context: &Context, out: &mut Output) -> anyhow::Result<()> {
        out.plots.extend(plots(context.host, rows));
        out.plots
            .extend(loss_plots(context.store, context.host, rows)?);
        out.tables.extend(tables(context.host, rows));
        Ok(())
    }
}

/// Mean seconds per iteration of a trial's records. edgebench records every step, so the
/// plain mean; an external command's record may stand for several iterations (a log showing
/// every K-th step) and counts for as many.
fn avg_time(row: &ResultRow, iters: &[IterationRecord]) -> f64 {
    if row.workload == super::KIND {
        let covered: usize = steps_covered(iters).iter().sum();
        total_time_s(iters, 0) / covered as f64
    } else {
        mean_step_s(iters)
    }
}

/// (engine, net, device, batch) -> the trial that stands for it.
pub(crate) type Picked = BTreeMap<(String, String, String, usize), ResultRow>;

/// The trial standing for each (engine, net, device, batch) among `rows` (oldest first).
pub(crate) fn pick(rows: &[ResultRow]) -> Picked {
    latest_per_key(rows, |r| {
        engine_of(r).map(|engine| (engine, r.net.clone(), r.device.clone(), r.batch))
    })
    .into_iter()
    .map(|(k, r)| (k, r.clone()))
    .collect()
}

/// Whether the rows hold any trial of an engine other than edgebench's (only then do the
/// engine tables and plots appear).
pub(crate) fn has_other_engines(rows: &[ResultRow]) -> bool {
    rows.iter().any(|r| engine_of(r).is_some_and(|e| e != OWN))
}

/// GPU-over-CPU speedup per (engine, net, batch): the CPU's mean time per image over the
/// GPU's, each over its key's `ok` repetitions among `rows`, where both ran the same work
/// (epochs, images, data set).
pub(crate) fn speedups(rows: &[ResultRow]) -> BTreeMap<(String, String, usize), f64> {
    let key = |r: &ResultRow| (engine_of(r).unwrap_or_default(), r.net.clone(), r.batch);
    gpu_over_cpu(rows.iter().filter(|r| engine_of(r).is_some()), key)
        .into_iter()
        // A GPU time of zero gives no ratio.
        .filter(|(_, s)| s.is_finite())
        .collect()
}

fn imported(r: &ResultRow) -> bool {
    r.metrics.get("imported_log").is_some_and(|v| !v.is_null())
}

/// One table per engine other than edgebench's (whose trials have the CNN tables) and device,
/// then the
/// GPU-over-CPU speedup of every engine side by side; nothing when only edgebench ran. Every
/// figure is its key's mean over the `ok` repetitions; the time and the energies with their
/// 95 % confidence interval.
pub(crate) fn tables(host: &str, rows: &[ResultRow]) -> Vec<Table> {
    if !has_other_engines(rows) {
        return Vec::new();
    }
    let picked = pick(rows);
    let sp = speedups(rows);
    let repetitions = Repetitions::of(rows);
    let repeated = repetitions.any_repeated();
    // One table per engine and device, as the CNN tables are per net and device.
    let mut by_engine: BTreeMap<(&str, &str), Vec<&ResultRow>> = BTreeMap::new();
    for ((engine, _, device, _), r) in &picked {
        by_engine
            .entry((engine.as_str(), device.as_str()))
            .or_default()
            .push(r);
    }
    let mut out = Vec::new();
    for ((engine, device), rs) in by_engine.iter().filter(|((e, _), _)| *e != OWN) {
        out.push(Table {
            title: format!("Engine {engine} on {device} — {host}"),
            header: with_runs_column(
                vec![
                    "net",
                    "batch",
                    "status",
                    "ms/image",
                    "median ms",
                    "± IQR ms",
                    "images/s",
                    "GPU/CPU",
                    "J/image",
                    "EDP J·s",
                    "EDP/image J·s",
                    "iterations",
                    "source",
                    "flags",
                ],
                repeated,
                3,
                || "runs",
            ),
            rows: rs
                .iter()
                .map(|r| {
                    let speedup = (r.device == "cuda")
                        .then(|| sp.get(&(engine.to_string(), r.net.clone(), r.batch)))
                        .flatten()
                        .copied();
                    // An energy as the key's mean; `not measured` where no trial of the key
                    // had a power record (imported from a log, or run without --power).
                    let energy = |value: fn(&ResultRow) -> Option<f64>, digits: usize| {
                        match repetitions.mean(r, |r| r.energy_j) {
                            None if r.energy_j.is_none() => "not measured".to_string(),
                            _ if digits == 0 => {
                                repetitions.cell_shown(r, value, |v| sci(Some(v)))
                            }
                            _ => repetitions.cell(r, value, 1.0, digits),
                        }
                    };
                    let row = vec![
                        r.net.clone(),
                        r.batch.to_string(),
                        r.status.to_string(),
                        repetitions.cell(r, |r| r.time_per_item_s, 1e3, 3),
                        repetitions.mean_cell(r, |r| r.time_per_item_median_s, 1e3, 3),
                        repetitions.mean_cell(r, |r| r.time_per_image_spread_s, 1e3, 3),
                        repetitions.mean_cell(r, |r| r.images_per_s, 1.0, 2),
                        fmt(speedup, 1.0, 2),
                        energy(|r| r.energy_per_item_j, 4),
                        energy(|r| r.edp_js, 4),
                        energy(|r| r.edp_per_item_js, 0),
                        // A command's step count is not known ahead (planned 0).
                        {
                            let n = repetitions
                                .mean(r, |r| Some(r.iterations as f64))
                                .map_or_else(|| r.iterations.to_string(), |n| format!("{n:.0}"));
                            match r.iterations_planned {
                                0 => n,
                                planned => format!("{n}/{planned}"),
                            }
                        },
                        match imported(r) {
                            true => "imported log".to_string(),
                            false => "measured".to_string(),
                        },
                        repetitions.flags(r).join("; "),
                    ];
                    with_runs_column(row, repeated, 3, || repetitions.runs_cell(r))
                })
                .collect(),
        });
    }
    if !sp.is_empty() {
        out.push(Table {
            title: format!("GPU-over-CPU speedup per engine — {host}"),
            header: vec![
                "engine",
                "net",
                "batch",
                "CPU ms/image",
                "GPU ms/image",
                "GPU/CPU",
            ],
            rows: sp
                .iter()
                .map(|((engine, net, batch), s)| {
                    let time = |device: &str| {
                        picked
                            .get(&(engine.clone(), net.clone(), device.to_string(), *batch))
                            .and_then(|r| repetitions.mean(r, |r| r.time_per_image_s))
                    };
                    vec![
                        engine.clone(),
                        net.clone(),
                        batch.to_string(),
                        fmt(time("cpu"), 1e3, 3),
                        fmt(time("cuda"), 1e3, 3),
                        fmt(Some(*s), 1.0, 2),
                    ]
                })
                .collect(),
        });
    }
    out
}

/// One series per (engine, net, device) of `value` against batch: a repeated key's mean with
/// its confidence interval.
fn batch_series(
    picked: &Picked,
    repetitions: &Repetitions,
    value: impl Fn(&ResultRow) -> Option<f64>,
) -> Vec<Series> {
    let mut by: BTreeMap<(&str, &str, &str), Vec<Point>> = BTreeMap::new();
    for ((engine, net, device, batch), r) in picked {
        let (y, err) = repetitions.point(r, &value);
        by.entry((engine, net, device)).or_default().push(Point {
            x: *batch as f64,
            y: (r.status == TrialStatus::Ok).then_some(y).flatten(),
            mark: Mark::of(r),
            err,
        });
    }
    by.into_iter()
        .map(|((engine, net, device), points)| Series {
            label: format!("{engine} {net} {device}"),
            points,
            markers: true,
        })
        .collect()
}

fn batch_plot(
    title: String,
    (y_desc, y_unit): (&str, Unit),
    y_axis: Axis,
    series: Vec<Series>,
    caption: &str,
) -> Plot {
    Plot {
        title,
        x_desc: "batch size".into(),
        y_desc: y_desc.into(),
        y_unit,
        x_axis: Axis::Log(2.0),
        y_axis,
        series,
        caption: caption.into(),
        ..Default::default()
    }
}

/// The engines' plots of one host, as (file stem, plot): time per image and GPU-over-CPU
/// speedup against batch per engine, and energy per image and EDP where some trial of an
/// engine other than edgebench's was measured; nothing when only edgebench ran.
pub(crate) fn plots(host: &str, rows: &[ResultRow]) -> Vec<(String, Plot)> {
    if !has_other_engines(rows) {
        return Vec::new();
    }
    let picked = pick(rows);
    let repetitions = Repetitions::of(rows);
    let mut out = vec![(
        "time_per_image_engines".to_string(),
        batch_plot(
            format!("Time per image vs batch per engine — {host}"),
            ("time per image", Unit::Seconds),
            Axis::Log(10.0),
            batch_series(&picked, &repetitions, |r| r.time_per_image_s),
            "Time per image against batch size, one line per engine, net and device; an engine \
             whose output gave no time is in the no-value row.",
        ),
    )];
    let sp = speedups(rows);
    if !sp.is_empty() {
        let mut by: BTreeMap<(&str, &str), Vec<Point>> = BTreeMap::new();
        for ((engine, net, batch), s) in &sp {
            by.entry((engine, net)).or_default().push(Point {
                x: *batch as f64,
                y: Some(*s),
                mark: Mark::Ok,
                err: None,
            });
        }
        let series = by
            .into_iter()
            .map(|((engine, net), points)| Series {
                label: format!("{engine} {net}"),
                points,
                markers: true,
            })
            .collect();
        out.push((
            "speedup_engines".to_string(),
            batch_plot(
                format!("GPU-over-CPU speedup vs batch per engine — {host}"),
                ("GPU-over-CPU speedup (x)", Unit::None),
                Axis::Linear,
                series,
                "CPU time per image over GPU time per image of the same engine, net, batch and \
                 work.",
            ),
        ));
    }
    let measured: BTreeSet<&str> = picked
        .iter()
        .filter(|(_, r)| r.energy_per_image_j.is_some())
        .map(|((engine, ..), _)| engine.as_str())
        .collect();
    if measured.iter().any(|e| *e != OWN) {
        let with_energy: Picked = picked
            .iter()
            .filter(|((engine, ..), _)| measured.contains(engine.as_str()))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        // Numbered: energies resting on fewer than 10 sensor readings.
        let few_readings: Vec<(f64, f64, String)> = with_energy
            .iter()
            .filter_map(|((engine, net, device, batch), r)| {
                let n = r.power_low_samples?;
                let (y, _) = repetitions.point(r, |r| r.energy_per_image_j);
                Some((
                    *batch as f64,
                    y?,
                    format!("{engine} {net} {device}: {n} sensor readings"),
                ))
            })
            .collect();
        out.push((
            "energy_per_image_engines".to_string(),
            Plot {
                highlights: few_readings,
                ..batch_plot(
                    format!("Energy per image vs batch per engine — {host}"),
                    ("energy per image", Unit::Joules),
                    Axis::Linear,
                    batch_series(&with_energy, &repetitions, |r| r.energy_per_image_j),
                    "Energy per image against batch size, one line per engine, net and device; \
                     numbered: energies from few sensor readings.",
                )
            },
        ));
        out.push((
            "edp_engines".to_string(),
            batch_plot(
                format!("Energy-delay product per image vs batch per engine — {host}"),
                ("EDP per image", Unit::JouleSeconds),
                Axis::Log(10.0),
                batch_series(&with_energy, &repetitions, |r| r.edp_per_item_js),
                "Energy per image times time per image (J/img x s/img), comparable across \
                 engines and batches whatever the length of each run, one line per engine, net \
                 and device.",
            ),
        ));
    }
    out
}

/// The thesis' loss figures (its Graphs 5.1-5.5) for every engine other than edgebench's
/// (whose own are `loss_<net>_<device>`): loss against iteration per batch, one figure per
/// (engine, net, device), stem `loss_<engine>_<net>_<device>`.
pub(crate) fn loss_plots(
    store: &Store,
    host: &str,
    rows: &[ResultRow],
) -> anyhow::Result<Vec<(String, Plot)>> {
    let picked = pick(rows);
    let groups: BTreeSet<(&str, &str, &str)> = picked
        .keys()
        .filter(|(engine, ..)| engine != OWN)
        .map(|(e, n, d, _)| (e.as_str(), n.as_str(), d.as_str()))
        .collect();
    let mut out = Vec::new();
    for (engine, net, device) in groups {
        let trials = picked
            .iter()
            .filter(|((e, n, d, _), _)| e == engine && n == net && d == device)
            .map(|((.., batch), r)| (*batch, r));
        let series = loss_by_batch(store, trials)?;
        if series.is_empty() {
            continue;
        }
        let safe = safe_name;
        out.push((
            format!(
                "loss_{}_{}_{}",
                file_name_part(engine),
                safe(net),
                safe(device)
            ),
            loss_plot(
                format!("Loss vs iteration — {engine}, {net} on {device}, {host}"),
                series,
            ),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::rows::{described, with_params};

    fn exec_row(engine: &str, device: &str, batch: usize, tpi: Option<f64>) -> ResultRow {
        let row = ResultRow {
            workload: "exec".into(),
            net: "alexnet".into(),
            device: device.into(),
            batch,
            status: TrialStatus::Ok,
            time_per_image_s: tpi,
            ..Default::default()
        };
        described(with_params(
            row,
            serde_json::json!({"command": [], "engine": engine}),
        ))
    }

    #[test]
    fn energy_plots_only_where_an_engine_was_measured() {
        let cnn = described(ResultRow {
            workload: "cnn".into(),
            net: "alexnet".into(),
            device: "cpu".into(),
            batch: 16,
            status: TrialStatus::Ok,
            time_per_image_s: Some(0.1),
            energy_j: Some(10.0),
            energy_per_image_j: Some(0.5),
            edp_js: Some(20.0),
            ..Default::default()
        });
        let imported = exec_row("caffe", "cpu", 16, Some(0.2));
        let stems = |rows: &[ResultRow]| -> Vec<String> {
            plots("tx1", rows).into_iter().map(|(s, _)| s).collect()
        };
        // edgebench's own energy has its plots already; the imported engine has none.
        assert_eq!(
            stems(&[cnn.clone(), imported.clone()]),
            ["time_per_image_engines"]
        );
        // Described again with its energy.
        let measured = described(ResultRow {
            energy_j: Some(4.0),
            energy_per_image_j: Some(0.25),
            edp_js: Some(8.0),
            item: None,
            ..exec_row("torch", "cpu", 16, Some(0.05))
        });
        let rows = [cnn, imported, measured];
        assert_eq!(
            stems(&rows),
            [
                "time_per_image_engines",
                "energy_per_image_engines",
                "edp_engines"
            ]
        );
        let edp = &plots("tx1", &rows)[2].1;
        let labels: Vec<&str> = edp.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["edgebench alexnet cpu", "torch alexnet cpu"]);
        let t = tables("tx1", &rows);
        let col = |name: &str| t[1].header.iter().position(|h| *h == name).unwrap();
        assert_eq!(t[1].title, "Engine torch on cpu — tx1");
        assert_eq!(t[1].rows[0][col("J/image")], "0.2500");
        assert_eq!(t[1].rows[0][col("EDP J·s")], "8.0000");
        assert_eq!(t[1].rows[0][col("EDP/image J·s")], "1.250e-2");
        assert_eq!(t[1].rows[0][col("source")], "measured");
    }

    #[test]
    fn engines_of_each_workload() {
        let cnn = described(ResultRow {
            workload: "cnn".into(),
            ..Default::default()
        });
        let mlp = described(ResultRow {
            workload: "mlp".into(),
            ..Default::default()
        });
        assert_eq!(engine_of(&cnn).as_deref(), Some("edgebench"));
        assert_eq!(engine_of(&mlp), None);
        let caffe = exec_row("caffe", "cpu", 1, None);
        assert_eq!(engine_of(&caffe).as_deref(), Some("caffe"));
        assert!(has_other_engines(&[cnn.clone(), caffe]));
        assert!(!has_other_engines(&[cnn, mlp]));
        assert_eq!(file_name_part("tf 2/keras"), "tf_2_keras");
        assert_eq!(file_name_part(".."), "engine_2");
    }

    #[test]
    fn speedup_per_engine_where_both_devices_ran_the_same_work() {
        let mut rows = vec![
            exec_row("caffe", "cpu", 16, Some(0.2)),
            exec_row("caffe", "cuda", 16, Some(0.025)),
            // Another engine's CPU time is not caffe's.
            exec_row("tensorflow", "cuda", 16, Some(0.05)),
            exec_row("caffe", "cuda", 32, Some(0.02)),
            exec_row("caffe", "cpu", 64, Some(0.2)),
            exec_row("caffe", "cuda", 64, Some(0.01)),
        ];
        // A later failed retry does not hide the ok trial.
        rows.push(ResultRow {
            status: TrialStatus::Failed,
            ..exec_row("caffe", "cuda", 16, None)
        });
        // Other images per epoch: not the same work.
        rows[4].images = 512;
        let sp = speedups(&rows);
        assert_eq!(sp.len(), 1, "{sp:?}");
        assert_eq!(sp[&("caffe".to_string(), "alexnet".to_string(), 16)], 8.0);
        let t = tables("tx1", &rows);
        assert_eq!(t.len(), 4);
        assert_eq!(t[0].title, "Engine caffe on cpu — tx1");
        assert_eq!(t[1].title, "Engine caffe on cuda — tx1");
        assert_eq!(
            t[3].rows,
            [["caffe", "alexnet", "16", "200.000", "25.000", "8.00"]]
        );
        let col = |name: &str| t[0].header.iter().position(|h| *h == name).unwrap();
        assert_eq!(t[0].rows[0][col("J/image")], "not measured");
    }

    #[test]
    fn avg_time_is_per_iteration_when_a_record_stands_for_several() {
        let rec = crate::testkit::rows::iteration;
        let of = |workload: &str| ResultRow {
            workload: workload.into(),
            ..Default::default()
        };
        // A first iteration of 1 s, then two records of 10 iterations at 0.25 s each.
        let logged = [rec(0, 1.0), rec(10, 0.25), rec(20, 0.25)];
        assert_eq!(avg_time(&of("exec"), &logged), (1.0 + 20.0 * 0.25) / 21.0);
        // edgebench's records are one step each: the plain mean.
        let own = [rec(0, 1.0), rec(1, 0.25), rec(2, 0.25)];
        assert_eq!(avg_time(&of("cnn"), &own), 1.5 / 3.0);
        assert_eq!(avg_time(&of("exec"), &own), 1.5 / 3.0);
    }
}
