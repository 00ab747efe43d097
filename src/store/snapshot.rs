//! `edgebench snapshot`: a consistent single-file copy of a database that may be in use.
//!
//! Copying `edgebench.db` with `cp` mid-sweep misses what still sits in `-wal` and can catch a
//! page half-written. SQLite's online backup API copies every page inside one read
//! transaction, so the copy is the database as of one commit; in WAL mode that read does not
//! block the writer.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::Connection;

use super::check::{
    check_not_newer, empty_database, inspect, open_read_connection, precheck, Precheck,
    BUSY_TIMEOUT,
};
use super::error::{hint, sql_err, Result, StoreError};

/// Opens `path` read-only and checks it is an edgebench database of a version this binary
/// understands (older is fine: it is copied as it is). Returns the connection and version.
/// A refused file gets no `-wal` or `-shm` beside it.
pub(super) fn open_source(path: &Path) -> Result<(Connection, u32)> {
    if let Precheck::Checked(0) = precheck(path)? {
        return Err(empty_database(path));
    }
    let conn = open_read_connection(path)?;
    let found = inspect(&conn, path)?;
    if found == 0 {
        return Err(empty_database(path));
    }
    check_not_newer(path, found)?;
    Ok((conn, found))
}

/// Copies `src` (an edgebench database, possibly being written by another process) to `out`,
/// which must not exist. The copy is written next to `out` under a temporary name, checked
/// with `PRAGMA integrity_check`, switched to a rollback journal (one self-contained file) and
/// renamed into place, so `out` is either absent or complete. Returns the schema version.
pub fn snapshot(src: &Path, out: &Path) -> Result<u32> {
    if out.exists() {
        return Err(StoreError::Exists {
            path: out.to_path_buf(),
        });
    }
    let (conn, version) = open_source(src)?;
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|error| StoreError::Io {
        path: out.to_path_buf(),
        error,
    })?;
    let tmp = tempfile::Builder::new()
        .prefix(".edgebench-snapshot-")
        .suffix(".db")
        .tempfile_in(dir)
        .map_err(|error| StoreError::Io {
            path: out.to_path_buf(),
            error,
        })?
        .into_temp_path();
    backup_into(&conn, src, &tmp)?;
    tmp.persist_noclobber(out).map_err(|e| StoreError::Io {
        path: out.to_path_buf(),
        error: e.error,
    })?;
    Ok(version)
}

/// Backs `conn` up into the file `dst` (replacing its contents) and leaves `dst` in rollback
/// journal mode, checked.
pub(super) fn backup_into(conn: &Connection, src: &Path, dst: &Path) -> Result<()> {
    let mut out = Connection::open(dst).map_err(sql_err(dst))?;
    {
        let backup = Backup::new(conn, &mut out).map_err(sql_err(dst))?;
        // All pages in one step = one read transaction on the source: a consistent copy.
        // Copying in slices would restart whenever the writer commits, possibly forever.
        let deadline = Instant::now() + BUSY_TIMEOUT;
        loop {
            match backup.step(-1).map_err(sql_err(src))? {
                StepResult::Done => break,
                StepResult::More | StepResult::Busy | StepResult::Locked
                    if Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    return Err(StoreError::Sqlite {
                        path: src.to_path_buf(),
                        error: rusqlite::Error::SqliteFailure(
                            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                            Some("backup did not complete".into()),
                        ),
                        hint: hint(&rusqlite::Error::SqliteFailure(
                            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                            None,
                        )),
                    })
                }
            }
        }
    }
    let mode: String = out
        .query_row("PRAGMA journal_mode=DELETE", [], |r| r.get("journal_mode"))
        .map_err(sql_err(dst))?;
    debug_assert!(mode.eq_ignore_ascii_case("delete"));
    let check: String = out
        .query_row("PRAGMA integrity_check", [], |r| r.get("integrity_check"))
        .map_err(sql_err(dst))?;
    if check != "ok" {
        // The backup copies pages as they are, so a damaged copy means a damaged source.
        return Err(StoreError::Corrupt {
            path: src.to_path_buf(),
            detail: format!("its copy fails the integrity check: {check}"),
        });
    }
    Ok(())
}
