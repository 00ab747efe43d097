//! What runs one query: edgebench's own AlexNet/GoogLeNet forward (inference graph: no
//! dropout, no auxiliary heads) through its kernels, or any ONNX file through tract-onnx.
//!
//! An ONNX file is untrusted: its size is bounded, every operator is checked against the
//! engine's before the graph is built (refused naming the operator and the node), and its
//! inputs must have static shapes but for the first (batch) dimension.

use crate::config::DeviceKind;
use crate::models::{self, Network};
use anyhow::{bail, Context as _};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tract_linalg::multithread::Executor;
use tract_onnx::pb;
use tract_onnx::tract_core::runtime::RunOptions;
use tract_onnx::prelude::{
    DatumType, Framework, InferenceFact, InferenceModelExt, TValue, Tensor,
    TypedRunnableModel,
};

/// The largest ONNX file read (protobuf's own limit is 2 GiB).
pub(crate) const MAX_MODEL_BYTES: u64 = 2 << 30;

/// The most elements one input tensor may have (1 GiB of f32).
const MAX_INPUT_ELEMENTS: usize = 1 << 28;

/// How deep If/Loop/Scan bodies may nest before the file is refused.
const MAX_GRAPH_DEPTH: usize = 16;

/// A model as the config names it: one of edgebench's networks, or an ONNX file (named by its
/// file stem in the results).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ModelRef {
    Own { net: String },
    Onnx { name: String, path: PathBuf },
}

impl ModelRef {
    /// `alexnet`, `googlenet` or a path ending in `.onnx`.
    pub(crate) fn parse(text: &str) -> Result<ModelRef, String> {
        let text = text.trim();
        if let Some(spec) = models::by_name(text) {
            return Ok(ModelRef::Own {
                net: spec.name.to_string(),
            });
        }
        let path = Path::new(text);
        let is_onnx = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if !is_onnx || stem.is_empty() {
            return Err(format!(
                "infer.model (--model): '{text}' is neither a network edgebench knows ({}), a \
                 file ending in .onnx nor a folder of them",
                models::names().join(", ")
            ));
        }
        Ok(ModelRef::Onnx {
            name: stem.to_string(),
            path: path.to_path_buf(),
        })
    }

    /// Its name in results: the network's, or the file's stem.
    pub(crate) fn name(&self) -> &str {
        match self {
            ModelRef::Own { net } => net,
            ModelRef::Onnx { name, .. } => name,
        }
    }
}

/// One input of an ONNX graph: its name, element type and shape, `None` for the dynamic
/// batch dimension.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InputSpec {
    pub name: String,
    pub datum: DatumType,
    pub shape: Vec<Option<usize>>,
}

/// An ONNX file read and checked: its protobuf and its inputs.
pub(crate) struct OnnxFile {
    pub proto: pb::ModelProto,
    pub inputs: Vec<InputSpec>,
}

impl OnnxFile {
    /// The batch the graph fixes (its inputs' first dimension), None when it is dynamic.
    pub(crate) fn fixed_batch(&self) -> Option<usize> {
        self.inputs.first().and_then(|i| i.shape.first().copied().flatten())
    }
}

/// Reads `path`, decodes it and checks every operator against tract-onnx's: nothing is built
/// yet, so a refusal costs nothing.
pub(crate) fn read_onnx(path: &Path) -> anyhow::Result<OnnxFile> {
    let what = || format!("ONNX model {}", path.display());
    let meta = std::fs::metadata(path).with_context(|| format!("{}: cannot read it", what()))?;
    if !meta.is_file() {
        bail!("{}: not a file", what());
    }
    if meta.len() > MAX_MODEL_BYTES {
        bail!(
            "{}: {} bytes, more than the {} an ONNX file can hold",
            what(),
            meta.len(),
            MAX_MODEL_BYTES
        );
    }
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read it", what()))?;
    let proto = tract_onnx::onnx()
        .proto_model_for_read(&mut bytes.as_slice())
        .map_err(|e| anyhow::anyhow!("{}: not an ONNX model ({e})", what()))?;
    let graph = proto
        .graph
        .as_ref()
        .with_context(|| format!("{}: the file holds no graph", what()))?;
    check_operators(graph, 0).with_context(what)?;
    let inputs = graph_inputs(graph).with_context(what)?;
    Ok(OnnxFile { proto, inputs })
}

/// Every node's operator is one tract-onnx builds, in this graph and the bodies of its
/// If/Loop/Scan nodes.
fn check_operators(graph: &pb::GraphProto, depth: usize) -> anyhow::Result<()> {
    if depth > MAX_GRAPH_DEPTH {
        bail!("subgraphs nested deeper than {MAX_GRAPH_DEPTH} levels");
    }
    let register = tract_onnx::onnx().op_register;
    for (index, node) in graph.node.iter().enumerate() {
        let standard = node.domain.is_empty() || node.domain == "ai.onnx";
        if !standard || !register.0.contains_key(&node.op_type) {
            let op = match standard {
                true => node.op_type.clone(),
                false => format!("{}.{}", node.domain, node.op_type),
            };
            bail!(
                "operator {op} of node {} is not supported by the ONNX engine (tract-onnx); \
                 nothing was run or written",
                node_label(node, index)
            );
        }
        for attribute in &node.attribute {
            for sub in attribute.g.iter().chain(&attribute.graphs) {
                check_operators(sub, depth + 1)?;
            }
        }
    }
    Ok(())
}

/// A node as an error names it: its name, else its index and first output.
fn node_label(node: &pb::NodeProto, index: usize) -> String {
    match (node.name.is_empty(), node.output.first()) {
        (false, _) => format!("'{}'", node.name),
        (true, Some(out)) => format!("#{index} (output '{out}')"),
        (true, None) => format!("#{index}"),
    }
}

/// The graph's inputs that no initializer feeds.
fn graph_inputs(graph: &pb::GraphProto) -> anyhow::Result<Vec<InputSpec>> {
    let initialized: std::collections::HashSet<&str> =
        graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let mut inputs = Vec::new();
    for input in graph
        .input
        .iter()
        .filter(|i| !initialized.contains(i.name.as_str()))
    {
        let tensor = match input.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(pb::type_proto::Value::TensorType(t)) => t,
            _ => bail!("input '{}' is not a tensor", input.name),
        };
        let datum = datum_of(tensor.elem_type).with_context(|| format!("input '{}'", input.name))?;
        let dims = tensor
            .shape
            .as_ref()
            .with_context(|| format!("input '{}' has no shape", input.name))?;
        let mut shape = Vec::with_capacity(dims.dim.len());
        for (axis, dim) in dims.dim.iter().enumerate() {
            let fixed = match &dim.value {
                Some(pb::tensor_shape_proto::dimension::Value::DimValue(v)) if *v > 0 => {
                    Some(usize::try_from(*v).context("dimension out of range")?)
                }
                _ => None,
            };
            if fixed.is_none() && axis > 0 {
                bail!(
                    "input '{}': dimension {axis} is dynamic; only the first (batch) dimension \
                     may be, the others must be fixed in the file",
                    input.name
                );
            }
            shape.push(fixed);
        }
        inputs.push(InputSpec {
            name: input.name.clone(),
            datum,
            shape,
        });
    }
    if inputs.is_empty() {
        bail!("the graph has no input to feed");
    }
    Ok(inputs)
}

/// The ONNX element types inputs may have.
fn datum_of(elem_type: i32) -> anyhow::Result<DatumType> {
    use pb::tensor_proto::DataType as T;
    Ok(match T::try_from(elem_type) {
        Ok(T::Float) => DatumType::F32,
        Ok(T::Double) => DatumType::F64,
        Ok(T::Float16) => DatumType::F16,
        Ok(T::Uint8) => DatumType::U8,
        Ok(T::Int8) => DatumType::I8,
        Ok(T::Int32) => DatumType::I32,
        Ok(T::Int64) => DatumType::I64,
        Ok(T::Bool) => DatumType::Bool,
        _ => bail!("element type {elem_type} is not one edgebench can make inputs of"),
    })
}

/// A model ready to answer queries of one batch size, with its seeded inputs.
pub(crate) enum Loaded {
    Own {
        net: Box<Network>,
        input: candle_core::Tensor,
    },
    Onnx {
        plan: Arc<TypedRunnableModel>,
        inputs: Vec<TValue>,
    },
}

impl Loaded {
    /// Loads `model` on `device` for queries of `batch` samples, inputs drawn from `seed`.
    pub(crate) fn load(
        model: &ModelRef,
        device: DeviceKind,
        batch: usize,
        seed: u64,
    ) -> anyhow::Result<Loaded> {
        match model {
            ModelRef::Own { net } => {
                let spec = models::by_name(net)
                    .with_context(|| format!("unknown network '{net}'"))?;
                let device = crate::train::device(device)?;
                let net = Network::new(spec, &device, seed)?.frozen()?;
                let [c, h, w] = spec.input;
                let input = own_input(batch, [c, h, w], seed, &device)?;
                Ok(Loaded::Own {
                    net: Box::new(net),
                    input,
                })
            }
            ModelRef::Onnx { path, .. } => {
                if device != DeviceKind::Cpu {
                    bail!(
                        "the ONNX engine (tract-onnx) computes on the CPU only; run ONNX models \
                         with --device cpu"
                    );
                }
                let file = read_onnx(path)?;
                let (plan, inputs) = build_onnx(&file, batch, seed)
                    .with_context(|| format!("ONNX model {}", path.display()))?;
                Ok(Loaded::Onnx { plan, inputs })
            }
        }
    }

    /// One query: the forward pass over the prepared inputs, finished on the device.
    pub(crate) fn query(&self) -> anyhow::Result<()> {
        match self {
            Loaded::Own { net, input } => {
                let out = net.forward(input, None, None)?;
                net.device().synchronize()?;
                drop(out);
            }
            Loaded::Onnx { plan, inputs } => {
                plan.run(inputs.iter().cloned().collect())?;
            }
        }
        Ok(())
    }

    /// The first output as f32 values (the logits), for the cross-checks.
    #[cfg(test)]
    pub(crate) fn logits(&self) -> anyhow::Result<Vec<f32>> {
        match self {
            Loaded::Own { net, input } => {
                let out = net.forward(input, None, None)?.logits;
                Ok(out.flatten_all()?.to_vec1::<f32>()?)
            }
            Loaded::Onnx { plan, inputs } => {
                let outputs = plan.run(inputs.iter().cloned().collect())?;
                let first = outputs.first().context("the model has no output")?;
                let first = first.cast_to::<f32>()?;
                Ok(first.to_plain_array_view::<f32>()?.iter().copied().collect())
            }
        }
    }
}

/// Seeded standard-normal images of edgebench's networks, `[batch, c, h, w]`.
pub(crate) fn own_input(
    batch: usize,
    chw: [usize; 3],
    seed: u64,
    device: &candle_core::Device,
) -> anyhow::Result<candle_core::Tensor> {
    let [c, h, w] = chw;
    let mut rng = StdRng::seed_from_u64(seed);
    let n = batch * c * h * w;
    let data: Vec<f32> = (0..n).map(|_| StandardNormal.sample(&mut rng)).collect();
    Ok(candle_core::Tensor::from_vec(data, (batch, c, h, w), device)?)
}

/// The ONNX graph typed at `batch` and optimised, and its seeded inputs (the same draw as
/// [`own_input`] for an f32 input, so a file exported from edgebench's network sees the same
/// images).
pub(crate) fn build_onnx(
    file: &OnnxFile,
    batch: usize,
    seed: u64,
) -> anyhow::Result<(Arc<TypedRunnableModel>, Vec<TValue>)> {
    let mut model = tract_onnx::onnx().model_for_proto_model(&file.proto)?;
    let mut inputs = Vec::with_capacity(file.inputs.len());
    for (k, spec) in file.inputs.iter().enumerate() {
        let shape: Vec<usize> = spec
            .shape
            .iter()
            .map(|d| d.unwrap_or(batch))
            .collect();
        let n = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= MAX_INPUT_ELEMENTS)
            .with_context(|| {
                format!(
                    "input '{}' of shape {shape:?} is larger than {MAX_INPUT_ELEMENTS} elements",
                    spec.name
                )
            })?;
        model = model.with_input_fact(k, InferenceFact::dt_shape(spec.datum, &shape))?;
        // Each input its own stream: adding an input leaves the others' draws as they were.
        let mut rng = StdRng::seed_from_u64(seed.wrapping_add(k as u64));
        inputs.push(random_tensor(spec.datum, &shape, n, &mut rng)?.into());
    }
    // The matrix products on rayon's global pool: the worker's threads, as edgebench's kernels.
    let options = RunOptions {
        executor: Some(Executor::RayonGlobal),
        ..RunOptions::default()
    };
    let plan = model
        .into_optimized()
        .context("building the graph")?
        .into_runnable_with_options(&options)?;
    Ok((plan, inputs))
}

/// Standard-normal floats, integers in 0..10 (valid indices for small tables), random bools.
fn random_tensor(
    datum: DatumType,
    shape: &[usize],
    n: usize,
    rng: &mut StdRng,
) -> anyhow::Result<Tensor> {
    let floats = |rng: &mut StdRng| -> Vec<f32> { (0..n).map(|_| StandardNormal.sample(rng)).collect() };
    let ints = |rng: &mut StdRng| -> Vec<i64> { (0..n).map(|_| rng.random_range(0..10)).collect() };
    let tensor = match datum {
        DatumType::F32 | DatumType::F64 | DatumType::F16 => {
            Tensor::from_shape(shape, &floats(rng))?.cast_to_dt(datum)?.into_owned()
        }
        DatumType::Bool => {
            let v: Vec<bool> = (0..n).map(|_| rng.random()).collect();
            Tensor::from_shape(shape, &v)?
        }
        _ => Tensor::from_shape(shape, &ints(rng))?
            .cast_to_dt(datum)?
            .into_owned(),
    };
    Ok(tensor)
}
