//! Local SQLite result store: one file per board, one row per training iteration.
//!
//! Users open the file with sqlite3/pandas, copy it to a workstation and merge files across
//! boards, so rows carry UUIDs (row ids are local) and the schema is documented in
//! [`schema`]. The file is in WAL mode with `synchronous=NORMAL`: a commit per iteration costs
//! no fsync, and a crash loses at most the last few iterations, never consistency.
//! Recent rows live in `<file>-wal` until a checkpoint; the store checkpoints after each
//! trial and run, so copying only `<file>` mid-sweep still carries every finished trial.

mod check;
mod error;
mod import;
pub mod lock;
mod memory;
mod merge;
mod output;
mod provenance;
mod recovery;
pub mod schema;
mod snapshot;
mod status;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};

pub use error::StoreError;
pub(crate) use import::LoggedText;
pub use import::{ImportOutcome, ImportedTrial};
pub use lock::{LockError, SweepLock};
pub use memory::MemoryColumns;
pub use merge::{merge, ChildTable, Match, MergeReport, Parent, TableCount, CHILD_TABLES};
pub use schema::SCHEMA_VERSION;
pub use snapshot::snapshot;
pub use status::TrialStatus;

use crate::power::{PowerSeries, TrialPower, TrialPowerRecord};
use crate::record::{IterationRecord, Metrics, WorkItem};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How long a writer waits for another process's lock (e.g. `edgebench results` reading
/// while a run is writing) before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Metadata of one `edgebench run` invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub uuid: String,
    pub host: String,
    pub started_at: String,
    pub config_toml: String,
    pub edgebench_version: String,
    pub git_commit: String,
    pub candle_version: String,
    pub cpu_threads: usize,
    pub cpu_model: Option<String>,
    pub os: String,
}

/// What makes two trials "the same measurement" (used to skip completed work on resume).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TrialKey {
    /// The workload's name (schema v6).
    pub workload: crate::record::WorkloadKind,
    pub net: String,
    pub device: String,
    pub batch: usize,
    pub epochs: usize,
    pub images: usize,
    pub dataset: String,
    /// The workload's own parameters: a JSON object with sorted keys, `{}` for `cnn`.
    pub params: String,
}

/// Outcome of a trial, written once when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialSummary {
    pub status: TrialStatus,
    pub error: Option<String>,
    pub ended_at: String,
    pub time_per_image_s: Option<f64>,
    pub time_per_image_spread_s: Option<f64>,
    pub images_per_s: Option<f64>,
    pub loss_first: Option<f64>,
    pub loss_last: Option<f64>,
    pub loss_anomaly: bool,
    pub metrics: Metrics,
}

/// Rows per transaction when writing power samples: big enough to amortise the commit, small
/// enough not to hold the write lock for long.
const SAMPLE_BATCH: usize = 4096;

/// One trial joined with its run: exactly the object `edgebench results --json` prints.
/// `Option` fields serialise as `null`, never omitted, so consumers can rely on every key.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ResultRow {
    /// The run's UUID.
    pub run_id: String,
    /// The trial's UUID.
    pub trial_id: String,
    pub host: String,
    /// `cnn`, `mlp`, `ops` or `exec`; `cnn` for trials recorded before workloads existed.
    pub workload: crate::record::WorkloadKind,
    pub net: String,
    pub device: String,
    pub batch: usize,
    pub epochs: usize,
    pub images: usize,
    pub dataset: String,
    /// Which repetition of its key the trial is, from 1 (`[sweep] repeat`; schema v9).
    pub repetition: usize,
    /// Iterations recorded (`trials.iterations_done`).
    pub iterations: usize,
    pub iterations_planned: usize,
    pub warmup_iterations: usize,
    pub status: TrialStatus,
    pub error: Option<String>,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub time_per_image_s: Option<f64>,
    pub time_per_image_spread_s: Option<f64>,
    pub images_per_s: Option<f64>,
    pub loss_first: Option<f64>,
    pub loss_last: Option<f64>,
    pub loss_anomaly: bool,
    pub energy_j: Option<f64>,
    pub avg_power_w: Option<f64>,
    /// Joules per image; null for workloads whose items are not images (`item`).
    pub energy_per_image_j: Option<f64>,
    pub edp_js: Option<f64>,
    /// What one item of the trial's work is: `image` (cnn, exec), `sample` (mlp), `execution`
    /// (ops); the `*_per_item_*` figures count these.
    pub item: Option<WorkItem>,
    /// Items in one iteration: the batch of images, the MLP's N samples, 1 execution; null
    /// when an external command's batch is not known.
    pub items_per_iteration: Option<usize>,
    /// Median step time per item.
    pub time_per_item_s: Option<f64>,
    /// Energy of the measured iterations per item.
    pub energy_per_item_j: Option<f64>,
    /// EDP per unit of work (`energy_per_item_j` × `time_per_item_s`): comparable across
    /// trials of different lengths, unlike the trial's `edp_js`.
    pub edp_per_item_js: Option<f64>,
    pub swap_pressure: Option<bool>,
    pub peak_rss_bytes: Option<i64>,
    /// The most GPU memory the trial's process had allocated at once (schema v8); None on
    /// the CPU or when not measured.
    pub peak_gpu_bytes: Option<i64>,
    /// The rest of the memory record (all null when unmeasured).
    #[serde(flatten)]
    pub memory: MemoryColumns,
    pub dynamic_energy_j: Option<f64>,
    /// Per-rail energies over the measured interval (JSON object rail -> J); None without power.
    pub rail_energy_j: Option<std::collections::BTreeMap<String, f64>>,
    pub power_samples: Option<i64>,
    pub power_rate_hz: Option<f64>,
    pub power_jitter_s: Option<f64>,
    pub power_incomplete: Option<bool>,
    pub power_gap_s: Option<f64>,
    /// Sensor updates inside the measured interval, set only when fewer than 10 (schema v5).
    pub power_low_samples: Option<i64>,
    /// Whether the trial's energy rests on too few sensor readings (`power_low_samples` set),
    /// whatever their count, 0 included; null without a power record, or one stored before
    /// schema v5.
    pub power_few_readings: Option<bool>,
    /// Why the power record is incomplete (the failing sensor and its error); schema v5.
    pub power_note: Option<String>,
    pub board: Option<String>,
    pub power_total: Option<String>,
    /// `module` or `board`: what the run's total covers (schema v5); None without power.
    pub power_scope: Option<String>,
    pub baseline_power_w: Option<f64>,
    pub baseline_s: Option<f64>,
    /// 1 if the trial's clocks changed or dropped for temperature (schema v4); None if the
    /// host exposed no clocks or the trial predates v4.
    pub throttled: Option<bool>,
    pub throttle_note: Option<String>,
    /// Median step time of the measured iterations (schema v6).
    pub time_per_iteration_s: Option<f64>,
    pub time_per_iteration_spread_s: Option<f64>,
    /// Sum of the measured iterations' step times (schema v6).
    pub total_time_s: Option<f64>,
    pub gflop_per_s: Option<f64>,
    /// The workload's parameters (`trials.params`), each a key of the row.
    #[serde(flatten)]
    pub params: serde_json::Map<String, serde_json::Value>,
    /// The workload's other figures (`trials.metrics`), each a key of the row.
    #[serde(flatten)]
    pub metrics: serde_json::Map<String, serde_json::Value>,
    /// `trials.params` as stored, for the resume key; not part of the JSON.
    #[serde(skip)]
    pub params_text: String,
    /// Local `trials.id`, for [`Store::iterations`]; not part of the JSON.
    #[serde(skip)]
    pub trial_rowid: i64,
}

impl ResultRow {
    /// Fills the `*_per_item_*` figures from the stored ones. The `energy_per_image_j` column
    /// holds energy per iteration for workloads without images (their power record counts
    /// iterations), so theirs is divided by the items of an iteration and left out as "per
    /// image".
    pub(crate) fn derive_per_item(&mut self) {
        let item = WorkItem::of_workload(&self.workload);
        let per_iteration = match item {
            WorkItem::Image => (self.batch > 0).then_some(self.batch),
            WorkItem::Sample => Some(self.batch.max(1)),
            WorkItem::Execution => Some(1),
        };
        let (time, energy) = match item {
            WorkItem::Image => (self.time_per_image_s, self.energy_per_image_j),
            WorkItem::Sample | WorkItem::Execution => {
                let per_iteration_energy = self.energy_per_image_j.take();
                let n = per_iteration.unwrap_or(1) as f64;
                (
                    self.time_per_iteration_s.map(|t| t / n),
                    per_iteration_energy.map(|e| e / n),
                )
            }
        };
        self.item = Some(item);
        self.items_per_iteration = per_iteration;
        self.time_per_item_s = time;
        self.energy_per_item_j = energy;
        self.edp_per_item_js = energy.zip(time).map(|(e, t)| e * t);
    }

    pub fn key(&self) -> TrialKey {
        TrialKey {
            workload: self.workload.clone(),
            net: self.net.clone(),
            device: self.device.clone(),
            batch: self.batch,
            epochs: self.epochs,
            images: self.images,
            dataset: self.dataset.clone(),
            params: self.params_text.clone(),
        }
    }
}

/// Handle on one edgebench database file.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// The file the path named when it was opened (see [`Store::check_still_at_path`]).
    identity: Option<check::FileIdentity>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (creating if absent) a database for writing and brings its schema up to date.
    ///
    /// A file that is not SQLite, is SQLite but not ours, has a newer schema, is damaged, or
    /// cannot be written (nor the files SQLite keeps beside it created) is refused before
    /// anything is written to it or created beside it.
    pub fn open(path: &Path) -> Result<Store> {
        let path = path.to_path_buf();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
        }
        // Refused files get no -wal and -shm beside them.
        let prechecked = check::precheck(&path)?;
        check::check_writable(
            &path,
            &[check::beside(&path, "-wal"), check::beside(&path, "-shm")],
        )?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(&path, flags).map_err(sql_err(&path))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_err(&path))?;

        // Inspect first: journal_mode=WAL rewrites the header, so it must not touch a
        // foreign file.
        let found = inspect(&conn, &path)?;
        check_not_newer(&path, found)?;
        if found > 0 && !matches!(prechecked, check::Precheck::Checked(_)) {
            // A write to a damaged file (even a `failed` run row) spreads the damage and
            // buries it; the whole-file check costs one read of the file, once per open.
            quick_check(&conn, &path)?;
        }

        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(sql_err(&path))?;
        if !mode.eq_ignore_ascii_case("wal") {
            // E.g. some network file systems; still correct, only slower.
            tracing::warn!(path = %path.display(), mode, "could not enable WAL journal mode");
        }
        conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
            .map_err(sql_err(&path))?;
        migrate(&mut conn, &path, found)?;
        let store = Store::from_parts(conn, path);
        if found < SCHEMA_VERSION {
            // Keep the schema in the main file too; see `checkpoint`.
            store.checkpoint();
        }
        Ok(store)
    }

    /// Opens an existing database read-only (for `results`/`export`); never creates or
    /// upgrades it, and needs no write access to the file or its folder.
    ///
    /// Checks the whole file for damage (`PRAGMA quick_check`: one read of every page), so
    /// that no command shows part of a damaged file as if it were whole; a refused file gets
    /// no `-wal` or `-shm` beside it.
    pub fn open_readonly(path: &Path) -> Result<Store> {
        let path = path.to_path_buf();
        let prechecked = check::precheck(&path)?;
        if let check::Precheck::Checked(found) = prechecked {
            check_readable_version(&path, found)?;
        }
        let conn = open_read_connection(&path)?;
        let found = inspect(&conn, &path)?;
        check_readable_version(&path, found)?;
        if !matches!(prechecked, check::Precheck::Checked(_)) {
            quick_check(&conn, &path)?;
        }
        conn.execute_batch("PRAGMA foreign_keys=ON;")
            .map_err(sql_err(&path))?;
        Ok(Store::from_parts(conn, path))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Schema version of the open file (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<u32> {
        user_version(&self.conn).map_err(sql_err(&self.path))
    }

    /// Inserts a run with status `running`; returns its row id.
    pub fn begin_run(&mut self, info: &RunInfo) -> Result<i64> {
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
    /// A trial's stored power samples as (rail, t_ns, watts), by rail then time.
    pub fn power_trace(&self, trial_id: i64) -> Result<Vec<(String, i64, f64)>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT rail, t_ns, watts FROM power_samples WHERE trial_id = ?1 ORDER BY rail, t_ns",
            )
            .map_err(sql_err(&self.path))?;
        let rows = st
            .query_map([trial_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(sql_err(&self.path))?;
        Ok(rows)
    }

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
    pub fn record_power_unmeasured(
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

    /// Per-iteration energies of a trial (step, joules or None), ordered by step.
    pub fn iteration_energies(&self, trial_id: i64) -> Result<Vec<(usize, Option<f64>)>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT step, energy_j FROM iterations WHERE trial_id = ?1 ORDER BY step",
            )
            .map_err(sql_err(&self.path))?;
        let rows = st
            .query_map([trial_id], |r| Ok((uint(r, 0)?, r.get(1)?)))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(sql_err(&self.path))?;
        Ok(rows)
    }

    /// Copies the WAL into the main file (best effort, never waits) so that a user who
    /// copies only `*.db` mid-sweep still gets every finished trial.
    fn checkpoint(&self) {
        let r = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(0));
        if let Err(e) = r {
            tracing::debug!(path = %self.path.display(), error = %e, "WAL checkpoint skipped");
        }
    }

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
                "SELECT net, device, batch, epochs, images, dataset, status, workload, params, \
                 repetition FROM trials ORDER BY id",
            )
            .map_err(sql_err(&self.path))?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    (
                        TrialKey {
                            workload: r.get(7)?,
                            net: r.get(0)?,
                            device: r.get(1)?,
                            batch: uint(r, 2)?,
                            epochs: uint(r, 3)?,
                            images: uint(r, 4)?,
                            dataset: r.get(5)?,
                            params: r.get(8)?,
                        },
                        uint(r, 9)?,
                    ),
                    r.get::<_, TrialStatus>(6)?,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(sql_err(&self.path))?;
        Ok(rows)
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

    /// One row per trial, ordered by run start time, then trial row id.
    pub fn results(&self) -> Result<Vec<ResultRow>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT r.uuid, t.uuid, r.host, t.net, t.device, t.batch, t.epochs, t.images, \
                 t.dataset, t.iterations_done, t.iterations_planned, t.warmup_iterations, \
                 t.status, t.error, t.started_at, t.ended_at, t.time_per_image_s, \
                 t.time_per_image_spread_s, t.images_per_s, t.loss_first, t.loss_last, \
                 t.loss_anomaly, t.energy_j, t.avg_power_w, t.energy_per_image_j, t.edp_js, \
                 t.swap_pressure, t.peak_rss_bytes, t.id, t.dynamic_energy_j, \
                 t.power_samples, t.power_rate_hz, t.power_jitter_s, t.power_incomplete, \
                 t.power_gap_s, r.board, r.power_total, r.baseline_power_w, r.baseline_s, \
                 t.throttled, t.throttle_note, t.power_low_samples, r.power_scope, t.power_note, \
                 t.workload, t.params, t.time_per_iteration_s, t.time_per_iteration_spread_s, \
                 t.total_time_s, t.gflop_per_s, t.metrics, t.peak_gpu_bytes, t.repetition \
                 FROM trials t JOIN runs r ON r.id = t.run_id \
                 ORDER BY r.started_at, r.id, t.id",
            )
            .map_err(sql_err(&self.path))?;
        let rows = st
            .query_map([], |r| {
                Ok(ResultRow {
                    run_id: r.get(0)?,
                    trial_id: r.get(1)?,
                    host: r.get(2)?,
                    net: r.get(3)?,
                    device: r.get(4)?,
                    batch: uint(r, 5)?,
                    epochs: uint(r, 6)?,
                    images: uint(r, 7)?,
                    dataset: r.get(8)?,
                    repetition: uint(r, 52)?,
                    iterations: uint(r, 9)?,
                    iterations_planned: uint(r, 10)?,
                    warmup_iterations: uint(r, 11)?,
                    status: r.get(12)?,
                    error: r.get(13)?,
                    started_at: r.get(14)?,
                    ended_at: r.get(15)?,
                    time_per_image_s: r.get(16)?,
                    time_per_image_spread_s: r.get(17)?,
                    images_per_s: r.get(18)?,
                    loss_first: r.get(19)?,
                    loss_last: r.get(20)?,
                    loss_anomaly: r.get(21)?,
                    energy_j: r.get(22)?,
                    avg_power_w: r.get(23)?,
                    energy_per_image_j: r.get(24)?,
                    edp_js: r.get(25)?,
                    item: None,
                    items_per_iteration: None,
                    time_per_item_s: None,
                    energy_per_item_j: None,
                    edp_per_item_js: None,
                    swap_pressure: r.get(26)?,
                    peak_rss_bytes: r.get(27)?,
                    peak_gpu_bytes: r.get(51)?,
                    trial_rowid: r.get(28)?,
                    memory: MemoryColumns::default(),
                    dynamic_energy_j: r.get(29)?,
                    rail_energy_j: None,
                    power_samples: r.get(30)?,
                    power_rate_hz: r.get(31)?,
                    power_jitter_s: r.get(32)?,
                    power_incomplete: r.get(33)?,
                    power_gap_s: r.get(34)?,
                    board: r.get(35)?,
                    power_total: r.get(36)?,
                    baseline_power_w: r.get(37)?,
                    baseline_s: r.get(38)?,
                    throttled: r.get(39)?,
                    throttle_note: r.get(40)?,
                    power_low_samples: r.get(41)?,
                    power_few_readings: None,
                    power_scope: r.get(42)?,
                    power_note: r.get(43)?,
                    workload: r.get(44)?,
                    params_text: r.get(45)?,
                    params: json_object(r, 45)?,
                    time_per_iteration_s: r.get(46)?,
                    time_per_iteration_spread_s: r.get(47)?,
                    total_time_s: r.get(48)?,
                    gflop_per_s: r.get(49)?,
                    metrics: json_object(r, 50)?,
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(sql_err(&self.path))?;
        let mut rows = self.fill_memory(rows)?;
        let mut st = self
            .conn
            .prepare_cached("SELECT trial_id, rail, energy_j FROM trial_rail_energy")
            .map_err(sql_err(&self.path))?;
        let rails = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, f64>(2)?,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(sql_err(&self.path))?;
        let mut by_trial: std::collections::HashMap<i64, std::collections::BTreeMap<String, f64>> =
            std::collections::HashMap::new();
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
            row.derive_per_item();
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
        let rows = st
            .query_map([trial_id], |r| {
                Ok(IterationRecord {
                    step: uint(r, 0)?,
                    epoch: uint(r, 1)?,
                    loss: r.get::<_, Option<f64>>(2)?.unwrap_or(f64::NAN),
                    lr: r.get::<_, Option<f64>>(3)?.unwrap_or(f64::NAN),
                    data_s: r.get(4)?,
                    step_s: r.get(5)?,
                    t_start_ns: r.get(6)?,
                    t_end_ns: r.get(7)?,
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(sql_err(&self.path))?;
        Ok(rows)
    }

    /// Each iteration's loss and step time as its log wrote them, in the order of
    /// [`Store::iterations`]; empty texts for iterations that were measured, not imported.
    pub(crate) fn logged_text(&self, trial_id: i64) -> Result<Vec<LoggedText>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT loss_text, step_s_text FROM iterations WHERE trial_id = ?1 ORDER BY step",
            )
            .map_err(sql_err(&self.path))?;
        let rows = st
            .query_map([trial_id], |r| {
                Ok(LoggedText {
                    loss: r.get(0)?,
                    step_s: r.get(1)?,
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(sql_err(&self.path))?;
        Ok(rows)
    }

    fn expect_one(&self, changed: usize, what: &'static str, id: i64) -> Result<()> {
        if changed == 1 {
            Ok(())
        } else {
            Err(StoreError::NotFound {
                path: self.path.clone(),
                what,
                id,
            })
        }
    }
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

fn sql_err(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |source| StoreError::Sqlite {
        path: path.to_path_buf(),
        hint: error::hint(&source),
        source,
    }
}

/// Counts are `usize` in Rust and INTEGER (i64) in SQLite; saturating is fine for counts.
fn int(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn uint(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<usize> {
    let v: i64 = row.get(idx)?;
    usize::try_from(v).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, v))
}

/// A TEXT column holding a JSON object (NULL = empty); anything else is a conversion error
/// naming the column.
fn json_object(
    row: &rusqlite::Row<'_>,
    idx: usize,
) -> rusqlite::Result<serde_json::Map<String, serde_json::Value>> {
    match row.get::<_, Option<String>>(idx)? {
        None => Ok(serde_json::Map::new()),
        Some(text) => match serde_json::from_str(&text) {
            Ok(serde_json::Value::Object(map)) => Ok(map),
            Ok(_) => Err(rusqlite::Error::FromSqlConversionFailure(
                idx,
                rusqlite::types::Type::Text,
                format!("not a JSON object: {text}").into(),
            )),
            Err(e) => Err(rusqlite::Error::FromSqlConversionFailure(
                idx,
                rusqlite::types::Type::Text,
                Box::new(e),
            )),
        },
    }
}

/// A new trial row, `running`; returns its id.
fn insert_trial(
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

/// A trial's outcome; returns the rows changed (1 when the trial exists).
fn write_summary(conn: &Connection, trial_id: i64, s: &TrialSummary) -> rusqlite::Result<usize> {
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
        s.error,
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
fn insert_iteration(
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

fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    // user_version is a signed 32-bit field; a negative one is certainly not ours.
    Ok(u32::try_from(v).unwrap_or(u32::MAX))
}

/// `PRAGMA quick_check` of the whole file (one read of every page). A damaged file is
/// [`StoreError::Corrupt`], naming what SQLite found.
fn quick_check(conn: &Connection, path: &Path) -> Result<()> {
    let corrupt = |detail: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let found = conn
        .prepare("PRAGMA quick_check")
        .and_then(|mut st| {
            st.query_map([], |r| r.get::<_, String>(0))?
                .take(3)
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .map_err(|e| match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => corrupt(e.to_string()),
            _ => sql_err(path)(e),
        })?;
    match found.as_slice() {
        [ok] if ok == "ok" => Ok(()),
        [] => Err(corrupt("quick_check returned nothing".into())),
        problems => Err(corrupt(problems.join("; "))),
    }
}

/// Opens an existing file for reading without needing write access to it or its folder.
///
/// A WAL database is read through its `-shm` index, which a reader normally creates. Where
/// it cannot (read-only folder or mount) and no `-wal` file holds rows outside the main file,
/// the main file is the whole database and is opened `immutable` (no `-shm`, no locks);
/// with a `-wal` present that would hide its rows, so that case is refused with what to do.
pub(crate) fn open_read_connection(path: &Path) -> Result<Connection> {
    if !path.is_file() {
        return Err(StoreError::Missing {
            path: path.to_path_buf(),
        });
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(sql_err(path))?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_err(path))?;
    // The -shm is opened lazily, on the first read.
    let probe = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    });
    let needs_write = |e: &rusqlite::Error| {
        matches!(
            e.sqlite_error_code(),
            Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly | ErrorCode::PermissionDenied)
        )
    };
    match probe {
        Err(e) if needs_write(&e) => {
            drop(conn);
            let mut wal = path.as_os_str().to_owned();
            wal.push("-wal");
            if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
                return Err(StoreError::WalUnreadable {
                    path: path.to_path_buf(),
                });
            }
            let flags = flags | OpenFlags::SQLITE_OPEN_URI;
            let conn =
                Connection::open_with_flags(immutable_uri(path), flags).map_err(sql_err(path))?;
            Ok(conn)
        }
        // Anything else (not SQLite, damaged) is for `inspect` to name.
        _ => Ok(conn),
    }
}

/// `file:` URI of `path` with `immutable=1`; every byte outside the URI-safe set is
/// percent-encoded, so `?`, `#` and `%` in a file name stay part of the name.
fn immutable_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut uri = String::from("file:");
    for &b in absolute.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// What [`Store::open_readonly`] can read: an edgebench file of exactly this schema version.
fn check_readable_version(path: &Path, found: u32) -> Result<()> {
    if found == 0 {
        return Err(empty_database(path));
    }
    check_not_newer(path, found)?;
    if found < SCHEMA_VERSION {
        return Err(StoreError::NeedsUpgrade {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// A reader was given a database no run has written to yet.
fn empty_database(path: &Path) -> StoreError {
    StoreError::Foreign {
        path: path.to_path_buf(),
        reason: "it is empty; no edgebench run has written to it yet".into(),
    }
}

fn check_not_newer(path: &Path, found: u32) -> Result<()> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Decides, by reading only, whether the file is a fresh database (returns 0) or an edgebench
/// one (returns its schema version); anything else is an error.
fn inspect(conn: &Connection, path: &Path) -> Result<u32> {
    let not_sqlite = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => StoreError::NotSqlite {
            path: path.to_path_buf(),
        },
        Some(ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
        _ => sql_err(path)(e),
    };
    let foreign = |reason: &str| StoreError::Foreign {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let version = user_version(conn).map_err(not_sqlite)?;
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(not_sqlite)?;
    if objects == 0 {
        return if version == 0 {
            Ok(0)
        } else {
            Err(foreign("it has a user_version but no tables"))
        };
    }
    let has_meta: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            [],
            |r| r.get(0),
        )
        .map_err(not_sqlite)?;
    if !has_meta {
        return Err(foreign("it has tables but no `meta` table"));
    }
    // A foreign `meta` table may have other columns; that is "not ours", not an I/O error.
    let app: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'application'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| match e.sqlite_error_code() {
            // Damage to the table's pages is not a different application's table.
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Corrupt {
                path: path.to_path_buf(),
                detail: format!("its `meta` table cannot be read: {e}"),
            },
            _ => foreign("its `meta` table is not edgebench's"),
        })?;
    match app.as_deref() {
        Some(schema::APPLICATION) => {}
        Some(other) => {
            return Err(foreign(&format!(
                "its meta table says application = {other:?}"
            )))
        }
        None => return Err(foreign("its `meta` table has no application row")),
    }
    if version == 0 {
        return Err(foreign(
            "it has an edgebench meta row but schema version 0; it looks damaged",
        ));
    }
    Ok(version)
}

/// Applies every migration newer than `found`, each in its own IMMEDIATE transaction.
fn migrate(conn: &mut Connection, path: &Path, found: u32) -> Result<()> {
    for m in schema::MIGRATIONS.iter().filter(|m| m.version > found) {
        let mig_err = |source| StoreError::Migration {
            path: path.to_path_buf(),
            version: m.version,
            source,
        };
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(mig_err)?;
        // Re-read under the write lock: another process may have migrated meanwhile.
        let current = user_version(&tx).map_err(mig_err)?;
        check_not_newer(path, current)?;
        if current >= m.version {
            continue;
        }
        tx.execute_batch(m.sql).map_err(mig_err)?;
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [m.version.to_string()],
        )
        .map_err(mig_err)?;
        tx.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('created_with', ?1)",
            [env!("CARGO_PKG_VERSION")],
        )
        .map_err(mig_err)?;
        tx.pragma_update(None, "user_version", m.version)
            .map_err(mig_err)?;
        tx.commit().map_err(mig_err)?;
        tracing::debug!(path = %path.display(), version = m.version, "applied schema migration");
    }
    Ok(())
}
