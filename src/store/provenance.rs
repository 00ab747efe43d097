//! Provenance of runs and the clocks of trials (schema v4 `run_provenance`, `trial_clocks`).

use super::{sql_err, Result, Store};
use crate::provenance::{ClockReport, Provenance};
use rusqlite::params;

impl Store {
    /// Adds (or replaces) provenance items of a run.
    pub fn record_provenance(&mut self, run_id: i64, p: &Provenance) -> Result<()> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(sql_err(&path))?;
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO run_provenance (run_id, key, value) VALUES (?1, ?2, ?3)",
                )
                .map_err(sql_err(&path))?;
            for (k, v) in &p.0 {
                st.execute(params![run_id, k, v]).map_err(sql_err(&path))?;
            }
        }
        tx.commit().map_err(sql_err(&path))
    }

    /// A run's provenance, by the run's UUID (empty for a run recorded before schema v4).
    pub fn provenance(&self, run_uuid: &str) -> Result<Provenance> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT p.key, p.value FROM run_provenance p JOIN runs r ON r.id = p.run_id \
                 WHERE r.uuid = ?1",
            )
            .map_err(sql_err(&self.path))?;
        let items = st
            .query_map([run_uuid], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(sql_err(&self.path))?;
        Ok(Provenance(items))
    }

    /// A trial's throttling verdict and its clock series.
    pub fn record_clocks(&mut self, trial_id: i64, c: &ClockReport) -> Result<()> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(sql_err(&path))?;
        tx.execute(
            "UPDATE trials SET throttled = ?2, throttle_note = ?3 WHERE id = ?1",
            params![trial_id, c.throttled, c.note],
        )
        .map_err(sql_err(&path))?;
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO trial_clocks \
                     (trial_id, key, start_value, min_value, max_value, end_value) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(sql_err(&path))?;
            for s in &c.series {
                st.execute(params![trial_id, s.key, s.start, s.min, s.max, s.end])
                    .map_err(sql_err(&path))?;
            }
        }
        tx.commit().map_err(sql_err(&path))
    }
}
