//! The fleet's central PostgreSQL against a real throwaway server (`fixtures::postgres`):
//! push (idempotent, concurrent, atomic per trial, resumable), the server's schema version,
//! authentication (password file, PGPASSWORD, TLS verify-full), the board role's privileges,
//! the views, fetch, and the daemon's sync.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::common::{arg, describe, edgebench, ok, results};
use crate::fixtures::db::{board_db, board_key, board_run, trial};
use crate::fixtures::postgres::{Auth, PgServer, PASSWORD};
use edgebench::store::Store;
use edgebench::sync::postgres as pg;

/// Every table `push` copies.
const TABLES: &[&str] = &[
    "runs",
    "trials",
    "iterations",
    "power_samples",
    "trial_memory",
    "trial_rail_energy",
    "trial_clocks",
    "trial_output",
    "run_provenance",
];

/// libpq variables for a library call: none but a HOME without a password file.
fn env(home: &Path) -> pg::Env {
    HashMap::from([("HOME".to_string(), home.display().to_string())])
}

/// A board's database ([`board_db`]) with power samples, rail energy, clocks, output tails
/// and provenance for every trial, as a powered run records them.
fn full_board(path: &Path, host: &str) {
    board_db(path, host);
    let c = Connection::open(path).unwrap();
    let trials: Vec<(i64, i64)> = c
        .prepare("SELECT id, run_id FROM trials")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for (t, run) in &trials {
        for i in 0..(20 + t % 7) {
            c.execute(
                "INSERT INTO power_samples (trial_id, source, rail, t_ns, volts, amps, watts) \
                 VALUES (?1, 'ina3221', 'VDD_IN', ?2, 5.0, 1.0, ?3)",
                rusqlite::params![t, i * 1000, 5.0 + i as f64 / 10.0],
            )
            .unwrap();
        }
        c.execute(
            "INSERT INTO trial_rail_energy VALUES (?1, 'VDD_IN', 12.5, 1), (?1, 'VDD_GPU', 3.5, 0)",
            [t],
        )
        .unwrap();
        c.execute(
            "INSERT INTO trial_clocks VALUES (?1, 'gpu_mhz', 900, 850, 921, 900)",
            [t],
        )
        .unwrap();
        c.execute(
            "INSERT INTO trial_output VALUES (?1, 'stdout', 'done')",
            [t],
        )
        .unwrap();
        c.execute(
            "INSERT OR IGNORE INTO run_provenance VALUES (?1, 'l4t', 'R32.7.1')",
            [run],
        )
        .unwrap();
    }
    c.execute(
        "UPDATE trials SET energy_per_image_j = 0.5 + batch / 10.0, params = '{\"x\": 1}'",
        [],
    )
    .unwrap();
}

fn local_count(path: &Path, table: &str) -> i64 {
    let c = Connection::open(path).unwrap();
    let sql = match table {
        // Only final trials (and their runs and rows) are pushed.
        "trials" => "SELECT count(*) FROM trials WHERE status <> 'running'".to_string(),
        _ => format!("SELECT count(*) FROM {table}"),
    };
    c.query_row(&sql, [], |r| r.get(0)).unwrap()
}

fn server_counts(server: &PgServer, db: &str) -> Vec<i64> {
    TABLES
        .iter()
        .map(|t| server.count(db, &format!("SELECT count(*) FROM edgebench.{t}")))
        .collect()
}

fn local_counts(paths: &[PathBuf]) -> Vec<i64> {
    TABLES
        .iter()
        .map(|t| paths.iter().map(|p| local_count(p, t)).sum())
        .collect()
}

fn push_cli(dir: &Path, url: &str, db: &Path) -> std::process::Output {
    edgebench(dir)
        .env("HOME", dir)
        .env_remove("PGPASSWORD")
        .env_remove("PGPASSFILE")
        .args(["push", url, "--db"])
        .arg(db)
        .output()
        .unwrap()
}

#[test]
fn push_twice_adds_nothing_and_the_server_holds_what_the_board_holds() {
    let server = PgServer::start(Auth::Trust);
    let url = server.database("twice", "postgres");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    full_board(&db, "nano");
    let out = ok(push_cli(dir.path(), &url, &db));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("rows/s"), "{text}");
    let first = server_counts(&server, "twice");
    assert_eq!(first, local_counts(std::slice::from_ref(&db)));
    let out = ok(push_cli(dir.path(), &url, &db));
    assert_eq!(server_counts(&server, "twice"), first, "{}", describe(&out));
    // Values arrive typed: booleans, JSON, times.
    assert_eq!(
        server.psql(
            "twice",
            "SELECT count(*) FROM edgebench.trials WHERE loss_anomaly = false AND params->>'x' = '1' \
             AND started_at = timestamptz '2025-02-01T00:00:00Z'"
        ),
        first[1].to_string()
    );
    // The ledger says nothing waits.
    let out = ok(edgebench(dir.path())
        .args(["results", "--db"])
        .arg(&db)
        .output()
        .unwrap());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "0 trials wait to be pushed to 127.0.0.1:{}/twice",
            server.port
        )),
        "{text}"
    );
}

#[test]
fn several_boards_pushing_at_once_add_up() {
    let server = PgServer::start(Auth::Trust);
    let url = server.database("fleet", "postgres");
    let dir = tempfile::tempdir().unwrap();
    let boards: Vec<PathBuf> = (0..5)
        .map(|i| {
            let p = dir.path().join(format!("board{i}.db"));
            full_board(&p, &format!("board{i}"));
            p
        })
        .collect();
    let home = dir.path().to_path_buf();
    std::thread::scope(|s| {
        for b in &boards {
            let (url, home) = (&url, &home);
            s.spawn(move || pg::push_with_env(url, b, &env(home)).unwrap());
        }
    });
    assert_eq!(server_counts(&server, "fleet"), local_counts(&boards));
    // Server ids are distinct per trial: as many ids as trials.
    assert_eq!(
        server.count("fleet", "SELECT count(DISTINCT id) FROM edgebench.trials"),
        local_counts(&boards)[1]
    );
}

#[test]
fn a_running_trial_waits_until_it_is_final() {
    let server = PgServer::start(Auth::Trust);
    let url = server.database("running", "postgres");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    let mut s = Store::open(&db).unwrap();
    let run = s
        .begin_run(&board_run("tx2", "2025-02-01T00:00:00Z"))
        .unwrap();
    trial(
        &mut s,
        run,
        &board_key("alexnet", "cpu", 1),
        4,
        "ok",
        Some(0.1),
    );
    let running = s
        .begin_trial(
            run,
            &board_key("alexnet", "cpu", 2),
            4,
            1,
            "2025-02-01T00:01:00Z",
        )
        .unwrap();
    drop(s);
    let report = pg::push_with_env(&url, &db, &env(dir.path())).unwrap();
    assert_eq!((report.trials, report.waiting), (1, 0));
    assert_eq!(
        server.count("running", "SELECT count(*) FROM edgebench.trials"),
        1
    );
    assert_eq!(
        server.psql(
            "running",
            "SELECT count(*) FROM edgebench.runs WHERE ended_at IS NULL"
        ),
        "1"
    );
    let mut s = Store::open(&db).unwrap();
    s.finish_trial(
        running,
        &crate::fixtures::db::board_summary("ok", Some(0.1)),
    )
    .unwrap();
    s.finish_run(run, "2025-02-01T00:20:00Z", "finished")
        .unwrap();
    drop(s);
    let report = pg::push_with_env(&url, &db, &env(dir.path())).unwrap();
    assert_eq!(report.trials, 1);
    assert_eq!(
        server.count("running", "SELECT count(*) FROM edgebench.trials"),
        2
    );
    assert_eq!(
        server.psql(
            "running",
            "SELECT status FROM edgebench.runs WHERE ended_at IS NOT NULL"
        ),
        "finished"
    );
}

#[test]
fn a_cut_push_leaves_whole_trials_and_the_next_push_completes() {
    let server = PgServer::start(Auth::Trust);
    let url = server.database("cut", "postgres");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    full_board(&db, "nano");
    let before = local_counts(std::slice::from_ref(&db));
    // The schema first, then a trigger that fails the COPY of the fourth trial's iterations,
    // mid-stream, as a server going away would.
    pg::push_with_env(&url, &dir.path().join("absent.db"), &env(dir.path())).unwrap_err();
    let empty = dir.path().join("empty.db");
    Store::open(&empty).unwrap();
    pg::push_with_env(&url, &empty, &env(dir.path())).unwrap();
    server.psql(
        "cut",
        "CREATE FUNCTION cut() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF (SELECT count(*) FROM edgebench.trials) > 3 THEN \
             RAISE EXCEPTION 'connection cut'; END IF; RETURN NEW; END $$; \
         CREATE TRIGGER cut BEFORE INSERT ON edgebench.iterations \
           FOR EACH ROW EXECUTE FUNCTION cut()",
    );
    let err = pg::push_with_env(&url, &db, &env(dir.path())).unwrap_err();
    assert!(format!("{err:#}").contains("connection cut"), "{err:#}");
    assert_eq!(
        server.count("cut", "SELECT count(*) FROM edgebench.trials"),
        3
    );
    // Whole trials only: every trial on the server has all its iterations and samples.
    assert_eq!(
        server.count(
            "cut",
            "SELECT count(*) FROM edgebench.trials t WHERE iterations_done <> \
             (SELECT count(*) FROM edgebench.iterations i WHERE i.trial_id = t.id)"
        ),
        0
    );
    assert_eq!(
        local_counts(std::slice::from_ref(&db)),
        before,
        "local database untouched"
    );
    let waiting = pg::backlog(&url, &db).unwrap();
    assert_eq!(waiting as i64, before[1] - 3);
    server.psql("cut", "DROP TRIGGER cut ON edgebench.iterations");
    let report = pg::push_with_env(&url, &db, &env(dir.path())).unwrap();
    assert_eq!(report.trials as i64, before[1] - 3);
    assert_eq!(report.trials_already_there, 3);
    assert_eq!(server_counts(&server, "cut"), before);
}

#[test]
fn passwords_from_the_password_file_and_pgpassword_and_a_wrong_one_refused() {
    use std::os::unix::fs::PermissionsExt;
    let server = PgServer::start(Auth::Password);
    let url = server
        .database("auth", "postgres")
        .replace("?sslmode=disable", "");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    board_db(&db, "nano");
    let push = |vars: &[(&str, &str)]| {
        let mut cmd = edgebench(dir.path());
        cmd.env("HOME", dir.path())
            .env_remove("PGPASSWORD")
            .env_remove("PGPASSFILE")
            .args(["push", &url, "--db"])
            .arg(&db);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let wrong = push(&[("PGPASSWORD", "not-the-password")]);
    assert!(!wrong.status.success(), "{}", describe(&wrong));
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        stderr.contains("password") && stderr.contains("127.0.0.1"),
        "{stderr}"
    );
    assert!(!stderr.contains("not-the-password"), "{stderr}");
    assert_eq!(
        server.psql("auth", "SELECT to_regclass('edgebench.trials') IS NULL"),
        "t"
    );

    let passfile = dir.path().join("pgpass");
    std::fs::write(
        &passfile,
        format!("127.0.0.1:{}:auth:postgres:{PASSWORD}\n", server.port),
    )
    .unwrap();
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    ok(push(&[("PGPASSFILE", arg(&passfile))]));
    assert_eq!(
        server.count("auth", "SELECT count(*) FROM edgebench.trials"),
        local_count(&db, "trials")
    );
    // A file others can read is ignored, as libpq does.
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o644)).unwrap();
    let ignored = push(&[("PGPASSFILE", arg(&passfile))]);
    assert!(!ignored.status.success(), "{}", describe(&ignored));
    ok(push(&[("PGPASSWORD", PASSWORD)]));
}

#[test]
fn a_server_with_a_newer_schema_is_refused() {
    let server = PgServer::start(Auth::Trust);
    let url = server.database("newer", "postgres");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    board_db(&db, "nano");
    ok(push_cli(dir.path(), &url, &db));
    let newer = pg::SERVER_SCHEMA_VERSION + 1;
    server.psql(
        "newer",
        &format!("INSERT INTO edgebench.schema_version (version, edgebench_version) VALUES ({newer}, '9.9.9')"),
    );
    let out = push_cli(dir.path(), &url, &db);
    assert!(!out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "the server's edgebench schema is v{newer}, this edgebench knows up to v{}: upgrade \
             edgebench on this board",
            pg::SERVER_SCHEMA_VERSION
        )),
        "{stderr}"
    );
}

#[test]
fn views_fetch_with_filters_and_local_tools_on_the_fetched_file() {
    let server = PgServer::start(Auth::Trust);
    let url = server.database("views", "postgres");
    let dir = tempfile::tempdir().unwrap();
    let (nano, tx2) = (dir.path().join("nano.db"), dir.path().join("tx2.db"));
    full_board(&nano, "nano");
    full_board(&tx2, "tx2");
    // A second repetition on the nano, slower, so the median is over two values.
    {
        let mut s = Store::open(&nano).unwrap();
        let run = s
            .begin_run(&board_run("nano", "2025-03-01T00:00:00Z"))
            .unwrap();
        trial(
            &mut s,
            run,
            &board_key("alexnet", "cpu", 1),
            4,
            "ok",
            Some(0.5),
        );
        trial(
            &mut s,
            run,
            &board_key("alexnet", "cuda", 1),
            4,
            "failed",
            Some(0.5),
        );
        s.finish_run(run, "2025-03-01T00:10:00Z", "finished")
            .unwrap();
        drop(s);
        Connection::open(&nano)
            .unwrap()
            .execute(
                "UPDATE trials SET started_at = '2025-03-01T00:00:00Z', params = '{\"x\": 1}' \
                 WHERE run_id = ?1",
                [run],
            )
            .unwrap();
    }
    for b in [&nano, &tx2] {
        pg::push_with_env(&url, b, &env(dir.path())).unwrap();
    }
    assert_eq!(
        server.count("views", "SELECT count(*) FROM edgebench.trial_summary"),
        local_count(&nano, "trials") + local_count(&tx2, "trials")
    );
    // board_workload_summary and gpu_cpu_speedup as `results --json` sums up the nano's
    // repetitions of each key.
    let nano_rows = results(dir.path(), &nano);
    let repeat = |device: &str| {
        nano_rows
            .iter()
            .find(|r| r["net"] == "alexnet" && r["batch"] == 1 && r["device"] == device)
            .unwrap()["repeat"]
            .clone()
    };
    let (cpu, gpu) = (
        repeat("cpu")["time_per_item_s"]["median"].as_f64().unwrap(),
        repeat("cuda")["time_per_item_s"]["median"]
            .as_f64()
            .unwrap(),
    );
    let all_cuda = nano_rows
        .iter()
        .filter(|r| r["net"] == "alexnet" && r["batch"] == 1 && r["device"] == "cuda")
        .count();
    let row = server.psql(
        "views",
        "SELECT trials, trials_ok, median_time_per_item_s FROM edgebench.board_workload_summary \
         WHERE host = 'nano' AND net = 'alexnet' AND device = 'cuda' AND batch = 1",
    );
    let f: Vec<&str> = row.split('|').collect();
    assert_eq!(f[0].parse::<usize>().unwrap(), all_cuda);
    assert_eq!(
        f[1].parse::<u64>().unwrap(),
        repeat("cuda")["n"].as_u64().unwrap()
    );
    assert!((f[2].parse::<f64>().unwrap() - gpu).abs() < 1e-12, "{row}");
    let speedup: f64 = server
        .psql(
            "views",
            "SELECT speedup FROM edgebench.gpu_cpu_speedup WHERE host = 'nano' AND net = 'alexnet' \
             AND batch = 1",
        )
        .parse()
        .unwrap();
    assert!(
        (speedup - cpu / gpu).abs() < 1e-9,
        "{speedup} vs {}",
        cpu / gpu
    );

    // fetch --host nano into an absent file: the nano's trials, and the local tools read them.
    let into = dir.path().join("fetched.db");
    let fetch = |extra: &[&str]| {
        ok(edgebench(dir.path())
            .env("HOME", dir.path())
            .args(["fetch", &url, "--into", arg(&into)])
            .args(extra)
            .output()
            .unwrap())
    };
    fetch(&["--host", "nano", "--workload", "cnn"]);
    let rows = results(dir.path(), &into);
    assert_eq!(rows.len() as i64, local_count(&nano, "trials"));
    assert!(rows.iter().all(|r| r["host"] == "nano"));
    let counts: Vec<i64> = [
        "iterations",
        "power_samples",
        "trial_memory",
        "run_provenance",
    ]
    .iter()
    .map(|t| local_count(&into, t))
    .collect();
    let expected: Vec<i64> = [
        "iterations",
        "power_samples",
        "trial_memory",
        "run_provenance",
    ]
    .iter()
    .map(|t| local_count(&nano, t))
    .collect();
    assert_eq!(counts, expected);
    // Fetching again adds nothing; --since leaves out the older run.
    fetch(&["--host", "nano"]);
    assert_eq!(
        results(dir.path(), &into).len() as i64,
        local_count(&nano, "trials")
    );
    let since = dir.path().join("since.db");
    ok(edgebench(dir.path())
        .args([
            "fetch",
            &url,
            "--into",
            arg(&since),
            "--since",
            "2025-02-15",
        ])
        .output()
        .unwrap());
    assert_eq!(results(dir.path(), &since).len(), 2);
    let out = dir.path().join("report");
    ok(edgebench(dir.path())
        .args(["report", arg(&into), "--out", arg(&out)])
        .output()
        .unwrap());
    assert!(std::fs::read_dir(&out).unwrap().next().is_some());
}

/// `edgebench ARGS` in `dir` with `password` in PGPASSWORD (no password file).
fn edgebench_pw(dir: &Path, password: &str, args: &[&str]) -> std::process::Output {
    edgebench(dir)
        .env("HOME", dir)
        .env("PGPASSWORD", password)
        .env_remove("PGPASSFILE")
        .args(args)
        .output()
        .unwrap()
}

/// The README's setup on a fresh password-only server, in its order: the owner's database,
/// `fleet init` without a results file, the group roles, a login role per board with its host
/// and one for Grafana. Each board pushes its own results; a board cannot write under another
/// board's host nor end its runs; the reader reads the views and nothing else.
#[test]
fn the_readme_setup_gives_each_role_its_job_and_row_level_security_holds() {
    let server = PgServer::start(Auth::Password);
    let admin = |sql: &str| server.psql("results", sql);
    server.psql(
        "postgres",
        "CREATE ROLE edgebench_owner LOGIN PASSWORD 'owner-pw'",
    );
    server.psql("postgres", "CREATE DATABASE results OWNER edgebench_owner");
    let url = |role: &str| {
        format!(
            "postgres://{role}@127.0.0.1:{}/results?sslmode=disable",
            server.port
        )
    };
    let dir = tempfile::tempdir().unwrap();
    // No results file anywhere.
    let out = ok(edgebench_pw(
        dir.path(),
        "owner-pw",
        &["fleet", "init", &url("edgebench_owner")],
    ));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("v{}", pg::SERVER_SCHEMA_VERSION)),
        "{text}"
    );
    let roles = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/postgres/roles.sql"),
    )
    .unwrap();
    admin(&roles);
    admin(
        "CREATE ROLE board_a LOGIN PASSWORD 'a-pw' IN ROLE edgebench_board; \
         CREATE ROLE board_b LOGIN PASSWORD 'b-pw' IN ROLE edgebench_board; \
         CREATE ROLE grafana LOGIN PASSWORD 'grafana-pw' IN ROLE edgebench_reader",
    );
    server
        .psql_pw(
            "edgebench_owner",
            "owner-pw",
            "results",
            "INSERT INTO edgebench.board_hosts (role_name, host) VALUES ('board_a', 'a'), \
             ('board_b', 'b')",
        )
        .unwrap();

    let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
    full_board(&a, "a");
    full_board(&b, "b");
    ok(edgebench_pw(
        dir.path(),
        "a-pw",
        &["push", &url("board_a"), "--db", arg(&a)],
    ));
    ok(edgebench_pw(
        dir.path(),
        "b-pw",
        &["push", &url("board_b"), "--db", arg(&b)],
    ));
    assert_eq!(
        server_counts(&server, "results"),
        local_counts(&[a.clone(), b.clone()])
    );
    let owner_count = |sql: &str| server.count("results", sql);
    let a_runs = owner_count("SELECT count(*) FROM edgebench.runs WHERE host = 'a'");
    assert!(a_runs > 0);

    // A board writes nothing under another board's host: its push is refused whole...
    let (c_dir, c) = (tempfile::tempdir().unwrap(), dir.path().join("c.db"));
    full_board(&c, "a");
    let before = server_counts(&server, "results");
    let out = edgebench_pw(
        c_dir.path(),
        "b-pw",
        &["push", &url("board_b"), "--db", arg(&c)],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("row-level security"),
        "{}",
        describe(&out)
    );
    assert_eq!(server_counts(&server, "results"), before);
    // ... as is a run or a trial it writes by hand.
    let board_b = |sql: &str| server.psql_pw("board_b", "b-pw", "results", sql);
    let e = board_b(
        "INSERT INTO edgebench.runs (uuid, host, started_at, status, config_toml, \
         edgebench_version, git_commit, candle_version, cpu_threads, os) \
         VALUES ('forged', 'a', now(), 'running', '', '', '', '', 1, 'Linux')",
    )
    .unwrap_err();
    assert!(e.contains("row-level security"), "{e}");
    let a_run = owner_count("SELECT min(id) FROM edgebench.runs WHERE host = 'a'");
    let e = board_b(&format!(
        "INSERT INTO edgebench.trials (run_id, uuid, net, device, batch, epochs, images, \
         dataset, iterations_planned, iterations_done, warmup_iterations, status, started_at, \
         loss_anomaly, workload, params, repetition) VALUES ({a_run}, 'forged', 'alexnet', \
         'cpu', 1, 1, 1, 'd', 1, 1, 0, 'ok', now(), false, 'cnn', '{{}}', 0)"
    ))
    .unwrap_err();
    assert!(e.contains("row-level security"), "{e}");
    // A board ends only its own runs: the same UPDATE over every run reaches its own only.
    let a_ends = "SELECT string_agg(status || ' ' || coalesce(ended_at::text, '-'), ',' \
                  ORDER BY id) FROM edgebench.runs WHERE host = 'a'";
    let a_ends_before = server.psql("results", a_ends);
    let update_all = "WITH u AS (UPDATE edgebench.runs SET status = 'interrupted', \
                      ended_at = now() RETURNING 1) SELECT count(*) FROM u";
    let b_runs = owner_count("SELECT count(*) FROM edgebench.runs WHERE host = 'b'");
    assert_eq!(board_b(update_all).unwrap(), b_runs.to_string());
    assert_eq!(
        owner_count(
            "SELECT count(*) FROM edgebench.runs WHERE host = 'b' AND status = 'interrupted'"
        ),
        b_runs
    );
    let a_uuid = server.psql(
        "results",
        "SELECT min(uuid) FROM edgebench.runs WHERE host = 'a'",
    );
    assert_eq!(
        board_b(&format!(
            "WITH u AS (UPDATE edgebench.runs SET status = 'failed' WHERE uuid = '{a_uuid}' \
             RETURNING 1) SELECT count(*) FROM u"
        ))
        .unwrap(),
        "0"
    );
    assert_eq!(server.psql("results", a_ends), a_ends_before);
    // A board reads no results and deletes nothing.
    for sql in [
        "SELECT * FROM edgebench.trials",
        "SELECT host FROM edgebench.runs",
        "SELECT count(*) FROM edgebench.iterations",
        "SELECT * FROM edgebench.trial_summary",
        "DELETE FROM edgebench.iterations",
        "DELETE FROM edgebench.runs",
    ] {
        let e = board_b(sql).expect_err(sql);
        assert!(e.contains("permission denied"), "{sql}: {e}");
    }

    // The reader: every view, every board's rows; no table, no change, no drop.
    let grafana = |sql: &str| server.psql_pw("grafana", "grafana-pw", "results", sql);
    let trials = owner_count("SELECT count(*) FROM edgebench.trials");
    for view in ["trial_summary", "board_workload_summary", "gpu_cpu_speedup"] {
        grafana(&format!("SELECT * FROM edgebench.{view}")).unwrap();
    }
    assert_eq!(
        grafana("SELECT count(*) FROM edgebench.trial_summary").unwrap(),
        trials.to_string()
    );
    assert_eq!(
        grafana("SELECT string_agg(DISTINCT host, ',') FROM edgebench.trial_summary").unwrap(),
        "a,b"
    );
    for sql in [
        "SELECT count(*) FROM edgebench.trials",
        "SELECT count(*) FROM edgebench.board_hosts",
        "DELETE FROM edgebench.runs",
        "INSERT INTO edgebench.board_hosts VALUES ('grafana', 'a')",
        "DROP VIEW edgebench.trial_summary",
        "DROP SCHEMA edgebench CASCADE",
    ] {
        let e = grafana(sql).expect_err(sql);
        assert!(
            e.contains("permission denied") || e.contains("must be owner"),
            "{sql}: {e}"
        );
    }
    assert_eq!(owner_count("SELECT count(*) FROM edgebench.trials"), trials);
}

/// A CA and a server certificate for 127.0.0.1 signed by it, made with the openssl CLI.
fn certificates(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl (apt-get install openssl) runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let f = |s: &str| format!("{name}-{s}");
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        &f("ca.key"),
        "-out",
        &f("ca.crt"),
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &f("server.key"),
        "-out",
        &f("server.csr"),
    ]);
    std::fs::write(dir.join(f("ext")), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        &f("server.csr"),
        "-CA",
        &f("ca.crt"),
        "-CAkey",
        &f("ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &f("ext"),
        "-out",
        &f("server.crt"),
    ]);
    (
        dir.join(f("ca.crt")),
        dir.join(f("server.crt")),
        dir.join(f("server.key")),
    )
}

#[test]
fn tls_verify_full_accepts_the_servers_ca_and_refuses_another() {
    use std::os::unix::fs::PermissionsExt;
    let certs = tempfile::tempdir().unwrap();
    std::fs::set_permissions(certs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (ca, cert, key) = certificates(certs.path(), "good");
    let (other_ca, _, _) = certificates(certs.path(), "other");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::process::Command::new("chown")
            .args(["nobody:nogroup", arg(&key), arg(&cert)])
            .status()
            .unwrap();
    }
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = PgServer::start_with(
        Auth::Trust,
        &[
            "ssl=on".into(),
            format!("ssl_cert_file={}", cert.display()),
            format!("ssl_key_file={}", key.display()),
        ],
    );
    let url = server
        .database("tls", "postgres")
        .replace("?sslmode=disable", "");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    board_db(&db, "nano");
    let with = |params: String| format!("{url}?{params}");
    pg::push_with_env(
        &with(format!("sslmode=verify-full&sslrootcert={}", ca.display())),
        &db,
        &env(dir.path()),
    )
    .unwrap();
    assert_eq!(server.psql("tls", "SHOW ssl"), "on");
    let e = pg::push_with_env(
        &with(format!(
            "sslmode=verify-full&sslrootcert={}",
            other_ca.display()
        )),
        &db,
        &env(dir.path()),
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("cannot connect"), "{e:#}");
    // verify-ca checks the chain only: a name the certificate lacks is accepted there, and
    // refused by verify-full.
    let by_name = url.replace("127.0.0.1", "localhost");
    let e = pg::push_with_env(
        &format!("{by_name}?sslmode=verify-full&sslrootcert={}", ca.display()),
        &db,
        &env(dir.path()),
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("cannot connect"), "{e:#}");
    pg::push_with_env(
        &format!("{by_name}?sslmode=verify-ca&sslrootcert={}", ca.display()),
        &db,
        &env(dir.path()),
    )
    .unwrap();
    pg::push_with_env(&with("sslmode=require".into()), &db, &env(dir.path())).unwrap();
}

#[test]
fn the_daemon_pushes_after_its_sweep_and_again_when_the_server_returns() {
    let mut server = PgServer::start(Auth::Trust);
    let url = server.database("daemon", "postgres");
    server.stop();
    let dir = tempfile::tempdir().unwrap();
    let (mut child, log, db) = sync_daemon(dir.path(), &url, &[]);
    wait_for_push_line(&mut child, &log);
    let waiting = local_count(&db, "trials");
    assert!(waiting > 0);
    server.run();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not push and exit: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "{text}");
    assert!(text.contains("failed"), "{text}");
    assert_eq!(
        server.count("daemon", "SELECT count(*) FROM edgebench.trials"),
        waiting
    );
    assert!(text.contains("0 trials wait to be pushed"), "{text}");
}

/// The Grafana dashboard's SQL panels and variables, each run against the views of a server
/// holding a board's push: every query runs, and the panels over this board's host and workload
/// show its trials.
#[test]
fn every_dashboard_sql_query_runs_against_the_views() {
    use crate::metrics::{dashboard_sql_queries, DASHBOARD_HOST, DASHBOARD_WORKLOAD};
    let server = PgServer::start(Auth::Trust);
    let url = server.database("dashboard", "postgres");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    full_board(&db, DASHBOARD_HOST);
    // Inside the dashboard's time range (the last 30 days).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let c = Connection::open(&db).unwrap();
    c.execute(
        "UPDATE trials SET started_at = strftime('%Y-%m-%dT%H:%M:%SZ', ?1 - 3600, 'unixepoch'), \
         ended_at = strftime('%Y-%m-%dT%H:%M:%SZ', ?1 - 60, 'unixepoch')",
        [now],
    )
    .unwrap();
    let workload: String = c
        .query_row("SELECT DISTINCT workload FROM trials", [], |r| r.get(0))
        .unwrap();
    assert_eq!(workload, DASHBOARD_WORKLOAD);
    drop(c);
    ok(push_cli(dir.path(), &url, &db));
    let ok_trials = local_count(&db, "trials");
    let queries = dashboard_sql_queries();
    assert!(queries.len() >= 5, "{queries:?}");
    for (place, sql) in &queries {
        let rows = server
            .try_psql("dashboard", sql)
            .unwrap_or_else(|e| panic!("{place}: {sql}\n{e}"));
        let rows = rows.lines().filter(|l| !l.is_empty()).count();
        assert!(rows > 0, "{place} shows nothing for this board: {sql}");
        assert!(rows as i64 <= ok_trials.max(1) * 2, "{place}: {rows} rows");
    }
}

/// The kinds of bad server row a board's role can push: (SET clause, field it breaks).
const SPOILS: &[(&str, &str)] = &[
    ("batch = -1", "trials.batch"),
    ("iterations_done = -5", "trials.iterations_done"),
    ("metrics = '[1, 2]'::jsonb", "trials.metrics"),
    ("status = 'done'", "trials.status"),
];

/// Spoils one trial of `host` on the server per kind of [`SPOILS`]: their UUIDs and fields.
fn spoil_server_trials(server: &PgServer, db: &str, host: &str) -> Vec<(String, &'static str)> {
    let uuids = server.psql(
        db,
        &format!(
            "SELECT t.uuid FROM edgebench.trials t JOIN edgebench.runs r ON r.id = t.run_id \
             WHERE r.host = '{host}' ORDER BY t.id LIMIT {}",
            SPOILS.len()
        ),
    );
    let uuids: Vec<String> = uuids.lines().map(str::to_string).collect();
    assert_eq!(uuids.len(), SPOILS.len());
    uuids
        .into_iter()
        .zip(SPOILS)
        .map(|(uuid, (set, field))| {
            server.psql(
                db,
                &format!("UPDATE edgebench.trials SET {set} WHERE uuid = '{uuid}'"),
            );
            (uuid, *field)
        })
        .collect()
}

/// A new database `name` on `server` holding the pushes of two boards, `nano` and `tx2`
/// ([`full_board`]): the folder, the URL and the boards' files.
fn two_boards_pushed(
    server: &PgServer,
    name: &str,
) -> (tempfile::TempDir, String, PathBuf, PathBuf) {
    let url = server.database(name, "postgres");
    let dir = tempfile::tempdir().unwrap();
    let (nano, tx2) = (dir.path().join("nano.db"), dir.path().join("tx2.db"));
    full_board(&nano, "nano");
    full_board(&tx2, "tx2");
    for b in [&nano, &tx2] {
        pg::push_with_env(&url, b, &env(dir.path())).unwrap();
    }
    (dir, url, nano, tx2)
}

/// Every command that reads a database reads `db` whole, `run` resumes into it, and none
/// prints a spoiled trial.
fn every_reader_reads(dir: &Path, db: &Path, spoiled: &[(String, &str)]) {
    let out_dir = dir.join(format!("out-{}", db.file_stem().unwrap().to_string_lossy()));
    for args in [
        vec!["results", "--db", arg(db)],
        vec!["results", "--json", "--db", arg(db)],
        vec!["provenance", "--db", arg(db)],
        vec!["report", arg(db), "--out", arg(&out_dir.join("report"))],
        vec![
            "export",
            "csv",
            "--db",
            arg(db),
            "--out",
            arg(&out_dir.join("csv")),
        ],
        vec![
            "run",
            "--workload",
            "idle",
            "--duration",
            "1s",
            "--db",
            arg(db),
        ],
    ] {
        let out = ok(edgebench(dir).args(&args).output().unwrap());
        let stdout = String::from_utf8_lossy(&out.stdout);
        for (uuid, _) in spoiled {
            assert!(
                !stdout.contains(uuid.as_str()),
                "{args:?}: {uuid}\n{stdout}"
            );
        }
    }
}

#[test]
fn bad_server_rows_are_left_out_by_fetch_naming_board_trial_and_field() {
    let server = PgServer::start(Auth::Trust);
    let (dir, url, _, _) = two_boards_pushed(&server, "spoiled");
    let spoiled = spoil_server_trials(&server, "spoiled", "nano");
    let on_server = server.count("spoiled", "SELECT count(*) FROM edgebench.trials");

    // Into a new file, and into a board's own database: the good trials come, the bad ones
    // are named, the board's own rows stay.
    let own = dir.path().join("own.db");
    board_db(&own, "orin");
    let own_trials = results(dir.path(), &own).len();
    for (into, before) in [(dir.path().join("fetched.db"), 0), (own, own_trials)] {
        let out = edgebench(dir.path())
            .env("HOME", dir.path())
            .args(["fetch", &url, "--into", arg(&into)])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        for (uuid, field) in &spoiled {
            let line = stderr
                .lines()
                .find(|l| l.contains(uuid.as_str()))
                .unwrap_or_else(|| panic!("{uuid} not named: {}", describe(&out)));
            assert!(
                line.contains("board nano") && line.contains(field),
                "{line}"
            );
        }
        let rows = results(dir.path(), &into);
        assert_eq!(
            rows.len(),
            before + on_server as usize - spoiled.len(),
            "{}",
            describe(&out)
        );
        every_reader_reads(dir.path(), &into, &spoiled);
        // Fetching again changes nothing and says the same.
        let again = edgebench(dir.path())
            .args(["fetch", &url, "--into", arg(&into)])
            .output()
            .unwrap();
        assert_eq!(again.status.code(), Some(3), "{}", describe(&again));
    }
}

#[test]
fn a_bad_row_of_a_child_table_or_a_run_leaves_its_trials_out_and_a_huge_text_costs_a_bounded_read()
{
    let server = PgServer::start(Auth::Trust);
    let (dir, url, nano, tx2) = two_boards_pushed(&server, "children");
    let first = |sql: &str| {
        server
            .psql("children", sql)
            .lines()
            .next()
            .unwrap()
            .to_string()
    };
    // An iteration with a negative step, and a trial's output of 5 MB of text.
    let stepped = first("SELECT t.uuid FROM edgebench.trials t JOIN edgebench.runs r ON r.id = t.run_id WHERE r.host = 'nano' ORDER BY t.id");
    server.psql(
        "children",
        &format!(
            "UPDATE edgebench.iterations SET step = -3 WHERE step = 0 AND trial_id = \
             (SELECT id FROM edgebench.trials WHERE uuid = '{stepped}')"
        ),
    );
    let long = first("SELECT t.uuid FROM edgebench.trials t JOIN edgebench.runs r ON r.id = t.run_id WHERE r.host = 'nano' ORDER BY t.id DESC");
    server.psql(
        "children",
        &format!(
            "UPDATE edgebench.trial_output SET tail = repeat('x', 5000000) WHERE trial_id = \
             (SELECT id FROM edgebench.trials WHERE uuid = '{long}')"
        ),
    );
    // The tx2's run with an OS text of 2 MB, over the store's limit.
    server.psql(
        "children",
        "UPDATE edgebench.runs SET os = repeat('y', 2000000) WHERE host = 'tx2'",
    );
    let into = dir.path().join("fetched.db");
    let out = edgebench(dir.path())
        .args(["fetch", &url, "--host", "nano", "--into", arg(&into)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&stepped) && stderr.contains("iterations.step"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&long) && stderr.contains("trial_output.tail"),
        "{stderr}"
    );
    let rows = results(dir.path(), &into);
    assert_eq!(rows.len() as i64, local_count(&nano, "trials") - 2);
    // The whole tx2 run goes, each trial named.
    let out = edgebench(dir.path())
        .args(["fetch", &url, "--host", "tx2", "--into", arg(&into)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("board tx2").count() as i64,
        local_count(&tx2, "trials"),
        "{stderr}"
    );
    assert!(stderr.contains("runs.os"), "{stderr}");
    assert_eq!(results(dir.path(), &into).len(), rows.len());
    every_reader_reads(dir.path(), &into, &[(stepped, ""), (long, "")]);
}

#[test]
fn a_missing_password_and_a_role_that_may_not_read_are_told_as_such() {
    let server = PgServer::start(Auth::Password);
    let url = server.database("auth", "postgres");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    board_db(&db, "nano");
    let out = push_cli(dir.path(), &url, &db);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("password missing")
            && stderr.contains("no password was given")
            && stderr.contains("PGPASSFILE"),
        "{stderr}"
    );

    // A role without SELECT on the results: no word of --since, which was not given.
    let with_pw = |u: &str| format!("{}&password={PASSWORD}", u);
    pg::push_with_env(&with_pw(&url), &db, &env(dir.path())).unwrap();
    server.psql(
        "auth",
        "CREATE ROLE reader LOGIN PASSWORD 'r3ader'; GRANT USAGE ON SCHEMA edgebench TO reader; \
         GRANT SELECT ON edgebench.schema_version TO reader",
    );
    let reader = url.replace("postgres@", "reader@");
    let out = edgebench(dir.path())
        .env("HOME", dir.path())
        .env("PGPASSWORD", "r3ader")
        .args(["fetch", &reader, "--into", arg(&dir.path().join("f.db"))])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr.contains("permission denied") && !stderr.contains("--since"),
        "{stderr}"
    );
    assert!(stderr.contains("granted SELECT"), "{stderr}");
}

#[test]
fn a_bad_postgres_url_exits_2_and_no_form_of_a_password_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    board_db(&db, "nano");
    for url in [
        "mysql://u:hunter2@h/db",
        "postgres://u:hunter2@h:notaport/db",
        "postgres://u@h/db?PASSWORD=hunter2",
        "postgres://u@h/db?pass%77ord=hunter2&sslmode=sometimes",
        "postgres://u@h/db?hunter2",
    ] {
        for args in [
            vec!["push", url, "--db", arg(&db)],
            vec!["fetch", url, "--into", arg(&dir.path().join("f.db"))],
        ] {
            let out = edgebench(dir.path()).args(&args).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
            assert!(
                !describe(&out).contains("hunter2"),
                "{args:?}: {}",
                describe(&out)
            );
        }
    }
}

#[test]
fn a_password_in_the_sync_url_in_any_form_is_refused_and_never_stored_or_logged() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    for url in [
        "postgres://u:hunter2@127.0.0.1/db",
        "postgres://u@127.0.0.1/db?password=hunter2",
        "postgres://u@127.0.0.1/db?PASSWORD=hunter2",
        "postgres://u@127.0.0.1/db?Pass%77ord=hunter2",
    ] {
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[sweep]\nworkload = \"idle\"\n[idle]\nduration = \"1s\"\n[store]\ndb = \"{}\"\n\
                 [daemon]\nschedule = \"once\"\n[sync]\npostgres = \"{url}\"\n",
                db.display()
            ),
        )
        .unwrap();
        for args in [
            vec!["daemon", "--config", arg(&config)],
            vec!["run", "--config", arg(&config)],
        ] {
            // A daemon that took the URL would sweep, then retry its push for ever.
            let log = dir.path().join("out.log");
            let mut child = edgebench(dir.path())
                .args(&args)
                .stdout(std::fs::File::create(dir.path().join("stdout.log")).unwrap())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            let code = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break status.code();
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let text = std::fs::read_to_string(&log).unwrap();
            assert_eq!(code, Some(2), "{url}: {args:?}: {text}");
            assert!(
                text.contains("sync.postgres") && !text.contains("hunter2"),
                "{url}: {text}"
            );
        }
        assert!(!db.exists(), "{url}: a database was written");
    }
}

#[test]
fn the_daemon_counts_what_waits_when_its_url_cannot_be_read() {
    let dir = tempfile::tempdir().unwrap();
    // No user in the URL, nor in PGUSER or USER: no server can be named, so nothing is on one.
    let (mut child, log, _) =
        sync_daemon(dir.path(), "postgres://127.0.0.1:1/db", &["USER", "PGUSER"]);
    let text = wait_for_push_line(&mut child, &log);
    let _ = child.kill();
    let _ = child.wait();
    assert!(text.contains("1 trials wait to be pushed"), "{text}");
}

/// A daemon in `dir` sweeping one idle second once, pushing to `url` (retried every second or
/// two), without the variables `unset`: the process, its log and its database.
fn sync_daemon(dir: &Path, url: &str, unset: &[&str]) -> (std::process::Child, PathBuf, PathBuf) {
    let db = dir.join("board.db");
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[sweep]\nworkload = \"idle\"\n[idle]\nduration = \"1s\"\n[store]\ndb = \"{}\"\n\
             [daemon]\nschedule = \"once\"\n[sync]\npostgres = \"{url}\"\ninterval = \"1s\"\n\
             max_backoff = \"2s\"\n",
            db.display()
        ),
    )
    .unwrap();
    let log = dir.join("daemon.log");
    let mut cmd = edgebench(dir);
    for name in unset {
        cmd.env_remove(name);
    }
    let child = cmd
        .env("HOME", dir)
        .args(["daemon", "--config", arg(&config)])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    (child, log, db)
}

/// Waits (2 minutes at most, the daemon alive) until the daemon's log says how many trials
/// wait to be pushed; the log so far.
fn wait_for_push_line(child: &mut std::process::Child, log: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("trials wait to be pushed") {
            return text;
        }
        assert!(
            Instant::now() < deadline && child.try_wait().unwrap().is_none(),
            "no push logged: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn retire_removes_every_row_of_a_board_and_prune_drops_old_power_samples() {
    let server = PgServer::start(Auth::Trust);
    let (dir, url, _nano, tx2) = two_boards_pushed(&server, "retire");
    let cli = |args: &[&str]| {
        edgebench(dir.path())
            .env("HOME", dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let out = ok(cli(&["fleet", "retire", &url, "nano"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("retired nano"), "{text}");
    // What is left is exactly the other board's push: no orphan anywhere.
    assert_eq!(
        server_counts(&server, "retire"),
        local_counts(std::slice::from_ref(&tx2))
    );
    for (table, parent, of) in [
        ("iterations", "trial_id", "trials"),
        ("power_samples", "trial_id", "trials"),
        ("trial_memory", "trial_id", "trials"),
        ("trial_rail_energy", "trial_id", "trials"),
        ("trial_clocks", "trial_id", "trials"),
        ("trial_output", "trial_id", "trials"),
        ("run_provenance", "run_id", "runs"),
        ("trials", "run_id", "runs"),
    ] {
        let orphans = server.count(
            "retire",
            &format!(
                "SELECT count(*) FROM edgebench.{table} x WHERE NOT EXISTS \
                 (SELECT 1 FROM edgebench.{of} p WHERE p.id = x.{parent})"
            ),
        );
        assert_eq!(orphans, 0, "{table}");
    }
    // A host the server does not hold: exit 1, named.
    let out = cli(&["fleet", "retire", &url, "nano"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no runs of host \"nano\""),
        "{}",
        describe(&out)
    );

    // Retention: the samples of the trial started 40 days ago go, the others stay, and the
    // trial keeps its energy.
    let old: i64 = server.count("retire", "SELECT min(id) FROM edgebench.trials");
    server.psql(
        "retire",
        &format!(
            "UPDATE edgebench.trials SET started_at = now() - CASE WHEN id = {old} \
             THEN interval '40 days' ELSE interval '29 days' END"
        ),
    );
    let samples = |sql: &str| server.count("retire", sql);
    let all = samples("SELECT count(*) FROM edgebench.power_samples");
    let of_old = samples(&format!(
        "SELECT count(*) FROM edgebench.power_samples WHERE trial_id = {old}"
    ));
    assert!(of_old > 0 && of_old < all);
    let out = ok(cli(&[
        "fleet",
        "prune",
        &url,
        "--power-older-than-days",
        "30",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("removed {of_old} power samples")),
        "{text}"
    );
    assert_eq!(
        samples("SELECT count(*) FROM edgebench.power_samples"),
        all - of_old
    );
    assert_eq!(
        samples(&format!(
            "SELECT count(*) FROM edgebench.trials WHERE id = {old} AND energy_per_image_j IS NOT NULL"
        )),
        1
    );
}

#[test]
fn a_fetch_that_matches_nothing_exits_1_naming_the_selection_and_writes_nothing() {
    let server = PgServer::start(Auth::Trust);
    let (dir, url, _, _) = two_boards_pushed(&server, "nomatch");
    let into = dir.path().join("f.db");
    for (extra, named) in [
        (vec!["--host", "unknown"], "--host \"unknown\""),
        (
            vec!["--host", "nano", "--since", "2100-01-01"],
            "--since \"2100-01-01\"",
        ),
    ] {
        let out = edgebench(dir.path())
            .env("HOME", dir.path())
            .args(["fetch", &url, "--into", arg(&into)])
            .args(&extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("no trial matches") && stderr.contains(named),
            "{stderr}"
        );
        assert!(!into.exists(), "nothing written");
    }
}

#[test]
fn fetch_streams_into_the_target_with_no_copy_on_the_way_and_merges_into_what_it_holds() {
    let server = PgServer::start(Auth::Trust);
    let (dir, url, nano, tx2) = two_boards_pushed(&server, "stream");
    // The target already holds the nano's file: fetching everything adds the tx2's trials.
    let target_dir = dir.path().join("target");
    std::fs::create_dir(&target_dir).unwrap();
    let into = target_dir.join("all.db");
    std::fs::copy(&nano, &into).unwrap();
    let before = results(dir.path(), &into).len();
    let out = ok(edgebench(dir.path())
        .env("HOME", dir.path())
        // No temporary folder to stage a copy in.
        .env("TMPDIR", dir.path().join("absent"))
        .args(["fetch", &url, "--into", arg(&into)])
        .output()
        .unwrap());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fetched"), "{}", describe(&out));
    let rows = results(dir.path(), &into);
    assert_eq!(
        rows.len() as i64,
        local_count(&nano, "trials")
            + local_count(&tx2, "trials")
            + (before as i64 - local_count(&nano, "trials"))
    );
    for table in TABLES {
        assert_eq!(
            local_count(&into, table),
            local_count(&nano, table) + local_count(&tx2, table),
            "{table}"
        );
    }
    // Nothing but the database (and SQLite's own files) beside it.
    let names: Vec<String> = std::fs::read_dir(&target_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("all.db"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

/// A board's file with a trial of every workload beside [`full_board`]'s cnn trials, each as
/// its workload stores it: mlp (samples, two repetitions), ops (executions), exec (an engine's
/// command), idle (no batch), with times and energies set.
fn every_workload_board(path: &Path, host: &str) {
    full_board(path, host);
    let c = Connection::open(path).unwrap();
    let cols: Vec<String> = c
        .prepare("SELECT name FROM pragma_table_info('trials') WHERE name NOT IN ('id', 'uuid')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let list = cols.join(", ");
    let source: i64 = c
        .query_row(
            "SELECT min(id) FROM trials WHERE status = 'ok' AND energy_j IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .or_else(|_| c.query_row("SELECT min(id) FROM trials", [], |r| r.get(0)))
        .unwrap();
    let trials = [
        (
            "mlp",
            "mlp",
            "cpu",
            64,
            r#"{"size":"small","style":"tensors"}"#,
            1,
            0.02,
            0.64,
        ),
        (
            "mlp",
            "mlp",
            "cpu",
            64,
            r#"{"size":"small","style":"tensors"}"#,
            2,
            0.03,
            0.96,
        ),
        (
            "mlp",
            "mlp",
            "cuda",
            64,
            r#"{"size":"small","style":"autograd"}"#,
            1,
            0.01,
            0.32,
        ),
        (
            "ops",
            "add",
            "cpu",
            0,
            r#"{"bytes":1048576,"dtype":"f32","op":"add"}"#,
            1,
            0.004,
            0.02,
        ),
        (
            "exec",
            "alexnet",
            "cpu",
            8,
            r#"{"command":["caffe"],"engine":"caffe"}"#,
            1,
            0.8,
            4.0,
        ),
        (
            "exec",
            "alexnet",
            "cpu",
            8,
            r#"{"command":["tf"],"engine":"tensorflow"}"#,
            1,
            0.6,
            3.0,
        ),
        ("idle", "idle", "board", 0, "{}", 1, 1.0, 2.5),
    ];
    // Every other registered workload too, its rows described only by what it says of them.
    let present: Vec<String> = c
        .prepare("SELECT DISTINCT workload FROM trials")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let others: Vec<String> = edgebench::workloads::names()
        .into_iter()
        .filter(|w| !present.contains(w) && !trials.iter().any(|t| t.0 == w.as_str()))
        .collect();
    let others = others
        .iter()
        .map(|w| (w.as_str(), "net", "cpu", 4, "{}", 1, 0.05, 0.5));
    for (k, (workload, net, device, batch, params, repetition, tpi_s, e_j)) in
        trials.into_iter().chain(others).enumerate()
    {
        c.execute(
            &format!(
                "INSERT INTO trials (uuid, {list}) SELECT ?1, {list} FROM trials WHERE id = ?2"
            ),
            rusqlite::params![format!("{workload}-{k:04}-{host}"), source],
        )
        .unwrap();
        let id = c.last_insert_rowid();
        c.execute(
            "UPDATE trials SET workload = ?2, net = ?3, device = ?4, batch = ?5, params = ?6, \
             repetition = ?7, time_per_iteration_s = ?8, energy_per_image_j = ?9, \
             energy_j = ?9 * iterations_done, time_per_image_s = CASE WHEN ?5 > 0 \
             THEN ?8 / ?5 END, started_at = '2025-02-0' || (?7 + 1) || 'T00:00:00Z' \
             WHERE id = ?1",
            rusqlite::params![id, workload, net, device, batch, params, repetition, tpi_s, e_j],
        )
        .unwrap();
    }
}

/// A timestamp as Unix seconds, from RFC 3339 text (`Z` or `+00:00`).
fn instant(text: &str) -> f64 {
    let t = text.replace("+00:00", "Z").replace(' ', "T");
    humantime::parse_rfc3339_weak(t.trim_end_matches('Z'))
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Whether a view's value equals `results --json`'s.
fn same(view: &serde_json::Value, results: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (view, results) {
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12)
        }
        (Value::String(a), Value::String(b)) if a.len() >= 19 && a.as_bytes()[4] == b'-' => {
            a == b || (instant(a) - instant(b)).abs() < 1e-3
        }
        (a, b) => a == b,
    }
}

/// Every row of `sql` (one JSON object per row) from the server.
fn view_rows(server: &PgServer, db: &str, view: &str) -> Vec<serde_json::Value> {
    let text = server.psql(
        db,
        &format!("SELECT coalesce(json_agg(v), '[]') FROM edgebench.{view} v"),
    );
    serde_json::from_str::<serde_json::Value>(&text)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Every column of every view, for every trial of every workload of a pushed board, equals
/// what `results --json` says of the same trial or key: the views use its definitions.
#[test]
fn every_view_column_equals_results_json_for_every_workload() {
    let server = PgServer::start(Auth::Trust);
    let url = server.database("agree", "postgres");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("board.db");
    every_workload_board(&db, "orin");
    pg::push_with_env(&url, &db, &env(dir.path())).unwrap();
    let results = results(dir.path(), &db);
    let by_uuid: HashMap<&str, &serde_json::Value> = results
        .iter()
        .map(|r| (r["trial_id"].as_str().unwrap(), r))
        .collect();
    let version: String = Connection::open(&db)
        .unwrap()
        .query_row("SELECT max(edgebench_version) FROM runs", [], |r| r.get(0))
        .unwrap();

    // Each trial went up with what its workload says of it, which the views read.
    let undescribed = server.psql(
        "agree",
        "SELECT count(*) FROM edgebench.trials \
         WHERE item IS NULL OR per_iteration IS NULL OR over_dataset IS NULL",
    );
    assert_eq!(undescribed.trim(), "0");

    // trial_summary: a row per trial, each column as results has it; the same for a trial
    // pushed before the server held what its workload says of it (the name rule).
    let check_trials = |pass: &str| {
        let mut workloads = std::collections::BTreeSet::new();
        let mut group_of: HashMap<String, String> = HashMap::new();
        let trials = view_rows(&server, "agree", "trial_summary");
        assert_eq!(trials.len(), results.len());
        for row in &trials {
            let uuid = row["trial_uuid"].as_str().unwrap();
            let r = by_uuid[uuid];
            workloads.insert(r["workload"].as_str().unwrap().to_string());
            for (column, value) in row.as_object().unwrap() {
                let expected = match column.as_str() {
                    "trial_uuid" => r["trial_id"].clone(),
                    "run_uuid" => r["run_id"].clone(),
                    "iterations_done" => r["iterations"].clone(),
                    "edgebench_version" => serde_json::Value::from(version.clone()),
                    // The parameters, each a key of the results row.
                    "params" => {
                        for (k, v) in value.as_object().unwrap() {
                            assert_eq!(&r[k], v, "{uuid}: params.{k}");
                        }
                        continue;
                    }
                    "engine" => r.get("engine").cloned().unwrap_or(serde_json::Value::Null),
                    other => r
                        .get(other)
                        .unwrap_or_else(|| panic!("trial_summary.{other} is not in results --json"))
                        .clone(),
                };
                assert!(
                    same(value, &expected),
                    "{pass}: trial_summary.{column} of {} trial {uuid}: view {value}, \
                     results {expected}",
                    r["workload"]
                );
            }
            let key = [
                "host", "workload", "params", "net", "device", "batch", "epochs", "images",
                "dataset",
            ]
            .map(|k| row[k].to_string())
            .join("|");
            group_of.insert(uuid.to_string(), key);
        }
        (workloads, group_of)
    };
    let (workloads, group_of) = check_trials("described");
    for w in edgebench::workloads::names() {
        assert!(
            workloads.contains(&w),
            "{w} missing from the fixture: {workloads:?}"
        );
    }

    // board_workload_summary: a row per (host, key), its figures those of results' `repeat`.
    let summary = view_rows(&server, "agree", "board_workload_summary");
    let keys: std::collections::HashSet<&String> = group_of.values().collect();
    assert_eq!(summary.len(), keys.len(), "{summary:#?}");
    for row in &summary {
        let key = [
            "host", "workload", "params", "net", "device", "batch", "epochs", "images", "dataset",
        ]
        .map(|k| row[k].to_string())
        .join("|");
        let members: Vec<&serde_json::Value> = results
            .iter()
            .filter(|r| group_of[r["trial_id"].as_str().unwrap()] == key)
            .collect();
        assert!(!members.is_empty(), "{key}");
        let repeat = &members[0]["repeat"];
        let figure = |name: &str, stat: &str| repeat[name].get(stat).cloned().unwrap_or_default();
        for (column, expected) in [
            ("trials", serde_json::Value::from(members.len())),
            ("trials_ok", repeat["n"].clone()),
            (
                "median_time_per_item_s",
                figure("time_per_item_s", "median"),
            ),
            (
                "mean_energy_per_item_j",
                figure("energy_per_item_j", "mean"),
            ),
            ("mean_edp_per_item_js", figure("edp_per_item_js", "mean")),
            ("item", members[0]["item"].clone()),
            (
                "engine",
                members[0].get("engine").cloned().unwrap_or_default(),
            ),
        ] {
            assert!(
                same(&row[column], &expected),
                "board_workload_summary.{column} of {key}: view {}, results {expected}",
                row[column]
            );
        }
    }
    // Caffe and TensorFlow stay apart, and so do the MLP's styles.
    let exec_rows = summary.iter().filter(|r| r["workload"] == "exec").count();
    assert_eq!(exec_rows, 2, "{summary:#?}");

    // gpu_cpu_speedup: CPU over GPU median time per item of the same key.
    for row in view_rows(&server, "agree", "gpu_cpu_speedup") {
        let (cpu, gpu) = (
            row["cpu_time_per_item_s"].as_f64().unwrap(),
            row["gpu_time_per_item_s"].as_f64().unwrap(),
        );
        assert!(
            same(&row["speedup"], &serde_json::Value::from(cpu / gpu)),
            "{row}"
        );
        assert_eq!(
            row["workload"], "cnn",
            "only cnn has both devices here: {row}"
        );
    }

    // A trial pushed before the server held what its workload says of it reads the same
    // through the workloads' names.
    server.psql(
        "agree",
        "UPDATE edgebench.trials SET item = NULL, per_iteration = NULL, over_dataset = NULL",
    );
    check_trials("undescribed");
}
