//! The MLP study's part of a report: per device a table of every (size, style), with the
//! GPU/CPU speedup and EDP ratio where both devices ran the same trial; the figures of time,
//! energy and EDP per size; one CSV file of its trials (`mlp_<machine>_edgebench.csv`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::render::aggregate::Repetitions;
use crate::render::fmt::fmt;
use crate::render::plots::{Axis, Mark, Plot, Point, Series, Unit};
use crate::render::select::{latest, num, text};
use crate::render::table::{with_runs_column, Table};
use crate::render::{rows, Context, Output, Section};
use crate::store::{ResultRow, Store, TrialStatus};

/// The mlp workload's section.
pub(crate) struct Mlp;

impl Section for Mlp {
    fn name(&self) -> &'static str {
        "mlp"
    }

    /// One file per engine of the `mlp` trials.
    fn csv(
        &self,
        _store: &Store,
        rows: &[ResultRow],
        dir: &Path,
        machine: &str,
    ) -> anyhow::Result<Vec<PathBuf>> {
        rows::export(rows, "mlp", dir, machine)
    }

    fn write(&self, rows: &[ResultRow], context: &Context, out: &mut Output) -> anyhow::Result<()> {
        out.plots.extend(mlp_plots(context.host, rows));
        out.tables.extend(tables(context.host, rows));
        Ok(())
    }
}

/// The MLP study's tables for one host's rows: per device, time, rate and energy per (size,
/// style), with the GPU/CPU speedup and EDP ratio where both devices ran the same trial. Every
/// figure is its key's mean over the `ok` repetitions; time, J and EDP with their 95 %
/// confidence interval.
pub(crate) fn tables(host: &str, rows: &[ResultRow]) -> Vec<Table> {
    let of = |w: &str| -> Vec<&ResultRow> { rows.iter().filter(|r| r.workload == w).collect() };
    let mut out = Vec::new();
    let repetitions = Repetitions::of(rows);
    let repeated = repetitions.any_repeated();
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
            header: with_runs_column(
                vec![
                    "size",
                    "style",
                    "status",
                    "ms/iteration",
                    "± IQR ms",
                    "window s",
                    "GFLOP/s",
                    "J",
                    "W",
                    "mJ/sample",
                    "EDP J·s",
                    "GPU/CPU",
                    "EDP CPU/GPU",
                    "flags",
                ],
                repeated,
                3,
                || "runs",
            ),
            rows: rs
                .iter()
                .map(|r| {
                    let cpu = (device == "cuda" && r.status == TrialStatus::Ok)
                        .then(|| on_cpu(r))
                        .flatten();
                    let ratio = |f: fn(&ResultRow) -> Option<f64>| {
                        cpu.and_then(|c| repetitions.ratio(c, r, f))
                    };
                    let row = vec![
                        text(r, "size"),
                        text(r, "style"),
                        r.status.to_string(),
                        repetitions.cell(r, |r| r.time_per_iteration_s, 1e3, 2),
                        repetitions.mean_cell(r, |r| r.time_per_iteration_spread_s, 1e3, 2),
                        repetitions.cell(r, |r| num(r, "window_s").or(r.total_time_s), 1.0, 2),
                        repetitions.mean_cell(r, |r| r.gflop_per_s, 1.0, 2),
                        repetitions.cell(r, |r| r.energy_j, 1.0, 2),
                        repetitions.cell(r, |r| r.avg_power_w, 1.0, 2),
                        repetitions.cell(r, |r| r.energy_per_item_j, 1e3, 4),
                        repetitions.cell(r, |r| r.edp_js, 1.0, 2),
                        fmt(ratio(|x| x.time_per_iteration_s), 1.0, 2),
                        fmt(ratio(|x| x.edp_js), 1.0, 2),
                        repetitions.flags(r).join("; "),
                    ];
                    with_runs_column(row, repeated, 3, || repetitions.runs_cell(r))
                })
                .collect(),
        });
    }
    out
}

/// The MLP study's figures (stems `mlp_time`, `mlp_energy`, `mlp_edp`): time per iteration,
/// energy and EDP per size (in order of work), one line per style and device, so CPU and GPU
/// sit side by side; energy and EDP only where measured. Titles name the devices drawn.
pub(crate) fn mlp_plots(host: &str, rows: &[ResultRow]) -> Vec<(String, Plot)> {
    let mlp: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == super::KIND).collect();
    let mlp = latest(&mlp);
    let repetitions = Repetitions::of(rows);
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
    let devices = device_names(mlp.iter().map(|r| r.device.as_str()));
    let figure = |stem: &str, what: &str, unit: Unit, value: fn(&ResultRow) -> Option<f64>| {
        let mut by: BTreeMap<(String, String), Vec<Point>> = BTreeMap::new();
        for r in &mlp {
            let Some(x) = names.iter().position(|n| *n == text(r, "size")) else {
                continue;
            };
            let (y, err) = repetitions.point(r, value);
            by.entry((text(r, "style"), r.device.clone()))
                .or_default()
                .push(Point {
                    x: x as f64,
                    y: (r.status == TrialStatus::Ok).then_some(y).flatten(),
                    mark: Mark::of(r),
                    err,
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
                title: format!("MLP study: {what} per size, {devices} — {host}"),
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

/// The devices of `devices` as a title names them, in order: `CPU`, `GPU` (cuda), others as
/// written; "CPU and GPU".
fn device_names<'a>(devices: impl Iterator<Item = &'a str>) -> String {
    let names: BTreeSet<(u8, String)> = devices
        .map(|d| match d {
            "cpu" => (0, "CPU".to_string()),
            "cuda" => (1, "GPU".to_string()),
            other => (2, other.to_string()),
        })
        .collect();
    let names: Vec<String> = names.into_iter().map(|(_, n)| n).collect();
    match names.split_last() {
        None => "no device".into(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::rows::mlp_row;

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
    fn mlp_figure_titles_name_only_the_devices_drawn() {
        let cpu = mlp_row("tensors", TrialStatus::Ok, 0.5);
        let mut gpu = mlp_row("tensors", TrialStatus::Ok, 0.01);
        gpu.device = "cuda".into();
        let titles = |rows: &[ResultRow]| -> Vec<String> {
            mlp_plots("tx2", rows)
                .into_iter()
                .map(|(_, p)| p.title)
                .collect()
        };
        for t in titles(std::slice::from_ref(&cpu)) {
            assert!(t.contains(", CPU — tx2") && !t.contains("GPU"), "{t}");
        }
        for t in titles(std::slice::from_ref(&gpu)) {
            assert!(t.contains(", GPU — tx2") && !t.contains("CPU"), "{t}");
        }
        for t in titles(&[gpu, cpu]) {
            assert!(t.contains(", CPU and GPU — tx2"), "{t}");
        }
    }
}
