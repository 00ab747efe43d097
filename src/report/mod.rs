//! Reports from the store: the summary table, the models listing, the studies' CSV files,
//! and `edgebench report` (every host's tables, figures and CSV files, [`build`]). Each
//! workload writes its own part of a report ([`sections`]); the report runs them in the order
//! [`sections::all`] gives and writes the pages that gather them.

pub mod build;
pub mod csv;
pub(crate) mod models;
pub(crate) mod sections;

pub use self::csv::export_csv;
pub use crate::render::aggregate;
pub use crate::render::plots;
pub use models::models_text;
pub use sections::summary;

/// `edgebench results --json`: every trial of `rows` (as the store holds them) described by
/// its workload, with the keys aggregated over its repetitions
/// ([`aggregate::results_json`]).
pub fn results_json(rows: &[crate::store::ResultRow]) -> serde_json::Result<serde_json::Value> {
    let mut rows = rows.to_vec();
    crate::workloads::describe(&mut rows);
    aggregate::results_json(&rows)
}
