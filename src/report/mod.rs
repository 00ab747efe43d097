//! Reports from the store: the summary table, the models listing, the studies' CSV files,
//! and `edgebench report` (every host's tables, figures and CSV files, [`build`]). Each
//! workload writes its own part of a report ([`sections`]); the report runs them in the order
//! [`sections::all`] gives and writes the pages that gather them.

pub mod build;
pub mod csv;
pub mod models;
pub(crate) mod sections;

pub use self::csv::export_csv;
pub use crate::render::aggregate::{self, results_json};
pub use crate::render::plots;
pub use models::models_text;
pub use sections::summary;
