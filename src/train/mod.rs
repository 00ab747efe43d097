//! One trial's training loop: data -> forward -> loss -> backward -> SGD, timed per iteration.
//! It knows nothing of the store: every finished iteration is handed to a callback.

pub mod data;
pub mod profile;
pub mod sgd;

use crate::config::DeviceKind;
use crate::models::{NetSpec, Network};
use crate::store::IterationRecord;
use candle_core::{Device, Tensor};
use data::Dataset;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// One (net, device, batch) configuration of a sweep.
#[derive(Debug, Clone)]
pub struct TrialSpec {
    pub net: &'static NetSpec,
    pub device: DeviceKind,
    pub batch: usize,
    pub epochs: usize,
    pub images: usize,
    /// Seed of the weights and dropout masks.
    pub seed: u64,
}

impl TrialSpec {
    /// ITER = (IMAGES / BATCH) * EPOCHS, integer division, as the studies' scripts computed it.
    pub fn iterations(&self) -> usize {
        (self.images / self.batch) * self.epochs
    }
}

/// What the callback tells the loop after each iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Continue,
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialEnd {
    Completed,
    /// The callback asked to stop (an interrupt) at an iteration boundary.
    Stopped,
}

/// CLOCK_MONOTONIC in nanoseconds: shared by every process on the host, so power and memory
/// samplers in another process line up with iteration boundaries.
pub fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Keeps freed memory in the process instead of handing it back to the kernel. A training step
/// frees and re-allocates the same large activation and gradient buffers every time; glibc serves
/// blocks above its mmap threshold with fresh mappings, so every step page-faulted all of them in
/// again (4 GoogLeNet batch-32 steps: 1.44M page faults and 3.5 s of system time; 0.34M and 0.9 s
/// with this, 10 % less time per step). Peak RSS is unchanged: the memory is reused, not added.
/// For the processes that train (a worker, `profile`), which end when their training does.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc allocator parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

pub fn device(kind: DeviceKind) -> anyhow::Result<Device> {
    match kind {
        DeviceKind::Cpu => Ok(Device::Cpu),
        #[cfg(feature = "cuda")]
        DeviceKind::Cuda => {
            let device = Device::new_cuda(0)?;
            if let Device::Cuda(cuda) = &device {
                // cudarc records and waits on an event per buffer per kernel so buffers can move
                // between streams; candle queues everything on the device's one stream, so the
                // events only add host time to every op (what bounds small batches).
                // SAFETY: edgebench never creates a second stream on this device.
                unsafe { cuda.disable_event_tracking() };
            }
            Ok(device)
        }
        #[cfg(not(feature = "cuda"))]
        DeviceKind::Cuda => anyhow::bail!(
            "--device cuda: this edgebench was built without the `cuda` feature; rebuild with \
             `cargo build --release --features cuda` on a machine with nvcc (see cross/README.md), \
             or use --device cpu"
        ),
    }
}

/// Trains one trial from freshly initialised weights, calling `on_iteration` after every
/// iteration. Errors (an allocation failure, a bad image) end the trial; the iterations already
/// handed over stay recorded.
pub fn run_trial(
    trial: &TrialSpec,
    data: &Dataset,
    on_iteration: &mut dyn FnMut(&IterationRecord) -> anyhow::Result<Control>,
) -> anyhow::Result<TrialEnd> {
    let device = device(trial.device)?;
    let net = Network::new(trial.net, &device, trial.seed)?;
    let iterations = trial.iterations();
    let mut sgd = sgd::Sgd::new(trial.net.solver, net.params(), iterations)?;
    let mut dropout_rng = StdRng::seed_from_u64(trial.seed.wrapping_add(1));
    let [c, h, w] = trial.net.input;
    for step in 0..iterations {
        let first_image = step * trial.batch;
        let data_start = monotonic_ns();
        let batch = data.batch(first_image, trial.batch, [c, h, w])?;
        let images = Tensor::from_vec(batch.images, (trial.batch, c, h, w), &device)?;
        let labels = Tensor::from_vec(batch.labels, trial.batch, &device)?;
        let t_start_ns = monotonic_ns();

        let outputs = net.forward(&images, Some(&mut dropout_rng), None)?;
        let loss = net.loss(&outputs, &labels)?;
        let grads = loss.backward()?;
        let lr = sgd.step(step, net.params(), &grads)?;
        // Reading the loss back synchronises the device, so the step time is complete.
        let loss = loss.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;

        let t_end_ns = monotonic_ns();
        let record = IterationRecord {
            step,
            epoch: first_image / trial.images,
            loss,
            lr,
            data_s: (t_start_ns - data_start) as f64 * 1e-9,
            step_s: (t_end_ns - t_start_ns) as f64 * 1e-9,
            t_start_ns,
            t_end_ns,
        };
        if on_iteration(&record)? == Control::Stop {
            return Ok(TrialEnd::Stopped);
        }
    }
    Ok(TrialEnd::Completed)
}
