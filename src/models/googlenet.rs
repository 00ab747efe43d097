//! BVLC GoogLeNet / Inception v1 (caffe/models/bvlc_googlenet/train_val.prototxt), with both
//! auxiliary classifiers (loss weight 0.3) that exist only in the training graph.

use super::spec::{
    avg_pool, conv, fc, lrn, max_pool, AuxHead, Init, Layer, LrPolicy, NetSpec, SolverSpec,
};

/// Inception module: (#1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool projection).
/// Branch names follow the prototxt (`inception_3a/1x1`, ...).
fn inception(name: &'static str, widths: [usize; 6]) -> Layer {
    let [n1, r3, n3, r5, n5, pp] = widths;
    // Names must be 'static; specs are built once (models::all), so this leaks a fixed few.
    let n =
        |suffix: &str| -> &'static str { Box::leak(format!("{name}/{suffix}").into_boxed_str()) };
    let c = |nm, out, k, pad| conv(nm, out, k, 1, pad, 1, Init::Xavier, 0.2);
    Layer::Inception {
        name,
        branches: vec![
            vec![c(n("1x1"), n1, 1, 0)],
            vec![c(n("3x3_reduce"), r3, 1, 0), c(n("3x3"), n3, 3, 1)],
            vec![c(n("5x5_reduce"), r5, 1, 0), c(n("5x5"), n5, 5, 2)],
            vec![max_pool(n("pool"), 3, 1, 1), c(n("pool_proj"), pp, 1, 0)],
        ],
    }
}

fn aux_head(name: &'static str, after: &'static str) -> AuxHead {
    let n =
        |suffix: &str| -> &'static str { Box::leak(format!("{name}/{suffix}").into_boxed_str()) };
    AuxHead {
        name,
        after,
        layers: vec![
            avg_pool(n("ave_pool"), 5, 3),
            conv(n("conv"), 128, 1, 1, 0, 1, Init::Xavier, 0.2),
            fc(n("fc"), 1024, true, Init::Xavier, 0.2),
            Layer::Dropout {
                name: n("drop_fc"),
                p: 0.7,
            },
            fc(n("classifier"), 1000, false, Init::Xavier, 0.0),
        ],
        loss_weight: 0.3,
    }
}

pub(crate) fn spec() -> NetSpec {
    NetSpec {
        name: "googlenet",
        description:
            "BVLC GoogLeNet / Inception v1 (Szegedy et al. 2014, Caffe reference definition)",
        input: [3, 224, 224],
        classes: 1000,
        tower: vec![
            conv("conv1/7x7_s2", 64, 7, 2, 3, 1, Init::Xavier, 0.2),
            max_pool("pool1/3x3_s2", 3, 2, 0),
            lrn("pool1/norm1"),
            conv("conv2/3x3_reduce", 64, 1, 1, 0, 1, Init::Xavier, 0.2),
            conv("conv2/3x3", 192, 3, 1, 1, 1, Init::Xavier, 0.2),
            lrn("conv2/norm2"),
            max_pool("pool2/3x3_s2", 3, 2, 0),
            inception("inception_3a", [64, 96, 128, 16, 32, 32]),
            inception("inception_3b", [128, 128, 192, 32, 96, 64]),
            max_pool("pool3/3x3_s2", 3, 2, 0),
            inception("inception_4a", [192, 96, 208, 16, 48, 64]),
            inception("inception_4b", [160, 112, 224, 24, 64, 64]),
            inception("inception_4c", [128, 128, 256, 24, 64, 64]),
            inception("inception_4d", [112, 144, 288, 32, 64, 64]),
            inception("inception_4e", [256, 160, 320, 32, 128, 128]),
            max_pool("pool4/3x3_s2", 3, 2, 0),
            inception("inception_5a", [256, 160, 320, 32, 128, 128]),
            inception("inception_5b", [384, 192, 384, 48, 128, 128]),
            avg_pool("pool5/7x7_s1", 7, 1),
            Layer::Dropout {
                name: "pool5/drop_7x7_s1",
                p: 0.4,
            },
            fc("loss3/classifier", 1000, false, Init::Xavier, 0.0),
        ],
        aux: vec![
            aux_head("loss1", "inception_4a"),
            aux_head("loss2", "inception_4d"),
        ],
        solver: SolverSpec {
            base_lr: 0.01,
            momentum: 0.9,
            weight_decay: 0.0002,
            policy: LrPolicy::Poly { power: 0.5 },
            bias_lr_mult: 2.0,
            bias_decay_mult: 0.0,
        },
    }
}
