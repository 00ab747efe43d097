//! GPIO trial marker: a pin raised during each trial's measured iterations so an external power
//! analyser or scope can align its trace with the trial. The pin is driven low and released when
//! the marker is dropped (normal end, error, first Ctrl-C).
//!
//! Two ways to the pin, chosen by what the kernel offers:
//! - sysfs GPIO (`<sysfs>/class/gpio`), written by hand: the `sysfs_gpio` crate hard-codes
//!   `/sys/class/gpio`, and every host access here goes through the `--sysfs` root so the marker
//!   is tested against a prepared tree;
//! - the GPIO character device (`gpiocdev`) where the kernel has no sysfs GPIO. The pin number
//!   then counts the lines of the chips in order (`gpiochip0`'s first, then `gpiochip1`'s...);
//!   the chips are listed from `<sysfs>/bus/gpio/devices` and opened under `<rootfs>/dev`.

use crate::host::HostPaths;
use anyhow::Context;
use std::path::{Path, PathBuf};

/// One way to drive the marker pin; dropping it leaves the pin low and released.
trait MarkerLine: Send {
    fn set(&mut self, high: bool) -> anyhow::Result<()>;
}

pub(crate) struct GpioMarker {
    line: Box<dyn MarkerLine>,
    high: bool,
}

/// Which interface reaches the pin on this host.
#[derive(Debug, PartialEq, Eq)]
enum Backend {
    Sysfs,
    Cdev,
}

fn backend(host: &HostPaths) -> Backend {
    if host.sys("class/gpio").is_dir() {
        Backend::Sysfs
    } else {
        Backend::Cdev
    }
}

impl GpioMarker {
    /// Takes `pin` (already exported is fine) as an output driven low.
    pub(crate) fn open(host: &HostPaths, pin: u32) -> anyhow::Result<GpioMarker> {
        let line: Box<dyn MarkerLine> = match backend(host) {
            Backend::Sysfs => Box::new(SysfsLine::open(host, pin)?),
            Backend::Cdev => Box::new(CdevLine::open(host, pin)?),
        };
        Ok(GpioMarker { line, high: false })
    }

    pub(crate) fn set(&mut self, high: bool) -> anyhow::Result<()> {
        if high != self.high {
            self.line.set(high)?;
            self.high = high;
        }
        Ok(())
    }
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text)
        .with_context(|| format!("GPIO marker: writing {text:?} to {}", path.display()))
}

/// A pin through sysfs GPIO: `export`, `gpioN/direction`, `gpioN/value`, `unexport`.
struct SysfsLine {
    pin: u32,
    gpio: PathBuf,
}

impl SysfsLine {
    fn open(host: &HostPaths, pin: u32) -> anyhow::Result<SysfsLine> {
        let class = host.sys("class/gpio");
        let gpio = class.join(format!("gpio{pin}"));
        if !gpio.exists() {
            write(&class.join("export"), &pin.to_string())?;
        }
        // "low" sets the direction to output with the value low in one step (no glitch).
        write(&gpio.join("direction"), "low")?;
        Ok(SysfsLine { pin, gpio })
    }
}

impl MarkerLine for SysfsLine {
    fn set(&mut self, high: bool) -> anyhow::Result<()> {
        write(&self.gpio.join("value"), if high { "1" } else { "0" })
    }
}

impl Drop for SysfsLine {
    fn drop(&mut self) {
        let low = write(&self.gpio.join("value"), "0");
        let class = self.gpio.parent().map(|p| p.join("unexport"));
        let unexport = class.map(|u| write(&u, &self.pin.to_string()));
        if let Err(e) = low.and(unexport.unwrap_or(Ok(()))) {
            tracing::warn!("{e:#}");
        }
    }
}

/// A pin through the GPIO character device: a line request held for the marker's life (the
/// kernel releases the line when the request is dropped).
struct CdevLine {
    request: gpiocdev::Request,
    offset: u32,
    chip: PathBuf,
}

/// The GPIO chips' names in number order (`gpiochip2` before `gpiochip10`), from
/// `<sysfs>/bus/gpio/devices`.
fn chip_names(host: &HostPaths) -> anyhow::Result<Vec<String>> {
    let dir = host.sys("bus/gpio/devices");
    let entries = std::fs::read_dir(&dir).with_context(|| {
        format!(
            "GPIO marker: no {} (sysfs GPIO) and cannot list GPIO chips in {}",
            host.sys("class/gpio").display(),
            dir.display()
        )
    })?;
    let mut chips: Vec<(u32, String)> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| Some((name.strip_prefix("gpiochip")?.parse().ok()?, name)))
        .collect();
    chips.sort();
    Ok(chips.into_iter().map(|(_, name)| name).collect())
}

/// Where global pin `pin` is when the chips, in order, have `lines` lines each: the chip's index
/// and the line's offset on it.
fn locate(pin: u32, lines: impl IntoIterator<Item = u32>) -> Option<(usize, u32)> {
    let mut first = 0u32;
    for (i, n) in lines.into_iter().enumerate() {
        if pin < first.saturating_add(n) {
            return Some((i, pin - first));
        }
        first = first.saturating_add(n);
    }
    None
}

impl CdevLine {
    fn open(host: &HostPaths, pin: u32) -> anyhow::Result<CdevLine> {
        let names = chip_names(host)?;
        let mut chips = Vec::new();
        let mut lines = Vec::new();
        for name in &names {
            let path = host.root(&format!("dev/{name}"));
            let info = gpiocdev::Chip::from_path(&path)
                .and_then(|c| c.info())
                .with_context(|| format!("GPIO marker: cannot open {}", path.display()))?;
            lines.push(info.num_lines);
            chips.push(path);
            // Only the chips up to the pin's need to be opened.
            if locate(pin, lines.iter().copied()).is_some() {
                break;
            }
        }
        let Some((index, offset)) = locate(pin, lines.iter().copied()) else {
            anyhow::bail!(
                "GPIO marker: pin {pin} is past the {} line(s) of the GPIO chips ({})",
                lines.iter().sum::<u32>(),
                names.join(", ")
            );
        };
        let chip = chips.swap_remove(index);
        let request = gpiocdev::Request::builder()
            .on_chip(&chip)
            .with_consumer("edgebench marker")
            .with_line(offset)
            .as_output(gpiocdev::line::Value::Inactive)
            .request()
            .with_context(|| {
                format!(
                    "GPIO marker: cannot take line {offset} of {} as an output",
                    chip.display()
                )
            })?;
        Ok(CdevLine {
            request,
            offset,
            chip,
        })
    }
}

impl MarkerLine for CdevLine {
    fn set(&mut self, high: bool) -> anyhow::Result<()> {
        let value = if high {
            gpiocdev::line::Value::Active
        } else {
            gpiocdev::line::Value::Inactive
        };
        self.request.set_value(self.offset, value).with_context(|| {
            format!(
                "GPIO marker: setting line {} of {}",
                self.offset,
                self.chip.display()
            )
        })
    }
}

impl Drop for CdevLine {
    fn drop(&mut self) {
        if let Err(e) = self.set(false) {
            tracing::warn!("{e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::jetson::host;

    #[test]
    fn raises_lowers_and_unexports_on_drop() {
        let root = tempfile::tempdir().unwrap();
        let class = root.path().join("class/gpio");
        std::fs::create_dir_all(class.join("gpio17")).unwrap();
        std::fs::write(class.join("export"), "").unwrap();
        std::fs::write(class.join("unexport"), "").unwrap();
        let host = host(root.path());
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

    #[test]
    fn sysfs_gpio_when_the_kernel_has_it_else_the_character_device() {
        let root = tempfile::tempdir().unwrap();
        let host = host(root.path());
        assert_eq!(backend(&host), Backend::Cdev);
        // Without sysfs GPIO, the chips come from <sysfs>/bus/gpio/devices; none listed there
        // is an error that names both places looked at.
        let err = format!("{:#}", GpioMarker::open(&host, 3).err().unwrap());
        assert!(
            err.contains("class/gpio") && err.contains("bus/gpio/devices"),
            "{err}"
        );
        std::fs::create_dir_all(root.path().join("class/gpio")).unwrap();
        assert_eq!(backend(&host), Backend::Sysfs);
    }

    #[test]
    fn chips_are_listed_in_number_order() {
        let root = tempfile::tempdir().unwrap();
        let devices = root.path().join("bus/gpio/devices");
        for name in ["gpiochip10", "gpiochip2", "gpiochip0", "other"] {
            std::fs::create_dir_all(devices.join(name)).unwrap();
        }
        let names = chip_names(&host(root.path())).unwrap();
        assert_eq!(names, ["gpiochip0", "gpiochip2", "gpiochip10"]);
        // Listed but not under <rootfs>/dev: opening says which device it could not open.
        let err = format!(
            "{:#}",
            GpioMarker::open(&host(root.path()), 0).err().unwrap()
        );
        assert!(err.contains("dev/gpiochip0"), "{err}");
    }

    #[test]
    fn pins_count_the_lines_of_the_chips_in_order() {
        // A Jetson Orin: tegra234-gpio (164 lines), then tegra234-gpio-aon (32).
        assert_eq!(locate(0, [164, 32]), Some((0, 0)));
        assert_eq!(locate(163, [164, 32]), Some((0, 163)));
        assert_eq!(locate(164, [164, 32]), Some((1, 0)));
        assert_eq!(locate(195, [164, 32]), Some((1, 31)));
        assert_eq!(locate(196, [164, 32]), None);
        assert_eq!(locate(0, []), None);
    }
}
