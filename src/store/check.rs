//! Looking at an existing database before anything is created beside it.
//!
//! SQLite creates `<file>-wal` and `<file>-shm` on the first read of a WAL database, even
//! through a read-only connection (which then cannot remove them), and a sweep creates
//! `<file>.lock`. A file that is refused (damaged, not ours, newer, not writable) must be left
//! as it was found, so it is first read through an `immutable` connection, which creates and
//! locks nothing. That is only sound while nobody writes the file, so it is done only when no
//! `-wal` or `-journal` says another connection has it open, and a refusal counts only if the
//! file is still as it was before the look; otherwise the ordinary, locking connection decides.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension};

use super::error::{sql_err, Result, StoreError};
use super::schema::{APPLICATION, SCHEMA_VERSION};

/// What an unlocked look at a database path found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Precheck {
    /// No file, or an empty one: nothing to read.
    Absent,
    /// Read whole (inspected and `quick_check`ed): a fresh SQLite file (0) or an edgebench one
    /// of this schema version or older.
    Checked(u32),
    /// Another connection may be writing it: only a locking connection reads it consistently.
    InUse,
}

/// Which file a path names: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileIdentity {
    dev: u64,
    ino: u64,
}

impl FileIdentity {
    pub(super) fn of(path: &Path) -> Option<FileIdentity> {
        std::fs::metadata(path).ok().map(|m| FileIdentity::from(&m))
    }
}

impl From<&std::fs::Metadata> for FileIdentity {
    fn from(m: &std::fs::Metadata) -> FileIdentity {
        FileIdentity {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// Whether `path` changed between two looks: its identity, size, times and sidecars.
#[derive(Debug, Clone, PartialEq)]
struct FileState {
    identity: FileIdentity,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    sidecars: [bool; 2],
}

impl FileState {
    fn of(path: &Path) -> Option<FileState> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileState {
            identity: FileIdentity::from(&m),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            sidecars: ["-wal", "-journal"].map(|s| beside(path, s).exists()),
        })
    }

    fn in_use(&self) -> bool {
        self.sidecars.contains(&true)
    }
}

/// `path` with `suffix` appended to its file name (`x.db` -> `x.db-wal`).
pub(super) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// Reads an existing database without creating, locking or changing anything: refuses what
/// `Store::open` would refuse as not ours, newer or damaged (the whole file is checked).
pub(super) fn precheck(path: &Path) -> Result<Precheck> {
    let Some(before) = FileState::of(path) else {
        return Ok(Precheck::Absent);
    };
    if before.len == 0 {
        return Ok(Precheck::Absent);
    }
    if before.in_use() {
        return Ok(Precheck::InUse);
    }
    // A sweep looks before it takes its lock and again when it opens the file: one read of a
    // large file is enough while nothing has changed it.
    let mut last = LAST_READ.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, _, found)) = last
        .as_ref()
        .filter(|(p, state, _)| p == path && *state == before)
    {
        return Ok(Precheck::Checked(*found));
    }
    let verdict = (|| {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn =
            Connection::open_with_flags(immutable_uri(path), flags).map_err(sql_err(path))?;
        let found = inspect(&conn, path)?;
        check_not_newer(path, found)?;
        if found > 0 {
            quick_check(&conn, path)?;
        }
        Ok(found)
    })();
    // A writer that came meanwhile may have changed pages under the immutable reader, which
    // would then see damage that is not there.
    if FileState::of(path).as_ref() != Some(&before) {
        return Ok(Precheck::InUse);
    }
    let found = verdict?;
    *last = Some((path.to_path_buf(), before, found));
    Ok(Precheck::Checked(found))
}

/// The last file [`precheck`] read whole and found sound, as it was then, with its version.
static LAST_READ: std::sync::Mutex<Option<(PathBuf, FileState, u32)>> = std::sync::Mutex::new(None);

/// Refuses, before anything is created, a database this process could not write: the file,
/// those of `sidecars` that exist, and its folder when one of them is still to be created
/// there. As faccessat(2) says: root passes permission bits, not a read-only mount or an
/// immutable file.
pub(super) fn check_writable(path: &Path, sidecars: &[PathBuf]) -> Result<()> {
    let refused = |reason: String| StoreError::NotWritable {
        path: path.to_path_buf(),
        reason,
    };
    let mut to_create = false;
    for file in std::iter::once(path).chain(sidecars.iter().map(PathBuf::as_path)) {
        match writable(file, libc::W_OK) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => to_create = true,
            Err(e) if file == path => return Err(refused(reason(&e))),
            Err(e) => return Err(refused(format!("{}: {}", file.display(), reason(&e)))),
        }
    }
    if to_create {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        match writable(dir, libc::W_OK | libc::X_OK) {
            // A missing folder is created by the opener, which reports its own failure.
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(refused(format!(
                    "no file can be created in its folder {}: {}",
                    dir.display(),
                    reason(&e)
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// An OS error in words, without std's "(os error N)".
fn reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EROFS) => "read-only file system".into(),
        Some(libc::EACCES) => "permission denied".into(),
        Some(libc::EPERM) => "operation not permitted (is it immutable?)".into(),
        _ => e.to_string(),
    }
}

/// faccessat(2) with the effective user and group, as an open would check.
fn writable(path: &Path, mode: libc::c_int) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call, which only reads it.
    let r = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), mode, libc::AT_EACCESS) };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// How long a writer waits for another process's lock (e.g. `edgebench results` reading
/// while a run is writing) before giving up.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get("user_version"))?;
    // user_version is a signed 32-bit field; a negative one is certainly not ours.
    Ok(u32::try_from(v).unwrap_or(u32::MAX))
}

/// `PRAGMA quick_check` of the whole file (one read of every page). A damaged file is
/// [`StoreError::Corrupt`], naming what SQLite found.
pub(super) fn quick_check(conn: &Connection, path: &Path) -> Result<()> {
    let corrupt = |detail: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let found = conn
        .prepare("PRAGMA quick_check")
        .and_then(|mut st| {
            st.query_map([], |r| r.get::<_, String>("quick_check"))?
                .take(3)
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .map_err(|e| match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => corrupt(e.to_string()),
            _ => sql_err(path)(e),
        })?;
    match found.as_slice() {
        [ok] if ok == "ok" => Ok(()),
        [] => Err(corrupt("quick_check returned nothing".into())),
        problems => Err(corrupt(problems.join("; "))),
    }
}

/// Opens an existing file for reading without needing write access to it or its folder.
///
/// A WAL database is read through its `-shm` index, which a reader normally creates. Where
/// it cannot (read-only folder or mount) and no `-wal` file holds rows outside the main file,
/// the main file is the whole database and is opened `immutable` (no `-shm`, no locks);
/// with a `-wal` present that would hide its rows, so that case is refused with what to do.
pub(crate) fn open_read_connection(path: &Path) -> Result<Connection> {
    if !path.is_file() {
        return Err(StoreError::Missing {
            path: path.to_path_buf(),
        });
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(sql_err(path))?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_err(path))?;
    // The -shm is opened lazily, on the first read.
    let probe = conn.query_row("SELECT count(*) AS objects FROM sqlite_master", [], |r| {
        r.get::<_, i64>("objects")
    });
    let needs_write = |e: &rusqlite::Error| {
        matches!(
            e.sqlite_error_code(),
            Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly | ErrorCode::PermissionDenied)
        )
    };
    match probe {
        Err(e) if needs_write(&e) => {
            drop(conn);
            let mut wal = path.as_os_str().to_owned();
            wal.push("-wal");
            if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
                return Err(StoreError::WalUnreadable {
                    path: path.to_path_buf(),
                });
            }
            let flags = flags | OpenFlags::SQLITE_OPEN_URI;
            let conn =
                Connection::open_with_flags(immutable_uri(path), flags).map_err(sql_err(path))?;
            Ok(conn)
        }
        // Anything else (not SQLite, damaged) is for `inspect` to name.
        _ => Ok(conn),
    }
}

/// `file:` URI of `path` with `immutable=1`; every byte outside the URI-safe set is
/// percent-encoded, so `?`, `#` and `%` in a file name stay part of the name.
pub(super) fn immutable_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut uri = String::from("file:");
    for &b in absolute.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// What `Store::open_readonly` can read: an edgebench file of exactly this schema version.
pub(super) fn check_readable_version(path: &Path, found: u32) -> Result<()> {
    if found == 0 {
        return Err(empty_database(path));
    }
    check_not_newer(path, found)?;
    if found < SCHEMA_VERSION {
        return Err(StoreError::NeedsUpgrade {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// A reader was given a database no run has written to yet.
pub(super) fn empty_database(path: &Path) -> StoreError {
    StoreError::Foreign {
        path: path.to_path_buf(),
        reason: "it is empty; no edgebench run has written to it yet".into(),
    }
}

pub(super) fn check_not_newer(path: &Path, found: u32) -> Result<()> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Decides, by reading only, whether the file is a fresh database (returns 0) or an edgebench
/// one (returns its schema version); anything else is an error.
pub(super) fn inspect(conn: &Connection, path: &Path) -> Result<u32> {
    let not_sqlite = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => StoreError::NotSqlite {
            path: path.to_path_buf(),
        },
        Some(ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
        _ => sql_err(path)(e),
    };
    let foreign = |reason: &str| StoreError::Foreign {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let version = user_version(conn).map_err(not_sqlite)?;
    let objects: i64 = conn
        .query_row("SELECT count(*) AS objects FROM sqlite_master", [], |r| {
            r.get("objects")
        })
        .map_err(not_sqlite)?;
    if objects == 0 {
        return if version == 0 {
            Ok(0)
        } else {
            Err(foreign("it has a user_version but no tables"))
        };
    }
    let has_meta: bool = conn
        .query_row(
            "SELECT count(*) > 0 AS has_meta FROM sqlite_master \
             WHERE type = 'table' AND name = 'meta'",
            [],
            |r| r.get("has_meta"),
        )
        .map_err(not_sqlite)?;
    if !has_meta {
        return Err(foreign("it has tables but no `meta` table"));
    }
    // A foreign `meta` table may have other columns; that is "not ours", not an I/O error.
    let app: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'application'",
            [],
            |r| r.get("value"),
        )
        .optional()
        .map_err(|e| match e.sqlite_error_code() {
            // Damage to the table's pages is not a different application's table.
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Corrupt {
                path: path.to_path_buf(),
                detail: format!("its `meta` table cannot be read: {e}"),
            },
            _ => foreign("its `meta` table is not edgebench's"),
        })?;
    match app.as_deref() {
        Some(APPLICATION) => {}
        Some(other) => {
            return Err(foreign(&format!(
                "its meta table says application = {other:?}"
            )))
        }
        None => return Err(foreign("its `meta` table has no application row")),
    }
    if version == 0 {
        return Err(foreign(
            "it has an edgebench meta row but schema version 0; it looks damaged",
        ));
    }
    Ok(version)
}
