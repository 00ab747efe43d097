//! Prepared Jetson trees for `--sysfs`/`--procfs`/`--rootfs`.

use std::path::Path;

/// Writes `text` to `root/rel`, creating the folders on the way.
pub fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A JetPack 5 Orin NX's device tree and power monitor (ina3221 hwmon at 1-0040) under `sys`:
/// VDD_IN 5.0 V x 1.5 A = 7.5 W; VDD_CPU_GPU_CV 5.0 V x 0.6 A; VDD_SOC 5.0 V x 0.4 A.
pub fn orin_nx_power(sys: &Path) {
    write(
        sys,
        "firmware/devicetree/base/compatible",
        "nvidia,p3768-0000+p3767-0000\0nvidia,p3767-0000\0nvidia,tegra234\0",
    );
    write(
        sys,
        "firmware/devicetree/base/model",
        "NVIDIA Orin NX Developer Kit\0",
    );
    let hw = ORIN_NX_HWMON;
    write(sys, &format!("{hw}/name"), "ina3221\n");
    write(sys, &format!("{hw}/update_interval"), "7\n");
    for (k, (label, ma)) in [("VDD_IN", 1500), ("VDD_CPU_GPU_CV", 600), ("VDD_SOC", 400)]
        .iter()
        .enumerate()
    {
        write(
            sys,
            &format!("{hw}/in{}_label", k + 1),
            &format!("{label}\n"),
        );
        write(sys, &format!("{hw}/in{}_input", k + 1), "5000\n");
        write(
            sys,
            &format!("{hw}/curr{}_input", k + 1),
            &format!("{ma}\n"),
        );
    }
}

/// The Orin NX monitor's hwmon folder, relative to the sysfs root.
pub const ORIN_NX_HWMON: &str = "bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon5";
