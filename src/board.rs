//! Board profiles (`boards/*.toml`, embedded so the single binary carries them) and board
//! detection from the device tree: `compatible` (NUL-separated, the module part number tells
//! siblings apart) first, the free-text `model` only when that fails.

use crate::host::HostPaths;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// One power monitor chip on the board and its channels' rail names, in channel order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Monitor {
    /// `<bus>-<addr>`, e.g. `1-0040`; absent = wherever the driver finds the chip.
    #[serde(default)]
    pub at: Option<String>,
    /// The kernel driver owning the chip when it is not an INA3221 (e.g. `ina238`): its
    /// unlabelled channels take their names from `rails`.
    #[serde(default)]
    pub driver: Option<String>,
    pub rails: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoardProfile {
    pub name: String,
    pub description: String,
    /// Module part numbers (e.g. `p3767`) looked for inside the `compatible` entries.
    pub compatible: Vec<String>,
    /// Substrings of the device-tree `model` (case-insensitive), a fallback.
    pub model: Vec<String>,
    #[serde(default)]
    pub soc: Option<String>,
    pub cpu: String,
    pub gpu: String,
    /// CUDA compute capability of the integrated GPU (53 = sm_53), None if unknown.
    #[serde(default)]
    pub gpu_sm: Option<u32>,
    /// The GPU shares the CPU's DRAM (every Jetson): what a CUDA trial allocates on the device
    /// is taken from system RAM, so it counts against RAM and can push the board into swap.
    #[serde(default)]
    pub gpu_integrated: bool,
    #[serde(default)]
    pub memory_gb: Option<f64>,
    /// Theoretical fp32 peak of all CPU cores, GFLOP/s: cores x max clock x FLOPs per cycle
    /// (each file names its figures' source). None = unknown: computed from the host where it
    /// reports enough (`peaks::host_cpu_peak`).
    #[serde(default)]
    pub cpu_peak_gflops: Option<f64>,
    /// Theoretical fp32 peak of the GPU, GFLOP/s: CUDA cores x 2 (FMA) x max clock.
    #[serde(default)]
    pub gpu_peak_gflops: Option<f64>,
    /// DRAM bandwidth, GB/s (10^9 bytes), shared by CPU and GPU.
    #[serde(default)]
    pub mem_bandwidth_gbs: Option<f64>,
    /// Module scope: rails whose sum is the module's total input power (the input rail alone
    /// where the module has one, never an input rail together with its own sub-rails). Empty
    /// where no monitor sees the module alone.
    pub total: Vec<String>,
    /// Board scope: rails whose sum is everything the supply feeds, module and carrier board.
    /// Empty = no carrier-board monitor (`--power-scope board` is refused).
    #[serde(default)]
    pub board_total: Vec<String>,
    #[serde(default)]
    pub monitors: Vec<Monitor>,
}

const SOURCES: &[(&str, &str)] = &[
    ("tx1", include_str!("../boards/tx1.toml")),
    ("tx2", include_str!("../boards/tx2.toml")),
    ("nano", include_str!("../boards/nano.toml")),
    ("xavier-nx", include_str!("../boards/xavier-nx.toml")),
    ("agx-xavier", include_str!("../boards/agx-xavier.toml")),
    ("orin-nx", include_str!("../boards/orin-nx.toml")),
    ("agx-orin", include_str!("../boards/agx-orin.toml")),
    ("agx-thor", include_str!("../boards/agx-thor.toml")),
    ("generic", include_str!("../boards/generic.toml")),
];

/// Every profile, parsed once (a broken embedded file is a build bug the tests catch).
pub(crate) fn profiles() -> &'static [BoardProfile] {
    static P: OnceLock<Vec<BoardProfile>> = OnceLock::new();
    P.get_or_init(|| {
        SOURCES
            .iter()
            .map(|(file, text)| {
                toml::from_str(text).unwrap_or_else(|e| panic!("boards/{file}.toml: {e}"))
            })
            .collect()
    })
}

pub fn names() -> Vec<&'static str> {
    profiles().iter().map(|p| p.name.as_str()).collect()
}

pub fn by_name(name: &str) -> Option<&'static BoardProfile> {
    profiles()
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(name))
}

pub fn generic() -> &'static BoardProfile {
    by_name("generic").expect("generic profile")
}

/// The chosen profile and how it was chosen.
#[derive(Debug, Clone)]
pub struct Detection {
    pub profile: &'static BoardProfile,
    pub how: String,
    /// Set when the board was not recognised (the generic profile is used).
    pub warning: Option<String>,
}

/// A device-tree property: `<sysfs>/firmware/devicetree/base/<file>`, else the same tree as
/// procfs shows it, `<procfs>/device-tree/<file>` (kernels and containers that expose only one).
fn read_dt(host: &HostPaths, file: &str) -> Option<String> {
    let raw = std::fs::read(host.sys(&format!("firmware/devicetree/base/{file}")))
        .or_else(|_| std::fs::read(host.proc(&format!("device-tree/{file}"))))
        .ok()?;
    Some(String::from_utf8_lossy(&raw).into_owned())
}

/// The device tree's free-text `model`, without its NUL terminator; None if absent or blank.
pub(crate) fn device_tree_model(host: &HostPaths) -> Option<String> {
    read_dt(host, "model")
        .map(|s| {
            s.trim_matches(|c: char| c == '\0' || c.is_whitespace())
                .to_string()
        })
        .filter(|s| !s.is_empty())
}

/// Detects the board from the device tree's `compatible` and `model`
/// (`<sysfs>/firmware/devicetree/base`, or `<procfs>/device-tree`).
pub fn detect(host: &HostPaths) -> Detection {
    let compatible: Vec<String> = read_dt(host, "compatible")
        .map(|s| {
            s.split('\0')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let model = device_tree_model(host).unwrap_or_default();
    for p in profiles() {
        if let Some(entry) = compatible
            .iter()
            .find(|e| p.compatible.iter().any(|part| e.contains(part.as_str())))
        {
            return Detection {
                profile: p,
                how: format!("device-tree compatible {entry:?}"),
                warning: None,
            };
        }
    }
    let lower = model.to_lowercase();
    for p in profiles() {
        if p.model.iter().any(|m| lower.contains(&m.to_lowercase())) {
            return Detection {
                profile: p,
                how: format!("device-tree model {model:?}"),
                warning: None,
            };
        }
    }
    let seen = if compatible.is_empty() && model.is_empty() {
        "no device tree".to_string()
    } else {
        format!("compatible {compatible:?}, model {model:?}")
    };
    Detection {
        profile: generic(),
        how: format!("not recognised ({seen})"),
        warning: Some(format!(
            "board not recognised ({seen}); using the generic profile with discovered rails \
             (force one with --board NAME: {})",
            names().join(", ")
        )),
    }
}

/// `--board NAME` / `power.board` if given, else detection.
pub fn select(host: &HostPaths, forced: Option<&str>) -> anyhow::Result<Detection> {
    match forced {
        Some(name) => {
            let profile = by_name(name).ok_or_else(|| {
                anyhow::anyhow!("unknown board '{name}' (known: {})", names().join(", "))
            })?;
            Ok(Detection {
                profile,
                how: "forced by --board / power.board".into(),
                warning: None,
            })
        }
        None => Ok(detect(host)),
    }
}

/// The CUDA toolkit installed on the host: `usr/local/cuda/version.json` (CUDA >= 11.1) or
/// `version.txt` (`CUDA Version 10.2.300`), under `--rootfs`.
pub(crate) fn installed_cuda(host: &HostPaths) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(host.root("usr/local/cuda/version.json"))
        .ok()
        .and_then(|json| {
            let v: serde_json::Value = serde_json::from_str(&json).ok()?;
            v["cuda"]["version"].as_str().map(String::from)
        })
        .or_else(|| {
            let txt = std::fs::read_to_string(host.root("usr/local/cuda/version.txt")).ok()?;
            txt.split_whitespace().last().map(String::from)
        })?;
    let mut parts = text.trim().split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Why candle cannot train on this board's GPU, or None when it can or the board is
/// not known well enough to say. candle's CUDA kernels need sm >= 70 and CUDA >= 11.4 (cudarc);
/// Xavier's sm_72 builds only with CUDA >= 11.8; Thor's Blackwell GPU only with CUDA >= 12.8.
pub(crate) fn cuda_obstacle(profile: &BoardProfile, cuda: Option<(u32, u32)>) -> Option<String> {
    let sm = profile.gpu_sm?;
    let cuda_text = |c: Option<(u32, u32)>| match c {
        Some((major, minor)) => format!("CUDA {major}.{minor} is installed"),
        None => "no CUDA toolkit found under /usr/local/cuda".to_string(),
    };
    if sm < 70 {
        return Some(format!(
            "the {} GPU is sm_{sm}: candle's CUDA kernels need sm_70 or newer and JetPack 4 stops \
             at CUDA 10.2, so this board trains with candle on the CPU only (--device cpu)",
            profile.name
        ));
    }
    // Blackwell: nvcc knows Thor's GPU from CUDA 12.8 on (as sm_101; CUDA 13 renamed it
    // sm_110). candle 0.11's cudarc 0.19.10 builds against 12.8, 12.9 and 13.x.
    let needed = match sm {
        100.. => (12, 8),
        80.. => (11, 4),
        _ => (11, 8),
    };
    match cuda {
        Some(found) if found >= needed => None,
        other => Some(format!(
            "the {} GPU (sm_{sm}) needs CUDA >= {}.{} for candle and {}; install a newer \
             JetPack/CUDA and build with --features cuda (cross/README.md), or use --device cpu{}",
            profile.name,
            needed.0,
            needed.1,
            cuda_text(other),
            if sm >= 100 {
                " (CUDA 12.8/12.9 name this GPU sm_101, CUDA 13 and later sm_110: build with \
                 CUDA_COMPUTE_CAP=101 or 110 to match the toolkit)"
            } else {
                ""
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::jetson::{
        device_tree, host_under, NANO_COMPATIBLE, ORIN_NX_COMPATIBLE, THOR_COMPATIBLE,
    };

    fn host_with(compatible: &str, model: &str) -> (tempfile::TempDir, HostPaths) {
        let root = tempfile::tempdir().unwrap();
        let host = host_under(root.path());
        device_tree(&host.sysfs, compatible, model);
        (root, host)
    }

    #[test]
    fn device_tree_is_read_from_procfs_without_the_sysfs_one() {
        let root = tempfile::tempdir().unwrap();
        let dt = root.path().join("proc/device-tree");
        std::fs::create_dir_all(&dt).unwrap();
        std::fs::write(
            dt.join("compatible"),
            "nvidia,p3768-0000+p3767-0000\0nvidia,tegra234\0",
        )
        .unwrap();
        std::fs::write(dt.join("model"), "NVIDIA Orin NX Developer Kit\0").unwrap();
        let host = host_under(root.path());
        let d = detect(&host);
        assert_eq!(d.profile.name, "orin-nx", "{}", d.how);
        assert!(d.warning.is_none());
        assert_eq!(
            device_tree_model(&host).as_deref(),
            Some("NVIDIA Orin NX Developer Kit")
        );
        // The sysfs tree wins where both exist.
        let (_keep, both) = host_with("nvidia,p3509-0000+p3668-0001\0", "x");
        std::fs::create_dir_all(both.proc("device-tree")).unwrap();
        std::fs::write(both.proc("device-tree/compatible"), "nvidia,p3767\0").unwrap();
        assert_eq!(detect(&both).profile.name, "xavier-nx");
    }

    #[test]
    fn every_profile_parses_and_totals_follow_the_spec_table() {
        assert_eq!(profiles().len(), 9);
        let total = |n: &str| by_name(n).unwrap().total.clone();
        assert_eq!(total("tx1"), ["VDD_IN"]);
        assert_eq!(total("tx2"), ["VDD_IN"]);
        assert_eq!(total("nano"), ["POM_5V_IN"]);
        assert_eq!(total("xavier-nx"), ["VDD_IN"]);
        assert_eq!(total("orin-nx"), ["VDD_IN"]);
        assert_eq!(total("agx-xavier").len(), 6);
        assert_eq!(
            total("agx-orin"),
            ["VDD_GPU_SOC", "VDD_CPU_CV", "VDDQ_VDD2_1V8AO"]
        );
        // Thor: nothing sees the module alone; the carrier's INA238 (VIN) is the board.
        assert!(total("agx-thor").is_empty());
        let board_total = |n: &str| by_name(n).unwrap().board_total.clone();
        assert_eq!(board_total("agx-thor"), ["VIN"]);
        assert_eq!(board_total("tx1"), ["VDD_IN", "VDD_MUX"]);
        assert_eq!(board_total("tx2"), ["VDD_IN", "VDD_MUX"]);
        for n in [
            "nano",
            "xavier-nx",
            "orin-nx",
            "agx-xavier",
            "agx-orin",
            "generic",
        ] {
            assert!(board_total(n).is_empty(), "{n} has no carrier monitor");
        }
        for p in profiles() {
            let rails: Vec<&String> = p.monitors.iter().flat_map(|m| &m.rails).collect();
            for t in p.total.iter().chain(&p.board_total) {
                assert!(
                    rails.contains(&t),
                    "{}: total rail {t} not on a monitor",
                    p.name
                );
            }
            // An input rail is the total on its own: never summed with its sub-rails.
            if p.total.iter().any(|t| t.contains("_IN")) {
                assert_eq!(p.total.len(), 1, "{}", p.name);
            }
        }
    }

    #[test]
    fn cuda_obstacles_follow_the_spec() {
        let p = |n: &str| by_name(n).unwrap();
        for old in ["tx1", "nano", "tx2"] {
            let why = cuda_obstacle(p(old), Some((12, 2))).expect(old);
            assert!(why.contains("CPU only"), "{why}");
        }
        assert!(cuda_obstacle(p("agx-xavier"), Some((11, 4)))
            .unwrap()
            .contains("CUDA >= 11.8"));
        assert_eq!(cuda_obstacle(p("xavier-nx"), Some((11, 8))), None);
        assert!(cuda_obstacle(p("orin-nx"), None)
            .unwrap()
            .contains("no CUDA toolkit"));
        assert_eq!(cuda_obstacle(p("agx-orin"), Some((12, 6))), None);
        // Thor's Blackwell GPU: no nvcc before 12.8 knows it; 12.8/12.9 (sm_101) and 13.x
        // (sm_110) both build.
        let thor = cuda_obstacle(p("agx-thor"), Some((12, 6))).unwrap();
        assert!(
            thor.contains("CUDA >= 12.8") && thor.contains("sm_101") && thor.contains("sm_110"),
            "{thor}"
        );
        for ok in [(12, 8), (12, 9), (13, 0), (13, 1)] {
            assert_eq!(cuda_obstacle(p("agx-thor"), Some(ok)), None, "{ok:?}");
        }
        assert_eq!(cuda_obstacle(generic(), None), None);
        for p in profiles().iter().filter(|p| p.name != "generic") {
            assert!(p.gpu_sm.is_some(), "{} has no gpu_sm", p.name);
        }
    }

    #[test]
    fn every_jetson_gpu_shares_dram_and_the_generic_host_does_not() {
        // Every profile but generic is a Jetson; each file must say so, not rely on a default.
        let jetsons = [
            "tx1",
            "tx2",
            "nano",
            "xavier-nx",
            "agx-xavier",
            "orin-nx",
            "agx-orin",
            "agx-thor",
        ];
        for (file, text) in SOURCES {
            let p = by_name(file).unwrap();
            if jetsons.contains(file) {
                assert!(p.gpu_integrated, "{file}: gpu_integrated should be true");
                assert!(
                    text.lines().any(|l| l.trim() == "gpu_integrated = true"),
                    "boards/{file}.toml does not say gpu_integrated = true"
                );
            } else {
                assert_eq!(*file, "generic");
                assert!(!p.gpu_integrated, "generic: gpu_integrated should be false");
            }
        }
        assert_eq!(profiles().iter().filter(|p| p.gpu_integrated).count(), 8);
    }

    #[test]
    fn reads_the_installed_cuda_version() {
        let root = tempfile::tempdir().unwrap();
        let host = host_under(root.path());
        assert_eq!(installed_cuda(&host), None);
        let cuda = root.path().join("usr/local/cuda");
        std::fs::create_dir_all(&cuda).unwrap();
        std::fs::write(cuda.join("version.txt"), "CUDA Version 10.2.300\n").unwrap();
        assert_eq!(installed_cuda(&host), Some((10, 2)));
        std::fs::write(
            cuda.join("version.json"),
            r#"{"cuda": {"name": "CUDA SDK", "version": "12.2.140"}}"#,
        )
        .unwrap();
        assert_eq!(installed_cuda(&host), Some((12, 2)));
    }

    #[test]
    fn detects_by_compatible_then_model() {
        let cases = [
            (ORIN_NX_COMPATIBLE, "", "orin-nx"),
            (
                "nvidia,p3737-0000+p3701-0000\0nvidia,tegra234\0",
                "Jetson AGX Orin",
                "agx-orin",
            ),
            (NANO_COMPATIBLE, "", "nano"),
            ("nvidia,p2371-2180\0nvidia,tegra210\0", "jetson_tx1", "tx1"),
            ("nvidia,p2771-0000\0nvidia,tegra186\0", "quill", "tx2"),
            (
                "nvidia,jetson-xavier\0nvidia,p2972-0000\0nvidia,p2888\0nvidia,tegra194\0",
                "Jetson-AGX",
                "agx-xavier",
            ),
            (
                "nvidia,p3509-0000+p3668-0000\0nvidia,tegra194\0",
                "",
                "xavier-nx",
            ),
            ("", "NVIDIA Jetson TX2", "tx2"),
            (
                THOR_COMPATIBLE,
                "NVIDIA Jetson AGX Thor Developer Kit",
                "agx-thor",
            ),
            // Another carrier or module revision: the SoC alone still says Thor.
            ("acme,thor-carrier\0nvidia,tegra264\0", "", "agx-thor"),
        ];
        for (compatible, model, want) in cases {
            let (_root, host) = host_with(compatible, model);
            let d = detect(&host);
            assert_eq!(d.profile.name, want, "{compatible:?} {model:?}");
            assert!(d.warning.is_none());
        }
    }

    #[test]
    fn unknown_board_is_generic_with_a_warning_and_force_wins() {
        let (_root, host) = host_with("raspberrypi,4-model-b\0brcm,bcm2711\0", "Raspberry Pi 4");
        let d = detect(&host);
        assert_eq!(d.profile.name, "generic");
        assert!(d.warning.unwrap().contains("Raspberry Pi 4"));
        assert_eq!(
            select(&host, Some("AGX-Orin")).unwrap().profile.name,
            "agx-orin"
        );
        let err = select(&host, Some("tx3")).unwrap_err().to_string();
        assert!(err.contains("tx3") && err.contains("orin-nx"), "{err}");
    }
}
