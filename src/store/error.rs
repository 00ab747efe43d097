use std::path::PathBuf;

/// Errors of the result store. Every message names the database file and what to do, because
/// they end up in front of a user at a terminal on some board.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "{} is not a SQLite database; edgebench left it untouched. \
         Pass another database path, or move that file aside",
        path.display()
    )]
    NotSqlite { path: PathBuf },

    #[error(
        "{} is a SQLite database but not an edgebench one ({reason}); edgebench left it \
         untouched. Pass another database path, or move that file aside",
        path.display()
    )]
    Foreign { path: PathBuf, reason: String },

    #[error(
        "{} has schema version {found}, newer than the {supported} this edgebench understands; \
         the file was left untouched. Use a newer edgebench to read or write it",
        path.display()
    )]
    TooNew {
        path: PathBuf,
        found: u32,
        supported: u32,
    },

    #[error(
        "{} has schema version {found}, older than {supported}, and was opened read-only; \
         open it once with a writing command (e.g. `edgebench run`) of this version to upgrade it",
        path.display()
    )]
    NeedsUpgrade {
        path: PathBuf,
        found: u32,
        supported: u32,
    },

    #[error(
        "database {} does not exist; check the path, or run `edgebench run` first to create it",
        path.display()
    )]
    Missing { path: PathBuf },

    #[error(
        "upgrading {} to schema version {version} failed (the file keeps its previous version): \
         {source}",
        path.display()
    )]
    Migration {
        path: PathBuf,
        version: u32,
        #[source]
        source: rusqlite::Error,
    },

    #[error("{what} {id} not found in {}; was it created by this store?", path.display())]
    NotFound {
        path: PathBuf,
        what: &'static str,
        id: i64,
    },

    #[error(
        "cannot create the directory for {}: {source}; check the path and permissions",
        path.display()
    )]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "SQLite error on {}: {source}; check the disk has space and no other program holds a \
         write lock on the file",
        path.display()
    )]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
}
