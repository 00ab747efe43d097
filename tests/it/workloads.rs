//! The MLP and operator workloads end to end through the binary: sweeps into a real database,
//! results keys, resume, power from a prepared sysfs tree, and `edgebench peaks`.

use crate::common::{count, edgebench, ok, results};
use crate::fixtures::jetson::orin_nx_power;
use rusqlite::Connection;

/// A custom MLP size small enough for a test: N=8, D_in=32, H=16, D_out=4.
const TINY: &str = "8x32x16x4";

/// `edgebench report` of `db` into `dir/report`; the folder of the one host it holds.
fn report_of(dir: &std::path::Path, db: &std::path::Path) -> std::path::PathBuf {
    let report = dir.join("report");
    ok(edgebench(dir)
        .arg("report")
        .arg(db)
        .arg("--out")
        .arg(&report)
        .output()
        .unwrap());
    std::fs::read_dir(&report)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("summary.md").exists())
        .expect("the report has a host folder with summary.md")
}

#[test]
fn mlp_sweep_of_every_style_records_agreeing_losses_energy_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let db = dir.path().join("mlp.db");
    let sweep = |styles: &str, iterations: &str| {
        let mut cmd = edgebench(dir.path());
        cmd.args([
            "run",
            "--workload",
            "mlp",
            "--style",
            styles,
            "--size",
            TINY,
        ])
        .args(["--iterations", iterations, "--power", "--sysfs"])
        .arg(&sys)
        .arg("--db")
        .arg(&db);
        ok(cmd.output().unwrap())
    };
    let all = "tensors,autograd,function";
    sweep(all, "40");
    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 3);
    for (r, style) in rows.iter().zip(["tensors", "autograd", "function"]) {
        assert_eq!(r["workload"], "mlp", "{r}");
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["style"], style);
        assert_eq!(r["size"], TINY);
        assert_eq!(r["iterations"], 40);
        assert_eq!(r["net"], "mlp");
        assert_eq!(r["batch"], 8);
        for key in [
            "time_per_iteration_s",
            "total_time_s",
            "gflop_per_s",
            "energy_j",
        ] {
            assert!(r[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {r}");
        }
        // The fixture's VDD_IN is a steady 7.5 W.
        assert!(
            (r["avg_power_w"].as_f64().unwrap() - 7.5).abs() < 1e-6,
            "{r}"
        );
        let edp = r["energy_j"].as_f64().unwrap() * r["total_time_s"].as_f64().unwrap();
        assert!(r["edp_js"].as_f64().unwrap() > 0.0 && edp > 0.0);
        // Per item means per sample: the measured iterations (after the warm-up) of 8 samples.
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
        let measured = 40.0 - f("warmup_iterations");
        assert_eq!(r["item"], "sample", "{r}");
        assert_eq!(r["items_per_iteration"], 8, "{r}");
        assert!(r["energy_per_image_j"].is_null(), "no images: {r}");
        let per_sample = f("energy_j") / (measured * 8.0);
        assert!(
            (f("energy_per_item_j") - per_sample).abs() < 1e-9 * per_sample.max(1.0),
            "{r}"
        );
        assert!((f("time_per_item_median_s") - f("time_per_iteration_s") / 8.0).abs() < 1e-12);
        // Time per sample is the measured window's mean, the energy's window.
        let window_per_sample = f("window_s") / (measured * 8.0);
        assert!(
            (f("time_per_item_s") - window_per_sample).abs() < 1e-12,
            "{r}"
        );
        assert!(
            (f("edp_per_item_js") - f("energy_per_item_j") * f("time_per_item_s")).abs() < 1e-15,
            "{r}"
        );
    }
    // The three styles compute the same model: the same loss curve to float tolerance.
    let c = Connection::open(&db).unwrap();
    let curve = |trial: i64| -> Vec<f64> {
        c.prepare("SELECT loss FROM iterations WHERE trial_id = ?1 ORDER BY step")
            .unwrap()
            .query_map([trial], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let ids: Vec<i64> = c
        .prepare("SELECT id FROM trials ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let reference = curve(ids[0]);
    assert_eq!(reference.len(), 40);
    assert!(
        reference[39] < reference[0],
        "the loss falls: {reference:?}"
    );
    for &id in &ids[1..] {
        for (a, b) in reference.iter().zip(curve(id)) {
            assert!((a - b).abs() <= 1e-3 * a.abs().max(1.0), "{a} vs {b}");
        }
    }
    // Resume: nothing is run again; another iteration count is another trial.
    let out = sweep(all, "40");
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 trial(s) run, 3 already done"));
    sweep("tensors", "3");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM trials"), 4);

    // `export csv`: the workload's own file, one row per trial key; no CNN rows.
    let csv = dir.path().join("csv");
    ok(edgebench(dir.path())
        .args(["export", "csv", "--machine", "tx2", "--db"])
        .arg(&db)
        .arg("--out")
        .arg(&csv)
        .output()
        .unwrap());
    let text = std::fs::read_to_string(csv.join("mlp_tx2_edgebench.csv")).unwrap();
    let header: Vec<&str> = text
        .lines()
        .next()
        .unwrap()
        .trim_start_matches('#')
        .split(',')
        .collect();
    assert!(
        header.contains(&"style") && header.contains(&"gflop_per_s"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1 + 4, "{text}");
    let loss = std::fs::read_to_string(csv.join("loss_tx2_edgebench.csv")).unwrap();
    assert_eq!(loss.lines().count(), 1, "{loss}");

    // The report has the study's table: every style, with time, GFLOP/s and EDP.
    let host_dir = report_of(dir.path(), &db);
    let md = std::fs::read_to_string(host_dir.join("summary.md")).unwrap();
    assert!(md.contains("## MLP study on cpu"), "{md}");
    for style in ["tensors", "autograd", "function"] {
        assert!(md.contains(&format!("| {TINY} | {style} | ok |")), "{md}");
    }
}

#[test]
fn the_study_configs_plan_the_studies() {
    use edgebench::config::Config;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mlp = Config::load(&root.join("config/mlp.toml")).unwrap();
    mlp.validate("config/mlp.toml").unwrap();
    let jobs = edgebench::workloads::mlp::jobs(&mlp).unwrap();
    assert_eq!(jobs.len(), 9);
    assert!(jobs
        .iter()
        .all(|j| j.iterations == 500 && j.learning_rate == 1e-6));
    assert_eq!(mlp.sweep.warmup_iterations, 0);
    // The MLP study reports means of 10 runs; the others ran each configuration once.
    assert_eq!(mlp.sweep.repeat, 10);
    let ops = Config::load(&root.join("config/ops.toml")).unwrap();
    ops.validate("config/ops.toml").unwrap();
    // add and mul at 5 sizes, dot at 5, scalar, sigmoid and tanh at 10: the study in one run.
    assert_eq!(
        edgebench::workloads::ops::jobs(&ops).unwrap().len(),
        2 * 5 + 5 + 3 * 10
    );
    for once in ["ops", "paper", "frameworks"] {
        let c = Config::load(&root.join(format!("config/{once}.toml"))).unwrap();
        assert_eq!(c.sweep.repeat, 1, "{once}");
    }
}

#[test]
fn bad_mlp_and_ops_parameters_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bad.db");
    for (args, says) in [
        (&["--workload", "mlp", "--style", "keras"][..], "keras"),
        (&["--workload", "mlp", "--size", "8x32x16"][..], "mlp.sizes"),
        (&["--workload", "ops", "--op", "fft"][..], "fft"),
        (&["--workload", "ops", "--mb", "0"][..], "ops.mb"),
    ] {
        let out = edgebench(dir.path())
            .arg("run")
            .args(args)
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!db.exists(), "{args:?} wrote the database");
    }
}

#[test]
fn ops_sweep_reports_rates_and_efficiencies_against_the_measured_roofs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.db");
    let config = dir.path().join("ops.toml");
    std::fs::write(&config, "[ops]\nmin_executions = 3\nmin_time_s = 0.05\n").unwrap();
    let out = ok(edgebench(dir.path())
        .args(["run", "--config"])
        .arg(&config)
        .args([
            "--workload",
            "ops",
            "--op",
            "add,dot,tanh",
            "--mb",
            "1",
            "--db",
        ])
        .arg(&db)
        .output()
        .unwrap());
    // The roofs are measured once per sweep: each measurement costs seconds.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("measuring the peaks").count(), 1, "{stderr}");
    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 3);
    for (r, op) in rows.iter().zip(["add", "dot", "tanh"]) {
        assert_eq!(r["workload"], "ops", "{r}");
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["op"], op);
        let (bytes, flops) = (r["bytes"].as_f64().unwrap(), r["flops"].as_f64().unwrap());
        assert!((1u64 << 20) as f64 * 0.9 <= bytes && bytes <= (1u64 << 20) as f64 * 1.1);
        let (gflops, gbs) = (
            r["gflop_per_s"].as_f64().unwrap(),
            r["gbyte_per_s"].as_f64().unwrap(),
        );
        let intensity = r["intensity_flop_per_byte"].as_f64().unwrap();
        assert!((intensity - flops / bytes).abs() < 1e-9 * intensity.max(1.0));
        assert!(
            (gflops / gbs - intensity).abs() < 1e-6 * intensity.max(1.0),
            "{r}"
        );
        assert!(r["iterations"].as_u64().unwrap() >= 3 + 2);
        // Measured roofs are always known; each efficiency is its rate over that roof.
        for key in ["pct_measured_peak_flops", "pct_measured_peak_bandwidth"] {
            assert!(r[key].as_f64().is_some_and(|p| p > 0.0), "{key}: {r}");
        }
        for key in [
            "pct_peak_flops",
            "pct_peak_bandwidth",
            "joule_per_gflop",
            "joule_per_gbyte",
        ] {
            assert!(r.as_object().unwrap().contains_key(key), "{key}: {r}");
        }
    }
    // The roofs the trials were judged against are kept with the run.
    let sgemm: f64 = Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT value FROM run_provenance WHERE key = 'peaks.cpu.sgemm_gflops'",
            [],
            |r| r.get::<_, String>(0),
        )
        .unwrap()
        .parse()
        .unwrap();
    let dot = &rows[1];
    let pct = dot["pct_measured_peak_flops"].as_f64().unwrap();
    assert!((pct - 100.0 * dot["gflop_per_s"].as_f64().unwrap() / sgemm).abs() < 1e-6 * pct);

    // The report: the operators' table and a roofline with both roofs and each op.
    let host_dir = report_of(dir.path(), &db);
    let md = std::fs::read_to_string(host_dir.join("summary.md")).unwrap();
    assert!(md.contains("## Operators on cpu"), "{md}");
    let svg = std::fs::read_to_string(host_dir.join("roofline_cpu.svg")).unwrap();
    for label in ["SGEMM roof", "bandwidth roof", "add", "dot", "tanh"] {
        assert!(svg.contains(label), "{label} missing from the roofline");
    }
}

#[test]
fn ops_energy_per_gflop_and_per_gbyte_with_power() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let db = dir.path().join("ops-power.db");
    let config = dir.path().join("ops.toml");
    std::fs::write(&config, "[ops]\nmin_executions = 3\nmin_time_s = 0.3\n").unwrap();
    ok(edgebench(dir.path())
        .args(["run", "--power", "--config"])
        .arg(&config)
        .args(["--workload", "ops", "--op", "mul", "--mb", "4", "--sysfs"])
        .arg(&sys)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap());
    let r = &results(dir.path(), &db)[0];
    let energy = r["energy_j"].as_f64().unwrap();
    let executions = r["executions"].as_f64().unwrap();
    let (flops, bytes) = (r["flops"].as_f64().unwrap(), r["bytes"].as_f64().unwrap());
    let per_gflop = r["joule_per_gflop"].as_f64().unwrap();
    let per_gbyte = r["joule_per_gbyte"].as_f64().unwrap();
    assert!(
        (per_gflop - energy / (flops * executions * 1e-9)).abs() < 1e-9 * per_gflop,
        "{r}"
    );
    assert!(
        (per_gbyte - energy / (bytes * executions * 1e-9)).abs() < 1e-9 * per_gbyte,
        "{r}"
    );
    assert!(
        (r["avg_power_w"].as_f64().unwrap() - 7.5).abs() < 1e-6,
        "{r}"
    );
    // An item is one execution of the operator.
    assert_eq!(r["item"], "execution", "{r}");
    assert!(r["energy_per_image_j"].is_null(), "{r}");
    let per_execution = r["energy_per_item_j"].as_f64().unwrap();
    assert!(
        (per_execution - energy / executions).abs() < 1e-9 * per_execution,
        "{r}"
    );
}

#[test]
fn peaks_prints_theoretical_and_measured_roofs() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(edgebench(dir.path())
        .args(["peaks", "--json"])
        .output()
        .unwrap());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cpu = &report["devices"][0];
    assert_eq!(cpu["device"], "cpu");
    for key in ["sgemm_gflops", "triad_gbs", "copy_gbs"] {
        assert!(
            cpu["measured"][key].as_f64().is_some_and(|v| v > 0.0),
            "{key}: {cpu}"
        );
    }
    let text = ok(edgebench(dir.path()).arg("peaks").output().unwrap());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("theoretical") && text.contains("measured"),
        "{text}"
    );
}

/// `--repeat 3` of two keys: six trials, repetition 1 of both keys, then 2, then 3; a resume
/// after an interruption runs only the repetitions missing; `results --json` gives every trial
/// its key's mean and 95 % confidence interval over the ok repetitions.
#[test]
fn repeated_sweep_interleaves_repetitions_resumes_the_missing_and_aggregates() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let db = dir.path().join("repeat.db");
    let sweep = |repeat: &str| {
        let mut cmd = edgebench(dir.path());
        cmd.args(["run", "--workload", "mlp", "--style", "tensors,autograd"])
            .args(["--size", TINY, "--iterations", "5", "--repeat", repeat])
            .args(["--power", "--sysfs"])
            .arg(&sys)
            .arg("--db")
            .arg(&db);
        String::from_utf8_lossy(&ok(cmd.output().unwrap()).stdout).into_owned()
    };
    let out = sweep("3");
    assert!(out.contains("6 trial(s) run, 0 already done"), "{out}");
    // The summary table shows the keys' means with their intervals.
    assert!(out.contains("mean±CI95"), "{out}");
    let c = Connection::open(&db).unwrap();
    let order = |c: &Connection| -> Vec<(String, i64, String)> {
        c.prepare("SELECT params, repetition, started_at FROM trials ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let trials = order(&c);
    assert_eq!(trials.len(), 6);
    let reps: Vec<i64> = trials.iter().map(|t| t.1).collect();
    assert_eq!(reps, [1, 1, 2, 2, 3, 3]);
    // Two keys, alternating; started in that order.
    let (a, b) = (&trials[0].0, &trials[1].0);
    assert_ne!(a, b);
    for (i, t) in trials.iter().enumerate() {
        assert_eq!(&t.0, [a, b][i % 2], "trial {i}");
    }
    assert!(trials.windows(2).all(|w| w[0].2 <= w[1].2), "{trials:?}");

    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 6);
    for r in &rows {
        assert_eq!(r["status"], "ok", "{r}");
        let repeat = &r["repeat"];
        assert_eq!(repeat["n"], 3, "{r}");
        assert!(repeat["spread_flag"].is_boolean(), "{r}");
        // An MLP item is a sample.
        assert!(repeat["time_per_item_s"]["mean"].as_f64().is_some(), "{r}");
        let same_key: Vec<&serde_json::Value> =
            rows.iter().filter(|o| o["style"] == r["style"]).collect();
        assert_eq!(same_key.len(), 3);
        for figure in [
            "time_per_item_s",
            "time_per_iteration_s",
            "energy_per_item_j",
            "energy_j",
            "edp_js",
            "edp_per_item_js",
        ] {
            let s = &repeat[figure];
            let f = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{figure}.{k}: {r}"));
            let values: Vec<f64> = same_key
                .iter()
                .map(|o| o[figure].as_f64().unwrap())
                .collect();
            let mean = values.iter().sum::<f64>() / 3.0;
            assert!(
                (f("mean") - mean).abs() <= 1e-9 * mean.abs(),
                "{figure}: {r}"
            );
            assert!(
                f("ci95_low") <= f("mean") && f("mean") <= f("ci95_high"),
                "{r}"
            );
            assert!(f("sd") >= 0.0 && f("cv") >= 0.0 && s["n"] == 3, "{r}");
            let (lo, hi) = values
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            assert!(lo <= f("median") && f("median") <= hi, "{r}");
        }
    }

    // An interrupted sweep: the first key's repetition 3 was stopped, the second key's
    // repetition 2 never started.
    c.execute_batch(&format!(
        "PRAGMA foreign_keys = ON;
         UPDATE trials SET status = 'interrupted' WHERE repetition = 3 AND params = '{a}';
         DELETE FROM trials WHERE repetition = 2 AND params = '{b}';"
    ))
    .unwrap();
    let out = sweep("3");
    assert!(out.contains("2 trial(s) run, 4 already done"), "{out}");
    let resumed = order(&c);
    assert_eq!(resumed.len(), 7);
    // Round-robin still: the missing repetition 2 before the missing repetition 3.
    let new: Vec<(&str, i64)> = resumed[5..].iter().map(|t| (t.0.as_str(), t.1)).collect();
    assert_eq!(new, [(b.as_str(), 2), (a.as_str(), 3)]);
    let rows = results(dir.path(), &db);
    // The interrupted trial is listed, not counted.
    assert_eq!(
        rows.iter().filter(|r| r["status"] == "interrupted").count(),
        1
    );
    assert!(rows.iter().all(|r| r["repeat"]["n"] == 3), "{rows:?}");
    // One run per key asks for repetition 1 only, done for both keys.
    let out = sweep("1");
    assert!(out.contains("0 trial(s) run, 2 already done"), "{out}");
}

/// `config/edgebench.toml` documents every section and key a user may set: the shared
/// sections and each registered workload's own, live or commented out, and it loads and
/// passes every workload's check as it stands.
#[test]
fn the_example_config_documents_every_section_and_key() {
    use edgebench::config::Config;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("config/edgebench.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let config = Config::from_toml(&text, &path).unwrap_or_else(|e| panic!("{e}"));

    // Each workload's section as it documents itself; a workload added to the registry
    // fails the test until its section is documented here.
    let mut documented = toml::Table::try_from(Config::default()).unwrap();
    let sections = edgebench::workloads::documented_sections();
    for name in edgebench::workloads::names() {
        let section = sections.iter().find(|(n, _)| *n == name).map(|(_, s)| s);
        if let Some(section) = section {
            let header = match section {
                toml::Value::Array(_) => format!("[[{name}]]"),
                _ => format!("[{name}]"),
            };
            assert!(
                text.lines()
                    .any(|l| l.trim_start_matches(['#', ' ']).starts_with(&header)),
                "config/edgebench.toml has no {header} section"
            );
        }
        assert!(
            text.contains(&format!("| {name}")) || text.contains(&format!("= \"{name}\"")),
            "config/edgebench.toml's sweep.workload does not list {name}"
        );
        if let Some(section) = section {
            let section = match section {
                toml::Value::Array(entries) => entries[0].clone(),
                table => table.clone(),
            };
            documented.insert(name, section);
        }
    }

    for (section, value) in &documented {
        let Some(table) = value.as_table() else {
            continue;
        };
        assert!(
            text.lines().any(|l| {
                let l = l.trim_start_matches(['#', ' ']);
                l.starts_with(&format!("[{section}]")) || l.starts_with(&format!("[[{section}]]"))
            }),
            "config/edgebench.toml has no [{section}]"
        );
        for key in table.keys() {
            let documented = text.lines().any(|l| {
                let l = l.trim_start_matches(['#', ' ']);
                l.strip_prefix(key.as_str())
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
                    || l.starts_with(&format!("[{section}.{key}]"))
            });
            assert!(
                documented,
                "config/edgebench.toml does not document {section}.{key}"
            );
        }
    }

    // As it stands the file is a valid config for every workload that needs nothing more: a
    // section of entries (`[[exec]]`) is commented out, there is nothing to run by default.
    for name in edgebench::workloads::names() {
        if sections
            .iter()
            .any(|(n, s)| *n == name && matches!(s, toml::Value::Array(_)))
        {
            continue;
        }
        let mut c = config.clone();
        c.sweep.workload = edgebench::workloads::parse_kind(&name).unwrap();
        edgebench::workloads::check_config(&c, "config/edgebench.toml")
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// A slow power sensor (an INA3221 refreshing every 100 ms): with --power every operator
/// trial is measured for at least 12 of its readings, though `ops.min_time_s` asks for 50 ms,
/// so none is FEW_READINGS; without --power the configured minimum stands.
#[test]
fn ops_trials_with_power_last_at_least_twelve_readings_of_a_slow_sensor() {
    use crate::fixtures::jetson::{write, ORIN_NX_HWMON};
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    write(&sys, &format!("{ORIN_NX_HWMON}/update_interval"), "100\n");
    let config = dir.path().join("ops.toml");
    std::fs::write(&config, "[ops]\nmin_executions = 2\nmin_time_s = 0.05\n").unwrap();
    let sweep = |db: &std::path::Path, power: bool| {
        let mut cmd = edgebench(dir.path());
        cmd.args(["run", "--config"])
            .arg(&config)
            .args(["--workload", "ops", "--op", "add", "--mb", "1", "--sysfs"])
            .arg(&sys)
            .arg("--db")
            .arg(db);
        if power {
            cmd.arg("--power");
        }
        ok(cmd.output().unwrap());
        results(dir.path(), db).remove(0)
    };
    let r = sweep(&dir.path().join("power.db"), true);
    let window = r["window_s"].as_f64().unwrap();
    assert!(window >= 12.0 * 0.100, "{r}");
    assert!(r["power_low_samples"].is_null(), "{r}");
    assert!(r["energy_j"].as_f64().is_some(), "{r}");
    // Without power nothing lengthens the trial: far shorter than 12 readings.
    let r = sweep(&dir.path().join("plain.db"), false);
    let window = r["window_s"].as_f64().unwrap();
    assert!((0.05..1.0).contains(&window), "{r}");
}
