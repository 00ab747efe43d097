//! edgebench entry point: parse, dispatch, map failures to exit codes.
//! Exit codes: 0 done; 1 runtime error; 2 bad config, flags or input, refused before any
//! training; 3 the sweep finished but some trials failed; 130 interrupted.

use clap::{CommandFactory, FromArgMatches};
mod cli;

use cli::{Cli, Command, ExportCommand, FleetCommand, ImportCommand, SweepArgs};
use edgebench::config::{Config, ConfigError};
use edgebench::host::HostPaths;
use edgebench::store::{self, Store};
use edgebench::{models, report, runner, sync};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[global_allocator]
static ALLOC: edgebench::train::HugePageAlloc = edgebench::train::HugePageAlloc;

/// An error with the exit code it deserves.
struct Failure {
    code: i32,
    error: anyhow::Error,
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

fn usage(error: anyhow::Error) -> Failure {
    Failure { code: 2, error }
}

/// Log lines on stderr, for every command (the daemon and the trial workers too). Colour only
/// on a terminal and without `NO_COLOR`; under systemd (`JOURNAL_STREAM` set) plain lines
/// without a timestamp, since the journal stamps each line itself.
fn init_logging(quiet: bool) {
    use std::io::IsTerminal;
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let journal = set("JOURNAL_STREAM");
    let colour = std::io::stderr().is_terminal() && !set("NO_COLOR") && !journal;
    let level = if quiet { "warn" } else { "info" };
    let logger = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(colour);
    if journal {
        logger.without_time().init();
    } else {
        logger.init();
    }
}

fn main() {
    // `run` also takes each workload's own options (`--duration` of idle).
    let matches = Cli::command()
        .mut_subcommand("run", |run| run.args(edgebench::workloads::options()))
        .get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let sections = matches
        .subcommand_matches("run")
        .map(edgebench::workloads::option_values)
        .unwrap_or_default();
    init_logging(cli.quiet);
    let host = HostPaths {
        sysfs: cli.sysfs.clone(),
        procfs: cli.procfs.clone(),
        rootfs: cli.rootfs.clone(),
    };
    let code = match dispatch(cli.command, sections, &host) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            f.code
        }
    };
    std::process::exit(code);
}

fn dispatch(
    command: Command,
    sections: Vec<(String, String, String)>,
    host: &HostPaths,
) -> Result<i32, Failure> {
    match command {
        Command::Run(args) => {
            let mut overrides = args.overrides();
            overrides.sections = sections;
            run(&args.sweep, overrides, host)
        }
        Command::Exec(args) => run(&args.sweep, args.overrides(), host),
        Command::Worker => Ok(edgebench::worker::main()),
        Command::Daemon { config } => Ok(edgebench::daemon::main(config, host.clone())?),
        Command::Models {
            export_onnx: Some(dir),
            seed,
            ..
        } => {
            for path in edgebench::workloads::infer::export::export_all(&dir, seed)? {
                println!("{}", path.display());
            }
            Ok(0)
        }
        Command::Models { json, .. } => {
            let summaries: Vec<_> = models::all().iter().map(|n| n.summary()).collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&summaries)?);
            } else {
                print!("{}", report::models_text(&summaries));
            }
            Ok(0)
        }
        Command::Results { db, json } => {
            let rows = Store::open_readonly(&db)
                .and_then(|store| store.results())
                .map_err(input)?;
            let push = push_target(&db);
            if json {
                let mut value = report::results_json(&rows)?;
                if let (Some((target, pushed)), serde_json::Value::Array(list)) =
                    (&push, &mut value)
                {
                    for (row, obj) in rows.iter().zip(list.iter_mut()) {
                        if let serde_json::Value::Object(map) = obj {
                            // Whether this trial waits to be pushed to the target.
                            let waits = row.status != store::TrialStatus::Running
                                && !pushed.contains(&row.trial_id);
                            map.insert("push_waiting".into(), waits.into());
                            map.insert("push_target".into(), target.as_str().into());
                        }
                    }
                }
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                if rows.is_empty() {
                    println!("no trials in {}", db.display());
                } else {
                    print!("{}", report::summary::table(&rows));
                }
                if let Some((target, pushed)) = &push {
                    let waiting = rows
                        .iter()
                        .filter(|r| {
                            r.status != store::TrialStatus::Running && !pushed.contains(&r.trial_id)
                        })
                        .count();
                    println!(
                        "{waiting} trials wait to be pushed to {}",
                        sync::postgres::short_target(target)
                    );
                }
            }
            Ok(0)
        }
        Command::Snapshot { out, db } => {
            let version = store::snapshot(&db, &out).map_err(input)?;
            println!(
                "wrote {} (schema v{version}, {} bytes)",
                out.display(),
                std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0)
            );
            Ok(0)
        }
        Command::Merge { sources, into } => {
            let r = store::merge(&sources, &into).map_err(input)?;
            Ok(print_merge(&r, &into))
        }
        Command::Pull {
            remote,
            into,
            remote_bin,
            ssh_opts,
        } => {
            let r = sync::pull(&sync::PullRequest {
                remote: &remote,
                into: &into,
                remote_bin: &remote_bin,
                ssh_opts: &ssh_opts,
            })?;
            Ok(print_merge(&r, &into))
        }
        Command::Push { url, db, json } => {
            let r = sync::postgres::push(&url, &db)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("{}", r.text());
            }
            Ok(0)
        }
        Command::Fetch {
            url,
            into,
            host: board,
            since,
            workload,
        } => {
            let r = sync::postgres::fetch(
                &url,
                &into,
                &sync::postgres::FetchRequest {
                    host: board.as_deref(),
                    since: since.as_deref(),
                    workload: workload.as_deref(),
                },
            )?;
            let refused = r.merge.refused.iter().filter(|x| x.trial.is_some()).count();
            println!(
                "fetched {} trial(s) from {}",
                r.trials.saturating_sub(refused),
                sync::postgres::mask_url(&url)
            );
            Ok(print_merge(&r.merge, &into))
        }
        Command::Fleet(FleetCommand::Init { url }) => {
            let env = sync::postgres::process_env();
            let (target, version) = sync::postgres::init(&url, &env)?;
            println!("{target}: schema edgebench v{version}");
            Ok(0)
        }
        Command::Fleet(FleetCommand::Retire { url, host }) => {
            let env = sync::postgres::process_env();
            println!("{}", sync::postgres::retire(&url, &host, &env)?.text());
            Ok(0)
        }
        Command::Fleet(FleetCommand::Prune {
            url,
            power_older_than_days,
        }) => {
            let env = sync::postgres::process_env();
            let n = sync::postgres::prune_power(&url, power_older_than_days, &env)?;
            println!(
                "removed {n} power samples of trials started more than {power_older_than_days} \
                 days ago from {}",
                sync::postgres::mask_url(&url)
            );
            Ok(0)
        }
        Command::Report {
            db,
            out,
            format,
            figure_width,
            figure_captions,
            compare,
            trace,
        } => {
            // Opening checks the whole file: a report reads every row.
            let store = Store::open_readonly(&db).map_err(input)?;
            let figures = report::plots::FigureOptions {
                width_in: figure_width,
                caption_inside: figure_captions,
            };
            let written =
                report::build::build(&store, &out, (format, &figures), compare, trace.as_deref())?;
            for path in written {
                println!("wrote {}", path.display());
            }
            Ok(0)
        }
        Command::Provenance { db, json } => {
            let recorded: Vec<(String, edgebench::provenance::Provenance)> = match db {
                Some(db) => {
                    let store = Store::open_readonly(&db).map_err(input)?;
                    let mut runs: Vec<String> = store
                        .results()
                        .map_err(input)?
                        .into_iter()
                        .map(|r| r.run_id)
                        .collect();
                    runs.dedup();
                    runs.into_iter()
                        .map(|run| Ok((run.clone(), store.provenance(&run)?)))
                        .collect::<Result<_, store::StoreError>>()
                        .map_err(input)?
                }
                None => vec![("now".into(), edgebench::provenance::capture(host))],
            };
            if json {
                let map: std::collections::BTreeMap<_, _> = recorded.into_iter().collect();
                println!("{}", serde_json::to_string_pretty(&map)?);
            } else {
                for (run, p) in recorded {
                    println!("# {run}");
                    print!("{}", p.text());
                }
            }
            Ok(0)
        }
        Command::Peaks {
            device,
            threads,
            json,
        } => {
            let report = edgebench::workloads::ops::peaks::report(host, &device, threads, true)
                .map_err(usage)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.render_text());
            }
            Ok(0)
        }
        Command::Sensors {
            config,
            board,
            json,
        } => {
            let (mut config, _) = Config::resolve(config.as_deref())?;
            if board.is_some() {
                config.power.board = board;
            }
            let report = edgebench::power::sensors(host, &config.power).map_err(usage)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", edgebench::power::sensors_text(&report));
            }
            Ok(0)
        }
        Command::Profile {
            net,
            batch,
            steps,
            candle_conv,
            device,
            quick,
            threads,
            tf32,
        } => {
            if threads > 0 {
                std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
            }
            edgebench_kernels::set_tf32(tf32);
            let spec = models::by_name(&net).ok_or_else(|| {
                usage(anyhow::anyhow!("--net {net}: unknown (alexnet, googlenet)"))
            })?;
            let conv = if candle_conv {
                models::ConvImpl::Candle
            } else {
                models::ConvImpl::Gemm
            };
            let kind = edgebench::config::DeviceKind::parse(&device)
                .map_err(|e| usage(anyhow::anyhow!("--device: {e}")))?;
            let device = edgebench::train::device(kind)?;
            let p = edgebench::train::profile::profile(spec, &device, batch, steps, conv, !quick)?;
            if !quick {
                print!("{}", p.text());
            }
            println!(
                "RESULT net={} batch={} device={} median_s_per_image={:.6} cpu_s_per_image={:.6} issue_s_per_image={:.6} peak_rss_kb={} peak_gpu_bytes={}",
                p.net,
                p.batch,
                p.device,
                p.step_s / p.batch as f64,
                p.step_cpu_s / p.batch as f64,
                p.issue_s / p.batch as f64,
                edgebench::train::profile::peak_rss_kb(),
                edgebench::train::gpu_memory::peak_bytes().unwrap_or(0)
            );
            Ok(0)
        }
        Command::BenchSgemm { size } => {
            let g = edgebench::train::profile::sgemm_gflops(size);
            println!(
                "RESULT sgemm_gflops={g:.1} size={size} threads={} kernel={}",
                rayon::current_num_threads(),
                edgebench_kernels::sgemm::Kernel::detect().name()
            );
            Ok(0)
        }
        Command::Import(ImportCommand::Logs {
            dir,
            parser,
            engine,
            host: from,
            db,
        }) => import_logs(&dir, &parser, &engine, from, &db, host),
        Command::Export(ExportCommand::Csv { db, out, machine }) => {
            let store = Store::open_readonly(&db).map_err(input)?;
            let machine = machine.unwrap_or_else(|| host.hostname());
            for path in report::csv::export_csv(&store, &out, &machine)? {
                println!("wrote {}", path.display());
            }
            Ok(0)
        }
    }
}

/// `edgebench import logs`: every log read and checked before the database is opened, then
/// one transaction.
fn import_logs(
    dir: &std::path::Path,
    parser: &str,
    engine: &str,
    from: Option<String>,
    db: &std::path::Path,
    host: &HostPaths,
) -> Result<i32, Failure> {
    use edgebench::workloads::exec::import;
    let from = from.unwrap_or_else(|| host.hostname());
    let prepared = import::prepare(&import::LogImport {
        dir,
        parser,
        engine,
        host: &from,
    })
    .map_err(usage)?;
    for log in prepared.logs.iter().filter(|l| l.untimed_lines > 0) {
        tracing::warn!(
            "{}: {} step line(s) without a time of their own or a timestamp left out",
            log.path.display(),
            log.untimed_lines
        );
    }
    let mut store = Store::open(db).map_err(input)?;
    let outcome = prepared.write(&mut store)?;
    let name = |i: usize| {
        let path = &prepared.logs[i].path;
        path.file_name()
            .unwrap_or(path.as_os_str())
            .to_string_lossy()
            .into_owned()
    };
    for (i, host, run) in &outcome.already {
        println!(
            "{}: already imported (host {host}, run {run}); skipped",
            name(*i)
        );
    }
    for &i in &outcome.written {
        let t = &prepared.trials[i];
        let per_image = t
            .summary
            .time_per_image_s
            .map_or("-".to_string(), |s| format!("{:.3}", s * 1e3));
        println!(
            "{}: {} {} batch {}, {} records, {per_image} ms/image",
            name(i),
            t.key.net,
            t.key.device,
            t.key.batch,
            t.iterations.len()
        );
    }
    match &outcome.run_uuid {
        Some(run) => println!(
            "imported {} log(s) as engine {engine}, host {from} (run {run}); {} already there -> {}",
            outcome.written.len(),
            outcome.already.len(),
            db.display()
        ),
        None => println!(
            "nothing imported: all {} log(s) of {} are already in {}",
            outcome.already.len(),
            dir.display(),
            db.display()
        ),
    }
    Ok(0)
}

/// Store errors that mean "wrong file given" exit 2, like other bad input.
fn input(e: store::StoreError) -> Failure {
    Failure {
        code: if e.is_bad_input() { 2 } else { 1 },
        error: e.into(),
    }
}

/// The server `results` reports the push backlog for: `[sync] postgres` of the config in
/// the working directory, else the target the ledger of `db` names last; with the trial UUIDs
/// the ledger lists as held there.
fn push_target(db: &std::path::Path) -> Option<(String, std::collections::HashSet<String>)> {
    let store = Store::open_readonly(db).ok()?;
    let configured = Config::resolve(None)
        .ok()
        .and_then(|(c, _)| c.sync.postgres)
        .and_then(|url| sync::postgres::ConnInfo::parse(&url, &sync::postgres::process_env()).ok())
        .map(|info| info.target().0);
    let target = match configured {
        Some(t) => t,
        None => store.push_targets().ok()?.into_iter().next()?,
    };
    let pushed = store.pushed_uuids(&target).ok()?;
    Some((target, pushed))
}

/// Prints what a merge did; the exit code: 3 when it left something out.
fn print_merge(r: &store::MergeReport, into: &std::path::Path) -> i32 {
    for refused in &r.refused {
        eprintln!("warning: {refused} (from {})", refused.source);
    }
    for t in &r.tables {
        println!(
            "{:<14} {:>9} rows (+{})",
            t.table,
            t.after,
            t.after - t.before
        );
    }
    println!(
        "{} run(s) and {} trial(s) updated to a later state -> {}",
        r.runs_updated,
        r.trials_updated,
        into.display()
    );
    if r.refused.is_empty() {
        0
    } else {
        println!(
            "{} trial(s) or run(s) left out: a row of each breaks the store's rules (see above)",
            r.refused.len()
        );
        3
    }
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

fn run(
    args: &SweepArgs,
    overrides: edgebench::config::Overrides,
    host: &HostPaths,
) -> Result<i32, Failure> {
    let (mut config, origin) = Config::resolve(args.config.as_deref())?;
    config.apply(&overrides);
    edgebench::workloads::check_config(&config, &origin)?;
    // From here on an interrupt stops cleanly wherever it lands (preflight, the wait for the
    // lock, the idle baseline, a trial) and the command exits 130.
    let stop = Arc::new(AtomicBool::new(false));
    let abort = Arc::new(AtomicBool::new(false));
    watch_interrupts(&stop, &abort, host)?;
    tracing::info!("config: {origin}");
    let metrics = runner::live_metrics(&config, host);
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
