//! `edgebench fetch`: a selection of the server's trials into a local database. The rows
//! stream from the server straight into the target, under `merge`'s rules (matched by UUID, a
//! copy further along wins, ids remapped), in one transaction: fetching twice adds nothing,
//! and nothing is staged on disk on the way.
//!
//! Every row is checked against the store's rules as it arrives. A bad run or trial row is
//! left out before anything of it is written; a bad row of a child table (found after its
//! trial went in) rolls the transaction back, and the copy starts over without that trial.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;
use rusqlite::types::Value;

use super::connect::{describe, ConnInfo, Env};
use super::schema;
use super::tables::{
    server_selects, Cell, Kind, Table, RUN_COLUMNS, RUN_PROVENANCE, TRIAL_COLUMNS, TRIAL_TABLES,
};
use crate::store::validate::{self, Violation};
use crate::store::{
    ChildSink, IdMap, MergeReport, ParentSink, Refused, Store, TableCount, CHILD_TABLES,
};

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

/// Copies tried before giving up on a server whose rows keep changing under the fetch.
const MAX_ATTEMPTS: usize = 4;

/// [`fetch`] with the libpq variables given. A trial with a bad row (or a run with one, with
/// its trials) is left out and listed in the report's `merge.refused`; the rest is fetched.
/// A selection that matches nothing is an error, and nothing is written.
pub(crate) fn fetch_with_env(
    url: &str,
    into: &Path,
    req: &FetchRequest<'_>,
    env: &Env,
) -> anyhow::Result<FetchReport> {
    let info = ConnInfo::parse(url, env)?;
    let mut client = info.connect(env)?;
    let target = info.target();
    schema::check_readable(&mut client).with_context(|| format!("server {target}"))?;
    let selected = select(&mut client, req).with_context(|| format!("fetching from {target}"))?;
    let store = Store::open(into)?;
    let mut bad = Bad::default();
    for _ in 0..MAX_ATTEMPTS {
        let copied = copy_selection(&mut client, &store, &selected, &mut bad)
            .with_context(|| format!("fetching from {target}"))?;
        if let Some(tables) = copied {
            store.checkpoint();
            return Ok(FetchReport {
                trials: selected.len(),
                merge: MergeReport {
                    tables,
                    refused: bad.refused(&selected, &target.0),
                    ..MergeReport::default()
                },
            });
        }
        tracing::debug!("fetch: a child row refused after its trial went in; copying again");
    }
    bail!(
        "fetching from {target}: the server's rows kept changing ({MAX_ATTEMPTS} tries); \
         nothing fetched"
    )
}

fn db_err(what: &str) -> impl Fn(postgres::Error) -> anyhow::Error + '_ {
    move |e| anyhow!("{what}: {}", describe(&e))
}

/// One selected trial: (trial id, run id, its UUID, its run's UUID, its run's host), the
/// texts shortened on the server.
struct Selected {
    trial: i64,
    run: i64,
    uuid: Option<String>,
    run_uuid: Option<String>,
    host: Option<String>,
}

/// The runs and trials (server ids) left out, each with its first violation.
#[derive(Debug, Default)]
struct Bad {
    runs: HashMap<i64, Violation>,
    trials: HashMap<i64, Violation>,
}

impl Bad {
    fn refused(&self, selected: &[Selected], source: &str) -> Vec<Refused> {
        let mut out = Vec::new();
        for s in selected {
            let v = self.trials.get(&s.trial).or_else(|| self.runs.get(&s.run));
            if let Some(v) = v {
                out.push(Refused {
                    source: source.to_string(),
                    host: s.host.clone().unwrap_or_else(|| "?".into()),
                    run: s.run_uuid.clone().unwrap_or_else(|| s.run.to_string()),
                    trial: Some(s.uuid.clone().unwrap_or_else(|| s.trial.to_string())),
                    field: v.field.clone(),
                    problem: v.problem.clone(),
                });
            }
        }
        out
    }
}

/// The trials the request selects, oldest id first; none is an error naming the selection.
fn select(client: &mut postgres::Client, req: &FetchRequest<'_>) -> anyhow::Result<Vec<Selected>> {
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
    Ok(selected
        .iter()
        .map(|r| {
            let text = |i: usize| r.try_get::<_, Option<String>>(i).ok().flatten();
            Selected {
                trial: r.get(0),
                run: r.get(1),
                uuid: text(2),
                run_uuid: text(3),
                host: text(4),
            }
        })
        .collect())
}

/// A server value as SQLite stores it.
fn value(cell: Cell) -> Value {
    match cell {
        Cell::Int(Some(n)) => Value::Integer(n),
        Cell::Real(Some(f)) => Value::Real(f),
        Cell::Text(Some(t)) => Value::Text(t),
        Cell::Bool(Some(b)) => Value::Integer(i64::from(b)),
        Cell::Int(None) | Cell::Real(None) | Cell::Text(None) | Cell::Bool(None) => Value::Null,
    }
}

/// Streams `sql` (one `$1` parameter, `ids`; its first column the row's parent id, then
/// `columns`), checks each row against the store's rules and hands the good ones to `each`
/// as (parent id, values with the parent first); returns the parents of the bad rows, each
/// with its first violation. Rows of a parent in `skip` are not read further.
fn stream(
    client: &mut postgres::Client,
    table: &str,
    sql: &str,
    ids: &[i64],
    columns: &[(&str, Kind)],
    skip: &dyn Fn(i64) -> bool,
    mut each: impl FnMut(i64, Vec<Value>) -> rusqlite::Result<()>,
) -> anyhow::Result<HashMap<i64, Violation>> {
    let param: [&(dyn ToSql + Sync); 1] = [&ids];
    let mut rows = client
        .query_raw(sql, param)
        .map_err(|e| anyhow!("reading {table}: {}", describe(&e)))?;
    let mut bad = HashMap::new();
    while let Some(row) = rows.next().map_err(db_err(table))? {
        let parent: i64 = row.try_get(0).map_err(db_err(table))?;
        if skip(parent) || bad.contains_key(&parent) {
            continue;
        }
        let mut cells = Vec::with_capacity(columns.len());
        for (j, (_, kind)) in columns.iter().enumerate() {
            cells.push(Cell::from_server(&row, 1 + j, *kind).map_err(db_err(table))?);
        }
        let named: Vec<(&str, &dyn rusqlite::ToSql)> = columns
            .iter()
            .zip(&cells)
            .map(|((name, _), cell)| (*name, cell as &dyn rusqlite::ToSql))
            .collect();
        if let Err(v) = validate::check_values(table, &named) {
            bad.insert(parent, v);
            continue;
        }
        let mut values = Vec::with_capacity(cells.len() + 1);
        values.push(Value::Integer(parent));
        values.extend(cells.into_iter().map(value));
        each(parent, values).with_context(|| format!("writing {table}"))?;
    }
    Ok(bad)
}

/// The column names of a sink: the parent column, then `columns`.
fn sink_columns(parent: &str, columns: &[(&str, Kind)]) -> Vec<String> {
    std::iter::once(parent.to_string())
        .chain(columns.iter().map(|(n, _)| n.to_string()))
        .collect()
}

/// Row counts of the local tables a fetch writes.
fn counts(conn: &rusqlite::Connection, tables: &[&str]) -> rusqlite::Result<Vec<i64>> {
    tables
        .iter()
        .map(|t| conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0)))
        .collect()
}

/// One copy of the selection into `store`, in one transaction, leaving out what `bad` holds
/// and what breaks the store's rules (added to `bad`). Returns the tables' row counts before
/// and after, or None (the transaction rolled back) when a child table's bad row came after
/// its trial or run was written: then the caller copies again.
fn copy_selection(
    client: &mut postgres::Client,
    store: &Store,
    selected: &[Selected],
    bad: &mut Bad,
) -> anyhow::Result<Option<Vec<TableCount>>> {
    let trial_ids: Vec<i64> = selected.iter().map(|s| s.trial).collect();
    let mut run_ids: Vec<i64> = selected.iter().map(|s| s.run).collect();
    run_ids.sort_unstable();
    run_ids.dedup();

    let conn = store.sqlite();
    let tx = conn.unchecked_transaction()?;
    let mut tables = vec!["runs", "trials", RUN_PROVENANCE.name];
    tables.extend(TRIAL_TABLES.iter().map(|t| t.name));
    let before = counts(&tx, &tables)?;

    // Runs: a bad one is left out before it is written, its trials with it.
    let run_cols: Vec<String> = RUN_COLUMNS.iter().map(|(n, _)| n.to_string()).collect();
    let skip_runs: HashSet<i64> = bad.runs.keys().copied().collect();
    let mut sink = ParentSink::new(&tx, "runs", &run_cols, None)?;
    let found = stream(
        client,
        "runs",
        &format!(
            "SELECT r.id, {} FROM edgebench.runs r WHERE r.id = ANY($1) ORDER BY r.id",
            server_selects("runs", RUN_COLUMNS, "r")
        ),
        &run_ids,
        RUN_COLUMNS,
        &|id| skip_runs.contains(&id),
        |id, mut values| {
            values.remove(0);
            sink.push(id, values, None)
        },
    )?;
    bad.runs.extend(found);
    let runs = std::mem::take(&mut sink.map);
    drop(sink);

    let trial_cols = sink_columns("run_id", TRIAL_COLUMNS);
    let skip_trials: HashSet<i64> = bad.trials.keys().copied().collect();
    let mut sink = ParentSink::new(&tx, "trials", &trial_cols, Some("run_id"))?;
    let found = stream(
        client,
        "trials",
        &format!(
            "SELECT t.id, t.run_id, {} FROM edgebench.trials t WHERE t.id = ANY($1) ORDER BY t.id",
            server_selects("trials", TRIAL_COLUMNS, "t")
        ),
        &trial_ids,
        &[&[("run_id", Kind::Int)], TRIAL_COLUMNS].concat(),
        &|id| skip_trials.contains(&id),
        |id, mut values| {
            values.remove(0);
            sink.push(id, values, Some(&runs))
        },
    )?;
    bad.trials.extend(found);
    let trials = std::mem::take(&mut sink.map);
    drop(sink);

    // The child tables: a bad row here comes after its parent went in.
    let mut late = false;
    let children: Vec<(&Table, &IdMap, &[i64])> =
        std::iter::once((&RUN_PROVENANCE, &runs, &run_ids[..]))
            .chain(TRIAL_TABLES.iter().map(|t| (t, &trials, &trial_ids[..])))
            .collect();
    for (table, parents, ids) in children {
        let child = CHILD_TABLES
            .iter()
            .find(|c| c.name == table.name)
            .ok_or_else(|| anyhow!("{} has no merge rule", table.name))?;
        let cols = sink_columns(table.parent, table.columns);
        let Some(mut sink) = ChildSink::new(&tx, child, &cols, parents)? else {
            bail!("{} lacks its parent column", table.name);
        };
        let found = stream(
            client,
            table.name,
            &format!(
                "SELECT x.{}, {} FROM edgebench.{} x WHERE x.{} = ANY($1)",
                table.parent,
                server_selects(table.name, table.columns, "x"),
                table.name,
                table.parent
            ),
            ids,
            table.columns,
            &|id| !parents.contains_key(&id),
            |_, values| sink.push(values),
        )?;
        if !found.is_empty() {
            late = true;
            let into = match table.parent {
                "run_id" => &mut bad.runs,
                _ => &mut bad.trials,
            };
            for (id, v) in found {
                into.entry(id).or_insert(v);
            }
        }
    }
    if late {
        // Dropped without commit: rolled back.
        return Ok(None);
    }
    let after = counts(&tx, &tables)?;
    tx.commit()?;
    Ok(Some(
        tables
            .iter()
            .zip(before.iter().zip(&after))
            .map(|(t, (b, a))| TableCount {
                table: t.to_string(),
                before: *b,
                after: *a,
            })
            .collect(),
    ))
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
