//! The kernels on AlexNet's and GoogLeNet's layer shapes at batch 32, f32, on all cores:
//! `cargo bench -p edgebench-kernels --bench kernels` (a filter such as `-- conv/` or
//! `-- 'conv/fwd/goog 3a'` picks groups or layers; `-- --quick` for a short run).
//! `EDGEBENCH_BENCH_BATCH=1` runs them at another batch (1 takes the per-image splits).
//!
//! Groups:
//! - `conv/{fwd,bwd}/<layer>/<path>`: im2col + GEMM against Winograd F(2x2) and F(4x4) where the
//!   layer is 3x3/stride 1/pad 1; throughput in elements = floating-point operations (so
//!   "Gelem/s" reads GFLOP/s; the backward counts both gradients, twice the forward);
//! - `conv/bwd-filter/<layer>/im2col`: the im2col path's weight gradient alone (as many
//!   floating-point operations as the forward);
//! - `im2col/{im2col,col2im}/<layer>`: one batch's column copies on one thread;
//! - `pool/{fwd,bwd}/<layer>`: max pooling into preallocated outputs, the backward from the
//!   stored argmax; `pool/op/...` through the tensor op (the backward searches each window again);
//! - `lrn/{fwd,bwd}/<layer>`: cross-channel LRN into preallocated outputs;
//! - `linear/{fwd,bwd-data,bwd-weight}/<batch>`: AlexNet's fc6 (9216 -> 4096); throughput in
//!   floating-point operations;
//! - `winograd-filters/{fwd,bwd}/<layer>/<tile>`: the filter transform of a layer's weights and
//!   its adjoint (once per training step whatever the batch); throughput in filter elements;
//! - `winograd-products/{xi-major,tile-major}/<layer>`: a F(4x4) layer's forward products over
//!   one task's images in the kernels' layout and in a channel-vectorised one; throughput in
//!   floating-point operations;
//! - `copy/<layer>`: a parallel copy of the pooling/LRN input, the memory floor of one pass
//!   (those groups' throughput is the input's bytes, comparable with it).

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use edgebench_kernels::bench_api::{self, values, ConvLayer, ConvPath};
use edgebench_kernels::{keep_freed_memory, linear, lrn, pool2d, Conv2d, Lrn, Pool2d, PoolKind};
use rayon::prelude::*;
use std::hint::black_box;
use std::mem::MaybeUninit;
use std::time::Duration;

/// The batch of every layer: 32, or `EDGEBENCH_BENCH_BATCH`.
fn batch() -> usize {
    match std::env::var("EDGEBENCH_BENCH_BATCH") {
        Ok(v) => v
            .parse()
            .ok()
            .filter(|&n: &usize| n > 0)
            .unwrap_or_else(|| panic!("EDGEBENCH_BENCH_BATCH={v}: give a batch of 1 or more")),
        Err(_) => 32,
    }
}

fn conv_layer(x: [usize; 4], w: [usize; 4], stride: usize, pad: usize, groups: usize) -> ConvLayer {
    let p = Conv2d {
        stride,
        pad,
        groups,
        relu: true,
    };
    ConvLayer::new(x, w, p).expect("layer shapes fit")
}

/// (name, layer): GoogLeNet's conv1 and 3x3 layers from the 56x56 map down to 7x7, AlexNet's
/// conv1 to conv3.
fn conv_layers() -> Vec<(&'static str, ConvLayer)> {
    let n = batch();
    let three = |c: usize, h: usize, o: usize| conv_layer([n, c, h, h], [o, c, 3, 3], 1, 1, 1);
    vec![
        (
            "goog conv1 7x7-s2",
            conv_layer([n, 3, 224, 224], [64, 3, 7, 7], 2, 3, 1),
        ),
        ("goog conv2-3x3", three(64, 56, 192)),
        ("goog 3a-3x3", three(96, 28, 128)),
        ("goog 3b-3x3", three(128, 28, 192)),
        ("goog 4a-3x3", three(96, 14, 208)),
        ("goog 4e-3x3", three(160, 14, 320)),
        ("goog 5b-3x3", three(192, 7, 384)),
        (
            "goog 3b-5x5",
            conv_layer([n, 32, 28, 28], [96, 32, 5, 5], 1, 2, 1),
        ),
        (
            "goog 4b-1x1",
            conv_layer([n, 512, 14, 14], [160, 512, 1, 1], 1, 0, 1),
        ),
        (
            "alex conv1 11x11-s4",
            conv_layer([n, 3, 227, 227], [96, 3, 11, 11], 4, 0, 1),
        ),
        (
            "alex conv2 5x5-g2",
            conv_layer([n, 96, 27, 27], [256, 48, 5, 5], 1, 2, 2),
        ),
        ("alex conv3 3x3", three(256, 13, 384)),
    ]
}

fn conv(c: &mut Criterion) {
    keep_freed_memory();
    let paths = [ConvPath::Im2col, ConvPath::Winograd2, ConvPath::Winograd4];
    for (name, layer) in conv_layers() {
        let [nx, nw, nb, ny] = layer.lens();
        let (x, w, b, dy) = (values(nx, 1), values(nw, 2), values(nb, 3), values(ny, 4));
        let flop = layer.forward_flop();
        let mut fwd = c.benchmark_group("conv/fwd");
        // One call per sample: a batch-32 layer takes up to seconds on a board.
        fwd.sampling_mode(SamplingMode::Flat);
        fwd.throughput(Throughput::Elements(flop));
        for path in paths.into_iter().filter(|&p| layer.supports(p)) {
            fwd.bench_with_input(
                BenchmarkId::new(name, path.name()),
                &path,
                |bench, &path| bench.iter(|| layer.fwd(path, &x, &w, &b)),
            );
        }
        fwd.finish();
        let mut bwd = c.benchmark_group("conv/bwd");
        bwd.sampling_mode(SamplingMode::Flat);
        bwd.throughput(Throughput::Elements(2 * flop));
        for path in paths.into_iter().filter(|&p| layer.supports(p)) {
            bwd.bench_with_input(
                BenchmarkId::new(name, path.name()),
                &path,
                |bench, &path| bench.iter(|| layer.bwd(path, &x, &dy, &w)),
            );
        }
        bwd.finish();
        let mut filter = c.benchmark_group("conv/bwd-filter");
        filter.sampling_mode(SamplingMode::Flat);
        filter.throughput(Throughput::Elements(flop));
        filter.bench_function(BenchmarkId::new(name, "im2col"), |bench| {
            bench.iter(|| layer.bwd_filter(&x, &dy))
        });
        filter.finish();
    }
}

fn im2col(c: &mut Criterion) {
    let layers = conv_layers();
    let picked = ["goog conv1 7x7-s2", "alex conv1 11x11-s4", "goog conv2-3x3"];
    let mut group = c.benchmark_group("im2col");
    for (name, layer) in layers.iter().filter(|(n, _)| picked.contains(n)) {
        let x = values(layer.lens()[0], 1);
        let mut col = Vec::new();
        layer.im2col_all(&x, &mut col);
        let id = format!("{name} ({} rows per block)", layer.block_rows());
        group.bench_function(BenchmarkId::new("im2col", &id), |bench| {
            bench.iter(|| layer.im2col_all(&x, &mut col))
        });
        let mut dx = Vec::new();
        group.bench_function(BenchmarkId::new("col2im", &id), |bench| {
            bench.iter(|| layer.col2im_all(&col, &mut dx))
        });
    }
    group.finish();
}

type Dims = (usize, usize, usize, usize);

fn elems(d: Dims) -> usize {
    d.0 * d.1 * d.2 * d.3
}

fn input_bytes(d: Dims) -> Throughput {
    Throughput::Bytes((elems(d) * std::mem::size_of::<f32>()) as u64)
}

fn max_pool(kernel: usize, stride: usize, pad: usize) -> Pool2d {
    Pool2d {
        kind: PoolKind::Max,
        kernel,
        stride,
        pad,
    }
}

fn pool(c: &mut Criterion) {
    keep_freed_memory();
    let cases: [(&str, Dims, Pool2d); 7] = [
        ("goog pool1", (batch(), 64, 112, 112), max_pool(3, 2, 0)),
        ("goog pool2", (batch(), 192, 56, 56), max_pool(3, 2, 0)),
        ("goog 3b-pool", (batch(), 256, 28, 28), max_pool(3, 1, 1)),
        ("goog pool3", (batch(), 480, 28, 28), max_pool(3, 2, 0)),
        ("goog 4d-pool", (batch(), 512, 14, 14), max_pool(3, 1, 1)),
        ("goog pool4", (batch(), 832, 14, 14), max_pool(3, 2, 0)),
        ("alex pool1", (batch(), 96, 55, 55), max_pool(3, 2, 0)),
    ];
    for (name, d, p) in cases {
        let x = values(elems(d), 5);
        let (y, arg) = bench_api::max_pool(p, &x, d);
        let dy = values(y.len(), 6);
        let mut group = c.benchmark_group("pool");
        group.throughput(input_bytes(d));
        let (mut yb, mut ab) = (Vec::with_capacity(y.len()), Vec::with_capacity(y.len()));
        group.bench_function(BenchmarkId::new("fwd", name), |bench| {
            bench.iter(|| {
                bench_api::max_pool_into(p, &x, d, yb.spare_capacity_mut(), ab.spare_capacity_mut())
            })
        });
        let mut dx = Vec::with_capacity(x.len());
        group.bench_function(BenchmarkId::new("bwd", name), |bench| {
            bench.iter(|| {
                let dx = &mut dx.spare_capacity_mut()[..x.len()];
                bench_api::max_pool_bwd_into(d.2 * d.3, &arg, &dy, dx)
            })
        });
        if name == "alex pool1" {
            tensor_ops(&mut group, name, &x, d, |t| pool2d(t, p), p);
        }
        group.finish();
        copy(c, name, &x);
    }
}

/// Forward and backward through the public tensor op (fresh outputs, the backward op's own
/// argmax search for pooling), as training runs it.
fn tensor_ops<Op: candle_core::CustomOp1>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    x: &[f32],
    d: Dims,
    fwd: impl Fn(&candle_core::Tensor) -> candle_core::Result<candle_core::Tensor>,
    op: Op,
) {
    let x = candle_core::Tensor::from_slice(x, d, &candle_core::Device::Cpu).expect("input");
    let y = fwd(&x).expect("forward");
    let dy = y.ones_like().expect("ones");
    group.bench_function(BenchmarkId::new("op-fwd", name), |bench| {
        bench.iter(|| fwd(&x).expect("forward"))
    });
    group.bench_function(BenchmarkId::new("op-bwd", name), |bench| {
        bench.iter(|| op.bwd(&x, &y, &dy).expect("backward"))
    });
}

/// GoogLeNet's largest 3x3 weights on each tile (4e on F(2x2) at 14x14, as at batch 1; 3b on
/// F(4x4) at 28x28) and its largest 5x5 (4e, F(4x4, 5x5)).
fn winograd_filters(c: &mut Criterion) {
    keep_freed_memory();
    let layers: [(&str, usize, usize, usize, usize); 3] = [
        ("goog 4e-3x3", 320, 160, 3, 2),
        ("goog 3b-3x3", 192, 128, 3, 4),
        ("goog 4e-5x5", 128, 32, 5, 4),
    ];
    let mut group = c.benchmark_group("winograd-filters");
    for (name, o, ci, r, m) in layers {
        let oc = o * ci;
        let w = values(oc * r * r, 9);
        let du = values(oc * (m + r - 1) * (m + r - 1), 10);
        let mut dw: Vec<f32> = Vec::with_capacity(oc * r * r);
        let id = format!("{name}/F({m}x{m})");
        group.throughput(Throughput::Elements((oc * r * r) as u64));
        group.bench_function(BenchmarkId::new("fwd", &id), |bench| {
            bench.iter(|| bench_api::winograd_filters(&w, oc, m, r))
        });
        group.bench_function(BenchmarkId::new("bwd", &id), |bench| {
            bench.iter(|| {
                let dw = &mut dw.spare_capacity_mut()[..oc * r * r];
                bench_api::winograd_filter_grads(&du, oc, m, r, dw)
            })
        });
    }
    group.finish();
}

/// The 36 products of a Winograd F(4x4, 3x3) forward over one task's images (batch / threads),
/// block by block, each block's transformed input written just before its products (a copy
/// standing in for the input transform), on one thread, in two layouts:
/// - `xi-major`: the kernels' (V[ξ][c][tile], blocks of about `WINOGRAD_TILES` = 196 tiles,
///   M_ξ = U_ξ · V_ξ in chunks of 40 output channels): the products' vectors run along tiles;
/// - `tile-major`: V[ξ][tile][c] and M[ξ][tile][o] in blocks of 48 tiles, M_ξ = V_ξ · U_ξᵀ: the
///   vectors run along output channels, the layout a blocked channel layout's transforms write.
///
/// Throughput in floating-point operations (the same for both).
fn winograd_products(c: &mut Criterion) {
    keep_freed_memory();
    const XIS: usize = 36;
    // (name, output channels, input channels, F(4x4) tiles per image)
    let layers: [(&str, usize, usize, usize); 3] = [
        ("goog conv2-3x3", 192, 64, 196),
        ("goog 3b-3x3", 192, 128, 49),
        ("goog 4e-3x3", 320, 160, 16),
    ];
    let images = batch().div_ceil(rayon::current_num_threads());
    let mut group = c.benchmark_group("winograd-products");
    for (name, o, ci, per_image) in layers {
        let tiles = images * per_image;
        let flops = 2 * XIS * o * ci * tiles;
        group.throughput(Throughput::Elements(flops as u64));
        let u = values(XIS * o * ci, 11);
        // xi-major: whole images per block, about 196 tiles.
        let ld = per_image * 196usize.div_ceil(per_image).min(images);
        let src = values(XIS * ci * ld, 12);
        let (mut v, mut m) = (vec![0f32; XIS * ci * ld], vec![0f32; XIS * o * ld]);
        group.bench_function(BenchmarkId::new("xi-major", name), |bench| {
            bench.iter(|| {
                for _ in 0..tiles.div_ceil(ld) {
                    v.copy_from_slice(&src);
                    for o0 in (0..o).step_by(40) {
                        let oc = 40.min(o - o0);
                        for xi in 0..XIS {
                            let a = &u[xi * o * ci + o0 * ci..];
                            let b = &v[xi * ci * ld..];
                            let dst = &mut m[xi * o * ld + o0 * ld..];
                            bench_api::product(dst, a, b, (oc, ld, ci));
                        }
                    }
                }
                black_box(&m);
            })
        });
        const BLOCK: usize = 48;
        let ut = values(XIS * ci * o, 13);
        let src = values(XIS * BLOCK * ci, 14);
        let (mut v, mut m) = (vec![0f32; XIS * BLOCK * ci], vec![0f32; XIS * BLOCK * o]);
        group.bench_function(BenchmarkId::new("tile-major", name), |bench| {
            bench.iter(|| {
                for _ in 0..tiles.div_ceil(BLOCK) {
                    v.copy_from_slice(&src);
                    for xi in 0..XIS {
                        let (a, b) = (&v[xi * BLOCK * ci..], &ut[xi * ci * o..]);
                        bench_api::product(&mut m[xi * BLOCK * o..], a, b, (BLOCK, o, ci));
                    }
                }
                black_box(&m);
            })
        });
    }
    group.finish();
}

fn lrn_bench(c: &mut Criterion) {
    keep_freed_memory();
    let p = Lrn {
        size: 5,
        alpha: 1e-4,
        beta: 0.75,
        k: 1.0,
    };
    let cases: [(&str, Dims); 3] = [
        ("goog norm1", (batch(), 64, 56, 56)),
        ("goog norm2", (batch(), 192, 56, 56)),
        ("alex norm1", (batch(), 96, 55, 55)),
    ];
    for (name, d) in cases {
        let len = elems(d);
        let x = values(len, 7);
        let dy = values(len, 8);
        let mut y = Vec::with_capacity(len);
        bench_api::lrn_into(p, &x, d, &mut y.spare_capacity_mut()[..len]);
        // SAFETY: `lrn_into` initialised all `len` elements.
        unsafe { y.set_len(len) };
        let mut group = c.benchmark_group("lrn");
        group.throughput(input_bytes(d));
        let mut out: Vec<f32> = Vec::with_capacity(len);
        group.bench_function(BenchmarkId::new("fwd", name), |bench| {
            bench.iter(|| bench_api::lrn_into(p, &x, d, &mut out.spare_capacity_mut()[..len]))
        });
        group.bench_function(BenchmarkId::new("bwd", name), |bench| {
            bench.iter(|| {
                let dx: &mut [MaybeUninit<f32>] = &mut out.spare_capacity_mut()[..len];
                bench_api::lrn_bwd_into(p, (&x, &y, &dy), d, dx)
            })
        });
        if name == "alex norm1" {
            tensor_ops(&mut group, name, &x, d, |t| lrn(t, p), p);
        }
        group.finish();
        copy(c, name, &x);
    }
}

/// A parallel copy of `x`: the memory floor of a kernel's pass over it.
fn copy(c: &mut Criterion, name: &str, x: &[f32]) {
    let mut group = c.benchmark_group("copy");
    group.throughput(Throughput::Bytes(std::mem::size_of_val(x) as u64));
    let mut dst = vec![0f32; x.len()];
    group.bench_function(name, |bench| {
        bench.iter(|| {
            dst.par_chunks_mut(1 << 16)
                .zip(x.par_chunks(1 << 16))
                .for_each(|(d, s)| d.copy_from_slice(s))
        })
    });
    group.finish();
}

fn linear_bench(c: &mut Criterion) {
    use candle_core::{Device, Tensor};
    keep_freed_memory();
    // AlexNet's fc6.
    let (i, o) = (9216, 4096);
    let w = Tensor::from_vec(values(o * i, 9), (o, i), &Device::Cpu).expect("w");
    let b = Tensor::from_vec(values(o, 10), o, &Device::Cpu).expect("b");
    let mut group = c.benchmark_group("linear");
    for n in [1, 2, 4, 5, 8, 32] {
        let x = Tensor::from_vec(values(n * i, 11), (n, i), &Device::Cpu).expect("x");
        let dy = Tensor::from_vec(values(n * o, 12), (n, o), &Device::Cpu).expect("dy");
        group.throughput(Throughput::Elements(2 * (n * i * o) as u64));
        let id = format!("fc6 batch {n}");
        group.bench_function(BenchmarkId::new("fwd", &id), |bench| {
            bench.iter(|| linear(&x, &w, &b, true).expect("forward"))
        });
        group.bench_function(BenchmarkId::new("bwd-data", &id), |bench| {
            bench.iter(|| bench_api::linear_bwd_data(&dy, &w).expect("dx"))
        });
        group.bench_function(BenchmarkId::new("bwd-weight", &id), |bench| {
            bench.iter(|| bench_api::linear_bwd_weight(&dy, &x).expect("dW"))
        });
        // candle's own dyᵀ·x, for comparison.
        group.bench_function(BenchmarkId::new("bwd-weight-candle", &id), |bench| {
            bench.iter(|| black_box(dy.t().and_then(|t| t.matmul(&x)).expect("dW")))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // Short runs (each call takes milliseconds to seconds): the whole bench stays within
    // minutes on a board. Command-line options (`--quick`, `--sample-size`, ...) override these.
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = conv, im2col, winograd_filters, winograd_products, pool, lrn_bench, linear_bench
}
criterion_main!(benches);
