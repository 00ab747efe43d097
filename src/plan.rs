//! Sweep -> trials to run, in the workload's order, minus the ones already done. With
//! `[sweep] repeat` N every key runs N times, round-robin: repetition 1 of every key, then
//! repetition 2 of every key, ..., so a slow spell of the board (heat, a neighbour's load)
//! spreads over the keys instead of landing on one key's repetitions.

use crate::store::TrialKey;
use crate::workloads::{self, PlanInput, PlannedTrial};
use std::collections::HashSet;

#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    pub to_run: Vec<PlannedTrial>,
    /// Already done in the DB for the same key and repetition (and not forced).
    pub skipped: Vec<PlannedTrial>,
}

/// Expands a validated config. `done` holds the (key, repetition) pairs already done; `force`
/// reruns them.
pub(crate) fn plan(input: &PlanInput<'_>, done: &HashSet<(TrialKey, usize)>, force: bool) -> Plan {
    let repeat = input.config.sweep.repeat.max(1);
    let trials = workloads::plan(input);
    let mut plan = Plan::default();
    for repetition in 1..=repeat {
        for trial in &trials {
            let mut trial = trial.clone();
            trial.repetition = repetition;
            if repeat > 1 {
                trial.label = format!("{} rep {repetition}/{repeat}", trial.label);
            }
            if !force && done.contains(&(trial.key.clone(), repetition)) {
                plan.skipped.push(trial);
            } else {
                plan.to_run.push(trial);
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn config(repeat: usize) -> Config {
        let mut c = Config::default();
        c.sweep.nets = vec!["googlenet".into(), "alexnet".into()];
        c.sweep.batches = vec![4, 1];
        c.sweep.images = 8;
        c.sweep.repeat = repeat;
        c
    }

    fn input<'a>(c: &'a Config, dataset: &str) -> PlanInput<'a> {
        // Leaked: a test's plan borrows them for the rest of the test.
        let prepared = Box::leak(Box::new(crate::workloads::Prepared::of(
            crate::workloads::cnn::Cnn,
            crate::workloads::Preparation {
                dataset: dataset.into(),
                ..Default::default()
            },
        )));
        prepared.plan_input(c, Box::leak(Box::default()))
    }

    #[test]
    fn skips_done_keys_unless_forced_and_datasets_differ() {
        let c = config(1);
        let p = plan(&input(&c, "synthetic"), &HashSet::new(), false);
        assert_eq!(p.to_run.len(), 4);
        assert!(p.to_run.iter().all(|t| t.repetition == 1));
        // One run per key labels its trials as before.
        assert!(!p.to_run[0].label.contains("rep"), "{}", p.to_run[0].label);
        let done: HashSet<(TrialKey, usize)> = [(p.to_run[1].key.clone(), 1)].into();
        let p2 = plan(&input(&c, "synthetic"), &done, false);
        assert_eq!(p2.to_run.len(), 3);
        assert_eq!(p2.skipped.len(), 1);
        assert_eq!(plan(&input(&c, "synthetic"), &done, true).to_run.len(), 4);
        // another dataset is another trial
        assert_eq!(plan(&input(&c, "folder:/x"), &done, false).to_run.len(), 4);
    }

    #[test]
    fn repetitions_go_round_robin_across_keys() {
        let c = config(3);
        let p = plan(&input(&c, "synthetic"), &HashSet::new(), false);
        let keys: Vec<TrialKey> = workloads::plan(&input(&c, "synthetic"))
            .into_iter()
            .map(|t| t.key)
            .collect();
        assert_eq!(p.to_run.len(), 3 * keys.len());
        // Repetition r of every key, in the workload's order, before repetition r + 1 of any.
        for (i, t) in p.to_run.iter().enumerate() {
            assert_eq!(t.repetition, i / keys.len() + 1, "trial {i}");
            assert_eq!(t.key, keys[i % keys.len()], "trial {i}");
            assert!(
                t.label.ends_with(&format!("rep {}/3", t.repetition)),
                "{}",
                t.label
            );
        }
    }

    #[test]
    fn resume_runs_only_the_missing_repetitions() {
        let c = config(3);
        let keys: Vec<TrialKey> = workloads::plan(&input(&c, "synthetic"))
            .into_iter()
            .map(|t| t.key)
            .collect();
        // The first key has repetitions 1 and 3, the second repetition 1, the rest none; a
        // repetition beyond the count asked for changes nothing.
        let done: HashSet<(TrialKey, usize)> = [
            (keys[0].clone(), 1),
            (keys[0].clone(), 3),
            (keys[1].clone(), 1),
            (keys[1].clone(), 7),
        ]
        .into();
        let p = plan(&input(&c, "synthetic"), &done, false);
        assert_eq!(p.skipped.len(), 3);
        assert_eq!(p.to_run.len(), 3 * keys.len() - 3);
        let runs = |k: &TrialKey| -> Vec<usize> {
            p.to_run
                .iter()
                .filter(|t| &t.key == k)
                .map(|t| t.repetition)
                .collect()
        };
        assert_eq!(runs(&keys[0]), vec![2]);
        assert_eq!(runs(&keys[1]), vec![2, 3]);
        assert_eq!(runs(&keys[2]), vec![1, 2, 3]);
        // Still round-robin: no repetition runs before a lower one of another key.
        assert!(p
            .to_run
            .windows(2)
            .all(|w| w[0].repetition <= w[1].repetition));
        // Forced, every repetition runs again.
        assert_eq!(
            plan(&input(&c, "synthetic"), &done, true).to_run.len(),
            3 * keys.len()
        );
    }
}
