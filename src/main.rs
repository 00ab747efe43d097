//! edgebench entry point: parse, dispatch each command to its file under `cmd/`, map failures
//! to exit codes (listed in `cmd`).

use clap::{CommandFactory, FromArgMatches};
mod cli;
mod cmd;

use cli::{Cli, Command, ExportCommand, ImportCommand};
use cmd::Outcome;
use edgebench::host::HostPaths;

#[global_allocator]
static ALLOC: edgebench::train::HugePageAlloc = edgebench::train::HugePageAlloc;

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
    // `run` also takes each workload's own options (`--duration` of idle), and the other
    // commands the flags a workload adds to them (`models --export-onnx`).
    let actions = edgebench::workloads::command_actions();
    let mut command =
        Cli::command().mut_subcommand("run", |run| run.args(edgebench::workloads::options()));
    for action in &actions {
        command = command.mut_subcommand(action.command, |c| c.args(action.args.clone()));
    }
    let matches = command.get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let asked = matches.subcommand().and_then(|(name, sub)| {
        actions
            .iter()
            .find(|a| a.command == name && a.asked(sub))
            .map(|a| (a.run, sub))
    });
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
    let outcome = match asked {
        Some((action, matches)) => action(matches).map(|()| 0).map_err(cmd::Failure::from),
        None => dispatch(cli.command, sections, &host),
    };
    let code = match outcome {
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
    sections: Vec<edgebench::workloads::OptionValue>,
    host: &HostPaths,
) -> Outcome {
    match command {
        Command::Run(args) => cmd::run::run(&args, sections, host),
        Command::Exec(args) => cmd::exec::run(&args, host),
        Command::Worker => Ok(edgebench::worker::main()),
        Command::Daemon { config } => Ok(edgebench::daemon::main(config, host.clone())?),
        Command::Models { json } => cmd::models::run(json),
        Command::Results { db, json } => cmd::results::run(&db, json),
        Command::Snapshot { out, db } => cmd::snapshot::run(&out, &db),
        Command::Merge { sources, into } => cmd::merge::run(&sources, &into),
        Command::Pull {
            remote,
            into,
            remote_bin,
            ssh_opts,
        } => cmd::pull::run(&edgebench::sync::PullRequest {
            remote: &remote,
            into: &into,
            remote_bin: &remote_bin,
            ssh_opts: &ssh_opts,
        }),
        Command::Push { url, db, json } => cmd::push::run(&url, &db, json),
        Command::Fetch {
            url,
            into,
            host: board,
            since,
            workload,
        } => cmd::fetch::run(
            &url,
            &into,
            &edgebench::sync::postgres::FetchRequest {
                host: board.as_deref(),
                since: since.as_deref(),
                workload: workload.as_deref(),
            },
        ),
        Command::Fleet(command) => cmd::fleet::run(command),
        Command::Report {
            db,
            out,
            format,
            figure_width,
            figure_captions,
            compare,
            trace,
        } => cmd::report::run(
            &db,
            &out,
            format,
            figure_width,
            figure_captions,
            compare,
            trace.as_deref(),
        ),
        Command::Provenance { db, json } => cmd::provenance::run(db.as_deref(), json, host),
        Command::Peaks {
            device,
            threads,
            json,
        } => cmd::peaks::run(&device, threads, json, host),
        Command::Sensors {
            config,
            board,
            json,
        } => cmd::sensors::run(config.as_deref(), board, json, host),
        Command::Profile(args) => cmd::profile::run(args),
        Command::BenchSgemm { size } => cmd::bench_sgemm::run(size),
        Command::Import(ImportCommand::Logs {
            dir,
            parser,
            engine,
            host: from,
            db,
        }) => cmd::import::logs(&dir, &parser, &engine, from, &db, host),
        Command::Export(ExportCommand::Csv { db, out, machine }) => {
            cmd::export::csv(&db, &out, machine, host)
        }
    }
}
