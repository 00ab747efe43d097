//! The parent side of `edgebench run`: preflight, then each planned trial in turn, every
//! iteration written to the store as it finishes, the trial's summary at its end. One trial's
//! failure is recorded and the sweep goes on.

use crate::config::Config;
use crate::host::{self, HostPaths};
use crate::plan::{self, PlannedTrial};
use crate::power::{self, Baseline, PowerMonitor};
use crate::stats;
use crate::store::{IterationRecord, RunInfo, Store, TrialSummary};
use crate::train::{self, data::Dataset, Control, TrialEnd};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};

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
    pub host: &'a HostPaths,
    /// Set by SIGINT/SIGTERM: the current trial stops at the next iteration boundary.
    pub stop: &'a AtomicBool,
    /// `--power`: sampled around every trial.
    pub power: Option<&'a PowerMonitor>,
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

/// Everything that can be refused before a byte is written: the devices and the data set.
pub fn preflight(config: &Config) -> anyhow::Result<Dataset> {
    for device in &config.sweep.devices {
        train::device(*device)?;
    }
    open_dataset(config)
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

/// Runs one trial and writes everything about it; returns its final status.
#[allow(clippy::too_many_arguments)]
fn run_one(
    store: &mut Store,
    run_id: i64,
    trial: &PlannedTrial,
    data: &Dataset,
    warmup: usize,
    stop: &AtomicBool,
    bar: Option<&ProgressBar>,
    power: Option<(&PowerMonitor, Option<&Baseline>, bool)>,
) -> anyhow::Result<String> {
    let planned = trial.spec.iterations();
    let warmup = stats::effective_warmup(warmup, planned);
    let trial_id = store.begin_trial(run_id, &trial.key, planned, warmup, &now())?;
    let mut step_s = Vec::with_capacity(planned);
    let mut losses = Vec::with_capacity(planned);
    let mut records = Vec::with_capacity(planned);
    let mut store_error = None;
    let mut on_iteration = |rec: &IterationRecord| -> anyhow::Result<Control> {
        if let Err(e) = store.record_iteration(trial_id, rec) {
            store_error = Some(e.to_string());
            anyhow::bail!("cannot record iteration {}: {e}", rec.step);
        }
        step_s.push(rec.step_s);
        losses.push(rec.loss);
        records.push(*rec);
        if rec.step + 1 == warmup {
            // The next iteration is the first measured one.
            if let Some((m, _, _)) = power {
                m.mark(true);
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
        Ok(if stop.load(Ordering::SeqCst) {
            Control::Stop
        } else {
            Control::Continue
        })
    };
    let recording = power.map(|(m, _, _)| m.start());
    if let (Some((m, _, _)), 0) = (power, warmup) {
        m.mark(true);
    }
    // A panic inside candle costs this trial, not the sweep (an abort needs the worker process).
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        train::run_trial(&trial.spec, data, &mut on_iteration)
    }))
    .unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        Err(anyhow::anyhow!("panic while training: {msg}"))
    });
    if let Some(e) = store_error {
        // The DB itself failed: nothing more can be recorded, so stop the sweep.
        anyhow::bail!(
            "the results database failed while recording {}: {e}",
            trial_label(trial)
        );
    }
    let (status, error) = match result {
        Ok(TrialEnd::Completed) => ("ok", None),
        Ok(TrialEnd::Stopped) => ("interrupted", None),
        Err(e) => ("failed", Some(format!("{e:#}"))),
    };
    let times = stats::time_summary(&step_s, warmup, trial.spec.batch);
    let summary = TrialSummary {
        status: status.to_string(),
        error: error.clone(),
        ended_at: now(),
        time_per_image_s: times.as_ref().map(|t| t.time_per_image_s),
        time_per_image_spread_s: times.as_ref().map(|t| t.time_per_image_spread_s),
        images_per_s: times.as_ref().map(|t| t.images_per_s),
        loss_first: losses.first().copied(),
        loss_last: losses.last().copied(),
        loss_anomaly: losses.iter().any(|&l| stats::loss_is_anomalous(l)),
    };
    if let (Some(handle), Some((m, baseline, store_samples))) = (recording, power) {
        m.mark(false);
        let samples = handle.stop();
        power::record_trial(
            store,
            trial_id,
            &samples,
            &records,
            warmup,
            trial.spec.batch,
            baseline,
            store_samples,
        )?;
    }
    store.finish_trial(trial_id, &summary)?;
    let line = match &error {
        Some(e) => format!(
            "{} failed after {} iterations: {e}",
            trial_label(trial),
            step_s.len()
        ),
        None => format!(
            "{} {status}: {} iterations, {}",
            trial_label(trial),
            step_s.len(),
            times
                .map(|t| format!("{:.2} ms/img", t.time_per_image_s * 1e3))
                .unwrap_or_else(|| "no measured iterations".into())
        ),
    };
    // On a terminal the bar owns the screen; log lines go above it.
    match (bar, error.is_some()) {
        (Some(bar), _) => bar.println(line),
        (None, true) => tracing::warn!("{line}"),
        (None, false) => tracing::info!("{line}"),
    }
    Ok(status.to_string())
}

/// Runs the sweep into `store`. Preflight errors return before the run is created.
pub fn run(req: RunRequest<'_>, store: &mut Store) -> anyhow::Result<RunOutcome> {
    let config = req.config;
    let data = preflight(config)?;
    let identity = data.identity();
    let plan = plan::plan(config, &identity, &store.completed_keys()?, req.force);
    let mut outcome = RunOutcome {
        skipped: plan.skipped.len(),
        ..Default::default()
    };
    for t in &plan.skipped {
        tracing::info!(
            "{} already ok in {} (use --force to rerun)",
            trial_label(t),
            store.path().display()
        );
    }
    if plan.to_run.is_empty() {
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
    let baseline = req.power.and_then(|m| {
        let b = m.baseline(std::time::Duration::from_secs_f64(config.power.baseline_s));
        if let Some(b) = &b {
            tracing::info!(
                "idle baseline: {:.3} W over {:.1} s",
                b.power_w,
                b.duration_s
            );
        }
        b
    });
    if let Some(m) = req.power {
        store.set_run_power(
            run_id,
            &m.board.profile.name,
            &m.total_how,
            baseline.map(|b| (b.power_w, b.duration_s)),
        )?;
    }
    let bar = progress_bar(std::io::stderr().is_terminal());
    let total = plan.to_run.len();
    for (k, trial) in plan.to_run.iter().enumerate() {
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
        let status = run_one(
            store,
            run_id,
            trial,
            &data,
            config.sweep.warmup_iterations,
            req.stop,
            bar.as_ref(),
            req.power
                .map(|m| (m, baseline.as_ref(), config.power.store_samples)),
        );
        let status = match status {
            Ok(s) => s,
            Err(e) => {
                store.finish_run(run_id, &now(), "failed").ok();
                return Err(e);
            }
        };
        outcome.ran += 1;
        match status.as_str() {
            "failed" => outcome.failed += 1,
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
    let status = if outcome.interrupted {
        "interrupted"
    } else {
        "finished"
    };
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
