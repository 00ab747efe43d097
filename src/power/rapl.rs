//! powercap RAPL on x86 hosts: `class/powercap/intel-rapl:<N>/energy_uj` is a wrapping energy
//! counter (range `max_energy_range_uj`); power is the counter's increase over the time since
//! the previous reading. Only top-level zones (`intel-rapl:N`): their sub-zones (`:N:M`, core,
//! uncore, dram) are parts of the package and would double count.

use super::hwmon::{glob, read_num, read_text};
use super::{PowerSource, Reading};
use crate::clock::monotonic_ns;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Increase of a counter that wraps after `max`: `prev -> cur`.
pub(crate) fn wrapping_delta(prev: f64, cur: f64, max: f64) -> f64 {
    if cur >= prev {
        cur - prev
    } else {
        max - prev + cur
    }
}

struct Zone {
    energy: PathBuf,
    max_uj: f64,
    last: Option<(i64, f64)>,
}

pub(crate) struct RaplSource {
    rails: Vec<String>,
    zones: Vec<Zone>,
}

impl RaplSource {
    /// Top-level RAPL zones under `<powercap>`; None when there is none readable.
    pub(crate) fn discover(powercap: &Path) -> Option<RaplSource> {
        let mut rails = Vec::new();
        let mut zones = Vec::new();
        for dir in glob(powercap, "intel-rapl:") {
            let name = dir.file_name()?.to_string_lossy().into_owned();
            if name.matches(':').count() != 1 || read_num(&dir.join("energy_uj")).is_err() {
                continue;
            }
            rails.push(read_text(&dir.join("name")).unwrap_or(name));
            zones.push(Zone {
                energy: dir.join("energy_uj"),
                max_uj: read_num(&dir.join("max_energy_range_uj")).unwrap_or(f64::MAX),
                last: None,
            });
        }
        let mut src = RaplSource { rails, zones };
        if src.zones.is_empty() {
            return None;
        }
        // Prime the counters so the first sample already has a previous value.
        let _ = src.read();
        Some(src)
    }
}

impl PowerSource for RaplSource {
    fn describe(&self) -> String {
        "rapl powercap".into()
    }

    fn rails(&self) -> &[String] {
        &self.rails
    }

    fn read(&mut self) -> anyhow::Result<Vec<Reading>> {
        let mut out = Vec::with_capacity(self.zones.len());
        let mut primed = true;
        for z in &mut self.zones {
            let t = monotonic_ns();
            let uj = read_num(&z.energy)?;
            match z.last.replace((t, uj)) {
                Some((t0, uj0)) if t > t0 => out.push(Reading {
                    volts: None,
                    amps: None,
                    watts: wrapping_delta(uj0, uj, z.max_uj) * 1e-6 / ((t - t0) as f64 * 1e-9),
                }),
                _ => primed = false,
            }
        }
        anyhow::ensure!(primed, "RAPL counters read for the first time");
        Ok(out)
    }

    fn default_period(&self) -> Duration {
        // The counters update every ~1 ms but are coarse; 10 Hz keeps the quantisation small.
        Duration::from_millis(100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::jetson::write;

    #[test]
    fn wraps_around_the_counter_range() {
        assert_eq!(wrapping_delta(100.0, 350.0, 1000.0), 250.0);
        assert_eq!(wrapping_delta(900.0, 50.0, 1000.0), 150.0);
    }

    #[test]
    fn top_level_zones_only_and_power_from_the_counter() {
        let root = tempfile::tempdir().unwrap();
        let pc = root.path().join("class/powercap");
        write(&pc, "intel-rapl:0/name", "package-0");
        write(&pc, "intel-rapl:0/energy_uj", "262143000000");
        write(&pc, "intel-rapl:0/max_energy_range_uj", "262143328850");
        write(&pc, "intel-rapl:0:0/name", "core");
        write(&pc, "intel-rapl:0:0/energy_uj", "5");
        let mut src = RaplSource::discover(&pc).unwrap();
        assert_eq!(src.rails(), ["package-0"]);
        std::thread::sleep(Duration::from_millis(20));
        // The counter wrapped: +1,000,000 uJ in total.
        write(&pc, "intel-rapl:0/energy_uj", "671150");
        let r = src.read().unwrap();
        let w = r[0].watts;
        assert!(w > 1.0 && w < 1.0 / 0.02, "{w}");
        assert!(RaplSource::discover(&root.path().join("none")).is_none());
    }
}
