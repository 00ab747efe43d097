//! Helpers of the unit tests: thread pools, a deterministic generator, finite differences.

use candle_core::{Device, Result, Tensor, Var};

/// The thread counts the kernels are checked at: one, the boards' 4, 6, 8 and 12 cores, 16,
/// and 3 (uneven splits). Small batches and maps leave threads with no work or with only
/// padding rows at the high counts.
pub(crate) const THREAD_COUNTS: [usize; 7] = [1, 3, 4, 6, 8, 12, 16];

/// Runs `f` inside a rayon pool of each of `THREAD_COUNTS` threads.
pub(crate) fn on_thread_counts(f: impl Fn() + Sync) {
    for threads in THREAD_COUNTS {
        // Captured output, shown with a failure: which pool it happened in.
        println!("rayon pool of {threads} threads");
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(&f);
    }
}

/// Deterministic xorshift so the tests need no extra crates.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    pub(crate) fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.uniform()).collect()
    }
    /// Pairwise distinct values 0.01 apart (shuffled), so max-pool argmaxes survive
    /// finite-difference nudges.
    pub(crate) fn distinct(&mut self, n: usize) -> Vec<f64> {
        let mut v: Vec<f64> = (0..n).map(|i| i as f64 * 0.01 - n as f64 * 0.005).collect();
        for i in (1..n).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
        v
    }
}

pub(crate) fn tensor(v: &[f64], dims: (usize, usize, usize, usize)) -> Tensor {
    Tensor::from_vec(v.to_vec(), dims, &Device::Cpu).unwrap()
}

pub(crate) fn to_vec(t: &Tensor) -> Vec<f64> {
    t.to_dtype(candle_core::DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// Checks the autograd input gradient of `f` against central differences of
/// loss = sum(f(x) * w) in f64; returns the worst relative error.
pub(crate) fn grad_check(
    x: &[f64],
    dims: (usize, usize, usize, usize),
    seed: u64,
    f: impl Fn(&Tensor) -> Result<Tensor>,
) -> f64 {
    let var = Var::from_tensor(&tensor(x, dims)).unwrap();
    let y = f(var.as_tensor()).unwrap();
    let w = Tensor::from_vec(
        Rng::new(seed).vec(y.elem_count()),
        y.shape().clone(),
        &Device::Cpu,
    )
    .unwrap();
    let loss = |t: &Tensor| -> f64 {
        (f(t).unwrap() * &w)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar()
            .unwrap()
    };
    let grads = (y * &w).unwrap().sum_all().unwrap().backward().unwrap();
    let analytic = to_vec(grads.get(var.as_tensor()).expect("input has a gradient"));
    assert_eq!(analytic.len(), x.len());
    assert!(
        analytic.iter().any(|g| g.abs() > 1e-3),
        "gradient is (nearly) all zero"
    );
    let eps = 1e-6;
    let mut worst = 0f64;
    let mut xp = x.to_vec();
    for i in 0..x.len() {
        xp[i] = x[i] + eps;
        let lp = loss(&tensor(&xp, dims));
        xp[i] = x[i] - eps;
        let lm = loss(&tensor(&xp, dims));
        xp[i] = x[i];
        let numeric = (lp - lm) / (2.0 * eps);
        let err = (analytic[i] - numeric).abs() / analytic[i].abs().max(numeric.abs()).max(1e-2);
        worst = worst.max(err);
    }
    worst
}
