//! The [`Store`] handle: opening a database (checked, migrated) for writing or for reading,
//! and what every read and write shares.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::check::{
    beside, check_not_newer, check_readable_version, check_writable, inspect, open_read_connection,
    precheck, quick_check, user_version, FileIdentity, Precheck, BUSY_TIMEOUT,
};
use super::error::{sql_err, Result, StoreError};
use super::lock::lock_path;
use super::migrate::migrate;
use super::schema::SCHEMA_VERSION;

/// Handle on one edgebench database file.
pub struct Store {
    pub(super) conn: Connection,
    pub(super) path: PathBuf,
    /// The file the path named when it was opened (see `Store::check_still_at_path`).
    pub(super) identity: Option<FileIdentity>,
    /// Unreadable rows already reported (see `Store::each_row`), so each is reported once.
    pub(super) reported: std::cell::RefCell<std::collections::HashSet<String>>,
    /// A reader that found no `-wal` or `-shm` beside the file and so created them (see
    /// `Drop`).
    tidy_sidecars: bool,
}

impl Drop for Store {
    /// A read-only connection cannot remove the `-wal` and `-shm` its first read created, so a
    /// reader that found none leaves the file as it found it: a writing connection (when the
    /// file may be written) reads once and closes; as the last connection, SQLite checkpoints
    /// and removes both, and with another connection open it leaves them to that one.
    fn drop(&mut self) {
        if !self.tidy_sidecars {
            return;
        }
        // Close this connection first: a writing one is only the last if this is gone.
        if let Ok(placeholder) = Connection::open_in_memory() {
            drop(std::mem::replace(&mut self.conn, placeholder));
        }
        let created = |suffix: &str| beside(&self.path, suffix).exists();
        if !(created("-wal") || created("-shm")) || FileIdentity::of(&self.path) != self.identity {
            return;
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if let Ok(conn) = Connection::open_with_flags(&self.path, flags) {
            let _ = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                r.get::<_, i64>(0)
            });
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (creating if absent) a database for writing and brings its schema up to date.
    ///
    /// A file that is not SQLite, is SQLite but not ours, has a newer schema, is damaged, or
    /// cannot be written (nor the files SQLite keeps beside it created) is refused before
    /// anything is written to it or created beside it.
    pub fn open(path: &Path) -> Result<Store> {
        let path = path.to_path_buf();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|error| StoreError::Io {
                path: path.clone(),
                error,
            })?;
        }
        // Refused files get no -wal and -shm beside them.
        let prechecked = precheck(&path)?;
        check_writable(&path, &[beside(&path, "-wal"), beside(&path, "-shm")])?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(&path, flags).map_err(sql_err(&path))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_err(&path))?;

        // Inspect first: journal_mode=WAL rewrites the header, so it must not touch a
        // foreign file.
        let found = inspect(&conn, &path)?;
        check_not_newer(&path, found)?;
        if found > 0 && !matches!(prechecked, Precheck::Checked(_)) {
            // A write to a damaged file (even a `failed` run row) spreads the damage and
            // buries it; the whole-file check costs one read of the file, once per open.
            quick_check(&conn, &path)?;
        }

        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get("journal_mode"))
            .map_err(sql_err(&path))?;
        if !mode.eq_ignore_ascii_case("wal") {
            // E.g. some network file systems; still correct, only slower.
            tracing::warn!(path = %path.display(), mode, "could not enable WAL journal mode");
        }
        conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
            .map_err(sql_err(&path))?;
        migrate(&mut conn, &path, found)?;
        let store = Store::from_parts(conn, path);
        if found < SCHEMA_VERSION {
            // Keep the schema in the main file too; see `checkpoint`.
            store.checkpoint();
        }
        Ok(store)
    }

    /// Opens an existing database read-only (for `results`/`export`); never creates or
    /// upgrades it, and needs no write access to the file or its folder.
    ///
    /// Checks the whole file for damage (`PRAGMA quick_check`: one read of every page), so
    /// that no command shows part of a damaged file as if it were whole; a refused file gets
    /// no `-wal` or `-shm` beside it.
    pub fn open_readonly(path: &Path) -> Result<Store> {
        let path = path.to_path_buf();
        let prechecked = precheck(&path)?;
        if let Precheck::Checked(found) = prechecked {
            check_readable_version(&path, found)?;
        }
        let sidecars = beside(&path, "-wal").exists() || beside(&path, "-shm").exists();
        let conn = open_read_connection(&path)?;
        let found = inspect(&conn, &path)?;
        check_readable_version(&path, found)?;
        if !matches!(prechecked, Precheck::Checked(_)) {
            quick_check(&conn, &path)?;
        }
        conn.execute_batch("PRAGMA foreign_keys=ON;")
            .map_err(sql_err(&path))?;
        let mut store = Store::from_parts(conn, path);
        store.tidy_sidecars = !sidecars;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Schema version of the open file (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<u32> {
        user_version(&self.conn).map_err(sql_err(&self.path))
    }

    /// A handle on `conn`, remembering which file `path` names now.
    fn from_parts(conn: Connection, path: PathBuf) -> Store {
        let identity = FileIdentity::of(&path);
        Store {
            conn,
            path,
            identity,
            reported: Default::default(),
            tidy_sidecars: false,
        }
    }

    /// For a writer, before it creates anything beside `path` (such as the sweep lock):
    /// refuses, leaving no file behind, what [`Store::open`] would refuse: a file that is not
    /// an edgebench database, has a newer schema, is damaged (the whole file is read once), or
    /// cannot be written, nor its `-wal`, `-shm` and `.lock` created beside it. A missing file
    /// passes (the writer creates it). A file another connection has open (a `-wal` beside it)
    /// is only checked for writability here; [`Store::open`] checks the rest under SQLite's
    /// locks.
    pub fn check_existing(path: &Path) -> Result<()> {
        precheck(path)?;
        check_writable(
            path,
            &[beside(path, "-wal"), beside(path, "-shm"), lock_path(path)],
        )
    }

    /// Copies the WAL into the main file (best effort, never waits) so that a user who
    /// copies only `*.db` mid-sweep still gets every finished trial.
    pub(crate) fn checkpoint(&self) {
        let r = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                r.get::<_, i64>("busy")
            });
        if let Err(e) = r {
            tracing::debug!(path = %self.path.display(), error = %e, "WAL checkpoint skipped");
        }
    }

    /// [`StoreError::NotFound`] unless exactly one row of `what` changed.
    pub(super) fn expect_one(&self, changed: usize, what: &'static str, id: i64) -> Result<()> {
        if changed == 1 {
            Ok(())
        } else {
            Err(StoreError::NotFound {
                path: self.path.clone(),
                what,
                id,
            })
        }
    }
}
