//! `edgebench bench-sgemm` (hidden): this machine's single-precision GEMM peak, for
//! `bench/compare.sh`.

use super::Outcome;

pub(crate) fn run(size: usize) -> Outcome {
    let g = edgebench::train::profile::sgemm_gflops(size);
    println!(
        "RESULT sgemm_gflops={g:.1} size={size} threads={} kernel={}",
        rayon::current_num_threads(),
        edgebench_kernels::sgemm::Kernel::detect().name()
    );
    Ok(0)
}
