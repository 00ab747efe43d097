//! `edgebench exec`: any command as a trial, measured like a sweep's.

use super::Outcome;
use crate::cli::ExecArgs;
use edgebench::host::HostPaths;

pub(crate) fn run(args: &ExecArgs, host: &HostPaths) -> Outcome {
    super::run::sweep(&args.sweep, args.overrides(), host)
}
