//! `log_products` times each matrix product by shape and call site: the log holds exactly the
//! products `product_flops` counts while it is on, names the kernel lines that asked for them,
//! and holds nothing from while it is off. One test in its own process, as the log is the
//! process's.

mod common;

use common::var;
use edgebench_kernels::{
    conv2d, linear, log_products, product_flops, take_logged_products, Conv2d,
};

/// A stride-2 3x3 convolution (im2col on every CPU) and a fully connected layer at 64 rows
/// (GEMM), forward and backward.
fn layers() {
    let p = Conv2d {
        stride: 2,
        pad: 1,
        groups: 1,
        relu: true,
    };
    let (x, w, b) = (var(&[2, 3, 9, 9], 1), var(&[4, 3, 3, 3], 2), var(&[4], 3));
    let y = conv2d(x.as_tensor(), &w, &b, p).unwrap();
    drop(y.sum_all().unwrap().backward().unwrap());
    let (x, w, b) = (var(&[64, 48], 4), var(&[20, 48], 5), var(&[20], 6));
    let y = linear(x.as_tensor(), &w, &b, false).unwrap();
    drop(y.sum_all().unwrap().backward().unwrap());
}

#[test]
fn the_log_holds_the_counted_products_by_call_site() {
    layers();
    assert!(
        take_logged_products().is_empty(),
        "products were logged before logging started"
    );

    log_products(true);
    let before = product_flops();
    layers();
    let counted = product_flops() - before;
    log_products(false);
    layers();
    let shapes = take_logged_products();

    let logged: f64 = shapes.iter().map(|p| p.flops()).sum();
    assert_eq!(logged, counted as f64, "{shapes:#?}");
    for p in &shapes {
        let (file, line) = p.site.split_once(':').expect("file:line");
        assert!(
            ["conv.rs", "linear.rs", "winograd.rs"].contains(&file),
            "{p:?}: a product's site is the kernel that asked for it"
        );
        assert!(line.parse::<u32>().unwrap() > 0, "{p:?}");
        assert!(p.calls > 0 && p.seconds > 0.0 && p.threads >= 1, "{p:?}");
    }
    // Both layers; the convolution's products (forward, weight and input gradients) each have
    // its 4 filters and 27 taps among their dimensions.
    assert!(shapes.iter().any(|p| p.site.starts_with("conv.rs")));
    for p in shapes.iter().filter(|p| p.site.starts_with("conv.rs")) {
        let dims = [p.m, p.n, p.k];
        assert!(dims.contains(&4) && dims.contains(&27), "{p:?}");
    }
    assert!(shapes.iter().any(|p| p.site.starts_with("linear.rs")));
    assert!(shapes.windows(2).all(|w| w[0].seconds >= w[1].seconds));
    assert!(take_logged_products().is_empty(), "taking empties the log");

    // Starting again clears what an earlier start left.
    log_products(true);
    layers();
    log_products(true);
    let before = product_flops();
    layers();
    let counted = product_flops() - before;
    log_products(false);
    let again: f64 = take_logged_products().iter().map(|p| p.flops()).sum();
    assert_eq!(again, counted as f64);
}
