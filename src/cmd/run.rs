//! `edgebench run`: the sweep the config and flags describe, with a summary; `exec` runs its
//! sweep through [`sweep`] too.

use super::{usage, Failure, Outcome};
use crate::cli::{RunArgs, SweepArgs};
use edgebench::config::Config;
use edgebench::host::HostPaths;
use edgebench::{report, runner, store};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// `options`: the values of the workloads' own options (`--duration` of idle).
pub(crate) fn run(
    args: &RunArgs,
    options: Vec<edgebench::workloads::OptionValue>,
    host: &HostPaths,
) -> Outcome {
    sweep(&args.sweep, args.overrides(), host, |config| {
        edgebench::workloads::apply_options(config, &options)
    })
}

/// How long a second interrupt waits for the sweep to record the trial it ends before the
/// process exits regardless.
const ABORT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3);

/// SIGINT/SIGTERM: the first asks the sweep to stop at the next iteration boundary (`stop`);
/// the second ends the trial now (`abort`): the sweep kills the worker and everything the
/// trial started and records it `interrupted`. Should the sweep not get there within
/// [`ABORT_DEADLINE`], the trial's processes are killed from here and the process exits 130.
fn watch_interrupts(
    stop: &Arc<AtomicBool>,
    abort: &Arc<AtomicBool>,
    host: &HostPaths,
) -> std::io::Result<()> {
    use std::sync::atomic::Ordering;
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])?;
    let (stop, abort, host) = (Arc::clone(stop), Arc::clone(abort), host.clone());
    std::thread::spawn(move || {
        for _ in signals.forever() {
            if !stop.swap(true, Ordering::SeqCst) {
                continue;
            }
            if abort.swap(true, Ordering::SeqCst) {
                continue;
            }
            eprintln!(
                "second interrupt: ending the trial now (its processes are killed) and exiting"
            );
            let host = host.clone();
            std::thread::spawn(move || {
                std::thread::sleep(ABORT_DEADLINE);
                runner::end_active_trial(&host);
                std::process::exit(130);
            });
        }
    });
    Ok(())
}

/// The sweep of the config with `overrides` applied, then `sections` (the workloads' own
/// options), its summary printed; 3 when a trial failed, 130 when interrupted.
pub(crate) fn sweep(
    args: &SweepArgs,
    overrides: edgebench::config::Overrides,
    host: &HostPaths,
    sections: impl FnOnce(&mut Config),
) -> Outcome {
    let (mut config, origin) = Config::resolve(args.config.as_deref())?;
    config.apply(&overrides);
    sections(&mut config);
    edgebench::workloads::check_config(&config, &origin)?;
    // From here on an interrupt stops cleanly wherever it lands (preflight, the wait for the
    // lock, the idle baseline, a trial) and the command exits 130.
    let stop = Arc::new(AtomicBool::new(false));
    let abort = Arc::new(AtomicBool::new(false));
    watch_interrupts(&stop, &abort, host)?;
    tracing::info!("config: {origin}");
    let board = runner::board(&config, host).map_err(usage)?;
    let metrics = runner::live_metrics(host, &board);
    // Held until the sweep returns; refused before anything is written.
    let _server = match &args.metrics {
        Some(addr) => Some(
            edgebench::metrics::server::MetricsServer::start(addr, metrics.clone())
                .map_err(usage)?,
        ),
        None => None,
    };
    let mut waiting = |held: &store::LockError| {
        if let store::LockError::Held { holder, lock, .. } = held {
            tracing::info!(
                "another sweep ({holder}) holds {}; waiting for it to end",
                lock.display()
            );
        }
    };
    let outcome = runner::sweep(runner::SweepRequest {
        config: &config,
        force: args.force,
        retry_failed: args.retry_failed,
        host,
        board: &board,
        stop: &stop,
        abort: Some(&abort),
        on_trial: None,
        metrics: args.metrics.is_some().then_some(&metrics),
        wait_for_lock: match args.wait {
            true => Some(&mut waiting),
            false => None,
        },
    })
    .map_err(|e| Failure {
        code: if e.refused { 2 } else { 1 },
        error: e.error,
    })?;
    let db = config.db_path();
    if args.wait && outcome.run_id.is_none() && outcome.interrupted && outcome.results.is_empty() {
        eprintln!("interrupted while waiting for the sweep lock; nothing was run");
        return Ok(130);
    }
    if !outcome.results.is_empty() {
        print!("{}", report::summary::table(&outcome.results));
    }
    println!(
        "{} trial(s) run, {} already done, {} failed{} -> {}",
        outcome.ran,
        outcome.skipped,
        outcome.failed,
        if outcome.interrupted {
            ", interrupted"
        } else {
            ""
        },
        db.display()
    );
    Ok(if outcome.interrupted {
        130
    } else if outcome.failed > 0 {
        3
    } else {
        0
    })
}
