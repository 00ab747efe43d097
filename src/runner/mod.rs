//! The parent side of a sweep: lock the database, preflight, then each planned trial in turn
//! in its worker process, every iteration written to the store as it finishes, the trial's
//! summary at its end. One trial's failure is recorded and the sweep goes on. `edgebench run`
//! and the daemon both start sweeps through [`sweep`].

mod memory_plan;
mod trial;
mod worker_process;

use crate::board::Detection;
use crate::config::{Config, DeviceKind};
use crate::host::{self, HostPaths};
use crate::memory::cgroup;
use crate::metrics::Metrics;
use crate::plan;
use crate::power::PowerMonitor;
use crate::provenance;
use crate::store::{LockError, ResultRow, RunInfo, Store, SweepLock, TrialKey, TrialStatus};
use crate::workloads::{self, Prepared};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
pub use trial::end_active_trial;
use trial::TrialContext;

/// How often the clocks and temperatures are read during a trial: a thermal cap holds for
/// seconds, and a read costs a few dozen small sysfs files.
const CLOCK_INTERVAL: Duration = Duration::from_millis(500);

/// How a run ended.
#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    pub run_id: Option<i64>,
    pub run_uuid: Option<String>,
    pub ran: usize,
    pub skipped: usize,
    pub failed: usize,
    pub interrupted: bool,
    /// The keys of every trial the sweep covers, run now or done before, each once.
    pub keys: Vec<TrialKey>,
    /// The newest result of each repetition of those keys, in the sweep's order (filled by
    /// [`sweep`]).
    pub results: Vec<ResultRow>,
}

struct RunRequest<'a> {
    config: &'a Config,
    force: bool,
    retry_failed: bool,
    host: &'a HostPaths,
    board: &'a Detection,
    stop: &'a AtomicBool,
    abort: Option<&'a AtomicBool>,
    on_trial: Option<&'a (dyn Fn(&str) + Sync)>,
    power: Option<&'a PowerMonitor>,
    metrics: Option<&'a Metrics>,
    lock: &'a SweepLock,
    prepared: Prepared,
}

/// What starts a sweep, from `edgebench run` or the daemon.
pub struct SweepRequest<'a> {
    /// Validated.
    pub config: &'a Config,
    /// Rerun trials already done.
    pub force: bool,
    /// Rerun trials that ended failed, oom, crashed or skipped_memory.
    pub retry_failed: bool,
    pub host: &'a HostPaths,
    /// The board the sweep runs on ([`board`]): its provenance, the CUDA check, the memory
    /// plan, power discovery and the workload's preparation all use this one.
    pub board: &'a Detection,
    /// Set by SIGINT/SIGTERM: the current trial stops at the next iteration boundary.
    pub stop: &'a AtomicBool,
    /// Set by a second SIGINT/SIGTERM: the current trial ends now (its worker and whatever
    /// it started are killed), recorded `interrupted`.
    pub abort: Option<&'a AtomicBool>,
    /// Told "trial k/n: ..." as each trial starts (the daemon's sd_notify STATUS line).
    pub on_trial: Option<&'a (dyn Fn(&str) + Sync)>,
    /// While another sweep holds the database: None refuses at once; Some waits, telling
    /// this callback who holds it.
    pub wait_for_lock: Option<&'a mut dyn FnMut(&LockError)>,
    /// The live metrics to update (power, memory, clocks, trial progress), when served.
    pub metrics: Option<&'a Metrics>,
}

/// Why a sweep did not run: `refused` when nothing was written (bad input, a held lock, a
/// missing sensor: exit 2), else a runtime error.
#[derive(Debug)]
pub struct SweepError {
    pub refused: bool,
    pub error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for SweepError {
    fn from(e: E) -> Self {
        SweepError {
            refused: false,
            error: e.into(),
        }
    }
}

fn refused(error: impl Into<anyhow::Error>) -> SweepError {
    SweepError {
        refused: true,
        error: error.into(),
    }
}

/// A whole sweep: preflight and the power sensors (refused before the database is touched),
/// the database's sweep lock, the store, then the run. Returns with the lock released.
/// The statuses a trial ends with: every one but `running`.
pub(crate) fn ended_statuses() -> Vec<&'static str> {
    TrialStatus::ALL
        .into_iter()
        .filter(|s| *s != TrialStatus::Running)
        .map(TrialStatus::as_str)
        .collect()
}

/// The board a sweep of `config` runs on: the profile `--board` / `power.board` names, else
/// the one detected from the device tree. Resolved once, before anything else, and handed to
/// everything that depends on it; an unknown name is bad input.
pub fn board(config: &Config, host: &HostPaths) -> anyhow::Result<Detection> {
    crate::board::select(host, config.power.board.as_deref())
}

/// The live metrics of this host's sweeps: every series labelled with its host and `board`,
/// every workload's counters at 0 from the first scrape.
pub fn live_metrics(host: &HostPaths, board: &Detection) -> Metrics {
    let metrics = Metrics::for_host(host, board.profile);
    metrics.count_from_zero(&workloads::names(), &ended_statuses());
    metrics
}

pub fn sweep(req: SweepRequest<'_>) -> Result<RunOutcome, SweepError> {
    let config = req.config;
    let mut prepared = preflight(config, req.host, req.board).map_err(refused)?;
    let power = match config.power.enabled {
        true => Some(
            PowerMonitor::for_run(req.host, &config.power, req.board.clone()).map_err(refused)?,
        ),
        false => None,
    };
    prepared.power_reading_period = power.as_ref().map(PowerMonitor::reading_period);
    let db = config.db_path();
    // A damaged, foreign or unwritable file is refused before its lock file is made beside it.
    Store::check_existing(&db).map_err(|e| match e.is_bad_input() {
        true => refused(e),
        false => e.into(),
    })?;
    let lock = match req.wait_for_lock {
        Some(waiting) => match SweepLock::acquire_waiting(&db, req.stop, waiting)? {
            Some(lock) => lock,
            None => {
                return Ok(RunOutcome {
                    interrupted: true,
                    ..Default::default()
                })
            }
        },
        None => SweepLock::try_acquire(&db).map_err(|e| match e {
            LockError::Held { .. } => refused(e),
            e => e.into(),
        })?,
    };
    // A damaged or foreign file is refused untouched, before a run row is written.
    let mut store = Store::open(&db).map_err(|e| match e.is_bad_input() {
        true => refused(e),
        false => e.into(),
    })?;
    tracing::info!("results: {}", db.display());
    let mut outcome = run(
        RunRequest {
            config,
            force: req.force,
            retry_failed: req.retry_failed,
            host: req.host,
            board: req.board,
            stop: req.stop,
            abort: req.abort,
            on_trial: req.on_trial,
            power: power.as_ref(),
            metrics: req.metrics,
            lock: &lock,
            prepared,
        },
        &mut store,
    )?;
    // The summary is read from the open file: it must still be the one at the path.
    if let Err(lost) = store.check_still_at_path() {
        return Err(lost_database(&store, lost).into());
    }
    outcome.results = latest_for_keys(workloads::results(&store)?, &outcome.keys);
    Ok(outcome)
}

/// The newest trial of every repetition of every key this sweep covers, in the sweep's
/// order, repetitions in order.
fn latest_for_keys(rows: Vec<ResultRow>, keys: &[TrialKey]) -> Vec<ResultRow> {
    let index: std::collections::HashMap<&TrialKey, usize> =
        keys.iter().enumerate().map(|(i, k)| (k, i)).collect();
    let mut latest: std::collections::BTreeMap<(usize, usize), ResultRow> =
        std::collections::BTreeMap::new();
    // results() is ordered oldest first, so a later row replaces an earlier one.
    for row in rows {
        if let Some(&k) = index.get(&row.key()) {
            latest.insert((k, row.repetition), row);
        }
    }
    latest.into_values().collect()
}

/// The error text of a run's trial found still `running` when the next sweep takes the lock.
pub(crate) const UNFINISHED_NOTE: &str = "ended without finishing: its edgebench process stopped \
     (killed, crashed, or could not write) before recording an end; the iterations recorded \
     stay, and a resumed sweep runs the trial again";

fn now() -> String {
    crate::clock::now_rfc3339()
}

/// `--device cuda` on a board whose GPU candle cannot use is refused with the reason,
/// before a build without the `cuda` feature would only say "rebuild".
fn cuda_on_this_board(board: &Detection, host: &HostPaths) -> anyhow::Result<()> {
    match crate::board::cuda_obstacle(board.profile, crate::board::installed_cuda(host)) {
        Some(why) => anyhow::bail!(
            "--device cuda cannot work on this board ({}, {}): {why}",
            board.profile.description,
            board.how
        ),
        None => Ok(()),
    }
}

/// Everything that can be refused before a byte is written: the devices, the data set, and a
/// memory cgroup when `--mem-limit` asks for one.
pub fn preflight(config: &Config, host: &HostPaths, board: &Detection) -> anyhow::Result<Prepared> {
    let workload = workloads::by_kind(&config.sweep.workload).map_err(anyhow::Error::msg)?;
    let candle_devices = match workload.profile().computes_on_devices {
        true => &config.sweep.devices[..],
        false => &[][..],
    };
    for device in candle_devices {
        if *device == DeviceKind::Cuda {
            cuda_on_this_board(board, host)?;
        }
        crate::train::device(*device)?;
    }
    if let Some(limit) = config.memory.limit_bytes() {
        cgroup::check(host, limit)?;
    }
    workload.prepare(config, host, board.profile)
}

fn progress_bar(enabled: bool) -> Option<ProgressBar> {
    enabled.then(|| {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} it  {msg}  ETA {eta}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar
    })
}

/// The database file was deleted or replaced while the sweep wrote to it: everything is
/// copied from the open file to a recovery file beside it, and the error says where.
fn lost_database(store: &Store, lost: crate::store::StoreError) -> anyhow::Error {
    match store.write_recovery_copy() {
        Ok(copy) => anyhow::anyhow!(
            "{lost}. Every result of this database, this run's included, was copied from the \
             still open file to {}; move it back with `mv {} {}`",
            copy.display(),
            copy.display(),
            store.path().display()
        ),
        Err(e) => anyhow::anyhow!(
            "{lost}. Copying the results from the still open file failed too ({e:#}): this \
             run's results are lost"
        ),
    }
}

/// Runs the sweep into `store`.
fn run(req: RunRequest<'_>, store: &mut Store) -> anyhow::Result<RunOutcome> {
    let config = req.config;
    let prepared = &req.prepared;
    let (runs, trials) = store.interrupt_unfinished(req.lock, UNFINISHED_NOTE)?;
    if runs + trials > 0 {
        tracing::warn!(
            "{runs} run(s) and {trials} trial(s) in {} were left `running` by a process that \
             ended without finishing; marked interrupted (their iterations stay)",
            store.path().display()
        );
    }
    let memory = memory_plan::plan(config, req.host, req.board.profile)?;
    if let Some(parent) = &memory.parent {
        let stale = cgroup::remove_stale(parent, req.host);
        if stale.cgroups > 0 {
            tracing::warn!(
                "removed {} trial cgroup(s) left by an edgebench process that ended without \
                 cleaning up, and killed {} process(es) still running in them",
                stale.cgroups,
                stale.processes
            );
        }
        for (dir, why) in &stale.left {
            tracing::warn!(
                "cannot remove the trial cgroup {} left by an edgebench process that ended \
                 without cleaning up ({why}): remove it with `rmdir` once `cgroup.procs` \
                 there is empty",
                dir.display()
            );
        }
    }
    // Resume counts per repetition: each repetition of a key is done, or not, as one trial
    // of a key without repetitions would be.
    let done_status =
        store.statuses_by_repetition(TrialStatus::done_for_resume(req.retry_failed))?;
    let done: std::collections::HashSet<_> = done_status.keys().cloned().collect();
    let plan = plan::plan(&prepared.plan_input(config, req.host), &done, req.force);
    let mut ctx = TrialContext {
        config,
        host: req.host,
        stop: req.stop,
        abort: req.abort,
        power: None,
        stop_grace: Duration::from_secs_f64(config.sweep.stop_grace_s),
        memory,
        metrics: req.metrics,
    };
    let mut outcome = RunOutcome {
        skipped: plan.skipped.len(),
        keys: plan.skipped.iter().chain(&plan.to_run).fold(
            Vec::new(),
            |mut keys: Vec<TrialKey>, t| {
                if !keys.contains(&t.key) {
                    keys.push(t.key.clone());
                }
                keys
            },
        ),
        ..Default::default()
    };
    for t in &plan.skipped {
        let db = store.path().display();
        match done_status.get(&(t.key.clone(), t.repetition)) {
            Some(status) if status.is_failure() => tracing::info!(
                "{} already ended {status} in {db}; not rerun (use --retry-failed to rerun it)",
                t.label
            ),
            _ => tracing::info!("{} already ok in {db} (use --force to rerun)", t.label),
        }
    }
    // An interrupt during preflight: nothing recorded yet, nothing to record.
    if plan.to_run.is_empty() || req.stop.load(Ordering::SeqCst) {
        outcome.interrupted = !plan.to_run.is_empty();
        return Ok(outcome);
    }
    let threads = match config.train.threads {
        0 => candle_core::utils::get_num_threads(),
        n => n,
    };
    let uuid = uuid::Uuid::new_v4().to_string();
    let run_id = store.begin_run(&RunInfo {
        uuid: uuid.clone(),
        host: req.host.hostname(),
        started_at: now(),
        config_toml: crate::workloads::effective_config(config).to_toml(),
        edgebench_version: host::VERSION.to_string(),
        git_commit: host::GIT_COMMIT.to_string(),
        candle_version: host::CANDLE_VERSION.to_string(),
        cpu_threads: threads,
        cpu_model: req.host.cpu_model(),
        os: req.host.os(),
    })?;
    outcome.run_id = Some(run_id);
    outcome.run_uuid = Some(uuid);
    let mut facts = provenance::capture(req.host, req.board);
    facts.0.extend(prepared.provenance_items());
    store.record_provenance(run_id, &facts)?;
    if let Some(m) = req.power {
        let baseline = m.baseline(Duration::from_secs_f64(config.power.baseline_s), req.stop);
        if let Some(b) = &baseline {
            tracing::info!(
                "idle baseline: {:.3} W over {:.1} s",
                b.power_w,
                b.duration_s
            );
        }
        store.set_run_power(
            run_id,
            &m.board.profile.name,
            &m.total_how,
            baseline.as_ref().map(|b| (b.power_w, b.duration_s)),
        )?;
        store.set_run_power_scope(run_id, m.scope.as_str())?;
        ctx.power = Some((m, baseline, config.power.store_samples));
    }
    let bar = progress_bar(
        std::io::stderr().is_terminal()
            && workloads::by_kind(&config.sweep.workload).is_ok_and(|w| w.profile().shows_progress),
    );
    let total = plan.to_run.len();
    for (k, trial) in plan.to_run.iter().enumerate() {
        // An interrupt during the idle baseline or between trials: this trial never started,
        // so it stays unrecorded and a resumed sweep runs it.
        if req.stop.load(Ordering::SeqCst) {
            outcome.interrupted = true;
            break;
        }
        if let Some(on_trial) = req.on_trial {
            on_trial(&format!("trial {}/{total}: {}", k + 1, trial.label));
        }
        if let Some(bar) = &bar {
            bar.reset();
            bar.set_length(trial.iterations as u64);
            bar.set_prefix(format!("trial {}/{total} {}", k + 1, trial.label));
        } else {
            tracing::info!(
                "trial {}/{total}: {} ({} iterations)",
                k + 1,
                trial.label,
                trial.iterations
            );
        }
        let status = trial::run_one(&ctx, store, run_id, trial, bar.as_ref());
        let ended = |store: &mut Store, status: &str| {
            store
                .record_provenance(run_id, &provenance::capture_end(req.host))
                .ok();
            store.finish_run(run_id, &now(), status).ok();
        };
        let status = match status {
            Ok(s) => s,
            Err(e) => {
                ended(store, "failed");
                return Err(e);
            }
        };
        // Checked after every trial, so a lost file costs at most one trial's wait to notice.
        if let Err(lost) = store.check_still_at_path() {
            ended(store, "interrupted");
            return Err(lost_database(store, lost));
        }
        outcome.ran += 1;
        if status.counts_as_failed() {
            outcome.failed += 1;
        }
        if status == TrialStatus::Interrupted {
            outcome.interrupted = true;
            break;
        }
        if req.stop.load(Ordering::SeqCst) {
            outcome.interrupted = true;
            break;
        }
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    if let Some(warning) = req.power.and_then(PowerMonitor::run_warning) {
        tracing::warn!("{warning}");
    }
    let status = if outcome.interrupted {
        "interrupted"
    } else {
        "finished"
    };
    store.record_provenance(run_id, &provenance::capture_end(req.host))?;
    store.finish_run(run_id, &now(), status)?;
    Ok(outcome)
}
