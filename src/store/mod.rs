//! Local SQLite result store: one file per board, one row per training iteration.
//!
//! Users open the file with sqlite3/pandas, copy it to a workstation and merge files across
//! boards, so rows carry UUIDs (row ids are local) and the schema is documented in
//! [`schema`]. The file is in WAL mode with `synchronous=NORMAL`: a commit per iteration costs
//! no fsync, and a crash loses at most the last few iterations, never consistency.
//! Recent rows live in `<file>-wal` until a checkpoint; the store checkpoints after each
//! trial and run, so copying only `<file>` mid-sweep still carries every finished trial.
//!
//! Modules, leaves first: `error`, `status`, `rows` (row types), `validate` (what every row
//! must hold: the writer's, the merge's and the readers' rules), [`schema`] (with the SQL
//! files of its migrations), [`lock`]; `check` (what a file is, before it is opened),
//! `migrate`; `handle` (the [`Store`] and opening it); `read` and `write` (every query, insert
//! and update); `import`, `recovery`, `snapshot`, `merge`, `pushed` (the push ledger). None
//! imports this module, which only gathers what the rest of the crate uses.

mod check;
mod error;
mod handle;
mod import;
pub(crate) mod lock;
mod merge;
mod migrate;
mod pushed;
mod read;
mod recovery;
mod rows;
pub mod schema;
mod snapshot;
mod status;
pub(crate) mod validate;
mod write;

pub use error::{Result, StoreError};
pub use handle::Store;
pub use import::{ImportOutcome, ImportedTrial};
pub use lock::{LockError, SweepLock};
pub use merge::{merge, MergeReport};
pub(crate) use merge::{ChildSink, IdMap, ParentSink, CHILD_TABLES};
pub use merge::{Refused, TableCount};
pub(crate) use pushed::FinalTrial;
pub(crate) use rows::LoggedText;
pub use rows::PerIteration;
pub use rows::ResultRow;
pub use rows::RowItems;
pub use rows::{MemoryColumns, RunInfo, TrialKey, TrialSummary};
pub use schema::SCHEMA_VERSION;
pub use snapshot::snapshot;
pub use status::TrialStatus;
pub use validate::Violation;
