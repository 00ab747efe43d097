//! The daemon as systemd runs it: sd_notify messages captured on a local NOTIFY_SOCKET,
//! SIGTERM mid-sweep and a restart that redoes only the interrupted trial, SIGHUP reloads, and
//! the unit file verified and its exposure scored by systemd-analyze.

use crate::common;
use crate::common::{count, edgebench, results, signal, wait_for};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Notify {
    socket: UnixDatagram,
    seen: Vec<String>,
}

impl Notify {
    fn bind(dir: &Path) -> (Notify, std::path::PathBuf) {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        (
            Notify {
                socket,
                seen: Vec::new(),
            },
            path,
        )
    }

    /// Waits until a message containing `needle` arrives (keeping everything seen).
    fn expect(&mut self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut buf = [0u8; 4096];
        while !self.seen.iter().any(|m| m.contains(needle)) {
            assert!(
                Instant::now() < deadline,
                "no sd_notify message with {needle:?}; got {:?}",
                self.seen
            );
            if let Ok(n) = self.socket.recv(&mut buf) {
                self.seen
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    }
}

/// The daemon as a unit runs it; its log (stderr, as the journal gets it) goes to
/// `dir/daemon.log`.
fn daemon(dir: &Path, config: &Path, notify: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("daemon.log"))
        .unwrap();
    edgebench(dir)
        .env("NOTIFY_SOCKET", notify)
        .env("JOURNAL_STREAM", "8:4242")
        .args(["daemon", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn wait_exit(child: &mut Child, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        assert!(
            Instant::now() < deadline,
            "daemon did not exit within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn write_config(path: &Path, db: &Path, batches: &str, schedule: &str) {
    std::fs::write(
        path,
        format!(
            "[sweep]\nnets = [\"alexnet\"]\nbatches = [{batches}]\nimages = 6\nepochs = 1\n\
             [store]\ndb = \"{}\"\n[daemon]\nschedule = \"{schedule}\"\n",
            db.display()
        ),
    )
    .unwrap();
}

#[test]
fn sigterm_mid_sweep_then_restart_runs_every_trial_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut notify, socket) = Notify::bind(dir.path());
    let db = dir.path().join("d.db");
    let config = dir.path().join("config.toml");
    write_config(&config, &db, "1, 2", "once");

    let mut child = daemon(dir.path(), &config, &socket);
    notify.expect("READY=1", Duration::from_secs(30));
    notify.expect(
        "STATUS=trial 1/2: alexnet cpu batch 1",
        Duration::from_secs(30),
    );
    wait_for(
        &db,
        "SELECT COUNT(*) FROM iterations",
        2,
        Duration::from_secs(120),
    );
    let asked = Instant::now();
    signal(child.id(), libc::SIGTERM);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
    assert!(asked.elapsed() < Duration::from_secs(10));
    notify.expect("STOPPING=1", Duration::from_secs(1));
    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "interrupted", "{}", rows[0]);

    // Started again: the interrupted trial runs again, then the rest; schedule "once" exits.
    let mut child = daemon(dir.path(), &config, &socket);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(300)), 0);
    let rows = results(dir.path(), &db);
    let ok: Vec<u64> = rows
        .iter()
        .filter(|r| r["status"] == "ok")
        .map(|r| r["batch"].as_u64().unwrap())
        .collect();
    assert_eq!(ok, vec![1, 2], "{rows:?}");
    assert_eq!(rows.len(), 3);
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM trials WHERE status = 'interrupted'"
        ),
        1
    );
    notify.expect("STATUS=idle; last sweep: 2 run", Duration::from_secs(1));
}

#[test]
fn sighup_reloads_the_config_and_a_bad_one_is_kept_out() {
    let dir = tempfile::tempdir().unwrap();
    let (mut notify, socket) = Notify::bind(dir.path());
    let db = dir.path().join("h.db");
    let config = dir.path().join("config.toml");
    // Daily at a time that is not now: one sweep at start, then idle until SIGHUP/SIGTERM.
    write_config(&config, &db, "6", "daily 00:00");
    let mut child = daemon(dir.path(), &config, &socket);
    notify.expect("READY=1", Duration::from_secs(30));
    notify.expect("STATUS=idle; last sweep: 1 run", Duration::from_secs(120));

    write_config(&config, &db, "3, 6", "daily 12:00");
    signal(child.id(), libc::SIGHUP);
    notify.expect("RELOADING=1", Duration::from_secs(5));
    notify.expect("STATUS=config reloaded", Duration::from_secs(5));

    std::fs::write(&config, "[sweep]\nbatchez = 1\n").unwrap();
    signal(child.id(), libc::SIGHUP);
    notify.expect("config reload failed", Duration::from_secs(5));
    assert!(
        child.try_wait().unwrap().is_none(),
        "a bad config must not stop the daemon"
    );

    signal(child.id(), libc::SIGTERM);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
    // Every signal is in the log, in plain journal lines.
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert_eq!(log.matches("SIGHUP received").count(), 2, "{log}");
    assert_eq!(log.matches("SIGTERM received").count(), 1, "{log}");
    assert!(!log.contains('\x1b'), "{log:?}");
    assert!(
        !log.lines().any(|l| {
            let b = l.as_bytes();
            b.len() > 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
        }),
        "timestamps of our own in journal lines: {log}"
    );
}

/// Whether systemd-analyze runs here; when it does not, the test has been skipped (failed
/// under CI) and the caller returns.
fn systemd_analyze_runs() -> bool {
    match Command::new("systemd-analyze").arg("--version").output() {
        Ok(out) => {
            assert!(out.status.success(), "systemd-analyze --version: {out:?}");
            true
        }
        Err(e) => {
            common::cannot_run(&format!(
                "systemd-analyze does not run ({e}): install the systemd package"
            ));
            false
        }
    }
}

fn shipped_unit() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/edgebench.service")
}

#[test]
fn unit_file_passes_systemd_analyze_verify() {
    if !systemd_analyze_runs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(shipped_unit()).unwrap();
    assert!(unit.contains("Type=notify") && unit.contains("ProtectSystem=strict"));
    // verify checks that ExecStart exists: point it at the binary under test.
    let unit = unit.replace("/usr/local/bin/edgebench", env!("CARGO_BIN_EXE_edgebench"));
    let path = dir.path().join("edgebench.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {stderr}"
    );
}

/// The exposure `systemd-analyze security` gives the shipped unit, read offline from the file
/// (no unit installed, no running manager needed).
fn exposure(unit: &Path) -> f64 {
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(unit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // "→ Overall exposure level for edgebench.service: 1.7 OK 🙂"
    text.lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("Overall exposure level for ")?;
            rest.split_once(": ")?
                .1
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| {
            panic!("no exposure level in systemd-analyze security's output: {out:?}\n{text}")
        })
}

#[test]
fn unit_file_security_exposure_is_at_most_2_5() {
    if !systemd_analyze_runs() {
        return;
    }
    let unit = shipped_unit();
    let score = exposure(&unit);
    assert!(
        score <= 2.5,
        "systemd-analyze security --offline=yes {}: exposure {score}, above 2.5",
        unit.display()
    );
}

#[test]
fn a_sweep_waits_while_another_process_holds_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let (mut notify, socket) = Notify::bind(dir.path());
    let db = dir.path().join("w.db");
    let config = dir.path().join("config.toml");
    write_config(&config, &db, "6", "once");
    // This test process stands in for an `edgebench run` started by hand.
    let held = edgebench::store::SweepLock::try_acquire(&db).unwrap();
    let mut child = daemon(dir.path(), &config, &socket);
    notify.expect(
        &format!(
            "STATUS=waiting for another sweep (pid {}, started 20",
            std::process::id()
        ),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(child.try_wait().unwrap().is_none());
    assert_eq!(count(&db, "SELECT COUNT(*) FROM trials"), 0);
    drop(held);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(120)), 0);
    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "ok", "{}", rows[0]);
    notify.expect("STATUS=idle; last sweep: 1 run", Duration::from_secs(1));

    // SIGTERM while waiting ends the daemon at once, having written nothing.
    let db = dir.path().join("w2.db");
    write_config(&config, &db, "6", "once");
    let held = edgebench::store::SweepLock::try_acquire(&db).unwrap();
    let mut child = daemon(dir.path(), &config, &socket);
    notify.seen.clear();
    notify.expect("STATUS=waiting for another sweep", Duration::from_secs(30));
    signal(child.id(), libc::SIGTERM);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(5)), 0);
    assert!(!db.exists());
    drop(held);
}

/// `[train] threads` reaches the trials of a daemon's sweep as it does those of `run`.
#[test]
fn the_daemon_applies_the_configured_threads() {
    let dir = tempfile::tempdir().unwrap();
    let (_notify, socket) = Notify::bind(dir.path());
    let db = dir.path().join("t.db");
    let config = dir.path().join("config.toml");
    write_config(&config, &db, "1", "once");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text = text.replace("images = 6", "images = 1");
    text.push_str("[train]\nthreads = 3\n");
    std::fs::write(&config, text).unwrap();
    let mut child = daemon(dir.path(), &config, &socket);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(120)), 0);
    assert_eq!(count(&db, "SELECT cpu_threads FROM runs"), 3);
    assert_eq!(results(dir.path(), &db)[0]["status"], "ok");
}

#[test]
fn the_units_comments_name_the_address_families_it_leaves_open() {
    let unit = std::fs::read_to_string(shipped_unit()).unwrap();
    let families: Vec<&str> = unit
        .lines()
        .find_map(|l| l.strip_prefix("RestrictAddressFamilies="))
        .expect("RestrictAddressFamilies=")
        .split_whitespace()
        .collect();
    let comments: String = unit
        .lines()
        .filter(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    for family in &families {
        assert!(
            comments.contains(family),
            "{family} open, no comment says why"
        );
    }
    if families.len() > 1 {
        assert!(
            !comments.contains("AF_UNIX alone"),
            "a comment says AF_UNIX alone while {families:?} are open"
        );
    }
}
