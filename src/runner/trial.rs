//! One trial, parent side: the memory check, the worker process in its cgroup, the samplers
//! around it, every iteration into the store as it arrives, then classification, summary,
//! memory verdict, clocks and power.

use super::memory_plan::{Assessed, MemoryPlan, Preflight};
use super::worker_process::{classify, worker_command, WorkerEnd};
use super::{now, CLOCK_INTERVAL};
use crate::config::Config;
use crate::host::HostPaths;
use crate::memory::procfs::ProcReader;
use crate::memory::{cgroup, MemorySampler, Watch};
use crate::metrics::{Metrics, TrialLabelValues};
use crate::power::{Baseline, PowerMonitor};
use crate::provenance::{self, ClockWatcher};
use crate::record::{IterationRecord, MeasuredWindow};
use crate::stats;
use crate::store::{MemoryColumns, Store, TrialStatus, TrialSummary};
use crate::worker::WorkerMessage;
use crate::workloads::{PlannedTrial, Recorded};
use anyhow::Context;
use indicatif::ProgressBar;
use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Runs one trial in a worker process and writes everything about it; returns its status.
pub(super) fn run_one(
    ctx: &TrialContext<'_>,
    store: &mut Store,
    run_id: i64,
    trial: &PlannedTrial,
    bar: Option<&ProgressBar>,
) -> anyhow::Result<TrialStatus> {
    let planned = trial.iterations;
    let workload = trial.job.workload()?;
    let profile = workload.profile();
    // A command's step count is known only when it ends (planned 0): its warm-up is settled then.
    let configured_warmup =
        workload.warmup_iterations(&trial.job, ctx.config.sweep.warmup_iterations);
    let warmup = match planned {
        0 => configured_warmup,
        n => stats::effective_warmup(configured_warmup, n),
    };
    let trial_id = store.begin_repetition(
        run_id,
        &trial.key,
        trial.repetition,
        planned,
        warmup,
        &now(),
    )?;
    let live = ctx.metrics.map(|m| {
        m.trial(
            TrialLabelValues {
                workload: trial.key.workload.as_str(),
                net: &trial.key.net,
                batch: trial.key.batch,
                device: &trial.key.device,
            },
            planned,
        )
    });
    let mut memory = MemoryColumns {
        mem_estimate_bytes: Some(trial.memory_estimate_bytes as i64),
        mem_limit_bytes: ctx.memory.limit.map(|l| l as i64),
        ..Default::default()
    };
    let say = |line: String, warn: bool| match (bar, warn) {
        // On a terminal the bar owns the screen; log lines go above it.
        (Some(bar), _) => bar.println(line),
        (None, true) => tracing::warn!("{line}"),
        (None, false) => tracing::info!("{line}"),
    };
    match ctx.memory.preflight(ctx.host, trial) {
        Preflight::Skip(why) => {
            say(format!("{}: {why}", trial.label), true);
            memory.memory_note = Some(why.clone());
            store.record_memory(trial_id, None, None, &memory)?;
            store.finish_trial(
                trial_id,
                &empty_summary(TrialStatus::SkippedMemory, Some(why)),
            )?;
            if let Some(live) = live {
                live.ended(TrialStatus::SkippedMemory.as_str());
            }
            return Ok(TrialStatus::SkippedMemory);
        }
        Preflight::Run {
            warning: Some(warning),
        } => say(format!("{}: {warning}", trial.label), true),
        Preflight::Run { warning: None } => {}
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
    let recording = ctx.power.as_ref().map(|(m, _, _)| match ctx.metrics {
        Some(metrics) => m.start_live(metrics.power_sinks(&m.rails_by_source(), m.scope.as_str())),
        None => m.start(),
    });
    if let (Some((m, _, _)), 0) = (&ctx.power, warmup) {
        m.mark(true);
    }
    let mut worker = worker_command(ctx.config.train.threads)?;
    if let Some(cg) = &cgroup {
        worker.env(cgroup::TRIAL_CGROUP_ENV, &cg.dir);
    }
    let mut child = worker.spawn().context("cannot start the worker process")?;
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
    let watch = match profile.watches_tree {
        true => Watch::Tree(pid),
        false => Watch::Process(pid),
    };
    let _active = ActiveTrial::register(pid, cgroup.as_ref().map(|cg| cg.dir.clone()));
    let sampler = MemorySampler::start_observed(
        ctx.host,
        watch,
        ctx.memory.interval,
        ctx.metrics.map(Metrics::memory_observer),
    )?;
    let clocks = ClockWatcher::start_observed(
        ctx.host,
        CLOCK_INTERVAL,
        ctx.metrics.map(Metrics::clock_observer),
    )?;
    {
        let mut stdin = child.stdin.take().expect("piped stdin");
        let mut line = serde_json::to_string(&trial.job)?;
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
    let mut outcome: Option<serde_json::Value> = None;
    let mut peak_gpu_bytes: Option<u64> = None;
    let mut last = None;
    let mut stop_sent: Option<std::time::Instant> = None;
    let mut abandoned = false;
    let mut aborted = false;
    let mut store_error = None;
    loop {
        if !aborted && ctx.abort.is_some_and(|a| a.load(Ordering::SeqCst)) {
            // A second interrupt: nothing waits for an iteration or a command's grace.
            kill_worker_tree(ctx.host, pid, cgroup.as_ref().map(|cg| cg.dir.as_path()));
            aborted = true;
            abandoned = true;
        }
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
                if let Some(live) = &live {
                    live.iteration();
                }
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
                if iterations.len() + 1 == warmup {
                    // The next iteration is the first measured one.
                    if let Some((m, _, _)) = &ctx.power {
                        m.mark(true);
                    }
                }
                iterations.push(rec);
            }
            Ok(WorkerMessage::Outcome(value)) => outcome = Some(value),
            Ok(WorkerMessage::GpuMemory { peak_bytes }) => peak_gpu_bytes = Some(peak_bytes),
            Ok(msg) => last = Some(msg),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = reader.join();
    let status = child.wait().ok();
    if let Some(cg) = &cgroup {
        let left = cg.kill_remaining();
        if left > 0 {
            say(
                format!(
                    "{}: killed {left} process(es) the trial left running",
                    trial.label
                ),
                true,
            );
        }
    }
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
            trial.label
        );
    }
    let conclusion = workload.conclude(&trial.job, outcome.as_ref(), oom_kills > 0);
    let (status, error) = if aborted {
        (
            TrialStatus::Interrupted,
            Some(
                "stopped at once by a second interrupt: the worker and every process the trial \
                 started were killed"
                    .into(),
            ),
        )
    } else if let Some(decided) = conclusion.status.clone() {
        decided
    } else if abandoned && last.is_none() {
        (
            TrialStatus::Interrupted,
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
            (TrialStatus::Crashed, Some(why)) if ctx.stop.load(Ordering::SeqCst) => (
                TrialStatus::Interrupted,
                Some(format!(
                    "stopped by an interrupt before the worker reported an end ({why})"
                )),
            ),
            other => other,
        }
    };

    let step_s: Vec<f64> = iterations.iter().map(|r| r.step_s).collect();
    let losses: Vec<f64> = iterations.iter().map(|r| r.loss).collect();
    // What the trial's own records said its items were counts before the plan's guess.
    let items_per_iteration = conclusion.items_per_iteration.or(trial.items_per_iteration);
    let times = items_per_iteration.and_then(|items| stats::time_summary(&step_s, warmup, items));
    let warmup = match planned {
        0 => stats::effective_warmup(warmup, iterations.len()),
        _ => warmup,
    };
    let measured = iterations
        .get(warmup.min(iterations.len())..)
        .unwrap_or_default();
    // A trial that logged no step (a command) is measured as a whole: one span from start to
    // end, for memory, power and time, not stored as an iteration.
    let whole_command = conclusion.whole.filter(|_| iterations.is_empty());
    let (span, span_warmup): (&[IterationRecord], usize) = match &whole_command {
        Some(whole) => (std::slice::from_ref(whole), 0),
        None => (&iterations, warmup),
    };
    let measured_span = &span[span_warmup.min(span.len())..];
    let (from_ns, to_ns) = match (measured_span.first(), measured_span.last()) {
        (Some(a), Some(b)) => (a.t_start_ns, b.t_end_ns),
        _ => (
            samples.first().map_or(0, |s| s.t_ns),
            samples.last().map_or(0, |s| s.t_ns),
        ),
    };
    let Assessed {
        report,
        swap_pressure: verdict,
        note,
    } = ctx
        .memory
        .assess(trial, &samples, from_ns, to_ns, measured_span.len());
    memory.swap_in_pages = Some(report.swap_in_pages as i64);
    memory.swap_out_pages = Some(report.swap_out_pages as i64);
    memory.major_faults = Some(report.major_faults as i64);
    memory.swapped_bytes_max = report.swapped_bytes_max.map(|b| b as i64);
    memory.mem_available_min_bytes = report.mem_available_min_bytes.map(|b| b as i64);
    memory.psi_memory_some_us = report.psi_some_us.map(|v| v as i64);
    memory.psi_memory_full_us = report.psi_full_us.map(|v| v as i64);
    memory.memory_note = Some(note);
    store.record_memory(trial_id, verdict, report.peak_rss_bytes, &memory)?;
    store.record_gpu_memory(trial_id, peak_gpu_bytes)?;
    store.record_clocks(trial_id, &clocks)?;

    let loss_anomaly = profile
        .records_loss
        .then(|| stats::loss_anomaly(&losses))
        .flatten();
    if let Some(why) = &loss_anomaly {
        tracing::warn!("{} loss anomaly: {why}", trial.label);
    }
    // `measured` is the end of `iterations`.
    let stall = stats::stalls(&step_s[step_s.len() - measured.len()..]);
    if let Some((_, why)) = &stall {
        tracing::warn!("{} STALL: {why}", trial.label);
    }
    let mut summary = TrialSummary {
        status,
        error: error.clone(),
        ended_at: now(),
        time_per_image_s: times.as_ref().map(|t| t.time_per_image_s),
        time_per_image_spread_s: times.as_ref().map(|t| t.time_per_image_spread_s),
        images_per_s: times.as_ref().map(|t| t.images_per_s),
        // A workload without a loss (an operator, the board at rest) stores none.
        loss_first: losses.first().copied().filter(|_| profile.records_loss),
        loss_last: losses.last().copied().filter(|_| profile.records_loss),
        loss_anomaly: loss_anomaly.is_some(),
        metrics: workload.metrics(&trial.job, measured),
    };
    // Kept in the trial's figures, like its time: a stalled step is inside the mean.
    let extra = &mut summary.metrics.extra;
    extra.insert(
        "stalled_steps".into(),
        match &stall {
            Some((n, _)) => (*n).into(),
            None if measured.is_empty() => serde_json::Value::Null,
            None => 0.into(),
        },
    );
    extra.insert("stall_note".into(), stall.map(|(_, why)| why).into());
    workload.complete_metrics(
        &trial.job,
        outcome.as_ref(),
        &Recorded {
            iterations: &iterations,
            warmup,
            measured,
            whole: whole_command.as_ref(),
        },
        &mut summary.metrics,
    );
    summary
        .metrics
        .set_window(MeasuredWindow::of(span, span_warmup));
    if let Some((stdout_tail, stderr_tail)) = &conclusion.output {
        store.record_output(trial_id, stdout_tail, stderr_tail)?;
    }
    if let (Some(handle), Some((m, baseline, store_samples))) = (recording, &ctx.power) {
        m.mark(false);
        let samples = handle.stop();
        if *store_samples {
            store.record_power_samples(trial_id, &samples.series())?;
        }
        // Items per iteration for energy per image: a trial measured whole has none; without
        // a count the workload says (iterations, or none for a command's unknown batch).
        let items = match &whole_command {
            Some(_) => 0,
            None => items_per_iteration.unwrap_or_else(|| profile.items_without_count()),
        };
        let record = m.assess_trial_advising(
            &samples,
            span,
            span_warmup,
            items,
            baseline.as_ref(),
            profile.longer_trial_advice,
        );
        if let crate::power::TrialPowerRecord::Measured(p) = &record {
            let per_work = workload.energy_metrics(&trial.job, measured.len(), p.energy_j);
            summary.metrics.extra.extend(per_work);
        }
        store.record_power(trial_id, &record)?;
    }
    store.finish_trial(trial_id, &summary)?;
    let line = match &error {
        Some(e) => format!(
            "{} {status} after {} iterations: {e}",
            trial.label,
            step_s.len()
        ),
        None => format!(
            "{} {status}: {} iterations, {}{}",
            trial.label,
            step_s.len(),
            match (&times, summary.metrics.time_per_iteration_s) {
                (Some(t), _) => format!(
                    "{:.2} ms/{}",
                    t.time_per_image_s * 1e3,
                    profile.items.item.unit()
                ),
                (None, Some(s)) => format!("{:.2} ms/iteration", s * 1e3),
                (None, None) => "no measured iterations".into(),
            },
            if report.swap_pressure {
                " (SWAP-SPOILED)"
            } else {
                ""
            }
        ),
    };
    if let Some(live) = live {
        live.ended(status.as_str());
    }
    let throttled = clocks.throttled == Some(true);
    say(line, error.is_some() || report.swap_pressure);
    if throttled {
        say(
            format!(
                "{} THROTTLED: {}",
                trial.label,
                clocks.note.as_deref().unwrap_or("")
            ),
            true,
        );
    }
    Ok(status)
}

fn empty_summary(status: TrialStatus, error: Option<String>) -> TrialSummary {
    TrialSummary {
        status,
        error,
        ended_at: now(),
        time_per_image_s: None,
        time_per_image_spread_s: None,
        images_per_s: None,
        loss_first: None,
        loss_last: None,
        loss_anomaly: false,
        metrics: Default::default(),
    }
}

/// SIGKILLs a worker and everything below it: the process groups of its descendants (a
/// command's group holds children whose parent already died), the descendants themselves, the
/// worker, then whatever is left in the trial's cgroup (processes that left the group).
fn kill_worker_tree(host: &HostPaths, worker: u32, cgroup: Option<&std::path::Path>) {
    let procs = ProcReader::new(host);
    // Collected before anything dies: a killed parent's children are reparented to init.
    let pids = procs.tree_pids(worker);
    // SAFETY: getpgrp(2) cannot fail.
    let own_group = unsafe { libc::getpgrp() } as u32;
    let mut groups: Vec<u32> = pids
        .iter()
        .filter_map(|&p| procs.process_group(p))
        .filter(|&g| g != own_group && g > 1)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    for group in groups {
        // SAFETY: killpg(2) with plain integers; a group already gone fails harmlessly.
        unsafe { libc::killpg(group as i32, libc::SIGKILL) };
    }
    for pid in pids.into_iter().rev() {
        // SAFETY: kill(2) with plain integers; a pid already gone fails harmlessly.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    if let Some(dir) = cgroup {
        cgroup::kill_members(dir, None);
    }
}

/// The trial running now, for [`end_active_trial`].
struct ActiveTrial;

static ACTIVE: std::sync::Mutex<Option<(u32, Option<std::path::PathBuf>)>> =
    std::sync::Mutex::new(None);

impl ActiveTrial {
    fn register(worker: u32, cgroup: Option<std::path::PathBuf>) -> ActiveTrial {
        *ACTIVE.lock().unwrap_or_else(|e| e.into_inner()) = Some((worker, cgroup));
        ActiveTrial
    }
}

impl Drop for ActiveTrial {
    fn drop(&mut self) {
        *ACTIVE.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Kills the running trial's worker and everything it started, from any thread: for a process
/// about to exit while the sweep's own thread cannot (stuck in a write); the trial's row is then
/// left `running`, and the next sweep marks it interrupted.
pub fn end_active_trial(host: &HostPaths) {
    let active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some((worker, cgroup)) = active {
        kill_worker_tree(host, worker, cgroup.as_deref());
    }
}

pub(super) struct TrialContext<'a> {
    pub config: &'a Config,
    pub host: &'a HostPaths,
    pub stop: &'a AtomicBool,
    /// A second interrupt: end the trial now.
    pub abort: Option<&'a AtomicBool>,
    /// How long a stop waits for the iteration in progress before killing the worker.
    pub stop_grace: Duration,
    /// `--power`: the monitor, the run's idle baseline, and whether to keep every sample.
    pub power: Option<(&'a PowerMonitor, Option<Baseline>, bool)>,
    pub memory: MemoryPlan,
    /// The live metrics to update, when they are served.
    pub metrics: Option<&'a Metrics>,
}
