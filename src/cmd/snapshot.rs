//! `edgebench snapshot`: a consistent copy of the database.

use super::{input, Outcome};
use edgebench::store;
use std::path::Path;

pub(crate) fn run(out: &Path, db: &Path) -> Outcome {
    let version = store::snapshot(db, out).map_err(input)?;
    println!(
        "wrote {} (schema v{version}, {} bytes)",
        out.display(),
        std::fs::metadata(out).map(|m| m.len()).unwrap_or(0)
    );
    Ok(0)
}
