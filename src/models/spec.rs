//! Declarative network definitions. One description drives the candle network, the shape
//! inference shown by `edgebench models`, and the parameter / multiply-add counts, so the three
//! cannot drift apart.

use edgebench_kernels::{pool_output_size, Lrn, Pool2d, PoolKind};
use serde::Serialize;

/// Weight initialisation, as the BVLC prototxt fillers name them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    Gaussian {
        std: f64,
    },
    /// Caffe's xavier filler: uniform in ±sqrt(3 / fan_in).
    Xavier,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConvSpec {
    pub name: &'static str,
    pub out: usize,
    pub kernel: usize,
    pub stride: usize,
    pub pad: usize,
    pub groups: usize,
    pub relu: bool,
    pub init: Init,
    pub bias: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FcSpec {
    pub name: &'static str,
    pub out: usize,
    pub relu: bool,
    pub init: Init,
    pub bias: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Layer {
    Conv(ConvSpec),
    Pool {
        name: &'static str,
        pool: Pool2d,
    },
    Lrn {
        name: &'static str,
        lrn: Lrn,
    },
    /// Flattens its input first, like Caffe's InnerProduct.
    Fc(FcSpec),
    Dropout {
        name: &'static str,
        p: f64,
    },
    /// Parallel branches over the same input, concatenated on channels.
    Inception {
        name: &'static str,
        branches: Vec<Vec<Layer>>,
    },
}

impl Layer {
    pub fn name(&self) -> &'static str {
        match self {
            Layer::Conv(c) => c.name,
            Layer::Fc(f) => f.name,
            Layer::Pool { name, .. }
            | Layer::Lrn { name, .. }
            | Layer::Dropout { name, .. }
            | Layer::Inception { name, .. } => name,
        }
    }
}

/// An auxiliary classifier that branches off the tower after the layer named `after`.
#[derive(Debug, Clone, PartialEq)]
pub struct AuxHead {
    pub name: &'static str,
    pub after: &'static str,
    pub layers: Vec<Layer>,
    pub loss_weight: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum LrPolicy {
    /// lr = base_lr * gamma ^ floor(iter / stepsize)
    Step { gamma: f64, stepsize: usize },
    /// lr = base_lr * (1 - iter / max_iter) ^ power, with max_iter = the trial's iterations
    /// (the studies' scripts rewrote max_iter to ITER for every trial).
    Poly { power: f64 },
}

/// The BVLC solver settings; biases use lr_mult 2 and decay_mult 0 in both nets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SolverSpec {
    pub base_lr: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    pub policy: LrPolicy,
    pub bias_lr_mult: f64,
    pub bias_decay_mult: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NetSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// (channels, height, width)
    pub input: [usize; 3],
    pub classes: usize,
    pub tower: Vec<Layer>,
    pub aux: Vec<AuxHead>,
    pub solver: SolverSpec,
}

/// One row of the shape inference: a top-level layer and what it produces per image.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageInfo {
    pub name: String,
    pub kind: String,
    /// Output (channels, height, width); fully connected outputs are (n, 1, 1).
    pub output: [usize; 3],
    pub params: usize,
    pub macs: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetSummary {
    pub name: String,
    pub description: String,
    pub input: [usize; 3],
    pub params: usize,
    pub params_without_aux: usize,
    /// Forward multiply-adds per image of the training graph (tower and auxiliary heads).
    pub forward_macs: usize,
    pub forward_macs_without_aux: usize,
    pub stages: Vec<StageInfo>,
    pub aux_heads: Vec<AuxSummary>,
    pub solver: SolverSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuxSummary {
    pub name: String,
    pub after: String,
    pub loss_weight: f64,
    pub stages: Vec<StageInfo>,
}

fn conv_out(input: usize, kernel: usize, stride: usize, pad: usize) -> usize {
    (input + 2 * pad - kernel) / stride + 1
}

/// Infers one layer: returns the output shape, parameters and multiply-adds per image.
pub(crate) fn infer_layer(layer: &Layer, input: [usize; 3]) -> ([usize; 3], usize, usize) {
    let [c, h, w] = input;
    match layer {
        Layer::Conv(s) => {
            let (oh, ow) = (
                conv_out(h, s.kernel, s.stride, s.pad),
                conv_out(w, s.kernel, s.stride, s.pad),
            );
            let per_out = (c / s.groups) * s.kernel * s.kernel;
            (
                [s.out, oh, ow],
                s.out * per_out + s.out,
                s.out * oh * ow * per_out,
            )
        }
        Layer::Pool { pool, .. } => (
            [
                c,
                pool_output_size(h, pool.kernel, pool.stride, pool.pad),
                pool_output_size(w, pool.kernel, pool.stride, pool.pad),
            ],
            0,
            0,
        ),
        Layer::Lrn { .. } | Layer::Dropout { .. } => (input, 0, 0),
        Layer::Fc(s) => {
            let fan_in = c * h * w;
            ([s.out, 1, 1], fan_in * s.out + s.out, fan_in * s.out)
        }
        Layer::Inception { branches, .. } => {
            let (mut out_c, mut params, mut macs, mut hw) = (0, 0, 0, (h, w));
            for branch in branches {
                let (shape, p, m) = infer_seq(branch, input);
                out_c += shape[0];
                params += p;
                macs += m;
                hw = (shape[1], shape[2]);
            }
            ([out_c, hw.0, hw.1], params, macs)
        }
    }
}

fn infer_seq(layers: &[Layer], input: [usize; 3]) -> ([usize; 3], usize, usize) {
    layers
        .iter()
        .fold((input, 0, 0), |(shape, params, macs), layer| {
            let (out, p, m) = infer_layer(layer, shape);
            (out, params + p, macs + m)
        })
}

fn layer_kind(layer: &Layer) -> String {
    match layer {
        Layer::Conv(s) => {
            let mut kind = format!("conv {}@{}x{}", s.out, s.kernel, s.kernel);
            if s.stride != 1 {
                kind += &format!(" s{}", s.stride);
            }
            if s.pad != 0 {
                kind += &format!(" pad {}", s.pad);
            }
            if s.groups != 1 {
                kind += &format!(" group {}", s.groups);
            }
            if s.relu {
                kind += " +relu";
            }
            kind
        }
        Layer::Pool { pool, .. } => {
            let op = match pool.kind {
                PoolKind::Max => "maxpool",
                PoolKind::Avg => "avgpool",
            };
            let mut kind = format!("{op} {}x{} s{}", pool.kernel, pool.kernel, pool.stride);
            if pool.pad != 0 {
                kind += &format!(" pad {}", pool.pad);
            }
            kind + " (ceil)"
        }
        Layer::Lrn { lrn, .. } => format!(
            "lrn size {} alpha {} beta {}",
            lrn.size, lrn.alpha, lrn.beta
        ),
        Layer::Fc(s) => format!("fc {}{}", s.out, if s.relu { " +relu" } else { "" }),
        Layer::Dropout { p, .. } => format!("dropout {p}"),
        Layer::Inception { branches, .. } => {
            let widths: Vec<String> = branches
                .iter()
                .map(|b| match b.last() {
                    Some(Layer::Conv(c)) => c.out.to_string(),
                    _ => "?".into(),
                })
                .collect();
            format!("inception [{}]", widths.join(", "))
        }
    }
}

fn stages(layers: &[Layer], input: [usize; 3]) -> (Vec<StageInfo>, [usize; 3]) {
    let mut shape = input;
    let mut out = Vec::with_capacity(layers.len());
    for layer in layers {
        let (next, params, macs) = infer_layer(layer, shape);
        out.push(StageInfo {
            name: layer.name().to_string(),
            kind: layer_kind(layer),
            output: next,
            params,
            macs,
        });
        shape = next;
    }
    (out, shape)
}

/// Elements of every tensor the layers produce for one image, branches included.
fn activation_elements(layers: &[Layer], mut shape: [usize; 3]) -> (usize, [usize; 3]) {
    let mut total = 0;
    for layer in layers {
        if let Layer::Inception { branches, .. } = layer {
            total += branches
                .iter()
                .map(|b| activation_elements(b, shape).0)
                .sum::<usize>();
        }
        shape = infer_layer(layer, shape).0;
        total += shape.iter().product::<usize>();
    }
    (total, shape)
}

impl NetSpec {
    /// Elements of all layer outputs per image in the training graph (input, tower, auxiliary
    /// heads): what the memory estimate scales with the batch.
    pub(crate) fn activation_elements_per_image(&self) -> usize {
        let summary = self.summary();
        let aux: usize = self
            .aux
            .iter()
            .map(|head| {
                let at = summary
                    .stages
                    .iter()
                    .find(|s| s.name == head.after)
                    .expect("checked in summary");
                activation_elements(&head.layers, at.output).0
            })
            .sum();
        self.input.iter().product::<usize>() + activation_elements(&self.tower, self.input).0 + aux
    }

    /// Shape inference over the whole training graph.
    pub fn summary(&self) -> NetSummary {
        let (tower, _) = stages(&self.tower, self.input);
        let aux_heads: Vec<AuxSummary> = self
            .aux
            .iter()
            .map(|head| {
                let at = tower
                    .iter()
                    .find(|s| s.name == head.after)
                    .unwrap_or_else(|| {
                        panic!("aux head {} attaches to unknown {}", head.name, head.after)
                    });
                AuxSummary {
                    name: head.name.to_string(),
                    after: head.after.to_string(),
                    loss_weight: head.loss_weight,
                    stages: stages(&head.layers, at.output).0,
                }
            })
            .collect();
        let sum = |s: &[StageInfo], f: fn(&StageInfo) -> usize| s.iter().map(f).sum::<usize>();
        let params_without_aux = sum(&tower, |s| s.params);
        let macs_without_aux = sum(&tower, |s| s.macs);
        let aux_params: usize = aux_heads.iter().map(|a| sum(&a.stages, |s| s.params)).sum();
        let aux_macs: usize = aux_heads.iter().map(|a| sum(&a.stages, |s| s.macs)).sum();
        NetSummary {
            name: self.name.to_string(),
            description: self.description.to_string(),
            input: self.input,
            params: params_without_aux + aux_params,
            params_without_aux,
            forward_macs: macs_without_aux + aux_macs,
            forward_macs_without_aux: macs_without_aux,
            stages: tower,
            aux_heads,
            solver: self.solver,
        }
    }
}

// Small constructors keep the two network files close to the prototxt they transcribe.

#[allow(clippy::too_many_arguments)] // mirrors a prototxt convolution_param
pub(crate) fn conv(
    name: &'static str,
    out: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    groups: usize,
    init: Init,
    bias: f64,
) -> Layer {
    Layer::Conv(ConvSpec {
        name,
        out,
        kernel,
        stride,
        pad,
        groups,
        relu: true,
        init,
        bias,
    })
}

pub(crate) fn fc(name: &'static str, out: usize, relu: bool, init: Init, bias: f64) -> Layer {
    Layer::Fc(FcSpec {
        name,
        out,
        relu,
        init,
        bias,
    })
}

pub(crate) fn max_pool(name: &'static str, kernel: usize, stride: usize, pad: usize) -> Layer {
    Layer::Pool {
        name,
        pool: Pool2d {
            kind: PoolKind::Max,
            kernel,
            stride,
            pad,
        },
    }
}

pub(crate) fn avg_pool(name: &'static str, kernel: usize, stride: usize) -> Layer {
    Layer::Pool {
        name,
        pool: Pool2d {
            kind: PoolKind::Avg,
            kernel,
            stride,
            pad: 0,
        },
    }
}

/// LRN(local_size 5, alpha 1e-4, beta 0.75), as both BVLC nets use it.
pub(crate) fn lrn(name: &'static str) -> Layer {
    Layer::Lrn {
        name,
        lrn: Lrn {
            size: 5,
            alpha: 1e-4,
            beta: 0.75,
            k: 1.0,
        },
    }
}
