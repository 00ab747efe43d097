//! Command-line definitions (clap). Parsing only; main.rs dispatches to `cmd/`.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "edgebench",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("EDGEBENCH_GIT_COMMIT"), ", candle ", env!("EDGEBENCH_CANDLE_VERSION"), ")"),
    about = "Benchmarks Jetson-class boards and Linux hosts: CNN training and inference, the MLP and operator studies, any framework's command, the idle board; time, memory and energy of every iteration, in SQLite"
)]
pub(crate) struct Cli {
    /// Root of sysfs (tests and containers point it elsewhere).
    #[arg(long, global = true, env = "EDGEBENCH_SYSFS", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// Root of procfs.
    #[arg(long, global = true, env = "EDGEBENCH_PROCFS", default_value = "/proc")]
    pub procfs: PathBuf,
    /// Root for the board's other files: /etc/nv_tegra_release, /etc/nvpmodel.conf,
    /// /var/lib/nvpmodel/status, /usr/local/cuda/version.*.
    #[arg(long, global = true, env = "EDGEBENCH_ROOTFS", default_value = "/")]
    pub rootfs: PathBuf,
    /// Only warnings and errors on stderr.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the sweep given by the config (default config/edgebench.toml) and print a summary.
    Run(Box<RunArgs>),
    /// Run any command (another framework's training) as a trial, measured like a sweep's:
    /// `edgebench exec --name pytorch --parser edgebench --net alexnet --batch 16 --device cuda
    /// --power -- python3 bench/torch_train.py alexnet 16 20`. Lists of --net, --device,
    /// --batch make a sweep of the command (use the placeholders).
    Exec(Box<ExecArgs>),
    /// Describe the networks: input, layers, parameters, forward multiply-adds.
    Models {
        #[arg(long)]
        json: bool,
    },
    /// One record per trial in the database.
    Results {
        #[arg(long, env = "EDGEBENCH_DB", default_value = edgebench::config::DEFAULT_DB)]
        db: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// What a run would record about this host now: board, L4T, nvpmodel mode,
    /// jetson_clocks, CPU/GPU clocks and governors, temperatures, kernel; items the host lacks
    /// are left out. With --db, the provenance recorded for each run in that database.
    Provenance {
        /// Print the provenance stored for every run of this database instead.
        #[arg(long)]
        db: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// The roofs operators are judged against: each device's theoretical compute and bandwidth
    /// peaks (board profile, or the host's CPU) and the measured ones (SGEMM, STREAM copy/triad).
    Peaks {
        /// Devices, comma separated: cpu,cuda.
        #[arg(long, value_delimiter = ',', default_value = "cpu", value_parser = edgebench::config::DeviceKind::parse)]
        device: Vec<edgebench::config::DeviceKind>,
        /// CPU threads for the measurements (0 = all cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        #[arg(long)]
        json: bool,
    },
    /// Power sources found: every rail with its voltage, current and power now, the total, the
    /// sampling rate, and every place probed.
    Sensors {
        /// Config file (its [power] section); default config/edgebench.toml if present.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Board profile instead of detection.
        #[arg(long)]
        board: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Export results in other formats.
    #[command(subcommand)]
    Export(ExportCommand),
    /// Read results recorded elsewhere into the database.
    #[command(subcommand)]
    Import(ImportCommand),
    /// A consistent copy of the database (SQLite online backup), safe while a run writes it.
    Snapshot {
        /// The copy to write; must not exist.
        out: PathBuf,
        #[arg(long, env = "EDGEBENCH_DB", default_value = edgebench::config::DEFAULT_DB)]
        db: PathBuf,
    },
    /// Merge databases from many boards into one (set union by UUID; idempotent).
    Merge {
        /// Databases to merge (never modified).
        #[arg(required = true)]
        sources: Vec<PathBuf>,
        /// The merged database (created if absent).
        #[arg(long)]
        into: PathBuf,
    },
    /// Snapshot a board's database over ssh, copy it here and merge it.
    Pull {
        /// [user@]board[:remote-db-path] (default path: edgebench.db in the remote home).
        remote: String,
        #[arg(long)]
        into: PathBuf,
        /// edgebench on the board (a name on its PATH, or an absolute path).
        #[arg(long, default_value = "edgebench")]
        remote_bin: String,
        /// Extra ssh option, passed as `-o OPTION` (repeatable), e.g. Port=2222.
        #[arg(long = "ssh-opt")]
        ssh_opts: Vec<String>,
    },
    /// Copy every finished trial the central PostgreSQL lacks to it (one transaction per
    /// trial; pushing again adds nothing). The password comes from PGPASSWORD or the password
    /// file (PGPASSFILE, default ~/.pgpass), never the command line.
    Push {
        /// postgres://USER@HOST[:PORT]/DB[?sslmode=verify-full&sslrootcert=FILE]
        url: String,
        #[arg(long, env = "EDGEBENCH_DB", default_value = edgebench::config::DEFAULT_DB)]
        db: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Copy trials from the central PostgreSQL into a local database (merged by UUID, so
    /// fetching twice adds nothing).
    Fetch {
        /// postgres://USER@HOST[:PORT]/DB
        url: String,
        /// The local database (created if absent).
        #[arg(long)]
        into: PathBuf,
        /// Only this board (its host name).
        #[arg(long)]
        host: Option<String>,
        /// Only trials started at or after this date/time (e.g. 2025-02-01).
        #[arg(long)]
        since: Option<String>,
        /// Only this workload (e.g. cnn).
        #[arg(long)]
        workload: Option<String>,
    },
    /// The fleet's server, as its owner: create the schema, retire a board, prune old power
    /// samples.
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// CSV files, Markdown/HTML summary tables and plots for every host in a database.
    Report {
        db: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// Plot files: svg with a PDF of each beside it (for a paper), or png (300 dpi
        /// bitmaps, text in the bundled DejaVu Sans).
        #[arg(long, value_enum, default_value_t = edgebench::report::plots::Format::Svg)]
        format: edgebench::report::plots::Format,
        /// Printed width of every figure, inches (3.5: a paper's column, 7: a page); text
        /// prints at 8-9 pt at that width.
        #[arg(long, value_name = "INCHES", default_value_t = edgebench::report::plots::DEFAULT_WIDTH_IN,
              value_parser = edgebench::report::plots::parse_width)]
        figure_width: f64,
        /// Also draw each figure's caption into the figure (it is always in
        /// <figure>.caption.txt and summary.html).
        #[arg(long)]
        figure_captions: bool,
        /// Also draw every host on shared plots (DIR/compare/).
        #[arg(long)]
        compare: bool,
        /// Also draw this trial's power trace with its iteration boundaries (trial id or prefix).
        #[arg(long)]
        trace: Option<String>,
    },
    /// Run the configured sweeps as a service: at start and on the config's schedule; SIGHUP
    /// re-reads the config; SIGTERM stops at an iteration boundary (sd_notify aware).
    Daemon {
        #[arg(long, default_value = "/etc/edgebench/config.toml")]
        config: PathBuf,
    },
    /// Internal: train one trial (job on stdin, JSON lines on stdout). Started by `run`.
    #[command(hide = true)]
    Worker,
    /// Time training steps of one net and print forward/backward time per layer.
    Profile(ProfileArgs),
    /// Measure this machine's single-precision GEMM peak (GFLOP/s), for `bench/compare.sh`.
    #[command(hide = true)]
    BenchSgemm {
        #[arg(long, default_value_t = 2048, value_parser = bounded(1, 16_384))]
        size: usize,
    },
}

#[derive(Debug, Args)]
pub(crate) struct ProfileArgs {
    #[arg(long, default_value = "alexnet")]
    pub net: String,
    #[arg(long, default_value_t = 32, value_parser = bounded(1, edgebench::config::MAX_BATCH))]
    pub batch: usize,
    /// Timed steps (after one warm-up step).
    #[arg(long, default_value_t = 3, value_parser = bounded(1, 100_000))]
    pub steps: usize,
    /// Use candle's conv2d instead of edgebench's GEMM convolution (for comparison).
    #[arg(long)]
    pub candle_conv: bool,
    /// cpu, or cuda (a build with the `cuda` feature); stage times on a GPU wait for it.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Print only `RESULT net=.. batch=.. median_s_per_image=..` after the steps.
    #[arg(long)]
    pub quick: bool,
    /// CPU threads (0 = all cores).
    #[arg(long, default_value_t = 0, value_parser = bounded(0, edgebench::config::MAX_THREADS))]
    pub threads: usize,
    /// On CUDA, let f32 convolutions and matrix products use TF32 tensor cores (PyTorch's
    /// default for convolutions); without it they are strict fp32.
    #[arg(long)]
    pub tf32: bool,
    /// Time every matrix product of the timed steps and list the shapes that took longest, with
    /// their call sites in the kernels and their rate per thread (CPU; adds a clock read per
    /// product).
    #[arg(long)]
    pub products: bool,
}

/// A usize flag that must lie in `min..=max`; clap names the flag and the range on a miss.
fn bounded(min: usize, max: usize) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(min as u64..=max as u64)
}

#[derive(Debug, Subcommand)]
pub(crate) enum FleetCommand {
    /// Create (or upgrade) schema edgebench on the server; the owner's first step, no results
    /// file needed. Then the roles (deploy/postgres/roles.sql).
    Init {
        /// postgres://OWNER@HOST[:PORT]/DB
        url: String,
    },
    /// Remove every row of a board: its runs, their trials, iterations, power samples and the
    /// rest, and its entries in edgebench.board_hosts. Exit 1 if the server holds none.
    Retire {
        /// postgres://OWNER@HOST[:PORT]/DB
        url: String,
        /// The board's host name, as `runs.host` records it.
        host: String,
    },
    /// Remove the power samples of trials started more than N days ago (their energy, power
    /// and EDP figures stay).
    Prune {
        /// postgres://OWNER@HOST[:PORT]/DB
        url: String,
        /// N: the days of power samples kept.
        #[arg(long, value_parser = clap::value_parser!(u32).range(0..=edgebench::sync::postgres::MAX_RETENTION_DAYS as i64))]
        power_older_than_days: u32,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ExportCommand {
    /// The source studies' CSV files, loss_<machine>_<engine>.csv and times_<machine>_<engine>.csv
    /// for every engine (edgebench's own trainer and each other framework), and one file per
    /// other workload.
    Csv {
        #[arg(long, env = "EDGEBENCH_DB", default_value = edgebench::config::DEFAULT_DB)]
        db: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// Machine name in the file names (default: this host's name).
        #[arg(long)]
        machine: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImportCommand {
    /// Other frameworks' training logs, as trials of the exec workload.
    ///
    /// A folder of logs, one per run, named train_{net}_{CPU|GPU}_{batch}.log (as the Caffe and
    /// TensorFlow study scripts write them), becomes one run with one trial per log and its
    /// iterations. Nothing was measured here: no power, memory or clock record. A log imported
    /// before is skipped. Exit 2, nothing written, if the folder or a log in it cannot be read.
    Logs {
        /// The folder holding the logs.
        dir: PathBuf,
        /// The logs' format: caffe or tensorflow (or another parser of the exec workload:
        /// edgebench, regex:PATTERN).
        #[arg(long)]
        parser: String,
        /// The framework that wrote the logs, as reports and exports name it, e.g. caffe.
        #[arg(long)]
        engine: String,
        /// The machine the logs come from (default: this host's name).
        #[arg(long)]
        host: Option<String>,
        #[arg(long, env = "EDGEBENCH_DB", default_value = edgebench::config::DEFAULT_DB)]
        db: PathBuf,
    },
}

#[derive(Debug, Args, Default)]
pub(crate) struct RunArgs {
    /// What the trials run: a workload's name (cnn trains AlexNet/GoogLeNet; the README lists
    /// every workload); an unknown name is refused with the list of known ones.
    #[arg(long, value_parser = edgebench::workloads::parse_kind)]
    pub workload: Option<edgebench::config::WorkloadKind>,
    /// Image folder (one subfolder per class); default: the built-in synthetic set.
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// CNN trials on CUDA: let f32 convolutions and matrix products use TF32 tensor cores
    /// (PyTorch's default for convolutions); recorded as the trial parameter `tf32`.
    #[arg(long)]
    pub tf32: bool,
    #[command(flatten)]
    pub sweep: SweepArgs,
}

/// What `run` and `exec` share: the sweep's axes, the database, memory and power.
#[derive(Debug, Args, Default)]
pub(crate) struct SweepArgs {
    /// Config file (default: config/edgebench.toml if present, else built-in defaults).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Networks, comma separated: alexnet,googlenet.
    #[arg(long, value_delimiter = ',')]
    pub net: Option<Vec<String>>,
    /// Devices, comma separated: cpu,cuda.
    #[arg(long, value_delimiter = ',', value_parser = edgebench::config::DeviceKind::parse)]
    pub device: Option<Vec<edgebench::config::DeviceKind>>,
    /// Batch sizes, comma separated.
    #[arg(long, value_delimiter = ',')]
    pub batch: Option<Vec<usize>>,
    #[arg(long)]
    pub epochs: Option<usize>,
    #[arg(long)]
    pub images: Option<usize>,
    /// Warm-up iterations per trial, stored but excluded from time per image.
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Runs of every trial key, each its own stored trial, round-robin across keys; results
    /// give each key's mean and 95 % confidence interval (default 1).
    #[arg(long, value_name = "N")]
    pub repeat: Option<usize>,
    /// Results database (default ./edgebench.db).
    #[arg(long, env = "EDGEBENCH_DB")]
    pub db: Option<PathBuf>,
    /// CPU threads (0 = all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Rerun trials that are already ok in the database.
    #[arg(long)]
    pub force: bool,
    /// Rerun trials that ended failed, oom, crashed or skipped_memory.
    #[arg(long)]
    pub retry_failed: bool,
    /// If another sweep is writing the database (its lock file <db>.lock is held), wait for
    /// it to end instead of exiting with code 2.
    #[arg(long)]
    pub wait: bool,
    /// Run each trial in a memory cgroup of this size (e.g. 4G) to emulate a board.
    #[arg(long, value_name = "SIZE")]
    pub mem_limit: Option<edgebench::config::ByteSize>,
    /// Swap a capped trial may use on top of --mem-limit (0 = none; default: as the host).
    #[arg(long, value_name = "SIZE")]
    pub mem_swap_limit: Option<edgebench::config::ByteSize>,
    /// Run trials predicted not to fit RAM + swap instead of skipping them.
    #[arg(long)]
    pub try_anyway: bool,
    /// Measure power and energy per trial (exit 2 if no sensor is found).
    #[arg(long)]
    pub power: bool,
    /// Board profile (see `edgebench sensors`) instead of detection.
    #[arg(long)]
    pub board: Option<String>,
    /// What the power total covers: module (the module's input) or board (module and carrier
    /// board; refused, exit 2, on a board without a carrier-board monitor). Default: module.
    #[arg(long, value_parser = edgebench::config::PowerScope::parse)]
    pub power_scope: Option<edgebench::config::PowerScope>,
    /// Serve live metrics for Prometheus at http://ADDR/metrics while the sweep runs, e.g.
    /// 127.0.0.1:9464 (exit 2 if ADDR cannot be bound).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The engine's name in results and reports (default: the program's file name).
    #[arg(long, value_name = "ENGINE")]
    pub name: Option<String>,
    /// How to read steps from the command's output: caffe, tensorflow, edgebench or
    /// regex:PATTERN (named groups step, loss, time). Without one (or when no line matches),
    /// the trial gets whole-command time, energy, power and memory.
    #[arg(long)]
    pub parser: Option<String>,
    /// End the command after this long (SIGTERM, then SIGKILL), e.g. 30m: the trial is failed.
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<edgebench::config::Timeout>,
    /// Run the command as this account (edgebench must run as root), so the command cannot
    /// touch edgebench's files; by default it runs as edgebench's own user.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// The command and its arguments, after `--`; {net}, {batch}, {device}, {images} and
    /// {epochs} are replaced by the trial's values ({{ and }} are braces).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl ExecArgs {
    /// The sweep's overrides, and the one `[[exec]]` entry that replaces the config's.
    pub(crate) fn overrides(
        &self,
    ) -> (
        edgebench::config::Overrides,
        edgebench::workloads::exec::ExecEntry,
    ) {
        let program = self.command.first().map(String::as_str).unwrap_or_default();
        let name = self.name.clone().unwrap_or_else(|| {
            std::path::Path::new(program)
                .file_name()
                .map_or(program.to_string(), |n| n.to_string_lossy().into_owned())
        });
        let mut o = self.sweep.overrides();
        o.workload = Some(edgebench::workloads::exec::KIND);
        let entry = edgebench::workloads::exec::ExecEntry {
            name,
            command: self.command.clone(),
            parser: self.parser.clone(),
            timeout: self.timeout,
            user: self.user.clone(),
        };
        // One trial unless the flags ask for a sweep: no net, the CPU, batch not known.
        o.nets.get_or_insert_with(|| vec![String::new()]);
        o.devices
            .get_or_insert_with(|| vec![edgebench::config::DeviceKind::Cpu]);
        o.batches.get_or_insert_with(|| vec![0]);
        (o, entry)
    }
}

impl RunArgs {
    pub(crate) fn overrides(&self) -> edgebench::config::Overrides {
        edgebench::config::Overrides {
            workload: self.workload.clone(),
            dataset: self.dataset.clone(),
            tf32: self.tf32.then_some(true),
            ..self.sweep.overrides()
        }
    }
}

impl SweepArgs {
    pub(crate) fn overrides(&self) -> edgebench::config::Overrides {
        edgebench::config::Overrides {
            nets: self.net.clone(),
            devices: self.device.clone(),
            batches: self.batch.clone(),
            epochs: self.epochs,
            images: self.images,
            warmup_iterations: self.warmup,
            repeat: self.repeat,
            db: self.db.clone(),
            threads: self.threads,
            mem_limit: self.mem_limit,
            mem_swap_limit: self.mem_swap_limit,
            try_anyway: self.try_anyway,
            power: self.power.then_some(true),
            board: self.board.clone(),
            power_scope: self.power_scope,
            ..Default::default()
        }
    }
}
