//! `edgebench fetch`: a selection of the server's trials into a local database. The rows go
//! into a temporary SQLite file with the local schema (server ids as local ids), which
//! `store::merge` then merges into the target, so every local tool reads the result and
//! fetching twice adds nothing.

use std::path::Path;

use anyhow::{anyhow, Context};
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;

use super::connect::{describe, ConnInfo, Env};
use super::schema;
use super::tables::{
    names, server_selects, Cell, Kind, RUN_COLUMNS, RUN_PROVENANCE, TRIAL_COLUMNS, TRIAL_TABLES,
};
use crate::store::{self, MergeReport, Store};

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
    pub trials: usize,
    pub merge: MergeReport,
}

/// Fetches the selection from the server `url` names into the database `into`.
pub fn fetch(url: &str, into: &Path, req: &FetchRequest<'_>) -> anyhow::Result<FetchReport> {
    fetch_with_env(url, into, req, &super::connect::process_env())
}

/// [`fetch`] with the libpq variables given.
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
    let trials = {
        let store = Store::open(&tmp)?;
        copy_selection(&mut client, &store, req)
            .with_context(|| format!("fetching from {target}"))?
    };
    let merge = store::merge(&[tmp], into)?;
    Ok(FetchReport { trials, merge })
}

fn db_err(what: &str) -> impl Fn(postgres::Error) -> anyhow::Error + '_ {
    move |e| anyhow!("{what}: {}", describe(&e))
}

/// Streams `sql` (its first column the id, then `columns`) into `INSERT INTO table`.
fn copy_table(
    client: &mut postgres::Client,
    conn: &rusqlite::Connection,
    sql: &str,
    ids: &[i64],
    table: &str,
    id_columns: &[&str],
    columns: &[(&str, Kind)],
) -> anyhow::Result<u64> {
    let insert = format!(
        "INSERT INTO {table} ({}, {}) VALUES ({})",
        id_columns.join(", "),
        names(columns),
        (1..=id_columns.len() + columns.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut stmt = conn.prepare(&insert)?;
    let param: [&(dyn ToSql + Sync); 1] = [&ids];
    let mut rows = client
        .query_raw(sql, param)
        .map_err(|e| anyhow!("reading {table}: {}", describe(&e)))?;
    let mut n = 0;
    while let Some(row) = rows.next().map_err(db_err(table))? {
        let mut cells = Vec::with_capacity(id_columns.len() + columns.len());
        for i in 0..id_columns.len() {
            cells.push(Cell::Int(row.try_get(i).map_err(db_err(table))?));
        }
        for (j, (_, kind)) in columns.iter().enumerate() {
            cells
                .push(Cell::from_server(&row, id_columns.len() + j, *kind).map_err(db_err(table))?);
        }
        stmt.execute(rusqlite::params_from_iter(cells.iter()))
            .with_context(|| format!("writing {table}"))?;
        n += 1;
    }
    Ok(n)
}

fn copy_selection(
    client: &mut postgres::Client,
    store: &Store,
    req: &FetchRequest<'_>,
) -> anyhow::Result<usize> {
    let selected = client
        .query(
            "SELECT t.id, t.run_id FROM edgebench.trials t JOIN edgebench.runs r ON r.id = t.run_id \
             WHERE ($1::text IS NULL OR r.host = $1) \
               AND ($2::text IS NULL OR t.started_at >= $2::text::timestamptz) \
               AND ($3::text IS NULL OR t.workload = $3) \
             ORDER BY t.id",
            &[&req.host, &req.since, &req.workload],
        )
        .map_err(db_err("selecting trials (is --since a date such as 2025-02-01?)"))?;
    let trial_ids: Vec<i64> = selected.iter().map(|r| r.get(0)).collect();
    let mut run_ids: Vec<i64> = selected.iter().map(|r| r.get(1)).collect();
    run_ids.sort_unstable();
    run_ids.dedup();

    let conn = store.sqlite();
    let tx = conn.unchecked_transaction()?;
    copy_table(
        client,
        &tx,
        &format!(
            "SELECT r.id, {} FROM edgebench.runs r WHERE r.id = ANY($1)",
            server_selects(RUN_COLUMNS, "r")
        ),
        &run_ids,
        "runs",
        &["id"],
        RUN_COLUMNS,
    )?;
    copy_table(
        client,
        &tx,
        &format!(
            "SELECT x.run_id, {} FROM edgebench.run_provenance x WHERE x.run_id = ANY($1)",
            server_selects(RUN_PROVENANCE.columns, "x")
        ),
        &run_ids,
        RUN_PROVENANCE.name,
        &["run_id"],
        RUN_PROVENANCE.columns,
    )?;
    copy_table(
        client,
        &tx,
        &format!(
            "SELECT t.id, t.run_id, {} FROM edgebench.trials t WHERE t.id = ANY($1)",
            server_selects(TRIAL_COLUMNS, "t")
        ),
        &trial_ids,
        "trials",
        &["id", "run_id"],
        TRIAL_COLUMNS,
    )?;
    for table in TRIAL_TABLES {
        copy_table(
            client,
            &tx,
            &format!(
                "SELECT x.{}, {} FROM edgebench.{} x WHERE x.{} = ANY($1)",
                table.parent,
                server_selects(table.columns, "x"),
                table.name,
                table.parent
            ),
            &trial_ids,
            table.name,
            &[table.parent],
            table.columns,
        )?;
    }
    tx.commit()?;
    Ok(trial_ids.len())
}
