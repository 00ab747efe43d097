//! Clocks and temperatures, read from sysfs: CPU frequency policies, the GPU's devfreq node,
//! thermal zones and cooling devices. One [`ClockState`] is a snapshot; a trial's series of
//! them decides whether it ran throttled ([`assess`]).

use crate::clock::monotonic_ns;
use crate::host::{read_trimmed as read, HostPaths};
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

fn read_u64(path: &Path) -> Option<u64> {
    read(path)?.parse().ok()
}

fn read_i64(path: &Path) -> Option<i64> {
    read(path)?.parse().ok()
}

/// Directory entries whose name starts with `prefix` followed by a number, in numeric order.
fn numbered(dir: &Path, prefix: &str) -> Vec<(u32, std::path::PathBuf)> {
    let mut found: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_prefix(prefix)?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort();
    found
}

/// One cpufreq policy (a cluster of CPUs sharing a clock), frequencies in kHz.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CpuPolicy {
    pub name: String,
    pub cpus: Option<String>,
    pub governor: Option<String>,
    pub cur_khz: Option<u64>,
    pub min_khz: Option<u64>,
    pub max_khz: Option<u64>,
    /// The hardware's highest frequency (`cpuinfo_max_freq`).
    pub hw_max_khz: Option<u64>,
}

/// The GPU's devfreq node, frequencies in Hz.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct GpuClock {
    pub name: String,
    pub governor: Option<String>,
    pub cur_hz: Option<u64>,
    pub min_hz: Option<u64>,
    pub max_hz: Option<u64>,
    /// Load in per mille (`<device>/load`), where the driver has it.
    pub load_permille: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ThermalZone {
    pub name: String,
    pub temp_c: f64,
    /// Lowest `passive` trip point: above it the kernel lowers clocks.
    pub passive_c: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CoolingDevice {
    pub name: String,
    pub cur_state: u64,
    pub max_state: Option<u64>,
}

impl CoolingDevice {
    /// Fans cool without slowing anything; every other cooling device caps a clock.
    pub(crate) fn caps_clocks(&self) -> bool {
        !self.name.to_ascii_lowercase().contains("fan")
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct ClockState {
    pub t_ns: i64,
    pub cpus: Vec<CpuPolicy>,
    pub gpu: Option<GpuClock>,
    pub zones: Vec<ThermalZone>,
    pub cooling: Vec<CoolingDevice>,
}

/// devfreq node names of the Jetson GPUs, by driver and by unit address.
const GPU_DEVFREQ: &[&str] = &["gpu", "gm20b", "gp10b", "gv11b", "ga10b"];

fn cpu_policies(host: &HostPaths) -> Vec<CpuPolicy> {
    let base = host.sys("devices/system/cpu");
    let mut dirs: Vec<(String, std::path::PathBuf)> = numbered(&base.join("cpufreq"), "policy")
        .into_iter()
        .map(|(n, p)| (format!("policy{n}"), p))
        .collect();
    if dirs.is_empty() {
        // Older kernels: one cpufreq directory per CPU (shared ones are symlinks).
        dirs = numbered(&base, "cpu")
            .into_iter()
            .map(|(n, p)| (format!("cpu{n}"), p.join("cpufreq")))
            .filter(|(_, p)| p.is_dir())
            .collect();
    }
    dirs.into_iter()
        .map(|(name, d)| CpuPolicy {
            name,
            cpus: read(&d.join("related_cpus")).or_else(|| read(&d.join("affected_cpus"))),
            governor: read(&d.join("scaling_governor")),
            cur_khz: read_u64(&d.join("scaling_cur_freq"))
                .or_else(|| read_u64(&d.join("cpuinfo_cur_freq"))),
            min_khz: read_u64(&d.join("scaling_min_freq")),
            max_khz: read_u64(&d.join("scaling_max_freq")),
            hw_max_khz: read_u64(&d.join("cpuinfo_max_freq")),
        })
        .collect()
}

fn gpu_clock(host: &HostPaths) -> Option<GpuClock> {
    let dir = host.sys("class/devfreq");
    let mut entries: Vec<_> = std::fs::read_dir(&dir).ok()?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    let entry = entries.into_iter().find(|e| {
        let name = e.file_name().to_string_lossy().to_ascii_lowercase();
        // "57000000.gpu", "17000000.gv11b", "gpu.0": the part after the unit address.
        let driver = name.rsplit('.').next().unwrap_or(&name).to_string();
        GPU_DEVFREQ.contains(&driver.as_str()) || name.starts_with("gpu")
    })?;
    let d = entry.path();
    Some(GpuClock {
        name: entry.file_name().to_string_lossy().into_owned(),
        governor: read(&d.join("governor")),
        cur_hz: read_u64(&d.join("cur_freq")),
        min_hz: read_u64(&d.join("min_freq")),
        max_hz: read_u64(&d.join("max_freq")),
        load_permille: read_u64(&d.join("device/load")),
    })
}

fn thermal_zones(host: &HostPaths) -> Vec<ThermalZone> {
    numbered(&host.sys("class/thermal"), "thermal_zone")
        .into_iter()
        .filter_map(|(n, d)| {
            let temp_mc = read_i64(&d.join("temp"))?;
            // An absent sensor reads as a huge negative (e.g. -40000 on some Tegra zones).
            if temp_mc <= -40_000 {
                return None;
            }
            let passive_c = (0..16)
                .filter(|i| {
                    read(&d.join(format!("trip_point_{i}_type"))).as_deref() == Some("passive")
                })
                .filter_map(|i| read_i64(&d.join(format!("trip_point_{i}_temp"))))
                .map(|mc| mc as f64 / 1000.0)
                .reduce(f64::min);
            Some(ThermalZone {
                name: read(&d.join("type")).unwrap_or_else(|| format!("thermal_zone{n}")),
                temp_c: temp_mc as f64 / 1000.0,
                passive_c,
            })
        })
        .collect()
}

fn cooling_devices(host: &HostPaths) -> Vec<CoolingDevice> {
    numbered(&host.sys("class/thermal"), "cooling_device")
        .into_iter()
        .filter_map(|(n, d)| {
            Some(CoolingDevice {
                name: read(&d.join("type")).unwrap_or_else(|| format!("cooling_device{n}")),
                cur_state: read_u64(&d.join("cur_state"))?,
                max_state: read_u64(&d.join("max_state")),
            })
        })
        .collect()
}

/// Reads everything now; what the host lacks is simply empty.
pub(crate) fn read_state(host: &HostPaths) -> ClockState {
    ClockState {
        t_ns: monotonic_ns(),
        cpus: cpu_policies(host),
        gpu: gpu_clock(host),
        zones: thermal_zones(host),
        cooling: cooling_devices(host),
    }
}

impl ClockState {
    /// True when nothing clock- or temperature-related was readable (a VM, a container).
    pub(crate) fn is_empty(&self) -> bool {
        self.cpus.is_empty() && self.gpu.is_none() && self.zones.is_empty()
    }
}

/// A thread in the parent that reads the clocks every `interval` while a trial runs.
/// Shown each state on the watcher's thread as it is read.
pub(crate) type ClockObserver = Box<dyn FnMut(&ClockState) + Send>;

pub(crate) struct ClockWatcher {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<ClockState>>,
}

impl ClockWatcher {
    /// Reads the clocks now and then every `interval` until stopped, each state also shown to
    /// `observe` on the watcher's thread as it is read (a live view of the same reads).
    pub(crate) fn start_observed(
        host: &HostPaths,
        interval: Duration,
        mut observe: Option<ClockObserver>,
    ) -> std::io::Result<ClockWatcher> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let host = host.clone();
        let thread = std::thread::Builder::new()
            .name("clock-watcher".into())
            .spawn(move || {
                let mut read = || {
                    let state = read_state(&host);
                    if let Some(observe) = observe.as_mut() {
                        observe(&state);
                    }
                    state
                };
                let mut states = vec![read()];
                if states[0].is_empty() {
                    // Nothing to watch on this host; do not poll empty directories.
                    return states;
                }
                loop {
                    crate::host::sleep_unless(&flag, interval);
                    states.push(read());
                    if flag.load(Ordering::Relaxed) {
                        return states;
                    }
                }
            })?;
        Ok(ClockWatcher { stop, thread })
    }

    pub(crate) fn stop(self) -> Vec<ClockState> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// How a trial's clocks behaved: the verdict and one row per watched quantity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClockReport {
    /// `None` when the host exposes no clocks or temperatures (nothing could be judged).
    pub throttled: Option<bool>,
    /// Why it counts as throttled (every reason found), or what was watched.
    pub note: Option<String>,
    pub series: Vec<ClockSeries>,
}

/// Start, lowest, highest and end value of one quantity over a trial.
#[derive(Debug, Clone, PartialEq)]
pub struct ClockSeries {
    pub key: String,
    pub start: f64,
    pub min: f64,
    pub max: f64,
    pub end: f64,
}

fn series(key: String, values: &[f64]) -> Option<ClockSeries> {
    Some(ClockSeries {
        key,
        start: *values.first()?,
        min: values.iter().copied().fold(f64::INFINITY, f64::min),
        max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        end: *values.last()?,
    })
}

/// A pinned clock (minimum = maximum, as jetson_clocks or the performance governor set it)
/// that moves by more than this fraction moved for a reason outside the benchmark.
const PINNED_TOLERANCE: f64 = 0.02;
/// A free-running clock that falls this far below its trial maximum while a zone is past its
/// passive trip point was lowered by the thermal framework.
const THERMAL_DROP: f64 = 0.10;

/// One clock's readings over the trial, for the rules in [`assess`].
struct ClockTrack<'a> {
    label: String,
    unit: &'a str,
    governors: Vec<Option<&'a str>>,
    cur: Vec<Option<u64>>,
    min: Vec<Option<u64>>,
    max: Vec<Option<u64>>,
}

/// One clock read once: governor and current/minimum/maximum frequency.
struct Reading<'a> {
    governor: Option<&'a str>,
    cur: Option<u64>,
    min: Option<u64>,
    max: Option<u64>,
}

impl CpuPolicy {
    fn reading(&self) -> Reading<'_> {
        Reading {
            governor: self.governor.as_deref(),
            cur: self.cur_khz,
            min: self.min_khz,
            max: self.max_khz,
        }
    }
}

impl GpuClock {
    fn reading(&self) -> Reading<'_> {
        Reading {
            governor: self.governor.as_deref(),
            cur: self.cur_hz,
            min: self.min_hz,
            max: self.max_hz,
        }
    }
}

impl<'a> ClockTrack<'a> {
    /// One reading per state, `None` where the clock was missing from that state.
    fn new(
        label: String,
        unit: &'a str,
        readings: impl Iterator<Item = Option<Reading<'a>>>,
    ) -> Self {
        let mut track = ClockTrack {
            label,
            unit,
            governors: Vec::new(),
            cur: Vec::new(),
            min: Vec::new(),
            max: Vec::new(),
        };
        for r in readings {
            track.governors.push(r.as_ref().and_then(|r| r.governor));
            track.cur.push(r.as_ref().and_then(|r| r.cur));
            track.min.push(r.as_ref().and_then(|r| r.min));
            track.max.push(r.as_ref().and_then(|r| r.max));
        }
        track
    }

    fn reasons(&self, states: &[ClockState], out: &mut Vec<String>) {
        let first_max = self.max.first().copied().flatten();
        if let Some(changed) = self.max.iter().flatten().find(|&&m| Some(m) != first_max) {
            out.push(format!(
                "{} maximum clock changed {} -> {} {}",
                self.label,
                first_max.map_or("?".into(), |v| v.to_string()),
                changed,
                self.unit
            ));
        }
        let first_gov = self.governors.first().copied().flatten();
        if let Some(g) = self
            .governors
            .iter()
            .flatten()
            .find(|&&g| Some(g) != first_gov)
        {
            out.push(format!(
                "{} governor changed {} -> {g}",
                self.label,
                first_gov.unwrap_or("?")
            ));
        }
        let pinned = match (self.min.first().copied().flatten(), first_max) {
            (Some(lo), Some(hi)) => lo == hi,
            _ => false,
        };
        let curs: Vec<(usize, u64)> = self
            .cur
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.map(|c| (i, c)))
            .collect();
        if pinned {
            let target = first_max.unwrap_or(0) as f64;
            if let Some((_, off)) = curs
                .iter()
                .find(|(_, c)| (*c as f64 - target).abs() > PINNED_TOLERANCE * target)
            {
                out.push(format!(
                    "{} left its pinned {} {} (read {off})",
                    self.label, target as u64, self.unit
                ));
            }
            return;
        }
        let Some(top) = curs.iter().map(|&(_, c)| c).max() else {
            return;
        };
        for &(i, c) in &curs {
            if (c as f64) >= (1.0 - THERMAL_DROP) * top as f64 {
                continue;
            }
            if let Some(z) = states[i]
                .zones
                .iter()
                .find(|z| z.passive_c.is_some_and(|p| z.temp_c >= p))
            {
                out.push(format!(
                    "{} fell to {c} {} (trial maximum {top}) while {} was at {:.1} C, past its \
                     passive trip point {:.1} C",
                    self.label,
                    self.unit,
                    z.name,
                    z.temp_c,
                    z.passive_c.unwrap_or_default()
                ));
                return;
            }
        }
    }
}

fn policy_at<'s>(s: &'s ClockState, k: usize, name: &str) -> Option<&'s CpuPolicy> {
    s.cpus.get(k).filter(|p| p.name == name)
}

/// Decides whether a trial ran throttled, from the clock states read during it:
/// - a maximum clock (CPU `scaling_max_freq`, GPU devfreq `max_freq`) or a governor changed
///   (nvpmodel, jetson_clocks, a user or a thermal cap did it mid-trial);
/// - a pinned clock (minimum = maximum) moved by more than 2 %;
/// - a clock-capping cooling device (not a fan) raised its state;
/// - a free-running clock fell more than 10 % below its trial maximum while a thermal zone was
///   past its passive trip point (a temperature-driven drop).
///
/// Free-running clocks moving under an ondemand/schedutil governor are normal and not
/// throttling.
pub(crate) fn assess<'s>(states: &'s [ClockState]) -> ClockReport {
    let Some(first) = states.first() else {
        return ClockReport::default();
    };
    if first.is_empty() {
        return ClockReport::default();
    }
    let mut reasons = Vec::new();
    let mut out_series = Vec::new();
    let f = |v: Option<u64>| v.map(|v| v as f64);
    for (k, policy) in first.cpus.iter().enumerate() {
        let label = format!(
            "CPU {} ({})",
            policy.name,
            policy.cpus.as_deref().unwrap_or("?")
        );
        let readings = states
            .iter()
            .map(|s| policy_at(s, k, &policy.name).map(CpuPolicy::reading));
        let track = ClockTrack::new(label, "kHz", readings);
        track.reasons(states, &mut reasons);
        let values: Vec<f64> = track.cur.iter().filter_map(|&v| f(v)).collect();
        out_series.extend(series(format!("cpu.{}.cur_khz", policy.name), &values));
    }
    if let Some(gpu) = &first.gpu {
        let at = |s: &'s ClockState| s.gpu.as_ref().filter(|g| g.name == gpu.name);
        let readings = states.iter().map(|s| at(s).map(GpuClock::reading));
        let track = ClockTrack::new(format!("GPU {}", gpu.name), "Hz", readings);
        track.reasons(states, &mut reasons);
        let values: Vec<f64> = track.cur.iter().filter_map(|&v| f(v)).collect();
        out_series.extend(series("gpu.cur_hz".into(), &values));
        let loads: Vec<f64> = states
            .iter()
            .filter_map(|s| f(at(s).and_then(|g| g.load_permille)))
            .collect();
        out_series.extend(series("gpu.load_permille".into(), &loads));
    }
    for dev in first.cooling.iter().filter(|d| d.caps_clocks()) {
        let states_of: Vec<u64> = states
            .iter()
            .filter_map(|s| s.cooling.iter().find(|d| d.name == dev.name))
            .map(|d| d.cur_state)
            .collect();
        if let Some(&peak) = states_of.iter().max() {
            if peak > dev.cur_state {
                reasons.push(format!(
                    "cooling device {} raised its state {} -> {peak}",
                    dev.name, dev.cur_state
                ));
            }
        }
    }
    for zone in &first.zones {
        let temps: Vec<f64> = states
            .iter()
            .filter_map(|s| s.zones.iter().find(|z| z.name == zone.name))
            .map(|z| z.temp_c)
            .collect();
        out_series.extend(series(format!("temp.{}.c", zone.name), &temps));
    }
    let throttled = !reasons.is_empty();
    let note = if throttled {
        Some(reasons.join("; "))
    } else {
        Some(format!(
            "clocks steady over {} readings ({} CPU policies{}, {} thermal zones)",
            states.len(),
            first.cpus.len(),
            if first.gpu.is_some() { ", GPU" } else { "" },
            first.zones.len()
        ))
    };
    ClockReport {
        throttled: Some(throttled),
        note,
        series: out_series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(cur: u64, min: u64, max: u64, temp_c: f64, cooling: u64) -> ClockState {
        ClockState {
            t_ns: 0,
            cpus: vec![CpuPolicy {
                name: "policy0".into(),
                cpus: Some("0-3".into()),
                governor: Some("schedutil".into()),
                cur_khz: Some(cur),
                min_khz: Some(min),
                max_khz: Some(max),
                hw_max_khz: Some(2_000_000),
            }],
            gpu: None,
            zones: vec![ThermalZone {
                name: "CPU-therm".into(),
                temp_c,
                passive_c: Some(97.0),
            }],
            cooling: vec![
                CoolingDevice {
                    name: "pwm-fan".into(),
                    cur_state: cooling,
                    max_state: Some(255),
                },
                CoolingDevice {
                    name: "cpufreq-cpu0".into(),
                    cur_state: 0,
                    max_state: Some(9),
                },
            ],
        }
    }

    #[test]
    fn a_free_clock_moving_and_a_fan_spinning_up_are_not_throttling() {
        let r = assess(&[
            state(2_000_000, 300_000, 2_000_000, 50.0, 0),
            state(800_000, 300_000, 2_000_000, 60.0, 120),
            state(1_900_000, 300_000, 2_000_000, 65.0, 255),
        ]);
        assert_eq!(r.throttled, Some(false), "{:?}", r.note);
        let cur = r
            .series
            .iter()
            .find(|s| s.key == "cpu.policy0.cur_khz")
            .unwrap();
        assert_eq!(
            (cur.start, cur.min, cur.max, cur.end),
            (2e6, 8e5, 2e6, 1.9e6)
        );
        let t = r
            .series
            .iter()
            .find(|s| s.key == "temp.CPU-therm.c")
            .unwrap();
        assert_eq!((t.start, t.max), (50.0, 65.0));
    }

    #[test]
    fn a_lowered_maximum_or_governor_change_is_throttling() {
        let r = assess(&[
            state(2_000_000, 300_000, 2_000_000, 50.0, 0),
            state(1_400_000, 300_000, 1_400_000, 50.0, 0),
        ]);
        assert_eq!(r.throttled, Some(true));
        assert!(r
            .note
            .unwrap()
            .contains("maximum clock changed 2000000 -> 1400000"));
        let mut b = state(2_000_000, 300_000, 2_000_000, 50.0, 0);
        b.cpus[0].governor = Some("powersave".into());
        let r = assess(&[state(2_000_000, 300_000, 2_000_000, 50.0, 0), b]);
        assert!(r
            .note
            .unwrap()
            .contains("governor changed schedutil -> powersave"));
    }

    #[test]
    fn a_pinned_clock_that_moves_is_throttling() {
        let pinned = |cur| state(cur, 2_000_000, 2_000_000, 50.0, 0);
        assert_eq!(
            assess(&[pinned(2_000_000), pinned(1_990_000)]).throttled,
            Some(false),
            "within 2 %"
        );
        let r = assess(&[pinned(2_000_000), pinned(1_500_000), pinned(2_000_000)]);
        assert_eq!(r.throttled, Some(true));
        assert!(r
            .note
            .unwrap()
            .contains("left its pinned 2000000 kHz (read 1500000)"));
    }

    #[test]
    fn a_clock_drop_past_the_passive_trip_point_is_throttling() {
        // Cool: the same drop is the governor's business.
        let cool = assess(&[
            state(2_000_000, 300_000, 2_000_000, 90.0, 0),
            state(1_200_000, 300_000, 2_000_000, 96.0, 0),
        ]);
        assert_eq!(cool.throttled, Some(false));
        let hot = assess(&[
            state(2_000_000, 300_000, 2_000_000, 90.0, 0),
            state(1_200_000, 300_000, 2_000_000, 97.5, 0),
        ]);
        assert_eq!(hot.throttled, Some(true));
        assert!(hot.note.unwrap().contains("CPU-therm was at 97.5 C"));
    }

    #[test]
    fn a_capping_cooling_device_raising_its_state_is_throttling() {
        let a = state(2_000_000, 300_000, 2_000_000, 50.0, 0);
        let mut b = a.clone();
        b.cooling[1].cur_state = 3;
        let r = assess(&[a, b]);
        assert_eq!(r.throttled, Some(true));
        assert!(r
            .note
            .unwrap()
            .contains("cpufreq-cpu0 raised its state 0 -> 3"));
    }

    #[test]
    fn a_host_without_clocks_is_not_judged() {
        let r = assess(&[ClockState::default(), ClockState::default()]);
        assert_eq!(r.throttled, None);
        assert!(r.series.is_empty());
        let empty = tempfile::tempdir().unwrap();
        let host = HostPaths {
            sysfs: empty.path().into(),
            procfs: empty.path().into(),
            rootfs: empty.path().into(),
        };
        assert!(read_state(&host).is_empty());
    }
}
