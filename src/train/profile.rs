//! `edgebench profile`: where a training step's time goes. Times whole training steps (forward,
//! loss, backward, SGD) for ms/img, then every top-level stage alone: its forward on the input
//! the network gives it, and the backward through that stage only (from a contiguous gradient of
//! ones for its output, with the input a variable as it is inside the network, except for the
//! first layer, whose input is the image).

use crate::clock::monotonic_ns;
use crate::models::{ConvImpl, NetSpec, Network};
use crate::train::{data::Dataset, sgd::Sgd};
use candle_core::{Device, Tensor, Var};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::fmt::Write;

#[derive(Debug, Clone)]
pub struct StageTime {
    pub name: String,
    pub forward_s: f64,
    pub backward_s: f64,
}

#[derive(Debug, Clone)]
pub struct Profile {
    pub net: String,
    pub batch: usize,
    /// `cpu` or `cuda`.
    pub device: &'static str,
    pub threads: usize,
    /// Median of the timed steps (the first, warm-up step excluded).
    pub step_s: f64,
    /// Median CPU time (all threads) of a step.
    pub step_cpu_s: f64,
    /// Median time the host took to queue a step (forward to SGD update, before waiting for
    /// the device): close to `step_s` on a GPU, the step is bound by the host, not the GPU.
    pub issue_s: f64,
    pub forward_s: f64,
    pub backward_s: f64,
    /// Floating-point operations of the matrix products edgebench's kernels ran per image in a
    /// timed step (`edgebench_kernels::product_flops`); 0 where other libraries ran them (a GPU,
    /// candle's convolutions).
    pub product_flops_per_image: f64,
    pub stages: Vec<StageTime>,
    pub losses: Vec<f64>,
    /// The timed steps' matrix products by shape and call site, most time first, where
    /// `profile` was asked to log them; their calls and seconds are the timed steps' sums.
    pub products: Vec<edgebench_kernels::ProductShape>,
    pub timed_steps: usize,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// CPU time (user + system) this process has used, in seconds: steadier than wall time on a
/// shared machine.
pub fn cpu_seconds() -> f64 {
    // SAFETY: rusage is plain integers, for which all-zero bytes are valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Peak resident set size of this process so far, in KiB (Linux `ru_maxrss`).
pub fn peak_rss_kb() -> u64 {
    // SAFETY: rusage is plain integers, for which all-zero bytes are valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss.max(0) as u64
}

fn secs(t0: i64) -> f64 {
    (monotonic_ns() - t0) as f64 * 1e-9
}

/// Profiles `steps` training steps (plus one warm-up) of `spec` at `batch` on `device`. On a GPU
/// every timed part ends with a wait for the device, so its kernels are counted where they run.
pub fn profile(
    spec: &'static NetSpec,
    device: &Device,
    batch: usize,
    steps: usize,
    conv: ConvImpl,
    per_stage: bool,
    log_products: bool,
) -> anyhow::Result<Profile> {
    anyhow::ensure!(batch > 0 && steps > 0, "--batch and --steps must be > 0");
    crate::train::prepare_training_process();
    let sync = || device.synchronize();
    let mut net = Network::new(spec, device, 1)?;
    net.set_conv_impl(conv);
    // On a GPU the timed steps wait for the device once, at the end (reading the loss), as a
    // training loop does; waiting between forward and backward as well would idle the GPU while
    // the host queues the backward. The forward/backward split then comes from a few extra
    // steps that do wait in between. On the CPU a wait is free, so every step gives both.
    let split_inline = !device.is_cuda();
    let split_steps = if split_inline { 0 } else { steps.clamp(1, 3) };
    let total_steps = steps + 1 + split_steps;
    let data = Dataset::synthetic(1, spec.classes, batch * total_steps);
    let mut sgd = Sgd::new(spec.solver, net.params(), total_steps)?;
    let mut rng = StdRng::seed_from_u64(2);
    let [c, h, w] = spec.input;
    let batch_at = |step: usize| -> anyhow::Result<(Tensor, Tensor)> {
        let b = data.batch(step * batch, batch, [c, h, w])?;
        Ok((
            Tensor::from_vec(b.images, (batch, c, h, w), device)?,
            Tensor::from_vec(b.labels, batch, device)?,
        ))
    };

    let (mut step_s, mut fwd_s, mut bwd_s, mut losses) = (vec![], vec![], vec![], vec![]);
    let (mut cpu_s, mut issue_s) = (vec![], vec![]);
    let mut timed_product_flops = 0;
    for step in 0..total_steps {
        let timed = step > 0 && step <= steps;
        let split = split_inline || step > steps;
        let (x, y) = batch_at(step)?;
        if log_products && step == 1 {
            edgebench_kernels::log_products(true);
        }
        let (t0, c0) = (monotonic_ns(), cpu_seconds());
        let flops0 = edgebench_kernels::product_flops();
        let out = net.forward(&x, Some(&mut rng), None)?;
        let loss = net.loss(&out, &y)?;
        if split {
            sync()?;
        }
        let t1 = monotonic_ns();
        // As the training loop runs it: on the host each parameter is updated during the
        // backward, so the backward's time holds the update.
        sgd.backward_and_step(step, net.params(), &loss)?;
        let queued = monotonic_ns();
        if split {
            sync()?;
        }
        let t2 = monotonic_ns();
        // Waits for the device.
        let loss = loss.to_scalar::<f32>()? as f64;
        if timed {
            timed_product_flops += edgebench_kernels::product_flops() - flops0;
            step_s.push(secs(t0));
            cpu_s.push(cpu_seconds() - c0);
            issue_s.push((queued - t0) as f64 * 1e-9);
        }
        if log_products && step == steps {
            edgebench_kernels::log_products(false);
        }
        if step > 0 && split {
            fwd_s.push((t1 - t0) as f64 * 1e-9);
            bwd_s.push((t2 - t1) as f64 * 1e-9);
        }
        if step <= steps {
            losses.push(loss);
        }
    }

    let products = if log_products {
        edgebench_kernels::take_logged_products()
    } else {
        Vec::new()
    };

    // Every stage's input, from one training-graph forward pass.
    let (x, _) = batch_at(0)?;
    let names = if per_stage { net.stages() } else { vec![] };
    let mut outputs: Vec<Tensor> = Vec::with_capacity(names.len());
    for (i, (_, input)) in names.iter().enumerate() {
        let xi = input.map_or(&x, |j| &outputs[j]).clone();
        outputs.push(net.run_stage(i, &xi, Some(&mut rng))?);
    }
    let reps = steps.clamp(1, 3);
    let mut stages = Vec::with_capacity(names.len());
    for (i, (name, input)) in names.iter().enumerate() {
        let xi = input.map_or(&x, |j| &outputs[j]).clone();
        let var = Var::from_tensor(&xi)?;
        let arg = if input.is_some() {
            var.as_tensor()
        } else {
            &xi
        };
        let (mut f, mut b) = (vec![], vec![]);
        for _ in 0..reps {
            let t0 = monotonic_ns();
            let y = net.run_stage(i, arg, Some(&mut rng))?;
            sync()?;
            f.push(secs(t0));
            // The backward starts from a contiguous gradient of ones, as a stage's gradient
            // comes from the next stage's backward; from `sum_all` it would be a broadcast view
            // that every op of the stage copied first, timed with it.
            let dy = y.ones_like()?;
            sync()?;
            let t0 = monotonic_ns();
            std::hint::black_box(y.backward_from(&dy)?);
            sync()?;
            b.push(secs(t0));
        }
        stages.push(StageTime {
            name: name.clone(),
            forward_s: median(&mut f),
            backward_s: median(&mut b),
        });
    }
    Ok(Profile {
        net: spec.name.to_string(),
        batch,
        device: if device.is_cuda() { "cuda" } else { "cpu" },
        threads: rayon::current_num_threads(),
        step_s: median(&mut step_s),
        step_cpu_s: median(&mut cpu_s),
        issue_s: median(&mut issue_s),
        forward_s: median(&mut fwd_s),
        backward_s: median(&mut bwd_s),
        product_flops_per_image: timed_product_flops as f64 / (steps * batch) as f64,
        stages,
        losses,
        products,
        timed_steps: steps,
    })
}

impl Profile {
    pub(crate) fn ms_per_image(&self) -> f64 {
        self.step_s * 1e3 / self.batch as f64
    }

    /// The logged products as a table: the `rows` with the most time, then all of them summed,
    /// then each call site's.
    /// Times are per timed step and per thread, to set against one core's SGEMM peak.
    pub fn products_text(&self, rows: usize) -> String {
        let mut s = String::new();
        if self.products.is_empty() {
            return s;
        }
        let steps = self.timed_steps.max(1) as f64;
        let _ = writeln!(
            s,
            "matrix products by shape and call site, per timed step ({} of {} shapes)",
            rows.min(self.products.len()),
            self.products.len()
        );
        let _ = writeln!(
            s,
            "{:>6} {:>6} {:>6} {:>7} {:>7} {:>9} {:>14}  call site",
            "m", "n", "k", "threads", "calls", "ms", "GFLOP/s/thread"
        );
        let per_thread = |flops: f64, seconds: f64| flops / seconds.max(1e-12) * 1e-9;
        for p in self.products.iter().take(rows) {
            let thread_s = p.seconds * p.threads as f64;
            let _ = writeln!(
                s,
                "{:>6} {:>6} {:>6} {:>7} {:>7.0} {:>9.2} {:>14.1}  {}",
                p.m,
                p.n,
                p.k,
                p.threads,
                p.calls as f64 / steps,
                p.seconds * 1e3 / steps,
                per_thread(p.flops(), thread_s),
                p.site
            );
        }
        let (flops, thread_s) = self.products.iter().fold((0.0, 0.0), |(f, t), p| {
            (f + p.flops(), t + p.seconds * p.threads as f64)
        });
        let _ = writeln!(
            s,
            "all products: {:.1} ms of thread time per step, {:.1} GFLOP/s per thread",
            thread_s * 1e3 / steps,
            per_thread(flops, thread_s)
        );
        // Every shape of a call site summed: which kernels' products run below the peak.
        let mut sites: Vec<(&str, f64, f64)> = Vec::new();
        for p in &self.products {
            let thread_s = p.seconds * p.threads as f64;
            match sites.iter_mut().find(|(site, ..)| *site == p.site) {
                Some((_, f, t)) => {
                    *f += p.flops();
                    *t += thread_s;
                }
                None => sites.push((&p.site, p.flops(), thread_s)),
            }
        }
        sites.sort_by(|a, b| b.2.total_cmp(&a.2));
        let _ = writeln!(s, "by call site, every shape summed, per timed step");
        let _ = writeln!(s, "{:>9} {:>14}  call site", "thread ms", "GFLOP/s/thread");
        for (site, flops, thread_s) in sites {
            let ms = thread_s * 1e3 / steps;
            let rate = per_thread(flops, thread_s);
            let _ = writeln!(s, "{ms:>9.2} {rate:>14.1}  {site}");
        }
        s
    }

    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} batch {} on {} thread(s): per stage alone, median ms",
            self.net, self.batch, self.threads
        );
        let _ = writeln!(
            s,
            "{:<24} {:>10} {:>10} {:>10} {:>6}",
            "stage", "forward", "backward", "total", "%"
        );
        let sum: f64 = self.stages.iter().map(|t| t.forward_s + t.backward_s).sum();
        for t in &self.stages {
            let tot = t.forward_s + t.backward_s;
            let _ = writeln!(
                s,
                "{:<24} {:>10.1} {:>10.1} {:>10.1} {:>6.1}",
                t.name,
                t.forward_s * 1e3,
                t.backward_s * 1e3,
                tot * 1e3,
                100.0 * tot / sum.max(1e-12)
            );
        }
        let (f, b): (f64, f64) = self
            .stages
            .iter()
            .fold((0.0, 0.0), |(f, b), t| (f + t.forward_s, b + t.backward_s));
        let _ = writeln!(
            s,
            "{:<24} {:>10.1} {:>10.1} {:>10.1}",
            "sum of stages",
            f * 1e3,
            b * 1e3,
            (f + b) * 1e3
        );
        let _ = writeln!(
            s,
            "{:<24} {:>10.1} {:>10.1} {:>10.1}   (with the loss; backward with the SGD update)",
            "training step",
            self.forward_s * 1e3,
            self.backward_s * 1e3,
            self.step_s * 1e3
        );
        let _ = writeln!(
            s,
            "host time to queue a step {:.1} ms of {:.1} ms",
            self.issue_s * 1e3,
            self.step_s * 1e3
        );
        if self.product_flops_per_image > 0.0 {
            let _ = writeln!(
                s,
                "matrix products {:.3} GFLOP/img, {:.1} GFLOP/s over the whole step",
                self.product_flops_per_image * 1e-9,
                self.product_flops_per_image * 1e-9 / (self.step_s / self.batch as f64)
            );
        }
        let _ = writeln!(
            s,
            "ms/img {:.2} (CPU time {:.2} ms/img over {} threads)   losses {:?}",
            self.ms_per_image(),
            self.step_cpu_s * 1e3 / self.batch as f64,
            self.threads,
            self.losses
                .iter()
                .map(|l| (l * 1e4).round() / 1e4)
                .collect::<Vec<_>>()
        );
        s
    }
}

/// Best of a few single-precision GEMMs of `size`³ on all rayon threads, in GFLOP/s: the
/// machine's practical SGEMM peak with the faster of the GEMMs edgebench trains with, the `gemm`
/// crate and its own microkernel ([`edgebench_kernels::sgemm::Kernel::detect`]).
pub fn sgemm_gflops(size: usize) -> f64 {
    let n = size.max(64);
    let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.1).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut c = vec![0f32; n * n];
    let threads = rayon::current_num_threads();
    let par = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t0 = monotonic_ns();
        // SAFETY: a, b, c are n x n row-major and do not overlap.
        unsafe {
            gemm::gemm(
                n,
                n,
                n,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                n as isize,
                b.as_ptr(),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                par,
            );
        }
        best = best.min(secs(t0));
        let t0 = monotonic_ns();
        edgebench_kernels::sgemm::sgemm(&a, &b, &mut c, (n, n, n));
        best = best.min(secs(t0));
    }
    std::hint::black_box(&c);
    2.0 * (n as f64).powi(3) / best * 1e-9
}
