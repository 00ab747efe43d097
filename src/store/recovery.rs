//! A database deleted or replaced under a running sweep: SQLite keeps writing to the open file,
//! which no path names any more, so everything would vanish when the sweep ends. The store
//! notices (the path no longer names the file it opened) and copies the open file to a new one.

use std::path::PathBuf;

use rusqlite::MAIN_DB;

use super::check::FileIdentity;
use super::error::{hint, Result, StoreError};
use super::handle::Store;

impl Store {
    /// Fails with [`StoreError::Lost`] when the path no longer names the file this store has
    /// open (deleted, or another file moved in its place).
    pub(crate) fn check_still_at_path(&self) -> Result<()> {
        let Some(opened) = self.identity else {
            return Ok(());
        };
        let how = match FileIdentity::of(&self.path) {
            Some(now) if now == opened => return Ok(()),
            Some(_) => "replaced by another file",
            None => "deleted",
        };
        Err(StoreError::Lost {
            path: self.path.clone(),
            how,
        })
    }

    /// Copies everything in the open file (committed rows, the WAL's included) to a new file
    /// beside the path, or in the temporary folder when the path's folder is gone too; returns
    /// the copy's path.
    pub(crate) fn write_recovery_copy(&self) -> Result<PathBuf> {
        let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
            .to_string()
            .replace([':', '-'], "");
        let name = format!(
            "{}.recovered-{stamp}",
            self.path
                .file_name()
                .map_or("edgebench.db".into(), |n| n.to_string_lossy())
        );
        let mut failure = None;
        for dest in [
            self.path.with_file_name(&name),
            std::env::temp_dir().join(&name),
        ] {
            if dest.exists() {
                continue;
            }
            match self.conn.backup(MAIN_DB, &dest, None) {
                Ok(()) => return Ok(dest),
                Err(source) => failure = Some((dest, source)),
            }
        }
        let (path, source) = failure.unwrap_or_else(|| {
            (
                self.path.with_file_name(&name),
                rusqlite::Error::InvalidPath(name.clone().into()),
            )
        });
        Err(StoreError::Sqlite {
            path,
            hint: hint(&source),
            error: source,
        })
    }
}
