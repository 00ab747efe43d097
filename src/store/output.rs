//! The tails of an external command's output (schema v7 `trial_output`).

use rusqlite::params;

use super::{sql_err, Result, Store};

impl Store {
    /// Keeps the end of what a trial's command wrote to stdout and stderr.
    pub fn record_output(
        &mut self,
        trial_id: i64,
        stdout_tail: &str,
        stderr_tail: &str,
    ) -> Result<()> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(sql_err(&path))?;
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO trial_output (trial_id, stream, tail) VALUES (?1, ?2, ?3)",
                )
                .map_err(sql_err(&path))?;
            for (stream, tail) in [("stdout", stdout_tail), ("stderr", stderr_tail)] {
                st.execute(params![trial_id, stream, tail])
                    .map_err(sql_err(&path))?;
            }
        }
        tx.commit().map_err(sql_err(&path))
    }

    /// A trial's stored output tails as (stream, tail), stdout first; empty if it has none.
    pub fn output(&self, trial_id: i64) -> Result<Vec<(String, String)>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT stream, tail FROM trial_output WHERE trial_id = ?1 \
                 ORDER BY stream = 'stderr', stream",
            )
            .map_err(sql_err(&self.path))?;
        st.query_map([trial_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(sql_err(&self.path))
    }
}
