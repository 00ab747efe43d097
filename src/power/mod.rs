//! Power measurement: sources behind one small trait (raw INA226 over I2C, the kernel's
//! ina3221/ina3221x/ina2xx, RAPL), discovery guided by the board profile, sampler threads and
//! the energy arithmetic.
//!
//! What the runner calls, in order:
//! 1. [`PowerMonitor::for_run`] before anything is written (no sensor = an error to exit 2 on);
//! 2. [`PowerMonitor::baseline`] once per run, stored with the run;
//! 3. per trial [`PowerMonitor::start`] before the first iteration, [`RecordingHandle::stop`]
//!    after the last, then [`PowerMonitor::assess_trial`] with the trial's iteration records.

pub mod energy;
pub mod hwmon;
pub mod ina226;
pub mod marker;
pub mod rapl;
pub mod sampler;

use crate::board::{self, Detection};
use crate::clock::monotonic_ns;
use crate::config::{PowerConfig, PowerScope};
use crate::host::HostPaths;
use crate::record::IterationRecord;
pub use energy::{trial_energy, TrialEnergy};
use sampler::SharedSource;
pub use sampler::{Health, RailSeries, RecordingHandle, Samples};
use serde::Serialize;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One rail's reading. Energy counters (RAPL) have no voltage or current.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub volts: Option<f64>,
    pub amps: Option<f64>,
    pub watts: f64,
}

/// A power monitor with one or more rails.
pub trait PowerSource: Send {
    /// Driver and location, e.g. `ina3221 1-0040 (/sys/.../hwmon3)`.
    fn describe(&self) -> String;
    fn rails(&self) -> &[String];
    /// One reading per rail, in `rails()` order.
    fn read(&mut self) -> anyhow::Result<Vec<Reading>>;
    /// The source's natural sampling period (its update interval).
    fn default_period(&self) -> Duration;
}

/// A place discovery looked at, and what it found there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Probe {
    pub place: String,
    /// None: nothing there.
    pub found: Option<String>,
}

/// The idle power before the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Baseline {
    pub power_w: f64,
    pub duration_s: f64,
}

/// What discovery found; `monitor` is None when no source was found.
pub struct Discovery {
    pub monitor: Option<PowerMonitor>,
    pub probed: Vec<Probe>,
    /// Configured sources that failed to open (an EBUSY INA226, a missing /dev/i2c-N).
    pub errors: Vec<String>,
    pub board: Detection,
}

pub struct PowerMonitor {
    sources: Vec<(SharedSource, Duration)>,
    /// (source description, rail) pairs summed as the board's total.
    total: Vec<(String, String)>,
    pub total_how: String,
    /// What the total covers (recorded with the run: numbers of different scopes never compare).
    pub scope: PowerScope,
    pub board: Detection,
    pub warnings: Vec<String>,
    /// The slowest refresh among the sources of the total: how often a new value exists.
    pub sensor_period: Duration,
    /// Set once a trial too short for the sensor has been warned about (once per run).
    warned_low_samples: AtomicBool,
    /// `power.gpio_marker`: high during each trial's measured iterations.
    marker: Option<Mutex<marker::GpioMarker>>,
    /// Sensor failures over the run's trials.
    health: Arc<Mutex<Health>>,
}

fn raw_ina226(
    cfg: &PowerConfig,
    probed: &mut Vec<Probe>,
    errors: &mut Vec<String>,
) -> Vec<Box<dyn PowerSource>> {
    let Some(c) = &cfg.ina226 else {
        probed.push(Probe {
            place: "INA226 raw over /dev/i2c-N (not configured: no [power.ina226])".into(),
            found: None,
        });
        return Vec::new();
    };
    let path = c
        .device
        .clone()
        .unwrap_or_else(|| format!("/dev/i2c-{}", c.bus).into());
    let settings = ina226::Settings {
        shunt_ohms: c.shunt_ohms,
        max_current_a: c.max_current_a,
        averaging: c.averaging,
        bus_conversion_us: c.bus_conversion_us,
        shunt_conversion_us: c.shunt_conversion_us,
    };
    let mut out: Vec<Box<dyn PowerSource>> = Vec::new();
    for (k, &addr) in c.addresses.iter().enumerate() {
        let name = c
            .names
            .get(k)
            .cloned()
            .unwrap_or_else(|| format!("INA226_{}-{addr:04x}", c.bus));
        let place = format!("INA226 at {addr:#04x} on {}", path.display());
        match ina226::open_linux(&path, c.bus, addr, settings.clone(), &name) {
            Ok(chip) => {
                probed.push(Probe {
                    place,
                    found: Some(format!("rail {name}")),
                });
                out.push(Box::new(chip));
            }
            Err(e) => {
                probed.push(Probe { place, found: None });
                errors.push(format!("{e:#}"));
            }
        }
    }
    out
}

/// Which rails make the total, and how that was decided.
/// The scope a run measures: as asked, else module, except on a board where no monitor sees
/// the module alone (its only total is the whole board). A scope the board cannot measure is
/// refused, saying what is missing.
fn resolve_scope(cfg: &PowerConfig, profile: &board::BoardProfile) -> anyhow::Result<PowerScope> {
    if !cfg.total.is_empty() {
        // power.total names the rails: their scope is the user's to state.
        return Ok(cfg.scope.unwrap_or(PowerScope::Module));
    }
    let module_only = |why: &str| {
        anyhow::anyhow!(
            "--power-scope board: board {} has no carrier-board monitor ({why}); measure the \
             module (--power-scope module, the default), or name the rails that cover the whole \
             board in power.total",
            profile.name
        )
    };
    match cfg.scope {
        Some(PowerScope::Board) if profile.board_total.is_empty() => {
            Err(module_only(if profile.total.is_empty() {
                "no rails of its layout are known"
            } else {
                "its monitors measure the module only"
            }))
        }
        Some(PowerScope::Module) if profile.total.is_empty() && !profile.board_total.is_empty() => {
            anyhow::bail!(
                "--power-scope module: board {} has no monitor that sees the module alone: its \
                 total, {}, is the whole board's input (module + carrier); use --power-scope board",
                profile.name,
                profile.board_total.join(" + ")
            )
        }
        Some(scope) => Ok(scope),
        None if profile.total.is_empty() && !profile.board_total.is_empty() => {
            Ok(PowerScope::Board)
        }
        None => Ok(PowerScope::Module),
    }
}

fn choose_total(
    cfg: &PowerConfig,
    profile: &board::BoardProfile,
    scope: PowerScope,
    rails: &[(String, String)],
    warnings: &mut Vec<String>,
) -> anyhow::Result<(Vec<(String, String)>, String)> {
    let pick = |names: &[String]| -> Option<Vec<(String, String)>> {
        let found: Vec<_> = rails
            .iter()
            .filter(|(_, r)| names.contains(r))
            .cloned()
            .collect();
        names
            .iter()
            .all(|n| found.iter().any(|(_, r)| r == n))
            .then_some(found)
    };
    if !cfg.total.is_empty() {
        let t = pick(&cfg.total).ok_or_else(|| {
            anyhow::anyhow!(
                "power.total names rails {:?}, but the rails found are {:?}",
                cfg.total,
                rails.iter().map(|(_, r)| r).collect::<Vec<_>>()
            )
        })?;
        return Ok((t, format!("sum of {} (power.total)", cfg.total.join(" + "))));
    }
    if scope == PowerScope::Board && !profile.board_total.is_empty() {
        // A board total missing a rail would silently be a module total: refuse instead.
        let t = pick(&profile.board_total).ok_or_else(|| {
            let missing: Vec<&String> = profile
                .board_total
                .iter()
                .filter(|n| !rails.iter().any(|(_, r)| r == *n))
                .collect();
            anyhow::anyhow!(
                "--power-scope board: board {} needs rails {:?} for the board scope; {:?} not \
                 found (rails found: {:?}). A carrier without its monitor cannot be measured: \
                 use --power-scope module",
                profile.name,
                profile.board_total,
                missing,
                rails.iter().map(|(_, r)| r).collect::<Vec<_>>()
            )
        })?;
        let how = if t.len() == 1 {
            format!("{} (the whole board's input rail)", profile.board_total[0])
        } else {
            format!(
                "sum of {} (board {}: module and carrier inputs)",
                profile.board_total.join(" + "),
                profile.name
            )
        };
        return Ok((t, how));
    }
    if !profile.total.is_empty() {
        if let Some(t) = pick(&profile.total) {
            let how = if t.len() == 1 {
                format!("{} (the module's input rail)", profile.total[0])
            } else {
                format!(
                    "sum of {} (board {})",
                    profile.total.join(" + "),
                    profile.name
                )
            };
            return Ok((t, how));
        }
        warnings.push(format!(
            "board {} expects total rails {:?}, not all found; choosing from the rails found",
            profile.name, profile.total
        ));
    }
    // Generic: an input rail alone, else RAPL's platform domain alone, else everything found.
    if let Some(r) = rails
        .iter()
        .find(|(_, r)| r.ends_with("_IN") || r.ends_with("_5V_IN"))
    {
        return Ok((vec![r.clone()], format!("{} (an input rail)", r.1)));
    }
    if let Some(r) = rails.iter().find(|(_, r)| r == "psys") {
        return Ok((vec![r.clone()], "psys (RAPL platform domain)".into()));
    }
    if rails.len() > 1 {
        warnings.push(
            "no input rail known: the total is the sum of every rail found (set power.total if \
             some rails are parts of others)"
                .into(),
        );
    }
    Ok((
        rails.to_vec(),
        format!(
            "sum of all rails found ({})",
            rails
                .iter()
                .map(|(_, r)| r.as_str())
                .collect::<Vec<_>>()
                .join(" + ")
        ),
    ))
}

impl PowerMonitor {
    /// Looks for every source: the raw INA226s of the config, then the kernel's monitors and
    /// RAPL under the sysfs root. Errors only for a bad `power.total`.
    pub fn discover(
        host: &HostPaths,
        cfg: &PowerConfig,
        board: Detection,
    ) -> anyhow::Result<Discovery> {
        let mut probed = Vec::new();
        let mut errors = Vec::new();
        let mut sources = raw_ina226(cfg, &mut probed, &mut errors);
        let drivers = host.sys("bus/i2c/drivers");
        let profile = board.profile;
        // An unlabelled INA238 channel takes the profile's name for it (Thor: VIN).
        let ina238_name = |at: &str| {
            profile
                .monitors
                .iter()
                .find(|m| {
                    m.driver.as_deref() == Some("ina238")
                        && m.at.as_deref().is_none_or(|want| want == at)
                })
                .and_then(|m| m.rails.first().cloned())
        };
        let kernel: [(&str, String, Vec<hwmon::SysfsSource>); 4] = [
            (
                "ina3221 hwmon (JetPack 5/6)",
                format!("{}/ina3221/*/hwmon/hwmon*", drivers.display()),
                hwmon::ina3221_hwmon(&drivers),
            ),
            (
                "ina3221x IIO (JetPack 4)",
                format!("{}/ina3221x/*/iio:device*", drivers.display()),
                hwmon::ina3221x_iio(&drivers),
            ),
            (
                "ina2xx hwmon",
                format!("{}/ina2xx/*/hwmon/hwmon*", drivers.display()),
                hwmon::ina2xx_hwmon(&drivers),
            ),
            (
                "ina238 hwmon",
                format!("{}/ina238/*/hwmon/hwmon*", drivers.display()),
                hwmon::ina238_hwmon(&drivers, &ina238_name),
            ),
        ];
        for (what, place, found) in kernel {
            probed.push(Probe {
                place: format!("{what}: {place}"),
                found: (!found.is_empty()).then(|| {
                    found
                        .iter()
                        .map(|s| format!("{} [{}]", s.describe(), s.rails().join(", ")))
                        .collect::<Vec<_>>()
                        .join("; ")
                }),
            });
            sources.extend(
                found
                    .into_iter()
                    .map(|s| Box::new(s) as Box<dyn PowerSource>),
            );
        }
        let powercap = host.sys("class/powercap");
        let rapl = rapl::RaplSource::discover(&powercap);
        probed.push(Probe {
            place: format!("RAPL: {}/intel-rapl:*/energy_uj", powercap.display()),
            found: rapl.as_ref().map(|r| r.rails().join(", ")),
        });
        sources.extend(rapl.map(|r| Box::new(r) as Box<dyn PowerSource>));
        let supplies = host.sys("class");
        for entry in hwmon::power_supplies(&supplies) {
            probed.push(Probe {
                place: format!("power_supply: {}/power_supply/{entry}", supplies.display()),
                found: None,
            });
        }
        if sources.is_empty() {
            return Ok(Discovery {
                monitor: None,
                probed,
                errors,
                board,
            });
        }
        let mut warnings: Vec<String> = board.warning.iter().cloned().collect();
        let rails: Vec<(String, String)> = sources
            .iter()
            .flat_map(|s| s.rails().iter().map(|r| (s.describe(), r.clone())))
            .collect();
        let scope = resolve_scope(cfg, board.profile)?;
        if cfg.scope.is_none() && scope == PowerScope::Board {
            warnings.push(format!(
                "board {}: no monitor sees the module alone, so the total is board scope \
                 (module + carrier); it does not compare with module-scope numbers",
                board.profile.name
            ));
        }
        let (total, total_how) = choose_total(cfg, board.profile, scope, &rails, &mut warnings)?;
        let sensor_period = sources
            .iter()
            .filter(|s| total.iter().any(|(d, _)| *d == s.describe()))
            .map(|s| s.default_period())
            .max()
            .unwrap_or_default();
        let sources = sources
            .into_iter()
            .map(|s| {
                let period = match cfg.rate_hz {
                    Some(hz) => Duration::from_secs_f64(1.0 / hz),
                    None => s.default_period(),
                };
                (Arc::new(Mutex::new(s)), period)
            })
            .collect();
        Ok(Discovery {
            monitor: Some(PowerMonitor {
                sources,
                total,
                total_how,
                scope,
                board: board.clone(),
                warnings,
                sensor_period,
                warned_low_samples: AtomicBool::new(false),
                marker: None,
                health: Arc::default(),
            }),
            probed,
            errors,
            board,
        })
    }

    /// For `run --power`: board from the config or detection, then discovery; no usable sensor
    /// (or a configured one that fails) is an error listing what was probed.
    pub fn for_run(host: &HostPaths, cfg: &PowerConfig) -> anyhow::Result<PowerMonitor> {
        let board = board::select(host, cfg.board.as_deref())?;
        let d = Self::discover(host, cfg, board)?;
        match d.monitor {
            Some(mut m) if d.errors.is_empty() => {
                if let Some(pin) = cfg.gpio_marker {
                    m.marker = Some(Mutex::new(marker::GpioMarker::open(host, pin)?));
                }
                for w in &m.warnings {
                    tracing::warn!("{w}");
                }
                tracing::info!(
                    "power: board {} ({}); {} scope; total = {}; {} source(s)",
                    m.board.profile.name,
                    m.board.how,
                    m.scope.as_str(),
                    m.total_how,
                    m.sources.len()
                );
                Ok(m)
            }
            _ => anyhow::bail!("{}", no_sensor_message(&d.probed, &d.errors)),
        }
    }

    /// Drives the GPIO marker (if configured): high from the first measured iteration's start
    /// to the trial's end. A failure is logged, not fatal: the measurement itself is intact.
    pub fn mark(&self, high: bool) {
        if let Some(m) = &self.marker {
            if let Err(e) = m.lock().unwrap_or_else(|e| e.into_inner()).set(high) {
                tracing::warn!("{e:#}");
            }
        }
    }

    /// Starts one sampler thread per source, for a trial.
    pub fn start(&self) -> RecordingHandle {
        RecordingHandle::start(
            &self.sources,
            self.total.clone(),
            Some(Arc::clone(&self.health)),
        )
    }

    /// The warning for the end of a run whose trials lost power readings; None if none did.
    pub fn run_warning(&self) -> Option<String> {
        let h = self.health.lock().unwrap_or_else(|e| e.into_inner());
        let error = h.first_error.as_ref()?;
        Some(format!(
            "power readings failed during {} trial(s) ({error}); {}. Those trials are marked \
             power_incomplete: their energy covers only the time with readings, power_gap_s is \
             the time without",
            h.recordings_with_errors,
            if h.recovered {
                "the sensor was reading again by the last trial"
            } else {
                "the sensor was still failing at the end of the run: check the power monitor \
                 (its driver, wiring, or --sysfs)"
            }
        ))
    }

    /// Mean total power over `duration` of idling; None for a zero duration, no samples, or
    /// when `stop` is raised meanwhile (an interrupt must not wait out a long baseline).
    pub fn baseline(&self, duration: Duration, stop: &AtomicBool) -> Option<Baseline> {
        if duration.is_zero() {
            return None;
        }
        let handle = RecordingHandle::start(&self.sources, self.total.clone(), None);
        let a = monotonic_ns();
        let deadline = std::time::Instant::now() + duration;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            if stop.load(Ordering::SeqCst) {
                handle.stop();
                return None;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
        let b = monotonic_ns();
        let samples = handle.stop();
        energy::mean_total_power(&samples, a, b).map(|power_w| Baseline {
            power_w,
            duration_s: (b - a) as f64 * 1e-9,
        })
    }

    /// The board profile's name and how the total is formed, for the runs table.
    pub fn describe_total(&self) -> String {
        format!("{}: {}", self.board.profile.name, self.total_how)
    }

    /// One reading of every source now (for `edgebench sensors`).
    pub fn snapshot(&self) -> Vec<SourceNow> {
        self.sources
            .iter()
            .map(|(src, period)| {
                let mut src = src.lock().unwrap_or_else(|e| e.into_inner());
                let name = src.describe();
                // RAPL needs two readings for a power; a short pause makes one.
                let mut result = src.read();
                if result.is_err() {
                    std::thread::sleep(Duration::from_millis(50));
                    result = src.read();
                }
                let (readings, error) = match result {
                    Ok(r) => (r.into_iter().map(Some).collect(), None),
                    Err(e) => (vec![None; src.rails().len()], Some(format!("{e:#}"))),
                };
                SourceNow {
                    rate_hz: 1.0 / period.as_secs_f64(),
                    rails: src
                        .rails()
                        .iter()
                        .zip(readings)
                        .map(|(rail, r): (&String, Option<Reading>)| RailNow {
                            in_total: self.total.contains(&(name.clone(), rail.clone())),
                            name: rail.clone(),
                            volts: r.as_ref().and_then(|r| r.volts),
                            amps: r.as_ref().and_then(|r| r.amps),
                            watts: r.map(|r| r.watts),
                        })
                        .collect(),
                    source: name,
                    error,
                }
            })
            .collect()
    }
}

fn no_sensor_message(probed: &[Probe], errors: &[String]) -> String {
    let mut m = String::from("--power: no usable power sensor.\n");
    for e in errors {
        let _ = writeln!(m, "  error: {e}");
    }
    m.push_str("Probed:\n");
    for p in probed {
        let _ = writeln!(
            m,
            "  {}: {}",
            p.place,
            p.found.as_deref().unwrap_or("nothing")
        );
    }
    m.push_str(
        "To configure one: on a Jetson, check that the ina3221 driver is loaded (its rails \
         appear under /sys/bus/i2c/drivers/ina3221*); for an INA226 on a user I2C bus, add \
         [power.ina226] with its bus and addresses to the config; in a container, point \
         --sysfs (EDGEBENCH_SYSFS) at the host's sysfs. Or run without --power.",
    );
    m
}

#[derive(Debug, Clone, Serialize)]
pub struct RailNow {
    pub name: String,
    pub volts: Option<f64>,
    pub amps: Option<f64>,
    pub watts: Option<f64>,
    pub in_total: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceNow {
    pub source: String,
    pub rate_hz: f64,
    pub rails: Vec<RailNow>,
    pub error: Option<String>,
}

/// What `edgebench sensors` prints.
#[derive(Debug, Clone, Serialize)]
pub struct SensorsReport {
    pub board: String,
    pub board_detection: String,
    pub total: Option<String>,
    /// `module` or `board`: what the total covers.
    pub scope: Option<String>,
    pub total_w: Option<f64>,
    pub sources: Vec<SourceNow>,
    pub probed: Vec<Probe>,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// Discovers and reads every source once.
pub fn sensors(host: &HostPaths, cfg: &PowerConfig) -> anyhow::Result<SensorsReport> {
    let board = board::select(host, cfg.board.as_deref())?;
    let d = PowerMonitor::discover(host, cfg, board)?;
    let sources = d.monitor.as_ref().map(|m| m.snapshot()).unwrap_or_default();
    let in_total: Vec<Option<f64>> = sources
        .iter()
        .flat_map(|s| s.rails.iter().filter(|r| r.in_total).map(|r| r.watts))
        .collect();
    Ok(SensorsReport {
        board: d.board.profile.name.clone(),
        board_detection: d.board.how.clone(),
        total: d.monitor.as_ref().map(|m| m.total_how.clone()),
        scope: d.monitor.as_ref().map(|m| m.scope.as_str().to_string()),
        total_w: (!in_total.is_empty())
            .then(|| in_total.iter().copied().sum::<Option<f64>>())
            .flatten(),
        sources,
        probed: d.probed,
        errors: d.errors,
        warnings: d
            .monitor
            .map(|m| m.warnings)
            .unwrap_or_else(|| d.board.warning.into_iter().collect()),
    })
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

pub fn sensors_text(r: &SensorsReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "board: {} ({})", r.board, r.board_detection);
    for s in &r.sources {
        let _ = writeln!(out, "\n{}  @ {:.0} Hz", s.source, s.rate_hz);
        if let Some(e) = &s.error {
            let _ = writeln!(out, "  error: {e}");
        }
        for rail in &s.rails {
            let _ = writeln!(
                out,
                "  {:<18} {:>8} V {:>8} A {:>9} W{}",
                rail.name,
                num(rail.volts, 3),
                num(rail.amps, 3),
                num(rail.watts, 3),
                if rail.in_total { "  <- total" } else { "" }
            );
        }
    }
    match (&r.total, r.total_w) {
        (Some(how), w) => {
            let scope = r.scope.as_deref().unwrap_or("module");
            let _ = writeln!(out, "\ntotal ({scope} scope): {how} = {} W", num(w, 3));
        }
        (None, _) => {
            let _ = writeln!(out, "\nno power source found");
        }
    }
    let _ = writeln!(out, "\nprobed:");
    for p in &r.probed {
        let _ = writeln!(
            out,
            "  {}: {}",
            p.place,
            p.found.as_deref().unwrap_or("nothing")
        );
    }
    for e in &r.errors {
        let _ = writeln!(out, "error: {e}");
    }
    for w in &r.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// Fewer sensor updates than this inside a trial's measured window flag the trial
/// (`power_low_samples`): its energy then rests on a handful of readings.
pub const MIN_SENSOR_UPDATES: usize = 10;

/// Distinct sensor readings a trial's energy rests on: the samples taken inside the measured
/// window, but never more than the sensor refreshed in it (sampling faster than the sensor
/// reads the same value again).
pub fn sensor_updates(samples_in_window: usize, duration_s: f64, sensor_period: Duration) -> usize {
    if sensor_period.is_zero() {
        return samples_in_window;
    }
    let refreshes = (duration_s / sensor_period.as_secs_f64()).floor().max(0.0) as usize;
    samples_in_window.min(refreshes)
}

impl PowerMonitor {
    /// The trial's power record from its samples and iteration records: per-rail,
    /// per-iteration and trial figures, or why there are none; the caller stores it. A trial
    /// with fewer than [`MIN_SENSOR_UPDATES`] sensor updates is flagged, and the first such
    /// trial of the run warns with the fix.
    pub fn assess_trial(
        &self,
        samples: &Samples,
        iterations: &[IterationRecord],
        warmup: usize,
        batch: usize,
        baseline: Option<&Baseline>,
    ) -> TrialPowerRecord {
        let e = energy::trial_energy(
            samples,
            iterations,
            warmup,
            batch,
            baseline.map(|b| b.power_w),
        );
        let reason = samples
            .lost
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let Some(e) = e else {
            return match energy::unmeasured_s(samples, iterations, warmup) {
                Some(gap_s) => {
                    tracing::warn!(
                        "trial power not measured: no readings in {gap_s:.3} s of the measured \
                         interval{reason}; energy left empty, trial marked power_incomplete"
                    );
                    TrialPowerRecord::Unmeasured {
                        gap_s,
                        note: samples.lost.clone(),
                    }
                }
                None => TrialPowerRecord::Nothing,
            };
        };
        if e.incomplete {
            tracing::warn!(
                "trial power incomplete: {:.3} s of the {:.3} s measured interval without \
                 readings{reason}; the energy covers the rest",
                e.gap_s,
                e.duration_s
            );
        }
        let updates = sensor_updates(e.samples, e.duration_s, self.sensor_period);
        let low_samples = (updates < MIN_SENSOR_UPDATES).then_some(updates);
        if low_samples.is_some() && !self.warned_low_samples.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "a trial measured {:.2} s with only {updates} sensor update(s) (the sensor \
                 refreshes every {:.0} ms): its energy rests on too few readings and is \
                 flagged power_low_samples. Measure at least {:.1} s per trial: more images \
                 (--images) or epochs (--epochs). Warned once per run.",
                e.duration_s,
                self.sensor_period.as_secs_f64() * 1e3,
                MIN_SENSOR_UPDATES as f64 * self.sensor_period.as_secs_f64()
            );
        }
        TrialPowerRecord::Measured(TrialPower {
            energy_j: e.energy_j,
            avg_power_w: e.avg_power_w,
            energy_per_image_j: e.energy_per_image_j,
            edp_js: e.edp_js,
            dynamic_energy_j: e.dynamic_energy_j,
            samples: e.samples,
            rate_hz: e.rate_hz,
            jitter_s: e.jitter_s,
            incomplete: e.incomplete,
            gap_s: e.gap_s,
            low_samples,
            note: e.incomplete.then(|| samples.lost.clone()).flatten(),
            rails: e.rail_energy_j.clone(),
            iterations: iterations
                .iter()
                .zip(&e.iteration_energy_j)
                .filter_map(|(r, j)| j.map(|j| (r.step, j)))
                .collect(),
        })
    }
}

/// A trial's power outcome, for the store.
#[derive(Debug, Clone, PartialEq)]
pub enum TrialPowerRecord {
    Measured(TrialPower),
    /// The sensors gave no reading in the measured interval (`gap_s` of it); `note` says why.
    Unmeasured {
        gap_s: f64,
        note: Option<String>,
    },
    /// No measured interval (no iteration finished).
    Nothing,
}

impl Samples {
    /// Every rail's samples, borrowed, for storing them raw.
    pub fn series(&self) -> Vec<PowerSeries<'_>> {
        self.series
            .iter()
            .map(|s| PowerSeries {
                source: &s.source,
                rail: &s.rail,
                t_ns: &s.t_ns,
                volts: &s.volts,
                amps: &s.amps,
                watts: &s.watts,
            })
            .collect()
    }
}

/// One rail's samples, borrowed from the sampler's buffers.
#[derive(Debug, Clone, Copy)]
pub struct PowerSeries<'a> {
    pub source: &'a str,
    pub rail: &'a str,
    pub t_ns: &'a [i64],
    pub volts: &'a [Option<f64>],
    pub amps: &'a [Option<f64>],
    pub watts: &'a [f64],
}

/// A trial's energy figures (see schema v2).
#[derive(Debug, Clone, PartialEq)]
pub struct TrialPower {
    pub energy_j: f64,
    pub avg_power_w: f64,
    pub energy_per_image_j: f64,
    pub edp_js: f64,
    pub dynamic_energy_j: Option<f64>,
    pub samples: usize,
    pub rate_hz: Option<f64>,
    pub jitter_s: Option<f64>,
    pub incomplete: bool,
    pub gap_s: f64,
    /// Sensor updates inside the measured interval when too few (< 10); None when enough.
    pub low_samples: Option<usize>,
    /// Why the record is incomplete (the failing sensor and its error), if it is.
    pub note: Option<String>,
    /// (rail, joules, part of the total)
    pub rails: Vec<(String, f64, bool)>,
    /// (step, joules)
    pub iterations: Vec<(usize, f64)>,
}

#[cfg(test)]
mod tests {
    use super::hwmon::fixtures;
    use super::*;

    fn host(root: &std::path::Path) -> HostPaths {
        HostPaths {
            sysfs: root.to_path_buf(),
            procfs: root.join("proc"),
            rootfs: root.into(),
        }
    }

    #[test]
    fn orin_nx_total_is_vdd_in_alone_and_sampling_matches_the_fixture() {
        let root = tempfile::tempdir().unwrap();
        fixtures::orin_nx(
            root.path(),
            &[
                ("VDD_IN", 5000, 1500),
                ("VDD_CPU_GPU_CV", 5000, 600),
                ("VDD_SOC", 5000, 400),
            ],
        );
        let m = PowerMonitor::for_run(&host(root.path()), &PowerConfig::default()).unwrap();
        assert_eq!(m.board.profile.name, "orin-nx");
        assert_eq!(m.total.len(), 1);
        assert_eq!(m.total[0].1, "VDD_IN");
        let h = m.start();
        let a = monotonic_ns();
        std::thread::sleep(Duration::from_millis(60));
        let b = monotonic_ns();
        let s = h.stop();
        assert_eq!(s.series.len(), 3);
        assert_eq!(s.total.len(), 1);
        // 7 ms update interval over 60 ms: about 9 samples, plus the final one.
        assert!(s.series[0].t_ns.len() >= 5, "{}", s.series[0].t_ns.len());
        assert!(s.series[0].t_ns.windows(2).all(|w| w[0] < w[1]));
        let p = energy::mean_total_power(&s, a, b).unwrap();
        assert!((p - 7.5).abs() < 1e-9, "{p}");
        let base = m
            .baseline(Duration::from_millis(30), &AtomicBool::new(false))
            .unwrap();
        assert!((base.power_w - 7.5).abs() < 1e-9);
    }

    /// TX2 module monitors (JetPack 4 IIO): chip, then (rail, mV, mA, mW) per channel.
    const TX2_MODULE: [(&str, &[fixtures::IioRail<'static>]); 2] = [
        (
            "0-0040",
            &[
                ("VDD_SYS_GPU", 19000, 50, 950),
                ("VDD_SYS_SOC", 19000, 40, 760),
                ("VDD_4V0_WIFI", 4000, 10, 40),
            ],
        ),
        (
            "0-0041",
            &[
                ("VDD_IN", 19000, 200, 3800),
                ("VDD_SYS_CPU", 19000, 30, 570),
                ("VDD_SYS_DDR", 19000, 20, 380),
            ],
        ),
    ];

    #[test]
    fn tx2_total_is_vdd_in_and_agx_orin_sums_module_rails() {
        let root = tempfile::tempdir().unwrap();
        fixtures::tx2(root.path(), &TX2_MODULE);
        let r = sensors(&host(root.path()), &PowerConfig::default()).unwrap();
        assert_eq!(r.board, "tx2");
        assert!((r.total_w.unwrap() - 3.8).abs() < 1e-9, "{:?}", r.total_w);
        let totals: Vec<&str> = r
            .sources
            .iter()
            .flat_map(|s| &s.rails)
            .filter(|x| x.in_total)
            .map(|x| x.name.as_str())
            .collect();
        assert_eq!(totals, ["VDD_IN"]);
        let text = sensors_text(&r);
        assert!(
            text.contains("VDD_IN") && text.contains("<- total"),
            "{text}"
        );
        assert!(
            text.contains("ina2xx hwmon") && text.contains("nothing"),
            "{text}"
        );

        // AGX Orin (JetPack 5 hwmon): two chips, NC channels skipped, I/O rail left out.
        let root = tempfile::tempdir().unwrap();
        let w = |rel: &str, v: &str| fixtures::write(root.path(), rel, v);
        w(
            "firmware/devicetree/base/compatible",
            "nvidia,p3737-0000+p3701-0005\0nvidia,tegra234\0",
        );
        for (addr, n, rails) in [
            (
                "1-0040",
                1,
                [
                    ("VDD_GPU_SOC", "2000"),
                    ("VDD_CPU_CV", "1000"),
                    ("VIN_SYS_5V0", "3000"),
                ],
            ),
            (
                "1-0041",
                2,
                [("NC", "0"), ("VDDQ_VDD2_1V8AO", "500"), ("NC", "0")],
            ),
        ] {
            for (k, (label, ma)) in rails.iter().enumerate() {
                let hw = format!("bus/i2c/drivers/ina3221/{addr}/hwmon/hwmon{n}");
                w(&format!("{hw}/in{}_label", k + 1), label);
                w(&format!("{hw}/in{}_input", k + 1), "5000");
                w(&format!("{hw}/curr{}_input", k + 1), ma);
            }
        }
        let r = sensors(&host(root.path()), &PowerConfig::default()).unwrap();
        assert_eq!(r.board, "agx-orin");
        assert!(
            (r.total_w.unwrap() - 5.0 * 3.5).abs() < 1e-9,
            "{:?}",
            r.total_w
        );
        assert_eq!(r.sources[1].rails.len(), 1, "NC channels are not rails");
    }

    /// TX2 developer kit, JetPack 4: module monitors at 0-0040/0-0041, the carrier's INA3221
    /// at 0-0042 with VDD_MUX (the carrier's input, in parallel with VDD_IN).
    fn tx2_devkit(root: &std::path::Path) {
        fixtures::tx2(
            root,
            &[
                TX2_MODULE[0],
                TX2_MODULE[1],
                (
                    "0-0042",
                    &[
                        ("VDD_MUX", 19000, 100, 1900),
                        ("VDD_5V_IO_SYS", 5000, 150, 750),
                        ("VDD_3V3_SYS", 3300, 100, 330),
                    ],
                ),
            ],
        );
    }

    #[test]
    fn tx2_devkit_is_measured_at_both_scopes() {
        let root = tempfile::tempdir().unwrap();
        tx2_devkit(root.path());
        let at = |scope: Option<PowerScope>| {
            let cfg = PowerConfig {
                scope,
                ..Default::default()
            };
            PowerMonitor::for_run(&host(root.path()), &cfg).unwrap()
        };
        let mean = |m: &PowerMonitor| {
            let h = m.start();
            let a = monotonic_ns();
            std::thread::sleep(Duration::from_millis(60));
            let b = monotonic_ns();
            energy::mean_total_power(&h.stop(), a, b).unwrap()
        };
        // Default and explicit module scope: VDD_IN alone.
        for scope in [None, Some(PowerScope::Module)] {
            let m = at(scope);
            assert_eq!(m.scope, PowerScope::Module);
            let rails: Vec<&str> = m.total.iter().map(|(_, r)| r.as_str()).collect();
            assert_eq!(rails, ["VDD_IN"]);
            assert!((mean(&m) - 3.8).abs() < 1e-9);
        }
        // Board scope: both inputs from the supply, never their sub-rails.
        let m = at(Some(PowerScope::Board));
        assert_eq!(m.scope, PowerScope::Board);
        let rails: Vec<&str> = m.total.iter().map(|(_, r)| r.as_str()).collect();
        assert_eq!(rails, ["VDD_IN", "VDD_MUX"]);
        assert!(m.total_how.contains("VDD_IN + VDD_MUX"), "{}", m.total_how);
        assert!((mean(&m) - 5.7).abs() < 1e-9);
        let r = sensors(
            &host(root.path()),
            &PowerConfig {
                scope: Some(PowerScope::Board),
                ..Default::default()
            },
        )
        .unwrap();
        assert!((r.total_w.unwrap() - 5.7).abs() < 1e-9);
        assert!(sensors_text(&r).contains("total (board scope)"));

        // A TX2 on a carrier without the 0x42 monitor: board scope says what is missing.
        std::fs::remove_dir_all(root.path().join("bus/i2c/drivers/ina3221x/0-0042")).unwrap();
        let cfg = PowerConfig {
            scope: Some(PowerScope::Board),
            ..Default::default()
        };
        let err = PowerMonitor::for_run(&host(root.path()), &cfg)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("VDD_MUX") && err.contains("--power-scope module"),
            "{err}"
        );
    }

    #[test]
    fn board_scope_is_refused_without_a_carrier_monitor() {
        let root = tempfile::tempdir().unwrap();
        fixtures::orin_nx(
            root.path(),
            &[
                ("VDD_IN", 5000, 1500),
                ("VDD_CPU_GPU_CV", 5000, 600),
                ("VDD_SOC", 5000, 400),
            ],
        );
        let cfg = PowerConfig {
            scope: Some(PowerScope::Board),
            ..Default::default()
        };
        let err = PowerMonitor::for_run(&host(root.path()), &cfg)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("orin-nx")
                && err.contains("no carrier-board monitor")
                && err.contains("--power-scope module"),
            "{err}"
        );
        // Naming the rails in power.total makes the scope the user's statement.
        let cfg = PowerConfig {
            scope: Some(PowerScope::Board),
            total: vec!["VDD_IN".into()],
            ..Default::default()
        };
        let m = PowerMonitor::for_run(&host(root.path()), &cfg).unwrap();
        assert_eq!(m.scope, PowerScope::Board);
    }

    #[test]
    fn thor_total_is_the_ina238_alone_at_board_scope_and_ucsi_is_ignored() {
        let root = tempfile::tempdir().unwrap();
        fixtures::thor(root.path(), 19_500, 2_400, 45_500_000);
        let r = sensors(&host(root.path()), &PowerConfig::default()).unwrap();
        assert_eq!(r.board, "agx-thor");
        assert_eq!(r.scope.as_deref(), Some("board"));
        assert!((r.total_w.unwrap() - 45.5).abs() < 1e-9, "{:?}", r.total_w);
        let rails: Vec<&str> = r
            .sources
            .iter()
            .flat_map(|s| &s.rails)
            .map(|x| x.name.as_str())
            .collect();
        assert_eq!(rails, ["VIN"], "the UCSI contract is not a rail");
        let ucsi = r
            .probed
            .iter()
            .find(|p| p.place.contains("ucsi-source-psy"))
            .expect("the UCSI entry is listed as probed");
        assert!(ucsi.found.is_none() && ucsi.place.contains("never counted"));
        assert!(
            r.warnings.iter().any(|w| w.contains("board scope")),
            "{:?}",
            r.warnings
        );
        let m = PowerMonitor::for_run(&host(root.path()), &PowerConfig::default()).unwrap();
        assert_eq!(m.sensor_period, hwmon::INA238_PERIOD);
        // Module scope asked for explicitly: nothing on Thor measures the module alone.
        let cfg = PowerConfig {
            scope: Some(PowerScope::Module),
            ..Default::default()
        };
        let err = PowerMonitor::for_run(&host(root.path()), &cfg)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("agx-thor") && err.contains("VIN") && err.contains("--power-scope board"),
            "{err}"
        );
    }

    #[test]
    fn sensor_updates_count_refreshes_not_repeated_reads() {
        let period = Duration::from_millis(140);
        // A 0.15 s trial sampled at the sensor's rate: one update.
        assert_eq!(sensor_updates(1, 0.15, period), 1);
        // Sampled at 1 kHz over 0.15 s: 150 samples, still one refresh.
        assert_eq!(sensor_updates(150, 0.15, period), 1);
        // 2 s at 140 ms: 14 refreshes, 14 samples.
        assert_eq!(sensor_updates(14, 2.0, period), 14);
        // Sampled slower than the sensor: the samples are what the energy rests on.
        assert_eq!(sensor_updates(4, 2.0, period), 4);
        assert_eq!(sensor_updates(7, 1.0, Duration::ZERO), 7);
    }

    #[test]
    fn no_sensor_lists_every_place_probed() {
        let root = tempfile::tempdir().unwrap();
        let err = PowerMonitor::for_run(&host(root.path()), &PowerConfig::default())
            .err()
            .unwrap()
            .to_string();
        for want in [
            "ina3221",
            "ina3221x",
            "ina2xx",
            "intel-rapl",
            "INA226",
            "[power.ina226]",
        ] {
            assert!(err.contains(want), "{want} missing in {err}");
        }
        // A configured INA226 that cannot be opened is an error even with other sources.
        let cfg = PowerConfig {
            ina226: Some(crate::config::Ina226Config {
                device: Some(root.path().join("no-such-i2c")),
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = PowerMonitor::for_run(&host(root.path()), &cfg)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("no-such-i2c"), "{err}");
    }

    #[test]
    fn sampler_marks_errors_and_keeps_going() {
        struct Flaky(u32, Vec<String>);
        impl PowerSource for Flaky {
            fn describe(&self) -> String {
                "flaky".into()
            }
            fn rails(&self) -> &[String] {
                &self.1
            }
            fn read(&mut self) -> anyhow::Result<Vec<Reading>> {
                self.0 += 1;
                // Reads 5..=9 fail, read 12 is absurd.
                anyhow::ensure!(!(5..10).contains(&self.0), "EIO");
                let watts = if self.0 == 12 { f64::NAN } else { 2.0 };
                Ok(vec![Reading {
                    volts: None,
                    amps: None,
                    watts,
                }])
            }
            fn default_period(&self) -> Duration {
                Duration::from_millis(2)
            }
        }
        let src: Box<dyn PowerSource> = Box::new(Flaky(0, vec!["R".into()]));
        let h = RecordingHandle::start(
            &[(Arc::new(Mutex::new(src)), Duration::from_millis(2))],
            vec![("flaky".into(), "R".into())],
            None,
        );
        std::thread::sleep(Duration::from_millis(60));
        let s = h.stop();
        assert_eq!(s.errors.len(), 2, "{:?}", s.errors);
        assert!(s.series[0].watts.iter().all(|&w| w == 2.0));
        let t = &s.series[0].t_ns;
        let e = trial_energy(
            &s,
            &[IterationRecord {
                step: 0,
                epoch: 0,
                loss: 1.0,
                lr: 0.1,
                data_s: 0.0,
                step_s: 0.0,
                t_start_ns: t[0],
                t_end_ns: *t.last().unwrap(),
            }],
            0,
            1,
            None,
        )
        .unwrap();
        assert!(e.incomplete && e.gap_s > 0.008, "{e:?}");
    }

    #[test]
    fn a_lost_sensor_is_probed_again_and_its_readings_resume() {
        let root = tempfile::tempdir().unwrap();
        fixtures::orin_nx(root.path(), &[("VDD_IN", 5000, 1500)]);
        let m = PowerMonitor::for_run(&host(root.path()), &PowerConfig::default()).unwrap();
        let dev = root.path().join("bus/i2c/drivers/ina3221/1-0040/hwmon");
        let ms = |n| Duration::from_millis(n);
        let h = m.start();
        let a = monotonic_ns();
        std::thread::sleep(ms(100));
        // The driver goes away, then comes back with another hwmon index.
        std::fs::rename(dev.join("hwmon3"), root.path().join("away")).unwrap();
        let lost = monotonic_ns();
        std::thread::sleep(ms(600));
        std::fs::rename(root.path().join("away"), dev.join("hwmon4")).unwrap();
        let back = monotonic_ns();
        std::thread::sleep(ms(500));
        let b = monotonic_ns();
        let s = h.stop();
        let t = &s.series[0].t_ns;
        assert!(t.iter().any(|&x| x < lost), "samples before the loss");
        assert!(
            t.iter().filter(|&&x| x > back).count() >= 10,
            "readings resumed after the sensor came back: {} after",
            t.iter().filter(|&&x| x > back).count()
        );
        assert_eq!(s.errors.len(), 1, "{:?}", s.errors);
        assert!(
            s.lost.as_deref().unwrap().contains("hwmon3"),
            "{:?}",
            s.lost
        );
        // The gap is the time without readings once, not counted twice, and the energy covers
        // only the measured rest at the fixture's 7.5 W.
        let rec = IterationRecord {
            step: 0,
            epoch: 0,
            loss: 1.0,
            lr: 0.1,
            data_s: 0.0,
            step_s: 0.0,
            t_start_ns: a,
            t_end_ns: b,
        };
        let e = trial_energy(&s, &[rec], 0, 1, None).unwrap();
        let (gone, window) = ((back - lost) as f64 * 1e-9, (b - a) as f64 * 1e-9);
        assert!(
            e.incomplete && e.gap_s >= gone - 0.05 && e.gap_s <= gone + 0.4,
            "gap {} s for {gone:.3} s gone in {window:.3} s",
            e.gap_s
        );
        assert!((e.avg_power_w - 7.5).abs() < 1e-9, "{e:?}");
        assert!(
            (e.energy_j - 7.5 * (window - e.gap_s)).abs() < 1e-6,
            "{} J",
            e.energy_j
        );
        assert!(m.run_warning().unwrap().contains("reading again"));
    }

    #[test]
    fn raw_ina226_through_the_simulator_as_a_power_source() {
        let sim = ina226::sim::Ina226Sim::new();
        sim.set_inputs(0.010, 19.0); // 1 A through 10 mOhm at 19 V
        let settings = ina226::Settings {
            shunt_ohms: 0.01,
            max_current_a: 8.0,
            averaging: 1,
            bus_conversion_us: 332,
            shunt_conversion_us: 588,
        };
        let chip = ina226::Ina226::new(sim.clone(), settings, "VDD_IN").unwrap();
        assert_eq!(chip.default_period(), Duration::from_millis(1));
        let src: Box<dyn PowerSource> = Box::new(chip);
        let h = RecordingHandle::start(
            &[(Arc::new(Mutex::new(src)), Duration::from_millis(1))],
            vec![("ina226 VDD_IN".into(), "VDD_IN".into())],
            None,
        );
        std::thread::sleep(Duration::from_millis(20));
        sim.power_on_reset(); // a brown-out mid-recording: one reading lost, then recovered
        std::thread::sleep(Duration::from_millis(20));
        let s = h.stop();
        assert_eq!(s.total, [0]);
        assert!(s.series[0].watts.len() > 10);
        assert!(
            s.series[0].watts.iter().all(|w| (w - 19.0).abs() < 0.05),
            "{:?}",
            s.series[0].watts
        );
        assert_eq!(s.errors.len(), 1);
        assert_eq!(sim.register(ina226::reg::CALIBRATION), 2097);
    }
}
