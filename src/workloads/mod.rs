//! Workloads: what a trial runs. A trial is (workload, device, parameters); each workload is
//! one folder implementing [`TypedWorkload`] in its own types (its config section, what its
//! plan works from, its job), which [`Workload`] erases once into the contract the sweep, the
//! worker, the runner and the reports rely on:
//!
//! - **plan**: expand the sweep's config into trials, each with its resume key ([`TrialKey`]:
//!   the common columns plus the workload's own parameters as a JSON object) and the memory it
//!   needs (for the preflight and the swap verdict);
//! - **run**: inside the worker process, one [`IterationRecord`] per step through `emit`,
//!   stopping at a step boundary when `stop` is set;
//! - **metrics**: [`Metrics`] from the measured iterations (median and IQR step time, total
//!   time, GFLOP/s where counted, and figures of its own);
//! - **profile** ([`WorkloadProfile`]): its item, whether it records a loss, computes on
//!   the sweep's devices, shows progress, has its process tree watched; its **checks** and
//!   how its rows are **named** (label, engine);
//! - **prepare**: what the sweep checks and measures once before anything is written, handed
//!   to its plan;
//! - with defaults: its options, energy figures, its report, and for a workload whose trials
//!   run a command of their own ([`RunsCommands`]), how the command's end decides the trial.
//!
//! [`Job`] is the envelope the worker receives; the registry below is the one list of
//! workloads, so nothing else (runner, worker, config) names one.

use crate::board::BoardProfile;
use crate::config::{Config, ConfigError};
use crate::host::HostPaths;
use crate::record::{Control, IterationRecord, Metrics, TrialEnd, WorkloadKind};
use crate::stats;
use crate::store::{PerIteration, ResultRow, RowItems, Store, TrialKey, TrialStatus};
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Declares the workload modules and the registry in one list, so a workload is added by one
/// line here and its own folder.
macro_rules! registry {
    ($($module:ident :: $workload:ident,)*) => {
        $(pub mod $module;)*
        /// Every workload, in the order help and errors list them.
        static REGISTRY: &[&dyn Workload] = &[$(&$module::$workload),*];
    };
}

registry! {
    cnn::Cnn,
    exec::Exec,
    mlp::MlpStudy,
    ops::Ops,
    idle::Idle,
    infer::Infer,
}

/// Where a workload's iterations go, one call per step.
pub(crate) type Emit<'a> = &'a mut dyn FnMut(&IterationRecord) -> anyhow::Result<Control>;

/// What is constant about a workload, for the runner and the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadProfile {
    /// What one item of its work is and how its trials count them, for the figures per item.
    pub items: RowItems,
    /// Whether its iterations carry a loss, so a NaN or rising one is an anomaly.
    pub records_loss: bool,
    /// Whether `sweep.devices` are devices this process computes on (checked before the
    /// sweep), rather than names a command gives its own framework.
    pub computes_on_devices: bool,
    /// Whether a progress bar may share the terminal with the trials.
    pub shows_progress: bool,
    /// Whether the runner watches the worker's whole process tree (a command's children), not
    /// only the worker.
    pub watches_tree: bool,
    /// How a user makes its trials measure longer, for the warning about a trial too short
    /// for the power sensor.
    pub longer_trial_advice: &'static str,
}

impl WorkloadProfile {
    /// Items per iteration for energy per item when the plan gave none: a trial that counts a
    /// batch and was planned without one (a command's unknown batch) has none, the others one
    /// per iteration.
    pub(crate) fn items_without_count(&self) -> usize {
        match self.items.per_iteration {
            PerIteration::Batch => 0,
            PerIteration::BatchPerIteration | PerIteration::One => 1,
        }
    }
}

/// How tables and figures name a trial of a workload ([`Workload::names`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RowNames {
    /// A short name, e.g. `alexnet`, `mlp tensors small`, `add f32 32MiB`.
    pub label: String,
    /// The engine that trained the trial's net (`edgebench`, or another framework); None for
    /// a workload that trains no net.
    pub engine: Option<String>,
}

/// A workload in its own types: its config section, what its check and preparation hand to
/// its plan, and its job. What would be wrong for another workload has no default: its name,
/// profile, checks, preparation, plan, run and how its rows are named. [`Workload`] is this
/// trait with the types erased, once, for every workload alike.
pub(crate) trait TypedWorkload: Copy + Send + Sync + 'static {
    /// Its config section (`[idle]`), read once the sweep runs this workload; [`NoSection`]
    /// for a workload without one.
    type Section: Serialize + serde::de::DeserializeOwned + Default;
    /// What [`TypedWorkload::check`] makes of the config, for [`TypedWorkload::prepare`].
    type Checked;
    /// What [`TypedWorkload::prepare`] found, for [`TypedWorkload::plan`].
    type Plan: Send + Sync + 'static;
    /// A trial's job as the worker receives it (one JSON object).
    type Job: Serialize + serde::de::DeserializeOwned;

    /// Its name in `--workload`, the config, the database and JSON.
    const KIND: WorkloadKind;

    /// What is constant about it.
    fn profile(&self) -> WorkloadProfile;

    /// How tables and figures name a trial of it.
    fn names(&self, row: &ResultRow) -> RowNames;

    /// Options `edgebench run` takes for this workload, each written into the workload's config
    /// section under the option's id (`section.key`), e.g. `idle.duration` for `--duration`.
    /// A list option takes `value_delimiter(',')` or `ArgAction::Append`; a number option
    /// declares its `value_parser` (u64, f64, bool), so the section receives a typed value.
    fn options(&self) -> Vec<clap::Arg> {
        Vec::new()
    }

    /// Writes an option's `value` into the section under `key`: into the table, or into every
    /// table of an array section (`[[exec]]`).
    fn set_option(&self, section: &mut toml::Value, key: &str, value: toml::Value) {
        set_key(section, key, value);
    }

    /// The section as `config/edgebench.toml` documents it: its defaults, or an example entry
    /// where the defaults are empty; none for a workload without a section.
    fn documented_section(&self) -> Option<toml::Value> {
        toml::Value::try_from(Self::Section::default()).ok()
    }

    /// Flags it adds to the other commands, each with the action it asks for.
    fn command_actions(&self) -> Vec<CommandAction> {
        Vec::new()
    }

    /// Checks the config and the workload's section before anything is written; the message
    /// names the key and its flag.
    fn check(&self, config: &Config, section: Self::Section) -> Result<Self::Checked, String>;

    /// What the sweep checks and measures once before anything is written (a data set's
    /// identity, roofs) on `board`, the sweep's board profile; an error refuses the sweep.
    fn prepare(
        &self,
        config: &Config,
        checked: Self::Checked,
        host: &HostPaths,
        board: &BoardProfile,
    ) -> anyhow::Result<Preparation<Self::Plan>>;

    /// The sweep's trials, in the order they run, each with its resume key.
    fn plan(&self, input: &PlanInput<'_>, plan: &Self::Plan) -> Vec<PlannedTrial<Self::Job>>;

    /// Runs one trial in the worker process: one record per step through `emit`, stopping at
    /// a step boundary when `stop` is set.
    fn run(&self, job: Self::Job, stop: &AtomicBool, emit: Emit<'_>) -> anyhow::Result<JobEnd>;

    /// Leading iterations of `job` left out of the measurement, given the sweep's `--warmup`.
    fn warmup_iterations(&self, _job: &Self::Job, configured: usize) -> usize {
        configured
    }

    /// The trial's figures from its measured iterations (warm-up excluded).
    fn metrics(&self, _job: &Self::Job, measured: &[IterationRecord]) -> Metrics {
        step_metrics(measured)
    }

    /// Figures that need the trial's energy over its `measured` iterations (J/GFLOP).
    fn energy_metrics(
        &self,
        _job: &Self::Job,
        _measured: usize,
        _energy_j: f64,
    ) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }

    /// Completes the trial's metrics once its iterations and the worker's outcome are known.
    fn complete_metrics(
        &self,
        _job: &Self::Job,
        _outcome: Option<&serde_json::Value>,
        _trial: &Recorded<'_>,
        _metrics: &mut Metrics,
    ) {
    }

    /// Its part of the report (tables, figures, CSV files); none by default, and its trials
    /// still appear in the summary.
    fn report_section(&self) -> Option<Box<dyn crate::render::Section>> {
        None
    }

    /// How its trials run a command outside the worker's own code, for a workload whose do.
    fn commands(&self) -> Option<&dyn RunsCommands<Self::Job>> {
        None
    }
}

/// A workload whose trials run a command of their own (a framework's process group): the
/// command's end decides the trial, and a worker whose parent is gone ends the command.
pub(crate) trait RunsCommands<J>: Sync {
    /// How the worker's own end report (`JobEnd::outcome`) shapes the trial: its status, a
    /// span measured whole, output to keep.
    fn conclude(&self, job: &J, outcome: Option<&serde_json::Value>, oom: bool) -> Conclusion;

    /// Ends at once what the trial started outside the worker, in a worker whose parent is
    /// gone.
    fn end_abruptly(&self);
}

/// The section of a workload that has none: whatever the config holds under its name is
/// left alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NoSection;

/// Not a TOML value: a workload without a section documents and stores none.
impl Serialize for NoSection {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit()
    }
}

impl<'de> Deserialize<'de> for NoSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| NoSection)
    }
}

/// What a workload's preparation found: what its plan needs, and what the run records.
#[derive(Debug, Clone, Default)]
pub(crate) struct Preparation<P> {
    pub(crate) plan: P,
    /// The identity of the data set the sweep draws from, else empty.
    pub(crate) dataset: String,
    /// Facts the run records with its provenance (measured roofs).
    pub(crate) provenance: Vec<(String, String)>,
}

impl<P> Preparation<P> {
    /// A preparation that found only what the plan needs.
    pub(crate) fn of(plan: P) -> Preparation<P> {
        Preparation {
            plan,
            dataset: String::new(),
            provenance: Vec::new(),
        }
    }
}

/// What the sweep, the worker, the runner and the report see of a workload: a
/// [`TypedWorkload`] with its types erased.
pub(crate) trait Workload: Sync {
    /// Its name in `--workload`, the config, the database and JSON.
    fn kind(&self) -> WorkloadKind;

    /// What is constant about it.
    fn profile(&self) -> WorkloadProfile;

    /// How tables and figures name a trial of it.
    fn names(&self, row: &ResultRow) -> RowNames;

    /// Options `edgebench run` takes for this workload.
    fn options(&self) -> Vec<clap::Arg>;

    /// Writes an option's value into the workload's section.
    fn set_option(&self, section: &mut toml::Value, key: &str, value: toml::Value);

    /// Its section as `config/edgebench.toml` documents it.
    fn documented_section(&self) -> Option<toml::Value>;

    /// Flags it adds to the other commands.
    fn command_actions(&self) -> Vec<CommandAction>;

    /// Its section as the sweep reads it, defaults filled in; none for a workload without one.
    fn effective_section(&self, config: &Config) -> Result<Option<toml::Value>, String>;

    /// Checks the config for this workload before anything is written; the message names the
    /// key and its flag.
    fn check(&self, config: &Config) -> Result<(), String>;

    /// What the sweep checks and measures once before anything is written, with what its
    /// plan needs; an error refuses the sweep.
    fn prepare(
        &self,
        config: &Config,
        host: &HostPaths,
        board: &BoardProfile,
    ) -> anyhow::Result<Prepared>;

    /// Runs one trial in the worker process.
    fn run(&self, job: &Job, stop: &AtomicBool, emit: Emit<'_>) -> anyhow::Result<JobEnd>;

    /// Leading iterations of `job` left out of the measurement, given the sweep's `--warmup`.
    fn warmup_iterations(&self, job: &Job, configured: usize) -> usize;

    /// The trial's figures from its measured iterations (warm-up excluded).
    fn metrics(&self, job: &Job, measured: &[IterationRecord]) -> Metrics;

    /// Figures that need the trial's energy over its `measured` iterations (J/GFLOP).
    fn energy_metrics(
        &self,
        job: &Job,
        measured: usize,
        energy_j: f64,
    ) -> serde_json::Map<String, serde_json::Value>;

    /// How the worker's own end report shapes the trial; nothing for a workload whose trials
    /// run no command: the worker's end decides.
    fn conclude(&self, job: &Job, outcome: Option<&serde_json::Value>, oom: bool) -> Conclusion;

    /// Completes the trial's metrics once its iterations and outcome are known.
    fn complete_metrics(
        &self,
        job: &Job,
        outcome: Option<&serde_json::Value>,
        trial: &Recorded<'_>,
        metrics: &mut Metrics,
    );

    /// Its part of the report.
    fn report_section(&self) -> Option<Box<dyn crate::render::Section>>;

    /// Ends at once what the trial started outside the worker.
    fn end_abruptly(&self);
}

impl<W: TypedWorkload> Workload for W {
    fn kind(&self) -> WorkloadKind {
        W::KIND
    }

    fn profile(&self) -> WorkloadProfile {
        TypedWorkload::profile(self)
    }

    fn names(&self, row: &ResultRow) -> RowNames {
        TypedWorkload::names(self, row)
    }

    fn options(&self) -> Vec<clap::Arg> {
        TypedWorkload::options(self)
    }

    fn set_option(&self, section: &mut toml::Value, key: &str, value: toml::Value) {
        TypedWorkload::set_option(self, section, key, value)
    }

    fn documented_section(&self) -> Option<toml::Value> {
        TypedWorkload::documented_section(self)
    }

    fn command_actions(&self) -> Vec<CommandAction> {
        TypedWorkload::command_actions(self)
    }

    fn effective_section(&self, config: &Config) -> Result<Option<toml::Value>, String> {
        let section: W::Section = config.section(W::KIND.as_str())?;
        Ok(toml::Value::try_from(section).ok())
    }

    fn check(&self, config: &Config) -> Result<(), String> {
        checked(self, config).map(|_| ())
    }

    fn prepare(
        &self,
        config: &Config,
        host: &HostPaths,
        board: &BoardProfile,
    ) -> anyhow::Result<Prepared> {
        let checked = checked(self, config).map_err(anyhow::Error::msg)?;
        let preparation = TypedWorkload::prepare(self, config, checked, host, board)?;
        Ok(Prepared::of(*self, preparation))
    }

    fn run(&self, job: &Job, stop: &AtomicBool, emit: Emit<'_>) -> anyhow::Result<JobEnd> {
        TypedWorkload::run(self, job.fields()?, stop, emit)
    }

    fn warmup_iterations(&self, job: &Job, configured: usize) -> usize {
        job.fields().map_or(configured, |job| {
            TypedWorkload::warmup_iterations(self, &job, configured)
        })
    }

    fn metrics(&self, job: &Job, measured: &[IterationRecord]) -> Metrics {
        match job.fields() {
            Ok(job) => TypedWorkload::metrics(self, &job, measured),
            Err(_) => step_metrics(measured),
        }
    }

    fn energy_metrics(
        &self,
        job: &Job,
        measured: usize,
        energy_j: f64,
    ) -> serde_json::Map<String, serde_json::Value> {
        match job.fields() {
            Ok(job) => TypedWorkload::energy_metrics(self, &job, measured, energy_j),
            Err(_) => serde_json::Map::new(),
        }
    }

    fn conclude(&self, job: &Job, outcome: Option<&serde_json::Value>, oom: bool) -> Conclusion {
        match (self.commands(), job.fields()) {
            (Some(commands), Ok(job)) => commands.conclude(&job, outcome, oom),
            _ => Conclusion::default(),
        }
    }

    fn complete_metrics(
        &self,
        job: &Job,
        outcome: Option<&serde_json::Value>,
        trial: &Recorded<'_>,
        metrics: &mut Metrics,
    ) {
        if let Ok(job) = job.fields() {
            TypedWorkload::complete_metrics(self, &job, outcome, trial, metrics);
        }
    }

    fn report_section(&self) -> Option<Box<dyn crate::render::Section>> {
        TypedWorkload::report_section(self)
    }

    fn end_abruptly(&self) {
        if let Some(commands) = self.commands() {
            commands.end_abruptly();
        }
    }
}

/// The workload's section read from the config and checked with the rest of the config.
fn checked<W: TypedWorkload>(workload: &W, config: &Config) -> Result<W::Checked, String> {
    let section = config.section(W::KIND.as_str())?;
    workload.check(config, section)
}

/// A workload's plan as its preparation left it, for the sweep's planning.
pub(crate) trait PreparedPlan: Send + Sync {
    /// The sweep's trials, their jobs in the worker's JSON.
    fn trials(&self, input: &PlanInput<'_>) -> Vec<PlannedTrial>;
}

struct TypedPlan<W: TypedWorkload> {
    workload: W,
    plan: W::Plan,
}

impl<W: TypedWorkload> PreparedPlan for TypedPlan<W> {
    fn trials(&self, input: &PlanInput<'_>) -> Vec<PlannedTrial> {
        self.workload
            .plan(input, &self.plan)
            .into_iter()
            .map(|trial| trial.erased(W::KIND))
            .collect()
    }
}

/// A trial's job as the worker receives it: the workload's name and its own fields, one JSON
/// object (`{"workload":"cnn",...}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub workload: WorkloadKind,
    #[serde(flatten)]
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl Job {
    /// The envelope of a workload's own job type.
    pub fn of<T: Serialize>(workload: WorkloadKind, job: &T) -> Job {
        match serde_json::to_value(job) {
            Ok(serde_json::Value::Object(fields)) => Job { workload, fields },
            _ => panic!("a workload's job serialises to a JSON object"),
        }
    }

    /// The workload's own job type back from the envelope.
    pub fn fields<T: serde::de::DeserializeOwned>(&self) -> anyhow::Result<T> {
        serde_json::from_value(serde_json::Value::Object(self.fields.clone()))
            .map_err(|e| anyhow::anyhow!("bad {} job: {e}", self.workload))
    }

    /// The workload that runs this job.
    pub(crate) fn workload(&self) -> anyhow::Result<&'static dyn Workload> {
        by_kind(&self.workload).map_err(anyhow::Error::msg)
    }

    /// Runs the trial in this (worker) process.
    pub fn run(&self, stop: &AtomicBool, emit: Emit<'_>) -> anyhow::Result<JobEnd> {
        self.workload()?.run(self, stop, emit)
    }
}

/// How a job's run ended, as the worker reports it, with the workload's own account of it
/// (a command's end and the tails of its output).
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnd {
    pub end: TrialEnd,
    pub outcome: Option<serde_json::Value>,
}

impl From<TrialEnd> for JobEnd {
    fn from(end: TrialEnd) -> JobEnd {
        JobEnd { end, outcome: None }
    }
}

/// What a workload decides about a trial from its outcome ([`Workload::conclude`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Conclusion {
    /// The status and error, where the workload decides them (how a command ended).
    pub status: Option<(TrialStatus, Option<String>)>,
    /// The trial as one span from start to end, for one that recorded no iteration.
    pub whole: Option<IterationRecord>,
    /// Tails of the trial's standard output and error, kept with the trial.
    pub output: Option<(String, String)>,
    /// Items per iteration the trial's own records gave (a command's step lines), which
    /// count before the plan's.
    pub items_per_iteration: Option<usize>,
}

/// A trial's records as the runner holds them when it completes the metrics.
pub(crate) struct Recorded<'a> {
    pub iterations: &'a [IterationRecord],
    /// Leading iterations outside the measurement.
    pub warmup: usize,
    pub measured: &'a [IterationRecord],
    pub whole: Option<&'a IterationRecord>,
}

/// A trial as planned: its identity, its job (a workload's own type, then the worker's
/// envelope), and what the runner needs before it starts.
#[derive(Debug, Clone)]
pub struct PlannedTrial<J = Job> {
    pub key: TrialKey,
    pub job: J,
    /// How logs and progress name the trial, e.g. "alexnet cpu batch 32".
    pub label: String,
    /// Steps the trial plans to record.
    pub iterations: usize,
    /// Items (images, samples) per step, for time and energy per image; None where an item
    /// means nothing.
    pub items_per_iteration: Option<usize>,
    /// Predicted peak memory of the worker.
    pub memory_estimate_bytes: u64,
    /// Which run of its key this is, from 1: the workloads plan 1, the sweep's plan the
    /// others (`[sweep] repeat`).
    pub repetition: usize,
}

impl<J: Serialize> PlannedTrial<J> {
    /// The trial with its job in the envelope the worker receives.
    fn erased(self, workload: WorkloadKind) -> PlannedTrial {
        PlannedTrial {
            key: self.key,
            job: Job::of(workload, &self.job),
            label: self.label,
            iterations: self.iterations,
            items_per_iteration: self.items_per_iteration,
            memory_estimate_bytes: self.memory_estimate_bytes,
            repetition: self.repetition,
        }
    }
}

/// What planning needs beside the config: what [`Workload::prepare`] found.
#[derive(Clone)]
pub struct PlanInput<'a> {
    pub config: &'a Config,
    pub host: &'a HostPaths,
    pub prepared: &'a Prepared,
}

impl PlanInput<'_> {
    /// The identity of the data set the sweep draws from, else empty.
    pub fn dataset(&self) -> &str {
        &self.prepared.dataset
    }
}

/// What a workload checks and measures before anything is written; an error here refuses
/// the sweep (exit 2).
#[derive(Clone, Default)]
pub struct Prepared {
    /// The identity of the data set the sweep draws from, else empty.
    pub dataset: String,
    /// Facts the run records with its provenance (measured roofs).
    pub provenance: Vec<(String, String)>,
    /// The workload's plan with what its preparation found (the roofs its trials are judged
    /// against); none: the sweep plans no trial.
    pub(crate) plan: Option<Arc<dyn PreparedPlan>>,
    /// How often the sweep's power sensor gives a new reading (the slowest source of the
    /// total, or the sampling period when that is slower); None without `--power`. A workload
    /// that chooses its own trial length measures at least enough readings.
    pub power_reading_period: Option<std::time::Duration>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("dataset", &self.dataset)
            .field("provenance", &self.provenance)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// What `workload` prepared, ready to plan.
    pub(crate) fn of<W: TypedWorkload>(workload: W, preparation: Preparation<W::Plan>) -> Prepared {
        Prepared {
            dataset: preparation.dataset,
            provenance: preparation.provenance,
            plan: Some(Arc::new(TypedPlan {
                workload,
                plan: preparation.plan,
            })),
            power_reading_period: None,
        }
    }

    pub(crate) fn plan_input<'a>(
        &'a self,
        config: &'a Config,
        host: &'a HostPaths,
    ) -> PlanInput<'a> {
        PlanInput {
            config,
            host,
            prepared: self,
        }
    }

    /// Facts the run records with its provenance (the measured roofs).
    pub(crate) fn provenance_items(&self) -> Vec<(String, String)> {
        self.provenance.clone()
    }
}

/// Every workload's name, in registry order.
pub fn names() -> Vec<String> {
    REGISTRY.iter().map(|w| w.kind().to_string()).collect()
}

/// The workload of that name.
pub(crate) fn by_kind(kind: &WorkloadKind) -> Result<&'static dyn Workload, String> {
    REGISTRY
        .iter()
        .copied()
        .find(|w| w.kind() == *kind)
        .ok_or_else(|| {
            format!(
                "unknown workload '{kind}' (known: {})",
                REGISTRY
                    .iter()
                    .map(|w| w.kind().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// `--workload NAME`: a registered workload's name.
pub fn parse_kind(name: &str) -> Result<WorkloadKind, String> {
    by_kind(&WorkloadKind::from(name.trim())).map(|w| w.kind())
}

/// Every workload's options for `edgebench run`.
pub fn options() -> Vec<clap::Arg> {
    REGISTRY.iter().flat_map(|w| w.options()).collect()
}

/// Flags a workload adds to another command, and what they ask for instead of that command's
/// own work: `models --export-onnx DIR [--seed N]` writes the networks as ONNX files.
pub struct CommandAction {
    /// The command that takes the flags (`models`).
    pub command: &'static str,
    /// Its flags; the first one given on the command line asks for [`CommandAction::run`].
    pub args: Vec<clap::Arg>,
    /// The action, given the command's matches.
    pub run: fn(&clap::ArgMatches) -> anyhow::Result<()>,
}

impl CommandAction {
    /// Whether `matches` (the command's) ask for this action.
    pub fn asked(&self, matches: &clap::ArgMatches) -> bool {
        self.args.first().is_some_and(|arg| {
            matches.value_source(arg.get_id().as_str())
                == Some(clap::parser::ValueSource::CommandLine)
        })
    }
}

/// Every workload's flags on the other commands.
pub fn command_actions() -> Vec<CommandAction> {
    REGISTRY.iter().flat_map(|w| w.command_actions()).collect()
}

/// A value given on the command line to a workload's option, typed as the option declared it.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionValue {
    pub section: String,
    pub key: String,
    pub value: toml::Value,
}

/// The values given to the workloads' options (from the command line only: an option's
/// default is its section's).
pub fn option_values(matches: &clap::ArgMatches) -> Vec<OptionValue> {
    options()
        .iter()
        .filter_map(|arg| {
            let id = arg.get_id().as_str();
            let (section, key) = id.split_once('.')?;
            let values = typed_values(matches, id)?;
            let list = arg.get_value_delimiter().is_some()
                || matches!(arg.get_action(), clap::ArgAction::Append);
            let value = match (list, values.len()) {
                (false, 1) => values.into_iter().next()?,
                _ => toml::Value::Array(values),
            };
            Some(OptionValue {
                section: section.to_string(),
                key: key.to_string(),
                value,
            })
        })
        .collect()
}

/// An option's values in the type its value parser gave them; none when not given.
fn typed_values(matches: &clap::ArgMatches, id: &str) -> Option<Vec<toml::Value>> {
    if matches.value_source(id) != Some(clap::parser::ValueSource::CommandLine) {
        return None;
    }
    fn all<T: Clone + Send + Sync + 'static>(
        matches: &clap::ArgMatches,
        id: &str,
        to: impl Fn(T) -> toml::Value,
    ) -> Option<Vec<toml::Value>> {
        let values = matches.try_get_many::<T>(id).ok()??;
        Some(values.cloned().map(to).collect())
    }
    all::<String>(matches, id, toml::Value::String)
        .or_else(|| {
            all::<u64>(matches, id, |v| {
                toml::Value::Integer(v.min(i64::MAX as u64) as i64)
            })
        })
        .or_else(|| all::<f64>(matches, id, toml::Value::Float))
        .or_else(|| all::<bool>(matches, id, toml::Value::Boolean))
}

/// `key = value` in a table section, or in every table of an array section.
fn set_key(section: &mut toml::Value, key: &str, value: toml::Value) {
    match section {
        toml::Value::Table(table) => {
            table.insert(key.to_string(), value);
        }
        toml::Value::Array(entries) => {
            for entry in entries {
                set_key(entry, key, value.clone());
            }
        }
        // Neither a table nor entries: left as written, for its workload's check to refuse.
        _ => {}
    }
}

/// Writes the options' values into their workloads' sections.
pub fn apply_options(config: &mut Config, values: &[OptionValue]) {
    for option in values {
        let Ok(workload) = by_kind(&WorkloadKind::from(option.section.as_str())) else {
            continue;
        };
        let section = config
            .sections
            .entry(option.section.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        workload.set_option(section, &option.key, option.value.clone());
    }
}

/// `flags` given to `edgebench run` as the workloads' options, applied to `config`.
#[cfg(test)]
pub(crate) fn apply_flags(config: &mut Config, flags: &[&str]) {
    let matches = clap::Command::new("run")
        .args(options())
        .try_get_matches_from(std::iter::once("run").chain(flags.iter().copied()))
        .unwrap_or_else(|e| panic!("{flags:?}: {e}"));
    apply_options(config, &option_values(&matches));
}

/// The config as a run stores it: the sweep's workload's section with its defaults filled in,
/// so the stored TOML says every value the trials ran with.
pub(crate) fn effective_config(config: &Config) -> Config {
    let mut effective = config.clone();
    if let Ok(workload) = by_kind(&config.sweep.workload) {
        if let Ok(Some(section)) = workload.effective_section(config) {
            effective
                .sections
                .insert(workload.kind().to_string(), section);
        }
    }
    effective
}

/// Every workload's section as `config/edgebench.toml` documents it, by workload name.
pub fn documented_sections() -> Vec<(String, toml::Value)> {
    REGISTRY
        .iter()
        .filter_map(|w| Some((w.kind().to_string(), w.documented_section()?)))
        .collect()
}

/// The sweep's workload, known, and its part of the config checked; config sections that no
/// workload reads are refused. `origin` names where the config came from.
pub fn check_config(config: &Config, origin: &str) -> Result<(), ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        origin: origin.to_string(),
        message,
    };
    config.validate(origin)?;
    let workload = by_kind(&config.sweep.workload).map_err(invalid)?;
    if let Some(section) = config
        .sections
        .keys()
        .find(|name| by_kind(&WorkloadKind::from(name.as_str())).is_err())
    {
        return Err(invalid(format!(
            "unknown section [{section}] (a workload's section is named after it: {})",
            names().join(", ")
        )));
    }
    workload.check(config).map_err(invalid)
}

/// Opens the data set, checks the operators, measures the roofs: whatever the sweep's workload
/// needs before anything is written.
pub fn prepare(
    config: &Config,
    host: &HostPaths,
    board: &BoardProfile,
) -> anyhow::Result<Prepared> {
    by_kind(&config.sweep.workload)
        .map_err(anyhow::Error::msg)?
        .prepare(config, host, board)
}

/// Every trial of the sweep's workload, in the order it runs them.
pub fn plan(input: &PlanInput<'_>) -> Vec<PlannedTrial> {
    input
        .prepared
        .plan
        .as_ref()
        .map_or_else(Vec::new, |plan| plan.trials(input))
}

/// The workloads' report sections, in registry order.
pub(crate) fn report_sections() -> Vec<Box<dyn crate::render::Section>> {
    REGISTRY.iter().filter_map(|w| w.report_section()).collect()
}

/// A worker whose parent is gone: every workload ends what it started outside the worker.
pub(crate) fn end_abruptly() {
    for workload in REGISTRY {
        workload.end_abruptly();
    }
}

/// Rows as the store holds them completed with what their workloads say: the item and the
/// figures per item, the label and the engine. A row of a workload this build does not know
/// keeps its net as its label and no item; a row already described is left as it is.
pub fn describe(rows: &mut [ResultRow]) {
    for row in rows.iter_mut().filter(|r| r.item.is_none()) {
        match by_kind(&row.workload) {
            Ok(workload) => {
                row.derive_per_item(workload.profile().items);
                let names = workload.names(row);
                row.label = names.label;
                row.engine = names.engine;
            }
            Err(_) => row.label = row.net.clone(),
        }
    }
}

/// Every trial of the store, described ([`describe`]).
pub fn results(store: &Store) -> crate::store::Result<Vec<ResultRow>> {
    let mut rows = store.results()?;
    describe(&mut rows);
    Ok(rows)
}

/// The profile of the workload of that name, if this build knows it.
pub fn profile(kind: &WorkloadKind) -> Option<WorkloadProfile> {
    by_kind(kind).ok().map(|w| w.profile())
}

/// The [`Workload::check`] of the workloads that train over the sweep's image data set (and
/// of those that read its nets and batches alike): the sweep's nets are CNN models and its batches divide
/// its images into at most [`crate::config::MAX_ITERATIONS`] iterations.
pub(crate) fn check_image_sweep(config: &Config) -> Result<(), String> {
    use crate::config::{MAX_BATCH, MAX_ITERATIONS};
    let s = &config.sweep;
    for net in &s.nets {
        if crate::models::by_name(net).is_none() {
            return Err(format!(
                "sweep.nets: unknown network '{net}' (known: {})",
                crate::models::names().join(", ")
            ));
        }
    }
    for &b in &s.batches {
        if b == 0 || b > s.images || b > MAX_BATCH {
            return Err(format!(
                "sweep.batches (--batch): batch {b} does not fit sweep.images (--images) = {} \
                 (a trial runs (images / batch) * epochs iterations); use batches between 1 \
                 and images, at most {MAX_BATCH}",
                s.images
            ));
        }
        let iterations = (s.images / b)
            .checked_mul(s.epochs)
            .filter(|&n| n <= MAX_ITERATIONS);
        if iterations.is_none() {
            return Err(format!(
                "a trial of batch {b} would run (images {} / batch {b}) * epochs {} \
                 iterations, more than the {MAX_ITERATIONS} one trial may plan; lower \
                 sweep.epochs (--epochs) or sweep.images (--images)",
                s.images, s.epochs
            ));
        }
    }
    Ok(())
}

/// The timing every workload shares: median and IQR step time, and their total.
pub(crate) fn step_metrics(measured: &[IterationRecord]) -> Metrics {
    let step_s: Vec<f64> = measured.iter().map(|r| r.step_s).collect();
    let (median, iqr) = stats::median_iqr(&step_s).unzip();
    Metrics {
        time_per_iteration_s: median,
        time_per_iteration_spread_s: iqr,
        total_time_s: (!step_s.is_empty()).then(|| step_s.iter().sum()),
        gflop_per_s: None,
        extra: serde_json::Map::new(),
    }
}

/// A workload's parameters as the canonical JSON object text of the resume key: keys sorted,
/// so the same parameters always make the same key.
pub(crate) fn params_text<T: Serialize>(params: &T) -> String {
    match serde_json::to_value(params) {
        Ok(serde_json::Value::Object(map)) => {
            let sorted: std::collections::BTreeMap<_, _> = map.into_iter().collect();
            serde_json::to_string(&sorted).expect("a JSON object serialises")
        }
        _ => "{}".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Overrides, MAX_ITERATIONS, MAX_THREADS};
    use std::path::Path;

    /// `config/edgebench.toml` is the built-in defaults written out: its shared sections equal
    /// `Config::default()`, each workload section it sets equals that workload's defaults.
    #[test]
    fn shipped_default_config_equals_builtin_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(crate::config::DEFAULT_CONFIG_PATH);
        let mut shipped = Config::load(&path).unwrap();
        assert!(
            !shipped.sections.is_empty(),
            "the file sets [mlp] and [ops]"
        );
        for name in shipped.sections.keys() {
            let workload = by_kind(&WorkloadKind::from(name.as_str())).unwrap();
            assert_eq!(
                workload.effective_section(&shipped).unwrap(),
                workload.effective_section(&Config::default()).unwrap(),
                "[{name}]"
            );
        }
        shipped.sections.clear();
        assert_eq!(shipped, Config::default());
    }

    /// Each option lands in its workload's section as the type the section reads: lists,
    /// integers, numbers and text; `--mb` replaces an op's own sizes, and an option of an
    /// array section reaches every entry.
    #[test]
    fn options_reach_their_sections_typed() {
        let command = clap::Command::new("run").args(options());
        let matches = command
            .try_get_matches_from([
                "run",
                "--style",
                "tensors,function",
                "--iterations",
                "7",
                "--mb",
                "1,2.5",
                "--op",
                "add",
                "--duration",
                "5s",
            ])
            .unwrap();
        let values = option_values(&matches);
        assert_eq!(values.len(), 5, "{values:?}");
        let mut c = Config::from_toml(
            "[ops]\nmb = [4.0]\n[ops.mb_per_op]\ndot = [5.0]\n",
            Path::new("c.toml"),
        )
        .unwrap();
        apply_options(&mut c, &values);
        let mlp: mlp::MlpConfig = c.section("mlp").unwrap();
        assert_eq!(mlp.styles, ["tensors", "function"]);
        assert_eq!(mlp.iterations, 7);
        assert_eq!(mlp.sizes, mlp::MlpConfig::default().sizes);
        let ops: ops::OpsConfig = c.section("ops").unwrap();
        assert_eq!((ops.ops, ops.mb), (vec!["add".to_string()], vec![1.0, 2.5]));
        assert!(ops.mb_per_op.is_empty(), "{:?}", ops.mb_per_op);
        let idle: idle::IdleConfig = c.section("idle").unwrap();
        assert_eq!(idle.duration.0, std::time::Duration::from_secs(5));
        // A bad number is refused by the option's parser, naming the flag.
        let err = clap::Command::new("run")
            .args(options())
            .try_get_matches_from(["run", "--iterations", "many"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--iterations"), "{err}");

        let mut entries = toml::Value::try_from(exec::ExecSection(vec![
            exec::ExecEntry {
                name: "a".into(),
                command: vec!["a".into()],
                parser: None,
                timeout: None,
                user: None,
            };
            2
        ]))
        .unwrap();
        set_key(&mut entries, "timeout", toml::Value::String("5m".into()));
        let entries: exec::ExecSection = entries.try_into().unwrap();
        assert!(entries
            .0
            .iter()
            .all(|e| e.timeout.map(|t| t.0.as_secs()) == Some(300)));
    }

    /// A run stores its workload's section with every default filled in, and the stored TOML
    /// reads back as the same config.
    #[test]
    fn the_stored_config_says_the_workloads_values() {
        let mut c = Config::default();
        c.sweep.workload = mlp::KIND;
        let stored = effective_config(&c);
        let mlp: mlp::MlpConfig = stored.section("mlp").unwrap();
        assert_eq!(mlp, mlp::MlpConfig::default());
        assert!(stored.to_toml().contains("[mlp]"), "{}", stored.to_toml());
        assert_eq!(
            Config::from_toml(&stored.to_toml(), Path::new("stored")).unwrap(),
            stored
        );
        // A workload without a section stores none.
        c.sweep.workload = cnn::KIND;
        assert!(effective_config(&c).sections.is_empty());
    }

    #[test]
    fn overrides_and_validation() {
        let mut c = Config::from_toml("[sweep]\nimages = 8\n", Path::new("c.toml")).unwrap();
        assert_eq!(c.sweep.epochs, 1); // unspecified keys keep their defaults
        c.apply(&Overrides {
            batches: Some(vec![1, 16]),
            ..Default::default()
        });
        let err = check_config(&c, "c.toml").unwrap_err().to_string();
        assert!(err.contains("batch 16") && err.contains("c.toml"), "{err}");
        c.apply(&Overrides {
            batches: Some(vec![2]),
            nets: Some(vec!["vgg".into()]),
            ..Default::default()
        });
        let err = check_config(&c, "x").unwrap_err();
        assert!(err.to_string().contains("vgg"));
    }

    #[test]
    fn iteration_bound_is_checked_without_overflow() {
        let mut c = Config::default();
        c.sweep.batches = vec![2];
        c.sweep.images = 20;
        c.sweep.epochs = MAX_ITERATIONS / 10;
        check_config(&c, "x")
            .map(|_| ())
            .unwrap_or_else(|e| panic!("{e}"));
        c.sweep.epochs += 1;
        let err = check_config(&c, "x").err().unwrap().to_string();
        assert!(
            err.contains("--epochs") && err.contains("10000000"),
            "{err}"
        );
        // (images / batch) * epochs wraps to a small number in unchecked u64 arithmetic.
        c.sweep.images = 16;
        c.sweep.epochs = usize::MAX / 4 + 1;
        assert!(check_config(&c, "x").is_err());
        c.sweep.epochs = 1;
        c.train.threads = MAX_THREADS;
        check_config(&c, "x")
            .map(|_| ())
            .unwrap_or_else(|e| panic!("{e}"));
        c.train.threads = MAX_THREADS + 1;
        assert!(c
            .validate("x")
            .err()
            .unwrap()
            .to_string()
            .contains("--threads"));
    }

    #[test]
    fn params_text_is_sorted_whatever_the_field_order() {
        #[derive(Serialize)]
        struct P {
            size: &'static str,
            style: &'static str,
            d_in: usize,
        }
        let text = params_text(&P {
            size: "small",
            style: "tensors",
            d_in: 3,
        });
        assert_eq!(text, r#"{"d_in":3,"size":"small","style":"tensors"}"#);
        assert_eq!(params_text(&()), "{}");
    }

    #[test]
    fn step_metrics_are_median_iqr_and_total() {
        let rec = crate::record::test_records::iteration;
        let m = step_metrics(&[rec(0, 1.0), rec(1, 3.0), rec(2, 2.0), rec(3, 10.0)]);
        assert_eq!(m.time_per_iteration_s, Some(2.5));
        assert_eq!(m.total_time_s, Some(16.0));
        assert!(m.time_per_iteration_spread_s.unwrap() > 0.0);
        assert_eq!(step_metrics(&[]), Metrics::default());
    }
}
