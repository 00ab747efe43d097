//! The inference workload (`run --workload infer`, `[infer]`): how fast and at what energy the
//! board answers queries of a model, in the scenarios MLPerf Inference defines for the edge
//! (its rules, "Scenarios and Metrics"):
//!
//! - `single-stream`: one query of one sample at a time, each issued when the last returns;
//! - `offline`: all samples available at once, run at the sweep's batch sizes back to back;
//! - `server`: single-sample queries arriving as a Poisson process at `--qps`, answered in
//!   arrival order; a query's latency runs from its arrival to its answer, and the run says
//!   whether the 99th percentile held `--latency-bound`.
//!
//! Every query is one row of the iterations table (`t_start_ns`/`t_end_ns` on the monotonic
//! clock: issue, or arrival for `server`, to answer), so every percentile can be recomputed from
//! the database. A trial runs until it has `--min-queries` measured queries (samples, for
//! `offline`) and `--min-duration` of them, after the sweep's warm-up queries. Its energy is
//! measured over exactly the window of its measured queries, the same one its throughput uses.

pub(crate) mod engine;
pub(crate) mod export;
pub(crate) mod report;

use super::{
    Emit, JobEnd, PlanInput, PlannedTrial, Preparation, RowNames, TypedWorkload, WorkloadProfile,
};
use crate::clock::monotonic_ns;
use crate::config::{Config, DeviceKind, Timeout, MAX_BATCH, MAX_ITERATIONS};
use crate::host::HostPaths;
use crate::record::{Control, IterationRecord, Metrics, TrialEnd, WorkItem, WorkloadKind};
use crate::store::{PerIteration, ResultRow, RowItems, TrialKey};
use anyhow::Context as _;
use engine::{Loaded, ModelRef};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub const KIND: WorkloadKind = WorkloadKind::named("infer");

/// The longest `--min-duration` one trial may ask for.
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// The highest `--qps` accepted.
const MAX_QPS: f64 = 1e6;

/// The scenarios, as MLPerf Inference names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    SingleStream,
    Offline,
    Server,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [Scenario::SingleStream, Scenario::Offline, Scenario::Server];

    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::SingleStream => "single-stream",
            Scenario::Offline => "offline",
            Scenario::Server => "server",
        }
    }

    fn parse(text: &str) -> Result<Scenario, String> {
        let t = text.trim().to_ascii_lowercase().replace('_', "-");
        Scenario::ALL
            .into_iter()
            .find(|s| s.as_str() == t)
            .ok_or_else(|| {
                format!(
                    "infer.scenario (--scenario): unknown scenario '{}' (known: single-stream, \
                     offline, server)",
                    text.trim()
                )
            })
    }
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value or a list: a config file writes `model = ["a.onnx", "b.onnx"]`, the command line
/// `--model a.onnx --model b.onnx` (or `a.onnx,b.onnx`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Words {
    One(String),
    Many(Vec<String>),
}

impl Words {
    fn list(&self) -> Vec<String> {
        let items: Vec<&str> = match self {
            Words::One(text) => text.split(',').collect(),
            Words::Many(items) => items.iter().map(String::as_str).collect(),
        };
        items
            .into_iter()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// A number from the config file (`min_queries = 64`) or the command line (text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Number {
    Int(i64),
    Float(f64),
    Text(String),
}

impl Number {
    fn value(&self, key: &str) -> Result<f64, String> {
        match self {
            Number::Int(v) => Ok(*v as f64),
            Number::Float(v) => Ok(*v),
            Number::Text(t) => t
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("{key}: '{t}' is not a number")),
        }
    }
}

/// A switch from the config file (`find_qps = true`) or the command line (text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Switch {
    Bool(bool),
    Text(String),
}

impl Switch {
    fn value(&self, key: &str) -> Result<bool, String> {
        match self {
            Switch::Bool(b) => Ok(*b),
            Switch::Text(t) => match t.trim() {
                "true" | "yes" | "1" => Ok(true),
                "false" | "no" | "0" => Ok(false),
                other => Err(format!("{key}: '{other}' is not true or false")),
            },
        }
    }
}

/// `[infer]` of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct InferConfig {
    /// Models: `alexnet`, `googlenet` or ONNX files (`--model`); none: the sweep's nets.
    pub model: Option<Words>,
    /// `single-stream`, `offline`, `server` (`--scenario`).
    pub scenario: Words,
    /// Measured queries (samples, offline) a trial runs at least (`--min-queries`).
    pub min_queries: Number,
    /// How long the measured queries run at least (`--min-duration`).
    pub min_duration: Timeout,
    /// Server: the queries' arrival rate, per second (`--qps`).
    pub qps: Option<Number>,
    /// Server: the bound the 99th-percentile latency must hold (`--latency-bound`).
    pub latency_bound: Timeout,
    /// Server: search the highest rate that holds the bound (`--find-qps`).
    pub find_qps: Switch,
}

impl Default for InferConfig {
    fn default() -> Self {
        InferConfig {
            model: None,
            scenario: Words::One(Scenario::SingleStream.as_str().into()),
            min_queries: Number::Int(1024),
            min_duration: Timeout(Duration::from_secs(60)),
            qps: None,
            latency_bound: Timeout(Duration::from_millis(50)),
            find_qps: Switch::Bool(false),
        }
    }
}

/// `[infer]` checked and in typed values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InferSweep {
    pub models: Vec<ModelRef>,
    pub scenarios: Vec<Scenario>,
    pub min_queries: usize,
    pub min_duration: Duration,
    pub qps: Option<f64>,
    pub latency_bound: Duration,
    pub find_qps: bool,
}

impl InferSweep {
    #[cfg(test)]
    pub(crate) fn of(config: &Config) -> Result<InferSweep, String> {
        InferSweep::checked(config, config.section("infer")?)
    }

    /// The `[infer]` section `c` checked with the sweep of `config`.
    fn checked(config: &Config, c: InferConfig) -> Result<InferSweep, String> {
        let names = match &c.model {
            Some(words) => words.list(),
            None => config.sweep.nets.clone(),
        };
        if names.is_empty() {
            return Err("infer.model (--model) names no model; give alexnet, googlenet or an \
                        ONNX file"
                .into());
        }
        let mut models: Vec<ModelRef> = Vec::new();
        for model in names.iter().map(|n| expand(n)).collect::<Result<Vec<_>, _>>()?.into_iter().flatten() {
            if let Some(other) = models.iter().find(|m| m.name() == model.name()) {
                if *other == model {
                    continue;
                }
                return Err(format!(
                    "infer.model (--model): two models named '{}' (results name an ONNX model by \
                     its file stem); rename one file",
                    model.name()
                ));
            }
            models.push(model);
        }
        let mut scenarios = Vec::new();
        for s in c.scenario.list() {
            let s = Scenario::parse(&s)?;
            if !scenarios.contains(&s) {
                scenarios.push(s);
            }
        }
        if scenarios.is_empty() {
            return Err("infer.scenario (--scenario) names no scenario".into());
        }
        let min_queries = c.min_queries.value("infer.min_queries (--min-queries)")?;
        if !(min_queries >= 1.0 && min_queries <= MAX_ITERATIONS as f64)
            || min_queries.fract() != 0.0
        {
            return Err(format!(
                "infer.min_queries (--min-queries) = {min_queries} is out of range; use a whole \
                 number from 1 to {MAX_ITERATIONS}"
            ));
        }
        let min_duration = c.min_duration.0;
        if min_duration > MAX_DURATION {
            return Err("infer.min_duration (--min-duration) is out of range; use at most 24h".into());
        }
        let qps = match &c.qps {
            None => None,
            Some(n) => {
                let q = n.value("infer.qps (--qps)")?;
                if !(q > 0.0 && q <= MAX_QPS) {
                    return Err(format!(
                        "infer.qps (--qps) = {q} is out of range; use a rate above 0 and at most \
                         {MAX_QPS} queries per second"
                    ));
                }
                Some(q)
            }
        };
        let find_qps = c.find_qps.value("infer.find_qps (--find-qps)")?;
        if scenarios.contains(&Scenario::Server) && qps.is_none() && !find_qps {
            return Err("the server scenario needs a rate: give infer.qps (--qps), or \
                        infer.find_qps (--find-qps) to search the highest rate that holds \
                        --latency-bound"
                .into());
        }
        for &b in &config.sweep.batches {
            if b == 0 || b > MAX_BATCH {
                return Err(format!(
                    "sweep.batches (--batch): batch {b} is out of range; use 1 to {MAX_BATCH}"
                ));
            }
        }
        if models.iter().any(|m| matches!(m, ModelRef::Onnx { .. }))
            && !config.sweep.devices.contains(&DeviceKind::Cpu)
        {
            return Err("sweep.devices (--device): the ONNX engine (tract-onnx) computes on the \
                        CPU only; add cpu to run ONNX models (edgebench's own alexnet and \
                        googlenet run on cuda too)"
                .into());
        }
        Ok(InferSweep {
            models,
            scenarios,
            min_queries: min_queries as usize,
            min_duration,
            qps,
            latency_bound: c.latency_bound.0,
            find_qps,
        })
    }
}

/// The most ONNX files one folder may give.
const MAX_FOLDER_MODELS: usize = 256;

/// A model name, an ONNX file, or a folder: every `.onnx` file in it, by name.
fn expand(name: &str) -> Result<Vec<ModelRef>, String> {
    let path = std::path::Path::new(name.trim());
    if !path.is_dir() {
        return ModelRef::parse(name).map(|m| vec![m]);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| format!("infer.model (--model): cannot list {}: {e}", path.display()))?;
    let mut files: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx")))
        .collect();
    if files.len() > MAX_FOLDER_MODELS {
        return Err(format!(
            "infer.model (--model): {} holds {} ONNX files, more than the {MAX_FOLDER_MODELS} \
             one sweep takes from a folder",
            path.display(),
            files.len()
        ));
    }
    files.sort();
    files
        .iter()
        .map(|f| ModelRef::parse(&f.to_string_lossy()))
        .collect()
}

/// One trial as the worker receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InferJob {
    pub model: ModelRef,
    pub device: DeviceKind,
    pub scenario: Scenario,
    /// Samples per query.
    pub batch: usize,
    pub seed: u64,
    /// Leading queries outside the measurement (the runner's warm-up).
    pub warmup: usize,
    pub min_queries: usize,
    pub min_duration_s: f64,
    /// Server: the arrival rate, per second.
    pub qps: Option<f64>,
    /// Server: the 99th-percentile bound, seconds.
    pub latency_bound_s: f64,
    /// Server: search the highest rate that holds the bound instead of running at `qps`.
    #[serde(default)]
    pub find_qps: bool,
}

impl InferJob {
    /// The trial key's `params`.
    fn params(&self) -> String {
        let mut p = serde_json::json!({
            "scenario": self.scenario.as_str(),
            "min_queries": self.min_queries,
            "min_duration_s": self.min_duration_s,
        });
        if let ModelRef::Onnx { path, .. } = &self.model {
            p["model_path"] = path.display().to_string().into();
        }
        if self.scenario == Scenario::Server {
            p["find_qps"] = self.find_qps.into();
            p["qps"] = match self.find_qps {
                true => serde_json::Value::Null,
                false => self.qps.into(),
            };
            p["latency_bound_s"] = self.latency_bound_s.into();
        }
        super::params_text(&p)
    }

    /// Measured samples the trial needs at least.
    fn enough(&self, measured_queries: usize, measured_ns: i64) -> bool {
        let samples = match self.scenario {
            Scenario::Offline => measured_queries * self.batch,
            _ => measured_queries,
        };
        samples >= self.min_queries && measured_ns as f64 * 1e-9 >= self.min_duration_s
    }
}

/// The checked `[infer]` section, and what `prepare` learnt of the ONNX files: the batch each
/// fixes, if any.
#[derive(Debug)]
pub(crate) struct InferPrepared {
    sweep: InferSweep,
    fixed_batch: BTreeMap<String, Option<usize>>,
}

/// The inference workload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Infer;

impl TypedWorkload for Infer {
    type Section = InferConfig;
    type Checked = InferSweep;
    type Plan = InferPrepared;
    type Job = InferJob;
    const KIND: WorkloadKind = KIND;

    fn report_section(&self) -> Option<Box<dyn crate::render::Section>> {
        Some(Box::new(report::Infer))
    }

    fn options(&self) -> Vec<clap::Arg> {
        use clap::{Arg, ArgAction};
        vec![
            Arg::new("infer.model")
                .long("model")
                .value_name("MODEL")
                .action(ArgAction::Append)
                .value_delimiter(',')
                .help("infer: alexnet, googlenet or an ONNX file (repeat for several; default: --net)"),
            Arg::new("infer.scenario")
                .long("scenario")
                .value_name("SCENARIO")
                .help("infer: single-stream, offline or server, comma-separated (default single-stream)"),
            Arg::new("infer.min_queries")
                .long("min-queries")
                .value_name("N")
                .help("infer: measured queries (offline: samples) a trial runs at least (default 1024)"),
            Arg::new("infer.min_duration")
                .long("min-duration")
                .value_name("DURATION")
                .help("infer: how long the measured queries run at least (default 60s)"),
            Arg::new("infer.qps")
                .long("qps")
                .value_name("RATE")
                .help("infer server: queries per second arriving as a Poisson process"),
            Arg::new("infer.latency_bound")
                .long("latency-bound")
                .value_name("DURATION")
                .help("infer server: the bound p99 latency must hold (default 50ms)"),
            Arg::new("infer.find_qps")
                .long("find-qps")
                .num_args(0..=1)
                .default_missing_value("true")
                .value_name("BOOL")
                .help("infer server: search the highest rate whose p99 holds --latency-bound"),
        ]
    }

    /// `models --export-onnx DIR [--seed N]`: the networks as the ONNX files it reads.
    fn command_actions(&self) -> Vec<crate::workloads::CommandAction> {
        use clap::{value_parser, Arg};
        vec![crate::workloads::CommandAction {
            command: "models",
            args: vec![
                Arg::new("export_onnx")
                    .long("export-onnx")
                    .value_name("DIR")
                    .value_parser(value_parser!(std::path::PathBuf))
                    .help(
                        "Write the networks (inference graph, seeded weights) and a residual \
                         block as ONNX files into DIR instead: alexnet.onnx, googlenet.onnx, \
                         residual.onnx",
                    ),
                Arg::new("seed")
                    .long("seed")
                    .value_name("SEED")
                    .value_parser(value_parser!(u64))
                    .default_value("0")
                    .requires("export_onnx")
                    .help("The seed the exported weights are drawn from (with --export-onnx)"),
            ],
            run: |matches| {
                let dir = matches
                    .get_one::<std::path::PathBuf>("export_onnx")
                    .context("--export-onnx needs a directory")?;
                let seed = matches.get_one::<u64>("seed").copied().unwrap_or(0);
                for path in export::export_all(dir, seed)? {
                    println!("{}", path.display());
                }
                Ok(())
            },
        }]
    }

    fn check(&self, config: &Config, section: InferConfig) -> Result<InferSweep, String> {
        InferSweep::checked(config, section)
    }

    /// A query holds its batch of samples, counted like a CNN's images.
    fn profile(&self) -> WorkloadProfile {
        WorkloadProfile {
            items: RowItems {
                item: WorkItem::Sample,
                per_iteration: PerIteration::Batch,
                over_dataset: false,
            },
            records_loss: false,
            computes_on_devices: true,
            shows_progress: true,
            watches_tree: false,
            longer_trial_advice: "more measured queries (--min-queries) or a longer minimum \
                                  (--min-duration)",
        }
    }

    /// Its model.
    fn names(&self, row: &ResultRow) -> RowNames {
        RowNames {
            label: row.net.clone(),
            engine: None,
        }
    }

    /// Reads and checks every ONNX file and builds its graph once, so an unsupported operator
    /// or a bad file refuses the sweep before anything is written.
    fn prepare(
        &self,
        config: &Config,
        sweep: InferSweep,
        _host: &HostPaths,
        _board: &crate::board::BoardProfile,
    ) -> anyhow::Result<Preparation<InferPrepared>> {
        let mut fixed_batch = BTreeMap::new();
        for model in &sweep.models {
            if let ModelRef::Onnx { name, path } = model {
                let file = engine::read_onnx(path)?;
                let batch = file.fixed_batch();
                engine::build_onnx(&file, batch.unwrap_or(1), config.train.seed)
                    .with_context(|| format!("ONNX model {}", path.display()))?;
                fixed_batch.insert(name.clone(), batch);
            }
        }
        Ok(Preparation::of(InferPrepared { sweep, fixed_batch }))
    }

    fn plan(&self, input: &PlanInput<'_>, prepared: &InferPrepared) -> Vec<PlannedTrial<InferJob>> {
        let config = input.config;
        let sweep = &prepared.sweep;
        let mut trials = Vec::new();
        for model in &sweep.models {
            let fixed_batch = prepared
                .fixed_batch
                .get(model.name())
                .copied()
                .flatten();
            // The ONNX engine computes on the CPU only.
            let devices = config
                .sweep
                .devices
                .iter()
                .filter(|&&d| d == DeviceKind::Cpu || matches!(model, ModelRef::Own { .. }));
            for &device in devices {
                for &scenario in &sweep.scenarios {
                    let mut batches: Vec<usize> = match (fixed_batch, scenario) {
                        (Some(b), _) => vec![b],
                        (None, Scenario::Offline) => config.sweep.batches.clone(),
                        (None, _) => vec![1],
                    };
                    batches.dedup();
                    for batch in batches {
                        let job = InferJob {
                            model: model.clone(),
                            device,
                            scenario,
                            batch,
                            seed: config.train.seed,
                            warmup: config.sweep.warmup_iterations,
                            min_queries: sweep.min_queries,
                            min_duration_s: sweep.min_duration.as_secs_f64(),
                            qps: sweep.qps,
                            latency_bound_s: sweep.latency_bound.as_secs_f64(),
                            find_qps: sweep.find_qps && scenario == Scenario::Server,
                        };
                        trials.push(planned(job));
                    }
                }
            }
        }
        trials
    }

    fn run(&self, job: InferJob, stop: &AtomicBool, emit: Emit<'_>) -> anyhow::Result<JobEnd> {
        run(&job, stop, emit)
    }

    fn metrics(&self, job: &InferJob, measured: &[IterationRecord]) -> Metrics {
        metrics(job, measured)
    }

    /// `--find-qps`: the figures are those of the probe at the rate found (the highest that
    /// held the bound), with the search's probes.
    fn complete_metrics(
        &self,
        job: &InferJob,
        outcome: Option<&serde_json::Value>,
        trial: &super::Recorded<'_>,
        metrics: &mut Metrics,
    ) {
        let Some(outcome) = outcome else {
            return;
        };
        if !job.find_qps {
            return;
        }
        let probes: Vec<Probe> = outcome
            .get("probes")
            .and_then(|p| serde_json::from_value(p.clone()).ok())
            .unwrap_or_default();
        let found = probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.held)
            .max_by(|a, b| a.1.qps.total_cmp(&b.1.qps));
        let extra = match found {
            Some((i, probe)) => {
                let at_found: Vec<IterationRecord> = trial
                    .iterations
                    .iter()
                    .filter(|r| r.epoch == i + 1)
                    .copied()
                    .collect();
                let job = InferJob {
                    qps: Some(probe.qps),
                    ..job.clone()
                };
                self::metrics(&job, &at_found).extra
            }
            None => serde_json::Map::from_iter([(
                "latency_bound_held".to_string(),
                false.into(),
            )]),
        };
        metrics.extra.extend(extra);
        metrics
            .extra
            .insert("found_qps".into(), found.map(|(_, p)| p.qps).into());
        metrics.extra.insert(
            "probes".into(),
            serde_json::to_value(&probes).unwrap_or_default(),
        );
    }

    fn energy_metrics(
        &self,
        job: &InferJob,
        measured: usize,
        energy_j: f64,
    ) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        let inferences = measured * job.batch;
        if inferences > 0 {
            m.insert(
                "energy_per_inference_j".into(),
                (energy_j / inferences as f64).into(),
            );
        }
        m
    }
}

/// A job as a planned trial.
fn planned(job: InferJob) -> PlannedTrial<InferJob> {
    let min_queries = match job.scenario {
        Scenario::Offline => job.min_queries.div_ceil(job.batch),
        _ => job.min_queries,
    };
    let memory = match &job.model {
        ModelRef::Own { net } => crate::models::by_name(net)
            .map(|spec| crate::memory::estimate::inference_estimate(spec, job.batch).total_bytes)
            .unwrap_or(0),
        // The weights read, their optimised copy and the activations: about three times the
        // file, plus the runtime.
        ModelRef::Onnx { path, .. } => std::fs::metadata(path)
            .map(|m| m.len().saturating_mul(3))
            .unwrap_or(0)
            .saturating_add(64 << 20),
    };
    PlannedTrial {
        key: TrialKey {
            workload: KIND,
            net: job.model.name().to_string(),
            device: job.device.as_str().into(),
            batch: job.batch,
            epochs: 1,
            images: 0,
            dataset: format!("random:seed={}", job.seed),
            params: job.params(),
        },
        label: format!(
            "infer {} {} {} batch {}",
            job.model.name(),
            job.device.as_str(),
            job.scenario,
            job.batch
        ),
        iterations: job.warmup + min_queries,
        items_per_iteration: Some(job.batch),
        memory_estimate_bytes: memory,
        repetition: 1,
        job,
    }
}

/// Runs one trial: queries until enough are measured, one record per query; with
/// `--find-qps`, the search's probes one after another.
pub fn run(job: &InferJob, stop: &AtomicBool, emit: Emit<'_>) -> anyhow::Result<JobEnd> {
    let label = format!("{} {}", job.model.name(), job.scenario);
    let loaded = Loaded::load(&job.model, job.device, job.batch, job.seed)
        .with_context(|| format!("{label}: loading the model"))?;
    let mut queries = Queries {
        job,
        loaded: &loaded,
        label: &label,
        stop,
        emit,
        step: 0,
    };
    if job.scenario == Scenario::Server && job.find_qps {
        return find_qps(&mut queries);
    }
    let phase = Phase {
        epoch: 0,
        warmup: job.warmup,
        qps: (job.scenario == Scenario::Server)
            .then(|| job.qps.context("the server scenario needs --qps"))
            .transpose()?,
    };
    Ok(match queries.phase(&phase)? {
        Some(_) => TrialEnd::Completed.into(),
        None => TrialEnd::Stopped.into(),
    })
}

/// One stretch of queries: its epoch in the records, its warm-up, its arrival rate (server).
struct Phase {
    epoch: usize,
    warmup: usize,
    qps: Option<f64>,
}

/// The queries of a trial as they are issued, numbered across its phases.
struct Queries<'a, 'e> {
    job: &'a InferJob,
    loaded: &'a Loaded,
    label: &'a str,
    stop: &'a AtomicBool,
    emit: Emit<'e>,
    step: usize,
}

impl Queries<'_, '_> {
    /// Runs `phase` until enough queries are measured; their latencies (seconds), or None on a
    /// stop.
    fn phase(&mut self, phase: &Phase) -> anyhow::Result<Option<Vec<f64>>> {
        let mut pending = Vec::new();
        let measured = self.queries(phase, &mut pending);
        // Whatever ended the phase, the queries it answered are reported.
        let stopped = self.flush(&mut pending)? == Control::Stop;
        match measured? {
            Some(_) if stopped => Ok(None),
            latencies => Ok(latencies),
        }
    }

    /// Hands the pending records to the runner: between two queries only now and then, so
    /// that the time between queries is the harness's loop, not the recording of each one
    /// (energy and time share the window from the first query's start to the last one's end).
    fn flush(&mut self, pending: &mut Vec<IterationRecord>) -> anyhow::Result<Control> {
        let mut control = Control::Continue;
        for record in pending.drain(..) {
            if (self.emit)(&record)? == Control::Stop {
                control = Control::Stop;
            }
        }
        Ok(control)
    }

    /// The queries of `phase`, their records left in `pending` between flushes.
    fn queries(
        &mut self,
        phase: &Phase,
        pending: &mut Vec<IterationRecord>,
    ) -> anyhow::Result<Option<Vec<f64>>> {
        let job = self.job;
        let mut flushed_at = monotonic_ns();
        // Server arrivals: exponential gaps at the rate, from their own seeded stream.
        let mut arrivals = match phase.qps {
            Some(qps) => Some((
                StdRng::seed_from_u64(job.seed ^ 0x5e1e_c7ed ^ phase.epoch as u64),
                Exp::new(qps).map_err(|e| anyhow::anyhow!("--qps {qps}: {e}"))?,
            )),
            None => None,
        };
        let mut next_arrival = monotonic_ns();
        let mut latencies = Vec::new();
        let mut measured_from: Option<i64> = None;
        for k in 0..MAX_ITERATIONS {
            if self.stop.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let issued = match &arrivals {
                Some(_) => {
                    wait_until(next_arrival, self.stop);
                    if self.stop.load(Ordering::SeqCst) {
                        return Ok(None);
                    }
                    next_arrival
                }
                None => monotonic_ns(),
            };
            let started = monotonic_ns();
            self.loaded
                .query()
                .with_context(|| format!("{}: query {}", self.label, self.step))?;
            let answered = monotonic_ns();
            let record = IterationRecord {
                step: self.step,
                epoch: phase.epoch,
                loss: f64::NAN,
                lr: f64::NAN,
                // Server: how long the query waited for the one before it.
                data_s: (started - issued).max(0) as f64 * 1e-9,
                step_s: (answered - issued) as f64 * 1e-9,
                t_start_ns: issued,
                t_end_ns: answered,
            };
            self.step += 1;
            pending.push(record);
            if pending.len() >= FLUSH_QUERIES || answered - flushed_at >= FLUSH_NS {
                if self.flush(pending)? == Control::Stop {
                    return Ok(None);
                }
                flushed_at = monotonic_ns();
            }
            if let Some((rng, gap)) = arrivals.as_mut() {
                next_arrival += (gap.sample(rng) * 1e9) as i64;
            }
            if k >= phase.warmup {
                latencies.push((answered - issued) as f64 * 1e-9);
                let from = *measured_from.get_or_insert(issued);
                if job.enough(latencies.len(), answered - from) {
                    break;
                }
            }
        }
        Ok(Some(latencies))
    }
}

/// Queries answered, or nanoseconds passed, before their records go to the runner.
const FLUSH_QUERIES: usize = 256;
const FLUSH_NS: i64 = 1_000_000_000;

/// Probes `--find-qps` runs at most, the first measuring the service time.
pub(crate) const MAX_PROBES: usize = 8;

/// One probe of the search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub qps: f64,
    pub latency_p99_s: f64,
    pub held: bool,
}

/// `--find-qps`: bisection of the arrival rate between 0 and the rate one query at a time
/// sustains (measured first, single-stream), each probe a server run of `--min-queries` and
/// `--min-duration` at the middle rate; the highest rate whose p99 held the bound is the result.
/// Every probe's queries are stored, epoch = the probe's number (0: the service-time run).
fn find_qps(queries: &mut Queries<'_, '_>) -> anyhow::Result<JobEnd> {
    let job = queries.job;
    let stopped = || Ok(JobEnd::from(TrialEnd::Stopped));
    let Some(service) = queries.phase(&Phase {
        epoch: 0,
        warmup: job.warmup,
        qps: None,
    })?
    else {
        return stopped();
    };
    let mean = service.iter().sum::<f64>() / service.len().max(1) as f64;
    let (mut lo, mut hi) = (0.0f64, 1.0 / mean.max(1e-9));
    let mut probes = Vec::new();
    for epoch in 1..MAX_PROBES {
        let qps = (lo + hi) / 2.0;
        let Some(lat) = queries.phase(&Phase {
            epoch,
            warmup: 0,
            qps: Some(qps),
        })?
        else {
            return stopped();
        };
        let p99 = latencies(&lat).map_or(f64::INFINITY, |l| l.p99);
        let held = p99 <= job.latency_bound_s;
        probes.push(Probe {
            qps,
            latency_p99_s: p99,
            held,
        });
        match held {
            true => lo = qps,
            false => hi = qps,
        }
    }
    let found = probes
        .iter()
        .filter(|p| p.held)
        .map(|p| p.qps)
        .fold(None, |best: Option<f64>, q| Some(best.map_or(q, |b| b.max(q))));
    Ok(JobEnd {
        end: TrialEnd::Completed,
        outcome: Some(serde_json::json!({
            "service_time_s": mean,
            "probes": probes,
            "found_qps": found,
        })),
    })
}

/// Sleeps until the monotonic clock reaches `at_ns` (or a stop): coarse sleeps, then the last
/// stretch by yielding, so an arrival is issued within microseconds of its time.
fn wait_until(at_ns: i64, stop: &AtomicBool) {
    loop {
        let left = at_ns - monotonic_ns();
        if left <= 0 || stop.load(Ordering::Relaxed) {
            return;
        }
        if left > 2_000_000 {
            std::thread::sleep(Duration::from_nanos((left - 1_000_000).min(20_000_000) as u64));
        } else {
            std::thread::yield_now();
        }
    }
}

/// Latency figures of the measured queries, seconds: p50, p90, p99 (the project's quantile,
/// linear between order statistics), max and mean.
pub(crate) struct Latencies {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

pub(crate) fn latencies(step_s: &[f64]) -> Option<Latencies> {
    if step_s.is_empty() {
        return None;
    }
    let mut sorted = step_s.to_vec();
    sorted.sort_by(f64::total_cmp);
    let q = |p| crate::stats::quantile_sorted(&sorted, p);
    Some(Latencies {
        p50: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
        max: sorted[sorted.len() - 1],
        mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
    })
}

/// The trial's figures: latency percentiles of its measured queries, and samples per second
/// over their window (first measured issue to last answer, the window its energy covers).
pub fn metrics(job: &InferJob, measured: &[IterationRecord]) -> Metrics {
    let mut m = super::step_metrics(measured);
    let step_s: Vec<f64> = measured.iter().map(|r| r.step_s).collect();
    let lat = latencies(&step_s);
    let window_s = match (measured.first(), measured.last()) {
        (Some(a), Some(b)) if b.t_end_ns > a.t_start_ns => {
            Some((b.t_end_ns - a.t_start_ns) as f64 * 1e-9)
        }
        _ => None,
    };
    let samples = (measured.len() * job.batch) as f64;
    let e = &mut m.extra;
    e.insert("scenario".into(), job.scenario.as_str().into());
    e.insert("model".into(), job.model.name().into());
    e.insert("queries".into(), measured.len().into());
    e.insert("latency_p50_s".into(), lat.as_ref().map(|l| l.p50).into());
    e.insert("latency_p90_s".into(), lat.as_ref().map(|l| l.p90).into());
    e.insert("latency_p99_s".into(), lat.as_ref().map(|l| l.p99).into());
    e.insert("latency_max_s".into(), lat.as_ref().map(|l| l.max).into());
    e.insert("latency_mean_s".into(), lat.as_ref().map(|l| l.mean).into());
    e.insert("window_s".into(), window_s.into());
    e.insert(
        "samples_per_s".into(),
        window_s.map(|w| samples / w).into(),
    );
    // Filled from the trial's energy when power is measured.
    e.insert("energy_per_inference_j".into(), serde_json::Value::Null);
    if job.scenario == Scenario::Server {
        e.insert("qps".into(), job.qps.into());
        e.insert(
            "qps_achieved".into(),
            window_s.map(|w| measured.len() as f64 / w).into(),
        );
        e.insert("latency_bound_s".into(), job.latency_bound_s.into());
        e.insert(
            "latency_bound_held".into(),
            lat.as_ref().map(|l| l.p99 <= job.latency_bound_s).into(),
        );
    }
    m
}

#[cfg(test)]
mod tests;
