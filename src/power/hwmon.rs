//! Power monitors the kernel owns, read through sysfs:
//! - `ina3221` hwmon (JetPack 5/6): `in<K>_input` bus mV, `curr<K>_input` mA, `in<K>_label`,
//!   K = 1..3, no power file (P = V x I); the hwmon index changes between boots, so it is globbed.
//! - NVIDIA's `ina3221x` IIO driver (JetPack 4): `rail_name_<K>`, `in_voltage<K>_input` mV,
//!   `in_current<K>_input` mA, `in_power<K>_input` mW, K from 0.
//! - `ina2xx` hwmon (an INA226 owned by the kernel): `in1_input` bus mV, `curr1_input` mA,
//!   `power1_input` uW, `update_interval` ms.
//! - `ina238` hwmon (AGX Thor's carrier board VIN): `in1_input` bus mV, `curr1_input` mA,
//!   `power1_input` uW; no `update_interval`, and the channel may have no label.
//! - `power_supply` class entries are listed, never read as rails: a UCSI (USB-C) entry states
//!   the contract the port negotiated, a limit, not what flows.
//!
//! Files are reopened on every read: sysfs regenerates the value on open, and a device that
//! vanished then fails loudly instead of returning stale text. A failing source probes its
//! device again (at most every [`REPROBE_EVERY`]): a driver rebind gives the same rails a new
//! hwmon or IIO index, and readings resume there.

use super::{PowerSource, Reading};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often a failing source looks for its device again.
pub(crate) const REPROBE_EVERY: Duration = Duration::from_millis(200);

/// Entries of `dir` whose name starts with `prefix`, sorted (a one-level glob).
pub(crate) fn glob(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

pub(crate) fn read_text(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

pub(crate) fn read_num(path: &Path) -> anyhow::Result<f64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.trim()
        .parse::<f64>()
        .with_context(|| format!("{}: not a number: {:?}", path.display(), text.trim()))
}

/// The `<bus>-<addr>` name of an I2C device directory, e.g. `1-0040`.
fn device_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// One channel: where its value files are and how to turn them into a reading.
#[derive(Debug, Clone)]
struct Channel {
    volts_mv: PathBuf,
    amps_ma: PathBuf,
    /// Power file and its scale to watts; None = V x I.
    power: Option<(PathBuf, f64)>,
}

impl Channel {
    fn read(&self) -> anyhow::Result<Reading> {
        let v = read_num(&self.volts_mv)? * 1e-3;
        let a = read_num(&self.amps_ma)? * 1e-3;
        let w = match &self.power {
            Some((path, scale)) => read_num(path)? * scale,
            None => v * a,
        };
        Ok(Reading {
            volts: Some(v),
            amps: Some(a),
            watts: w,
        })
    }
}

/// Which kernel driver's layout a source follows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Driver {
    Ina3221Hwmon,
    Ina3221xIio,
    Ina2xxHwmon,
    Ina238Hwmon,
}

impl Driver {
    /// The sources under one I2C device directory.
    fn probe(self, dev: &Path) -> Vec<SysfsSource> {
        match self {
            Driver::Ina3221Hwmon => ina3221_hwmon_device(dev),
            Driver::Ina3221xIio => ina3221x_iio_device(dev),
            Driver::Ina2xxHwmon => ina2xx_hwmon_device(dev),
            // The rail's name came from the profile when the channel has no label; reprobe
            // keeps the name it has (one INA238 per device directory).
            Driver::Ina238Hwmon => ina238_hwmon_device(dev, &|_| None),
        }
    }
}

/// A kernel-driven monitor with one or more channels.
#[derive(Debug, Clone)]
pub(crate) struct SysfsSource {
    description: String,
    rails: Vec<String>,
    channels: Vec<Channel>,
    period: Duration,
    driver: Driver,
    /// The I2C device directory, probed again when reads fail.
    device: PathBuf,
    last_reprobe: Option<Instant>,
}

impl SysfsSource {
    fn read_channels(&self) -> anyhow::Result<Vec<Reading>> {
        self.channels.iter().map(Channel::read).collect()
    }

    /// Looks for the same rails under the device again; true if they were found (the
    /// channels then point at the device's current files).
    fn reprobe(&mut self) -> bool {
        if self
            .last_reprobe
            .is_some_and(|t| t.elapsed() < REPROBE_EVERY)
        {
            return false;
        }
        self.last_reprobe = Some(Instant::now());
        let found = self
            .driver
            .probe(&self.device)
            .into_iter()
            .find(|s| s.rails == self.rails || self.driver == Driver::Ina238Hwmon);
        match found {
            Some(s) => {
                if s.description != self.description {
                    tracing::info!("power source {} is now {}", self.description, s.description);
                }
                self.channels = s.channels;
                true
            }
            None => false,
        }
    }
}

impl PowerSource for SysfsSource {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn rails(&self) -> &[String] {
        &self.rails
    }

    fn read(&mut self) -> anyhow::Result<Vec<Reading>> {
        match self.read_channels() {
            Ok(r) => Ok(r),
            Err(e) => match self.reprobe() {
                true => self.read_channels(),
                false => Err(e),
            },
        }
    }

    fn default_period(&self) -> Duration {
        self.period
    }
}

/// `update_interval` (ms) of a hwmon device, bounded to 1 ms..1 s; None if absent.
fn update_interval(dir: &Path) -> Option<Duration> {
    let ms = read_num(&dir.join("update_interval")).ok()?;
    Some(Duration::from_secs_f64((ms * 1e-3).clamp(1e-3, 1.0)))
}

/// Unconnected INA3221 channels are labelled NC on some boards (AGX Orin).
fn connected(label: &str) -> bool {
    !label.eq_ignore_ascii_case("nc")
}

/// `ina3221` hwmon devices: `<drivers>/ina3221/<bus>-<addr>/hwmon/hwmon<N>`.
pub(crate) fn ina3221_hwmon(drivers: &Path) -> Vec<SysfsSource> {
    glob(&drivers.join("ina3221"), "")
        .iter()
        .flat_map(|dev| ina3221_hwmon_device(dev))
        .collect()
}

fn ina3221_hwmon_device(dev: &Path) -> Vec<SysfsSource> {
    let mut out = Vec::new();
    for hw in glob(&dev.join("hwmon"), "hwmon") {
        let mut rails = Vec::new();
        let mut channels = Vec::new();
        for k in 1..=3 {
            let Some(label) = read_text(&hw.join(format!("in{k}_label"))) else {
                continue;
            };
            let input = hw.join(format!("in{k}_input"));
            if !connected(&label) || !input.exists() {
                continue;
            }
            rails.push(label);
            channels.push(Channel {
                volts_mv: input,
                amps_ma: hw.join(format!("curr{k}_input")),
                power: None,
            });
        }
        if !channels.is_empty() {
            out.push(SysfsSource {
                description: format!("ina3221 {} ({})", device_name(dev), hw.display()),
                rails,
                channels,
                period: update_interval(&hw).unwrap_or(Duration::from_millis(10)),
                driver: Driver::Ina3221Hwmon,
                device: dev.to_path_buf(),
                last_reprobe: None,
            });
        }
    }
    out
}

/// NVIDIA `ina3221x` IIO devices: `<drivers>/ina3221x/<bus>-<addr>/iio:device<N>`.
pub(crate) fn ina3221x_iio(drivers: &Path) -> Vec<SysfsSource> {
    glob(&drivers.join("ina3221x"), "")
        .iter()
        .flat_map(|dev| ina3221x_iio_device(dev))
        .collect()
}

fn ina3221x_iio_device(dev: &Path) -> Vec<SysfsSource> {
    let mut out = Vec::new();
    for iio in glob(dev, "iio:device") {
        let mut rails = Vec::new();
        let mut channels = Vec::new();
        for k in 0..3 {
            let Some(name) = read_text(&iio.join(format!("rail_name_{k}"))) else {
                continue;
            };
            let power = iio.join(format!("in_power{k}_input"));
            if !connected(&name) || !power.exists() {
                continue;
            }
            rails.push(name);
            channels.push(Channel {
                volts_mv: iio.join(format!("in_voltage{k}_input")),
                amps_ma: iio.join(format!("in_current{k}_input")),
                power: Some((power, 1e-3)),
            });
        }
        if !channels.is_empty() {
            out.push(SysfsSource {
                description: format!("ina3221x {} ({})", device_name(dev), iio.display()),
                rails,
                channels,
                // The IIO driver has no update_interval; 50 Hz is well inside its
                // conversion time at L4T's default averaging.
                period: Duration::from_millis(20),
                driver: Driver::Ina3221xIio,
                device: dev.to_path_buf(),
                last_reprobe: None,
            });
        }
    }
    out
}

/// `ina2xx` hwmon devices (INA219/220/226/230/231 owned by the kernel).
pub(crate) fn ina2xx_hwmon(drivers: &Path) -> Vec<SysfsSource> {
    glob(&drivers.join("ina2xx"), "")
        .iter()
        .flat_map(|dev| ina2xx_hwmon_device(dev))
        .collect()
}

fn ina2xx_hwmon_device(dev: &Path) -> Vec<SysfsSource> {
    let mut out = Vec::new();
    for hw in glob(&dev.join("hwmon"), "hwmon") {
        if !hw.join("power1_input").exists() {
            continue;
        }
        let chip = read_text(&hw.join("name")).unwrap_or_else(|| "ina2xx".into());
        let rail = read_text(&hw.join("label"))
            .unwrap_or_else(|| format!("{}_{}", chip.to_uppercase(), device_name(dev)));
        out.push(SysfsSource {
            description: format!("ina2xx {chip} {} ({})", device_name(dev), hw.display()),
            rails: vec![rail],
            channels: vec![Channel {
                volts_mv: hw.join("in1_input"),
                amps_ma: hw.join("curr1_input"),
                power: Some((hw.join("power1_input"), 1e-6)),
            }],
            period: update_interval(&hw).unwrap_or(Duration::from_millis(10)),
            driver: Driver::Ina2xxHwmon,
            device: dev.to_path_buf(),
            last_reprobe: None,
        });
    }
    out
}

/// The INA238's refresh when the driver exposes no `update_interval`: the `ina238` driver
/// programs ADC_CONFIG 0xfb6a, i.e. bus, shunt and temperature conversions of 1052 us each,
/// averaged 16 times: 3 x 1.052 ms x 16 = 50.5 ms.
pub(crate) const INA238_PERIOD: Duration = Duration::from_micros(50_496);

/// `ina238` hwmon devices: `<drivers>/ina238/<bus>-<addr>/hwmon/hwmon<N>`. A channel without a
/// label takes `name_for(<bus>-<addr>)` (the board profile's name for it), else
/// `INA238_<bus>-<addr>`.
pub(crate) fn ina238_hwmon(
    drivers: &Path,
    name_for: &dyn Fn(&str) -> Option<String>,
) -> Vec<SysfsSource> {
    glob(&drivers.join("ina238"), "")
        .iter()
        .flat_map(|dev| ina238_hwmon_device(dev, name_for))
        .collect()
}

fn ina238_hwmon_device(dev: &Path, name_for: &dyn Fn(&str) -> Option<String>) -> Vec<SysfsSource> {
    let mut out = Vec::new();
    let at = device_name(dev);
    for hw in glob(&dev.join("hwmon"), "hwmon") {
        if !hw.join("power1_input").exists() {
            continue;
        }
        let rail = read_text(&hw.join("in1_label"))
            .or_else(|| read_text(&hw.join("label")))
            .or_else(|| name_for(&at))
            .unwrap_or_else(|| format!("INA238_{at}"));
        out.push(SysfsSource {
            description: format!("ina238 {at} ({})", hw.display()),
            rails: vec![rail],
            channels: vec![Channel {
                volts_mv: hw.join("in1_input"),
                amps_ma: hw.join("curr1_input"),
                power: Some((hw.join("power1_input"), 1e-6)),
            }],
            period: update_interval(&hw).unwrap_or(INA238_PERIOD),
            driver: Driver::Ina238Hwmon,
            device: dev.to_path_buf(),
            last_reprobe: None,
        });
    }
    out
}

/// What `<class>/power_supply/*` holds, one line per entry, none of it a rail: a UCSI entry
/// (`ucsi-source-psy-*`, or a USB type whose driver is ucsi) reports the negotiated USB-C
/// contract (its `voltage_max`/`current_max` are what the port may draw), and batteries or
/// mains adapters are not on a Jetson's measured input path.
pub(crate) fn power_supplies(class: &Path) -> Vec<String> {
    glob(&class.join("power_supply"), "")
        .into_iter()
        .map(|entry| {
            let name = device_name(&entry);
            let kind = read_text(&entry.join("type")).unwrap_or_else(|| "unknown".into());
            let ucsi = name.starts_with("ucsi")
                || std::fs::read_link(entry.join("device/driver"))
                    .map(|d| d.to_string_lossy().contains("ucsi"))
                    .unwrap_or(false);
            if ucsi {
                format!(
                    "{name} (type {kind}): a USB-C contract negotiated by UCSI, not a \
                     measurement; never counted"
                )
            } else {
                format!("{name} (type {kind}): not a power rail; not counted")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::jetson::{
        orin_nx_rails, thor_ina238, tx2, write, ORIN_NX_HWMON, THOR_HWMON, TX2_MODULE,
    };

    #[test]
    fn ina3221_hwmon_rails_by_label_power_is_v_times_i() {
        let root = tempfile::tempdir().unwrap();
        orin_nx_rails(
            root.path(),
            &[
                ("VDD_IN", 5000, 1200),
                ("VDD_CPU_GPU_CV", 5000, 400),
                ("VDD_SOC", 5000, 300),
            ],
        );
        let mut found = ina3221_hwmon(&root.path().join("bus/i2c/drivers"));
        assert_eq!(found.len(), 1);
        let s = &mut found[0];
        assert_eq!(s.rails(), ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]);
        assert!(s.describe().contains("1-0040") && s.describe().contains("hwmon5"));
        assert_eq!(s.default_period(), Duration::from_millis(7));
        let r = s.read().unwrap();
        assert!((r[0].watts - 6.0).abs() < 1e-12, "{r:?}");
        assert_eq!((r[0].volts, r[0].amps), (Some(5.0), Some(1.2)));
        assert!((r[2].watts - 1.5).abs() < 1e-12);
        // A vanished file is an error, not a stale value.
        std::fs::remove_file(root.path().join(format!("{ORIN_NX_HWMON}/curr1_input"))).unwrap();
        assert!(s.read().unwrap_err().to_string().contains("curr1_input"));
    }

    #[test]
    fn ina3221x_iio_channels_from_zero_in_milliwatts() {
        let root = tempfile::tempdir().unwrap();
        tx2(root.path(), &TX2_MODULE);
        let mut found = ina3221x_iio(&root.path().join("bus/i2c/drivers"));
        assert_eq!(found.len(), 2);
        assert_eq!(found[1].rails(), ["VDD_IN", "VDD_SYS_CPU", "VDD_SYS_DDR"]);
        let r = found[1].read().unwrap();
        assert!((r[0].watts - 3.8).abs() < 1e-12);
        assert_eq!(r[0].volts, Some(19.0));
        assert_eq!(found[0].default_period(), Duration::from_millis(20));
    }

    #[test]
    fn ina238_reads_microwatts_and_takes_the_profile_name_when_unlabelled() {
        let root = tempfile::tempdir().unwrap();
        thor_ina238(root.path(), 19_500, 2_400, 45_500_000);
        let drivers = root.path().join("bus/i2c/drivers");
        let named = |at: &str| (at == "2-0044").then(|| "VIN".to_string());
        let mut found = ina238_hwmon(&drivers, &named);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rails(), ["VIN"]);
        let r = found[0].read().unwrap();
        // power1_input (45.5 W), not V x I (46.8 W).
        assert!((r[0].watts - 45.5).abs() < 1e-9, "{r:?}");
        assert_eq!((r[0].volts, r[0].amps), (Some(19.5), Some(2.4)));
        // No update_interval: the driver's own conversion cycle.
        assert_eq!(found[0].default_period(), INA238_PERIOD);
        // Without a profile name the chip names the rail; a label wins over both.
        assert_eq!(
            ina238_hwmon(&drivers, &|_| None)[0].rails(),
            ["INA238_2-0044"]
        );
        write(root.path(), &format!("{THOR_HWMON}/in1_label"), "VIN_SYS");
        assert_eq!(ina238_hwmon(&drivers, &named)[0].rails(), ["VIN_SYS"]);
    }

    #[test]
    fn power_supply_entries_are_listed_never_read_and_ucsi_is_named() {
        let root = tempfile::tempdir().unwrap();
        thor_ina238(root.path(), 19_000, 1_000, 19_000_000);
        write(root.path(), "class/power_supply/BAT0/type", "Battery");
        let listed = power_supplies(&root.path().join("class"));
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(listed[0].starts_with("BAT0") && listed[0].contains("not counted"));
        assert!(
            listed[1].starts_with("ucsi-source-psy-USBC000:001")
                && listed[1].contains("UCSI")
                && listed[1].contains("never counted"),
            "{listed:?}"
        );
    }

    #[test]
    fn ina2xx_hwmon_reads_microwatts() {
        let root = tempfile::tempdir().unwrap();
        let hw = "bus/i2c/drivers/ina2xx/2-0045/hwmon/hwmon0";
        write(root.path(), &format!("{hw}/name"), "ina226");
        write(root.path(), &format!("{hw}/in0_input"), "10");
        write(root.path(), &format!("{hw}/in1_input"), "12000");
        write(root.path(), &format!("{hw}/curr1_input"), "2500");
        write(root.path(), &format!("{hw}/power1_input"), "30000000");
        write(root.path(), &format!("{hw}/shunt_resistor"), "2000");
        write(root.path(), &format!("{hw}/update_interval"), "2");
        let mut found = ina2xx_hwmon(&root.path().join("bus/i2c/drivers"));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rails(), ["INA226_2-0045"]);
        let r = found[0].read().unwrap();
        assert_eq!(r[0].watts, 30.0);
        assert_eq!((r[0].volts, r[0].amps), (Some(12.0), Some(2.5)));
        assert_eq!(found[0].default_period(), Duration::from_millis(2));
        assert!(ina2xx_hwmon(&root.path().join("nothing")).is_empty());
    }
}
