//! Bringing a database up to [`SCHEMA_VERSION`](super::schema::SCHEMA_VERSION): the steps of
//! [`MIGRATIONS`] newer than the file, each with its version bookkeeping (`PRAGMA user_version`
//! and `meta`).

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::check::{check_not_newer, user_version};
use super::error::{Result, StoreError};
use super::schema::MIGRATIONS;

/// Applies every migration newer than `found`, each in its own IMMEDIATE transaction.
pub(super) fn migrate(conn: &mut Connection, path: &Path, found: u32) -> Result<()> {
    for m in MIGRATIONS.iter().filter(|m| m.version > found) {
        let mig_err = |error| StoreError::Migration {
            path: path.to_path_buf(),
            version: m.version,
            error,
        };
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(mig_err)?;
        // Re-read under the write lock: another process may have migrated meanwhile.
        let current = user_version(&tx).map_err(mig_err)?;
        check_not_newer(path, current)?;
        if current >= m.version {
            continue;
        }
        tx.execute_batch(m.sql).map_err(mig_err)?;
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [m.version.to_string()],
        )
        .map_err(mig_err)?;
        tx.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('created_with', ?1)",
            [env!("CARGO_PKG_VERSION")],
        )
        .map_err(mig_err)?;
        tx.pragma_update(None, "user_version", m.version)
            .map_err(mig_err)?;
        tx.commit().map_err(mig_err)?;
        tracing::debug!(path = %path.display(), version = m.version, "applied schema migration");
    }
    Ok(())
}
