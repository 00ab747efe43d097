//! Reports from real database files: the per-host summaries, plots (SVG and PNG) and CSV
//! files.

use std::path::{Path, PathBuf};

use crate::common;
use crate::common::{arg, run_edgebench};
use crate::fixtures::db::{board_db, board_key, board_run, iter, key, run_info, summary, trial};
use edgebench::report::export_csv;
use edgebench::report::plots::{self, PALETTE};
use edgebench::store::{merge, MemoryColumns, Store};
use rusqlite::Connection;

/// A board with every kind of point: swap-spoiled, throttled, OOM, skipped, failed, and energy.
fn rich_board(path: &Path, host: &str) {
    board_db(path, host);
    let mut s = Store::open(path).unwrap();
    let run = s
        .begin_run(&board_run(host, "2025-02-03T00:00:00Z"))
        .unwrap();
    let t = trial(
        &mut s,
        run,
        &board_key("alexnet", "cpu", 8),
        2,
        "ok",
        Some(0.9),
    );
    s.record_memory(t, Some(true), Some(3 << 30), &MemoryColumns::default())
        .unwrap();
    trial(
        &mut s,
        run,
        &board_key("alexnet", "cpu", 16),
        0,
        "oom",
        None,
    );
    trial(
        &mut s,
        run,
        &board_key("alexnet", "cpu", 32),
        0,
        "skipped_memory",
        None,
    );
    trial(
        &mut s,
        run,
        &board_key("googlenet", "cpu", 8),
        1,
        "failed",
        None,
    );
    let hot = trial(
        &mut s,
        run,
        &board_key("googlenet", "cpu", 4),
        2,
        "ok",
        Some(1.5),
    );
    s.record_clocks(
        hot,
        &edgebench::provenance::ClockReport {
            throttled: Some(true),
            note: Some("CPU policy0 maximum clock changed 2035200 -> 1420800 kHz".into()),
            series: Vec::new(),
        },
    )
    .unwrap();
    s.finish_run(run, "2025-02-03T00:10:00Z", "finished")
        .unwrap();
    drop(s);
    // Energy as the power work will fill it: J/image = 2 / batch, EDP = energy x time.
    Connection::open(path)
        .unwrap()
        .execute_batch(
            "UPDATE trials SET energy_per_image_j = 2.0 / batch,
                 energy_j = 2.0 * iterations_done,
                 edp_js = 2.0 * iterations_done * time_per_image_s * batch * iterations_done
             WHERE status = 'ok';",
        )
        .unwrap();
}

/// `results.db` in `dir`: a rich tx2 board merged with a plain nano.lan one.
fn two_boards(dir: &Path) -> PathBuf {
    let (a, b, db) = (dir.join("a.db"), dir.join("b.db"), dir.join("results.db"));
    rich_board(&a, "tx2");
    board_db(&b, "nano.lan");
    merge(&[a, b], &db).unwrap();
    db
}

/// Vertex counts of every `<polyline points="...">` in an SVG.
fn polylines(svg: &str) -> Vec<usize> {
    svg.split("<polyline")
        .skip(1)
        .filter_map(|p| {
            let p = &p[p.find("points=\"")? + 8..];
            Some(p[..p.find('"')?].split_whitespace().count())
        })
        .collect()
}

#[test]
fn report_files_match_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = two_boards(dir.path());
    let out = dir.path().join("report");
    let o = run_edgebench(
        dir.path(),
        &["report", arg(&db), "--out", arg(&out), "--compare"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let store = Store::open_readonly(&db).unwrap();
    let rows = store.results().unwrap();
    for (host, dirname) in [("tx2", "tx2"), ("nano.lan", "nano_lan")] {
        let d = out.join(dirname);
        let mut files = vec![
            format!("loss_{dirname}_edgebench.csv"),
            format!("times_{dirname}_edgebench.csv"),
            "summary.md".into(),
            "summary.html".into(),
            "time_per_image.svg".into(),
            "speedup.svg".into(),
            "loss_alexnet_cpu.svg".into(),
            "loss_alexnet_cuda.svg".into(),
            "loss_googlenet_cpu.svg".into(),
        ];
        if host == "tx2" {
            files.extend(["energy_per_image.svg".into(), "edp.svg".into()]);
        } else {
            assert!(!d.join("edp.svg").exists(), "EDP plot without energy");
        }
        for f in &files {
            let len = std::fs::metadata(d.join(f)).map(|m| m.len()).unwrap_or(0);
            assert!(len > 0, "{host}: {f} missing or empty");
            if f.ends_with(".svg") {
                let pdf = std::fs::read(d.join(f).with_extension("pdf")).unwrap_or_default();
                assert!(
                    pdf.starts_with(b"%PDF-"),
                    "{host}: {f} has no PDF beside it"
                );
            }
        }

        // The Markdown table's numbers are the DB's.
        let md = std::fs::read_to_string(d.join("summary.md")).unwrap();
        let (mut table_rows, mut gpu_cells) = (0, 0);
        let mut section = String::new();
        let mut header: Vec<String> = Vec::new();
        for line in md.lines() {
            if let Some(t) = line.strip_prefix("## ") {
                section = t.to_string();
                continue;
            }
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            if cells[0] == "batch" {
                header = cells.iter().map(|c| c.to_string()).collect();
                continue;
            }
            let col = |name: &str| {
                header
                    .iter()
                    .position(|h| h == name)
                    .unwrap_or_else(|| panic!("no {name} column in {header:?}"))
            };
            let Ok(batch) = cells[0].parse::<usize>() else {
                continue;
            };
            table_rows += 1;
            let (net, rest) = section.split_once(" on ").unwrap();
            let device = rest.split(' ').next().unwrap();
            let r = rows
                .iter()
                .rev()
                .find(|r| r.host == host && r.net == net && r.device == device && r.batch == batch)
                .unwrap();
            assert_eq!(cells[col("status")], r.status.as_str(), "{line}");
            match r.time_per_image_s.filter(|_| r.status == "ok") {
                Some(t) => {
                    let ms: f64 = cells[col("ms/image")].parse().unwrap();
                    assert!((ms - t * 1e3).abs() < 6e-4, "{line}: {t}");
                }
                None => assert_eq!(cells[col("ms/image")], "-", "{line}"),
            }
            let gpu_mib = r.peak_gpu_bytes.map(|b| (b >> 20).to_string());
            assert_eq!(
                cells[col("peak GPU MiB")],
                gpu_mib.as_deref().unwrap_or("-"),
                "{line}"
            );
            gpu_cells += usize::from(gpu_mib.is_some());
            assert_eq!(
                cells[col("flags")].contains("SWAP"),
                r.swap_pressure == Some(true),
                "{line}"
            );
            assert_eq!(
                cells[col("flags")].contains("THROTTLED"),
                r.throttled == Some(true),
                "{line}"
            );
        }
        let picked = edgebench::report::build::pick(
            &rows
                .iter()
                .filter(|r| r.host == host)
                .cloned()
                .collect::<Vec<_>>(),
        );
        assert_eq!(
            table_rows,
            picked.len(),
            "{host}: one table row per (net, device, batch)"
        );
        // The fixture's GPU trials carry a peak: the column was read, not left empty.
        assert_eq!(gpu_cells, 3, "{host}: one GPU peak per cuda batch");

        // The time plot: one line per net x device through its timed points.
        let svg = std::fs::read_to_string(d.join("time_per_image.svg")).unwrap();
        let host_rows: Vec<_> = rows.iter().filter(|r| r.host == host).cloned().collect();
        let repetitions = edgebench::report::aggregate::Repetitions::of(&host_rows);
        let series = edgebench::report::build::batch_series(&picked, &repetitions, "", |r| {
            r.time_per_image_s
        });
        let lines = polylines(&svg);
        for s in &series {
            let n = s.line().len();
            assert!(
                lines.contains(&n),
                "{host}: no {n}-vertex line for {}: {lines:?}",
                s.label
            );
            assert!(svg.contains(&s.label), "{host}: legend lacks {}", s.label);
        }
        let dots = series.iter().map(|s| s.points.len()).sum::<usize>();
        assert!(svg.matches("<circle").count() >= dots.min(1));
        if host == "tx2" {
            for legend in [
                "swap-spoiled",
                "throttled",
                "out of memory",
                "skipped",
                "failed",
            ] {
                assert!(svg.contains(legend), "time plot legend lacks {legend}");
            }
            let edp = std::fs::read_to_string(d.join("edp.svg")).unwrap();
            assert!(edp.contains("lowest EDP"));
        }
        // Loss: one line per batch, one vertex per iteration.
        let svg = std::fs::read_to_string(d.join("loss_alexnet_cpu.svg")).unwrap();
        let lines = polylines(&svg);
        for ((net, device, _), r) in &picked {
            if net == "alexnet" && device == "cpu" && r.iterations > 0 {
                assert!(
                    lines.contains(&r.iterations),
                    "{lines:?} lacks {}",
                    r.iterations
                );
            }
        }
    }
    let cmp = std::fs::read_to_string(out.join("compare").join("time_per_image.svg")).unwrap();
    assert!(cmp.contains("tx2: alexnet cpu") && cmp.contains("nano.lan: alexnet cpu"));
    assert!(out.join("compare").join("speedup.svg").exists());

    // The CSV files hold the host's own trials only.
    let times =
        std::fs::read_to_string(out.join("nano_lan").join("times_nano_lan_edgebench.csv")).unwrap();
    assert_eq!(times.lines().count(), 1 + 9);

    // A foreign file is refused as bad input.
    let foreign = dir.path().join("photos.db");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE photos (id INTEGER)")
        .unwrap();
    let o = run_edgebench(dir.path(), &["report", arg(&foreign), "--out", arg(&out)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains(arg(&foreign)));
}

/// Every file under `dir` (relative paths), sorted.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// Whether any pixel of `img` in the rectangle is dark (text and axes are black).
fn dark_in(img: &image::RgbImage, xs: std::ops::Range<u32>, ys: std::ops::Range<u32>) -> usize {
    ys.flat_map(|y| xs.clone().map(move |x| (x, y)))
        .filter(|&(x, y)| img.get_pixel(x, y).0.iter().all(|c| *c < 80))
        .count()
}

#[test]
fn report_draws_png_plots_with_text() {
    let dir = tempfile::tempdir().unwrap();
    let db = two_boards(dir.path());
    // A power trace for --trace: two rails over the trial's iterations.
    let store = Store::open_readonly(&db).unwrap();
    let rows = store.results().unwrap();
    let traced = rows
        .iter()
        .find(|r| r.host == "tx2" && r.status == "ok" && r.iterations > 1)
        .unwrap();
    drop(store);
    let c = Connection::open(&db).unwrap();
    for (rail, watts) in [("VDD_IN", 7.0), ("VDD_SOC", 2.0)] {
        for t in 0..40i64 {
            c.execute(
                "INSERT INTO power_samples (trial_id, source, rail, t_ns, watts) \
                 VALUES (?1, 'test', ?2, ?3, ?4)",
                rusqlite::params![traced.trial_rowid, rail, t * 50, watts + (t % 7) as f64],
            )
            .unwrap();
        }
    }
    drop(c);
    let prefix = &traced.trial_id[..8];
    let (svg_out, png_out) = (dir.path().join("svg"), dir.path().join("png"));
    for (out, format) in [(&svg_out, "svg"), (&png_out, "png")] {
        let o = run_edgebench(
            dir.path(),
            &[
                "report",
                arg(&db),
                "--out",
                arg(out),
                "--compare",
                "--trace",
                prefix,
                "--format",
                format,
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    // The same plots as the SVG report, each a .png instead of a .svg (and its .pdf).
    let svg_files: Vec<PathBuf> = tree(&svg_out)
        .into_iter()
        .filter(|p| p.extension().is_none_or(|e| e != "pdf"))
        .collect();
    let png_files = tree(&png_out);
    let plots: Vec<&PathBuf> = svg_files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
        .collect();
    let expected: Vec<PathBuf> = svg_files
        .iter()
        .map(|p| match p.extension() {
            Some(e) if e == "svg" => p.with_extension("png"),
            _ => p.clone(),
        })
        .collect();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(png_files, expected_sorted);
    for want in [
        PathBuf::from("tx2/time_per_image.png"),
        PathBuf::from("tx2/edp.png"),
        PathBuf::from("tx2/loss_alexnet_cpu.png"),
        PathBuf::from(format!("tx2/power_trace_{prefix}.png")),
        PathBuf::from("nano_lan/speedup.png"),
        PathBuf::from("compare/time_per_image.png"),
        PathBuf::from("compare/speedup.png"),
    ] {
        assert!(png_files.contains(&want), "{want:?} not in {png_files:?}");
    }
    assert!(plots.len() >= 14, "{plots:?}");
    // The HTML page shows the PNGs.
    let html = std::fs::read_to_string(png_out.join("tx2").join("summary.html")).unwrap();
    assert!(html.contains("<img src=\"time_per_image.png\""), "{html}");

    // A column's width at 300 dpi; as tall as the figure's legend needs.
    let w = (plots::DEFAULT_WIDTH_IN * plots::PNG_DPI).round() as u32;
    for svg in plots {
        let path = png_out.join(svg.with_extension("png"));
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{path:?}");
        let img = image::load_from_memory_with_format(&bytes, image::ImageFormat::Png)
            .unwrap_or_else(|e| panic!("{path:?}: {e}"))
            .to_rgb8();
        assert_eq!(img.width(), w, "{path:?}");
        assert!(img.height() > w / 2, "{path:?}: {:?}", img.dimensions());
        let colours: std::collections::HashSet<[u8; 3]> = img.pixels().map(|p| p.0).collect();
        assert!(colours.len() >= 10, "{path:?}: {} colours", colours.len());
        // Text: the title across the top and the rotated y label along the left edge, where
        // nothing else is drawn.
        assert!(
            dark_in(&img, w / 4..w * 3 / 4, 0..70) > 100,
            "{path:?}: no title text"
        );
        assert!(
            dark_in(&img, 0..50, 300..550) > 50,
            "{path:?}: no y-axis label text"
        );
        // Every series colour of the SVG (lines and markers) is drawn in the PNG too.
        let svg_text = std::fs::read_to_string(svg_out.join(svg)).unwrap();
        let mut drawn = 0;
        for c in PALETTE {
            if svg_text.contains(&format!("\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2)) {
                drawn += 1;
                assert!(
                    colours.contains(&[c.0, c.1, c.2]),
                    "{path:?}: series colour {c:?} not drawn"
                );
            }
        }
        assert!(drawn > 0, "{svg:?}: no series colour");
    }
}

#[test]
fn csv_export_two_trials() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&dir.path().join("bench.db")).unwrap();
    let run = s
        .begin_run(&run_info("run-1", "jetson-nano", "2025-01-31T12:00:00Z"))
        .unwrap();

    let a = s
        .begin_trial(run, &key("alexnet", "cpu", 8), 3, 1, "t")
        .unwrap();
    let a_times = [0.5, 0.25, 0.125];
    for (i, t) in a_times.iter().enumerate() {
        s.record_iteration(a, &iter(i, 6.9 - i as f64 * 0.1, *t))
            .unwrap();
    }
    s.finish_trial(a, &summary("ok")).unwrap();

    let g = s
        .begin_trial(run, &key("googlenet", "cuda", 16), 4, 1, "t")
        .unwrap();
    let g_times = [0.31, 0.17, 0.19, 0.23];
    for (i, t) in g_times.iter().enumerate() {
        s.record_iteration(g, &iter(i, 6.9, *t)).unwrap();
    }
    s.finish_trial(g, &summary("ok")).unwrap();

    // An older, superseded alexnet/cpu/8 series must not appear.
    let run0 = s
        .begin_run(&run_info("run-0", "jetson-nano", "2025-01-30T12:00:00Z"))
        .unwrap();
    let old = s
        .begin_trial(run0, &key("alexnet", "cpu", 8), 3, 1, "t")
        .unwrap();
    s.record_iteration(old, &iter(0, 1.0, 9.0)).unwrap();
    s.finish_trial(old, &summary("ok")).unwrap();

    let out = dir.path().join("csv/out");
    let files = export_csv(&s, &out, "nano").unwrap();
    assert_eq!(
        files,
        vec![
            out.join("loss_nano_edgebench.csv"),
            out.join("times_nano_edgebench.csv")
        ]
    );

    let loss = std::fs::read_to_string(&files[0]).unwrap();
    let lines: Vec<&str> = loss.lines().collect();
    assert_eq!(lines[0], "#network,mode,batch,step,loss,time");
    assert_eq!(lines.len() - 1, a_times.len() + g_times.len());
    // Python's csv module ends each line so (annex C of the thesis).
    assert_eq!(loss.matches("\r\n").count(), lines.len(), "{loss}");
    let first: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(&first[..4], &["alexnet", "CPU", "008", "0"]);
    assert_eq!(first[4].parse::<f64>().unwrap(), 6.9);
    assert_eq!(first[5].parse::<f64>().unwrap(), 0.5);
    let g_rows: Vec<&&str> = lines[1..]
        .iter()
        .filter(|l| l.starts_with("googlenet,GPU,016,"))
        .collect();
    assert_eq!(g_rows.len(), 4);
    let steps: Vec<&str> = g_rows
        .iter()
        .map(|l| l.split(',').nth(3).unwrap())
        .collect();
    assert_eq!(steps, ["0", "1", "2", "3"]);
    assert!(
        !loss.contains(",9\r\n"),
        "superseded trial exported:\n{loss}"
    );

    let times = std::fs::read_to_string(&files[1]).unwrap();
    let lines: Vec<&str> = times.lines().collect();
    assert_eq!(lines[0], "#network,mode,batch,avg_time");
    assert_eq!(lines.len(), 3);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    for (line, prefix, expected) in [
        (lines[1], "alexnet,CPU,008,", mean(&a_times)),
        (lines[2], "googlenet,GPU,016,", mean(&g_times)),
    ] {
        let avg = line
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{line}"));
        assert_eq!(avg.parse::<f64>().unwrap(), expected, "{line}");
    }
}

#[test]
fn csv_export_rejects_path_like_machine_name() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("bench.db")).unwrap();
    assert!(export_csv(&s, dir.path(), "../evil").is_err());
    assert!(export_csv(&s, dir.path(), "").is_err());
}

/// A board with no CNN trial: an imported engine (one batch without a time, as an exec whose
/// output gave none), its loss curves, and the MLP study on both devices; nvpmodel recorded.
fn engines_board(path: &Path, host: &str) {
    let mut s = Store::open(path).unwrap();
    let run = s
        .begin_run(&board_run(host, "2025-03-04T00:00:00Z"))
        .unwrap();
    let mut p = edgebench::provenance::Provenance::default();
    p.0.insert("nvpmodel".into(), "MAXN (mode 0)".into());
    p.0.insert("board".into(), "jetson-orin-nano".into());
    s.record_provenance(run, &p).unwrap();
    let exec = |net: &str, device: &str, batch: usize| edgebench::store::TrialKey {
        workload: "exec".into(),
        params: r#"{"command":[],"engine":"caffe"}"#.into(),
        ..board_key(net, device, batch)
    };
    trial(&mut s, run, &exec("alexnet", "cpu", 4), 3, "ok", Some(0.02));
    trial(&mut s, run, &exec("alexnet", "cpu", 8), 3, "ok", None);
    trial(
        &mut s,
        run,
        &exec("alexnet", "cuda", 4),
        3,
        "ok",
        Some(0.005),
    );
    for (size, n) in [("large", 64), ("small", 8)] {
        for device in ["cpu", "cuda"] {
            let k = edgebench::store::TrialKey {
                workload: "mlp".into(),
                params: format!(
                    r#"{{"d_in":30,"d_out":5,"h":4,"n":{n},"size":"{size}","style":"tensors"}}"#
                ),
                ..board_key("mlp", device, n)
            };
            trial(&mut s, run, &k, 3, "ok", Some(0.001 * n as f64));
        }
    }
    s.finish_run(run, "2025-03-05T00:10:00Z", "finished")
        .unwrap();
}

/// Every `href="..."` and `src="..."` of a page.
fn links(html: &str, attr: &str) -> Vec<String> {
    let key = format!("{attr}=\"");
    html.split(key.as_str())
        .skip(1)
        .filter_map(|p| p.split('"').next().map(str::to_string))
        .collect()
}

#[test]
fn report_figures_for_a_paper() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("results.db");
    engines_board(&db, "orin");
    let out = dir.path().join("report");
    let o = run_edgebench(dir.path(), &["report", arg(&db), "--out", arg(&out)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d = out.join("orin");
    let files: Vec<String> = tree(&d)
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();

    // No CNN trial: no CNN figure or CSV file, rather than an empty one.
    for absent in [
        "time_per_image.svg",
        "speedup.svg",
        "edp.svg",
        "loss_orin_edgebench.csv",
        "times_orin_edgebench.csv",
    ] {
        assert!(!files.iter().any(|f| f == absent), "{absent} in {files:?}");
    }
    // The engine's figures, its loss per (net, device) and the MLP study's, each with a PDF.
    for want in [
        "time_per_image_engines.svg",
        "speedup_engines.svg",
        "loss_caffe_alexnet_cpu.svg",
        "loss_caffe_alexnet_cuda.svg",
        "mlp_time.svg",
    ] {
        assert!(files.iter().any(|f| f == want), "{want} not in {files:?}");
        let pdf = std::fs::read(d.join(want).with_extension("pdf")).unwrap();
        assert!(pdf.starts_with(b"%PDF-"), "{want}: no PDF beside it");
    }
    let svgs = files.iter().filter(|f| f.ends_with(".svg")).count();
    let pdfs = files.iter().filter(|f| f.ends_with(".pdf")).count();
    assert_eq!(svgs, pdfs, "{files:?}");

    // The batch without a time is in the no-value row, not drawn as the fastest point.
    let time = std::fs::read_to_string(d.join("time_per_image_engines.svg")).unwrap();
    assert!(
        time.contains(">\nno value\n<"),
        "no row for the missing value"
    );
    // Filled markers of the cpu line (the first colour): batch 4 and its legend key only.
    let c = PALETTE[0];
    let fill = format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
    assert_eq!(time.matches(&fill).count(), 2, "{time}");
    // Loss against iteration: one vertex per iteration.
    let loss = std::fs::read_to_string(d.join("loss_caffe_alexnet_cpu.svg")).unwrap();
    assert!(polylines(&loss).iter().filter(|n| **n == 3).count() >= 2);
    // The MLP sizes in order of work, as named ticks.
    let mlp = std::fs::read_to_string(d.join("mlp_time.svg")).unwrap();
    let tick = |t: &str| mlp.find(&format!(">\n{t}\n<")).unwrap();
    let (small, large) = (tick("small"), tick("large"));
    assert!(small < large, "sizes out of order");
    assert!(mlp.contains("tensors cpu") && mlp.contains("tensors cuda"));

    // summary.html: every figure in a <figure> with its caption (what, where, when), every
    // file of the report linked. The trials began on 2025-02-01 (`trial` in the fixtures).
    let html = std::fs::read_to_string(d.join("summary.html")).unwrap();
    let srcs = links(&html, "src");
    assert_eq!(srcs.len(), svgs, "{srcs:?}");
    assert_eq!(html.matches("<figcaption>").count(), svgs);
    for caption in html.split("<figcaption>").skip(1) {
        let caption = &caption[..caption.find("</figcaption>").unwrap()];
        for part in [
            "Host orin",
            "jetson-orin-nano",
            "MAXN (mode 0)",
            "2025-02-01",
        ] {
            assert!(caption.contains(part), "caption lacks {part}: {caption}");
        }
    }
    let hrefs = links(&html, "href");
    for f in files.iter().filter(|f| *f != "summary.html") {
        assert!(hrefs.contains(f), "{f} not linked from summary.html");
    }
    // Each caption beside its figure, the same as under it in summary.html, not in the
    // figure; a figure of a paper's column, its text at 8 to 9 pt.
    for figure in html.split("<figure ").skip(1) {
        let svg_name = &links(figure, "src")[0];
        let caption = &figure[figure.find("<figcaption>").unwrap()..];
        let svg = std::fs::read_to_string(d.join(svg_name)).unwrap();
        let beside = std::fs::read_to_string(plots::caption_path(&d.join(svg_name))).unwrap();
        let beside = beside
            .trim_end()
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;");
        assert!(
            caption.contains(&beside),
            "{svg_name}: {beside} vs {caption}"
        );
        assert!(
            !svg.contains("jetson-orin-nano"),
            "{svg_name}: caption drawn"
        );
        assert!(svg.contains("<svg width=\"252pt\""), "{svg_name}");
    }

    browser_check(&d.join("summary.html"), srcs.len());

    // A page's width, the caption drawn in as well; a width no page has is refused.
    let wide = dir.path().join("wide");
    let o = run_edgebench(
        dir.path(),
        &[
            "report",
            arg(&db),
            "--out",
            arg(&wide),
            "--figure-width",
            "7",
            "--figure-captions",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let svg = std::fs::read_to_string(wide.join("orin").join("mlp_time.svg")).unwrap();
    assert!(svg.contains("<svg width=\"504pt\""));
    assert!(svg.contains("jetson-orin-nano"), "caption not drawn in");
    let o = run_edgebench(
        dir.path(),
        &[
            "report",
            arg(&db),
            "--out",
            arg(&wide),
            "--figure-width",
            "35",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--figure-width") && err.contains("2 to 12 inches"),
        "{err}"
    );
}

/// Loads `page` in headless Chromium, 800 px wide (narrower than a figure), and asserts that
/// every image loaded, nothing is wider than the window, and every table fits its container
/// (no table scrolls sideways inside the page).
fn browser_check(page: &Path, images: usize) {
    let chromium = ["chromium", "chromium-browser"].into_iter().find(|c| {
        std::process::Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some(chromium) = chromium else {
        common::cannot_run("no chromium to load summary.html (Debian: apt-get install chromium)");
        return;
    };
    // The page as written, with a script that writes its verdict into the DOM after load.
    let check = page.with_file_name("summary_check.html");
    let script = "<script>window.addEventListener('load', () => {\
        const imgs = [...document.images];\
        const broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0))\
            .map(i => i.getAttribute('src'));\
        const wide = [...document.querySelectorAll('body *')]\
            .filter(e => !e.parentElement.closest('div.table'))\
            .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)\
            .map(e => e.tagName);\
        const tables = [...document.querySelectorAll('table')];\
        const clipped = tables\
            .filter(t => t.getBoundingClientRect().width > t.parentElement.clientWidth + 0.5\
                || t.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)\
            .map(t => (t.parentElement.previousElementSibling || {}).textContent + ': ' +\
                Math.round(t.getBoundingClientRect().width) + ' px in ' +\
                t.parentElement.clientWidth + ' px');\
        const v = {images: imgs.length, broken, wide, tables: tables.length, clipped,\
            scroll: document.documentElement.scrollWidth,\
            client: document.documentElement.clientWidth};\
        const pre = document.createElement('pre');\
        pre.id = 'verdict';\
        pre.textContent = 'VER' + 'DICT:' + JSON.stringify(v);\
        document.body.appendChild(pre);});</script>";
    let html = std::fs::read_to_string(page).unwrap();
    std::fs::write(&check, html.replace("</body>", &format!("{script}</body>"))).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            "--window-size=800,900",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", check.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&o.stdout);
    let verdict = dom
        .split("VERDICT:")
        .nth(1)
        .and_then(|v| v.split("</pre>").next())
        .unwrap_or_else(|| {
            panic!(
                "no verdict from chromium:\n{dom}\n{}",
                String::from_utf8_lossy(&o.stderr)
            )
        });
    let v: serde_json::Value = serde_json::from_str(verdict).unwrap();
    assert_eq!(v["images"], images, "{v}");
    assert_eq!(
        v["broken"],
        serde_json::json!([]),
        "images that did not load: {v}"
    );
    assert_eq!(
        v["wide"],
        serde_json::json!([]),
        "elements wider than the window: {v}"
    );
    assert!(v["tables"].as_u64().is_some_and(|n| n > 0), "no table: {v}");
    assert_eq!(
        v["clipped"],
        serde_json::json!([]),
        "tables wider than their place in an 800 px window: {v}"
    );
    let width = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("no {k} in {v}"));
    assert!(
        width("scroll") <= width("client"),
        "the page scrolls sideways: {v}"
    );
}

/// The rows of the Markdown table titled `title` (its header first), each a list of cells.
fn md_table(md: &str, title: &str) -> Vec<Vec<String>> {
    let start = md
        .find(&format!("## {title}"))
        .unwrap_or_else(|| panic!("no table {title} in {md}"));
    md[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter(|l| !l.starts_with("|---"))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// Mean and standard deviation (n - 1) of `values`, computed here rather than by edgebench.
fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Student's t at 0.975 for 1 and 2 degrees of freedom.
fn t975(dof: usize) -> f64 {
    match dof {
        1 => 12.706_204_736_174_707,
        2 => 4.302_652_729_911_275,
        _ => panic!("no t for {dof} degrees of freedom here"),
    }
}

/// Asserts that `cell` shows the mean of `values` (scaled, `digits` decimals), with its 95 %
/// confidence interval's half-width after ` ± ` when `ci`.
fn assert_mean_cell(what: &str, cell: &str, values: &[f64], scale: f64, digits: i32, ci: bool) {
    let (mean, sd) = mean_sd(values);
    let tolerance = 0.5 * 10f64.powi(-digits) + 1e-9;
    let (shown_mean, shown_half) = match cell.split_once(" ± ") {
        Some((m, h)) => (m, Some(h)),
        None => (cell, None),
    };
    let number = |s: &str| -> f64 {
        s.parse()
            .unwrap_or_else(|_| panic!("{what}: '{cell}' is no number (values {values:?})"))
    };
    assert!(
        (number(shown_mean) - mean * scale).abs() <= tolerance,
        "{what}: '{cell}' is not the mean {} of {values:?}",
        mean * scale
    );
    match (ci, shown_half) {
        (true, Some(h)) => {
            let half = t975(values.len() - 1) * sd / (values.len() as f64).sqrt();
            assert!(
                (number(h) - half * scale).abs() <= tolerance,
                "{what}: '{cell}' is not ± the CI half-width {} of {values:?}",
                half * scale
            );
        }
        (false, None) => {}
        _ => panic!("{what}: '{cell}' (an interval expected: {ci})"),
    }
}

/// A real `--repeat 3` sweep of each workload with a table of figures (the MLP study and the
/// operators with --power on a prepared sensor, a command whose third run fails), then
/// `edgebench report`: every figure of a repeated key's row is the mean over its `ok`
/// repetitions as `results --json` gives them one by one (± the 95 % interval where the table
/// shows one), the failed repetition is named, the flags are the repetitions', and
/// summary.html shows the same cells and fits an 800 px window.
#[test]
fn repeated_sweep_report_cells_are_the_means_of_the_ok_repetitions() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sys = d.join("sys");
    crate::fixtures::jetson::orin_nx_power(&sys);
    let db = d.join("repeat.db");
    let sweep = |args: &[&str]| {
        let o = common::edgebench(d)
            .args(args)
            .args(["--repeat", "3", "--db", arg(&db)])
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", common::describe(&o));
    };
    sweep(&[
        "run",
        "--workload",
        "mlp",
        "--style",
        "tensors",
        "--size",
        "8x32x16x4",
        "--iterations",
        "6",
        "--power",
        "--sysfs",
        arg(&sys),
    ]);
    let ops_config = d.join("ops.toml");
    std::fs::write(
        &ops_config,
        "[ops]\nmin_executions = 3\nmin_time_s = 0.05\n",
    )
    .unwrap();
    sweep(&[
        "run",
        "--config",
        arg(&ops_config),
        "--workload",
        "ops",
        "--op",
        "add,dot",
        "--mb",
        "1",
        "--power",
        "--sysfs",
        arg(&sys),
    ]);
    // A command that fails on its third run: a counter in a file.
    let counter = d.join("runs");
    let script = format!(
        "n=$(cat {0} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {0}; \
         if [ $n -eq 3 ]; then echo out of cheese >&2; exit 3; fi; \
         for i in 0 1 2 3 4 5; do sleep 0.02; echo \"EDGEBENCH step=$i loss=$((9-i)) images=4\"; done",
        arg(&counter)
    );
    let o = common::edgebench(d)
        .args([
            "exec",
            "--name",
            "script",
            "--parser",
            "edgebench",
            "--net",
            "alexnet",
        ])
        .args([
            "--batch",
            "4",
            "--repeat",
            "3",
            "--db",
            arg(&db),
            "--",
            "sh",
            "-c",
        ])
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap().trim(),
        "3",
        "{}",
        common::describe(&o)
    );

    let rows = common::results(d, &db);
    let out = d.join("report");
    let o = run_edgebench(d, &["report", arg(&db), "--out", arg(&out)]);
    assert!(o.status.success(), "{}", common::describe(&o));
    let host = rows[0]["host"].as_str().unwrap();
    let page = out.join(edgebench::report::build::safe_name(host));
    let md = std::fs::read_to_string(page.join("summary.md")).unwrap();
    let html = std::fs::read_to_string(page.join("summary.html")).unwrap();

    // The trials of one key, ok ones only, as results --json gives them.
    let ok_trials = |matches: &dyn Fn(&serde_json::Value) -> bool| -> Vec<&serde_json::Value> {
        rows.iter()
            .filter(|r| matches(r) && r["status"] == "ok")
            .collect()
    };
    let values = |trials: &[&serde_json::Value], key: &str| -> Vec<f64> {
        trials
            .iter()
            .map(|r| r[key].as_f64().unwrap_or_else(|| panic!("no {key} in {r}")))
            .collect()
    };
    // SPREAD exactly when a time or energy varies by more than 5 % between the repetitions.
    let spread = |trials: &[&serde_json::Value]| {
        [
            "time_per_item_s",
            "time_per_iteration_s",
            "energy_per_item_j",
            "energy_j",
        ]
        .iter()
        .filter(|k| trials.iter().all(|r| r[**k].is_number()))
        .any(|k| {
            let (mean, sd) = mean_sd(&values(trials, k));
            sd / mean.abs() > 0.05
        })
    };
    // The ok repetitions' FEW_READINGS flags are in the row's flags, and SPREAD as computed.
    let check_flags = |what: &str, cell: &str, trials: &[&serde_json::Value]| {
        for r in trials {
            if let Some(n) = r["power_low_samples"].as_u64() {
                assert!(
                    cell.contains(&format!("FEW_READINGS({n})")),
                    "{what}: {cell}"
                );
            }
        }
        assert_eq!(cell.contains("SPREAD"), spread(trials), "{what}: {cell}");
    };
    // Every row of a table in the page as in the Markdown, cell for cell (the page's cells
    // may break after a `/` and keep `± x` together).
    let page_text = html.replace("<wbr>", "").replace("&nbsp;", " ");
    let in_html = |table: &[Vec<String>]| {
        for row in table {
            let tds: String = row.iter().map(|c| format!("<td>{c}</td>")).collect();
            assert!(page_text.contains(&tds), "not in summary.html: {row:?}");
        }
    };

    // The MLP study: one key, three ok repetitions.
    let mlp = md_table(&md, &format!("MLP study on cpu — {host}"));
    let col = |name: &str| mlp[0].iter().position(|h| h == name).unwrap();
    assert_eq!(mlp.len(), 2, "{md}");
    let row = &mlp[1];
    let trials = ok_trials(&|r: &serde_json::Value| r["workload"] == "mlp");
    assert_eq!(trials.len(), 3);
    assert_eq!(row[col("runs")], "3 ok / 3 run");
    for (column, key, scale, digits, ci) in [
        ("ms/iteration", "time_per_iteration_s", 1e3, 2, true),
        ("± IQR ms", "time_per_iteration_spread_s", 1e3, 2, false),
        ("window s", "window_s", 1.0, 2, true),
        ("GFLOP/s", "gflop_per_s", 1.0, 2, false),
        ("J", "energy_j", 1.0, 2, true),
        ("W", "avg_power_w", 1.0, 2, true),
        ("mJ/sample", "energy_per_item_j", 1e3, 4, true),
        ("EDP J·s", "edp_js", 1.0, 2, true),
    ] {
        assert_mean_cell(
            &format!("mlp {column}"),
            &row[col(column)],
            &values(&trials, key),
            scale,
            digits,
            ci,
        );
    }
    check_flags("mlp", &row[col("flags")], &trials);
    in_html(&mlp[1..]);

    // The operators: two keys, each three ok repetitions, in two tables.
    for (title, columns) in [
        (
            format!("Operators on cpu — {host}"),
            &[
                ("ms/execution", "time_per_item_s", 1e3, 3, true),
                ("median ms", "time_per_item_median_s", 1e3, 3, false),
                ("GFLOP/s", "gflop_per_s", 1.0, 2, false),
                ("GB/s", "gbyte_per_s", 1.0, 2, false),
                ("FLOP/byte", "intensity_flop_per_byte", 1.0, 3, false),
            ][..],
        ),
        (
            format!("Operators on cpu: share of peak and energy — {host}"),
            &[
                (
                    "% measured FLOP/s",
                    "pct_measured_peak_flops",
                    1.0,
                    1,
                    false,
                ),
                (
                    "% measured GB/s",
                    "pct_measured_peak_bandwidth",
                    1.0,
                    1,
                    false,
                ),
                ("mJ/execution", "energy_per_item_j", 1e3, 4, true),
                ("J/GFLOP", "joule_per_gflop", 1.0, 4, true),
                ("J/GB", "joule_per_gbyte", 1.0, 4, true),
            ][..],
        ),
    ] {
        let ops = md_table(&md, &title);
        let col = |name: &str| ops[0].iter().position(|h| h == name).unwrap();
        assert_eq!(ops.len(), 3, "{md}");
        for row in &ops[1..] {
            let op = row[col("op")].clone();
            let trials = ok_trials(&|r: &serde_json::Value| {
                r["workload"] == "ops" && r["op"] == op.as_str()
            });
            assert_eq!(trials.len(), 3, "{op}");
            for &(column, key, scale, digits, ci) in columns {
                assert_mean_cell(
                    &format!("{op} {column}"),
                    &row[col(column)],
                    &values(&trials, key),
                    scale,
                    digits,
                    ci,
                );
            }
            if let Some(flags) = ops[0].iter().position(|h| h == "flags") {
                assert_eq!(row[col("runs")], "3 ok / 3 run");
                check_flags(&op, &row[flags], &trials);
            }
        }
        in_html(&ops[1..]);
    }

    // The command: two ok repetitions of three, the third named as failed with its error.
    let exec = md_table(&md, &format!("Engine script on cpu — {host}"));
    let col = |name: &str| exec[0].iter().position(|h| h == name).unwrap();
    assert_eq!(exec.len(), 2, "{md}");
    let row = &exec[1];
    let trials = ok_trials(&|r: &serde_json::Value| r["workload"] == "exec");
    assert_eq!(trials.len(), 2);
    assert_eq!(
        row[col("runs")],
        "2 ok / 3 run; repetition 3 failed: command exited with code 3; end of stderr:"
    );
    assert_eq!(row[col("status")], "ok");
    assert_mean_cell(
        "exec ms/image",
        &row[col("ms/image")],
        &values(&trials, "time_per_item_s"),
        1e3,
        3,
        true,
    );
    assert_mean_cell(
        "exec median ms",
        &row[col("median ms")],
        &values(&trials, "time_per_item_median_s"),
        1e3,
        3,
        false,
    );
    // The row with a failed repetition is marked in the page.
    let runs_td = format!("<td>{}</td>", row[col("runs")]);
    let at = page_text.find(&runs_td).unwrap();
    let tr = page_text[..at].rfind("<tr").unwrap();
    assert!(page_text[tr..].starts_with("<tr class=\"bad\">"), "{html}");

    browser_check(&page.join("summary.html"), html.matches("<img ").count());
}
