//! `edgebench exec`: any command as a trial, measured like a sweep's.

use super::Outcome;
use crate::cli::ExecArgs;
use edgebench::host::HostPaths;

pub(crate) fn run(args: &ExecArgs, host: &HostPaths) -> Outcome {
    let (overrides, entry) = args.overrides();
    let section = toml::Value::try_from(edgebench::workloads::exec::ExecSection(vec![entry]))?;
    super::run::sweep(&args.sweep, overrides, host, |config| {
        config
            .sections
            .insert(edgebench::workloads::exec::KIND.to_string(), section);
    })
}
