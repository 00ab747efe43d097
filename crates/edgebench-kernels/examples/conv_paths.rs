//! Alternating comparison of the convolution paths on one layer, for a machine whose speed
//! drifts (a shared VM): each round runs every path once, forward then backward, so a slow
//! spell hits all paths alike; prints each path's minimum and median over the rounds.
//!
//! `cargo run --release -p edgebench-kernels --example conv_paths -- BATCH C SIDE O [ROUNDS
//! [GROUPS [KERNEL]]]` (a KERNEL x KERNEL, stride 1, "same" layer on a SIDE x SIDE map; one
//! group and 3x3 by default).

use edgebench_kernels::bench_api::{values, ConvLayer, ConvPath};
use edgebench_kernels::{keep_freed_memory, Conv2d};
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .expect("arguments are numbers: BATCH C SIDE O [ROUNDS [GROUPS [KERNEL]]]")
        })
        .collect();
    let [n, c, side, o] = args[..4] else {
        panic!("usage: conv_paths BATCH C SIDE O [ROUNDS [GROUPS [KERNEL]]]");
    };
    let rounds = args.get(4).copied().unwrap_or(20);
    let groups = args.get(5).copied().unwrap_or(1);
    let k = args.get(6).copied().unwrap_or(3);
    keep_freed_memory();
    let p = Conv2d {
        stride: 1,
        pad: k / 2,
        groups,
        relu: true,
    };
    let w = [o, c / groups.max(1), k, k];
    let layer = ConvLayer::new([n, c, side, side], w, p).expect("layer fits");
    let [lx, lw, lb, ly] = layer.lens();
    let (x, w, b, dy) = (values(lx, 1), values(lw, 2), values(lb, 3), values(ly, 4));
    let paths: Vec<ConvPath> = [ConvPath::Im2col, ConvPath::Winograd2, ConvPath::Winograd4]
        .into_iter()
        .filter(|&path| layer.supports(path))
        .collect();
    let mut times = vec![(Vec::new(), Vec::new()); paths.len()];
    for _ in 0..rounds + 1 {
        for (path, (fwd, bwd)) in paths.iter().zip(&mut times) {
            let t = Instant::now();
            std::hint::black_box(layer.fwd(*path, &x, &w, &b));
            fwd.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            std::hint::black_box(layer.bwd(*path, &x, &dy, &w));
            bwd.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    println!("batch {n}, {c} -> {o} channels in {groups} group(s), {k}x{k} on {side}x{side}, {rounds} rounds, {} threads: min / median ms", rayon::current_num_threads());
    for (path, (fwd, bwd)) in paths.iter().zip(&mut times) {
        let stat = |v: &mut Vec<f64>| {
            v.remove(0);
            v.sort_by(f64::total_cmp);
            format!("{:7.3} / {:7.3}", v[0], v[v.len() / 2])
        };
        println!("{:12} fwd {}   bwd {}", path.name(), stat(fwd), stat(bwd));
    }
}
