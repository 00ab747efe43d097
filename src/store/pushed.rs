//! The push ledger (`pushed`, schema v11): which final trials a central PostgreSQL holds, per
//! target, so that `results` and the daemon can say how many wait. The server stays the truth:
//! `edgebench push` rewrites the ledger from what the server answers.

use rusqlite::{params, Connection};

use super::error::{sql_err, Result};
use super::handle::Store;

/// A final trial (any status but `running`) and the run it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FinalTrial {
    pub trial_id: i64,
    pub trial_uuid: String,
    pub run_id: i64,
}

fn has_ledger(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'pushed'",
        [],
        |r| r.get(0),
    )
}

impl Store {
    /// The SQLite connection, for the fleet sync's table copies (`sync::postgres`): its
    /// column lists mirror the schema documented in [`super::schema`].
    pub(crate) fn sqlite(&self) -> &Connection {
        &self.conn
    }

    /// Every final trial, oldest first.
    pub(crate) fn final_trials(&self) -> Result<Vec<FinalTrial>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, uuid, run_id FROM trials WHERE status <> 'running' ORDER BY id")
            .map_err(sql_err(&self.path))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(FinalTrial {
                    trial_id: r.get(0)?,
                    trial_uuid: r.get(1)?,
                    run_id: r.get(2)?,
                })
            })
            .map_err(sql_err(&self.path))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql_err(&self.path))?;
        Ok(rows)
    }

    /// Records that `target` holds these trials (after the server's commit).
    pub(crate) fn mark_pushed(
        &mut self,
        target: &str,
        trial_uuids: &[String],
        at: &str,
    ) -> Result<()> {
        let tx = self.conn.transaction().map_err(sql_err(&self.path))?;
        {
            let mut stmt = tx
                .prepare(
                    "INSERT INTO pushed (trial_uuid, target, pushed_at) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (trial_uuid, target) DO NOTHING",
                )
                .map_err(sql_err(&self.path))?;
            for uuid in trial_uuids {
                stmt.execute(params![uuid, target, at])
                    .map_err(sql_err(&self.path))?;
            }
        }
        tx.commit().map_err(sql_err(&self.path))
    }

    /// Forgets that `target` holds these trials (the server said it does not).
    pub(crate) fn unmark_pushed(&mut self, target: &str, trial_uuids: &[String]) -> Result<()> {
        let tx = self.conn.transaction().map_err(sql_err(&self.path))?;
        {
            let mut stmt = tx
                .prepare("DELETE FROM pushed WHERE trial_uuid = ?1 AND target = ?2")
                .map_err(sql_err(&self.path))?;
            for uuid in trial_uuids {
                stmt.execute(params![uuid, target])
                    .map_err(sql_err(&self.path))?;
            }
        }
        tx.commit().map_err(sql_err(&self.path))
    }

    /// Final trials the ledger does not list as held by `target` (all of them in a file
    /// without a ledger, e.g. opened read-only at an older schema).
    pub(crate) fn unpushed_count(&self, target: &str) -> Result<u64> {
        let ledger = has_ledger(&self.conn).map_err(sql_err(&self.path))?;
        let sql = if ledger {
            "SELECT count(*) FROM trials t WHERE t.status <> 'running' AND NOT EXISTS \
             (SELECT 1 FROM pushed p WHERE p.trial_uuid = t.uuid AND p.target = ?1)"
        } else {
            "SELECT count(*) FROM trials WHERE status <> 'running' AND ?1 IS NOT NULL"
        };
        let n: i64 = self
            .conn
            .query_row(sql, [target], |r| r.get(0))
            .map_err(sql_err(&self.path))?;
        Ok(n.max(0) as u64)
    }

    /// The trial UUIDs the ledger lists as held by `target`.
    pub fn pushed_uuids(&self, target: &str) -> Result<std::collections::HashSet<String>> {
        if !has_ledger(&self.conn).map_err(sql_err(&self.path))? {
            return Ok(Default::default());
        }
        let mut stmt = self
            .conn
            .prepare("SELECT trial_uuid FROM pushed WHERE target = ?1")
            .map_err(sql_err(&self.path))?;
        let rows = stmt
            .query_map([target], |r| r.get(0))
            .map_err(sql_err(&self.path))?
            .collect::<rusqlite::Result<_>>()
            .map_err(sql_err(&self.path))?;
        Ok(rows)
    }

    /// The targets the ledger names, most recently pushed first.
    pub fn push_targets(&self) -> Result<Vec<String>> {
        if !has_ledger(&self.conn).map_err(sql_err(&self.path))? {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare("SELECT target FROM pushed GROUP BY target ORDER BY max(pushed_at) DESC")
            .map_err(sql_err(&self.path))?;
        let rows = stmt
            .query_map([], |r| r.get(0))
            .map_err(sql_err(&self.path))?
            .collect::<rusqlite::Result<Vec<String>>>()
            .map_err(sql_err(&self.path))?;
        Ok(rows)
    }
}
