//! Results leave the board: `edgebench pull` copies a board's database over ssh ([`pull`]),
//! `edgebench push`/`fetch` and the daemon's `[sync]` copy trials to and from a central
//! PostgreSQL ([`postgres`]).

pub mod postgres;
mod pull;

pub use pull::{pull, PullRequest};
