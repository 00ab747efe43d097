//! `edgebench report`: for every host in a database, the studies' CSV files, a summary table
//! per net and device (Markdown and HTML) and plots; with `--compare`, every host on shared
//! plots. Reads only the database.
//!
//! Layout: `OUT/<host>/{loss,times}_<host>_edgebench.csv`, `summary.md`, `summary.html`,
//! `time_per_image.svg`, `speedup.svg` (when a net has both cpu and cuda results),
//! `loss_<net>_<device>.svg`, `energy_per_image.svg` and `edp.svg` (when energy was measured);
//! `OUT/compare/time_per_image.svg` and `speedup.svg` with `--compare`; `power_trace_<id>.svg`
//! with `--trace`. Every `.svg` has a `.pdf` of the same drawing beside it, for a paper. With
//! `--format png` every plot is a `.png` instead, drawn the same way. Figures are drawn at
//! their printed width (`--figure-width`, 3.5 in by default). A figure without a point is not
//! drawn. Each figure's caption (what it shows; host, board, power mode, power scope and the
//! trials' dates) is written beside it, `<figure>.caption.txt`, and under its `<figure>` in
//! `summary.html`, which links every file of the host's report; `--figure-captions` draws it
//! into the figure too.
//! Trials of the MLP and operator workloads get their own tables in the summaries
//! ([`crate::workloads::mlp::report`], [`crate::workloads::ops::report`]) and CSV files
//! (`<workload>_<host>_edgebench.csv`). Other frameworks' trials (`edgebench exec`,
//! `edgebench import logs`) get a table per engine, the speedup of every engine,
//! `time_per_image_engines.svg`, `speedup_engines.svg`, `loss_<engine>_<net>_<device>.svg`
//! and, where measured, `energy_per_image_engines.svg` and `edp_engines.svg`
//! ([`crate::workloads::exec::report`]); the MLP study `mlp_time.svg` (and `mlp_energy.svg`,
//! `mlp_edp.svg` where measured) and the operators' `roofline_<device>.svg`; and the studies'
//! CSV files per engine (`{loss,times}_<host>_<engine>.csv`).
//!
//! Each (net, device, batch) is one point: the latest `ok` trial, else the latest trial (the
//! same choice as the CSV export, except that trials without iterations count too, so an OOM
//! or a skipped batch shows up as such).

use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::bail;

use super::csv::export_csv_rows;
use crate::render::files::{without_empty_files, write_atomic};
use crate::render::flags::FLAGS_LEGEND;
use crate::render::plots::{self, FigureOptions, Format, Plot};
use crate::render::table::{html_escape, Table};
use crate::render::{Context, Output};
use crate::store::{ResultRow, Store};

pub use crate::render::files::safe_name;
pub use crate::workloads::cnn::report::{batch_series, pick};

fn markdown(host: &str, tables: &[Table]) -> String {
    let host = crate::text::ellipsis(host, crate::render::table::MAX_CELL);
    let mut s = format!("# edgebench results: {host}\n\n");
    for t in tables {
        t.markdown(&mut s);
    }
    s.push_str(LEGEND);
    s.push(' ');
    s.push_str(FLAGS_LEGEND);
    s.push('\n');
    s
}

const LEGEND: &str = "Time per image is the median step time / batch over the measured \
iterations (warm-up excluded), ± the interquartile range / batch. A `-` is no value: the trial \
did not finish `ok` (oom, skipped_memory, failed, crashed, interrupted) or was not measured. \
Where a key was run more than once (`runs`: repetitions ended `ok` / run, and how each other one \
ended), every figure of its row is the mean over its `ok` repetitions, `±` the half-width of the \
mean's 95 % confidence interval (Student's t), and its flags are those of any `ok` repetition.";

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
/// file of the host's report. Images and tables are kept within the page's width: a table's
/// headers and cells wrap (an 800 px window holds every table edgebench writes), and one
/// wider than the page would scroll inside its own box.
fn html(host: &str, tables: &[Table], figures: &[Figure], files: &[PathBuf]) -> String {
    let host = crate::text::ellipsis(host, crate::render::table::MAX_CELL);
    let mut s = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>edgebench: {0}</title>\n\
         <style>body{{font-family:sans-serif;margin:8px}} \
         table{{border-collapse:collapse;font-size:12px}} \
         td,th{{border:1px solid #999;padding:1px 3px;text-align:right;vertical-align:top}} \
         th{{font-weight:normal;background:#eee}} \
         tr.bad td{{color:#a00}} div.table{{max-width:100%;overflow-x:auto}} \
         figure{{margin:1em 0}} figure img{{max-width:100%;height:auto}} \
         figcaption{{max-width:60em}} p{{max-width:60em}}</style></head><body>\n\
         <h1>edgebench results: {0}</h1>\n",
        html_escape(&host)
    );
    for t in tables {
        t.html(&mut s);
    }
    let _ = writeln!(
        s,
        "<p>{} {}</p>",
        html_escape(LEGEND),
        html_escape(FLAGS_LEGEND)
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
    (format, options): (Format, &FigureOptions),
    context: &str,
) -> anyhow::Result<Vec<Figure>> {
    let mut out = Vec::new();
    for (stem, mut plot) in plots {
        if !plots::has_points(&plot) {
            continue;
        }
        plot.caption = format!("{} {context}", plot.caption).trim().to_string();
        // A stem may hold names from the rows (a device, a data type): made a plain file name.
        let stem = crate::render::files::file_name_part(&stem);
        let image = dir.join(format!("{stem}.{}", format.extension()));
        std::fs::create_dir_all(dir)?;
        let files = plots::draw(&plot, &image, format, options)?;
        out.push(Figure {
            image,
            files,
            caption: crate::text::ellipsis(&plot.caption, 2000).into_owned(),
        });
    }
    Ok(out)
}

/// Writes the report; returns every file written. `trace` names a trial (its UUID or a prefix)
/// whose power trace is drawn too.
pub fn build(
    store: &Store,
    out: &Path,
    (format, figures): (Format, &FigureOptions),
    compare: bool,
    trace: Option<&str>,
) -> anyhow::Result<Vec<PathBuf>> {
    let rows = crate::workloads::results(store)?;
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
    let sections = super::sections::all();
    let mut written = Vec::new();
    // Each host's rows, for the figures of every host together.
    let mut by_host: Vec<(String, Vec<ResultRow>)> = Vec::new();
    for host in &hosts {
        let name = safe_name(host);
        let dir = out.join(&name);
        let host_rows: Vec<ResultRow> = rows.iter().filter(|r| &r.host == host).cloned().collect();
        let csv_files =
            without_empty_files(export_csv_rows(store, host_rows.clone(), &dir, &name)?)?;
        let context = Context {
            store,
            host,
            traced,
        };
        let mut parts = Output::default();
        for section in &sections {
            tracing::debug!(
                section = section.name(),
                host = host.as_str(),
                "report section"
            );
            section.write(&host_rows, &context, &mut parts)?;
        }
        let figures = draw_all(
            parts.plots,
            &dir,
            (format, figures),
            &where_when(store, &host_rows),
        )?;
        let tables = parts.tables;
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
        if compare {
            by_host.push((host.clone(), host_rows));
        }
    }
    if compare {
        let plots: Vec<(String, Plot)> = sections
            .iter()
            .flat_map(|section| section.compare(&by_host))
            .collect();
        let figures = draw_all(
            plots,
            &out.join("compare"),
            (format, figures),
            &where_when(store, &rows),
        )?;
        written.extend(figures.into_iter().flat_map(|f| f.files));
    }
    Ok(written)
}
