//! The store, against real temporary database files.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::SystemTime;

use crate::common;
use crate::fixtures::db::{damage_table, iter, key, run_info, sidecars_absent, summary};
use edgebench::record::Metrics;
use edgebench::store::{Store, StoreError, SweepLock, TrialStatus, SCHEMA_VERSION};
use rusqlite::Connection;

/// Bytes and mtime, to prove a refused file was not touched.
fn snapshot(path: &Path) -> (Vec<u8>, SystemTime) {
    (
        std::fs::read(path).unwrap(),
        std::fs::metadata(path).unwrap().modified().unwrap(),
    )
}

#[test]
fn creates_schema_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/bench.db");
    {
        let mut s = Store::open(&path).unwrap();
        assert_eq!(s.path(), path);
        assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
        s.begin_run(&run_info("run-1", "jetson-nano", "2025-01-31T12:00:00Z"))
            .unwrap();
    }
    let raw = Connection::open(&path).unwrap();
    let uv: u32 = raw
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(uv, SCHEMA_VERSION);
    let meta = |k: &str| -> String {
        raw.query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(meta("application"), "edgebench");
    assert_eq!(meta("schema_version"), SCHEMA_VERSION.to_string());
    let tables: BTreeSet<String> = raw
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for t in ["meta", "runs", "trials", "iterations"] {
        assert!(tables.contains(t), "missing table {t}: {tables:?}");
    }
    drop(raw);

    // Reopening neither re-migrates (would fail: tables exist) nor loses data.
    let s = Store::open(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    drop(s);
    let raw = Connection::open(&path).unwrap();
    let runs: i64 = raw
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, 1);
    let ro = Store::open_readonly(&path).unwrap();
    assert_eq!(ro.schema_version().unwrap(), SCHEMA_VERSION);
}

#[test]
fn wal_mode_and_foreign_keys_are_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    let mut s = Store::open(&path).unwrap();
    let raw = Connection::open(&path).unwrap();
    let mode: String = raw
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    // Foreign keys: a trial of a missing run and an iteration of a missing trial are refused.
    assert!(s
        .begin_trial(42, &key("alexnet", "cpu", 8), 10, 1, "t")
        .is_err());
    let err = s.record_iteration(42, &iter(0, 1.0, 0.1)).unwrap_err();
    assert!(err.to_string().contains("bench.db"), "{err}");
}

#[test]
fn refuses_foreign_sqlite_file_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE foo (x INTEGER); INSERT INTO foo VALUES (1);")
            .unwrap();
    }
    let before = snapshot(&path);
    std::thread::sleep(std::time::Duration::from_millis(20));

    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("not an edgebench"), "{msg}");
    let err = Store::open_readonly(&path).unwrap_err();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");

    assert_eq!(snapshot(&path), before);
    assert!(sidecars_absent(&path));
    // Still a rollback-journal database: WAL was not switched on.
    let c = Connection::open(&path).unwrap();
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
}

#[test]
fn refuses_foreign_meta_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE meta (key TEXT, value TEXT); \
             INSERT INTO meta VALUES ('application', 'someone-else');",
        )
        .unwrap();
    }
    let before = snapshot(&path);
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    assert!(err.to_string().contains("someone-else"), "{err}");
    assert_eq!(snapshot(&path), before);
}

#[test]
fn refuses_non_sqlite_file_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let bytes: Vec<u8> = b"batch,time\n8,0.1\n".repeat(300);
    std::fs::write(&path, &bytes).unwrap();
    let before = snapshot(&path);
    std::thread::sleep(std::time::Duration::from_millis(20));

    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::NotSqlite { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("notes.txt") && msg.contains("not a SQLite"),
        "{msg}"
    );
    let err = Store::open_readonly(&path).unwrap_err();
    assert!(matches!(err, StoreError::NotSqlite { .. }), "{err:?}");

    assert_eq!(snapshot(&path), before);
    assert_eq!(before.0, bytes);
    assert!(sidecars_absent(&path));
}

#[test]
fn refuses_newer_schema_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    drop(Store::open(&path).unwrap());
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA user_version = 999;").unwrap();
    }
    let before = snapshot(&path);
    std::thread::sleep(std::time::Duration::from_millis(20));

    let err = Store::open(&path).unwrap_err();
    match &err {
        StoreError::TooNew {
            found, supported, ..
        } => {
            assert_eq!(*found, 999);
            assert_eq!(*supported, SCHEMA_VERSION);
        }
        other => panic!("expected TooNew, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("future.db") && msg.contains("newer edgebench"),
        "{msg}"
    );
    assert!(matches!(
        Store::open_readonly(&path).unwrap_err(),
        StoreError::TooNew { found: 999, .. }
    ));
    assert_eq!(snapshot(&path), before);
}

#[test]
fn readonly_missing_file_is_an_error_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.db");
    let err = Store::open_readonly(&path).unwrap_err();
    assert!(matches!(err, StoreError::Missing { .. }), "{err:?}");
    assert!(err.to_string().contains("absent.db"), "{err}");
    assert!(!path.exists());
}

#[test]
fn readonly_store_reads_but_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    {
        let mut s = Store::open(&path).unwrap();
        let run = s
            .begin_run(&run_info("run-1", "jetson-nano", "2025-01-31T12:00:00Z"))
            .unwrap();
        s.begin_trial(run, &key("alexnet", "cpu", 8), 4, 1, "2025-01-31T12:00:01Z")
            .unwrap();
    }
    let mut ro = Store::open_readonly(&path).unwrap();
    assert_eq!(ro.results().unwrap().len(), 1);
    assert!(ro
        .begin_run(&run_info("run-2", "jetson-nano", "2025-01-31T13:00:00Z"))
        .is_err());
}

#[test]
fn round_trip_run_trial_iterations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    let mut s = Store::open(&path).unwrap();
    let info = run_info(
        "11111111-1111-4111-8111-111111111111",
        "jetson-nano",
        "2025-01-31T12:00:00Z",
    );
    let run = s.begin_run(&info).unwrap();
    let k = key("alexnet", "cpu", 8);
    let trial = s
        .begin_trial(run, &k, 5, 1, "2025-01-31T12:00:01Z")
        .unwrap();

    let recs: Vec<_> = (0..5)
        .map(|i| iter(i, 6.9 - 0.1 * i as f64, 0.1 + 0.01 * i as f64))
        .collect();
    for (i, r) in recs.iter().enumerate() {
        s.record_iteration(trial, r).unwrap();
        assert_eq!(s.results().unwrap()[0].iterations, i + 1);
    }
    assert_eq!(s.iterations(trial).unwrap(), recs);

    // A duplicate step is refused and, being one transaction, does not bump the count.
    assert!(s.record_iteration(trial, &recs[2]).is_err());
    assert_eq!(s.results().unwrap()[0].iterations, 5);

    let sum = summary("ok");
    s.finish_trial(trial, &sum).unwrap();
    s.finish_run(run, "2025-01-31T12:10:00Z", "finished")
        .unwrap();
    assert!(matches!(
        s.finish_trial(trial + 100, &sum).unwrap_err(),
        StoreError::NotFound { what: "trial", .. }
    ));

    let rows = s.results().unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r.run_id, info.uuid);
    assert_eq!(r.trial_id.len(), 36);
    assert_eq!(r.host, "jetson-nano");
    assert_eq!(r.key(), k);
    assert_eq!(
        (r.iterations, r.iterations_planned, r.warmup_iterations),
        (5, 5, 1)
    );
    assert_eq!(r.status, "ok");
    assert_eq!(r.error, None);
    assert_eq!(r.started_at, "2025-01-31T12:00:01Z");
    assert_eq!(r.ended_at.as_deref(), Some("2025-01-31T12:05:00Z"));
    assert_eq!(r.time_per_image_s, Some(0.0125));
    assert_eq!(r.images_per_s, Some(80.0));
    assert_eq!((r.loss_first, r.loss_last), (Some(6.9), Some(6.5)));
    assert!(!r.loss_anomaly);
    assert_eq!(r.trial_rowid, trial);

    let raw = Connection::open(&path).unwrap();
    let (status, ended, cfg): (String, String, String) = raw
        .query_row(
            "SELECT status, ended_at, config_toml FROM runs WHERE id = ?1",
            [run],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(status, "finished");
    assert_eq!(ended, "2025-01-31T12:10:00Z");
    assert_eq!(cfg, info.config_toml);

    // Trial UUIDs are fresh per trial.
    let t2 = s
        .begin_trial(run, &k, 5, 1, "2025-01-31T12:06:00Z")
        .unwrap();
    let uuids: BTreeSet<String> = s
        .results()
        .unwrap()
        .into_iter()
        .map(|r| r.trial_id)
        .collect();
    assert_eq!(uuids.len(), 2);
    assert_ne!(t2, trial);
}

#[test]
fn nan_loss_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&dir.path().join("bench.db")).unwrap();
    let run = s
        .begin_run(&run_info("run-1", "jetson-nano", "2025-01-31T12:00:00Z"))
        .unwrap();
    let trial = s
        .begin_trial(run, &key("googlenet", "cuda", 16), 2, 0, "t")
        .unwrap();
    s.record_iteration(trial, &iter(0, f64::NAN, 0.2)).unwrap();
    s.record_iteration(trial, &iter(1, f64::INFINITY, 0.2))
        .unwrap();
    let it = s.iterations(trial).unwrap();
    assert!(it[0].loss.is_nan());
    assert_eq!(it[1].loss, f64::INFINITY);
}

#[test]
fn completed_keys_only_has_ok_trials() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&dir.path().join("bench.db")).unwrap();
    let run = s
        .begin_run(&run_info("run-1", "jetson-nano", "2025-01-31T12:00:00Z"))
        .unwrap();
    let ok = key("alexnet", "cpu", 8);
    for (k, status) in [
        (ok.clone(), Some("ok")),
        (key("alexnet", "cpu", 16), Some("failed")),
        (key("alexnet", "cpu", 32), Some("interrupted")),
        (key("alexnet", "cpu", 64), None), // still running
    ] {
        let t = s.begin_trial(run, &k, 4, 1, "t").unwrap();
        if let Some(st) = status {
            s.finish_trial(t, &summary(st)).unwrap();
        }
    }
    let done = s.completed_keys().unwrap();
    assert_eq!(done.len(), 1);
    assert!(done.contains(&ok));
    // Differs only in dataset: not completed.
    let mut other = ok.clone();
    other.dataset = "imagenet-subset".into();
    assert!(!done.contains(&other));
}

#[test]
fn results_json_has_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&dir.path().join("bench.db")).unwrap();
    let run = s
        .begin_run(&run_info("run-1", "jetson-nano", "2025-01-31T12:00:00Z"))
        .unwrap();
    let t = s
        .begin_trial(run, &key("alexnet", "cpu", 8), 4, 1, "t")
        .unwrap();
    s.record_iteration(t, &iter(0, 6.9, 0.1)).unwrap();
    s.finish_trial(t, &summary("ok")).unwrap();

    let json = serde_json::to_value(s.results().unwrap()).unwrap();
    let obj = json[0].as_object().unwrap();
    let expected = [
        "run_id",
        "trial_id",
        "host",
        "net",
        "device",
        "batch",
        "epochs",
        "images",
        "dataset",
        "iterations",
        "iterations_planned",
        "warmup_iterations",
        "status",
        "error",
        "started_at",
        "ended_at",
        "time_per_image_s",
        "time_per_image_spread_s",
        "images_per_s",
        "loss_first",
        "loss_last",
        "loss_anomaly",
        "energy_j",
        "avg_power_w",
        "energy_per_image_j",
        "edp_js",
        // per item of work, derived from the columns
        "item",
        "items_per_iteration",
        "time_per_item_s",
        "energy_per_item_j",
        "edp_per_item_js",
        "time_per_item_median_s",
        "time_per_item_iqr_s",
        "swap_pressure",
        "peak_rss_bytes",
        // schema v8
        "peak_gpu_bytes",
        // the memory record (schema v2), null until measured
        "mem_estimate_bytes",
        "mem_limit_bytes",
        "swap_in_pages",
        "swap_out_pages",
        "major_faults",
        "swapped_bytes_max",
        "mem_available_min_bytes",
        "psi_memory_some_us",
        "psi_memory_full_us",
        "memory_note",
        // schema v3: power
        "dynamic_energy_j",
        "rail_energy_j",
        "power_samples",
        "power_rate_hz",
        "power_jitter_s",
        "power_incomplete",
        "power_gap_s",
        "board",
        "power_total",
        "baseline_power_w",
        "baseline_s",
        // schema v4: throttling
        "throttled",
        "throttle_note",
        // schema v5: power scope, trials too short for the sensor
        "power_scope",
        "power_low_samples",
        "power_few_readings",
        "power_note",
        // schema v6: workloads
        "workload",
        "time_per_iteration_s",
        "time_per_iteration_spread_s",
        "total_time_s",
        "gflop_per_s",
        // schema v10: repetitions
        "repetition",
    ];
    let keys: BTreeSet<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(keys, expected.into_iter().collect::<BTreeSet<_>>());
    assert_eq!(obj["workload"], "cnn");
    for k in [
        "energy_j",
        "avg_power_w",
        "energy_per_image_j",
        "edp_js",
        "swap_pressure",
        "peak_rss_bytes",
        "peak_gpu_bytes",
        "error",
        "major_faults",
        "memory_note",
    ] {
        assert!(obj[k].is_null(), "{k} should be null: {}", obj[k]);
    }
    assert_eq!(obj["run_id"], "run-1");
    assert_eq!(obj["batch"], 8);
    assert_eq!(obj["iterations"], 1);
    assert_eq!(obj["loss_anomaly"], false);
    assert_eq!(obj["status"], "ok");
}

/// Cost of one record_iteration (one transaction) on a temp file. The bound is loose on
/// purpose: it catches a missing WAL/synchronous setting (an fsync per step), not jitter.
#[test]
fn thousands_of_iterations_are_each_recorded_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&dir.path().join("bench.db")).unwrap();
    let run = s
        .begin_run(&run_info("run-1", "jetson-nano", "2025-01-31T12:00:00Z"))
        .unwrap();
    let n = 5_000;
    let t = s
        .begin_trial(run, &key("alexnet", "cpu", 8), n, 0, "t")
        .unwrap();
    for i in 0..n {
        s.record_iteration(t, &iter(i, 6.9, 0.1)).unwrap();
    }
    assert_eq!(s.results().unwrap()[0].iterations, n);
    assert_eq!(
        s.iterations(t).unwrap().len(),
        n,
        "one row per recorded iteration"
    );
}

/// `edgebench results` may run while a sweep writes; neither side may get SQLITE_BUSY.
#[test]
fn reader_sees_progress_while_writer_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    let mut w = Store::open(&path).unwrap();
    let run = w
        .begin_run(&run_info("run-1", "jetson-nano", "2025-01-31T12:00:00Z"))
        .unwrap();
    let t = w
        .begin_trial(run, &key("alexnet", "cpu", 8), 10, 1, "t")
        .unwrap();
    for i in 0..3 {
        w.record_iteration(t, &iter(i, 6.9, 0.1)).unwrap();
    }
    let r = Store::open_readonly(&path).unwrap();
    let row = &r.results().unwrap()[0];
    assert_eq!((row.status.as_str(), row.iterations), ("running", 3));
    for i in 3..6 {
        w.record_iteration(t, &iter(i, 6.9, 0.1)).unwrap();
    }
    assert_eq!(r.iterations(t).unwrap().len(), 6);
}

/// After a trial ends its rows are in the main file, so copying just `bench.db` off a board
/// mid-sweep (without `-wal`) loses nothing finished.
#[test]
fn finished_trial_is_in_main_file_without_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    let mut w = Store::open(&path).unwrap();
    let run = w
        .begin_run(&run_info("run-1", "jetson-nano", "2025-01-31T12:00:00Z"))
        .unwrap();
    let t = w
        .begin_trial(run, &key("alexnet", "cpu", 8), 4, 1, "t")
        .unwrap();
    for i in 0..4 {
        w.record_iteration(t, &iter(i, 6.9, 0.1)).unwrap();
    }
    w.finish_trial(t, &summary("ok")).unwrap();

    let copy_dir = tempfile::tempdir().unwrap();
    let copy = copy_dir.path().join("pulled.db");
    std::fs::copy(&path, &copy).unwrap();
    let r = Store::open_readonly(&copy).unwrap();
    let rows = r.results().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].status.as_str(), rows[0].iterations), ("ok", 4));
    assert_eq!(r.iterations(rows[0].trial_rowid).unwrap().len(), 4);
    drop(w);
}

/// A file written by schema v1 is migrated on open (v2 memory, v3 power), its rows kept.
#[test]
fn v1_file_is_migrated_to_the_current_schema_keeping_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        // A file as the v1 binary left it.
        let c = Connection::open(&path).unwrap();
        c.execute_batch(edgebench::store::schema::MIGRATIONS[0].sql)
            .unwrap();
        c.execute_batch(
            "INSERT INTO meta VALUES ('schema_version', '1'); PRAGMA user_version = 1;
             INSERT INTO runs (uuid, host, started_at, status, config_toml, edgebench_version,
               git_commit, candle_version, cpu_threads, os)
             VALUES ('r1', 'tx1', '2025-01-01T00:00:00Z', 'finished', '', '0.1.0', 'x', '0.11', 4, 'L');
             INSERT INTO trials (uuid, run_id, net, device, batch, epochs, images, dataset,
               iterations_planned, iterations_done, warmup_iterations, status, started_at)
             VALUES ('t1', 1, 'alexnet', 'cpu', 8, 1, 256, 'synthetic:224x224:seed=1', 32, 0, 1,
               'ok', '2025-01-01T00:00:01Z');",
        )
        .unwrap();
    }
    let s = Store::open(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    // Trials from before workloads are CNN trials, and resume still finds them.
    let rows = s.results().unwrap();
    assert_eq!(rows[0].workload, "cnn");
    assert!(rows[0].params.is_empty());
    assert!(s
        .keys_with_status(&[TrialStatus::Ok])
        .unwrap()
        .contains(&key("alexnet", "cpu", 8)));
    drop(s);
    let c = Connection::open(&path).unwrap();
    let (host, base): (String, Option<f64>) = c
        .query_row("SELECT host, baseline_power_w FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((host.as_str(), base), ("tx1", None));
    for table in ["trial_memory", "power_samples", "trial_rail_energy"] {
        let n: i64 = c
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0);
    }
}

#[test]
fn power_figures_samples_and_rail_energies_round_trip() {
    use edgebench::power::{PowerSeries, TrialPower};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut s = Store::open(&path).unwrap();
    let run = s
        .begin_run(&run_info("r-power", "jetson-nano", "2025-01-31T12:00:00Z"))
        .unwrap();
    s.set_run_power(run, "orin-nx", "VDD_IN", Some((4.5, 3.0)))
        .unwrap();
    s.set_run_power_scope(run, "module").unwrap();
    let trial = s
        .begin_trial(run, &key("alexnet", "cpu", 8), 3, 1, "2025-01-31T12:00:01Z")
        .unwrap();
    for k in 0..3 {
        s.record_iteration(trial, &iter(k, 6.9, 0.1)).unwrap();
    }
    // More rows than one batch, to cross a transaction boundary.
    let n = 10_000;
    let t: Vec<i64> = (0..n).map(|k| k * 1000).collect();
    let v = vec![Some(5.0); n as usize];
    let w = vec![7.5; n as usize];
    s.record_power_samples(
        trial,
        &[PowerSeries {
            source: "ina3221 1-0040",
            rail: "VDD_IN",
            t_ns: &t,
            volts: &v,
            amps: &vec![Some(1.5); n as usize],
            watts: &w,
        }],
    )
    .unwrap();
    s.record_trial_power(
        trial,
        &TrialPower {
            energy_j: 2.0,
            avg_power_w: 7.5,
            energy_per_image_j: 0.125,
            edp_js: 0.53,
            dynamic_energy_j: Some(0.8),
            samples: 300,
            rate_hz: Some(142.9),
            jitter_s: Some(1e-4),
            incomplete: false,
            gap_s: 0.0,
            low_samples: Some(3),
            note: Some("hwmon3: No such file or directory".into()),
            rails: vec![("VDD_IN".into(), 2.0, true), ("VDD_SOC".into(), 0.4, false)],
            iterations: vec![(0, 0.7), (2, 0.6)],
        },
    )
    .unwrap();
    s.finish_trial(trial, &summary("ok")).unwrap();
    let rows = s.results().unwrap();
    let r = &rows[0];
    assert_eq!(r.energy_j, Some(2.0));
    assert_eq!(r.dynamic_energy_j, Some(0.8));
    assert_eq!(r.baseline_power_w, Some(4.5));
    assert_eq!(r.board.as_deref(), Some("orin-nx"));
    assert_eq!(r.power_incomplete, Some(false));
    assert_eq!(r.power_low_samples, Some(3));
    assert_eq!(r.power_few_readings, Some(true));
    assert_eq!(
        r.power_note.as_deref(),
        Some("hwmon3: No such file or directory")
    );
    assert_eq!(r.power_scope.as_deref(), Some("module"));
    let rails = r.rail_energy_j.as_ref().unwrap();
    assert_eq!(rails.get("VDD_SOC"), Some(&0.4));
    let json = serde_json::to_value(r).unwrap();
    assert_eq!(json["rail_energy_j"]["VDD_IN"], 2.0);
    assert_eq!(
        s.iteration_energies(trial).unwrap(),
        [(0, Some(0.7)), (1, None), (2, Some(0.6))]
    );
    let c = Connection::open(&path).unwrap();
    let count: i64 = c
        .query_row("SELECT COUNT(*) FROM power_samples", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, n);
}

#[test]
fn damaged_file_is_refused_untouched_by_writers_and_readers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    {
        let mut s = Store::open(&path).unwrap();
        let run = s
            .begin_run(&run_info(
                "44444444-4444-4444-8444-444444444444",
                "jetson-nano",
                "2025-01-31T12:00:00Z",
            ))
            .unwrap();
        for batch in [1, 2, 4] {
            let t = s
                .begin_trial(
                    run,
                    &key("alexnet", "cpu", batch),
                    50,
                    1,
                    "2025-01-31T12:00:01Z",
                )
                .unwrap();
            for i in 0..50 {
                s.record_iteration(t, &iter(i, 6.9, 0.1)).unwrap();
            }
            s.finish_trial(t, &summary("ok")).unwrap();
        }
        s.finish_run(run, "2025-01-31T12:10:00Z", "ok").unwrap();
    }
    let iterations_damaged = dir.path().join("iterations-damaged.db");
    std::fs::copy(&path, &iterations_damaged).unwrap();
    damage_table(&path, "trials");
    damage_table(&iterations_damaged, "iterations");

    for p in [&path, &iterations_damaged] {
        let before = snapshot(p);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let err = Store::open(p).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("damaged") && msg.contains(".recover"), "{msg}");
        assert_eq!(snapshot(p), before, "{} was modified", p.display());
        assert!(sidecars_absent(p));
    }
    // Readers check the whole file on open, not only the tables they read first.
    for p in [&path, &iterations_damaged] {
        let err = Store::open_readonly(p).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    }
    let err = edgebench::store::snapshot(&path, &dir.path().join("copy.db")).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(!dir.path().join("copy.db").exists());
}

#[test]
fn rows_left_running_by_a_dead_process_become_interrupted_keeping_their_iterations() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("stale.db");
    {
        let mut s = Store::open(&db).unwrap();
        let done = s
            .begin_run(&run_info("run-done", "jetson-nano", "2025-01-31T11:00:00Z"))
            .unwrap();
        let t = s
            .begin_trial(done, &key("alexnet", "cpu", 8), 4, 1, "t")
            .unwrap();
        s.finish_trial(t, &summary("ok")).unwrap();
        s.finish_run(done, "2025-01-31T11:30:00Z", "finished")
            .unwrap();
        // A process that dies here (kill -9, a panic, a full disk) leaves both rows `running`.
        let run = s
            .begin_run(&run_info("run-dead", "jetson-nano", "2025-01-31T12:00:00Z"))
            .unwrap();
        let t = s
            .begin_trial(run, &key("alexnet", "cpu", 16), 4, 1, "t")
            .unwrap();
        s.record_iteration(t, &iter(0, 6.9, 0.2)).unwrap();
        s.record_iteration(t, &iter(1, 6.8, 0.2)).unwrap();
    }
    let mut s = Store::open(&db).unwrap();
    let lock = SweepLock::try_acquire(&db).unwrap();
    assert_eq!(
        s.interrupt_unfinished(&lock, "ended without finishing")
            .unwrap(),
        (1, 1)
    );
    let rows = s.results().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].status, "ok");
    assert_eq!(rows[0].error, None);
    assert_eq!(rows[1].status, "interrupted");
    assert_eq!(rows[1].error.as_deref(), Some("ended without finishing"));
    assert_eq!(rows[1].iterations, 2);
    assert_eq!(s.iterations(rows[1].trial_rowid).unwrap().len(), 2);
    let run_status = |uuid: &str| -> String {
        Connection::open(&db)
            .unwrap()
            .query_row("SELECT status FROM runs WHERE uuid = ?1", [uuid], |r| {
                r.get(0)
            })
            .unwrap()
    };
    assert_eq!(run_status("run-done"), "finished");
    assert_eq!(run_status("run-dead"), "interrupted");
    // Nothing left to mark the second time.
    assert_eq!(s.interrupt_unfinished(&lock, "again").unwrap(), (0, 0));
    // Interrupted does not count as done for resume; ok does.
    let done = s
        .statuses_by_key(&[TrialStatus::Ok, TrialStatus::Crashed])
        .unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[&key("alexnet", "cpu", 8)], "ok");
}

/// A workload's own parameters and figures become keys of its row, null ones included, and
/// its parameters are part of the resume key.
#[test]
fn workload_params_and_metrics_are_row_keys_and_part_of_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&dir.path().join("w.db")).unwrap();
    let run = s
        .begin_run(&run_info("r", "jetson-nano", "2025-01-31T11:00:00Z"))
        .unwrap();
    let mut k = key("mlp", "cpu", 64);
    k.workload = "mlp".into();
    k.params = r#"{"size":"small","style":"tensors"}"#.into();
    let t = s.begin_trial(run, &k, 4, 1, "t").unwrap();
    let mut sum = summary("ok");
    sum.metrics = Metrics {
        time_per_iteration_s: Some(0.5),
        time_per_iteration_spread_s: Some(0.01),
        total_time_s: Some(2.0),
        gflop_per_s: Some(12.5),
        extra: serde_json::from_str(r#"{"pct_peak_flops":null,"flops":1e9}"#).unwrap(),
    };
    s.finish_trial(t, &sum).unwrap();
    let rows = s.results().unwrap();
    assert_eq!(rows[0].key(), k);
    let json = serde_json::to_value(&rows).unwrap();
    let row = json[0].as_object().unwrap();
    assert_eq!(row["workload"], "mlp");
    assert_eq!(row["style"], "tensors");
    assert_eq!(row["size"], "small");
    assert_eq!(row["gflop_per_s"], 12.5);
    assert_eq!(row["total_time_s"], 2.0);
    assert_eq!(row["flops"], 1e9);
    assert!(row.contains_key("pct_peak_flops") && row["pct_peak_flops"].is_null());
    let mut other = k.clone();
    other.params = r#"{"size":"small","style":"autograd"}"#.into();
    let done = s.keys_with_status(&[TrialStatus::Ok]).unwrap();
    assert!(done.contains(&k) && !done.contains(&other));
}

#[test]
fn statuses_by_key_prefers_ok_then_the_latest() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&dir.path().join("k.db")).unwrap();
    let run = s
        .begin_run(&run_info("r", "jetson-nano", "2025-01-31T11:00:00Z"))
        .unwrap();
    for (batch, status) in [
        (1, "ok"),
        (1, "crashed"),
        (2, "failed"),
        (2, "oom"),
        (4, "interrupted"),
    ] {
        let t = s
            .begin_trial(run, &key("alexnet", "cpu", batch), 4, 1, "t")
            .unwrap();
        s.finish_trial(t, &summary(status)).unwrap();
    }
    let by_key = s
        .statuses_by_key(TrialStatus::done_for_resume(false))
        .unwrap();
    assert_eq!(by_key.len(), 2);
    assert_eq!(by_key[&key("alexnet", "cpu", 1)], "ok");
    assert_eq!(by_key[&key("alexnet", "cpu", 2)], "oom");
}

/// v7 lets `iterations.lr` be NULL (a command's log may give none) by rebuilding the table:
/// a v6 file keeps every column of its iterations, per-iteration energy included.
#[test]
fn v6_iterations_survive_the_rebuild_and_take_a_missing_learning_rate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v6.db");
    {
        let c = Connection::open(&path).unwrap();
        for m in &edgebench::store::schema::MIGRATIONS[..6] {
            c.execute_batch(m.sql).unwrap();
        }
        c.execute_batch(
            "INSERT INTO meta VALUES ('schema_version', '6'); PRAGMA user_version = 6;
             INSERT INTO runs (uuid, host, started_at, status, config_toml, edgebench_version,
               git_commit, candle_version, cpu_threads, os)
             VALUES ('r1', 'nano', '2025-01-01T00:00:00Z', 'finished', '', '0.1.0', 'x', '0.11', 4, 'L');
             INSERT INTO trials (uuid, run_id, net, device, batch, epochs, images, dataset,
               iterations_planned, iterations_done, warmup_iterations, status, started_at)
             VALUES ('t1', 1, 'alexnet', 'cpu', 8, 1, 16, 'd', 2, 2, 0, 'ok', '2025-01-01T00:00:01Z');
             INSERT INTO iterations VALUES (1, 0, 0, 6.9, 0.01, 0.001, 0.5, 10, 20, 3.25);
             INSERT INTO iterations VALUES (1, 1, 0, 6.8, 0.01, 0.001, 0.4, 20, 30, NULL);",
        )
        .unwrap();
    }
    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    let run = s
        .begin_run(&run_info("r2", "nano", "2025-01-02T00:00:00Z"))
        .unwrap();
    let trial = s
        .begin_trial(
            run,
            &key("alexnet", "cuda", 8),
            1,
            0,
            "2025-01-02T00:00:01Z",
        )
        .unwrap();
    let mut no_lr = iter(0, 5.0, 0.2);
    no_lr.lr = f64::NAN;
    s.record_iteration(trial, &no_lr).unwrap();
    drop(s);
    let c = Connection::open(&path).unwrap();
    let old: Vec<(i64, f64, f64, Option<f64>)> = c
        .prepare(
            "SELECT step, loss, step_s, energy_j FROM iterations WHERE trial_id = 1 ORDER BY step",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(old, [(0, 6.9, 0.5, Some(3.25)), (1, 6.8, 0.4, None)]);
    let lr: Option<f64> = c
        .query_row(
            "SELECT lr FROM iterations WHERE trial_id = ?1",
            [trial],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(lr, None);
}

/// A trial's GPU peak comes back from the results query, beside the RSS peak, and stays
/// apart per trial; a trial never given one reads null.
#[test]
fn gpu_peak_round_trips_through_results() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&dir.path().join("gpu.db")).unwrap();
    let run = s
        .begin_run(&run_info("r-gpu", "orin", "2025-01-31T12:00:00Z"))
        .unwrap();
    let gpu = s
        .begin_trial(run, &key("alexnet", "cuda", 8), 1, 0, "t")
        .unwrap();
    let cpu = s
        .begin_trial(run, &key("alexnet", "cpu", 8), 1, 0, "t")
        .unwrap();
    let peak = (5u64 << 30) + 12345;
    s.record_gpu_memory(gpu, Some(peak)).unwrap();
    s.record_memory(gpu, Some(false), Some(1 << 30), &Default::default())
        .unwrap();
    s.record_gpu_memory(cpu, None).unwrap();
    for t in [gpu, cpu] {
        s.finish_trial(t, &summary("ok")).unwrap();
    }
    let rows = s.results().unwrap();
    let by_device = |d: &str| rows.iter().find(|r| r.device == d).unwrap();
    assert_eq!(by_device("cuda").peak_gpu_bytes, Some(peak as i64));
    assert_eq!(by_device("cuda").peak_rss_bytes, Some(1 << 30));
    assert_eq!(by_device("cpu").peak_gpu_bytes, None);
    let json = serde_json::to_value(&rows).unwrap();
    let obj = |d: &str| {
        json.as_array()
            .unwrap()
            .iter()
            .find(|o| o["device"] == d)
            .unwrap()
            .clone()
    };
    assert_eq!(obj("cuda")["peak_gpu_bytes"].as_u64(), Some(peak));
    assert!(obj("cpu")["peak_gpu_bytes"].is_null());
}

/// v8 adds `trials.peak_gpu_bytes`: a v7 file opens, its trials read null there, and a
/// trial written after the upgrade records a peak.
#[test]
fn v7_file_gains_the_gpu_peak_column_null_for_its_trials() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v7.db");
    {
        let c = Connection::open(&path).unwrap();
        for m in &edgebench::store::schema::MIGRATIONS[..7] {
            c.execute_batch(m.sql).unwrap();
        }
        c.execute_batch(
            "INSERT INTO meta VALUES ('schema_version', '7'); PRAGMA user_version = 7;
             INSERT INTO runs (uuid, host, started_at, status, config_toml, edgebench_version,
               git_commit, candle_version, cpu_threads, os)
             VALUES ('r1', 'orin', '2025-01-01T00:00:00Z', 'finished', '', '0.1.0', 'x', '0.11', 4, 'L');
             INSERT INTO trials (uuid, run_id, net, device, batch, epochs, images, dataset,
               iterations_planned, iterations_done, warmup_iterations, status, started_at,
               peak_rss_bytes)
             VALUES ('t1', 1, 'alexnet', 'cuda', 8, 1, 16, 'd', 2, 0, 0, 'ok',
               '2025-01-01T00:00:01Z', 1048576);",
        )
        .unwrap();
        let has =
            |c: &Connection| -> bool { c.prepare("SELECT peak_gpu_bytes FROM trials").is_ok() };
        assert!(!has(&c), "a v7 file has no peak_gpu_bytes yet");
    }
    // Read-only, an old file is refused until a writer upgrades it.
    assert!(matches!(
        Store::open_readonly(&path),
        Err(StoreError::NeedsUpgrade { found: 7, .. })
    ));
    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    let rows = s.results().unwrap();
    assert_eq!(
        (
            rows[0].trial_id.as_str(),
            rows[0].peak_rss_bytes,
            rows[0].peak_gpu_bytes
        ),
        ("t1", Some(1 << 20), None)
    );
    let run = s
        .begin_run(&run_info("r2", "orin", "2025-01-02T00:00:00Z"))
        .unwrap();
    let t = s
        .begin_trial(run, &key("alexnet", "cuda", 16), 1, 0, "t")
        .unwrap();
    s.record_gpu_memory(t, Some(7 << 20)).unwrap();
    drop(s);
    let ro = Store::open_readonly(&path).unwrap();
    let peaks: Vec<Option<i64>> = ro
        .results()
        .unwrap()
        .iter()
        .map(|r| r.peak_gpu_bytes)
        .collect();
    assert_eq!(peaks, [None, Some(7 << 20)]);
}

/// v9 adds the logged text of an iteration: a v8 file's iterations have none, and its CSV
/// export writes their numbers.
#[test]
fn v8_file_gains_the_logged_text_columns_null_for_its_iterations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v8.db");
    {
        let c = Connection::open(&path).unwrap();
        for m in &edgebench::store::schema::MIGRATIONS[..8] {
            c.execute_batch(m.sql).unwrap();
        }
        c.execute_batch(
            "INSERT INTO meta VALUES ('schema_version', '8'); PRAGMA user_version = 8;
             INSERT INTO runs (uuid, host, started_at, status, config_toml, edgebench_version,
               git_commit, candle_version, cpu_threads, os)
             VALUES ('r1', 'tx1', '2025-01-01T00:00:00Z', 'finished', '', '0.1.0', 'x', '0.11', 4, 'L');
             INSERT INTO trials (uuid, run_id, net, device, batch, epochs, images, dataset,
               iterations_planned, iterations_done, warmup_iterations, status, started_at)
             VALUES ('t1', 1, 'alexnet', 'cpu', 8, 1, 16, 'd', 2, 2, 0, 'ok',
               '2025-01-01T00:00:01Z');
             INSERT INTO iterations VALUES (1, 0, 0, 6.9, 0.01, 0.001, 0.5, 10, 20, NULL);
             INSERT INTO iterations VALUES (1, 1, 0, 6.8, 0.01, 0.001, 0.25, 20, 30, NULL);",
        )
        .unwrap();
    }
    let s = Store::open(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    drop(s);
    let texts: Vec<(Option<String>, Option<String>)> = Connection::open(&path)
        .unwrap()
        .prepare("SELECT loss_text, step_s_text FROM iterations ORDER BY step")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(texts, [(None, None), (None, None)]);
    let ro = Store::open_readonly(&path).unwrap();
    let files = edgebench::report::csv::export_csv(&ro, &dir.path().join("csv"), "tx1").unwrap();
    let loss = std::fs::read_to_string(&files[0]).unwrap();
    assert!(
        loss.ends_with("alexnet,CPU,008,0,6.9,0.5\r\nalexnet,CPU,008,1,6.8,0.25\r\n"),
        "{loss}"
    );
}

/// A closed database (no -wal left) with rows in every table a run with power fills.
fn every_table_db(path: &Path) {
    use edgebench::power::PowerSeries;
    use edgebench::provenance::Provenance;
    let mut s = Store::open(path).unwrap();
    let run = s
        .begin_run(&run_info(
            "55555555-5555-4555-8555-555555555555",
            "jetson-nano",
            "2025-01-31T12:00:00Z",
        ))
        .unwrap();
    s.record_provenance(
        run,
        &Provenance([("os.kernel".to_string(), "4.9.253-tegra".to_string())].into()),
    )
    .unwrap();
    let t = s
        .begin_trial(run, &key("alexnet", "cpu", 1), 2, 0, "2025-01-31T12:00:01Z")
        .unwrap();
    for i in 0..2 {
        s.record_iteration(t, &iter(i, 6.9, 0.1)).unwrap();
    }
    s.record_power_samples(
        t,
        &[PowerSeries {
            source: "ina3221 1-0040",
            rail: "VDD_IN",
            t_ns: &[0, 1000],
            volts: &[Some(5.0); 2],
            amps: &[Some(1.5); 2],
            watts: &[7.5; 2],
        }],
    )
    .unwrap();
    s.record_output(t, "stdout tail", "stderr tail").unwrap();
    s.record_memory(
        t,
        Some(false),
        Some(1 << 30),
        &edgebench::store::MemoryColumns::default(),
    )
    .unwrap();
    s.finish_trial(t, &summary("ok")).unwrap();
    s.finish_run(run, "2025-01-31T12:10:00Z", "ok").unwrap();
}

/// The files SQLite or a sweep would create beside `path` that exist.
fn files_beside(path: &Path) -> Vec<String> {
    ["-wal", "-shm", "-journal", ".lock"]
        .iter()
        .map(|suffix| format!("{}{suffix}", path.display()))
        .filter(|p| Path::new(p).exists())
        .collect()
}

#[test]
fn damage_in_any_table_is_refused_by_every_opener_with_nothing_created_beside_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine.db");
    every_table_db(&pristine);
    for table in [
        "meta",
        "runs",
        "trials",
        "iterations",
        "power_samples",
        "trial_output",
        "run_provenance",
        "trial_memory",
    ] {
        let path = dir.path().join(format!("{table}.db"));
        std::fs::copy(&pristine, &path).unwrap();
        damage_table(&path, table);
        let before = snapshot(&path);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let copy = dir.path().join(format!("{table}-copy.db"));
        let refusals = [
            ("open", Store::open(&path).unwrap_err()),
            ("open_readonly", Store::open_readonly(&path).unwrap_err()),
            ("check_existing", Store::check_existing(&path).unwrap_err()),
            (
                "snapshot",
                edgebench::store::snapshot(&path, &copy).unwrap_err(),
            ),
        ];
        for (opener, err) in refusals {
            assert!(
                matches!(err, StoreError::Corrupt { .. }) && err.is_bad_input(),
                "{table}, {opener}: {err:?}"
            );
            let msg = err.to_string();
            assert!(
                msg.contains("damaged") && msg.contains(".recover"),
                "{table}, {opener}: {msg}"
            );
        }
        assert_eq!(snapshot(&path), before, "{table}: the file was modified");
        assert_eq!(files_beside(&path), Vec::<String>::new(), "{table}");
        assert!(!copy.exists(), "{table}");
    }
    // The same checks pass a whole file, and its first reader or writer leaves it whole.
    Store::check_existing(&pristine).unwrap();
    assert_eq!(files_beside(&pristine), Vec::<String>::new());
    assert_eq!(
        Store::open_readonly(&pristine)
            .unwrap()
            .results()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(Store::open(&pristine).unwrap().results().unwrap().len(), 1);
}

/// `path` made unwritable, for root too where the file system allows (`chattr +i`), until
/// dropped; None where this host cannot.
struct Unwritable(std::path::PathBuf);

impl Unwritable {
    fn new(path: &Path) -> Option<Unwritable> {
        use std::os::unix::fs::PermissionsExt;
        let mode = if path.is_dir() { 0o555 } else { 0o444 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        let _ = std::process::Command::new("chattr")
            .arg("+i")
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status();
        let guard = Unwritable(path.to_path_buf());
        let probe = path.join("probe");
        let writable = if path.is_dir() {
            let made = std::fs::File::create(&probe).is_ok();
            let _ = std::fs::remove_file(&probe);
            made
        } else {
            std::fs::OpenOptions::new().append(true).open(path).is_ok()
        };
        (!writable).then_some(guard)
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .stderr(std::process::Stdio::null())
            .status();
        let mode = if self.0.is_dir() { 0o755 } else { 0o644 };
        let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(mode));
    }
}

#[test]
fn a_database_that_cannot_be_written_is_refused_naming_it_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let assert_refused = |err: StoreError, path: &Path, says: &str| {
        assert!(
            matches!(err, StoreError::NotWritable { .. }) && err.is_bad_input(),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("cannot write {}", path.display()))
                && msg.contains(says)
                && msg.contains("--db"),
            "{msg}"
        );
    };

    // The file itself, in a folder that can be written.
    let file_db = dir.path().join("file.db");
    every_table_db(&file_db);
    let Some(guard) = Unwritable::new(&file_db) else {
        common::cannot_run("this host cannot make a file unwritable for this user");
        return;
    };
    assert_refused(Store::open(&file_db).unwrap_err(), &file_db, "file.db");
    assert_refused(
        Store::check_existing(&file_db).unwrap_err(),
        &file_db,
        "file.db",
    );
    assert_eq!(files_beside(&file_db), Vec::<String>::new());
    drop(guard);

    // Its folder, where -wal, -shm and .lock would go, for an existing file and a new one.
    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    let db = folder.join("bench.db");
    every_table_db(&db);
    let Some(guard) = Unwritable::new(&folder) else {
        common::cannot_run("this host cannot make a folder unwritable for this user");
        return;
    };
    let says = format!("its folder {}", folder.display());
    assert_refused(Store::open(&db).unwrap_err(), &db, &says);
    assert_refused(Store::check_existing(&db).unwrap_err(), &db, &says);
    let new = folder.join("new.db");
    assert_refused(Store::open(&new).unwrap_err(), &new, &says);
    assert_refused(Store::check_existing(&new).unwrap_err(), &new, &says);
    assert_eq!(files_beside(&db), Vec::<String>::new());
    assert!(!new.exists());
    drop(guard);
    // Once writable, the same file opens.
    Store::check_existing(&db).unwrap();
    Store::open(&db).unwrap();
}

/// v9 adds `trials.repetition`: a v8 file's trials become repetition 1 of their keys (resume
/// counts them so), a trial written after the upgrade keeps its own index, and a snapshot and
/// a merge carry the index.
#[test]
fn v8_file_gains_repetitions_its_trials_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v8.db");
    {
        let c = Connection::open(&path).unwrap();
        for m in &edgebench::store::schema::MIGRATIONS[..8] {
            c.execute_batch(m.sql).unwrap();
        }
        c.execute_batch(
            "INSERT INTO meta VALUES ('schema_version', '8'); PRAGMA user_version = 8;
             INSERT INTO runs (uuid, host, started_at, status, config_toml, edgebench_version,
               git_commit, candle_version, cpu_threads, os)
             VALUES ('r1', 'orin', '2025-01-01T00:00:00Z', 'finished', '', '0.1.0', 'x', '0.11', 4, 'L');
             INSERT INTO trials (uuid, run_id, net, device, batch, epochs, images, dataset,
               iterations_planned, iterations_done, warmup_iterations, status, started_at)
             VALUES ('t1', 1, 'alexnet', 'cpu', 8, 1, 256, 'synthetic:224x224:seed=1', 2, 0, 0,
               'ok', '2025-01-01T00:00:01Z');",
        )
        .unwrap();
        let has = |c: &Connection| -> bool { c.prepare("SELECT repetition FROM trials").is_ok() };
        assert!(!has(&c), "a v8 file has no repetition yet");
    }
    assert!(matches!(
        Store::open_readonly(&path),
        Err(StoreError::NeedsUpgrade { found: 8, .. })
    ));
    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    let old = key("alexnet", "cpu", 8);
    let rows = s.results().unwrap();
    assert_eq!((rows[0].trial_id.as_str(), rows[0].repetition), ("t1", 1));
    let run = s
        .begin_run(&run_info("r2", "orin", "2025-01-02T00:00:00Z"))
        .unwrap();
    let t = s.begin_repetition(run, &old, 3, 1, 0, "t").unwrap();
    s.finish_trial(t, &summary("ok")).unwrap();
    let failed = s.begin_repetition(run, &old, 2, 1, 0, "t").unwrap();
    s.finish_trial(failed, &summary("failed")).unwrap();
    let by_rep = s.statuses_by_repetition(&[TrialStatus::Ok]).unwrap();
    let reps: BTreeSet<usize> = by_rep
        .keys()
        .filter(|(k, _)| *k == old)
        .map(|(_, r)| *r)
        .collect();
    assert_eq!(reps, [1, 3].into());
    // Per key, the failed repetition does not hide the ok ones.
    assert_eq!(
        s.statuses_by_key(&[TrialStatus::Ok, TrialStatus::Failed])
            .unwrap()[&old],
        TrialStatus::Ok
    );
    drop(s);
    let repetitions = |p: &Path| -> Vec<(String, usize)> {
        let mut v: Vec<(String, usize)> = Store::open_readonly(p)
            .unwrap()
            .results()
            .unwrap()
            .into_iter()
            .map(|r| (r.status.to_string(), r.repetition))
            .collect();
        v.sort();
        v
    };
    let expected = vec![
        ("failed".to_string(), 2),
        ("ok".into(), 1),
        ("ok".into(), 3),
    ];
    assert_eq!(repetitions(&path), expected);
    let snap = dir.path().join("snap.db");
    edgebench::store::snapshot(&path, &snap).unwrap();
    assert_eq!(repetitions(&snap), expected);
    let merged = dir.path().join("merged.db");
    edgebench::store::merge(&[snap], &merged).unwrap();
    assert_eq!(repetitions(&merged), expected);
}

/// `edgebench ARGS` in `dir`: its output, having exited 0.
fn ok_run(dir: &Path, args: &[&str]) -> std::process::Output {
    let out = common::run_edgebench(dir, args);
    assert!(out.status.success(), "{args:?}: {}", common::describe(&out));
    out
}

#[test]
fn a_file_holding_bad_rows_is_read_row_by_row_by_every_command() {
    use crate::fixtures::db::{board_db, spoil_trials};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("spoiled.db");
    board_db(&db, "nano");
    let all = common::results(dir.path(), &db).len();
    let spoiled = spoil_trials(&db);
    // An iteration of a good trial with a negative step: that trial's iterations lose it.
    Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE iterations SET step = -1 WHERE step = 0 AND trial_id = \
             (SELECT max(id) FROM trials)",
            [],
        )
        .unwrap();
    let db_arg = common::arg(&db);
    let out_dir = dir.path().join("out");
    for args in [
        vec!["results", "--db", db_arg],
        vec!["results", "--json", "--db", db_arg],
        vec!["provenance", "--db", db_arg],
        vec!["report", db_arg, "--out", common::arg(&out_dir.join("r"))],
        vec![
            "export",
            "csv",
            "--db",
            db_arg,
            "--out",
            common::arg(&out_dir.join("c")),
        ],
    ] {
        let out = ok_run(dir.path(), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        for (uuid, field) in &spoiled {
            assert!(!stdout.contains(uuid.as_str()), "{args:?}: {stdout}");
            if args[0] == "results" || args[0] == "report" || args[0] == "export" {
                let line = stderr
                    .lines()
                    .find(|l| l.contains(uuid.as_str()))
                    .unwrap_or_else(|| panic!("{args:?}: {uuid} not named: {stderr}"));
                let column = field.split('.').nth(1).unwrap();
                assert!(
                    line.contains("board nano") && line.contains(column),
                    "{args:?}: {line}"
                );
            }
        }
    }
    let rows = common::results(dir.path(), &db);
    assert_eq!(rows.len(), all - spoiled.len());
    // The iteration left out is named too, the others read.
    let out = ok_run(
        dir.path(),
        &["report", db_arg, "--out", common::arg(&out_dir.join("r2"))],
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("iteration -1 of trial"),
        "{}",
        common::describe(&out)
    );
    // A sweep resumes into the file: an unknown status is no reason to stop.
    let out = ok_run(
        dir.path(),
        &[
            "run",
            "--workload",
            "idle",
            "--duration",
            "1s",
            "--db",
            db_arg,
        ],
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 trial(s) run"),
        "{}",
        common::describe(&out)
    );
}

#[test]
fn the_writer_refuses_what_its_readers_could_not_read_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&dir.path().join("w.db")).unwrap();
    let run = s
        .begin_run(&run_info("r1", "tx2", "2025-01-31T12:00:00Z"))
        .unwrap();
    let bad_params = edgebench::store::TrialKey {
        params: "[1]".into(),
        ..key("alexnet", "cpu", 8)
    };
    let e = s
        .begin_trial(run, &bad_params, 4, 1, "2025-01-31T12:00:00Z")
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid { .. }), "{e}");
    assert!(e.to_string().contains("trials.params"), "{e}");
    let t = s
        .begin_trial(run, &key("alexnet", "cpu", 8), 4, 1, "2025-01-31T12:00:00Z")
        .unwrap();
    let mut bad = iter(0, 1.0, 0.5);
    bad.step_s = f64::NAN;
    let e = s.record_iteration(t, &bad).unwrap_err();
    assert!(e.to_string().contains("iterations.step_s"), "{e}");
    // A huge error text is cut, never a reason to lose the trial's end.
    let mut end = summary("failed");
    end.error = Some("e".repeat(5 << 20));
    s.finish_trial(t, &end).unwrap();
    let row = &s.results().unwrap()[0];
    assert_eq!(row.status, TrialStatus::Failed);
    let error = row.error.as_deref().unwrap();
    assert!(
        error.len() <= 4 << 20 && error.ends_with("..."),
        "{}",
        error.len()
    );
    // Bad run rows too: an id that would reach a file name.
    let e = s
        .begin_run(&run_info("../r2", "tx2", "2025-01-31T12:00:00Z"))
        .unwrap_err();
    assert!(e.to_string().contains("runs.uuid"), "{e}");
}

#[test]
fn names_of_100k_characters_go_through_every_command_that_prints_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("long.db");
    let name = format!("LONG{}", "x".repeat(100_000));
    let db_arg = common::arg(&db);
    let script =
        "echo 'EDGEBENCH step=0 loss=1 time=0.01'; echo 'EDGEBENCH step=1 loss=0.5 time=0.01'";
    let out = ok_run(
        dir.path(),
        &[
            "exec",
            "--parser",
            "edgebench",
            "--name",
            &name,
            "--db",
            db_arg,
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    // A host of 100k characters, from imported logs.
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::write(
        logs.join("train_alexnet_CPU_016.log"),
        "EDGEBENCH step=0 loss=6.9 time=0.5\nEDGEBENCH step=1 loss=6.8 time=0.5\n",
    )
    .unwrap();
    let host = format!("HOST{}", "h".repeat(100_000));
    ok_run(
        dir.path(),
        &[
            "import",
            "logs",
            common::arg(&logs),
            "--parser",
            "edgebench",
            "--engine",
            "caffe",
            "--host",
            &host,
            "--db",
            db_arg,
        ],
    );
    let out = ok_run(dir.path(), &["results", "--db", db_arg]);
    let results = String::from_utf8_lossy(&out.stdout).into_owned();
    for text in [&table, &results] {
        assert!(text.contains("LONGxxx") && text.contains('…'), "{text}");
        assert!(text.lines().all(|l| l.chars().count() < 1000), "{text}");
    }
    assert!(results.contains("HOSThhh"), "{results}");
    // JSON keeps every character: it is data, not a table.
    let rows = common::results(dir.path(), &db);
    assert!(
        rows.iter().any(|r| r["engine"] == name.as_str()),
        "{rows:?}"
    );
    assert!(rows.iter().any(|r| r["host"] == host.as_str()));
    let out_dir = dir.path().join("out");
    ok_run(
        dir.path(),
        &["report", db_arg, "--out", common::arg(&out_dir.join("r"))],
    );
    for page in std::fs::read_dir(out_dir.join("r")).unwrap().flatten() {
        let md = page.path().join("summary.md");
        if md.exists() {
            let text = std::fs::read_to_string(&md).unwrap();
            assert!(
                text.lines().all(|l| l.chars().count() < 5000),
                "{}",
                md.display()
            );
        }
    }
    ok_run(
        dir.path(),
        &[
            "export",
            "csv",
            "--db",
            db_arg,
            "--out",
            common::arg(&out_dir.join("c")),
        ],
    );
    ok_run(dir.path(), &["provenance", "--db", db_arg]);
    let merged = dir.path().join("merged.db");
    ok_run(
        dir.path(),
        &["merge", db_arg, "--into", common::arg(&merged)],
    );
    ok_run(dir.path(), &["results", "--db", common::arg(&merged)]);
}

#[test]
fn the_readme_names_the_schema_version_the_files_have() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("schema version {SCHEMA_VERSION} ")),
        "README.md does not say schema version {SCHEMA_VERSION}"
    );
}

#[test]
fn results_leaves_nothing_beside_a_closed_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("closed.db");
    crate::fixtures::db::board_db(&db, "nano");
    let beside = || -> Vec<String> {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "closed.db")
            .collect()
    };
    assert_eq!(beside(), Vec::<String>::new());
    ok_run(dir.path(), &["results", "--db", common::arg(&db)]);
    ok_run(dir.path(), &["results", "--json", "--db", common::arg(&db)]);
    assert_eq!(beside(), Vec::<String>::new());
    // With a writer holding the file open, the reader leaves its files alone.
    let writer = Store::open(&db).unwrap();
    writer.results().unwrap();
    ok_run(dir.path(), &["results", "--db", common::arg(&db)]);
    assert!(
        beside().contains(&"closed.db-wal".to_string()),
        "{:?}",
        beside()
    );
    drop(writer);
    assert_eq!(beside(), Vec::<String>::new());
}

#[test]
fn a_full_disk_at_schema_creation_is_said_once() {
    // A small file system of its own, filled: needs root to mount.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::cannot_run("not root: cannot mount a small tmpfs");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mount = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(dir.path())
        .output()
        .unwrap();
    if !mount.status.success() {
        common::cannot_run(&format!(
            "cannot mount a tmpfs: {}",
            String::from_utf8_lossy(&mount.stderr)
        ));
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(dir.path());
    // Filled to its last 4 KiB: the schema does not fit.
    let filler = dir.path().join("filler");
    let _ = std::fs::write(&filler, vec![0u8; 60 << 10]);
    let db = dir.path().join("full.db");
    let out = common::run_edgebench(
        Path::new("/"),
        &[
            "run",
            "--workload",
            "idle",
            "--duration",
            "1s",
            "--db",
            common::arg(&db),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", common::describe(&out));
    assert_eq!(
        stderr.matches("database or disk is full").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("free some space"), "{stderr}");
}
