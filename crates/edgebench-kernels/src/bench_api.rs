//! Slice-level entry points for the criterion benches (`benches/kernels.rs`). The public ops pick
//! a convolution path by layer shape and `Tuning` (fixed per process), so a bench that compares
//! im2col with both Winograd tiles in one run calls the paths here directly; the pooling and LRN
//! kernels write into preallocated outputs, so the benches time the kernels, not page faults.
//! Not part of the crate's API: hidden from the docs and free to change with the benches.

use crate::conv;
use crate::geom::{Conv2d, Geom};
use crate::lrn::Lrn;
use crate::pool::{self, Pool2d};
use crate::winograd;
use candle_core::{Result, Tensor};
use std::mem::MaybeUninit;

/// Which convolution kernel computes a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvPath {
    /// im2col + GEMM (every layer shape).
    Im2col,
    /// Winograd F(2x2, 3x3) (3x3, stride 1, pad 1) or F(2x2, 5x5) (5x5, stride 1, pad 2).
    Winograd2,
    /// Winograd F(4x4, 3x3) (3x3, stride 1, pad 1) or F(4x4, 5x5) (5x5, stride 1, pad 2).
    Winograd4,
}

impl ConvPath {
    /// A short name for bench ids.
    pub fn name(self) -> &'static str {
        match self {
            ConvPath::Im2col => "im2col",
            ConvPath::Winograd2 => "winograd-f2",
            ConvPath::Winograd4 => "winograd-f4",
        }
    }
}

/// One convolution layer's geometry, in f32.
#[derive(Debug, Clone, Copy)]
pub struct ConvLayer {
    g: Geom,
    relu: bool,
}

impl ConvLayer {
    /// x: (N, C, H, W), w: (O, C / groups, KH, KW); errors as `conv2d` does on shapes that do
    /// not fit.
    pub fn new(x: [usize; 4], w: [usize; 4], p: Conv2d) -> Result<ConvLayer> {
        Ok(ConvLayer {
            g: Geom::new(&x, &w, &w[..1], p)?,
            relu: p.relu,
        })
    }

    /// Elements of x, w, b and y (or dy).
    pub fn lens(&self) -> [usize; 4] {
        let g = &self.g;
        [
            g.n * g.c * g.h * g.w,
            g.o * (g.c / g.groups) * g.kh * g.kw,
            g.o,
            g.n * g.o * g.ho * g.wo,
        ]
    }

    /// Multiply-adds of the forward, counted as two floating-point operations each (the
    /// backward's two gradients are twice this).
    pub fn forward_flop(&self) -> u64 {
        let g = &self.g;
        2 * (g.n * g.o * g.ho * g.wo * (g.c / g.groups) * g.kh * g.kw) as u64
    }

    /// Whether `path` computes this layer.
    pub fn supports(&self, path: ConvPath) -> bool {
        path == ConvPath::Im2col || winograd::tile_fits(&self.g, Self::tile(path))
    }

    fn tile(path: ConvPath) -> usize {
        if path == ConvPath::Winograd4 {
            4
        } else {
            2
        }
    }

    /// y = conv(x, w) + b (ReLU'd as the layer says) through `path`.
    pub fn fwd(&self, path: ConvPath, x: &[f32], w: &[f32], b: &[f32]) -> Vec<f32> {
        assert!(self.supports(path), "{path:?} does not fit {:?}", self.g);
        let x = (x, self.g.c * self.g.h * self.g.w);
        match path {
            ConvPath::Im2col => conv::fwd_im2col(x, w, b, &self.g, self.relu),
            _ => winograd::fwd_with(x, w, b, &self.g, self.relu, Self::tile(path)).0,
        }
    }

    /// Both gradients of the convolution (without the ReLU mask) through `path`, dx and
    /// [dW | db]: im2col's two passes, or Winograd's single pass that yields both.
    pub fn bwd(&self, path: ConvPath, x: &[f32], dy: &[f32], w: &[f32]) -> (Vec<f32>, Vec<f32>) {
        assert!(self.supports(path), "{path:?} does not fit {:?}", self.g);
        let x = (x, self.g.c * self.g.h * self.g.w);
        match path {
            ConvPath::Im2col => (
                conv::bwd_data_im2col(dy, w, &self.g),
                conv::bwd_filter_im2col(x, dy, &self.g),
            ),
            _ => winograd::bwd_both_with(x, dy, w, None, &self.g, Self::tile(path)),
        }
    }

    /// The im2col path's weight gradient alone, [dW | db] (without the ReLU mask).
    pub fn bwd_filter(&self, x: &[f32], dy: &[f32]) -> Vec<f32> {
        let x = (x, self.g.c * self.g.h * self.g.w);
        conv::bwd_filter_im2col(x, dy, &self.g)
    }

    /// im2col of every image of `x`, block of output rows by block, into one block's scratch
    /// (on the calling thread, as each convolution task does).
    pub fn im2col_all(&self, x: &[f32], col: &mut Vec<f32>) {
        let g = &self.g;
        col.resize(g.col_len(1), 0.0);
        for image in x.chunks_exact(g.c * g.h * g.w) {
            for rows in g.row_blocks(1) {
                let ld = rows.len() * g.wo;
                g.im2col(image, col, ld, 0, rows);
            }
        }
    }

    /// col2im (im2col's adjoint) of one block's columns into one image's input gradient, once
    /// per image and block, on the calling thread.
    pub fn col2im_all(&self, col: &[f32], dx: &mut Vec<f32>) {
        let g = &self.g;
        dx.resize(g.c * g.h * g.w, 0.0);
        for _ in 0..g.n {
            for rows in g.row_blocks(1) {
                let ld = rows.len() * g.wo;
                g.col2im(col, dx, ld, 0, rows);
            }
        }
    }

    /// Output rows per im2col block.
    pub fn block_rows(&self) -> usize {
        self.g.block_rows(1)
    }
}

/// Winograd's filter transform of `oc` filters (`r` x `r` each) for output tiles of `m` x `m`:
/// the transformed filters, tile position by tile position, as the forward computes them.
pub fn winograd_filters(w: &[f32], oc: usize, m: usize, r: usize) -> Vec<f32> {
    winograd::transform_filters(w, oc, m, r)
}

/// Its adjoint, from the transformed filters' gradient `du` into `dw` (`oc` filters of r x r),
/// as the backward computes the weight gradient.
pub fn winograd_filter_grads(
    du: &[f32],
    oc: usize,
    m: usize,
    r: usize,
    dw: &mut [MaybeUninit<f32>],
) {
    winograd::filter_grads(du, oc, m, r, dw)
}

/// Max pooling of `x` (N, C, H, W) with each output's argmax, as the op's forward computes them.
pub fn max_pool(p: Pool2d, x: &[f32], dims: (usize, usize, usize, usize)) -> (Vec<f32>, Vec<u32>) {
    p.max_fwd(x, dims)
}

/// `max_pool` into preallocated outputs (at least N·C·OH·OW elements each).
pub fn max_pool_into(
    p: Pool2d,
    x: &[f32],
    dims: (usize, usize, usize, usize),
    y: &mut [MaybeUninit<f32>],
    arg: &mut [MaybeUninit<u32>],
) {
    p.max_fwd_into(x, pool::MaxGeom::new(&p, dims.2, dims.3), y, arg)
}

/// The max-pool input gradient from the stored argmax, into `dx` (one input plane of `plane`
/// elements per plane of `arg`).
pub fn max_pool_bwd_into(plane: usize, arg: &[u32], dy: &[f32], dx: &mut [MaybeUninit<f32>]) {
    pool::max_scatter_into(plane, arg, dy, dx)
}

/// LRN forward into `y` (N·C·H·W elements).
pub fn lrn_into(p: Lrn, x: &[f32], dims: (usize, usize, usize, usize), y: &mut [MaybeUninit<f32>]) {
    p.fwd_into(x, dims, y)
}

/// LRN input gradient into `dx`, from the forward's input `x` and output `y`.
pub fn lrn_bwd_into(
    p: Lrn,
    (x, y, dy): (&[f32], &[f32], &[f32]),
    dims: (usize, usize, usize, usize),
    dx: &mut [MaybeUninit<f32>],
) {
    p.bwd_into(x, y, dy, dims, dx)
}

/// The fully connected layer's input gradient dx = dy · W.
pub fn linear_bwd_data(dy: &Tensor, w: &Tensor) -> Result<Tensor> {
    dy.apply_op2_no_bwd(w, &crate::linear::LinearBwd::Data)
}

/// The fully connected layer's weight gradient dW = dyᵀ · x.
pub fn linear_bwd_weight(dy: &Tensor, x: &Tensor) -> Result<Tensor> {
    dy.apply_op2_no_bwd(x, &crate::linear::LinearBwd::Weight)
}

/// Deterministic inputs in [-1, 1) (xorshift), so runs compare.
pub fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// C (m x n) = A (m x k) · B (k x n), all row-major, on the calling thread: the product call the
/// convolutions make (`matmul::gemm`).
pub fn product(c: &mut [f32], a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize)) {
    crate::matmul::gemm(
        (m, n, k),
        c,
        false,
        a,
        (k, 1),
        b,
        (n, 1),
        crate::matmul::SERIAL,
    );
}
