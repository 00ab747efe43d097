//! `edgebench results`: one record per trial in the database, with the push backlog when
//! there is a server to push to.

use super::{input, Outcome};
use edgebench::config::Config;
use edgebench::store::{self, Store};
use edgebench::{report, sync};
use std::path::Path;

pub(crate) fn run(db: &Path, json: bool) -> Outcome {
    let rows = Store::open_readonly(db)
        .and_then(|store| store.results())
        .map_err(input)?;
    let push = push_target(db);
    if json {
        let mut value = report::results_json(&rows)?;
        if let (Some((target, pushed)), serde_json::Value::Array(list)) = (&push, &mut value) {
            for (row, obj) in rows.iter().zip(list.iter_mut()) {
                if let serde_json::Value::Object(map) = obj {
                    // Whether this trial waits to be pushed to the target.
                    let waits = row.status != store::TrialStatus::Running
                        && !pushed.contains(&row.trial_id);
                    map.insert("push_waiting".into(), waits.into());
                    map.insert("push_target".into(), target.as_str().into());
                }
            }
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        if rows.is_empty() {
            println!("no trials in {}", db.display());
        } else {
            print!("{}", report::summary::table(&rows));
        }
        if let Some((target, pushed)) = &push {
            let waiting = rows
                .iter()
                .filter(|r| {
                    r.status != store::TrialStatus::Running && !pushed.contains(&r.trial_id)
                })
                .count();
            println!(
                "{waiting} trials wait to be pushed to {}",
                sync::postgres::short_target(target)
            );
        }
    }
    Ok(0)
}

/// The server `results` reports the push backlog for: `[sync] postgres` of the config in
/// the working directory, else the target the ledger of `db` names last; with the trial UUIDs
/// the ledger lists as held there.
fn push_target(db: &Path) -> Option<(String, std::collections::HashSet<String>)> {
    let store = Store::open_readonly(db).ok()?;
    let configured = Config::resolve(None)
        .ok()
        .and_then(|(c, _)| c.sync.postgres)
        .and_then(|url| sync::postgres::ConnInfo::parse(&url, &sync::postgres::process_env()).ok())
        .map(|info| info.target().0);
    let target = match configured {
        Some(t) => t,
        None => store.push_targets().ok()?.into_iter().next()?,
    };
    let pushed = store.pushed_uuids(&target).ok()?;
    Some((target, pushed))
}
