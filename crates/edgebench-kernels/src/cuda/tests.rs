//! The GPU tests of the ops' CUDA kernels, each against the CPU kernel: `cargo test --features
//! cuda -p edgebench-kernels cuda::` (or `--features cudnn`, for the cuDNN convolution too) on a
//! machine with an NVIDIA GPU. Without a GPU they fail: CI builds without the `cuda` feature.

use crate::test_util::{to_vec, Rng};
use crate::{lrn, pool2d, Lrn, Pool2d, PoolKind};
use candle_core::{DType, Device, Result, Tensor, Var};

/// The GPU, and a guard that runs the GPU tests one at a time (one of them switches TF32,
/// which is process-wide). A build with the `cuda` feature is for a machine with a GPU: without
/// one these tests fail rather than pass untested.
fn gpu() -> Option<(Device, std::sync::MutexGuard<'static, ()>)> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    match Device::new_cuda(0) {
        Ok(d) => Some((d, guard)),
        Err(e) => panic!(
            "no CUDA device ({e}): run the CUDA tests on a machine with a GPU, or build \
             without the cuda feature"
        ),
    }
}

/// Output and input gradient of loss = sum(f(x) * r) on `dev`, in f32.
fn run(
    dev: &Device,
    x: &[f32],
    dims: (usize, usize, usize, usize),
    f: impl Fn(&Tensor) -> Result<Tensor>,
) -> (Vec<f64>, Vec<f64>) {
    let var = Var::from_tensor(&Tensor::from_vec(x.to_vec(), dims, dev).unwrap()).unwrap();
    let y = f(var.as_tensor()).unwrap();
    let r: Vec<f32> = Rng::new(7)
        .vec(y.elem_count())
        .iter()
        .map(|&v| v as f32)
        .collect();
    let r = Tensor::from_vec(r, y.shape().clone(), dev).unwrap();
    let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
    let dx = grads.get(var.as_tensor()).expect("input has a gradient");
    let host = |t: &Tensor| {
        to_vec(
            &t.to_device(&Device::Cpu)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap(),
        )
    };
    (host(&y), host(dx))
}

fn assert_close(what: &str, a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: cuda {x} vs cpu {y}"
        );
    }
}

#[test]
fn cuda_pooling_matches_cpu() {
    let Some((dev, _serial)) = gpu() else { return };
    // Every pooling of BVLC AlexNet/GoogLeNet, plus ceil mode with a partial last window.
    let cases = [
        (PoolKind::Max, 3, 2, 0, (2, 3, 13, 13)),
        (PoolKind::Max, 3, 2, 0, (2, 3, 14, 15)),
        (PoolKind::Max, 3, 1, 1, (2, 4, 7, 7)),
        (PoolKind::Avg, 5, 3, 0, (2, 3, 14, 14)),
        (PoolKind::Avg, 7, 1, 0, (2, 3, 7, 7)),
        (PoolKind::Avg, 3, 2, 1, (1, 2, 8, 9)),
    ];
    for (i, (kind, kernel, stride, pad, dims)) in cases.into_iter().enumerate() {
        let p = Pool2d {
            kind,
            kernel,
            stride,
            pad,
        };
        let n = dims.0 * dims.1 * dims.2 * dims.3;
        // Distinct values for max pooling (one argmax), some ties through ReLU-like zeros.
        let x: Vec<f32> = Rng::new(i as u64)
            .distinct(n)
            .iter()
            .map(|&v| v.max(-0.05) as f32)
            .collect();
        let (yc, gc) = run(&Device::Cpu, &x, dims, |t| pool2d(t, p));
        let (yg, gg) = run(&dev, &x, dims, |t| pool2d(t, p));
        assert_close(&format!("{p:?} forward"), &yg, &yc, 1e-6);
        assert_close(&format!("{p:?} input gradient"), &gg, &gc, 1e-5);
    }
}

#[test]
fn cuda_lrn_matches_cpu() {
    let Some((dev, _serial)) = gpu() else { return };
    let p = Lrn {
        size: 5,
        alpha: 1e-4,
        beta: 0.75,
        k: 1.0,
    };
    // Large inputs so alpha/size * sum(x^2) matters; 3 and 7 channels cover clipped windows.
    for (i, dims) in [(2, 7, 5, 6), (1, 3, 4, 4), (2, 16, 3, 3)]
        .into_iter()
        .enumerate()
    {
        let n = dims.0 * dims.1 * dims.2 * dims.3;
        let x: Vec<f32> = Rng::new(10 + i as u64)
            .vec(n)
            .iter()
            .map(|&v| (v * 60.0) as f32)
            .collect();
        let (yc, gc) = run(&Device::Cpu, &x, dims, |t| lrn(t, p));
        let (yg, gg) = run(&dev, &x, dims, |t| lrn(t, p));
        assert_close("lrn forward", &yg, &yc, 1e-5);
        assert_close("lrn input gradient", &gg, &gc, 1e-4);
    }
}

#[test]
fn cuda_im2col_conv_matches_cpu() {
    let Some((dev, _serial)) = gpu() else { return };
    use crate::{conv2d_im2col, Conv2d};
    // Strided 11x11, grouped padded 5x5, 7x7 stride 2 with a remainder, 1x1.
    let cases = [
        ((2, 3, 23, 23), (4, 3, 11, 11), 4, 0, 1),
        ((2, 4, 9, 9), (6, 2, 5, 5), 1, 2, 2),
        ((1, 3, 15, 14), (5, 3, 7, 7), 2, 3, 1),
        ((3, 5, 6, 7), (4, 5, 1, 1), 1, 0, 1),
    ];
    for (i, (xd, wd, stride, pad, groups)) in cases.into_iter().enumerate() {
        let p = Conv2d {
            stride,
            pad,
            groups,
            relu: true,
        };
        let f32s = |seed: u64, n: usize| -> Vec<f32> {
            Rng::new(seed).vec(n).iter().map(|&v| v as f32).collect()
        };
        let w = Tensor::from_vec(
            f32s(20 + i as u64, wd.0 * wd.1 * wd.2 * wd.3),
            wd,
            &Device::Cpu,
        )
        .unwrap();
        let b = Tensor::from_vec(f32s(30 + i as u64, wd.0), wd.0, &Device::Cpu).unwrap();
        let x = f32s(40 + i as u64, xd.0 * xd.1 * xd.2 * xd.3);
        let conv =
            |t: &Tensor| conv2d_im2col(t, &w.to_device(t.device())?, &b.to_device(t.device())?, p);
        let (yc, gc) = run(&Device::Cpu, &x, xd, conv);
        let (yg, gg) = run(&dev, &x, xd, conv);
        assert_close(&format!("conv {i} forward"), &yg, &yc, 1e-4);
        assert_close(&format!("conv {i} input gradient"), &gg, &gc, 1e-4);
    }
}

#[cfg(feature = "cudnn")]
type Dims4 = (usize, usize, usize, usize);

/// y and the gradients of x, w and b of sum(conv(x, w, b) * r) on `dev`, where x is a
/// `narrow` of `spare` extra channels (images not contiguous with each other) when spare > 0.
#[cfg(feature = "cudnn")]
fn conv_grads(
    dev: &Device,
    (xd, wd): (Dims4, Dims4),
    p: crate::Conv2d,
    spare: usize,
    seed: u64,
) -> Vec<Vec<f64>> {
    let f32s = |seed: u64, n: usize| -> Vec<f32> {
        Rng::new(seed).vec(n).iter().map(|&v| v as f32).collect()
    };
    let (n, c, h, w) = xd;
    let full = (n, c + spare, h, w);
    let big = Var::from_tensor(
        &Tensor::from_vec(f32s(seed, n * (c + spare) * h * w), full, dev).unwrap(),
    )
    .unwrap();
    let wv = Var::from_tensor(
        &Tensor::from_vec(f32s(seed + 1, wd.0 * wd.1 * wd.2 * wd.3), wd, dev).unwrap(),
    )
    .unwrap();
    let bv = Var::from_tensor(&Tensor::from_vec(f32s(seed + 2, wd.0), wd.0, dev).unwrap()).unwrap();
    let x = big.as_tensor().narrow(1, spare / 2, c).unwrap();
    let y = crate::conv2d(&x, wv.as_tensor(), bv.as_tensor(), p).unwrap();
    let r = Tensor::from_vec(f32s(seed + 3, y.elem_count()), y.shape().clone(), dev).unwrap();
    let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
    let host = |t: &Tensor| {
        to_vec(
            &t.to_device(&Device::Cpu)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap(),
        )
    };
    let mut out = vec![host(&y)];
    for v in [&big, &wv, &bv] {
        out.push(host(grads.get(v.as_tensor()).expect("gradient")));
    }
    out
}

#[cfg(feature = "cudnn")]
#[test]
fn cudnn_conv_matches_cpu() {
    let Some((dev, _serial)) = gpu() else { return };
    // Every kind of BVLC convolution: strided 11x11, grouped padded 5x5, 3x3 pad 1 on a
    // channel slice (an inception branch's input), 7x7 stride 2 with a remainder, 1x1.
    let cases = [
        (((2, 3, 23, 23), (4, 3, 11, 11)), 4, 0, 1, true, 0),
        (((2, 4, 9, 9), (6, 2, 5, 5)), 1, 2, 2, true, 0),
        (((3, 4, 7, 7), (5, 4, 3, 3)), 1, 1, 1, true, 4),
        (((1, 3, 15, 14), (5, 3, 7, 7)), 2, 3, 1, false, 0),
        (((3, 5, 6, 7), (4, 5, 1, 1)), 1, 0, 1, true, 2),
    ];
    for tf32 in [false, true] {
        crate::set_tf32(tf32);
        // TF32 products keep 10 mantissa bits: ~1e-3 relative error on these sums.
        let tol = if tf32 { 1e-2 } else { 1e-4 };
        for (i, (dims, stride, pad, groups, relu, spare)) in cases.into_iter().enumerate() {
            let p = crate::Conv2d {
                stride,
                pad,
                groups,
                relu,
            };
            let cpu = conv_grads(&Device::Cpu, dims, p, spare, 50 + i as u64);
            let gpu = conv_grads(&dev, dims, p, spare, 50 + i as u64);
            for (what, (g, c)) in ["y", "dx", "dw", "db"].iter().zip(gpu.iter().zip(&cpu)) {
                assert_close(&format!("cudnn tf32={tf32} conv {i} {what}"), g, c, tol);
            }
        }
    }
    crate::set_tf32(false);
}

#[test]
fn cuda_sgd_momentum_matches_the_formula() {
    let Some((dev, _serial)) = gpu() else { return };
    let n = 70_001; // not a multiple of a block
    let f32s =
        |seed: u64| -> Vec<f32> { Rng::new(seed).vec(n).iter().map(|&v| v as f32).collect() };
    let (mut w, mut v) = (f32s(1), f32s(2));
    let wt = Tensor::from_vec(w.clone(), n, &dev).unwrap();
    let vt = Tensor::from_vec(v.clone(), n, &dev).unwrap();
    let (m, r, d) = (0.9f32, 0.01f32, 0.0005f32);
    for step in 0..3u64 {
        let g = f32s(10 + step);
        let gt = Tensor::from_vec(g.clone(), n, &dev).unwrap();
        crate::sgd_momentum(&wt, &gt, &vt, m, r, d).unwrap();
        for ((w, v), g) in w.iter_mut().zip(&mut v).zip(&g) {
            *v = m * *v + r * (g + d * *w);
            *w -= *v;
        }
    }
    let host = |t: &Tensor| {
        to_vec(
            &t.to_device(&Device::Cpu)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap(),
        )
    };
    let as64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    assert_close("sgd weights", &host(&wt), &as64(&w), 1e-6);
    assert_close("sgd momentum", &host(&vt), &as64(&v), 1e-6);
}

#[test]
fn cuda_sgd_momentum_all_updates_every_parameter_as_one_at_a_time() {
    let Some((dev, _serial)) = gpu() else { return };
    // More parameters than one launch takes, of sizes from one element to several blocks.
    let sizes: Vec<usize> = (0..45).map(|k| 1 + k * k * 97 + (k % 3) * 70_001).collect();
    let f32s = |seed: u64, n: usize| -> Vec<f32> {
        Rng::new(seed).vec(n).iter().map(|&v| v as f32).collect()
    };
    let put = |v: &[f32]| Tensor::from_vec(v.to_vec(), v.len(), &dev).unwrap();
    let (m, step_rate) = (0.9f32, 0.01f32);
    let (mut ws, mut vs, mut gs, mut want) = (vec![], vec![], vec![], vec![]);
    for (k, &n) in sizes.iter().enumerate() {
        let (w, v, g) = (
            f32s(k as u64, n),
            f32s(100 + k as u64, n),
            f32s(200 + k as u64, n),
        );
        // The one-parameter kernel on copies gives the expected values.
        let (wr, vr) = (put(&w), put(&v));
        let decay = 0.0005 * (k % 2) as f32;
        let rate = step_rate * (1 + k % 2) as f32;
        crate::sgd_momentum(&wr, &put(&g), &vr, m, rate, decay).unwrap();
        want.push((wr, vr));
        ws.push(put(&w));
        vs.push(put(&v));
        gs.push((put(&g), rate, decay));
    }
    let updates: Vec<crate::SgdUpdate> = (0..sizes.len())
        .map(|k| crate::SgdUpdate {
            w: &ws[k],
            g: &gs[k].0,
            v: &vs[k],
            rate: gs[k].1,
            decay: gs[k].2,
        })
        .collect();
    crate::sgd_momentum_all(&updates, m).unwrap();
    let host = |t: &Tensor| t.to_device(&Device::Cpu).unwrap().to_vec1::<f32>().unwrap();
    for k in 0..sizes.len() {
        assert_eq!(host(&ws[k]), host(&want[k].0), "weights of parameter {k}");
        assert_eq!(host(&vs[k]), host(&want[k].1), "momentum of parameter {k}");
    }
}

#[test]
fn cuda_descend_gives_the_cpu_update() {
    let Some((dev, _serial)) = gpu() else { return };
    let n = 1_000_003; // several blocks' grid-stride rounds, not a multiple of a block
    let f32s =
        |seed: u64| -> Vec<f32> { Rng::new(seed).vec(n).iter().map(|&v| v as f32).collect() };
    let (w, g) = (f32s(3), f32s(4));
    let on = |d: &Device| {
        let wt = Tensor::from_vec(w.clone(), n, d).unwrap();
        let gt = Tensor::from_vec(g.clone(), n, d).unwrap();
        crate::descend(&wt, &gt, 0.125).unwrap();
        let host = wt
            .to_device(&Device::Cpu)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        host.iter().map(|&v| v as f64).collect::<Vec<_>>()
    };
    // The GPU may fuse the multiply-add (one rounding less than the CPU's loop).
    assert_close("descend", &on(&dev), &on(&Device::Cpu), 1e-6);
}

#[test]
fn cuda_dropout_gives_the_cpu_mask() {
    let Some((dev, _serial)) = gpu() else { return };
    let n = 100_003;
    let x: Vec<f32> = Rng::new(4).vec(n).iter().map(|&v| v as f32).collect();
    for (p, seed) in [(0.4, 1u64), (0.7, u64::MAX - 3)] {
        let cpu = crate::dropout(
            &Tensor::from_vec(x.clone(), n, &Device::Cpu).unwrap(),
            p,
            seed,
        )
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
        let gpu = crate::dropout(&Tensor::from_vec(x.clone(), n, &dev).unwrap(), p, seed)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(cpu, gpu, "p {p} seed {seed}");
    }
}
