//! SGD with momentum (Caffe's update): on host slices, and on CUDA tensors in place, many
//! parameters per kernel launch.

use crate::util::Float;
use candle_core::{bail, Result, Tensor};

/// SGD with momentum on CUDA tensors in one fused pass, in place on `w` and `v` (Caffe's
/// update): `v = momentum·v + rate·(g + decay·w); w -= v`. `v` must be a buffer that no other
/// tensor shares (the optimiser's own momentum history); all three f32, contiguous, one shape.
/// Errors on other devices.
pub fn sgd_momentum(
    w: &Tensor,
    g: &Tensor,
    v: &Tensor,
    momentum: f32,
    rate: f32,
    decay: f32,
) -> Result<()> {
    sgd_momentum_all(
        &[SgdUpdate {
            w,
            g,
            v,
            rate,
            decay,
        }],
        momentum,
    )
}

/// Caffe's update on host memory, in place: `v = momentum·v + rate·(g + decay·w); w -= v` for
/// every element (one thread: the caller splits a large parameter over its threads). On
/// aarch64 with fused multiply-adds (FMLA is baseline there) and 16 elements per iteration in
/// NEON registers: at batch 1 the update is a tenth of an AlexNet step's instructions, and the
/// compiler's loop ran 11 instructions per 4 elements, this one 25 per 16. Elsewhere unfused, as
/// Caffe's CPU solver computes it (baseline x86-64 has no FMA).
pub fn sgd_momentum_host(
    w: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    momentum: f32,
    rate: f32,
    decay: f32,
) {
    assert!(
        w.len() == v.len() && w.len() == g.len(),
        "sgd_momentum_host: w, v and g differ in length"
    );
    let coefficients = (momentum, rate, decay);
    #[cfg(target_arch = "aarch64")]
    let done = neon::momentum(w, v, g, coefficients);
    #[cfg(not(target_arch = "aarch64"))]
    let done = 0;
    for ((w, v), &g) in w[done..].iter_mut().zip(&mut v[done..]).zip(&g[done..]) {
        *v = momentum_step(*w, *v, g, coefficients);
        *w -= *v;
    }
}

/// The new momentum of one element, `(w·d + g)·r + m·v`, fused where that is one instruction;
/// the NEON loop computes the same, bit for bit.
#[inline(always)]
fn momentum_step(w: f32, v: f32, g: f32, (m, r, d): (f32, f32, f32)) -> f32 {
    w.mul_add_fast(d, g).mul_add_fast(r, m * v)
}

#[cfg(target_arch = "aarch64")]
mod neon {
    /// Elements per iteration: two runs of four vectors of each operand, each run loaded with
    /// one four-register instruction and stored in pairs (one run per iteration spends an
    /// eighth of the loop's instructions on its branch and counter).
    const BLOCK: usize = 32;

    /// [`super::momentum_step`] on the leading whole blocks; returns how many elements it did.
    /// In assembly: the compiler splits a four-register load or store into pairs.
    pub(super) fn momentum(
        w: &mut [f32],
        v: &mut [f32],
        g: &[f32],
        (m, r, d): (f32, f32, f32),
    ) -> usize {
        let blocks = w.len() / BLOCK;
        if blocks == 0 {
            return 0;
        }
        let coefficients = [m, r, d, 0.0];
        // SAFETY: the loop reads and writes blocks * BLOCK <= the length of all three slices
        // (the caller asserts equal lengths) floats of w and v, reads as many of g, and reads
        // the four coefficients; ASIMD is baseline on aarch64.
        unsafe {
            std::arch::asm!(
                "ld1 {{v31.4s}}, [{k}]",
                "2:",
                // Loads through {w} and {v}, stores through {ws} and {vs}: both pairs start
                // at the same elements and advance with the post-indexed addressing.
                "ld1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{w}], #64",
                "ld1 {{v4.4s, v5.4s, v6.4s, v7.4s}}, [{v}], #64",
                "ld1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{g}], #64",
                "ld1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{w}], #64",
                "ld1 {{v24.4s, v25.4s, v26.4s, v27.4s}}, [{v}], #64",
                "ld1 {{v8.4s, v9.4s, v10.4s, v11.4s}}, [{g}], #64",
                // fma(w, d, g), then fma(that, r, m * v): the scalar step's order.
                "fmla v16.4s, v0.4s, v31.s[2]", "fmla v17.4s, v1.4s, v31.s[2]",
                "fmla v18.4s, v2.4s, v31.s[2]", "fmla v19.4s, v3.4s, v31.s[2]",
                "fmla v8.4s, v20.4s, v31.s[2]", "fmla v9.4s, v21.4s, v31.s[2]",
                "fmla v10.4s, v22.4s, v31.s[2]", "fmla v11.4s, v23.4s, v31.s[2]",
                "fmul v4.4s, v4.4s, v31.s[0]", "fmul v5.4s, v5.4s, v31.s[0]",
                "fmul v6.4s, v6.4s, v31.s[0]", "fmul v7.4s, v7.4s, v31.s[0]",
                "fmul v24.4s, v24.4s, v31.s[0]", "fmul v25.4s, v25.4s, v31.s[0]",
                "fmul v26.4s, v26.4s, v31.s[0]", "fmul v27.4s, v27.4s, v31.s[0]",
                "fmla v4.4s, v16.4s, v31.s[1]", "fmla v5.4s, v17.4s, v31.s[1]",
                "fmla v6.4s, v18.4s, v31.s[1]", "fmla v7.4s, v19.4s, v31.s[1]",
                "fmla v24.4s, v8.4s, v31.s[1]", "fmla v25.4s, v9.4s, v31.s[1]",
                "fmla v26.4s, v10.4s, v31.s[1]", "fmla v27.4s, v11.4s, v31.s[1]",
                "fsub v0.4s, v0.4s, v4.4s", "fsub v1.4s, v1.4s, v5.4s",
                "fsub v2.4s, v2.4s, v6.4s", "fsub v3.4s, v3.4s, v7.4s",
                "fsub v20.4s, v20.4s, v24.4s", "fsub v21.4s, v21.4s, v25.4s",
                "fsub v22.4s, v22.4s, v26.4s", "fsub v23.4s, v23.4s, v27.4s",
                // Stores in pairs: with four-register stores the Cortex-A57 model of
                // llvm-mca puts the loop at 46 cycles instead of 41.
                "stp q4, q5, [{vs}], #32",
                "stp q6, q7, [{vs}], #32",
                "stp q24, q25, [{vs}], #32",
                "stp q26, q27, [{vs}], #32",
                "stp q0, q1, [{ws}], #32",
                "stp q2, q3, [{ws}], #32",
                "stp q20, q21, [{ws}], #32",
                "stp q22, q23, [{ws}], #32",
                "subs {n}, {n}, #1",
                "b.ne 2b",
                k = in(reg) coefficients.as_ptr(),
                w = inout(reg) w.as_mut_ptr() => _,
                v = inout(reg) v.as_mut_ptr() => _,
                ws = inout(reg) w.as_mut_ptr() => _,
                vs = inout(reg) v.as_mut_ptr() => _,
                g = inout(reg) g.as_ptr() => _,
                n = inout(reg) blocks => _,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _,
                out("v4") _, out("v5") _, out("v6") _, out("v7") _,
                out("v8") _, out("v9") _, out("v10") _, out("v11") _,
                out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                out("v20") _, out("v21") _, out("v22") _, out("v23") _,
                out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v31") _,
                options(nostack),
            );
        }
        blocks * BLOCK
    }
}

/// One parameter's part of [`sgd_momentum_all`]: `v = momentum·v + rate·(g + decay·w); w -= v`.
pub struct SgdUpdate<'a> {
    pub w: &'a Tensor,
    pub g: &'a Tensor,
    pub v: &'a Tensor,
    pub rate: f32,
    pub decay: f32,
}

/// [`sgd_momentum`] for many parameters at once, each with its own rate and decay: one kernel
/// launch per 32 parameters instead of one per parameter (at batch 1 the launches are much of
/// the host's time per step). Same contract per parameter: w and v written in place, v the
/// optimiser's own buffer, all f32 and contiguous on one CUDA device. Errors on other devices.
pub fn sgd_momentum_all(updates: &[SgdUpdate], momentum: f32) -> Result<()> {
    if updates.is_empty() {
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    if updates.iter().all(|u| u.w.device().is_cuda()) {
        return gpu::sgd_momentum_all(updates, momentum);
    }
    let _ = momentum;
    match updates.iter().find(|u| !u.w.device().is_cuda()) {
        Some(u) => bail!(
            "sgd_momentum_all: CUDA tensors only, got {:?}",
            u.w.device()
        ),
        None => bail!("sgd_momentum_all: this build has no CUDA support"),
    }
}

/// The CUDA kernel (`cuda/sgd.cu`).
#[cfg(feature = "cuda")]
mod gpu {
    use super::SgdUpdate;
    use crate::cuda::{config, Module};
    use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{bail, Result};

    static KERNELS: Module = Module::new("edgebench_sgd", include_str!("cuda/sgd.cu"));

    /// Parameters per launch of eb_sgd_momentum_many (its EB_SGD_MANY).
    const SGD_MANY: usize = 32;

    /// eb_sgd_momentum_many's argument, laid out as its C struct (raw device addresses).
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct SgdTable {
        w: [u64; SGD_MANY],
        g: [u64; SGD_MANY],
        v: [u64; SGD_MANY],
        n: [i64; SGD_MANY],
        rate: [f32; SGD_MANY],
        decay: [f32; SGD_MANY],
        count: i32,
    }

    // SAFETY: plain data with the kernel's C layout (repr(C), same field order and types).
    unsafe impl candle_core::cuda_backend::cudarc::driver::DeviceRepr for SgdTable {}

    /// The device address of a contiguous f32 CUDA tensor's first element.
    fn address(t: &candle_core::Tensor, what: &str) -> Result<u64> {
        use candle_core::cuda_backend::cudarc::driver::DevicePtr;
        let (storage, layout) = t.storage_and_layout();
        let candle_core::Storage::Cuda(s) = &*storage else {
            bail!("sgd-momentum: the {what} is not on a CUDA device");
        };
        let Some((start, _)) = layout.contiguous_offsets() else {
            bail!("sgd-momentum: the {what} must be contiguous");
        };
        let slice = s.as_cuda_slice::<f32>()?;
        let (ptr, _) = slice.device_ptr(slice.stream());
        Ok(ptr + (start * std::mem::size_of::<f32>()) as u64)
    }

    /// `sgd_momentum_all` on CUDA: one launch per `SGD_MANY` parameters.
    pub(super) fn sgd_momentum_all(updates: &[SgdUpdate], momentum: f32) -> Result<()> {
        let Some(first) = updates.first() else {
            return Ok(());
        };
        let candle_core::Device::Cuda(dev) = first.w.device() else {
            bail!(
                "sgd-momentum: CUDA tensors only, got {:?}",
                first.w.device()
            );
        };
        let func = KERNELS.kernel(dev, "eb_sgd_momentum_many")?;
        let stream = dev.cuda_stream();
        // Largest first, so each launch groups parameters of like size: every parameter of a launch
        // gets the grid of its largest, and the blocks past a small one's end do nothing.
        let mut by_size: Vec<&SgdUpdate> = updates.iter().collect();
        by_size.sort_by_key(|u| std::cmp::Reverse(u.w.elem_count()));
        for chunk in by_size.chunks(SGD_MANY) {
            let mut t = SgdTable {
                w: [0; SGD_MANY],
                g: [0; SGD_MANY],
                v: [0; SGD_MANY],
                n: [0; SGD_MANY],
                rate: [0.0; SGD_MANY],
                decay: [0.0; SGD_MANY],
                count: chunk.len() as i32,
            };
            let mut largest = 1;
            for (k, u) in chunk.iter().enumerate() {
                let n = u.w.elem_count();
                for (what, x) in [("weight", u.w), ("gradient", u.g), ("momentum", u.v)] {
                    if x.elem_count() != n || x.dtype() != candle_core::DType::F32 {
                        bail!(
                            "sgd-momentum: the {what} must be f32 with the weight's {n} elements, got {:?} {:?}",
                            x.dtype(),
                            x.shape()
                        );
                    }
                    if !x.device().same_device(first.w.device()) {
                        bail!("sgd-momentum: the {what} is on another device");
                    }
                }
                t.w[k] = address(u.w, "weight")?;
                t.g[k] = address(u.g, "gradient")?;
                t.v[k] = address(u.v, "momentum")?;
                t.n[k] = n as i64;
                t.rate[k] = u.rate;
                t.decay[k] = u.decay;
                largest = largest.max(n);
            }
            let mut cfg = config(largest);
            // Enough blocks per parameter to fill a large GPU (grid-stride loops cover the rest);
            // `config`'s 65535 per parameter would be mostly idle blocks times 32 parameters.
            cfg.grid_dim.0 = cfg.grid_dim.0.min(1024);
            cfg.grid_dim.1 = chunk.len() as u32;
            let mut l = stream.launch_builder(&func);
            l.arg(&t).arg(&momentum);
            // SAFETY: the table matches eb_sgd_momentum_many's struct; each address points at a
            // live f32 buffer of at least n[k] elements on this device and stream (checked above;
            // the caller holds the tensors, and freeing them later is ordered after this launch on
            // the stream). The kernel writes w and v through addresses taken from shared
            // references: w is a parameter only the optimiser updates, v the optimiser's own
            // buffer (the contract in `sgd_momentum_all`).
            unsafe { l.launch(cfg) }.w()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::Rng;

    /// The host update against the scalar step bit for bit (the NEON blocks on aarch64 and
    /// the tail), at every length up to three blocks and past, and against the update in f64.
    #[test]
    fn host_update_equals_the_scalar_step_and_the_f64_update() {
        let (m, r, d) = (0.9f32, 0.01f32, 0.0005f32);
        for len in (0..100).chain([1000, 4099]) {
            let mut rng = Rng::new(len as u64 + 1);
            let mut vec = |scale: f64| -> Vec<f32> {
                rng.vec(len)
                    .into_iter()
                    .map(|x| (x * scale) as f32)
                    .collect()
            };
            let (w0, v0, g) = (vec(1.0), vec(0.1), vec(10.0));
            let (mut w, mut v) = (w0.clone(), v0.clone());
            sgd_momentum_host(&mut w, &mut v, &g, m, r, d);
            for i in 0..len {
                let step = momentum_step(w0[i], v0[i], g[i], (m, r, d));
                assert_eq!(v[i].to_bits(), step.to_bits(), "v[{i}] of {len}");
                assert_eq!(w[i].to_bits(), (w0[i] - step).to_bits(), "w[{i}] of {len}");
                let terms = [
                    m as f64 * v0[i] as f64,
                    r as f64 * g[i] as f64,
                    r as f64 * d as f64 * w0[i] as f64,
                ];
                let exact: f64 = terms.iter().sum();
                // A few roundings of the largest term (the terms may cancel).
                let scale = terms.iter().map(|t| t.abs()).fold(0.0, f64::max);
                assert!(
                    (v[i] as f64 - exact).abs() <= 4e-7 * scale,
                    "v[{i}] of {len}"
                );
            }
        }
    }
}
