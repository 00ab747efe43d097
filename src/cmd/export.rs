//! `edgebench export csv`: the source studies' CSV files.

use super::{input, Outcome};
use edgebench::host::HostPaths;
use edgebench::report;
use edgebench::store::Store;
use std::path::Path;

pub(crate) fn csv(db: &Path, out: &Path, machine: Option<String>, host: &HostPaths) -> Outcome {
    let store = Store::open_readonly(db).map_err(input)?;
    let machine = machine.unwrap_or_else(|| host.hostname());
    for path in report::csv::export_csv(&store, out, &machine)? {
        println!("wrote {}", path.display());
    }
    Ok(0)
}
