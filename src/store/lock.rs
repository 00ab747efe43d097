//! One sweep at a time per database: an exclusive OS file lock (std's `File::try_lock`, a
//! `flock(2)` on Linux) on `<db>.lock`, held for the whole sweep by `edgebench run` and by each
//! sweep of `edgebench daemon`. The kernel releases
//! it when the holder's file closes, however the process ends (`kill -9` included), so a left
//! over lock file never blocks anyone; its text (pid and start time) only names the holder.
//! Readers (`results`, `report`, `snapshot`, `export`) never take it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a waiting sweep tries the lock again (and looks at its stop flag).
const WAIT_POLL: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "{db} is in use by another edgebench sweep ({holder}); only one sweep may write a \
         database at a time. Wait for it to end, or start this one with --wait to begin when \
         it does (lock file: {lock})",
        db = .db.display(),
        lock = .lock.display()
    )]
    Held {
        db: PathBuf,
        lock: PathBuf,
        /// "pid N, started T" as the holder wrote it.
        holder: String,
    },
    #[error("cannot take the sweep lock {}: {error}", .path.display())]
    Io {
        path: PathBuf,
        // Not a `source`: the message holds it.
        error: std::io::Error,
    },
}

/// The exclusive right to run a sweep into one database; released when dropped.
#[derive(Debug)]
pub struct SweepLock {
    // Held open for the lock's lifetime: closing it is what releases the flock.
    _file: File,
    path: PathBuf,
}

/// `edgebench.db` -> `edgebench.db.lock`, beside it.
pub(crate) fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    db.with_file_name(name)
}

impl SweepLock {
    /// Takes the lock for `db` now, or says who holds it.
    pub fn try_acquire(db: &Path) -> Result<SweepLock, LockError> {
        let path = lock_path(db);
        let io = |error| LockError::Io {
            path: path.clone(),
            error,
        };
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        // No truncation before the lock is ours: the text names the current holder.
        // std opens with O_CLOEXEC, so worker processes never inherit (and prolong) the lock.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::Held {
                    db: db.to_path_buf(),
                    lock: path.clone(),
                    holder: describe_holder(&text),
                });
            }
            Err(TryLockError::Error(err)) => return Err(io(err)),
        }
        let holder = format!(
            "pid {}\nstarted_at {}\n",
            std::process::id(),
            crate::clock::rfc3339(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0)
            )
        );
        file.set_len(0)
            .and_then(|_| file.rewind())
            .and_then(|_| file.write_all(holder.as_bytes()))
            .map_err(io)?;
        Ok(SweepLock { _file: file, path })
    }

    /// Takes the lock for `db`, waiting while another sweep holds it. `on_wait` is told who
    /// holds it, once. Returns None if `stop` was set while waiting.
    pub(crate) fn acquire_waiting(
        db: &Path,
        stop: &AtomicBool,
        on_wait: &mut dyn FnMut(&LockError),
    ) -> Result<Option<SweepLock>, LockError> {
        let mut told = false;
        loop {
            if stop.load(Ordering::SeqCst) {
                return Ok(None);
            }
            match SweepLock::try_acquire(db) {
                Ok(lock) => return Ok(Some(lock)),
                Err(held @ LockError::Held { .. }) => {
                    if !told {
                        on_wait(&held);
                        told = true;
                    }
                }
                Err(e) => return Err(e),
            }
            std::thread::sleep(WAIT_POLL);
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The lock file's "pid N / started_at T" lines, in words.
fn describe_holder(text: &str) -> String {
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
            .filter(|v| !v.is_empty())
    };
    match (field("pid "), field("started_at ")) {
        (Some(pid), Some(at)) => format!("pid {pid}, started {at}"),
        (Some(pid), None) => format!("pid {pid}"),
        // Taken an instant ago and not written yet.
        _ => "a process that has just started".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_file_sits_beside_the_database() {
        assert_eq!(
            lock_path(Path::new("/data/edgebench.db")),
            Path::new("/data/edgebench.db.lock")
        );
        assert_eq!(lock_path(Path::new("r.db")), Path::new("r.db.lock"));
    }

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_drops() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("sub/x.db");
        let first = SweepLock::try_acquire(&db).unwrap();
        let text = std::fs::read_to_string(first.path()).unwrap();
        assert!(
            text.starts_with(&format!("pid {}\nstarted_at 20", std::process::id())),
            "{text}"
        );
        // flock locks belong to the open file, so a second open in this process conflicts too.
        let err = SweepLock::try_acquire(&db).unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}, started 20", std::process::id()))
                && err.contains("--wait")
                && err.contains("x.db.lock"),
            "{err}"
        );
        drop(first);
        let again = acquire_soon(&db);

        // A waiter gives up when told to stop, and is told once who holds the lock.
        let stop = AtomicBool::new(false);
        let mut seen = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(600));
                stop.store(true, Ordering::SeqCst);
            });
            let got = SweepLock::acquire_waiting(&db, &stop, &mut |_| seen += 1).unwrap();
            assert!(got.is_none());
        });
        assert_eq!(seen, 1);
        drop(again);
        // Free again: a waiter gets it (within the moment a forked child may hold it, above).
        let (stop, done) = (AtomicBool::new(false), AtomicBool::new(false));
        std::thread::scope(|s| {
            s.spawn(|| {
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while !done.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                stop.store(true, Ordering::SeqCst);
            });
            let got = SweepLock::acquire_waiting(&db, &stop, &mut |_| {}).unwrap();
            done.store(true, Ordering::SeqCst);
            assert!(got.is_some(), "the lock was not released");
        });
    }

    /// The lock of `db`, which its holder has just dropped. A process another test forks at
    /// that moment holds a copy of the holder's open file, and so the flock, from its fork to
    /// its exec (O_CLOEXEC closes it only then): the lock is free a moment later, not at once.
    fn acquire_soon(db: &Path) -> SweepLock {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match SweepLock::try_acquire(db) {
                Ok(lock) => return lock,
                Err(LockError::Held { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}
