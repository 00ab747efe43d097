//! The power sampler's own CPU cost on a prepared Orin NX ina3221 tree (CPU seconds per wall
//! second while the main thread sleeps), at the tree's default rate and at 1 kHz, recording
//! only and recording while feeding the live metrics (`/metrics`):
//!
//!     cargo run --example sampler_cost
//!
//! A measurement for docs/performance.md, not a check: it asserts nothing.

use edgebench::config::PowerConfig;
use edgebench::host::HostPaths;
use edgebench::power::PowerMonitor;
use edgebench::testkit::jetson;
use std::time::{Duration, Instant};

/// CPU seconds this process has used (all threads, user and system).
fn cpu_seconds() -> f64 {
    // SAFETY: rusage is plain integers, for which all-zero bytes are valid.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let sys = dir.path().join("sys");
    jetson::orin_nx_power(&sys);
    let host = HostPaths {
        sysfs: sys,
        procfs: "/proc".into(),
        rootfs: "/".into(),
    };
    for rate_hz in [None, Some(1000.0)] {
        for live in [false, true] {
            let cfg = PowerConfig {
                rate_hz,
                ..Default::default()
            };
            let board = edgebench::board::select(&host, None)?;
            let metrics = edgebench::metrics::Metrics::for_host(&host, board.profile);
            let m = PowerMonitor::for_run(&host, &cfg, board)?;
            let (cpu0, t0) = (cpu_seconds(), Instant::now());
            let h = if live {
                m.start_live(metrics.power_sinks(&m.rails_by_source(), m.scope.as_str()))
            } else {
                m.start()
            };
            std::thread::sleep(Duration::from_secs(5));
            let s = h.stop();
            let (cpu, wall) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
            let n = s.series[0].t_ns.len();
            println!(
                "rate {}, {}: {n} samples in {wall:.2} s ({:.0} Hz), sampler CPU {:.3} % of one core",
                rate_hz.map_or("default (update_interval 7 ms)".to_string(), |r| format!(
                    "{r} Hz"
                )),
                if live { "with live metrics" } else { "recording only" },
                n as f64 / wall,
                100.0 * cpu / wall
            );
        }
    }
    Ok(())
}
