//! Which rails make a run's total power, and what that total covers (its scope).

use crate::board;
use crate::config::{PowerConfig, PowerScope};

/// The scope a run measures: as asked, else module, except on a board where no monitor sees
/// the module alone (its only total is the whole board). A scope the board cannot measure is
/// refused, saying what is missing.
pub(super) fn resolve_scope(
    cfg: &PowerConfig,
    profile: &board::BoardProfile,
) -> anyhow::Result<PowerScope> {
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

/// Which rails make the total, and how that was decided.
pub(super) fn choose_total(
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

#[cfg(test)]
mod tests {
    use crate::clock::monotonic_ns;
    use crate::config::{PowerConfig, PowerScope};
    use crate::power::{energy, hwmon, sensors, sensors_text, PowerMonitor};
    use crate::testkit::jetson::{self as fixtures, host, TX2_MODULE};
    use crate::testkit::power::for_run;
    use std::time::Duration;

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
        fixtures::device_tree(
            root.path(),
            fixtures::AGX_ORIN_COMPATIBLE,
            "NVIDIA Jetson AGX Orin Developer Kit",
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
            for_run(root.path(), &cfg).unwrap()
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
        let err = for_run(root.path(), &cfg).err().unwrap().to_string();
        assert!(
            err.contains("VDD_MUX") && err.contains("--power-scope module"),
            "{err}"
        );
    }

    #[test]
    fn board_scope_is_refused_without_a_carrier_monitor() {
        let root = tempfile::tempdir().unwrap();
        fixtures::orin_nx_rails(
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
        let err = for_run(root.path(), &cfg).err().unwrap().to_string();
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
        let m = for_run(root.path(), &cfg).unwrap();
        assert_eq!(m.scope, PowerScope::Board);
    }

    #[test]
    fn thor_total_is_the_ina238_alone_at_board_scope_and_ucsi_is_ignored() {
        let root = tempfile::tempdir().unwrap();
        fixtures::thor_ina238(root.path(), 19_500, 2_400, 45_500_000);
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
        let m = for_run(root.path(), &PowerConfig::default()).unwrap();
        assert_eq!(m.sensor_period, hwmon::INA238_PERIOD);
        // Module scope asked for explicitly: nothing on Thor measures the module alone.
        let cfg = PowerConfig {
            scope: Some(PowerScope::Module),
            ..Default::default()
        };
        let err = for_run(root.path(), &cfg).err().unwrap().to_string();
        assert!(
            err.contains("agx-thor") && err.contains("VIN") && err.contains("--power-scope board"),
            "{err}"
        );
    }
}
