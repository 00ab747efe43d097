//! The report's sections: one per workload, in the workload's own folder (each on
//! [`crate::render`] and the modules below it only, never on another section or the report),
//! and the view across workloads; and the one list of them that the report runs.

pub mod summary;

use crate::render::Section;

/// The report's sections, in the order their CSV files, tables and figures appear.
pub(crate) fn all() -> Vec<Box<dyn Section>> {
    let mut sections = crate::workloads::report_sections();
    sections.push(Box::new(summary::Summary));
    sections
}
