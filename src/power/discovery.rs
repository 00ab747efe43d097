//! Finding the power sources: the raw INA226s of the config, the kernel's monitors and RAPL
//! under the sysfs root, and what was probed where.

use super::monitor::PowerMonitor;
use super::rails::{choose_total, resolve_scope};
use super::{hwmon, ina226, marker, rapl, PowerSource};
use crate::board::Detection;
use crate::config::{PowerConfig, PowerScope};
use crate::host::HostPaths;
use serde::Serialize;
use std::fmt::Write;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A place discovery looked at, and what it found there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Probe {
    pub place: String,
    /// None: nothing there.
    pub found: Option<String>,
}

/// What discovery found; `monitor` is None when no source was found.
pub(crate) struct Discovery {
    pub monitor: Option<PowerMonitor>,
    pub probed: Vec<Probe>,
    /// Configured sources that failed to open (an EBUSY INA226, a missing /dev/i2c-N).
    pub errors: Vec<String>,
    pub board: Detection,
}

/// Opens the chips of `[power.ina226]`; a chip that fails to open is an entry in `errors`, a
/// setting the chip lacks refuses the whole configuration before any device is opened.
fn raw_ina226(
    cfg: &PowerConfig,
    probed: &mut Vec<Probe>,
    errors: &mut Vec<String>,
) -> anyhow::Result<Vec<Box<dyn PowerSource>>> {
    let Some(c) = &cfg.ina226 else {
        probed.push(Probe {
            place: "INA226 raw over /dev/i2c-N (not configured: no [power.ina226])".into(),
            found: None,
        });
        return Ok(Vec::new());
    };
    let path = c
        .device
        .clone()
        .unwrap_or_else(|| format!("/dev/i2c-{}", c.bus).into());
    let settings = ina226::Settings::from_config(c)?;
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
    Ok(out)
}

impl PowerMonitor {
    /// Looks for every source: the raw INA226s of the config, then the kernel's monitors and
    /// RAPL under the sysfs root. Errors only for a bad `power.total` or `[power.ina226]` setting.
    pub(crate) fn discover(
        host: &HostPaths,
        cfg: &PowerConfig,
        board: Detection,
    ) -> anyhow::Result<Discovery> {
        let mut probed = Vec::new();
        let mut errors = Vec::new();
        let mut sources = raw_ina226(cfg, &mut probed, &mut errors)?;
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

    /// For `run --power` on `board` (the sweep's profile, forced or detected): discovery; no
    /// usable sensor (or a configured one that fails) is an error listing what was probed.
    pub fn for_run(
        host: &HostPaths,
        cfg: &PowerConfig,
        board: Detection,
    ) -> anyhow::Result<PowerMonitor> {
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

#[cfg(test)]
mod tests {
    use crate::config::{Ina226Config, PowerConfig};
    use crate::testkit::jetson as fixtures;
    use crate::testkit::power::for_run;

    #[test]
    fn no_sensor_lists_every_place_probed() {
        let root = tempfile::tempdir().unwrap();
        let err = for_run(root.path(), &PowerConfig::default())
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
            ina226: Some(Ina226Config {
                device: Some(root.path().join("no-such-i2c")),
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = for_run(root.path(), &cfg).err().unwrap().to_string();
        assert!(err.contains("no-such-i2c"), "{err}");
    }

    #[test]
    fn an_ina226_setting_the_chip_lacks_is_refused_before_any_device_is_opened() {
        let root = tempfile::tempdir().unwrap();
        fixtures::orin_nx_rails(root.path(), &[("VDD_IN", 5000, 1500)]);
        for (ina, key, allowed) in [
            (
                Ina226Config {
                    averaging: 3,
                    ..Default::default()
                },
                "power.ina226.averaging = 3",
                "1, 4, 16, 64, 128, 256, 512, 1024",
            ),
            (
                Ina226Config {
                    shunt_conversion_us: 1000,
                    ..Default::default()
                },
                "power.ina226.shunt_conversion_us = 1000",
                "140, 204, 332, 588, 1100, 2116, 4156, 8244",
            ),
        ] {
            let cfg = PowerConfig {
                ina226: Some(Ina226Config {
                    device: Some(root.path().join("no-such-i2c")),
                    ..ina
                }),
                ..Default::default()
            };
            let err = for_run(root.path(), &cfg).err().unwrap().to_string();
            assert!(err.contains(key) && err.contains(allowed), "{err}");
            assert!(
                !err.contains("no-such-i2c"),
                "refused before opening: {err}"
            );
        }
    }
}
