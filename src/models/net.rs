//! The candle network built from a `NetSpec`: parameters as `Var`s (with Caffe's per-blob
//! lr/decay multipliers), a training forward pass with dropout and auxiliary heads, and the loss.

use super::spec::{ConvSpec, FcSpec, Init, Layer, NetSpec};
use candle_core::{Device, Result, Tensor, Var};
use edgebench_kernels::{
    conv2d, conv2d_candle, conv2d_frozen, conv2d_im2col, conv2d_runs_on, linear, linear_candle,
    lrn, pool2d, Conv2d, FrozenFilters, Lrn, Pool2d,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

/// A learnable blob and the solver multipliers Caffe gives it.
pub struct Param {
    pub name: String,
    pub var: Var,
    pub lr_mult: f64,
    pub decay_mult: f64,
}

enum Node {
    Conv {
        w: Tensor,
        b: Tensor,
        stride: usize,
        pad: usize,
        groups: usize,
        relu: bool,
        /// A frozen network's transformed Winograd filters (`Network::frozen`).
        frozen: Option<FrozenFilters>,
    },
    Fc {
        w: Tensor,
        b: Tensor,
        relu: bool,
    },
    Pool(Pool2d),
    Lrn(Lrn),
    Dropout(f64),
    Inception {
        branches: Vec<Vec<Node>>,
        /// The branches' 1x1 heads stacked once (`Network::frozen`); None: stacked per forward.
        heads: Option<StackedHeads>,
    },
}

struct AuxNodes {
    after: usize,
    nodes: Vec<Node>,
    loss_weight: f64,
}

pub struct Network {
    pub spec: &'static NetSpec,
    device: Device,
    tower: Vec<Node>,
    aux: Vec<AuxNodes>,
    params: Vec<Param>,
    conv_impl: ConvImpl,
}

/// Per-layer output shapes recorded during a forward pass (`name`, dims with the batch first).
pub(crate) type Trace = Vec<(String, Vec<usize>)>;

/// What one training forward pass produces.
pub struct Outputs {
    pub logits: Tensor,
    /// Auxiliary classifier logits with their loss weights (training only).
    pub aux: Vec<(Tensor, f64)>,
}

struct Builder<'a> {
    device: &'a Device,
    rng: StdRng,
    params: Vec<Param>,
    bias_lr_mult: f64,
    bias_decay_mult: f64,
}

impl Builder<'_> {
    fn blob(&mut self, name: String, shape: &[usize], fan_in: usize, init: Init) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = match init {
            Init::Gaussian { std } => {
                let normal = Normal::new(0.0, std).expect("std is positive");
                (0..n)
                    .map(|_| normal.sample(&mut self.rng) as f32)
                    .collect()
            }
            Init::Xavier => {
                let scale = (3.0 / fan_in as f64).sqrt();
                (0..n)
                    .map(|_| self.rng.random_range(-scale..scale) as f32)
                    .collect()
            }
        };
        let var = Var::from_tensor(&Tensor::from_vec(data, shape, self.device)?)?;
        let tensor = var.as_tensor().clone();
        self.params.push(Param {
            name,
            var,
            lr_mult: 1.0,
            decay_mult: 1.0,
        });
        Ok(tensor)
    }

    fn bias(&mut self, name: String, n: usize, value: f64) -> Result<Tensor> {
        let var = Var::from_tensor(&Tensor::full(value as f32, n, self.device)?)?;
        let tensor = var.as_tensor().clone();
        self.params.push(Param {
            name,
            var,
            lr_mult: self.bias_lr_mult,
            decay_mult: self.bias_decay_mult,
        });
        Ok(tensor)
    }

    fn conv(&mut self, s: &ConvSpec, in_c: usize) -> Result<Node> {
        let per_group = in_c / s.groups;
        let w = self.blob(
            format!("{}/weight", s.name),
            &[s.out, per_group, s.kernel, s.kernel],
            per_group * s.kernel * s.kernel,
            s.init,
        )?;
        let b = self.bias(format!("{}/bias", s.name), s.out, s.bias)?;
        Ok(Node::Conv {
            w,
            b,
            stride: s.stride,
            pad: s.pad,
            groups: s.groups,
            relu: s.relu,
            frozen: None,
        })
    }

    fn fc(&mut self, s: &FcSpec, fan_in: usize) -> Result<Node> {
        let w = self.blob(
            format!("{}/weight", s.name),
            &[s.out, fan_in],
            fan_in,
            s.init,
        )?;
        let b = self.bias(format!("{}/bias", s.name), s.out, s.bias)?;
        Ok(Node::Fc { w, b, relu: s.relu })
    }

    fn seq(&mut self, layers: &[Layer], mut shape: [usize; 3]) -> Result<(Vec<Node>, [usize; 3])> {
        let mut nodes = Vec::with_capacity(layers.len());
        for layer in layers {
            nodes.push(match layer {
                Layer::Conv(s) => self.conv(s, shape[0])?,
                Layer::Fc(s) => self.fc(s, shape.iter().product())?,
                Layer::Pool { pool, .. } => Node::Pool(*pool),
                Layer::Lrn { lrn, .. } => Node::Lrn(*lrn),
                Layer::Dropout { p, .. } => Node::Dropout(*p),
                Layer::Inception { branches, .. } => Node::Inception {
                    branches: branches
                        .iter()
                        .map(|b| self.seq(b, shape).map(|(nodes, _)| nodes))
                        .collect::<Result<_>>()?,
                    heads: None,
                },
            });
            shape = super::spec::infer_layer(layer, shape).0;
        }
        Ok((nodes, shape))
    }
}

/// Inverted dropout as Caffe does it: keep with probability 1-p and scale by 1/(1-p). The mask
/// comes from the network's seeded generator so a run's loss curve is reproducible.
fn dropout(x: &Tensor, p: f64, rng: &mut StdRng) -> Result<Tensor> {
    let keep = 1.0 - p;
    let scale = (1.0 / keep) as f32;
    // An element is kept when its u32 draw is below keep·2^32: one block fill of the generator and
    // a branch-free compare. A f64 draw and a branch per element took ~15 ns an element (2 ms of
    // a 17 ms AlexNet step on an H100, whose mask is made here on the host).
    let threshold = (keep * 4_294_967_296.0).min(f64::from(u32::MAX)) as u32;
    let mut bits = vec![0u32; x.elem_count()];
    rng.fill(&mut bits[..]);
    // u32 -> f32 of one size: the collect reuses the draws' allocation.
    let mask: Vec<f32> = bits
        .into_iter()
        .map(|b| f32::from(u8::from(b < threshold)) * scale)
        .collect();
    x.mul(&Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?)
}

/// Which convolution implementation the forward pass uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConvImpl {
    /// edgebench's GEMM ops (`edgebench_kernels::conv2d`, `edgebench_kernels::linear`) on the
    /// CPU; on CUDA `conv2d` through cuDNN (`cudnn` feature) or else im2col + cuBLAS
    /// (`edgebench_kernels::conv2d_im2col`), and candle's matmul; candle's conv2d and matmul
    /// elsewhere.
    #[default]
    Gemm,
    /// candle's `Tensor::conv2d` and `matmul` everywhere (the reference the tests compare
    /// against).
    Candle,
}

/// A branch's first layer when it is a 1x1 convolution that reads the input as it is (stride 1,
/// no padding, one group).
struct PointwiseHead<'a> {
    w: &'a Tensor,
    b: &'a Tensor,
    relu: bool,
    out: usize,
}

fn branch_head(branch: &[Node]) -> Option<PointwiseHead<'_>> {
    match branch.first()? {
        Node::Conv {
            w,
            b,
            stride: 1,
            pad: 0,
            groups: 1,
            relu,
            ..
        } if w.dims()[2..] == [1, 1] => Some(PointwiseHead {
            w,
            b,
            relu: *relu,
            out: w.dims()[0],
        }),
        _ => None,
    }
}

/// The inception branches that open with a 1x1 convolution of the module's input (GoogLeNet: the
/// 1x1, 3x3_reduce and 5x5_reduce branches) run it as one convolution with their filters stacked:
/// one GEMM per image where there were three, one input gradient where three were summed. The
/// parameters stay per layer.
struct StackedHeads {
    w: Tensor,
    b: Tensor,
    relu: bool,
    /// Per branch, how many of the stacked output channels are its (None: not covered).
    widths: Vec<Option<usize>>,
}

impl StackedHeads {
    /// The branches' heads stacked, or None where fewer than two branches qualify.
    fn of(branches: &[Vec<Node>]) -> Result<Option<StackedHeads>> {
        let heads: Vec<Option<PointwiseHead>> = branches.iter().map(|b| branch_head(b)).collect();
        let Some(relu) = heads.iter().flatten().next().map(|h| h.relu) else {
            return Ok(None);
        };
        // One ReLU flag for the whole stack: branches that differ keep their own convolution.
        let stacked: Vec<Option<&PointwiseHead>> = heads
            .iter()
            .map(|h| h.as_ref().filter(|h| h.relu == relu))
            .collect();
        if stacked.iter().flatten().count() < 2 {
            return Ok(None);
        }
        let (ws, bs): (Vec<Tensor>, Vec<Tensor>) = stacked
            .iter()
            .flatten()
            .map(|h| (h.w.clone(), h.b.clone()))
            .unzip();
        Ok(Some(StackedHeads {
            w: Tensor::cat(&ws, 0)?,
            b: Tensor::cat(&bs, 0)?,
            relu,
            widths: stacked.iter().map(|h| h.map(|h| h.out)).collect(),
        }))
    }

    /// The stacked convolution's output: the heads' outputs side by side, in branch order.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let p = Conv2d {
            stride: 1,
            pad: 0,
            groups: 1,
            relu: self.relu,
        };
        conv2d(x, &self.w, &self.b, p)
    }
}

fn run_seq(
    nodes: &[Node],
    conv_impl: ConvImpl,
    mut x: Tensor,
    rng: &mut Option<&mut StdRng>,
    names: Option<&[Layer]>,
    trace: &mut Option<&mut Trace>,
    at_layer: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
) -> Result<Tensor> {
    for (i, node) in nodes.iter().enumerate() {
        x = match node {
            Node::Conv {
                w,
                b,
                stride,
                pad,
                groups,
                relu,
                frozen,
            } => {
                let p = Conv2d {
                    stride: *stride,
                    pad: *pad,
                    groups: *groups,
                    relu: *relu,
                };
                match conv_impl {
                    ConvImpl::Gemm if conv2d_runs_on(x.device()) => match frozen {
                        Some(filters) => conv2d_frozen(&x, w, b, p, filters)?,
                        None => conv2d(&x, w, b, p)?,
                    },
                    ConvImpl::Gemm if x.device().is_cuda() => conv2d_im2col(&x, w, b, p)?,
                    _ => conv2d_candle(&x, w, b, p)?,
                }
            }
            Node::Fc { w, b, relu } => {
                if conv_impl == ConvImpl::Gemm && x.device().is_cpu() {
                    linear(&x, w, b, *relu)?
                } else {
                    linear_candle(&x, w, b, *relu)?
                }
            }
            Node::Pool(p) => pool2d(&x, *p)?,
            Node::Lrn(p) => lrn(&x, *p)?,
            Node::Dropout(p) => match rng.as_deref_mut() {
                // On a GPU the mask is made there from a seed the network's generator draws
                // (`edgebench_kernels::dropout`): a host-made mask's copy would stall the step.
                Some(rng) if x.device().is_cuda() => {
                    edgebench_kernels::dropout(&x, *p, rng.random::<u64>())?
                }
                Some(rng) => dropout(&x, *p, rng)?,
                None => x,
            },
            Node::Inception { branches, heads } => {
                let per_forward;
                let heads = match heads {
                    _ if conv_impl != ConvImpl::Gemm || !conv2d_runs_on(x.device()) => None,
                    Some(heads) => Some(heads),
                    None => {
                        per_forward = StackedHeads::of(branches)?;
                        per_forward.as_ref()
                    }
                };
                let fused = heads
                    .map(|h| h.forward(&x).map(|y| (y, &h.widths)))
                    .transpose()?;
                let mut outs = Vec::with_capacity(branches.len());
                let mut at = 0;
                for (i, branch) in branches.iter().enumerate() {
                    let head = fused.as_ref().and_then(|(y, widths)| Some((y, widths[i]?)));
                    let (input, rest) = match head {
                        Some((y, o)) => {
                            let part = y.narrow(1, at, o)?;
                            at += o;
                            (part, &branch[1..])
                        }
                        None => (x.clone(), &branch[..]),
                    };
                    let skip = &mut |_, _: &Tensor| Ok(());
                    outs.push(run_seq(rest, conv_impl, input, rng, None, &mut None, skip)?);
                }
                Tensor::cat(&outs, 1)?
            }
        };
        if let (Some(trace), Some(names)) = (trace.as_deref_mut(), names) {
            trace.push((names[i].name().to_string(), x.dims().to_vec()));
        }
        at_layer(i, &x)?;
    }
    Ok(x)
}

impl Network {
    /// Builds the network with the BVLC initialisations, drawn from `seed`.
    pub fn new(spec: &'static NetSpec, device: &Device, seed: u64) -> Result<Network> {
        let mut b = Builder {
            device,
            rng: StdRng::seed_from_u64(seed),
            params: Vec::new(),
            bias_lr_mult: spec.solver.bias_lr_mult,
            bias_decay_mult: spec.solver.bias_decay_mult,
        };
        let (tower, _) = b.seq(&spec.tower, spec.input)?;
        let summary = spec.summary();
        let mut aux = Vec::new();
        for head in &spec.aux {
            let after = spec
                .tower
                .iter()
                .position(|l| l.name() == head.after)
                .ok_or_else(|| candle_core::Error::Msg(format!("unknown layer {}", head.after)))?;
            let (nodes, _) = b.seq(&head.layers, summary.stages[after].output)?;
            aux.push(AuxNodes {
                after,
                nodes,
                loss_weight: head.loss_weight,
            });
        }
        Ok(Network {
            spec,
            device: device.clone(),
            tower,
            aux,
            params: b.params,
            conv_impl: ConvImpl::default(),
        })
    }

    /// The network for inference only: the same weights detached from their `Var`s, so that a
    /// forward builds no autograd graph (an activation is freed once the next layer has read
    /// it, and no op keeps what a backward would take), with each inception module's stacked
    /// 1x1 heads built once and each Winograd layer's transformed filters made by the first
    /// forward, instead of per forward. It has no parameters left to train: both are copies of
    /// the weights as they are when it is frozen.
    pub fn frozen(self) -> Result<Network> {
        fn freeze(nodes: &[Node]) -> Result<Vec<Node>> {
            nodes
                .iter()
                .map(|node| {
                    Ok(match node {
                        Node::Conv {
                            w,
                            b,
                            stride,
                            pad,
                            groups,
                            relu,
                            ..
                        } => Node::Conv {
                            w: w.detach(),
                            b: b.detach(),
                            stride: *stride,
                            pad: *pad,
                            groups: *groups,
                            relu: *relu,
                            frozen: Some(FrozenFilters::default()),
                        },
                        Node::Fc { w, b, relu } => Node::Fc {
                            w: w.detach(),
                            b: b.detach(),
                            relu: *relu,
                        },
                        Node::Pool(p) => Node::Pool(*p),
                        Node::Lrn(p) => Node::Lrn(*p),
                        Node::Dropout(p) => Node::Dropout(*p),
                        Node::Inception { branches, .. } => {
                            let branches: Vec<Vec<Node>> =
                                branches.iter().map(|b| freeze(b)).collect::<Result<_>>()?;
                            let heads = StackedHeads::of(&branches)?;
                            Node::Inception { branches, heads }
                        }
                    })
                })
                .collect()
        }
        let tower = freeze(&self.tower)?;
        let aux = self
            .aux
            .iter()
            .map(|a| {
                Ok(AuxNodes {
                    after: a.after,
                    nodes: freeze(&a.nodes)?,
                    loss_weight: a.loss_weight,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Network {
            spec: self.spec,
            device: self.device,
            tower,
            aux,
            params: Vec::new(),
            conv_impl: self.conv_impl,
        })
    }

    /// Selects the convolution implementation (tests compare the GEMM op with candle's).
    pub fn set_conv_impl(&mut self, conv_impl: ConvImpl) {
        self.conv_impl = conv_impl;
    }

    /// Profiling hook: the top-level stages, tower layers then auxiliary heads, each with the
    /// index of the stage whose output it takes (`None`: the network input).
    pub fn stages(&self) -> Vec<(String, Option<usize>)> {
        let mut out: Vec<(String, Option<usize>)> = self
            .spec
            .tower
            .iter()
            .enumerate()
            .map(|(i, l)| (l.name().to_string(), i.checked_sub(1)))
            .collect();
        for (j, head) in self.aux.iter().enumerate() {
            out.push((self.spec.aux[j].name.to_string(), Some(head.after)));
        }
        out
    }

    /// Profiling hook: runs stage `i` of [`Network::stages`] alone on `x` (training graph when
    /// `dropout_rng` is given).
    pub(crate) fn run_stage(
        &self,
        i: usize,
        x: &Tensor,
        mut dropout_rng: Option<&mut StdRng>,
    ) -> Result<Tensor> {
        let nodes = match i.checked_sub(self.tower.len()) {
            None => std::slice::from_ref(&self.tower[i]),
            Some(j) => &self.aux[j].nodes[..],
        };
        run_seq(
            nodes,
            self.conv_impl,
            x.clone(),
            &mut dropout_rng,
            None,
            &mut None,
            &mut |_, _| Ok(()),
        )
    }

    pub fn params(&self) -> &[Param] {
        &self.params
    }

    pub fn param_count(&self) -> usize {
        self.params.iter().map(|p| p.var.elem_count()).sum()
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Forward pass. With `dropout_rng` it is the training graph (dropout on, auxiliary heads
    /// evaluated); without, the inference graph. `trace` records every top-level layer's output.
    pub fn forward(
        &self,
        x: &Tensor,
        mut dropout_rng: Option<&mut StdRng>,
        mut trace: Option<&mut Trace>,
    ) -> Result<Outputs> {
        let training = dropout_rng.is_some();
        let mut aux_inputs: Vec<(usize, Tensor)> = Vec::new();
        let logits = run_seq(
            &self.tower,
            self.conv_impl,
            x.clone(),
            &mut dropout_rng,
            Some(&self.spec.tower),
            &mut trace,
            &mut |i, t| {
                if training && self.aux.iter().any(|a| a.after == i) {
                    aux_inputs.push((i, t.clone()));
                }
                Ok(())
            },
        )?;
        let mut aux = Vec::new();
        for (i, input) in aux_inputs {
            for head in self.aux.iter().filter(|a| a.after == i) {
                let out = run_seq(
                    &head.nodes,
                    self.conv_impl,
                    input.clone(),
                    &mut dropout_rng,
                    None,
                    &mut None,
                    &mut |_, _| Ok(()),
                )?;
                aux.push((out, head.loss_weight));
            }
        }
        Ok(Outputs { logits, aux })
    }

    /// The training loss: softmax cross-entropy of the classifier plus the weighted auxiliary
    /// losses, as Caffe sums them. Built from differentiable ops (log_softmax), never
    /// `softmax_last_dim`, which has no gradient.
    pub fn loss(&self, outputs: &Outputs, labels: &Tensor) -> Result<Tensor> {
        let mut loss = candle_nn::loss::cross_entropy(&outputs.logits, labels)?;
        for (logits, weight) in &outputs.aux {
            loss = (loss + (candle_nn::loss::cross_entropy(logits, labels)? * *weight)?)?;
        }
        Ok(loss)
    }
}
