//! Results leave the board: snapshot, merge, pull, report — on real database files.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use edgebench::record::{IterationRecord, Metrics};
use edgebench::store::{merge, MemoryColumns, RunInfo, Store, TrialKey, TrialStatus, TrialSummary};
use plotters::style::{Color, Palette, Palette99};
use rusqlite::Connection;

const BIN: &str = env!("CARGO_BIN_EXE_edgebench");

fn run_info(host: &str, started_at: &str) -> RunInfo {
    RunInfo {
        uuid: uuid::Uuid::new_v4().to_string(),
        host: host.into(),
        started_at: started_at.into(),
        config_toml: "[sweep]\n".into(),
        edgebench_version: "0.1.0".into(),
        git_commit: "abc1234".into(),
        candle_version: "0.11.0".into(),
        cpu_threads: 4,
        cpu_model: None,
        os: "Linux".into(),
    }
}

fn key(net: &str, device: &str, batch: usize) -> TrialKey {
    TrialKey {
        workload: "cnn".into(),
        params: "{}".into(),
        net: net.into(),
        device: device.into(),
        batch,
        epochs: 2,
        images: 16,
        dataset: "synthetic".into(),
    }
}

fn iter(step: usize, loss: f64, step_s: f64) -> IterationRecord {
    IterationRecord {
        step,
        epoch: step / 2,
        loss,
        lr: 0.01,
        data_s: 0.001,
        step_s,
        t_start_ns: step as i64 * 1000,
        t_end_ns: step as i64 * 1000 + 900,
    }
}

fn done(status: &str, tpi: Option<f64>) -> TrialSummary {
    TrialSummary {
        status: TrialStatus::parse(status).unwrap(),
        error: (status == "failed").then(|| "out of memory".into()),
        ended_at: "2025-02-01T00:10:00Z".into(),
        time_per_image_s: tpi,
        time_per_image_spread_s: tpi.map(|t| t / 10.0),
        images_per_s: tpi.map(|t| 1.0 / t),
        loss_first: Some(6.9),
        loss_last: Some(1.5),
        loss_anomaly: false,
        metrics: Metrics::default(),
    }
}

/// One trial: `n` iterations with step time `tpi * batch`, then finished with `status`.
fn trial(s: &mut Store, run: i64, k: &TrialKey, n: usize, status: &str, tpi: Option<f64>) -> i64 {
    let t = s.begin_trial(run, k, n, 1, "2025-02-01T00:00:00Z").unwrap();
    for i in 0..n {
        let step_s = tpi.unwrap_or(0.1) * k.batch as f64;
        s.record_iteration(t, &iter(i, 7.0 / (i + 1) as f64, step_s))
            .unwrap();
    }
    s.finish_trial(t, &done(status, tpi)).unwrap();
    t
}

/// A board's database: both nets on cpu (and cuda for alexnet), batches 1, 2, 4.
fn board_db(path: &Path, host: &str) {
    let mut s = Store::open(path).unwrap();
    let run = s
        .begin_run(&run_info(host, "2025-02-01T00:00:00Z"))
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
                    &key(net, device, batch),
                    16 / batch,
                    "ok",
                    Some(tpi),
                );
                s.record_memory(t, Some(false), Some(1 << 30), &MemoryColumns::default())
                    .unwrap();
            }
        }
    }
    s.finish_run(run, "2025-02-01T00:20:00Z", "finished")
        .unwrap();
}

fn count(path: &Path, table: &str) -> i64 {
    let c = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

fn counts(path: &Path) -> Vec<i64> {
    ["runs", "trials", "iterations", "trial_memory"]
        .iter()
        .map(|t| count(path, t))
        .collect()
}

/// Every trial's `iterations_done` equals its rows; the file passes integrity_check.
fn assert_consistent(path: &Path) {
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

fn edgebench(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn snapshot_while_another_connection_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    board_db(&db, "tx2");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut s = Store::open(&db).unwrap();
            let run = s
                .begin_run(&run_info("tx2", "2025-02-02T00:00:00Z"))
                .unwrap();
            let mut written = 0;
            while !stop.load(Ordering::Relaxed) {
                let t = s
                    .begin_trial(
                        run,
                        &key("alexnet", "cpu", 8),
                        1000,
                        1,
                        "2025-02-02T00:00:00Z",
                    )
                    .unwrap();
                for i in 0..50 {
                    s.record_iteration(t, &iter(i, 1.0, 0.01)).unwrap();
                    written += 1;
                }
                s.finish_trial(t, &done("ok", Some(0.001))).unwrap();
            }
            written
        })
    };
    let mut sizes = Vec::new();
    for i in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(60));
        let out = dir.path().join(format!("snap{i}.db"));
        let o = edgebench(&["snapshot", s(&out), "--db", s(&db)]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // One self-contained file: no WAL beside it.
        assert!(!PathBuf::from(format!("{}-wal", out.display())).exists());
        assert_consistent(&out);
        sizes.push(count(&out, "iterations"));
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(written > 0);
    // Snapshots taken later never hold fewer rows, and the writer kept going meanwhile.
    assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
    assert!(count(&db, "iterations") >= *sizes.last().unwrap());

    // Refuses to overwrite, and refuses a file that is not ours.
    let o = edgebench(&["snapshot", s(&dir.path().join("snap0.db")), "--db", s(&db)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
}

#[test]
fn merge_is_a_union_and_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, into) = (
        dir.path().join("tx2.db"),
        dir.path().join("nano.db"),
        dir.path().join("results.db"),
    );
    board_db(&a, "tx2");
    board_db(&b, "nano");
    // Power rows of one trial: samples (no unique key: merged as a whole set) and rail energy.
    Connection::open(&a)
        .unwrap()
        .execute_batch(
            "INSERT INTO power_samples (trial_id, source, rail, t_ns, watts)
                 VALUES (1, 'ina3221', 'VDD_IN', 1, 5.0), (1, 'ina3221', 'VDD_IN', 2, 5.5),
                        (1, 'ina3221', 'VDD_GPU', 1, 1.0);
             INSERT INTO trial_rail_energy VALUES (1, 'VDD_IN', 12.5, 1);",
        )
        .unwrap();
    let (ca, cb) = (counts(&a), counts(&b));
    let a_bytes = std::fs::read(&a).unwrap();

    let o = edgebench(&["merge", s(&a), s(&b), "--into", s(&into)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let merged = counts(&into);
    let sum: Vec<i64> = ca.iter().zip(&cb).map(|(x, y)| x + y).collect();
    assert_eq!(merged, sum);
    assert_consistent(&into);

    // Twice, and in the other order: nothing changes.
    merge(&[b.clone(), a.clone()], &into).unwrap();
    let r = merge(std::slice::from_ref(&a), &into).unwrap();
    assert_eq!(counts(&into), sum);
    assert!(r.tables.iter().all(|t| t.before == t.after), "{r:?}");
    assert_eq!(count(&into, "power_samples"), 3);
    assert_eq!(count(&into, "trial_rail_energy"), 1);
    assert!(r.tables.iter().any(|t| t.table == "power_samples"));
    assert_eq!(std::fs::read(&a).unwrap(), a_bytes, "a source was modified");

    // Hosts kept, and every trial's numbers as on its board.
    let rows = Store::open_readonly(&into).unwrap().results().unwrap();
    let hosts: std::collections::BTreeSet<_> = rows.iter().map(|r| r.host.as_str()).collect();
    assert_eq!(hosts.into_iter().collect::<Vec<_>>(), ["nano", "tx2"]);
    let src = Store::open_readonly(&a).unwrap();
    let merged = Store::open_readonly(&into).unwrap();
    for r in src.results().unwrap() {
        let m = rows.iter().find(|m| m.trial_id == r.trial_id).unwrap();
        assert_eq!(
            (&m.host, m.time_per_image_s, &m.status),
            (&r.host, r.time_per_image_s, &r.status)
        );
        assert_eq!(
            src.iterations(r.trial_rowid).unwrap(),
            merged.iterations(m.trial_rowid).unwrap()
        );
        assert_eq!(m.peak_rss_bytes, Some(1 << 30));
    }
}

#[test]
fn merge_keeps_the_later_state_of_a_trial() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    let (early, late) = (dir.path().join("early.db"), dir.path().join("late.db"));
    let mut st = Store::open(&db).unwrap();
    let run = st
        .begin_run(&run_info("tx2", "2025-02-01T00:00:00Z"))
        .unwrap();
    let t = st
        .begin_trial(run, &key("alexnet", "cpu", 2), 8, 1, "2025-02-01T00:00:00Z")
        .unwrap();
    for i in 0..3 {
        st.record_iteration(t, &iter(i, 1.0, 0.1)).unwrap();
    }
    edgebench::store::snapshot(&db, &early).unwrap();
    for i in 3..8 {
        st.record_iteration(t, &iter(i, 1.0, 0.1)).unwrap();
    }
    st.finish_trial(t, &done("ok", Some(0.05))).unwrap();
    st.record_memory(t, Some(true), Some(42), &MemoryColumns::default())
        .unwrap();
    st.finish_run(run, "2025-02-01T00:05:00Z", "finished")
        .unwrap();
    edgebench::store::snapshot(&db, &late).unwrap();

    for order in [[&early, &late], [&late, &early]] {
        let into = dir.path().join(format!("into-{}.db", uuid::Uuid::new_v4()));
        merge(&[order[0].clone()], &into).unwrap();
        merge(&[order[1].clone()], &into).unwrap();
        let rows = Store::open_readonly(&into).unwrap().results().unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].status.as_str(), rows[0].iterations), ("ok", 8));
        assert_eq!(rows[0].swap_pressure, Some(true));
        assert_eq!(counts(&into), vec![1, 1, 8, 1]);
        let status: String = Connection::open(&into)
            .unwrap()
            .query_row("SELECT status FROM runs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(status, "finished");
        assert_consistent(&into);
    }
}

#[test]
fn merge_migrates_an_old_schema_copy_and_leaves_the_source_alone() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("v1.db");
    {
        let c = Connection::open(&old).unwrap();
        c.execute_batch(edgebench::store::schema::MIGRATIONS[0].sql)
            .unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        c.execute_batch(
            "INSERT INTO runs (uuid, host, started_at, status, config_toml, edgebench_version,
                 git_commit, candle_version, cpu_threads, os)
             VALUES ('run-v1', 'tx1', '2024-01-01T00:00:00Z', 'finished', '', '0.0.1', 'x',
                 '0.11', 4, 'Linux');
             INSERT INTO trials (uuid, run_id, net, device, batch, epochs, images, dataset,
                 iterations_planned, iterations_done, warmup_iterations, status, started_at,
                 time_per_image_s)
             VALUES ('trial-v1', 1, 'alexnet', 'cuda', 32, 1, 64, 'synthetic', 2, 2, 1, 'ok',
                 '2024-01-01T00:00:00Z', 0.004);
             INSERT INTO iterations VALUES (1, 0, 0, 6.9, 0.01, 0.0, 0.2, 0, 1);
             INSERT INTO iterations VALUES (1, 1, 0, 6.8, 0.01, 0.0, 0.1, 1, 2);",
        )
        .unwrap();
    }
    let before = std::fs::read(&old).unwrap();
    let into = dir.path().join("results.db");
    board_db(&into, "nano");
    let n = counts(&into);
    let o = edgebench(&["merge", s(&old), "--into", s(&into)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(&old).unwrap(),
        before,
        "the v1 source was modified"
    );
    assert_eq!(
        Connection::open(&old)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
            .unwrap(),
        1
    );
    assert_eq!(counts(&into), vec![n[0] + 1, n[1] + 1, n[2] + 2, n[3]]);
    let rows = Store::open_readonly(&into).unwrap().results().unwrap();
    let t = rows.iter().find(|r| r.trial_id == "trial-v1").unwrap();
    assert_eq!(
        (t.host.as_str(), t.batch, t.time_per_image_s),
        ("tx1", 32, Some(0.004))
    );
    assert_consistent(&into);
}

#[test]
fn merge_refuses_foreign_and_newer_files_and_leaves_the_target_alone() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("tx2.db");
    board_db(&good, "tx2");
    let into = dir.path().join("results.db");
    board_db(&into, "nano");
    let target_before = std::fs::read(&into).unwrap();

    let foreign = dir.path().join("photos.db");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
        .unwrap();
    let newer = dir.path().join("future.db");
    std::fs::copy(&good, &newer).unwrap();
    Connection::open(&newer)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let text = dir.path().join("notes.db");
    std::fs::write(&text, "not a database at all, just some text\n".repeat(50)).unwrap();

    for (bad, says) in [
        (&foreign, "not an edgebench one"),
        (&newer, "schema version 99"),
        (&text, "not a SQLite database"),
    ] {
        // The good file first: nothing of it may land either.
        let o = edgebench(&["merge", s(&good), s(bad), "--into", s(&into)]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(s(bad)) && err.contains(says), "{err}");
        assert_eq!(std::fs::read(&into).unwrap(), target_before);
    }
    // A refused merge into a new file creates nothing.
    let fresh = dir.path().join("fresh.db");
    let o = edgebench(&["merge", s(&good), s(&foreign), "--into", s(&fresh)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!fresh.exists());
    // Nor does a foreign target get written.
    let before = std::fs::read(&foreign).unwrap();
    let o = edgebench(&["merge", s(&good), "--into", s(&foreign)]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read(&foreign).unwrap(), before);
    // No temporary files left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".edgebench"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// An sshd on 127.0.0.1 with throw-away keys, for `edgebench pull`; killed on drop.
struct Sshd {
    child: std::process::Child,
    port: u16,
    key: PathBuf,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_sshd(dir: &Path) -> Result<Sshd, String> {
    let sshd = ["/usr/sbin/sshd", "/usr/bin/sshd", "/usr/local/sbin/sshd"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or("no sshd (install openssh-server)")?;
    let keygen = |name: &str| -> Result<PathBuf, String> {
        let p = dir.join(name);
        let o = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f", s(&p)])
            .output()
            .map_err(|e| format!("ssh-keygen: {e}"))?;
        o.status
            .success()
            .then_some(p)
            .ok_or_else(|| String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let host_key = keygen("host_key")?;
    let key = keygen("user_key")?;
    let authorized = dir.join("authorized_keys");
    std::fs::copy(dir.join("user_key.pub"), &authorized).map_err(|e| e.to_string())?;
    // sshd wants its privilege-separation directory; only root can make it.
    let _ = std::fs::create_dir_all("/run/sshd");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
             PidFile none\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n",
            host_key.display(),
            authorized.display()
        ),
    )
    .map_err(|e| e.to_string())?;
    let mut child = Command::new(&sshd)
        .args(["-D", "-e", "-f", s(&config)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", sshd.display()))?;
    for _ in 0..100 {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            use std::io::Read;
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            return Err(format!("sshd exited ({status}): {err}"));
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(Sshd { child, port, key });
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    Err("sshd did not listen within 5 s".into())
}

fn pull_files() -> std::collections::BTreeSet<PathBuf> {
    std::fs::read_dir("/tmp")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().contains("edgebench-pull-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn pull_over_a_real_ssh_connection() {
    let dir = tempfile::tempdir().unwrap();
    let sshd = match start_sshd(dir.path()) {
        Ok(s) => s,
        Err(why) => {
            eprintln!("pull test skipped: cannot run a local sshd: {why}");
            return;
        }
    };
    let board = dir.path().join("board").join("edgebench.db");
    std::fs::create_dir_all(board.parent().unwrap()).unwrap();
    board_db(&board, "tx2");
    let into = dir.path().join("ws").join("results.db");
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
    let remote = format!("{}@127.0.0.1:{}", user.trim(), board.display());
    let opts = [
        format!("Port={}", sshd.port),
        format!("IdentityFile={}", sshd.key.display()),
        "IdentitiesOnly=yes".into(),
        "StrictHostKeyChecking=no".into(),
        "UserKnownHostsFile=/dev/null".into(),
        "BatchMode=yes".into(),
        "LogLevel=ERROR".into(),
    ];
    let pull = |remote: &str, bin: &str| {
        let mut args = vec!["pull", remote, "--into", s(&into), "--remote-bin", bin];
        for o in &opts {
            args.extend(["--ssh-opt", o]);
        }
        edgebench(&args)
    };
    let temps_before = pull_files();

    let o = pull(&remote, BIN);
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() && err.contains("Permission denied") {
        eprintln!("pull test skipped: sshd refused the login: {err}");
        return;
    }
    assert!(o.status.success(), "{err}");
    assert!(err.contains("[3/3]"), "no progress shown: {err}");
    assert_eq!(counts(&into), counts(&board));
    assert_consistent(&into);
    // Twice: nothing added; the board's temporary snapshots are gone.
    let o = pull(&remote, BIN);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(counts(&into), counts(&board));
    assert_eq!(pull_files(), temps_before);

    // A failed snapshot and a failed transfer (the "edgebench" on the board writes nothing,
    // so `cat` fails) leave results.db byte for byte as it was.
    let before = std::fs::read(&into).unwrap();
    let missing = format!("{}@127.0.0.1:/nonexistent/e.db", user.trim());
    let o = pull(&missing, BIN);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("snapshot on"));
    let o = pull(&remote, "true");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("copying the snapshot"), "{err}");
    assert_eq!(std::fs::read(&into).unwrap(), before);
    let leftovers: Vec<_> = std::fs::read_dir(into.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".edgebench"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// A board with every kind of point: swap-spoiled, throttled, OOM, skipped, failed, and energy.
fn rich_board(path: &Path, host: &str) {
    board_db(path, host);
    let mut s = Store::open(path).unwrap();
    let run = s
        .begin_run(&run_info(host, "2025-02-03T00:00:00Z"))
        .unwrap();
    let t = trial(&mut s, run, &key("alexnet", "cpu", 8), 2, "ok", Some(0.9));
    s.record_memory(t, Some(true), Some(3 << 30), &MemoryColumns::default())
        .unwrap();
    trial(&mut s, run, &key("alexnet", "cpu", 16), 0, "oom", None);
    trial(
        &mut s,
        run,
        &key("alexnet", "cpu", 32),
        0,
        "skipped_memory",
        None,
    );
    trial(&mut s, run, &key("googlenet", "cpu", 8), 1, "failed", None);
    let hot = trial(&mut s, run, &key("googlenet", "cpu", 4), 2, "ok", Some(1.5));
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
    let o = edgebench(&["report", s(&db), "--out", s(&out), "--compare"]);
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
        }

        // The Markdown table's numbers are the DB's.
        let md = std::fs::read_to_string(d.join("summary.md")).unwrap();
        let mut table_rows = 0;
        let mut section = String::new();
        for line in md.lines() {
            if let Some(t) = line.strip_prefix("## ") {
                section = t.to_string();
                continue;
            }
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
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
            assert_eq!(cells[1], r.status.as_str(), "{line}");
            match r.time_per_image_s.filter(|_| r.status == "ok") {
                Some(t) => {
                    let ms: f64 = cells[2].parse().unwrap();
                    assert!((ms - t * 1e3).abs() < 6e-4, "{line}: {t}");
                }
                None => assert_eq!(cells[2], "-", "{line}"),
            }
            assert_eq!(
                cells[10].contains("SWAP"),
                r.swap_pressure == Some(true),
                "{line}"
            );
            assert_eq!(
                cells[10].contains("THROTTLED"),
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

        // The time plot: one line per net x device through its timed points.
        let svg = std::fs::read_to_string(d.join("time_per_image.svg")).unwrap();
        let series = edgebench::report::build::batch_series(&picked, "", |r| r.time_per_image_s);
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
    let o = edgebench(&["report", s(&foreign), "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains(s(&foreign)));
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
        let o = edgebench(&[
            "report",
            s(&db),
            "--out",
            s(out),
            "--compare",
            "--trace",
            prefix,
            "--format",
            format,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    // The same plots as the SVG report, each a .png instead of a .svg.
    let svg_files = tree(&svg_out);
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

    let (w, h) = edgebench::report::plots::SIZE;
    for svg in plots {
        let path = png_out.join(svg.with_extension("png"));
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{path:?}");
        let img = image::load_from_memory_with_format(&bytes, image::ImageFormat::Png)
            .unwrap_or_else(|e| panic!("{path:?}: {e}"))
            .to_rgb8();
        assert_eq!(img.dimensions(), (w, h), "{path:?}");
        let colours: std::collections::HashSet<[u8; 3]> = img.pixels().map(|p| p.0).collect();
        assert!(colours.len() >= 10, "{path:?}: {} colours", colours.len());
        // Text: the caption across the top and the rotated y label along the left edge, where
        // nothing else is drawn.
        assert!(
            dark_in(&img, 200..760, 0..40) > 100,
            "{path:?}: no caption text"
        );
        assert!(
            dark_in(&img, 0..35, 150..470) > 50,
            "{path:?}: no y-axis label text"
        );
        // Every series colour of the SVG (lines and markers) is drawn in the PNG too.
        let svg_text = std::fs::read_to_string(svg_out.join(svg)).unwrap();
        let mut drawn = 0;
        for i in 0..20 {
            let c = Palette99::pick(i).to_rgba();
            if svg_text.contains(&format!("\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2)) {
                drawn += 1;
                assert!(
                    colours.contains(&[c.0, c.1, c.2]),
                    "{path:?}: series {i}'s colour {c:?} not drawn"
                );
            }
        }
        assert!(drawn > 0, "{svg:?}: no series colour");
    }
}

#[test]
fn a_real_run_goes_through_snapshot_merge_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let board = dir.path().join("board.db");
    let o = Command::new(BIN)
        .current_dir(dir.path())
        .args([
            "-q",
            "run",
            "--net",
            "alexnet",
            "--batch",
            "2",
            "--images",
            "2",
            "--db",
            s(&board),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let snap = dir.path().join("snap.db");
    assert!(edgebench(&["snapshot", s(&snap), "--db", s(&board)])
        .status
        .success());
    let into = dir.path().join("results.db");
    assert!(
        edgebench(&["merge", s(&snap), s(&board), "--into", s(&into)])
            .status
            .success()
    );
    assert_eq!(counts(&into), counts(&board));
    let out = dir.path().join("report");
    assert!(edgebench(&["report", s(&into), "--out", s(&out)])
        .status
        .success());
    let r = &Store::open_readonly(&into).unwrap().results().unwrap()[0];
    let md = std::fs::read_to_string(
        out.join(edgebench::report::build::safe_name(&r.host))
            .join("summary.md"),
    )
    .unwrap();
    let ms = format!("{:.3}", r.time_per_image_s.unwrap() * 1e3);
    assert!(md.contains(&format!("| 2 | ok | {ms} |")), "{md}");
}
