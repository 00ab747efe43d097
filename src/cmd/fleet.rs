//! `edgebench fleet`: the fleet's server, as its owner.

use super::Outcome;
use crate::cli::FleetCommand;
use edgebench::sync;

pub(crate) fn run(command: FleetCommand) -> Outcome {
    let env = sync::postgres::process_env();
    match command {
        FleetCommand::Init { url } => {
            let (target, version) = sync::postgres::init(&url, &env)?;
            println!("{target}: schema edgebench v{version}");
        }
        FleetCommand::Retire { url, host } => {
            println!("{}", sync::postgres::retire(&url, &host, &env)?.text());
        }
        FleetCommand::Prune {
            url,
            power_older_than_days,
        } => {
            let n = sync::postgres::prune_power(&url, power_older_than_days, &env)?;
            println!(
                "removed {n} power samples of trials started more than {power_older_than_days} \
                 days ago from {}",
                sync::postgres::mask_url(&url)
            );
        }
    }
    Ok(0)
}
