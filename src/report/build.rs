//! `edgebench report`: for every host in a database, the studies' CSV files, a summary table
//! per net and device (Markdown and HTML) and plots; with `--compare`, every host on shared
//! plots. Reads only the database.
//!
//! Layout: `OUT/<host>/{loss,times}_<host>_edgebench.csv`, `summary.md`, `summary.html`,
//! `time_per_image.svg`, `speedup.svg` (when a net has both cpu and cuda results),
//! `loss_<net>_<device>.svg`, `energy_per_image.svg` and `edp.svg` (when energy was measured);
//! `OUT/compare/time_per_image.svg` and `speedup.svg` with `--compare`; `power_trace_<id>.svg`
//! with `--trace`. Every `.svg` has a `.pdf` of the same drawing beside it, for a paper. With
//! `--format png` every plot is a `.png` instead, drawn the same way. A figure without a point
//! is not drawn. Each figure's caption (what it shows; host, board, power mode, power scope and
//! the trials' dates) is written under it, and under its `<figure>` in `summary.html`, which
//! links every file of the host's report.
//! Trials of the MLP and operator workloads get their own tables in the summaries
//! ([`super::workloads::tables`]) and CSV files (`<workload>_<host>_edgebench.csv`). Other
//! frameworks' trials (`edgebench exec`, `edgebench import logs`) get a table per engine, the
//! speedup of every engine, `time_per_image_engines.svg`, `speedup_engines.svg`,
//! `loss_<engine>_<net>_<device>.svg` and, where measured, `energy_per_image_engines.svg` and
//! `edp_engines.svg` ([`super::engines`]); the MLP study `mlp_time.svg` (and `mlp_energy.svg`,
//! `mlp_edp.svg` where measured) and the operators' `roofline_<device>.svg`; and
//! the studies' CSV files per engine (`{loss,times}_<host>_<engine>.csv`).
//!
//! Each (net, device, batch) is one point: the latest `ok` trial, else the latest trial (the
//! same choice as the CSV export, except that trials without iterations count too, so an OOM
//! or a skipped batch shows up as such).

use crate::store::TrialStatus;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::report::aggregate::Repetitions;
use crate::report::csv::{export_csv_rows, write_atomic};
use crate::report::plots::{self, Axis, Format, Mark, Plot, Point, Series, Unit};
use crate::report::summary::speedups;
use crate::store::{ResultRow, Store};

/// (net, device, batch) -> the trial that stands for it.
pub type Picked = BTreeMap<(String, String, usize), ResultRow>;

/// The trial standing for each (net, device, batch) among `rows` (ordered oldest first).
pub fn pick(rows: &[ResultRow]) -> Picked {
    // The plots and tables are the CNN studies'; other workloads have their own CSV files.
    super::latest_per_key(rows, |r| {
        (r.workload == "cnn").then(|| (r.net.clone(), r.device.clone(), r.batch))
    })
    .into_iter()
    .map(|(k, r)| (k, r.clone()))
    .collect()
}

/// `text` with every character other than ASCII letters, digits and `allowed` replaced by `_`,
/// for a file name.
pub fn replace_unsafe(text: &str, allowed: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || allowed.contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A host name as a directory/file name.
pub fn safe_name(host: &str) -> String {
    let s = replace_unsafe(host, "-_");
    if s.is_empty() || s == "compare" {
        format!("host_{s}")
    } else {
        s
    }
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

/// GPU-over-CPU speedup per net against batch; a point is swap-spoiled if either side is.
pub fn speedup_series(picked: &Picked, host: &str, prefix: &str) -> Vec<Series> {
    let rows: Vec<ResultRow> = picked.values().cloned().collect();
    let sp = speedups(&rows);
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
pub fn loss_series(
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

/// Loss against iteration (step + 1) of each `(batch, trial)` with iterations, one series per
/// batch; a non-finite loss is no point.
pub fn loss_by_batch<'a>(
    store: &Store,
    trials: impl Iterator<Item = (usize, &'a ResultRow)>,
) -> anyhow::Result<Vec<Series>> {
    let mut out = Vec::new();
    for (batch, r) in trials {
        if r.iterations == 0 {
            continue;
        }
        let points = store
            .iterations(r.trial_rowid)?
            .iter()
            .map(|it| Point {
                x: (it.step + 1) as f64,
                y: it.loss.is_finite().then_some(it.loss),
                mark: Mark::Ok,
                err: None,
            })
            .collect();
        out.push(Series {
            label: format!("batch {batch}"),
            points,
            markers: false,
        });
    }
    Ok(out)
}

/// The loss figure of one net on one device: loss against iteration per batch.
pub fn loss_plot(title: String, series: Vec<Series>) -> Plot {
    Plot {
        title,
        x_desc: "iteration".into(),
        y_desc: "training loss".into(),
        series,
        caption: "Training loss against iteration, one line per batch size.".into(),
        ..Default::default()
    }
}

fn fmt(v: Option<f64>, scale: f64, digits: usize) -> String {
    v.map(|v| format!("{:.*}", digits, v * scale))
        .unwrap_or_else(|| "-".into())
}

/// Summary table of one (net, device): one row per batch.
pub struct Table {
    pub title: String,
    pub header: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

pub const TABLE_HEADER: [&str; 13] = [
    "batch",
    "status",
    "ms/image",
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

/// The CNN tables, one per (net, device); with repeated keys a column of the mean time per
/// image and its 95 % confidence interval over the repetitions.
pub fn tables(host: &str, picked: &Picked, repetitions: &Repetitions) -> Vec<Table> {
    let repeated = repetitions.any_repeated();
    let rows: Vec<ResultRow> = picked.values().cloned().collect();
    let sp = speedups(&rows);
    let mut by: BTreeMap<(String, String), Vec<&ResultRow>> = BTreeMap::new();
    for ((net, device, _), r) in picked {
        by.entry((net.clone(), device.clone())).or_default().push(r);
    }
    by.into_iter()
        .map(|((net, device), rs)| Table {
            title: format!("{net} on {device} — {host}"),
            header: with_mean_column(TABLE_HEADER.to_vec(), repeated, 3, || "mean ± CI95 ms"),
            rows: rs
                .iter()
                .map(|r| {
                    let flags = super::trial_flags(r);
                    let speedup = (r.device == "cuda")
                        .then(|| sp.get(&(r.host.clone(), r.net.clone(), r.batch)))
                        .flatten()
                        .copied();
                    let row = vec![
                        r.batch.to_string(),
                        r.status.to_string(),
                        fmt(ok_value(r, r.time_per_image_s), 1e3, 3),
                        fmt(ok_value(r, r.time_per_image_spread_s), 1e3, 3),
                        fmt(ok_value(r, r.images_per_s), 1.0, 2),
                        fmt(speedup, 1.0, 2),
                        fmt(r.energy_per_image_j, 1.0, 4),
                        fmt(r.edp_js, 1.0, 4),
                        sci(r.edp_per_item_js),
                        format!("{}/{}", r.iterations, r.iterations_planned),
                        fmt(r.peak_rss_bytes.map(|b| b as f64), 1.0 / 1048576.0, 0),
                        fmt(r.peak_gpu_bytes.map(|b| b as f64), 1.0 / 1048576.0, 0),
                        flags.join("; "),
                    ];
                    let mean = || repetitions.mean_ci_cell(r, |r| r.time_per_image_s, 1e3, 3);
                    with_mean_column(row, repeated, 3, mean)
                })
                .collect(),
        })
        .collect()
}

/// `cells` with, when keys were repeated, a mean ± CI cell inserted at `at` (a table's header
/// and each of its rows alike).
pub(crate) fn with_mean_column<T>(
    mut cells: Vec<T>,
    repeated: bool,
    at: usize,
    cell: impl FnOnce() -> T,
) -> Vec<T> {
    if repeated {
        cells.insert(at.min(cells.len()), cell());
    }
    cells
}

/// A small figure (an EDP per item) in scientific notation, `-` when absent.
pub(crate) fn sci(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.3e}")).unwrap_or_else(|| "-".into())
}

fn markdown(host: &str, tables: &[Table]) -> String {
    let mut s = format!("# edgebench results: {host}\n\n");
    for t in tables {
        let _ = writeln!(s, "## {}\n", t.title);
        let _ = writeln!(s, "| {} |", t.header.join(" | "));
        let _ = writeln!(s, "|{}", "---|".repeat(t.header.len()));
        for r in &t.rows {
            let cells: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
            let _ = writeln!(s, "| {} |", cells.join(" | "));
        }
        s.push('\n');
    }
    s.push_str(LEGEND);
    s.push(' ');
    s.push_str(super::FLAGS_LEGEND);
    s.push('\n');
    s
}

const LEGEND: &str = "Time per image is the median step time / batch over the measured \
iterations (warm-up excluded), ± the interquartile range / batch. A `-` is no value: the trial \
did not finish `ok` (oom, skipped_memory, failed, crashed, interrupted) or was not measured.";

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A figure of the summary page: its image, the same drawing in other formats, its caption.
pub(crate) struct Figure {
    pub image: PathBuf,
    pub files: Vec<PathBuf>,
    pub caption: String,
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .and_then(|n| n.to_str())
        .map(html_escape)
        .unwrap_or_default()
}

/// The summary page: the tables, every figure with its caption under it, and a link to every
/// file of the host's report. Images and wide tables are kept within the page's width.
fn html(host: &str, tables: &[Table], figures: &[Figure], files: &[PathBuf]) -> String {
    let mut s = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>edgebench: {0}</title>\n\
         <style>body{{font-family:sans-serif;margin:8px}} table{{border-collapse:collapse}} \
         td,th{{border:1px solid #999;padding:2px 6px;text-align:right}} \
         tr.bad td{{color:#a00}} div.table{{max-width:100%;overflow-x:auto}} \
         figure{{margin:1em 0}} figure img{{max-width:100%;height:auto}} \
         figcaption{{max-width:60em}} p{{max-width:60em}}</style></head><body>\n\
         <h1>edgebench results: {0}</h1>\n",
        html_escape(host)
    );
    for t in tables {
        let _ = writeln!(
            s,
            "<h2>{}</h2>\n<div class=\"table\"><table>\n<tr>",
            html_escape(&t.title)
        );
        for h in &t.header {
            let _ = write!(s, "<th>{}</th>", html_escape(h));
        }
        s.push_str("</tr>\n");
        let column = |name: &str| t.header.iter().position(|h| *h == name);
        let (status, flags) = (column("status"), column("flags"));
        for r in &t.rows {
            let bad =
                status.is_some_and(|i| r[i] != "ok") || flags.is_some_and(|i| !r[i].is_empty());
            s.push_str(if bad { "<tr class=\"bad\">" } else { "<tr>" });
            for c in r {
                let _ = write!(s, "<td>{}</td>", html_escape(c));
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table></div>\n");
    }
    let _ = writeln!(
        s,
        "<p>{} {}</p>",
        html_escape(LEGEND),
        html_escape(super::FLAGS_LEGEND)
    );
    for (n, f) in figures.iter().enumerate() {
        let name = file_name(&f.image);
        let caption = html_escape(&f.caption);
        let others: Vec<String> = f
            .files
            .iter()
            .filter(|p| **p != f.image)
            .map(|p| {
                let n = file_name(p);
                format!("<a href=\"{n}\">{n}</a>")
            })
            .collect();
        let also = if others.is_empty() {
            String::new()
        } else {
            format!(" Also as {}.", others.join(", "))
        };
        let _ = writeln!(
            s,
            "<figure id=\"figure-{0}\"><a href=\"{name}\"><img src=\"{name}\" alt=\"{caption}\"></a>\
             <figcaption>Figure {0}. {caption}{also}</figcaption></figure>",
            n + 1
        );
    }
    s.push_str("<h2>Files</h2>\n<ul>\n");
    for p in files {
        let n = file_name(p);
        let _ = writeln!(s, "<li><a href=\"{n}\">{n}</a></li>");
    }
    s.push_str("</ul>\n</body></html>\n");
    s
}

/// Where and when `rows` (one host's, or several) were measured, for the captions: hosts,
/// boards, power modes (nvpmodel), power scopes and the dates of the trials.
pub(crate) fn where_when(store: &Store, rows: &[ResultRow]) -> String {
    let join = |set: BTreeSet<String>, none: &str| -> String {
        if set.is_empty() {
            none.to_string()
        } else {
            set.into_iter().collect::<Vec<_>>().join(", ")
        }
    };
    let hosts: BTreeSet<String> = rows.iter().map(|r| r.host.clone()).collect();
    let runs: BTreeSet<&str> = rows.iter().map(|r| r.run_id.as_str()).collect();
    let provenance: Vec<_> = runs
        .iter()
        .filter_map(|run| store.provenance(run).ok())
        .collect();
    // The power record's board, else the one detected at the run's start.
    let mut boards: BTreeSet<String> = rows.iter().filter_map(|r| r.board.clone()).collect();
    if boards.is_empty() {
        boards = provenance
            .iter()
            .filter_map(|p| p.get("board").map(str::to_string))
            .collect();
    }
    // A run recorded without provenance has no mode: said as unrecorded, not left out.
    let modes: BTreeSet<String> = provenance
        .iter()
        .filter_map(|p| p.get("nvpmodel").map(str::to_string))
        .collect();
    let scopes: BTreeSet<String> = rows.iter().filter_map(|r| r.power_scope.clone()).collect();
    let dates: BTreeSet<&str> = rows.iter().filter_map(|r| r.started_at.get(..10)).collect();
    let when = match (dates.first(), dates.last()) {
        (Some(a), Some(b)) if a != b => format!("trials from {a} to {b}"),
        (Some(a), _) => format!("trials on {a}"),
        _ => "trial dates unrecorded".to_string(),
    };
    format!(
        "{} {}; board {}; power mode {}; power scope {}; {when}.",
        if hosts.len() == 1 { "Host" } else { "Hosts" },
        join(hosts, "unknown"),
        join(boards, "unrecorded"),
        join(modes, "unrecorded"),
        join(scopes, "none (power not measured)"),
    )
}

/// Draws `plots` into `dir` with `context` appended to each caption; a plot without a point
/// is left out (no empty figure).
fn draw_all(
    plots: Vec<(String, Plot)>,
    dir: &Path,
    format: Format,
    context: &str,
) -> anyhow::Result<Vec<Figure>> {
    let mut out = Vec::new();
    for (stem, mut plot) in plots {
        if !plots::has_points(&plot) {
            continue;
        }
        plot.caption = format!("{} {context}", plot.caption).trim().to_string();
        let image = dir.join(format!("{stem}.{}", format.extension()));
        std::fs::create_dir_all(dir)?;
        let files = plots::draw(&plot, &image, format)?;
        out.push(Figure {
            image,
            files,
            caption: plot.caption,
        });
    }
    Ok(out)
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
pub fn host_plots(
    store: &Store,
    host: &str,
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
    let sp = speedup_series(picked, host, "");
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
                title: format!(
                    "Energy-delay product per image vs batch, {scope} (ringed: lowest per line) — {host}"
                ),
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

/// The power trace of one trial: every stored rail's watts against seconds from the first
/// iteration's start, with a rule at every iteration boundary.
pub fn trace_plot(store: &Store, row: &ResultRow) -> anyhow::Result<Plot> {
    let iterations = store.iterations(row.trial_rowid)?;
    let samples = store.power_trace(row.trial_rowid)?;
    if samples.is_empty() {
        bail!(
            "trial {} has no stored power samples (run with --power and power.store_samples = true)",
            row.trial_id
        );
    }
    let t0 = iterations
        .first()
        .map(|i| i.t_start_ns)
        .unwrap_or(samples[0].1);
    let s = |t: i64| (t - t0) as f64 * 1e-9;
    let mut series: Vec<Series> = Vec::new();
    for (rail, t, watts) in &samples {
        if series.last().is_none_or(|last| &last.label != rail) {
            series.push(Series {
                label: rail.clone(),
                points: Vec::new(),
                markers: false,
            });
        }
        let last = series.last_mut().expect("pushed above");
        last.points.push(Point {
            x: s(*t),
            y: Some(*watts),
            mark: Mark::Ok,
            err: None,
        });
    }
    let mut vlines: Vec<f64> = iterations.iter().map(|i| s(i.t_start_ns)).collect();
    vlines.extend(iterations.last().map(|i| s(i.t_end_ns)));
    Ok(Plot {
        title: format!(
            "Power — {} {} batch {} on {} (trial {})",
            row.net,
            row.device,
            row.batch,
            row.host,
            &row.trial_id[..8.min(row.trial_id.len())]
        ),
        x_desc: "seconds from the first iteration (rules: iteration boundaries)".into(),
        y_desc: "power".into(),
        y_unit: Unit::Watts,
        series,
        vlines,
        caption: "Power of every stored rail against time; vertical rules: iteration \
                  boundaries."
            .into(),
        ..Default::default()
    })
}

/// `files` less those holding a header line only (a workload or engine without trials), which
/// are removed: the report shows no table without rows.
fn without_empty_files(files: Vec<PathBuf>) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f)?;
        if text.lines().nth(1).is_some() {
            out.push(f);
        } else {
            std::fs::remove_file(&f)?;
        }
    }
    Ok(out)
}

/// Writes the report; returns every file written. `trace` names a trial (its UUID or a prefix)
/// whose power trace is drawn too.
pub fn build(
    store: &Store,
    out: &Path,
    format: Format,
    compare: bool,
    trace: Option<&str>,
) -> anyhow::Result<Vec<PathBuf>> {
    let rows = store.results()?;
    if rows.is_empty() {
        bail!(
            "{} has no trials; run `edgebench run` (or merge a board's database) first",
            store.path().display()
        );
    }
    let traced = match trace {
        None => None,
        Some(wanted) => {
            let matches: Vec<&ResultRow> = rows
                .iter()
                .filter(|r| r.trial_id.starts_with(wanted))
                .collect();
            match matches.as_slice() {
                [one] => Some(*one),
                [] => bail!("--trace {wanted}: no trial has that id (see `edgebench results --json`, key trial_id)"),
                _ => bail!("--trace {wanted}: {} trials start with that; give more of the id", matches.len()),
            }
        }
    };
    let hosts: BTreeSet<String> = rows.iter().map(|r| r.host.clone()).collect();
    let mut written = Vec::new();
    let mut all_time = Vec::new();
    let mut all_speedup = Vec::new();
    for host in &hosts {
        let name = safe_name(host);
        let dir = out.join(&name);
        let host_rows: Vec<ResultRow> = rows.iter().filter(|r| &r.host == host).cloned().collect();
        let csv_files =
            without_empty_files(export_csv_rows(store, host_rows.clone(), &dir, &name)?)?;
        let picked = pick(&host_rows);
        let repetitions = Repetitions::of(&host_rows);
        let mut plots = host_plots(store, host, &picked, &repetitions)?;
        plots.extend(super::engines::plots(host, &host_rows));
        plots.extend(super::engines::loss_plots(store, host, &host_rows)?);
        plots.extend(super::workloads::mlp_plots(host, &host_rows));
        plots.extend(super::workloads::roofline_plots(host, &host_rows));
        plots.extend(super::workloads::ops_plots(host, &host_rows));
        if let Some(row) = traced.filter(|r| &r.host == host) {
            plots.push((
                format!("power_trace_{}", &row.trial_id[..8.min(row.trial_id.len())]),
                trace_plot(store, row)?,
            ));
        }
        let figures = draw_all(plots, &dir, format, &where_when(store, &host_rows))?;
        let mut tables = tables(host, &picked, &repetitions);
        tables.extend(super::engines::tables(host, &host_rows));
        tables.extend(super::workloads::tables(host, &host_rows));
        let md = dir.join("summary.md");
        write_atomic(&md, markdown(host, &tables))?;
        let figure_files: Vec<PathBuf> = figures
            .iter()
            .flat_map(|f| f.files.iter().cloned())
            .collect();
        let mut files = csv_files.clone();
        files.push(md.clone());
        files.extend(figure_files.iter().cloned());
        let page = dir.join("summary.html");
        write_atomic(&page, html(host, &tables, &figures, &files))?;
        written.extend(csv_files);
        written.extend([md, page]);
        written.extend(figure_files);
        all_time.extend(batch_series(
            &picked,
            &repetitions,
            &format!("{host}: "),
            |r| r.time_per_image_s,
        ));
        all_speedup.extend(speedup_series(&picked, host, &format!("{host}: ")));
    }
    if compare {
        let plots = vec![
            (
                "time_per_image".to_string(),
                time_plot("Time per image vs batch — all boards", all_time),
            ),
            (
                "speedup".to_string(),
                speedup_plot("GPU-over-CPU speedup vs batch — all boards", all_speedup),
            ),
        ];
        let figures = draw_all(
            plots,
            &out.join("compare"),
            format,
            &where_when(store, &rows),
        )?;
        written.extend(figures.into_iter().flat_map(|f| f.files));
    }
    Ok(written)
}
