//! The parent side of `edgebench run`: preflight, then each planned trial in turn, every
//! iteration written to the store as it finishes, the trial's summary at its end. One trial's
//! failure is recorded and the sweep goes on.

use crate::config::Config;
use crate::host::{self, HostPaths};
use crate::memory::procfs::ProcReader;
use crate::memory::{assess, cgroup, estimate, MemorySampler, SwapThresholds};
use crate::plan::{self, PlannedTrial};
use crate::power::{Baseline, PowerMonitor};
use crate::provenance::{self, ClockWatcher};
use crate::stats;
use crate::store::{IterationRecord, MemoryColumns, RunInfo, Store, SweepLock, TrialSummary};
use crate::train::{self, data::Dataset};
use crate::worker::{DataSpec, WorkerJob, WorkerMessage};
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

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
}

pub struct RunRequest<'a> {
    pub config: &'a Config,
    pub force: bool,
    /// Rerun trials that ended failed, oom, crashed or skipped_memory.
    pub retry_failed: bool,
    pub host: &'a HostPaths,
    /// Set by SIGINT/SIGTERM: the current trial stops at the next iteration boundary.
    pub stop: &'a AtomicBool,
    /// Told "trial k/n: ..." as each trial starts (the daemon's sd_notify STATUS line).
    pub on_trial: Option<&'a (dyn Fn(&str) + Sync)>,
    /// `--power`: sampled around every trial.
    pub power: Option<&'a PowerMonitor>,
    /// The database's sweep lock, held by the caller for the whole run.
    pub lock: &'a SweepLock,
}

/// The error text of a run's trial found still `running` when the next sweep takes the lock.
pub const UNFINISHED_NOTE: &str = "ended without finishing: its edgebench process stopped \
     (killed, crashed, or could not write) before recording an end; the iterations recorded \
     stay, and a resumed sweep runs the trial again";

/// Trial statuses that `--retry-failed` reruns.
fn is_failure(status: &str) -> bool {
    matches!(status, "failed" | "oom" | "crashed" | "skipped_memory")
}

fn now() -> String {
    // RFC 3339 UTC without pulling in a date crate: the store sorts these as text.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    rfc3339(secs)
}

/// Seconds since the epoch -> "YYYY-MM-DDTHH:MM:SS.mmmZ" (civil-from-days, Howard Hinnant).
pub fn rfc3339(secs: f64) -> String {
    let days = (secs / 86_400.0).floor() as i64;
    let rem = secs - days as f64 * 86_400.0;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let ms = (rem * 1000.0).round() as i64;
    let (h, mi, s, ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
}

pub fn open_dataset(config: &Config) -> anyhow::Result<Dataset> {
    Ok(match &config.data.dataset {
        Some(dir) => Dataset::folder(dir, config.sweep.images)?,
        None => Dataset::synthetic(
            config.data.synthetic_seed,
            config.data.synthetic_classes,
            config.sweep.images,
        ),
    })
}

/// `--device cuda` on a board whose GPU candle cannot use is refused with the reason,
/// before a build without the `cuda` feature would only say "rebuild".
fn cuda_on_this_board(host: &HostPaths) -> anyhow::Result<()> {
    let detected = crate::board::detect(host);
    match crate::board::cuda_obstacle(detected.profile, crate::board::installed_cuda(host)) {
        Some(why) => anyhow::bail!(
            "--device cuda cannot work on this board ({}, detected by {}): {why}",
            detected.profile.description,
            detected.how
        ),
        None => Ok(()),
    }
}

/// Everything that can be refused before a byte is written: the devices, the data set, and a
/// memory cgroup when `--mem-limit` asks for one.
pub fn preflight(config: &Config, host: &HostPaths) -> anyhow::Result<Dataset> {
    for device in &config.sweep.devices {
        if *device == crate::config::DeviceKind::Cuda {
            cuda_on_this_board(host)?;
        }
        train::device(*device)?;
    }
    let data = open_dataset(config)?;
    if let Some(limit) = config.memory.limit_bytes().map_err(anyhow::Error::msg)? {
        cgroup::check(host, limit)?;
    }
    Ok(data)
}

fn memory_plan(config: &Config, host: &HostPaths) -> anyhow::Result<MemoryPlan> {
    let limit = config.memory.limit_bytes().map_err(anyhow::Error::msg)?;
    let swaps = ProcReader::new(host).swaps();
    let swap_devices = if swaps.is_empty() {
        "no swap".to_string()
    } else {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let list: Vec<String> = swaps
            .iter()
            .map(|s| {
                let kind = if s.zram { "zram" } else { s.kind.as_str() };
                format!("{} ({kind}, {:.1} GiB)", s.name, gib(s.size_bytes))
            })
            .collect();
        format!("swap on {}", list.join(", "))
    };
    Ok(MemoryPlan {
        swap_devices,
        limit,
        swap_limit: config
            .memory
            .swap_limit_bytes()
            .map_err(anyhow::Error::msg)?,
        // Without --mem-limit a cgroup is still worth having (it attributes OOM kills to the
        // trial), but not worth failing for.
        parent: match limit {
            Some(_) => Some(cgroup::locate(host)?),
            None => cgroup::locate(host).ok(),
        },
        thresholds: SwapThresholds {
            major_faults_per_iteration: config.memory.major_faults_per_iteration,
        },
        interval: Duration::from_millis(config.memory.sample_interval_ms),
        try_anyway: config.memory.try_anyway,
    })
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

fn trial_label(t: &PlannedTrial) -> String {
    format!("{} {} batch {}", t.key.net, t.key.device, t.key.batch)
}

/// Statuses that count as done for resume: `ok` always; the trials memory or a crash ended,
/// and failures, unless `--retry-failed`. `interrupted` never: it is run again.
pub fn done_statuses(retry_failed: bool) -> &'static [&'static str] {
    if retry_failed {
        &["ok"]
    } else {
        &["ok", "oom", "crashed", "skipped_memory", "failed"]
    }
}

/// What the run knows about memory before any trial: the host's capacity and the cgroup cap.
struct MemoryPlan {
    /// The host's swap devices at the start of the run, in words (zram or disk matters).
    swap_devices: String,
    limit: Option<u64>,
    swap_limit: Option<u64>,
    parent: Option<cgroup::CgroupParent>,
    thresholds: SwapThresholds,
    interval: Duration,
    try_anyway: bool,
}

impl MemoryPlan {
    fn capacity(&self, host: &HostPaths) -> Option<estimate::Capacity> {
        let m = ProcReader::new(host).meminfo()?;
        let ram = self.limit.map_or(m.mem_total, |l| l.min(m.mem_total));
        Some(estimate::Capacity {
            ram_bytes: ram,
            available_bytes: m.mem_available.min(ram),
            swap_bytes: self.swap_limit.map_or(m.swap_free, |s| s.min(m.swap_free)),
        })
    }
}

/// How the worker process ended, as far as the parent saw it.
struct WorkerEnd {
    last: Option<WorkerMessage>,
    status: Option<std::process::ExitStatus>,
    oom_kills: u64,
}

fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => return format!("signal {sig}"),
    };
    format!("{name} (signal {sig})")
}

/// Turns what the worker said and how it exited into (status, error).
fn classify(end: &WorkerEnd) -> (&'static str, Option<String>) {
    use std::os::unix::process::ExitStatusExt;
    match &end.last {
        Some(WorkerMessage::Done { stopped: false }) => ("ok", None),
        Some(WorkerMessage::Done { stopped: true }) => ("interrupted", None),
        Some(WorkerMessage::Failed { error }) => ("failed", Some(error.clone())),
        _ => match end.status.and_then(|s| s.signal()) {
            // SIGKILL alone could be anyone; the kernel's oom_kill counter says it was the OOM killer.
            Some(libc::SIGKILL) if end.oom_kills > 0 => (
                "oom",
                Some("killed by the kernel OOM killer (SIGKILL; oom_kill counter rose): the trial does not fit memory".into()),
            ),
            Some(sig) => ("crashed", Some(format!("worker died of {}", signal_name(sig)))),
            None => (
                "crashed",
                Some(match end.status.and_then(|s| s.code()) {
                    Some(code) => format!("worker exited with code {code} without reporting an end"),
                    None => "worker ended without reporting".into(),
                }),
            ),
        },
    }
}

fn worker_command() -> anyhow::Result<Command> {
    let exe = std::env::current_exe()
        .context("cannot find the edgebench executable to start a worker")?;
    // EDGEBENCH_WORKER_PREFIX puts a command in front of the worker, e.g. `taskset -c 2-5` to
    // keep it on one CPU cluster, or `qemu-aarch64 -L /usr/aarch64-linux-gnu` to run a cross
    // build under emulation. It must exec the worker in its own process (the pid is watched).
    let prefix = std::env::var("EDGEBENCH_WORKER_PREFIX").unwrap_or_default();
    let mut words = prefix.split_whitespace();
    let mut cmd = match words.next() {
        Some(program) => {
            let mut cmd = Command::new(program);
            cmd.args(words).arg(exe);
            cmd
        }
        None => Command::new(exe),
    };
    // The worker compares this with its parent pid at start: a parent that died before the
    // worker asked to die with it has left an orphan that must not train.
    cmd.arg("worker")
        .env(
            crate::worker::PARENT_PID_ENV,
            std::process::id().to_string(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    Ok(cmd)
}

fn data_spec(config: &Config) -> DataSpec {
    match &config.data.dataset {
        Some(dir) => DataSpec::Folder { dir: dir.clone() },
        None => DataSpec::Synthetic {
            seed: config.data.synthetic_seed,
            classes: config.data.synthetic_classes,
        },
    }
}

/// Runs one trial in a worker process and writes everything about it; returns its status.
fn run_one(
    ctx: &TrialContext<'_>,
    store: &mut Store,
    run_id: i64,
    trial: &PlannedTrial,
    bar: Option<&ProgressBar>,
) -> anyhow::Result<String> {
    let planned = trial.spec.iterations();
    let warmup = stats::effective_warmup(ctx.config.sweep.warmup_iterations, planned);
    let trial_id = store.begin_trial(run_id, &trial.key, planned, warmup, &now())?;
    let estimate = estimate::estimate(trial.spec.net, trial.spec.batch);
    let mut memory = MemoryColumns {
        mem_estimate_bytes: Some(estimate.total_bytes as i64),
        mem_limit_bytes: ctx.memory.limit.map(|l| l as i64),
        ..Default::default()
    };
    let say = |line: String, warn: bool| match (bar, warn) {
        // On a terminal the bar owns the screen; log lines go above it.
        (Some(bar), _) => bar.println(line),
        (None, true) => tracing::warn!("{line}"),
        (None, false) => tracing::info!("{line}"),
    };
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    if let Some(cap) = ctx.memory.capacity(ctx.host) {
        match estimate::fit(estimate.total_bytes, cap) {
            estimate::Fit::DoesNotFit if !ctx.memory.try_anyway => {
                let why = format!(
                    "predicted to need {:.2} GiB, more than RAM {:.2} GiB + swap {:.2} GiB; skipped (--try-anyway runs it)",
                    gib(estimate.total_bytes),
                    gib(cap.ram_bytes),
                    gib(cap.swap_bytes)
                );
                say(format!("{}: {why}", trial_label(trial)), true);
                memory.memory_note = Some(why.clone());
                store.record_memory(trial_id, None, None, &memory)?;
                store.finish_trial(trial_id, &empty_summary("skipped_memory", Some(why)))?;
                return Ok("skipped_memory".into());
            }
            estimate::Fit::NeedsSwap | estimate::Fit::DoesNotFit => say(
                format!(
                    "{}: predicted to need {:.2} GiB, more than the {:.2} GiB available: it will swap",
                    trial_label(trial),
                    gib(estimate.total_bytes),
                    gib(cap.available_bytes)
                ),
                true,
            ),
            estimate::Fit::Fits => {}
        }
    }

    let cgroup_name = format!("edgebench-{}-{trial_id}", std::process::id());
    let cgroup = match (&ctx.memory.parent, ctx.memory.limit) {
        (Some(parent), Some(limit)) => Some(cgroup::TrialCgroup::create(
            parent,
            &cgroup_name,
            Some(limit),
            ctx.memory.swap_limit,
        )?),
        (Some(parent), None) => cgroup::TrialCgroup::create(parent, &cgroup_name, None, None)
            .map_err(|e| tracing::debug!("no accounting cgroup: {e}"))
            .ok(),
        (None, _) => None,
    };
    let vm_before = ProcReader::new(ctx.host).vmstat().map(|v| v.oom_kill);
    // Power is sampled in the parent, so it keeps running whatever happens to the worker.
    let recording = ctx.power.as_ref().map(|(m, _, _)| m.start());
    if let (Some((m, _, _)), 0) = (&ctx.power, warmup) {
        m.mark(true);
    }
    let mut child = worker_command()?
        .spawn()
        .context("cannot start the worker process")?;
    let pid = child.id();
    // Into the cgroup before it has the job, so nothing it allocates escapes the cap.
    let cgroup = match cgroup.map(|cg| cg.add(pid).map(|_| cg)) {
        Some(Err(e)) if ctx.memory.limit.is_some() => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e.into());
        }
        Some(Err(_)) | None => None,
        Some(Ok(cg)) => Some(cg),
    };
    let sampler = MemorySampler::start(ctx.host, pid, ctx.memory.interval)?;
    let clocks = ClockWatcher::start(ctx.host, CLOCK_INTERVAL)?;
    let job = WorkerJob::new(&trial.spec, data_spec(ctx.config));
    {
        let mut stdin = child.stdin.take().expect("piped stdin");
        let mut line = serde_json::to_string(&job)?;
        line.push('\n');
        // A worker that died at once shows up below as its exit status.
        let _ = stdin.write_all(line.as_bytes());
    }
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<WorkerMessage>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<WorkerMessage>(&line) {
                Ok(msg) => {
                    if tx.send(msg).is_err() {
                        break;
                    }
                }
                // Something else printed on stdout: not ours to interpret, but not lost.
                Err(_) => eprintln!("{line}"),
            }
        }
    });

    let mut iterations: Vec<IterationRecord> = Vec::with_capacity(planned);
    let mut last = None;
    let mut stop_sent: Option<std::time::Instant> = None;
    let mut abandoned = false;
    let mut store_error = None;
    loop {
        if ctx.stop.load(Ordering::SeqCst) {
            match stop_sent {
                None => {
                    // The worker finishes its iteration and reports `stopped`.
                    // SAFETY: kill(2) on our own child's pid, which we have not reaped yet.
                    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                    stop_sent = Some(std::time::Instant::now());
                }
                // A big batch on a slow board can take longer than a service manager waits:
                // abandon the iteration in progress rather than be killed mid-write.
                Some(at) if !abandoned && at.elapsed() >= ctx.stop_grace => {
                    let _ = child.kill();
                    abandoned = true;
                }
                Some(_) => {}
            }
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(WorkerMessage::Iteration(rec)) => {
                if store_error.is_none() {
                    if let Err(e) = store.record_iteration(trial_id, &rec) {
                        // The DB failed: stop the worker; nothing more can be recorded.
                        store_error = Some(e.to_string());
                        let _ = child.kill();
                    }
                }
                if let Some(bar) = bar {
                    bar.set_position(rec.step as u64 + 1);
                    bar.set_message(format!("loss {:.4}", rec.loss));
                } else if rec.step % 50 == 0 || rec.step + 1 == planned {
                    tracing::info!(
                        step = rec.step,
                        loss = rec.loss,
                        step_s = rec.step_s,
                        "iteration"
                    );
                }
                if rec.step + 1 == warmup {
                    // The next iteration is the first measured one.
                    if let Some((m, _, _)) = &ctx.power {
                        m.mark(true);
                    }
                }
                iterations.push(rec);
            }
            Ok(msg) => last = Some(msg),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = reader.join();
    let status = child.wait().ok();
    let samples = sampler.stop();
    let clocks = provenance::assess(&clocks.stop());
    // The trial's own cgroup counts only its OOM kills; the system-wide counter (the fallback
    // without cgroups) could also count another process killed meanwhile.
    let oom_kills = match cgroup.as_ref().and_then(|cg| cg.oom_kills()) {
        Some(n) => n,
        None => {
            let after = ProcReader::new(ctx.host).vmstat().map(|v| v.oom_kill);
            after.zip(vm_before).map_or(0, |(a, b)| a.saturating_sub(b))
        }
    };
    drop(cgroup);
    if let Some(e) = store_error {
        anyhow::bail!(
            "the results database failed while recording {}: {e}",
            trial_label(trial)
        );
    }
    let (status, error) = if abandoned && last.is_none() {
        (
            "interrupted",
            Some(format!(
                "stopped: the iteration in progress did not end within {:.1} s of the stop \
                 request and was abandoned",
                ctx.stop_grace.as_secs_f64()
            )),
        )
    } else {
        match classify(&WorkerEnd {
            last,
            status,
            oom_kills,
        }) {
            // A worker that ended without a word while a stop was under way was ended by it
            // (our SIGTERM before it set up its handler, or Ctrl-C reaching the whole process
            // group): interrupted, so a resumed sweep runs it again, never a counted crash.
            ("crashed", Some(why)) if ctx.stop.load(Ordering::SeqCst) => (
                "interrupted",
                Some(format!(
                    "stopped by an interrupt before the worker reported an end ({why})"
                )),
            ),
            other => other,
        }
    };

    let step_s: Vec<f64> = iterations.iter().map(|r| r.step_s).collect();
    let losses: Vec<f64> = iterations.iter().map(|r| r.loss).collect();
    let times = stats::time_summary(&step_s, warmup, trial.spec.batch);
    let measured = iterations
        .get(warmup.min(iterations.len())..)
        .unwrap_or_default();
    let (from_ns, to_ns) = match (measured.first(), measured.last()) {
        (Some(a), Some(b)) => (a.t_start_ns, b.t_end_ns),
        _ => (
            samples.first().map_or(0, |s| s.t_ns),
            samples.last().map_or(0, |s| s.t_ns),
        ),
    };
    let report = assess(
        &samples,
        from_ns,
        to_ns,
        measured.len(),
        &ctx.memory.thresholds,
    );
    memory.swap_in_pages = Some(report.swap_in_pages as i64);
    memory.swap_out_pages = Some(report.swap_out_pages as i64);
    memory.major_faults = Some(report.major_faults as i64);
    memory.swapped_bytes_max = report.swapped_bytes_max.map(|b| b as i64);
    memory.mem_available_min_bytes = report.mem_available_min_bytes.map(|b| b as i64);
    memory.psi_memory_some_us = report.psi_some_us.map(|v| v as i64);
    memory.psi_memory_full_us = report.psi_full_us.map(|v| v as i64);
    memory.memory_note = Some(format!("{}; {}", report.note, ctx.memory.swap_devices));
    let verdict = (!samples.is_empty() && !measured.is_empty()).then_some(report.swap_pressure);
    store.record_memory(trial_id, verdict, report.peak_rss_bytes, &memory)?;
    store.record_clocks(trial_id, &clocks)?;

    let loss_anomaly = stats::loss_anomaly(&losses);
    if let Some(why) = &loss_anomaly {
        tracing::warn!("{} loss anomaly: {why}", trial_label(trial));
    }
    let summary = TrialSummary {
        status: status.to_string(),
        error: error.clone(),
        ended_at: now(),
        time_per_image_s: times.as_ref().map(|t| t.time_per_image_s),
        time_per_image_spread_s: times.as_ref().map(|t| t.time_per_image_spread_s),
        images_per_s: times.as_ref().map(|t| t.images_per_s),
        loss_first: losses.first().copied(),
        loss_last: losses.last().copied(),
        loss_anomaly: loss_anomaly.is_some(),
    };
    if let (Some(handle), Some((m, baseline, store_samples))) = (recording, &ctx.power) {
        m.mark(false);
        let samples = handle.stop();
        m.record_trial(
            store,
            trial_id,
            &samples,
            &iterations,
            warmup,
            trial.spec.batch,
            baseline.as_ref(),
            *store_samples,
        )?;
    }
    store.finish_trial(trial_id, &summary)?;
    let line = match &error {
        Some(e) => format!(
            "{} {status} after {} iterations: {e}",
            trial_label(trial),
            step_s.len()
        ),
        None => format!(
            "{} {status}: {} iterations, {}{}",
            trial_label(trial),
            step_s.len(),
            times
                .map(|t| format!("{:.2} ms/img", t.time_per_image_s * 1e3))
                .unwrap_or_else(|| "no measured iterations".into()),
            if report.swap_pressure {
                " (SWAP-SPOILED)"
            } else {
                ""
            }
        ),
    };
    let throttled = clocks.throttled == Some(true);
    say(line, error.is_some() || report.swap_pressure);
    if throttled {
        say(
            format!(
                "{} THROTTLED: {}",
                trial_label(trial),
                clocks.note.as_deref().unwrap_or("")
            ),
            true,
        );
    }
    Ok(status.to_string())
}

fn empty_summary(status: &str, error: Option<String>) -> TrialSummary {
    TrialSummary {
        status: status.into(),
        error,
        ended_at: now(),
        time_per_image_s: None,
        time_per_image_spread_s: None,
        images_per_s: None,
        loss_first: None,
        loss_last: None,
        loss_anomaly: false,
    }
}

struct TrialContext<'a> {
    config: &'a Config,
    host: &'a HostPaths,
    stop: &'a AtomicBool,
    /// How long a stop waits for the iteration in progress before killing the worker.
    stop_grace: Duration,
    /// `--power`: the monitor, the run's idle baseline, and whether to keep every sample.
    power: Option<(&'a PowerMonitor, Option<Baseline>, bool)>,
    memory: MemoryPlan,
}

/// Runs the sweep into `store`. Preflight errors return before the run is created.
pub fn run(req: RunRequest<'_>, store: &mut Store) -> anyhow::Result<RunOutcome> {
    let config = req.config;
    let data = preflight(config, req.host)?;
    let (runs, trials) = store.interrupt_unfinished(req.lock, UNFINISHED_NOTE)?;
    if runs + trials > 0 {
        tracing::warn!(
            "{runs} run(s) and {trials} trial(s) in {} were left `running` by a process that \
             ended without finishing; marked interrupted (their iterations stay)",
            store.path().display()
        );
    }
    let identity = data.identity();
    let done_status = store.statuses_by_key(done_statuses(req.retry_failed))?;
    let done: std::collections::HashSet<_> = done_status.keys().cloned().collect();
    let plan = plan::plan(config, &identity, &done, req.force);
    let mut ctx = TrialContext {
        config,
        host: req.host,
        stop: req.stop,
        power: None,
        stop_grace: Duration::from_secs_f64(config.sweep.stop_grace_s),
        memory: memory_plan(config, req.host)?,
    };
    let mut outcome = RunOutcome {
        skipped: plan.skipped.len(),
        ..Default::default()
    };
    for t in &plan.skipped {
        let db = store.path().display();
        match done_status.get(&t.key).map(String::as_str) {
            Some(status) if is_failure(status) => tracing::info!(
                "{} already ended {status} in {db}; not rerun (use --retry-failed to rerun it)",
                trial_label(t)
            ),
            _ => tracing::info!(
                "{} already ok in {db} (use --force to rerun)",
                trial_label(t)
            ),
        }
    }
    // An interrupt during preflight: nothing recorded yet, nothing to record.
    if plan.to_run.is_empty() || req.stop.load(Ordering::SeqCst) {
        outcome.interrupted = !plan.to_run.is_empty();
        return Ok(outcome);
    }
    let threads = candle_core::utils::get_num_threads();
    let uuid = uuid::Uuid::new_v4().to_string();
    let run_id = store.begin_run(&RunInfo {
        uuid: uuid.clone(),
        host: req.host.hostname(),
        started_at: now(),
        config_toml: config.to_toml(),
        edgebench_version: host::VERSION.to_string(),
        git_commit: host::GIT_COMMIT.to_string(),
        candle_version: host::CANDLE_VERSION.to_string(),
        cpu_threads: threads,
        cpu_model: req.host.cpu_model(),
        os: req.host.os(),
    })?;
    outcome.run_id = Some(run_id);
    outcome.run_uuid = Some(uuid);
    store.record_provenance(run_id, &provenance::capture(req.host))?;
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
    let bar = progress_bar(std::io::stderr().is_terminal());
    let total = plan.to_run.len();
    for (k, trial) in plan.to_run.iter().enumerate() {
        // An interrupt during the idle baseline or between trials: this trial never started,
        // so it stays unrecorded and a resumed sweep runs it.
        if req.stop.load(Ordering::SeqCst) {
            outcome.interrupted = true;
            break;
        }
        if let Some(on_trial) = req.on_trial {
            on_trial(&format!("trial {}/{total}: {}", k + 1, trial_label(trial)));
        }
        if let Some(bar) = &bar {
            bar.reset();
            bar.set_length(trial.spec.iterations() as u64);
            bar.set_prefix(format!("trial {}/{total} {}", k + 1, trial_label(trial)));
        } else {
            tracing::info!(
                "trial {}/{total}: {} ({} iterations)",
                k + 1,
                trial_label(trial),
                trial.spec.iterations()
            );
        }
        let status = run_one(&ctx, store, run_id, trial, bar.as_ref());
        let status = match status {
            Ok(s) => s,
            Err(e) => {
                store
                    .record_provenance(run_id, &provenance::capture_end(req.host))
                    .ok();
                store.finish_run(run_id, &now(), "failed").ok();
                return Err(e);
            }
        };
        outcome.ran += 1;
        match status.as_str() {
            "failed" | "oom" | "crashed" => outcome.failed += 1,
            "interrupted" => {
                outcome.interrupted = true;
                break;
            }
            _ => {}
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

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(super::rfc3339(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(1_764_107_000.25), "2025-11-25T21:43:20.250Z");
        assert_eq!(super::rfc3339(951_782_400.0), "2000-02-29T00:00:00.000Z");
    }
}
