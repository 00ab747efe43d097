//! End to end through the real binary: a small sweep into a temp DB, resume, CSV export, and
//! the errors users meet (bad config, bad images, no cuda build, an interrupt).

use crate::common;
use crate::common::{alive, children, count, edgebench, ok, results, signal, wait_for};
use crate::fixtures::db::damage_table;
use crate::fixtures::jetson::orin_nx_power;
use rusqlite::Connection;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[test]
fn small_sweep_records_every_iteration_resumes_and_exports() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sweep.db");
    let sweep = |extra: &[&str]| {
        let mut cmd = edgebench(dir.path());
        cmd.args([
            "run",
            "--net",
            "alexnet,googlenet",
            "--batch",
            "1,2",
            "--epochs",
            "1",
            "--images",
            "2",
        ])
        .arg("--db")
        .arg(&db)
        .args(extra);
        cmd.output().unwrap()
    };
    let out = ok(sweep(&[]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("4 trial(s) run, 0 already done, 0 failed"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ms/img"),
        "summary table missing:\n{stdout}"
    );

    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 4);
    for r in &rows {
        let batch = r["batch"].as_u64().unwrap();
        let iters = 2 / batch; // ITER = (2 / batch) * 1
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["iterations"].as_u64().unwrap(), iters);
        assert_eq!(r["iterations_planned"].as_u64().unwrap(), iters);
        assert!(r["error"].is_null());
        let loss = r["loss_first"].as_f64().unwrap();
        // A fresh AlexNet predicts ~uniformly over 1000 classes; GoogLeNet adds 0.3 x two
        // auxiliary losses to its ~ln(1000).
        if r["net"] == "alexnet" {
            assert!((loss - 1000f64.ln()).abs() < 1.0, "{r}");
        } else {
            assert!(loss.is_finite() && loss > 1000f64.ln() - 1.0, "{r}");
        }
        assert_eq!(r["loss_anomaly"], false);
        assert!(r["time_per_image_s"].as_f64().unwrap() > 0.0);
        assert!(r["images_per_s"].as_f64().unwrap() > 0.0);
        assert!(r["time_per_image_spread_s"].as_f64().unwrap() >= 0.0);
        // Without --power the energy keys are present and null; memory is always measured.
        for key in ["energy_j", "avg_power_w", "energy_per_image_j", "edp_js"] {
            assert!(r.get(key).is_some_and(Value::is_null), "{key} in {r}");
        }
        assert_eq!(r["swap_pressure"], false, "{r}");
        assert!(r["peak_rss_bytes"].as_u64().unwrap() > 100_000_000, "{r}");
        assert_eq!(r["device"], "cpu");
        assert!(r["run_id"].as_str().unwrap().len() == 36);
    }
    // ITER rows: (2 + 1) per net
    assert_eq!(count(&db, "SELECT COUNT(*) FROM iterations"), 6);
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM iterations WHERE loss IS NULL OR step_s <= 0 OR data_s < 0"
        ),
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM iterations WHERE t_end_ns <= t_start_ns"
        ),
        0
    );
    assert_eq!(
        Connection::open(&db)
            .unwrap()
            .query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0))
            .unwrap(),
        "wal"
    );

    // Resume: nothing reruns.
    let out = ok(sweep(&[]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 trial(s) run, 4 already done"));
    assert_eq!(results(dir.path(), &db).len(), 4);
    // --force reruns (one net only to keep it short), a new run is recorded.
    let out = ok(edgebench(dir.path())
        .args([
            "run", "--net", "alexnet", "--batch", "2", "--epochs", "1", "--images", "2", "--force",
            "--db",
        ])
        .arg(&db)
        .output()
        .unwrap());
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 trial(s) run"));
    assert_eq!(results(dir.path(), &db).len(), 5);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM runs"), 2);
    let config: String = Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT config_toml FROM runs ORDER BY id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        config.contains("googlenet") && config.contains("images = 2"),
        "{config}"
    );

    // The studies' CSV files.
    let out_dir = dir.path().join("csv");
    ok(edgebench(dir.path())
        .args(["export", "csv", "--machine", "testbox", "--db"])
        .arg(&db)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap());
    let loss = std::fs::read_to_string(out_dir.join("loss_testbox_edgebench.csv")).unwrap();
    let mut lines = loss.lines();
    assert_eq!(lines.next(), Some("#network,mode,batch,step,loss,time"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 6, "{loss}");
    assert!(rows.iter().any(|l| l.starts_with("alexnet,CPU,001,")));
    assert!(rows.iter().any(|l| l.starts_with("googlenet,CPU,002,")));
    let times = std::fs::read_to_string(out_dir.join("times_testbox_edgebench.csv")).unwrap();
    assert!(times.starts_with("#network,mode,batch,avg_time\r\n"));
    assert_eq!(times.lines().count(), 5);
}

#[test]
fn config_errors_name_file_line_and_key_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[sweep]\nepochs = 1\nbatch_sizes = [1]\n").unwrap();
    let db = dir.path().join("x.db");
    let out = edgebench(dir.path())
        .args(["run", "--config"])
        .arg(&cfg)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml") && err.contains("line 3") && err.contains("batch_sizes"),
        "{err}"
    );
    assert!(!db.exists());

    std::fs::write(&cfg, "[sweep]\nepochs = \"ten\"\n").unwrap();
    let out = edgebench(dir.path())
        .args(["run", "--config"])
        .arg(&cfg)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("epochs"));

    let out = edgebench(dir.path())
        .args(["run", "--net", "vgg16", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("vgg16"));
    assert!(!db.exists());
}

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_without_the_feature_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    let out = edgebench(dir.path())
        .args([
            "run", "--device", "cuda", "--images", "1", "--batch", "1", "--db",
        ])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cuda") && err.contains("--features cuda"),
        "{err}"
    );
    assert!(!db.exists());
}

fn png(path: &Path) {
    image::RgbImage::from_fn(64, 48, |x, y| image::Rgb([x as u8, y as u8, 77]))
        .save(path)
        .unwrap();
}

fn image_folder(dir: &Path, n: usize) -> PathBuf {
    let root = dir.join("images");
    std::fs::create_dir_all(root.join("tench")).unwrap();
    for i in 0..n {
        png(&root.join("tench").join(format!("{i:03}.png")));
    }
    root
}

#[test]
fn bad_images_are_named_and_recorded_results_survive() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.db");
    let data = image_folder(dir.path(), 3);
    let run = |extra: &[&str]| {
        edgebench(dir.path())
            .args([
                "run", "--net", "alexnet", "--epochs", "1", "--warmup", "0", "--db",
            ])
            .arg(&db)
            .arg("--dataset")
            .arg(&data)
            .args(extra)
            .output()
            .unwrap()
    };
    ok(run(&["--images", "2", "--batch", "2"]));
    assert_eq!(results(dir.path(), &db).len(), 1);

    // Too few images: refused up front.
    let out = run(&["--images", "8", "--batch", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds 3 images") && err.contains('8'), "{err}");

    // A file that is not an image at all: named before training, DB untouched.
    std::fs::write(data.join("tench/001.png"), b"garbage").unwrap();
    let out = run(&["--images", "3", "--batch", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("001.png"));
    assert_eq!(results(dir.path(), &db).len(), 1);

    // A PNG whose header is fine but whose pixels are cut off: found mid-trial. The trial fails
    // naming the file, its earlier iterations stay, and the next trial still runs.
    png(&data.join("tench/001.png"));
    let good = std::fs::read(data.join("tench/002.png")).unwrap();
    std::fs::write(data.join("tench/002.png"), &good[..good.len() / 2]).unwrap();
    let out = run(&["--images", "3", "--batch", "1,3"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 3);
    let b1 = rows.iter().find(|r| r["batch"] == 1).unwrap();
    assert_eq!(b1["status"], "failed");
    assert_eq!(b1["iterations"], 2, "{b1}");
    assert!(b1["error"].as_str().unwrap().contains("002.png"));
    let b3 = rows.iter().find(|r| r["batch"] == 3).unwrap();
    assert_eq!(b3["status"], "failed");
    assert_eq!(rows.iter().filter(|r| r["status"] == "ok").count(), 1);
}

#[test]
fn sigint_stops_at_an_iteration_boundary_and_marks_the_trial_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("i.db");
    let mut child = edgebench(dir.path())
        .args([
            "run", "--net", "alexnet", "--batch", "1", "--epochs", "1", "--images", "400", "--db",
        ])
        .arg(&db)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        &db,
        "SELECT COUNT(*) FROM iterations",
        2,
        Duration::from_secs(120),
    );
    signal(child.id(), libc::SIGINT);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let rows = results(dir.path(), &db);
    assert_eq!(rows[0]["status"], "interrupted");
    let done = rows[0]["iterations"].as_u64().unwrap();
    assert!((2..400).contains(&done));
    assert_eq!(count(&db, "SELECT COUNT(*) FROM iterations") as u64, done);
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM runs WHERE status = 'interrupted'"
        ),
        1
    );
}

/// `profile` without `--quick` times every stage alone, forward and backward (the backward from
/// a contiguous gradient of the stage's output): a row per AlexNet stage, in order, each with a
/// forward, a backward and a total time.
#[test]
fn profile_times_every_stage_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(edgebench(dir.path())
        .args(["--quiet", "profile", "--net", "alexnet", "--batch", "1"])
        .args(["--steps", "1", "--threads", "2"])
        .output()
        .unwrap());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let names: Vec<String> = edgebench::models::by_name("alexnet")
        .unwrap()
        .summary()
        .stages
        .into_iter()
        .map(|s| s.name)
        .collect();
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.first().is_some_and(|n| names.iter().any(|s| s == n)))
        .collect();
    let listed: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(listed, names, "{stdout}");
    let times: Vec<[f64; 3]> = rows
        .iter()
        .map(|r| std::array::from_fn(|i| r[1 + i].parse().unwrap()))
        .collect();
    assert!(
        times.iter().flatten().all(|t| t.is_finite() && *t >= 0.0),
        "{stdout}"
    );
    // conv1 (a 11x11 convolution) takes time both ways; a dropout may round to 0.0 ms.
    assert!(times[0][0] > 0.0 && times[0][1] > 0.0, "{stdout}");
}

/// `profile` reports the GFLOP of the step's matrix products per image: AlexNet at batch 1 on
/// two threads runs every layer as a direct product (no map is large enough for the Winograd
/// path with one image split over the threads), so they are three times the forward's
/// multiply-adds, less conv1's input gradient (the image needs none), at two FLOP each.
#[test]
fn profile_counts_and_lists_the_steps_matrix_products() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(edgebench(dir.path())
        .args(["--quiet", "profile", "--net", "alexnet", "--batch", "1"])
        .args(["--steps", "1", "--quick", "--threads", "2", "--products"])
        .output()
        .unwrap());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let counted: f64 = stdout
        .split_whitespace()
        .find_map(|f| f.strip_prefix("product_gflop_per_image="))
        .unwrap_or_else(|| panic!("no product_gflop_per_image in {stdout}"))
        .parse()
        .unwrap();
    let s = edgebench::models::by_name("alexnet").unwrap().summary();
    let macs = 3 * s.forward_macs - s.stages[0].macs;
    let want = 2.0 * macs as f64 * 1e-9;
    assert!(
        (counted - want).abs() < 1e-4,
        "{counted} GFLOP, want {want}: {stdout}"
    );
    // `--products`: the longest shapes first, each with its kernel's call site, then the total.
    let lines: Vec<&str> = stdout.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.trim_start().starts_with("m ") && l.ends_with("call site"))
        .unwrap_or_else(|| panic!("no product table in {stdout}"));
    let rows: Vec<Vec<&str>> = lines[header + 1..]
        .iter()
        .take_while(|l| !l.starts_with("all products:"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(!rows.is_empty() && rows.len() <= 15, "{stdout}");
    let ms: Vec<f64> = rows.iter().map(|r| r[5].parse().unwrap()).collect();
    assert!(
        ms.windows(2).all(|w| w[0] >= w[1]),
        "not longest first: {stdout}"
    );
    for r in &rows {
        let site = r[7];
        assert!(
            ["conv.rs:", "linear.rs:", "winograd.rs:"]
                .iter()
                .any(|f| site.starts_with(f)),
            "{site}: {stdout}"
        );
    }
    // conv2's grouped 5x5 forward (128 filters per group, 48 channels x 25 taps deep) is among
    // the longest products.
    assert!(
        rows.iter().any(|r| r[0] == "128" && r[2] == "1200"),
        "{stdout}"
    );
    let total = lines
        .iter()
        .find_map(|l| l.strip_prefix("all products: "))
        .unwrap_or_else(|| panic!("no total in {stdout}"));
    let total_ms: f64 = total.split_whitespace().next().unwrap().parse().unwrap();
    // Then each call site once, all its shapes summed, longest first; together the total.
    let by_site = lines
        .iter()
        .position(|l| l.starts_with("by call site"))
        .unwrap_or_else(|| panic!("no call-site table in {stdout}"));
    let sites: Vec<(f64, &str)> = lines[by_site + 2..]
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .take_while(|r| r.len() == 3)
        .map(|r| (r[0].parse().unwrap(), r[2]))
        .collect();
    assert!(sites.len() >= 3, "{stdout}");
    let mut names: Vec<&str> = sites.iter().map(|s| s.1).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), sites.len(), "a site listed twice: {stdout}");
    assert!(sites.windows(2).all(|w| w[0].0 >= w[1].0), "{stdout}");
    let sum: f64 = sites.iter().map(|s| s.0).sum();
    assert!(
        (sum - total_ms).abs() <= 0.01 * sites.len() as f64 + 0.05,
        "sites {sum} ms against the total {total_ms}: {stdout}"
    );
}

#[test]
fn models_lists_both_networks() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(edgebench(dir.path())
        .args(["models", "--json"])
        .output()
        .unwrap());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let nets = v.as_array().unwrap();
    assert_eq!(nets[0]["name"], "alexnet");
    assert_eq!(nets[0]["params"], 60_965_224);
    assert_eq!(nets[1]["params"], 13_378_280);
    assert_eq!(nets[1]["input"], serde_json::json!([3, 224, 224]));
    assert!(nets[1]["stages"].as_array().unwrap().len() > 15);
    let text = ok(edgebench(dir.path()).arg("models").output().unwrap());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("60,965,224") && text.contains("inception_4e"),
        "{text}"
    );
}

#[test]
fn a_stop_abandons_a_long_iteration_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let cfg = dir.path().join("grace.toml");
    std::fs::write(&cfg, "[sweep]\nstop_grace_s = 0.5\n").unwrap();
    // GoogLeNet at batch 16 takes seconds per step: far longer than the grace period.
    let mut child = edgebench(dir.path())
        .args([
            "run",
            "--net",
            "googlenet",
            "--batch",
            "16",
            "--images",
            "64",
            "--config",
        ])
        .arg(&cfg)
        .arg("--db")
        .arg(&db)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        &db,
        "SELECT COUNT(*) FROM trials",
        1,
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(500)); // inside the first step
    let asked = std::time::Instant::now();
    signal(child.id(), libc::SIGTERM);
    let status = child.wait().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "took {:?}",
        asked.elapsed()
    );
    assert_eq!(status.code(), Some(130));
    let r = &results(dir.path(), &db)[0];
    assert_eq!(r["status"], "interrupted", "{r}");
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM runs WHERE status = 'interrupted'"
        ),
        1
    );
}

#[test]
fn out_of_range_numbers_are_refused_before_the_database_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    let cfg = dir.path().join("big.toml");
    // (flags or a config file, what stderr must name)
    let cases: &[(&[&str], &str, &str)] = &[
        (
            &["--epochs", "2305843009213693952", "--images", "8"],
            "",
            "--epochs",
        ),
        (&["--images", "18446744073709551615"], "", "--images"),
        (
            &["--images", "8", "--batch", "1", "--epochs", "1250001"],
            "",
            "10000000",
        ),
        (&["--epochs", "0"], "", "--epochs"),
        (&["--images", "4", "--batch", "8"], "", "batch 8"),
        (&["--images", "100000", "--batch", "100000"], "", "65536"),
        (&["--threads", "5000"], "", "--threads"),
        (&["--warmup", "18446744073709551615"], "", "--warmup"),
        (&["--mem-limit", "0"], "", "--mem-limit"),
        (&["--mem-limit", "99999999999999999999T"], "", "too large"),
        (
            &[],
            "[sweep]\nepochs = 4611686018427387904\nimages = 16\n",
            "sweep.epochs",
        ),
        (&[], "[train]\nthreads = 100000\n", "train.threads"),
        (
            &[],
            "[data]\nsynthetic_classes = 5000\n",
            "synthetic_classes",
        ),
        (
            &[],
            "[memory]\nsample_interval_ms = 0\n",
            "sample_interval_ms",
        ),
        (&[], "[sweep]\nstop_grace_s = 1e300\n", "stop_grace_s"),
        (&["--repeat", "0"], "", "--repeat"),
        (&[], "[sweep]\nrepeat = 100000\n", "sweep.repeat"),
    ];
    for (flags, toml, named) in cases {
        let mut cmd = edgebench(dir.path());
        cmd.args(["run", "--net", "alexnet"]).args(*flags);
        if !toml.is_empty() {
            std::fs::write(&cfg, toml).unwrap();
            cmd.arg("--config").arg(&cfg);
        }
        let out = cmd.arg("--db").arg(&db).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?} {toml}: {err}");
        assert!(err.contains(named), "{flags:?} {toml}: {err}");
        assert!(!db.exists(), "{flags:?} {toml} created the database");
    }

    // The same bound holds for a database that already exists: no new run row.
    let out = edgebench(dir.path())
        .args([
            "run", "--net", "alexnet", "--batch", "1", "--images", "1", "--db",
        ])
        .arg(&db)
        .output()
        .unwrap();
    ok(out);
    let runs = count(&db, "SELECT count(*) FROM runs");
    let out = edgebench(dir.path())
        .args([
            "run",
            "--epochs",
            "2305843009213693952",
            "--images",
            "8",
            "--db",
        ])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), runs);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM trials WHERE iterations_planned = 0"
        ),
        0
    );

    let out = edgebench(dir.path())
        .args(["profile", "--batch", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--batch"));
}

/// A small real database in `dir`: one ok alexnet trial, closed (no -wal left).
fn one_trial_db(home: &Path, db: &Path) {
    ok(edgebench(home)
        .args([
            "run", "--net", "alexnet", "--batch", "1", "--images", "1", "--db",
        ])
        .arg(db)
        .output()
        .unwrap());
    assert!(!with_suffix(db, "-wal").exists());
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

#[test]
fn damaged_database_is_refused_untouched_with_how_to_recover() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("broken.db");
    one_trial_db(dir.path(), &db);
    damage_table(&db, "trials");
    let bytes = std::fs::read(&db).unwrap();

    let out = edgebench(dir.path())
        .args([
            "run", "--net", "alexnet", "--batch", "1", "--images", "1", "--force",
        ])
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("broken.db") && err.contains("damaged") && err.contains(".recover"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&db).unwrap(),
        bytes,
        "the damaged file was modified"
    );

    for args in [
        vec!["results", "--db"],
        vec!["export", "csv", "--out", "csv", "--db"],
    ] {
        let out = edgebench(dir.path()).args(&args).arg(&db).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("damaged"), "{args:?}: {err}");
        assert!(
            out.stdout.is_empty(),
            "{args:?} printed rows of a damaged file"
        );
    }
    assert_eq!(std::fs::read(&db).unwrap(), bytes);
}

/// Whether `dir` can be bind-mounted read-only in a private mount namespace (root with
/// CAP_SYS_ADMIN and util-linux `unshare`), where even root cannot write to it.
fn read_only_mount_works(dir: &Path) -> bool {
    std::process::Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            &format!("{RO_MOUNT} && ! touch \"$1/probe\" 2>/dev/null"),
        ])
        .arg("sh")
        .arg(dir)
        .output()
        .is_ok_and(|o| o.status.success())
}

const RO_MOUNT: &str = "mount --bind \"$1\" \"$1\" && mount -o remount,bind,ro \"$1\"";

/// edgebench `args`, run with `ro` mounted read-only (see `read_only_mount_works`).
fn edgebench_with_read_only(
    home: &Path,
    ro: &Path,
    args: &[&std::ffi::OsStr],
) -> std::process::Output {
    std::process::Command::new("unshare")
        .current_dir(home)
        .env_remove("EDGEBENCH_DB")
        .env("RAYON_NUM_THREADS", "2")
        .args([
            "-m",
            "sh",
            "-c",
            &format!("{RO_MOUNT} && shift && exec \"$@\""),
        ])
        .arg("sh")
        .arg(ro)
        .arg(env!("CARGO_BIN_EXE_edgebench"))
        .args(args)
        .output()
        .unwrap()
}

/// A long one-trial sweep that keeps the database's sweep lock while the test looks.
fn long_run(dir: &Path, db: &Path) -> std::process::Child {
    edgebench(dir)
        .args([
            "run", "--net", "alexnet", "--batch", "1", "--epochs", "1", "--images", "400", "--db",
        ])
        .arg(db)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// `dir/data/bench.db` holding one trial, where `data` can be bind-mounted read-only; None
/// (said by `cannot_run`) where this host cannot.
fn db_in_a_folder_to_mount_read_only(
    dir: &std::path::Path,
) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let data = dir.join("data");
    std::fs::create_dir(&data).unwrap();
    let db = data.join("bench.db");
    one_trial_db(dir, &db);
    if !read_only_mount_works(&data) {
        common::cannot_run(
            "this host cannot bind-mount a folder read-only (needs root and unshare)",
        );
        return None;
    }
    Some((data, db))
}

#[test]
fn reading_commands_work_on_a_database_in_a_read_only_folder() {
    let dir = tempfile::tempdir().unwrap();
    let Some((data, db)) = db_in_a_folder_to_mount_read_only(dir.path()) else {
        return;
    };
    let before = std::fs::read(&db).unwrap();
    let out = dir.path().join("out");
    let o = |s: &str| std::ffi::OsString::from(s);
    let dbs = db.clone().into_os_string();
    let outs = |name: &str| out.join(name).into_os_string();
    let commands: Vec<Vec<std::ffi::OsString>> = vec![
        vec![o("results"), o("--json"), o("--db"), dbs.clone()],
        vec![
            o("export"),
            o("csv"),
            o("--db"),
            dbs.clone(),
            o("--out"),
            outs("csv"),
        ],
        vec![o("report"), dbs.clone(), o("--out"), outs("report")],
        vec![o("snapshot"), outs("snap.db"), o("--db"), dbs.clone()],
        vec![o("merge"), dbs.clone(), o("--into"), outs("merged.db")],
        vec![o("provenance"), o("--db"), dbs.clone()],
    ];
    for args in &commands {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let r = edgebench_with_read_only(dir.path(), &data, &args);
        assert!(r.status.success(), "{args:?}: {}", common::describe(&r));
        if args[0] == "results" {
            let rows: Value = serde_json::from_slice(&r.stdout).unwrap();
            assert_eq!(rows.as_array().unwrap().len(), 1);
            assert_eq!(rows[0]["status"], "ok");
        }
    }
    assert_eq!(
        count(&out.join("merged.db"), "SELECT count(*) FROM trials"),
        1
    );
    assert_eq!(
        count(&out.join("snap.db"), "SELECT count(*) FROM iterations"),
        1
    );
    assert_eq!(std::fs::read(&db).unwrap(), before);

    // Rows still in a -wal cannot be read there without creating -shm: refused, saying what to
    // do, rather than shown without them.
    let walled = dir.path().join("walled");
    std::fs::create_dir(&walled).unwrap();
    let writer = Connection::open(&db).unwrap();
    writer
        .execute_batch("PRAGMA wal_autocheckpoint=0; UPDATE runs SET host = 'moved';")
        .unwrap();
    std::fs::copy(&db, walled.join("bench.db")).unwrap();
    std::fs::copy(with_suffix(&db, "-wal"), walled.join("bench.db-wal")).unwrap();
    drop(writer);
    let walled_db = walled.join("bench.db").into_os_string();
    let r = edgebench_with_read_only(
        dir.path(),
        &walled,
        &[
            o("results").as_os_str(),
            o("--db").as_os_str(),
            walled_db.as_os_str(),
        ],
    );
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(
        err.contains("-wal") && err.contains("edgebench snapshot"),
        "{err}"
    );
    // Where -shm can be created, the same files read with the -wal's rows.
    assert_eq!(
        results(dir.path(), walled.join("bench.db").as_path())[0]["host"],
        "moved"
    );
}

#[test]
fn a_second_run_on_the_same_db_is_refused_or_waits_for_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let mut first = long_run(dir.path(), &db);
    wait_for(
        &db,
        "SELECT COUNT(*) FROM iterations",
        1,
        Duration::from_secs(120),
    );
    let short = |extra: &[&str]| {
        let mut cmd = edgebench(dir.path());
        cmd.args([
            "run", "--net", "alexnet", "--batch", "2", "--epochs", "1", "--images", "2", "--db",
        ])
        .arg(&db)
        .args(extra);
        cmd
    };
    let asked = std::time::Instant::now();
    let out = short(&[]).output().unwrap();
    assert!(asked.elapsed() < Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(2), "{}", common::describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("pid {}, started 20", first.id()))
            && err.contains("--wait")
            && err.contains("l.db.lock"),
        "{err}"
    );
    assert_eq!(count(&db, "SELECT COUNT(*) FROM trials"), 1);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM runs"), 1);
    // Readers do not take the lock.
    assert_eq!(results(dir.path(), &db).len(), 1);

    // --wait starts only once the first has ended.
    let mut waiting = short(&["--wait"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(waiting.try_wait().unwrap().is_none());
    assert_eq!(count(&db, "SELECT COUNT(*) FROM trials"), 1);
    signal(first.id(), libc::SIGINT);
    assert_eq!(first.wait().unwrap().code(), Some(130));
    let out = ok(waiting.wait_with_output().unwrap());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("waiting for it to end"),
        "{}",
        common::describe(&out)
    );
    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["status"], "interrupted");
    assert_eq!(rows[1]["status"], "ok");
    // The second trial began after the first had ended: never side by side.
    assert!(
        rows[1]["started_at"].as_str().unwrap() >= rows[0]["ended_at"].as_str().unwrap(),
        "{rows:?}"
    );
}

#[test]
fn kill_9_of_a_run_ends_its_worker_and_the_next_run_marks_the_rows_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    // GoogLeNet at batch 16 takes seconds per step: a worker that outlived its parent would
    // still be busy with its step long after the parent is gone.
    let mut run = edgebench(dir.path())
        .args([
            "run",
            "--net",
            "googlenet",
            "--batch",
            "16",
            "--images",
            "160",
            "--warmup",
            "0",
            "--db",
        ])
        .arg(&db)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        &db,
        "SELECT COUNT(*) FROM iterations",
        1,
        Duration::from_secs(300),
    );
    let workers = children(run.id());
    assert_eq!(workers.len(), 1, "{workers:?}");
    run.kill().unwrap(); // SIGKILL
    run.wait().unwrap();
    let killed = std::time::Instant::now();
    while alive(workers[0]) {
        assert!(
            killed.elapsed() < Duration::from_millis(1500),
            "the worker {} outlived its killed parent",
            workers[0]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let rows = results(dir.path(), &db);
    assert_eq!(rows[0]["status"], "running");
    let recorded = rows[0]["iterations"].as_u64().unwrap();
    assert!(recorded >= 1);

    // The next run takes the lock and closes what the dead one left open.
    ok(edgebench(dir.path())
        .args([
            "run", "--net", "alexnet", "--batch", "2", "--epochs", "1", "--images", "2", "--db",
        ])
        .arg(&db)
        .output()
        .unwrap());
    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["status"] != "running"), "{rows:?}");
    let dead = &rows[0];
    assert_eq!(dead["status"], "interrupted", "{dead}");
    assert!(
        dead["error"]
            .as_str()
            .unwrap()
            .contains("ended without finishing"),
        "{dead}"
    );
    assert_eq!(dead["iterations"].as_u64().unwrap(), recorded);
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM iterations") as u64,
        recorded + 1
    );
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM runs WHERE status = 'running'"),
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM runs WHERE status = 'interrupted'"
        ),
        1
    );
}

#[test]
fn sigint_during_the_power_baseline_loses_no_trial() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let db = dir.path().join("b.db");
    let cfg = dir.path().join("b.toml");
    // A long baseline: the interrupt must end it, not wait it out.
    std::fs::write(&cfg, "[power]\nbaseline_s = 600\n").unwrap();
    let run = || {
        let mut cmd = edgebench(dir.path());
        cmd.args([
            "run", "--power", "--net", "alexnet", "--batch", "2", "--images", "2", "--epochs", "1",
            "--config",
        ])
        .arg(&cfg)
        .arg("--sysfs")
        .arg(&sys)
        .arg("--db")
        .arg(&db);
        cmd
    };
    let mut child = run()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The run row is written just before the idle baseline starts.
    wait_for(&db, "SELECT COUNT(*) FROM runs", 1, Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(count(&db, "SELECT COUNT(*) FROM trials"), 0);
    let sent = std::time::Instant::now();
    signal(child.id(), libc::SIGINT);
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert!(
        sent.elapsed() < Duration::from_secs(20),
        "the interrupt waited out the baseline: {:?}",
        sent.elapsed()
    );
    std::fs::write(&cfg, "[power]\nbaseline_s = 1\n").unwrap();
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM trials WHERE status <> 'interrupted'"
        ),
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM runs WHERE status = 'interrupted'"
        ),
        1
    );

    // The rerun trains the trial the interrupt kept from running.
    let out = ok(run().output().unwrap());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("1 trial(s) run, 0 already done"),
        "{stdout}"
    );
    let rows = results(dir.path(), &db);
    assert_eq!(rows.last().unwrap()["status"], "ok", "{rows:?}");
}

#[test]
fn a_resumed_sweep_names_the_real_status_of_a_skipped_crashed_trial() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    // A worker that dies of SIGSEGV at once: a real crash, through the worker prefix.
    let crash = dir.path().join("crash.sh");
    std::fs::write(&crash, "#!/bin/sh\nkill -SEGV $$\n").unwrap();
    std::fs::set_permissions(&crash, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let run = || {
        let mut cmd = edgebench(dir.path());
        cmd.args([
            "run", "--net", "alexnet", "--batch", "2", "--epochs", "1", "--images", "2", "--db",
        ])
        .arg(&db);
        cmd
    };
    let out = run()
        .env("EDGEBENCH_WORKER_PREFIX", &crash)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", common::describe(&out));
    assert_eq!(results(dir.path(), &db)[0]["status"], "crashed");

    let out = ok(run().output().unwrap());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already ended crashed") && err.contains("--retry-failed"),
        "{err}"
    );
    assert!(!err.contains("already ok"), "{err}");
}

/// The files SQLite or a sweep would create beside `db` that exist.
fn files_beside(db: &Path) -> Vec<PathBuf> {
    ["-wal", "-shm", "-journal", ".lock"]
        .iter()
        .map(|suffix| with_suffix(db, suffix))
        .filter(|p| p.exists())
        .collect()
}

/// Copies of a one-trial database in `dir`, each with the root page of one of `tables`
/// damaged.
fn damaged_copies(dir: &Path, tables: &[&str]) -> Vec<(String, PathBuf)> {
    let pristine = dir.join("pristine.db");
    one_trial_db(dir, &pristine);
    tables
        .iter()
        .map(|table| {
            let db = dir.join(format!("{table}.db"));
            std::fs::copy(&pristine, &db).unwrap();
            damage_table(&db, table);
            (table.to_string(), db)
        })
        .collect()
}

/// `out` refused the damaged `db`: exit 2, saying it is damaged and how to recover, no rows
/// printed, nothing created beside it, its bytes as they were.
fn assert_refused_as_damaged(what: &str, out: &std::process::Output, db: &Path, bytes: &[u8]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: {}",
        common::describe(out)
    );
    assert!(
        err.contains(&db.display().to_string())
            && err.contains("damaged")
            && err.contains(".recover")
            && !err.contains("not an edgebench"),
        "{what}: {err}"
    );
    assert!(
        out.stdout.is_empty(),
        "{what} printed rows of a damaged file"
    );
    assert_eq!(files_beside(db), Vec::<PathBuf>::new(), "{what}");
    assert_eq!(
        std::fs::read(db).unwrap(),
        bytes,
        "{what} modified the file"
    );
}

#[test]
fn reading_commands_refuse_damage_in_any_table_with_exit_2_creating_nothing_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let tables = [
        "meta",
        "iterations",
        "power_samples",
        "trial_output",
        "run_provenance",
    ];
    for (table, db) in damaged_copies(dir.path(), &tables) {
        let bytes = std::fs::read(&db).unwrap();
        let out = |name: &str| dir.path().join(format!("{table}-{name}"));
        let d = db.to_str().unwrap().to_string();
        let commands: Vec<Vec<String>> = vec![
            vec!["results".into(), "--db".into(), d.clone()],
            vec!["results".into(), "--json".into(), "--db".into(), d.clone()],
            vec!["provenance".into(), "--db".into(), d.clone()],
            vec![
                "snapshot".into(),
                out("snap.db").display().to_string(),
                "--db".into(),
                d.clone(),
            ],
            vec![
                "export".into(),
                "csv".into(),
                "--out".into(),
                out("csv").display().to_string(),
                "--db".into(),
                d.clone(),
            ],
            vec![
                "report".into(),
                d.clone(),
                "--out".into(),
                out("report").display().to_string(),
            ],
            vec![
                "merge".into(),
                d.clone(),
                "--into".into(),
                out("merged.db").display().to_string(),
            ],
        ];
        for args in &commands {
            let o = edgebench(dir.path()).args(args).output().unwrap();
            assert_refused_as_damaged(&format!("{table}: {args:?}"), &o, &db, &bytes);
        }
        assert!(!out("snap.db").exists() && !out("merged.db").exists());
    }
}

/// A study log folder with one Caffe log, for `import logs`.
fn caffe_log_folder(dir: &Path) -> PathBuf {
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(
        logs.join("train_alexnet_CPU_001.log"),
        "I1222 14:03:21.000000  2471 solver.cpp:218] Iteration 0 (0 iter/s, 0.5s/2 iters), loss = 6.9\n",
    )
    .unwrap();
    logs
}

#[test]
fn import_refuses_a_damaged_database_with_exit_2_creating_nothing_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let logs = caffe_log_folder(dir.path());
    for (table, db) in damaged_copies(dir.path(), &["meta", "iterations"]) {
        let bytes = std::fs::read(&db).unwrap();
        let out = edgebench(dir.path())
            .args(["import", "logs"])
            .arg(&logs)
            .args(["--parser", "caffe", "--engine", "caffe", "--db"])
            .arg(&db)
            .output()
            .unwrap();
        assert_refused_as_damaged(&format!("{table}: import"), &out, &db, &bytes);
    }
}

/// Needs the sweep to call `Store::check_existing` before it takes the sweep lock.
#[test]
fn run_refuses_a_damaged_database_with_exit_2_before_creating_its_lock() {
    let dir = tempfile::tempdir().unwrap();
    for (table, db) in damaged_copies(dir.path(), &["meta", "iterations"]) {
        let bytes = std::fs::read(&db).unwrap();
        let out = edgebench(dir.path())
            .args(["run", "--net", "alexnet", "--batch", "1", "--images", "1"])
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap();
        assert_refused_as_damaged(&format!("{table}: run"), &out, &db, &bytes);
    }
}

/// `out` refused to write `db`: exit 2, one sentence naming the file, the reason once, and what
/// to do.
fn assert_refused_as_unwritable(what: &str, out: &std::process::Output, db: &Path) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: {}",
        common::describe(out)
    );
    assert!(
        err.contains(&format!("cannot write {}", db.display())) && err.contains("--db"),
        "{what}: {err}"
    );
    assert_eq!(
        err.matches("read-only file system").count(),
        1,
        "{what}: {err}"
    );
}

#[test]
fn run_and_import_into_a_database_they_cannot_write_exit_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let Some((data, db)) = db_in_a_folder_to_mount_read_only(dir.path()) else {
        return;
    };
    // The first run left its (unlocked) lock file.
    let beside = files_beside(&db);
    let logs = caffe_log_folder(dir.path());
    let o = std::ffi::OsStr::new;
    let import = [
        o("import"),
        o("logs"),
        logs.as_os_str(),
        o("--parser"),
        o("caffe"),
        o("--engine"),
        o("caffe"),
        o("--db"),
        db.as_os_str(),
    ];
    let out = edgebench_with_read_only(dir.path(), &data, &import);
    assert_refused_as_unwritable("import", &out, &db);
    let run = [
        o("run"),
        o("--net"),
        o("alexnet"),
        o("--batch"),
        o("1"),
        o("--images"),
        o("1"),
        o("--force"),
        o("--db"),
        db.as_os_str(),
    ];
    let out = edgebench_with_read_only(dir.path(), &data, &run);
    assert_refused_as_unwritable("run", &out, &db);
    assert_eq!(files_beside(&db), beside);
}
