//! Live metrics for Prometheus: one registry per process, updated from where the values already
//! exist (the power sampler threads, the memory sampler, the clock watcher, the runner's trial
//! loop) and served as text by [`server`].
//!
//! Every update is an atomic store or add on a handle made before sampling starts: the power
//! sampler threads take no lock and allocate nothing for it.
//!
//! `edgebench_power_watts{rail, scope}`: `scope="rail"` is one monitor rail as the sensor reads
//! it; the series `rail="total"` is the sum of the rails that make the run's power total, with
//! `scope` saying what that total covers: `"module"` (the module's input) or `"board"` (module
//! and carrier board), as `--power-scope` resolved it. `edgebench_energy_joules_total{rail}`
//! integrates the same samples (trapezoids between good readings; the time around a failed
//! read is left out, as in the stored energy).
//!
//! Every series carries the board it comes from: `host` (the host name the runs record) and
//! `board` (the board profile, as `runs.board` records it), so one Prometheus tells a fleet's
//! boards apart without any relabelling. Counters exist at 0 for every workload (and ended
//! status) from the first scrape, so `increase()` counts a workload's first trial; available
//! memory is read from procfs at each scrape, so it is right before, between and during trials.

pub mod server;

use crate::board::BoardProfile;
use crate::host::HostPaths;
use crate::memory::{MemoryObserver, MemorySample};
use crate::power::{LiveSink, Reading};
use crate::provenance::{ClockObserver, ClockState};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The `scope` label of a single monitor rail.
pub(crate) const SCOPE_RAIL: &str = "rail";
/// The `rail` label of the run's power total.
pub(crate) const TOTAL_RAIL: &str = "total";

type GaugeF = Gauge<f64, AtomicU64>;

type CounterF = Counter<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RailScope {
    rail: String,
    scope: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Rail {
    rail: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Zone {
    zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClockName {
    clock: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrialLabels {
    workload: String,
    net: String,
    batch: String,
    device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Workload {
    workload: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkloadStatus {
    workload: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Version {
    version: String,
}

/// The board a process's series are labelled with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The host name, as `runs.host` records it.
    pub host: String,
    /// The board profile's name, as `runs.board` records it (`generic` when not recognised).
    pub board: String,
}

/// The longest label value kept of a host or board name.
const MAX_IDENTITY_LABEL: usize = 64;

impl Identity {
    /// This host's: the host name from procfs and the name of `board`, the profile its sweeps
    /// run with.
    pub fn of(host: &HostPaths, board: &BoardProfile) -> Identity {
        Identity {
            host: host.hostname(),
            board: board.name.clone(),
        }
    }

    /// The (host, board) label values: characters other than letters, digits, `.`, `_`, `-`
    /// and `:` become `_` (the encoder writes label values as given), at most 64 of them.
    fn labels(&self) -> [(Cow<'static, str>, Cow<'static, str>); 2] {
        let clean = |s: &str| -> String {
            let v: String = s
                .chars()
                .take(MAX_IDENTITY_LABEL)
                .map(|c| match c {
                    'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | '-' | ':' => c,
                    _ => '_',
                })
                .collect();
            if v.is_empty() {
                "unknown".into()
            } else {
                v
            }
        };
        [
            ("host".into(), clean(&self.host).into()),
            ("board".into(), clean(&self.board).into()),
        ]
    }
}

/// How the metrics are written: OpenMetrics text, or the Prometheus text format 0.0.4 (what
/// `promtool check metrics` and clients that do not ask for OpenMetrics read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Text,
}

/// Media ranges of an `Accept` header looked at; a scraper sends about 4.
const MAX_MEDIA_RANGES: usize = 32;

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format an `Accept` header asks for: OpenMetrics when it prefers
    /// `application/openmetrics-text` (by quality) to `text/plain`, `text/*` and `*/*`; the
    /// text format otherwise, and without a header (as the Prometheus Go client does).
    pub(crate) fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let (mut openmetrics, mut text) = (0.0f32, 0.0f32);
        for range in accept.split(',').take(MAX_MEDIA_RANGES) {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim();
            let mut q = 1.0f32;
            for param in parts {
                if let Some((k, v)) = param.split_once('=') {
                    if k.trim().eq_ignore_ascii_case("q") {
                        q = v
                            .trim()
                            .parse()
                            .ok()
                            .filter(|q: &f32| (0.0..=1.0).contains(q))
                            .unwrap_or(0.0);
                    }
                }
            }
            if media.eq_ignore_ascii_case("application/openmetrics-text") {
                openmetrics = openmetrics.max(q);
            } else if ["text/plain", "text/*", "*/*"]
                .iter()
                .any(|m| media.eq_ignore_ascii_case(m))
            {
                text = text.max(q);
            }
        }
        if openmetrics > 0.0 && openmetrics > text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }
}

/// OpenMetrics text as the Prometheus text format 0.0.4: a counter's `# HELP` and `# TYPE`
/// name its samples' name (`..._total`), and the `# EOF` and `# UNIT` lines are left out.
fn openmetrics_to_text(openmetrics: &str) -> String {
    let counters: HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let counter_meta = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let (name, rest) = line.strip_prefix(prefix)?.split_once(' ')?;
            counters.contains(name).then_some((prefix, name, rest))
        });
        match counter_meta {
            Some((prefix, name, rest)) => {
                out.push_str(prefix);
                out.push_str(name);
                out.push_str("_total ");
                out.push_str(rest);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    /// Where available memory and swap are read at each scrape.
    procfs: Option<HostPaths>,
    /// Whether the sync backlog is tracked (set once a backlog is known): then every trial
    /// that ends adds one to it until the next push says how many wait.
    backlog_tracked: AtomicBool,
    power_watts: Family<RailScope, GaugeF>,
    energy_joules: Family<Rail, CounterF>,
    temperature: Family<Zone, GaugeF>,
    clock_hertz: Family<ClockName, GaugeF>,
    memory_available: Gauge,
    swap_used: Gauge,
    trial_info: Family<TrialLabels, Gauge>,
    iterations_done: Gauge,
    iterations_planned: Gauge,
    iterations_total: Family<Workload, Counter>,
    trials_total: Family<WorkloadStatus, Counter>,
    sync_backlog: Gauge,
}

/// The process's metrics; cheap to clone (every clone updates the same registry).
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Metrics {
    /// This host's metrics ([`Identity::of`]), available memory read from its procfs at each
    /// scrape.
    pub fn for_host(host: &HostPaths, board: &BoardProfile) -> Metrics {
        Metrics::build(&Identity::of(host, board), Some(host.clone()))
    }

    /// Every metric registered, each series labelled with `identity`,
    /// `edgebench_build_info{version}` set to 1; memory only from the memory sampler.
    pub fn new(identity: &Identity) -> Metrics {
        Metrics::build(identity, None)
    }

    fn build(identity: &Identity, procfs: Option<HostPaths>) -> Metrics {
        let mut registry = Registry::with_labels(identity.labels().into_iter());
        let power_watts = Family::<RailScope, GaugeF>::default();
        let energy_joules = Family::<Rail, CounterF>::default();
        let temperature = Family::<Zone, GaugeF>::default();
        let clock_hertz = Family::<ClockName, GaugeF>::default();
        let memory_available = Gauge::default();
        let swap_used = Gauge::default();
        let trial_info = Family::<TrialLabels, Gauge>::default();
        let iterations_done = Gauge::default();
        let iterations_planned = Gauge::default();
        let iterations_total = Family::<Workload, Counter>::default();
        let trials_total = Family::<WorkloadStatus, Counter>::default();
        let sync_backlog = Gauge::default();
        let build_info = Family::<Version, Gauge>::default();
        build_info
            .get_or_create(&Version {
                version: crate::host::VERSION.to_string(),
            })
            .set(1);
        // Counters are registered without `_total`: the encoder appends it.
        let r = &mut registry;
        r.register(
            "edgebench_power_watts",
            "Latest power per rail; scope: rail (one monitor rail) or, for rail=\"total\", what \
             the run's total covers (module or board)",
            power_watts.clone(),
        );
        r.register(
            "edgebench_energy_joules",
            "Energy per rail integrated from the power samples",
            energy_joules.clone(),
        );
        r.register(
            "edgebench_temperature_celsius",
            "Thermal zone temperature, read with the trial's clocks",
            temperature.clone(),
        );
        r.register(
            "edgebench_clock_hertz",
            "Current frequency of each CPU policy (cpu_<policy>) and of the GPU (gpu)",
            clock_hertz.clone(),
        );
        r.register(
            "edgebench_memory_available_bytes",
            "MemAvailable, read by the memory sampler",
            memory_available.clone(),
        );
        r.register(
            "edgebench_swap_used_bytes",
            "SwapTotal - SwapFree, read by the memory sampler",
            swap_used.clone(),
        );
        r.register(
            "edgebench_trial_info",
            "1 for the trial running now; no series between trials",
            trial_info.clone(),
        );
        r.register(
            "edgebench_trial_iterations_done",
            "Iterations the running trial has recorded",
            iterations_done.clone(),
        );
        r.register(
            "edgebench_trial_iterations_planned",
            "Iterations the running trial plans (0 when unknown until it ends)",
            iterations_planned.clone(),
        );
        r.register(
            "edgebench_iterations",
            "Iterations recorded, per workload",
            iterations_total.clone(),
        );
        r.register(
            "edgebench_trials",
            "Trials ended, per workload and status",
            trials_total.clone(),
        );
        r.register(
            "edgebench_sync_backlog_trials",
            "Trials waiting to be pushed to the fleet's PostgreSQL",
            sync_backlog.clone(),
        );
        r.register(
            "edgebench_build_info",
            "1, labelled with the edgebench version",
            build_info,
        );
        let metrics = Metrics {
            inner: Arc::new(Inner {
                registry,
                procfs,
                backlog_tracked: AtomicBool::new(false),
                power_watts,
                energy_joules,
                temperature,
                clock_hertz,
                memory_available,
                swap_used,
                trial_info,
                iterations_done,
                iterations_planned,
                iterations_total,
                trials_total,
                sync_backlog,
            }),
        };
        metrics.read_memory();
        metrics
    }

    /// Makes the iteration counter of every workload of `workloads`, and the trial counter of
    /// each with every status of `ended`, at 0: so the first trial of a workload is an
    /// increase from the first scrape on. Called before the metrics are served.
    pub(crate) fn count_from_zero(&self, workloads: &[String], ended: &[&str]) {
        for workload in workloads {
            drop(self.inner.iterations_total.get_or_create(&Workload {
                workload: workload.clone(),
            }));
            for status in ended {
                drop(self.inner.trials_total.get_or_create(&WorkloadStatus {
                    workload: workload.clone(),
                    status: status.to_string(),
                }));
            }
        }
    }

    /// Available memory and swap in use from procfs, when the metrics have one.
    fn read_memory(&self) {
        if let Some(paths) = &self.inner.procfs {
            if let Some(m) = crate::memory::procfs::ProcReader::new(paths).meminfo() {
                self.set_memory(&m);
            }
        }
    }

    fn set_memory(&self, m: &crate::memory::procfs::MemInfo) {
        let inner = &self.inner;
        inner.memory_available.set(m.mem_available as i64);
        inner
            .swap_used
            .set(m.swap_total.saturating_sub(m.swap_free) as i64);
    }

    /// The Prometheus exposition (OpenMetrics text) of every metric.
    pub(crate) fn encode(&self) -> String {
        self.encode_as(Format::OpenMetrics)
    }

    /// The exposition of every metric in `format`, memory read afresh first.
    pub(crate) fn encode_as(&self, format: Format) -> String {
        self.read_memory();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.inner.registry)
            .expect("writing to a String cannot fail");
        match format {
            Format::OpenMetrics => out,
            Format::Text => openmetrics_to_text(&out),
        }
    }

    /// Trials waiting to be pushed to the fleet's database; from now on every trial that ends
    /// adds one, until the next call.
    pub(crate) fn set_sync_backlog(&self, trials: u64) {
        self.inner.sync_backlog.set(trials as i64);
        self.inner.backlog_tracked.store(true, Ordering::SeqCst);
    }

    /// A trial starts: its `edgebench_trial_info` series, progress at 0 of `planned`.
    pub fn trial(&self, trial: TrialLabelValues<'_>, planned: usize) -> TrialMetrics {
        let labels = TrialLabels {
            workload: trial.workload.to_string(),
            net: trial.net.to_string(),
            batch: trial.batch.to_string(),
            device: trial.device.to_string(),
        };
        self.inner.trial_info.get_or_create(&labels).set(1);
        self.inner.iterations_done.set(0);
        self.inner.iterations_planned.set(planned as i64);
        let iterations = self.inner.iterations_total.get_or_create_owned(&Workload {
            workload: labels.workload.clone(),
        });
        TrialMetrics {
            metrics: self.clone(),
            labels,
            iterations,
        }
    }

    /// One sink per power source, in the order of `rails` (each source's rails, in reading
    /// order, with whether they make the total); `scope` is what the total covers. The handles
    /// are made here, so the sampler threads only store and add.
    pub fn power_sinks(
        &self,
        rails: &[Vec<(String, bool)>],
        scope: &str,
    ) -> Vec<Box<dyn LiveSink>> {
        let total_watts = self.inner.power_watts.get_or_create_owned(&RailScope {
            rail: TOTAL_RAIL.into(),
            scope: scope.into(),
        });
        let total_energy = self.inner.energy_joules.get_or_create_owned(&Rail {
            rail: TOTAL_RAIL.into(),
        });
        let parts: Arc<[AtomicU64]> = rails.iter().map(|_| AtomicU64::new(0)).collect();
        rails
            .iter()
            .enumerate()
            .map(|(slot, source)| {
                let handles = source
                    .iter()
                    .map(|(rail, in_total)| RailHandle {
                        watts: self.inner.power_watts.get_or_create_owned(&RailScope {
                            rail: rail.clone(),
                            scope: SCOPE_RAIL.into(),
                        }),
                        energy: self
                            .inner
                            .energy_joules
                            .get_or_create_owned(&Rail { rail: rail.clone() }),
                        in_total: *in_total,
                        last_w: 0.0,
                    })
                    .collect();
                let has_total = source.iter().any(|(_, t)| *t);
                Box::new(PowerSink {
                    rails: handles,
                    total: has_total.then(|| TotalPart {
                        slot,
                        parts: Arc::clone(&parts),
                        watts: total_watts.clone(),
                        energy: total_energy.clone(),
                    }),
                    last_t_ns: None,
                }) as Box<dyn LiveSink>
            })
            .collect()
    }

    /// For the memory sampler's thread: available memory and swap in use from its reads.
    pub(crate) fn memory_observer(&self) -> MemoryObserver {
        let metrics = self.clone();
        Box::new(move |s: &MemorySample| {
            if let Some(m) = &s.system {
                metrics.set_memory(m);
            }
        })
    }

    /// For the clock watcher's thread: temperatures and clock frequencies from its reads. The
    /// handles are kept across reads (a host's zones and clocks come in the same order each
    /// time), so a series is looked up in the registry only when it first appears.
    pub(crate) fn clock_observer(&self) -> ClockObserver {
        let inner = Arc::clone(&self.inner);
        let mut zones: Vec<(String, GaugeF)> = Vec::new();
        let mut clocks: Vec<(String, GaugeF)> = Vec::new();
        Box::new(move |s: &ClockState| {
            for (k, z) in s.zones.iter().enumerate() {
                let g = cached(&mut zones, k, &z.name, |name| {
                    inner
                        .temperature
                        .get_or_create_owned(&Zone { zone: name.into() })
                });
                g.set(z.temp_c);
            }
            let cpu = s
                .cpus
                .iter()
                .filter_map(|p| Some((p.name.as_str(), p.cur_khz? as f64 * 1e3)));
            let gpu = s.gpu.iter().filter_map(|g| Some(("gpu", g.cur_hz? as f64)));
            for (k, (name, hz)) in cpu.chain(gpu).enumerate() {
                let g = cached(&mut clocks, k, name, |name| {
                    let clock = match name {
                        "gpu" => "gpu".to_string(),
                        policy => format!("cpu_{policy}"),
                    };
                    inner.clock_hertz.get_or_create_owned(&ClockName { clock })
                });
                g.set(hz);
            }
        })
    }
}

/// The handle at `k` when it is `name`'s, else one made (and kept) for `name`.
fn cached<'c>(
    cache: &'c mut Vec<(String, GaugeF)>,
    k: usize,
    name: &str,
    make: impl FnOnce(&str) -> GaugeF,
) -> &'c GaugeF {
    if cache.get(k).is_none_or(|(n, _)| n != name) {
        let handle = make(name);
        cache.truncate(k);
        cache.push((name.to_string(), handle));
    }
    &cache[k].1
}

/// What `edgebench_trial_info` labels a trial with.
#[derive(Debug, Clone, Copy)]
pub struct TrialLabelValues<'a> {
    pub workload: &'a str,
    pub net: &'a str,
    pub batch: usize,
    pub device: &'a str,
}

/// The running trial's series; dropping it removes `edgebench_trial_info` and zeroes the
/// progress gauges.
#[derive(Debug)]
pub struct TrialMetrics {
    metrics: Metrics,
    labels: TrialLabels,
    iterations: Counter,
}

impl TrialMetrics {
    /// One more iteration recorded.
    pub fn iteration(&self) {
        self.metrics.inner.iterations_done.inc();
        self.iterations.inc();
    }

    /// The trial ended with `status`: counted, and (once a backlog is tracked) one more
    /// trial waits to be pushed.
    pub fn ended(self, status: &str) {
        let inner = &self.metrics.inner;
        inner
            .trials_total
            .get_or_create(&WorkloadStatus {
                workload: self.labels.workload.clone(),
                status: status.to_string(),
            })
            .inc();
        if inner.backlog_tracked.load(Ordering::SeqCst) {
            inner.sync_backlog.inc();
        }
    }
}

impl Drop for TrialMetrics {
    fn drop(&mut self) {
        let inner = &self.metrics.inner;
        inner.trial_info.remove(&self.labels);
        inner.iterations_done.set(0);
        inner.iterations_planned.set(0);
    }
}

struct RailHandle {
    watts: GaugeF,
    energy: CounterF,
    in_total: bool,
    /// The previous good reading's power, for the trapezoid to the next.
    last_w: f64,
}

/// This source's share of the total: its rails' power goes into `parts[slot]`, the total
/// gauge is the sum of every source's part.
struct TotalPart {
    slot: usize,
    parts: Arc<[AtomicU64]>,
    watts: GaugeF,
    energy: CounterF,
}

struct PowerSink {
    rails: Vec<RailHandle>,
    total: Option<TotalPart>,
    /// The previous good reading's time; None at the start and after a failed read.
    last_t_ns: Option<i64>,
}

impl LiveSink for PowerSink {
    fn sample(&mut self, t_ns: i64, readings: Option<&[Reading]>) {
        let Some(readings) = readings else {
            // The time without readings is left out of the energy.
            self.last_t_ns = None;
            return;
        };
        let dt_s = self.last_t_ns.map(|t| (t_ns - t).max(0) as f64 * 1e-9);
        let (mut part_w, mut part_j) = (0.0, 0.0);
        for (h, r) in self.rails.iter_mut().zip(readings) {
            h.watts.set(r.watts);
            let joules = dt_s.map_or(0.0, |dt| ((h.last_w + r.watts) * 0.5 * dt).max(0.0));
            if joules > 0.0 {
                h.energy.inc_by(joules);
            }
            if h.in_total {
                part_w += r.watts;
                part_j += joules;
            }
            h.last_w = r.watts;
        }
        self.last_t_ns = Some(t_ns);
        if let Some(total) = &self.total {
            total.parts[total.slot].store(part_w.to_bits(), Ordering::Relaxed);
            let sum: f64 = total
                .parts
                .iter()
                .map(|p| f64::from_bits(p.load(Ordering::Relaxed)))
                .sum();
            total.watts.set(sum);
            if part_j > 0.0 {
                total.energy.inc_by(part_j);
            }
        }
    }
}

#[cfg(test)]
mod tests;
