//! Workloads: what a trial runs. A trial is (workload, device, parameters); each workload is a
//! small contract the sweep, the worker, the samplers, the store and the reports rely on:
//!
//! - **plan**: expand the sweep's config into trials, each with its resume key ([`TrialKey`]:
//!   the common columns plus the workload's own parameters as a JSON object);
//! - **estimate**: the memory a trial needs, for the preflight and the swap verdict;
//! - **run**: inside the worker process, one [`IterationRecord`] per step through `emit`,
//!   stopping at a step boundary when `stop` is set;
//! - **summarise**: [`Metrics`] from the measured iterations (median and IQR step time, total
//!   time, GFLOP/s where counted, and figures of its own).
//!
//! The workloads: the CNN training ([`cnn`]), the MLP study ([`mlp`]), operator
//! micro-benchmarks ([`ops`]) and any framework's command ([`exec`]).

pub mod cnn;
pub mod exec;
pub mod mlp;
pub mod ops;

use crate::config::{Config, WorkloadKind};
use crate::record::{Control, IterationRecord, Metrics, TrialEnd};
use crate::stats;
use crate::store::TrialKey;
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;

/// One trial's job: what the worker process runs, sent to it as one JSON line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "workload", rename_all = "snake_case")]
pub enum Job {
    Cnn(cnn::CnnJob),
    Mlp(mlp::MlpJob),
    Ops(ops::OpsJob),
    Exec(exec::ExecJob),
}

/// How a job's run ended, as the worker reports it: the exec workload adds how its command
/// ended and the tails of its output.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnd {
    pub end: TrialEnd,
    pub command: Option<exec::command::CommandOutcome>,
}

impl From<TrialEnd> for JobEnd {
    fn from(end: TrialEnd) -> JobEnd {
        JobEnd { end, command: None }
    }
}

/// A trial as planned: its identity, its job, and what the runner needs before it starts.
#[derive(Debug, Clone)]
pub struct PlannedTrial {
    pub key: TrialKey,
    pub job: Job,
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

/// What planning needs beside the config: what [`prepare`] found.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    pub config: &'a Config,
    /// The identity of the data set the sweep draws from (CNN), else empty.
    pub dataset: &'a str,
    /// The roofs operators are judged against (ops), measured once per sweep.
    pub peaks: Option<&'a ops::peaks::PeaksReport>,
}

/// What a workload checks and measures before anything is written; an error here refuses
/// the sweep (exit 2).
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    pub dataset: String,
    pub peaks: Option<ops::peaks::PeaksReport>,
}

impl Prepared {
    pub fn plan_input<'a>(&'a self, config: &'a Config) -> PlanInput<'a> {
        PlanInput {
            config,
            dataset: &self.dataset,
            peaks: self.peaks.as_ref(),
        }
    }

    /// Facts the run records with its provenance (the measured roofs).
    pub fn provenance_items(&self) -> Vec<(String, String)> {
        self.peaks
            .as_ref()
            .map(|p| p.provenance_items())
            .unwrap_or_default()
    }
}

/// Opens the data set (CNN), or checks the operators and sizes and measures the peaks (ops).
pub fn prepare(config: &Config, host: &crate::host::HostPaths) -> anyhow::Result<Prepared> {
    Ok(match config.sweep.workload {
        WorkloadKind::Cnn => Prepared {
            dataset: cnn::DataSpec::of(config)
                .open(config.sweep.images)?
                .identity(),
            peaks: None,
        },
        WorkloadKind::Mlp => {
            mlp::jobs(config).map_err(anyhow::Error::msg)?;
            Prepared::default()
        }
        WorkloadKind::Exec => {
            exec::jobs(config)?;
            Prepared::default()
        }
        WorkloadKind::Ops => {
            let jobs = ops::jobs(config)?;
            // f64 ops are judged against a DGEMM; f32 sweeps skip measuring it.
            let dgemm = jobs.iter().any(|j| j.dtype == ops::Dtype::F64);
            tracing::info!("measuring the peaks (GEMM, STREAM) the operators are judged against");
            Prepared {
                dataset: String::new(),
                peaks: Some(ops::peaks::report(
                    host,
                    &config.sweep.devices,
                    config.train.threads,
                    dgemm,
                )?),
            }
        }
    })
}

/// Every trial of the sweep's workload, in the order it runs them.
pub fn plan(input: &PlanInput<'_>) -> Vec<PlannedTrial> {
    match input.config.sweep.workload {
        WorkloadKind::Cnn => cnn::plan(input),
        WorkloadKind::Mlp => mlp::plan(input),
        WorkloadKind::Ops => ops::plan(input),
        WorkloadKind::Exec => exec::plan(input),
    }
}

impl Job {
    /// Runs the trial in this (worker) process.
    pub fn run(
        &self,
        stop: &AtomicBool,
        emit: &mut dyn FnMut(&IterationRecord) -> anyhow::Result<Control>,
    ) -> anyhow::Result<JobEnd> {
        match self {
            Job::Cnn(job) => cnn::run(job, stop, emit).map(JobEnd::from),
            Job::Mlp(job) => mlp::run(job, stop, emit).map(JobEnd::from),
            Job::Ops(job) => ops::run(job, stop, emit).map(JobEnd::from),
            Job::Exec(job) => {
                let outcome = exec::run(job, stop, emit)?;
                Ok(JobEnd {
                    end: match outcome.end {
                        exec::command::CommandEnd::Interrupted => TrialEnd::Stopped,
                        _ => TrialEnd::Completed,
                    },
                    command: Some(outcome),
                })
            }
        }
    }

    /// Figures that need the trial's energy over its `measured` iterations (ops: J/GFLOP,
    /// J/GB); empty for the others.
    pub fn energy_metrics(
        &self,
        measured: usize,
        energy_j: f64,
    ) -> serde_json::Map<String, serde_json::Value> {
        match self {
            Job::Ops(job) => ops::energy_metrics(job, measured, energy_j),
            _ => serde_json::Map::new(),
        }
    }

    /// The workload's metrics from the measured iterations (warm-up excluded).
    pub fn metrics(&self, measured: &[IterationRecord]) -> Metrics {
        match self {
            Job::Cnn(_) => step_metrics(measured),
            Job::Mlp(job) => mlp::metrics(job, measured),
            Job::Ops(job) => ops::metrics(job, measured),
            // The runner adds the total: a record may stand for several logged steps, counted
            // from the record before it (see `exec::total_time_s`).
            Job::Exec(_) => step_metrics(measured),
        }
    }
}

/// The timing every workload shares: median and IQR step time, and their total.
pub fn step_metrics(measured: &[IterationRecord]) -> Metrics {
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
pub fn params_text<T: Serialize>(params: &T) -> String {
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
        let rec = |step: usize, step_s: f64| IterationRecord {
            step,
            epoch: 0,
            loss: 1.0,
            lr: 0.1,
            data_s: 0.0,
            step_s,
            t_start_ns: 0,
            t_end_ns: 0,
        };
        let m = step_metrics(&[rec(0, 1.0), rec(1, 3.0), rec(2, 2.0), rec(3, 10.0)]);
        assert_eq!(m.time_per_iteration_s, Some(2.5));
        assert_eq!(m.total_time_s, Some(16.0));
        assert!(m.time_per_iteration_spread_s.unwrap() > 0.0);
        assert_eq!(step_metrics(&[]), Metrics::default());
    }
}
