//! `run --power` and `sensors` end to end through the binary, with `--sysfs` pointing at a
//! prepared Jetson tree (a JetPack 5 Orin NX: ina3221 hwmon at 1-0040).

use crate::common::{edgebench, ok, results, wait_for};
use crate::fixtures::jetson::{orin_nx_power, thor_power, write, ORIN_NX_HWMON};
use rusqlite::Connection;
use serde_json::Value;

#[test]
fn run_with_power_records_energy_consistent_with_the_rails() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let db = dir.path().join("p.db");
    let cfg = dir.path().join("p.toml");
    std::fs::write(&cfg, "[power]\nbaseline_s = 0.3\ngpio_marker = 17\n").unwrap();
    // sysfs GPIO as after `export`: the pin directory exists.
    write(&sys, "class/gpio/export", "");
    write(&sys, "class/gpio/unexport", "");
    write(&sys, "class/gpio/gpio17/value", "");
    let out = ok(edgebench(dir.path())
        .args([
            "run", "--power", "--net", "alexnet", "--batch", "2", "--images", "2",
        ])
        .args(["--epochs", "2", "--warmup", "1", "--config"])
        .arg(&cfg)
        .arg("--sysfs")
        .arg(&sys)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("J/img") && stdout.contains("EDP"),
        "{stdout}"
    );

    let rows = results(dir.path(), &db);
    let r = &rows[0];
    assert_eq!(r["status"], "ok", "{r}");
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
    // Constant 7.5 W on VDD_IN, the total alone (not VDD_IN + its sub-rails = 12.5 W).
    assert!((f("avg_power_w") - 7.5).abs() < 1e-6, "{r}");
    let energy = f("energy_j");
    assert!(energy > 0.0);
    // One measured iteration of 2 images: J/img = E / 2, EDP = E x duration = E^2 / P.
    assert!((f("energy_per_image_j") - energy / 2.0).abs() < 1e-9, "{r}");
    assert!(
        (f("edp_js") - energy * energy / 7.5).abs() < 1e-6 * f("edp_js"),
        "{r}"
    );
    // The baseline was the same 7.5 W: no dynamic energy.
    assert!((f("baseline_power_w") - 7.5).abs() < 1e-6, "{r}");
    assert!(f("dynamic_energy_j").abs() < 1e-6, "{r}");
    assert_eq!(r["board"], "orin-nx");
    assert_eq!(r["power_scope"], "module");
    let rails = r["rail_energy_j"].as_object().unwrap();
    assert_eq!(rails.len(), 3);
    assert!((rails["VDD_SOC"].as_f64().unwrap() - energy * 2.0 / 7.5).abs() < 1e-6);
    assert!(r["power_samples"].as_i64().unwrap() >= 2, "{r}");
    assert_eq!(r["power_incomplete"], false);

    let c = Connection::open(&db).unwrap();
    let (n, with_energy, sum): (i64, i64, f64) = c
        .query_row(
            "SELECT COUNT(*), COUNT(energy_j), TOTAL(energy_j) FROM iterations",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((n, with_energy), (2, 2));
    assert!(
        sum > energy * 0.5,
        "per-iteration energies {sum} vs trial {energy}"
    );
    let samples: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM power_samples WHERE rail = 'VDD_IN' AND watts = 7.5",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(samples >= 2);

    // The report draws this trial's power trace: one line per stored rail and a rule at each
    // of the 2 iterations' starts plus the last one's end.
    let trial = r["trial_id"].as_str().unwrap();
    let report = dir.path().join("report");
    ok(edgebench(dir.path())
        .arg("report")
        .arg(&db)
        .arg("--out")
        .arg(&report)
        .args(["--trace", &trial[..8]])
        .output()
        .unwrap());
    let svg = std::fs::read_to_string(
        report
            .join(r["host"].as_str().unwrap())
            .join(format!("power_trace_{}.svg", &trial[..8])),
    )
    .unwrap();
    let rails: i64 = c
        .query_row("SELECT COUNT(DISTINCT rail) FROM power_samples", [], |r| {
            r.get(0)
        })
        .unwrap();
    for rail in ["VDD_IN", "VDD_SOC"] {
        assert!(svg.contains(rail), "legend lacks {rail}");
    }
    // Rules are the only lines drawn in 0.25-alpha black.
    let rules = svg
        .lines()
        .filter(|l| l.contains("<polyline") && l.contains("opacity=\"0.25\""))
        .count();
    assert_eq!(
        rules,
        3,
        "iteration boundary rules in {}",
        &svg[..svg.len().min(4000)]
    );
    assert!(rails >= 3);
    let out = edgebench(dir.path())
        .arg("report")
        .arg(&db)
        .arg("--out")
        .arg(&report)
        .args(["--trace", "nosuchtrial"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no trial has that id"));
}

#[test]
fn power_without_a_sensor_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("empty-sys");
    std::fs::create_dir_all(&sys).unwrap();
    let db = dir.path().join("none.db");
    let out = edgebench(dir.path())
        .args([
            "run", "--power", "--net", "alexnet", "--batch", "2", "--images", "2",
        ])
        .arg("--sysfs")
        .arg(&sys)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no usable power sensor"), "{stderr}");
    assert!(
        stderr.contains("ina3221") && stderr.contains("[power.ina226]"),
        "{stderr}"
    );
    assert!(!db.exists());
}

#[test]
fn sensors_lists_rails_total_and_probes() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let out = ok(edgebench(dir.path())
        .args(["sensors", "--json", "--sysfs"])
        .arg(&sys)
        .output()
        .unwrap());
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["board"], "orin-nx");
    assert!((r["total_w"].as_f64().unwrap() - 7.5).abs() < 1e-9, "{r}");
    let rails = r["sources"][0]["rails"].as_array().unwrap();
    assert_eq!(rails[0]["name"], "VDD_IN");
    assert_eq!(rails[0]["in_total"], true);
    assert_eq!(rails[1]["in_total"], false);
    assert!((r["sources"][0]["rate_hz"].as_f64().unwrap() - 1000.0 / 7.0).abs() < 1e-6);
    let empty: Vec<&Value> = r["probed"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["found"].is_null())
        .collect();
    assert!(empty.len() >= 3, "{r}");
    let text = ok(edgebench(dir.path())
        .args(["sensors", "--board", "generic", "--sysfs"])
        .arg(&sys)
        .output()
        .unwrap());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("board: generic") && text.contains("<- total"),
        "{text}"
    );
}

#[test]
fn thor_run_is_board_scope_from_the_ina238_and_flags_trials_too_short_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    thor_power(&sys);
    let db = dir.path().join("t.db");
    let cfg = dir.path().join("t.toml");
    std::fs::write(&cfg, "[power]\nbaseline_s = 0\n").unwrap();
    // Two trials, each far shorter than 10 refreshes of a 1 s sensor.
    let out = ok(edgebench(dir.path())
        .args(["run", "--power", "--net", "alexnet", "--batch", "1,2"])
        .args([
            "--images", "2", "--epochs", "1", "--warmup", "0", "--config",
        ])
        .arg(&cfg)
        .arg("--sysfs")
        .arg(&sys)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Warned once per run, with the fix.
    assert_eq!(stderr.matches("too few readings").count(), 1, "{stderr}");
    assert!(
        stderr.contains("--images") && stderr.contains("--epochs"),
        "{stderr}"
    );
    assert!(
        stdout.contains("FEW_READINGS(") && stdout.contains("board"),
        "{stdout}"
    );

    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_eq!(r["board"], "agx-thor", "{r}");
        assert_eq!(r["power_scope"], "board", "{r}");
        // power1_input (45.5 W), from VIN alone: not V x I (46.8 W), not plus the USB-C
        // contract (100 W).
        assert!(
            (r["avg_power_w"].as_f64().unwrap() - 45.5).abs() < 1e-6,
            "{r}"
        );
        let rails = r["rail_energy_j"].as_object().unwrap();
        assert_eq!(rails.keys().collect::<Vec<_>>(), ["VIN"], "{r}");
        let few = r["power_low_samples"].as_i64().expect("flagged");
        assert!((0..10).contains(&few), "{r}");
        assert_eq!(r["power_few_readings"], true, "{r}");
    }
    let c = Connection::open(&db).unwrap();
    let (scope, flagged): (String, i64) = c
        .query_row(
            "SELECT r.power_scope, COUNT(t.power_low_samples) FROM runs r \
             JOIN trials t ON t.run_id = r.id",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((scope.as_str(), flagged), ("board", 2));

    // Module scope on Thor is refused before anything is written.
    let db2 = dir.path().join("t2.db");
    let out = edgebench(dir.path())
        .args([
            "run",
            "--power",
            "--power-scope",
            "module",
            "--net",
            "alexnet",
        ])
        .args(["--batch", "1", "--images", "1", "--config"])
        .arg(&cfg)
        .arg("--sysfs")
        .arg(&sys)
        .arg("--db")
        .arg(&db2)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--power-scope board"), "{stderr}");
    assert!(!db2.exists());
}

#[test]
fn board_scope_without_a_carrier_monitor_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let db = dir.path().join("none.db");
    let out = edgebench(dir.path())
        .args([
            "run",
            "--power",
            "--power-scope",
            "board",
            "--net",
            "alexnet",
        ])
        .args(["--batch", "1", "--images", "1", "--sysfs"])
        .arg(&sys)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("orin-nx") && stderr.contains("no carrier-board monitor"),
        "{stderr}"
    );
    assert!(!db.exists());
    let out = edgebench(dir.path())
        .args(["run", "--power", "--power-scope", "carrier", "--sysfs"])
        .arg(&sys)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("module or board"));
}

/// batch, energy_j, avg_power_w, power_incomplete, power_gap_s, seconds of its iterations.
type TrialPowerRow = (
    i64,
    Option<f64>,
    Option<f64>,
    Option<bool>,
    Option<f64>,
    f64,
);

#[test]
fn a_sensor_lost_mid_trial_is_accounted_honestly_to_the_end_of_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let db = dir.path().join("lost.db");
    let child = edgebench(dir.path())
        .args(["run", "--power", "--net", "alexnet", "--batch", "1,2"])
        .args(["--images", "6", "--epochs", "1", "--warmup", "0", "--sysfs"])
        .arg(&sys)
        .arg("--db")
        .arg(&db)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Two iterations of the first trial measured, then the monitor's files vanish for good.
    wait_for(
        &db,
        "SELECT COUNT(*) FROM iterations",
        2,
        std::time::Duration::from_secs(300),
    );
    let hwmon = sys.join(ORIN_NX_HWMON);
    std::fs::rename(&hwmon, dir.path().join("gone")).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Trials ran fine: the run succeeds, the power loss is flagged, not a failure.
    assert_eq!(out.status.code(), Some(0), "{stderr}");

    let c = Connection::open(&db).unwrap();
    let trials: Vec<TrialPowerRow> = c
        .prepare(
            "SELECT t.batch, t.energy_j, t.avg_power_w, t.power_incomplete, t.power_gap_s, \
             (SELECT (MAX(t_end_ns) - MIN(t_start_ns)) * 1e-9 FROM iterations i \
              WHERE i.trial_id = t.id) FROM trials t ORDER BY t.id",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(trials.len(), 2, "{trials:?}");
    let (_, energy, power, incomplete, gap, duration) = trials[0];
    // The trial that lost its sensor: part measured at the fixture's 7.5 W, the rest a gap no
    // longer than the trial itself, no energy for the gap.
    assert_eq!(incomplete, Some(true), "{trials:?}");
    let gap = gap.unwrap();
    assert!(gap > 0.0 && gap < duration, "gap {gap} in {duration} s");
    assert!((power.unwrap() - 7.5).abs() < 1e-6, "{trials:?}");
    let energy = energy.unwrap();
    assert!(
        energy <= 7.5 * (duration - gap) + 7.5 * 0.007 + 1e-9,
        "energy {energy} J for {} s measured",
        duration - gap
    );
    assert!(energy > 0.0);
    // The trial after it: no sensor at all, flagged, no energy made up.
    let (_, energy, _, incomplete, gap, duration) = trials[1];
    assert_eq!((energy, incomplete), (None, Some(true)), "{trials:?}");
    assert!((gap.unwrap() - duration).abs() < 1e-6, "{trials:?}");
    // Said where a person looks: each trial's line and a warning at the end of the run.
    assert!(stderr.contains("power_incomplete"), "{stderr}");
    let last = stderr
        .lines()
        .rev()
        .find(|l| l.contains("WARN"))
        .unwrap_or("");
    assert!(
        last.contains("2 trial(s)") && last.contains("still failing"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("POWER_GAP"));
    // Both trials keep the reason: the failing source and its error.
    let notes: Vec<Option<String>> = rusqlite::Connection::open(&db)
        .unwrap()
        .prepare("SELECT power_note FROM trials ORDER BY batch")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(notes.len(), 2);
    for note in &notes {
        let note = note.as_deref().unwrap_or("");
        assert!(note.contains("hwmon"), "{notes:?}");
    }
}

/// Log lines on a pipe carry no colour codes; under systemd (`JOURNAL_STREAM`) they carry no
/// timestamp of their own either, the journal adds one.
#[test]
fn logs_are_plain_on_pipes_and_unstamped_for_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let run = |envs: &[(&str, &str)]| {
        let db = dir.path().join(format!("log{}.db", envs.len()));
        let out = ok(edgebench(dir.path())
            .env_remove("JOURNAL_STREAM")
            .env_remove("NO_COLOR")
            .envs(envs.iter().copied())
            .args(["run", "--power", "--net", "alexnet", "--batch", "1"])
            .args(["--images", "1", "--epochs", "1", "--warmup", "0", "--sysfs"])
            .arg(&sys)
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap());
        String::from_utf8(out.stderr).unwrap()
    };
    // An RFC 3339 stamp: "2026-01-31T...".
    let stamped = |l: &str| {
        let b = l.as_bytes();
        b.len() > 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
    };
    let piped = run(&[]);
    assert!(piped.contains("INFO"), "{piped}");
    assert!(!piped.contains('\x1b'), "colour codes on a pipe: {piped:?}");
    assert!(
        piped.lines().filter(|l| l.contains("INFO")).all(stamped),
        "{piped}"
    );
    let journal = run(&[("JOURNAL_STREAM", "8:12345")]);
    assert!(journal.contains("INFO"), "{journal}");
    assert!(!journal.contains('\x1b'), "{journal:?}");
    assert!(
        !journal.lines().any(stamped),
        "a timestamp of our own in the journal: {journal}"
    );
}

/// `power_few_readings` flags a trial whose energy rests on fewer than 10 sensor readings
/// whatever their count: 0 too (a JSON reader takes a count of 0 for false), and a trial whose
/// sensor gave no reading at all.
#[test]
fn every_trial_with_too_few_readings_is_flagged_zero_included() {
    use crate::fixtures::db::{iter, key, run_info, summary};
    use edgebench::power::{TrialPower, TrialPowerRecord};
    use edgebench::store::Store;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("few.db");
    let mut s = Store::open(&db).unwrap();
    let run = s
        .begin_run(&run_info("r-few", "orin-nx", "2025-01-31T12:00:00Z"))
        .unwrap();
    s.set_run_power(run, "orin-nx", "VDD_IN", None).unwrap();
    s.set_run_power_scope(run, "module").unwrap();
    let measured = |low_samples: Option<usize>| {
        TrialPowerRecord::Measured(TrialPower {
            energy_j: 0.5,
            avg_power_w: 7.5,
            energy_per_image_j: 0.5,
            edp_js: 0.03,
            dynamic_energy_j: None,
            samples: low_samples.unwrap_or(40),
            rate_hz: None,
            jitter_s: None,
            incomplete: false,
            gap_s: 0.0,
            low_samples,
            note: None,
            rails: vec![("VDD_IN".into(), 0.5, true)],
            iterations: vec![],
        })
    };
    let records = [
        // No sensor update inside the measured window: the energy comes from the readings
        // around it.
        measured(Some(0)),
        measured(Some(3)),
        measured(None),
        TrialPowerRecord::Unmeasured {
            gap_s: 0.07,
            note: Some("hwmon3: No such file or directory".into()),
        },
        // No measured iteration: no power record.
        TrialPowerRecord::Nothing,
    ];
    for (batch, record) in records.iter().enumerate() {
        let trial = s
            .begin_trial(
                run,
                &key("alexnet", "cpu", batch + 1),
                1,
                0,
                "2025-01-31T12:00:01Z",
            )
            .unwrap();
        s.record_iteration(trial, &iter(0, 6.9, 0.1)).unwrap();
        s.record_power(trial, record).unwrap();
        s.finish_trial(trial, &summary("ok")).unwrap();
    }
    drop(s);
    let rows = results(dir.path(), &db);
    let got: Vec<(Value, Value)> = rows
        .iter()
        .map(|r| {
            (
                r["power_low_samples"].clone(),
                r["power_few_readings"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (Value::from(0), Value::from(true)),
            (Value::from(3), Value::from(true)),
            (Value::Null, Value::from(false)),
            (Value::from(0), Value::from(true)),
            (Value::Null, Value::Null),
        ],
        "{rows:#?}"
    );
}
