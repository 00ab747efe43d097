//! The operator micro-benchmark: six basic operations of neural networks timed alone — add
//! (C = A + B), mul (C = A ⊙ B), dot (C = A·B), scalar (C = s·A), sigmoid and tanh — with their
//! FLOP rate and bandwidth judged against both roofs of a roofline: the compute peak and the
//! memory-bandwidth peak, each as the board's theoretical figure and as measured on the host
//! ([`peaks`]).
//!
//! Counting conventions (per trial, [`counts`]); `e` = bytes per element (4 for f32, 8 f64):
//!
//! | op | bytes moved (reads + writes) | FLOPs |
//! |---|---|---|
//! | add, mul | 3 e per element (read A, B; write C) | 1 per element |
//! | scalar | 2 e per element (read A; write C) | 1 per element |
//! | sigmoid 1/(1+e^-x) | 2 e per element | 4 per element: negate, exp, add, divide |
//! | tanh (e^x - e^-x)/(e^x + e^-x) | 2 e per element | 6 per element: 2 exp, negate, subtract, add, divide |
//! | dot, A m×k · B k×n | e (mk + kn + mn): each matrix once | 2mnk |
//!
//! The bytes are the compulsory traffic, as STREAM counts it: a cache that allocates on write
//! also reads C before writing it, which is not counted (nor is it in the measured peaks).
//! exp counts as one FLOP, as the study's formulas are written; the kernels' actual
//! instruction counts differ ([`kernels::exp_f32`] is a polynomial).
//!
//! Sizes are the mebibytes (2^20 bytes) the op touches, as in the study's tables, or a shape.
//! A trial is warm-up executions, then timed executions until both a minimum count and a
//! minimum time are reached; every execution is one iteration record.

pub(crate) mod report;

/// The elementwise loops, the GEMM and the seeded fill (in the kernels crate, where they are
/// also tested on aarch64).
pub use edgebench_kernels::elementwise as kernels;
pub mod peaks;

mod execute;

pub(crate) use execute::{candle_operands, execute_candle, execute_native, Operands};

use crate::clock::monotonic_ns;
use crate::config::DeviceKind;
use crate::power::MIN_SENSOR_UPDATES;
use crate::record::{Control, IterationRecord, Metrics, TrialEnd, WorkItem, WorkloadKind};
use crate::store::{PerIteration, ResultRow, RowItems, TrialKey};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

pub use kernels::Elem;

/// The constant of `scalar` (C = s·A).
pub(crate) const SCALAR: f64 = 1.5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Add,
    Mul,
    Dot,
    Scalar,
    Sigmoid,
    Tanh,
}

impl Op {
    pub const ALL: [Op; 6] = [Op::Add, Op::Mul, Op::Dot, Op::Scalar, Op::Sigmoid, Op::Tanh];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Mul => "mul",
            Op::Dot => "dot",
            Op::Scalar => "scalar",
            Op::Sigmoid => "sigmoid",
            Op::Tanh => "tanh",
        }
    }

    pub fn parse(s: &str) -> Result<Op> {
        let t = s.trim().to_ascii_lowercase();
        Op::ALL
            .into_iter()
            .find(|o| o.as_str() == t)
            .with_context(|| {
                format!("unknown op {s:?}: use one of add, mul, dot, scalar, sigmoid, tanh")
            })
    }

    /// Arrays of the op's size it reads or writes once each (A, B, C or A, C). Dot's three
    /// matrices differ in size; see [`counts`].
    pub(crate) fn arrays(self) -> usize {
        match self {
            Op::Add | Op::Mul | Op::Dot => 3,
            Op::Scalar | Op::Sigmoid | Op::Tanh => 2,
        }
    }

    /// FLOPs per output element of the elementwise ops (the table in the module docs).
    pub(crate) fn flops_per_element(self) -> Option<u64> {
        match self {
            Op::Add | Op::Mul | Op::Scalar => Some(1),
            Op::Sigmoid => Some(4),
            Op::Tanh => Some(6),
            Op::Dot => None,
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    F64,
}

impl Dtype {
    pub(crate) fn size_bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F64 => 8,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
        }
    }

    pub fn parse(s: &str) -> Result<Dtype> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(Dtype::F32),
            "f64" | "float64" => Ok(Dtype::F64),
            _ => bail!("unknown dtype {s:?}: use f32 or f64"),
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who computes the op: edgebench's own CPU kernels ([`kernels`]) or candle's tensor ops (the
/// only engine on CUDA, and on the CPU the comparison that shows what the kernels gain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Edgebench,
    Candle,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Edgebench => "edgebench",
            Engine::Candle => "candle",
        }
    }

    /// The fastest engine on a device: the kernels on the CPU, candle's ops on CUDA.
    pub(crate) fn default_for(device: DeviceKind) -> Engine {
        match device {
            DeviceKind::Cpu => Engine::Edgebench,
            DeviceKind::Cuda => Engine::Candle,
        }
    }
}

/// The operands' shape: a number of elements (A, B, C of the elementwise ops alike) or the
/// matrix product's m, n, k.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    Elements(usize),
    Matrix { m: usize, n: usize, k: usize },
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shape::Elements(e) => write!(f, "{e} elements"),
            Shape::Matrix { m, n, k } => write!(f, "{m}x{n}x{k}"),
        }
    }
}

/// Largest size accepted, MiB: beyond any board's memory, so a larger value is a unit slip.
pub(crate) const MAX_MB: f64 = 1024.0 * 1024.0;

/// The shape whose operands together take `mb` MiB: elementwise ops split it over their
/// arrays; dot takes square n×n matrices (3n² elements).
pub(crate) fn shape_for_mb(op: Op, dtype: Dtype, mb: f64) -> Result<Shape> {
    if !(mb.is_finite() && mb > 0.0 && mb <= MAX_MB) {
        bail!("op size {mb} MiB: give the mebibytes the op touches, a number in (0, {MAX_MB}]");
    }
    let elements = mb * (1u64 << 20) as f64 / dtype.size_bytes() as f64;
    let shape = match op {
        Op::Dot => {
            let n = (elements / 3.0).sqrt().round().max(1.0) as usize;
            Shape::Matrix { m: n, n, k: n }
        }
        _ => Shape::Elements((elements / op.arrays() as f64).round().max(1.0) as usize),
    };
    Ok(shape)
}

/// One `--mb` entry: a number of MiB (`32`, `32mb`, `32MiB`), or a shape: `MxNxK` for dot, a count of
/// elements or `RxC` (rows × columns) for the elementwise ops. Returns the shape and the MiB
/// asked for (None for a shape).
pub fn parse_size(op: Op, dtype: Dtype, text: &str) -> Result<(Shape, Option<f64>)> {
    let t = text.trim().to_ascii_lowercase();
    let dims: Vec<&str> = t.split('x').collect();
    if dims.len() > 1 {
        let parsed: Vec<usize> = dims
            .iter()
            .map(|d| d.trim().parse::<usize>().ok().filter(|&v| v > 0))
            .collect::<Option<_>>()
            .with_context(|| {
                format!("op size {text:?}: each dimension must be a positive integer")
            })?;
        let shape = match (op, parsed.as_slice()) {
            (Op::Dot, &[m, n, k]) => Shape::Matrix { m, n, k },
            (Op::Dot, _) => bail!("op size {text:?}: dot takes MxNxK (e.g. 1024x1024x1024)"),
            (_, &[r, c]) => Shape::Elements(
                r.checked_mul(c)
                    .with_context(|| format!("op size {text:?} is too large"))?,
            ),
            _ => bail!("op size {text:?}: {op} takes rows x columns (e.g. 4096x4096)"),
        };
        let bytes = counts(op, dtype, shape).bytes as f64;
        if bytes / (1u64 << 20) as f64 > MAX_MB {
            bail!("op size {text:?} touches more than {MAX_MB} MiB");
        }
        return Ok((shape, None));
    }
    // Sizes are MiB however they are written.
    let number = ["mib", "mb"]
        .iter()
        .find_map(|unit| t.strip_suffix(unit))
        .unwrap_or(&t)
        .trim();
    let mb: f64 = number.parse().with_context(|| {
        format!(
            "op size {text:?}: give mebibytes (e.g. 32) or a shape (MxNxK for dot, RxC otherwise)"
        )
    })?;
    Ok((shape_for_mb(op, dtype, mb)?, Some(mb)))
}

/// What one execution of the op costs by the conventions in the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Elements of the output.
    pub elements: u64,
    /// Bytes read and written, each operand once.
    pub bytes: u64,
    pub flops: u64,
}

impl Counts {
    /// FLOPs per byte moved: where the op sits on the roofline's x axis.
    pub fn intensity(&self) -> f64 {
        self.flops as f64 / self.bytes as f64
    }
}

pub fn counts(op: Op, dtype: Dtype, shape: Shape) -> Counts {
    let e = dtype.size_bytes() as u64;
    match (op, shape) {
        (Op::Dot, Shape::Matrix { m, n, k }) => {
            let (m, n, k) = (m as u64, n as u64, k as u64);
            Counts {
                elements: m * n,
                bytes: e * (m * k + k * n + m * n),
                flops: 2 * m * n * k,
            }
        }
        (Op::Dot, Shape::Elements(len)) => {
            // A dot over a plain element count is the square product of that many elements.
            let side = (len as f64).sqrt().round() as usize;
            counts(
                op,
                dtype,
                Shape::Matrix {
                    m: side,
                    n: side,
                    k: side,
                },
            )
        }
        (_, shape) => {
            let len = match shape {
                Shape::Elements(len) => len as u64,
                Shape::Matrix { m, n, .. } => (m * n) as u64,
            };
            Counts {
                elements: len,
                bytes: e * op.arrays() as u64 * len,
                flops: op.flops_per_element().unwrap_or(0) * len,
            }
        }
    }
}

/// The peaks a trial is judged against, for its device and dtype (None = unknown): the
/// board's theoretical figures and the ones measured on the host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Roofs {
    pub peak_gflops: Option<f64>,
    pub peak_gbs: Option<f64>,
    pub measured_gflops: Option<f64>,
    /// STREAM copy (one read, one write per element): the roof of scalar, sigmoid, tanh.
    pub measured_copy_gbs: Option<f64>,
    /// STREAM triad (two reads, one write): the roof of add, mul and dot.
    pub measured_triad_gbs: Option<f64>,
}

impl Roofs {
    /// The measured bandwidth of the STREAM kernel with the op's pattern of reads and writes.
    pub(crate) fn measured_gbs_for(&self, op: Op) -> Option<f64> {
        match op.arrays() {
            2 => self.measured_copy_gbs,
            _ => self.measured_triad_gbs,
        }
    }
}

/// One trial of the workload: the worker's job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpsJob {
    pub op: Op,
    pub dtype: Dtype,
    pub shape: Shape,
    /// The size asked for in MiB (None when given as a shape).
    pub mb: Option<f64>,
    pub device: DeviceKind,
    pub engine: Engine,
    /// Leading executions that are recorded but not measured.
    pub warmup: usize,
    /// Timed executions continue until both this many ...
    pub min_executions: usize,
    /// ... and this many seconds of them have run.
    pub min_time_s: f64,
    /// Inputs are drawn from this seed.
    pub seed: u64,
    pub roofs: Roofs,
}

/// Defaults of a trial's timing: a few warm-ups, then at least 10 executions and 1 s.
pub(crate) const DEFAULT_WARMUP: usize = 2;
pub(crate) const DEFAULT_MIN_EXECUTIONS: usize = 10;
pub(crate) const DEFAULT_MIN_TIME_S: f64 = 1.0;

impl OpsJob {
    /// A job with the default timing, seed and engine, no roofs.
    pub fn new(op: Op, dtype: Dtype, shape: Shape, mb: Option<f64>, device: DeviceKind) -> Self {
        OpsJob {
            op,
            dtype,
            shape,
            mb,
            device,
            engine: Engine::default_for(device),
            warmup: DEFAULT_WARMUP,
            min_executions: DEFAULT_MIN_EXECUTIONS,
            min_time_s: DEFAULT_MIN_TIME_S,
            seed: 0x5EED,
            roofs: Roofs::default(),
        }
    }

    pub fn counts(&self) -> Counts {
        counts(self.op, self.dtype, self.shape)
    }

    pub fn params(&self) -> OpsParams {
        let c = self.counts();
        let (m, n, k) = match (self.op, self.shape) {
            (Op::Dot, Shape::Matrix { m, n, k }) => (Some(m), Some(n), Some(k)),
            _ => (None, None, None),
        };
        OpsParams {
            op: self.op,
            dtype: self.dtype,
            engine: self.engine,
            mb: self.mb,
            elements: c.elements,
            m,
            n,
            k,
            bytes: c.bytes,
            flops: c.flops,
        }
    }

    /// For progress lines: `add f32 32 MiB` or `dot f32 1024x1024x1024`.
    pub fn label(&self) -> String {
        let size = match (self.mb, self.shape) {
            (Some(mb), _) => format!("{mb} MiB"),
            (None, shape) => shape.to_string(),
        };
        format!(
            "{} {} {size} ({})",
            self.op,
            self.dtype,
            self.engine.as_str()
        )
    }
}

/// The workload's parameters in a trial's key and its results row (field order fixed: the key
/// is this struct's JSON text). None for the matrix dimensions of the elementwise ops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpsParams {
    pub op: Op,
    pub dtype: Dtype,
    pub engine: Engine,
    pub mb: Option<f64>,
    pub elements: u64,
    pub m: Option<usize>,
    pub n: Option<usize>,
    pub k: Option<usize>,
    pub bytes: u64,
    pub flops: u64,
}

/// The trial's resume key: the common columns as far as they mean anything here (`net` names
/// the op; one "batch" of one "epoch"; no images, no data set), the rest in `params`.
pub fn key(job: &OpsJob) -> TrialKey {
    TrialKey {
        workload: KIND,
        net: job.op.as_str().into(),
        device: job.device.as_str().into(),
        batch: 1,
        epochs: 1,
        images: 0,
        dataset: String::new(),
        params: super::params_text(&job.params()),
    }
}

/// The job as a planned trial: it records at least its warm-ups and minimum executions (more
/// when the minimum time needs them); an item means nothing here.
pub fn planned(job: OpsJob) -> super::PlannedTrial<OpsJob> {
    super::PlannedTrial {
        key: key(&job),
        label: job.label(),
        iterations: job.warmup + job.min_executions,
        items_per_iteration: None,
        memory_estimate_bytes: memory_estimate(&job),
        repetition: 1,
        job,
    }
}

/// The `[ops]` table's jobs, devices outermost, then ops, then sizes (the op's own
/// `ops.mb_per_op` entry, else `ops.mb`); bad names and sizes are refused naming the key and
/// its flag. No roofs yet.
pub fn jobs(config: &crate::config::Config) -> Result<Vec<OpsJob>> {
    let section = config
        .section(KIND.as_str())
        .map_err(anyhow::Error::msg)?;
    jobs_of(config, &section)
}

fn jobs_of(config: &crate::config::Config, o: &OpsConfig) -> Result<Vec<OpsJob>> {
    let mut per_op: Vec<(Op, &[f64], String)> = Vec::new();
    for (name, sizes) in &o.mb_per_op {
        let key = format!("ops.mb_per_op.{name}");
        let op = Op::parse(name).with_context(|| key.clone())?;
        if sizes.is_empty() {
            anyhow::bail!("{key} must name at least one size");
        }
        per_op.push((op, sizes, key));
    }
    let sizes_of = |op: Op| -> (&[f64], String) {
        match per_op.iter().find(|(o, ..)| *o == op) {
            Some((_, sizes, key)) => (sizes, key.clone()),
            None => (&o.mb, "ops.mb (--mb)".to_string()),
        }
    };
    let ops = o
        .ops
        .iter()
        .map(|name| Op::parse(name).context("ops.ops (--op)"))
        .collect::<Result<Vec<Op>>>()?;
    if ops.is_empty() || ops.iter().any(|&op| sizes_of(op).0.is_empty()) {
        anyhow::bail!("ops.ops (--op) and ops.mb (--mb) must each name at least one value");
    }
    let dtype = Dtype::parse(&o.dtype).context("ops.dtype")?;
    let engine = match o.engine.as_str() {
        "edgebench" => Engine::Edgebench,
        "candle" => Engine::Candle,
        other => anyhow::bail!("ops.engine: '{other}' is not edgebench or candle"),
    };
    if o.min_executions == 0 || !(o.min_time_s >= 0.0 && o.min_time_s <= 3600.0) {
        anyhow::bail!(
            "ops.min_executions must be at least 1 and ops.min_time_s between 0 and 3600 s"
        );
    }
    let mut jobs = Vec::new();
    for &device in &config.sweep.devices {
        for &op in &ops {
            let (sizes, key) = sizes_of(op);
            for &mb in sizes {
                let shape = shape_for_mb(op, dtype, mb).with_context(|| key.clone())?;
                let mut job = OpsJob::new(op, dtype, shape, Some(mb), device);
                if device == DeviceKind::Cpu {
                    job.engine = engine;
                }
                job.warmup = config.sweep.warmup_iterations;
                job.min_executions = o.min_executions;
                job.min_time_s = o.min_time_s;
                job.seed = config.train.seed;
                jobs.push(job);
            }
        }
    }
    Ok(jobs)
}

/// `[ops]`: the operator micro-benchmarks (`--workload ops`), on `sweep.devices`. Names and
/// sizes are checked by the workload before anything runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct OpsConfig {
    /// `add`, `mul`, `dot`, `scalar`, `sigmoid`, `tanh`.
    pub ops: Vec<String>,
    /// Megabytes (MiB) of data each op touches (dot: square matrices of that total), for the
    /// ops `mb_per_op` does not list.
    pub mb: Vec<f64>,
    /// `[ops.mb_per_op]`: an op's own sizes, e.g. `dot = [5, 9, 17, 33, 65]` (the study sized
    /// each op differently). `--mb` replaces these too.
    pub mb_per_op: BTreeMap<String, Vec<f64>>,
    /// `f32` or `f64`.
    pub dtype: String,
    /// `edgebench` (the project's kernels) or `candle` (candle's own ops; always on cuda).
    pub engine: String,
    /// Timed executions go on until both this many ...
    pub min_executions: usize,
    /// ... and this many seconds of them have run.
    pub min_time_s: f64,
}

impl Default for OpsConfig {
    fn default() -> Self {
        OpsConfig {
            ops: ["add", "mul", "dot", "scalar", "sigmoid", "tanh"]
                .map(String::from)
                .to_vec(),
            mb: vec![2.0, 8.0, 32.0],
            mb_per_op: BTreeMap::new(),
            dtype: "f32".into(),
            engine: "edgebench".into(),
            min_executions: 10,
            min_time_s: 1.0,
        }
    }
}

pub const KIND: WorkloadKind = WorkloadKind::named("ops");

/// Operator micro-benchmarks over (op, size, device) (`[ops]`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ops;

/// What the ops workload plans from: the `[ops]` table's jobs and the roofs they are judged
/// against.
#[derive(Debug)]
pub struct OpsPlan {
    pub jobs: Vec<OpsJob>,
    pub peaks: Option<peaks::PeaksReport>,
}

impl super::TypedWorkload for Ops {
    type Section = OpsConfig;
    type Checked = Vec<OpsJob>;
    type Plan = OpsPlan;
    type Job = OpsJob;
    const KIND: WorkloadKind = KIND;

    fn report_section(&self) -> Option<Box<dyn crate::render::Section>> {
        Some(Box::new(report::Ops))
    }

    /// Checks the operators and sizes, and measures the roofs they are judged against.
    fn prepare(
        &self,
        config: &crate::config::Config,
        jobs: Vec<OpsJob>,
        host: &crate::host::HostPaths,
        board: &crate::board::BoardProfile,
    ) -> Result<super::Preparation<OpsPlan>> {
        // f64 ops are judged against a DGEMM; f32 sweeps skip measuring it.
        let dgemm = jobs.iter().any(|j| j.dtype == Dtype::F64);
        tracing::info!("measuring the peaks (GEMM, STREAM) the operators are judged against");
        let report = peaks::report(
            host,
            board,
            &config.sweep.devices,
            config.train.threads,
            dgemm,
        )?;
        Ok(super::Preparation {
            provenance: report.provenance_items(),
            dataset: String::new(),
            plan: OpsPlan {
                jobs,
                peaks: Some(report),
            },
        })
    }

    fn plan(
        &self,
        input: &super::PlanInput<'_>,
        plan: &OpsPlan,
    ) -> Vec<super::PlannedTrial<OpsJob>> {
        self::plan(input, plan)
    }

    fn run(&self, job: OpsJob, stop: &AtomicBool, emit: super::Emit<'_>) -> Result<super::JobEnd> {
        run(&job, stop, emit).map(super::JobEnd::from)
    }

    fn metrics(&self, job: &OpsJob, measured: &[IterationRecord]) -> Metrics {
        metrics(job, measured)
    }

    /// One execution per iteration, and an operator has no loss.
    fn profile(&self) -> super::WorkloadProfile {
        super::WorkloadProfile {
            items: RowItems {
                item: WorkItem::Execution,
                per_iteration: PerIteration::One,
                over_dataset: false,
            },
            records_loss: false,
            computes_on_devices: true,
            shows_progress: true,
            watches_tree: false,
            longer_trial_advice: "a longer minimum time per operator (ops.min_time_s, at least \
                                  10 sensor periods)",
        }
    }

    /// `OP DTYPE SIZE`, e.g. `add f32 32MiB` or `matmul f32 64x64x64`.
    fn names(&self, row: &ResultRow) -> super::RowNames {
        let param = |k: &str| match row.params.get(k) {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        let size = match param("mb") {
            Some(mb) => format!("{mb}MiB"),
            None => format!(
                "{}x{}x{}",
                param("m").unwrap_or_default(),
                param("n").unwrap_or_default(),
                param("k").unwrap_or_default()
            ),
        };
        super::RowNames {
            label: format!(
                "{} {} {size}",
                param("op").unwrap_or_default(),
                param("dtype").unwrap_or_default()
            ),
            engine: None,
        }
    }

    fn options(&self) -> Vec<clap::Arg> {
        use clap::{value_parser, Arg};
        vec![
            Arg::new("ops.ops")
                .long("op")
                .value_name("OPS")
                .value_delimiter(',')
                .help("ops: operators, comma separated: add,mul,dot,scalar,sigmoid,tanh"),
            Arg::new("ops.mb")
                .long("mb")
                .value_name("MIB")
                .value_delimiter(',')
                .value_parser(value_parser!(f64))
                .help("ops: mebibytes (MiB) each op touches, comma separated (e.g. 2,8,32)"),
        ]
    }

    /// Sizes given on the command line are every op's: `--mb` replaces `[ops.mb_per_op]` too.
    fn set_option(&self, section: &mut toml::Value, key: &str, value: toml::Value) {
        if let (toml::Value::Table(table), "mb") = (&mut *section, key) {
            table.remove("mb_per_op");
        }
        super::set_key(section, key, value);
    }

    /// The sweep's nets and batches are checked as the CNN's, the section expanded into jobs.
    fn check(
        &self,
        config: &crate::config::Config,
        section: OpsConfig,
    ) -> std::result::Result<Vec<OpsJob>, String> {
        super::check_image_sweep(config)?;
        jobs_of(config, &section).map_err(|e| format!("{e:#}"))
    }

    /// The job's own warm-up executions, which its timed loop leaves out.
    fn warmup_iterations(&self, job: &OpsJob, _configured: usize) -> usize {
        job.warmup
    }

    fn energy_metrics(
        &self,
        job: &OpsJob,
        measured: usize,
        energy_j: f64,
    ) -> serde_json::Map<String, serde_json::Value> {
        energy_metrics(job, measured, energy_j)
    }
}

/// Sensor readings a trial's measured time spans beyond the [`MIN_SENSOR_UPDATES`] its energy
/// needs: the first and last reading may fall just outside the measured window.
pub(crate) const READING_MARGIN: usize = 2;

/// The shortest measured time per trial that gives its energy enough distinct sensor readings
/// (`MIN_SENSOR_UPDATES` + [`READING_MARGIN`] periods of the sensor); None without power.
pub(crate) fn min_time_for_power(reading_period: Option<std::time::Duration>) -> Option<f64> {
    reading_period.map(|p| (MIN_SENSOR_UPDATES + READING_MARGIN) as f64 * p.as_secs_f64())
}

/// The sweep's trials, each judged against the roofs measured for its device; with power
/// measured, each measured at least long enough for its energy to rest on
/// [`MIN_SENSOR_UPDATES`] sensor readings, whatever `ops.min_time_s` says.
pub fn plan(input: &super::PlanInput<'_>, plan: &OpsPlan) -> Vec<super::PlannedTrial<OpsJob>> {
    let power_min_s = min_time_for_power(input.prepared.power_reading_period);
    plan.jobs
        .iter()
        .cloned()
        .map(|mut job| {
            if let Some(min_s) = power_min_s.filter(|s| *s > job.min_time_s) {
                job.min_time_s = min_s;
            }
            if let Some(d) = plan.peaks.as_ref().and_then(|p| p.device(job.device)) {
                job.roofs = d.roofs(job.dtype);
            }
            planned(job)
        })
        .collect()
}

/// Bytes a trial holds: its operands (each once; the counted bytes are exactly that), plus on
/// candle's engine the output each execution allocates while the previous one is alive.
pub(crate) fn memory_estimate(job: &OpsJob) -> u64 {
    let c = job.counts();
    let output = c.elements * job.dtype.size_bytes() as u64;
    match job.engine {
        Engine::Edgebench => c.bytes,
        // sigmoid in candle is several elementwise passes, each with its own output.
        Engine::Candle => c.bytes + 3 * output,
    }
}

fn put_energy(
    extra: &mut serde_json::Map<String, serde_json::Value>,
    per_gflop: Option<f64>,
    per_gbyte: Option<f64>,
) {
    extra.insert("joule_per_gflop".into(), serde_json::json!(per_gflop));
    extra.insert("joule_per_gbyte".into(), serde_json::json!(per_gbyte));
}

/// Energy per unit of work, once the trial's energy over its `executions` measured
/// executions is known: `joule_per_gflop` and `joule_per_gbyte` (the bytes the op moves).
pub(crate) fn energy_metrics(
    job: &OpsJob,
    executions: usize,
    energy_j: f64,
) -> serde_json::Map<String, serde_json::Value> {
    let c = job.counts();
    let per = |units: u64| {
        let total = units as f64 * executions as f64 * 1e-9;
        (total > 0.0).then(|| energy_j / total)
    };
    let mut extra = serde_json::Map::new();
    put_energy(&mut extra, per(c.flops), per(c.bytes));
    extra
}

/// A percentage of a peak; None when the peak is unknown or not positive.
fn pct(achieved: f64, peak: Option<f64>) -> Option<f64> {
    peak.filter(|p| *p > 0.0 && p.is_finite())
        .map(|p| 100.0 * achieved / p)
}

/// The trial's metrics from its measured (post-warm-up) executions: the shared step timing,
/// GFLOP/s, and in `extra` `gbyte_per_s`, `intensity_flop_per_byte`, `executions` and the four
/// efficiencies (`pct_peak_flops`, `pct_peak_bandwidth`, `pct_measured_peak_flops`,
/// `pct_measured_peak_bandwidth`; null where the peak is unknown). Without any execution
/// only the timing's empty values.
pub fn metrics(job: &OpsJob, measured: &[IterationRecord]) -> Metrics {
    let mut m = super::step_metrics(measured);
    let Some(median) = m.time_per_iteration_s else {
        return m;
    };
    let c = job.counts();
    let (gflops, gbs) = if median > 0.0 {
        (
            c.flops as f64 / median * 1e-9,
            c.bytes as f64 / median * 1e-9,
        )
    } else {
        (f64::INFINITY, f64::INFINITY)
    };
    let r = &job.roofs;
    let mut extra = serde_json::Map::new();
    let mut put = |k: &str, v: Option<f64>| {
        extra.insert(k.to_string(), serde_json::json!(v));
    };
    put("gbyte_per_s", Some(gbs));
    put("intensity_flop_per_byte", Some(c.intensity()));
    put("pct_peak_flops", pct(gflops, r.peak_gflops));
    put("pct_peak_bandwidth", pct(gbs, r.peak_gbs));
    put("pct_measured_peak_flops", pct(gflops, r.measured_gflops));
    put(
        "pct_measured_peak_bandwidth",
        pct(gbs, r.measured_gbs_for(job.op)),
    );
    extra.insert("executions".into(), serde_json::json!(measured.len()));
    // Filled by `energy_metrics` when the trial's power was measured.
    put_energy(&mut extra, None, None);
    m.gflop_per_s = Some(gflops);
    m.extra = extra;
    m
}

/// Runs the trial: allocates and fills the operands, then executes the op, one iteration
/// record per execution (`emit`), warm-ups first, until the minimum count and time of timed
/// executions are both reached, `emit` says stop, or `stop` is raised.
pub fn run(
    job: &OpsJob,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&IterationRecord) -> Result<Control>,
) -> Result<TrialEnd> {
    match (job.engine, job.device) {
        (Engine::Edgebench, DeviceKind::Cpu) => match job.dtype {
            Dtype::F32 => run_native::<f32>(job, stop, emit),
            Dtype::F64 => run_native::<f64>(job, stop, emit),
        },
        (Engine::Edgebench, DeviceKind::Cuda) => {
            bail!("the edgebench engine runs on the CPU only: use candle's on cuda")
        }
        (Engine::Candle, device) => run_candle(job, device, stop, emit),
    }
}

/// The timed loop shared by both engines: `execute` runs the op once (and waits for the device).
fn timed_loop(
    job: &OpsJob,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&IterationRecord) -> Result<Control>,
    mut execute: impl FnMut() -> Result<()>,
) -> Result<TrialEnd> {
    let mut first_measured_ns = None;
    let mut measured = 0usize;
    for step in 0.. {
        if stop.load(Ordering::Relaxed) {
            return Ok(TrialEnd::Stopped);
        }
        let t_start_ns = monotonic_ns();
        execute()?;
        let t_end_ns = monotonic_ns();
        let record = IterationRecord {
            step,
            epoch: 0,
            // An op has no loss nor learning rate: stored as NULL.
            loss: f64::NAN,
            lr: f64::NAN,
            data_s: 0.0,
            step_s: (t_end_ns - t_start_ns) as f64 * 1e-9,
            t_start_ns,
            t_end_ns,
        };
        if emit(&record)? == Control::Stop {
            return Ok(TrialEnd::Stopped);
        }
        if step >= job.warmup {
            measured += 1;
            let since = *first_measured_ns.get_or_insert(t_start_ns);
            let elapsed_s = (t_end_ns - since) as f64 * 1e-9;
            if measured >= job.min_executions.max(1) && elapsed_s >= job.min_time_s {
                break;
            }
        }
    }
    Ok(TrialEnd::Completed)
}

fn run_native<T: Elem>(
    job: &OpsJob,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&IterationRecord) -> Result<Control>,
) -> Result<TrialEnd> {
    let mut operands = Operands::<T>::new(job.op, job.shape, job.seed);
    let end = timed_loop(job, stop, emit, || {
        execute_native(job.op, job.shape, &mut operands);
        Ok(())
    })?;
    std::hint::black_box(&operands.c);
    Ok(end)
}

fn run_candle(
    job: &OpsJob,
    device: DeviceKind,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&IterationRecord) -> Result<Control>,
) -> Result<TrialEnd> {
    let device = match device {
        DeviceKind::Cpu => candle_core::Device::Cpu,
        DeviceKind::Cuda => candle_core::Device::new_cuda(0)
            .context("opening CUDA device 0 (is this a build with --features cuda?)")?,
    };
    let (a, b) = candle_operands(job, &device)?;
    timed_loop(job, stop, emit, || {
        let c = execute_candle(job.op, &a, &b)?;
        // On CUDA the op is only queued: the timing waits until the device has finished it.
        device.synchronize()?;
        drop(c);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::execute::dot_dims;
    use super::*;
    use crate::testkit::rows::iteration as record;

    const THREADS: [usize; 7] = [1, 3, 4, 6, 8, 12, 16];

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    #[test]
    fn counts_follow_the_documented_conventions() {
        let n = Shape::Elements(1000);
        let add = counts(Op::Add, Dtype::F32, n);
        assert_eq!((add.elements, add.bytes, add.flops), (1000, 12_000, 1000));
        assert!((add.intensity() - 1.0 / 12.0).abs() < 1e-15);
        let mul = counts(Op::Mul, Dtype::F64, n);
        assert_eq!((mul.bytes, mul.flops), (24_000, 1000));
        let scalar = counts(Op::Scalar, Dtype::F64, n);
        assert_eq!((scalar.bytes, scalar.flops), (16_000, 1000));
        let sigmoid = counts(Op::Sigmoid, Dtype::F32, n);
        assert_eq!((sigmoid.bytes, sigmoid.flops), (8_000, 4000));
        let tanh = counts(Op::Tanh, Dtype::F32, n);
        assert_eq!((tanh.bytes, tanh.flops), (8_000, 6000));
        // A 2x4 · 4x3 product: 8 + 12 + 6 elements of 4 bytes, 2·2·3·4 FLOPs.
        let dot = counts(Op::Dot, Dtype::F32, Shape::Matrix { m: 2, n: 3, k: 4 });
        assert_eq!((dot.elements, dot.bytes, dot.flops), (6, 104, 48));
    }

    #[test]
    fn sizes_in_mb_split_over_the_operands() {
        // 12 MiB of f32 over A, B, C: 2^20 elements each.
        assert_eq!(
            shape_for_mb(Op::Add, Dtype::F32, 12.0).unwrap(),
            Shape::Elements(1 << 20)
        );
        // ... over A, C: 1.5 x 2^20.
        assert_eq!(
            shape_for_mb(Op::Tanh, Dtype::F32, 12.0).unwrap(),
            Shape::Elements(3 << 19)
        );
        // Three 1024² f32 matrices are 12 MiB.
        let dot = shape_for_mb(Op::Dot, Dtype::F32, 12.0).unwrap();
        assert_eq!(
            dot,
            Shape::Matrix {
                m: 1024,
                n: 1024,
                k: 1024
            }
        );
        assert_eq!(counts(Op::Dot, Dtype::F32, dot).bytes, 12 << 20);
        assert_eq!(
            parse_size(Op::Dot, Dtype::F32, "12MB").unwrap(),
            (dot, Some(12.0))
        );
        assert_eq!(
            parse_size(Op::Dot, Dtype::F32, "12MiB").unwrap(),
            (dot, Some(12.0))
        );
        assert_eq!(
            parse_size(Op::Dot, Dtype::F32, "64x32x16").unwrap(),
            (
                Shape::Matrix {
                    m: 64,
                    n: 32,
                    k: 16
                },
                None
            )
        );
        assert_eq!(
            parse_size(Op::Add, Dtype::F64, "300x200").unwrap(),
            (Shape::Elements(60_000), None)
        );
    }

    fn sizes_by_op(config: &crate::config::Config) -> Vec<(Op, Vec<f64>)> {
        let mut sizes: Vec<(Op, Vec<f64>)> = Vec::new();
        for job in jobs(config).unwrap() {
            match sizes.iter_mut().find(|(op, _)| *op == job.op) {
                Some((_, mb)) => mb.push(job.mb.unwrap()),
                None => sizes.push((job.op, vec![job.mb.unwrap()])),
            }
        }
        sizes
    }

    #[test]
    fn each_op_has_its_own_sizes_or_the_common_ones() {
        let path = std::path::Path::new("ops.toml");
        let config = |text: &str| crate::config::Config::from_toml(text, path).unwrap();
        let c = config(
            "[ops]\nops = [\"add\", \"dot\", \"tanh\"]\nmb = [2, 4]\n\
             [ops.mb_per_op]\ndot = [5, 9]\nmul = [6]\n",
        );
        assert_eq!(
            sizes_by_op(&c),
            [
                (Op::Add, vec![2.0, 4.0]),
                (Op::Dot, vec![5.0, 9.0]),
                (Op::Tanh, vec![2.0, 4.0])
            ]
        );
        // --mb gives every op its sizes; --op keeps an op's own.
        let mut every = c.clone();
        crate::workloads::apply_flags(&mut every, &["--mb", "3"]);
        assert!(sizes_by_op(&every).iter().all(|(_, mb)| *mb == [3.0]));
        let mut dot = c.clone();
        crate::workloads::apply_flags(&mut dot, &["--op", "dot"]);
        assert_eq!(sizes_by_op(&dot), [(Op::Dot, vec![5.0, 9.0])]);

        for (text, says) in [
            ("[ops.mb_per_op]\nexp = [2]\n", "ops.mb_per_op.exp"),
            ("[ops.mb_per_op]\ndot = []\n", "ops.mb_per_op.dot must name"),
            ("[ops.mb_per_op]\ndot = [0]\n", "ops.mb_per_op.dot"),
        ] {
            let err = format!("{:#}", jobs(&config(text)).unwrap_err());
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    /// config/ops.toml is the whole study in one run: add and mul over 6 to 96 MiB, dot over
    /// 5 to 65 MiB, the others over 2 MiB to 1 GiB in powers of two.
    #[test]
    fn the_shipped_config_runs_the_whole_study() {
        let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config/ops.toml"));
        let c = crate::config::Config::load(path).unwrap();
        let doubling = |from: f64, n: i32| (0..n).map(|i| from * 2f64.powi(i)).collect();
        let plus_one = |v: Vec<f64>| v.into_iter().map(|mb| mb + 1.0).collect();
        let study: Vec<(Op, Vec<f64>)> = vec![
            (Op::Add, doubling(6.0, 5)),
            (Op::Mul, doubling(6.0, 5)),
            (Op::Dot, plus_one(doubling(4.0, 5))),
            (Op::Scalar, doubling(2.0, 10)),
            (Op::Sigmoid, doubling(2.0, 10)),
            (Op::Tanh, doubling(2.0, 10)),
        ];
        assert_eq!(sizes_by_op(&c), study);
        // Every trial measures at least 10 updates of a JetPack 5/6 INA3221 (140 ms): none is
        // flagged FEW_READINGS for being too short.
        let ina3221_s = 0.140;
        let section: OpsConfig = c.section(KIND.as_str()).unwrap();
        assert!(
            section.min_time_s >= MIN_SENSOR_UPDATES as f64 * ina3221_s,
            "min_time_s {}",
            section.min_time_s
        );
        // What the run records as its config reads back the same.
        let stored = crate::workloads::effective_config(&c);
        let again = crate::config::Config::from_toml(&stored.to_toml(), path).unwrap();
        assert_eq!(again.section::<OpsConfig>(KIND.as_str()).unwrap(), section);
    }

    #[test]
    fn bad_sizes_and_names_are_refused_naming_what_to_give() {
        for (op, text, says) in [
            (Op::Add, "0", "mebibytes"),
            (Op::Add, "-3", "mebibytes"),
            (Op::Add, "nan", "mebibytes"),
            (Op::Add, "2000000", "mebibytes"),
            (Op::Add, "lots", "give mebibytes"),
            (Op::Dot, "64x0x3", "positive integer"),
            (Op::Dot, "64x64", "MxNxK"),
            (Op::Sigmoid, "2x3x4", "rows x columns"),
        ] {
            let e = parse_size(op, Dtype::F32, text).unwrap_err().to_string();
            assert!(e.contains(says), "{op} {text:?}: {e}");
        }
        let e = Op::parse("relu").unwrap_err().to_string();
        assert!(e.contains("relu") && e.contains("sigmoid"), "{e}");
        assert!(Dtype::parse("f16")
            .unwrap_err()
            .to_string()
            .contains("f32 or f64"));
        assert_eq!(Op::parse(" Tanh ").unwrap(), Op::Tanh);
    }

    /// The op computed plainly in f64, element by element.
    fn reference<T: Elem>(op: Op, shape: Shape, x: &Operands<T>) -> Vec<f64> {
        let a: Vec<f64> = x.a.iter().map(|v| v.to_f64()).collect();
        let b: Vec<f64> = x.b.iter().map(|v| v.to_f64()).collect();
        match op {
            Op::Add => a.iter().zip(&b).map(|(a, b)| a + b).collect(),
            Op::Mul => a.iter().zip(&b).map(|(a, b)| a * b).collect(),
            Op::Scalar => a.iter().map(|a| SCALAR * a).collect(),
            Op::Sigmoid => a.iter().map(|a| 1.0 / (1.0 + (-a).exp())).collect(),
            Op::Tanh => a.iter().map(|a| a.tanh()).collect(),
            Op::Dot => {
                let (m, n, k) = dot_dims(shape);
                let mut c = vec![0.0; m * n];
                for i in 0..m {
                    for p in 0..k {
                        for j in 0..n {
                            c[i * n + j] += a[i * k + p] * b[p * n + j];
                        }
                    }
                }
                c
            }
        }
    }

    fn test_shape(op: Op) -> Shape {
        match op {
            // Odd sizes: gemm's edge tiles; elementwise: several uneven chunks per thread.
            Op::Dot => Shape::Matrix {
                m: 67,
                n: 45,
                k: 131,
            },
            _ => Shape::Elements(100_003),
        }
    }

    fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tol * w.abs().max(1.0),
                "{what}: element {i} is {g}, the reference {w}"
            );
        }
    }

    fn check_native<T: Elem>(dtype: Dtype, tol: f64) {
        for op in Op::ALL {
            let shape = test_shape(op);
            // A dot element sums k = 131 rounded products.
            let tol = if op == Op::Dot { 20.0 * tol } else { tol };
            let want = reference(op, shape, &Operands::<T>::new(op, shape, 11));
            for threads in THREADS {
                let mut x = Operands::<T>::new(op, shape, 11);
                pool(threads).install(|| execute_native(op, shape, &mut x));
                let got: Vec<f64> = x.c.iter().map(|v| v.to_f64()).collect();
                assert_close(&got, &want, tol, &format!("{op} {dtype} {threads} threads"));
            }
        }
    }

    #[test]
    fn kernels_match_the_reference_at_every_thread_count_f32() {
        check_native::<f32>(Dtype::F32, 2e-6);
    }

    #[test]
    fn kernels_match_the_reference_at_every_thread_count_f64() {
        check_native::<f64>(Dtype::F64, 1e-12);
    }

    #[test]
    fn candle_engine_computes_the_same_as_the_kernels() {
        for op in Op::ALL {
            let shape = test_shape(op);
            let mut job = OpsJob::new(op, Dtype::F32, shape, None, DeviceKind::Cpu);
            job.engine = Engine::Candle;
            let (a, b) = candle_operands(&job, &candle_core::Device::Cpu).unwrap();
            let got: Vec<f64> = execute_candle(op, &a, &b)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_dtype(candle_core::DType::F64)
                .unwrap()
                .to_vec1()
                .unwrap();
            let mut x = Operands::<f32>::new(op, shape, job.seed);
            execute_native(op, shape, &mut x);
            let want: Vec<f64> = x.c.iter().map(|v| *v as f64).collect();
            assert_close(&got, &want, 2e-6, &format!("candle {op}"));
        }
    }

    #[test]
    fn efficiencies_against_known_peaks() {
        // 250 M elements: 2.5e8 FLOPs and 3e9 bytes (add, f32) or 2e9 bytes (scalar).
        let shape = Shape::Elements(250_000_000);
        let mut job = OpsJob::new(Op::Add, Dtype::F32, shape, None, DeviceKind::Cpu);
        job.roofs = Roofs {
            peak_gflops: Some(100.0),
            peak_gbs: Some(60.0),
            measured_gflops: Some(50.0),
            measured_copy_gbs: Some(20.0),
            measured_triad_gbs: Some(40.0),
        };
        // Median 0.1 s, quartiles 0.095 and 0.11.
        let measured: Vec<_> = [0.09, 0.1, 0.12, 0.1, 0.11]
            .iter()
            .enumerate()
            .map(|(i, &s)| record(i, s))
            .collect();
        let m = metrics(&job, &measured);
        let close = |v: &serde_json::Value, want: f64| {
            let v = v.as_f64().unwrap();
            assert!(
                (v - want).abs() < 1e-9 * want.abs().max(1.0),
                "{v} != {want}"
            );
        };
        assert!((m.time_per_iteration_s.unwrap() - 0.1).abs() < 1e-12);
        assert!((m.time_per_iteration_spread_s.unwrap() - 0.01).abs() < 1e-12);
        assert!((m.total_time_s.unwrap() - 0.52).abs() < 1e-12);
        assert!((m.gflop_per_s.unwrap() - 2.5).abs() < 1e-9);
        close(&m.extra["gbyte_per_s"], 30.0);
        close(&m.extra["intensity_flop_per_byte"], 1.0 / 12.0);
        close(&m.extra["pct_peak_flops"], 2.5);
        close(&m.extra["pct_peak_bandwidth"], 50.0);
        close(&m.extra["pct_measured_peak_flops"], 5.0);
        // add reads two arrays and writes one: judged against the triad.
        close(&m.extra["pct_measured_peak_bandwidth"], 75.0);
        assert_eq!(m.extra["executions"], 5);

        // scalar reads one and writes one: judged against the copy; 2e9 bytes in 0.1 s.
        job.op = Op::Scalar;
        let m = metrics(&job, &measured);
        close(&m.extra["gbyte_per_s"], 20.0);
        close(&m.extra["pct_measured_peak_bandwidth"], 100.0);

        // Unknown peaks stay null, with their keys present.
        job.roofs = Roofs::default();
        let m = metrics(&job, &measured);
        for key in [
            "pct_peak_flops",
            "pct_peak_bandwidth",
            "pct_measured_peak_flops",
            "pct_measured_peak_bandwidth",
        ] {
            assert_eq!(m.extra[key], serde_json::Value::Null, "{key}");
        }
        assert_eq!(metrics(&job, &[]), Metrics::default());
    }

    #[test]
    fn with_power_every_trial_lasts_twelve_readings_of_the_sensor() {
        let min_times = |configured: f64, period_ms: Option<u64>| -> Vec<f64> {
            let mut c = crate::config::Config::default();
            let section = OpsConfig {
                min_time_s: configured,
                ..OpsConfig::default()
            };
            c.sections.insert(
                KIND.to_string(),
                toml::Value::try_from(&section).unwrap(),
            );
            let prepared = crate::workloads::Prepared {
                power_reading_period: period_ms.map(std::time::Duration::from_millis),
                ..Default::default()
            };
            let host = crate::host::HostPaths::default();
            let ops = OpsPlan {
                jobs: jobs(&c).unwrap(),
                peaks: None,
            };
            plan(&prepared.plan_input(&c, &host), &ops)
                .iter()
                .map(|t| t.job.min_time_s)
                .collect()
        };
        // A 140 ms INA3221: 12 readings are 1.68 s, above the configured 0.5 s.
        let with_power = min_times(0.5, Some(140));
        assert!(!with_power.is_empty());
        assert!(with_power.iter().all(|t| (t - 1.68).abs() < 1e-9), "{with_power:?}");
        // A longer configured minimum stands; without power the configured one.
        assert!(min_times(3.0, Some(140)).iter().all(|t| *t == 3.0));
        assert!(min_times(0.5, None).iter().all(|t| *t == 0.5));
        assert_eq!(min_time_for_power(None), None);
    }

    #[test]
    fn timing_runs_until_both_minimum_count_and_time() {
        let mut job = OpsJob::new(
            Op::Add,
            Dtype::F32,
            Shape::Elements(1000),
            None,
            DeviceKind::Cpu,
        );
        job.warmup = 3;
        job.min_executions = 5;
        job.min_time_s = 0.05;
        let stop = AtomicBool::new(false);
        let mut records = Vec::new();
        let end = run(&job, &stop, &mut |r| {
            records.push(*r);
            Ok(Control::Continue)
        })
        .unwrap();
        assert_eq!(end, TrialEnd::Completed);
        // A 1000-element add takes microseconds: the time decides, not the count.
        let measured = &records[job.warmup..];
        assert!(measured.len() > 5, "{} timed executions", measured.len());
        let span_s = (measured.last().unwrap().t_end_ns - measured[0].t_start_ns) as f64 * 1e-9;
        assert!(span_s >= 0.05, "timed for {span_s} s");
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.step, i);
            assert!(r.t_end_ns >= r.t_start_ns && r.step_s >= 0.0);
        }

        // A long minimum time with a high count: the count decides when the time is short.
        job.min_time_s = 0.0;
        job.min_executions = 40;
        records.clear();
        run(&job, &stop, &mut |r| {
            records.push(*r);
            Ok(Control::Continue)
        })
        .unwrap();
        assert_eq!(records.len(), 3 + 40);

        // The callback's stop and the flag both end the trial at an execution boundary.
        job.min_time_s = 60.0;
        records.clear();
        let end = run(&job, &stop, &mut |r| {
            records.push(*r);
            Ok(if r.step == 6 {
                Control::Stop
            } else {
                Control::Continue
            })
        })
        .unwrap();
        assert_eq!((end, records.len()), (TrialEnd::Stopped, 7));
        stop.store(true, Ordering::Relaxed);
        let end = run(&job, &stop, &mut |_| Ok(Control::Continue)).unwrap();
        assert_eq!(end, TrialEnd::Stopped);
    }

    #[test]
    fn job_and_params_serialise_stably() {
        let shape = shape_for_mb(Op::Dot, Dtype::F32, 12.0).unwrap();
        let job = OpsJob::new(Op::Dot, Dtype::F32, shape, Some(12.0), DeviceKind::Cpu);
        let line = serde_json::to_string(&job).unwrap();
        assert_eq!(serde_json::from_str::<OpsJob>(&line).unwrap(), job);
        assert_eq!(
            serde_json::to_string(&job.params()).unwrap(),
            r#"{"op":"dot","dtype":"f32","engine":"edgebench","mb":12.0,"elements":1048576,"m":1024,"n":1024,"k":1024,"bytes":12582912,"flops":2147483648}"#
        );
        let add = OpsJob::new(
            Op::Add,
            Dtype::F64,
            Shape::Elements(10),
            None,
            DeviceKind::Cuda,
        );
        let p = serde_json::to_value(add.params()).unwrap();
        assert_eq!(p["engine"], "candle");
        assert_eq!(p["m"], serde_json::Value::Null);
        assert_eq!(p["bytes"], 240);
        assert_eq!(add.label(), "add f64 10 elements (candle)");
    }

    #[test]
    fn planned_trial_keys_differ_by_every_parameter() {
        let job = OpsJob::new(
            Op::Add,
            Dtype::F32,
            Shape::Elements(64),
            Some(1.0),
            DeviceKind::Cpu,
        );
        let trial = planned(job.clone());
        assert_eq!(trial.key.workload, "ops");
        assert_eq!(trial.key.net, "add");
        assert_eq!(trial.iterations, DEFAULT_WARMUP + DEFAULT_MIN_EXECUTIONS);
        assert_eq!(trial.items_per_iteration, None);
        let params: serde_json::Value = serde_json::from_str(&trial.key.params).unwrap();
        assert_eq!(params["bytes"], 768);
        let f64_job = OpsJob {
            dtype: Dtype::F64,
            ..job.clone()
        };
        let candle_job = OpsJob {
            engine: Engine::Candle,
            ..job.clone()
        };
        assert_ne!(key(&f64_job), trial.key);
        assert_ne!(key(&candle_job), trial.key);
        assert_eq!(key(&job), trial.key);
    }

    #[test]
    fn memory_estimate_is_the_operands_plus_candles_outputs() {
        let job = OpsJob::new(
            Op::Add,
            Dtype::F32,
            Shape::Elements(1 << 20),
            None,
            DeviceKind::Cpu,
        );
        assert_eq!(memory_estimate(&job), 12 << 20);
        let candle = OpsJob {
            engine: Engine::Candle,
            ..job
        };
        assert_eq!(memory_estimate(&candle), 24 << 20);
    }
}
