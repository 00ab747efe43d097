//! The parent's side of the worker protocol: how a worker process is started, and what its
//! last message and exit status make of the trial.

use crate::store::TrialStatus;
use crate::worker::WorkerMessage;
use anyhow::Context;
use std::process::{Command, Stdio};

/// How the worker process ended, as far as the parent saw it.
pub(super) struct WorkerEnd {
    pub last: Option<WorkerMessage>,
    pub status: Option<std::process::ExitStatus>,
    pub oom_kills: u64,
}

/// Turns what the worker said and how it exited into (status, error).
pub(super) fn classify(end: &WorkerEnd) -> (TrialStatus, Option<String>) {
    use std::os::unix::process::ExitStatusExt;
    match &end.last {
        Some(WorkerMessage::Done { stopped: false }) => (TrialStatus::Ok, None),
        Some(WorkerMessage::Done { stopped: true }) => (TrialStatus::Interrupted, None),
        Some(WorkerMessage::Failed { error }) => (TrialStatus::Failed, Some(error.clone())),
        _ => match end.status.and_then(|s| s.signal()) {
            // SIGKILL alone could be anyone; the kernel's oom_kill counter says it was the OOM killer.
            Some(libc::SIGKILL) if end.oom_kills > 0 => (
                TrialStatus::Oom,
                Some("killed by the kernel OOM killer (SIGKILL; oom_kill counter rose): the trial does not fit memory".into()),
            ),
            Some(sig) => (TrialStatus::Crashed, Some(format!("worker died of {}", crate::host::signal_name(sig)))),
            None => (
                TrialStatus::Crashed,
                Some(match end.status.and_then(|s| s.code()) {
                    Some(code) => format!("worker exited with code {code} without reporting an end"),
                    None => "worker ended without reporting".into(),
                }),
            ),
        },
    }
}

/// The `edgebench worker` command; `threads` (0 = all cores) becomes its RAYON_NUM_THREADS,
/// read by candle, gemm and rayon when their pools start in the worker.
pub(super) fn worker_command(threads: usize) -> anyhow::Result<Command> {
    let exe = std::env::current_exe()
        .context("cannot find the edgebench executable to start a worker")?;
    // EDGEBENCH_WORKER_PREFIX puts a command in front of the worker, e.g. `taskset -c 2-5` to
    // keep it on one CPU cluster, or `qemu-aarch64 -L /usr/aarch64-linux-gnu` to run a cross
    // build under emulation. It must exec the worker in its own process (the pid is watched).
    let prefix = std::env::var("EDGEBENCH_WORKER_PREFIX").unwrap_or_default();
    let mut words = prefix.split_whitespace();
    let mut cmd = match words.next() {
        Some(program) => {
            let mut cmd = Command::new(program);
            cmd.args(words).arg(exe);
            cmd
        }
        None => Command::new(exe),
    };
    // The worker compares this with its parent pid at start: a parent that died before the
    // worker asked to die with it has left an orphan that must not train.
    if threads > 0 {
        cmd.env("RAYON_NUM_THREADS", threads.to_string());
        // What an exec trial's command (PyTorch, TensorFlow, OpenBLAS) sizes its pool by.
        cmd.env("OMP_NUM_THREADS", threads.to_string());
    }
    cmd.arg("worker")
        .env(
            crate::worker::PARENT_PID_ENV,
            std::process::id().to_string(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(cmd: &Command, name: &str) -> Option<String> {
        cmd.get_envs()
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()))
    }

    #[test]
    fn configured_threads_reach_the_worker_and_zero_leaves_the_default() {
        let cmd = worker_command(3).unwrap();
        assert_eq!(env_of(&cmd, "RAYON_NUM_THREADS").as_deref(), Some("3"));
        assert_eq!(env_of(&cmd, "OMP_NUM_THREADS").as_deref(), Some("3"));
        assert_eq!(
            env_of(&cmd, crate::worker::PARENT_PID_ENV),
            Some(std::process::id().to_string())
        );
        assert_eq!(
            env_of(&worker_command(0).unwrap(), "RAYON_NUM_THREADS"),
            None
        );
    }
}
