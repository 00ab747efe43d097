//! Reports from the store: the summary table, the models listing, the studies' CSV files,
//! engines (frameworks) side by side.

pub mod build;
pub mod csv;
pub mod engines;
pub mod models;
pub mod plots;
pub mod summary;
pub mod workloads;

pub use self::csv::export_csv;
pub use models::models_text;
