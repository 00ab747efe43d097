//! The view across workloads: the text summary table printed after a sweep and by
//! `edgebench results`, and in the report the power trace of the trial `--trace` names.

use std::fmt::Write;

use anyhow::bail;

use crate::record::WorkItem;
use crate::render::aggregate;
use crate::render::flags::trial_flags;
use crate::render::fmt::{fmt, training_speedups};
use crate::render::plots::{Mark, Plot, Point, Series, Unit};
use crate::render::select::label;
use crate::render::{Context, Output, Section};
use crate::stats::Spread;
use crate::store::{ResultRow, Store};

/// The section across workloads: the power trace of the trial `--trace` names, on its host's
/// page.
pub(crate) struct Summary;

impl Section for Summary {
    fn name(&self) -> &'static str {
        "summary"
    }

    /// With repeated keys, the means file: each key's figures over its `ok` repetitions.
    fn csv(
        &self,
        _store: &Store,
        rows: &[ResultRow],
        dir: &std::path::Path,
        machine: &str,
    ) -> anyhow::Result<Vec<std::path::PathBuf>> {
        if !rows.iter().any(|r| r.repetition > 1) {
            return Ok(Vec::new());
        }
        let path = dir.join(format!("means_{machine}.csv"));
        crate::render::files::write_atomic(&path, aggregate::means_csv(rows)?)?;
        Ok(vec![path])
    }

    fn write(
        &self,
        _rows: &[ResultRow],
        context: &Context,
        out: &mut Output,
    ) -> anyhow::Result<()> {
        if let Some(row) = context.traced.filter(|r| r.host == context.host) {
            out.plots.push((
                format!("power_trace_{}", short_id(&row.trial_id)),
                trace_plot(context.store, row)?,
            ));
        }
        Ok(())
    }
}

/// The first 8 characters of a trial's UUID, as file names and captions show it.
fn short_id(uuid: &str) -> String {
    uuid.chars().take(8).collect()
}

/// A time in milliseconds with 2 decimals, `-` when absent.
fn fmt_ms(v: Option<f64>) -> String {
    fmt(v, 1e3, 2)
}

/// `mean±half` of a repeated figure, scaled and with `d` decimals; `-` below 2 repetitions.
fn mean_ci(s: Option<&Spread>, scale: f64, d: usize) -> String {
    match s.and_then(|s| Some((s.mean, s.ci95_half()?))) {
        Some((mean, half)) => format!("{:.d$}±{:.d$}", mean * scale, half * scale),
        None => "-".into(),
    }
}

/// The widest cell of the text table, in characters; a longer one ends in `…`.
pub(crate) const MAX_CELL: usize = 60;

/// Renders one line per trial, aligned in columns, each described by its workload.
pub fn table(rows: &[ResultRow]) -> String {
    let mut rows = rows.to_vec();
    crate::workloads::describe(&mut rows);
    let rows = rows.as_slice();
    let speedup = training_speedups(rows);
    // Energy columns only when some trial was measured with --power.
    let energy = rows.iter().any(|r| r.energy_j.is_some());
    // Per image where every trial's item is one; else each cell names its item.
    let all_images = rows.iter().all(|r| r.item == Some(WorkItem::Image));
    let (time_header, energy_header, edp_item_header) = match all_images {
        true => ("ms/img", "J/img", "EDP/img J·s"),
        false => ("ms/item", "J/item", "EDP/item J·s"),
    };
    let per_item = |v: String, r: &ResultRow| match (all_images, v.as_str()) {
        (true, _) | (false, "-") => v,
        (false, _) => match r.item {
            Some(item) => format!("{v}/{}", item.unit()),
            None => v,
        },
    };
    let aggregates = aggregate::by_group(rows);
    // Repetition columns only when some key has two measured repetitions: a sweep without
    // `repeat` prints as it always has.
    let repeated = aggregates.values().any(|a| a.n >= 2);
    let mut header = vec![
        "host",
        "net",
        "device",
        "batch",
        "iters",
        "status",
        time_header,
        "±IQR",
        "img/s",
        "loss first→last",
        "gpu/cpu",
        "flags",
    ];
    if energy {
        header.splice(
            10..10,
            ["W", energy_header, "EDP J·s", edp_item_header, "scope"],
        );
    }
    if repeated {
        header.splice(8..8, ["mean±CI95"]);
        header.insert(4, "rep");
        if energy {
            let at = header
                .iter()
                .position(|h| *h == "scope")
                .expect("energy columns");
            header.insert(at, "J mean±CI95");
        }
    }
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        let spoiled = r.swap_pressure == Some(true);
        let mut flags = trial_flags(r);
        let repeat = &aggregates[&aggregate::group_of(r)];
        if repeat.spread_flag {
            flags.push("SPREAD".into());
        }
        let loss = match (r.loss_first, r.loss_last) {
            (Some(a), Some(b)) => format!("{a:.3}→{b:.3}"),
            _ => "-".into(),
        };
        // A command whose batch is unknown has no item: milliseconds per iteration.
        let time = match (r.time_per_item_s, r.time_per_iteration_s) {
            (None, Some(it)) => format!("{}/it", fmt_ms(Some(it))),
            (per_item_s, _) => per_item(fmt_ms(per_item_s), r),
        };
        let mut line = vec![
            r.host.clone(),
            label(r),
            r.device.clone(),
            r.batch.to_string(),
            // A command's step count is not known ahead (planned 0).
            match r.iterations_planned {
                0 => r.iterations.to_string(),
                planned => format!("{}/{planned}", r.iterations),
            },
            r.status.to_string(),
            // A swap-spoiled or throttled time is not the board's speed: mark it where it is read.
            match (spoiled, r.throttled == Some(true)) {
                (true, _) => format!("{} [swap]", time),
                (false, true) => format!("{} [throttled]", time),
                (false, false) => time,
            },
            fmt_ms(r.time_per_image_spread_s),
            r.images_per_s
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "-".into()),
            loss,
            (r.device == "cuda")
                .then(|| speedup.get(&(r.host.clone(), label(r), r.batch)))
                .flatten()
                .map(|s| format!("{s:.1}x"))
                .unwrap_or_else(|| "-".into()),
            flags.join("; "),
        ];
        if energy {
            let f = |v: Option<f64>, d: usize| {
                v.map(|v| format!("{v:.d$}")).unwrap_or_else(|| "-".into())
            };
            line.splice(
                10..10,
                [
                    f(r.avg_power_w, 2),
                    per_item(f(r.energy_per_item_j, 4), r),
                    f(r.edp_js, 3),
                    r.edp_per_item_js
                        .map(|v| format!("{v:.3e}"))
                        .unwrap_or_else(|| "-".into()),
                    r.power_scope.clone().unwrap_or_else(|| "-".into()),
                ],
            );
        }
        if repeated {
            // The per-item time as the time column shows it: per image, else per step.
            let time = match repeat.time_per_item_s {
                Some(_) => per_item(mean_ci(repeat.time(), 1e3, 2), r),
                None => match mean_ci(repeat.time(), 1e3, 2).as_str() {
                    "-" => "-".into(),
                    t => format!("{t}/it"),
                },
            };
            line.splice(8..8, [time]);
            line.insert(4, r.repetition.to_string());
            if energy {
                // Per image where there is one, else the whole trial's joules.
                let d = if repeat.energy_per_item_j.is_some() {
                    4
                } else {
                    3
                };
                let at = line.len() - 3;
                line.insert(at, mean_ci(repeat.energy(), 1.0, d));
            }
        }
        lines.push(line);
    }
    // A cell from outside (a host or net name, a flag list) may be any length; the table
    // stays readable and its padding within what `format!` can pad.
    for line in &mut lines {
        for cell in line.iter_mut() {
            if let std::borrow::Cow::Owned(cut) = crate::text::ellipsis(cell, MAX_CELL) {
                *cell = cut;
            }
        }
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}", w = *w))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    if rows.iter().any(|r| r.swap_pressure == Some(true)) {
        out.push_str(
            "[swap]: the trial's own memory was paged out and read back while it trained; its time \
             per image measures the swap device, not the board's speed\n",
        );
    }
    if energy {
        let mut scopes: Vec<&str> = rows
            .iter()
            .filter(|r| r.energy_j.is_some())
            .filter_map(|r| r.power_scope.as_deref())
            .collect();
        scopes.sort_unstable();
        scopes.dedup();
        if scopes.len() > 1 {
            out.push_str(
                "scope: these trials measured different scopes (module = the module's input, \
                 board = module and carrier board); compare energies only within one scope\n",
            );
        }
    }
    if let Some(fewest) = rows.iter().filter_map(|r| r.power_low_samples).min() {
        out.push_str(&format!(
            "FEW_READINGS(n): fewer than 10 power-sensor updates fell inside the trial's measured \
             window (fewest: {fewest}); its energy rests on too few readings. Measure longer: \
             more images or epochs\n"
        ));
    }
    if repeated {
        out.push_str(&format!(
            "mean±CI95: the mean over the key's ok repetitions and the half-width of its 95 % \
             confidence interval (Student's t); SPREAD: time or energy varies by more than \
             {:.0} % (coefficient of variation) between them\n",
            aggregate::SPREAD_CV * 100.0
        ));
    }
    if rows.iter().any(|r| r.throttled == Some(true)) {
        out.push_str(
            "[throttled]: a clock changed or dropped for temperature while the trial ran \
             (`edgebench results --json` has the reason in throttle_note)\n",
        );
    }
    out
}

/// The power trace of one trial: every stored rail's watts against seconds from the first
/// iteration's start, with a rule at every iteration boundary.
pub(crate) fn trace_plot(store: &Store, row: &ResultRow) -> anyhow::Result<Plot> {
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
            short_id(&row.trial_id)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TrialStatus;

    fn row(workload: &str, engine: &str, device: &str, tpi: f64) -> ResultRow {
        let mut params = serde_json::Map::new();
        if !engine.is_empty() {
            params.insert("engine".into(), engine.into());
            // Each device's command differs (`--device={device}`).
            params.insert("command".into(), serde_json::json!(["train", device]));
        }
        crate::testkit::rows::described(ResultRow {
            host: "tx2".into(),
            workload: workload.into(),
            net: "alexnet".into(),
            device: device.into(),
            batch: 16,
            status: TrialStatus::Ok,
            time_per_image_s: Some(tpi),
            params,
            ..Default::default()
        })
    }

    #[test]
    fn another_frameworks_gpu_speedup_pairs_its_own_trials() {
        let rows = [
            row("exec", "pytorch", "cpu", 0.1),
            row("exec", "pytorch", "cuda", 0.01),
            row("cnn", "", "cpu", 0.05),
        ];
        let sp = training_speedups(&rows);
        let key = |label: &str| ("tx2".to_string(), label.to_string(), 16);
        assert!((sp[&key("pytorch alexnet")] - 10.0).abs() < 1e-9);
        // edgebench's own CPU trial has no GPU counterpart: not paired with PyTorch's.
        assert!(!sp.contains_key(&key("alexnet")));
        let text = table(&rows);
        let cuda = text.lines().find(|l| l.contains("cuda")).unwrap();
        assert!(
            cuda.contains("pytorch alexnet") && cuda.contains("10.0x"),
            "{text}"
        );
    }

    #[test]
    fn repeated_keys_show_mean_and_interval_and_a_spread_flag() {
        let rep = |repetition: usize, tpi: f64| ResultRow {
            repetition,
            params_text: "{}".into(),
            ..row("cnn", "", "cpu", tpi)
        };
        // One run per key: the table has no repetition columns.
        let single = table(&[rep(1, 0.01)]);
        assert!(
            !single.contains("mean±CI95") && !single.contains("rep"),
            "{single}"
        );
        let rows = [rep(1, 0.010), rep(2, 0.012), rep(3, 0.020)];
        let text = table(&rows);
        let header = text.lines().next().unwrap();
        assert!(
            header.contains("rep") && header.contains("mean±CI95"),
            "{text}"
        );
        let s = crate::stats::spread(&[0.010, 0.012, 0.020]).unwrap();
        let cell = format!("{:.2}±{:.2}", s.mean * 1e3, s.ci95_half().unwrap() * 1e3);
        let lines: Vec<&str> = text.lines().skip(1).take(3).collect();
        for line in &lines {
            // 10, 12 and 20 ms vary by far more than 5 %.
            assert!(line.contains(&cell) && line.contains("SPREAD"), "{text}");
        }
        assert!(text.contains("SPREAD: time or energy varies"), "{text}");
    }
}
