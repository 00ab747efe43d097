//! `edgebench fetch`: trials from the central PostgreSQL into a local database.

use super::Outcome;
use edgebench::sync;
use std::path::Path;

pub(crate) fn run(url: &str, into: &Path, request: &sync::postgres::FetchRequest<'_>) -> Outcome {
    let r = sync::postgres::fetch(url, into, request)?;
    let refused = r.merge.refused.iter().filter(|x| x.trial.is_some()).count();
    println!(
        "fetched {} trial(s) from {}",
        r.trials.saturating_sub(refused),
        sync::postgres::mask_url(url)
    );
    Ok(super::merge::print(&r.merge, into))
}
