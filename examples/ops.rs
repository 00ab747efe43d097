//! The ops workload's trials run in-process, printing lines comparable with bench/ops.py:
//!
//!     cargo run --release --example ops -- [OPS] [SIZES] [DTYPE] [MIN_TIME_S] [ENGINE]
//!
//! OPS, SIZES (MiB), DTYPE and MIN_TIME_S as bench/ops.py takes them; ENGINE edgebench
//! (default) or candle. Also prints the measured peaks first, and each trial's share of them.

use edgebench::config::DeviceKind;
use edgebench::host::HostPaths;
use edgebench::record::Control;
use edgebench::workloads::ops::peaks::{self, DevicePeaks, PeakSizes};
use edgebench::workloads::ops::{self, Dtype, Engine, Op, OpsJob};
use std::sync::atomic::AtomicBool;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let ops_list: Vec<Op> = arg(0, "add,mul,dot,scalar,sigmoid,tanh")
        .split(',')
        .map(Op::parse)
        .collect::<anyhow::Result<_>>()?;
    let sizes = args.get(1).cloned();
    let dtype = Dtype::parse(&arg(2, "f32"))?;
    let min_time_s: f64 = arg(3, "1.0").parse()?;
    let engine = match arg(4, "edgebench").as_str() {
        "candle" => Engine::Candle,
        _ => Engine::Edgebench,
    };
    let host = HostPaths::default();
    let measured = peaks::measure_peaks(DeviceKind::Cpu, PeakSizes::for_host(&host))?;
    let device_peaks = DevicePeaks {
        device: DeviceKind::Cpu,
        theoretical: peaks::theoretical(edgebench::board::generic(), DeviceKind::Cpu, &host),
        measured,
    };
    print!(
        "{}",
        peaks::PeaksReport {
            host: host.hostname(),
            board: "generic".into(),
            devices: vec![device_peaks.clone()],
        }
        .render_text()
    );
    let stop = AtomicBool::new(false);
    for op in ops_list {
        let default_sizes = if op == Op::Dot {
            "5,17,65"
        } else {
            "2,8,32,128,512"
        };
        for size in sizes.as_deref().unwrap_or(default_sizes).split(',') {
            let (shape, mb) = ops::parse_size(op, dtype, size)?;
            let mut job = OpsJob::new(op, dtype, shape, mb, DeviceKind::Cpu);
            job.engine = engine;
            job.min_time_s = min_time_s;
            job.roofs = device_peaks.roofs(dtype);
            let mut records = Vec::new();
            ops::run(&job, &stop, &mut |r| {
                records.push(*r);
                Ok(Control::Continue)
            })?;
            let m = ops::metrics(&job, &records[job.warmup..]);
            let c = job.counts();
            let get = |k: &str| m.extra[k].as_f64().unwrap_or(f64::NAN);
            println!(
                "RESULT engine={} op={op} dtype={} mb={size} elements={} median_s={:.6} \
                 gflop_per_s={:.4} gbyte_per_s={:.4} pct_measured_peak_flops={:.1} \
                 pct_measured_peak_bandwidth={:.1}",
                engine.as_str(),
                dtype.as_str(),
                c.elements,
                m.time_per_iteration_s.unwrap_or(f64::NAN),
                m.gflop_per_s.unwrap_or(f64::NAN),
                get("gbyte_per_s"),
                get("pct_measured_peak_flops"),
                get("pct_measured_peak_bandwidth"),
            );
        }
    }
    Ok(())
}
