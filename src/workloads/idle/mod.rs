//! The idle workload: the board at rest for a duration (`run --workload idle --duration 60s`).
//! Nothing runs in the worker but a one-second tick, so the trial's power per rail, clocks and
//! temperatures, which the runner records around every trial, are the board's idle baseline in
//! its current power mode, in the same tables as the other workloads.

use super::{
    Emit, JobEnd, PlanInput, PlannedTrial, Preparation, RowNames, TypedWorkload, WorkloadProfile,
};
use crate::clock::monotonic_ns;
use crate::config::{Config, Timeout};
use crate::record::{Control, IterationRecord, TrialEnd, WorkItem, WorkloadKind};
use crate::store::{PerIteration, ResultRow, RowItems, TrialKey};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub const KIND: WorkloadKind = WorkloadKind::named("idle");

/// One record per tick: the power and clock samplers see the whole rest, and a stop request
/// ends the trial within a tick.
const TICK: Duration = Duration::from_secs(1);

/// The longest rest one trial may plan.
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// `[idle]` of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct IdleConfig {
    /// How long the board rests, e.g. "60s" or "5m" (`--duration`).
    pub duration: Timeout,
}

impl Default for IdleConfig {
    fn default() -> Self {
        IdleConfig {
            duration: Timeout(Duration::from_secs(60)),
        }
    }
}

/// One rest as the worker receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IdleJob {
    pub ticks: usize,
}

/// The board at rest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Idle;

impl Idle {
    fn config(idle: IdleConfig) -> Result<IdleConfig, String> {
        let d = idle.duration.0;
        if d < TICK || d > MAX_DURATION {
            return Err(format!(
                "idle.duration (--duration) = {} s is out of range; use 1s to 24h",
                d.as_secs_f64()
            ));
        }
        Ok(idle)
    }
}

impl TypedWorkload for Idle {
    type Section = IdleConfig;
    type Checked = IdleConfig;
    type Plan = IdleConfig;
    type Job = IdleJob;
    const KIND: WorkloadKind = KIND;

    fn options(&self) -> Vec<clap::Arg> {
        vec![clap::Arg::new("idle.duration")
            .long("duration")
            .value_name("DURATION")
            .help("idle: how long the board rests, e.g. 60s or 5m (default 60s)")]
    }

    /// The sweep's nets and batches mean nothing at rest.
    fn check(&self, _config: &Config, section: IdleConfig) -> Result<IdleConfig, String> {
        Idle::config(section)
    }

    fn prepare(
        &self,
        _config: &Config,
        checked: IdleConfig,
        _host: &crate::host::HostPaths,
        _board: &crate::board::BoardProfile,
    ) -> anyhow::Result<Preparation<IdleConfig>> {
        Ok(Preparation::of(checked))
    }

    /// One tick a second, and nothing computes.
    fn profile(&self) -> WorkloadProfile {
        WorkloadProfile {
            items: RowItems {
                item: WorkItem::Tick,
                per_iteration: PerIteration::One,
                over_dataset: false,
            },
            records_loss: false,
            computes_on_devices: false,
            shows_progress: true,
            watches_tree: false,
            longer_trial_advice: "a longer rest (--duration)",
        }
    }

    fn names(&self, row: &ResultRow) -> RowNames {
        RowNames {
            label: row.net.clone(),
            engine: None,
        }
    }

    /// Nothing warms up at rest: the whole duration asked for is measured.
    fn warmup_iterations(&self, _job: &IdleJob, _configured: usize) -> usize {
        0
    }

    fn plan(&self, _input: &PlanInput<'_>, idle: &IdleConfig) -> Vec<PlannedTrial<IdleJob>> {
        let ticks = idle.duration.0.as_secs().max(1) as usize;
        let job = IdleJob { ticks };
        vec![PlannedTrial {
            key: TrialKey {
                workload: KIND,
                net: "idle".into(),
                device: "board".into(),
                batch: 0,
                epochs: 1,
                images: 0,
                dataset: String::new(),
                params: super::params_text(&serde_json::json!({ "duration_s": ticks })),
            },
            label: format!("idle {ticks} s"),
            iterations: ticks,
            items_per_iteration: None,
            memory_estimate_bytes: 0,
            repetition: 1,
            job,
        }]
    }

    fn run(&self, job: IdleJob, stop: &AtomicBool, emit: Emit<'_>) -> anyhow::Result<JobEnd> {
        for step in 0..job.ticks {
            if stop.load(Ordering::SeqCst) {
                return Ok(TrialEnd::Stopped.into());
            }
            let t_start_ns = monotonic_ns();
            crate::host::sleep_unless(stop, TICK);
            let t_end_ns = monotonic_ns();
            let record = IterationRecord {
                step,
                epoch: 0,
                loss: f64::NAN,
                lr: f64::NAN,
                data_s: 0.0,
                step_s: (t_end_ns - t_start_ns) as f64 * 1e-9,
                t_start_ns,
                t_end_ns,
            };
            if emit(&record)? == Control::Stop {
                return Ok(TrialEnd::Stopped.into());
            }
        }
        Ok(TrialEnd::Completed.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostPaths;
    use crate::workloads::{Job, Workload};

    #[test]
    fn one_trial_of_one_tick_per_second_from_the_section() {
        let mut c = Config::default();
        crate::workloads::apply_flags(&mut c, &["--duration", "3s"]);
        Workload::check(&Idle, &c).unwrap();
        let host = HostPaths::default();
        let prepared = Workload::prepare(&Idle, &c, &host, crate::board::generic()).unwrap();
        let trials = crate::workloads::plan(&prepared.plan_input(&c, &host));
        assert_eq!(trials.len(), 1);
        assert_eq!(trials[0].iterations, 3);
        assert_eq!(trials[0].key.workload, "idle");
        assert_eq!(trials[0].key.params, r#"{"duration_s":3}"#);
        assert_eq!(trials[0].job.fields::<IdleJob>().unwrap().ticks, 3);
    }

    #[test]
    fn a_duration_out_of_range_or_an_unknown_key_is_refused_naming_it() {
        let mut c = Config::default();
        crate::workloads::apply_flags(&mut c, &["--duration", "25h"]);
        assert!(Workload::check(&Idle, &c).unwrap_err().contains("--duration"));
        let c = Config::from_toml("[idle]
duration = \"0s\"\n", "c.toml".as_ref()).unwrap();
        assert!(Workload::check(&Idle, &c).unwrap_err().contains("[idle]"));
        let c = Config::from_toml("[idle]\nduratoin = \"5s\"\n", "c.toml".as_ref()).unwrap();
        assert!(Workload::check(&Idle, &c).unwrap_err().contains("duratoin"));
    }

    #[test]
    fn a_stop_ends_the_rest_at_once() {
        let stop = AtomicBool::new(true);
        let job = Job::of(KIND, &IdleJob { ticks: 100 });
        let end = Workload::run(&Idle, &job, &stop, &mut |_| Ok(Control::Continue)).unwrap();
        assert_eq!(end.end, TrialEnd::Stopped);
    }
}
