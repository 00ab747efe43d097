use std::path::{Path, PathBuf};

/// What every fallible store operation returns.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

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
        "{} is damaged ({detail}); edgebench left it untouched and will not add to it. Recover \
         what it holds with `sqlite3 {0} .recover | sqlite3 fixed.db` and use fixed.db, or \
         restore the last `edgebench snapshot` of it",
        path.display()
    )]
    Corrupt { path: PathBuf, detail: String },

    #[error(
        "{} cannot be read without write access: its newest rows are in {0}-wal, and reading \
         them needs {0}-shm, which cannot be created there (read-only folder or mount). Ask \
         the file's owner to run `edgebench snapshot --db {0} COPY.db` and read the copy, or \
         copy {0} and {0}-wal together into a folder you can write and read that copy",
        path.display()
    )]
    WalUnreadable { path: PathBuf },

    #[error(
        "cannot write {} ({reason}): edgebench needs write access to the file and to its \
         folder, for the -wal, -shm and .lock files beside it; run as a user who has it, or \
         pass --db with a file in a folder you can write",
        path.display()
    )]
    NotWritable { path: PathBuf, reason: String },

    #[error(
        "database {} does not exist; check the path, or run `edgebench run` first to create it",
        path.display()
    )]
    Missing { path: PathBuf },

    #[error(
        "upgrading {} to schema version {version} failed (the file keeps its previous version): \
         {error}",
        path.display()
    )]
    Migration {
        path: PathBuf,
        version: u32,
        // Not a `source`: the message holds it, and a chain would repeat it.
        error: rusqlite::Error,
    },

    #[error(
        "{} already exists; edgebench will not overwrite it. Pass a new file name, or move it aside",
        path.display()
    )]
    Exists { path: PathBuf },

    #[error("{what} {id} not found in {}; was it created by this store?", path.display())]
    NotFound {
        path: PathBuf,
        what: &'static str,
        id: i64,
    },

    #[error(
        "cannot create the directory for {}: {error}; check the path and permissions",
        path.display()
    )]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },

    #[error(
        "{} was {how} while edgebench was writing to it: the results written since are in no \
         file a path names",
        path.display()
    )]
    Lost { path: PathBuf, how: &'static str },

    #[error(
        "refusing to write {violation} to {}: every edgebench command must be able to read \
         what is stored",
        path.display()
    )]
    Invalid {
        path: PathBuf,
        violation: super::validate::Violation,
    },

    #[error("SQLite error on {}: {error}; {hint}", path.display())]
    Sqlite {
        path: PathBuf,
        // Not a `source`: the message holds it, and a chain would repeat it (rusqlite's error
        // has SQLite's own as its source, worded the same).
        error: rusqlite::Error,
        /// What the user can do about it, chosen from the SQLite error code.
        hint: &'static str,
    },
}

impl StoreError {
    /// The wrong file was given (not ours, too new, damaged, missing...): bad input, refused
    /// untouched, rather than a failure while working.
    pub fn is_bad_input(&self) -> bool {
        use StoreError::*;
        matches!(
            self,
            NotSqlite { .. }
                | Foreign { .. }
                | TooNew { .. }
                | Missing { .. }
                | Exists { .. }
                | Corrupt { .. }
                | WalUnreadable { .. }
                | NotWritable { .. }
                | Invalid { .. }
        )
    }
}

/// Advice for a SQLite failure; generic advice would mislead (a full disk is not a lock).
pub(crate) fn hint(e: &rusqlite::Error) -> &'static str {
    use rusqlite::ErrorCode::*;
    match e.sqlite_error_code() {
        Some(DatabaseBusy | DatabaseLocked) => {
            "another process holds a lock on the file; wait for it to finish or stop it"
        }
        Some(DiskFull) => "the disk is full; free some space and retry",
        Some(ReadOnly) => {
            "the file is read-only (permissions, a read-only mount, or opened read-only)"
        }
        Some(CannotOpen) => "check that the directory exists and is readable/writable",
        Some(PermissionDenied) => "check the file's and directory's permissions",
        Some(SystemIoFailure) => "an I/O error occurred; check the disk",
        Some(DatabaseCorrupt | NotADatabase) => {
            "the file is damaged; keep a copy and start a new database file"
        }
        Some(ConstraintViolation) => {
            "a write broke the schema's rules; this is an edgebench bug, please report it"
        }
        _ => "if this persists, keep a copy of the file and report it",
    }
}

/// Wraps a SQLite failure on the file at `path` with advice for the user.
pub(crate) fn sql_err(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |error| StoreError::Sqlite {
        path: path.to_path_buf(),
        hint: hint(&error),
        error,
    }
}
