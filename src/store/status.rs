//! How a trial ended, as stored in `trials.status` and printed by `results`.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialStatus {
    /// Started and not ended yet (or its process died: the next sweep marks it `interrupted`).
    #[default]
    Running,
    /// Every planned iteration ran.
    Ok,
    /// The workload reported an error (or a panic), or an external command failed.
    Failed,
    /// Killed by the kernel's OOM killer.
    Oom,
    /// The worker died of a signal or exited without reporting an end.
    Crashed,
    /// Stopped by SIGINT/SIGTERM; a resumed sweep runs it again.
    Interrupted,
    /// Predicted not to fit RAM + swap; not run.
    SkippedMemory,
}

impl TrialStatus {
    pub const ALL: [TrialStatus; 7] = [
        TrialStatus::Running,
        TrialStatus::Ok,
        TrialStatus::Failed,
        TrialStatus::Oom,
        TrialStatus::Crashed,
        TrialStatus::Interrupted,
        TrialStatus::SkippedMemory,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TrialStatus::Running => "running",
            TrialStatus::Ok => "ok",
            TrialStatus::Failed => "failed",
            TrialStatus::Oom => "oom",
            TrialStatus::Crashed => "crashed",
            TrialStatus::Interrupted => "interrupted",
            TrialStatus::SkippedMemory => "skipped_memory",
        }
    }

    pub fn parse(s: &str) -> Option<TrialStatus> {
        TrialStatus::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// Ended without a result: what `--retry-failed` reruns.
    pub(crate) fn is_failure(self) -> bool {
        matches!(
            self,
            TrialStatus::Failed
                | TrialStatus::Oom
                | TrialStatus::Crashed
                | TrialStatus::SkippedMemory
        )
    }

    /// Counts toward a run's "some trials failed" exit code.
    pub(crate) fn counts_as_failed(self) -> bool {
        matches!(
            self,
            TrialStatus::Failed | TrialStatus::Oom | TrialStatus::Crashed
        )
    }

    /// Statuses that count as done for resume: `ok` always; the trials memory or a crash
    /// ended, and failures, unless `--retry-failed`. `interrupted` never: it is run again.
    pub fn done_for_resume(retry_failed: bool) -> &'static [TrialStatus] {
        if retry_failed {
            &[TrialStatus::Ok]
        } else {
            &[
                TrialStatus::Ok,
                TrialStatus::Oom,
                TrialStatus::Crashed,
                TrialStatus::SkippedMemory,
                TrialStatus::Failed,
            ]
        }
    }
}

impl std::fmt::Display for TrialStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with the stored text, e.g. `status == "ok"`.
impl PartialEq<&str> for TrialStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl ToSql for TrialStatus {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for TrialStatus {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let text = value.as_str()?;
        TrialStatus::parse(text).ok_or_else(|| {
            FromSqlError::Other(
                format!(
                    "unknown trial status '{text}' (known: {}); the file was written by \
                     another program or a newer edgebench",
                    TrialStatus::ALL.map(TrialStatus::as_str).join(", ")
                )
                .into(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::TrialStatus;

    #[test]
    fn names_round_trip_and_match_serde() {
        for s in TrialStatus::ALL {
            assert_eq!(TrialStatus::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert_eq!(TrialStatus::parse("done"), None);
    }

    #[test]
    fn resume_reruns_interrupted_always_and_failures_on_request() {
        assert!(!TrialStatus::done_for_resume(false).contains(&TrialStatus::Interrupted));
        assert!(TrialStatus::done_for_resume(false).contains(&TrialStatus::Failed));
        assert_eq!(TrialStatus::done_for_resume(true), &[TrialStatus::Ok]);
    }
}
