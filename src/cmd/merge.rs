//! `edgebench merge`: databases from many boards into one; [`print`] also reports `pull`'s and
//! `fetch`'s merges.

use super::{input, Outcome};
use edgebench::store;
use std::path::{Path, PathBuf};

pub(crate) fn run(sources: &[PathBuf], into: &Path) -> Outcome {
    let r = store::merge(sources, into).map_err(input)?;
    Ok(print(&r, into))
}

/// Prints what a merge did; the exit code: 3 when it left something out.
pub(crate) fn print(r: &store::MergeReport, into: &Path) -> i32 {
    for refused in &r.refused {
        eprintln!("warning: {refused} (from {})", refused.source);
    }
    for t in &r.tables {
        println!(
            "{:<14} {:>9} rows (+{})",
            t.table,
            t.after,
            t.after - t.before
        );
    }
    println!(
        "{} run(s) and {} trial(s) updated to a later state -> {}",
        r.runs_updated,
        r.trials_updated,
        into.display()
    );
    if r.refused.is_empty() {
        0
    } else {
        println!(
            "{} trial(s) or run(s) left out: a row of each breaks the store's rules (see above)",
            r.refused.len()
        );
        3
    }
}
