//! `edgebench fetch`: a selection of the server's trials into a local database. The rows go
//! into a temporary SQLite file with the local schema (server ids as local ids), which
//! `store::merge` then merges into the target, so every local tool reads the result and
//! fetching twice adds nothing.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;

use super::connect::{describe, ConnInfo, Env};
use super::schema;
use super::tables::{
    names, server_selects, Cell, Kind, RUN_COLUMNS, RUN_PROVENANCE, TRIAL_COLUMNS, TRIAL_TABLES,
};
use crate::store::validate::{self, Violation};
use crate::store::{self, MergeReport, Refused, Store};

/// What to fetch.
#[derive(Debug, Clone, Default)]
pub struct FetchRequest<'a> {
    /// Only this board (`runs.host`).
    pub host: Option<&'a str>,
    /// Only trials started at or after this time (anything PostgreSQL reads as timestamptz,
    /// e.g. `2025-02-01` or `2025-02-01T12:00:00Z`).
    pub since: Option<&'a str>,
    /// Only this workload (`cnn`, `exec`, ...).
    pub workload: Option<&'a str>,
}

/// What a fetch brought.
#[derive(Debug)]
pub struct FetchReport {
    /// Trials selected on the server (those refused included).
    pub trials: usize,
    pub merge: MergeReport,
}

/// Fetches the selection from the server `url` names into the database `into`.
pub fn fetch(url: &str, into: &Path, req: &FetchRequest<'_>) -> anyhow::Result<FetchReport> {
    fetch_with_env(url, into, req, &super::connect::process_env())
}

/// [`fetch`] with the libpq variables given. Every row is checked against the store's rules
/// as it arrives; a trial with a bad row (or a run with one, with its trials) is left out and
/// listed in the report's `merge.refused`, the rest is fetched.
pub fn fetch_with_env(
    url: &str,
    into: &Path,
    req: &FetchRequest<'_>,
    env: &Env,
) -> anyhow::Result<FetchReport> {
    let info = ConnInfo::parse(url, env)?;
    let mut client = info.connect(env)?;
    let target = info.target();
    schema::check_readable(&mut client).with_context(|| format!("server {target}"))?;
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let tmp = dir.path().join("fetched.db");
    let (trials, refused) = {
        let store = Store::open(&tmp)?;
        copy_selection(&mut client, &store, req, &target.0)
            .with_context(|| format!("fetching from {target}"))?
    };
    let mut merge = store::merge(&[tmp], into)?;
    // What merge refused comes from the temporary copy: name the server instead.
    for r in &mut merge.refused {
        r.source = target.0.clone();
    }
    merge.refused.splice(0..0, refused);
    Ok(FetchReport { trials, merge })
}

fn db_err(what: &str) -> impl Fn(postgres::Error) -> anyhow::Error + '_ {
    move |e| anyhow!("{what}: {}", describe(&e))
}

/// How the rows of one server table are copied and checked.
struct TableCopy<'a> {
    /// The local table.
    table: &'a str,
    /// The id columns the select starts with (the row's own and its parents').
    id_columns: &'a [&'a str],
    columns: &'a [(&'a str, Kind)],
    /// Which id column names the run or trial a bad row takes with it.
    owner: usize,
    /// Rows whose id column `.0` is one of `.1` (a refused run or trial) are not copied.
    skip: Option<(usize, &'a HashSet<i64>)>,
}

/// Streams `sql` (its first columns `copy.id_columns`, then `copy.columns`) into `INSERT INTO
/// table`, each row checked against the store's rules first; returns the rows written and the
/// owners (run or trial ids) of the rows refused, each with its first violation.
fn copy_table(
    client: &mut postgres::Client,
    conn: &rusqlite::Connection,
    sql: &str,
    ids: &[i64],
    copy: &TableCopy<'_>,
) -> anyhow::Result<(u64, HashMap<i64, Violation>)> {
    let table = copy.table;
    let insert = format!(
        "INSERT INTO {table} ({}, {}) VALUES ({})",
        copy.id_columns.join(", "),
        names(copy.columns),
        (1..=copy.id_columns.len() + copy.columns.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut stmt = conn.prepare(&insert)?;
    let param: [&(dyn ToSql + Sync); 1] = [&ids];
    let mut rows = client
        .query_raw(sql, param)
        .map_err(|e| anyhow!("reading {table}: {}", describe(&e)))?;
    let (mut n, mut refused) = (0, HashMap::new());
    while let Some(row) = rows.next().map_err(db_err(table))? {
        let mut id_cells = Vec::with_capacity(copy.id_columns.len());
        for i in 0..copy.id_columns.len() {
            id_cells.push(row.try_get::<_, i64>(i).map_err(db_err(table))?);
        }
        if copy.skip.is_some_and(|(i, bad)| bad.contains(&id_cells[i])) {
            continue;
        }
        let mut cells = Vec::with_capacity(copy.columns.len());
        for (j, (_, kind)) in copy.columns.iter().enumerate() {
            cells.push(
                Cell::from_server(&row, copy.id_columns.len() + j, *kind).map_err(db_err(table))?,
            );
        }
        let named: Vec<(&str, &dyn rusqlite::ToSql)> = copy
            .columns
            .iter()
            .zip(&cells)
            .map(|((name, _), cell)| (*name, cell as &dyn rusqlite::ToSql))
            .collect();
        if let Err(v) = validate::check_values(table, &named) {
            refused.entry(id_cells[copy.owner]).or_insert(v);
            continue;
        }
        let all: Vec<Cell> = id_cells
            .iter()
            .map(|&id| Cell::Int(Some(id)))
            .chain(cells)
            .collect();
        stmt.execute(rusqlite::params_from_iter(all.iter()))
            .with_context(|| format!("writing {table}"))?;
        n += 1;
    }
    Ok((n, refused))
}

/// Copies the selection into `store`, leaving out what breaks the store's rules; returns the
/// trials selected and what was left out.
fn copy_selection(
    client: &mut postgres::Client,
    store: &Store,
    req: &FetchRequest<'_>,
    source: &str,
) -> anyhow::Result<(usize, Vec<Refused>)> {
    let selected = client
        .query(
            "SELECT t.id, t.run_id, left(t.uuid, 64), left(r.uuid, 64), left(r.host, 64) \
             FROM edgebench.trials t JOIN edgebench.runs r ON r.id = t.run_id \
             WHERE ($1::text IS NULL OR r.host = $1) \
               AND ($2::text IS NULL OR t.started_at >= $2::text::timestamptz) \
               AND ($3::text IS NULL OR t.workload = $3) \
             ORDER BY t.id",
            &[&req.host, &req.since, &req.workload],
        )
        .map_err(|e| {
            let since = req.since.is_some()
                && e.code().is_some_and(|c| {
                    c.code().starts_with("22") // data exception: a date it cannot read
                });
            let what = if since {
                "selecting trials (is --since a date such as 2025-02-01?)"
            } else {
                "selecting trials"
            };
            anyhow!("{what}: {}{}", describe(&e), privilege_hint(&e))
        })?;
    if selected.is_empty() {
        let mut what: Vec<String> = Vec::new();
        for (flag, value) in [
            ("--host", req.host),
            ("--since", req.since),
            ("--workload", req.workload),
        ] {
            if let Some(v) = value {
                what.push(format!("{flag} {v:?}"));
            }
        }
        let what = match what.is_empty() {
            true => "the server holds no trials".to_string(),
            false => format!("no trial matches {}", what.join(" ")),
        };
        bail!(
            "{what} (host names: SELECT DISTINCT host FROM edgebench.trial_summary); nothing \
             fetched"
        );
    }
    let trial_ids: Vec<i64> = selected.iter().map(|r| r.get(0)).collect();
    let mut run_ids: Vec<i64> = selected.iter().map(|r| r.get(1)).collect();
    run_ids.sort_unstable();
    run_ids.dedup();

    let conn = store.sqlite();
    let tx = conn.unchecked_transaction()?;
    let (_, mut bad_runs) = copy_table(
        client,
        &tx,
        &format!(
            "SELECT r.id, {} FROM edgebench.runs r WHERE r.id = ANY($1)",
            server_selects("runs", RUN_COLUMNS, "r")
        ),
        &run_ids,
        &TableCopy {
            table: "runs",
            id_columns: &["id"],
            columns: RUN_COLUMNS,
            owner: 0,
            skip: None,
        },
    )?;
    let skipped: HashSet<i64> = bad_runs.keys().copied().collect();
    let (_, bad) = copy_table(
        client,
        &tx,
        &format!(
            "SELECT x.run_id, {} FROM edgebench.run_provenance x WHERE x.run_id = ANY($1)",
            server_selects(RUN_PROVENANCE.name, RUN_PROVENANCE.columns, "x")
        ),
        &run_ids,
        &TableCopy {
            table: RUN_PROVENANCE.name,
            id_columns: &["run_id"],
            columns: RUN_PROVENANCE.columns,
            owner: 0,
            skip: Some((0, &skipped)),
        },
    )?;
    for (run, v) in bad {
        bad_runs.entry(run).or_insert(v);
    }
    let runs_skipped: HashSet<i64> = bad_runs.keys().copied().collect();
    let (_, mut bad_trials) = copy_table(
        client,
        &tx,
        &format!(
            "SELECT t.id, t.run_id, {} FROM edgebench.trials t WHERE t.id = ANY($1)",
            server_selects("trials", TRIAL_COLUMNS, "t")
        ),
        &trial_ids,
        &TableCopy {
            table: "trials",
            id_columns: &["id", "run_id"],
            columns: TRIAL_COLUMNS,
            owner: 0,
            skip: Some((1, &runs_skipped)),
        },
    )?;
    // The trials of a refused run are left out with it.
    for r in &selected {
        let (trial, run): (i64, i64) = (r.get(0), r.get(1));
        if let Some(v) = bad_runs.get(&run) {
            bad_trials.entry(trial).or_insert_with(|| v.clone());
        }
    }
    for table in TRIAL_TABLES {
        let skipped: HashSet<i64> = bad_trials.keys().copied().collect();
        let (_, bad) = copy_table(
            client,
            &tx,
            &format!(
                "SELECT x.{}, {} FROM edgebench.{} x WHERE x.{} = ANY($1)",
                table.parent,
                server_selects(table.name, table.columns, "x"),
                table.name,
                table.parent
            ),
            &trial_ids,
            &TableCopy {
                table: table.name,
                id_columns: &[table.parent],
                columns: table.columns,
                owner: 0,
                skip: Some((0, &skipped)),
            },
        )?;
        for (trial, v) in bad {
            bad_trials.entry(trial).or_insert(v);
        }
    }
    // A trial refused for a child row was written before that row was seen: out it goes, its
    // other rows with it (foreign keys cascade).
    for trial in bad_trials.keys() {
        tx.execute("DELETE FROM trials WHERE id = ?1", [trial])?;
    }
    for run in bad_runs.keys() {
        tx.execute("DELETE FROM runs WHERE id = ?1", [run])?;
    }
    tx.commit()?;
    let mut refused = Vec::new();
    for r in &selected {
        let (trial, run): (i64, i64) = (r.get(0), r.get(1));
        if let Some(v) = bad_trials.get(&trial) {
            let text = |i: usize| r.try_get::<_, Option<String>>(i).ok().flatten();
            refused.push(Refused {
                source: source.to_string(),
                host: text(4).unwrap_or_else(|| "?".into()),
                run: text(3).unwrap_or_else(|| run.to_string()),
                trial: Some(text(2).unwrap_or_else(|| trial.to_string())),
                field: v.field.clone(),
                problem: v.problem.clone(),
            });
        }
    }
    Ok((trial_ids.len(), refused))
}

/// What to do about a permission error: the role lacks SELECT on the schema's tables.
fn privilege_hint(e: &postgres::Error) -> &'static str {
    match e.code() {
        Some(c) if *c == postgres::error::SqlState::INSUFFICIENT_PRIVILEGE => {
            "; this role may not read the results (a board's role only adds them): fetch as a \
             role granted SELECT on schema edgebench's tables, e.g. its owner"
        }
        _ => "",
    }
}
