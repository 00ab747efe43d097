//! The pieces a report is made of, below every workload so that each workload's report section
//! can use them: tables ([`table`]) and their numbers ([`fmt`]), CSV files ([`rows`],
//! [`studies`]), plots ([`plots`], [`figures`]), which trials stand for a key ([`select`]) and
//! their repetitions ([`aggregate`]), the trials' flags ([`flags`]), files written whole
//! ([`files`]); and [`Section`], the part of a report one workload writes.
//!
//! Reads only the store's rows and the modules below the store.

pub mod aggregate;
pub(crate) mod figures;
pub(crate) mod files;
pub(crate) mod flags;
pub(crate) mod fmt;
pub mod plots;
pub(crate) mod rows;
pub(crate) mod select;
pub(crate) mod studies;
pub(crate) mod table;

use std::path::{Path, PathBuf};

use crate::store::{ResultRow, Store};
use plots::Plot;
use table::Table;

/// What a section knows of the report of one host besides its rows.
pub(crate) struct Context<'a> {
    pub store: &'a Store,
    /// The host whose rows the section is given.
    pub host: &'a str,
    /// The trial whose power trace is asked for (`--trace`), if any, of any host.
    pub traced: Option<&'a ResultRow>,
}

/// What a section adds to a host's summary page, in the page's order: tables, and figures as
/// (file stem, plot).
#[derive(Default)]
pub(crate) struct Output {
    pub tables: Vec<Table>,
    pub plots: Vec<(String, Plot)>,
}

/// The part of a report one workload (or a view across them) writes. Every method is given
/// all of a host's rows, oldest first, and picks its own.
pub(crate) trait Section {
    /// A short name, for messages.
    fn name(&self) -> &'static str;

    /// Writes the section's CSV files of `rows` into `dir` (which exists), named after
    /// `machine`; returns their paths in the report's order.
    fn csv(
        &self,
        _store: &Store,
        _rows: &[ResultRow],
        _dir: &Path,
        _machine: &str,
    ) -> anyhow::Result<Vec<PathBuf>> {
        Ok(Vec::new())
    }

    /// Adds the section's tables and figures of one host's `rows` to `out`.
    fn write(&self, rows: &[ResultRow], context: &Context, out: &mut Output) -> anyhow::Result<()>;

    /// Figures of every host together (`report --compare`): `hosts` holds each host's name and
    /// rows, in host order.
    fn compare(&self, _hosts: &[(String, Vec<ResultRow>)]) -> Vec<(String, Plot)> {
        Vec::new()
    }
}
