//! `edgebench sensors`: every source read once, as JSON or text.

use super::{PowerMonitor, Probe, Reading};
use crate::board;
use crate::config::PowerConfig;
use crate::host::HostPaths;
use serde::Serialize;
use std::fmt::Write;
use std::time::Duration;

impl PowerMonitor {
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
