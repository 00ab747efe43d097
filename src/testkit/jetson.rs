//! Fake Jetson trees as the boards' kernels lay them out, for `HostPaths` in the unit tests and
//! `--sysfs`/`--procfs`/`--rootfs` in the integration tests: device trees, power monitors
//! (ina3221 hwmon, ina3221x IIO, INA238), and a whole Orin NX (clocks, thermal zones, kernel,
//! L4T release, nvpmodel). Every file goes through [`write`], so a test that changes one file
//! of a tree writes it the same way.

use crate::host::HostPaths;
use std::path::Path;

/// Writes `text` to `root/rel`, creating the folders on the way (replacing what was there).
pub fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Host paths with sysfs at `sys` itself (procfs under it), as the power tests lay a tree out.
pub fn host(sys: &Path) -> HostPaths {
    HostPaths {
        sysfs: sys.to_path_buf(),
        procfs: sys.join("proc"),
        rootfs: sys.into(),
    }
}

/// Host paths with sysfs and procfs in `root/sys` and `root/proc`, the rootfs at `root`.
pub fn host_under(root: &Path) -> HostPaths {
    HostPaths {
        sysfs: root.join("sys"),
        procfs: root.join("proc"),
        rootfs: root.into(),
    }
}

/// The device tree's `compatible` of an Orin NX on its developer-kit carrier (tegra234).
pub const ORIN_NX_COMPATIBLE: &str =
    "nvidia,p3768-0000+p3767-0000\0nvidia,p3767-0000\0nvidia,tegra234\0";
/// The device tree's `compatible` of an AGX Orin 64GB developer kit (tegra234).
pub const AGX_ORIN_COMPATIBLE: &str = "nvidia,p3737-0000+p3701-0005\0nvidia,tegra234\0";
/// The device tree's `compatible` of an AGX Thor developer kit (tegra264).
pub const THOR_COMPATIBLE: &str =
    "nvidia,p3971-0089+p3834-0008\0nvidia,p3834-0008\0nvidia,tegra264\0";
/// The device tree's `compatible` of a TX2 (tegra186, sm_62).
pub const TX2_COMPATIBLE: &str = "nvidia,p2771-0000\0nvidia,p3310\0nvidia,tegra186\0";
/// The device tree's `compatible` of a Jetson Nano developer kit (tegra210).
pub const NANO_COMPATIBLE: &str =
    "nvidia,p3449-0000-b00+p3448-0002-b00\0nvidia,jetson-nano\0nvidia,tegra210\0";

/// Writes the device tree's `compatible` and `model` under `sys`.
pub fn device_tree(sys: &Path, compatible: &str, model: &str) {
    write(sys, "firmware/devicetree/base/compatible", compatible);
    write(sys, "firmware/devicetree/base/model", &format!("{model}\0"));
}

/// An Orin NX developer kit's device tree under `sys`.
pub fn orin_nx_device_tree(sys: &Path) {
    device_tree(sys, ORIN_NX_COMPATIBLE, "NVIDIA Orin NX Developer Kit");
}

/// An AGX Thor developer kit's device tree under `sys`.
pub fn thor_device_tree(sys: &Path) {
    device_tree(sys, THOR_COMPATIBLE, "NVIDIA Jetson AGX Thor Developer Kit");
}

/// The Orin NX monitor's hwmon folder, relative to the sysfs root.
pub const ORIN_NX_HWMON: &str = "bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon5";

/// The rails of [`orin_nx_power`], (label, mV, mA): VDD_IN 5.0 V x 1.5 A = 7.5 W;
/// VDD_CPU_GPU_CV 5.0 V x 0.6 A; VDD_SOC 5.0 V x 0.4 A.
pub const ORIN_NX_RAILS: [(&str, u32, u32); 3] = [
    ("VDD_IN", 5000, 1500),
    ("VDD_CPU_GPU_CV", 5000, 600),
    ("VDD_SOC", 5000, 400),
];

/// A JetPack 5 Orin NX's device tree and power monitor (ina3221 hwmon at 1-0040, in
/// [`ORIN_NX_HWMON`], a reading every 7 ms) under `sys`, with `rails` as (label, mV, mA) on
/// channels 1 to 3; the shunt channels 4 to 6 and the sum channel 7 carry no label.
pub fn orin_nx_rails(sys: &Path, rails: &[(&str, u32, u32)]) {
    orin_nx_device_tree(sys);
    let hw = ORIN_NX_HWMON;
    write(sys, &format!("{hw}/name"), "ina3221\n");
    write(sys, &format!("{hw}/update_interval"), "7\n");
    for (k, (label, mv, ma)) in rails.iter().enumerate() {
        let k = k + 1;
        write(sys, &format!("{hw}/in{k}_label"), &format!("{label}\n"));
        write(sys, &format!("{hw}/in{k}_input"), &format!("{mv}\n"));
        write(sys, &format!("{hw}/curr{k}_input"), &format!("{ma}\n"));
        write(sys, &format!("{hw}/in{}_input", k + 3), "1000\n");
    }
    write(sys, &format!("{hw}/in7_input"), "0\n");
}

/// [`orin_nx_rails`] with [`ORIN_NX_RAILS`]: 7.5 W in.
pub fn orin_nx_power(sys: &Path) {
    orin_nx_rails(sys, &ORIN_NX_RAILS);
}

/// JetPack 7 AGX Thor: the carrier's INA238 (`ina238` driver, no label, no update_interval)
/// at 2-0044 reading VIN `vin_mv` x `vin_ma` and `power1_input` `vin_uw` (kept apart from
/// V x I so a test sees which is read), and a UCSI power-supply entry for the USB-C port the
/// board is powered through.
pub fn thor_ina238(sys: &Path, vin_mv: u32, vin_ma: u32, vin_uw: u64) {
    thor_device_tree(sys);
    let hw = THOR_HWMON;
    write(sys, &format!("{hw}/name"), "ina238\n");
    write(sys, &format!("{hw}/in0_input"), "2\n");
    write(sys, &format!("{hw}/in1_input"), &format!("{vin_mv}\n"));
    write(sys, &format!("{hw}/curr1_input"), &format!("{vin_ma}\n"));
    write(sys, &format!("{hw}/power1_input"), &format!("{vin_uw}\n"));
    write(sys, &format!("{hw}/temp1_input"), "41000\n");
    // The USB-C contract: 20 V x 5 A offered, which is no measurement of anything.
    let psy = "class/power_supply/ucsi-source-psy-USBC000:001";
    write(sys, &format!("{psy}/type"), "USB\n");
    write(sys, &format!("{psy}/online"), "1\n");
    write(sys, &format!("{psy}/usb_type"), "C [PD] PD_PPS\n");
    write(sys, &format!("{psy}/voltage_now"), "20000000\n");
    write(sys, &format!("{psy}/voltage_max"), "20000000\n");
    write(sys, &format!("{psy}/current_max"), "5000000\n");
    write(sys, &format!("{psy}/current_now"), "5000000\n");
}

/// The Thor carrier monitor's hwmon folder, relative to the sysfs root.
pub const THOR_HWMON: &str = "bus/i2c/drivers/ina238/2-0044/hwmon/hwmon2";

/// [`thor_ina238`] reading VIN 19.5 V x 2.4 A with power1_input 45.5 W, refreshing once a
/// second.
pub fn thor_power(sys: &Path) {
    thor_ina238(sys, 19_500, 2_400, 45_500_000);
    write(sys, &format!("{THOR_HWMON}/update_interval"), "1000\n");
}

/// (rail name, mV, mA, mW)
pub type IioRail<'a> = (&'a str, u32, u32, u32);

/// A TX2 module's monitors (JetPack 4 IIO): chip, then (rail, mV, mA, mW) per channel; VDD_IN
/// 19 V x 0.2 A = 3.8 W.
pub const TX2_MODULE: [(&str, &[IioRail<'static>]); 2] = [
    (
        "0-0040",
        &[
            ("VDD_SYS_GPU", 19000, 50, 950),
            ("VDD_SYS_SOC", 19000, 40, 760),
            ("VDD_4V0_WIFI", 4000, 10, 40),
        ],
    ),
    (
        "0-0041",
        &[
            ("VDD_IN", 19000, 200, 3800),
            ("VDD_SYS_CPU", 19000, 30, 570),
            ("VDD_SYS_DDR", 19000, 20, 380),
        ],
    ),
];

/// JetPack 4 TX2: the device tree and ina3221x IIO monitors, one `iio:device<n>` per chip
/// address, channels from 0.
pub fn tx2(sys: &Path, chips: &[(&str, &[IioRail<'_>])]) {
    device_tree(sys, TX2_COMPATIBLE, "quill");
    for (n, (addr, rails)) in chips.iter().enumerate() {
        let iio = format!("bus/i2c/drivers/ina3221x/{addr}/iio:device{n}");
        for (k, (name, mv, ma, mw)) in rails.iter().enumerate() {
            write(sys, &format!("{iio}/rail_name_{k}"), &format!("{name}\n"));
            write(
                sys,
                &format!("{iio}/in_voltage{k}_input"),
                &format!("{mv}\n"),
            );
            write(
                sys,
                &format!("{iio}/in_current{k}_input"),
                &format!("{ma}\n"),
            );
            write(sys, &format!("{iio}/in_power{k}_input"), &format!("{mw}\n"));
        }
    }
}

/// The first cpufreq policy, relative to the sysfs root of [`orin_nx_board`].
pub const ORIN_NX_POLICY0: &str = "devices/system/cpu/cpufreq/policy0";
/// The GPU's devfreq folder, relative to the sysfs root of [`orin_nx_board`].
pub const ORIN_NX_GPU: &str = "class/devfreq/17000000.ga10b";
/// A JetPack 6 Orin NX in nvpmodel mode 0 (MAXN), clocks free (schedutil), cool: `root/sys`
/// (device tree, cpufreq policies, GPU devfreq, thermal zones, cooling devices), `root/proc`
/// (kernel) and `root/rootfs` (/etc/nv_tegra_release, nvpmodel's files).
pub fn orin_nx_board(root: &Path) {
    let sys = root.join("sys");
    orin_nx_device_tree(&sys);
    write(&sys, "devices/system/cpu/online", "0-7\n");
    for (policy, cpus) in [("policy0", "0 1 2 3"), ("policy4", "4 5 6 7")] {
        let d = format!("devices/system/cpu/cpufreq/{policy}");
        write(&sys, &format!("{d}/related_cpus"), &format!("{cpus}\n"));
        write(&sys, &format!("{d}/scaling_governor"), "schedutil\n");
        write(&sys, &format!("{d}/scaling_cur_freq"), "1984000\n");
        write(&sys, &format!("{d}/scaling_min_freq"), "115200\n");
        write(&sys, &format!("{d}/scaling_max_freq"), "1984000\n");
        write(&sys, &format!("{d}/cpuinfo_max_freq"), "1984000\n");
    }
    let gpu = ORIN_NX_GPU;
    write(&sys, &format!("{gpu}/governor"), "nvhost_podgov\n");
    write(&sys, &format!("{gpu}/cur_freq"), "918000000\n");
    write(&sys, &format!("{gpu}/min_freq"), "306000000\n");
    write(&sys, &format!("{gpu}/max_freq"), "918000000\n");
    write(&sys, &format!("{gpu}/device/load"), "512\n");
    // Not the GPU: must not be picked.
    write(
        &sys,
        "class/devfreq/13e40000.host1x/cur_freq",
        "204000000\n",
    );
    for (k, (name, temp)) in [
        ("cpu-thermal", 45500),
        ("gpu-thermal", 44000),
        ("cv0-thermal", -256000),
    ]
    .iter()
    .enumerate()
    {
        let d = format!("class/thermal/thermal_zone{k}");
        write(&sys, &format!("{d}/type"), &format!("{name}\n"));
        write(&sys, &format!("{d}/temp"), &format!("{temp}\n"));
        write(&sys, &format!("{d}/trip_point_0_type"), "passive\n");
        write(&sys, &format!("{d}/trip_point_0_temp"), "99000\n");
        write(&sys, &format!("{d}/trip_point_1_type"), "critical\n");
        write(&sys, &format!("{d}/trip_point_1_temp"), "105000\n");
    }
    write(&sys, "class/thermal/cooling_device0/type", "pwm-fan\n");
    write(&sys, "class/thermal/cooling_device0/cur_state", "1\n");
    write(&sys, "class/thermal/cooling_device0/max_state", "3\n");
    write(&sys, "class/thermal/cooling_device1/type", "devfreq-gpu\n");
    write(&sys, "class/thermal/cooling_device1/cur_state", "0\n");
    write(&sys, "class/thermal/cooling_device1/max_state", "9\n");

    let proc_ = root.join("proc");
    write(&proc_, "sys/kernel/osrelease", "5.15.136-tegra\n");
    write(
        &proc_,
        "sys/kernel/version",
        "#1 SMP PREEMPT Mon May  6 09:56:39 PDT 2024\n",
    );
    write(&proc_, "sys/kernel/hostname", "orin-lab\n");

    let rootfs = root.join("rootfs");
    write(
        &rootfs,
        "etc/nv_tegra_release",
        "# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic, EABI: aarch64, DATE: Fri Jul 19 23:24:25 UTC 2024\n# KERNEL_VARIANT: oot\n",
    );
    write(
        &rootfs,
        "etc/nvpmodel.conf",
        "< PARAM TYPE=FILE NAME=CPU_ONLINE >\n< POWER_MODEL ID=0 NAME=MAXN >\nCPU_ONLINE CORE_0 1\n< POWER_MODEL ID=1 NAME=10W >\nCPU_ONLINE CORE_0 1\n",
    );
    write(
        &rootfs,
        "var/lib/nvpmodel/status",
        "pmode:0000 fmode:quiet\n",
    );
}
