//! `edgebench profile`: training steps of one net timed, forward/backward time per layer.

use super::{usage, Outcome};
use crate::cli::ProfileArgs;
use edgebench::models;

/// Shapes `--products` lists, the longest first.
const PRODUCT_ROWS: usize = 15;

pub(crate) fn run(args: ProfileArgs) -> Outcome {
    let ProfileArgs {
        net,
        batch,
        steps,
        candle_conv,
        device,
        quick,
        threads,
        tf32,
        products,
    } = args;
    if threads > 0 {
        std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    }
    edgebench_kernels::set_tf32(tf32);
    let spec = models::by_name(&net)
        .ok_or_else(|| usage(anyhow::anyhow!("--net {net}: unknown (alexnet, googlenet)")))?;
    let conv = if candle_conv {
        models::ConvImpl::Candle
    } else {
        models::ConvImpl::Gemm
    };
    let kind = edgebench::config::DeviceKind::parse(&device)
        .map_err(|e| usage(anyhow::anyhow!("--device: {e}")))?;
    let device = edgebench::train::device(kind)?;
    let p =
        edgebench::train::profile::profile(spec, &device, batch, steps, conv, !quick, products)?;
    if !quick {
        print!("{}", p.text());
    }
    print!("{}", p.products_text(PRODUCT_ROWS));
    // The products' GFLOP only where edgebench's kernels ran them: on a GPU (cuDNN, cuBLAS) and
    // with `--candle-conv` (candle's matmul) they go uncounted.
    let products = if p.product_flops_per_image > 0.0 {
        format!(
            " product_gflop_per_image={:.4}",
            p.product_flops_per_image * 1e-9
        )
    } else {
        String::new()
    };
    println!(
        "RESULT net={} batch={} device={} median_s_per_image={:.6} cpu_s_per_image={:.6} issue_s_per_image={:.6} peak_rss_kb={} peak_gpu_bytes={}{products}",
        p.net,
        p.batch,
        p.device,
        p.step_s / p.batch as f64,
        p.step_cpu_s / p.batch as f64,
        p.issue_s / p.batch as f64,
        edgebench::train::profile::peak_rss_kb(),
        edgebench::train::gpu_memory::peak_bytes().unwrap_or(0)
    );
    Ok(0)
}
