//! The networks are the BVLC definitions: parameter counts, every stage's output shape (by
//! inference and by running the candle graph), and gradients reaching every parameter.

use crate::common::{edgebench, results};
use candle_core::{Device, Tensor};
use edgebench::models::{self, ConvImpl, Network};
use edgebench::train::{data::Dataset, sgd::Sgd};
use rand::SeedableRng;

fn stages(net: &str) -> Vec<(String, [usize; 3])> {
    models::by_name(net)
        .unwrap()
        .summary()
        .stages
        .into_iter()
        .map(|s| (s.name, s.output))
        .collect()
}

#[test]
fn alexnet_parameter_count_and_macs() {
    let s = models::by_name("alexnet").unwrap().summary();
    assert_eq!(s.params, 60_965_224);
    assert_eq!(s.params_without_aux, 60_965_224);
    // ~0.72 G multiply-adds per image with the grouped convolutions
    assert!(
        (s.forward_macs as f64 / 1e9 - 0.72).abs() < 0.02,
        "{}",
        s.forward_macs
    );
}

#[test]
fn googlenet_parameter_count_and_macs() {
    let s = models::by_name("googlenet").unwrap().summary();
    assert_eq!(s.params, 13_378_280);
    assert_eq!(s.params_without_aux, 6_998_552);
    assert!(
        (s.forward_macs_without_aux as f64 / 1e9 - 1.5).abs() < 0.1,
        "{}",
        s.forward_macs_without_aux
    );
    assert_eq!(s.aux_heads.len(), 2);
    assert!(s.aux_heads.iter().all(|a| a.loss_weight == 0.3));
}

#[test]
fn alexnet_stage_shapes() {
    let expected: Vec<(&str, [usize; 3])> = vec![
        ("conv1", [96, 55, 55]),
        ("norm1", [96, 55, 55]),
        ("pool1", [96, 27, 27]),
        ("conv2", [256, 27, 27]),
        ("norm2", [256, 27, 27]),
        ("pool2", [256, 13, 13]),
        ("conv3", [384, 13, 13]),
        ("conv4", [384, 13, 13]),
        ("conv5", [256, 13, 13]),
        ("pool5", [256, 6, 6]),
        ("fc6", [4096, 1, 1]),
        ("drop6", [4096, 1, 1]),
        ("fc7", [4096, 1, 1]),
        ("drop7", [4096, 1, 1]),
        ("fc8", [1000, 1, 1]),
    ];
    let got = stages("alexnet");
    assert_eq!(got.len(), expected.len());
    for ((name, shape), (en, es)) in got.iter().zip(&expected) {
        assert_eq!((name.as_str(), *shape), (*en, *es));
    }
}

#[test]
fn googlenet_stage_shapes_use_ceil_pooling() {
    let expected: Vec<(&str, [usize; 3])> = vec![
        ("conv1/7x7_s2", [64, 112, 112]),
        ("pool1/3x3_s2", [64, 56, 56]),
        ("pool1/norm1", [64, 56, 56]),
        ("conv2/3x3_reduce", [64, 56, 56]),
        ("conv2/3x3", [192, 56, 56]),
        ("conv2/norm2", [192, 56, 56]),
        ("pool2/3x3_s2", [192, 28, 28]),
        ("inception_3a", [256, 28, 28]),
        ("inception_3b", [480, 28, 28]),
        ("pool3/3x3_s2", [480, 14, 14]),
        ("inception_4a", [512, 14, 14]),
        ("inception_4b", [512, 14, 14]),
        ("inception_4c", [512, 14, 14]),
        ("inception_4d", [528, 14, 14]),
        ("inception_4e", [832, 14, 14]),
        ("pool4/3x3_s2", [832, 7, 7]),
        ("inception_5a", [832, 7, 7]),
        ("inception_5b", [1024, 7, 7]),
        ("pool5/7x7_s1", [1024, 1, 1]),
        ("pool5/drop_7x7_s1", [1024, 1, 1]),
        ("loss3/classifier", [1000, 1, 1]),
    ];
    let got = stages("googlenet");
    assert_eq!(got.len(), expected.len());
    for ((name, shape), (en, es)) in got.iter().zip(&expected) {
        assert_eq!((name.as_str(), *shape), (*en, *es));
    }
    let s = models::by_name("googlenet").unwrap().summary();
    for (aux, input_c) in s.aux_heads.iter().zip([512, 528]) {
        let shapes: Vec<[usize; 3]> = aux.stages.iter().map(|s| s.output).collect();
        assert_eq!(
            shapes,
            vec![
                [input_c, 4, 4],
                [128, 4, 4],
                [1024, 1, 1],
                [1024, 1, 1],
                [1000, 1, 1]
            ]
        );
    }
}

/// The candle graph produces exactly the inferred shapes, holds exactly the counted
/// parameters, and backward reaches every one of them (aux heads included).
fn check_graph(name: &str) {
    let spec = models::by_name(name).unwrap();
    let dev = Device::Cpu;
    let net = Network::new(spec, &dev, 3).unwrap();
    assert_eq!(net.param_count(), spec.summary().params);
    let [c, h, w] = spec.input;
    let x = Tensor::randn(0f32, 50.0, (2, c, h, w), &dev).unwrap();
    let mut trace = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let out = net.forward(&x, Some(&mut rng), Some(&mut trace)).unwrap();
    let inferred = stages(name);
    assert_eq!(trace.len(), inferred.len());
    for ((tn, dims), (n, [c, h, w])) in trace.iter().zip(&inferred) {
        assert_eq!(tn, n);
        let expect = if *h == 1 && *w == 1 && dims.len() == 2 {
            vec![2, *c]
        } else {
            vec![2, *c, *h, *w]
        };
        assert_eq!(dims, &expect, "{n}");
    }
    assert_eq!(out.aux.len(), spec.aux.len());
    let labels = Tensor::new(&[0u32, 1], &dev).unwrap();
    let loss = net.loss(&out, &labels).unwrap();
    let l = loss.to_scalar::<f32>().unwrap();
    // Fresh weights: the main classifier is near chance, ln(1000). (GoogLeNet's auxiliary heads
    // start higher: dropout 0.7 scales their activations by 1/0.3.)
    let main = candle_nn::loss::cross_entropy(&out.logits, &labels)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!((main - 1000f32.ln()).abs() < 1.0, "main loss {main}");
    assert!(l.is_finite() && l >= main, "loss {l}");
    let grads = loss.backward().unwrap();
    for p in net.params() {
        let g = grads
            .get(p.var.as_tensor())
            .unwrap_or_else(|| panic!("no gradient for {}", p.name));
        assert_eq!(g.dims(), p.var.dims(), "{}", p.name);
    }
    // Eval graph: no aux heads, no dropout, deterministic
    let a = net.forward(&x, None, None).unwrap();
    let b = net.forward(&x, None, None).unwrap();
    assert!(a.aux.is_empty());
    let diff = (a.logits - b.logits)
        .unwrap()
        .abs()
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert_eq!(diff, 0.0);
}

#[test]
fn alexnet_graph_matches_spec_and_backprops() {
    check_graph("alexnet");
}

#[test]
fn googlenet_graph_matches_spec_and_backprops() {
    check_graph("googlenet");
}

#[test]
fn initialisation_follows_bvlc_fillers() {
    let spec = models::by_name("alexnet").unwrap();
    let net = Network::new(spec, &Device::Cpu, 11).unwrap();
    let get = |name: &str| {
        net.params()
            .iter()
            .find(|p| p.name == name)
            .unwrap()
            .var
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let std = |v: &[f32]| {
        let n = v.len() as f64;
        let m = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        (v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / n).sqrt()
    };
    assert!((std(&get("conv1/weight")) - 0.01).abs() < 0.0005);
    assert!((std(&get("fc6/weight")) - 0.005).abs() < 0.0001);
    assert!(get("conv2/bias").iter().all(|&b| b == 0.1));
    assert!(get("fc8/bias").iter().all(|&b| b == 0.0));
    let bias = net
        .params()
        .iter()
        .find(|p| p.name == "conv2/bias")
        .unwrap();
    assert_eq!((bias.lr_mult, bias.decay_mult), (2.0, 0.0));

    let g = models::by_name("googlenet").unwrap();
    let net = Network::new(g, &Device::Cpu, 11).unwrap();
    let w = net
        .params()
        .iter()
        .find(|p| p.name == "inception_3a/3x3/weight")
        .unwrap();
    let v = w
        .var
        .as_tensor()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let bound = (3.0f32 / (96.0 * 9.0)).sqrt(); // xavier: fan_in = 96 channels x 3x3
    assert!(v.iter().all(|x| x.abs() <= bound));
    assert!(v.iter().any(|x| x.abs() > 0.9 * bound));
    // same seed, same weights
    let again = Network::new(g, &Device::Cpu, 11).unwrap();
    let w2 = again
        .params()
        .iter()
        .find(|p| p.name == "inception_3a/3x3/weight")
        .unwrap();
    assert_eq!(
        v,
        w2.var
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    );
}

/// Loss curve and final weights of `steps` SGD steps at batch 2 from the same seed and data.
fn train_curve(net: &str, conv: ConvImpl, steps: usize, nudge: f64) -> (Vec<f64>, Vec<Vec<f32>>) {
    let spec = models::by_name(net).unwrap();
    let mut network = Network::new(spec, &Device::Cpu, 5).unwrap();
    network.set_conv_impl(conv);
    let conv_weights = |network: &Network| -> Vec<Vec<f32>> {
        network
            .params()
            .iter()
            .filter(|p| p.name.ends_with("weight") && p.var.dims().len() == 4)
            .map(|p| p.var.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
            .collect()
    };
    let initial = conv_weights(&network);
    let data = Dataset::synthetic(3, 1000, 64);
    let mut sgd = Sgd::new(spec.solver, network.params(), 100).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(6);
    let [c, h, w] = spec.input;
    let mut losses = Vec::new();
    for step in 0..steps {
        let b = data.batch(step * 2, 2, [c, h, w]).unwrap();
        let x = (Tensor::from_vec(b.images, (2, c, h, w), &Device::Cpu).unwrap() * nudge).unwrap();
        let y = Tensor::from_vec(b.labels, 2, &Device::Cpu).unwrap();
        let out = network.forward(&x, Some(&mut rng), None).unwrap();
        let loss = network.loss(&out, &y).unwrap();
        let grads = loss.backward().unwrap();
        sgd.step(step, network.params(), &grads).unwrap();
        losses.push(loss.to_scalar::<f32>().unwrap() as f64);
    }
    // What training changed in every conv weight.
    let moved = conv_weights(&network)
        .into_iter()
        .zip(initial)
        .map(|(w, w0)| w.iter().zip(w0).map(|(a, b)| a - b).collect())
        .collect();
    (losses, moved)
}

fn rel_norm_diff(a: &[f32], b: &[f32]) -> f64 {
    let norm = |v: &mut dyn Iterator<Item = f32>| v.map(|x| (x as f64).powi(2)).sum::<f64>().sqrt();
    norm(&mut a.iter().zip(b).map(|(x, y)| x - y)) / norm(&mut b.iter().copied()).max(1e-30)
}

/// How far `ours` is from `reference`, against how far `nudged` (the reference with its input
/// scaled by 1 + 1e-6, i.e. float noise) is: max-pool argmaxes among near-equal activations
/// (BVLC init: bias 0.1 dominates) flip under any reordering of float sums, and move the
/// gradients below the pool by ~0.3 % in candle alone.
/// `nudged`: the reference recomputed from inputs scaled by 1 + ε, one set per ε. The float
/// noise yardstick is the largest distance any of them lands from the reference: one nudge
/// alone may happen to flip no ReLU/max-pool choice (it depends on the GEMM kernel's rounding).
fn compare_to_noise(
    ours: &[Vec<f32>],
    reference: &[Vec<f32>],
    nudged: &[Vec<Vec<f32>>],
    what: &str,
) {
    assert_eq!(ours.len(), reference.len());
    for (i, (a, r)) in ours.iter().zip(reference).enumerate() {
        let d = rel_norm_diff(a, r);
        let noise = nudged
            .iter()
            .map(|n| rel_norm_diff(&n[i], r))
            .fold(0.0, f64::max);
        println!("{what} {i}: differs by {d:.2e} of its norm (float-noise yardstick {noise:.2e})");
        // 1 % floor: a single ReLU/argmax flip in a layer with a small gradient (GoogLeNet's
        // 5x5_reduce convs) moves it by ~0.3 % even where one nudge happened to flip nothing.
        assert!(
            d <= (4.0 * noise).max(1e-2),
            "{what} {i}: differs by {d:.2e}, float noise moves it by {noise:.2e}"
        );
    }
}

/// The GEMM convolution trains like candle's own: same loss curve and conv weight updates
/// after a few SGD steps, up to float noise.
fn check_training_matches_candle(net: &str, steps: usize) {
    let (ours, w_ours) = train_curve(net, ConvImpl::Gemm, steps, 1.0);
    let (reference, w_ref) = train_curve(net, ConvImpl::Candle, steps, 1.0);
    // Several steps of SGD amplify a flipped choice chaotically: nudge twice, at two scales.
    let w_nudged: Vec<Vec<Vec<f32>>> = [1.0 + 1e-6, 1.0 - 1e-4]
        .iter()
        .map(|&scale| train_curve(net, ConvImpl::Candle, steps, scale).1)
        .collect();
    println!("{net}: gemm {ours:?}\n{net}: candle {reference:?}");
    assert!(
        ours.windows(2).any(|w| w[0] != w[1]),
        "loss does not move: {ours:?}"
    );
    for (a, b) in ours.iter().zip(&reference) {
        assert!(
            (a - b).abs() < 1e-3 * b.abs().max(1.0),
            "{ours:?} vs {reference:?}"
        );
    }
    compare_to_noise(&w_ours, &w_ref, &w_nudged, "conv weight update");
}

#[test]
fn alexnet_training_matches_candle_conv() {
    check_training_matches_candle("alexnet", 4);
}

#[test]
fn googlenet_training_matches_candle_conv() {
    check_training_matches_candle("googlenet", 2);
}

/// One backward pass: every parameter's gradient agrees with candle's conv's in norm.
fn check_gradients_match_candle(net: &str) {
    let spec = models::by_name(net).unwrap();
    let data = Dataset::synthetic(3, 1000, 64);
    let [c, h, w] = spec.input;
    let b = data.batch(0, 2, [c, h, w]).unwrap();
    let x = Tensor::from_vec(b.images, (2, c, h, w), &Device::Cpu).unwrap();
    let y = Tensor::from_vec(b.labels, 2, &Device::Cpu).unwrap();
    let grads = |conv, x: &Tensor| {
        let mut network = Network::new(spec, &Device::Cpu, 5).unwrap();
        network.set_conv_impl(conv);
        let mut rng = rand::rngs::StdRng::seed_from_u64(6);
        let out = network.forward(x, Some(&mut rng), None).unwrap();
        let g = network.loss(&out, &y).unwrap().backward().unwrap();
        network
            .params()
            .iter()
            .map(|p| {
                let v: Vec<f32> = g
                    .get(p.var.as_tensor())
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1()
                    .unwrap();
                (p.name.clone(), v)
            })
            .collect::<Vec<_>>()
    };
    let (ours, reference) = (grads(ConvImpl::Gemm, &x), grads(ConvImpl::Candle, &x));
    let nudged = grads(ConvImpl::Candle, &(&x * (1.0 + 1e-6)).unwrap());
    let names: Vec<&str> = ours.iter().map(|(n, _)| n.as_str()).collect();
    let strip = |v: &[(String, Vec<f32>)]| v.iter().map(|(_, g)| g.clone()).collect::<Vec<_>>();
    println!("parameters: {names:?}");
    compare_to_noise(
        &strip(&ours),
        &strip(&reference),
        &[strip(&nudged)],
        "gradient",
    );
}

#[test]
fn alexnet_gradients_match_candle_conv() {
    check_gradients_match_candle("alexnet");
}

#[test]
fn googlenet_gradients_match_candle_conv() {
    check_gradients_match_candle("googlenet");
}

/// The vendored candle's `narrow` backward (vendor/candle-core/PATCHED.md, change 4) writes the
/// gradients of disjoint narrows of one tensor into one buffer instead of padding and adding
/// each: the gradient must still be the sum of every use, with zeros where no narrow reads,
/// when narrows overlap, and when the tensor is also used whole.
#[test]
fn narrow_gradients_sum_every_use() {
    let dev = Device::Cpu;
    let (n, c, h) = (2usize, 7usize, 3usize);
    let len = n * c * h;
    let x = candle_core::Var::from_vec((0..len).map(|i| i as f32 * 0.1).collect(), (n, c, h), &dev)
        .unwrap();
    // Weights that tell every use apart: w_k[i] = k * 1000 + i.
    let weight = |k: usize, dims: (usize, usize, usize)| {
        let m = dims.0 * dims.1 * dims.2;
        Tensor::from_vec((0..m).map(|i| (k * 1000 + i) as f32).collect(), dims, &dev).unwrap()
    };
    // (start, len) of each narrow along dim 1, and whether x is also used whole.
    let cases: [(&[(usize, usize)], bool); 4] = [
        // A split with a gap (channel 6 unread): the one-buffer path only.
        (&[(0, 2), (2, 3), (5, 1)], false),
        // Overlapping narrows: the second and third overlap the first.
        (&[(0, 3), (2, 2), (1, 5)], false),
        // Disjoint narrows and a whole use, in both orders of the graph.
        (&[(0, 2), (4, 3)], true),
        (&[(3, 4)], true),
    ];
    for (narrows, whole) in cases {
        let mut loss = Tensor::zeros((), candle_core::DType::F32, &dev).unwrap();
        let mut expected = vec![0f32; len];
        for (k, &(start, l)) in narrows.iter().enumerate() {
            let w = weight(k + 1, (n, l, h));
            let part = x.narrow(1, start, l).unwrap();
            loss = (loss + (part * &w).unwrap().sum_all().unwrap()).unwrap();
            let wv: Vec<f32> = w.flatten_all().unwrap().to_vec1().unwrap();
            for i in 0..n {
                for j in 0..l {
                    for t in 0..h {
                        expected[(i * c + start + j) * h + t] += wv[(i * l + j) * h + t];
                    }
                }
            }
        }
        if whole {
            let w = weight(9, (n, c, h));
            loss = (loss + (x.as_tensor() * &w).unwrap().sum_all().unwrap()).unwrap();
            let wv: Vec<f32> = w.flatten_all().unwrap().to_vec1().unwrap();
            for (e, v) in expected.iter_mut().zip(wv) {
                *e += v;
            }
        }
        let grads = loss.backward().unwrap();
        let got: Vec<f32> = grads
            .get(x.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(got, expected, "narrows {narrows:?}, whole use {whole}");
    }
}

/// Loss, every parameter's gradient and every parameter's SGD update of one training step at
/// `batch`, with the kernels on a rayon pool of `threads` threads; input images scaled by
/// `nudge`.
fn one_step(
    net: &str,
    batch: usize,
    threads: usize,
    nudge: f64,
) -> (f64, Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        let spec = models::by_name(net).unwrap();
        let network = Network::new(spec, &Device::Cpu, 5).unwrap();
        let data = Dataset::synthetic(3, 1000, 64);
        let [c, h, w] = spec.input;
        let b = data.batch(0, batch, [c, h, w]).unwrap();
        let x = Tensor::from_vec(b.images, (batch, c, h, w), &Device::Cpu).unwrap();
        let x = (x * nudge).unwrap();
        let y = Tensor::from_vec(b.labels, batch, &Device::Cpu).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(6);
        let out = network.forward(&x, Some(&mut rng), None).unwrap();
        let loss = network.loss(&out, &y).unwrap();
        let grads = loss.backward().unwrap();
        let flat = |t: &Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
        let before = flat_params(&network);
        let gradients = network
            .params()
            .iter()
            .map(|p| {
                flat(
                    grads
                        .get(p.var.as_tensor())
                        .expect("every parameter has a gradient"),
                )
            })
            .collect();
        let mut sgd = Sgd::new(spec.solver, network.params(), 100).unwrap();
        sgd.step(0, network.params(), &grads).unwrap();
        let updates = network
            .params()
            .iter()
            .zip(before)
            .map(|(p, w0)| {
                flat(p.var.as_tensor())
                    .iter()
                    .zip(w0)
                    .map(|(a, b)| a - b)
                    .collect()
            })
            .collect();
        (loss.to_scalar::<f32>().unwrap() as f64, gradients, updates)
    })
}

/// The update applied during the backward (`Sgd::backward_and_step`, as training and the
/// profile run it) leaves every parameter bit for bit where the backward followed by the
/// update leaves it, step after step (the momentum carries over).
fn check_update_during_backward_matches_update_after(net: &str) {
    let spec = models::by_name(net).unwrap();
    let after = Network::new(spec, &Device::Cpu, 5).unwrap();
    let during = Network::new(spec, &Device::Cpu, 5).unwrap();
    let mut sgd_after = Sgd::new(spec.solver, after.params(), 100).unwrap();
    let mut sgd_during = Sgd::new(spec.solver, during.params(), 100).unwrap();
    let data = Dataset::synthetic(3, 1000, 64);
    let [c, h, w] = spec.input;
    let (mut rng_after, mut rng_during) = (
        rand::rngs::StdRng::seed_from_u64(6),
        rand::rngs::StdRng::seed_from_u64(6),
    );
    let initial = flat_params(&during);
    for step in 0..3 {
        let b = data.batch(step * 2, 2, [c, h, w]).unwrap();
        let x = Tensor::from_vec(b.images, (2, c, h, w), &Device::Cpu).unwrap();
        let y = Tensor::from_vec(b.labels, 2, &Device::Cpu).unwrap();
        let out = after.forward(&x, Some(&mut rng_after), None).unwrap();
        let loss = after.loss(&out, &y).unwrap();
        let grads = loss.backward().unwrap();
        sgd_after.step(step, after.params(), &grads).unwrap();
        let out = during.forward(&x, Some(&mut rng_during), None).unwrap();
        let loss = during.loss(&out, &y).unwrap();
        sgd_during
            .backward_and_step(step, during.params(), &loss)
            .unwrap();
        let (wa, wd) = (flat_params(&after), flat_params(&during));
        for ((a, d), p) in wa.iter().zip(&wd).zip(after.params()) {
            assert!(
                a.iter().zip(d).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{net} step {step}: {} differs when updated during the backward",
                p.name
            );
        }
    }
    for ((w, w0), p) in flat_params(&during)
        .iter()
        .zip(&initial)
        .zip(during.params())
    {
        assert_ne!(w, w0, "{net}: {} never updated", p.name);
    }
}

/// Every parameter's values, flattened, in `params` order.
fn flat_params(network: &Network) -> Vec<Vec<f32>> {
    network
        .params()
        .iter()
        .map(|p| p.var.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
        .collect()
}

#[test]
fn alexnet_update_during_backward_matches_update_after() {
    check_update_during_backward_matches_update_after("alexnet");
}

#[test]
fn googlenet_update_during_backward_matches_update_after() {
    check_update_during_backward_matches_update_after("googlenet");
}

/// A training step at batch 1 and 3 on 12 and 16 threads (more threads than images: the
/// kernels split single images by channels and by runs of output rows, some of them wholly in
/// the padding of GoogLeNet's 7x7 maps) gives the 1-thread step's loss, gradients and updates,
/// up to float noise (different split, different summation order).
fn check_step_matches_one_thread(net: &str) {
    for batch in [1, 3] {
        let (loss, grads, updates) = one_step(net, batch, 1, 1.0);
        let (_, noise_grads, noise_updates) = one_step(net, batch, 1, 1.0 + 1e-6);
        let (noise_grads, noise_updates) = ([noise_grads], [noise_updates]);
        for threads in [12, 16] {
            let what = format!("{net} batch {batch}, {threads} threads");
            let (l, g, u) = one_step(net, batch, threads, 1.0);
            assert!(
                (l - loss).abs() < 1e-4 * loss.abs().max(1.0),
                "{what}: loss {l} vs {loss} on 1 thread"
            );
            compare_to_noise(&g, &grads, &noise_grads, &format!("{what}: gradient"));
            compare_to_noise(&u, &updates, &noise_updates, &format!("{what}: update"));
        }
    }
}

#[test]
fn alexnet_step_on_12_and_16_threads_matches_one_thread() {
    check_step_matches_one_thread("alexnet");
}

#[test]
fn googlenet_step_on_12_and_16_threads_matches_one_thread() {
    check_step_matches_one_thread("googlenet");
}

/// A JPEG cut short (a copy interrupted) fails its trial naming the file, instead of training
/// on the grey the decoder pads it with.
#[test]
fn a_truncated_jpeg_fails_the_trial_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("images/tench");
    std::fs::create_dir_all(&data).unwrap();
    for i in 0..2 {
        // Noisy pixels: the scan dwarfs the headers, so a third of the file keeps them whole.
        image::RgbImage::from_fn(320, 240, |x, y| {
            let h = (x.wrapping_mul(2_654_435_761) ^ y.wrapping_mul(40_503) ^ i).to_le_bytes();
            image::Rgb([h[0], h[1], h[2]])
        })
        .save(data.join(format!("{i}.jpg")))
        .unwrap();
    }
    let whole = std::fs::read(data.join("1.jpg")).unwrap();
    std::fs::write(data.join("1.jpg"), &whole[..whole.len() / 3]).unwrap();
    let db = dir.path().join("j.db");
    let out = edgebench(dir.path())
        .args(["run", "--net", "alexnet", "--batch", "1", "--images", "2"])
        .args(["--epochs", "1", "--warmup", "0", "--db"])
        .arg(&db)
        .arg("--dataset")
        .arg(dir.path().join("images"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let rows = results(dir.path(), &db);
    let row = &rows[0];
    assert_eq!(row["status"], "failed", "{row}");
    let error = row["error"].as_str().unwrap();
    assert!(
        error.contains("1.jpg") && error.contains("truncated"),
        "{error}"
    );
}

/// A whole training step on the GPU (im2col + cuBLAS convolutions, the kernels crate's CUDA
/// pooling and LRN) gives the CPU's loss and first-layer weight gradient, same weights and batch.
/// Built with the `cuda` feature only, and run by hand on a machine with an NVIDIA GPU:
/// `cargo test --features cuda --test it -- --ignored models::cuda_`.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a CUDA device"]
fn cuda_training_loss_matches_cpu() {
    use rand::Rng;
    let dev = Device::new_cuda(0).expect("a CUDA device");
    let to_vec = |t: &Tensor| -> Vec<f64> {
        t.flatten_all()
            .unwrap()
            .to_dtype(candle_core::DType::F64)
            .unwrap()
            .to_vec1::<f64>()
            .unwrap()
    };
    for name in ["alexnet", "googlenet"] {
        let spec = models::by_name(name).expect("known net");
        let [c, h, w] = spec.input;
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let x: Vec<f32> = (0..2 * c * h * w)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let step_on = |d: &Device| -> (f64, Vec<f64>) {
            let net = Network::new(spec, d, 1).unwrap();
            let xt = Tensor::from_vec(x.clone(), (2, c, h, w), d).unwrap();
            let y = Tensor::from_vec(vec![3u32, 500], 2, d).unwrap();
            let out = net.forward(&xt, None, None).unwrap();
            let loss = net.loss(&out, &y).unwrap();
            let grads = loss.backward().unwrap();
            let g = grads
                .get(net.params()[0].var.as_tensor())
                .expect("conv1 gradient");
            let g = to_vec(&g.to_device(&Device::Cpu).unwrap());
            (loss.to_scalar::<f32>().unwrap() as f64, g)
        };
        let ((cpu, gc), (cuda, gg)) = (step_on(&Device::Cpu), step_on(&dev));
        assert!(
            (cpu - cuda).abs() < 1e-3 * cpu.abs().max(1.0),
            "{name}: loss cuda {cuda} vs cpu {cpu}"
        );
        let scale = gc.iter().fold(0f64, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "{name}: conv1 gradient is zero");
        let worst = gc
            .iter()
            .zip(&gg)
            .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= 1e-2 * scale,
            "{name}: conv1 gradient differs by {worst} (max {scale})"
        );
    }
}

/// The vendored candle's `backward_from` (vendor/candle-core/PATCHED.md, change 7) starts the
/// backward from the gradient given: the same gradients as `backward` of the sum of the output
/// times that gradient, and an error naming a gradient of another shape or dtype.
#[test]
fn backward_from_starts_from_the_given_gradient() {
    let dev = Device::Cpu;
    let x =
        candle_core::Var::from_vec(vec![0.5f32, -1.0, 2.0, 3.0, -0.25, 1.5], (2, 3), &dev).unwrap();
    let y = (x.as_tensor().sqr().unwrap() + x.as_tensor()).unwrap();
    let g = Tensor::from_vec(vec![1f32, -2.0, 0.5, 3.0, 0.0, -1.0], (2, 3), &dev).unwrap();
    let got = y.backward_from(&g).unwrap();
    let want = (&y * &g).unwrap().sum_all().unwrap().backward().unwrap();
    let grad = |s: &candle_core::backprop::GradStore| -> Vec<Vec<f32>> {
        s.get(x.as_tensor()).unwrap().to_vec2().unwrap()
    };
    assert_eq!(grad(&got), grad(&want));
    // dy/dx = 2x + 1, times g.
    assert_eq!(grad(&got)[0], vec![2.0, 2.0, 2.5]);
    let wrong_shape = Tensor::ones((3, 2), candle_core::DType::F32, &dev).unwrap();
    let e = y.backward_from(&wrong_shape).unwrap_err().to_string();
    assert!(e.contains("backward_from") && e.contains("shape"), "{e}");
    let wrong_dtype = Tensor::ones((2, 3), candle_core::DType::F64, &dev).unwrap();
    let e = y.backward_from(&wrong_dtype).unwrap_err().to_string();
    assert!(e.contains("backward_from") && e.contains("dtype"), "{e}");
}

/// The vendored candle's `backward_handing_variables` (vendor/candle-core/PATCHED.md, change 8)
/// hands each variable's gradient over once, complete (a variable used by two ops gets the sum
/// of both), and only after every op that uses the variable has run its backward; the store it
/// returns holds no variable's gradient.
#[test]
fn backward_hands_each_variable_over_once_when_complete() {
    let dev = Device::Cpu;
    let w = candle_core::Var::from_vec(vec![0.5f32, -1.0, 2.0], 3, &dev).unwrap();
    let b = candle_core::Var::from_vec(vec![0.25f32, 4.0, -3.0], 3, &dev).unwrap();
    let x = Tensor::from_vec(vec![1f32, 2.0, -1.5], 3, &dev).unwrap();
    // w is used twice (w·x, then w² further up); b once, before the second use of w.
    let h = ((w.as_tensor() * &x).unwrap() + b.as_tensor()).unwrap();
    let y = (h.sqr().unwrap() + w.as_tensor().sqr().unwrap())
        .unwrap()
        .sum_all()
        .unwrap();
    let want = y.backward().unwrap();
    let mut handed: Vec<(candle_core::TensorId, Vec<f32>)> = Vec::new();
    let rest = y
        .backward_handing_variables(&mut |var, grad| {
            handed.push((var.id(), grad.to_vec1().unwrap()));
            Ok(())
        })
        .unwrap();
    let ids: Vec<_> = handed.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 2, "each variable once: {ids:?}");
    for v in [&w, &b] {
        let got = &handed.iter().find(|(id, _)| *id == v.id()).unwrap().1;
        let expected: Vec<f32> = want.get(v.as_tensor()).unwrap().to_vec1().unwrap();
        assert_eq!(got, &expected);
        assert!(rest.get(v.as_tensor()).is_none());
    }
    // dy/dw = 2h·x + 2w, both uses summed.
    let h: Vec<f32> = h.to_vec1().unwrap();
    let expected_w: Vec<f32> = [0.5f32, -1.0, 2.0]
        .iter()
        .zip([1f32, 2.0, -1.5])
        .zip(&h)
        .map(|((w, x), h)| 2.0 * h * x + 2.0 * w)
        .collect();
    assert_eq!(
        handed.iter().find(|(id, _)| *id == w.id()).unwrap().1,
        expected_w
    );
    // An error from the callback stops the backward and comes back.
    let e = y
        .backward_handing_variables(&mut |_, _| candle_core::bail!("stop here"))
        .unwrap_err();
    assert!(e.to_string().contains("stop here"), "{e}");
}

/// A frozen network (detached weights, each inception module's 1x1 heads stacked once, the
/// Winograd layers' filters transformed by the first forward) computes the inference forward of
/// the network it came from bit for bit, on the first query and on the next (the kept filters),
/// without an autograd graph.
fn check_frozen_matches_inference_forward(net: &str) {
    let spec = models::by_name(net).unwrap();
    let dev = Device::Cpu;
    let network = Network::new(spec, &dev, 3).unwrap();
    let [c, h, w] = spec.input;
    let x = Tensor::randn(0f32, 50.0, (2, c, h, w), &dev).unwrap();
    let want = network.forward(&x, None, None).unwrap().logits;
    assert!(
        want.track_op(),
        "the training network's forward builds a graph"
    );
    let want: Vec<f32> = want.flatten_all().unwrap().to_vec1().unwrap();
    let frozen = network.frozen().unwrap();
    assert!(frozen.params().is_empty());
    for query in 0..2 {
        let out = frozen.forward(&x, None, None).unwrap();
        assert!(out.aux.is_empty());
        assert!(!out.logits.track_op(), "query {query} built a graph");
        let got: Vec<f32> = out.logits.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(got, want, "query {query}");
    }
}

#[test]
fn alexnet_frozen_matches_inference_forward() {
    check_frozen_matches_inference_forward("alexnet");
}

#[test]
fn googlenet_frozen_matches_inference_forward() {
    check_frozen_matches_inference_forward("googlenet");
}
