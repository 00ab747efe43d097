//! The worker: the child process that trains one trial (`edgebench worker`, hidden). It reads
//! its job as one JSON line on stdin and answers with JSON lines on stdout, one per iteration
//! and a last one saying how it ended. An OOM kill, an abort or a panic costs this process and
//! this trial only; the parent already holds every iteration reported.

use crate::record::{IterationRecord, TrialEnd};
use crate::workloads::Job;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What the worker says on stdout, one JSON object per line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum WorkerMessage {
    Iteration(IterationRecord),
    /// The workload's own account of how the trial ended (a command's end and the tails of
    /// its output), before `Done`.
    Outcome(serde_json::Value),
    /// The most bytes the worker had allocated on its GPU at once, before `Done` or `Failed`;
    /// only from a worker that opened a CUDA device.
    GpuMemory {
        peak_bytes: u64,
    },
    /// Trained every iteration, or stopped at a boundary when asked (SIGTERM/SIGINT).
    Done {
        stopped: bool,
    },
    /// An error or a panic; the message says what.
    Failed {
        error: String,
    },
}

fn run(job: &Job, stop: &AtomicBool, out: &mut dyn Write) -> anyhow::Result<TrialEnd> {
    let end = job.run(stop, &mut |rec| {
        send(out, &WorkerMessage::Iteration(*rec))?;
        Ok(crate::record::Control::Continue)
    })?;
    if let Some(outcome) = end.outcome {
        send(out, &WorkerMessage::Outcome(outcome))?;
    }
    Ok(end.end)
}

fn send(out: &mut dyn Write, msg: &WorkerMessage) -> anyhow::Result<()> {
    let mut line = serde_json::to_string(msg)?;
    line.push('\n');
    out.write_all(line.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// The parent's pid, set by the runner for [`die_with_parent`].
pub(crate) const PARENT_PID_ENV: &str = "EDGEBENCH_PARENT_PID";

/// Exit code of a worker whose parent was already gone when it started.
const ORPHANED: i32 = 3;

/// The signal the kernel sends this process when its parent dies (PR_SET_PDEATHSIG). Not
/// SIGKILL: the worker must first end the command it runs, whose children would otherwise live
/// on (reparented to init) and run beside the next sweep's.
const PARENT_DIED: i32 = libc::SIGUSR2;

/// Asks the kernel to signal this process when its parent dies, and ends the trial then: a
/// worker only trains for the parent that records its iterations, and one left behind by a
/// `kill -9` of the parent would hold the CPU (and skew the next sweep) for the rest of its
/// trial. The worker holds nothing worth saving; the parent has every iteration it reported.
/// Returns false if the parent is already gone (it died before the request took effect).
fn die_with_parent() -> bool {
    // The handler first, so the signal never finds the default action (which ends the worker
    // but not its command).
    let signal = match signal_hook::iterator::Signals::new([PARENT_DIED]) {
        Ok(mut signals) => {
            std::thread::spawn(move || {
                if signals.forever().next().is_some() {
                    end_trial_and_exit();
                }
            });
            PARENT_DIED
        }
        // Without a handler the worker at least dies with its parent.
        Err(_) => libc::SIGKILL,
    };
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag on this process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong) };
    let expected = std::env::var(PARENT_PID_ENV)
        .ok()
        .and_then(|p| p.parse::<libc::pid_t>().ok());
    // SAFETY: getppid(2) cannot fail.
    let parent = unsafe { libc::getppid() };
    expected.is_none_or(|pid| pid == parent)
}

/// The parent is gone: SIGKILL the command's process group and everything else in the trial's
/// cgroup (processes that left the group), then exit without a word, since nobody reads it.
fn end_trial_and_exit() -> ! {
    crate::workloads::end_abruptly();
    if let Some(dir) = std::env::var_os(crate::memory::cgroup::TRIAL_CGROUP_ENV) {
        crate::memory::cgroup::kill_members(std::path::Path::new(&dir), Some(std::process::id()));
    }
    eprintln!(
        "edgebench worker: the edgebench process running this trial is gone; ended the trial"
    );
    // SAFETY: _exit(2) ends the process at once; nothing is left to flush or unwind.
    unsafe { libc::_exit(ORPHANED) }
}

/// The worker process's whole life; returns its exit code.
pub fn main() -> i32 {
    if !die_with_parent() {
        eprintln!("edgebench worker: the parent process is gone; not training");
        return ORPHANED;
    }
    // Before anything slow, so a stop request is always a clean stop at a boundary.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if signal_hook::flag::register(signal, Arc::clone(&stop)).is_err() {
            return 1;
        }
    }
    crate::train::prepare_training_process();
    let mut line = String::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let job: Job = match std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(anyhow::Error::from)
        .and_then(|_| {
            serde_json::from_str(&line).map_err(|e| anyhow::anyhow!("bad worker job: {e}"))
        }) {
        Ok(job) => job,
        Err(e) => {
            let _ = send(
                &mut out,
                &WorkerMessage::Failed {
                    error: format!("{e:#}"),
                },
            );
            return 2;
        }
    };
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&job, &stop, &mut out)));
    let msg = match result {
        Ok(Ok(end)) => WorkerMessage::Done {
            stopped: end == TrialEnd::Stopped,
        },
        Ok(Err(e)) => WorkerMessage::Failed {
            error: format!("{e:#}"),
        },
        Err(panic) => WorkerMessage::Failed {
            error: format!("panic while training: {}", panic_text(&panic)),
        },
    };
    // After a failure too: the peak of a trial that ran out of GPU memory is worth keeping.
    if let Some(peak_bytes) = crate::train::gpu_memory::peak_bytes() {
        let _ = send(&mut out, &WorkerMessage::GpuMemory { peak_bytes });
    }
    match send(&mut out, &msg) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

pub(crate) fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_json_lines() {
        let rec = IterationRecord {
            step: 3,
            epoch: 0,
            loss: 6.5,
            lr: 0.01,
            data_s: 0.001,
            step_s: 0.2,
            t_start_ns: 10,
            t_end_ns: 20,
        };
        for msg in [
            WorkerMessage::Iteration(rec),
            WorkerMessage::GpuMemory {
                peak_bytes: 5 << 30,
            },
            WorkerMessage::Done { stopped: true },
            WorkerMessage::Failed { error: "x".into() },
        ] {
            let line = serde_json::to_string(&msg).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(serde_json::from_str::<WorkerMessage>(&line).unwrap(), msg);
        }
        // The peak travels exactly, beyond 32 bits, in the tagged form every message has.
        let gpu = WorkerMessage::GpuMemory {
            peak_bytes: (5 << 30) + 7,
        };
        let line = serde_json::to_string(&gpu).unwrap();
        assert_eq!(line, r#"{"type":"gpu_memory","peak_bytes":5368709127}"#);
        assert_eq!(serde_json::from_str::<WorkerMessage>(&line).unwrap(), gpu);
        // A log without a learning rate or loss: NaN travels as JSON null and comes back NaN.
        let no_lr = IterationRecord {
            loss: f64::NAN,
            lr: f64::NAN,
            ..rec
        };
        let line = serde_json::to_string(&WorkerMessage::Iteration(no_lr)).unwrap();
        match serde_json::from_str::<WorkerMessage>(&line).unwrap() {
            WorkerMessage::Iteration(r) => assert!(r.loss.is_nan() && r.lr.is_nan() && r.step == 3),
            other => panic!("{other:?}"),
        }
        let cnn = crate::workloads::cnn::CnnJob {
            net: "alexnet".into(),
            device: crate::config::DeviceKind::Cpu,
            batch: 2,
            epochs: 1,
            images: 4,
            seed: 1,
            data: crate::workloads::cnn::DataSpec::Folder {
                dir: "/data".into(),
            },
            tf32: false,
        };
        let job = Job::of(crate::workloads::cnn::KIND, &cnn);
        let text = serde_json::to_string(&job).unwrap();
        assert!(text.starts_with(r#"{"workload":"cnn","#), "{text}");
        let back = serde_json::from_str::<Job>(&text).unwrap();
        assert_eq!(back, job);
        assert_eq!(back.fields::<crate::workloads::cnn::CnnJob>().unwrap(), cnn);
    }
}
