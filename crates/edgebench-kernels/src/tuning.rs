//! The kernels' tuning: the knobs read from the environment once per process ([`Tuning`]), the
//! block sizes and thresholds the kernels are built around (the knobs' defaults among them), and
//! the TF32 switch. The knobs exist for comparisons (Winograd against im2col) and for tuning on
//! other CPUs; the defaults are the values measured best on the boards (see docs/kernels.md,
//! "Tuning variables"). A leaf: the kernels read their sizes from here, never the other way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Default of `Tuning::conv_cols`: small feature maps (GoogLeNet's 14x14 and 7x7, AlexNet's
/// 13x13) put several images side by side in one im2col GEMM until it has about this many
/// columns.
pub(crate) const CONV_COLS: usize = 256;

/// A single image's im2col columns go through im2col, GEMM and col2im in blocks of output rows
/// of about this many bytes (`Geom::block_rows`), so they are still in the cache when the GEMM
/// packs them: about half this CPU's L2 (2 MB on recent Xeons; the Cortex-A78AE cores of a
/// Jetson Orin have 256 KB of L2 and share a 2-4 MB L3).
pub(crate) const COL_BLOCK_BYTES: usize = 1 << 20;

/// Default of `Tuning::winograd_tiles`: target tile columns per Winograd GEMM. 196 keeps one
/// image per block on 56x56 (F(4x4)) and 28x28 maps (F(2x2); 196 tiles each) instead of two,
/// and four 14x14 images (F(2x2)) instead of six. At 256 a block's transformed tiles are larger
/// and conv2/3x3, 3a, 3b and 4e ran 2-7 % slower; 128 and 160 were no faster than 196 on 3b and
/// 4e.
pub(crate) const WINOGRAD_TILES: usize = 196;

/// Default of `Tuning::winograd_chunk_kb`: the Winograd forward computes its GEMM outputs in
/// chunks of output channels of about this many KiB, half of a 2 MB L2, so they are still in
/// the cache for the output transform.
pub(crate) const WINOGRAD_CHUNK_KB: usize = 1024;

/// Most tiles per block of the tile-major Winograd products (`Tuning::winograd_tile_major`;
/// a map's tile rows are cut into bands of equal rows): a block's transformed input is 36
/// (F(4x4, 3x3)) x 48 tiles x the input channels, 440 KB at 64 channels, a quarter of a
/// 196-tile block's.
pub(crate) const WINOGRAD_TILE_MAJOR_BLOCK: usize = 48;

/// Maps smaller than this (on either side) stay on im2col, except on aarch64 from
/// `WINOGRAD_BATCHED_MIN_SIDE` when a task has at least `WINOGRAD_F4_MIN_IMAGES_PER_TASK`
/// images: a 7x7 map is 4x4 F(2x2) tiles covering 8x8 (31 % of the work wasted) with rows too
/// short for the transforms' vectors; Winograd measured slower there (GoogLeNet 5a/5b, x86_64).
pub(crate) const WINOGRAD_MIN_SIDE: usize = 10;

/// Maps from this side up to `WINOGRAD_MIN_SIDE` take the Winograd path too when a task has at
/// least `WINOGRAD_F4_MIN_IMAGES_PER_TASK` images, their 3x3 layers with F(4x4, 3x3): a 7x7
/// map is then 2x2 tiles, 144 multiplies per 49 outputs and channel pair where im2col does 441.
/// GoogLeNet's batch-8 step on the Cortex-A57 counted 1.7 % fewer instructions; with one image
/// per task (4 tiles) its batch-1 step counted 4 % more.
#[cfg(target_arch = "aarch64")]
pub(crate) const WINOGRAD_BATCHED_MIN_SIDE: usize = 7;
/// See the aarch64 value: on x86_64 GoogLeNet's 5a/5b layers (7x7 maps) on F(4x4) made the
/// batch-32 step 3.5 % slower (faster in 1 of 4 alternating rounds, 2-core Zen 4 VM), so maps
/// under `WINOGRAD_MIN_SIDE` stay on im2col whatever the batch.
#[cfg(not(target_arch = "aarch64"))]
pub(crate) const WINOGRAD_BATCHED_MIN_SIDE: usize = WINOGRAD_MIN_SIDE;

/// 3x3 layers on the Winograd path, whatever their map side, take F(4x4, 3x3) when a task has
/// at least this many images: GoogLeNet's 14x14 maps are then 4x4 tiles of 6x6 (576 multiplies
/// per channel pair instead of F(2x2)'s 784), and the images of a block give the GEMMs enough
/// tile columns. With one image (16 tiles) F(4x4) counted 5 % more instructions for GoogLeNet's
/// batch-1 step on the Cortex-A57. On a 2-core Zen 4 VM at batch 32, AlexNet's step (13x13 maps)
/// took 6.5 % less time than with F(2x2) (two runs, faster in 8 of 9 alternating rounds) and
/// GoogLeNet's ran level (paired ratios 0.992 and 1.023, faster in 5 of 11).
pub(crate) const WINOGRAD_F4_MIN_IMAGES_PER_TASK: usize = 4;

/// With fewer images than threads (batch 1), only maps of at least this side take the Winograd
/// path (each image split over the threads by channels). A 14x14 map is 49 tiles (F(2x2)), few
/// columns for its GEMMs, yet GoogLeNet's batch-1 step with its 14x14 3x3 layers on the path
/// took 6 % less time than with them on im2col (58.3 against 62.0 ms/img, 5 alternating rounds
/// on a 2-core Zen 4 VM, faster in all 5; CPU time 109.6 against 117.3 ms/img). AlexNet's 13x13
/// layers stay on im2col: on the path its batch-1 step was level and its peak RSS 5 MiB higher.
pub(crate) const WINOGRAD_FEW_MIN_SIDE: usize = 14;

/// Grouped 5x5 layers (AlexNet's conv2) take the Winograd path only with at least this many
/// images per thread; one-group layers take it at any batch. A grouped layer's image is not
/// split over the threads by channels, and at batch 1 its GEMMs have too few tile columns: F(2x2,
/// 5x5) ran level with im2col to 1.3x slower on 28x28 and 27x27 maps and up to 2x slower on
/// 14x14; at batch 8 on one thread and batch 32 on two, 1.1-1.8x faster (`conv_paths ... 5`).
pub(crate) const WINOGRAD_5X5_MIN_IMAGES_PER_THREAD: usize = 2;

/// Maps of at least this side take F(4x4, 3x3), smaller ones F(2x2, 3x3) (the default of
/// `Tuning::winograd_tile`). F(4x4) does 4x fewer multiplies than direct convolution (F(2x2):
/// 2.25x) but its transforms cost more per tile, and a map that is not a multiple of 4 wastes
/// more of its last tiles. GoogLeNet's 56x56 conv2/3x3 is faster with F(4x4) everywhere. Its
/// 28x28 layers are too: on the boards' cores 2 % fewer instructions per step at batch 1 and 3 %
/// at batch 8 (Cortex-A57); on a 2-core Zen 4 VM, with the 5x5 layers on F(4x4, 5x5), the step
/// took 1 % less time at batch 1 and 0.8 % less at batch 32 (peak RSS +4 MiB of 1.5 GiB).
/// Smaller maps take F(4x4) only with several images per task
/// (`WINOGRAD_F4_MIN_IMAGES_PER_TASK`).
pub(crate) const WINOGRAD_F4_MIN_SIDE: usize = 24;

/// Fully connected layers with at most this many rows (batch) take streaming loops for the
/// forward and the weight gradient instead of gemm: with so few rows they are bound by reading
/// or writing W once, and gemm took fc6 (151 MB) 15.5 ms forward and 55 ms for dW at batch 1
/// against 9.5 and 34 ms streaming (`linear/` in benches/kernels.rs).
pub(crate) const LINEAR_STREAM_MAX_ROWS: usize = 4;

/// W's rows per parallel task of the fully connected layer's streaming loops (fc6: 36 KB each).
pub(crate) const LINEAR_STREAM_ROWS_PER_TASK: usize = 64;

/// `LINEAR_STREAM_MAX_ROWS` for f32 on aarch64, whose NEON loops share each load of W among
/// four rows of the product: batch 8 streams too.
#[cfg(target_arch = "aarch64")]
pub(crate) const LINEAR_STREAM_MAX_ROWS_NEON: usize = 8;

/// dx's columns per parallel task of the fully connected layer's streaming input gradient
/// (aarch64): 2 KiB of dx stay in L1 while W's rows stream past.
#[cfg(target_arch = "aarch64")]
pub(crate) const LINEAR_STREAM_COLS_PER_TASK: usize = 512;

/// W's rows per parallel task of the fully connected layer's input gradient at a few rows
/// elsewhere (`rows_data`): each task sums them into its own partial dx, so fc6's 4096 rows are
/// 32 partials of 36 KB per row of dx, GoogLeNet's 1000- and 1024-row layers 8.
pub(crate) const LINEAR_DATA_ROWS_PER_TASK: usize = 128;

/// LRN channels per task: long enough that sliding the window beats summing it afresh, short
/// enough that a batch-1 sample still splits over the cores.
pub(crate) const LRN_BLOCK: usize = 16;

/// Every tuning knob of the kernels. `tuning()` holds the process's values, read from the
/// environment by `Tuning::from_env` the first time a kernel asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// `EDGEBENCH_CONV_COLS` (default 256): target GEMM columns when the im2col convolution
    /// puts several images of a small feature map side by side; 1 = one image per GEMM.
    pub conv_cols: usize,
    /// `EDGEBENCH_WINOGRAD` (default on): `0` turns the Winograd convolutions off, so every
    /// convolution takes the im2col path.
    pub winograd: bool,
    /// `EDGEBENCH_WINOGRAD_TILE` (default by map size: F(4x4) on maps of at least 24, and on
    /// every map with at least four images per task, else F(2x2)): `2` or `4` sets the output
    /// tile side for every Winograd layer; other values are ignored.
    pub winograd_tile: Option<usize>,
    /// `EDGEBENCH_WINOGRAD_TILES` (default 196): target tile columns per Winograd GEMM block;
    /// 0 is ignored.
    pub winograd_tiles: usize,
    /// `EDGEBENCH_WINOGRAD_CHUNK_KB` (default 1024, half of a 2 MB L2): size in KiB of the
    /// Winograd forward's output-channel chunks.
    pub winograd_chunk_kb: usize,
    /// `EDGEBENCH_WINOGRAD_TILE_MAJOR` (default on except on aarch64): `0` keeps the Winograd
    /// products of batched layers in their ξ-major layout (vectors along tiles) instead of the
    /// tile-major one (vectors along channels, blocks of `WINOGRAD_TILE_MAJOR_BLOCK` tiles).
    pub winograd_tile_major: bool,
    /// `EDGEBENCH_SGEMM` (default: the widest microkernel the CPU has): `gemm-crate` runs every
    /// f32 product on the `gemm` crate, `avx2` keeps an AVX-512 x86 CPU on the AVX2 kernel.
    pub sgemm: SgemmChoice,
}

/// Which f32 GEMM kernel `EDGEBENCH_SGEMM` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SgemmChoice {
    /// The widest of edgebench's own microkernels that the CPU runs.
    Widest,
    /// No wider than AVX2 (x86_64; no effect elsewhere).
    Avx2,
    /// The `gemm` crate for every product.
    GemmCrate,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            conv_cols: CONV_COLS,
            winograd: true,
            winograd_tile: None,
            winograd_tiles: WINOGRAD_TILES,
            winograd_chunk_kb: WINOGRAD_CHUNK_KB,
            winograd_tile_major: cfg!(not(target_arch = "aarch64")),
            sgemm: SgemmChoice::Widest,
        }
    }
}

impl Tuning {
    /// The knobs from the `EDGEBENCH_*` variables above; unset or unparsable ones keep their
    /// default.
    pub fn from_env() -> Tuning {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Tuning {
        let default = Tuning::default();
        let number = |name: &str| var(name).and_then(|v| v.parse::<usize>().ok());
        Tuning {
            conv_cols: number("EDGEBENCH_CONV_COLS").unwrap_or(default.conv_cols),
            winograd: var("EDGEBENCH_WINOGRAD").is_none_or(|v| v != "0"),
            winograd_tile: match var("EDGEBENCH_WINOGRAD_TILE").as_deref() {
                Some("2") => Some(2),
                Some("4") => Some(4),
                _ => default.winograd_tile,
            },
            winograd_tiles: number("EDGEBENCH_WINOGRAD_TILES")
                .filter(|&t| t > 0)
                .unwrap_or(default.winograd_tiles),
            winograd_chunk_kb: number("EDGEBENCH_WINOGRAD_CHUNK_KB")
                .unwrap_or(default.winograd_chunk_kb),
            winograd_tile_major: match var("EDGEBENCH_WINOGRAD_TILE_MAJOR").as_deref() {
                Some("0") => false,
                Some("1") => true,
                _ => default.winograd_tile_major,
            },
            sgemm: match var("EDGEBENCH_SGEMM").as_deref() {
                Some("avx2") => SgemmChoice::Avx2,
                Some("gemm-crate") => SgemmChoice::GemmCrate,
                _ => default.sgemm,
            },
        }
    }
}

/// The process's tuning, read from the environment on first use and fixed from then on.
pub fn tuning() -> &'static Tuning {
    static TUNING: OnceLock<Tuning> = OnceLock::new();
    TUNING.get_or_init(Tuning::from_env)
}

static TF32: AtomicBool = AtomicBool::new(false);

/// Lets f32 matrix products and convolutions on CUDA use TF32 tensor cores (10-bit mantissa
/// products, f32 sums), as PyTorch does by default for convolutions; off (strict fp32) unless
/// set. Covers cuBLAS (candle's matmul) and cuDNN (`cudnn` feature); no effect on the CPU.
pub fn set_tf32(on: bool) {
    TF32.store(on, Ordering::Relaxed);
    #[cfg(feature = "cuda")]
    candle_core::cuda::set_gemm_reduced_precision_f32(on);
}

/// Whether `set_tf32(true)` is in effect.
pub fn tf32() -> bool {
    TF32.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Tuning {
        Tuning::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn unset_variables_keep_the_defaults() {
        assert_eq!(with(&[]), Tuning::default());
        let d = Tuning::default();
        assert_eq!((d.conv_cols, d.winograd_tiles), (256, 196));
        assert!(d.winograd && d.winograd_tile.is_none());
        assert_eq!(d.winograd_chunk_kb, 1024);
        assert_eq!(d.winograd_tile_major, cfg!(not(target_arch = "aarch64")));
    }

    #[test]
    fn variables_set_their_knob() {
        let t = with(&[
            ("EDGEBENCH_CONV_COLS", "1"),
            ("EDGEBENCH_WINOGRAD", "0"),
            ("EDGEBENCH_WINOGRAD_TILE", "2"),
            ("EDGEBENCH_WINOGRAD_TILES", "128"),
            ("EDGEBENCH_WINOGRAD_CHUNK_KB", "512"),
            ("EDGEBENCH_WINOGRAD_TILE_MAJOR", "0"),
            ("EDGEBENCH_SGEMM", "gemm-crate"),
        ]);
        let want = Tuning {
            conv_cols: 1,
            winograd: false,
            winograd_tile: Some(2),
            winograd_tiles: 128,
            winograd_chunk_kb: 512,
            winograd_tile_major: false,
            sgemm: SgemmChoice::GemmCrate,
        };
        assert_eq!(t, want);
        assert_eq!(
            with(&[("EDGEBENCH_WINOGRAD_TILE", "4")]).winograd_tile,
            Some(4)
        );
        assert_eq!(
            with(&[("EDGEBENCH_SGEMM", "avx2")]).sgemm,
            SgemmChoice::Avx2
        );
        assert!(with(&[("EDGEBENCH_WINOGRAD", "1")]).winograd);
        assert!(with(&[("EDGEBENCH_WINOGRAD", "")]).winograd);
    }

    #[test]
    fn values_out_of_range_or_unparsable_are_ignored() {
        let t = with(&[
            ("EDGEBENCH_CONV_COLS", "many"),
            ("EDGEBENCH_WINOGRAD_TILE", "3"),
            ("EDGEBENCH_WINOGRAD_TILES", "0"),
            ("EDGEBENCH_WINOGRAD_CHUNK_KB", "-1"),
            ("EDGEBENCH_SGEMM", "avx512"),
        ]);
        assert_eq!(t, Tuning::default());
    }
}
