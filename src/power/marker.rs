//! GPIO trial marker (sysfs GPIO): a pin raised during each trial's measured iterations so an
//! external power analyser or scope can align its trace with the trial. The pin is driven low
//! and unexported when the marker is dropped (normal end, error, first Ctrl-C).

use crate::host::HostPaths;
use anyhow::Context;
use std::path::PathBuf;

pub struct GpioMarker {
    pin: u32,
    gpio: PathBuf,
    high: bool,
}

fn write(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text)
        .with_context(|| format!("GPIO marker: writing {text:?} to {}", path.display()))
}

impl GpioMarker {
    /// Exports `pin` (already exported is fine) and makes it an output driven low.
    pub fn open(host: &HostPaths, pin: u32) -> anyhow::Result<GpioMarker> {
        let class = host.sys("class/gpio");
        let gpio = class.join(format!("gpio{pin}"));
        if !gpio.exists() {
            write(&class.join("export"), &pin.to_string())?;
        }
        // "low" sets the direction to output with the value low in one step (no glitch).
        write(&gpio.join("direction"), "low")?;
        Ok(GpioMarker {
            pin,
            gpio,
            high: false,
        })
    }

    pub fn set(&mut self, high: bool) -> anyhow::Result<()> {
        if high != self.high {
            write(&self.gpio.join("value"), if high { "1" } else { "0" })?;
            self.high = high;
        }
        Ok(())
    }
}

impl Drop for GpioMarker {
    fn drop(&mut self) {
        let low = write(&self.gpio.join("value"), "0");
        let class = self.gpio.parent().map(|p| p.join("unexport"));
        let unexport = class.map(|u| write(&u, &self.pin.to_string()));
        if let Err(e) = low.and(unexport.unwrap_or(Ok(()))) {
            tracing::warn!("{e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_lowers_and_unexports_on_drop() {
        let root = tempfile::tempdir().unwrap();
        let class = root.path().join("class/gpio");
        std::fs::create_dir_all(class.join("gpio17")).unwrap();
        std::fs::write(class.join("export"), "").unwrap();
        std::fs::write(class.join("unexport"), "").unwrap();
        let host = HostPaths {
            sysfs: root.path().into(),
            procfs: root.path().join("proc"),
            rootfs: root.path().into(),
        };
        let read = |f: &str| std::fs::read_to_string(class.join(f)).unwrap();
        let mut m = GpioMarker::open(&host, 17).unwrap();
        assert_eq!(read("gpio17/direction"), "low");
        m.set(true).unwrap();
        assert_eq!(read("gpio17/value"), "1");
        m.set(false).unwrap();
        assert_eq!(read("gpio17/value"), "0");
        m.set(true).unwrap();
        drop(m);
        assert_eq!(read("gpio17/value"), "0", "left low on exit");
        assert_eq!(read("unexport"), "17");
        let err = GpioMarker::open(&host, 99).err().unwrap().to_string();
        assert!(err.contains("gpio99/direction"), "{err}");
    }
}
