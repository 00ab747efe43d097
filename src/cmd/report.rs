//! `edgebench report`: CSV files, summary tables and plots for every host in a database.

use super::{input, Outcome};
use edgebench::report;
use edgebench::store::Store;
use std::path::Path;

pub(crate) fn run(
    db: &Path,
    out: &Path,
    format: report::plots::Format,
    figure_width: f64,
    figure_captions: bool,
    compare: bool,
    trace: Option<&str>,
) -> Outcome {
    // Opening checks the whole file: a report reads every row.
    let store = Store::open_readonly(db).map_err(input)?;
    let figures = report::plots::FigureOptions {
        width_in: figure_width,
        caption_inside: figure_captions,
    };
    for path in report::build::build(&store, out, (format, &figures), compare, trace)? {
        println!("wrote {}", path.display());
    }
    Ok(0)
}
