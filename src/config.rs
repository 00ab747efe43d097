//! The run configuration: TOML with serde. Unknown keys and wrong types are errors that name the
//! file, line and key; command-line flags override the file; the effective config is stored with
//! every run.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The config file `edgebench run` reads when no `--config` is given (if it exists).
pub(crate) const DEFAULT_CONFIG_PATH: &str = "config/edgebench.toml";
/// The DB used when neither `--db`, `$EDGEBENCH_DB` nor the config names one.
pub const DEFAULT_DB: &str = "edgebench.db";

/// Most iterations one trial may plan ((images / batch) * epochs). A trial keeps its
/// iterations in memory (64 bytes each) and stores one row per iteration (about 100 bytes),
/// so this bounds a trial to about 0.6 GB of RAM and 1 GB of database.
pub(crate) const MAX_ITERATIONS: usize = 10_000_000;
/// Largest batch: far above what fits a board's memory, small enough that tensor sizes
/// (batch x image elements) cannot overflow.
pub const MAX_BATCH: usize = 65_536;
/// Most CPU threads for the math (0 = all cores).
pub const MAX_THREADS: usize = 1024;
/// Smallest per-trial memory cap: anything below is a unit slip (sizes without a unit are
/// bytes), not a board.
pub(crate) const MIN_MEMORY_LIMIT: u64 = 1 << 20;
/// Longest a stop may wait for the current iteration, and the longest idle baseline, seconds.
pub(crate) const MAX_WAIT_S: f64 = 3600.0;
/// Most repetitions of one trial key: far above what a study runs, low enough that a typo
/// (an extra zero or two) is refused instead of planning a sweep of weeks.
pub(crate) const MAX_REPEAT: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

impl DeviceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
        }
    }

    pub fn parse(s: &str) -> Result<DeviceKind, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(DeviceKind::Cpu),
            "cuda" | "gpu" => Ok(DeviceKind::Cuda),
            other => Err(format!("unknown device '{other}' (expected cpu or cuda)")),
        }
    }
}

/// Unknown keys are refused in every section; a section no field names is a workload's own
/// (`[idle]`), checked by that workload (serde cannot deny unknown fields beside `flatten`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Config {
    pub sweep: Sweep,
    pub data: Data,
    pub store: StoreConfig,
    pub train: Train,
    pub memory: MemoryConfig,
    pub daemon: DaemonConfig,
    pub power: PowerConfig,
    /// `[sync]`: the central PostgreSQL the daemon copies its results to.
    pub sync: SyncConfig,
    /// `[metrics]`: where the daemon serves `/metrics` for Prometheus.
    pub metrics: MetricsConfig,
    /// The workloads' own sections (`[mlp]`, `[[exec]]`, …), each read and checked by its
    /// workload.
    #[serde(flatten)]
    pub sections: std::collections::BTreeMap<String, toml::Value>,
}

/// A duration written like `90s`, `15m`, `1h 30m` or `600` (seconds), parsed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Timeout(pub Duration);

impl std::str::FromStr for Timeout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let parsed = match t.parse::<u64>() {
            Ok(seconds) => Ok(Duration::from_secs(seconds)),
            Err(_) => humantime::parse_duration(t).map_err(|e| e.to_string()),
        };
        match parsed {
            Ok(d) if d.is_zero() => Err(format!(
                "timeout '{s}' is zero; give a duration above 0, e.g. 30m"
            )),
            Ok(d) => Ok(Timeout(d)),
            Err(e) => Err(format!(
                "invalid duration '{s}' ({e}); write e.g. 90s, 30m or 2h"
            )),
        }
    }
}

impl TryFrom<String> for Timeout {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Timeout> for String {
    fn from(t: Timeout) -> String {
        humantime::format_duration(t.0).to_string()
    }
}

pub use crate::record::WorkloadKind;

/// What to run: the workload, and for `cnn` every (net, device, batch) combination, in that
/// nesting order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Sweep {
    pub workload: WorkloadKind,
    pub nets: Vec<String>,
    pub devices: Vec<DeviceKind>,
    pub batches: Vec<usize>,
    pub epochs: usize,
    pub images: usize,
    /// Leading iterations of each trial that are stored but left out of time per image.
    pub warmup_iterations: usize,
    /// On SIGINT/SIGTERM the current iteration may finish for this long; then the worker is
    /// killed and the trial is still `interrupted` (systemd waits 10 s by default).
    pub stop_grace_s: f64,
    /// Runs of every trial key, each a fresh worker and its own stored trial, round-robin
    /// across keys (repetition 1 of every key, then repetition 2, ...).
    pub repeat: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Data {
    /// An image folder (one subfolder per class); absent = the synthetic set.
    pub dataset: Option<PathBuf>,
    /// Seed of the synthetic images.
    pub synthetic_seed: u64,
    /// Classes of the synthetic set (labels are image index mod classes). The studies trained on
    /// one class (tench, ImageNet class 0).
    pub synthetic_classes: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    pub db: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Train {
    /// CPU threads for the math (0 = all cores).
    pub threads: usize,
    /// Seed of the weight initialisation and dropout masks.
    pub seed: u64,
    /// CNN trials on CUDA: TF32 tensor cores for f32 convolutions and matrix products (10-bit
    /// mantissa products), as PyTorch's default; off = strict fp32.
    pub tf32: bool,
}

/// A memory size written like `4G`, `512M`, `1.5GiB` or `1000000` (bytes; binary units),
/// parsed once when the config or the flag is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ByteSize(pub u64);

impl std::str::FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_size(s).map(ByteSize)
    }
}

/// Parses sizes like `4G`, `512M`, `1.5GiB`, `1000000` (bytes). Binary units.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid size '{text}' (e.g. 4G, 512M)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "invalid size unit '{other}' in '{text}' (use K, M, G)"
            ))
        }
    };
    let bytes = value * mult as f64;
    // Sizes are stored as SQLite INTEGERs (i64); `as` would saturate a larger one silently.
    if !(bytes.is_finite() && bytes <= i64::MAX as f64) {
        return Err(format!(
            "size '{text}' is too large for a memory size (e.g. 4G, 512M)"
        ));
    }
    Ok(bytes as u64)
}

impl TryFrom<String> for ByteSize {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<ByteSize> for String {
    fn from(b: ByteSize) -> String {
        b.0.to_string()
    }
}

/// When the daemon runs the configured sweep. Every schedule also runs it at start, so an
/// interrupted sweep resumes as soon as the service is back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Schedule {
    /// At start, then exit.
    Once,
    /// At start, then every day at HH:MM local time.
    Daily { hour: u32, minute: u32 },
    /// Once the board is up for `daemon.min_uptime_s` and its load is below `daemon.idle_load`,
    /// then exit.
    BootIdle,
}

impl TryFrom<String> for Schedule {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Schedule> for String {
    fn from(s: Schedule) -> String {
        match s {
            Schedule::Once => "once".into(),
            Schedule::BootIdle => "boot-idle".into(),
            Schedule::Daily { hour, minute } => format!("daily {hour:02}:{minute:02}"),
        }
    }
}

impl std::str::FromStr for Schedule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad = || {
            format!("daemon.schedule: '{s}' is not one of \"once\", \"daily HH:MM\", \"boot-idle\"")
        };
        match s {
            "once" => Ok(Schedule::Once),
            "boot-idle" => Ok(Schedule::BootIdle),
            _ => {
                let time = s.strip_prefix("daily ").ok_or_else(bad)?;
                let (h, m) = time.trim().split_once(':').ok_or_else(bad)?;
                let (hour, minute) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
                if hour > 23 || minute > 59 {
                    return Err(bad());
                }
                Ok(Schedule::Daily { hour, minute })
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// "once", "daily HH:MM" (local time) or "boot-idle".
    pub schedule: Schedule,
    /// boot-idle: 1-minute load average below which the board counts as idle.
    pub idle_load: f64,
    /// boot-idle: seconds since boot before the board may count as idle.
    pub min_uptime_s: f64,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            schedule: Schedule::Once,
            idle_load: 1.0,
            min_uptime_s: 120.0,
        }
    }
}

/// `[sync]`: results copied to a central PostgreSQL (`edgebench push`) by the daemon, after
/// each sweep and on a timer while trials wait. The local database stays the truth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyncConfig {
    /// `postgres://USER@HOST/DB?sslmode=verify-full`; what the URL leaves out comes from
    /// libpq's variables (PGHOST, PGUSER, PGPASSWORD, PGPASSFILE, PGSSLMODE). Never a
    /// password here: it would sit in every run's recorded config.
    pub postgres: Option<String>,
    /// How long the daemon waits between pushes while trials wait to be pushed.
    pub interval: Timeout,
    /// The longest wait after failed pushes (the wait doubles from `interval` up to this).
    pub max_backoff: Timeout,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            postgres: None,
            interval: Timeout(Duration::from_secs(300)),
            max_backoff: Timeout(Duration::from_secs(3600)),
        }
    }
}

/// `[metrics]`: the daemon's Prometheus endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `HOST:PORT` to serve `/metrics` on; loopback unless the board should be scraped from
    /// elsewhere. `"off"`: no endpoint.
    pub listen: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: "127.0.0.1:9464".into(),
        }
    }
}

/// Memory: per-trial cap, swap verdict thresholds, the pre-trial fit check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    /// Run each trial in a memory cgroup of this size, e.g. "4G" (absent = no cap).
    pub limit: Option<ByteSize>,
    /// Swap the capped trial may use on top, e.g. "6G"; "0" = none; absent = as the host has.
    pub swap_limit: Option<ByteSize>,
    /// How often the memory sampler reads procfs.
    pub sample_interval_ms: u64,
    /// Swap verdict: the worker's own major faults per measured iteration that, with matching
    /// swap-ins, mark a trial swap-spoiled (see docs/memory.md).
    pub major_faults_per_iteration: f64,
    /// Run trials predicted not to fit RAM + swap instead of recording `skipped_memory`.
    pub try_anyway: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            limit: None,
            swap_limit: None,
            sample_interval_ms: 100,
            major_faults_per_iteration: 256.0,
            try_anyway: false,
        }
    }
}

/// `[power]`: energy measurement (`edgebench run --power`, `edgebench sensors`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PowerConfig {
    /// Measure power during the sweep (`--power` sets it).
    pub enabled: bool,
    /// Board profile name (boards/*.toml); absent = detected from the device tree.
    pub board: Option<String>,
    /// What the total covers: `module` (the module's input, what the studies compared) or
    /// `board` (module and carrier board together). Absent = `module`, except on a board whose
    /// only monitor measures the whole board (AGX Thor's VIN), which records `board`.
    pub scope: Option<PowerScope>,
    /// Sampling rate; absent = 1 kHz for raw INA226, the driver's update interval for hwmon.
    pub rate_hz: Option<f64>,
    /// Idle baseline measured before the sweep, seconds (0 = none).
    pub baseline_s: f64,
    /// Rails whose sum is the total; empty = the board profile's choice.
    pub total: Vec<String>,
    /// Store every power sample in `power_samples` (the energies are stored either way).
    pub store_samples: bool,
    /// sysfs GPIO pin raised during each trial's measured iterations (for a scope or an
    /// external power analyser); absent = none.
    pub gpio_marker: Option<u32>,
    /// INA226 chips read raw over /dev/i2c-N (not owned by a kernel driver).
    pub ina226: Option<Ina226Config>,
}

/// The part of the hardware a power total covers; numbers of different scopes never compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PowerScope {
    /// The module's input rail (or its module rails summed).
    Module,
    /// Everything the supply feeds: module and carrier board.
    Board,
}

impl PowerScope {
    pub fn as_str(self) -> &'static str {
        match self {
            PowerScope::Module => "module",
            PowerScope::Board => "board",
        }
    }

    pub fn parse(s: &str) -> Result<PowerScope, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "module" => Ok(PowerScope::Module),
            "board" => Ok(PowerScope::Board),
            other => Err(format!(
                "unknown power scope '{other}' (expected module or board)"
            )),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Ina226Config {
    pub bus: u32,
    /// 7-bit addresses, 0x40..0x4F.
    pub addresses: Vec<u16>,
    /// Rail names, one per address; empty = `INA226_<bus>-<addr>`.
    pub names: Vec<String>,
    pub shunt_ohms: f64,
    pub max_current_a: f64,
    /// Samples averaged per update: 1, 4, 16, 64, 128, 256, 512, 1024.
    pub averaging: u16,
    /// Conversion times, us: 140, 204, 332, 588, 1100, 2116, 4156, 8244.
    pub bus_conversion_us: u32,
    pub shunt_conversion_us: u32,
    /// Device node; absent = /dev/i2c-<bus>.
    pub device: Option<PathBuf>,
}

impl Default for PowerConfig {
    fn default() -> Self {
        PowerConfig {
            enabled: false,
            board: None,
            scope: None,
            rate_hz: None,
            baseline_s: 3.0,
            total: Vec::new(),
            store_samples: true,
            gpio_marker: None,
            ina226: None,
        }
    }
}

impl MemoryConfig {
    pub(crate) fn limit_bytes(&self) -> Option<u64> {
        self.limit.map(|b| b.0)
    }

    pub(crate) fn swap_limit_bytes(&self) -> Option<u64> {
        self.swap_limit.map(|b| b.0)
    }
}

impl Default for Ina226Config {
    fn default() -> Self {
        Ina226Config {
            bus: 1,
            addresses: vec![0x40],
            names: Vec::new(),
            shunt_ohms: 0.01,
            max_current_a: 8.0,
            averaging: 1,
            bus_conversion_us: 332,
            shunt_conversion_us: 588,
            device: None,
        }
    }
}

impl Default for Sweep {
    fn default() -> Self {
        Sweep {
            workload: WorkloadKind::named("cnn"),
            nets: vec!["alexnet".into(), "googlenet".into()],
            devices: vec![DeviceKind::Cpu],
            batches: vec![1, 2, 4, 8],
            epochs: 1,
            images: 16,
            warmup_iterations: 2,
            stop_grace_s: 8.0,
            repeat: 1,
        }
    }
}

impl Default for Data {
    fn default() -> Self {
        Data {
            dataset: None,
            synthetic_seed: 20170101,
            synthetic_classes: 1,
        }
    }
}

impl Default for Train {
    fn default() -> Self {
        Train {
            threads: 0,
            seed: 1,
            tf32: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is invalid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid configuration ({origin}): {message}")]
    Invalid { origin: String, message: String },
}

/// The deepest a workload's section (`Config::sections`) may nest tables and arrays.
const MAX_SECTION_DEPTH: usize = 16;

/// How deep tables and arrays nest in `value` (1: a plain value), without recursion.
fn nesting_depth(value: &toml::Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 1)];
    while let Some((v, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        match v {
            toml::Value::Table(t) => pending.extend(t.values().map(|c| (c, depth + 1))),
            toml::Value::Array(a) => pending.extend(a.iter().map(|c| (c, depth + 1))),
            _ => {}
        }
    }
    deepest
}

/// Command-line overrides; `None` keeps the file's value.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub workload: Option<WorkloadKind>,
    pub nets: Option<Vec<String>>,
    pub devices: Option<Vec<DeviceKind>>,
    pub batches: Option<Vec<usize>>,
    pub epochs: Option<usize>,
    pub images: Option<usize>,
    pub warmup_iterations: Option<usize>,
    pub repeat: Option<usize>,
    pub dataset: Option<PathBuf>,
    pub db: Option<PathBuf>,
    pub threads: Option<usize>,
    pub tf32: Option<bool>,
    pub mem_limit: Option<ByteSize>,
    pub mem_swap_limit: Option<ByteSize>,
    pub try_anyway: bool,
    pub power: Option<bool>,
    pub board: Option<String>,
    pub power_scope: Option<PowerScope>,
}

impl Config {
    /// Parses TOML text; `path` names the origin in errors (toml's message carries the line,
    /// column and key).
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        // A workload's section nests a few levels; a dotted key can nest a hundred, which loads
        // but, written back, exceeds the TOML parser's recursion limit.
        for (name, value) in &config.sections {
            let depth = nesting_depth(value);
            if depth > MAX_SECTION_DEPTH {
                return Err(ConfigError::Parse {
                    path: path.to_path_buf(),
                    message: format!(
                        "[{name}] nests tables and arrays {depth} deep; a section nests at most \
                         {MAX_SECTION_DEPTH}"
                    ),
                });
            }
        }
        Ok(config)
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml(&text, path)
    }

    /// `--config FILE` if given, else `config/edgebench.toml` when present, else built-in
    /// defaults (which that file mirrors). Returns the config and where it came from.
    pub fn resolve(explicit: Option<&Path>) -> Result<(Config, String), ConfigError> {
        match explicit {
            Some(path) => Ok((Config::load(path)?, path.display().to_string())),
            None if Path::new(DEFAULT_CONFIG_PATH).is_file() => Ok((
                Config::load(Path::new(DEFAULT_CONFIG_PATH))?,
                DEFAULT_CONFIG_PATH.to_string(),
            )),
            None => Ok((Config::default(), "built-in defaults".to_string())),
        }
    }

    pub fn apply(&mut self, o: &Overrides) {
        let s = &mut self.sweep;
        macro_rules! set {
            ($dst:expr, $src:expr) => {
                if let Some(v) = $src.clone() {
                    $dst = v;
                }
            };
        }
        set!(s.workload, o.workload);
        set!(s.nets, o.nets);
        set!(s.devices, o.devices);
        set!(s.batches, o.batches);
        set!(s.epochs, o.epochs);
        set!(s.images, o.images);
        set!(s.warmup_iterations, o.warmup_iterations);
        set!(s.repeat, o.repeat);
        set!(self.train.threads, o.threads);
        set!(self.train.tf32, o.tf32);
        if o.mem_limit.is_some() {
            self.memory.limit = o.mem_limit;
        }
        if o.mem_swap_limit.is_some() {
            self.memory.swap_limit = o.mem_swap_limit;
        }
        self.memory.try_anyway |= o.try_anyway;
        set!(self.power.enabled, o.power);
        if o.board.is_some() {
            self.power.board = o.board.clone();
        }
        if o.power_scope.is_some() {
            self.power.scope = o.power_scope;
        }
        if o.dataset.is_some() {
            self.data.dataset = o.dataset.clone();
        }
        if o.db.is_some() {
            self.store.db = o.db.clone();
        }
    }

    /// A workload's own section (`[idle]`), its defaults where absent; the message names the
    /// section and the key.
    pub fn section<T: serde::de::DeserializeOwned + Default>(
        &self,
        name: &str,
    ) -> Result<T, String> {
        match self.sections.get(name) {
            None => Ok(T::default()),
            Some(value) => value
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| format!("[{name}]: {}", e.message())),
        }
    }

    /// Checks what serde cannot, before anything is written: non-empty lists, numbers inside
    /// their bounds. The sweep's workload checks its own part (the workloads' config check runs
    /// both). Messages name the config key and its flag, since either may have set the value.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            origin: origin.to_string(),
            message,
        };
        let s = &self.sweep;
        if s.nets.is_empty() || s.devices.is_empty() || s.batches.is_empty() {
            return Err(invalid(
                "sweep.nets, sweep.devices and sweep.batches must each name at least one value"
                    .into(),
            ));
        }
        if !(s.stop_grace_s >= 0.0 && s.stop_grace_s <= MAX_WAIT_S) {
            return Err(invalid(format!(
                "sweep.stop_grace_s must be a number of seconds between 0 and {MAX_WAIT_S}"
            )));
        }
        if !(1..=MAX_REPEAT).contains(&s.repeat) {
            return Err(invalid(format!(
                "sweep.repeat (--repeat) = {} is out of range; use 1 to {MAX_REPEAT}",
                s.repeat
            )));
        }
        if s.epochs == 0 {
            return Err(invalid("sweep.epochs (--epochs) must be at least 1".into()));
        }
        if s.images == 0 {
            return Err(invalid("sweep.images (--images) must be at least 1".into()));
        }
        if s.warmup_iterations > MAX_ITERATIONS {
            return Err(invalid(format!(
                "sweep.warmup_iterations (--warmup) = {} exceeds {MAX_ITERATIONS}; warm-up \
                 iterations are part of a trial's iterations (a trial always keeps at least one \
                 measured iteration)",
                s.warmup_iterations
            )));
        }
        if self.train.threads > MAX_THREADS {
            return Err(invalid(format!(
                "train.threads (--threads) = {} is out of range; use 1 to {MAX_THREADS}, or 0 \
                 for all cores",
                self.train.threads
            )));
        }
        if let Some(limit) = self.memory.limit_bytes() {
            if limit < MIN_MEMORY_LIMIT {
                return Err(invalid(format!(
                    "memory.limit (--mem-limit) = {limit} bytes is below 1M; give a unit, e.g. \
                     4G or 512M (a number alone is bytes)"
                )));
            }
        }
        if !(1..=60_000).contains(&self.memory.sample_interval_ms) {
            return Err(invalid(
                "memory.sample_interval_ms must be between 1 and 60000".into(),
            ));
        }
        if !(self.memory.major_faults_per_iteration >= 0.0
            && self.memory.major_faults_per_iteration.is_finite())
        {
            return Err(invalid(
                "memory.major_faults_per_iteration must be a finite number >= 0".into(),
            ));
        }
        // Labels are image index mod classes, so more classes than a net's outputs would
        // index past its last logit.
        let outputs = s
            .nets
            .iter()
            .filter_map(|n| crate::models::by_name(n))
            .map(|n| n.classes)
            .min()
            .unwrap_or(1);
        if !(1..=outputs).contains(&self.data.synthetic_classes) {
            return Err(invalid(format!(
                "data.synthetic_classes must be between 1 and {outputs} (the networks' output \
                 classes)"
            )));
        }
        if let Some(url) = &self.sync.postgres {
            if crate::text::url_has_password(url) {
                return Err(invalid(
                    "sync.postgres must not hold a password (it would be recorded with every \
                     run's config); put it in the password file (PGPASSFILE, default ~/.pgpass, \
                     mode 0600) or PGPASSWORD"
                        .into(),
                ));
            }
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(invalid(
                    "sync.postgres must be a postgres://USER@HOST[:PORT]/DB URL".into(),
                ));
            }
            let query = url.split_once('?').map_or("", |(_, q)| q);
            if let Some(other) = query.split('&').filter(|kv| !kv.is_empty()).find(|kv| {
                let name = kv.split_once('=').map_or("", |(k, _)| k);
                !crate::text::SHOWN_PARAMETERS.contains(&name)
            }) {
                // The name only: the value, or a bare word, may be a secret.
                let name = other
                    .split_once('=')
                    .map_or("(a parameter without =)", |(k, _)| k);
                return Err(invalid(format!(
                    "sync.postgres: parameter {:?} is not one of {}",
                    crate::text::ellipsis(name, 40),
                    crate::text::SHOWN_PARAMETERS.join(", ")
                )));
            }
        }
        if self.sync.interval.0.is_zero() || self.sync.max_backoff.0 < self.sync.interval.0 {
            return Err(invalid(
                "sync.interval must be above 0 and sync.max_backoff at least sync.interval".into(),
            ));
        }
        let p = &self.power;
        if p.rate_hz.is_some_and(|r| !(r > 0.0 && r <= 10_000.0)) {
            return Err(invalid("power.rate_hz must be in (0, 10000]".into()));
        }
        if !(p.baseline_s >= 0.0 && p.baseline_s <= MAX_WAIT_S) {
            return Err(invalid(format!(
                "power.baseline_s must be between 0 and {MAX_WAIT_S}"
            )));
        }
        if let Some(i) = &p.ina226 {
            if let Some(a) = i.addresses.iter().find(|a| !(0x40..=0x4F).contains(*a)) {
                return Err(invalid(format!(
                    "power.ina226.addresses: {a:#04x} is not an INA226 address (0x40..0x4F)"
                )));
            }
            if !i.names.is_empty() && i.names.len() != i.addresses.len() {
                return Err(invalid(
                    "power.ina226.names must be empty or name every address".into(),
                ));
            }
        }
        Ok(())
    }

    /// The DB path: `--db` or `$EDGEBENCH_DB` (already folded into `store.db` by the CLI), the
    /// config's `store.db`, else `./edgebench.db`.
    pub fn db_path(&self) -> PathBuf {
        self.store
            .db
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DB))
    }

    pub(crate) fn to_toml(&self) -> String {
        toml::to_string(self).expect("config serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_url_with_a_password_is_refused() {
        let with = |url: &str| Config {
            sync: SyncConfig {
                postgres: Some(url.into()),
                ..SyncConfig::default()
            },
            ..Config::default()
        };
        for url in [
            "postgres://u:hunter2@h/db",
            "postgres://u@h/db?password=hunter2",
            "postgres://u@h/db?PASSWORD=hunter2",
            "postgres://u@h/db?sslmode=require&pass%77ord=hunter2",
        ] {
            let e = with(url).validate("test").unwrap_err().to_string();
            assert!(e.contains("PGPASSFILE") && !e.contains("hunter2"), "{e}");
        }
        for url in ["postgres://u@h/db?pwd=hunter2", "postgres://u@h/db?hunter2"] {
            let e = with(url).validate("test").unwrap_err().to_string();
            assert!(e.contains("sslmode") && !e.contains("hunter2"), "{e}");
        }
        with("postgres://u@h:5433/db?sslmode=verify-full")
            .validate("test")
            .unwrap();
        with("mysql://u@h/db").validate("test").unwrap_err();
    }

    #[test]
    fn timeouts() {
        let secs = |t: &str| t.parse::<Timeout>().map(|t| t.0.as_secs());
        assert_eq!(secs("90"), Ok(90));
        assert_eq!(secs("30m"), Ok(1800));
        assert_eq!(secs("1h 30m"), Ok(5400));
        assert!(secs("0").unwrap_err().contains("zero"));
        assert!(secs("soon")
            .unwrap_err()
            .contains("invalid duration 'soon'"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("4X").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999999999999T").is_err());
        assert!(parse_size(&"9".repeat(400)).is_err());
    }

    #[test]
    fn schedules_parse() {
        assert_eq!("once".parse(), Ok(Schedule::Once));
        assert_eq!("boot-idle".parse(), Ok(Schedule::BootIdle));
        assert_eq!(
            "daily 03:30".parse(),
            Ok(Schedule::Daily {
                hour: 3,
                minute: 30
            })
        );
        assert!("daily 25:00".parse::<Schedule>().is_err());
        assert!("hourly".parse::<Schedule>().unwrap_err().contains("hourly"));
    }

    #[test]
    fn paper_config_is_the_studies_sweep() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/paper.toml");
        let c = Config::load(&path).unwrap();
        c.validate("paper.toml").unwrap();
        assert_eq!(c.sweep.batches, (0..10).map(|i| 1 << i).collect::<Vec<_>>());
        assert_eq!((c.sweep.epochs, c.sweep.images), (10, 1024));
        assert_eq!(c.sweep.devices, vec![DeviceKind::Cpu, DeviceKind::Cuda]);
        assert_eq!(c.sweep.nets, vec!["alexnet", "googlenet"]);
    }

    #[test]
    fn a_section_nested_too_deep_is_refused_and_a_deep_enough_one_round_trips() {
        let nested = |depth: usize| {
            let keys: Vec<String> = (0..depth - 1).map(|i| format!("k{i}")).collect();
            format!("[{}]\nv = 1\n", keys.join("."))
        };
        let path = Path::new("deep.toml");
        let fits = Config::from_toml(&nested(MAX_SECTION_DEPTH), path).unwrap();
        let written = fits.to_toml();
        assert_eq!(Config::from_toml(&written, path).unwrap(), fits);
        let e = Config::from_toml(&nested(MAX_SECTION_DEPTH + 1), path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("deep.toml") && e.contains("[k0]") && e.contains("17 deep"),
            "{e}"
        );
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let text = "[sweep]\nepochs = 2\nbatchez = [1]\n";
        let err = Config::from_toml(text, Path::new("my.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("my.toml"), "{err}");
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("batchez"), "{err}");
    }

    #[test]
    fn wrong_type_names_line_and_key() {
        let err = Config::from_toml("[sweep]\nimages = \"many\"\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2") && err.contains("images"), "{err}");
        let err = Config::from_toml("[sweep]\ndevices = [\"tpu\"]\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tpu") && err.contains("cuda"), "{err}");
    }

    #[test]
    fn power_section_parses_validates_and_rejects_unknown_keys() {
        let text = "[power]\nenabled = true\nrate_hz = 500.0\n[power.ina226]\nbus = 7\n\
                    addresses = [0x40, 0x41]\nnames = [\"VDD_IN\", \"VDD_GPU\"]\n";
        let c = Config::from_toml(text, Path::new("p.toml")).unwrap();
        let i = c.power.ina226.as_ref().unwrap();
        assert_eq!((i.bus, i.addresses.clone()), (7, vec![0x40, 0x41]));
        assert_eq!(i.shunt_ohms, Ina226Config::default().shunt_ohms);
        c.validate("p.toml").unwrap();
        // The effective config round-trips through the TOML stored with the run.
        assert_eq!(Config::from_toml(&c.to_toml(), Path::new("x")).unwrap(), c);
        let err = Config::from_toml("[power]\nrate = 5\n", Path::new("p.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("rate") && err.contains("line 2"), "{err}");
        let bad =
            Config::from_toml("[power.ina226]\naddresses = [0x60]\n", Path::new("p")).unwrap();
        assert!(bad.validate("p").unwrap_err().to_string().contains("0x60"));
        let mut c = Config::default();
        c.apply(&Overrides {
            power: Some(true),
            board: Some("tx2".into()),
            ..Default::default()
        });
        assert!(c.power.enabled);
        assert_eq!(c.power.board.as_deref(), Some("tx2"));
    }
}
