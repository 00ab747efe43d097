//! `edgebench merge`: the set union of edgebench databases from many boards.
//!
//! Rows are matched by what is global, never by local row ids: runs by `runs.uuid`, trials by
//! `trials.uuid`, and child rows by their parent's UUID plus the child table's own unique key
//! (`iterations`: the step; `trial_memory`: none, one row per trial; `trial_rail_energy`: the
//! rail; `trial_output`: the stream). `power_samples` has no unique key, so a trial's samples are taken whole from the
//! winning copy (see below). Local ids are remapped.
//!
//! **Which copy of a run or trial wins.** Snapshots of one board taken at different times hold
//! the same UUIDs in different states. A source row replaces the target's row only when it is
//! further along: for trials, a final status (anything but `running`) beats `running`, then
//! more `iterations_done` wins; for runs, a final status beats `running`, then having an
//! `ended_at` wins. On a tie the target is kept, which makes a repeated merge change nothing.
//! Child rows of a trial (or run) whose source copy won are written with `INSERT OR REPLACE`
//! (the winner's memory record replaces the older one); otherwise with `INSERT OR IGNORE`
//! (they only fill gaps).
//!
//! Sources are never written: each is first copied with the backup API into a temporary
//! directory, and a copy with an older schema is migrated there. All sources are checked
//! before the target is opened, and the whole merge is one transaction on the target, so a
//! refused or failed merge leaves the target as it was.
//!
//! **Rows from elsewhere are checked at the door.** Every row of a source copy is checked
//! against the store's rules (`validate`: types, ranges, statuses, JSON shapes, lengths); a
//! trial with a bad row of its own or of a child table is left out whole, a run with a bad row
//! with all its trials, and [`MergeReport::refused`] names each with its board and field. The
//! rest is merged, so a file or server holding one bad row never makes the target unreadable.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::types::Value;
use rusqlite::{params_from_iter, Connection, OptionalExtension, TransactionBehavior};
use serde::Serialize;

use super::error::{hint, sql_err, Result, StoreError};
use super::handle::Store;
use super::snapshot::{backup_into, open_source};
use super::validate::{self, excerpt, Violation};

/// Which kind of row a child table hangs off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parent {
    Run,
    Trial,
}

/// How a child table's rows are matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Match {
    /// The table has a UNIQUE or PRIMARY KEY constraint over its natural key including the
    /// parent column (e.g. `(trial_id, step)`): rows are matched one by one.
    Keyed,
    /// No unique key (e.g. `power_samples`): a parent's rows are a set taken whole from the
    /// winning copy; the target's set is deleted first, a losing copy adds nothing.
    WholeSet,
}

/// A table whose rows belong to one run or one trial.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildTable {
    pub name: &'static str,
    pub parent: Parent,
    /// The column holding the parent's local id (remapped on the way in).
    pub column: &'static str,
    /// The table's own local INTEGER PRIMARY KEY, if any: not copied, the target assigns one.
    pub local_id: Option<&'static str>,
    pub matching: Match,
}

/// Every per-run/per-trial table, in insertion order. A table added by a later schema version
/// is merged by adding one entry here; tables missing from a file are skipped.
pub(crate) const CHILD_TABLES: &[ChildTable] = &[
    ChildTable {
        name: "iterations",
        parent: Parent::Trial,
        column: "trial_id",
        local_id: None,
        matching: Match::Keyed,
    },
    ChildTable {
        name: "trial_memory",
        parent: Parent::Trial,
        column: "trial_id",
        local_id: None,
        matching: Match::Keyed,
    },
    ChildTable {
        name: "trial_rail_energy",
        parent: Parent::Trial,
        column: "trial_id",
        local_id: None,
        matching: Match::Keyed,
    },
    ChildTable {
        name: "trial_clocks",
        parent: Parent::Trial,
        column: "trial_id",
        local_id: None,
        matching: Match::Keyed,
    },
    ChildTable {
        name: "trial_output",
        parent: Parent::Trial,
        column: "trial_id",
        local_id: None,
        matching: Match::Keyed,
    },
    ChildTable {
        name: "run_provenance",
        parent: Parent::Run,
        column: "run_id",
        local_id: None,
        matching: Match::Keyed,
    },
    ChildTable {
        name: "power_samples",
        parent: Parent::Trial,
        column: "trial_id",
        local_id: None,
        matching: Match::WholeSet,
    },
];

/// Row counts of one table in the target before and after the merge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableCount {
    pub table: String,
    pub before: i64,
    pub after: i64,
}

/// What a merge did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MergeReport {
    pub tables: Vec<TableCount>,
    /// Runs and trials already in the target that a source replaced (it was further along).
    pub runs_updated: usize,
    pub trials_updated: usize,
    /// Trials (and runs) of the sources left out because a row of theirs breaks a rule.
    pub refused: Vec<Refused>,
}

/// A trial, or a run with all its trials, that a merge left out: a row of it breaks one of
/// the store's rules.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refused {
    /// Where the rows came from: the source file, or the server `fetch` read.
    pub source: String,
    /// The run's host (the board), shortened for messages.
    pub host: String,
    /// The run's UUID, shortened for messages.
    pub run: String,
    /// The trial's UUID; None when the run itself was refused and holds no trial.
    pub trial: Option<String>,
    /// `table.column` of the bad value.
    pub field: String,
    pub problem: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.trial {
            Some(t) => write!(f, "trial {t} of board {} (run {})", self.host, self.run)?,
            None => write!(f, "run {} of board {}", self.run, self.host)?,
        }
        write!(f, " left out: {}: {}", self.field, self.problem)
    }
}

/// Merges every source into `into` (created if absent). See the module docs for the rules.
pub fn merge(sources: &[PathBuf], into: &Path) -> Result<MergeReport> {
    let dir = into
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|error| StoreError::Io {
        path: into.to_path_buf(),
        error,
    })?;
    let tmp = tempfile::Builder::new()
        .prefix(".edgebench-merge-")
        .tempdir_in(dir)
        .map_err(|error| StoreError::Io {
            path: into.to_path_buf(),
            error,
        })?;

    // 1. Check and copy every source before the target is touched.
    let mut copies = Vec::with_capacity(sources.len());
    for (i, src) in sources.iter().enumerate() {
        let (conn, _version) = open_source(src)?;
        let copy = tmp.path().join(format!("source-{i}.db"));
        backup_into(&conn, src, &copy)?;
        drop(conn);
        // Migrates an older copy; the source file itself is never opened for writing.
        let store = Store::open(&copy).map_err(|e| match e {
            StoreError::Migration { version, error, .. } => StoreError::Migration {
                path: src.clone(),
                version,
                error,
            },
            other => other,
        })?;
        copies.push((src.clone(), store));
    }

    // 2. One transaction on the target.
    let mut target = Store::open(into)?;
    let path = target.path.clone();
    let tx = target
        .conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql_err(&path))?;
    let mut tables = vec!["runs", "trials"];
    tables.extend(CHILD_TABLES.iter().map(|c| c.name));
    let tables: Vec<&str> = tables
        .into_iter()
        .filter(|t| table_exists(&tx, t).unwrap_or(false))
        .collect();
    let counts = |c: &Connection| -> rusqlite::Result<Vec<i64>> {
        tables
            .iter()
            .map(|t| {
                c.query_row(
                    &format!("SELECT count(*) AS n FROM {}", ident(t)),
                    [],
                    |r| r.get("n"),
                )
            })
            .collect()
    };
    let before = counts(&tx).map_err(sql_err(&path))?;
    let mut report = MergeReport::default();
    for (src, store) in &copies {
        let sql = |error| StoreError::Sqlite {
            path: src.clone(),
            hint: hint(&error),
            error,
        };
        let bad = BadRows::find(&store.conn).map_err(sql)?;
        report
            .refused
            .extend(bad.describe(&store.conn, src).map_err(sql)?);
        merge_one(&tx, &store.conn, &bad, &mut report).map_err(sql)?;
    }
    let after = counts(&tx).map_err(sql_err(&path))?;
    tx.commit().map_err(sql_err(&path))?;
    target.checkpoint();
    report.tables = tables
        .iter()
        .zip(before.iter().zip(&after))
        .map(|(t, (b, a))| TableCount {
            table: t.to_string(),
            before: *b,
            after: *a,
        })
        .collect();
    Ok(report)
}

fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn table_exists(c: &Connection, name: &str) -> rusqlite::Result<bool> {
    c.query_row(
        "SELECT count(*) > 0 AS found FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get("found"),
    )
}

fn columns(c: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut st = c.prepare(&format!("PRAGMA table_info({})", ident(table)))?;
    let cols = st
        .query_map([], |r| r.get::<_, String>("name"))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(cols)
}

/// Columns present in both files, minus `skip`, in the target's order.
fn shared_columns(
    dst: &Connection,
    src: &Connection,
    table: &str,
    skip: &[&str],
) -> rusqlite::Result<Vec<String>> {
    let theirs = columns(src, table)?;
    Ok(columns(dst, table)?
        .into_iter()
        .filter(|c| theirs.contains(c) && !skip.contains(&c.as_str()))
        .collect())
}

/// Local id in the source -> (local id in the target, did the source's copy win).
pub(crate) type IdMap = HashMap<i64, (i64, bool)>;

/// How far along a run or trial row is; a higher rank wins.
fn rank(table: &str, status: &str, progress: &Value) -> (bool, i64) {
    let final_ = status != "running";
    let n = match (table, progress) {
        ("trials", Value::Integer(n)) => *n,
        ("runs", Value::Null) => 0,
        ("runs", _) => 1,
        _ => 0,
    };
    (final_, n)
}

/// Merges `runs` or `trials` rows one at a time into a target under the rules above (few
/// rows; needs the ranking): what [`merge`] does for each source, and `fetch` for a server's
/// rows as they arrive.
pub(crate) struct ParentSink<'c> {
    table: &'static str,
    dst: &'c Connection,
    uuid_i: usize,
    status_i: usize,
    progress_i: usize,
    progress_col: &'static str,
    remap_i: Option<usize>,
    find: rusqlite::Statement<'c>,
    insert: rusqlite::Statement<'c>,
    update: rusqlite::Statement<'c>,
    /// Source id -> (target id, whether the source's copy won).
    pub(crate) map: IdMap,
    /// Target rows a source row replaced.
    pub(crate) updated: usize,
}

impl<'c> ParentSink<'c> {
    /// A sink for `table` (`runs` or `trials`) rows holding `cols` (the parent column
    /// `remap_col`, if any, holds the source's parent id).
    pub(crate) fn new(
        dst: &'c Connection,
        table: &'static str,
        cols: &[String],
        remap_col: Option<&str>,
    ) -> rusqlite::Result<ParentSink<'c>> {
        let pos = |name: &str| {
            cols.iter().position(|c| c == name).ok_or_else(|| {
                rusqlite::Error::InvalidColumnName(format!("{table}.{name} missing"))
            })
        };
        let progress_col = if table == "trials" {
            "iterations_done"
        } else {
            "ended_at"
        };
        let list = cols.iter().map(|c| ident(c)).collect::<Vec<_>>().join(", ");
        let marks = (1..=cols.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sets = cols
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{} = ?{}", ident(c), i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        let t = ident(table);
        Ok(ParentSink {
            table,
            dst,
            uuid_i: pos("uuid")?,
            status_i: pos("status")?,
            progress_i: pos(progress_col)?,
            progress_col,
            remap_i: remap_col.map(pos).transpose()?,
            find: dst.prepare(&format!(
                "SELECT id, status, {} FROM {t} WHERE uuid = ?1",
                ident(progress_col)
            ))?,
            insert: dst.prepare(&format!("INSERT INTO {t} ({list}) VALUES ({marks})"))?,
            update: dst.prepare(&format!(
                "UPDATE {t} SET {sets} WHERE id = ?{}",
                cols.len() + 1
            ))?,
            map: IdMap::new(),
            updated: 0,
        })
    }

    /// One source row: its id and its values in the sink's column order; `parents` remaps
    /// the parent column (a row whose parent is not there is skipped).
    pub(crate) fn push(
        &mut self,
        src_id: i64,
        mut values: Vec<Value>,
        parents: Option<&IdMap>,
    ) -> rusqlite::Result<()> {
        if let (Some(i), Some(m)) = (self.remap_i, parents) {
            match &values[i] {
                Value::Integer(p) => match m.get(p) {
                    Some((dst_id, _)) => values[i] = Value::Integer(*dst_id),
                    None => return Ok(()), // orphan (impossible with foreign keys on)
                },
                _ => return Ok(()),
            }
        }
        let uuid = values[self.uuid_i].clone();
        let status = match &values[self.status_i] {
            Value::Text(s) => s.clone(),
            _ => String::new(),
        };
        let mine = rank(self.table, &status, &values[self.progress_i]);
        let progress_col = self.progress_col;
        let existing = self
            .find
            .query_row([&uuid], |r| {
                Ok((
                    r.get::<_, i64>("id")?,
                    r.get::<_, String>("status")?,
                    r.get::<_, Value>(progress_col)?,
                ))
            })
            .optional()?;
        let entry = match existing {
            None => {
                self.insert.execute(params_from_iter(values.iter()))?;
                (self.dst.last_insert_rowid(), true)
            }
            Some((dst_id, st, progress)) if mine > rank(self.table, &st, &progress) => {
                values.push(Value::Integer(dst_id));
                self.update.execute(params_from_iter(values.iter()))?;
                self.updated += 1;
                (dst_id, true)
            }
            Some((dst_id, _, _)) => (dst_id, false),
        };
        self.map.insert(src_id, entry);
        Ok(())
    }
}

/// Merges `runs` or `trials` of `src`, remapping `remap_col`; the rows of `refused` (source
/// ids) are left out.
fn merge_parent(
    dst: &Connection,
    src: &Connection,
    table: &'static str,
    remap: Option<(&str, &IdMap)>,
    refused: &HashMap<i64, Violation>,
    updated: &mut usize,
) -> rusqlite::Result<IdMap> {
    let cols = shared_columns(dst, src, table, &["id"])?;
    let mut sink = ParentSink::new(dst, table, &cols, remap.map(|(c, _)| c))?;
    let list = cols.iter().map(|c| ident(c)).collect::<Vec<_>>().join(", ");
    let mut read = src.prepare(&format!(
        "SELECT id, {list} FROM {} ORDER BY id",
        ident(table)
    ))?;
    let mut rows = read.query([])?;
    while let Some(row) = rows.next()? {
        let src_id: i64 = row.get("id")?;
        if refused.contains_key(&src_id) {
            continue;
        }
        let values = cols
            .iter()
            .map(|c| row.get::<_, Value>(c.as_str()))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        sink.push(src_id, values, remap.map(|(_, m)| m))?;
    }
    *updated += sink.updated;
    Ok(sink.map)
}

/// Writes one child table's rows into a target, remapping the parent column: rows of a
/// parent whose source copy won replace the target's (a whole set is cleared first), others
/// only fill gaps.
pub(crate) struct ChildSink<'c, 'p> {
    parent_i: usize,
    parents: &'p IdMap,
    matching: Match,
    replace: rusqlite::Statement<'c>,
    ignore: rusqlite::Statement<'c>,
}

impl<'c, 'p> ChildSink<'c, 'p> {
    /// A sink for `child` rows holding `cols` (the parent column among them), the parents
    /// merged as `parents`; None when `cols` lacks the parent column.
    pub(crate) fn new(
        dst: &'c Connection,
        child: &ChildTable,
        cols: &[String],
        parents: &'p IdMap,
    ) -> rusqlite::Result<Option<ChildSink<'c, 'p>>> {
        let Some(parent_i) = cols.iter().position(|c| c == child.column) else {
            return Ok(None);
        };
        let list = cols.iter().map(|c| ident(c)).collect::<Vec<_>>().join(", ");
        let marks = (1..=cols.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let t = ident(child.name);
        if child.matching == Match::WholeSet {
            let mut clear = dst.prepare(&format!(
                "DELETE FROM {t} WHERE {} = ?1",
                ident(child.column)
            ))?;
            for (dst_id, _) in parents.values().filter(|(_, won)| *won) {
                clear.execute([dst_id])?;
            }
        }
        Ok(Some(ChildSink {
            parent_i,
            parents,
            matching: child.matching,
            replace: dst.prepare(&format!(
                "INSERT OR REPLACE INTO {t} ({list}) VALUES ({marks})"
            ))?,
            ignore: dst.prepare(&format!(
                "INSERT OR IGNORE INTO {t} ({list}) VALUES ({marks})"
            ))?,
        }))
    }

    /// One source row, its values in the sink's column order.
    pub(crate) fn push(&mut self, mut values: Vec<Value>) -> rusqlite::Result<()> {
        let Value::Integer(p) = values[self.parent_i] else {
            return Ok(());
        };
        let Some(&(dst_id, won)) = self.parents.get(&p) else {
            return Ok(());
        };
        values[self.parent_i] = Value::Integer(dst_id);
        if self.matching == Match::WholeSet && !won {
            return Ok(());
        }
        if won {
            self.replace.execute(params_from_iter(values.iter()))?;
        } else {
            self.ignore.execute(params_from_iter(values.iter()))?;
        }
        Ok(())
    }
}

/// Copies one child table's rows, remapping the parent column.
fn merge_child(
    dst: &Connection,
    src: &Connection,
    child: &ChildTable,
    parents: &IdMap,
) -> rusqlite::Result<()> {
    if !table_exists(dst, child.name)? || !table_exists(src, child.name)? {
        return Ok(());
    }
    let skip: Vec<&str> = child.local_id.into_iter().collect();
    let cols = shared_columns(dst, src, child.name, &skip)?;
    let Some(mut sink) = ChildSink::new(dst, child, &cols, parents)? else {
        return Ok(());
    };
    let list = cols.iter().map(|c| ident(c)).collect::<Vec<_>>().join(", ");
    let mut read = src.prepare(&format!("SELECT {list} FROM {}", ident(child.name)))?;
    let mut rows = read.query([])?;
    while let Some(row) = rows.next()? {
        let values = cols
            .iter()
            .map(|c| row.get::<_, Value>(c.as_str()))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        sink.push(values)?;
    }
    Ok(())
}

fn merge_one(
    dst: &Connection,
    src: &Connection,
    bad: &BadRows,
    report: &mut MergeReport,
) -> rusqlite::Result<()> {
    let runs = merge_parent(dst, src, "runs", None, &bad.runs, &mut report.runs_updated)?;
    let trials = merge_parent(
        dst,
        src,
        "trials",
        Some(("run_id", &runs)),
        &bad.trials,
        &mut report.trials_updated,
    )?;
    for child in CHILD_TABLES {
        let parents = match child.parent {
            Parent::Run => &runs,
            Parent::Trial => &trials,
        };
        merge_child(dst, src, child, parents)?;
    }
    Ok(())
}

/// The runs and trials of a source (by its local ids) that a row breaking a rule leaves out,
/// each with the first violation found.
#[derive(Debug, Default)]
struct BadRows {
    runs: HashMap<i64, Violation>,
    trials: HashMap<i64, Violation>,
}

impl BadRows {
    /// Reads every row of every table once.
    fn find(src: &Connection) -> rusqlite::Result<BadRows> {
        let mut bad = BadRows::default();
        scan(src, "runs", "id", |id, v| {
            bad.runs.entry(id).or_insert(v);
        })?;
        scan(src, "trials", "id", |id, v| {
            bad.trials.entry(id).or_insert(v);
        })?;
        for child in CHILD_TABLES {
            if !table_exists(src, child.name)? {
                continue;
            }
            let into = match child.parent {
                Parent::Run => &mut bad.runs,
                Parent::Trial => &mut bad.trials,
            };
            scan(src, child.name, child.column, |id, v| {
                into.entry(id).or_insert(v);
            })?;
        }
        // A refused run takes its trials with it.
        if !bad.runs.is_empty() {
            let mut st = src.prepare("SELECT id, run_id FROM trials")?;
            let mut rows = st.query([])?;
            while let Some(row) = rows.next()? {
                let (Ok(id), Ok(run)) = (row.get::<_, i64>(0), row.get::<_, i64>(1)) else {
                    continue;
                };
                if let Some(v) = bad.runs.get(&run) {
                    bad.trials.entry(id).or_insert_with(|| v.clone());
                }
            }
        }
        Ok(bad)
    }

    /// One [`Refused`] per trial left out, and per run left out without a trial.
    fn describe(&self, src: &Connection, source: &Path) -> rusqlite::Result<Vec<Refused>> {
        let source = source.display().to_string();
        let mut out = Vec::new();
        let text = |row: &rusqlite::Row<'_>, i: usize| -> String {
            match row.get_ref(i) {
                Ok(rusqlite::types::ValueRef::Text(t)) => {
                    let t = String::from_utf8_lossy(t);
                    let short: String = t.chars().take(64).collect();
                    if short.len() < t.len() {
                        format!("{short}...")
                    } else {
                        short
                    }
                }
                Ok(rusqlite::types::ValueRef::Null) | Err(_) => "?".into(),
                Ok(other) => excerpt(&format!("{other:?}")),
            }
        };
        let mut runs_with_trials = std::collections::HashSet::new();
        let mut st = src.prepare(
            "SELECT t.id, t.run_id, t.uuid, r.uuid, r.host FROM trials t \
             LEFT JOIN runs r ON r.id = t.run_id ORDER BY t.id",
        )?;
        let mut rows = st.query([])?;
        while let Some(row) = rows.next()? {
            let Ok(id) = row.get::<_, i64>(0) else {
                continue;
            };
            let Some(v) = self.trials.get(&id) else {
                continue;
            };
            if let Ok(run) = row.get::<_, i64>(1) {
                runs_with_trials.insert(run);
            }
            out.push(Refused {
                source: source.clone(),
                host: text(row, 4),
                run: text(row, 3),
                trial: Some(text(row, 2)),
                field: v.field.clone(),
                problem: v.problem.clone(),
            });
        }
        let mut st = src.prepare("SELECT id, uuid, host FROM runs ORDER BY id")?;
        let mut rows = st.query([])?;
        while let Some(row) = rows.next()? {
            let Ok(id) = row.get::<_, i64>(0) else {
                continue;
            };
            match self.runs.get(&id) {
                Some(v) if !runs_with_trials.contains(&id) => out.push(Refused {
                    source: source.clone(),
                    host: text(row, 2),
                    run: text(row, 1),
                    trial: None,
                    field: v.field.clone(),
                    problem: v.problem.clone(),
                }),
                _ => {}
            }
        }
        Ok(out)
    }
}

/// Checks every row of `table`, telling `bad` the `parent` column's value (the id of the run
/// or trial the row belongs to) and the violation of each row that breaks a rule.
fn scan(
    src: &Connection,
    table: &str,
    parent: &str,
    mut bad: impl FnMut(i64, Violation),
) -> rusqlite::Result<()> {
    let mut st = src.prepare(&format!("SELECT * FROM {}", ident(table)))?;
    let parent_i = st.column_index(parent)?;
    let mut rows = st.query([])?;
    while let Some(row) = rows.next()? {
        if let Err(v) = validate::check_row(table, row) {
            // A row without an integer parent is an orphan the merge skips anyway.
            if let Ok(id) = row.get::<_, i64>(parent_i) {
                bad(id, v);
            }
        }
    }
    Ok(())
}
