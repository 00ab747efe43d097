//! Fuzz targets: what edgebench reads from outside, fed arbitrary bytes, with the properties
//! that must hold whatever the bytes. The coverage-guided binaries of
//! `crates/edgebench-fuzz` call these; the unit tests below run each on its kept inputs (the
//! seeds, and every input a fuzzing run found a fault with) and on mutations of them.
//!
//! A target returns normally for any input; a panic is a finding. Targets:
//! - [`exec_log`]: the training-log parsers (`caffe`, `tensorflow`, `edgebench`,
//!   `regex:PATTERN`) through the importer: whatever they read must be storable.
//! - [`config`]: the configuration loader and its checks: a configuration it accepts writes
//!   back as TOML that loads to the same configuration.
//! - [`metrics_http`]: the metrics endpoint's HTTP front end over one connection: a bounded
//!   answer or none, never a hang.
//! - [`store_row`]: the store's row rules against its readers: a row the rules accept is read
//!   back by every reader; one they refuse is left out, never an error.
//!
//! Not yet targets: the `trtexec` log parser and the ONNX model loader, which do not exist in
//! this tree; each gets a target here when it does (see `crates/edgebench-fuzz/README.md`).

use std::io::Cursor;
use std::path::Path;

use crate::config::Config;
use crate::metrics::server::{self, Limits};
use crate::metrics::Metrics;
use crate::store::validate;
use crate::store::Store;
use crate::workloads::exec::import::{imported_trial, read_log, ImportedLog};
use crate::workloads::exec::parse::Parser;

/// A target: any bytes in, a panic out when a property breaks.
pub type Target = fn(&[u8]);

/// The targets by name, as the fuzz binaries and kept-input folders are named.
pub const TARGETS: &[(&str, Target)] = &[
    ("exec_log", exec_log),
    ("config", config),
    ("metrics_http", metrics_http),
    ("store_row", store_row),
];

/// A training log: the first byte picks the parser (for `regex:`, the pattern is the first
/// line), the rest is the log. Every step read must be a record the store accepts, in step
/// order, each within its own interval.
pub fn exec_log(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (name, log) = match pick % 4 {
        0 => ("caffe".to_string(), rest),
        1 => ("tensorflow".to_string(), rest),
        2 => ("edgebench".to_string(), rest),
        _ => {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            let pattern = String::from_utf8_lossy(&rest[..end]);
            (
                format!("regex:{pattern}"),
                &rest[(end + 1).min(rest.len())..],
            )
        }
    };
    let Ok(parser) = Parser::from_name(&name) else {
        return;
    };
    let Ok((iterations, _)) = read_log(Cursor::new(log), parser) else {
        return;
    };
    let mut previous: Option<usize> = None;
    for s in &iterations {
        let r = &s.record;
        assert!(previous.is_none_or(|p| r.step > p), "steps out of order");
        previous = Some(r.step);
        assert!(
            r.t_start_ns <= r.t_end_ns,
            "an interval that ends before it starts"
        );
        assert!(
            r.step_s.is_finite() && r.step_s >= 0.0,
            "step time {}",
            r.step_s
        );
        assert!(s.steps >= 1);
    }
    let log = ImportedLog {
        path: "train_fuzz_CPU_001.log".into(),
        net: "fuzz".into(),
        device: "cpu".into(),
        batch: 1,
        iterations,
        untimed_lines: 0,
        ran: None,
    };
    let trial = imported_trial(&log, "fuzz", "2025-01-01T00:00:00Z");
    if let Err(v) = trial.check() {
        panic!("the parser read what the store refuses: {v}");
    }
}

/// A configuration file's text. One that loads and passes its checks writes back as TOML that
/// loads, passes and writes back the same.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("fuzz.toml");
    let Ok(config) = Config::from_toml(&text, path) else {
        return;
    };
    if config.validate("fuzz").is_err() {
        return;
    }
    let written = config.to_toml();
    let again = Config::from_toml(&written, path)
        .unwrap_or_else(|e| panic!("a written configuration does not load: {e}\n{written}"));
    if let Err(e) = again.validate("fuzz") {
        panic!("a written configuration fails its checks: {e}\n{written}");
    }
    assert_eq!(again.to_toml(), written, "writing is not stable");
}

/// The bytes a client sends on one connection to the metrics endpoint, then its end of
/// sending. The endpoint answers with at most one bounded HTTP/1 response, or closes, well
/// within its header timeout: it never waits for a body, nor for more bytes after the end.
pub fn metrics_http(data: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let metrics = Metrics::new(&crate::metrics::Identity {
        host: "fuzz-host".into(),
        board: "generic".into(),
    });
    let bound = metrics.encode().len() + 4096;
    let answer = runtime.block_on(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, endpoint) = tokio::io::duplex(1 << 16);
        let serving = tokio::spawn(server::connection(endpoint, metrics, Limits::DEFAULT));
        let input = data.to_vec();
        let (mut read, mut write) = tokio::io::split(&mut client);
        let send = async move {
            // The endpoint may close before reading everything: that is its right.
            let _ = write.write_all(&input).await;
            let _ = write.shutdown().await;
        };
        let mut answer = Vec::new();
        let receive = async {
            let mut buf = [0u8; 8192];
            loop {
                match read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        answer.extend_from_slice(&buf[..n]);
                        assert!(answer.len() <= bound, "an answer of {} bytes", answer.len());
                    }
                }
            }
        };
        let done = tokio::time::timeout(std::time::Duration::from_secs(3), async {
            tokio::join!(send, receive);
        })
        .await;
        assert!(done.is_ok(), "the connection was still open after 3 s");
        let _ = serving.await;
        answer
    });
    if !answer.is_empty() {
        assert!(
            answer.starts_with(b"HTTP/1.1 ") || answer.starts_with(b"HTTP/1.0 "),
            "not an HTTP/1 response: {:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(64)])
        );
    }
}

/// Values made from bytes: each value is a kind byte, then its bytes.
struct Values<'a>(&'a [u8]);

impl Values<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }

    fn word(&mut self) -> [u8; 8] {
        let mut w = [0u8; 8];
        let got = self.take(8);
        w[..got.len()].copy_from_slice(got);
        w
    }

    /// The next value, or None when the bytes run out.
    fn next(&mut self, default: rusqlite::types::Value) -> rusqlite::types::Value {
        use rusqlite::types::Value;
        let Some(&kind) = self.0.first() else {
            return default;
        };
        self.0 = &self.0[1..];
        match kind % 8 {
            0 => Value::Null,
            1 => Value::Integer(i64::from_le_bytes(self.word())),
            2 => Value::Integer(i64::from(self.take(1).first().copied().unwrap_or(0)) - 2),
            3 => Value::Real(f64::from_le_bytes(self.word())),
            4 | 5 => {
                let n = usize::from(self.take(1).first().copied().unwrap_or(0));
                Value::Text(String::from_utf8_lossy(self.take(n)).into_owned())
            }
            6 => {
                let n = usize::from(self.take(1).first().copied().unwrap_or(0));
                Value::Blob(self.take(n).to_vec())
            }
            _ => default,
        }
    }
}

thread_local! {
    /// One database per thread, emptied for each input: creating one costs milliseconds.
    static ROW_DB: std::cell::RefCell<Option<(tempfile::TempDir, Store)>> =
        const { std::cell::RefCell::new(None) };
}

/// A run, a trial and an iteration of arbitrary values (each column a value made from the
/// bytes, or a good one when they run out), written straight into a database as another
/// program could. Every reader returns without error; when the rules accept every row, the
/// readers read the trial back whole, and when they refuse one, the trial is left out.
pub fn store_row(data: &[u8]) {
    use rusqlite::types::Value;
    ROW_DB.with(|cell| {
        let mut cell = cell.borrow_mut();
        let (_, store) = cell.get_or_insert_with(|| {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let store = Store::open(&dir.path().join("rows.db")).expect("a new database");
            (dir, store)
        });
        let conn = store.sqlite();
        conn.execute_batch("DELETE FROM iterations; DELETE FROM trials; DELETE FROM runs;")
            .expect("emptied");
        let mut values = Values(data);
        let good = |table: &str, name: &str| -> Value {
            match (table, name) {
                (_, "uuid") => Value::Text(format!("{table}-0")),
                (_, "started_at" | "ended_at") => Value::Text("2025-01-01T00:00:00Z".into()),
                (_, "status") if table == "trials" => Value::Text("ok".into()),
                (_, "params" | "metrics") => Value::Text("{}".into()),
                (_, "repetition") => Value::Integer(1),
                _ => match validate::table(table)
                    .and_then(|c| c.iter().find(|c| c.name == name))
                    .map(|c| c.kind)
                {
                    Some(validate::Kind::Text(_)) => Value::Text("x".into()),
                    Some(validate::Kind::Real) => Value::Real(0.5),
                    _ => Value::Integer(0),
                },
            }
        };
        let mut insert = |table: &str, parent: Option<(&str, i64)>| -> Option<i64> {
            let rules = validate::table(table).expect("a table with rules");
            let mut names: Vec<&str> = rules.iter().map(|c| c.name).collect();
            let mut row: Vec<Value> = rules
                .iter()
                .map(|c| values.next(good(table, c.name)))
                .collect();
            if let Some((column, id)) = parent {
                names.push(column);
                row.push(Value::Integer(id));
            }
            let sql = format!(
                "INSERT INTO {table} ({}) VALUES ({})",
                names.join(", "),
                vec!["?"; names.len()].join(", ")
            );
            // The schema's own constraints (NOT NULL, CHECK) refuse some rows outright.
            conn.execute(&sql, rusqlite::params_from_iter(row.iter()))
                .ok()
                .map(|_| conn.last_insert_rowid())
        };
        let Some(run) = insert("runs", None) else {
            return;
        };
        let Some(trial) = insert("trials", Some(("run_id", run))) else {
            return;
        };
        let iteration = insert("iterations", Some(("trial_id", trial))).is_some();

        let mut accepted = true;
        for table in ["runs", "trials", "iterations"] {
            let mut st = conn
                .prepare(&format!("SELECT * FROM {table}"))
                .expect("a select");
            let mut rows = st.query([]).expect("rows");
            while let Some(row) = rows.next().expect("a row") {
                accepted &= validate::check_row(table, row).is_ok();
            }
        }
        let results = store
            .results()
            .expect("results reads whatever the rows hold");
        let statuses = store
            .statuses_by_key(&crate::store::TrialStatus::ALL)
            .expect("resume reads whatever the rows hold");
        let steps = store
            .iterations(trial)
            .expect("iterations reads whatever the rows hold");
        let _ = store.logged_text(trial).expect("logged text");
        if accepted {
            assert_eq!(
                results.len(),
                1,
                "a trial the rules accept is not read back"
            );
            assert_eq!(
                statuses.len(),
                1,
                "a trial the rules accept is not resumable"
            );
            assert_eq!(steps.len(), usize::from(iteration));
            // And what a reader read, JSON shows.
            crate::report::results_json(&results).expect("results as JSON");
            let _ = crate::report::summary::table(&results);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// The kept inputs of `target`: its seeds, and the inputs fuzzing found a fault with.
    fn kept(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/edgebench-fuzz");
        let mut out = Vec::new();
        for dir in ["seeds", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
                continue;
            };
            for e in entries.flatten() {
                if e.path().is_file() {
                    out.push((e.path(), std::fs::read(e.path()).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn every_target_passes_its_kept_inputs() {
        for (name, target) in TARGETS {
            let inputs = kept(name);
            assert!(!inputs.is_empty(), "{name}: no seeds");
            for (path, bytes) in inputs {
                let outcome = std::panic::catch_unwind(|| target(&bytes));
                assert!(outcome.is_ok(), "{name}: {} fails", path.display());
            }
        }
    }

    /// A few hundred mutations of the seeds per target, the same on every run (a fixed
    /// seed): a property test in the plain test run, beside the coverage-guided runs.
    #[test]
    fn every_target_holds_on_mutations_of_its_seeds() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(51);
        for (name, target) in TARGETS {
            let seeds = kept(name);
            let rounds = if *name == "metrics_http" { 100 } else { 300 };
            for _ in 0..rounds {
                let (_, seed) = &seeds[rng.random_range(0..seeds.len())];
                let mut input = seed.clone();
                for _ in 0..rng.random_range(1..8) {
                    let at = rng.random_range(0..=input.len());
                    match rng.random_range(0..4) {
                        0 if !input.is_empty() => {
                            let i = at.min(input.len() - 1);
                            input[i] ^= 1 << rng.random_range(0..8);
                        }
                        1 => input.insert(at, rng.random()),
                        2 if at < input.len() => {
                            input.remove(at);
                        }
                        _ => {
                            let (_, other) = &seeds[rng.random_range(0..seeds.len())];
                            let from = rng.random_range(0..=other.len());
                            let to = rng.random_range(from..=other.len());
                            input.splice(at..at, other[from..to].iter().copied());
                        }
                    }
                }
                let outcome = std::panic::catch_unwind(|| target(&input));
                assert!(
                    outcome.is_ok(),
                    "{name} fails on {:?}",
                    String::from_utf8_lossy(&input)
                );
            }
        }
    }
}
