//! BVLC AlexNet (caffe/models/bvlc_alexnet/train_val.prototxt): grouped convolutions, LRN after
//! conv1/conv2 (before pooling), overlapping 3x3/2 max pooling.

use super::spec::{conv, fc, lrn, max_pool, Init, Layer, LrPolicy, NetSpec, SolverSpec};

pub(crate) fn spec() -> NetSpec {
    let g = |std| Init::Gaussian { std };
    NetSpec {
        name: "alexnet",
        description: "BVLC AlexNet (Krizhevsky et al. 2012, Caffe reference definition)",
        input: [3, 227, 227],
        classes: 1000,
        tower: vec![
            conv("conv1", 96, 11, 4, 0, 1, g(0.01), 0.0),
            lrn("norm1"),
            max_pool("pool1", 3, 2, 0),
            conv("conv2", 256, 5, 1, 2, 2, g(0.01), 0.1),
            lrn("norm2"),
            max_pool("pool2", 3, 2, 0),
            conv("conv3", 384, 3, 1, 1, 1, g(0.01), 0.0),
            conv("conv4", 384, 3, 1, 1, 2, g(0.01), 0.1),
            conv("conv5", 256, 3, 1, 1, 2, g(0.01), 0.1),
            max_pool("pool5", 3, 2, 0),
            fc("fc6", 4096, true, g(0.005), 0.1),
            Layer::Dropout {
                name: "drop6",
                p: 0.5,
            },
            fc("fc7", 4096, true, g(0.005), 0.1),
            Layer::Dropout {
                name: "drop7",
                p: 0.5,
            },
            fc("fc8", 1000, false, g(0.01), 0.0),
        ],
        aux: vec![],
        solver: SolverSpec {
            base_lr: 0.01,
            momentum: 0.9,
            weight_decay: 0.0005,
            policy: LrPolicy::Step {
                gamma: 0.1,
                stepsize: 100_000,
            },
            bias_lr_mult: 2.0,
            bias_decay_mult: 0.0,
        },
    }
}
