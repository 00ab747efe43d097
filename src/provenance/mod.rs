//! What a run was measured on: board, L4T release, nvpmodel power mode,
//! jetson_clocks state, CPU/GPU clocks and governors, temperatures at start and end, kernel.
//! Everything is read from files under the configurable roots (`--sysfs`, `--procfs`,
//! `--rootfs` for `/etc` and `/var/lib`); an item the host lacks is left out, never an error.
//! The edgebench/candle versions and the thread count live in the `runs` row itself.

pub(crate) mod clocks;

pub use clocks::ClockReport;
pub use clocks::ClockSeries;
pub(crate) use clocks::{assess, read_state, ClockObserver, ClockState, ClockWatcher};

use crate::board;
use crate::host::{read_trimmed as read, HostPaths};
use serde::Serialize;
use std::collections::BTreeMap;

/// Provenance as ordered key -> value text (stored as rows of `run_provenance`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Provenance(pub BTreeMap<String, String>);

impl Provenance {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), value.into());
    }

    fn set_opt(&mut self, key: &str, value: Option<impl Into<String>>) {
        if let Some(v) = value {
            self.set(key, v);
        }
    }

    /// One `key  value` line per item, the keys padded to one width. A key or value from
    /// another board's database may be any length: keys are cut at 60 characters, values at
    /// 1000, with `…`.
    pub fn text(&self) -> String {
        let items: Vec<(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)> = self
            .0
            .iter()
            .map(|(k, v)| (crate::text::ellipsis(k, 60), crate::text::ellipsis(v, 1000)))
            .collect();
        let width = items
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        items
            .iter()
            .map(|(k, v)| format!("{k:width$}  {v}\n"))
            .collect()
    }
}

/// `# R35 (release), REVISION: 4.1, GCID: ..., BOARD: t186ref, ...` -> `R35.4.1 (t186ref)`.
pub(crate) fn parse_l4t(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains("REVISION"))?;
    let field = |name: &str| {
        line.split(',').map(str::trim).find_map(|f| {
            f.strip_prefix(name)
                .map(|v| v.trim_start_matches(':').trim())
        })
    };
    let release = line
        .trim_start_matches('#')
        .split_whitespace()
        .next()
        .filter(|r| r.starts_with('R'))?;
    let revision = field("REVISION")?;
    Some(match field("BOARD") {
        Some(board) if !board.is_empty() => format!("{release}.{revision} ({board})"),
        _ => format!("{release}.{revision}"),
    })
}

/// The mode id from `/var/lib/nvpmodel/status` (`pmode:0002 fmode:...`) and its name from
/// `/etc/nvpmodel.conf` (`< POWER_MODEL ID=2 NAME=MODE_15W_6CORE >`).
pub(crate) fn parse_nvpmodel(status: &str, conf: Option<&str>) -> Option<String> {
    let id: u32 = status
        .split_whitespace()
        .find_map(|f| f.strip_prefix("pmode:"))?
        .parse()
        .ok()?;
    let name = conf.and_then(|conf| {
        conf.lines().find_map(|l| {
            let l = l.trim();
            if !l.starts_with('<') || !l.contains("POWER_MODEL") {
                return None;
            }
            let mut mode_id = None;
            let mut mode_name = None;
            for f in l.trim_matches(|c| c == '<' || c == '>').split_whitespace() {
                if let Some(v) = f.strip_prefix("ID=") {
                    mode_id = v.parse::<u32>().ok();
                } else if let Some(v) = f.strip_prefix("NAME=") {
                    mode_name = Some(v.to_string());
                }
            }
            (mode_id == Some(id)).then_some(mode_name).flatten()
        })
    });
    Some(match name {
        Some(n) => format!("{id} ({n})"),
        None => id.to_string(),
    })
}

/// jetson_clocks pins every CPU and the GPU at their maximum (minimum = maximum = hardware
/// maximum); reading that needs no root, unlike `jetson_clocks --show`.
fn jetson_clocks(state: &ClockState) -> Option<String> {
    if state.cpus.is_empty() {
        return None;
    }
    let cpus_pinned = state.cpus.iter().all(|p| {
        p.min_khz.is_some()
            && p.min_khz == p.max_khz
            && (p.hw_max_khz.is_none() || p.max_khz == p.hw_max_khz)
    });
    let gpu_pinned = state
        .gpu
        .as_ref()
        .is_none_or(|g| g.min_hz.is_some() && g.min_hz == g.max_hz);
    Some(
        if cpus_pinned && gpu_pinned {
            "on (inferred: CPU and GPU minimum clocks at their maximum)"
        } else {
            "off (inferred: clocks free to scale)"
        }
        .to_string(),
    )
}

/// Clock and temperature entries of a state, under `prefix` (`start` or `end` for temperatures).
fn clock_entries(p: &mut Provenance, state: &ClockState, temps_as: &str) {
    for c in &state.cpus {
        let k = format!("cpu.{}", c.name);
        p.set_opt(&format!("{k}.cpus"), c.cpus.clone());
        p.set_opt(&format!("{k}.governor"), c.governor.clone());
        p.set_opt(&format!("{k}.cur_khz"), c.cur_khz.map(|v| v.to_string()));
        p.set_opt(&format!("{k}.min_khz"), c.min_khz.map(|v| v.to_string()));
        p.set_opt(&format!("{k}.max_khz"), c.max_khz.map(|v| v.to_string()));
        p.set_opt(
            &format!("{k}.hw_max_khz"),
            c.hw_max_khz.map(|v| v.to_string()),
        );
    }
    if let Some(g) = &state.gpu {
        p.set("gpu.devfreq", g.name.clone());
        p.set_opt("gpu.governor", g.governor.clone());
        p.set_opt("gpu.cur_hz", g.cur_hz.map(|v| v.to_string()));
        p.set_opt("gpu.min_hz", g.min_hz.map(|v| v.to_string()));
        p.set_opt("gpu.max_hz", g.max_hz.map(|v| v.to_string()));
        p.set_opt("gpu.load_permille", g.load_permille.map(|v| v.to_string()));
    }
    temperatures(p, state, temps_as);
}

fn temperatures(p: &mut Provenance, state: &ClockState, phase: &str) {
    for z in &state.zones {
        p.set(
            format!("temp.{}.{phase}_c", z.name),
            format!("{:.1}", z.temp_c),
        );
    }
}

/// Everything known about the host now, at the start of a run on `board` (the profile the run
/// uses, forced or detected).
pub fn capture(host: &HostPaths, board: &board::Detection) -> Provenance {
    let mut p = Provenance::default();
    p.set("board", board.profile.name.clone());
    p.set("board.detected_by", board.how.clone());
    p.set_opt("board.model", board::device_tree_model(host));
    let l4t = read(&host.root("etc/nv_tegra_release"));
    p.set_opt("l4t", l4t.as_deref().and_then(parse_l4t));
    p.set_opt(
        "nvpmodel",
        read(&host.root("var/lib/nvpmodel/status")).and_then(|status| {
            parse_nvpmodel(&status, read(&host.root("etc/nvpmodel.conf")).as_deref())
        }),
    );
    p.set_opt("kernel", read(&host.proc("sys/kernel/osrelease")));
    p.set_opt("kernel.version", read(&host.proc("sys/kernel/version")));
    p.set_opt("cpu.online", read(&host.sys("devices/system/cpu/online")));
    let state = read_state(host);
    // The generic profile is a host that is no Jetson (a Jetson forced to it still has L4T).
    if l4t.is_some() || board.profile.name != "generic" {
        p.set_opt("jetson_clocks", jetson_clocks(&state));
    }
    clock_entries(&mut p, &state, "start");
    p
}

/// Entries added when the run ends: the temperatures then.
pub(crate) fn capture_end(host: &HostPaths) -> Provenance {
    let mut p = Provenance::default();
    temperatures(&mut p, &read_state(host), "end");
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_l4t_release_lines() {
        assert_eq!(
            parse_l4t("# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t186ref, EABI: aarch64, DATE: Sat Feb 19 17:05:08 UTC 2022\n").as_deref(),
            Some("R32.7.1 (t186ref)")
        );
        assert_eq!(
            parse_l4t(
                "# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic, EABI: aarch64"
            )
            .as_deref(),
            Some("R36.3.0 (generic)")
        );
        assert_eq!(parse_l4t("garbage"), None);
    }

    #[test]
    fn parses_nvpmodel_mode_and_name() {
        let conf = "< PARAM TYPE=FILE NAME=CPU_ONLINE >\n< POWER_MODEL ID=0 NAME=MAXN >\nCPU_ONLINE CORE_0 1\n< POWER_MODEL ID=2 NAME=MODE_15W_6CORE >\n";
        assert_eq!(
            parse_nvpmodel("pmode:0002 fmode:quiet\n", Some(conf)).as_deref(),
            Some("2 (MODE_15W_6CORE)")
        );
        assert_eq!(
            parse_nvpmodel("pmode:0001", Some(conf)).as_deref(),
            Some("1")
        );
        assert_eq!(parse_nvpmodel("pmode:0000", None).as_deref(), Some("0"));
        assert_eq!(parse_nvpmodel("nonsense", Some(conf)), None);
    }

    #[test]
    fn runs_record_the_vendored_candle_version() {
        // build.rs takes the version from Cargo.lock, which holds the vendored crate's: the
        // runs row says which candle (with edgebench's patch, PATCHED.md) trained.
        let manifest = include_str!("../../vendor/candle-core/Cargo.toml");
        let vendored = manifest
            .lines()
            .find_map(|l| l.strip_prefix("version = "))
            .map(|v| v.trim_matches('"'));
        assert_eq!(vendored, Some(crate::host::CANDLE_VERSION));
        assert_eq!(crate::host::CANDLE_VERSION, "0.11.1+edgebench.1");
    }
}
