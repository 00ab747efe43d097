//! One trial, parent side, in four phases: [`start`] (its row, the memory check, the worker in
//! its cgroup, the samplers around it), [`collect`] (every iteration into the store as it
//! arrives, a stop or abort carried out, then every sampler's readings), [`conclude`] (status,
//! summary, memory verdict, energy over the measured window; nothing written) and [`record`]
//! (what is stored and said at the end). Each phase hands the next a value.

use super::memory_plan::{Assessed, MemoryPlan, Preflight};
use super::worker_process::{classify, worker_command, WorkerEnd};
use super::{now, CLOCK_INTERVAL};
use crate::config::Config;
use crate::host::HostPaths;
use crate::memory::procfs::ProcReader;
use crate::memory::{cgroup, MemorySample, MemorySampler, Watch};
use crate::metrics::{Metrics, TrialLabelValues, TrialMetrics};
use crate::power::{Baseline, PowerMonitor, RecordingHandle, Samples, TrialPowerRecord};
use crate::provenance::{self, ClockReport, ClockWatcher};
use crate::record::{IterationRecord, MeasuredWindow};
use crate::stats;
use crate::store::{MemoryColumns, Store, TrialStatus, TrialSummary};
use crate::worker::WorkerMessage;
use crate::workloads::{PlannedTrial, Recorded, Workload};
use anyhow::Context;
use indicatif::ProgressBar;
use std::io::{BufRead, BufReader, Write};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs one trial in a worker process and writes everything about it; returns its status.
pub(super) fn run_one(
    ctx: &TrialContext<'_>,
    store: &mut Store,
    run_id: i64,
    trial: &PlannedTrial,
    bar: Option<&ProgressBar>,
) -> anyhow::Result<TrialStatus> {
    let workload = trial.job.workload()?;
    let say = Say { bar };
    let (begun, worker) = match start(ctx, store, run_id, trial, workload, say)? {
        Started::Skipped { begun, why } => {
            return record_skipped(ctx, store, trial, begun, why, say);
        }
        Started::Running { begun, worker } => (begun, worker),
    };
    let collected = collect(ctx, store, trial, &begun, worker, say)?;
    let concluded = conclude(ctx, trial, workload, begun.warmup, collected);
    record(store, trial, begun, concluded, say)
}

/// Where the trial's log lines go.
#[derive(Clone, Copy)]
struct Say<'a> {
    bar: Option<&'a ProgressBar>,
}

impl Say<'_> {
    fn line(self, line: String, warn: bool) {
        match (self.bar, warn) {
            // On a terminal the bar owns the screen; log lines go above it.
            (Some(bar), _) => bar.println(line),
            (None, true) => tracing::warn!("{line}"),
            (None, false) => tracing::info!("{line}"),
        }
    }
}

/// The trial's row, begun: what every later phase names it by.
struct Begun {
    trial_id: i64,
    /// Leading iterations outside the measurement, as planned (a command's, planned with no
    /// step count, is settled when it ends).
    warmup: usize,
    live: Option<TrialMetrics>,
}

/// What [`start`] left running.
enum Started {
    /// The memory check skipped the trial, for this reason; nothing was started.
    Skipped {
        begun: Begun,
        why: String,
    },
    Running {
        begun: Begun,
        worker: Box<Worker>,
    },
}

/// The worker process with its job, and everything watching it.
struct Worker {
    child: Child,
    pid: u32,
    cgroup: Option<cgroup::TrialCgroup>,
    /// The system-wide OOM kill counter before the worker started, for a trial without a
    /// cgroup of its own.
    oom_kills_before: Option<u64>,
    power: Option<RecordingHandle>,
    memory: MemorySampler,
    clocks: ClockWatcher,
    messages: mpsc::Receiver<WorkerMessage>,
    reader: std::thread::JoinHandle<()>,
    _active: ActiveTrial,
}

/// Begins the trial's row, checks its memory estimate, and starts the worker with its job in
/// its cgroup, the power, memory and clock samplers around it.
fn start(
    ctx: &TrialContext<'_>,
    store: &mut Store,
    run_id: i64,
    trial: &PlannedTrial,
    workload: &dyn Workload,
    say: Say<'_>,
) -> anyhow::Result<Started> {
    let planned = trial.iterations;
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
    let begun = Begun {
        trial_id,
        warmup,
        live,
    };
    match ctx.memory.preflight(ctx.host, trial) {
        Preflight::Skip(why) => return Ok(Started::Skipped { begun, why }),
        Preflight::Run {
            warning: Some(warning),
        } => say.line(format!("{}: {warning}", trial.label), true),
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
    let oom_kills_before = ProcReader::new(ctx.host).vmstat().map(|v| v.oom_kill);
    // Power is sampled in the parent, so it keeps running whatever happens to the worker.
    let power = ctx.power.as_ref().map(|(m, _, _)| match ctx.metrics {
        Some(metrics) => m.start_live(metrics.power_sinks(&m.rails_by_source(), m.scope.as_str())),
        None => m.start(),
    });
    if let (Some((m, _, _)), 0) = (&ctx.power, warmup) {
        m.mark(true);
    }
    let mut command = worker_command(ctx.config.train.threads)?;
    if let Some(cg) = &cgroup {
        command.env(cgroup::TRIAL_CGROUP_ENV, &cg.dir);
    }
    let mut child = command.spawn().context("cannot start the worker process")?;
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
    let watch = match workload.profile().watches_tree {
        true => Watch::Tree(pid),
        false => Watch::Process(pid),
    };
    let active = ActiveTrial::register(pid, cgroup.as_ref().map(|cg| cg.dir.clone()));
    let memory = MemorySampler::start_observed(
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
    let (tx, messages) = mpsc::channel::<WorkerMessage>();
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
    Ok(Started::Running {
        begun,
        worker: Box::new(Worker {
            child,
            pid,
            cgroup,
            oom_kills_before,
            power,
            memory,
            clocks,
            messages,
            reader,
            _active: active,
        }),
    })
}

/// How far a stop of the trial has gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stopping {
    /// No stop asked.
    Running,
    /// The worker was asked (SIGTERM) at this instant to stop after its iteration.
    Asked(Instant),
    /// The iteration in progress outlasted the stop's grace: the worker was killed.
    Abandoned,
    /// A second interrupt: the worker and everything it started were killed at once.
    Aborted,
}

/// What [`Stopping::next`] says to do to the worker now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopAction {
    Nothing,
    /// SIGTERM: finish the iteration and report `stopped`.
    Terminate,
    /// SIGKILL the worker.
    Kill,
    /// SIGKILL the worker and every process it started.
    KillTree,
}

impl Stopping {
    /// The next state, given the stop and abort flags and the stop's grace at `now`.
    pub(super) fn next(
        self,
        stop: bool,
        abort: bool,
        grace: Duration,
        now: Instant,
    ) -> (Stopping, StopAction) {
        match self {
            // A second interrupt: nothing waits for an iteration or a command's grace.
            Stopping::Aborted => (self, StopAction::Nothing),
            _ if abort => (Stopping::Aborted, StopAction::KillTree),
            _ if !stop => (self, StopAction::Nothing),
            Stopping::Running => (Stopping::Asked(now), StopAction::Terminate),
            // A big batch on a slow board can take longer than a service manager waits:
            // abandon the iteration in progress rather than be killed mid-write.
            Stopping::Asked(at) if now.saturating_duration_since(at) >= grace => {
                (Stopping::Abandoned, StopAction::Kill)
            }
            Stopping::Asked(_) | Stopping::Abandoned => (self, StopAction::Nothing),
        }
    }
}

/// What the worker reported, message by message.
#[derive(Debug, Default)]
pub(super) struct Received {
    pub iterations: Vec<IterationRecord>,
    /// The workload's own end report.
    pub outcome: Option<serde_json::Value>,
    pub peak_gpu_bytes: Option<u64>,
    /// The last message that was none of those: how the worker says it ended.
    pub last: Option<WorkerMessage>,
}

impl Received {
    /// Keeps one message.
    pub(super) fn take(&mut self, msg: WorkerMessage) {
        match msg {
            WorkerMessage::Iteration(rec) => self.iterations.push(rec),
            WorkerMessage::Outcome(value) => self.outcome = Some(value),
            WorkerMessage::GpuMemory { peak_bytes } => self.peak_gpu_bytes = Some(peak_bytes),
            msg => self.last = Some(msg),
        }
    }
}

/// Whether the iteration just received is the last of the warm-up (the next one is the first
/// measured), given how many have arrived with it.
pub(super) fn warmup_ends_with(received: usize, warmup: usize) -> bool {
    received == warmup
}

/// Everything a trial gave once its worker has ended.
pub(super) struct Collected {
    pub received: Received,
    pub end: WorkerEnd,
    pub stopping: Stopping,
    /// Whether a stop was asked by the time the worker had ended.
    pub stop_requested: bool,
    pub memory: Vec<MemorySample>,
    pub clocks: ClockReport,
    /// The power samples, with `--power`.
    pub power: Option<Samples>,
}

/// Takes the worker's messages until it ends, each iteration into the store as it arrives,
/// carrying out a stop or abort; then ends what the trial left running and stops the samplers.
/// A store that fails stops the worker and the trial, with the error.
fn collect(
    ctx: &TrialContext<'_>,
    store: &mut Store,
    trial: &PlannedTrial,
    begun: &Begun,
    worker: Box<Worker>,
    say: Say<'_>,
) -> anyhow::Result<Collected> {
    let Worker {
        mut child,
        pid,
        cgroup,
        oom_kills_before,
        power,
        memory,
        clocks,
        messages,
        reader,
        _active,
    } = *worker;
    let planned = trial.iterations;
    let mut received = Received {
        iterations: Vec::with_capacity(planned),
        ..Default::default()
    };
    let mut stopping = Stopping::Running;
    let stored = loop {
        let action;
        (stopping, action) = stopping.next(
            ctx.stop.load(Ordering::SeqCst),
            ctx.abort.is_some_and(|a| a.load(Ordering::SeqCst)),
            ctx.stop_grace,
            Instant::now(),
        );
        match action {
            StopAction::Nothing => {}
            // SAFETY: kill(2) on our own child's pid, which we have not reaped yet.
            StopAction::Terminate => unsafe {
                libc::kill(pid as i32, libc::SIGTERM);
            },
            StopAction::Kill => {
                let _ = child.kill();
            }
            StopAction::KillTree => {
                kill_worker_tree(ctx.host, pid, cgroup.as_ref().map(|cg| cg.dir.as_path()))
            }
        }
        let msg = match messages.recv_timeout(Duration::from_millis(100)) {
            Ok(msg) => msg,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break Ok(()),
        };
        if let WorkerMessage::Iteration(rec) = &msg {
            if let Some(live) = &begun.live {
                live.iteration();
            }
            if let Err(e) = store.record_iteration(begun.trial_id, rec) {
                // The DB failed: stop the worker; nothing more can be recorded.
                let _ = child.kill();
                break Err(e);
            }
            show_progress(rec, planned, say);
            if warmup_ends_with(received.iterations.len() + 1, begun.warmup) {
                if let Some((m, _, _)) = &ctx.power {
                    m.mark(true);
                }
            }
        }
        received.take(msg);
    };
    // The reader stops at the worker's end, or at its next message once nothing takes it.
    drop(messages);
    let _ = reader.join();
    let status = child.wait().ok();
    if let Some(cg) = &cgroup {
        let left = cg.kill_remaining();
        if left > 0 {
            say.line(
                format!(
                    "{}: killed {left} process(es) the trial left running",
                    trial.label
                ),
                true,
            );
        }
    }
    let memory = memory.stop();
    let clocks = provenance::assess(&clocks.stop());
    // The trial's own cgroup counts only its OOM kills; the system-wide counter (the fallback
    // without cgroups) could also count another process killed meanwhile.
    let oom_kills = match cgroup.as_ref().and_then(|cg| cg.oom_kills()) {
        Some(n) => n,
        None => {
            let after = ProcReader::new(ctx.host).vmstat().map(|v| v.oom_kill);
            after
                .zip(oom_kills_before)
                .map_or(0, |(a, b)| a.saturating_sub(b))
        }
    };
    drop(cgroup);
    let power = match (power, &ctx.power) {
        (Some(handle), Some((m, _, _))) => {
            m.mark(false);
            Some(handle.stop())
        }
        _ => None,
    };
    if let Err(e) = stored {
        anyhow::bail!(
            "the results database failed while recording {}: {e}",
            trial.label
        );
    }
    let last = received.last.take();
    Ok(Collected {
        received,
        end: WorkerEnd {
            last,
            status,
            oom_kills,
        },
        stopping,
        stop_requested: ctx.stop.load(Ordering::SeqCst),
        memory,
        clocks,
        power,
    })
}

/// The progress bar, or every 50th iteration and the last in the log.
fn show_progress(rec: &IterationRecord, planned: usize, say: Say<'_>) {
    if let Some(bar) = say.bar {
        bar.set_position(rec.step as u64 + 1);
        bar.set_message(format!("loss {:.4}", rec.loss));
    } else if rec.step.is_multiple_of(50) || rec.step + 1 == planned {
        tracing::info!(
            step = rec.step,
            loss = rec.loss,
            step_s = rec.step_s,
            "iteration"
        );
    }
}

/// What a trial came to, ready to be stored.
pub(super) struct Concluded {
    pub summary: TrialSummary,
    pub memory: MemoryColumns,
    /// `trials.swap_pressure`.
    pub swap_pressure: Option<bool>,
    pub peak_rss_bytes: Option<u64>,
    pub peak_gpu_bytes: Option<u64>,
    pub clocks: ClockReport,
    /// Tails of the trial's standard output and error.
    pub output: Option<(String, String)>,
    /// With `--power`: the trial's power record, and its samples where every one is kept.
    pub power: Option<(TrialPowerRecord, Option<Samples>)>,
    /// The line that ends the trial in the log, and whether it is a warning.
    pub line: (String, bool),
}

/// The trial's status, figures, memory verdict and energy from what it gave: metrics over the
/// measured iterations (after `warmup`, as planned), energy, time and memory over the same
/// measured window. Writes nothing; logs its warnings (a loss anomaly, a stall, the power's).
fn conclude(
    ctx: &TrialContext<'_>,
    trial: &PlannedTrial,
    workload: &dyn Workload,
    warmup: usize,
    collected: Collected,
) -> Concluded {
    let Collected {
        received:
            Received {
                iterations,
                outcome,
                peak_gpu_bytes,
                last: _,
            },
        end,
        stopping,
        stop_requested,
        memory: samples,
        clocks,
        power,
    } = collected;
    let planned = trial.iterations;
    let profile = workload.profile();
    let conclusion = workload.conclude(&trial.job, outcome.as_ref(), end.oom_kills > 0);
    let (status, error) = match (stopping, conclusion.status.clone()) {
        (Stopping::Aborted, _) => (
            TrialStatus::Interrupted,
            Some(
                "stopped at once by a second interrupt: the worker and every process the trial \
                 started were killed"
                    .into(),
            ),
        ),
        (_, Some(decided)) => decided,
        (Stopping::Abandoned, None) if end.last.is_none() => (
            TrialStatus::Interrupted,
            Some(format!(
                "stopped: the iteration in progress did not end within {:.1} s of the stop \
                 request and was abandoned",
                ctx.stop_grace.as_secs_f64()
            )),
        ),
        _ => match classify(&end) {
            // A worker that ended without a word while a stop was under way was ended by it
            // (our SIGTERM before it set up its handler, or Ctrl-C reaching the whole process
            // group): interrupted, so a resumed sweep runs it again, never a counted crash.
            (TrialStatus::Crashed, Some(why)) if stop_requested => (
                TrialStatus::Interrupted,
                Some(format!(
                    "stopped by an interrupt before the worker reported an end ({why})"
                )),
            ),
            other => other,
        },
    };

    let error = match status {
        TrialStatus::Oom => {
            error.map(|why| why + &ctx.memory.oom_with_swap_free(&samples).unwrap_or_default())
        }
        _ => error,
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
        swap_pressure,
        note,
    } = ctx
        .memory
        .assess(trial, &samples, from_ns, to_ns, measured_span.len());
    let memory = MemoryColumns {
        mem_estimate_bytes: Some(trial.memory_estimate_bytes as i64),
        mem_limit_bytes: ctx.memory.limit.map(|l| l as i64),
        swap_in_pages: Some(report.swap_in_pages as i64),
        swap_out_pages: Some(report.swap_out_pages as i64),
        major_faults: Some(report.major_faults as i64),
        swapped_bytes_max: report.swapped_bytes_max.map(|b| b as i64),
        mem_available_min_bytes: report.mem_available_min_bytes.map(|b| b as i64),
        psi_memory_some_us: report.psi_some_us.map(|v| v as i64),
        psi_memory_full_us: report.psi_full_us.map(|v| v as i64),
        memory_note: Some(note),
    };

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
    let power = match (power, &ctx.power) {
        (Some(samples), Some((m, baseline, store_samples))) => {
            // Items per iteration for energy per image: a trial measured whole has none;
            // without a count the workload says (iterations, or none for a command's unknown
            // batch).
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
            if let TrialPowerRecord::Measured(p) = &record {
                let per_work = workload.energy_metrics(&trial.job, measured.len(), p.energy_j);
                summary.metrics.extra.extend(per_work);
            }
            Some((record, store_samples.then_some(samples)))
        }
        _ => None,
    };
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
    Concluded {
        summary,
        memory,
        swap_pressure,
        peak_rss_bytes: report.peak_rss_bytes,
        peak_gpu_bytes,
        clocks,
        output: conclusion.output,
        power,
        line: (line, error.is_some() || report.swap_pressure),
    }
}

/// Stores what the trial came to, ends its live metrics and says how it ended.
fn record(
    store: &mut Store,
    trial: &PlannedTrial,
    begun: Begun,
    concluded: Concluded,
    say: Say<'_>,
) -> anyhow::Result<TrialStatus> {
    let trial_id = begun.trial_id;
    let status = concluded.summary.status;
    store.record_memory(
        trial_id,
        concluded.swap_pressure,
        concluded.peak_rss_bytes,
        &concluded.memory,
    )?;
    store.record_gpu_memory(trial_id, concluded.peak_gpu_bytes)?;
    store.record_clocks(trial_id, &concluded.clocks)?;
    if let Some((stdout_tail, stderr_tail)) = &concluded.output {
        store.record_output(trial_id, stdout_tail, stderr_tail)?;
    }
    if let Some((record, samples)) = &concluded.power {
        if let Some(samples) = samples {
            store.record_power_samples(trial_id, &samples.series())?;
        }
        store.record_power(trial_id, record)?;
    }
    store.finish_trial(trial_id, &concluded.summary)?;
    if let Some(live) = begun.live {
        live.ended(status.as_str());
    }
    let (line, warn) = concluded.line;
    say.line(line, warn);
    if concluded.clocks.throttled == Some(true) {
        say.line(
            format!(
                "{} THROTTLED: {}",
                trial.label,
                concluded.clocks.note.as_deref().unwrap_or("")
            ),
            true,
        );
    }
    Ok(status)
}

/// Stores a trial the memory check skipped: its memory note and an empty summary.
fn record_skipped(
    ctx: &TrialContext<'_>,
    store: &mut Store,
    trial: &PlannedTrial,
    begun: Begun,
    why: String,
    say: Say<'_>,
) -> anyhow::Result<TrialStatus> {
    say.line(format!("{}: {why}", trial.label), true);
    let memory = MemoryColumns {
        mem_estimate_bytes: Some(trial.memory_estimate_bytes as i64),
        mem_limit_bytes: ctx.memory.limit.map(|l| l as i64),
        memory_note: Some(why.clone()),
        ..Default::default()
    };
    store.record_memory(begun.trial_id, None, None, &memory)?;
    store.finish_trial(
        begun.trial_id,
        &empty_summary(TrialStatus::SkippedMemory, Some(why)),
    )?;
    if let Some(live) = begun.live {
        live.ended(TrialStatus::SkippedMemory.as_str());
    }
    Ok(TrialStatus::SkippedMemory)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DeviceKind;
    use crate::memory::SwapThresholds;
    use crate::power::RailSeries;
    use crate::store::RunInfo;
    use crate::workloads;
    use std::os::unix::process::ExitStatusExt;

    const MS: i64 = 1_000_000;

    /// AlexNet on the CPU at batch 2 as a sweep plans it, `iterations` steps.
    fn alexnet(iterations: usize) -> PlannedTrial {
        let mut c = Config::default();
        c.sweep.nets = vec!["alexnet".into()];
        c.sweep.devices = vec![DeviceKind::Cpu];
        c.sweep.batches = vec![2];
        let prepared = workloads::Prepared::of(
            workloads::cnn::Cnn,
            workloads::Preparation {
                dataset: "synthetic".into(),
                ..Default::default()
            },
        );
        let mut trial = workloads::plan(&prepared.plan_input(&c, &HostPaths::default())).remove(0);
        trial.iterations = iterations;
        trial
    }

    fn memory_plan() -> MemoryPlan {
        MemoryPlan {
            swap_devices: "no swap".into(),
            limit: Some(4 << 30),
            swap_limit: None,
            parent: None,
            thresholds: SwapThresholds::default(),
            interval: Duration::from_millis(100),
            try_anyway: false,
            gpu_integrated: false,
        }
    }

    /// A context with the memory plan above, `power` as given, nothing else.
    fn context<'a>(
        config: &'a Config,
        host: &'a HostPaths,
        stop: &'a AtomicBool,
        power: Option<&'a PowerMonitor>,
    ) -> TrialContext<'a> {
        TrialContext {
            config,
            host,
            stop,
            abort: None,
            stop_grace: Duration::from_secs(5),
            power: power.map(|m| (m, None, true)),
            memory: memory_plan(),
            metrics: None,
        }
    }

    /// A step from `a_ms` to `b_ms`.
    fn step(step: usize, a_ms: i64, b_ms: i64) -> IterationRecord {
        IterationRecord {
            step,
            epoch: 0,
            loss: 2.0 - step as f64 * 0.1,
            lr: 0.01,
            data_s: 0.0,
            step_s: (b_ms - a_ms) as f64 * 1e-3,
            t_start_ns: a_ms * MS,
            t_end_ns: b_ms * MS,
        }
    }

    fn collected(iterations: Vec<IterationRecord>, end: WorkerEnd) -> Collected {
        Collected {
            received: Received {
                iterations,
                ..Default::default()
            },
            end,
            stopping: Stopping::Running,
            stop_requested: false,
            memory: Vec::new(),
            clocks: ClockReport::default(),
            power: None,
        }
    }

    fn ended(last: Option<WorkerMessage>, status: Option<i32>, oom_kills: u64) -> WorkerEnd {
        WorkerEnd {
            last,
            status: status.map(std::process::ExitStatus::from_raw),
            oom_kills,
        }
    }

    fn done() -> WorkerEnd {
        ended(Some(WorkerMessage::Done { stopped: false }), Some(0), 0)
    }

    /// The total at 10 W until `switch_ms`, 20 W after, sampled every 10 ms to 1000 ms.
    fn power_samples(switch_ms: i64) -> Samples {
        let t_ns: Vec<i64> = (0..=100).map(|k| k * 10 * MS).collect();
        let watts = t_ns
            .iter()
            .map(|&t| if t < switch_ms * MS { 10.0 } else { 20.0 })
            .collect::<Vec<_>>();
        Samples {
            series: vec![RailSeries {
                source: "ina3221".into(),
                rail: "VDD_IN".into(),
                volts: vec![None; t_ns.len()],
                amps: vec![None; t_ns.len()],
                t_ns,
                watts,
                failed: Vec::new(),
            }],
            total: vec![0],
            errors: Vec::new(),
            period_ns: 10 * MS,
            lost: None,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn a_stop_asks_once_then_abandons_after_its_grace_and_an_abort_kills_at_once() {
        let grace = Duration::from_secs(5);
        let t0 = Instant::now();
        let later = |s: u64| t0 + Duration::from_secs(s);
        let running = Stopping::Running;
        assert_eq!(
            running.next(false, false, grace, t0),
            (Stopping::Running, StopAction::Nothing)
        );
        let (asked, act) = running.next(true, false, grace, t0);
        assert_eq!((asked, act), (Stopping::Asked(t0), StopAction::Terminate));
        // Asked once: within the grace the worker finishes its iteration undisturbed.
        assert_eq!(
            asked.next(true, false, grace, later(4)),
            (asked, StopAction::Nothing)
        );
        let (abandoned, act) = asked.next(true, false, grace, later(5));
        assert_eq!((abandoned, act), (Stopping::Abandoned, StopAction::Kill));
        assert_eq!(
            abandoned.next(true, false, grace, later(60)),
            (Stopping::Abandoned, StopAction::Nothing)
        );
        // A second interrupt kills the whole tree from any state, once.
        for state in [running, asked, abandoned] {
            assert_eq!(
                state.next(true, true, grace, later(1)),
                (Stopping::Aborted, StopAction::KillTree),
                "{state:?}"
            );
        }
        assert_eq!(
            Stopping::Aborted.next(true, true, grace, later(2)),
            (Stopping::Aborted, StopAction::Nothing)
        );
    }

    #[test]
    fn received_keeps_iterations_the_outcome_the_gpu_peak_and_the_last_word() {
        let mut r = Received::default();
        r.take(WorkerMessage::Iteration(step(0, 0, 10)));
        r.take(WorkerMessage::Iteration(step(1, 10, 20)));
        r.take(WorkerMessage::GpuMemory {
            peak_bytes: 7 << 20,
        });
        r.take(WorkerMessage::Outcome(serde_json::json!({"exit_code": 0})));
        r.take(WorkerMessage::Failed {
            error: "boom".into(),
        });
        assert_eq!(r.iterations, [step(0, 0, 10), step(1, 10, 20)]);
        assert_eq!(r.peak_gpu_bytes, Some(7 << 20));
        assert_eq!(r.outcome, Some(serde_json::json!({"exit_code": 0})));
        assert_eq!(
            r.last,
            Some(WorkerMessage::Failed {
                error: "boom".into()
            })
        );
        // Two warm-up iterations: measurement starts after the second arrives, not before;
        // none: it started with the worker.
        assert!(!warmup_ends_with(1, 2));
        assert!(warmup_ends_with(2, 2));
        assert!(!warmup_ends_with(1, 0));
    }

    #[test]
    fn a_worker_killed_by_the_oom_killer_before_any_iteration_concludes_oom() {
        let (config, host, stop) = (
            Config::default(),
            HostPaths::default(),
            AtomicBool::new(false),
        );
        let ctx = context(&config, &host, &stop, None);
        let trial = alexnet(10);
        let workload = trial.job.workload().unwrap();
        let end = ended(None, Some(libc::SIGKILL), 1);
        let c = conclude(&ctx, &trial, workload, 2, collected(Vec::new(), end));
        assert_eq!(c.summary.status, TrialStatus::Oom);
        let error = c.summary.error.as_deref().unwrap();
        assert!(error.contains("OOM killer"), "{error}");
        // Nothing measured: no figures, and the log line is a warning naming the error.
        assert_eq!(c.summary.time_per_image_s, None);
        assert_eq!(c.summary.metrics.time_per_iteration_s, None);
        assert_eq!(c.summary.metrics.extra["window_s"], serde_json::Value::Null);
        assert_eq!(
            c.summary.metrics.extra["stalled_steps"],
            serde_json::Value::Null
        );
        assert_eq!(c.swap_pressure, None);
        assert_eq!(c.memory.mem_limit_bytes, Some(4 << 30));
        assert!(c.line.1 && c.line.0.contains(error), "{:?}", c.line);

        // The same SIGKILL without the counter rising is a crash, not OOM.
        let end = ended(None, Some(libc::SIGKILL), 0);
        let c = conclude(&ctx, &trial, workload, 2, collected(Vec::new(), end));
        assert_eq!(c.summary.status, TrialStatus::Crashed);
    }

    #[test]
    fn how_a_stop_went_decides_an_interrupted_trial() {
        let (config, host, stop) = (
            Config::default(),
            HostPaths::default(),
            AtomicBool::new(false),
        );
        let ctx = context(&config, &host, &stop, None);
        let trial = alexnet(10);
        let workload = trial.job.workload().unwrap();
        let conclude_with = |stopping, stop_requested, end| {
            let mut c = collected(vec![step(0, 0, 100)], end);
            c.stopping = stopping;
            c.stop_requested = stop_requested;
            let c = conclude(&ctx, &trial, workload, 0, c).summary;
            (c.status, c.error.unwrap_or_default())
        };
        // A second interrupt: interrupted whatever the worker said.
        let (status, error) = conclude_with(Stopping::Aborted, true, done());
        assert_eq!(status, TrialStatus::Interrupted);
        assert!(error.contains("second interrupt"), "{error}");
        // The iteration in progress outlasted the grace and the worker said nothing.
        let killed = || ended(None, Some(libc::SIGKILL), 0);
        let (status, error) = conclude_with(Stopping::Abandoned, true, killed());
        assert_eq!(status, TrialStatus::Interrupted);
        assert!(error.contains("within 5.0 s"), "{error}");
        // A worker that stopped at the boundary in time.
        let stopped = ended(Some(WorkerMessage::Done { stopped: true }), Some(0), 0);
        assert_eq!(
            conclude_with(Stopping::Asked(Instant::now()), true, stopped),
            (TrialStatus::Interrupted, String::new())
        );
        // Exiting without a word: interrupted while a stop was asked, a crash otherwise.
        let silent = || ended(None, Some(1 << 8), 0);
        let (status, error) = conclude_with(Stopping::Asked(Instant::now()), true, silent());
        assert_eq!(status, TrialStatus::Interrupted);
        assert!(error.contains("exited with code 1"), "{error}");
        let (status, error) = conclude_with(Stopping::Running, false, silent());
        assert_eq!(status, TrialStatus::Crashed);
        assert!(error.contains("exited with code 1"), "{error}");
        assert_eq!(
            conclude_with(Stopping::Running, false, done()),
            (TrialStatus::Ok, String::new())
        );
    }

    /// One warm-up step (0..200 ms at 10 W) and three measured (200..800 ms at 20 W).
    fn warm_then_measured() -> Vec<IterationRecord> {
        let mut warm = step(0, 0, 200);
        // A slow first step, so figures that took it in would show it.
        warm.step_s = 0.5;
        vec![
            warm,
            step(1, 200, 400),
            step(2, 400, 600),
            step(3, 600, 800),
        ]
    }

    fn power_monitor(root: &std::path::Path) -> PowerMonitor {
        use crate::testkit::jetson;
        jetson::orin_nx_rails(
            root,
            &[("VDD_IN", 5000, 2000), ("VDD_CPU_GPU_CV", 5000, 800)],
        );
        crate::testkit::power::for_run(root, &Default::default()).unwrap()
    }

    #[test]
    fn metrics_and_energy_cover_the_measured_iterations_over_one_window() {
        let sys = tempfile::tempdir().unwrap();
        let monitor = power_monitor(sys.path());
        let (config, host, stop) = (
            Config::default(),
            HostPaths::default(),
            AtomicBool::new(false),
        );
        let ctx = context(&config, &host, &stop, Some(&monitor));
        let trial = alexnet(4);
        let workload = trial.job.workload().unwrap();
        let mut got = collected(warm_then_measured(), done());
        got.power = Some(power_samples(200));
        let c = conclude(&ctx, &trial, workload, 1, got);
        assert_eq!(
            (c.summary.status, c.summary.error.as_deref()),
            (TrialStatus::Ok, None)
        );
        let m = &c.summary.metrics;
        // Median and sum of the three measured steps only.
        assert!(close(m.time_per_iteration_s.unwrap(), 0.2), "{m:?}");
        assert!(close(m.total_time_s.unwrap(), 0.6), "{m:?}");
        assert!(
            close(c.summary.time_per_image_s.unwrap(), 0.1),
            "{:?}",
            c.summary
        );
        assert_eq!(m.extra["window_steps"], 3);
        let window_s = m.extra["window_s"].as_f64().unwrap();
        assert!(close(window_s, 0.6), "{window_s}");
        // The losses are every iteration's.
        assert_eq!(c.summary.loss_first, Some(2.0));
        assert!(close(c.summary.loss_last.unwrap(), 1.7));
        let Some((TrialPowerRecord::Measured(p), Some(kept))) = &c.power else {
            panic!(
                "power measured and its samples kept: {:?}",
                c.power.is_some()
            );
        };
        // The same window: 20 W over 0.6 s, none of the warm-up's 10 W; per image over 3 x 2.
        assert!(close(p.avg_power_w, 20.0), "{p:?}");
        assert!(close(p.energy_j, 20.0 * window_s), "{p:?}");
        assert!(close(p.energy_per_image_j, 12.0 / 6.0), "{p:?}");
        assert_eq!(kept.series[0].watts.len(), 101);
        // Readings every 10 ms from 200 through 800 ms.
        assert_eq!(p.samples, 61);
    }

    fn temp_store(dir: &std::path::Path) -> (Store, i64) {
        let mut store = Store::open(&dir.join("results.db")).unwrap();
        let run_id = store
            .begin_run(&RunInfo {
                uuid: "7d1c8f3e-0000-4000-8000-000000000001".into(),
                host: "test".into(),
                started_at: "2026-01-01T00:00:00Z".into(),
                config_toml: String::new(),
                edgebench_version: "0".into(),
                git_commit: "unknown".into(),
                candle_version: "0".into(),
                cpu_threads: 1,
                cpu_model: None,
                os: "linux".into(),
            })
            .unwrap();
        (store, run_id)
    }

    #[test]
    fn record_stores_the_concluded_trial() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, run_id) = temp_store(dir.path());
        let monitor = power_monitor(&dir.path().join("sys"));
        let (config, host, stop) = (
            Config::default(),
            HostPaths::default(),
            AtomicBool::new(false),
        );
        let ctx = context(&config, &host, &stop, Some(&monitor));
        let trial = alexnet(4);
        let workload = trial.job.workload().unwrap();
        let trial_id = store
            .begin_repetition(run_id, &trial.key, 1, 4, 1, "2026-01-01T00:00:01Z")
            .unwrap();
        let iterations = warm_then_measured();
        for rec in &iterations {
            store.record_iteration(trial_id, rec).unwrap();
        }
        let mut got = collected(iterations, done());
        got.power = Some(power_samples(200));
        got.received.peak_gpu_bytes = Some(3 << 20);
        let concluded = conclude(&ctx, &trial, workload, 1, got);
        let begun = Begun {
            trial_id,
            warmup: 1,
            live: None,
        };
        let status = record(&mut store, &trial, begun, concluded, Say { bar: None }).unwrap();
        assert_eq!(status, TrialStatus::Ok);

        let rows = store.results().unwrap();
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!((row.status, row.error.as_deref()), (TrialStatus::Ok, None));
        assert_eq!((row.iterations, row.warmup_iterations), (4, 1));
        assert!(row.ended_at.is_some());
        assert!(close(row.time_per_iteration_s.unwrap(), 0.2), "{row:?}");
        assert!(close(row.energy_j.unwrap(), 12.0), "{row:?}");
        assert!(close(row.avg_power_w.unwrap(), 20.0), "{row:?}");
        assert_eq!(row.metrics["window_steps"], 3);
        assert_eq!(row.peak_gpu_bytes, Some(3 << 20));
        assert_eq!(row.memory.mem_limit_bytes, Some(4 << 30));
        let note = row.memory.memory_note.as_deref().unwrap();
        assert!(note.contains("no swap"), "{note}");
        assert_eq!(row.power_samples, Some(61));
    }

    #[test]
    fn a_trial_the_memory_check_skips_is_stored_with_its_reason_and_no_figures() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, run_id) = temp_store(dir.path());
        let (config, host, stop) = (
            Config::default(),
            HostPaths::default(),
            AtomicBool::new(false),
        );
        let ctx = context(&config, &host, &stop, None);
        let trial = alexnet(4);
        let trial_id = store
            .begin_repetition(run_id, &trial.key, 1, 4, 1, "2026-01-01T00:00:01Z")
            .unwrap();
        let begun = Begun {
            trial_id,
            warmup: 1,
            live: None,
        };
        let why = "predicted to need 9.00 GiB, more than RAM".to_string();
        let status = record_skipped(
            &ctx,
            &mut store,
            &trial,
            begun,
            why.clone(),
            Say { bar: None },
        )
        .unwrap();
        assert_eq!(status, TrialStatus::SkippedMemory);
        let row = &store.results().unwrap()[0];
        assert_eq!(row.status, TrialStatus::SkippedMemory);
        assert_eq!(row.error.as_deref(), Some(why.as_str()));
        assert_eq!(row.memory.memory_note.as_deref(), Some(why.as_str()));
        assert_eq!(
            row.memory.mem_estimate_bytes,
            Some(trial.memory_estimate_bytes as i64)
        );
        assert_eq!((row.iterations, row.time_per_iteration_s), (0, None));
    }
}
