//! The roofs of a roofline, per device: the theoretical compute and memory-bandwidth peaks
//! (the board profile's figures; for a host without a profile the CPU's computed from
//! /proc/cpuinfo and cpufreq) and the peaks measured on the host itself: a large SGEMM (and,
//! for f64 ops, a DGEMM) through the GEMM the ops workload's `dot` runs (`kernels::matmul`:
//! edgebench's own AVX2/FMA kernel on x86-64 CPUs that have them and NEON kernel on aarch64,
//! else the `gemm` crate, what candle's CPU matmul runs), so `dot`'s share of it is honest, and STREAM's copy and triad on
//! all threads.

use super::{self as ops, Dtype, Roofs};
use crate::board::BoardProfile;
use crate::clock::monotonic_ns;
use crate::config::DeviceKind;
use crate::host::HostPaths;
use anyhow::{Context, Result};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Peaks measured on the host for one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredPeaks {
    /// Best f32 GEMM rate, GFLOP/s, of `sgemm_size`³ products.
    pub sgemm_gflops: f64,
    /// Best f64 GEMM rate, of `sgemm_size / 2` cubed products (f64 runs at a fraction of the
    /// f32 rate; a smaller product keeps the measurement short and still far out of cache):
    /// the compute roof of f64 ops; measured where f64 ops run and by `edgebench peaks`.
    #[serde(default)]
    pub dgemm_gflops: Option<f64>,
    /// Best STREAM triad (a = b + q·c: two reads, one write), GB/s (10^9 bytes).
    pub triad_gbs: f64,
    /// Best STREAM copy (c = a: one read, one write), GB/s.
    pub copy_gbs: f64,
    pub sgemm_size: usize,
    /// Bytes of each STREAM array: four times the last-level cache at least, so the
    /// arrays stream from memory.
    pub stream_array_bytes: u64,
    pub threads: usize,
}

/// How large the measurements are and how often they repeat (the best repetition counts).
#[derive(Debug, Clone, Copy)]
pub struct PeakSizes {
    pub sgemm_size: usize,
    pub stream_array_bytes: u64,
    pub repetitions: usize,
    /// Whether to measure the f64 GEMM too.
    pub dgemm: bool,
}

impl PeakSizes {
    /// SGEMM 2048³ (17 GFLOP: ~0.1 s on a desktop core pair, ~0.5 s on a Jetson Nano's
    /// CPU) and STREAM arrays of 4x the last-level cache, 64 MiB to 512 MiB, best of 8.
    pub fn for_host(host: &HostPaths) -> PeakSizes {
        let llc = last_level_cache_bytes(host).unwrap_or(8 << 20);
        PeakSizes {
            sgemm_size: 2048,
            stream_array_bytes: (4 * llc).clamp(64 << 20, 512 << 20),
            repetitions: 8,
            dgemm: true,
        }
    }
}

/// The largest data cache of CPU 0, from sysfs (`cpu0/cache/index*/size`, e.g. `32768K`).
pub(crate) fn last_level_cache_bytes(host: &HostPaths) -> Option<u64> {
    let dir = host.sys("devices/system/cpu/cpu0/cache");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter(|e| {
            crate::host::read_trimmed(&e.path().join("type")).as_deref() != Some("Instruction")
        })
        .filter_map(|e| parse_cache_size(&crate::host::read_trimmed(&e.path().join("size"))?))
        .max()
}

fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&s[..i], s[i..].trim()),
        None => (s, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        _ => return None,
    };
    Some(n * scale)
}

/// Measures the peaks of `device` with the current rayon pool's threads.
pub fn measure_peaks(device: DeviceKind, sizes: PeakSizes) -> Result<MeasuredPeaks> {
    match device {
        DeviceKind::Cpu => Ok(measure_cpu(sizes)),
        DeviceKind::Cuda => measure_candle(
            &candle_core::Device::new_cuda(0)
                .context("opening CUDA device 0 (is this a build with --features cuda?)")?,
            sizes,
        ),
    }
}

fn best_of(repetitions: usize, mut f: impl FnMut()) -> f64 {
    (0..repetitions.max(1))
        .map(|_| {
            let t0 = monotonic_ns();
            f();
            (monotonic_ns() - t0).max(1) as f64 * 1e-9
        })
        .fold(f64::INFINITY, f64::min)
}

/// The side of the f64 GEMM measured beside an `sgemm_size` SGEMM.
pub(crate) fn dgemm_size(sgemm_size: usize) -> usize {
    (sgemm_size / 2).max(64)
}

/// Best seconds of an n³ GEMM in `T` through the ops' own `dot`.
fn gemm_seconds<T: ops::Elem>(n: usize, repetitions: usize) -> f64 {
    let a: Vec<T> = ops::kernels::fill(n * n, 1, -1.0, 1.0);
    let b: Vec<T> = ops::kernels::fill(n * n, 2, -1.0, 1.0);
    let mut c: Vec<T> = ops::kernels::fill(n * n, 0, 0.0, 0.0);
    ops::kernels::matmul(&a, &b, &mut c, (n, n, n));
    let s = best_of(repetitions, || {
        ops::kernels::matmul(&a, &b, &mut c, (n, n, n))
    });
    std::hint::black_box(&c);
    s
}

fn measure_cpu(sizes: PeakSizes) -> MeasuredPeaks {
    let n = sizes.sgemm_size.max(64);
    let gflops = |n: usize, s: f64| 2.0 * (n as f64).powi(3) / s * 1e-9;
    let sgemm_gflops = gflops(n, gemm_seconds::<f32>(n, sizes.repetitions));
    let dn = dgemm_size(n);
    let dgemm_gflops = sizes
        .dgemm
        .then(|| gflops(dn, gemm_seconds::<f64>(dn, sizes.repetitions)));

    let len = (sizes.stream_array_bytes / 8) as usize;
    let (copy_s, triad_s) = stream_f64(len, sizes.repetitions);
    MeasuredPeaks {
        sgemm_gflops,
        dgemm_gflops,
        triad_gbs: 24.0 * len as f64 / triad_s * 1e-9,
        copy_gbs: 16.0 * len as f64 / copy_s * 1e-9,
        sgemm_size: n,
        stream_array_bytes: 8 * len as u64,
        threads: rayon::current_num_threads(),
    }
}

/// Best seconds of STREAM's copy and triad over f64 arrays of `len` elements, each thread
/// streaming its own contiguous part as STREAM's OpenMP loops do.
pub(crate) fn stream_f64(len: usize, repetitions: usize) -> (f64, f64) {
    let a: Vec<f64> = ops::kernels::fill(len, 3, 0.0, 1.0);
    let b: Vec<f64> = ops::kernels::fill(len, 4, 0.0, 1.0);
    let mut c: Vec<f64> = ops::kernels::fill(len, 0, 0.0, 0.0);
    let chunk = len.div_ceil(rayon::current_num_threads().max(1)).max(4096);
    let q = 3.0;
    let copy = best_of(repetitions, || {
        c.par_chunks_mut(chunk)
            .zip(a.par_chunks(chunk))
            .for_each(|(c, a)| {
                for (c, &a) in c.iter_mut().zip(a) {
                    *c = a;
                }
            })
    });
    let triad = best_of(repetitions, || {
        c.par_chunks_mut(chunk)
            .zip(a.par_chunks(chunk).zip(b.par_chunks(chunk)))
            .for_each(|(c, (a, b))| {
                for ((c, &a), &b) in c.iter_mut().zip(a).zip(b) {
                    *c = a + q * b;
                }
            })
    });
    std::hint::black_box(&c);
    (copy, triad)
}

/// The same measurements through candle's ops on a device (CUDA): matmul, a copy, and
/// add (two reads, one write: triad's traffic), each waited for.
fn measure_candle(device: &candle_core::Device, sizes: PeakSizes) -> Result<MeasuredPeaks> {
    use candle_core::{DType, Tensor};
    let n = sizes.sgemm_size.max(64);
    let a = Tensor::rand(-1f32, 1f32, (n, n), device)?;
    let b = Tensor::rand(-1f32, 1f32, (n, n), device)?;
    let mut failure = None;
    let mut timed = |f: &mut dyn FnMut() -> candle_core::Result<Tensor>| {
        let _ = f().and_then(|_| device.synchronize());
        best_of(sizes.repetitions, || {
            if let Err(e) = f().and_then(|_| device.synchronize()) {
                failure.get_or_insert(e);
            }
        })
    };
    let sgemm_s = timed(&mut || a.matmul(&b));
    let dn = dgemm_size(n);
    let dgemm_s = match sizes.dgemm {
        true => {
            let a = Tensor::rand(-1f64, 1f64, (dn, dn), device)?;
            let b = Tensor::rand(-1f64, 1f64, (dn, dn), device)?;
            Some(timed(&mut || a.matmul(&b)))
        }
        false => None,
    };
    let gflops = |n: usize, s: f64| 2.0 * (n as f64).powi(3) / s * 1e-9;
    let len = (sizes.stream_array_bytes / 4) as usize;
    let x = Tensor::zeros(len, DType::F32, device)?;
    let y = Tensor::ones(len, DType::F32, device)?;
    let copy_s = timed(&mut || x.copy());
    let triad_s = timed(&mut || x.add(&y));
    if let Some(e) = failure {
        return Err(e).context("measuring the device's peaks");
    }
    Ok(MeasuredPeaks {
        sgemm_gflops: gflops(n, sgemm_s),
        dgemm_gflops: dgemm_s.map(|s| gflops(dn, s)),
        triad_gbs: 12.0 * len as f64 / triad_s * 1e-9,
        copy_gbs: 8.0 * len as f64 / copy_s * 1e-9,
        sgemm_size: n,
        stream_array_bytes: 4 * len as u64,
        threads: 0,
    })
}

/// A CPU's theoretical fp32 peak and how it was worked out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CpuPeak {
    pub gflops: f64,
    pub how: String,
}

/// The host CPU's fp32 peak from what it reports: for each processor in /proc/cpuinfo, its
/// highest clock (cpufreq `cpuinfo_max_freq`, else cpuinfo's `cpu MHz`) × FLOPs per cycle.
/// FLOPs per cycle come from the x86 flags: SIMD lanes (AVX-512F 16, AVX 8, SSE 4) × 2 with
/// FMA × 2 vector pipes (as on x86 cores since Haswell and Zen 2; older ones are
/// overestimated). Other architectures do not report their pipes: unknown (None).
pub(crate) fn host_cpu_peak(host: &HostPaths) -> Option<CpuPeak> {
    let info = std::fs::read_to_string(host.proc("cpuinfo")).ok()?;
    let mut total = 0.0;
    let mut cores = 0usize;
    let mut flops_seen = None;
    let mut ghz_seen = Vec::new();
    for block in info.split("\n\n").filter(|b| b.contains("processor")) {
        let field = |key: &str| {
            block
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim() == key)
                .map(|(_, v)| v.trim())
        };
        let index: usize = field("processor")?.parse().ok()?;
        let flags: Vec<&str> = field("flags")?.split_whitespace().collect();
        let has = |f: &str| flags.contains(&f);
        let lanes = if has("avx512f") {
            16.0
        } else if has("avx") {
            8.0
        } else if has("sse") {
            4.0
        } else {
            return None;
        };
        let fma = if has("fma") { 2.0 } else { 1.0 };
        let per_cycle = lanes * fma * 2.0;
        let max_khz = crate::host::read_trimmed(&host.sys(&format!(
            "devices/system/cpu/cpu{index}/cpufreq/cpuinfo_max_freq"
        )))
        .and_then(|s| s.parse::<f64>().ok());
        let ghz = match max_khz {
            Some(khz) => khz * 1e-6,
            None => field("cpu MHz")?.parse::<f64>().ok()? * 1e-3,
        };
        total += ghz * per_cycle;
        cores += 1;
        flops_seen = Some(per_cycle);
        ghz_seen.push(ghz);
    }
    if cores == 0 {
        return None;
    }
    let max_ghz = ghz_seen.iter().cloned().fold(0.0, f64::max);
    Some(CpuPeak {
        gflops: total,
        how: format!(
            "{cores} cores x {max_ghz:.2} GHz x {} FLOP/cycle (cpuinfo flags, 2 FMA pipes assumed)",
            flops_seen.unwrap_or(0.0)
        ),
    })
}

/// The theoretical peaks of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TheoreticalPeaks {
    pub gflops: Option<f64>,
    pub bandwidth_gbs: Option<f64>,
    /// Where the figures come from.
    pub source: String,
}

/// The board's figures for `device`; on the generic profile the CPU's computed from the host.
pub fn theoretical(
    profile: &BoardProfile,
    device: DeviceKind,
    host: &HostPaths,
) -> TheoreticalPeaks {
    let board = format!("board profile {}", profile.name);
    match device {
        DeviceKind::Cuda => TheoreticalPeaks {
            gflops: profile.gpu_peak_gflops,
            bandwidth_gbs: profile.mem_bandwidth_gbs,
            source: board,
        },
        DeviceKind::Cpu => match profile.cpu_peak_gflops {
            Some(g) => TheoreticalPeaks {
                gflops: Some(g),
                bandwidth_gbs: profile.mem_bandwidth_gbs,
                source: board,
            },
            None => {
                let cpu = host_cpu_peak(host);
                TheoreticalPeaks {
                    gflops: cpu.as_ref().map(|c| c.gflops),
                    bandwidth_gbs: profile.mem_bandwidth_gbs,
                    source: match cpu {
                        Some(c) => format!("host: {}", c.how),
                        None => "unknown (the host does not report its vector units)".into(),
                    },
                }
            }
        },
    }
}

/// One device's roofs, theoretical and measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DevicePeaks {
    pub device: DeviceKind,
    pub theoretical: TheoreticalPeaks,
    pub measured: MeasuredPeaks,
}

impl DevicePeaks {
    /// The roofs an op in `dtype` is judged against. f64 halves the CPU's theoretical FLOP
    /// rate (half the SIMD lanes); the GPU's theoretical f64 rate is not known.
    pub fn roofs(&self, dtype: Dtype) -> Roofs {
        let flops = |f32_peak: Option<f64>| match (dtype, self.device) {
            (Dtype::F32, _) => f32_peak,
            (Dtype::F64, DeviceKind::Cpu) => f32_peak.map(|g| g / 2.0),
            (Dtype::F64, DeviceKind::Cuda) => None,
        };
        Roofs {
            peak_gflops: flops(self.theoretical.gflops),
            peak_gbs: self.theoretical.bandwidth_gbs,
            measured_gflops: match dtype {
                Dtype::F32 => Some(self.measured.sgemm_gflops),
                Dtype::F64 => self.measured.dgemm_gflops,
            },
            measured_copy_gbs: Some(self.measured.copy_gbs),
            measured_triad_gbs: Some(self.measured.triad_gbs),
        }
    }
}

/// Theoretical (of `profile`, the host's board) and measured peaks of each of `devices` on
/// this host: the measurements run on `threads` threads (0 = all cores); the f64 GEMM only
/// with `dgemm`.
pub fn report(
    host: &HostPaths,
    profile: &BoardProfile,
    devices: &[DeviceKind],
    threads: usize,
    dgemm: bool,
) -> Result<PeaksReport> {
    let sizes = PeakSizes {
        dgemm,
        ..PeakSizes::for_host(host)
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("cannot start the threads that measure the peaks")?;
    let mut out = Vec::new();
    for &device in devices {
        out.push(DevicePeaks {
            device,
            theoretical: theoretical(profile, device, host),
            measured: pool.install(|| measure_peaks(device, sizes))?,
        });
    }
    Ok(PeaksReport {
        host: host.hostname(),
        board: profile.name.to_string(),
        devices: out,
    })
}

/// `edgebench peaks`: the board and each device's roofs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeaksReport {
    pub host: String,
    pub board: String,
    pub devices: Vec<DevicePeaks>,
}

fn opt(v: Option<f64>, unit: &str) -> String {
    match v {
        Some(v) => format!("{v:.1} {unit}"),
        None => "unknown".into(),
    }
}

impl PeaksReport {
    /// The roofs of `device` (None if it was not measured).
    pub fn device(&self, device: DeviceKind) -> Option<&DevicePeaks> {
        self.devices.iter().find(|d| d.device == device)
    }

    /// As run provenance items (`peaks.<device>.<figure>`), so each run keeps the roofs its
    /// trials were judged against.
    pub(crate) fn provenance_items(&self) -> Vec<(String, String)> {
        let mut items = Vec::new();
        for d in &self.devices {
            let dev = d.device.as_str();
            let mut put = |name: &str, v: Option<f64>| {
                if let Some(v) = v {
                    items.push((format!("peaks.{dev}.{name}"), format!("{v}")));
                }
            };
            put("sgemm_gflops", Some(d.measured.sgemm_gflops));
            put("dgemm_gflops", d.measured.dgemm_gflops);
            put("triad_gbs", Some(d.measured.triad_gbs));
            put("copy_gbs", Some(d.measured.copy_gbs));
            put("theoretical_gflops", d.theoretical.gflops);
            put("theoretical_gbs", d.theoretical.bandwidth_gbs);
        }
        items
    }

    pub fn render_text(&self) -> String {
        let mut s = format!("peaks on {} (board {})\n", self.host, self.board);
        for d in &self.devices {
            let m = &d.measured;
            let _ = writeln!(s, "{}:", d.device.as_str());
            let _ = writeln!(
                s,
                "  theoretical  compute {:>14}   bandwidth {:>11}   ({})",
                opt(d.theoretical.gflops, "GFLOP/s"),
                opt(d.theoretical.bandwidth_gbs, "GB/s"),
                d.theoretical.source
            );
            let _ = writeln!(
                s,
                "  measured     sgemm {:>9.1} GFLOP/s ({}^3)   copy {:.1} GB/s   triad {:.1} GB/s   ({} MiB arrays{})",
                m.sgemm_gflops,
                m.sgemm_size,
                m.copy_gbs,
                m.triad_gbs,
                m.stream_array_bytes >> 20,
                if m.threads > 0 {
                    format!(", {} threads", m.threads)
                } else {
                    String::new()
                }
            );
            if let Some(dgemm) = m.dgemm_gflops {
                let _ = writeln!(
                    s,
                    "  measured     dgemm {:>9.1} GFLOP/s ({}^3, f64)",
                    dgemm,
                    dgemm_size(m.sgemm_size)
                );
            }
            let share = |measured: f64, peak: Option<f64>| match peak {
                Some(p) if p > 0.0 => format!("{:.0} %", 100.0 * measured / p),
                _ => "-".into(),
            };
            let _ = writeln!(
                s,
                "  measured / theoretical   compute {}   bandwidth (triad) {}",
                share(m.sgemm_gflops, d.theoretical.gflops),
                share(m.triad_gbs, d.theoretical.bandwidth_gbs)
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_tree(cpuinfo: &str, max_khz: &[(usize, &str)]) -> (tempfile::TempDir, HostPaths) {
        let root = tempfile::tempdir().unwrap();
        let host = crate::testkit::jetson::host_under(root.path());
        std::fs::create_dir_all(&host.procfs).unwrap();
        std::fs::write(host.proc("cpuinfo"), cpuinfo).unwrap();
        for (cpu, khz) in max_khz {
            let dir = host.sys(&format!("devices/system/cpu/cpu{cpu}/cpufreq"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cpuinfo_max_freq"), format!("{khz}\n")).unwrap();
        }
        (root, host)
    }

    fn x86_cpu(index: usize, flags: &str, mhz: &str) -> String {
        format!(
            "processor\t: {index}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n\
             cpu MHz\t\t: {mhz}\nflags\t\t: fpu sse sse2 {flags}\n\n"
        )
    }

    #[test]
    fn host_cpu_peak_from_cpuinfo_flags_and_cpufreq() {
        // AVX2 + FMA: 8 lanes x 2 x 2 pipes = 32 FLOP/cycle; cpufreq says 3.0 GHz.
        let info = x86_cpu(0, "avx avx2 fma", "2445.1") + &x86_cpu(1, "avx avx2 fma", "2445.1");
        let (_t, host) = host_tree(&info, &[(0, "3000000"), (1, "3000000")]);
        let peak = host_cpu_peak(&host).unwrap();
        assert!((peak.gflops - 192.0).abs() < 1e-9, "{peak:?}");
        assert!(
            peak.how.contains("2 cores x 3.00 GHz x 32 FLOP/cycle"),
            "{}",
            peak.how
        );

        // No cpufreq: cpuinfo's clock. AVX-512F: 16 lanes.
        let (_t, host) = host_tree(&x86_cpu(0, "avx avx2 fma avx512f", "2000.0"), &[]);
        assert!((host_cpu_peak(&host).unwrap().gflops - 128.0).abs() < 1e-9);
        // SSE only, no FMA: 4 lanes x 2 pipes.
        let (_t, host) = host_tree(&x86_cpu(0, "", "1000.0"), &[]);
        assert!((host_cpu_peak(&host).unwrap().gflops - 8.0).abs() < 1e-9);

        // An ARM cpuinfo names no vector pipes: unknown.
        let arm = "processor\t: 0\nBogoMIPS\t: 38.40\nFeatures\t: fp asimd evtstrm\n\
                   CPU part\t: 0xd07\n\nHardware\t: jetson\n";
        let (_t, host) = host_tree(arm, &[(0, "1479000")]);
        assert_eq!(host_cpu_peak(&host), None);
    }

    #[test]
    fn last_level_cache_is_the_largest_data_cache() {
        let (_t, host) = host_tree("", &[]);
        let base = host.sys("devices/system/cpu/cpu0/cache");
        for (index, kind, size) in [
            (0, "Data", "32K"),
            (1, "Instruction", "64M"),
            (2, "Unified", "512K"),
            (3, "Unified", "32768K"),
        ] {
            let dir = base.join(format!("index{index}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("type"), kind).unwrap();
            std::fs::write(dir.join("size"), size).unwrap();
        }
        assert_eq!(last_level_cache_bytes(&host), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("lots"), None);
        // 4 x 32 MiB arrays stream from memory.
        assert_eq!(PeakSizes::for_host(&host).stream_array_bytes, 128 << 20);
    }

    #[test]
    fn jetson_profiles_carry_all_three_peaks_and_cpu_peaks_match_their_formula() {
        for p in crate::board::profiles()
            .iter()
            .filter(|p| p.name != "generic")
        {
            let (cpu, gpu, bw) = (p.cpu_peak_gflops, p.gpu_peak_gflops, p.mem_bandwidth_gbs);
            assert!(
                cpu.is_some() && gpu.is_some() && bw.is_some(),
                "{}: {cpu:?} {gpu:?} {bw:?}",
                p.name
            );
        }
        let orin = crate::board::by_name("agx-orin").unwrap();
        assert!((orin.cpu_peak_gflops.unwrap() - 12.0 * 2.2 * 16.0).abs() < 1e-9);
        assert_eq!(crate::board::generic().cpu_peak_gflops, None);
    }

    fn measured() -> MeasuredPeaks {
        MeasuredPeaks {
            sgemm_gflops: 300.0,
            dgemm_gflops: Some(140.0),
            triad_gbs: 100.0,
            copy_gbs: 120.0,
            sgemm_size: 2048,
            stream_array_bytes: 256 << 20,
            threads: 12,
        }
    }

    #[test]
    fn theoretical_peaks_come_from_the_profile_or_the_host() {
        let (_t, host) = host_tree(&x86_cpu(0, "avx avx2 fma", "2500.0"), &[]);
        let orin = crate::board::by_name("agx-orin").unwrap();
        let cpu = theoretical(orin, DeviceKind::Cpu, &host);
        assert_eq!((cpu.gflops, cpu.bandwidth_gbs), (Some(422.4), Some(204.8)));
        let gpu = theoretical(orin, DeviceKind::Cuda, &host);
        assert_eq!((gpu.gflops, gpu.bandwidth_gbs), (Some(5320.0), Some(204.8)));
        let generic = theoretical(crate::board::generic(), DeviceKind::Cpu, &host);
        assert_eq!((generic.gflops, generic.bandwidth_gbs), (Some(80.0), None));
        assert!(
            generic.source.starts_with("host: 1 cores"),
            "{}",
            generic.source
        );

        let d = DevicePeaks {
            device: DeviceKind::Cpu,
            theoretical: cpu,
            measured: measured(),
        };
        let f32_roofs = d.roofs(Dtype::F32);
        assert_eq!(f32_roofs.peak_gflops, Some(422.4));
        assert_eq!(f32_roofs.measured_gflops, Some(300.0));
        assert_eq!(f32_roofs.measured_gbs_for(ops::Op::Add), Some(100.0));
        assert_eq!(f32_roofs.measured_gbs_for(ops::Op::Tanh), Some(120.0));
        let f64_roofs = d.roofs(Dtype::F64);
        assert_eq!(f64_roofs.peak_gflops, Some(211.2));
        assert_eq!(f64_roofs.measured_gflops, Some(140.0));
        assert_eq!(f64_roofs.peak_gbs, Some(204.8));
    }

    #[test]
    fn report_renders_both_roofs_and_round_trips_as_json() {
        let report = PeaksReport {
            host: "orin".into(),
            board: "agx-orin".into(),
            devices: vec![DevicePeaks {
                device: DeviceKind::Cpu,
                theoretical: TheoreticalPeaks {
                    gflops: Some(422.4),
                    bandwidth_gbs: None,
                    source: "board profile agx-orin".into(),
                },
                measured: measured(),
            }],
        };
        let text = report.render_text();
        for want in [
            "422.4 GFLOP/s",
            "bandwidth     unknown",
            "sgemm     300.0 GFLOP/s (2048^3)",
            "dgemm     140.0 GFLOP/s (1024^3, f64)",
            "copy 120.0 GB/s",
            "triad 100.0 GB/s",
            "compute 71 %",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<PeaksReport>(&json).unwrap(), report);
    }

    #[test]
    fn measured_peaks_are_plausible_on_this_host() {
        let sizes = PeakSizes {
            sgemm_size: 256,
            stream_array_bytes: 4 << 20,
            repetitions: 2,
            dgemm: true,
        };
        let m = measure_peaks(DeviceKind::Cpu, sizes).unwrap();
        for (what, v) in [
            ("sgemm", m.sgemm_gflops),
            ("dgemm", m.dgemm_gflops.unwrap()),
            ("copy", m.copy_gbs),
            ("triad", m.triad_gbs),
        ] {
            // Above 0.1 (a broken timer or an empty loop reads 0 or inf), below 100 000.
            assert!(v.is_finite() && v > 0.1 && v < 1e5, "{what}: {v}");
        }
        assert_eq!((m.sgemm_size, m.stream_array_bytes), (256, 4 << 20));
    }
}
