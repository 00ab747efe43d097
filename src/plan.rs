//! Sweep -> trials to run, in the studies' order (net, then device, then batch), minus the ones
//! already done.

use crate::config::Config;
use crate::models;
use crate::store::TrialKey;
use crate::train::TrialSpec;
use std::collections::HashSet;

#[derive(Debug, Clone)]
pub struct PlannedTrial {
    pub spec: TrialSpec,
    pub key: TrialKey,
}

#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub to_run: Vec<PlannedTrial>,
    /// Already `ok` in the DB for the same key (and not forced).
    pub skipped: Vec<PlannedTrial>,
}

pub fn key(spec: &TrialSpec, dataset: &str) -> TrialKey {
    TrialKey {
        net: spec.net.name.to_string(),
        device: spec.device.as_str().to_string(),
        batch: spec.batch,
        epochs: spec.epochs,
        images: spec.images,
        dataset: dataset.to_string(),
    }
}

/// Expands a validated config. `done` holds the keys already `ok`; `force` reruns them.
pub fn plan(config: &Config, dataset: &str, done: &HashSet<TrialKey>, force: bool) -> Plan {
    let mut plan = Plan::default();
    let s = &config.sweep;
    for net in &s.nets {
        let net = models::by_name(net).expect("validated");
        for &device in &s.devices {
            for &batch in &s.batches {
                let spec = TrialSpec {
                    net,
                    device,
                    batch,
                    epochs: s.epochs,
                    images: s.images,
                    seed: config.train.seed,
                };
                let key = key(&spec, dataset);
                let trial = PlannedTrial { spec, key };
                if !force && done.contains(&trial.key) {
                    plan.skipped.push(trial);
                } else {
                    plan.to_run.push(trial);
                }
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_in_study_order_and_skips_done() {
        let mut c = Config::default();
        c.sweep.nets = vec!["googlenet".into(), "alexnet".into()];
        c.sweep.batches = vec![4, 1];
        c.sweep.images = 8;
        c.sweep.epochs = 3;
        let p = plan(&c, "synthetic", &HashSet::new(), false);
        let order: Vec<(&str, usize)> = p
            .to_run
            .iter()
            .map(|t| (t.spec.net.name, t.spec.batch))
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
        assert_eq!(p.to_run[0].spec.iterations(), 6);
        assert_eq!(p.to_run[1].spec.iterations(), 24);

        let done: HashSet<TrialKey> = [p.to_run[1].key.clone()].into();
        let p2 = plan(&c, "synthetic", &done, false);
        assert_eq!(p2.to_run.len(), 3);
        assert_eq!(p2.skipped.len(), 1);
        assert_eq!(plan(&c, "synthetic", &done, true).to_run.len(), 4);
        // another dataset is another trial
        assert_eq!(plan(&c, "folder:/x", &done, false).to_run.len(), 4);
    }
}
