//! Sweep -> trials to run, in the workload's order, minus the ones already done.

use crate::store::TrialKey;
use crate::workloads::{self, PlanInput, PlannedTrial};
use std::collections::HashSet;

#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub to_run: Vec<PlannedTrial>,
    /// Already done in the DB for the same key (and not forced).
    pub skipped: Vec<PlannedTrial>,
}

/// Expands a validated config. `done` holds the keys already done; `force` reruns them.
pub fn plan(input: &PlanInput<'_>, done: &HashSet<TrialKey>, force: bool) -> Plan {
    let mut plan = Plan::default();
    for trial in workloads::plan(input) {
        if !force && done.contains(&trial.key) {
            plan.skipped.push(trial);
        } else {
            plan.to_run.push(trial);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn skips_done_keys_unless_forced_and_datasets_differ() {
        let mut c = Config::default();
        c.sweep.nets = vec!["googlenet".into(), "alexnet".into()];
        c.sweep.batches = vec![4, 1];
        c.sweep.images = 8;
        let input = |dataset| PlanInput {
            config: &c,
            dataset,
            peaks: None,
        };
        let p = plan(&input("synthetic"), &HashSet::new(), false);
        assert_eq!(p.to_run.len(), 4);
        let done: HashSet<TrialKey> = [p.to_run[1].key.clone()].into();
        let p2 = plan(&input("synthetic"), &done, false);
        assert_eq!(p2.to_run.len(), 3);
        assert_eq!(p2.skipped.len(), 1);
        assert_eq!(plan(&input("synthetic"), &done, true).to_run.len(), 4);
        // another dataset is another trial
        assert_eq!(plan(&input("folder:/x"), &done, false).to_run.len(), 4);
    }
}
