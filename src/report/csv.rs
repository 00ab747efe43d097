//! `edgebench export csv`: every section's CSV files of a store's trials. The studies' files
//! of every engine (`{loss,times}_<machine>_<engine>.csv`, edgebench's always written; see
//! [`crate::render::studies`]) come first, then one file per workload other than the CNN
//! training and engine (`<workload>_<machine>_<engine>.csv`, [`crate::render::rows`]).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::store::{ResultRow, Store};

/// Writes the CSV files of every section for `machine` into `out_dir` (created if needed);
/// returns their paths, edgebench's loss and times files first, then each other engine's,
/// then each other workload's.
pub fn export_csv(store: &Store, out_dir: &Path, machine: &str) -> anyhow::Result<Vec<PathBuf>> {
    export_csv_rows(store, crate::workloads::results(store)?, out_dir, machine)
}

/// [`export_csv`] for some of the store's trials (e.g. one host's, for `edgebench report`),
/// described by their workloads ([`crate::workloads::describe`]).
pub(crate) fn export_csv_rows(
    store: &Store,
    rows: Vec<ResultRow>,
    out_dir: &Path,
    machine: &str,
) -> anyhow::Result<Vec<PathBuf>> {
    if machine.is_empty() || machine.contains(['/', '\\']) || machine.starts_with('.') {
        bail!("machine name {machine:?} cannot be used in a file name; pass a plain name");
    }
    fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create output directory {}", out_dir.display()))?;
    let mut written = Vec::new();
    for section in super::sections::all() {
        written.extend(section.csv(store, &rows, out_dir, machine)?);
    }
    Ok(written)
}
