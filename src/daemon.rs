//! `edgebench daemon`: the control plane a service manager runs. Tokio handles only signals,
//! timers and sd_notify; sweeps run through the same runner as `edgebench run`, on a blocking
//! thread, with each trial in its worker process.

use crate::config::{Config, Schedule};
use crate::host::HostPaths;
use crate::metrics::{server, Metrics};
use crate::runner;
use crate::sync;
use sd_notify::NotifyState;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

/// Seconds from `now_s` (seconds since local midnight) to the next HH:MM (never 0: a sweep that
/// just ran at HH:MM waits a day).
pub(crate) fn seconds_until(hour: u32, minute: u32, now_s: u64) -> u64 {
    let target = u64::from(hour * 3600 + minute * 60);
    let wait = (target + 86_400 - now_s % 86_400) % 86_400;
    if wait == 0 {
        86_400
    } else {
        wait
    }
}

/// Seconds since local midnight, in the zone the system is set to (TZ, else /etc/localtime).
fn local_seconds_of_day() -> u64 {
    let time = jiff::Zoned::now().time();
    u64::from(time.hour().unsigned_abs()) * 3600
        + u64::from(time.minute().unsigned_abs()) * 60
        + u64::from(time.second().unsigned_abs())
}

/// `(uptime seconds, 1-minute load)` from procfs.
pub(crate) fn uptime_and_load(host: &HostPaths) -> Option<(f64, f64)> {
    let first = |rel: &str| -> Option<f64> {
        std::fs::read_to_string(host.proc(rel))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some((first("uptime")?, first("loadavg")?))
}

/// sd_notify(3) to $NOTIFY_SOCKET; nothing without one. A failure is only logged: the daemon
/// works the same without a service manager listening.
fn notify(states: &[NotifyState]) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let target = target.to_string_lossy().into_owned();
    let sent = match target.strip_prefix('@') {
        // sd-notify connects to the variable as a file path; a Linux abstract socket ("@name",
        // as sd_notify(3) allows) is reached by name.
        Some(name) => notify_abstract(name, states),
        None => sd_notify::notify(states),
    };
    if let Err(e) = sent {
        tracing::debug!("sd_notify to {target} failed: {e}");
    }
}

fn notify_abstract(name: &str, states: &[NotifyState]) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    let message: String = states.iter().map(|s| format!("{s}\n")).collect();
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let socket = std::os::unix::net::UnixDatagram::unbound()?;
    socket.send_to_addr(message.as_bytes(), &addr).map(drop)
}

/// Half the watchdog period systemd asked for (WATCHDOG_USEC, for this process), if it asked.
fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|period| (period / 2).max(Duration::from_millis(100)))
}

fn load(path: &Path) -> anyhow::Result<(Config, Schedule)> {
    let config = Config::load(path)?;
    crate::workloads::check_config(&config, &path.display().to_string())?;
    let schedule = config.daemon.schedule;
    Ok((config, schedule))
}

/// Runs one sweep on a blocking thread; returns true if it was stopped by a signal.
async fn sweep(
    config: &Config,
    host: &HostPaths,
    metrics: &Metrics,
    signals: &mut Signals,
    pending: &mut Option<PathBuf>,
    config_path: &Path,
) -> anyhow::Result<bool> {
    let stop = Arc::new(AtomicBool::new(false));
    let (config, host, flag) = (config.clone(), host.clone(), Arc::clone(&stop));
    let metrics = metrics.clone();
    let mut task = tokio::task::spawn_blocking(move || -> anyhow::Result<runner::RunOutcome> {
        // A sweep started by hand holds the database: wait for it (a skipped sweep would be
        // lost until the next schedule), then resume; what it finished is not run again.
        let mut waiting = |held: &crate::store::LockError| {
            if let crate::store::LockError::Held { holder, lock, .. } = held {
                tracing::warn!(
                    "another sweep ({holder}) holds {}; this sweep starts when it ends",
                    lock.display()
                );
                notify(&[NotifyState::Status(&format!(
                    "waiting for another sweep ({holder}) to finish"
                ))]);
            }
        };
        let status = |line: &str| notify(&[NotifyState::Status(line)]);
        // Each sweep's own: a reloaded config may force another board.
        let board = runner::board(&config, &host)?;
        runner::sweep(runner::SweepRequest {
            config: &config,
            force: false,
            retry_failed: false,
            host: &host,
            board: &board,
            stop: &flag,
            abort: None,
            on_trial: Some(&status),
            wait_for_lock: Some(&mut waiting),
            metrics: Some(&metrics),
        })
        .map_err(|e| e.error)
    });
    let mut watchdog = signals.watchdog();
    let mut stopping = false;
    loop {
        tokio::select! {
            done = &mut task => {
                let outcome = done??;
                notify(&[NotifyState::Status(&format!(
                    "idle; last sweep: {} run, {} already done, {} failed{}",
                    outcome.ran, outcome.skipped, outcome.failed,
                    if outcome.interrupted { ", interrupted" } else { "" }
                ))]);
                return Ok(stopping);
            }
            _ = signals.term.recv() => {
                tracing::info!("SIGTERM received: stopping after the iteration in progress");
                stopping = true; stop.store(true, Ordering::SeqCst); notify(&[NotifyState::Stopping]);
            }
            _ = signals.int.recv() => {
                tracing::info!("SIGINT received: stopping after the iteration in progress");
                stopping = true; stop.store(true, Ordering::SeqCst); notify(&[NotifyState::Stopping]);
            }
            _ = signals.hup.recv() => {
                tracing::info!("SIGHUP received: the config is reloaded when the current sweep ends");
                // Applied when this sweep ends: a sweep's trials share one config.
                *pending = Some(config_path.to_path_buf());
                notify(&[NotifyState::Status("config change noted; applies after the current sweep")]);
            }
            _ = tick(&mut watchdog) => notify(&[NotifyState::Watchdog]),
        }
    }
}

struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    watchdog: Option<Duration>,
}

impl Signals {
    fn watchdog(&self) -> Option<tokio::time::Interval> {
        self.watchdog.map(tokio::time::interval)
    }
}

async fn tick(interval: &mut Option<tokio::time::Interval>) {
    match interval {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// Waits `duration` while answering signals; returns Some(exit code) when told to stop.
async fn idle(
    duration: Duration,
    signals: &mut Signals,
    reload: &mut dyn FnMut() -> anyhow::Result<()>,
) -> Option<i32> {
    let sleep = tokio::time::sleep(duration);
    tokio::pin!(sleep);
    let mut watchdog = signals.watchdog();
    loop {
        tokio::select! {
            _ = &mut sleep => return None,
            _ = signals.term.recv() => {
                tracing::info!("SIGTERM received: stopping");
                return Some(0);
            }
            _ = signals.int.recv() => {
                tracing::info!("SIGINT received: stopping");
                return Some(0);
            }
            _ = signals.hup.recv() => {
                tracing::info!("SIGHUP received: reloading the config");
                notify(&[NotifyState::Reloading]);
                match reload() {
                    Ok(()) => notify(&[NotifyState::Ready, NotifyState::Status("config reloaded")]),
                    Err(e) => {
                        tracing::error!("config reload failed, keeping the previous one: {e:#}");
                        notify(&[
                            NotifyState::Ready,
                            NotifyState::Status(&format!("config reload failed: {e}")),
                        ]);
                    }
                }
                // A new schedule may start sooner.
                return None;
            }
            _ = tick(&mut watchdog) => notify(&[NotifyState::Watchdog]),
        }
    }
}

/// The daemon's `[sync] postgres` pushes: after each sweep, then every `interval` while trials
/// wait; a failed push waits twice as long as the one before (up to `max_backoff`).
struct SyncState {
    /// Final trials not yet on the server as last seen; what the metrics gauge
    /// `edgebench_sync_backlog_trials` reports (see [`SyncState::backlog`]).
    backlog: u64,
    /// When the next push is due; `None`: nothing waits.
    due: Option<tokio::time::Instant>,
    /// The wait after the last failure (zero after a success).
    backoff: Duration,
    /// Where the backlog is shown live (`edgebench_sync_backlog_trials`).
    metrics: Metrics,
}

impl SyncState {
    fn new(metrics: &Metrics) -> SyncState {
        SyncState {
            backlog: 0,
            due: None,
            backoff: Duration::ZERO,
            metrics: metrics.clone(),
        }
    }

    /// Final trials waiting to be pushed, as of the last push or attempt.
    fn backlog(&self) -> u64 {
        self.backlog
    }

    /// One push on a blocking thread; returns the backlog after it. Without `[sync]
    /// postgres`, nothing.
    async fn push(&mut self, config: &Config) -> Option<u64> {
        let url = config.sync.postgres.clone()?;
        let db = config.db_path();
        let (u, d) = (url.clone(), db.clone());
        let pushed = tokio::task::spawn_blocking(move || sync::postgres::push(&u, &d))
            .await
            .map_err(anyhow::Error::from)
            .and_then(|r| r);
        let interval = config.sync.interval.0;
        let target = sync::postgres::mask_url(&url);
        match pushed {
            Ok(report) => {
                tracing::info!("{}", report.text());
                self.backlog = report.waiting;
                self.backoff = Duration::ZERO;
                self.due = (self.backlog > 0).then(|| tokio::time::Instant::now() + interval);
            }
            Err(e) => {
                let (u, d) = (url.clone(), db.clone());
                if let Ok(Ok(n)) =
                    tokio::task::spawn_blocking(move || sync::postgres::backlog(&u, &d)).await
                {
                    self.backlog = n;
                }
                self.backoff = if self.backoff.is_zero() {
                    interval
                } else {
                    (self.backoff * 2).min(config.sync.max_backoff.0)
                };
                tracing::warn!(
                    "push to {target} failed (next try in {}): {e:#}",
                    humantime::format_duration(self.backoff)
                );
                self.due = Some(tokio::time::Instant::now() + self.backoff);
            }
        }
        self.metrics.set_sync_backlog(self.backlog);
        let line = format!("{} trials wait to be pushed to {target}", self.backlog);
        tracing::info!("{line}");
        notify(&[NotifyState::Status(&line)]);
        Some(self.backlog)
    }
}

/// Waits `wait` for the next sweep, pushing whenever `[sync]` has a push due; returns
/// Some(exit code) when told to stop. A config reload ends the wait early, as [`idle`] does.
async fn idle_and_sync(
    wait: Duration,
    signals: &mut Signals,
    reload: &mut dyn FnMut() -> anyhow::Result<()>,
    sync_state: &mut SyncState,
    config: &dyn Fn() -> Config,
) -> Option<i32> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let now = tokio::time::Instant::now();
        let nap_end = match sync_state.due {
            Some(due) if due < deadline => due,
            _ => deadline,
        };
        if let Some(code) = idle(nap_end.saturating_duration_since(now), signals, reload).await {
            return Some(code);
        }
        let woke = tokio::time::Instant::now();
        if woke < nap_end || woke >= deadline {
            // Reloaded, or the sweep is due.
            return None;
        }
        sync_state.push(&config()).await;
    }
}

async fn daemon(config_path: PathBuf, host: HostPaths) -> anyhow::Result<i32> {
    let (mut config, mut schedule) = load(&config_path)?;
    let mut signals = Signals {
        term: signal(SignalKind::terminate())?,
        int: signal(SignalKind::interrupt())?,
        hup: signal(SignalKind::hangup())?,
        watchdog: watchdog_interval(),
    };
    tracing::info!(
        "daemon: config {}, schedule {:?}",
        config_path.display(),
        schedule
    );
    // The endpoint lives as long as the daemon; `[metrics] listen` and the board its series
    // are labelled with are read at start only.
    let metrics = runner::live_metrics(&host, &runner::board(&config, &host)?);
    let _server = server::start_or_log(&config.metrics.listen, &metrics);
    // With a server to push to, the backlog is known from the start (what the ledger lacks;
    // nothing before the first sweep writes the database) and grows as trials end.
    if let Some(url) = &config.sync.postgres {
        let (url, db) = (url.clone(), config.db_path());
        let waiting = match db.exists() {
            true => tokio::task::spawn_blocking(move || sync::postgres::backlog(&url, &db))
                .await
                .ok()
                .and_then(|r| r.ok()),
            false => Some(0),
        };
        if let Some(waiting) = waiting {
            metrics.set_sync_backlog(waiting);
        }
    }
    notify(&[NotifyState::Ready, NotifyState::Status("started")]);
    let mut pending: Option<PathBuf> = None;
    let mut due_now = schedule != Schedule::BootIdle;
    let mut sync_state = SyncState::new(&metrics);
    loop {
        if due_now {
            if sweep(
                &config,
                &host,
                &metrics,
                &mut signals,
                &mut pending,
                &config_path,
            )
            .await?
            {
                return Ok(0);
            }
            sync_state.push(&config).await;
            if pending.take().is_some() {
                notify(&[NotifyState::Reloading]);
                match load(&config_path) {
                    Ok((c, s)) => (config, schedule) = (c, s),
                    Err(e) => {
                        tracing::error!("config reload failed, keeping the previous one: {e:#}")
                    }
                }
                notify(&[NotifyState::Ready]);
            }
            if matches!(schedule, Schedule::Once | Schedule::BootIdle) {
                // Exits once what it recorded is on the server (or nothing is configured).
                while sync_state.due.is_some() {
                    let wait = sync_state
                        .due
                        .map(|d| d.saturating_duration_since(tokio::time::Instant::now()))
                        .unwrap_or_default();
                    let mut no_reload = || Ok(());
                    if let Some(code) = idle(wait, &mut signals, &mut no_reload).await {
                        return Ok(code);
                    }
                    sync_state.push(&config).await;
                }
                return Ok(0);
            }
        }
        let wait = match schedule {
            Schedule::Daily { hour, minute } => {
                Duration::from_secs(seconds_until(hour, minute, local_seconds_of_day()))
            }
            Schedule::BootIdle => Duration::from_secs(10),
            Schedule::Once => Duration::from_secs(365 * 86_400),
        };
        // Pushes while idle use the config of the last sweep.
        let current = config.clone();
        let sync_config = move || current.clone();
        let mut reload = || -> anyhow::Result<()> {
            let (c, s) = load(&config_path)?;
            (config, schedule) = (c, s);
            Ok(())
        };
        if let Some(code) = idle_and_sync(
            wait,
            &mut signals,
            &mut reload,
            &mut sync_state,
            &sync_config,
        )
        .await
        {
            return Ok(code);
        }
        tracing::debug!("sync backlog: {} trials", sync_state.backlog());
        due_now = match schedule {
            Schedule::BootIdle => uptime_and_load(&host).is_none_or(|(up, load)| {
                up >= config.daemon.min_uptime_s && load < config.daemon.idle_load
            }),
            // A reload or the timer: a daily sweep is due when its time has come.
            Schedule::Daily { hour, minute } => {
                seconds_until(hour, minute, local_seconds_of_day()) >= 86_400 - 60
            }
            Schedule::Once => true,
        };
    }
}

/// Entry point of `edgebench daemon`.
pub fn main(config_path: PathBuf, host: HostPaths) -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(daemon(config_path, host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_daily_run() {
        // at 02:00, 03:30 is 1.5 h away; at 04:00 it is tomorrow; exactly at 03:30, a day
        assert_eq!(seconds_until(3, 30, 2 * 3600), 5400);
        assert_eq!(seconds_until(3, 30, 4 * 3600), 86_400 - 1800);
        assert_eq!(seconds_until(3, 30, 3 * 3600 + 1800), 86_400);
    }

    #[test]
    fn uptime_and_load_from_procfs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("uptime"), "350.20 600.00\n").unwrap();
        std::fs::write(dir.path().join("loadavg"), "0.42 0.50 0.61 1/234 5678\n").unwrap();
        let host = HostPaths {
            sysfs: dir.path().into(),
            procfs: dir.path().into(),
            rootfs: dir.path().into(),
        };
        assert_eq!(uptime_and_load(&host), Some((350.2, 0.42)));
    }
}
