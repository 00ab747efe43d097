//! Time of one SGD update (momentum and weight decay, as a training step applies it) over every
//! parameter of a net, on the CPU with all cores, set up as a training process is:
//!
//!     cargo run --release --example sgd_step -- [NET] [STEPS]
//!
//! NET is alexnet or googlenet (default googlenet), STEPS the updates timed (default 60).
//! Prints the median and the 10th and 90th percentiles in ms. A measurement for
//! docs/performance.md, not a check: it asserts nothing.

use candle_core::{Device, Tensor};
use edgebench::models::{by_name, Network};
use edgebench::train::sgd::Sgd;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    edgebench::train::prepare_training_process();
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "googlenet".into());
    let steps: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(60);
    anyhow::ensure!(steps > 0, "STEPS must be at least 1");
    let spec = by_name(&name).ok_or_else(|| anyhow::anyhow!("no net named {name}"))?;
    let net = Network::new(spec, &Device::Cpu, 1)?;
    // A loss that reaches every parameter, so that each has a gradient to apply.
    let sums = net
        .params()
        .iter()
        .map(|p| p.var.as_tensor().sum_all())
        .collect::<candle_core::Result<Vec<_>>>()?;
    let grads = (Tensor::stack(&sums, 0)?.sum_all()? * 1e-3)?.backward()?;
    let mut sgd = Sgd::new(spec.solver, net.params(), steps)?;
    let mut ms: Vec<f64> = (0..steps)
        .map(|i| {
            let start = Instant::now();
            sgd.step(i, net.params(), &grads)?;
            Ok(start.elapsed().as_secs_f64() * 1e3)
        })
        .collect::<candle_core::Result<_>>()?;
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    let params: usize = net.params().iter().map(|p| p.var.elem_count()).sum();
    println!(
        "{name}: {params} parameters, SGD update median {:.3} ms (p10 {:.3}, p90 {:.3}) over {steps} steps",
        at(0.5),
        at(0.1),
        at(0.9)
    );
    Ok(())
}
