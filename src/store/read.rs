//! Queries: every read of the store's tables, each row read by column name.
//!
//! Each row is converted on its own: a row that another program wrote (or a file edited by
//! hand) with a value the store's rules refuse is reported once, naming its board, trial and
//! field, and left out; the other rows are read as usual.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::error::{sql_err, Result};
use super::handle::Store;
use super::rows::{json_object, uint, LoggedText, MemoryColumns, ResultRow, TrialKey};
use super::status::TrialStatus;
use super::validate::{conversion_violation, Violation};
use crate::provenance::Provenance;
use crate::record::IterationRecord;

impl Store {
    /// Keys of trials that finished with status `ok` (in any run), for resuming a sweep.
    pub fn completed_keys(&self) -> Result<HashSet<TrialKey>> {
        self.keys_with_status(&[TrialStatus::Ok])
    }

    /// Keys of trials whose status is one of `statuses` (resume: what counts as done).
    pub fn keys_with_status(&self, statuses: &[TrialStatus]) -> Result<HashSet<TrialKey>> {
        Ok(self.statuses_by_key(statuses)?.into_keys().collect())
    }

    /// For every key with a trial whose status is one of `statuses`: the status that makes
    /// it count, `ok` if any of its trials is `ok`, else the latest one (resume says why it
    /// skips a trial).
    pub fn statuses_by_key(
        &self,
        statuses: &[TrialStatus],
    ) -> Result<HashMap<TrialKey, TrialStatus>> {
        Ok(fold_statuses(
            self.trial_statuses()?,
            statuses,
            |(key, _)| key,
        ))
    }

    /// [`Store::statuses_by_key`] per (key, repetition): what resume counts as done when
    /// every key runs several times.
    pub fn statuses_by_repetition(
        &self,
        statuses: &[TrialStatus],
    ) -> Result<HashMap<(TrialKey, usize), TrialStatus>> {
        Ok(fold_statuses(self.trial_statuses()?, statuses, |slot| slot))
    }

    /// Every trial's (key, repetition) and status, oldest first.
    fn trial_statuses(&self) -> Result<Vec<((TrialKey, usize), TrialStatus)>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT t.net, t.device, t.batch, t.epochs, t.images, t.dataset, t.status, \
                 t.workload, t.params, t.repetition, t.uuid AS trial_id, r.host \
                 FROM trials t LEFT JOIN runs r ON r.id = t.run_id ORDER BY t.id",
            )
            .map_err(sql_err(&self.path))?;
        let rows = self.each_row(&mut st, [], trial_of_row, |r| {
            Ok((
                (
                    TrialKey {
                        workload: r.get("workload")?,
                        net: r.get("net")?,
                        device: r.get("device")?,
                        batch: uint(r, "batch")?,
                        epochs: uint(r, "epochs")?,
                        images: uint(r, "images")?,
                        dataset: r.get("dataset")?,
                        params: r.get("params")?,
                    },
                    uint(r, "repetition")?,
                ),
                r.get::<_, TrialStatus>("status")?,
            ))
        })?;
        Ok(rows)
    }

    /// One row per trial, ordered by run start time, then trial row id: what the database
    /// holds. What the trial's workload says of it (its item and the figures per item, its
    /// label and engine) is left to `workloads::describe` (`workloads::results` reads and
    /// describes).
    pub fn results(&self) -> Result<Vec<ResultRow>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT r.uuid AS run_id, t.uuid AS trial_id, r.host, t.net, t.device, t.batch, \
                 t.epochs, t.images, t.dataset, t.iterations_done, t.iterations_planned, t.warmup_iterations, \
                 t.status, t.error, t.started_at, t.ended_at, t.time_per_image_s, \
                 t.time_per_image_spread_s, t.images_per_s, t.loss_first, t.loss_last, \
                 t.loss_anomaly, t.energy_j, t.avg_power_w, t.energy_per_image_j, t.edp_js, \
                 t.swap_pressure, t.peak_rss_bytes, t.id AS trial_rowid, t.dynamic_energy_j, \
                 t.power_samples, t.power_rate_hz, t.power_jitter_s, t.power_incomplete, \
                 t.power_gap_s, r.board, r.power_total, r.baseline_power_w, r.baseline_s, \
                 t.throttled, t.throttle_note, t.power_low_samples, r.power_scope, t.power_note, \
                 t.workload, t.params, t.time_per_iteration_s, t.time_per_iteration_spread_s, \
                 t.total_time_s, t.gflop_per_s, t.metrics, t.peak_gpu_bytes, t.repetition \
                 FROM trials t JOIN runs r ON r.id = t.run_id \
                 ORDER BY r.started_at, r.id, t.id",
            )
            .map_err(sql_err(&self.path))?;
        let rows = self.each_row(&mut st, [], trial_of_row, |r| {
            Ok(ResultRow {
                run_id: r.get("run_id")?,
                trial_id: r.get("trial_id")?,
                host: r.get("host")?,
                net: r.get("net")?,
                device: r.get("device")?,
                batch: uint(r, "batch")?,
                epochs: uint(r, "epochs")?,
                images: uint(r, "images")?,
                epochs_json: None,
                images_json: None,
                dataset: r.get("dataset")?,
                repetition: uint(r, "repetition")?,
                iterations: uint(r, "iterations_done")?,
                iterations_planned: uint(r, "iterations_planned")?,
                warmup_iterations: uint(r, "warmup_iterations")?,
                status: r.get("status")?,
                error: r.get("error")?,
                started_at: r.get("started_at")?,
                ended_at: r.get("ended_at")?,
                time_per_image_s: r.get("time_per_image_s")?,
                time_per_image_spread_s: r.get("time_per_image_spread_s")?,
                images_per_s: r.get("images_per_s")?,
                loss_first: r.get("loss_first")?,
                loss_last: r.get("loss_last")?,
                loss_anomaly: r.get("loss_anomaly")?,
                energy_j: r.get("energy_j")?,
                avg_power_w: r.get("avg_power_w")?,
                energy_per_image_j: r.get("energy_per_image_j")?,
                edp_js: r.get("edp_js")?,
                item: None,
                items_per_iteration: None,
                time_per_item_s: None,
                energy_per_item_j: None,
                edp_per_item_js: None,
                time_per_item_median_s: None,
                time_per_item_iqr_s: None,
                swap_pressure: r.get("swap_pressure")?,
                peak_rss_bytes: r.get("peak_rss_bytes")?,
                peak_gpu_bytes: r.get("peak_gpu_bytes")?,
                trial_rowid: r.get("trial_rowid")?,
                memory: MemoryColumns::default(),
                dynamic_energy_j: r.get("dynamic_energy_j")?,
                rail_energy_j: None,
                power_samples: r.get("power_samples")?,
                power_rate_hz: r.get("power_rate_hz")?,
                power_jitter_s: r.get("power_jitter_s")?,
                power_incomplete: r.get("power_incomplete")?,
                power_gap_s: r.get("power_gap_s")?,
                board: r.get("board")?,
                power_total: r.get("power_total")?,
                baseline_power_w: r.get("baseline_power_w")?,
                baseline_s: r.get("baseline_s")?,
                throttled: r.get("throttled")?,
                throttle_note: r.get("throttle_note")?,
                power_low_samples: r.get("power_low_samples")?,
                power_few_readings: None,
                power_scope: r.get("power_scope")?,
                power_note: r.get("power_note")?,
                workload: r.get("workload")?,
                params_text: r.get("params")?,
                params: json_object(r, "params")?,
                time_per_iteration_s: r.get("time_per_iteration_s")?,
                time_per_iteration_spread_s: r.get("time_per_iteration_spread_s")?,
                total_time_s: r.get("total_time_s")?,
                gflop_per_s: r.get("gflop_per_s")?,
                metrics: json_object(r, "metrics")?,
                label: String::new(),
                engine: None,
            })
        })?;
        let mut rows = self.fill_memory(rows)?;
        let mut st = self
            .conn
            .prepare_cached("SELECT trial_id, rail, energy_j FROM trial_rail_energy")
            .map_err(sql_err(&self.path))?;
        let rails = self.each_row(
            &mut st,
            [],
            |r| self.child_of_row(r, "trial_rail_energy"),
            |r| {
                Ok((
                    r.get::<_, i64>("trial_id")?,
                    r.get::<_, String>("rail")?,
                    r.get::<_, f64>("energy_j")?,
                ))
            },
        )?;
        let mut by_trial: HashMap<i64, BTreeMap<String, f64>> = HashMap::new();
        for (trial, rail, j) in rails {
            by_trial.entry(trial).or_default().insert(rail, j);
        }
        for row in &mut rows {
            row.rail_energy_j = by_trial.remove(&row.trial_rowid);
            // A power record (power_samples) of a run with a scope (schema v5) had its
            // readings counted.
            row.power_few_readings = row
                .power_samples
                .and(row.power_scope.as_ref())
                .map(|_| row.power_low_samples.is_some());
        }
        Ok(rows)
    }

    /// Iterations of a trial (by row id), ordered by step.
    pub fn iterations(&self, trial_id: i64) -> Result<Vec<IterationRecord>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT step, epoch, loss, lr, data_s, step_s, t_start_ns, t_end_ns \
                 FROM iterations WHERE trial_id = ?1 ORDER BY step",
            )
            .map_err(sql_err(&self.path))?;
        let rows = self.each_row(
            &mut st,
            [trial_id],
            |r| self.iteration_of_row(r, trial_id),
            |r| {
                Ok(IterationRecord {
                    step: uint(r, "step")?,
                    epoch: uint(r, "epoch")?,
                    loss: r.get::<_, Option<f64>>("loss")?.unwrap_or(f64::NAN),
                    lr: r.get::<_, Option<f64>>("lr")?.unwrap_or(f64::NAN),
                    data_s: r.get("data_s")?,
                    step_s: r.get("step_s")?,
                    t_start_ns: r.get("t_start_ns")?,
                    t_end_ns: r.get("t_end_ns")?,
                })
            },
        )?;
        Ok(rows)
    }

    /// Each iteration's loss and step time as its log wrote them, in the order of
    /// [`Store::iterations`]; empty texts for iterations that were measured, not imported.
    pub(crate) fn logged_text(&self, trial_id: i64) -> Result<Vec<LoggedText>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT step, loss_text, step_s_text FROM iterations WHERE trial_id = ?1 \
                 ORDER BY step",
            )
            .map_err(sql_err(&self.path))?;
        self.each_row(
            &mut st,
            [trial_id],
            |r| self.iteration_of_row(r, trial_id),
            |r| {
                Ok(LoggedText {
                    loss: r.get("loss_text")?,
                    step_s: r.get("step_s_text")?,
                })
            },
        )
    }

    /// Per-iteration energies of a trial (step, joules or None), ordered by step.
    pub fn iteration_energies(&self, trial_id: i64) -> Result<Vec<(usize, Option<f64>)>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT step, energy_j FROM iterations WHERE trial_id = ?1 ORDER BY step",
            )
            .map_err(sql_err(&self.path))?;
        self.each_row(
            &mut st,
            [trial_id],
            |r| self.iteration_of_row(r, trial_id),
            |r| Ok((uint(r, "step")?, r.get("energy_j")?)),
        )
    }

    /// A trial's stored power samples as (rail, t_ns, watts), by rail then time.
    pub(crate) fn power_trace(&self, trial_id: i64) -> Result<Vec<(String, i64, f64)>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT rail, t_ns, watts FROM power_samples WHERE trial_id = ?1 ORDER BY rail, t_ns",
            )
            .map_err(sql_err(&self.path))?;
        self.each_row(
            &mut st,
            [trial_id],
            |_| self.trial_name(trial_id, "a power sample of"),
            |r| Ok((r.get("rail")?, r.get("t_ns")?, r.get("watts")?)),
        )
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
        let by_trial: HashMap<i64, MemoryColumns> = self
            .each_row(
                &mut st,
                [],
                |r| self.child_of_row(r, "trial_memory"),
                |r| {
                    Ok((
                        r.get("trial_id")?,
                        MemoryColumns {
                            mem_estimate_bytes: r.get("mem_estimate_bytes")?,
                            mem_limit_bytes: r.get("mem_limit_bytes")?,
                            swap_in_pages: r.get("swap_in_pages")?,
                            swap_out_pages: r.get("swap_out_pages")?,
                            major_faults: r.get("major_faults")?,
                            swapped_bytes_max: r.get("swapped_bytes_max")?,
                            mem_available_min_bytes: r.get("mem_available_min_bytes")?,
                            psi_memory_some_us: r.get("psi_memory_some_us")?,
                            psi_memory_full_us: r.get("psi_memory_full_us")?,
                            memory_note: r.get("memory_note")?,
                        },
                    ))
                },
            )?
            .into_iter()
            .collect();
        for row in &mut rows {
            if let Some(m) = by_trial.get(&row.trial_rowid) {
                row.memory = m.clone();
            }
        }
        Ok(rows)
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
        self.each_row(
            &mut st,
            [trial_id],
            |_| self.trial_name(trial_id, "an output tail of"),
            |r| Ok((r.get("stream")?, r.get("tail")?)),
        )
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
        let items = self.each_row(
            &mut st,
            [run_uuid],
            |_| format!("a provenance item of run {run_uuid}"),
            |r| Ok((r.get::<_, String>("key")?, r.get::<_, String>("value")?)),
        )?;
        Ok(Provenance(items.into_iter().collect()))
    }

    /// Runs `st` with `params` and converts each row with `convert`. A row that does not
    /// convert is left out and reported once (as `what` names it), so one unreadable row
    /// never hides the others.
    pub(super) fn each_row<T, P: rusqlite::Params>(
        &self,
        st: &mut rusqlite::Statement<'_>,
        params: P,
        what: impl Fn(&rusqlite::Row<'_>) -> String,
        mut convert: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        let mut rows = st.query(params).map_err(sql_err(&self.path))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(sql_err(&self.path))? {
            match convert(row) {
                Ok(v) => out.push(v),
                Err(e) => self.report_unreadable(&what(row), &conversion_violation(row, &e)),
            }
        }
        Ok(out)
    }

    /// Says, once per store, that a row was left out and why.
    pub(super) fn report_unreadable(&self, what: &str, v: &Violation) {
        let line = format!(
            "{}: {what} left out, it cannot be read: {v} (a row written by another program or \
             a newer edgebench; the other rows are read)",
            self.path.display()
        );
        if self.reported.borrow_mut().insert(line.clone()) {
            tracing::warn!("{line}");
        }
    }

    /// "trial UUID of board HOST", as far as the rows say, for `prefix` a row of it.
    fn trial_name(&self, trial_rowid: i64, prefix: &str) -> String {
        let found = self.conn.query_row(
            "SELECT t.uuid AS trial_id, r.host FROM trials t LEFT JOIN runs r ON r.id = t.run_id \
             WHERE t.id = ?1",
            [trial_rowid],
            |r| Ok(trial_of_row(r)),
        );
        match found {
            Ok(name) => format!("{prefix} {name}"),
            Err(_) => format!("{prefix} trial #{trial_rowid}"),
        }
    }

    /// An iteration row (with its `step`) of the trial with row id `trial_rowid`, named.
    fn iteration_of_row(&self, row: &rusqlite::Row<'_>, trial_rowid: i64) -> String {
        let step = lossy_text(row, "step");
        self.trial_name(trial_rowid, &format!("iteration {step} of"))
    }

    /// A row of a per-trial `table` (with its `trial_id`), named.
    fn child_of_row(&self, row: &rusqlite::Row<'_>, table: &str) -> String {
        match row.get::<_, i64>("trial_id") {
            Ok(id) => self.trial_name(id, &format!("a {table} row of")),
            Err(_) => format!("a {table} row"),
        }
    }
}

/// The value of `column` as short text whatever it holds, for naming a row in a message.
fn lossy_text(row: &rusqlite::Row<'_>, column: &str) -> String {
    use rusqlite::types::ValueRef;
    let text = match row.get_ref(column) {
        Ok(ValueRef::Text(t)) => String::from_utf8_lossy(t).into_owned(),
        Ok(ValueRef::Integer(n)) => n.to_string(),
        Ok(ValueRef::Real(f)) => f.to_string(),
        Ok(ValueRef::Null) | Ok(ValueRef::Blob(_)) | Err(_) => "?".into(),
    };
    let short: String = text.chars().take(64).collect();
    if short.len() < text.len() {
        format!("{short}...")
    } else {
        short
    }
}

/// "trial UUID of board HOST" from a row with the columns `trial_id` (the UUID) and `host`.
fn trial_of_row(row: &rusqlite::Row<'_>) -> String {
    format!(
        "trial {} of board {}",
        lossy_text(row, "trial_id"),
        lossy_text(row, "host")
    )
}

/// For every group (of `rows`, oldest first) with a trial whose status is one of `statuses`:
/// `ok` if any of them is `ok`, else the latest one's.
fn fold_statuses<K: std::hash::Hash + Eq>(
    rows: Vec<((TrialKey, usize), TrialStatus)>,
    statuses: &[TrialStatus],
    group: impl Fn((TrialKey, usize)) -> K,
) -> HashMap<K, TrialStatus> {
    let mut by_group: HashMap<K, TrialStatus> = HashMap::new();
    for (slot, status) in rows {
        if !statuses.contains(&status) {
            continue;
        }
        let found = by_group.entry(group(slot)).or_insert(status);
        if *found != TrialStatus::Ok {
            *found = status;
        }
    }
    by_group
}
