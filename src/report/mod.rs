//! Turning a store into files for other tools.

pub mod csv;

pub use self::csv::export_csv;
