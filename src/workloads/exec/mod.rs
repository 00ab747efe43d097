//! The external-command workload: any framework's training run measured with edgebench's
//! instruments. The command's log lines become iteration records ([`parse`]), old logs in the
//! layout of the Caffe/TensorFlow study scripts are imported ([`import`]), and config entries
//! expand into commands run in their own process group ([`command`]).

pub(crate) mod report;

pub(crate) mod command;
pub mod import;
pub(crate) mod parse;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

pub use command::ExecSection;
pub use command::ExecEntry;
use command::{CommandOutcome, CommandSpec, ExecParams, SweepValues};
use parse::{Parser, TrackedStep};

use crate::config::Config;
use crate::record::{Control, IterationRecord, Metrics, TrialEnd, WorkloadKind};
use crate::record::WorkItem;
use crate::store::{PerIteration, ResultRow, RowItems, TrialStatus};
use super::{
    Conclusion, Emit, JobEnd, PlanInput, PlannedTrial, Preparation, Recorded, RowNames,
    RunsCommands, TypedWorkload, WorkloadProfile,
};
use crate::store::TrialKey;

pub const KIND: WorkloadKind = WorkloadKind::named("exec");

/// Any framework's training command over (net, device, batch) (`[[exec]]`).
#[derive(Debug, Clone, Copy)]
pub struct Exec;

impl TypedWorkload for Exec {
    type Section = ExecSection;
    type Checked = ExecSection;
    /// Every trial's sweep point and job, expanded and checked once.
    type Plan = Vec<(SweepValues, ExecJob)>;
    type Job = ExecJob;
    const KIND: WorkloadKind = KIND;

    fn report_section(&self) -> Option<Box<dyn crate::render::Section>> {
        Some(Box::new(report::Exec))
    }

    /// A command's nets are whatever it trains and its batch (0: not known) fills `{batch}`:
    /// both only name its trials.
    fn check(
        &self,
        config: &Config,
        section: ExecSection,
    ) -> std::result::Result<ExecSection, String> {
        if section.0.is_empty() {
            return Err(
                "the exec workload has no command: add an [[exec]] table (name, command, parser) \
                 to the config, or run `edgebench exec -- COMMAND`"
                    .into(),
            );
        }
        let max = crate::config::MAX_BATCH;
        match config.sweep.batches.iter().find(|&&b| b > max) {
            Some(b) => Err(format!(
                "sweep.batches (--batch): batch {b} is above {max}"
            )),
            None => Ok(section),
        }
    }

    /// An example entry: the section's default has none.
    fn documented_section(&self) -> Option<toml::Value> {
        let example = ExecEntry {
            name: "pytorch".into(),
            command: vec!["python3".into()],
            parser: Some("edgebench".into()),
            timeout: Some(crate::config::Timeout(Duration::from_secs(60))),
            user: Some("bench".into()),
        };
        toml::Value::try_from(ExecSection(vec![example])).ok()
    }

    /// A command trains a CNN over images, its batch counted when known. It uses the device
    /// with its own framework (PyTorch on a TX2's GPU, which candle cannot drive), so the
    /// device only names its trials; its own output goes to the terminal, where a bar would
    /// fight with it; its children are watched with it.
    fn profile(&self) -> WorkloadProfile {
        WorkloadProfile {
            items: RowItems {
                item: WorkItem::Image,
                per_iteration: PerIteration::Batch,
                over_dataset: true,
            },
            records_loss: true,
            computes_on_devices: false,
            shows_progress: false,
            watches_tree: true,
            longer_trial_advice: "more steps of the command (its own iteration count, or \
                                  {iterations} with a larger --images or --epochs)",
        }
    }

    /// The framework and the net it trains, e.g. `caffe alexnet`.
    fn names(&self, row: &ResultRow) -> RowNames {
        let engine = match row.params.get("engine") {
            Some(serde_json::Value::String(e)) if !e.is_empty() => e.clone(),
            _ => KIND.as_str().to_string(),
        };
        let named = match row.params.get("engine") {
            Some(serde_json::Value::String(e)) => e.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            _ => String::new(),
        };
        RowNames {
            label: format!("{named} {}", row.net).trim_end().to_string(),
            engine: Some(engine),
        }
    }

    fn prepare(
        &self,
        config: &Config,
        entries: ExecSection,
        _host: &crate::host::HostPaths,
        _board: &crate::board::BoardProfile,
    ) -> Result<Preparation<Vec<(SweepValues, ExecJob)>>> {
        Ok(Preparation::of(jobs_of(config, &entries.0)?))
    }

    fn plan(
        &self,
        _input: &PlanInput<'_>,
        jobs: &Vec<(SweepValues, ExecJob)>,
    ) -> Vec<PlannedTrial<ExecJob>> {
        plan(jobs)
    }

    fn run(&self, job: ExecJob, stop: &AtomicBool, emit: Emit<'_>) -> Result<JobEnd> {
        let (outcome, images) = run_counting_images(&job, stop, emit)?;
        let mut value = serde_json::to_value(&outcome)?;
        if let serde_json::Value::Object(map) = &mut value {
            map.insert(IMAGES_PER_STEP.into(), images.into());
        }
        Ok(JobEnd {
            end: match outcome.end {
                command::CommandEnd::Interrupted => TrialEnd::Stopped,
                _ => TrialEnd::Completed,
            },
            outcome: Some(value),
        })
    }

    /// A record may stand for several logged steps: the total counts them
    /// ([`total_time_s`]); a command measured whole takes its wall time.
    fn complete_metrics(
        &self,
        job: &ExecJob,
        outcome: Option<&serde_json::Value>,
        trial: &Recorded<'_>,
        metrics: &mut Metrics,
    ) {
        metrics
            .extra
            .insert("given_epochs".into(), job.given_epochs.into());
        metrics
            .extra
            .insert("given_images".into(), job.given_images.into());
        metrics.extra.insert(
            IMAGES_PER_STEP.into(),
            images_per_step(outcome).into(),
        );
        match outcome_of(outcome) {
            Some(outcome) => {
                metrics.extra.extend(extra_metrics(&outcome));
                if job.parser.as_deref() == Some("trtexec") {
                    metrics
                        .extra
                        .extend(parse::trtexec_summary(&outcome.stdout_tail));
                }
                metrics.total_time_s = match trial.whole {
                    Some(whole) => Some(whole.step_s),
                    None => (!trial.measured.is_empty())
                        .then(|| total_time_s(trial.iterations, trial.warmup)),
                };
            }
            // The command never ran (it could not be started).
            None => {
                metrics.extra.insert("exit_code".into(), serde_json::Value::Null);
                metrics.extra.insert("wall_time_s".into(), serde_json::Value::Null);
            }
        }
    }

    fn commands(&self) -> Option<&dyn RunsCommands<ExecJob>> {
        Some(self)
    }
}

impl RunsCommands<ExecJob> for Exec {
    /// The command's end decides the status; its whole span measures a command that logged no
    /// step.
    fn conclude(&self, job: &ExecJob, outcome: Option<&serde_json::Value>, oom: bool) -> Conclusion {
        let (Some(raw), Some(outcome)) = (outcome, outcome_of(outcome)) else {
            return Conclusion::default();
        };
        let timeout = job.timeout_s.map(Duration::from_secs_f64);
        let (status, error) = outcome
            .end
            .status(oom, timeout, &outcome.stderr_tail);
        Conclusion {
            status: Some((
                TrialStatus::parse(status).expect("a command's end is a trial status"),
                error,
            )),
            whole: Some(IterationRecord {
                step: 0,
                epoch: 0,
                loss: f64::NAN,
                lr: f64::NAN,
                data_s: 0.0,
                step_s: (outcome.ended_ns - outcome.started_ns) as f64 * 1e-9,
                t_start_ns: outcome.started_ns,
                t_end_ns: outcome.ended_ns,
            }),
            output: Some((outcome.stdout_tail, outcome.stderr_tail)),
            items_per_iteration: images_per_step(Some(raw)),
        }
    }

    fn end_abruptly(&self) {
        if let Some(pgid) = command::running_group() {
            let _ = command::signal_group(pgid, libc::SIGKILL);
        }
    }
}

/// The key of a command's outcome and of its trial's metrics: the images of one step, as
/// every step line that says (`images=B`) said; null when none says or they disagree.
pub(crate) const IMAGES_PER_STEP: &str = "images_per_step";

fn images_per_step(outcome: Option<&serde_json::Value>) -> Option<usize> {
    outcome?
        .get(IMAGES_PER_STEP)?
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n > 0)
}

/// [`run`], and the images per step its step lines gave: the one count every line that gives
/// one agrees on; None when none gives one or two disagree.
pub(crate) fn run_counting_images(
    job: &ExecJob,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&IterationRecord) -> Result<Control>,
) -> Result<(CommandOutcome, Option<usize>)> {
    // None: no line said; Some(None): lines disagreed.
    let mut said: Option<Option<usize>> = None;
    let outcome = run_steps(job, stop, &mut |step| {
        if let Some(n) = step.images {
            said = match said {
                None => Some(Some(n)),
                Some(Some(m)) if m == n => Some(Some(m)),
                _ => Some(None),
            };
        }
        emit(&step.record)
    })?;
    Ok((outcome, said.flatten()))
}

fn outcome_of(outcome: Option<&serde_json::Value>) -> Option<CommandOutcome> {
    serde_json::from_value(outcome?.clone()).ok()
}

/// Between SIGTERM and SIGKILL when a command is ended.
pub(crate) const GRACE: Duration = Duration::from_secs(10);

/// One exec trial as the worker receives it: the engine, the expanded command and how to
/// read its log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecJob {
    pub engine: String,
    pub command: Vec<String>,
    pub parser: Option<String>,
    pub timeout_s: Option<f64>,
    /// Gives the epoch of step lines that carry none (images / batch of the sweep point).
    pub steps_per_epoch: Option<usize>,
    /// Between SIGTERM and SIGKILL when the command is ended; shorter than the runner's own
    /// grace for the worker, so the worker still reports how the command ended.
    #[serde(default = "default_grace_s")]
    pub grace_s: f64,
    /// The account the command runs as (`[[exec]] user`); None: the worker's own.
    #[serde(default)]
    pub user: Option<String>,
    /// Whether the command was given the sweep point's epochs and images (through its
    /// placeholders): a trial's `epochs` and `images` are null when it was not.
    #[serde(default)]
    pub given_epochs: bool,
    #[serde(default)]
    pub given_images: bool,
}

fn default_grace_s() -> f64 {
    GRACE.as_secs_f64()
}

impl ExecJob {
    /// The trial's workload parameters (its resume key with the common columns).
    pub fn params(&self) -> ExecParams {
        ExecParams {
            engine: self.engine.clone(),
            command: self.command.clone(),
        }
    }
}

/// The jobs of `entries` over the sweep's points, entry by entry. Everything is checked before
/// anything runs: each entry (name, command, placeholders, parser), engine names unique, and no
/// two points of one entry giving the same command (a device axis the command ignores would
/// measure the same run twice under two labels).
pub(crate) fn expand_sweep(
    entries: &[ExecEntry],
    points: &[SweepValues],
    grace: Duration,
) -> Result<Vec<(SweepValues, ExecJob)>> {
    let mut jobs = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        entry.validate()?;
        if entries[..i].iter().any(|e| e.name == entry.name) {
            bail!(
                "two [[exec]] entries are named '{}': give each engine its own name",
                entry.name
            );
        }
        let mut seen: Vec<(&SweepValues, Vec<String>)> = Vec::new();
        for point in points {
            let command = entry.expand(point)?;
            if let Some((other, _)) = seen.iter().find(|(_, c)| *c == command) {
                bail!(
                    "[[exec]] entry '{}' gives the same command for {} and {}: use the \
                     placeholders ({}) for the axes the sweep varies, or sweep fewer values",
                    entry.name,
                    describe(other),
                    describe(point),
                    command::PLACEHOLDERS
                );
            }
            let steps_per_epoch = (point.batch > 0 && point.images >= point.batch)
                .then(|| point.images / point.batch);
            // A value is given when changing it changes the command ({iterations} too).
            let changes = |change: fn(&mut SweepValues)| -> Result<bool> {
                let mut other = point.clone();
                change(&mut other);
                Ok(entry.expand(&other)? != command)
            };
            let given_epochs = changes(|p| p.epochs += 1)?;
            let given_images = changes(|p| p.images = p.images * 2 + p.batch.max(1))?;
            jobs.push((
                point.clone(),
                ExecJob {
                    engine: entry.name.clone(),
                    command: command.clone(),
                    parser: entry.parser.clone(),
                    timeout_s: entry.timeout.map(|t| t.0.as_secs_f64()),
                    steps_per_epoch,
                    grace_s: grace.as_secs_f64(),
                    user: entry.user.clone(),
                    given_epochs,
                    given_images,
                },
            ));
            seen.push((point, command));
        }
    }
    Ok(jobs)
}

/// The sweep's points in the order trials run (net, device, batch), as the commands'
/// placeholders see them.
pub fn points(config: &Config) -> Vec<SweepValues> {
    let s = &config.sweep;
    let mut points = Vec::new();
    for net in &s.nets {
        for device in &s.devices {
            for &batch in &s.batches {
                points.push(SweepValues {
                    net: net.clone(),
                    batch,
                    device: device.as_str().to_string(),
                    images: s.images,
                    epochs: s.epochs,
                });
            }
        }
    }
    points
}

/// Every exec trial of the config, checked (see [`expand_sweep`]).
pub fn jobs(config: &Config) -> Result<Vec<(SweepValues, ExecJob)>> {
    let section: ExecSection = config.section(KIND.as_str()).map_err(anyhow::Error::msg)?;
    jobs_of(config, &section.0)
}

fn jobs_of(config: &Config, entries: &[ExecEntry]) -> Result<Vec<(SweepValues, ExecJob)>> {
    // Half the runner's stop grace: the worker must see the command end before the runner
    // gives up on the worker.
    let grace = Duration::from_secs_f64(config.sweep.stop_grace_s / 2.0).min(GRACE);
    expand_sweep(entries, &points(config), grace)
}

/// The trials of the exec workload. The resume key is the engine and the expanded command
/// with the sweep point's columns.
pub fn plan(jobs: &[(SweepValues, ExecJob)]) -> Vec<PlannedTrial<ExecJob>> {
    jobs.iter()
        .cloned()
        .map(|(point, job)| {
            let label = format!(
                "{} {}",
                job.engine,
                match (point.net.is_empty(), point.batch) {
                    (true, 0) => point.device.clone(),
                    (true, b) => format!("{} batch {b}", point.device),
                    (false, 0) => format!("{} {}", point.net, point.device),
                    (false, b) => format!("{} {} batch {b}", point.net, point.device),
                }
            );
            PlannedTrial {
                key: TrialKey {
                    workload: KIND,
                    net: point.net.clone(),
                    device: point.device.clone(),
                    batch: point.batch,
                    epochs: point.epochs,
                    images: point.images,
                    dataset: String::new(),
                    params: job.params().canonical_json(),
                },
                label,
                // Unknown: the command decides how many steps it logs.
                iterations: 0,
                items_per_iteration: (point.batch > 0).then_some(point.batch),
                memory_estimate_bytes: 0,
                repetition: 1,
                job,
            }
        })
        .collect()
}

fn describe(p: &SweepValues) -> String {
    format!(
        "net={} batch={} device={} images={} epochs={}",
        p.net, p.batch, p.device, p.images, p.epochs
    )
}

/// Runs the job's command (inside the trial's worker, so its cgroup holds the command and
/// every child), handing each iteration record to `emit` as its line is read. The outcome
/// carries how the command ended and the tails of its output.
pub fn run(
    job: &ExecJob,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&IterationRecord) -> Result<Control>,
) -> Result<CommandOutcome> {
    run_steps(job, stop, &mut |step| emit(&step.record))
}

/// [`run`], handing over each step line's whole record.
fn run_steps(
    job: &ExecJob,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&TrackedStep) -> Result<Control>,
) -> Result<CommandOutcome> {
    let parser = job.parser.as_deref().map(Parser::from_name).transpose()?;
    let timeout = match job.timeout_s {
        Some(t) if !(t.is_finite() && t > 0.0) => {
            bail!("timeout {t} s: give a duration above 0")
        }
        t => t.map(Duration::from_secs_f64),
    };
    if !(job.grace_s.is_finite() && job.grace_s >= 0.0) {
        bail!("grace {} s: give a duration of 0 or more", job.grace_s);
    }
    let spec = CommandSpec {
        argv: job.command.clone(),
        timeout,
        grace: Duration::from_secs_f64(job.grace_s),
        steps_per_epoch: job.steps_per_epoch,
        // The worker's stdout carries its messages to the runner; the console gets both
        // streams through its stderr.
        echo: command::Echo::Stderr,
        run_as: job
            .user
            .as_deref()
            .map(command::RunAs::resolve)
            .transpose()?,
    };
    command::run_command(&spec, parser, stop, emit)
}

pub(crate) use crate::record::steps_covered;

/// Seconds of training in `records` after the first `warmup`: each record's time per
/// iteration times the iterations it stands for.
pub fn total_time_s(records: &[IterationRecord], warmup: usize) -> f64 {
    records
        .iter()
        .zip(steps_covered(records))
        .skip(warmup)
        .map(|(r, n)| r.step_s * n as f64)
        .sum()
}

/// The workload-specific figures of an exec trial for its results row (`exit_code`: null when
/// the command did not exit by itself).
pub(crate) fn extra_metrics(outcome: &CommandOutcome) -> serde_json::Map<String, serde_json::Value> {
    let mut extra = serde_json::Map::new();
    extra.insert("exit_code".into(), outcome.end.exit_code().into());
    extra.insert(
        "wall_time_s".into(),
        ((outcome.ended_ns - outcome.started_ns) as f64 * 1e-9).into(),
    );
    extra
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(device: &str, batch: usize) -> SweepValues {
        SweepValues {
            net: "alexnet".into(),
            batch,
            device: device.into(),
            images: 1024,
            epochs: 10,
        }
    }

    fn entry(name: &str, command: &[&str]) -> ExecEntry {
        ExecEntry {
            name: name.into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            parser: Some("caffe".into()),
            timeout: None,
            user: None,
        }
    }

    /// The Caffe study's sweep (annex A) as one entry: a wrapper script per run.
    #[test]
    fn a_batch_and_device_sweep_expands_per_point() {
        let points = [point("cpu", 1), point("cpu", 16), point("cuda", 16)];
        let caffe = entry("caffe", &["./run_caffe.sh", "{net}", "{device}", "{batch}"]);
        let mut caffe = caffe;
        caffe.timeout = Some(crate::config::Timeout(Duration::from_secs(60)));
        let jobs = expand_sweep(&[caffe], &points, GRACE).unwrap();
        let commands: Vec<String> = jobs.iter().map(|(_, j)| j.command.join(" ")).collect();
        assert_eq!(
            commands,
            [
                "./run_caffe.sh alexnet cpu 1",
                "./run_caffe.sh alexnet cpu 16",
                "./run_caffe.sh alexnet cuda 16"
            ]
        );
        assert_eq!(jobs[1].1.steps_per_epoch, Some(64));
        assert_eq!(jobs[2].1.timeout_s, Some(60.0));
        assert_eq!(
            jobs[0].1.params().canonical_json(),
            r#"{"command":["./run_caffe.sh","alexnet","cpu","1"],"engine":"caffe"}"#
        );
    }

    #[test]
    fn a_sweep_that_would_run_one_command_twice_is_refused() {
        let points = [point("cpu", 16), point("cuda", 16)];
        let err = expand_sweep(&[entry("torch", &["train", "{batch}"])], &points, GRACE)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("'torch' gives the same command")
                && err.contains("device=cpu")
                && err.contains("device=cuda"),
            "{err}"
        );
        let twice = [entry("a", &["x", "{batch}"]), entry("a", &["y", "{batch}"])];
        let err = expand_sweep(&twice, &points[..1], GRACE)
            .unwrap_err()
            .to_string();
        assert!(err.contains("two [[exec]] entries are named 'a'"), "{err}");
    }

    /// config/frameworks.toml is the study's Caffe and TensorFlow sweeps (and PyTorch's) as one
    /// config: every (engine, net, device, batch) a command of its own.
    #[test]
    fn the_frameworks_config_expands_to_the_studys_runs() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/frameworks.toml");
        let config = Config::load(&path).unwrap();
        config.validate("config/frameworks.toml").unwrap();
        let jobs = jobs(&config).unwrap();
        assert_eq!(jobs.len(), 3 * 2 * 2 * 10);
        let (point, caffe) = jobs
            .iter()
            .find(|(p, j)| {
                j.engine == "caffe" && p.net == "googlenet" && p.device == "cuda" && p.batch == 16
            })
            .unwrap();
        assert_eq!(
            caffe.command,
            [
                "bench/study/caffe.sh",
                "googlenet",
                "cuda",
                "16",
                "1024",
                "10"
            ]
        );
        assert_eq!(caffe.steps_per_epoch, Some(1024 / 16));
        assert_eq!(caffe.timeout_s, Some(6.0 * 3600.0));
        assert_eq!(point.epochs, 10);
        // PyTorch trains the same steps as Caffe and TF-Slim at every point.
        for (p, job) in jobs.iter().filter(|(_, j)| j.engine == "pytorch") {
            let steps = (p.images / p.batch * p.epochs).to_string();
            assert_eq!(job.command[4], steps, "{:?}", job.command);
        }
        for (_, job) in &jobs {
            let program = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(&job.command[0]);
            assert!(
                job.command[0] == "python3" || program.is_file(),
                "{:?}",
                job.command
            );
        }
    }

    #[test]
    fn records_that_stand_for_several_steps_count_them() {
        let rec = crate::testkit::rows::iteration;
        let records = [rec(0, 0.5), rec(20, 0.1), rec(40, 0.2)];
        assert_eq!(steps_covered(&records), [1, 20, 20]);
        assert!((total_time_s(&records, 0) - (0.5 + 2.0 + 4.0)).abs() < 1e-9);
        assert!((total_time_s(&records, 1) - (2.0 + 4.0)).abs() < 1e-9);
    }

    #[test]
    fn run_hands_records_over_and_keeps_the_exit_code() {
        let job = ExecJob {
            engine: "script".into(),
            command: vec![
                "sh".into(),
                "-c".into(),
                "echo 'EDGEBENCH step=0 loss=2 time=0.01'; echo 'EDGEBENCH step=1 loss=1 time=0.02'; exit 4"
                    .into(),
            ],
            parser: Some("edgebench".into()),
            timeout_s: Some(30.0),
            steps_per_epoch: None,
            grace_s: 1.0,
            user: None,
            given_epochs: false,
            given_images: false,
        };
        let mut losses = Vec::new();
        let outcome = run(&job, &AtomicBool::new(false), &mut |r| {
            losses.push(r.loss);
            Ok(Control::Continue)
        })
        .unwrap();
        assert_eq!(losses, [2.0, 1.0]);
        assert_eq!(extra_metrics(&outcome)["exit_code"], serde_json::json!(4));
        let bad = ExecJob {
            timeout_s: Some(0.0),
            ..job
        };
        let err = run(&bad, &AtomicBool::new(false), &mut |_| {
            Ok(Control::Continue)
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("timeout 0 s"), "{err}");
    }
}
