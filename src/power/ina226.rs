//! TI INA226 over Linux I2C (i2cdev), generic over `I2CDevice` so the same driver runs against
//! `/dev/i2c-N` and the register-level simulator in `sim` (built for unit tests only).
//!
//! Registers are 16 bit, MSB first on the wire; SMBus word transfers put the first wire byte in
//! the low byte, so every word read and write is byte-swapped here.

use super::{PowerSource, Reading};
use crate::config::Ina226Config;
use anyhow::{bail, Context};
use i2cdev::core::I2CDevice;
use std::time::{Duration, Instant};

pub(crate) mod reg {
    pub(crate) const CONFIG: u8 = 0x00;
    pub(crate) const SHUNT_VOLTAGE: u8 = 0x01;
    pub(crate) const BUS_VOLTAGE: u8 = 0x02;
    pub(crate) const POWER: u8 = 0x03;
    pub(crate) const CURRENT: u8 = 0x04;
    pub(crate) const CALIBRATION: u8 = 0x05;
    pub(crate) const MASK_ENABLE: u8 = 0x06;
    #[cfg(test)]
    pub(crate) const ALERT_LIMIT: u8 = 0x07;
    pub(crate) const MANUFACTURER_ID: u8 = 0xFE;
    pub(crate) const DIE_ID: u8 = 0xFF;
}

pub(crate) const MANUFACTURER_TI: u16 = 0x5449;
pub(crate) const DIE_INA226: u16 = 0x2260;
/// Configuration after power-on or a reset.
#[cfg(test)]
pub(crate) const CONFIG_RESET_VALUE: u16 = 0x4127;
#[cfg(test)]
pub(crate) const CONFIG_RESET_BIT: u16 = 1 << 15;
/// Mask/enable: conversion ready flag (cleared by reading the register).
pub(crate) const CVRF: u16 = 1 << 3;
pub(crate) const SHUNT_LSB_V: f64 = 2.5e-6;
pub(crate) const BUS_LSB_V: f64 = 1.25e-3;
/// The datasheet's fixed scale of the calibration formula.
pub(crate) const CAL_SCALE: f64 = 0.00512;
/// Config bit 14 is reserved and reads 1 after reset (0x4127); the driver writes it as 1, as the
/// kernel's ina2xx does, so the word read back is the word written whatever the chip does with it.
const CONFIG_RESERVED_BIT: u16 = 1 << 14;

/// Samples averaged per update: the AVG field, config bits 11-9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Averaging {
    #[default]
    Samples1,
    Samples4,
    Samples16,
    Samples64,
    Samples128,
    Samples256,
    Samples512,
    Samples1024,
}

impl Averaging {
    pub(crate) const ALL: [Averaging; 8] = [
        Averaging::Samples1,
        Averaging::Samples4,
        Averaging::Samples16,
        Averaging::Samples64,
        Averaging::Samples128,
        Averaging::Samples256,
        Averaging::Samples512,
        Averaging::Samples1024,
    ];

    /// The field's value, before shifting into place.
    pub(crate) const fn bits(self) -> u16 {
        match self {
            Averaging::Samples1 => 0b000,
            Averaging::Samples4 => 0b001,
            Averaging::Samples16 => 0b010,
            Averaging::Samples64 => 0b011,
            Averaging::Samples128 => 0b100,
            Averaging::Samples256 => 0b101,
            Averaging::Samples512 => 0b110,
            Averaging::Samples1024 => 0b111,
        }
    }

    pub(crate) const fn samples(self) -> u16 {
        match self {
            Averaging::Samples1 => 1,
            Averaging::Samples4 => 4,
            Averaging::Samples16 => 16,
            Averaging::Samples64 => 64,
            Averaging::Samples128 => 128,
            Averaging::Samples256 => 256,
            Averaging::Samples512 => 512,
            Averaging::Samples1024 => 1024,
        }
    }

    pub(crate) fn from_samples(samples: u16) -> Option<Averaging> {
        Self::ALL.into_iter().find(|a| a.samples() == samples)
    }
}

/// One ADC conversion's time: the VBUSCT (bits 8-6) and VSHCT (bits 5-3) fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ConversionTime {
    Us140,
    Us204,
    Us332,
    Us588,
    #[default]
    Us1100,
    Us2116,
    Us4156,
    Us8244,
}

impl ConversionTime {
    pub(crate) const ALL: [ConversionTime; 8] = [
        ConversionTime::Us140,
        ConversionTime::Us204,
        ConversionTime::Us332,
        ConversionTime::Us588,
        ConversionTime::Us1100,
        ConversionTime::Us2116,
        ConversionTime::Us4156,
        ConversionTime::Us8244,
    ];

    /// The field's value, before shifting into place.
    pub(crate) const fn bits(self) -> u16 {
        match self {
            ConversionTime::Us140 => 0b000,
            ConversionTime::Us204 => 0b001,
            ConversionTime::Us332 => 0b010,
            ConversionTime::Us588 => 0b011,
            ConversionTime::Us1100 => 0b100,
            ConversionTime::Us2116 => 0b101,
            ConversionTime::Us4156 => 0b110,
            ConversionTime::Us8244 => 0b111,
        }
    }

    pub(crate) const fn micros(self) -> u32 {
        match self {
            ConversionTime::Us140 => 140,
            ConversionTime::Us204 => 204,
            ConversionTime::Us332 => 332,
            ConversionTime::Us588 => 588,
            ConversionTime::Us1100 => 1100,
            ConversionTime::Us2116 => 2116,
            ConversionTime::Us4156 => 4156,
            ConversionTime::Us8244 => 8244,
        }
    }

    pub(crate) fn from_micros(us: u32) -> Option<ConversionTime> {
        Self::ALL.into_iter().find(|t| t.micros() == us)
    }
}

/// What the chip converts, and when: the MODE field, config bits 2-0. Every code of the
/// field is named, though the driver writes only the continuous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(dead_code)]
pub(crate) enum OperatingMode {
    PowerDown,
    ShuntTriggered,
    BusTriggered,
    ShuntBusTriggered,
    ShuntContinuous,
    BusContinuous,
    #[default]
    ShuntBusContinuous,
}

impl OperatingMode {
    /// The field's value. 0b100 is a second power-down code; 0b000 is the one written.
    pub(crate) const fn bits(self) -> u16 {
        match self {
            OperatingMode::PowerDown => 0b000,
            OperatingMode::ShuntTriggered => 0b001,
            OperatingMode::BusTriggered => 0b010,
            OperatingMode::ShuntBusTriggered => 0b011,
            OperatingMode::ShuntContinuous => 0b101,
            OperatingMode::BusContinuous => 0b110,
            OperatingMode::ShuntBusContinuous => 0b111,
        }
    }
}

/// A `[power.ina226]` number the chip has no register setting for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "power.ina226.{key} = {value}: the INA226 has no such setting; use one of {allowed} \
     (in the config file's [power.ina226])"
)]
pub(crate) struct UnsupportedSetting {
    pub key: &'static str,
    pub value: u32,
    /// The values the chip supports, comma separated.
    pub allowed: String,
}

fn allowed<T: std::fmt::Display>(values: impl IntoIterator<Item = T>) -> String {
    values
        .into_iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// How one chip is set up.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    pub shunt_ohms: f64,
    pub max_current_a: f64,
    pub averaging: Averaging,
    pub bus_conversion: ConversionTime,
    pub shunt_conversion: ConversionTime,
    pub mode: OperatingMode,
}

impl Settings {
    /// The settings `[power.ina226]` asks for, in continuous shunt-and-bus mode (the sampler
    /// polls conversion-ready, which only continuous conversion keeps raising).
    pub(crate) fn from_config(c: &Ina226Config) -> Result<Settings, UnsupportedSetting> {
        let conversion = |key: &'static str, us: u32| {
            ConversionTime::from_micros(us).ok_or_else(|| UnsupportedSetting {
                key,
                value: us,
                allowed: allowed(ConversionTime::ALL.map(ConversionTime::micros)),
            })
        };
        Ok(Settings {
            shunt_ohms: c.shunt_ohms,
            max_current_a: c.max_current_a,
            averaging: Averaging::from_samples(c.averaging).ok_or_else(|| UnsupportedSetting {
                key: "averaging",
                value: u32::from(c.averaging),
                allowed: allowed(Averaging::ALL.map(Averaging::samples)),
            })?,
            bus_conversion: conversion("bus_conversion_us", c.bus_conversion_us)?,
            shunt_conversion: conversion("shunt_conversion_us", c.shunt_conversion_us)?,
            mode: OperatingMode::ShuntBusContinuous,
        })
    }

    /// The config register value: reserved bit 14 set, AVG bits 11-9, VBUSCT 8-6, VSHCT 5-3,
    /// MODE 2-0.
    pub(crate) fn config_word(&self) -> u16 {
        CONFIG_RESERVED_BIT
            | self.averaging.bits() << 9
            | self.bus_conversion.bits() << 6
            | self.shunt_conversion.bits() << 3
            | self.mode.bits()
    }

    /// Current_LSB = Imax / 2^15.
    pub(crate) fn current_lsb(&self) -> f64 {
        self.max_current_a / 32768.0
    }

    /// Power_LSB = 25 x Current_LSB.
    pub(crate) fn power_lsb(&self) -> f64 {
        25.0 * self.current_lsb()
    }

    /// CAL = 0.00512 / (Current_LSB x R_shunt), which must fit 15 bits and not be zero.
    pub(crate) fn calibration(&self) -> anyhow::Result<u16> {
        if !(self.shunt_ohms > 0.0 && self.max_current_a > 0.0) {
            bail!("INA226 shunt_ohms and max_current_a must be positive");
        }
        let cal = (CAL_SCALE / (self.current_lsb() * self.shunt_ohms)).trunc();
        if !(1.0..=32767.0).contains(&cal) {
            bail!(
                "INA226 calibration {cal} for shunt {} ohm and {} A is outside 1..32767: \
                 raise or lower max_current_a",
                self.shunt_ohms,
                self.max_current_a
            );
        }
        Ok(cal as u16)
    }

    /// Time of one complete update: (VBUSCT + VSHCT) x AVG.
    pub(crate) fn update_period(&self) -> Duration {
        Duration::from_micros(
            u64::from(self.bus_conversion.micros() + self.shunt_conversion.micros())
                * u64::from(self.averaging.samples()),
        )
    }
}

/// One complete measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Measurement {
    pub shunt_v: f64,
    pub bus_v: f64,
    pub current_a: f64,
    pub power_w: f64,
}

/// A configured INA226.
pub(crate) struct Ina226<D: I2CDevice> {
    dev: D,
    settings: Settings,
    config: u16,
    calibration: u16,
    name: String,
    rails: Vec<String>,
    /// Times the chip was found reset (calibration 0) and re-programmed.
    pub resets: u64,
}

impl<D: I2CDevice> Ina226<D>
where
    D::Error: Send + Sync + 'static,
{
    pub(crate) fn read_word(dev: &mut D, register: u8) -> anyhow::Result<u16> {
        // SMBus gives the first wire byte (the INA's MSB) as the low byte: swap.
        Ok(dev.smbus_read_word_data(register)?.swap_bytes())
    }

    pub(crate) fn write_word(dev: &mut D, register: u8, value: u16) -> anyhow::Result<()> {
        Ok(dev.smbus_write_word_data(register, value.swap_bytes())?)
    }

    /// Checks the ids, writes config and calibration and reads them back.
    pub(crate) fn new(mut dev: D, settings: Settings, name: &str) -> anyhow::Result<Self> {
        if settings.mode != OperatingMode::ShuntBusContinuous {
            bail!(
                "{name}: operating mode {:?}: the sampler reads shunt, bus, current and power \
                 as conversions complete, which needs {:?}",
                settings.mode,
                OperatingMode::ShuntBusContinuous
            );
        }
        let manufacturer = Self::read_word(&mut dev, reg::MANUFACTURER_ID)
            .with_context(|| format!("{name}: reading the manufacturer id"))?;
        let die = Self::read_word(&mut dev, reg::DIE_ID)?;
        if (manufacturer, die) != (MANUFACTURER_TI, DIE_INA226) {
            bail!(
                "{name}: not an INA226 (manufacturer id {manufacturer:#06x}, die id {die:#06x}; \
                 expected {MANUFACTURER_TI:#06x} / {DIE_INA226:#06x})"
            );
        }
        let mut chip = Ina226 {
            config: settings.config_word(),
            calibration: settings.calibration()?,
            dev,
            settings,
            name: name.to_string(),
            rails: vec![name.to_string()],
            resets: 0,
        };
        chip.program()?;
        Ok(chip)
    }

    fn program(&mut self) -> anyhow::Result<()> {
        Self::write_word(&mut self.dev, reg::CONFIG, self.config)?;
        Self::write_word(&mut self.dev, reg::CALIBRATION, self.calibration)?;
        let (config, cal) = (
            Self::read_word(&mut self.dev, reg::CONFIG)?,
            Self::read_word(&mut self.dev, reg::CALIBRATION)?,
        );
        if (config, cal) != (self.config, self.calibration) {
            bail!(
                "{}: wrote config {:#06x} / calibration {}, read back {config:#06x} / {cal}",
                self.name,
                self.config,
                self.calibration
            );
        }
        Ok(())
    }

    /// Reads mask/enable (which clears the flag) and returns whether a conversion completed.
    pub(crate) fn conversion_ready(&mut self) -> anyhow::Result<bool> {
        Ok(Self::read_word(&mut self.dev, reg::MASK_ENABLE)? & CVRF != 0)
    }

    /// Waits (polling) for a fresh conversion, then reads it. A chip found reset is
    /// re-programmed and this reading is an error (its current and power were not calibrated).
    pub(crate) fn measure(&mut self, timeout: Duration) -> anyhow::Result<Measurement> {
        let deadline = Instant::now() + timeout;
        while !self.conversion_ready()? {
            if Instant::now() > deadline {
                bail!("{}: no conversion ready within {timeout:?}", self.name);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        if Self::read_word(&mut self.dev, reg::CALIBRATION)? == 0 {
            self.resets += 1;
            self.program()?;
            bail!(
                "{}: the chip was reset (calibration read 0); re-programmed it",
                self.name
            );
        }
        let shunt = Self::read_word(&mut self.dev, reg::SHUNT_VOLTAGE)? as i16;
        let bus = Self::read_word(&mut self.dev, reg::BUS_VOLTAGE)?;
        let current = Self::read_word(&mut self.dev, reg::CURRENT)? as i16;
        let power = Self::read_word(&mut self.dev, reg::POWER)?;
        Ok(Measurement {
            shunt_v: f64::from(shunt) * SHUNT_LSB_V,
            bus_v: f64::from(bus) * BUS_LSB_V,
            current_a: f64::from(current) * self.settings.current_lsb(),
            power_w: f64::from(power) * self.settings.power_lsb(),
        })
    }
}

impl<D: I2CDevice + Send> PowerSource for Ina226<D>
where
    D::Error: Send + Sync + 'static,
{
    fn describe(&self) -> String {
        format!("ina226 {}", self.name)
    }

    fn rails(&self) -> &[String] {
        &self.rails
    }

    fn read(&mut self) -> anyhow::Result<Vec<Reading>> {
        let m = self.measure(self.settings.update_period() * 4 + Duration::from_millis(2))?;
        Ok(vec![Reading {
            volts: Some(m.bus_v),
            amps: Some(m.current_a),
            watts: m.power_w,
        }])
    }

    fn default_period(&self) -> Duration {
        // 1 kHz, unless the chip's own update is slower.
        self.settings.update_period().max(Duration::from_millis(1))
    }
}

/// What to tell a user whose `/dev/i2c-N` open failed: EBUSY means a kernel driver owns the
/// address, and the chip is then read through hwmon, not raw.
pub(crate) fn open_error(
    path: &std::path::Path,
    bus: u32,
    addr: u16,
    e: &std::io::Error,
) -> String {
    if e.raw_os_error() == Some(libc::EBUSY) {
        format!(
            "INA226 at {addr:#04x} on {}: the address is owned by a kernel driver (EBUSY). \
             Read it through the kernel instead: remove [power.ina226] from the config and \
             edgebench uses the hwmon source at /sys/bus/i2c/drivers/ina2xx/{bus}-{addr:04x}/hwmon \
             (or unbind the driver: echo {bus}-{addr:04x} > /sys/bus/i2c/drivers/ina2xx/unbind)",
            path.display()
        )
    } else {
        format!("INA226 at {addr:#04x} on {}: {e}", path.display())
    }
}

/// Opens and programs a chip on a Linux I2C bus.
pub(crate) fn open_linux(
    path: &std::path::Path,
    bus: u32,
    addr: u16,
    settings: Settings,
    name: &str,
) -> anyhow::Result<Ina226<i2cdev::linux::LinuxI2CDevice>> {
    let dev = i2cdev::linux::LinuxI2CDevice::new(path, addr)
        .map_err(|e| anyhow::anyhow!(open_error(path, bus, addr, &e.into())))?;
    Ina226::new(dev, settings, name)
}

#[cfg(test)]
pub(crate) mod sim {
    //! A register-level INA226: what the chip does on the wire, for tests. i2cdev's
    //! `MockI2CDevice` cannot (a 255-byte map that panics on 0xFE, no byte order, no
    //! computed registers).

    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex};

    #[derive(Debug)]
    struct State {
        config: u16,
        calibration: u16,
        mask_enable: u16,
        alert_limit: u16,
        pointer: u8,
        shunt_v: f64,
        bus_v: f64,
        /// Each mask/enable read reports a completed conversion (time is not simulated).
        auto_convert: bool,
        pending_conversion: bool,
        failures: usize,
        die_id: u16,
        /// Register words written, in order (for tests of what the driver did).
        writes: Vec<(u8, u16)>,
    }

    /// Cheap to clone: clones share the chip, so a test keeps a handle while the driver owns
    /// the device.
    #[derive(Debug, Clone)]
    pub(crate) struct Ina226Sim(Arc<Mutex<State>>);

    impl Default for Ina226Sim {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Ina226Sim {
        pub(crate) fn new() -> Self {
            Ina226Sim(Arc::new(Mutex::new(State {
                config: CONFIG_RESET_VALUE,
                calibration: 0,
                mask_enable: 0,
                alert_limit: 0,
                pointer: 0,
                shunt_v: 0.0,
                bus_v: 0.0,
                auto_convert: true,
                pending_conversion: false,
                failures: 0,
                die_id: DIE_INA226,
                writes: Vec::new(),
            })))
        }

        fn st(&self) -> std::sync::MutexGuard<'_, State> {
            self.0.lock().unwrap()
        }

        /// The analogue inputs: voltage across the shunt and on the bus.
        pub(crate) fn set_inputs(&self, shunt_v: f64, bus_v: f64) {
            let mut s = self.st();
            s.shunt_v = shunt_v;
            s.bus_v = bus_v;
        }

        pub(crate) fn set_auto_convert(&self, on: bool) {
            self.st().auto_convert = on;
        }

        /// One conversion completes: sets CVRF.
        pub(crate) fn complete_conversion(&self) {
            self.st().pending_conversion = true;
        }

        /// A power-on reset (brown-out): every register back to its default, CAL = 0.
        pub(crate) fn power_on_reset(&self) {
            let mut s = self.st();
            s.config = CONFIG_RESET_VALUE;
            s.calibration = 0;
            s.mask_enable = 0;
            s.alert_limit = 0;
        }

        /// Answer with another die id (an INA3221 is 0x3220), to test the probe.
        pub(crate) fn set_die_id(&self, id: u16) {
            self.st().die_id = id;
        }

        /// The next `n` bus transactions fail with EIO.
        pub(crate) fn fail_next(&self, n: usize) {
            self.st().failures = n;
        }

        pub(crate) fn register(&self, r: u8) -> u16 {
            self.st().value(r)
        }

        pub(crate) fn writes(&self) -> Vec<(u8, u16)> {
            self.st().writes.clone()
        }
    }

    impl State {
        fn shunt_reg(&self) -> i16 {
            (self.shunt_v / SHUNT_LSB_V)
                .round()
                .clamp(-32768.0, 32767.0) as i16
        }

        fn bus_reg(&self) -> u16 {
            (self.bus_v / BUS_LSB_V).round().clamp(0.0, 32767.0) as u16
        }

        /// Datasheet: Current = Shunt x CAL / 2048; Power = Current x Bus / 20000.
        fn current_reg(&self) -> i16 {
            (i32::from(self.shunt_reg()) * i32::from(self.calibration) / 2048).clamp(-32768, 32767)
                as i16
        }

        fn power_reg(&self) -> u16 {
            (i64::from(self.current_reg()).abs() * i64::from(self.bus_reg()) / 20000) as u16
        }

        fn value(&self, r: u8) -> u16 {
            match r {
                reg::CONFIG => self.config,
                reg::SHUNT_VOLTAGE => self.shunt_reg() as u16,
                reg::BUS_VOLTAGE => self.bus_reg(),
                reg::POWER => self.power_reg(),
                reg::CURRENT => self.current_reg() as u16,
                reg::CALIBRATION => self.calibration,
                reg::MASK_ENABLE => self.mask_enable,
                reg::ALERT_LIMIT => self.alert_limit,
                reg::MANUFACTURER_ID => MANUFACTURER_TI,
                reg::DIE_ID => self.die_id,
                _ => 0xFFFF,
            }
        }

        fn transaction(&mut self) -> io::Result<()> {
            if self.failures > 0 {
                self.failures -= 1;
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            Ok(())
        }

        fn write_register(&mut self, r: u8, v: u16) {
            self.writes.push((r, v));
            match r {
                reg::CONFIG if v & CONFIG_RESET_BIT != 0 => {
                    self.config = CONFIG_RESET_VALUE;
                    self.calibration = 0;
                    self.mask_enable = 0;
                    self.alert_limit = 0;
                }
                reg::CONFIG => self.config = v,
                // Bit 15 of CAL is reserved and reads 0.
                reg::CALIBRATION => self.calibration = v & 0x7FFF,
                // Only the enable bits 15-10 and LEN (bit 0) are writable.
                reg::MASK_ENABLE => self.mask_enable = v & 0xFC01,
                reg::ALERT_LIMIT => self.alert_limit = v,
                _ => {} // measurement and id registers are read-only
            }
        }
    }

    impl I2CDevice for Ina226Sim {
        type Error = io::Error;

        /// Reads continue from the register pointer, MSB first.
        fn read(&mut self, data: &mut [u8]) -> io::Result<()> {
            let mut s = self.st();
            s.transaction()?;
            let mut v = s.value(s.pointer);
            if s.pointer == reg::MASK_ENABLE {
                let ready = s.pending_conversion || s.auto_convert;
                v = (v & !CVRF) | if ready { CVRF } else { 0 };
                s.pending_conversion = false; // reading mask/enable clears CVRF
            }
            let bytes = v.to_be_bytes();
            for (k, b) in data.iter_mut().enumerate() {
                *b = bytes[k % 2];
            }
            Ok(())
        }

        /// First byte sets the pointer; two more write that register, MSB first.
        fn write(&mut self, data: &[u8]) -> io::Result<()> {
            let mut s = self.st();
            s.transaction()?;
            match *data {
                [p] => s.pointer = p,
                [p, hi, lo] => {
                    s.pointer = p;
                    s.write_register(p, u16::from_be_bytes([hi, lo]));
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("INA226 takes 1 or 3 byte writes, got {}", data.len()),
                    ))
                }
            }
            Ok(())
        }

        fn smbus_write_quick(&mut self, _bit: bool) -> io::Result<()> {
            self.st().transaction()
        }

        fn smbus_read_block_data(&mut self, _register: u8) -> io::Result<Vec<u8>> {
            Err(io::Error::from(io::ErrorKind::Unsupported))
        }

        fn smbus_read_i2c_block_data(&mut self, _register: u8, _len: u8) -> io::Result<Vec<u8>> {
            Err(io::Error::from(io::ErrorKind::Unsupported))
        }

        fn smbus_write_block_data(&mut self, _register: u8, _values: &[u8]) -> io::Result<()> {
            Err(io::Error::from(io::ErrorKind::Unsupported))
        }

        fn smbus_write_i2c_block_data(&mut self, _register: u8, _values: &[u8]) -> io::Result<()> {
            Err(io::Error::from(io::ErrorKind::Unsupported))
        }

        fn smbus_process_block(&mut self, _register: u8, _values: &[u8]) -> io::Result<Vec<u8>> {
            Err(io::Error::from(io::ErrorKind::Unsupported))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sim::Ina226Sim;
    use super::*;
    use crate::power::RecordingHandle;
    use std::sync::{Arc, Mutex};

    fn settings() -> Settings {
        Settings {
            shunt_ohms: 0.002,
            max_current_a: 10.0,
            averaging: Averaging::Samples4,
            bus_conversion: ConversionTime::Us1100,
            shunt_conversion: ConversionTime::Us588,
            mode: OperatingMode::ShuntBusContinuous,
        }
    }

    #[test]
    fn register_fields_match_the_datasheet_tables() {
        // (samples, AVG bits)
        let avg = [
            (1, 0b000),
            (4, 0b001),
            (16, 0b010),
            (64, 0b011),
            (128, 0b100),
            (256, 0b101),
            (512, 0b110),
            (1024, 0b111),
        ];
        assert_eq!(Averaging::ALL.len(), avg.len());
        for (a, (samples, bits)) in Averaging::ALL.into_iter().zip(avg) {
            assert_eq!((a.samples(), a.bits()), (samples, bits), "{a:?}");
            assert_eq!(Averaging::from_samples(samples), Some(a));
        }
        // (us, VBUSCT/VSHCT bits)
        let ct = [
            (140, 0b000),
            (204, 0b001),
            (332, 0b010),
            (588, 0b011),
            (1100, 0b100),
            (2116, 0b101),
            (4156, 0b110),
            (8244, 0b111),
        ];
        assert_eq!(ConversionTime::ALL.len(), ct.len());
        for (t, (us, bits)) in ConversionTime::ALL.into_iter().zip(ct) {
            assert_eq!((t.micros(), t.bits()), (us, bits), "{t:?}");
            assert_eq!(ConversionTime::from_micros(us), Some(t));
        }
        use OperatingMode::*;
        for (mode, bits) in [
            (PowerDown, 0b000),
            (ShuntTriggered, 0b001),
            (BusTriggered, 0b010),
            (ShuntBusTriggered, 0b011),
            (ShuntContinuous, 0b101),
            (BusContinuous, 0b110),
            (ShuntBusContinuous, 0b111),
        ] {
            assert_eq!(mode.bits(), bits, "{mode:?}");
        }
    }

    #[test]
    fn config_words_are_the_fields_in_place() {
        // The chip's own reset state (AVG 1, 1.1 ms / 1.1 ms, continuous) is its reset value.
        let reset = Settings {
            averaging: Averaging::Samples1,
            bus_conversion: ConversionTime::Us1100,
            shunt_conversion: ConversionTime::Us1100,
            mode: OperatingMode::ShuntBusContinuous,
            ..settings()
        };
        assert_eq!(reset.config_word(), CONFIG_RESET_VALUE);
        // The config's defaults: reserved bit 14, AVG 1 -> 000, VBUSCT 332 us -> 010,
        // VSHCT 588 us -> 011, MODE 111: 0100 0000 1001 1111.
        let default = Settings::from_config(&Ina226Config::default()).unwrap();
        assert_eq!(default.config_word(), 0x409F);
        assert_eq!(default.update_period(), Duration::from_micros(332 + 588));
        // AVG 4 -> 001, VBUSCT 1.1 ms -> 100, VSHCT 588 us -> 011.
        assert_eq!(settings().config_word(), 0b0100_0011_0001_1111);
    }

    #[test]
    fn config_numbers_the_chip_lacks_are_refused_with_the_allowed_values() {
        let refused = |c: Ina226Config| Settings::from_config(&c).unwrap_err().to_string();
        let err = refused(Ina226Config {
            averaging: 3,
            ..Default::default()
        });
        assert!(
            err.contains("power.ina226.averaging = 3")
                && err.contains("1, 4, 16, 64, 128, 256, 512, 1024"),
            "{err}"
        );
        let times = "140, 204, 332, 588, 1100, 2116, 4156, 8244";
        let err = refused(Ina226Config {
            bus_conversion_us: 1000,
            ..Default::default()
        });
        assert!(
            err.contains("power.ina226.bus_conversion_us = 1000") && err.contains(times),
            "{err}"
        );
        let err = refused(Ina226Config {
            shunt_conversion_us: 8000,
            ..Default::default()
        });
        assert!(
            err.contains("power.ina226.shunt_conversion_us = 8000") && err.contains(times),
            "{err}"
        );
    }

    #[test]
    fn calibration_follows_the_datasheet() {
        let s = settings();
        // Current_LSB = 10/32768 A; CAL = 0.00512 / (305.18e-6 * 0.002) = 8388.6 -> 8388.
        assert_eq!(s.calibration().unwrap(), 8388);
        assert!((s.power_lsb() - 25.0 * 10.0 / 32768.0).abs() < 1e-15);
        assert_eq!(s.update_period(), Duration::from_micros(4 * 1688));
        let tiny = Settings {
            max_current_a: 0.0001,
            ..settings()
        };
        assert!(tiny.calibration().is_err());
    }

    #[test]
    fn a_mode_without_continuous_shunt_and_bus_conversion_is_refused_before_any_write() {
        let sim = Ina226Sim::new();
        for mode in [OperatingMode::PowerDown, OperatingMode::ShuntBusTriggered] {
            let err = Ina226::new(sim.clone(), Settings { mode, ..settings() }, "c")
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains(&format!("{mode:?}")), "{err}");
        }
        assert!(sim.writes().is_empty());
    }

    #[test]
    fn programs_the_chip_and_reads_calibrated_values_with_swapped_bytes() {
        let sim = Ina226Sim::new();
        // 5 A through 2 mOhm = 10 mV across the shunt, on a 12 V bus.
        sim.set_inputs(0.010, 12.0);
        let mut chip = Ina226::new(sim.clone(), settings(), "1-0x40").unwrap();
        assert_eq!(sim.register(reg::CONFIG), settings().config_word());
        assert_eq!(sim.register(reg::CALIBRATION), 8388);
        // The wire order was MSB first: a driver that forgot the swap would have written
        // 0x1F43 to config.
        assert!(sim.writes().contains(&(reg::CONFIG, 0x431F)));
        let m = chip.measure(Duration::from_millis(10)).unwrap();
        assert!((m.shunt_v - 0.010).abs() < 1e-9, "{m:?}");
        assert!((m.bus_v - 12.0).abs() < 1e-9);
        // Current reg = 4000 x 8388 / 2048 = 16382 -> x 305.18 uA = 4.9994 A.
        assert!(
            (m.current_a - 16382.0 * 10.0 / 32768.0).abs() < 1e-9,
            "{m:?}"
        );
        // Power reg = 16382 x 9600 / 20000 = 7863 -> x 7.629 mW = 59.99 W.
        assert!((m.power_w - 7863.0 * 25.0 * 10.0 / 32768.0).abs() < 1e-9);
        assert!((m.power_w - 60.0).abs() / 60.0 < 1e-3);
        // Negative current is signed.
        sim.set_inputs(-0.005, 12.0);
        let m = chip.measure(Duration::from_millis(10)).unwrap();
        assert!((m.current_a + 2.5).abs() < 0.01, "{m:?}");
    }

    #[test]
    fn uncalibrated_reads_are_zero_and_a_reset_clears_calibration() {
        // Current and power read 0 until calibration is written, as on the chip.
        let mut sim = Ina226Sim::new();
        sim.set_inputs(0.010, 12.0);
        assert_eq!(sim.register(reg::CURRENT), 0);
        assert_eq!(sim.register(reg::POWER), 0);
        sim.smbus_write_word_data(reg::CALIBRATION, 2048u16.swap_bytes())
            .unwrap();
        assert_eq!(sim.register(reg::CURRENT), 4000);
        // A reset via the config register clears the calibration.
        sim.smbus_write_word_data(reg::CONFIG, 0x8000u16.swap_bytes())
            .unwrap();
        assert_eq!(sim.register(reg::CALIBRATION), 0);
        assert_eq!(sim.register(reg::CONFIG), CONFIG_RESET_VALUE);
        sim.fail_next(1);
        let err = Ina226::new(sim.clone(), settings(), "x").err().unwrap();
        assert!(format!("{err:#}").contains("manufacturer id"), "{err:#}");
        // Another TI chip at the address is refused before anything is written to it.
        sim.set_die_id(0x3220);
        let before = sim.writes().len();
        let err = Ina226::new(sim.clone(), settings(), "x").err().unwrap();
        assert!(err.to_string().contains("not an INA226") && err.to_string().contains("0x3220"));
        assert_eq!(sim.writes().len(), before);
    }

    #[test]
    fn polls_conversion_ready_and_reading_mask_enable_clears_it() {
        let sim = Ina226Sim::new();
        sim.set_inputs(0.004, 5.0);
        let mut chip = Ina226::new(sim.clone(), settings(), "c").unwrap();
        sim.set_auto_convert(false);
        let err = chip.measure(Duration::from_millis(2)).unwrap_err();
        assert!(err.to_string().contains("no conversion ready"), "{err}");
        sim.complete_conversion();
        assert!(chip.conversion_ready().unwrap());
        assert!(!chip.conversion_ready().unwrap(), "CVRF must clear on read");
        sim.complete_conversion();
        assert!(chip.measure(Duration::from_millis(2)).is_ok());
    }

    #[test]
    fn a_reset_chip_is_reprogrammed_and_that_reading_is_an_error() {
        let sim = Ina226Sim::new();
        sim.set_inputs(0.010, 12.0);
        let mut chip = Ina226::new(sim.clone(), settings(), "c").unwrap();
        sim.power_on_reset();
        let err = chip.read().unwrap_err();
        assert!(err.to_string().contains("reset"), "{err}");
        assert_eq!(chip.resets, 1);
        assert_eq!(sim.register(reg::CALIBRATION), 8388);
        let r = chip.read().unwrap();
        assert!((r[0].watts - 60.0).abs() < 0.1, "{r:?}");
        // An I/O error is an error for that reading only.
        sim.fail_next(1);
        assert!(chip.read().is_err());
        assert!(chip.read().is_ok());
    }

    #[test]
    fn ebusy_points_to_the_hwmon_source() {
        let e = std::io::Error::from_raw_os_error(libc::EBUSY);
        let msg = open_error(std::path::Path::new("/dev/i2c-1"), 1, 0x40, &e);
        assert!(msg.contains("kernel driver"), "{msg}");
        assert!(
            msg.contains("/sys/bus/i2c/drivers/ina2xx/1-0040/hwmon"),
            "{msg}"
        );
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert!(!open_error(std::path::Path::new("/dev/i2c-9"), 9, 0x41, &e).contains("hwmon"));
    }

    #[test]
    fn raw_ina226_through_the_simulator_as_a_power_source() {
        let sim = Ina226Sim::new();
        sim.set_inputs(0.010, 19.0); // 1 A through 10 mOhm at 19 V
        let settings = Settings::from_config(&Ina226Config::default()).unwrap();
        let chip = Ina226::new(sim.clone(), settings, "VDD_IN").unwrap();
        assert_eq!(chip.default_period(), Duration::from_millis(1));
        let src: Box<dyn PowerSource> = Box::new(chip);
        let h = RecordingHandle::start(
            &[(Arc::new(Mutex::new(src)), Duration::from_millis(1))],
            vec![("ina226 VDD_IN".into(), "VDD_IN".into())],
            None,
        );
        std::thread::sleep(Duration::from_millis(20));
        sim.power_on_reset(); // a brown-out mid-recording: one reading lost, then recovered
        std::thread::sleep(Duration::from_millis(20));
        let s = h.stop();
        assert_eq!(s.total, [0]);
        assert!(s.series[0].watts.len() > 10);
        assert!(
            s.series[0].watts.iter().all(|w| (w - 19.0).abs() < 0.05),
            "{:?}",
            s.series[0].watts
        );
        assert_eq!(s.errors.len(), 1);
        assert_eq!(sim.register(reg::CALIBRATION), 2097);
    }
}
