//! The server's `edgebench` schema: versioned migrations embedded in the binary, applied by
//! `push` when the server is older, refused when it is newer than this binary knows.

use anyhow::{bail, Context};

use super::connect::describe;

/// One server schema step: applying `sql` to a server at `version - 1` yields `version`.
pub(super) struct Migration {
    pub version: i32,
    pub sql: &'static str,
}

/// Ordered; a released step is never edited.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sql: include_str!("migrations/0001_initial.sql"),
    },
    Migration {
        version: 2,
        sql: include_str!("migrations/0002_board_hosts.sql"),
    },
    Migration {
        version: 3,
        sql: include_str!("migrations/0003_trial_items.sql"),
    },
];

/// The server schema version this binary writes and reads.
pub const SERVER_SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// Serializes schema changes of concurrent first pushes (any constant shared by all boards).
const MIGRATION_LOCK: i64 = 0x6564_6765_6265_6e63;

/// The server's schema version (0: none yet).
pub(crate) fn server_version(client: &mut impl postgres::GenericClient) -> anyhow::Result<i32> {
    // pg_tables, not to_regclass: a fresh MVCC snapshot per statement sees a schema another
    // pusher committed while this one waited for the migration lock.
    let exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables \
             WHERE schemaname = 'edgebench' AND tablename = 'schema_version')",
            &[],
        )
        .map_err(|e| anyhow::anyhow!("reading the server's schema: {}", describe(&e)))?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let v: Option<i32> = client
        .query_one("SELECT max(version) FROM edgebench.schema_version", &[])
        .map_err(|e| {
            anyhow::anyhow!(
                "reading edgebench.schema_version: {}; the board's role needs SELECT on it",
                describe(&e)
            )
        })?
        .get(0);
    Ok(v.unwrap_or(0))
}

fn refuse_newer(found: i32) -> anyhow::Result<()> {
    if found > SERVER_SCHEMA_VERSION {
        bail!(
            "the server's edgebench schema is v{found}, this edgebench knows up to \
             v{SERVER_SCHEMA_VERSION}: upgrade edgebench on this board"
        );
    }
    Ok(())
}

/// Brings the server's schema up to [`SERVER_SCHEMA_VERSION`] (creating it on an empty
/// database), under a transaction-scoped advisory lock so that boards pushing for the first
/// time at once apply each step once. A newer server is refused.
pub(crate) fn ensure(client: &mut postgres::Client) -> anyhow::Result<()> {
    // Fast path without the lock: the usual case, and the only one a board role that may not
    // create tables reaches.
    let found = server_version(client)?;
    refuse_newer(found)?;
    if found == SERVER_SCHEMA_VERSION {
        return Ok(());
    }
    let mut tx = client
        .transaction()
        .context("starting the schema transaction")?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(|e| anyhow::anyhow!("schema lock: {}", describe(&e)))?;
    let found = server_version(&mut tx)?;
    refuse_newer(found)?;
    for m in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.batch_execute(m.sql).map_err(|e| {
            anyhow::anyhow!(
                "creating the server's edgebench schema v{}: {}; run `edgebench fleet init` as \
                 the database owner (see docs/fleet.md)",
                m.version,
                describe(&e)
            )
        })?;
        tx.execute(
            "INSERT INTO edgebench.schema_version (version, edgebench_version) VALUES ($1, $2)",
            &[&m.version, &env!("CARGO_PKG_VERSION")],
        )
        .map_err(|e| anyhow::anyhow!("recording the schema version: {}", describe(&e)))?;
    }
    tx.commit()
        .map_err(|e| anyhow::anyhow!("committing the schema: {}", describe(&e)))?;
    Ok(())
}

/// For readers (`fetch`): the server must hold this binary's schema.
pub(crate) fn check_readable(client: &mut postgres::Client) -> anyhow::Result<()> {
    let found = server_version(client)?;
    refuse_newer(found)?;
    if found < SERVER_SCHEMA_VERSION {
        bail!(
            "the server holds no edgebench schema v{SERVER_SCHEMA_VERSION} (found v{found}); \
             run `edgebench fleet init URL` as the database owner first"
        );
    }
    Ok(())
}
