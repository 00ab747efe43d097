//! Helpers shared by the tests that drive the real binary.
#![allow(dead_code)] // each test crate uses its own subset

use rusqlite::Connection;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The binary, in `dir`, with a clean environment: no DB from the caller, no
/// config/edgebench.toml in the cwd, two math threads.
pub fn edgebench(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_edgebench"));
    cmd.current_dir(dir)
        .env_remove("EDGEBENCH_DB")
        .env("RAYON_NUM_THREADS", "2");
    cmd
}

pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn ok(out: Output) -> Output {
    assert!(out.status.success(), "{}", describe(&out));
    out
}

/// `edgebench results --json` as JSON objects.
pub fn results(dir: &Path, db: &Path) -> Vec<Value> {
    let out = ok(edgebench(dir)
        .args(["results", "--json", "--db"])
        .arg(db)
        .output()
        .unwrap());
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// One number from the DB, 0 while the file or table does not exist yet.
pub fn count(db: &Path, sql: &str) -> i64 {
    Connection::open(db)
        .ok()
        .and_then(|c| c.query_row(sql, [], |r| r.get::<_, i64>(0)).ok())
        .unwrap_or(0)
}

/// Polls until `sql` counts at least `n`, failing after `limit`.
pub fn wait_for(db: &Path, sql: &str, n: i64, limit: Duration) {
    let deadline = Instant::now() + limit;
    while count(db, sql) < n {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {sql} >= {n}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
