//! The roofs of a roofline, per device: the theoretical compute and memory-bandwidth peaks
//! (the board profile's figures; for a host without a profile the CPU's computed from
//! /proc/cpuinfo and cpufreq) and the peaks measured on the host itself: a large SGEMM through
//! the `gemm` crate (what candle's CPU matmul runs) and STREAM's copy and triad on all threads.

use crate::board::BoardProfile;
use crate::config::DeviceKind;
use crate::host::HostPaths;
use crate::train::monotonic_ns;
use crate::workloads::ops::{self, Dtype, Roofs};
use anyhow::{Context, Result};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Peaks measured on the host for one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredPeaks {
    /// Best f32 GEMM rate, GFLOP/s, of `sgemm_size`³ products.
    pub sgemm_gflops: f64,
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
        }
    }
}

/// The largest data cache of CPU 0, from sysfs (`cpu0/cache/index*/size`, e.g. `32768K`).
pub fn last_level_cache_bytes(host: &HostPaths) -> Option<u64> {
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

fn measure_cpu(sizes: PeakSizes) -> MeasuredPeaks {
    let n = sizes.sgemm_size.max(64);
    let a: Vec<f32> = ops::kernels::fill(n * n, 1, -1.0, 1.0);
    let b: Vec<f32> = ops::kernels::fill(n * n, 2, -1.0, 1.0);
    let mut c: Vec<f32> = vec![0.0; n * n];
    ops::kernels::matmul(&a, &b, &mut c, (n, n, n));
    let sgemm_s = best_of(sizes.repetitions, || {
        ops::kernels::matmul(&a, &b, &mut c, (n, n, n))
    });
    std::hint::black_box(&c);
    drop((a, b, c));

    let len = (sizes.stream_array_bytes / 8) as usize;
    let (copy_s, triad_s) = stream_f64(len, sizes.repetitions);
    MeasuredPeaks {
        sgemm_gflops: 2.0 * (n as f64).powi(3) / sgemm_s * 1e-9,
        triad_gbs: 24.0 * len as f64 / triad_s * 1e-9,
        copy_gbs: 16.0 * len as f64 / copy_s * 1e-9,
        sgemm_size: n,
        stream_array_bytes: 8 * len as u64,
        threads: rayon::current_num_threads(),
    }
}

/// Best seconds of STREAM's copy and triad over f64 arrays of `len` elements, each thread
/// streaming its own contiguous part as STREAM's OpenMP loops do.
pub fn stream_f64(len: usize, repetitions: usize) -> (f64, f64) {
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
    let len = (sizes.stream_array_bytes / 4) as usize;
    let x = Tensor::zeros(len, DType::F32, device)?;
    let y = Tensor::ones(len, DType::F32, device)?;
    let copy_s = timed(&mut || x.copy());
    let triad_s = timed(&mut || x.add(&y));
    if let Some(e) = failure {
        return Err(e).context("measuring the device's peaks");
    }
    Ok(MeasuredPeaks {
        sgemm_gflops: 2.0 * (n as f64).powi(3) / sgemm_s * 1e-9,
        triad_gbs: 12.0 * len as f64 / triad_s * 1e-9,
        copy_gbs: 8.0 * len as f64 / copy_s * 1e-9,
        sgemm_size: n,
        stream_array_bytes: 4 * len as u64,
        threads: 0,
    })
}

/// A CPU's theoretical fp32 peak and how it was worked out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuPeak {
    pub gflops: f64,
    pub how: String,
}

/// The host CPU's fp32 peak from what it reports: for each processor in /proc/cpuinfo, its
/// highest clock (cpufreq `cpuinfo_max_freq`, else cpuinfo's `cpu MHz`) × FLOPs per cycle.
/// FLOPs per cycle come from the x86 flags: SIMD lanes (AVX-512F 16, AVX 8, SSE 4) × 2 with
/// FMA × 2 vector pipes (as on x86 cores since Haswell and Zen 2; older ones are
/// overestimated). Other architectures do not report their pipes: unknown (None).
pub fn host_cpu_peak(host: &HostPaths) -> Option<CpuPeak> {
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
    /// rate (half the SIMD lanes); the GPU's f64 rate and a measured DGEMM are not known.
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
                Dtype::F64 => None,
            },
            measured_copy_gbs: Some(self.measured.copy_gbs),
            measured_triad_gbs: Some(self.measured.triad_gbs),
        }
    }
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
