//! Inserts and updates: runs, trials, iterations and what is measured beside them.

use rusqlite::{params, Connection, TransactionBehavior};

use super::error::{sql_err, Result, StoreError};
use super::handle::Store;
use super::lock::SweepLock;
use super::rows::{int, MemoryColumns, RunInfo, TrialKey, TrialSummary};
use super::validate::{self, check_values, Violation};
use crate::power::{PowerSeries, TrialPower, TrialPowerRecord};
use crate::provenance::{ClockReport, Provenance};
use crate::record::IterationRecord;

/// Rows per transaction when writing power samples: big enough to amortise the commit, small
/// enough not to hold the write lock for long.
const SAMPLE_BATCH: usize = 4096;

impl Store {
    /// The writer's refusal of a value that breaks the store's rules.
    pub(super) fn invalid(&self, violation: Violation) -> StoreError {
        StoreError::Invalid {
            path: self.path.clone(),
            violation,
        }
    }

    /// Inserts a run with status `running`; returns its row id.
    pub fn begin_run(&mut self, info: &RunInfo) -> Result<i64> {
        check_run(info).map_err(|v| self.invalid(v))?;
        self.conn
            .prepare_cached(
                "INSERT INTO runs (uuid, host, started_at, status, config_toml, \
                 edgebench_version, git_commit, candle_version, cpu_threads, cpu_model, os) \
                 VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    info.uuid,
                    info.host,
                    info.started_at,
                    info.config_toml,
                    info.edgebench_version,
                    info.git_commit,
                    info.candle_version,
                    int(info.cpu_threads),
                    info.cpu_model,
                    info.os,
                ])
            })
            .map_err(sql_err(&self.path))?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn finish_run(&mut self, run_id: i64, ended_at: &str, status: &str) -> Result<()> {
        let n = self
            .conn
            .prepare_cached("UPDATE runs SET ended_at = ?2, status = ?3 WHERE id = ?1")
            .and_then(|mut st| st.execute(params![run_id, ended_at, status]))
            .map_err(sql_err(&self.path))?;
        self.expect_one(n, "run", run_id)?;
        self.checkpoint();
        Ok(())
    }

    /// Inserts a trial with status `running` and a fresh UUID, the first repetition of its
    /// key; returns its row id.
    pub fn begin_trial(
        &mut self,
        run_id: i64,
        key: &TrialKey,
        iterations_planned: usize,
        warmup_iterations: usize,
        started_at: &str,
    ) -> Result<i64> {
        self.begin_repetition(
            run_id,
            key,
            1,
            iterations_planned,
            warmup_iterations,
            started_at,
        )
    }

    /// [`Store::begin_trial`] for repetition `repetition` (from 1) of its key.
    pub fn begin_repetition(
        &mut self,
        run_id: i64,
        key: &TrialKey,
        repetition: usize,
        iterations_planned: usize,
        warmup_iterations: usize,
        started_at: &str,
    ) -> Result<i64> {
        check_key(key, repetition).map_err(|v| self.invalid(v))?;
        insert_trial(
            &self.conn,
            run_id,
            key,
            repetition,
            iterations_planned,
            warmup_iterations,
            started_at,
        )
        .map_err(sql_err(&self.path))
    }

    /// One iteration = one transaction: inserts the row and bumps `trials.iterations_done`,
    /// so the count always matches the rows even after a crash.
    pub fn record_iteration(&mut self, trial_id: i64, rec: &IterationRecord) -> Result<()> {
        check_iteration(rec).map_err(|v| self.invalid(v))?;
        let path = &self.path;
        // IMMEDIATE takes the write lock up front, so a concurrent reader cannot make the
        // upgrade from read to write lock fail with SQLITE_BUSY mid-transaction.
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_err(path))?;
        let updated = (|| {
            insert_iteration(&tx, trial_id, rec)?;
            tx.prepare_cached(
                "UPDATE trials SET iterations_done = iterations_done + 1 WHERE id = ?1",
            )?
            .execute([trial_id])
        })()
        .map_err(sql_err(path))?;
        if updated != 1 {
            // Unreachable with foreign keys on; kept so a bad id never commits silently.
            return Err(StoreError::NotFound {
                path: path.clone(),
                what: "trial",
                id: trial_id,
            });
        }
        tx.commit().map_err(sql_err(path))
    }

    pub fn finish_trial(&mut self, trial_id: i64, s: &TrialSummary) -> Result<()> {
        check_summary(s).map_err(|v| self.invalid(v))?;
        let n = write_summary(&self.conn, trial_id, s).map_err(sql_err(&self.path))?;
        self.expect_one(n, "trial", trial_id)?;
        self.checkpoint();
        Ok(())
    }

    /// The power context of a run: board profile, how the total is formed, idle baseline.
    pub fn set_run_power(
        &mut self,
        run_id: i64,
        board: &str,
        power_total: &str,
        baseline: Option<(f64, f64)>,
    ) -> Result<()> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE runs SET board = ?2, power_total = ?3, baseline_power_w = ?4, \
                 baseline_s = ?5 WHERE id = ?1",
            )
            .and_then(|mut st| {
                st.execute(params![
                    run_id,
                    board,
                    power_total,
                    baseline.map(|b| b.0),
                    baseline.map(|b| b.1)
                ])
            })
            .map_err(sql_err(&self.path))?;
        self.expect_one(n, "run", run_id)
    }

    /// What the run's power total covers (`module` or `board`).
    pub fn set_run_power_scope(&mut self, run_id: i64, scope: &str) -> Result<()> {
        let n = self
            .conn
            .prepare_cached("UPDATE runs SET power_scope = ?2 WHERE id = ?1")
            .and_then(|mut st| st.execute(params![run_id, scope]))
            .map_err(sql_err(&self.path))?;
        self.expect_one(n, "run", run_id)
    }

    /// Writes power samples in batches of [`SAMPLE_BATCH`] rows, one transaction each.
    pub fn record_power_samples(
        &mut self,
        trial_id: i64,
        series: &[PowerSeries<'_>],
    ) -> Result<()> {
        let path = &self.path;
        let rows = series
            .iter()
            .flat_map(|s| (0..s.t_ns.len()).map(move |i| (s, i)));
        let mut rows = rows.peekable();
        while rows.peek().is_some() {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_err(path))?;
            {
                let mut st = tx
                    .prepare_cached(
                        "INSERT INTO power_samples (trial_id, source, rail, t_ns, volts, amps, \
                         watts) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    )
                    .map_err(sql_err(path))?;
                for (s, i) in rows.by_ref().take(SAMPLE_BATCH) {
                    st.execute(params![
                        trial_id, s.source, s.rail, s.t_ns[i], s.volts[i], s.amps[i], s.watts[i]
                    ])
                    .map_err(sql_err(path))?;
                }
            }
            tx.commit().map_err(sql_err(path))?;
        }
        Ok(())
    }

    /// A trial whose power could not be measured at all (its sensor lost): no energy, flagged
    /// incomplete with the whole unmeasured time as its gap, and as resting on 0 readings.
    fn record_power_unmeasured(
        &mut self,
        trial_id: i64,
        gap_s: f64,
        note: Option<&str>,
    ) -> Result<()> {
        self.conn
            .execute(
                "UPDATE trials SET power_samples = 0, power_incomplete = 1, power_gap_s = ?2, \
                 power_low_samples = 0, power_note = ?3 WHERE id = ?1",
                params![trial_id, gap_s, note],
            )
            .map_err(sql_err(&self.path))?;
        Ok(())
    }

    /// A trial's energy figures, per-rail and per-iteration energies, in one transaction.
    /// Writes what [`crate::power::PowerMonitor::assess_trial`] made of a trial's samples.
    pub fn record_power(&mut self, trial_id: i64, record: &TrialPowerRecord) -> Result<()> {
        match record {
            TrialPowerRecord::Measured(p) => self.record_trial_power(trial_id, p),
            TrialPowerRecord::Unmeasured { gap_s, note } => {
                self.record_power_unmeasured(trial_id, *gap_s, note.as_deref())
            }
            TrialPowerRecord::Nothing => Ok(()),
        }
    }

    pub fn record_trial_power(&mut self, trial_id: i64, p: &TrialPower) -> Result<()> {
        let path = &self.path;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_err(path))?;
        let n = (|| {
            let n = tx
                .prepare_cached(
                    "UPDATE trials SET energy_j = ?2, avg_power_w = ?3, energy_per_image_j = ?4, \
                     edp_js = ?5, dynamic_energy_j = ?6, power_samples = ?7, power_rate_hz = ?8, \
                     power_jitter_s = ?9, power_incomplete = ?10, power_gap_s = ?11, \
                     power_low_samples = ?12, power_note = ?13 WHERE id = ?1",
                )?
                .execute(params![
                    trial_id,
                    p.energy_j,
                    p.avg_power_w,
                    p.energy_per_image_j,
                    p.edp_js,
                    p.dynamic_energy_j,
                    int(p.samples),
                    p.rate_hz,
                    p.jitter_s,
                    p.incomplete,
                    p.gap_s,
                    p.low_samples.map(int),
                    p.note,
                ])?;
            let mut st = tx.prepare_cached(
                "INSERT OR REPLACE INTO trial_rail_energy (trial_id, rail, energy_j, in_total) \
                 VALUES (?1, ?2, ?3, ?4)",
            )?;
            for (rail, j, in_total) in &p.rails {
                st.execute(params![trial_id, rail, j, in_total])?;
            }
            let mut st = tx.prepare_cached(
                "UPDATE iterations SET energy_j = ?3 WHERE trial_id = ?1 AND step = ?2",
            )?;
            for (step, j) in &p.iterations {
                st.execute(params![trial_id, int(*step), j])?;
            }
            Ok(n)
        })()
        .map_err(sql_err(path))?;
        if n != 1 {
            return Err(StoreError::NotFound {
                path: path.clone(),
                what: "trial",
                id: trial_id,
            });
        }
        tx.commit().map_err(sql_err(path))
    }

    /// Marks every run and trial still `running` as `interrupted`, the trials with `note` as
    /// their error; their iterations stay. Only for the holder of the database's
    /// [`SweepLock`]: with it held, no live process can still be writing those rows, so they
    /// belong to a process that died (killed, crashed, out of disk) before recording an end.
    /// Returns (runs, trials) changed.
    pub fn interrupt_unfinished(
        &mut self,
        _lock: &SweepLock,
        note: &str,
    ) -> Result<(usize, usize)> {
        let path = &self.path;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_err(path))?;
        let changed = (|| {
            let trials = tx.execute(
                "UPDATE trials SET status = 'interrupted', \
                 error = CASE WHEN error IS NULL THEN ?1 ELSE error || '; ' || ?1 END \
                 WHERE status = 'running'",
                [note],
            )?;
            let runs = tx.execute(
                "UPDATE runs SET status = 'interrupted' WHERE status = 'running'",
                [],
            )?;
            Ok((runs, trials))
        })()
        .map_err(sql_err(path))?;
        tx.commit().map_err(sql_err(path))?;
        if changed != (0, 0) {
            self.checkpoint();
        }
        Ok(changed)
    }

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

/// A new trial row, `running`; returns its id.
pub(super) fn insert_trial(
    conn: &Connection,
    run_id: i64,
    key: &TrialKey,
    repetition: usize,
    iterations_planned: usize,
    warmup_iterations: usize,
    started_at: &str,
) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "INSERT INTO trials (uuid, run_id, net, device, batch, epochs, images, dataset, \
         iterations_planned, iterations_done, warmup_iterations, status, started_at, \
         workload, params, repetition) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, ?10, 'running', ?11, ?12, ?13, ?14)",
    )?
    .execute(params![
        uuid::Uuid::new_v4().to_string(),
        run_id,
        key.net,
        key.device,
        int(key.batch),
        int(key.epochs),
        int(key.images),
        key.dataset,
        int(iterations_planned),
        int(warmup_iterations),
        started_at,
        key.workload,
        key.params,
        int(repetition),
    ])?;
    Ok(conn.last_insert_rowid())
}

/// A run against the rules of `runs`.
pub(super) fn check_run(info: &RunInfo) -> std::result::Result<(), Violation> {
    check_values(
        "runs",
        &[
            ("uuid", &info.uuid),
            ("host", &info.host),
            ("started_at", &info.started_at),
            ("config_toml", &info.config_toml),
            ("edgebench_version", &info.edgebench_version),
            ("git_commit", &info.git_commit),
            ("candle_version", &info.candle_version),
            ("cpu_threads", &int(info.cpu_threads)),
            ("cpu_model", &info.cpu_model),
            ("os", &info.os),
        ],
    )
}

/// A trial's key and repetition against the rules of `trials`.
pub(super) fn check_key(key: &TrialKey, repetition: usize) -> std::result::Result<(), Violation> {
    check_values(
        "trials",
        &[
            ("net", &key.net),
            ("device", &key.device),
            ("batch", &int(key.batch)),
            ("epochs", &int(key.epochs)),
            ("images", &int(key.images)),
            ("dataset", &key.dataset),
            ("workload", &key.workload),
            ("params", &key.params),
            ("repetition", &int(repetition)),
        ],
    )
}

/// A trial's outcome against the rules of `trials`. Its error text is cut to what the rules
/// allow when written (see [`write_summary`]), never refused: the outcome matters more.
pub(super) fn check_summary(s: &TrialSummary) -> std::result::Result<(), Violation> {
    check_values(
        "trials",
        &[
            ("status", &s.status),
            ("ended_at", &s.ended_at),
            ("loss_anomaly", &s.loss_anomaly),
        ],
    )
}

/// An iteration against the rules of `iterations`.
pub(super) fn check_iteration(rec: &IterationRecord) -> std::result::Result<(), Violation> {
    check_values(
        "iterations",
        &[
            ("step", &int(rec.step)),
            ("epoch", &int(rec.epoch)),
            ("data_s", &rec.data_s),
            ("step_s", &rec.step_s),
            ("t_start_ns", &rec.t_start_ns),
            ("t_end_ns", &rec.t_end_ns),
        ],
    )
}

/// `text` cut at a character boundary to at most `max` bytes, the cut marked with `...`.
pub(crate) fn cut_text(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end]).into()
}

/// A trial's outcome; returns the rows changed (1 when the trial exists).
pub(super) fn write_summary(
    conn: &Connection,
    trial_id: i64,
    s: &TrialSummary,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE trials SET status = ?2, error = ?3, ended_at = ?4, time_per_image_s = ?5, \
         time_per_image_spread_s = ?6, images_per_s = ?7, loss_first = ?8, \
         loss_last = ?9, loss_anomaly = ?10, time_per_iteration_s = ?11, \
         time_per_iteration_spread_s = ?12, total_time_s = ?13, gflop_per_s = ?14, \
         metrics = ?15 WHERE id = ?1",
    )?
    .execute(params![
        trial_id,
        s.status,
        s.error
            .as_deref()
            .map(|e| cut_text(e, validate::MAX_DOCUMENT)),
        s.ended_at,
        s.time_per_image_s,
        s.time_per_image_spread_s,
        s.images_per_s,
        s.loss_first,
        s.loss_last,
        s.loss_anomaly,
        s.metrics.time_per_iteration_s,
        s.metrics.time_per_iteration_spread_s,
        s.metrics.total_time_s,
        s.metrics.gflop_per_s,
        (!s.metrics.extra.is_empty())
            .then(|| serde_json::Value::Object(s.metrics.extra.clone()).to_string()),
    ])
}

/// One row of `iterations` (the caller holds the transaction).
pub(super) fn insert_iteration(
    conn: &Connection,
    trial_id: i64,
    rec: &IterationRecord,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO iterations (trial_id, step, epoch, loss, lr, data_s, step_s, \
         t_start_ns, t_end_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        trial_id,
        int(rec.step),
        int(rec.epoch),
        rec.loss,
        rec.lr,
        rec.data_s,
        rec.step_s,
        rec.t_start_ns,
        rec.t_end_ns,
    ])?;
    Ok(())
}
