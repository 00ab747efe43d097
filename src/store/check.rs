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

use rusqlite::{Connection, OpenFlags};

use super::{
    check_not_newer, immutable_uri, inspect, lock::lock_path, quick_check, sql_err, Result, Store,
    StoreError,
};

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
/// [`Store::open`] would refuse as not ours, newer or damaged (the whole file is checked).
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

impl Store {
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
}
