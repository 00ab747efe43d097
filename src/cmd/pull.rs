//! `edgebench pull`: a board's database snapshotted over ssh, copied here and merged.

use super::Outcome;
use edgebench::sync;

pub(crate) fn run(request: &sync::PullRequest<'_>) -> Outcome {
    let r = sync::pull(request)?;
    Ok(super::merge::print(&r, request.into))
}
