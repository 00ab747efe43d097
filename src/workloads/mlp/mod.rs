//! The MLP workload: the two-layer perceptron of PyTorch's "learning PyTorch with examples",
//! which the PyTorch-on-embedded-GPUs study trained on a Jetson TX2 in three programming styles
//! and three sizes.
//!
//! Data x (N, D_in) and y (N, D_out) and weights w1 (D_in, H), w2 (H, D_out) are drawn once from
//! a seeded standard normal, in that order; there are no biases. One iteration:
//! h = x·w1, h_relu = max(h, 0), y_pred = h_relu·w2, loss = sum((y_pred − y)²), then plain
//! gradient descent w -= lr · dloss/dw. The styles differ only in how the gradient is obtained:
//! - [`Style::Tensors`]: written out by hand with tensor ops, no autograd;
//! - [`Style::Autograd`]: candle's autograd (`Var`, `backward`);
//! - [`Style::Function`]: autograd, with ReLU a custom op defining its own forward and backward
//!   (the study's `MyReLU`).
//!
//! With D_in in the tens of thousands and lr 1e-6 the loss can diverge; it is recorded as it is.

pub(crate) mod report;

mod model;

pub use model::Mlp;
pub use model::Gradients;

use crate::clock::monotonic_ns;
use crate::config::DeviceKind;
use crate::record::{Control, IterationRecord, Metrics, TrialEnd, WorkItem, WorkloadKind};
use crate::store::{PerIteration, ResultRow, RowItems, TrialKey};
use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// The study's learning rate.
pub const LEARNING_RATE: f64 = 1e-6;
/// The study's iteration count.
pub(crate) const ITERATIONS: usize = 500;

/// How the gradient is computed: the study's Alg1, Alg2 and Alg3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Style {
    /// Forward and backward written by hand with tensor ops.
    Tensors,
    /// candle's autograd.
    Autograd,
    /// Autograd with ReLU as a custom op with its own forward and backward.
    Function,
}

impl Style {
    pub const ALL: [Style; 3] = [Style::Tensors, Style::Autograd, Style::Function];

    pub fn as_str(self) -> &'static str {
        match self {
            Style::Tensors => "tensors",
            Style::Autograd => "autograd",
            Style::Function => "function",
        }
    }

    pub fn parse(s: &str) -> std::result::Result<Style, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tensors" => Ok(Style::Tensors),
            "autograd" => Ok(Style::Autograd),
            "function" => Ok(Style::Function),
            other => Err(format!(
                "unknown MLP style '{other}' (expected tensors, autograd or function)"
            )),
        }
    }
}

impl fmt::Display for Style {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Style {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Style, String> {
        Style::parse(s)
    }
}

/// Layer sizes: batch N, input D_in, hidden H, output D_out. `name` is the study's size name
/// or, for any other dimensions, `NxD_inxHxD_out`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MlpSize {
    pub name: String,
    pub n: usize,
    pub d_in: usize,
    pub h: usize,
    pub d_out: usize,
}

/// The study's Table 1: (name, [N, D_in, H, D_out]).
pub(crate) const PRESETS: [(&str, [usize; 4]); 3] = [
    ("small", [64, 15000, 100, 150]),
    ("medium", [192, 20000, 300, 200]),
    ("large", [384, 40000, 600, 400]),
];

impl MlpSize {
    /// The study's size of that name.
    pub(crate) fn preset(name: &str) -> Option<MlpSize> {
        PRESETS
            .iter()
            .find(|(preset, _)| *preset == name)
            .map(|&(name, [n, d_in, h, d_out])| MlpSize {
                name: name.to_string(),
                n,
                d_in,
                h,
                d_out,
            })
    }

    /// Any dimensions. Those of a preset get the preset's name, so one trial has one key
    /// however its size was written.
    pub fn custom(n: usize, d_in: usize, h: usize, d_out: usize) -> MlpSize {
        let name = PRESETS
            .iter()
            .find(|(_, dims)| *dims == [n, d_in, h, d_out])
            .map(|(name, _)| name.to_string())
            .unwrap_or_else(|| format!("{n}x{d_in}x{h}x{d_out}"));
        MlpSize {
            name,
            n,
            d_in,
            h,
            d_out,
        }
    }

    /// `small`, `medium`, `large` or `NxD_inxHxD_out` (e.g. `64x15000x100x150`).
    pub fn parse(s: &str) -> std::result::Result<MlpSize, String> {
        let text = s.trim().to_ascii_lowercase();
        if let Some(size) = MlpSize::preset(&text) {
            return Ok(size);
        }
        if !text.contains('x') {
            return Err(format!(
                "unknown MLP size '{}' (expected small, medium, large or N x D_in x H x D_out \
                 written like 64x15000x100x150)",
                s.trim()
            ));
        }
        let parts: Vec<&str> = text.split('x').collect();
        if parts.len() != 4 {
            return Err(format!(
                "MLP size '{}': expected four dimensions N x D_in x H x D_out (like \
                 64x15000x100x150), got {}",
                s.trim(),
                parts.len()
            ));
        }
        let mut dims = [0usize; 4];
        for ((dim, part), what) in dims.iter_mut().zip(&parts).zip(["N", "D_in", "H", "D_out"]) {
            *dim = part.trim().parse().map_err(|_| {
                format!(
                    "MLP size '{}': {what} '{part}' is not a whole number",
                    s.trim()
                )
            })?;
            if *dim == 0 {
                return Err(format!(
                    "MLP size '{}': {what} is 0; every dimension must be at least 1",
                    s.trim()
                ));
            }
        }
        let [n, d_in, h, d_out] = dims;
        // Products of two dimensions size the tensors; refuse what cannot be counted.
        let fits = n.checked_mul(d_in).is_some()
            && d_in.checked_mul(h).is_some()
            && flops_checked(n, d_in, h, d_out).is_some();
        if !fits {
            return Err(format!(
                "MLP size '{}' is too large to address; use smaller dimensions",
                s.trim()
            ));
        }
        Ok(MlpSize::custom(n, d_in, h, d_out))
    }
}

impl fmt::Display for MlpSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl FromStr for MlpSize {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<MlpSize, String> {
        MlpSize::parse(s)
    }
}

/// One MLP trial, as the worker receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MlpJob {
    pub style: Style,
    pub size: MlpSize,
    pub iterations: usize,
    pub learning_rate: f64,
    pub seed: u64,
    pub device: DeviceKind,
}

/// The workload-specific part of a trial's key, serialised in this field order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MlpParams {
    pub style: Style,
    /// The size's name, or `NxD_inxHxD_out`.
    pub size: String,
    pub n: usize,
    pub d_in: usize,
    pub h: usize,
    pub d_out: usize,
    pub learning_rate: f64,
}

impl MlpJob {
    pub fn params(&self) -> MlpParams {
        MlpParams {
            style: self.style,
            size: self.size.name.clone(),
            n: self.size.n,
            d_in: self.size.d_in,
            h: self.size.h,
            d_out: self.size.d_out,
            learning_rate: self.learning_rate,
        }
    }

    #[cfg(test)]
    /// The canonical JSON text of [`MlpJob::params`], the trial key's `params`.
    pub(crate) fn params_json(&self) -> String {
        serde_json::to_string(&self.params()).expect("MlpParams serialises")
    }
}

/// The `[mlp]` table ([`MlpConfig`]) in typed values, with the sweep's devices: which
/// trials a sweep of this workload runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct MlpSweep {
    pub styles: Vec<Style>,
    /// Size names (`small`, `medium`, `large`) or `NxD_inxHxD_out`.
    pub sizes: Vec<String>,
    pub iterations: usize,
    pub learning_rate: f64,
    pub devices: Vec<DeviceKind>,
}

impl Default for MlpSweep {
    /// The study: every style and size, 500 iterations at lr 1e-6, on the CPU.
    fn default() -> MlpSweep {
        MlpSweep {
            styles: Style::ALL.to_vec(),
            sizes: PRESETS.iter().map(|(name, _)| name.to_string()).collect(),
            iterations: ITERATIONS,
            learning_rate: LEARNING_RATE,
            devices: vec![DeviceKind::Cpu],
        }
    }
}

impl MlpSweep {
    /// One job per (device, size, style), in that nesting order, each listed value once. Errors
    /// name the `[mlp]` key at fault.
    pub(crate) fn jobs(&self, seed: u64) -> std::result::Result<Vec<MlpJob>, String> {
        if self.iterations == 0 {
            return Err("mlp.iterations is 0; give at least 1 (the study ran 500)".into());
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(format!(
                "mlp.learning_rate {} must be a positive number (the study used 1e-6)",
                self.learning_rate
            ));
        }
        for (key, empty) in [
            ("styles", self.styles.is_empty()),
            ("sizes", self.sizes.is_empty()),
            ("devices", self.devices.is_empty()),
        ] {
            if empty {
                return Err(format!("mlp.{key} is empty; list at least one"));
            }
        }
        let mut sizes: Vec<MlpSize> = Vec::new();
        for text in &self.sizes {
            let size = MlpSize::parse(text).map_err(|e| format!("mlp.sizes: {e}"))?;
            if !sizes.contains(&size) {
                sizes.push(size);
            }
        }
        let mut jobs = Vec::new();
        for device in unique(&self.devices) {
            for size in &sizes {
                for style in unique(&self.styles) {
                    jobs.push(MlpJob {
                        style,
                        size: size.clone(),
                        iterations: self.iterations,
                        learning_rate: self.learning_rate,
                        seed,
                        device,
                    });
                }
            }
        }
        Ok(jobs)
    }
}

fn unique<T: Copy + PartialEq>(values: &[T]) -> Vec<T> {
    let mut seen = Vec::new();
    for &v in values {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen
}

/// A trial's name in progress lines and reports, e.g. `mlp autograd small cpu`.
pub fn label(job: &MlpJob) -> String {
    format!("mlp {} {} {}", job.style, job.size, job.device.as_str())
}

fn flops_checked(n: usize, d_in: usize, h: usize, d_out: usize) -> Option<u64> {
    let (n, d_in, h, d_out) = (n as u64, d_in as u64, h as u64, d_out as u64);
    let big = n.checked_mul(d_in)?.checked_mul(h)?.checked_mul(4)?;
    let small = n.checked_mul(h)?.checked_mul(d_out)?.checked_mul(6)?;
    big.checked_add(small)
}

/// Floating-point operations of one iteration, counting the five matrix products only, each
/// multiply-add as 2 FLOPs:
/// forward x·w1 (2·N·D_in·H) and h_relu·w2 (2·N·H·D_out); backward grad_w2 = h_reluᵀ·grad_y_pred
/// (2·H·N·D_out), grad_h_relu = grad_y_pred·w2ᵀ (2·N·D_out·H) and grad_w1 = xᵀ·grad_h
/// (2·D_in·N·H). Total 4·N·D_in·H + 6·N·H·D_out. The elementwise work (ReLU and its mask, the
/// loss and its gradient, the update: about N·H + 5·N·D_out + 2·(D_in·H + H·D_out)) is left
/// out, as is usual for GEMM-bound work; it is under 1 % of the total at the study's sizes.
pub fn flops_per_iteration(size: &MlpSize) -> u64 {
    flops_checked(size.n, size.d_in, size.h, size.d_out).unwrap_or(u64::MAX)
}

/// Bytes of tensors alive at an iteration's peak (f32): data x and y, weights, their gradients,
/// and the (N, H) and (N, D_out) activations and gradients each style keeps. Autograd keeps the
/// graph's activations and a gradient for every node until the update, so it keeps more.
pub(crate) fn memory_estimate(style: Style, size: &MlpSize) -> u64 {
    let (n, d_in, h, d_out) = (
        size.n as u64,
        size.d_in as u64,
        size.h as u64,
        size.d_out as u64,
    );
    // Tensors of shape (N, H) and (N, D_out) alive at once, counted from the step functions:
    // hand-written: h, h_relu, grad_h_relu, grad_h, the zeros the mask selects, the u8 mask
    // (a quarter); y_pred, y_pred − y, its square, grad_y_pred.
    // Autograd: the graph's h, h_relu, y_pred, y_pred − y, square; the gradients of the
    // same five nodes; ReLU's backward mask and zeros, and the square's backward temporary.
    let (per_nh, per_nd_out) = match style {
        Style::Tensors => (5.25, 4.0),
        Style::Autograd | Style::Function => (7.25, 9.0),
    };
    let floats = n * d_in + n * d_out          // x, y
        + 2 * (d_in * h + h * d_out)           // w1, w2 and their gradients
        + (per_nh * (n * h) as f64) as u64
        + (per_nd_out * (n * d_out) as f64) as u64;
    floats.saturating_mul(4)
}

/// The trial's metrics from its measured (after warm-up) iterations: the shared step timing
/// and GFLOP/s ([`flops_per_iteration`] over the median step time).
pub fn metrics(job: &MlpJob, measured: &[IterationRecord]) -> Metrics {
    let mut m = super::step_metrics(measured);
    m.gflop_per_s = m
        .time_per_iteration_s
        .filter(|&median| median > 0.0)
        .map(|median| flops_per_iteration(&job.size) as f64 / median / 1e9);
    m
}

/// The trial's resume key: `net` is `mlp`, `batch` and `images` the N samples of every
/// iteration, `epochs` the iterations (each a full pass over the N samples), `dataset` the
/// seeded normal draw; style, size and dimensions in `params`.
pub fn key(job: &MlpJob) -> TrialKey {
    TrialKey {
        workload: KIND,
        net: "mlp".into(),
        device: job.device.as_str().into(),
        batch: job.size.n,
        epochs: job.iterations,
        images: job.size.n,
        dataset: format!("normal:seed={}", job.seed),
        params: super::params_text(&job.params()),
    }
}

pub const KIND: WorkloadKind = WorkloadKind::named("mlp");

/// `[mlp]`: the MLP study (`--workload mlp`), on `sweep.devices`. Names and sizes are checked
/// by the workload before anything runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct MlpConfig {
    /// `tensors` (hand-written backward), `autograd`, `function` (ReLU as a custom op).
    pub styles: Vec<String>,
    /// `small`, `medium`, `large`, or `NxD_inxHxD_out`.
    pub sizes: Vec<String>,
    /// Gradient-descent steps per trial (the study ran 500).
    pub iterations: usize,
    /// The study's 1e-6.
    pub learning_rate: f64,
}

impl Default for MlpConfig {
    fn default() -> Self {
        MlpConfig {
            styles: ["tensors", "autograd", "function"]
                .map(String::from)
                .to_vec(),
            sizes: ["small", "medium", "large"].map(String::from).to_vec(),
            iterations: 500,
            learning_rate: 1e-6,
        }
    }
}

/// The MLP study: a two-layer perceptron over (style, size, device) (`[mlp]`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MlpStudy;

impl super::TypedWorkload for MlpStudy {
    type Section = MlpConfig;
    type Checked = Vec<MlpJob>;
    type Plan = Vec<MlpJob>;
    type Job = MlpJob;
    const KIND: WorkloadKind = KIND;

    fn report_section(&self) -> Option<Box<dyn crate::render::Section>> {
        Some(Box::new(report::Mlp))
    }

    fn prepare(
        &self,
        _config: &crate::config::Config,
        jobs: Vec<MlpJob>,
        _host: &crate::host::HostPaths,
        _board: &crate::board::BoardProfile,
    ) -> anyhow::Result<super::Preparation<Vec<MlpJob>>> {
        Ok(super::Preparation::of(jobs))
    }

    fn plan(
        &self,
        _input: &super::PlanInput<'_>,
        jobs: &Vec<MlpJob>,
    ) -> Vec<super::PlannedTrial<MlpJob>> {
        plan(jobs)
    }

    fn run(
        &self,
        job: MlpJob,
        stop: &AtomicBool,
        emit: super::Emit<'_>,
    ) -> anyhow::Result<super::JobEnd> {
        run(&job, stop, emit).map(super::JobEnd::from)
    }

    fn metrics(&self, job: &MlpJob, measured: &[IterationRecord]) -> Metrics {
        metrics(job, measured)
    }

    /// Its iteration is one pass over N samples (`batch`), timed per iteration.
    fn profile(&self) -> super::WorkloadProfile {
        super::WorkloadProfile {
            items: RowItems {
                item: WorkItem::Sample,
                per_iteration: PerIteration::BatchPerIteration,
                over_dataset: false,
            },
            records_loss: true,
            computes_on_devices: true,
            shows_progress: true,
            watches_tree: false,
            longer_trial_advice: "more iterations (--iterations, mlp.iterations) or a larger \
                                  size (--size)",
        }
    }

    /// `mlp STYLE SIZE`, e.g. `mlp tensors small`.
    fn names(&self, row: &ResultRow) -> super::RowNames {
        let param = |k: &str| match row.params.get(k) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            _ => String::new(),
        };
        super::RowNames {
            label: format!("{KIND} {} {}", param("style"), param("size")),
            engine: None,
        }
    }

    fn options(&self) -> Vec<clap::Arg> {
        use clap::{value_parser, Arg};
        vec![
            Arg::new("mlp.styles")
                .long("style")
                .value_name("STYLES")
                .value_delimiter(',')
                .help("mlp: programming styles, comma separated: tensors,autograd,function"),
            Arg::new("mlp.sizes")
                .long("size")
                .value_name("SIZES")
                .value_delimiter(',')
                .help("mlp: sizes, comma separated: small,medium,large or NxD_inxHxD_out"),
            Arg::new("mlp.iterations")
                .long("iterations")
                .value_name("N")
                .value_parser(value_parser!(u64))
                .help("mlp: gradient-descent steps per trial (default 500)"),
        ]
    }

    /// The sweep's nets and batches are checked as the CNN's, the section expanded into jobs.
    fn check(
        &self,
        config: &crate::config::Config,
        section: MlpConfig,
    ) -> Result<Vec<MlpJob>, String> {
        super::check_image_sweep(config)?;
        jobs_of(config, &section)
    }
}

/// The `[mlp]` table and `sweep.devices` as planned trials (device, then size, then style).
pub fn jobs(config: &crate::config::Config) -> std::result::Result<Vec<MlpJob>, String> {
    jobs_of(config, &config.section(KIND.as_str())?)
}

fn jobs_of(
    config: &crate::config::Config,
    m: &MlpConfig,
) -> std::result::Result<Vec<MlpJob>, String> {
    let styles = m
        .styles
        .iter()
        .map(|s| Style::parse(s).map_err(|e| format!("mlp.styles (--style): {e}")))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    MlpSweep {
        styles,
        sizes: m.sizes.clone(),
        iterations: m.iterations,
        learning_rate: m.learning_rate,
        devices: config.sweep.devices.clone(),
    }
    .jobs(config.train.seed)
}

/// The sweep's trials, one per job.
pub fn plan(jobs: &[MlpJob]) -> Vec<super::PlannedTrial<MlpJob>> {
    jobs.iter()
        .cloned()
        .map(|job| super::PlannedTrial {
            key: key(&job),
            label: label(&job),
            iterations: job.iterations,
            items_per_iteration: None,
            memory_estimate_bytes: memory_estimate(job.style, &job.size),
            repetition: 1,
            job,
        })
        .collect()
}

/// Runs one trial in the calling process: one [`IterationRecord`] per iteration, handed to
/// `emit`. Stops at an iteration boundary when `stop` is set or `emit` says so.
pub fn run(
    job: &MlpJob,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&IterationRecord) -> anyhow::Result<Control>,
) -> anyhow::Result<TrialEnd> {
    let device = crate::train::device(job.device)?;
    let mut mlp = Mlp::new(job.style, &job.size, job.seed, job.learning_rate, &device)
        .with_context(|| format!("MLP {} {}: setting up", job.style, job.size))?;
    for step in 0..job.iterations {
        if stop.load(Ordering::Relaxed) {
            return Ok(TrialEnd::Stopped);
        }
        let t_start_ns = monotonic_ns();
        let loss = mlp
            .step()
            .with_context(|| format!("MLP {} {}: iteration {step}", job.style, job.size))?;
        let t_end_ns = monotonic_ns();
        let record = IterationRecord {
            step,
            epoch: 0,
            loss,
            lr: job.learning_rate,
            data_s: 0.0,
            step_s: (t_end_ns - t_start_ns) as f64 * 1e-9,
            t_start_ns,
            t_end_ns,
        };
        if emit(&record)? == Control::Stop {
            return Ok(TrialEnd::Stopped);
        }
    }
    Ok(TrialEnd::Completed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::rows::iteration as record;
    use candle_core::{DType, Device, Tensor, Var};

    fn rows(t: &Tensor) -> Vec<Vec<f64>> {
        t.to_dtype(DType::F64).unwrap().to_vec2().unwrap()
    }

    /// Loss and gradients by plain loops in f64, straight from the definitions.
    fn reference(mlp: &Mlp) -> (f64, Vec<Vec<f64>>, Vec<Vec<f64>>) {
        let (x, y) = (rows(&mlp.x), rows(&mlp.y));
        let (w1, w2) = (rows(mlp.w1.as_tensor()), rows(mlp.w2.as_tensor()));
        let (n, d_in, h, d_out) = (x.len(), w1.len(), w2.len(), y[0].len());
        let mut loss = 0.0;
        let mut g1 = vec![vec![0.0; h]; d_in];
        let mut g2 = vec![vec![0.0; d_out]; h];
        for i in 0..n {
            let pre: Vec<f64> = (0..h)
                .map(|j| (0..d_in).map(|k| x[i][k] * w1[k][j]).sum())
                .collect();
            let act: Vec<f64> = pre.iter().map(|&v| v.max(0.0)).collect();
            let mut grad_act = vec![0.0; h];
            for o in 0..d_out {
                let pred: f64 = (0..h).map(|j| act[j] * w2[j][o]).sum();
                let d = pred - y[i][o];
                loss += d * d;
                for j in 0..h {
                    g2[j][o] += act[j] * 2.0 * d;
                    grad_act[j] += 2.0 * d * w2[j][o];
                }
            }
            for j in 0..h {
                if pre[j] >= 0.0 {
                    for k in 0..d_in {
                        g1[k][j] += x[i][k] * grad_act[j];
                    }
                }
            }
        }
        (loss, g1, g2)
    }

    fn assert_close(what: &str, got: &[Vec<f64>], want: &[Vec<f64>], rel: f64) {
        let scale = want.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "{what}: reference is all zeros");
        for (r, (g, w)) in got.iter().zip(want).enumerate() {
            for (c, (g, w)) in g.iter().zip(w).enumerate() {
                assert!(
                    (g - w).abs() <= rel * scale,
                    "{what}[{r}][{c}]: got {g}, want {w} (scale {scale})"
                );
            }
        }
    }

    fn size(text: &str) -> MlpSize {
        MlpSize::parse(text).unwrap()
    }

    /// Five steps' losses of `style` at `size` on `device`, seed 11.
    fn loss_curve(style: Style, size: &MlpSize, device: &Device) -> Vec<f64> {
        let mut mlp = Mlp::new(style, size, 11, 1e-6, device).unwrap();
        (0..5).map(|_| mlp.step().unwrap()).collect()
    }

    #[test]
    fn every_style_on_the_cpu_applies_its_update() {
        let size = size("8x3000x40x6");
        for style in Style::ALL {
            let cpu = loss_curve(style, &size, &Device::Cpu);
            assert!(
                cpu[4] < 0.9 * cpu[0],
                "{style}: cpu loss {cpu:?} does not fall"
            );
        }
    }

    /// Built with the `cuda` feature only, and run by hand on a machine with an NVIDIA GPU:
    /// `cargo test --features cuda --lib -- --ignored on_cuda`.
    #[cfg(feature = "cuda")]
    #[test]
    #[ignore = "needs a CUDA device"]
    fn every_style_on_cuda_follows_the_cpu_loss_curve() {
        let size = size("8x3000x40x6");
        let dev = Device::new_cuda(0).expect("a CUDA device");
        for style in Style::ALL {
            let cpu = loss_curve(style, &size, &Device::Cpu);
            let gpu = loss_curve(style, &size, &dev);
            for (i, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
                assert!(
                    (g - c).abs() <= 1e-3 * c,
                    "{style} step {i}: cuda {g}, cpu {c}"
                );
            }
        }
    }

    #[test]
    fn every_style_matches_the_reference_gradients_at_any_thread_count() {
        // w1 spans two update chunks, so the parallel update is exercised too.
        let size = size("4x3000x30x5");
        for threads in [1, 3, 4, 6, 8, 12, 16] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                for style in Style::ALL {
                    let mlp = Mlp::new(style, &size, 7, 1e-4, &Device::Cpu).unwrap();
                    let (loss, g1, g2) = reference(&mlp);
                    let grads = mlp.gradients().unwrap();
                    let got_loss = grads.loss.to_scalar::<f32>().unwrap() as f64;
                    assert!(
                        (got_loss - loss).abs() <= 1e-4 * loss,
                        "{style} at {threads} threads: loss {got_loss}, want {loss}"
                    );
                    assert_close(&format!("{style} grad_w1"), &rows(&grads.w1), &g1, 1e-4);
                    assert_close(&format!("{style} grad_w2"), &rows(&grads.w2), &g2, 1e-4);

                    // The update is w -= lr·grad, element by element.
                    let mut mlp = mlp;
                    let before = (rows(mlp.weights().0), rows(mlp.weights().1));
                    mlp.step().unwrap();
                    let lr = mlp.learning_rate;
                    let want = |w: &[Vec<f64>], g: &[Vec<f64>]| -> Vec<Vec<f64>> {
                        w.iter()
                            .zip(g)
                            .map(|(w, g)| w.iter().zip(g).map(|(w, g)| w - lr * g).collect())
                            .collect()
                    };
                    assert_close(
                        &format!("{style} w1 after a step"),
                        &rows(mlp.weights().0),
                        &want(&before.0, &g1),
                        1e-5,
                    );
                    assert_close(
                        &format!("{style} w2 after a step"),
                        &rows(mlp.weights().1),
                        &want(&before.1, &g2),
                        1e-5,
                    );
                }
            });
        }
    }

    #[test]
    fn hand_written_gradients_match_autograd() {
        let size = size("16x200x40x12");
        let by_hand = Mlp::new(Style::Tensors, &size, 3, LEARNING_RATE, &Device::Cpu).unwrap();
        let hand = by_hand.gradients().unwrap();
        for style in [Style::Autograd, Style::Function] {
            let auto = Mlp::new(style, &size, 3, LEARNING_RATE, &Device::Cpu)
                .unwrap()
                .gradients()
                .unwrap();
            assert_close(
                &format!("{style} grad_w1"),
                &rows(&auto.w1),
                &rows(&hand.w1),
                1e-5,
            );
            assert_close(
                &format!("{style} grad_w2"),
                &rows(&auto.w2),
                &rows(&hand.w2),
                1e-5,
            );
        }
    }

    #[test]
    fn the_three_styles_follow_the_same_loss_curve() {
        // A learning rate at which the loss moves a lot in a few steps, so a wrong update in any
        // style shows.
        let size = size("8x40x16x6");
        let curves: Vec<Vec<f64>> = Style::ALL
            .iter()
            .map(|&style| {
                let mut mlp = Mlp::new(style, &size, 11, 1e-4, &Device::Cpu).unwrap();
                (0..8).map(|_| mlp.step().unwrap()).collect()
            })
            .collect();
        let tensors = &curves[0];
        assert!(
            tensors[7] < 0.5 * tensors[0],
            "the loss should fall: {tensors:?}"
        );
        for (style, curve) in Style::ALL.iter().zip(&curves).skip(1) {
            for (step, (a, b)) in curve.iter().zip(tensors).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs(),
                    "{style} step {step}: loss {a}, tensors style {b}"
                );
            }
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_model() {
        let size = size("3x5x4x2");
        let a = Mlp::new(Style::Tensors, &size, 5, LEARNING_RATE, &Device::Cpu).unwrap();
        let b = Mlp::new(Style::Function, &size, 5, LEARNING_RATE, &Device::Cpu).unwrap();
        let c = Mlp::new(Style::Tensors, &size, 6, LEARNING_RATE, &Device::Cpu).unwrap();
        assert_eq!(rows(&a.x), rows(&b.x));
        assert_eq!(rows(a.weights().0), rows(b.weights().0));
        assert_ne!(rows(a.weights().0), rows(c.weights().0));
    }

    #[test]
    fn autograd_computes_no_gradient_for_the_input_data() {
        // The input x tracks no op: a gradient for it would cost a product as large as x·w1.
        let mlp = Mlp::new(Style::Autograd, &size("4x6x3x2"), 1, 1e-6, &Device::Cpu).unwrap();
        let h = edgebench_kernels::mm(&mlp.x, mlp.w1.as_tensor()).unwrap();
        let grads = h.sum_all().unwrap().backward().unwrap();
        assert!(grads.get(mlp.w1.as_tensor()).is_some());
        assert!(grads.get(&mlp.x).is_none(), "x got a gradient");
    }

    #[test]
    fn my_relu_clamps_strided_input_and_masks_its_gradient() {
        let a = Tensor::new(&[[-1.0f32, 2.0, 0.0], [3.0, -4.0, 5.0]], &Device::Cpu).unwrap();
        let out = a.t().unwrap().apply_op1(model::MyRelu).unwrap();
        assert_eq!(
            out.to_vec2::<f32>().unwrap(),
            vec![vec![0.0, 3.0], vec![2.0, 0.0], vec![0.0, 5.0]]
        );
        let v = Var::from_tensor(&a).unwrap();
        let grads = (v.apply_op1(model::MyRelu).unwrap() * 3.0)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(
            grads.get(v.as_tensor()).unwrap().to_vec2::<f32>().unwrap(),
            vec![vec![0.0, 3.0, 3.0], vec![3.0, 0.0, 3.0]]
        );
    }

    #[test]
    fn flops_of_the_small_size_counted_by_hand() {
        // N=64, D_in=15000, H=100, D_out=150.
        // x·w1 and xᵀ·grad_h: 2 · 64·15000·100 multiply-adds = 192,000,000 each side → 384,000,000
        // h_relu·w2, h_reluᵀ·grad_y_pred, grad_y_pred·w2ᵀ: 64·100·150 = 960,000 multiply-adds
        // each, 3 · 2 · 960,000 = 5,760,000.
        assert_eq!(flops_per_iteration(&size("small")), 389_760_000);
        assert_eq!(flops_per_iteration(&size("1x1x1x1")), 10);
    }

    #[test]
    fn sizes_parse_by_name_and_by_dimensions() {
        let small = size("small");
        assert_eq!(
            (small.n, small.d_in, small.h, small.d_out),
            (64, 15000, 100, 150)
        );
        assert_eq!(size(" Large ").d_in, 40000);
        assert_eq!(size("medium").to_string(), "medium");
        let custom = size("2x30x4X5");
        assert_eq!(
            (custom.n, custom.d_in, custom.h, custom.d_out),
            (2, 30, 4, 5)
        );
        assert_eq!(custom.to_string(), "2x30x4x5");
        // A preset's dimensions are that preset.
        assert_eq!(size("192x20000x300x200"), size("medium"));
        // serde round trip of a job line.
        let job = MlpJob {
            style: Style::Function,
            size: custom,
            iterations: 3,
            learning_rate: LEARNING_RATE,
            seed: 1,
            device: DeviceKind::Cpu,
        };
        let line = serde_json::to_string(&job).unwrap();
        assert_eq!(serde_json::from_str::<MlpJob>(&line).unwrap(), job);
        assert_eq!(
            job.params_json(),
            r#"{"style":"function","size":"2x30x4x5","n":2,"d_in":30,"h":4,"d_out":5,"learning_rate":1e-6}"#
        );
    }

    #[test]
    fn bad_sizes_and_styles_are_refused_naming_the_problem() {
        let err = |text: &str| MlpSize::parse(text).unwrap_err();
        assert!(
            err("huge").contains("unknown MLP size 'huge'"),
            "{}",
            err("huge")
        );
        assert!(err("huge").contains("small, medium, large"));
        assert!(err("64x15000x100").contains("expected four dimensions"));
        assert!(err("64x15000x100").contains("got 3"));
        assert!(err("64xtenx100x150").contains("D_in 'ten' is not a whole number"));
        assert!(err("64x15000x0x150").contains("H is 0"));
        assert!(err("99999999999x99999999999x9999999x2").contains("too large"));
        let style = Style::parse("graph").unwrap_err();
        assert!(
            style.contains("unknown MLP style 'graph'")
                && style.contains("tensors, autograd or function")
        );
        assert_eq!(Style::parse(" Autograd").unwrap(), Style::Autograd);
    }

    #[test]
    fn autograd_is_estimated_to_keep_more_memory() {
        for size in ["small", "medium", "large"].map(size) {
            let tensors = memory_estimate(Style::Tensors, &size);
            let autograd = memory_estimate(Style::Autograd, &size);
            assert!(autograd > tensors);
            assert_eq!(autograd, memory_estimate(Style::Function, &size));
            // At least x, w1 and its gradient.
            let floor = 4 * (size.n * size.d_in + 2 * size.d_in * size.h) as u64;
            assert!(
                tensors > floor && tensors < 2 * floor,
                "{size}: {tensors} vs {floor}"
            );
        }
    }

    #[test]
    fn the_mlp_table_plans_every_device_size_and_style_once() {
        let config: MlpSweep = toml::from_str(
            r#"
            styles = ["function", "tensors", "function"]
            sizes = ["small", "2x3x4x5", "64x15000x100x150"]
            iterations = 7
            devices = ["cpu"]
            "#,
        )
        .unwrap();
        let jobs = config.jobs(9).unwrap();
        let names: Vec<String> = jobs.iter().map(label).collect();
        assert_eq!(
            names,
            [
                "mlp function small cpu",
                "mlp tensors small cpu",
                "mlp function 2x3x4x5 cpu",
                "mlp tensors 2x3x4x5 cpu"
            ]
        );
        assert!(jobs.iter().all(|j| j.iterations == 7 && j.seed == 9));
        assert!(jobs.iter().all(|j| j.learning_rate == LEARNING_RATE));

        let study = MlpSweep::default().jobs(0).unwrap();
        assert_eq!(study.len(), 9);
        assert!(study.iter().all(|j| j.iterations == 500));
    }

    #[test]
    fn a_bad_mlp_table_is_refused_naming_the_key() {
        let refuse = |text: &str| -> String {
            match toml::from_str::<MlpSweep>(text) {
                Err(e) => e.to_string(),
                Ok(config) => config.jobs(0).unwrap_err(),
            }
        };
        assert!(refuse("sizes = [\"tiny\"]").contains("mlp.sizes: unknown MLP size 'tiny'"));
        assert!(refuse("iterations = 0").contains("mlp.iterations is 0"));
        assert!(refuse("styles = []").contains("mlp.styles is empty"));
        assert!(refuse("learning_rate = -1.0").contains("mlp.learning_rate -1"));
        assert!(refuse("styles = [\"graph\"]").contains("unknown variant `graph`"));
        assert!(refuse("batch = 3").contains("unknown field `batch`"));
    }

    fn job(style: Style, text: &str, iterations: usize) -> MlpJob {
        MlpJob {
            style,
            size: size(text),
            iterations,
            learning_rate: LEARNING_RATE,
            seed: 1,
            device: DeviceKind::Cpu,
        }
    }

    #[test]
    fn metrics_take_the_median_iqr_and_sum_of_step_times() {
        let job = job(Style::Tensors, "small", 5);
        let measured: Vec<_> = [0.4, 0.1, 0.2, 0.3, 0.5]
            .iter()
            .enumerate()
            .map(|(i, &s)| record(i, s))
            .collect();
        let m = metrics(&job, &measured);
        assert_eq!(m.time_per_iteration_s, Some(0.3));
        assert!((m.time_per_iteration_spread_s.unwrap() - 0.2).abs() < 1e-12);
        assert!((m.total_time_s.unwrap() - 1.5).abs() < 1e-12);
        assert!((m.gflop_per_s.unwrap() - 0.38976 / 0.3).abs() < 1e-9);
        assert_eq!(metrics(&job, &[]), Metrics::default());
    }

    #[test]
    fn run_emits_one_timed_record_per_iteration_and_stops_when_asked() {
        let job = job(Style::Function, "4x50x8x3", 5);
        let stop = AtomicBool::new(false);
        let mut records = Vec::new();
        let end = run(&job, &stop, &mut |r| {
            records.push(*r);
            Ok(Control::Continue)
        })
        .unwrap();
        assert_eq!(end, TrialEnd::Completed);
        assert_eq!(
            records.iter().map(|r| r.step).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        for pair in records.windows(2) {
            assert!(pair[0].t_end_ns <= pair[1].t_start_ns);
        }
        for r in &records {
            assert!(r.t_start_ns < r.t_end_ns && r.step_s > 0.0 && r.loss > 0.0);
            assert_eq!((r.epoch, r.lr, r.data_s), (0, LEARNING_RATE, 0.0));
            assert!((r.step_s - (r.t_end_ns - r.t_start_ns) as f64 * 1e-9).abs() < 1e-12);
        }

        let mut seen = 0;
        let end = run(&job, &stop, &mut |_| {
            seen += 1;
            Ok(if seen == 2 {
                Control::Stop
            } else {
                Control::Continue
            })
        })
        .unwrap();
        assert_eq!((end, seen), (TrialEnd::Stopped, 2));

        stop.store(true, Ordering::Relaxed);
        let end = run(&job, &stop, &mut |_| panic!("no iteration after a stop")).unwrap();
        assert_eq!(end, TrialEnd::Stopped);
    }
}
