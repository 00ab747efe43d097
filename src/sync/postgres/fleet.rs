//! The owner's operations on the fleet's server: `fleet init` (the schema, before any board
//! pushes), `fleet retire` (a board's rows, all of them) and `fleet prune` (power samples past
//! their retention).

use anyhow::{anyhow, bail, Context};
use serde::Serialize;

use super::connect::{describe, ConnInfo, Env};
use super::schema;

fn db_err(what: &str) -> impl Fn(postgres::Error) -> anyhow::Error + '_ {
    move |e| anyhow!("{what}: {}", describe(&e))
}

/// Creates (or upgrades to) this binary's schema on the server `url` names; no results file
/// is needed. Returns the target and the schema version it holds now.
pub fn init(url: &str, env: &Env) -> anyhow::Result<(String, i32)> {
    let info = ConnInfo::parse(url, env)?;
    let mut client = info.connect(env)?;
    let target = info.target();
    schema::ensure(&mut client).with_context(|| format!("server {target}"))?;
    Ok((target.0, schema::SERVER_SCHEMA_VERSION))
}

/// What retiring a board removed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RetireReport {
    pub host: String,
    pub runs: u64,
    pub trials: u64,
    pub iterations: u64,
    pub power_samples: u64,
    /// Its entries in `board_hosts`: no board role may write under the host any more.
    pub board_hosts: u64,
}

impl RetireReport {
    pub fn text(&self) -> String {
        format!(
            "retired {}: {} runs, {} trials, {} iterations, {} power samples and the rows \
             hanging off them removed; {} board role entries removed",
            self.host,
            self.runs,
            self.trials,
            self.iterations,
            self.power_samples,
            self.board_hosts
        )
    }
}

/// Removes every row of the board `host` (its runs, their trials and every row of theirs),
/// in one transaction; a host the server does not know is an error.
pub fn retire(url: &str, host: &str, env: &Env) -> anyhow::Result<RetireReport> {
    let info = ConnInfo::parse(url, env)?;
    let mut client = info.connect(env)?;
    let target = info.target();
    schema::check_readable(&mut client).with_context(|| format!("server {target}"))?;
    let mut tx = client.transaction().map_err(db_err("BEGIN"))?;
    // The two large tables carry no foreign key: their rows go first, by the host's trials.
    let trials = "SELECT t.id FROM edgebench.trials t JOIN edgebench.runs r ON r.id = t.run_id \
                  WHERE r.host = $1";
    let iterations = tx
        .execute(
            &format!("DELETE FROM edgebench.iterations WHERE trial_id IN ({trials})"),
            &[&host],
        )
        .map_err(db_err("removing iterations"))?;
    let power_samples = tx
        .execute(
            &format!("DELETE FROM edgebench.power_samples WHERE trial_id IN ({trials})"),
            &[&host],
        )
        .map_err(db_err("removing power samples"))?;
    let trial_count: i64 = tx
        .query_one(&format!("SELECT count(*) FROM ({trials}) x"), &[&host])
        .map_err(db_err("counting trials"))?
        .get(0);
    // Trials and their small rows follow their runs (ON DELETE CASCADE).
    let runs = tx
        .execute("DELETE FROM edgebench.runs WHERE host = $1", &[&host])
        .map_err(db_err("removing runs"))?;
    let board_hosts = tx
        .execute(
            "DELETE FROM edgebench.board_hosts WHERE host = $1",
            &[&host],
        )
        .map_err(db_err("removing the host from board_hosts"))?;
    if runs == 0 && board_hosts == 0 {
        tx.rollback().map_err(db_err("ROLLBACK"))?;
        bail!(
            "{target} holds no runs of host {host:?}: nothing retired (the host names are in \
             SELECT DISTINCT host FROM edgebench.trial_summary)"
        );
    }
    tx.commit().map_err(db_err("COMMIT"))?;
    Ok(RetireReport {
        host: host.to_string(),
        runs,
        trials: trial_count as u64,
        iterations,
        power_samples,
        board_hosts,
    })
}

/// The longest retention `prune` takes (about 270 years): beyond it, a typo.
pub const MAX_RETENTION_DAYS: u32 = 100_000;

/// Removes the power samples of trials started more than `days` days ago; the trials keep
/// their energy, power and EDP figures. Returns the samples removed.
pub fn prune_power(url: &str, days: u32, env: &Env) -> anyhow::Result<u64> {
    if days > MAX_RETENTION_DAYS {
        bail!("--power-older-than-days {days}: at most {MAX_RETENTION_DAYS}");
    }
    let info = ConnInfo::parse(url, env)?;
    let mut client = info.connect(env)?;
    let target = info.target();
    schema::check_readable(&mut client).with_context(|| format!("server {target}"))?;
    let days = days as i32;
    client
        .execute(
            "DELETE FROM edgebench.power_samples p USING edgebench.trials t \
             WHERE p.trial_id = t.id AND t.started_at < now() - make_interval(days => $1)",
            &[&days],
        )
        .map_err(db_err("removing power samples"))
        .with_context(|| format!("server {target}"))
}
