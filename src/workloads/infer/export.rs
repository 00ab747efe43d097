//! ONNX files edgebench writes itself (`edgebench models --export-onnx DIR`): its AlexNet and
//! GoogLeNet in inference mode (no dropout, no auxiliary heads) with the weights of a seeded
//! network, and a residual block with operators the two CNNs lack (BatchNormalization, Add, a
//! depthwise convolution, global average pooling), so an ONNX engine can be checked against
//! edgebench's own forward, and "any model" against more than the two CNNs.
//!
//! Caffe's pooling rounds its output size up; ONNX pools round down. Each max pool gets the
//! extra end padding that makes the rounded-down size Caffe's (padding is never the maximum),
//! which every engine reads the same way, rather than `ceil_mode`, which engines read
//! differently at the borders.

use crate::models::spec::{infer_layer, Layer, NetSpec};
use crate::models::Network;
use anyhow::{bail, Context as _};
use edgebench_kernels::{pool_output_size, PoolKind};
use prost::Message as _;
use std::path::{Path, PathBuf};
use tract_onnx::pb;
use tract_onnx::pb::attribute_proto::AttributeType;
use tract_onnx::pb::tensor_proto::DataType;

/// The operator set the files declare.
pub(crate) const OPSET: i64 = 13;
/// The IR version of opset 13.
const IR_VERSION: i64 = 7;

/// The input every exported model takes: `input`, f32, its first dimension the batch
/// (`N`, dynamic).
pub(crate) const INPUT: &str = "input";

/// A graph under construction.
#[derive(Default)]
pub(crate) struct GraphBuilder {
    nodes: Vec<pb::NodeProto>,
    initializers: Vec<pb::TensorProto>,
    inputs: Vec<pb::ValueInfoProto>,
    outputs: Vec<pb::ValueInfoProto>,
}

pub(crate) fn int(name: &str, i: i64) -> pb::AttributeProto {
    pb::AttributeProto {
        name: name.into(),
        r#type: AttributeType::Int as i32,
        i,
        ..Default::default()
    }
}

pub(crate) fn ints(name: &str, ints: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto {
        name: name.into(),
        r#type: AttributeType::Ints as i32,
        ints: ints.to_vec(),
        ..Default::default()
    }
}

pub(crate) fn float(name: &str, f: f32) -> pb::AttributeProto {
    pb::AttributeProto {
        name: name.into(),
        r#type: AttributeType::Float as i32,
        f,
        ..Default::default()
    }
}

/// A tensor's type: f32 of `dims`, `None` for a dynamic dimension named `N`.
fn value_info(name: &str, dims: &[Option<usize>]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::dimension::Value;
    let dim = dims
        .iter()
        .map(|d| pb::tensor_shape_proto::Dimension {
            value: Some(match d {
                Some(v) => Value::DimValue(*v as i64),
                None => Value::DimParam("N".into()),
            }),
            ..Default::default()
        })
        .collect();
    pb::ValueInfoProto {
        name: name.into(),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: DataType::Float as i32,
                shape: Some(pb::TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

impl GraphBuilder {
    pub(crate) fn input(&mut self, name: &str, dims: &[Option<usize>]) {
        self.inputs.push(value_info(name, dims));
    }

    pub(crate) fn output(&mut self, name: &str, dims: &[Option<usize>]) {
        self.outputs.push(value_info(name, dims));
    }

    /// A constant f32 tensor (weights), stored as raw little-endian bytes.
    pub(crate) fn constant(&mut self, name: &str, dims: &[usize], data: &[f32]) {
        self.initializers.push(pb::TensorProto {
            name: name.into(),
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: DataType::Float as i32,
            raw_data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ..Default::default()
        });
    }

    /// Adds a node named `name` whose one output is also `name`; returns it.
    pub(crate) fn node(
        &mut self,
        op: &str,
        name: &str,
        inputs: &[&str],
        attributes: Vec<pb::AttributeProto>,
    ) -> String {
        self.nodes.push(pb::NodeProto {
            op_type: op.into(),
            name: name.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![name.into()],
            attribute: attributes,
            ..Default::default()
        });
        name.to_string()
    }

    /// The finished model.
    pub(crate) fn model(self, name: &str) -> pb::ModelProto {
        pb::ModelProto {
            ir_version: IR_VERSION,
            opset_import: vec![pb::OperatorSetIdProto {
                domain: String::new(),
                version: OPSET,
            }],
            producer_name: "edgebench".into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            graph: Some(pb::GraphProto {
                name: name.into(),
                node: self.nodes,
                initializer: self.initializers,
                input: self.inputs,
                output: self.outputs,
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// A tensor's values as f32, for the initializers.
fn values(t: &candle_core::Tensor) -> anyhow::Result<Vec<f32>> {
    Ok(t.flatten_all()?.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>()?)
}

/// Writes the layers of `layers` from `x` (of per-image shape `shape`); returns the last
/// output's name and shape. `params` yields the network's weights in build order.
fn layers(
    g: &mut GraphBuilder,
    layers: &[Layer],
    mut x: String,
    mut shape: [usize; 3],
    params: &mut std::slice::Iter<'_, crate::models::Param>,
) -> anyhow::Result<(String, [usize; 3])> {
    type Blob = (String, Vec<usize>, Vec<f32>);
    let next = |params: &mut std::slice::Iter<'_, crate::models::Param>,
                what: &str|
     -> anyhow::Result<Blob> {
        let p = params
            .next()
            .with_context(|| format!("the network has no parameter left for {what}"))?;
        Ok((p.name.clone(), p.var.dims().to_vec(), values(p.var.as_tensor())?))
    };
    for layer in layers {
        let (out_shape, _, _) = infer_layer(layer, shape);
        x = match layer {
            Layer::Conv(s) => {
                let (w_name, w_dims, w) = next(params, s.name)?;
                let (b_name, b_dims, b) = next(params, s.name)?;
                g.constant(&w_name, &w_dims, &w);
                g.constant(&b_name, &b_dims, &b);
                let (k, p) = (s.kernel as i64, s.pad as i64);
                let y = g.node(
                    "Conv",
                    s.name,
                    &[&x, &w_name, &b_name],
                    vec![
                        ints("kernel_shape", &[k, k]),
                        ints("strides", &[s.stride as i64; 2]),
                        ints("pads", &[p, p, p, p]),
                        int("group", s.groups as i64),
                    ],
                );
                match s.relu {
                    true => g.node("Relu", &format!("{}/relu", s.name), &[&y], vec![]),
                    false => y,
                }
            }
            Layer::Fc(s) => {
                let (w_name, w_dims, w) = next(params, s.name)?;
                let (b_name, b_dims, b) = next(params, s.name)?;
                g.constant(&w_name, &w_dims, &w);
                g.constant(&b_name, &b_dims, &b);
                let flat = g.node(
                    "Flatten",
                    &format!("{}/flatten", s.name),
                    &[&x],
                    vec![int("axis", 1)],
                );
                let y = g.node(
                    "Gemm",
                    s.name,
                    &[&flat, &w_name, &b_name],
                    vec![int("transB", 1)],
                );
                match s.relu {
                    true => g.node("Relu", &format!("{}/relu", s.name), &[&y], vec![]),
                    false => y,
                }
            }
            Layer::Pool { name, pool } => {
                let [_, h, w] = shape;
                let (oh, ow) = (
                    pool_output_size(h, pool.kernel, pool.stride, pool.pad),
                    pool_output_size(w, pool.kernel, pool.stride, pool.pad),
                );
                // End padding that makes ONNX's rounded-down size Caffe's rounded-up one: the
                // last window's end past the input and its begin padding.
                let end = |input: usize, out: usize| {
                    ((out - 1) * pool.stride + pool.kernel).saturating_sub(input + pool.pad)
                };
                let (eh, ew) = (end(h, oh), end(w, ow));
                let op = match pool.kind {
                    PoolKind::Max => "MaxPool",
                    PoolKind::Avg => {
                        if pool.pad > 0 || eh > 0 || ew > 0 {
                            bail!(
                                "average pool {name} pads its input, which Caffe and ONNX \
                                 average differently; it cannot be exported"
                            );
                        }
                        "AveragePool"
                    }
                };
                let (k, p) = (pool.kernel as i64, pool.pad as i64);
                g.node(
                    op,
                    name,
                    &[&x],
                    vec![
                        ints("kernel_shape", &[k, k]),
                        ints("strides", &[pool.stride as i64; 2]),
                        ints("pads", &[p, p, eh as i64, ew as i64]),
                    ],
                )
            }
            Layer::Lrn { name, lrn } => g.node(
                "LRN",
                name,
                &[&x],
                vec![
                    int("size", lrn.size as i64),
                    float("alpha", lrn.alpha as f32),
                    float("beta", lrn.beta as f32),
                    float("bias", lrn.k as f32),
                ],
            ),
            // Inference: dropout is the identity.
            Layer::Dropout { .. } => x,
            Layer::Inception { name, branches } => {
                let mut outs = Vec::with_capacity(branches.len());
                for branch in branches {
                    let (y, _) = self::layers(g, branch, x.clone(), shape, params)?;
                    outs.push(y);
                }
                let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
                g.node("Concat", &format!("{name}/output"), &refs, vec![int("axis", 1)])
            }
        };
        shape = out_shape;
    }
    Ok((x, shape))
}

/// `spec`'s network with the weights `Network::new(spec, cpu, seed)` draws, as an ONNX model
/// of the inference graph: input `input` (N, C, H, W), output `logits` (N, classes).
pub(crate) fn export_net(spec: &'static NetSpec, seed: u64) -> anyhow::Result<pb::ModelProto> {
    let net = Network::new(spec, &candle_core::Device::Cpu, seed)?;
    let mut g = GraphBuilder::default();
    let [c, h, w] = spec.input;
    g.input(INPUT, &[None, Some(c), Some(h), Some(w)]);
    let mut params = net.params().iter();
    let (y, _) = layers(&mut g, &spec.tower, INPUT.into(), spec.input, &mut params)?;
    // The auxiliary heads' parameters come last and are left out.
    let logits = g.node("Identity", "logits", &[&y], vec![]);
    g.output(&logits, &[None, Some(spec.classes)]);
    Ok(g.model(spec.name))
}

/// The residual block's channels and image size.
const RESIDUAL: (usize, usize) = (16, 32);

/// A small residual network with operators the CNNs lack: conv 3x3 → BatchNormalization →
/// ReLU → depthwise conv 3x3 (group = channels) → BatchNormalization → Add (the skip) → ReLU →
/// GlobalAveragePool → Flatten → Gemm → Softmax. Input (N, 3, 32, 32), weights from `seed`.
pub(crate) fn residual_block(seed: u64) -> pb::ModelProto {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (ch, size) = RESIDUAL;
    let mut draw = |n: usize, scale: f32, offset: f32| -> Vec<f32> {
        (0..n)
            .map(|_| offset + scale * rng.random_range(-1.0f32..1.0))
            .collect()
    };
    let mut g = GraphBuilder::default();
    g.input(INPUT, &[None, Some(3), Some(size), Some(size)]);
    g.constant("stem/w", &[ch, 3, 3, 3], &draw(ch * 27, 0.3, 0.0));
    g.constant("stem/b", &[ch], &draw(ch, 0.1, 0.0));
    let stem = g.node(
        "Conv",
        "stem",
        &[INPUT, "stem/w", "stem/b"],
        vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1])],
    );
    let bn = |g: &mut GraphBuilder, name: &str, x: &str, draw: &mut dyn FnMut(usize, f32, f32) -> Vec<f32>| {
        for (part, scale, offset) in [("scale", 0.2, 1.0), ("bias", 0.1, 0.0), ("mean", 0.1, 0.0), ("var", 0.3, 1.0)] {
            g.constant(&format!("{name}/{part}"), &[ch], &draw(ch, scale, offset));
        }
        let inputs = ["scale", "bias", "mean", "var"].map(|p| format!("{name}/{p}"));
        g.node(
            "BatchNormalization",
            name,
            &[x, &inputs[0], &inputs[1], &inputs[2], &inputs[3]],
            vec![float("epsilon", 1e-5)],
        )
    };
    let bn1 = bn(&mut g, "bn1", &stem, &mut draw);
    let relu1 = g.node("Relu", "relu1", &[&bn1], vec![]);
    g.constant("dw/w", &[ch, 1, 3, 3], &draw(ch * 9, 0.3, 0.0));
    let dw = g.node(
        "Conv",
        "dw",
        &[&relu1, "dw/w"],
        vec![
            ints("kernel_shape", &[3, 3]),
            ints("pads", &[1, 1, 1, 1]),
            int("group", ch as i64),
        ],
    );
    let bn2 = bn(&mut g, "bn2", &dw, &mut draw);
    let add = g.node("Add", "skip", &[&bn2, &stem], vec![]);
    let relu2 = g.node("Relu", "relu2", &[&add], vec![]);
    let pool = g.node("GlobalAveragePool", "gap", &[&relu2], vec![]);
    let flat = g.node("Flatten", "flatten", &[&pool], vec![int("axis", 1)]);
    g.constant("fc/w", &[10, ch], &draw(10 * ch, 0.5, 0.0));
    g.constant("fc/b", &[10], &draw(10, 0.1, 0.0));
    let fc = g.node("Gemm", "fc", &[&flat, "fc/w", "fc/b"], vec![int("transB", 1)]);
    let out = g.node("Softmax", "probabilities", &[&fc], vec![int("axis", 1)]);
    g.output(&out, &[None, Some(10)]);
    g.model("residual")
}

/// Writes `alexnet.onnx`, `googlenet.onnx` and `residual.onnx` into `dir` (created if
/// needed), weights from `seed`; returns the files written.
pub(crate) fn export_all(dir: &Path, seed: u64) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    let mut models = Vec::new();
    for spec in crate::models::all() {
        models.push((spec.name.to_string(), export_net(spec, seed)?));
    }
    models.push(("residual".to_string(), residual_block(seed)));
    for (name, model) in models {
        let path = dir.join(format!("{name}.onnx"));
        std::fs::write(&path, model.encode_to_vec())
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
