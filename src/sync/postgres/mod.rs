//! The fleet's central PostgreSQL: `edgebench push` copies every final trial the server lacks
//! ([`push`]), `edgebench fetch` brings a selection back into a local database ([`fetch`]).
//! The server holds the schema `edgebench` ([`schema`]: tables mirroring the SQLite ones with
//! server ids, and the views `trial_summary`, `board_workload_summary`, `gpu_cpu_speedup`).
//! `edgebench fleet` creates the schema, retires a board and prunes old power samples
//! ([`fleet`]). [`connect`] reads URLs, the environment and the password file the way libpq does.

mod connect;
mod fetch;
mod fleet;
mod push;
mod schema;
mod tables;

pub use connect::{mask_url, process_env, short_target, BadUrl, ConnInfo, Env};
pub use connect::{SslMode, Target};
pub use fetch::FetchReport;
pub use fetch::{fetch, FetchRequest};
pub use fleet::RetireReport;
pub use fleet::MAX_RETENTION_DAYS;
pub use fleet::{init, prune_power, retire};
pub use push::PushReport;
pub use push::{backlog, push, push_with_env};
pub use schema::SERVER_SCHEMA_VERSION;
