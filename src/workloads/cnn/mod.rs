//! The CNN training workload: BVLC AlexNet or GoogLeNet trained with SGD on the synthetic set or
//! an image folder, swept over (net, device, batch) in the studies' order. Its parameters are
//! the common trial columns, so its `params` object is empty, except `{"tf32":true}` for a CUDA
//! trial with TF32 tensor cores (`train.tf32`).

pub(crate) mod report;

use super::{
    check_image_sweep, Emit, JobEnd, NoSection, PlanInput, PlannedTrial, Preparation, RowNames,
    TypedWorkload, WorkloadProfile,
};
use crate::host::HostPaths;
use crate::config::{Config, DeviceKind};
use crate::memory::estimate;
use crate::models;
use crate::record::{Control, IterationRecord, TrialEnd, WorkItem, WorkloadKind};
use crate::render::select::OWN;
use crate::store::{PerIteration, ResultRow, RowItems, TrialKey};
use crate::train::{self, data::Dataset, TrialSpec};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

pub const KIND: WorkloadKind = WorkloadKind::named("cnn");

/// Train AlexNet/GoogLeNet over (net, device, batch).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cnn;

impl TypedWorkload for Cnn {
    type Section = NoSection;
    type Checked = ();
    type Plan = ();
    type Job = CnnJob;
    const KIND: WorkloadKind = KIND;

    fn report_section(&self) -> Option<Box<dyn crate::render::Section>> {
        Some(Box::new(report::Cnn))
    }

    fn profile(&self) -> WorkloadProfile {
        WorkloadProfile {
            items: RowItems {
                item: WorkItem::Image,
                per_iteration: PerIteration::Batch,
                over_dataset: true,
            },
            records_loss: true,
            computes_on_devices: true,
            shows_progress: true,
            watches_tree: false,
            longer_trial_advice: "more images (--images) or epochs (--epochs)",
        }
    }

    /// Its net, trained by edgebench itself.
    fn names(&self, row: &ResultRow) -> RowNames {
        RowNames {
            label: row.net.clone(),
            engine: Some(OWN.to_string()),
        }
    }

    fn check(&self, config: &Config, _section: NoSection) -> Result<(), String> {
        check_image_sweep(config)
    }

    fn prepare(
        &self,
        config: &Config,
        _checked: (),
        _host: &HostPaths,
        _board: &crate::board::BoardProfile,
    ) -> anyhow::Result<Preparation<()>> {
        Ok(Preparation {
            dataset: DataSpec::of(config).open(config.sweep.images)?.identity(),
            ..Preparation::default()
        })
    }

    fn plan(&self, input: &PlanInput<'_>, _plan: &()) -> Vec<PlannedTrial<CnnJob>> {
        plan(input)
    }

    fn run(&self, job: CnnJob, stop: &AtomicBool, emit: Emit<'_>) -> anyhow::Result<JobEnd> {
        run(&job, stop, emit).map(JobEnd::from)
    }
}

/// Where the worker takes its images from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataSpec {
    Synthetic { seed: u64, classes: usize },
    Folder { dir: PathBuf },
}

impl DataSpec {
    pub fn of(config: &Config) -> DataSpec {
        match &config.data.dataset {
            Some(dir) => DataSpec::Folder { dir: dir.clone() },
            None => DataSpec::Synthetic {
                seed: config.data.synthetic_seed,
                classes: config.data.synthetic_classes,
            },
        }
    }

    pub fn open(&self, images: usize) -> anyhow::Result<Dataset> {
        Ok(match self {
            DataSpec::Synthetic { seed, classes } => Dataset::synthetic(*seed, *classes, images),
            DataSpec::Folder { dir } => Dataset::folder(dir, images)?,
        })
    }
}

/// One (net, device, batch) training trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CnnJob {
    pub net: String,
    pub device: DeviceKind,
    pub batch: usize,
    pub epochs: usize,
    pub images: usize,
    pub seed: u64,
    pub data: DataSpec,
    /// TF32 tensor cores on CUDA (`train.tf32`); always false on the CPU.
    #[serde(default)]
    pub tf32: bool,
}

impl CnnJob {
    fn spec(&self) -> anyhow::Result<TrialSpec> {
        Ok(TrialSpec {
            net: models::by_name(&self.net)
                .ok_or_else(|| anyhow::anyhow!("unknown network {}", self.net))?,
            device: self.device,
            batch: self.batch,
            epochs: self.epochs,
            images: self.images,
            seed: self.seed,
        })
    }
}

pub fn key(job: &CnnJob, dataset: &str) -> TrialKey {
    TrialKey {
        workload: KIND,
        net: job.net.clone(),
        device: job.device.as_str().to_string(),
        batch: job.batch,
        epochs: job.epochs,
        images: job.images,
        dataset: dataset.to_string(),
        // Only a TF32 trial has a parameter: strict fp32 trials keep the key they always had.
        params: if job.tf32 {
            r#"{"tf32":true}"#.into()
        } else {
            "{}".into()
        },
    }
}

/// Every (net, device, batch) of a validated config, nets outermost as the studies ran them.
pub fn plan(input: &PlanInput<'_>) -> Vec<PlannedTrial<CnnJob>> {
    let (config, s) = (input.config, &input.config.sweep);
    let mut trials = Vec::new();
    for net_name in &s.nets {
        let net = models::by_name(net_name).expect("validated");
        for &device in &s.devices {
            for &batch in &s.batches {
                let job = CnnJob {
                    net: net.name.to_string(),
                    device,
                    batch,
                    epochs: s.epochs,
                    images: s.images,
                    seed: config.train.seed,
                    data: DataSpec::of(config),
                    tf32: config.train.tf32 && device == DeviceKind::Cuda,
                };
                let precision = if job.tf32 { " tf32" } else { "" };
                trials.push(PlannedTrial {
                    key: key(&job, input.dataset()),
                    label: format!("{} {} batch {batch}{precision}", net.name, device.as_str()),
                    iterations: (s.images / batch) * s.epochs,
                    items_per_iteration: Some(batch),
                    memory_estimate_bytes: estimate::estimate(net, batch).total_bytes,
                    repetition: 1,
                    job,
                });
            }
        }
    }
    trials
}

/// Trains the trial in this process.
pub fn run(
    job: &CnnJob,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&IterationRecord) -> anyhow::Result<Control>,
) -> anyhow::Result<TrialEnd> {
    let spec = job.spec()?;
    let data = job.data.open(job.images)?;
    edgebench_kernels::set_tf32(job.tf32);
    train::run_trial(&spec, &data, &mut |rec| {
        let control = emit(rec)?;
        Ok(if stop.load(Ordering::SeqCst) {
            Control::Stop
        } else {
            control
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::Job;

    #[test]
    fn expands_in_study_order_with_iterations_and_keys() {
        let mut c = Config::default();
        c.sweep.nets = vec!["googlenet".into(), "alexnet".into()];
        c.sweep.batches = vec![4, 1];
        c.sweep.images = 8;
        c.sweep.epochs = 3;
        let prepared = crate::workloads::Prepared::of(
            crate::workloads::cnn::Cnn,
            crate::workloads::Preparation {
                dataset: "synthetic".into(),
                ..Default::default()
            },
        );
        let trials = crate::workloads::plan(&prepared.plan_input(&c, &HostPaths::default()));
        let order: Vec<(&str, usize)> = trials
            .iter()
            .map(|t| (t.key.net.as_str(), t.key.batch))
            .collect();
        assert_eq!(
            order,
            vec![
                ("googlenet", 4),
                ("googlenet", 1),
                ("alexnet", 4),
                ("alexnet", 1)
            ]
        );
        assert_eq!(trials[0].iterations, 6);
        assert_eq!(trials[1].iterations, 24);
        assert_eq!(trials[1].key.workload, "cnn");
        assert_eq!(trials[1].key.params, "{}");
        assert_eq!(trials[1].label, "googlenet cpu batch 1");
        let job: CnnJob = trials[2].job.fields().unwrap();
        assert_eq!((job.net.as_str(), job.batch, job.epochs), ("alexnet", 4, 3));
        let line = serde_json::to_string(&trials[2].job).unwrap();
        assert!(line.contains(r#""workload":"cnn""#), "{line}");
        assert_eq!(serde_json::from_str::<Job>(&line).unwrap(), trials[2].job);
        assert!(!job.tf32, "TF32 is off unless asked for");
    }

    #[test]
    fn tf32_marks_only_cuda_trials_and_their_keys() {
        let mut c = Config::default();
        c.sweep.nets = vec!["alexnet".into()];
        c.sweep.devices = vec![DeviceKind::Cpu, DeviceKind::Cuda];
        c.sweep.batches = vec![2];
        c.train.tf32 = true;
        let prepared = crate::workloads::Prepared::of(
            crate::workloads::cnn::Cnn,
            crate::workloads::Preparation {
                dataset: "synthetic".into(),
                ..Default::default()
            },
        );
        let trials = crate::workloads::plan(&prepared.plan_input(&c, &HostPaths::default()));
        let tf32: Vec<(&str, bool, &str)> = trials
            .iter()
            .map(|t| {
                let job: CnnJob = t.job.fields().unwrap();
                (t.key.device.as_str(), job.tf32, t.key.params.as_str())
            })
            .collect();
        assert_eq!(
            tf32,
            vec![("cpu", false, "{}"), ("cuda", true, r#"{"tf32":true}"#)]
        );
        assert_eq!(trials[1].label, "alexnet cuda batch 2 tf32");
        // A job line from before the field existed still parses, as strict fp32.
        let old = r#"{"workload":"cnn","net":"alexnet","device":"cuda","batch":2,"epochs":1,"images":4,"seed":1,"data":{"synthetic":{"seed":1,"classes":1000}}}"#;
        let job: CnnJob = serde_json::from_str::<Job>(old).unwrap().fields().unwrap();
        assert!(!job.tf32);
    }
}
