//! `edgebench push`: every final trial the server lacks, one transaction per trial.
//!
//! The server decides what it holds: a trial goes up through
//! `INSERT ... ON CONFLICT (uuid) DO NOTHING RETURNING id`, so pushing twice, or two pushers
//! at once, add each trial once; server ids are identity columns, so boards never collide.
//! A trial's transaction holds its run (inserted with the first trial, its end updated while
//! the server has none), the trial row and all its child rows; `iterations` and
//! `power_samples` go through binary COPY. A cut push leaves whole trials only, and the next
//! push continues with the rest. The local ledger (`pushed`) is written after each commit and
//! corrected from the server's answer at the start of every push.

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::ToSql;
use serde::Serialize;

use super::connect::{describe, ConnInfo, Env, Target};
use super::schema;
use super::tables::{
    copy_type, names, placeholders, Cell, Kind, Table, RUN_COLUMNS, RUN_PROVENANCE, TRIAL_COLUMNS,
    TRIAL_DESCRIPTION, TRIAL_TABLES,
};
use crate::store::{FinalTrial, Store};

/// What one push sent.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PushReport {
    /// The server, without password.
    pub target: String,
    /// Runs the server saw for the first time.
    pub runs: u64,
    /// Runs whose end the server learnt.
    pub runs_ended: u64,
    pub trials: u64,
    /// Final trials the server already held.
    pub trials_already_there: u64,
    pub iterations: u64,
    pub power_samples: u64,
    /// Rows of the other tables (memory, rail energy, clocks, output, provenance).
    pub other_rows: u64,
    pub seconds: f64,
    /// Final trials still not on the server (0 after a complete push).
    pub waiting: u64,
}

impl PushReport {
    pub fn rows(&self) -> u64 {
        self.runs + self.trials + self.iterations + self.power_samples + self.other_rows
    }

    pub(crate) fn rows_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.rows() as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// One line for people and logs.
    pub fn text(&self) -> String {
        format!(
            "pushed to {}: {} runs ({} ended), {} trials ({} already there), {} iterations, {} \
             power samples, {} other rows in {:.2} s ({:.0} rows/s); {} trials wait",
            self.target,
            self.runs,
            self.runs_ended,
            self.trials,
            self.trials_already_there,
            self.iterations,
            self.power_samples,
            self.other_rows,
            self.seconds,
            self.rows_per_s(),
            self.waiting
        )
    }
}

/// The current time as RFC 3339 UTC, for the ledger.
fn now_text() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Pushes the database at `db` to the server `url` names (libpq rules, process environment).
pub fn push(url: &str, db: &Path) -> anyhow::Result<PushReport> {
    push_with_env(url, db, &super::connect::process_env())
}

/// [`push`] with the libpq variables given.
pub fn push_with_env(url: &str, db: &Path, env: &Env) -> anyhow::Result<PushReport> {
    let info = ConnInfo::parse(url, env)?;
    if !db.exists() {
        bail!(
            "no database at {}: give the board's results file with --db (or EDGEBENCH_DB)",
            db.display()
        );
    }
    let mut store = Store::open(db)?;
    let mut client = info.connect(env)?;
    let target = info.target();
    schema::ensure(&mut client).with_context(|| format!("server {target}"))?;
    push_store(&mut client, &mut store, &target)
}

/// The trials of `finals` the server holds.
fn held_on_server(
    client: &mut postgres::Client,
    finals: &[FinalTrial],
) -> anyhow::Result<HashSet<String>> {
    let mut held = HashSet::new();
    for chunk in finals.chunks(10_000) {
        let uuids: Vec<&str> = chunk.iter().map(|t| t.trial_uuid.as_str()).collect();
        let rows = client
            .query(
                "SELECT uuid FROM edgebench.trials WHERE uuid = ANY($1)",
                &[&uuids],
            )
            .map_err(|e| anyhow!("asking the server which trials it holds: {}", describe(&e)))?;
        held.extend(rows.into_iter().map(|r| r.get::<_, String>(0)));
    }
    Ok(held)
}

fn push_store(
    client: &mut postgres::Client,
    store: &mut Store,
    target: &Target,
) -> anyhow::Result<PushReport> {
    let started = Instant::now();
    let mut report = PushReport {
        target: target.0.clone(),
        ..PushReport::default()
    };
    let finals = store.final_trials()?;
    let held = held_on_server(client, &finals)?;
    // The server's truth replaces the ledger's.
    let (there, missing): (Vec<&FinalTrial>, Vec<&FinalTrial>) =
        finals.iter().partition(|t| held.contains(&t.trial_uuid));
    let uuids = |ts: &[&FinalTrial]| ts.iter().map(|t| t.trial_uuid.clone()).collect::<Vec<_>>();
    store.mark_pushed(&target.0, &uuids(&there), &now_text())?;
    store.unmark_pushed(&target.0, &uuids(&missing))?;
    report.trials_already_there = there.len() as u64;

    let mut statements = Statements::prepare(client)?;
    let mut provenance_sent: HashSet<i64> = HashSet::new();
    for trial in missing {
        let sent = push_trial(client, &mut statements, store, trial, &provenance_sent)
            .with_context(|| {
                format!(
                    "pushing trial {} to {target}; trials already committed stay on the server \
                     and the next push continues",
                    trial.trial_uuid
                )
            })?;
        if let Some(sent) = sent {
            report.runs += u64::from(sent.new_run);
            report.trials += 1;
            report.iterations += sent.iterations;
            report.power_samples += sent.power_samples;
            report.other_rows += sent.other_rows;
            provenance_sent.insert(trial.run_id);
        } else {
            report.trials_already_there += 1;
        }
        store.mark_pushed(
            &target.0,
            std::slice::from_ref(&trial.trial_uuid),
            &now_text(),
        )?;
    }
    report.runs_ended = update_run_ends(client, store)?;
    report.seconds = started.elapsed().as_secs_f64();
    report.waiting = store.unpushed_count(&target.0)?;
    Ok(report)
}

/// The statements every trial uses, prepared once.
struct Statements {
    run: postgres::Statement,
    run_id: postgres::Statement,
    trial: postgres::Statement,
    provenance: postgres::Statement,
    children: Vec<Option<postgres::Statement>>,
}

impl Statements {
    fn prepare(client: &mut postgres::Client) -> anyhow::Result<Statements> {
        let mut prep = |sql: &str| {
            client
                .prepare(sql)
                .map_err(|e| anyhow!("preparing {sql:?}: {}", describe(&e)))
        };
        let run = prep(&format!(
            "INSERT INTO edgebench.runs ({}) VALUES ({}) ON CONFLICT (uuid) DO UPDATE \
             SET status = EXCLUDED.status, ended_at = EXCLUDED.ended_at \
             WHERE runs.ended_at IS NULL AND EXCLUDED.ended_at IS NOT NULL \
             RETURNING id",
            names(RUN_COLUMNS),
            placeholders(RUN_COLUMNS, 1)
        ))?;
        let run_id = prep("SELECT id FROM edgebench.runs WHERE uuid = $1")?;
        let trial = prep(&format!(
            "INSERT INTO edgebench.trials (run_id, {}, {}) VALUES ($1, {}, {}) \
             ON CONFLICT (uuid) DO NOTHING RETURNING id",
            names(TRIAL_COLUMNS),
            names(TRIAL_DESCRIPTION),
            placeholders(TRIAL_COLUMNS, 2),
            placeholders(TRIAL_DESCRIPTION, 2 + TRIAL_COLUMNS.len())
        ))?;
        let provenance = prep(&insert_sql(&RUN_PROVENANCE))?;
        let children = TRIAL_TABLES
            .iter()
            .map(|t| (!t.bulk).then(|| prep(&insert_sql(t))).transpose())
            .collect::<anyhow::Result<_>>()?;
        Ok(Statements {
            run,
            run_id,
            trial,
            provenance,
            children,
        })
    }
}

/// A row-by-row insert for a small child table; a row already there is kept.
fn insert_sql(t: &Table) -> String {
    format!(
        "INSERT INTO edgebench.{} ({}, {}) VALUES ($1, {}) ON CONFLICT DO NOTHING",
        t.name,
        t.parent,
        names(t.columns),
        placeholders(t.columns, 2)
    )
}

/// What one trial's transaction sent.
struct Sent {
    new_run: bool,
    iterations: u64,
    power_samples: u64,
    other_rows: u64,
}

/// The cells of the rows of `sql` (one `?1` parameter) in SQLite.
fn local_rows(
    store: &Store,
    sql: &str,
    id: i64,
    columns: &[(&str, Kind)],
    mut each: impl FnMut(Vec<Cell>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let conn = store.sqlite();
    let mut stmt = conn
        .prepare_cached(sql)
        .with_context(|| format!("reading {}: {sql}", store.path().display()))?;
    let mut rows = stmt.query([id])?;
    while let Some(row) = rows.next()? {
        let cells = columns
            .iter()
            .enumerate()
            .map(|(i, (_, kind))| Cell::from_sqlite(row, i, *kind))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        each(cells)?;
    }
    Ok(())
}

/// Every row of `sql` for `id`, collected.
fn local_all(
    store: &Store,
    sql: &str,
    id: i64,
    columns: &[(&str, Kind)],
) -> anyhow::Result<Vec<Vec<Cell>>> {
    let mut rows = Vec::new();
    local_rows(store, sql, id, columns, |cells| {
        rows.push(cells);
        Ok(())
    })?;
    Ok(rows)
}

fn params(cells: &[Cell]) -> Vec<&(dyn ToSql + Sync)> {
    cells.iter().map(|c| c as &(dyn ToSql + Sync)).collect()
}

fn db_err(what: &str) -> impl Fn(postgres::Error) -> anyhow::Error + '_ {
    move |e| anyhow!("{what}: {}", describe(&e))
}

/// [`TRIAL_DESCRIPTION`] of a trial: what its workload says of its rows; nulls for a workload
/// this build does not know (the server's views then fall back on the workload's name).
fn description(trial_cells: &[Cell]) -> [Cell; 3] {
    let workload = TRIAL_COLUMNS
        .iter()
        .position(|(name, _)| *name == "workload")
        .and_then(|i| match &trial_cells[i] {
            Cell::Text(Some(w)) => Some(crate::record::WorkloadKind::from(w.as_str())),
            _ => None,
        });
    let items = workload
        .and_then(|w| crate::workloads::by_kind(&w).ok())
        .map(|w| w.profile().items);
    [
        Cell::Text(items.map(|i| i.item.name().to_string())),
        Cell::Text(items.map(|i| i.per_iteration.name().to_string())),
        Cell::Bool(items.map(|i| i.over_dataset)),
    ]
}

/// One trial in one transaction; `None` when the server already holds it.
fn push_trial(
    client: &mut postgres::Client,
    st: &mut Statements,
    store: &Store,
    trial: &FinalTrial,
    provenance_sent: &HashSet<i64>,
) -> anyhow::Result<Option<Sent>> {
    let mut tx = client.transaction().map_err(db_err("BEGIN"))?;
    let run = local_all(
        store,
        &format!("SELECT {} FROM runs WHERE id = ?1", names(RUN_COLUMNS)),
        trial.run_id,
        RUN_COLUMNS,
    )?
    .pop()
    .ok_or_else(|| anyhow!("run {} of the trial is missing", trial.run_id))?;
    // Known before the upsert, so counting the runs the server lacked needs no system column.
    let known = tx
        .query_opt(&st.run_id, &[&run[0]])
        .map_err(db_err("finding the run"))?
        .map(|row| row.get::<_, i64>(0));
    let upserted = tx
        .query_opt(&st.run, &params(&run))
        .map_err(db_err("inserting the run"))?
        .map(|row| row.get::<_, i64>(0));
    let (run_id, new_run) = match (upserted, known) {
        (Some(id), known) => (id, known.is_none()),
        (None, Some(id)) => (id, false),
        (None, None) => {
            let row = tx
                .query_one(&st.run_id, &[&run[0]])
                .map_err(db_err("finding the run"))?;
            (row.get::<_, i64>(0), false)
        }
    };
    let mut sent = Sent {
        new_run,
        iterations: 0,
        power_samples: 0,
        other_rows: 0,
    };
    if !provenance_sent.contains(&trial.run_id) {
        let rows = local_all(
            store,
            &format!(
                "SELECT {} FROM run_provenance WHERE run_id = ?1",
                names(RUN_PROVENANCE.columns)
            ),
            trial.run_id,
            RUN_PROVENANCE.columns,
        )?;
        for cells in rows {
            let mut p: Vec<&(dyn ToSql + Sync)> = vec![&run_id];
            p.extend(params(&cells));
            sent.other_rows += tx
                .execute(&st.provenance, &p)
                .map_err(db_err("inserting provenance"))?;
        }
    }

    let trial_cells = local_all(
        store,
        &format!("SELECT {} FROM trials WHERE id = ?1", names(TRIAL_COLUMNS)),
        trial.trial_id,
        TRIAL_COLUMNS,
    )?
    .pop()
    .ok_or_else(|| anyhow!("trial {} vanished", trial.trial_id))?;
    let description = description(&trial_cells);
    let mut p: Vec<&(dyn ToSql + Sync)> = vec![&run_id];
    p.extend(params(&trial_cells));
    p.extend(params(&description));
    let Some(row) = tx
        .query_opt(&st.trial, &p)
        .map_err(db_err("inserting the trial"))?
    else {
        // Another pusher committed it first.
        tx.rollback().map_err(db_err("ROLLBACK"))?;
        return Ok(None);
    };
    let server_trial: i64 = row.get(0);

    for (table, statement) in TRIAL_TABLES.iter().zip(&st.children) {
        let select = format!(
            "SELECT {} FROM {} WHERE {} = ?1",
            names(table.columns),
            table.name,
            table.parent
        );
        let n = match statement {
            None => copy_rows(&mut tx, store, table, &select, trial.trial_id, server_trial)?,
            Some(statement) => {
                let mut n = 0;
                for cells in local_all(store, &select, trial.trial_id, table.columns)? {
                    let mut p: Vec<&(dyn ToSql + Sync)> = vec![&server_trial];
                    p.extend(params(&cells));
                    n += tx
                        .execute(statement, &p)
                        .map_err(|e| anyhow!("inserting into {}: {}", table.name, describe(&e)))?;
                }
                n
            }
        };
        match table.name {
            "iterations" => sent.iterations += n,
            "power_samples" => sent.power_samples += n,
            _ => sent.other_rows += n,
        }
    }
    tx.commit().map_err(db_err("COMMIT"))?;
    Ok(Some(sent))
}

/// A trial's rows of a large table through binary COPY.
fn copy_rows(
    tx: &mut postgres::Transaction<'_>,
    store: &Store,
    table: &Table,
    select: &str,
    local_trial: i64,
    server_trial: i64,
) -> anyhow::Result<u64> {
    let copy = format!(
        "COPY edgebench.{} ({}, {}) FROM STDIN (FORMAT binary)",
        table.name,
        table.parent,
        names(table.columns)
    );
    let sink = tx
        .copy_in(&copy)
        .map_err(|e| anyhow!("starting COPY into {}: {}", table.name, describe(&e)))?;
    let mut types = vec![postgres::types::Type::INT8];
    types.extend(table.columns.iter().map(|(_, k)| copy_type(*k)));
    let mut writer = BinaryCopyInWriter::new(sink, &types);
    let parent = Cell::Int(Some(server_trial));
    local_rows(store, select, local_trial, table.columns, |cells| {
        let mut p: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(cells.len() + 1);
        p.push(&parent);
        p.extend(params(&cells));
        writer
            .write(&p)
            .map_err(|e| anyhow!("COPY into {}: {}", table.name, describe(&e)))
    })?;
    writer
        .finish()
        .map_err(|e| anyhow!("finishing COPY into {}: {}", table.name, describe(&e)))
}

/// Runs that ended locally while the server still has them running get their end.
fn update_run_ends(client: &mut postgres::Client, store: &Store) -> anyhow::Result<u64> {
    let conn = store.sqlite();
    let mut stmt = conn
        .prepare("SELECT uuid, status, ended_at FROM runs WHERE ended_at IS NOT NULL")
        .context("reading run ends")?;
    let ended = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if ended.is_empty() {
        return Ok(0);
    }
    let (uuids, rest): (Vec<String>, Vec<(String, String)>) =
        ended.into_iter().map(|(u, s, e)| (u, (s, e))).unzip();
    let (statuses, ends): (Vec<String>, Vec<String>) = rest.into_iter().unzip();
    let n = client
        .execute(
            "UPDATE edgebench.runs r SET status = u.status, ended_at = u.ended_at::timestamptz \
             FROM unnest($1::text[], $2::text[], $3::text[]) AS u(uuid, status, ended_at) \
             WHERE r.uuid = u.uuid AND r.ended_at IS NULL",
            &[&uuids, &statuses, &ends],
        )
        .map_err(db_err("updating the ends of runs"))?;
    Ok(n)
}

/// Final trials of the database at `db` that the ledger does not list for `url`'s server: the
/// daemon's backlog (the metrics gauge `edgebench_sync_backlog_trials` reads this number).
/// A URL that cannot be read names no server that could hold a trial: then every final trial
/// waits.
pub fn backlog(url: &str, db: &Path) -> anyhow::Result<u64> {
    let target = ConnInfo::parse(url, &super::connect::process_env())
        .map(|info| info.target().0)
        .unwrap_or_else(|_| super::connect::mask_url(url));
    let store = Store::open_readonly(db)?;
    Ok(store.unpushed_count(&target)?)
}
