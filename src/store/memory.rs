//! The memory side of a trial (schema v2 `trial_memory`).

use super::{sql_err, Result, ResultRow, Store};
use rusqlite::params;
use serde::Serialize;
use std::collections::HashMap;

/// Memory measurements of a trial, flattened into `results --json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MemoryColumns {
    pub mem_estimate_bytes: Option<i64>,
    pub mem_limit_bytes: Option<i64>,
    pub swap_in_pages: Option<i64>,
    pub swap_out_pages: Option<i64>,
    pub major_faults: Option<i64>,
    pub swapped_bytes_max: Option<i64>,
    pub mem_available_min_bytes: Option<i64>,
    pub psi_memory_some_us: Option<i64>,
    pub psi_memory_full_us: Option<i64>,
    pub memory_note: Option<String>,
}

impl Store {
    /// Stores a trial's memory record with its verdict and peak.
    pub fn record_memory(
        &mut self,
        trial_id: i64,
        swap_pressure: Option<bool>,
        peak_rss_bytes: Option<u64>,
        m: &MemoryColumns,
    ) -> Result<()> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(sql_err(&path))?;
        tx.execute(
            "UPDATE trials SET swap_pressure = ?2, peak_rss_bytes = ?3 WHERE id = ?1",
            params![trial_id, swap_pressure, peak_rss_bytes.map(|b| b as i64)],
        )
        .map_err(sql_err(&path))?;
        tx.execute(
            "INSERT OR REPLACE INTO trial_memory (trial_id, mem_estimate_bytes, mem_limit_bytes, \
             swap_in_pages, swap_out_pages, major_faults, swapped_bytes_max, \
             mem_available_min_bytes, psi_memory_some_us, psi_memory_full_us, memory_note) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                trial_id,
                m.mem_estimate_bytes,
                m.mem_limit_bytes,
                m.swap_in_pages,
                m.swap_out_pages,
                m.major_faults,
                m.swapped_bytes_max,
                m.mem_available_min_bytes,
                m.psi_memory_some_us,
                m.psi_memory_full_us,
                m.memory_note
            ],
        )
        .map_err(sql_err(&path))?;
        tx.commit().map_err(sql_err(&path))
    }

    /// Stores the most GPU memory the trial's process had allocated at once (None: not
    /// measured, e.g. a CPU trial or a worker that died before it could say).
    pub fn record_gpu_memory(&mut self, trial_id: i64, peak_bytes: Option<u64>) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE trials SET peak_gpu_bytes = ?2 WHERE id = ?1")
            .and_then(|mut st| {
                st.execute(params![
                    trial_id,
                    peak_bytes.map(|b| i64::try_from(b).unwrap_or(i64::MAX))
                ])
            })
            .map(|_| ())
            .map_err(sql_err(&self.path))
    }

    pub(super) fn fill_memory(&self, mut rows: Vec<ResultRow>) -> Result<Vec<ResultRow>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT trial_id, mem_estimate_bytes, mem_limit_bytes, swap_in_pages, \
                 swap_out_pages, major_faults, swapped_bytes_max, mem_available_min_bytes, \
                 psi_memory_some_us, psi_memory_full_us, memory_note FROM trial_memory",
            )
            .map_err(sql_err(&self.path))?;
        let by_trial: HashMap<i64, MemoryColumns> = st
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    MemoryColumns {
                        mem_estimate_bytes: r.get(1)?,
                        mem_limit_bytes: r.get(2)?,
                        swap_in_pages: r.get(3)?,
                        swap_out_pages: r.get(4)?,
                        major_faults: r.get(5)?,
                        swapped_bytes_max: r.get(6)?,
                        mem_available_min_bytes: r.get(7)?,
                        psi_memory_some_us: r.get(8)?,
                        psi_memory_full_us: r.get(9)?,
                        memory_note: r.get(10)?,
                    },
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(sql_err(&self.path))?;
        for row in &mut rows {
            if let Some(m) = by_trial.get(&row.trial_rowid) {
                row.memory = m.clone();
            }
        }
        Ok(rows)
    }
}
