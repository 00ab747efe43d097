//! The host's identity, read through configurable sysfs/procfs roots so tests and containers
//! can point elsewhere (`--sysfs`/`--procfs`/`--rootfs`, `EDGEBENCH_SYSFS`/`EDGEBENCH_PROCFS`/`EDGEBENCH_ROOTFS`).

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPaths {
    pub sysfs: PathBuf,
    pub procfs: PathBuf,
    /// Root of the board's files outside sysfs/procfs (`/etc/nv_tegra_release`, nvpmodel's).
    pub rootfs: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths {
            sysfs: PathBuf::from("/sys"),
            procfs: PathBuf::from("/proc"),
            rootfs: PathBuf::from("/"),
        }
    }
}

pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
pub(crate) const GIT_COMMIT: &str = env!("EDGEBENCH_GIT_COMMIT");
pub(crate) const CANDLE_VERSION: &str = env!("EDGEBENCH_CANDLE_VERSION");

/// Sleeps `interval`, in short slices so that a sampler thread whose `stop` flag is raised
/// returns promptly.
pub(crate) fn sleep_unless(stop: &std::sync::atomic::AtomicBool, interval: std::time::Duration) {
    let mut left = interval;
    while !left.is_zero() && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let nap = left.min(std::time::Duration::from_millis(20));
        std::thread::sleep(nap);
        left -= nap;
    }
}

/// A small text file's content, trimmed; None if it is missing, unreadable or blank.
pub(crate) fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

impl HostPaths {
    pub fn proc(&self, rel: &str) -> PathBuf {
        self.procfs.join(rel)
    }

    pub fn sys(&self, rel: &str) -> PathBuf {
        self.sysfs.join(rel)
    }

    /// A file outside sysfs/procfs, e.g. `etc/nv_tegra_release`, under `--rootfs`.
    pub fn root(&self, rel: &str) -> PathBuf {
        self.rootfs.join(rel)
    }

    pub fn hostname(&self) -> String {
        read_trimmed(&self.proc("sys/kernel/hostname")).unwrap_or_else(|| "unknown-host".into())
    }

    /// "Linux <release>" from procfs.
    pub fn os(&self) -> String {
        match read_trimmed(&self.proc("sys/kernel/osrelease")) {
            Some(release) => format!("Linux {release}"),
            None => std::env::consts::OS.to_string(),
        }
    }

    /// The CPU model from /proc/cpuinfo: x86's "model name", else ARM's "Hardware"/"CPU part".
    pub fn cpu_model(&self) -> Option<String> {
        let info = std::fs::read_to_string(self.proc("cpuinfo")).ok()?;
        let field = |key: &str| {
            info.lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim() == key)
                .map(|(_, v)| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        field("model name")
            .or_else(|| field("Hardware"))
            .or_else(|| field("CPU part").map(|p| format!("ARM CPU part {p}")))
    }
}

/// A signal's name for a user, e.g. `SIGKILL (signal 9)`: how a worker or a command died. A
/// number with no name (a real-time signal) is only its number.
pub(crate) fn signal_name(sig: i32) -> String {
    match nix::sys::signal::Signal::try_from(sig) {
        Ok(signal) => format!("{} (signal {sig})", signal.as_str()),
        Err(_) => format!("signal {sig}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named_for_users() {
        assert_eq!(super::signal_name(libc::SIGKILL), "SIGKILL (signal 9)");
        assert_eq!(super::signal_name(libc::SIGTERM), "SIGTERM (signal 15)");
        assert_eq!(super::signal_name(libc::SIGSEGV), "SIGSEGV (signal 11)");
        assert_eq!(super::signal_name(64), "signal 64");
    }

    #[test]
    fn reads_identity_from_a_prepared_procfs() {
        let root = tempfile::tempdir().unwrap();
        let proc = root.path().join("proc");
        std::fs::create_dir_all(proc.join("sys/kernel")).unwrap();
        std::fs::write(proc.join("sys/kernel/hostname"), "tx2-lab\n").unwrap();
        std::fs::write(proc.join("sys/kernel/osrelease"), "4.9.253-tegra\n").unwrap();
        std::fs::write(
            proc.join("cpuinfo"),
            "processor\t: 0\nmodel name\t: ARMv8 Processor rev 3 (v8l)\nCPU part\t: 0xd07\n",
        )
        .unwrap();
        let host = HostPaths {
            sysfs: root.path().join("sys"),
            procfs: proc,
            rootfs: root.path().into(),
        };
        assert_eq!(host.hostname(), "tx2-lab");
        assert_eq!(host.os(), "Linux 4.9.253-tegra");
        assert_eq!(
            host.cpu_model().as_deref(),
            Some("ARMv8 Processor rev 3 (v8l)")
        );
        let empty = HostPaths {
            sysfs: root.path().join("none"),
            procfs: root.path().join("none"),
            rootfs: root.path().join("none"),
        };
        assert_eq!(empty.hostname(), "unknown-host");
        assert_eq!(empty.cpu_model(), None);
    }
}
