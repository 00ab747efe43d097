//! The CNN training's part of a report: per (net, device) a table of every batch, and the
//! figures against batch (time per image, GPU-over-CPU speedup, energy per image, EDP) and of
//! loss against iteration; with `--compare`, time per image and speedup of every host.
//!
//! Each (net, device, batch) is one point: the latest `ok` trial, else the latest trial (the
//! same choice as the CSV export, except that trials without iterations count too, so an OOM
//! or a skipped batch shows up as such).

use std::collections::{BTreeMap, BTreeSet};

use crate::render::aggregate::Repetitions;
use crate::render::figures::{loss_by_batch, loss_plot};
use crate::render::files::safe_name;
use crate::render::fmt::{fmt, sci, training_speedups};
use crate::render::plots::{Axis, Mark, Plot, Point, Series, Unit};
use crate::render::select::latest_per_key;
use crate::render::table::{with_runs_column, Table};
use crate::render::{Context, Output, Section};
use crate::store::{ResultRow, Store, TrialStatus};

/// The CNN training's section.
pub(crate) struct Cnn;

impl Section for Cnn {
    fn name(&self) -> &'static str {
        "cnn"
    }

    fn write(&self, rows: &[ResultRow], context: &Context, out: &mut Output) -> anyhow::Result<()> {
        let picked = pick(rows);
        let repetitions = Repetitions::of(rows);
        out.plots.extend(host_plots(
            context.store,
            context.host,
            rows,
            &picked,
            &repetitions,
        )?);
        out.tables.extend(tables(context.host, rows));
        Ok(())
    }

    fn compare(&self, hosts: &[(String, Vec<ResultRow>)]) -> Vec<(String, Plot)> {
        let mut all_time = Vec::new();
        let mut all_speedup = Vec::new();
        for (host, rows) in hosts {
            let picked = pick(rows);
            let repetitions = Repetitions::of(rows);
            all_time.extend(batch_series(
                &picked,
                &repetitions,
                &format!("{host}: "),
                |r| r.time_per_image_s,
            ));
            all_speedup.extend(speedup_series(rows, &picked, host, &format!("{host}: ")));
        }
        vec![
            (
                "time_per_image".to_string(),
                time_plot("Time per image vs batch — all boards", all_time),
            ),
            (
                "speedup".to_string(),
                speedup_plot("GPU-over-CPU speedup vs batch — all boards", all_speedup),
            ),
        ]
    }
}

/// (net, device, batch) -> the trial that stands for it.
pub(crate) type Picked = BTreeMap<(String, String, usize), ResultRow>;

/// The trial standing for each (net, device, batch) among `rows` (ordered oldest first).
pub fn pick(rows: &[ResultRow]) -> Picked {
    // The plots and tables are the CNN studies'; other workloads have their own CSV files.
    latest_per_key(rows, |r| {
        (r.workload == super::KIND).then(|| (r.net.clone(), r.device.clone(), r.batch))
    })
    .into_iter()
    .map(|(k, r)| (k, r.clone()))
    .collect()
}

fn ok_value(r: &ResultRow, v: Option<f64>) -> Option<f64> {
    (r.status == TrialStatus::Ok).then_some(v).flatten()
}

/// One series per (prefix, net, device): `value` of each picked trial against batch.
pub fn batch_series(
    picked: &Picked,
    repetitions: &Repetitions,
    prefix: &str,
    value: impl Fn(&ResultRow) -> Option<f64>,
) -> Vec<Series> {
    let mut by: BTreeMap<(String, String), Vec<Point>> = BTreeMap::new();
    for ((net, device, batch), r) in picked {
        let (y, err) = repetitions.point(r, &value);
        by.entry((net.clone(), device.clone()))
            .or_default()
            .push(Point {
                x: *batch as f64,
                y: ok_value(r, y),
                mark: Mark::of(r),
                err,
            });
    }
    by.into_iter()
        .map(|((net, device), points)| Series {
            label: format!("{prefix}{net} {device}"),
            points,
            markers: true,
        })
        .collect()
}

/// GPU-over-CPU speedup per net against batch (over the keys' repetitions among `rows`); a
/// point is swap-spoiled if either side is.
pub(crate) fn speedup_series(
    rows: &[ResultRow],
    picked: &Picked,
    host: &str,
    prefix: &str,
) -> Vec<Series> {
    let sp = training_speedups(rows);
    let mut by: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for ((net, device, batch), r) in picked {
        if device != "cuda" {
            continue;
        }
        let Some(s) = sp.get(&(host.to_string(), net.clone(), *batch)) else {
            continue;
        };
        let cpu = picked.get(&(net.clone(), "cpu".to_string(), *batch));
        let spoiled =
            r.swap_pressure == Some(true) || cpu.is_some_and(|c| c.swap_pressure == Some(true));
        let throttled = r.throttled == Some(true) || cpu.is_some_and(|c| c.throttled == Some(true));
        by.entry(net.clone()).or_default().push(Point {
            x: *batch as f64,
            y: Some(*s),
            mark: match (spoiled, throttled) {
                (true, _) => Mark::Swap,
                (false, true) => Mark::Throttled,
                (false, false) => Mark::Ok,
            },
            err: None,
        });
    }
    by.into_iter()
        .map(|(net, points)| Series {
            label: format!("{prefix}{net}"),
            points,
            markers: true,
        })
        .collect()
}

/// Loss against iteration, one series per batch (the thesis' Graphs 5.1-5.5).
pub(crate) fn loss_series(
    store: &Store,
    picked: &Picked,
    net: &str,
    device: &str,
) -> anyhow::Result<Vec<Series>> {
    let trials = picked
        .iter()
        .filter(|((n, d, _), _)| n == net && d == device)
        .map(|((.., batch), r)| (*batch, r));
    loss_by_batch(store, trials)
}

/// `ms/image` is the mean over the measured window (the time `J/image` and EDP rest on);
/// the median step and its IQR per image follow. Every figure is its key's mean over the `ok`
/// repetitions; `ms/image` and the energies with their 95 % confidence interval.
pub(crate) const TABLE_HEADER: [&str; 14] = [
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
    "peak RSS MiB",
    "peak GPU MiB",
    "flags",
];

/// The CNN tables, one per (net, device) of `rows` (a host's, oldest first); with repeated
/// keys a column of each key's runs.
pub(crate) fn tables(host: &str, rows: &[ResultRow]) -> Vec<Table> {
    let picked = pick(rows);
    let repetitions = Repetitions::of(rows);
    let repeated = repetitions.any_repeated();
    let sp = training_speedups(rows);
    let mut by: BTreeMap<(String, String), Vec<&ResultRow>> = BTreeMap::new();
    for ((net, device, _), r) in &picked {
        by.entry((net.clone(), device.clone())).or_default().push(r);
    }
    let mib = |b: Option<i64>| b.map(|b| b as f64 / 1048576.0);
    by.into_iter()
        .map(|((net, device), rs)| Table {
            title: format!("{net} on {device} — {host}"),
            header: with_runs_column(TABLE_HEADER.to_vec(), repeated, 2, || "runs"),
            rows: rs
                .iter()
                .map(|r| {
                    let speedup = (r.device == "cuda")
                        .then(|| sp.get(&(r.host.clone(), r.net.clone(), r.batch)))
                        .flatten()
                        .copied();
                    let row = vec![
                        r.batch.to_string(),
                        r.status.to_string(),
                        repetitions.cell(r, |r| r.time_per_item_s, 1e3, 3),
                        repetitions.mean_cell(r, |r| r.time_per_item_median_s, 1e3, 3),
                        repetitions.mean_cell(r, |r| r.time_per_image_spread_s, 1e3, 3),
                        repetitions.mean_cell(r, |r| r.images_per_s, 1.0, 2),
                        fmt(speedup, 1.0, 2),
                        repetitions.cell(r, |r| r.energy_per_item_j, 1.0, 4),
                        repetitions.cell(r, |r| r.edp_js, 1.0, 4),
                        repetitions.cell_shown(r, |r| r.edp_per_item_js, |v| sci(Some(v))),
                        match repetitions.mean(r, |r| Some(r.iterations as f64)) {
                            Some(n) => format!("{n:.0}/{}", r.iterations_planned),
                            None => format!("{}/{}", r.iterations, r.iterations_planned),
                        },
                        repetitions.mean_cell(r, |r| mib(r.peak_rss_bytes), 1.0, 0),
                        repetitions.mean_cell(r, |r| mib(r.peak_gpu_bytes), 1.0, 0),
                        repetitions.flags(r).join("; "),
                    ];
                    with_runs_column(row, repeated, 2, || repetitions.runs_cell(r))
                })
                .collect(),
        })
        .collect()
}

fn time_plot(title: &str, series: Vec<Series>) -> Plot {
    Plot {
        title: title.into(),
        x_desc: "batch size".into(),
        y_desc: "time per image".into(),
        y_unit: Unit::Seconds,
        x_axis: Axis::Log(2.0),
        y_axis: Axis::Log(10.0),
        series,
        caption: "Median training step time over batch size, per image, warm-up excluded; one \
                  line per net and device."
            .into(),
        ..Default::default()
    }
}

fn speedup_plot(title: &str, series: Vec<Series>) -> Plot {
    Plot {
        title: title.into(),
        x_desc: "batch size".into(),
        y_desc: "GPU-over-CPU speedup (x)".into(),
        x_axis: Axis::Log(2.0),
        y_axis: Axis::Linear,
        series,
        caption: "CPU time per image over GPU time per image at the same batch, one line per \
                  net."
            .into(),
        ..Default::default()
    }
}

/// The plots of one host, in file order: (file stem, plot). Empty plots are left out.
pub(crate) fn host_plots(
    store: &Store,
    host: &str,
    rows: &[ResultRow],
    picked: &Picked,
    repetitions: &Repetitions,
) -> anyhow::Result<Vec<(String, Plot)>> {
    let mut out = Vec::new();
    out.push((
        "time_per_image".to_string(),
        time_plot(
            &format!("Time per image vs batch — {host}"),
            batch_series(picked, repetitions, "", |r| r.time_per_image_s),
        ),
    ));
    let sp = speedup_series(rows, picked, host, "");
    if !sp.is_empty() {
        out.push((
            "speedup".to_string(),
            speedup_plot(&format!("GPU-over-CPU speedup vs batch — {host}"), sp),
        ));
    }
    let pairs: BTreeSet<(String, String)> = picked
        .keys()
        .map(|(n, d, _)| (n.clone(), d.clone()))
        .collect();
    for (net, device) in pairs {
        let series = loss_series(store, picked, &net, &device)?;
        if series.is_empty() {
            continue;
        }
        out.push((
            format!("loss_{}_{}", safe_name(&net), safe_name(&device)),
            loss_plot(
                format!("Loss vs iteration — {net} on {device}, {host}"),
                series,
            ),
        ));
    }
    if picked.values().any(|r| r.energy_per_image_j.is_some()) {
        let scope = energy_scope(picked);
        // Ringed: energies resting on fewer than 10 sensor readings.
        let few_readings: Vec<(f64, f64, String)> = picked
            .values()
            .filter_map(|r| {
                let n = r.power_low_samples?;
                Some((
                    r.batch as f64,
                    ok_value(r, repetitions.point(r, |r| r.energy_per_image_j).0)?,
                    format!("{} {}: {n} sensor readings", r.net, r.device),
                ))
            })
            .collect();
        out.push((
            "energy_per_image".to_string(),
            Plot {
                title: format!("Energy per image vs batch, {scope} — {host}"),
                x_desc: "batch size".into(),
                y_desc: "energy per image".into(),
                y_unit: Unit::Joules,
                x_axis: Axis::Log(2.0),
                y_axis: Axis::Linear,
                series: batch_series(picked, repetitions, "", |r| r.energy_per_image_j),
                highlights: few_readings,
                caption: "Energy of the measured iterations over the images they trained, one \
                          line per net and device; numbered: energies from few sensor readings."
                    .into(),
                ..Default::default()
            },
        ));
        // EDP per image (J/img x s/img): a trial's own EDP grows with its length, which
        // differs between batches. The lowest of each net x device, among trials whose time
        // is a real speed.
        let edp = |r: &ResultRow| repetitions.point(r, |r| r.edp_per_item_js).0;
        let mut best: BTreeMap<(&str, &str), (&ResultRow, f64)> = BTreeMap::new();
        for r in picked
            .values()
            .filter(|r| r.status == TrialStatus::Ok && r.swap_pressure != Some(true))
        {
            let Some(v) = edp(r) else { continue };
            let slot = best
                .entry((r.net.as_str(), r.device.as_str()))
                .or_insert((r, v));
            if v < slot.1 {
                *slot = (r, v);
            }
        }
        out.push((
            "edp".to_string(),
            Plot {
                title: format!("Energy-delay product per image vs batch, {scope} — {host}"),
                x_desc: "batch size".into(),
                y_desc: "EDP per image".into(),
                y_unit: Unit::JouleSeconds,
                x_axis: Axis::Log(2.0),
                y_axis: Axis::Log(10.0),
                series: batch_series(picked, repetitions, "", |r| r.edp_per_item_js),
                caption: "Energy per image times time per image (J/img x s/img), comparable \
                          across batches whatever each trial's length, one line per net and \
                          device; ringed: the lowest of each line."
                    .into(),
                highlights: best
                    .values()
                    .map(|(r, v)| {
                        (
                            r.batch as f64,
                            *v,
                            format!("lowest EDP: {} {} batch {}", r.net, r.device, r.batch),
                        )
                    })
                    .collect(),
                ..Default::default()
            },
        ));
    }
    Ok(out)
}

/// The power scope of the plotted energies, for titles: `module scope`, `board scope`, or
/// both named when the trials differ (they then do not compare).
fn energy_scope(picked: &Picked) -> String {
    let scopes: std::collections::BTreeSet<&str> = picked
        .values()
        .filter(|r| r.energy_per_image_j.is_some())
        .map(|r| r.power_scope.as_deref().unwrap_or("unrecorded"))
        .collect();
    match scopes.len() {
        1 => format!("{} scope", scopes.into_iter().next().unwrap_or_default()),
        _ => format!(
            "MIXED scopes ({}): not comparable",
            scopes.into_iter().collect::<Vec<_>>().join(", ")
        ),
    }
}
