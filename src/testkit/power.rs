//! Power monitors on the prepared trees of [`super::jetson`], resolved as a sweep resolves them.

use super::jetson::host;
use std::path::Path;

/// [`crate::power::PowerMonitor::for_run`] on the sysfs tree at `sys`, on the board `cfg`
/// forces or the tree detects as (as a sweep resolves it).
pub(crate) fn for_run(
    sys: &Path,
    cfg: &crate::config::PowerConfig,
) -> anyhow::Result<crate::power::PowerMonitor> {
    let host = host(sys);
    let board = crate::board::select(&host, cfg.board.as_deref())?;
    crate::power::PowerMonitor::for_run(&host, cfg, board)
}
