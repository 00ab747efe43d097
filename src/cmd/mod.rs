//! One file per command: each `run` does its command's work and returns the exit code, or a
//! [`Failure`] carrying the code it deserves. `main` parses and dispatches.
//! Exit codes: 0 done; 1 runtime error; 2 bad config, flags or input, refused before any
//! training; 3 the sweep finished but some trials failed (or a merge left something out);
//! 130 interrupted.

pub(crate) mod bench_sgemm;
pub(crate) mod exec;
pub(crate) mod export;
pub(crate) mod fetch;
pub(crate) mod fleet;
pub(crate) mod import;
pub(crate) mod merge;
pub(crate) mod models;
pub(crate) mod peaks;
pub(crate) mod profile;
pub(crate) mod provenance;
pub(crate) mod pull;
pub(crate) mod push;
pub(crate) mod report;
pub(crate) mod results;
pub(crate) mod run;
pub(crate) mod sensors;
pub(crate) mod snapshot;

use edgebench::config::ConfigError;
use edgebench::{store, sync};

/// An error with the exit code it deserves.
pub(crate) struct Failure {
    pub code: i32,
    pub error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        let error = e.into();
        let code = if error.downcast_ref::<ConfigError>().is_some()
            || error.downcast_ref::<sync::postgres::BadUrl>().is_some()
        {
            2
        } else {
            1
        };
        Failure { code, error }
    }
}

/// What a command returns: its exit code, or the failure that ended it.
pub(crate) type Outcome = Result<i32, Failure>;

/// Bad flags or input: exit 2.
pub(crate) fn usage(error: anyhow::Error) -> Failure {
    Failure { code: 2, error }
}

/// Store errors that mean "wrong file given" exit 2, like other bad input.
pub(crate) fn input(e: store::StoreError) -> Failure {
    Failure {
        code: if e.is_bad_input() { 2 } else { 1 },
        error: e.into(),
    }
}
