//! Results leave the board: snapshot, merge and pull, on real database files.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common;
use crate::common::{arg, edgebench, run_edgebench};
use crate::fixtures::db::{
    assert_consistent, board_db, board_iter, board_key, board_run, board_summary, gpu_peak,
    rows_in, table_counts,
};
use edgebench::store::{merge, MemoryColumns, Store};
use rusqlite::Connection;

const BIN: &str = env!("CARGO_BIN_EXE_edgebench");

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
                .begin_run(&board_run("tx2", "2025-02-02T00:00:00Z"))
                .unwrap();
            let mut written = 0;
            while !stop.load(Ordering::Relaxed) {
                let t = s
                    .begin_trial(
                        run,
                        &board_key("alexnet", "cpu", 8),
                        1000,
                        1,
                        "2025-02-02T00:00:00Z",
                    )
                    .unwrap();
                for i in 0..50 {
                    s.record_iteration(t, &board_iter(i, 1.0, 0.01)).unwrap();
                    written += 1;
                }
                s.finish_trial(t, &board_summary("ok", Some(0.001)))
                    .unwrap();
            }
            written
        })
    };
    let mut sizes = Vec::new();
    for i in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(60));
        let out = dir.path().join(format!("snap{i}.db"));
        let o = run_edgebench(dir.path(), &["snapshot", arg(&out), "--db", arg(&db)]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // One self-contained file: no WAL beside it.
        assert!(!PathBuf::from(format!("{}-wal", out.display())).exists());
        assert_consistent(&out);
        sizes.push(rows_in(&out, "iterations"));
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(written > 0);
    // Snapshots taken later never hold fewer rows, and the writer kept going meanwhile.
    assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
    assert!(rows_in(&db, "iterations") >= *sizes.last().unwrap());

    // Refuses to overwrite, and refuses a file that is not ours.
    let o = run_edgebench(
        dir.path(),
        &[
            "snapshot",
            arg(&dir.path().join("snap0.db")),
            "--db",
            arg(&db),
        ],
    );
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
    let (ca, cb) = (table_counts(&a), table_counts(&b));
    let a_bytes = std::fs::read(&a).unwrap();

    let o = run_edgebench(
        dir.path(),
        &["merge", arg(&a), arg(&b), "--into", arg(&into)],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let merged = table_counts(&into);
    let sum: Vec<i64> = ca.iter().zip(&cb).map(|(x, y)| x + y).collect();
    assert_eq!(merged, sum);
    assert_consistent(&into);

    // Twice, and in the other order: nothing changes.
    merge(&[b.clone(), a.clone()], &into).unwrap();
    let r = merge(std::slice::from_ref(&a), &into).unwrap();
    assert_eq!(table_counts(&into), sum);
    assert!(r.tables.iter().all(|t| t.before == t.after), "{r:?}");
    assert_eq!(rows_in(&into, "power_samples"), 3);
    assert_eq!(rows_in(&into, "trial_rail_energy"), 1);
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
        let gpu = (r.device == "cuda").then(|| gpu_peak(r.batch) as i64);
        assert_eq!(
            (m.peak_gpu_bytes, r.peak_gpu_bytes),
            (gpu, gpu),
            "{}",
            r.trial_id
        );
    }
}

#[test]
fn merge_keeps_the_later_state_of_a_trial() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    let (early, late) = (dir.path().join("early.db"), dir.path().join("late.db"));
    let mut st = Store::open(&db).unwrap();
    let run = st
        .begin_run(&board_run("tx2", "2025-02-01T00:00:00Z"))
        .unwrap();
    let t = st
        .begin_trial(
            run,
            &board_key("alexnet", "cuda", 2),
            8,
            1,
            "2025-02-01T00:00:00Z",
        )
        .unwrap();
    for i in 0..3 {
        st.record_iteration(t, &board_iter(i, 1.0, 0.1)).unwrap();
    }
    edgebench::store::snapshot(&db, &early).unwrap();
    for i in 3..8 {
        st.record_iteration(t, &board_iter(i, 1.0, 0.1)).unwrap();
    }
    st.finish_trial(t, &board_summary("ok", Some(0.05)))
        .unwrap();
    st.record_memory(t, Some(true), Some(42), &MemoryColumns::default())
        .unwrap();
    st.record_gpu_memory(t, Some(3 << 30)).unwrap();
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
        // The finished copy's GPU peak, whichever copy came first.
        assert_eq!(rows[0].peak_gpu_bytes, Some(3 << 30));
        assert_eq!(table_counts(&into), vec![1, 1, 8, 1]);
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
    let n = table_counts(&into);
    let o = run_edgebench(dir.path(), &["merge", arg(&old), "--into", arg(&into)]);
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
    assert_eq!(
        table_counts(&into),
        vec![n[0] + 1, n[1] + 1, n[2] + 2, n[3]]
    );
    let rows = Store::open_readonly(&into).unwrap().results().unwrap();
    let t = rows.iter().find(|r| r.trial_id == "trial-v1").unwrap();
    assert_eq!(
        (
            t.host.as_str(),
            t.batch,
            t.time_per_image_s,
            t.peak_gpu_bytes
        ),
        ("tx1", 32, Some(0.004), None)
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
        let o = run_edgebench(
            dir.path(),
            &["merge", arg(&good), arg(bad), "--into", arg(&into)],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(arg(bad)) && err.contains(says), "{err}");
        assert_eq!(std::fs::read(&into).unwrap(), target_before);
    }
    // A refused merge into a new file creates nothing.
    let fresh = dir.path().join("fresh.db");
    let o = run_edgebench(
        dir.path(),
        &["merge", arg(&good), arg(&foreign), "--into", arg(&fresh)],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(!fresh.exists());
    // Nor does a foreign target get written.
    let before = std::fs::read(&foreign).unwrap();
    let o = run_edgebench(dir.path(), &["merge", arg(&good), "--into", arg(&foreign)]);
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
            .args(["-q", "-t", "ed25519", "-N", "", "-f", arg(&p)])
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
        .args(["-D", "-e", "-f", arg(&config)])
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
            common::cannot_run(&format!("cannot run a local sshd: {why}"));
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
        let mut args = vec!["pull", remote, "--into", arg(&into), "--remote-bin", bin];
        for o in &opts {
            args.extend(["--ssh-opt", o]);
        }
        run_edgebench(dir.path(), &args)
    };
    let temps_before = pull_files();

    let o = pull(&remote, BIN);
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() && err.contains("Permission denied") {
        common::cannot_run(&format!("sshd refused the login: {err}"));
        return;
    }
    assert!(o.status.success(), "{err}");
    assert!(err.contains("[3/3]"), "no progress shown: {err}");
    assert_eq!(table_counts(&into), table_counts(&board));
    assert_consistent(&into);
    // Twice: nothing added; the board's temporary snapshots are gone.
    let o = pull(&remote, BIN);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(table_counts(&into), table_counts(&board));
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

    // The board's file with bad rows (another program wrote them): the rest is merged, each
    // bad trial named, and the pull exits 3.
    let spoiled = crate::fixtures::db::spoil_trials(&board);
    let o = pull(&remote, BIN);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    for (uuid, field) in &spoiled {
        assert!(
            err.lines()
                .any(|l| l.contains(uuid.as_str()) && l.contains(field) && l.contains("board tx2")),
            "{uuid}: {err}"
        );
    }
    assert_consistent(&into);
}

#[test]
fn a_real_run_goes_through_snapshot_merge_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let board = dir.path().join("board.db");
    let o = edgebench(dir.path())
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
            arg(&board),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let snap = dir.path().join("snap.db");
    assert!(
        run_edgebench(dir.path(), &["snapshot", arg(&snap), "--db", arg(&board)])
            .status
            .success()
    );
    let into = dir.path().join("results.db");
    assert!(run_edgebench(
        dir.path(),
        &["merge", arg(&snap), arg(&board), "--into", arg(&into)]
    )
    .status
    .success());
    assert_eq!(table_counts(&into), table_counts(&board));
    let out = dir.path().join("report");
    assert!(
        run_edgebench(dir.path(), &["report", arg(&into), "--out", arg(&out)])
            .status
            .success()
    );
    let r = &Store::open_readonly(&into).unwrap().results().unwrap()[0];
    let md = std::fs::read_to_string(
        out.join(edgebench::report::build::safe_name(&r.host))
            .join("summary.md"),
    )
    .unwrap();
    let ms = format!("{:.3}", r.time_per_image_s.unwrap() * 1e3);
    assert!(md.contains(&format!("| 2 | ok | {ms} |")), "{md}");
}

#[test]
fn merge_leaves_out_a_sources_bad_rows_naming_board_trial_and_field() {
    use crate::fixtures::db::spoil_trials;
    let dir = tempfile::tempdir().unwrap();
    let (tx2, nano) = (dir.path().join("tx2.db"), dir.path().join("nano.db"));
    board_db(&tx2, "tx2");
    board_db(&nano, "nano");
    let spoiled = spoil_trials(&nano);
    // A bad child row (a clock reading that is text) takes its trial with it.
    let c = Connection::open(&nano).unwrap();
    let clocked: String = c
        .query_row(
            "SELECT uuid FROM trials ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    c.execute(
        "INSERT INTO trial_clocks VALUES ((SELECT max(id) FROM trials), 'gpu.cur_hz', 'fast', 1, 1, 1)",
        [],
    )
    .unwrap();
    drop(c);
    let into = dir.path().join("all.db");
    let out = run_edgebench(
        dir.path(),
        &["merge", arg(&tx2), arg(&nano), "--into", arg(&into)],
    );
    assert_eq!(out.status.code(), Some(3), "{}", common::describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (uuid, field) in spoiled
        .iter()
        .map(|(u, f)| (u.as_str(), *f))
        .chain([(clocked.as_str(), "trial_clocks.start_value")])
    {
        let line = stderr
            .lines()
            .find(|l| l.contains(uuid))
            .unwrap_or_else(|| panic!("{uuid} not named: {stderr}"));
        assert!(
            line.contains("board nano") && line.contains(field) && line.contains("nano.db"),
            "{line}"
        );
    }
    let rows = common::results(dir.path(), &into);
    assert_eq!(rows.len(), 9 + 9 - spoiled.len() - 1);
    assert_consistent(&into);
    // Merging again adds nothing and names the same rows.
    let counts = table_counts(&into);
    let out = run_edgebench(dir.path(), &["merge", arg(&nano), "--into", arg(&into)]);
    assert_eq!(out.status.code(), Some(3), "{}", common::describe(&out));
    assert_eq!(table_counts(&into), counts);
}
