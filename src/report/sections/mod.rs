//! The report's sections: one per workload (each on [`crate::render`] and the modules below
//! it only, never on another section or the report), and the view across workloads; and the
//! one list of them that the report runs.

pub(crate) mod cnn;
pub(crate) mod exec;
pub(crate) mod mlp;
pub(crate) mod ops;
pub mod summary;

use crate::render::Section;

/// The report's sections, in the order their CSV files, tables and figures appear.
pub(crate) fn all() -> Vec<Box<dyn Section>> {
    vec![
        Box::new(cnn::Cnn),
        Box::new(exec::Exec),
        Box::new(mlp::Mlp),
        Box::new(ops::Ops),
        Box::new(summary::Summary),
    ]
}
