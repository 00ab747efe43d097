//! `product_flops` counts every matrix product of the convolutions and fully connected layers
//! once, as 2·m·n·k: a layer's forward and backward add exactly the multiply-adds of its
//! definition (paths that multiply less, such as Winograd's, are kept out by the shapes). One
//! test in its own process, so no other test's products land in the counter.

mod common;

use candle_core::Tensor;
use common::var;
use edgebench_kernels::{conv2d, linear, product_flops, Conv2d};

/// The products counted while `f` runs.
fn counted(f: impl FnOnce()) -> u64 {
    let before = product_flops();
    f();
    product_flops() - before
}

/// The products counted in a layer's forward (`forward`) and in the backward from its output's
/// sum.
fn counted_both_ways(forward: impl FnOnce() -> Tensor) -> (u64, u64) {
    let mut y = None;
    let fwd = counted(|| y = Some(forward()));
    let y = y.expect("the forward ran");
    let bwd = counted(|| drop(y.sum_all().unwrap().backward().unwrap()));
    (fwd, bwd)
}

#[test]
fn every_product_of_a_layer_is_counted_once() {
    let p = |pad| Conv2d {
        stride: 1,
        pad,
        groups: 1,
        relu: true,
    };
    // (N, C, H, W), O, kernel side, pad: a 1x1 layer and a 3x3 one on maps too small for the
    // Winograd path on any CPU.
    for (n, c, h, o, k, pad) in [(2, 8, 5, 6, 1, 0), (2, 3, 6, 4, 3, 1), (1, 5, 4, 7, 3, 1)] {
        let (x, w, b) = (var(&[n, c, h, h], 1), var(&[o, c, k, k], 2), var(&[o], 3));
        let direct = 2 * (o * c * k * k * h * h * n) as u64;
        let (forward, backward) =
            counted_both_ways(|| conv2d(x.as_tensor(), &w, &b, p(pad)).unwrap());
        let layer = format!("{n}x{c}x{h}x{h} * {o}x{c}x{k}x{k}");
        assert_eq!(forward, direct, "forward of {layer}");
        // The input and weight gradients: one product each as large as the forward.
        assert_eq!(backward, 2 * direct, "backward of {layer}");
    }
    // A fully connected layer at a few rows (streaming loops) and at many (GEMM).
    for rows in [1, 2, 64] {
        let (i, o) = (48, 20);
        let (x, w, b) = (var(&[rows, i], 4), var(&[o, i], 5), var(&[o], 6));
        let direct = 2 * (rows * i * o) as u64;
        let (forward, backward) =
            counted_both_ways(|| linear(x.as_tensor(), &w, &b, false).unwrap());
        assert_eq!(forward, direct, "fully connected forward, {rows} rows");
        assert_eq!(
            backward,
            2 * direct,
            "fully connected backward, {rows} rows"
        );
    }
}
