//! The fleet's central PostgreSQL: `edgebench push` copies every final trial the server lacks
//! ([`push`]), `edgebench fetch` brings a selection back into a local database ([`fetch`]).
//! The server holds the schema `edgebench` ([`schema`]: tables mirroring the SQLite ones with
//! server ids, and the views `trial_summary`, `board_workload_summary`, `gpu_cpu_speedup`).
//! [`connect`] reads URLs, the environment and the password file the way libpq does.

mod connect;
mod fetch;
mod push;
mod schema;
mod tables;

pub use connect::{
    mask_url, pgpass_lookup, process_env, short_target, url_has_password, BadUrl, ConnInfo, Env,
    SslMode, Target,
};
pub use fetch::{fetch, fetch_with_env, FetchReport, FetchRequest};
pub use push::{backlog, push, push_with_env, PushReport};
pub use schema::SERVER_SCHEMA_VERSION;
