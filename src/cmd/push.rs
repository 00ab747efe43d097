//! `edgebench push`: every finished trial the central PostgreSQL lacks, copied to it.

use super::Outcome;
use edgebench::sync;
use std::path::Path;

pub(crate) fn run(url: &str, db: &Path, json: bool) -> Outcome {
    let r = sync::postgres::push(url, db)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("{}", r.text());
    }
    Ok(0)
}
