//! Runs read from training logs rather than measured (`edgebench import logs`): each written
//! whole, run, provenance, trials and iterations in one transaction, so a failed import leaves
//! nothing behind; a trial already in the file is not written twice.

use rusqlite::{params, Transaction, TransactionBehavior};

use super::error::{sql_err, Result};
use super::handle::Store;
use super::rows::{int, LoggedText, RunInfo, TrialKey, TrialSummary};
use super::validate::{check_values, Violation};
use super::write::{
    check_iteration, check_key, check_run, check_summary, insert_iteration, insert_trial,
    write_summary,
};
use crate::provenance::Provenance;
use crate::record::IterationRecord;

/// One trial made from a log: its identity, iterations and summary, and why it has no power
/// record.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedTrial {
    pub key: TrialKey,
    pub iterations: Vec<IterationRecord>,
    pub summary: TrialSummary,
    /// Stored as `trials.power_note`; the power columns stay NULL (nothing was sampled).
    pub power_note: String,
    /// When the logged run started, by the log's own clock (`summary.ended_at` its end);
    /// None for a log without dates: the trial is then dated when it is imported.
    pub started_at: Option<String>,
    /// Each iteration's loss and time as the log wrote them (`iterations.loss_text`,
    /// `step_s_text`), in the order of `iterations`; may be empty.
    pub(crate) logged: Vec<LoggedText>,
}

impl ImportedTrial {
    /// The trial against the store's rules: what [`Store::import_run`] refuses.
    pub fn check(&self) -> Result<(), Violation> {
        check_key(&self.key, 1)?;
        check_summary(&self.summary)?;
        check_values("trials", &[("power_note", &self.power_note)])?;
        for rec in &self.iterations {
            check_iteration(rec)?;
        }
        for text in &self.logged {
            check_values(
                "iterations",
                &[("loss_text", &text.loss), ("step_s_text", &text.step_s)],
            )?;
        }
        Ok(())
    }
}

/// What [`Store::import_run`] wrote.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ImportOutcome {
    /// The new run's UUID; None when every trial was already in the file (no run is written).
    pub run_uuid: Option<String>,
    /// Indices (into the trials given) of the trials written.
    pub written: Vec<usize>,
    /// Indices of the trials skipped, each with the host and run UUID that already hold it.
    pub already: Vec<(usize, String, String)>,
}

impl Store {
    /// Writes `run` with its provenance and every trial of `trials` not already in the file,
    /// in one transaction. A trial is already there when a trial with the same key has the
    /// same iterations (step, loss, step time, instants): the same log imported before, under
    /// whatever host name. Nothing is written when every trial is already there.
    pub(crate) fn import_run(
        &mut self,
        run: &RunInfo,
        provenance: &Provenance,
        trials: &[ImportedTrial],
    ) -> Result<ImportOutcome> {
        check_run(run).map_err(|v| self.invalid(v))?;
        for trial in trials {
            trial.check().map_err(|v| self.invalid(v))?;
        }
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_err(&path))?;
        let mut outcome = ImportOutcome::default();
        let mut new = Vec::new();
        for (i, trial) in trials.iter().enumerate() {
            let earlier = new.iter().any(|&j: &usize| {
                trials[j].key == trial.key && same(&trials[j].iterations, &trial.iterations)
            });
            match holder(&tx, trial).map_err(sql_err(&path))? {
                Some((host, run)) => outcome.already.push((i, host, run)),
                None if earlier => outcome
                    .already
                    .push((i, run.host.clone(), run.uuid.clone())),
                None => new.push(i),
            }
        }
        if !new.is_empty() {
            write(&tx, run, provenance, trials, &new).map_err(sql_err(&path))?;
            outcome.run_uuid = Some(run.uuid.clone());
        }
        tx.commit().map_err(sql_err(&path))?;
        outcome.written = new;
        if outcome.run_uuid.is_some() {
            self.checkpoint();
        }
        Ok(outcome)
    }
}

/// The host and run UUID of a stored trial that is `trial` (same key, same iterations).
fn holder(
    tx: &Transaction<'_>,
    trial: &ImportedTrial,
) -> rusqlite::Result<Option<(String, String)>> {
    let k = &trial.key;
    let candidates: Vec<(i64, String, String)> = tx
        .prepare_cached(
            "SELECT t.id, r.host, r.uuid FROM trials t JOIN runs r ON r.id = t.run_id \
             WHERE t.workload = ?1 AND t.net = ?2 AND t.device = ?3 AND t.batch = ?4 \
             AND t.epochs = ?5 AND t.images = ?6 AND t.dataset = ?7 AND t.params = ?8 \
             AND t.iterations_done = ?9 ORDER BY t.id",
        )?
        .query_map(
            params![
                k.workload,
                k.net,
                k.device,
                int(k.batch),
                int(k.epochs),
                int(k.images),
                k.dataset,
                k.params,
                int(trial.iterations.len()),
            ],
            |r| Ok((r.get("id")?, r.get("host")?, r.get("uuid")?)),
        )?
        .collect::<rusqlite::Result<_>>()?;
    for (id, host, run) in candidates {
        let stored: Vec<(i64, Option<f64>, f64, i64, i64)> = tx
            .prepare_cached(
                "SELECT step, loss, step_s, t_start_ns, t_end_ns FROM iterations \
                 WHERE trial_id = ?1 ORDER BY step",
            )?
            .query_map([id], |r| {
                Ok((
                    r.get("step")?,
                    r.get("loss")?,
                    r.get("step_s")?,
                    r.get("t_start_ns")?,
                    r.get("t_end_ns")?,
                ))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let matches = stored.len() == trial.iterations.len()
            && stored.iter().zip(&trial.iterations).all(|(s, r)| {
                s.0 == int(r.step)
                    && same_f64(s.1.unwrap_or(f64::NAN), r.loss)
                    && same_f64(s.2, r.step_s)
                    && s.3 == r.t_start_ns
                    && s.4 == r.t_end_ns
            });
        if matches {
            return Ok(Some((host, run)));
        }
    }
    Ok(None)
}

/// Equal, NaN equal to NaN (a NaN loss is stored as NULL and read back as NaN).
fn same_f64(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

fn same(a: &[IterationRecord], b: &[IterationRecord]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.step == y.step
                && same_f64(x.loss, y.loss)
                && same_f64(x.step_s, y.step_s)
                && x.t_start_ns == y.t_start_ns
                && x.t_end_ns == y.t_end_ns
        })
}

fn write(
    tx: &Transaction<'_>,
    run: &RunInfo,
    provenance: &Provenance,
    trials: &[ImportedTrial],
    new: &[usize],
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO runs (uuid, host, started_at, ended_at, status, config_toml, \
         edgebench_version, git_commit, candle_version, cpu_threads, cpu_model, os) \
         VALUES (?1, ?2, ?3, ?3, 'finished', ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        run.uuid,
        run.host,
        run.started_at,
        run.config_toml,
        run.edgebench_version,
        run.git_commit,
        run.candle_version,
        int(run.cpu_threads),
        run.cpu_model,
        run.os,
    ])?;
    let run_id = tx.last_insert_rowid();
    for (k, v) in &provenance.0 {
        tx.prepare_cached("INSERT INTO run_provenance (run_id, key, value) VALUES (?1, ?2, ?3)")?
            .execute(params![run_id, k, v])?;
    }
    for trial in new.iter().map(|&i| &trials[i]) {
        // Dated by the log where it says when it ran, else when the import writes it.
        let at = trial.started_at.as_ref().unwrap_or(&trial.summary.ended_at);
        let trial_id = insert_trial(tx, run_id, &trial.key, 1, 0, 0, at)?;
        write_summary(tx, trial_id, &trial.summary)?;
        tx.prepare_cached("UPDATE trials SET iterations_done = ?2, power_note = ?3 WHERE id = ?1")?
            .execute(params![
                trial_id,
                int(trial.iterations.len()),
                trial.power_note
            ])?;
        for (i, rec) in trial.iterations.iter().enumerate() {
            insert_iteration(tx, trial_id, rec)?;
            if let Some(text) = trial.logged.get(i).filter(|t| **t != LoggedText::default()) {
                tx.prepare_cached(
                    "UPDATE iterations SET loss_text = ?3, step_s_text = ?4 \
                     WHERE trial_id = ?1 AND step = ?2",
                )?
                .execute(params![
                    trial_id,
                    int(rec.step),
                    text.loss,
                    text.step_s
                ])?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Metrics;
    use crate::store::TrialStatus;

    fn run(uuid: &str, host: &str) -> RunInfo {
        RunInfo {
            uuid: uuid.into(),
            host: host.into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            config_toml: "[import]\n".into(),
            edgebench_version: "0".into(),
            git_commit: "unknown".into(),
            candle_version: "0".into(),
            cpu_threads: 0,
            cpu_model: None,
            os: "unknown".into(),
        }
    }

    fn trial(batch: usize, steps: &[usize], loss: f64) -> ImportedTrial {
        ImportedTrial {
            key: TrialKey {
                workload: "exec".into(),
                net: "alexnet".into(),
                device: "cuda".into(),
                batch,
                epochs: 0,
                images: 0,
                dataset: String::new(),
                params: r#"{"command":[],"engine":"caffe"}"#.into(),
            },
            iterations: steps
                .iter()
                .map(|&step| IterationRecord {
                    step,
                    epoch: 0,
                    loss,
                    lr: f64::NAN,
                    data_s: 0.0,
                    step_s: 0.5,
                    t_start_ns: step as i64 * 500_000_000,
                    t_end_ns: (step as i64 + 1) * 500_000_000,
                })
                .collect(),
            summary: TrialSummary {
                status: TrialStatus::Ok,
                error: None,
                ended_at: "2026-01-01T00:00:00Z".into(),
                time_per_image_s: Some(0.5 / batch as f64),
                time_per_image_spread_s: Some(0.0),
                images_per_s: Some(batch as f64 / 0.5),
                loss_first: Some(loss),
                loss_last: Some(loss),
                loss_anomaly: false,
                metrics: Metrics::default(),
            },
            power_note: "imported log: no power measured".into(),
            started_at: None,
            logged: Vec::new(),
        }
    }

    fn count(store: &Store, table: &str) -> i64 {
        store
            .conn
            .query_row(&format!("SELECT count(*) AS n FROM {table}"), [], |r| {
                r.get("n")
            })
            .unwrap()
    }

    #[test]
    fn a_trial_stored_before_is_skipped_whatever_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("t.db")).unwrap();
        let p = Provenance::default();
        let first = [trial(16, &[0, 20], f64::NAN), trial(32, &[0, 20], 6.9)];
        let out = store.import_run(&run("r1", "tx1"), &p, &first).unwrap();
        assert_eq!(out.written, [0, 1]);
        assert_eq!(out.run_uuid.as_deref(), Some("r1"));

        // The same logs under another host: nothing written, not even a run.
        let out = store.import_run(&run("r2", "tx2"), &p, &first).unwrap();
        assert_eq!(out.run_uuid, None);
        assert_eq!(
            out.already,
            [
                (0, "tx1".into(), "r1".into()),
                (1, "tx1".into(), "r1".into())
            ]
        );
        assert_eq!(count(&store, "runs"), 1);

        // Another run of the same point (other losses), and one log given twice.
        let again = [trial(32, &[0, 20], 6.8), trial(32, &[0, 20], 6.8)];
        let out = store.import_run(&run("r3", "tx1"), &p, &again).unwrap();
        assert_eq!(out.written, [0]);
        assert_eq!(out.already, [(1, "tx1".into(), "r3".into())]);
        assert_eq!((count(&store, "runs"), count(&store, "trials")), (2, 3));
        assert_eq!(count(&store, "iterations"), 6);
    }

    #[test]
    fn logged_text_is_kept_beside_the_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("t.db")).unwrap();
        let mut t = trial(16, &[0, 1, 2], 0.5);
        t.logged = vec![
            LoggedText {
                loss: Some("0.5000".into()),
                step_s: Some("0.500".into()),
            },
            LoggedText::default(),
            LoggedText {
                loss: Some("5e-01".into()),
                step_s: None,
            },
        ];
        store
            .import_run(&run("r1", "tx1"), &Provenance::default(), &[t.clone()])
            .unwrap();
        let id = store.results().unwrap()[0].trial_rowid;
        assert_eq!(store.logged_text(id).unwrap(), t.logged);
        let steps = |r: &[IterationRecord]| r.iter().map(|r| (r.step, r.loss)).collect::<Vec<_>>();
        assert_eq!(steps(&store.iterations(id).unwrap()), steps(&t.iterations));
    }

    #[test]
    fn a_failed_import_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("t.db")).unwrap();
        // The second trial repeats a step: its second iteration breaks the primary key after
        // the run, the first trial and its iterations were written.
        let trials = [trial(16, &[0, 1], 6.9), trial(32, &[0, 0], 6.9)];
        let err = store
            .import_run(&run("r1", "tx1"), &Provenance::default(), &trials)
            .unwrap_err();
        assert!(err.to_string().contains("UNIQUE"), "{err}");
        for table in ["runs", "run_provenance", "trials", "iterations"] {
            assert_eq!(count(&store, table), 0, "{table}");
        }
    }
}
