//! One trial's training loop: data -> forward -> loss -> backward -> SGD, timed per iteration.
//! It knows nothing of the store: every finished iteration is handed to a callback.

pub mod data;
pub mod gpu_memory;
pub mod profile;
pub mod sgd;

use crate::clock::monotonic_ns;
use crate::config::DeviceKind;
use crate::models::{NetSpec, Network};
use crate::record::{Control, IterationRecord, TrialEnd};
use candle_core::{Device, Tensor};
use data::Dataset;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// One (net, device, batch) configuration of a sweep.
#[derive(Debug, Clone)]
pub(crate) struct TrialSpec {
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
    pub(crate) fn iterations(&self) -> usize {
        (self.images / self.batch) * self.epochs
    }
}

/// What a process that trains (a trial's worker, `profile`) sets up first: freed memory kept
/// (`edgebench_kernels::keep_freed_memory`), subnormals flushed (`flush_denormals`), large blocks
/// on huge pages (`HugePageAlloc`) and candle's thread pool asleep between its operations
/// (`CANDLE_SPIN_LIMIT`). Call it before the first tensor operation, on the thread that trains,
/// which must live as long as the process: it becomes one of rayon's workers.
pub fn prepare_training_process() {
    edgebench_kernels::keep_freed_memory();
    // The thread that trains runs the kernels' parallel loops as one of rayon's workers rather
    // than handing each loop to the pool and sleeping until it ends: a GoogLeNet step at batch 1
    // is hundreds of short loops, and the hand-over and wake-up of each took 5 % of its time
    // (2-core Xeon VM). Fails, changing nothing, where the pool already exists.
    let _ = rayon::ThreadPoolBuilder::new()
        .use_current_thread()
        .build_global();
    flush_denormals();
    HUGE_PAGES.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(limit) = candle_spin_limit(std::env::var_os(CANDLE_SPIN_LIMIT)) {
        std::env::set_var(CANDLE_SPIN_LIMIT, limit);
    }
}

/// How long candle's own thread pool (its elementwise operations and copies) spins after each
/// operation before its workers sleep: 25,000 pauses unless set, about a millisecond. The
/// convolution, pooling and linear kernels run on rayon's workers instead, one per core, so a
/// candle worker spinning between a gradient sum and the next convolution takes a core from them:
/// GoogLeNet's batch-1 step took 10 % longer with candle's default (2-core Xeon VM).
const CANDLE_SPIN_LIMIT: &str = "CANDLE_BARRIER_POOL_SPIN_LIMIT";

/// The value `prepare_training_process` gives `CANDLE_SPIN_LIMIT`: no spinning, unless the user
/// set one.
fn candle_spin_limit(set: Option<std::ffi::OsString>) -> Option<&'static str> {
    match set {
        Some(_) => None,
        None => Some("0"),
    }
}

/// Whether `HugePageAlloc` asks for huge pages: set by `prepare_training_process`.
static HUGE_PAGES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Blocks from this size on are advised onto transparent huge pages.
const HUGE_MIN: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

/// The system allocator, with the large blocks of a training process advised onto transparent
/// huge pages (`MADV_HUGEPAGE`; Linux's THP in its "madvise" mode, Ubuntu's default and this
/// machine's, gives them only to regions that ask; "always" gives them anyway, "never" ignores
/// the advice). The binary installs it as the global allocator.
/// GEMM packing and the strided passes (an fc6 input gradient walks 4096 rows 36 KB apart) missed
/// the TLB on 4 KB pages: with it GoogLeNet and AlexNet batch-32 steps took 5-8 % less time.
pub struct HugePageAlloc;

impl HugePageAlloc {
    fn advise(p: *mut u8, len: usize) {
        #[cfg(target_os = "linux")]
        if len >= HUGE_MIN && !p.is_null() && HUGE_PAGES.load(std::sync::atomic::Ordering::Relaxed)
        {
            let start = (p as usize).next_multiple_of(HUGE_PAGE);
            let end = (p as usize + len) & !(HUGE_PAGE - 1);
            if end > start {
                // SAFETY: the range lies inside the block just allocated; madvise only changes
                // how its pages are backed (an error leaves them as they were).
                unsafe {
                    libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE)
                };
            }
        }
    }
}

// SAFETY: every call is forwarded to `System`; `advise` never touches the memory's contents.
unsafe impl std::alloc::GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's layout contract is System's; forwarded unchanged.
        let p = unsafe { std::alloc::System.alloc(layout) };
        Self::advise(p, layout.size());
        p
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's layout contract is System's; forwarded unchanged.
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        Self::advise(p, layout.size());
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: every block came from System (alloc/realloc above), with this layout.
        unsafe { std::alloc::System.dealloc(p, layout) }
    }
    unsafe fn realloc(&self, p: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        // SAFETY: `p` came from System with `layout`; the caller's size contract is System's.
        let q = unsafe { std::alloc::System.realloc(p, layout, size) };
        Self::advise(q, size);
        q
    }
}

/// Flushes subnormal floats to zero on this process's training threads (this one and the global
/// rayon pool's, where the kernels and gemm run), as TensorFlow does on the CPU. Once a short run
/// on synthetic data drives the loss to zero, its gradients fall into the subnormal range, where
/// x86 arithmetic is ~100x slower: an AlexNet batch-32 step went from 0.9 s to 17 s there. The
/// results change only below 1.2e-38 (f32's smallest normal).
pub(crate) fn flush_denormals() {
    flush_denormals_on_this_thread();
    rayon::broadcast(|_| flush_denormals_on_this_thread());
}

/// x86-64: MXCSR's flush-to-zero and denormals-are-zero bits; aarch64: FPCR.FZ. Elsewhere nothing.
pub(crate) fn flush_denormals_on_this_thread() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads and writes this thread's SSE control register; only FTZ (bit 15) and DAZ
    // (bit 6) change, which affect results below f32/f64's smallest normal only.
    unsafe {
        let mut csr: u32 = 0;
        std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack, preserves_flags));
        csr |= (1 << 15) | (1 << 6);
        std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: reads and writes this thread's FP control register, setting FZ (bit 24) only.
    unsafe {
        let mut fpcr: u64;
        std::arch::asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack, preserves_flags));
        fpcr |= 1 << 24;
        std::arch::asm!("msr fpcr, {}", in(reg) fpcr, options(nomem, nostack, preserves_flags));
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
                gpu_memory::track(cuda)?;
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
pub(crate) fn run_trial(
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
        let lr = sgd.backward_and_step(step, net.params(), &loss)?;
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

#[cfg(test)]
mod tests {
    use std::hint::black_box;

    /// candle's pool sleeps between operations unless the user chose how long it spins.
    #[test]
    fn candle_pool_spins_only_when_asked() {
        assert_eq!(super::candle_spin_limit(None), Some("0"));
        assert_eq!(super::candle_spin_limit(Some("25000".into())), None);
    }

    fn half_min_normal() -> f32 {
        black_box(f32::MIN_POSITIVE) * black_box(0.5f32)
    }

    /// Half of f32's smallest normal is a subnormal unless the thread flushes them. Each test runs
    /// on its own thread, and the workers here are a pool of this test's own, so the mode does
    /// not leak into other tests.
    #[test]
    fn subnormals_flush_to_zero() {
        let flushes = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));
        assert!(
            half_min_normal() > 0.0,
            "subnormals flushed before the call"
        );
        super::flush_denormals_on_this_thread();
        let here = (
            half_min_normal(),
            black_box(f32::from_bits(1)) * black_box(1.0f32),
        );
        // `install` runs `flush_denormals` on one of the pool's workers; it must reach both.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let on_workers = pool.install(|| {
            super::flush_denormals();
            rayon::broadcast(|_| half_min_normal())
        });
        if flushes {
            // Results below the smallest normal become zero (FTZ), and so do subnormal inputs
            // (x86 DAZ; aarch64 FZ).
            assert_eq!(here, (0.0, 0.0));
            assert_eq!(on_workers, vec![0.0; 2]);
        }
    }

    /// A large block from `HugePageAlloc` in a training process lies in a mapping advised for
    /// huge pages (`hg` in its smaps VmFlags; this reads the test process's own smaps).
    #[test]
    #[cfg(target_os = "linux")]
    fn large_blocks_are_advised_onto_huge_pages() {
        use std::alloc::{GlobalAlloc, Layout};
        assert!(
            std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists(),
            "this test needs a kernel with transparent huge pages"
        );
        super::HUGE_PAGES.store(true, std::sync::atomic::Ordering::Relaxed);
        let layout = Layout::from_size_align(3 * super::HUGE_MIN, 64).unwrap();
        // SAFETY: a non-zero size; freed below with the same layout.
        let p = unsafe { super::HugePageAlloc.alloc(layout) };
        assert!(!p.is_null());
        let inside = (p as usize).next_multiple_of(super::HUGE_PAGE) + 4096;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut flags = None;
        let mut in_range = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((a, b)) = range.split_once('-') {
                    if let (Ok(a), Ok(b)) =
                        (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                    {
                        in_range = (a..b).contains(&inside);
                        continue;
                    }
                }
            }
            if in_range {
                if let Some(f) = line.strip_prefix("VmFlags:") {
                    flags = Some(f.split_whitespace().map(str::to_owned).collect::<Vec<_>>());
                }
            }
        }
        // SAFETY: allocated above with this layout.
        unsafe { super::HugePageAlloc.dealloc(p, layout) };
        let flags = flags.expect("the block's mapping in /proc/self/smaps");
        assert!(flags.iter().any(|f| f == "hg"), "VmFlags {flags:?}");
    }
}
