//! Store rows for tests that write a database through the library: a run, trial keys,
//! iterations and summaries, and small boards' databases with a few finished trials.

use std::path::Path;

use edgebench::record::{IterationRecord, Metrics};
use edgebench::store::{MemoryColumns, RunInfo, Store, TrialKey, TrialStatus, TrialSummary};
use rusqlite::Connection;

/// A run on a Jetson Nano.
pub fn run_info(uuid: &str, host: &str, started_at: &str) -> RunInfo {
    RunInfo {
        uuid: uuid.into(),
        host: host.into(),
        started_at: started_at.into(),
        config_toml: "[sweep]\nbatch = [8, 16]\n".into(),
        edgebench_version: "0.1.0".into(),
        git_commit: "abc1234".into(),
        candle_version: "0.11.0".into(),
        cpu_threads: 4,
        cpu_model: Some("ARMv8 Processor rev 1 (v8l)".into()),
        os: "Linux 4.9.253-tegra aarch64".into(),
    }
}

/// A run with a fresh UUID, as each run on a board gets: merging relies on it.
pub fn board_run(host: &str, started_at: &str) -> RunInfo {
    run_info(&uuid::Uuid::new_v4().to_string(), host, started_at)
}

/// A CNN trial of one epoch over 256 synthetic images.
pub fn key(net: &str, device: &str, batch: usize) -> TrialKey {
    TrialKey {
        workload: "cnn".into(),
        params: "{}".into(),
        net: net.into(),
        device: device.into(),
        batch,
        epochs: 1,
        images: 256,
        dataset: "synthetic:224x224:seed=1".into(),
    }
}

/// A board's small CNN trial: two epochs over 16 images.
pub fn board_key(net: &str, device: &str, batch: usize) -> TrialKey {
    TrialKey {
        epochs: 2,
        images: 16,
        dataset: "synthetic".into(),
        ..key(net, device, batch)
    }
}

/// Iteration `step` (4 to an epoch), one every millisecond.
pub fn iter(step: usize, loss: f64, step_s: f64) -> IterationRecord {
    IterationRecord {
        step,
        epoch: step / 4,
        loss,
        lr: 0.01,
        data_s: 0.002,
        step_s,
        t_start_ns: 1_000_000 * step as i64,
        t_end_ns: 1_000_000 * step as i64 + 900_000,
    }
}

/// A board's iteration `step` (2 to an epoch), one every microsecond.
pub fn board_iter(step: usize, loss: f64, step_s: f64) -> IterationRecord {
    IterationRecord {
        epoch: step / 2,
        data_s: 0.001,
        t_start_ns: step as i64 * 1000,
        t_end_ns: step as i64 * 1000 + 900,
        ..iter(step, loss, step_s)
    }
}

/// A trial ended with `status` at 12.5 ms per image; "failed" ones ran out of memory.
pub fn summary(status: &str) -> TrialSummary {
    TrialSummary {
        status: TrialStatus::parse(status).unwrap(),
        error: (status == "failed").then(|| "out of memory".to_string()),
        ended_at: "2025-01-31T12:05:00Z".into(),
        time_per_image_s: Some(0.0125),
        time_per_image_spread_s: Some(0.001),
        images_per_s: Some(80.0),
        loss_first: Some(6.9),
        loss_last: Some(6.5),
        loss_anomaly: false,
        metrics: Metrics::default(),
    }
}

/// A board's trial ended with `status` at `tpi` seconds per image (none: not timed).
pub fn board_summary(status: &str, tpi: Option<f64>) -> TrialSummary {
    TrialSummary {
        ended_at: "2025-02-01T00:10:00Z".into(),
        time_per_image_s: tpi,
        time_per_image_spread_s: tpi.map(|t| t / 10.0),
        images_per_s: tpi.map(|t| 1.0 / t),
        loss_last: Some(1.5),
        ..summary(status)
    }
}

/// One trial: `n` iterations with step time `tpi * batch`, then finished with `status`.
pub fn trial(
    s: &mut Store,
    run: i64,
    k: &TrialKey,
    n: usize,
    status: &str,
    tpi: Option<f64>,
) -> i64 {
    let t = s.begin_trial(run, k, n, 1, "2025-02-01T00:00:00Z").unwrap();
    for i in 0..n {
        let step_s = tpi.unwrap_or(0.1) * k.batch as f64;
        s.record_iteration(t, &board_iter(i, 7.0 / (i + 1) as f64, step_s))
            .unwrap();
    }
    s.finish_trial(t, &board_summary(status, tpi)).unwrap();
    t
}

/// A board's database: both nets on cpu (and cuda for alexnet), batches 1, 2, 4.
pub fn board_db(path: &Path, host: &str) {
    let mut s = Store::open(path).unwrap();
    let run = s
        .begin_run(&board_run(host, "2025-02-01T00:00:00Z"))
        .unwrap();
    for (net, devices) in [
        ("alexnet", &["cpu", "cuda"][..]),
        ("googlenet", &["cpu"][..]),
    ] {
        for device in devices {
            for batch in [1usize, 2, 4] {
                let tpi = if *device == "cuda" { 0.01 } else { 0.2 } / batch as f64;
                let t = trial(
                    &mut s,
                    run,
                    &board_key(net, device, batch),
                    16 / batch,
                    "ok",
                    Some(tpi),
                );
                s.record_memory(t, Some(false), Some(1 << 30), &MemoryColumns::default())
                    .unwrap();
                if *device == "cuda" {
                    s.record_gpu_memory(t, Some(gpu_peak(batch))).unwrap();
                }
            }
        }
    }
    s.finish_run(run, "2025-02-01T00:20:00Z", "finished")
        .unwrap();
}

/// The peak GPU memory [`board_db`] records for a cuda trial of `batch`.
pub fn gpu_peak(batch: usize) -> u64 {
    (256 << 20) * batch as u64
}

/// Rows in `table`, read without writing to the file.
pub fn rows_in(path: &Path, table: &str) -> i64 {
    let c = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

/// Rows in runs, trials, iterations and trial_memory.
pub fn table_counts(path: &Path) -> Vec<i64> {
    ["runs", "trials", "iterations", "trial_memory"]
        .iter()
        .map(|t| rows_in(path, t))
        .collect()
}

/// Every trial's `iterations_done` equals its rows; the file passes integrity_check.
pub fn assert_consistent(path: &Path) {
    let store = Store::open_readonly(path).unwrap();
    for r in store.results().unwrap() {
        let rows = store.iterations(r.trial_rowid).unwrap();
        assert_eq!(
            r.iterations,
            rows.len(),
            "trial {} in {}",
            r.trial_id,
            path.display()
        );
        assert!(rows.iter().enumerate().all(|(i, it)| it.step == i));
    }
    let c = Connection::open(path).unwrap();
    let check: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

/// Neither a WAL nor a rollback journal beside `path`.
pub fn sidecars_absent(path: &Path) -> bool {
    let p = path.display().to_string();
    !Path::new(&format!("{p}-wal")).exists() && !Path::new(&format!("{p}-journal")).exists()
}

/// Overwrites the start of `table`'s root page (its b-tree page header and first cells) with
/// junk, as a failing card or an interrupted copy would; the file header stays intact.
pub fn damage_table(path: &Path, table: &str) {
    let (page_size, root): (i64, i64) = {
        let c = Connection::open(path).unwrap();
        let page_size = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        let root = c
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .unwrap();
        (page_size, root)
    };
    assert!(root > 1, "page 1 holds the file header");
    assert!(
        sidecars_absent(path),
        "the damage must land in the main file"
    );
    let mut bytes = std::fs::read(path).unwrap();
    let start = ((root - 1) * page_size) as usize;
    bytes[start..start + 64].fill(0xA5);
    std::fs::write(path, bytes).unwrap();
}
