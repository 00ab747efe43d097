//! A row-major f32 GEMM for the operator benchmark's `dot` and its measured SGEMM roof:
//! BLIS-style blocking (B packed in KC x NC blocks shared by all threads, A packed per thread
//! in MC x KC blocks that stay in its core's L2) around a microkernel in inline assembly,
//! chosen at run time ([`Kernel::detect`]): 8 x 48 AVX-512F or 4 x 24 AVX2/FMA on x86_64,
//! 8 x 12 NEON (base ASIMD, which every ARMv8-A core has, Cortex-A57 included) on aarch64.
//! x86_64 CPUs without AVX2 and FMA, and other architectures, run the `gemm` crate. The same
//! blocked product from strided operands (`sgemm_strided`) runs the convolution and fully
//! connected kernels' products on aarch64, and [`crate::mm`]'s with NEON or AVX-512 (`matmul`).
//!
//! Why not the `gemm` crate everywhere: on an AMD Zen 3 (AVX2/FMA) its kernel left a fifth of
//! OpenBLAS's rate on the table; the figures are in docs/performance.md.

// Elsewhere only the `gemm` crate path is compiled; the blocking constants stay for the tests.
#![cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code, unused_imports)
)]

use crate::tuning::SgemmChoice;
use crate::util::Float;
use ::gemm::Parallelism;
use rayon::prelude::*;

/// A microkernel, MR x NR tiles of C, with the blocking chosen around it.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
trait Microkernel<const MR: usize, const NR: usize> {
    /// Depth of a packed block: a KC x NR panel of B stays in L1d while the microkernel walks
    /// down the A block.
    const KC: usize;
    /// Rows of a packed A block: MC x KC floats stay in a core's L2 with room for the B panels
    /// streaming through.
    const MC: usize;
    /// Columns of a packed B block: KC x NC floats are shared by all threads from the last
    /// level.
    const NC: usize;
    /// Most floats of B packed at once: when B is narrow, several depth blocks are packed as one
    /// group, and a thread's rows of C stay in its cache from one block to the next.
    const PACKED_B_FLOATS: usize;

    /// Whether this CPU has the kernel's instructions.
    fn available() -> bool;

    /// `dst[p * MR + i] = rows[i][p]`: MR whole rows of A (each kc contiguous floats) packed
    /// column by column.
    ///
    /// # Safety
    /// [`Self::available`].
    unsafe fn transpose_rows(rows: [&[f32]; MR], dst: &mut [f32]);

    /// C[0..MR][0..NR] (row stride `ldc`) = (or +=, unless `overwrite`) the product of a packed
    /// A panel (kc x MR, column by column) and a packed B panel (kc x NR, row by row).
    ///
    /// # Safety
    /// [`Self::available`]; kc >= 1; `a` holds MR kc floats, `b` NR kc floats; the MR x NR
    /// tile of `c` is valid for reads and writes.
    unsafe fn kernel(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        overwrite: bool,
    );

    /// The tile of an edge panel whose first `cols` (< NR) columns are wanted, overwritten into
    /// an MR x NR scratch tile (row stride NR): by default the whole tile, its other columns
    /// computed from the zero padding.
    ///
    /// # Safety
    /// As for [`Self::kernel`], with `tile` valid for MR x NR floats.
    unsafe fn edge_kernel(kc: usize, a: *const f32, b: *const f32, tile: *mut f32, cols: usize) {
        let _ = cols;
        // SAFETY: as the caller promises.
        unsafe { Self::kernel(kc, a, b, tile, NR, true) }
    }
}

/// 4 x 24 AVX2/FMA: three 8-lane vectors of B. 4 x 24 needs 4 broadcasts of A per 12 FMAs where
/// 6 x 16 needs 6; on Zen 3 the microkernel alone ran at ~89 GFLOP/s per core in L1 against ~70
/// for 6 x 16.
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Microkernel<4, 24> for Avx2 {
    /// A KC x NR panel of B (18 KiB) stays in a 32 KiB L1d (at KC = 256, 24 KiB, the kernel
    /// lost a quarter).
    const KC: usize = 192;
    /// MC x KC floats (108 KiB) stay in a 512 KiB L2.
    const MC: usize = 144;
    /// KC x NC floats (3 MiB) are shared by all threads from L3.
    const NC: usize = 4096;
    /// 2 MiB: two threads at n = 661, 117 -> 128 GFLOP/s with grouping. An 8 MiB limit is 4-6 %
    /// slower at n = 2048, where the blocks packed first are likelier to have left the cache
    /// before they are used.
    const PACKED_B_FLOATS: usize = 1 << 19;

    fn available() -> bool {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }

    unsafe fn transpose_rows(rows: [&[f32]; 4], dst: &mut [f32]) {
        // SAFETY: the caller's promise: AVX2 is present.
        unsafe { transpose_4_rows(rows, dst) }
    }

    unsafe fn kernel(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        overwrite: bool,
    ) {
        // SAFETY: as the caller promises.
        unsafe { avx2_kernel(kc, a, b, c, ldc, overwrite) }
    }
}

/// 8 x 48 AVX-512F: three 16-lane vectors of B and 24 of the 32 vector registers as
/// accumulators; 24 FMAs per 3 loads of B and 8 broadcasts of A (4 x 96 would need a B panel
/// twice as wide, which no L1d holds at a useful depth).
#[cfg(target_arch = "x86_64")]
struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Microkernel<8, 48> for Avx512 {
    /// A KC x NR panel of B (36 KiB) and a KC x MR panel of A (6 KiB) fit in the 48 KiB L1d of
    /// Ice Lake and Sapphire Rapids (Skylake-SP and Zen 4 have 32 KiB, and the panel streams
    /// from L2).
    const KC: usize = 192;
    /// MC x KC floats (180 KiB) take a sixth of a 1 MiB L2 (Skylake-SP and Zen 4; 2 MiB on
    /// Sapphire Rapids).
    const MC: usize = 240;
    /// KC x NC floats (3 MiB, 85 whole panels) are shared by all threads from L3.
    const NC: usize = 4080;
    /// 2 MiB, as for AVX2.
    const PACKED_B_FLOATS: usize = 1 << 19;

    fn available() -> bool {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
    }

    unsafe fn transpose_rows(rows: [&[f32]; 8], dst: &mut [f32]) {
        // SAFETY: the caller's promise: AVX-512F is present, and with it AVX2.
        unsafe { transpose_8x8_rows(rows, dst) }
    }

    unsafe fn kernel(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        overwrite: bool,
    ) {
        // SAFETY: as the caller promises.
        unsafe { avx512_kernel(kc, a, b, c, ldc, overwrite) }
    }

    /// A last panel of up to 16 or 32 wanted columns computes one or two vectors per row, not
    /// three: a skinny product (the MLP's hidden layer of 100) wastes at most 15 columns.
    unsafe fn edge_kernel(kc: usize, a: *const f32, b: *const f32, tile: *mut f32, cols: usize) {
        // SAFETY: as the caller promises.
        unsafe {
            match cols.div_ceil(16) {
                1 => avx512_edge_kernel::<1>(kc, a, b, tile),
                2 => avx512_edge_kernel::<2>(kc, a, b, tile),
                _ => avx512_kernel(kc, a, b, tile, 48, true),
            }
        }
    }
}

// aarch64, for the Jetson boards' cores: Cortex-A57 (32 KiB L1d, 2 MiB L2 shared by four
// cores), Carmel (64 KiB L1d, 2 MiB L2 per pair of cores, 4 MiB L3) and Cortex-A78AE (64 KiB
// L1d, 256 KiB L2 per core, 2 MiB L3 per cluster of four). Chosen from those sizes; no ARM
// machine has timed them.

/// BLIS's Cortex-A57 shape, 8 x 12: three 4-lane vectors of B. Its 24 accumulators take
/// v8..v31, and one step's 8 values of A and 12 of B take five of the remaining eight
/// registers: 24 FMAs per 5 vector loads.
#[cfg(target_arch = "aarch64")]
struct Neon;

#[cfg(target_arch = "aarch64")]
impl Microkernel<8, 12> for Neon {
    /// A KC x NR panel of B (12 KiB) and a KC x MR panel of A (8 KiB) together take under two
    /// thirds of the A57's 32 KiB L1d (under a third of 64 KiB).
    const KC: usize = 256;
    /// MC x KC floats (128 KiB) take half of an A78AE core's 256 KiB L2 and a quarter of an A57
    /// core's share of its 2 MiB, with room for the B panels streaming through.
    const MC: usize = 128;
    /// KC x NC floats (1020 KiB, 85 whole panels), shared by all threads from the A57's L2 or
    /// the A78AE's L3, next to four cores' A blocks (512 KiB).
    const NC: usize = 1020;
    /// 1 MiB: one full block, or several depth blocks of a narrow B as one group, within the
    /// same share of L2 or L3.
    const PACKED_B_FLOATS: usize = 1 << 18;

    fn available() -> bool {
        std::arch::is_aarch64_feature_detected!("neon")
    }

    unsafe fn transpose_rows(rows: [&[f32]; 8], dst: &mut [f32]) {
        transpose_rows_neon(&rows, dst)
    }

    unsafe fn kernel(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        overwrite: bool,
    ) {
        // SAFETY: as the caller promises.
        unsafe { neon_kernel(kc, a, b, c, ldc, overwrite) }
    }

    /// A last panel of up to 4 or 8 wanted columns computes one or two vectors per row, not
    /// three: GoogLeNet's 7x7 and 14x14 maps (49 and 196 columns) leave 1 and 4.
    unsafe fn edge_kernel(kc: usize, a: *const f32, b: *const f32, tile: *mut f32, cols: usize) {
        // SAFETY: as the caller promises.
        unsafe {
            match cols.div_ceil(4) {
                1 => neon_edge_kernel::<1>(kc, a, b, tile),
                2 => neon_edge_kernel::<2>(kc, a, b, tile),
                _ => neon_kernel(kc, a, b, tile, 12, true),
            }
        }
    }
}

/// The microkernel [`sgemm`] runs on this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// 8 x 48, AVX-512F (x86_64).
    Avx512,
    /// 4 x 24, AVX2 and FMA (x86_64).
    Avx2,
    /// 8 x 12, NEON (aarch64).
    Neon,
    /// The `gemm` crate's own (other CPUs).
    GemmCrate,
}

impl Kernel {
    /// The widest of edgebench's microkernels that this CPU runs.
    pub fn widest() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if Avx512::available() {
                return Kernel::Avx512;
            }
            if Avx2::available() {
                return Kernel::Avx2;
            }
        }
        #[cfg(target_arch = "aarch64")]
        if Neon::available() {
            return Kernel::Neon;
        }
        Kernel::GemmCrate
    }

    /// The kernel the products run: [`Kernel::widest`], unless `EDGEBENCH_SGEMM` asks for a
    /// narrower one ([`crate::Tuning::sgemm`]).
    pub fn detect() -> Kernel {
        match (crate::tuning().sgemm, Kernel::widest()) {
            (SgemmChoice::GemmCrate, _) => Kernel::GemmCrate,
            (SgemmChoice::Avx2, Kernel::Avx512) => Kernel::Avx2,
            (_, widest) => widest,
        }
    }

    /// Its name in results: `avx512`, `avx2`, `neon` or `gemm-crate`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512 => "avx512",
            Kernel::Avx2 => "avx2",
            Kernel::Neon => "neon",
            Kernel::GemmCrate => "gemm-crate",
        }
    }

    /// Rows and columns of its tile of C, and the columns an edge tile computes in steps of.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn tile(self) -> (usize, usize, usize) {
        match self {
            Kernel::Avx512 => (8, 48, 16),
            Kernel::Avx2 => (4, 24, 24),
            Kernel::Neon => (8, 12, 4),
            Kernel::GemmCrate => (1, 1, 1),
        }
    }
}

/// C (m x n) = A (m x k) · B (k x n), all row-major and contiguous, on the current rayon
/// pool's threads.
pub fn sgemm(a: &[f32], b: &[f32], c: &mut [f32], (m, n, k): (usize, usize, usize)) {
    assert!(
        a.len() == m * k && b.len() == k * n && c.len() == m * n,
        "sgemm shapes"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c.fill(0.0);
        return;
    }
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    if native_kernel() {
        let a = Operand {
            data: a,
            rs: k,
            cs: 1,
        };
        let b = Operand {
            data: b,
            rs: n,
            cs: 1,
        };
        let threads = rayon::current_num_threads().max(1);
        // SAFETY: the kernel is this CPU's; c holds m x n floats, row stride n (asserted
        // above), borrowed mutably.
        unsafe {
            blocked_with(
                Kernel::detect(),
                a,
                b,
                (c.as_mut_ptr(), n),
                (m, n, k),
                false,
                threads,
            )
        };
        return;
    }
    gemm_crate(a, b, c, (m, n, k));
}

/// The `gemm` crate on all rayon threads: the portable path (other CPUs, and f64 for the
/// operator benchmark's `dot`), and the reference in tests.
pub(crate) fn gemm_crate<T: Float>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    (m, n, k): (usize, usize, usize),
) {
    assert!(
        a.len() == m * k && b.len() == k * n && c.len() == m * n,
        "matmul shapes"
    );
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    // SAFETY: the asserts above make every index gemm reads or writes fall inside a, b, c
    // (row-major, row strides k, n, n; column stride 1); c is borrowed mutably, so it overlaps
    // neither a nor b. alpha is unused (read_dst false), beta = 1 scales the product.
    unsafe {
        ::gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Whether [`sgemm`] runs one of edgebench's own microkernels on this CPU (x86_64 with AVX2
/// and FMA, or aarch64 with NEON), else the `gemm` crate.
pub fn native_kernel() -> bool {
    Kernel::detect() != Kernel::GemmCrate
}

/// Whether the convolution and linear kernels' f32 products (`matmul::gemm_raw`) run `kernel`
/// rather than the `gemm` crate: NEON (the gemm crate's aarch64 kernel took more instructions
/// per training step). On x86_64 the gemm crate's AVX2 and AVX-512 kernels keep them: the
/// convolutions' products are many, small and single-threaded, and AlexNet and GoogLeNet trained
/// no faster on AVX-512 with edgebench's kernel (2-core Emerald Rapids VM).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) fn trains_with(kernel: Kernel) -> bool {
    matches!(kernel, Kernel::Neon)
}

/// Whether [`crate::mm`]'s products (large, on all threads: the MLP study's) run `kernel`
/// rather than the `gemm` crate: NEON and AVX-512, where it was faster per MLP iteration.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) fn multiplies_with(kernel: Kernel) -> bool {
    matches!(kernel, Kernel::Neon | Kernel::Avx512)
}

/// Whether an m x n product keeps at least 80 % of the microkernel's work useful: edge tiles
/// are computed whole (a matrix-vector product, m = 1, would run 8 rows for the one it needs).
/// Skinnier products are left to the `gemm` crate, which has kernels for them.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) fn tiles_fit(m: usize, n: usize) -> bool {
    let (mr, nr, edge) = Kernel::detect().tile();
    let padded = m.div_ceil(mr) * mr * (n / nr * nr + (n % nr).div_ceil(edge) * edge);
    padded * 4 <= m * n * 5
}

/// [`blocked`] with `kernel`'s microkernel and blocking.
///
/// # Safety
/// As for [`blocked`]; `kernel` is one of edgebench's own, and this CPU has its instructions.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe fn blocked_with(
    kernel: Kernel,
    a: Operand,
    b: Operand,
    c: (*mut f32, usize),
    dims: (usize, usize, usize),
    accumulate: bool,
    threads: usize,
) {
    // SAFETY: as the caller promises.
    unsafe {
        match kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => blocked::<Avx512, 8, 48>(a, b, c, dims, accumulate, threads),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => blocked::<Avx2, 4, 24>(a, b, c, dims, accumulate, threads),
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => blocked::<Neon, 8, 12>(a, b, c, dims, accumulate, threads),
            _ => unreachable!("no microkernel of edgebench's own: {kernel:?}"),
        }
    }
}

/// A buffer of at least `len` floats starting on a 64-byte boundary (whole cache lines for
/// the microkernel's vector loads), reused between calls on the same thread.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
struct Aligned(Vec<f32>);

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl Aligned {
    fn slice(&mut self, len: usize) -> &mut [f32] {
        if self.0.len() < len + 16 {
            self.0 = vec![0.0; len + 16];
        }
        let offset = self.0.as_ptr().align_offset(64).min(15);
        &mut self.0[offset..offset + len]
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
thread_local! {
    static PACK_A: std::cell::RefCell<Aligned> = const { std::cell::RefCell::new(Aligned(Vec::new())) };
    static PACK_B: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// An operand of the blocked product: its floats and its (row, column) strides in floats.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[derive(Clone, Copy)]
struct Operand<'a> {
    data: &'a [f32],
    rs: usize,
    cs: usize,
}

/// dst (m x n, row stride `dst_rs`, column stride 1) = [dst +] lhs (m x k) · rhs (k x n),
/// with (row, column) strides for both operands, on `threads` threads of the current rayon
/// pool; with one thread the product runs on the calling thread only, without entering the
/// pool (the convolution and linear kernels call it from inside their own rayon tasks). The
/// operands are read through checked slice indexing: strides past their ends panic
/// (`matmul::gemm_raw` asserts them first).
///
/// # Safety
/// [`native_kernel`] is true; every element (r, c) < (m, n) of dst at r * dst_rs + c is in one
/// allocation, writable and aliased by neither operand, and initialised when `accumulate`;
/// m, n and k are not zero.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) unsafe fn sgemm_strided(
    (m, n, k): (usize, usize, usize),
    (dst, dst_rs): (*mut f32, usize),
    accumulate: bool,
    (lhs, (lhs_rs, lhs_cs)): (&[f32], (usize, usize)),
    (rhs, (rhs_rs, rhs_cs)): (&[f32], (usize, usize)),
    threads: usize,
) {
    let a = Operand {
        data: lhs,
        rs: lhs_rs,
        cs: lhs_cs,
    };
    let b = Operand {
        data: rhs,
        rs: rhs_rs,
        cs: rhs_cs,
    };
    // SAFETY: as the caller promises.
    unsafe {
        blocked_with(
            Kernel::detect(),
            a,
            b,
            (dst, dst_rs),
            (m, n, k),
            accumulate,
            threads.max(1),
        )
    }
}

/// Packs rows `pc..pc + kc` of B (row stride `n`), from column `jc` on, into the panels of NR
/// columns that `dst` holds (`dst.len() / (kc * NR)` of them, the first one starting at column
/// `jc + first_panel * NR`), each kc x NR row by row; columns at and past `jc + nc` are zeros.
/// The panels are filled row after row: B's rows are read in contiguous stretches of up to
/// 768 bytes (a run of eight panels). Packing one panel at a time reads 96 bytes per row and
/// comes back for the rest of each cache line after it has left (by panel, with a memcpy call
/// per row, packing took 10 % of a one-thread product at n = 661). A B whose columns are not
/// contiguous is read column by column, each column's floats in order of depth (B stored
/// transposed: contiguous columns).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn pack_b<const NR: usize>(
    b: Operand,
    (pc, kc): (usize, usize),
    (jc, nc): (usize, usize),
    first_panel: usize,
    dst: &mut [f32],
) {
    let panel_len = kc * NR;
    let j_run = jc + first_panel * NR;
    if b.cs != 1 {
        for (g, panel) in dst.chunks_exact_mut(panel_len).enumerate() {
            #[cfg(target_arch = "aarch64")]
            if b.rs == 1 && NR.is_multiple_of(4) && j_run + (g + 1) * NR <= jc + nc {
                let cols: [&[f32]; NR] =
                    std::array::from_fn(|j| &b.data[(j_run + g * NR + j) * b.cs + pc..][..kc]);
                transpose_rows_neon(&cols, panel);
                continue;
            }
            for j in 0..NR {
                let col = j_run + g * NR + j;
                for p in 0..kc {
                    panel[p * NR + j] = if col < jc + nc {
                        b.data[(pc + p) * b.rs + col * b.cs]
                    } else {
                        0.0
                    };
                }
            }
        }
        return;
    }
    // The last panel of the run may be partial: zeroed whole, then its columns copied one by
    // one down the depth (copying each row's few floats would take a memcpy and a memset call).
    let full = (jc + nc).saturating_sub(j_run) / NR;
    let (whole, partial) = dst.split_at_mut((full * panel_len).min(dst.len()));
    for p in 0..kc {
        let src_row = &b.data[(pc + p) * b.rs..][..jc + nc];
        for (g, panel) in whole.chunks_exact_mut(panel_len).enumerate() {
            let j0 = j_run + g * NR;
            // Fixed-size copies: inlined vector moves, not a memcpy call per row.
            <&mut [f32; NR]>::try_from(&mut panel[p * NR..][..NR])
                .expect("NR floats")
                .copy_from_slice(&src_row[j0..j0 + NR]);
        }
    }
    for (g, panel) in partial.chunks_exact_mut(panel_len).enumerate() {
        panel.fill(0.0);
        let j0 = j_run + (full + g) * NR;
        for j in j0..(jc + nc).max(j0) {
            for p in 0..kc {
                panel[p * NR + j - j0] = b.data[(pc + p) * b.rs + j];
            }
        }
    }
}

/// Packs the `rows` x kc block of A starting at row 0 of `a` (from column `pc`) into panels of
/// MR rows, each kc x MR column by column, the last one padded with zeros.
///
/// # Safety
/// `K::available()`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe fn pack_a<K: Microkernel<MR, NR>, const MR: usize, const NR: usize>(
    a: Operand,
    rows: usize,
    (pc, kc): (usize, usize),
    dst: &mut [f32],
) {
    for (panel, dst) in dst.chunks_exact_mut(kc * MR).enumerate() {
        let i0 = panel * MR;
        let valid = MR.min(rows - i0);
        if valid == MR && a.cs == 1 {
            let src: [&[f32]; MR] = std::array::from_fn(|i| &a.data[(i0 + i) * a.rs + pc..][..kc]);
            // SAFETY: the caller's promise.
            unsafe { K::transpose_rows(src, dst) };
            continue;
        }
        if valid == MR && a.rs == 1 {
            // A stored transposed: each column of the panel is MR contiguous floats.
            for (p, column) in dst.chunks_exact_mut(MR).enumerate() {
                column.copy_from_slice(&a.data[i0 + (pc + p) * a.cs..][..MR]);
            }
            continue;
        }
        for i in 0..MR {
            if i < valid {
                for p in 0..kc {
                    dst[p * MR + i] = a.data[(i0 + i) * a.rs + (pc + p) * a.cs];
                }
            } else {
                for p in 0..kc {
                    dst[p * MR + i] = 0.0;
                }
            }
        }
    }
}

/// `dst[p * 4 + i] = rows[i][p]`, eight columns at a time by a 4 x 8 register transpose and
/// four full-vector stores rather than four strided scalar stores per column.
///
/// # Safety
/// AVX2 present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_4_rows(rows: [&[f32]; 4], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let kc = rows[0].len();
    assert!(rows.iter().all(|row| row.len() == kc) && dst.len() == kc * 4);
    let body = kc - kc % 8;
    for p in (0..body).step_by(8) {
        // SAFETY: p + 8 <= kc floats in every row, and dst holds kc x 4 floats.
        unsafe {
            let r0 = _mm256_loadu_ps(rows[0].as_ptr().add(p));
            let r1 = _mm256_loadu_ps(rows[1].as_ptr().add(p));
            let r2 = _mm256_loadu_ps(rows[2].as_ptr().add(p));
            let r3 = _mm256_loadu_ps(rows[3].as_ptr().add(p));
            let t0 = _mm256_unpacklo_ps(r0, r1);
            let t1 = _mm256_unpackhi_ps(r0, r1);
            let t2 = _mm256_unpacklo_ps(r2, r3);
            let t3 = _mm256_unpackhi_ps(r2, r3);
            // Columns 0 | 4, 1 | 5, 2 | 6 and 3 | 7 of the four rows (one per 128-bit lane).
            let c04 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let c15 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let c26 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let c37 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let out = dst.as_mut_ptr().add(p * 4);
            _mm256_storeu_ps(out, _mm256_permute2f128_ps::<0x20>(c04, c15));
            _mm256_storeu_ps(out.add(8), _mm256_permute2f128_ps::<0x20>(c26, c37));
            _mm256_storeu_ps(out.add(16), _mm256_permute2f128_ps::<0x31>(c04, c15));
            _mm256_storeu_ps(out.add(24), _mm256_permute2f128_ps::<0x31>(c26, c37));
        }
    }
    for p in body..kc {
        for (i, row) in rows.iter().enumerate() {
            dst[p * 4 + i] = row[p];
        }
    }
}

/// `dst[p * 8 + i] = rows[i][p]`, eight columns at a time by an 8 x 8 register transpose and
/// eight full-vector stores.
///
/// # Safety
/// AVX2 present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_8x8_rows(rows: [&[f32]; 8], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let kc = rows[0].len();
    assert!(rows.iter().all(|row| row.len() == kc) && dst.len() == kc * 8);
    let body = kc - kc % 8;
    for p in (0..body).step_by(8) {
        // SAFETY: p + 8 <= kc floats in every row, and dst holds kc x 8 floats.
        unsafe {
            let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(rows[i].as_ptr().add(p)));
            let t0 = _mm256_unpacklo_ps(r[0], r[1]);
            let t1 = _mm256_unpackhi_ps(r[0], r[1]);
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            // Columns j | j + 4 of rows 0-3 (s0..s3) and of rows 4-7 (s4..s7).
            let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let out = dst.as_mut_ptr().add(p * 8);
            _mm256_storeu_ps(out, _mm256_permute2f128_ps::<0x20>(s0, s4));
            _mm256_storeu_ps(out.add(8), _mm256_permute2f128_ps::<0x20>(s1, s5));
            _mm256_storeu_ps(out.add(16), _mm256_permute2f128_ps::<0x20>(s2, s6));
            _mm256_storeu_ps(out.add(24), _mm256_permute2f128_ps::<0x20>(s3, s7));
            _mm256_storeu_ps(out.add(32), _mm256_permute2f128_ps::<0x31>(s0, s4));
            _mm256_storeu_ps(out.add(40), _mm256_permute2f128_ps::<0x31>(s1, s5));
            _mm256_storeu_ps(out.add(48), _mm256_permute2f128_ps::<0x31>(s2, s6));
            _mm256_storeu_ps(out.add(56), _mm256_permute2f128_ps::<0x31>(s3, s7));
        }
    }
    for p in body..kc {
        for (i, row) in rows.iter().enumerate() {
            dst[p * 8 + i] = row[p];
        }
    }
}

/// `dst[p * R + i] = rows[i][p]`, four depths and four rows at a time by 4 x 4 register
/// transposes and full-vector stores, rather than R strided scalar stores per depth: an A panel
/// (R = 8) from its rows, or a B panel (R = 12) from the columns of a B stored transposed.
#[cfg(target_arch = "aarch64")]
fn transpose_rows_neon<const R: usize>(rows: &[&[f32]; R], dst: &mut [f32]) {
    use std::arch::aarch64::*;
    let kc = dst.len() / R;
    assert!(R.is_multiple_of(4) && rows.iter().all(|row| row.len() == kc));
    let body = kc - kc % 4;
    for p in (0..body).step_by(4) {
        for i in (0..R).step_by(4) {
            // SAFETY: p + 4 <= kc floats in every row, and dst holds kc x R floats; NEON is
            // part of the aarch64 baseline.
            unsafe {
                let r0 = vld1q_f32(rows[i].as_ptr().add(p));
                let r1 = vld1q_f32(rows[i + 1].as_ptr().add(p));
                let r2 = vld1q_f32(rows[i + 2].as_ptr().add(p));
                let r3 = vld1q_f32(rows[i + 3].as_ptr().add(p));
                // Pairs of rows interleaved: (r0[0], r1[0], r0[2], r1[2]) and so on, then the
                // 64-bit halves of two pairs make one column of the four rows.
                let t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1));
                let t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1));
                let t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3));
                let t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
                let out = dst.as_mut_ptr().add(p * R + i);
                vst1q_f32(out, vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)));
                vst1q_f32(out.add(R), vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)));
                vst1q_f32(out.add(2 * R), vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)));
                vst1q_f32(out.add(3 * R), vreinterpretq_f32_f64(vtrn2q_f64(t1, t3)));
            }
        }
    }
    for p in body..kc {
        for (i, row) in rows.iter().enumerate() {
            dst[p * R + i] = row[p];
        }
    }
}

/// Run `index` of `units` units cut into `parts` runs whose sizes differ by at most one unit:
/// equal shares let the threads finish together (cut into runs of 136 rows, 2383 rows give two
/// threads 9 and 8.5 runs' work in every depth block; even runs are 0-7 % faster on two threads
/// at n = 661 to 2383).
fn even_run(units: usize, parts: usize, index: usize) -> std::ops::Range<usize> {
    index * units / parts..(index + 1) * units / parts
}

/// Floats of one packed depth block (KC rows) of `nc` columns of B, in whole panels.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn depth_block_len(nc: usize, (nr, kc): (usize, usize)) -> usize {
    nc.div_ceil(nr) * nr * kc
}

/// One group of depth blocks of B packed together: columns `jc..jc + nc`, depths `pg..pg + kg`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
struct Group {
    jc: usize,
    nc: usize,
    pg: usize,
    kg: usize,
    /// The microkernel's NR and the blocking's KC.
    nr: usize,
    kc: usize,
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl Group {
    fn panels(&self) -> usize {
        self.nc.div_ceil(self.nr)
    }

    fn blocks(&self) -> usize {
        self.kg.div_ceil(self.kc)
    }

    /// Floats of one full depth block (KC rows) of the packed group.
    fn block_len(&self) -> usize {
        depth_block_len(self.nc, (self.nr, self.kc))
    }

    /// Runs of up to eight panels per depth block: the packing's work items.
    fn runs_per_block(&self) -> usize {
        self.panels().div_ceil(8)
    }

    /// Floats of the packed group: its full depth blocks of KC rows and the last, shorter one.
    fn packed_len(&self) -> usize {
        self.panels() * self.nr * self.kg
    }
}

/// Claims the next of `items` work items for this thread, or None when all are taken.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn claim(next: &std::sync::atomic::AtomicUsize, items: usize) -> Option<usize> {
    let item = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (item < items).then_some(item)
}

/// Waits until `done` reaches `items`. Every unfinished item has been claimed by a thread that
/// is running it, so the wait ends without this thread's help.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn wait_for(done: &std::sync::atomic::AtomicUsize, items: usize) {
    let mut spins = 0u32;
    while done.load(std::sync::atomic::Ordering::Acquire) < items {
        spins += 1;
        if spins < 1 << 16 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Progress counters of one group, shared by the threads of a product.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[derive(Default)]
struct Progress {
    next_run: std::sync::atomic::AtomicUsize,
    packed: std::sync::atomic::AtomicUsize,
    next_task: std::sync::atomic::AtomicUsize,
    computed: std::sync::atomic::AtomicUsize,
}

/// The blocked product: for each group of KC x NC blocks of B (as many as fit in
/// [`PACKED_B_FLOATS`]), packed once and shared, the threads take runs of C's rows and, block
/// after block, pack those rows of A and run the microkernel over them.
///
/// The whole product is one parallel region: the threads claim the packing runs and then the
/// row runs of every group from shared counters, and wait for each other only between the
/// packing and the products of a group, and before adding to rows of C that the previous
/// group's products are still writing (B has two buffers, used by turns). With a fork-join
/// per step, two per group, the pool's threads fall asleep and are woken dozens of times per
/// product, and a woken vCPU can be slow to come back: after a 250 ms pause two threads ran
/// n = 661 at 67 GFLOP/s that way against 119 in one region (2-core EPYC VM). Claiming
/// instead of a fixed share also evens out threads that run at different speeds. Every wait is
/// for runs that a running thread has claimed, so a product finishes even if only one thread of
/// the pool takes part.
///
/// C has row stride `ldc` and column stride 1; `accumulate` adds the product into it. Runs on
/// `threads` threads of the current pool (one: the calling thread only).
///
/// # Safety
/// [`native_kernel`] is true; the m x n floats of C at r * ldc + c are in one allocation,
/// writable and aliased by neither operand, and initialised when `accumulate`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe fn blocked<K: Microkernel<MR, NR>, const MR: usize, const NR: usize>(
    a: Operand,
    b: Operand,
    (c, ldc): (*mut f32, usize),
    (m, n, k): (usize, usize, usize),
    accumulate: bool,
    threads: usize,
) {
    // An equal number of row runs per thread, each at most about K::MC rows, in whole
    // microkernel rows.
    let row_panels = m.div_ceil(MR);
    let tasks = (threads * m.div_ceil(threads * K::MC)).min(row_panels);
    let mut groups = Vec::new();
    for jc in (0..n).step_by(K::NC) {
        let nc = K::NC.min(n - jc);
        let block_len = depth_block_len(nc, (NR, K::KC));
        // Depth blocks packed together, up to K::PACKED_B_FLOATS: each thread's rows of C stay in
        // its cache from one depth block to the next.
        let depth = (K::PACKED_B_FLOATS / block_len).max(1) * K::KC;
        for pg in (0..k).step_by(depth) {
            let kg = depth.min(k - pg);
            groups.push(Group {
                jc,
                nc,
                pg,
                kg,
                nr: NR,
                kc: K::KC,
            });
        }
    }
    let progress_by_group: Vec<Progress> = groups.iter().map(|_| Progress::default()).collect();
    // Taken out of the thread-local while the pool runs: a worker that waits here may steal a
    // task that calls sgemm itself, which then packs into a buffer of its own.
    let mut pack_b_buf = Aligned(PACK_B.take());
    let packed_len = groups.iter().map(Group::packed_len).max().unwrap_or(0);
    let packed_b = crate::util::SharedPtr(pack_b_buf.slice(2 * packed_len).as_mut_ptr());
    let c_shared = crate::util::SharedPtr(c);
    let take_part = || {
        for (g, (group, progress)) in groups.iter().zip(&progress_by_group).enumerate() {
            // Two buffers, by turns: a thread done with its rows of one group goes on to pack
            // the next while the others finish theirs. The buffer packed here was last read
            // by group g - 2, all of whose row runs this thread has seen finished (below).
            let buffer = (g % 2) * packed_len;
            let (runs, panels, block_len) =
                (group.runs_per_block(), group.panels(), group.block_len());
            let items = group.blocks() * runs;
            while let Some(item) = claim(&progress.next_run, items) {
                let (blk, run) = (item / runs, item % runs);
                let pc = group.pg + blk * K::KC;
                let kc = K::KC.min(group.pg + group.kg - pc);
                let run_panels = even_run(panels, runs, run);
                // SAFETY: this run's panels of this block, inside this group's buffer
                // (packed_len floats from `buffer`) and written by this thread only.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(
                        packed_b.at(buffer + blk * block_len + run_panels.start * kc * NR),
                        run_panels.len() * kc * NR,
                    )
                };
                pack_b::<NR>(b, (pc, kc), (group.jc, group.nc), run_panels.start, dst);
                progress
                    .packed
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
            }
            wait_for(&progress.packed, items);
            // The previous group's products must be over before this group's add to the same
            // rows of C (and before the group after this one packs over its buffer).
            if let Some(previous) = g.checked_sub(1) {
                wait_for(&progress_by_group[previous].computed, tasks);
            }
            // SAFETY: every run of the group is packed and released; nothing writes this
            // buffer until every thread has seen all of this group's row runs finished.
            let packed_group =
                unsafe { std::slice::from_raw_parts(packed_b.at(buffer), group.packed_len()) };
            while let Some(task) = claim(&progress.next_task, tasks) {
                let panels = even_run(row_panels, tasks, task);
                let first_row = panels.start * MR;
                let rows = (panels.end * MR).min(m) - first_row;
                // SAFETY: the first of this task's rows of C, disjoint from every other
                // task's; the previous group's writes to them were released and seen finished
                // above.
                let c = unsafe { c_shared.at(first_row * ldc) };
                let a = Operand {
                    data: &a.data[first_row * a.rs..],
                    ..a
                };
                PACK_A.with_borrow_mut(|pack_a_buf| {
                    for (blk, packed_b) in packed_group.chunks(block_len).enumerate() {
                        let pc = group.pg + blk * K::KC;
                        let kc = K::KC.min(k - pc);
                        let packed_a = pack_a_buf.slice(rows.div_ceil(MR) * MR * kc);
                        // SAFETY: K::available(), the caller's promise.
                        unsafe { pack_a::<K, MR, NR>(a, rows, (pc, kc), packed_a) };
                        let overwrite = pc == 0 && !accumulate;
                        // SAFETY: native_kernel() holds (the caller's promise); the panels
                        // hold kc x MR and kc x NR floats, and the tile writes stay inside
                        // this task's rows 0..rows and columns jc..jc + nc of C.
                        unsafe {
                            macro_kernel::<K, MR, NR>(
                                kc,
                                (packed_a, packed_b),
                                (c, rows, ldc),
                                (group.jc, group.nc),
                                overwrite,
                            )
                        }
                    }
                });
                progress
                    .computed
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
            }
        }
        if let Some(last) = progress_by_group.last() {
            wait_for(&last.computed, tasks);
        }
    };
    if threads == 1 {
        take_part();
    } else {
        (0..threads).into_par_iter().for_each(|_| take_part());
    }
    PACK_B.set(pack_b_buf.0);
}

/// Every MR x NR tile of a thread's rows of C against one packed B block: B panel outer (it
/// stays in L1 while the A panels stream from L2), A panel inner.
///
/// # Safety
/// The microkernel's instructions are present; `c` is valid for reads and writes of `rows`
/// rows (row stride `ldc`) of columns `jc..jc + nc`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe fn macro_kernel<K: Microkernel<MR, NR>, const MR: usize, const NR: usize>(
    kc: usize,
    (packed_a, packed_b): (&[f32], &[f32]),
    (c, rows, ldc): (*mut f32, usize, usize),
    (jc, nc): (usize, usize),
    overwrite: bool,
) {
    let a_panels = packed_a.len() / (kc * MR);
    let b_panels = packed_b.chunks_exact(kc * NR);
    let b_panel_lines = kc * NR / 16;
    // The next B panel is fetched into L2 a few lines per tile while this one is in use, so
    // that its first tiles do not wait on L3 (4 % of a one-thread product at n = 2048). Into
    // L2, not L1: both panels together would not fit in L1 (1-2 % better than into L1).
    let lines_per_tile = b_panel_lines.div_ceil(a_panels);
    for (jp, b_panel) in b_panels.enumerate() {
        let j0 = jc + jp * NR;
        let cols = NR.min(jc + nc - j0);
        let next_b = &packed_b[((jp + 1) * kc * NR).min(packed_b.len())..];
        let next_lines = b_panel_lines.min(next_b.len() / 16);
        for (ip, a_panel) in packed_a.chunks_exact(kc * MR).enumerate() {
            let i0 = ip * MR;
            for line in ip * lines_per_tile..((ip + 1) * lines_per_tile).min(next_lines) {
                prefetch_l2(next_b.as_ptr().wrapping_add(line * 16));
            }
            let valid_rows = MR.min(rows - i0);
            if valid_rows == MR && cols == NR {
                // SAFETY: rows i0..i0 + MR and columns j0..j0 + NR lie inside c.
                unsafe {
                    K::kernel(
                        kc,
                        a_panel.as_ptr(),
                        b_panel.as_ptr(),
                        c.add(i0 * ldc + j0),
                        ldc,
                        overwrite,
                    )
                }
            } else {
                // An edge tile: the full tile into a scratch tile, then its valid part.
                let mut tile = [[0f32; NR]; MR];
                // SAFETY: the scratch tile is MR x NR with row stride NR.
                unsafe {
                    K::edge_kernel(
                        kc,
                        a_panel.as_ptr(),
                        b_panel.as_ptr(),
                        tile.as_mut_ptr().cast::<f32>(),
                        cols,
                    )
                };
                for (i, row) in tile.iter().enumerate().take(valid_rows) {
                    let src = &row[..cols];
                    // SAFETY: row i0 + i, columns j0..j0 + cols, lie inside c; a destination
                    // that is overwritten may be uninitialised, so it is written through the
                    // pointer, and one that is added to is initialised (the caller's promise).
                    unsafe {
                        let dst = c.add((i0 + i) * ldc + j0);
                        if overwrite {
                            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, cols);
                        } else {
                            let dst = std::slice::from_raw_parts_mut(dst, cols);
                            for (d, s) in dst.iter_mut().zip(src) {
                                *d += s;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Fetches the cache line at `line` into L2 (a hint: it never faults, and nothing waits for it).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
fn prefetch_l2(line: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and does not fault; SSE is part of
    // the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(line.cast())
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above: PRFM is a hint that does not fault and writes no register.
    unsafe {
        std::arch::asm!(
            "prfm pldl2keep, [{line}]",
            line = in(reg) line,
            options(nostack, preserves_flags, readonly)
        )
    };
}

/// Fetches a `rows` x `cols` tile of C (row stride `ldc`) into L1: the microkernel reads (or
/// writes) it after kc steps, and fetching it first hides a miss to memory behind the loop
/// instead of stalling at its end. Every cache line a row spans, aligned or not.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_tile(c: *const f32, ldc: usize, (rows, cols): (usize, usize)) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for i in 0..rows {
        let row = c.wrapping_add(i * ldc);
        for offset in (0..cols).step_by(16).chain([cols - 1]) {
            // SAFETY: a prefetch reads nothing architecturally and does not fault; SSE is part
            // of the x86_64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(offset).cast()) };
        }
    }
}

/// One step of the microkernel's loop, as assembly text: row `$p` of the packed B panel (three
/// vectors) times each of the four A values of that step (broadcast), added into the twelve
/// accumulators ymm4..ymm15.
#[cfg(target_arch = "x86_64")]
macro_rules! step {
    ($p:literal) => {
        concat!(
            "vmovups ymm0, [{b} + ",
            $p,
            "*96]\n",
            "vmovups ymm1, [{b} + ",
            $p,
            "*96 + 32]\n",
            "vmovups ymm2, [{b} + ",
            $p,
            "*96 + 64]\n",
            "vbroadcastss ymm3, dword ptr [{a} + ",
            $p,
            "*16]\n",
            "vfmadd231ps ymm4, ymm3, ymm0\n",
            "vfmadd231ps ymm5, ymm3, ymm1\n",
            "vfmadd231ps ymm6, ymm3, ymm2\n",
            "vbroadcastss ymm3, dword ptr [{a} + ",
            $p,
            "*16 + 4]\n",
            "vfmadd231ps ymm7, ymm3, ymm0\n",
            "vfmadd231ps ymm8, ymm3, ymm1\n",
            "vfmadd231ps ymm9, ymm3, ymm2\n",
            "vbroadcastss ymm3, dword ptr [{a} + ",
            $p,
            "*16 + 8]\n",
            "vfmadd231ps ymm10, ymm3, ymm0\n",
            "vfmadd231ps ymm11, ymm3, ymm1\n",
            "vfmadd231ps ymm12, ymm3, ymm2\n",
            "vbroadcastss ymm3, dword ptr [{a} + ",
            $p,
            "*16 + 12]\n",
            "vfmadd231ps ymm13, ymm3, ymm0\n",
            "vfmadd231ps ymm14, ymm3, ymm1\n",
            "vfmadd231ps ymm15, ymm3, ymm2",
        )
    };
}

/// C[0..4][0..24] (row stride `ldc`) = (or +=, unless `overwrite`) the product of a packed
/// A panel (kc x 4, column by column) and a packed B panel (kc x 24, row by row): twelve
/// 8-lane accumulators, three FMAs per broadcast element of A.
///
/// # Safety
/// AVX2 and FMA present; `a` holds 4 kc floats, `b` 24 kc floats; the 4 x 24 tile of `c`
/// is valid for reads and writes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_kernel(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    prefetch_tile(c, ldc, (4, 24));
    // The loop in assembly: from intrinsics LLVM spills an accumulator of this tile to the
    // stack (all sixteen vector registers are in use) and the kernel runs at half speed. The
    // accumulators go straight into C from their registers, not through a stack array (1-3 % of
    // a one-thread product at n = 661 and 2048).
    // SAFETY: the loop reads kc x 4 floats from a and kc x 24 from b (the panels' sizes),
    // writes only registers, then reads (unless overwrite) and writes the 4 x 24 tile of c.
    unsafe {
        std::arch::asm!(
            "vxorps ymm4, ymm4, ymm4",
            "vxorps ymm5, ymm5, ymm5",
            "vxorps ymm6, ymm6, ymm6",
            "vxorps ymm7, ymm7, ymm7",
            "vxorps ymm8, ymm8, ymm8",
            "vxorps ymm9, ymm9, ymm9",
            "vxorps ymm10, ymm10, ymm10",
            "vxorps ymm11, ymm11, ymm11",
            "vxorps ymm12, ymm12, ymm12",
            "vxorps ymm13, ymm13, ymm13",
            "vxorps ymm14, ymm14, ymm14",
            "vxorps ymm15, ymm15, ymm15",
            // Four steps per iteration, then the remaining kc % 4 one at a time.
            "mov {r}, {k}",
            "and {r}, 3",
            "shr {k}, 2",
            "jz 4f",
            "2:",
            "prefetcht0 [{a} + 256]",
            step!(0),
            step!(1),
            step!(2),
            step!(3),
            "add {a}, 64",
            "add {b}, 384",
            "dec {k}",
            "jnz 2b",
            "4:",
            "test {r}, {r}",
            "jz 3f",
            "5:",
            step!(0),
            "add {a}, 16",
            "add {b}, 96",
            "dec {r}",
            "jnz 5b",
            "3:",
            // Rows 0 and 1 at c and c + ldc, rows 2 and 3 at c2 and c2 + ldc.
            "lea {c2}, [{c} + 2*{ldc}]",
            "test {overwrite}, {overwrite}",
            "jnz 6f",
            "vaddps ymm4, ymm4, [{c}]",
            "vaddps ymm5, ymm5, [{c} + 32]",
            "vaddps ymm6, ymm6, [{c} + 64]",
            "vaddps ymm7, ymm7, [{c} + {ldc}]",
            "vaddps ymm8, ymm8, [{c} + {ldc} + 32]",
            "vaddps ymm9, ymm9, [{c} + {ldc} + 64]",
            "vaddps ymm10, ymm10, [{c2}]",
            "vaddps ymm11, ymm11, [{c2} + 32]",
            "vaddps ymm12, ymm12, [{c2} + 64]",
            "vaddps ymm13, ymm13, [{c2} + {ldc}]",
            "vaddps ymm14, ymm14, [{c2} + {ldc} + 32]",
            "vaddps ymm15, ymm15, [{c2} + {ldc} + 64]",
            "6:",
            "vmovups [{c}], ymm4",
            "vmovups [{c} + 32], ymm5",
            "vmovups [{c} + 64], ymm6",
            "vmovups [{c} + {ldc}], ymm7",
            "vmovups [{c} + {ldc} + 32], ymm8",
            "vmovups [{c} + {ldc} + 64], ymm9",
            "vmovups [{c2}], ymm10",
            "vmovups [{c2} + 32], ymm11",
            "vmovups [{c2} + 64], ymm12",
            "vmovups [{c2} + {ldc}], ymm13",
            "vmovups [{c2} + {ldc} + 32], ymm14",
            "vmovups [{c2} + {ldc} + 64], ymm15",
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            k = inout(reg) kc => _,
            r = out(reg) _,
            c = in(reg) c,
            ldc = in(reg) ldc * 4,
            c2 = out(reg) _,
            overwrite = in(reg) overwrite as usize,
            out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
            out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
            out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
            out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
            options(nostack),
        );
    }
}

/// Element `$i` of step `$p`'s column of A broadcast into `$v` times the step's three vectors of
/// B (zmm0..zmm2), added into row `$i`'s accumulators, as assembly text.
#[cfg(target_arch = "x86_64")]
macro_rules! avx512_row {
    ($p:literal, $i:literal, $v:literal, $x:literal, $y:literal, $z:literal) => {
        concat!(
            "vbroadcastss zmm",
            $v,
            ", dword ptr [{a} + ",
            $p,
            "*32 + ",
            $i,
            "*4]\n",
            "vfmadd231ps zmm",
            $x,
            ", zmm",
            $v,
            ", zmm0\n",
            "vfmadd231ps zmm",
            $y,
            ", zmm",
            $v,
            ", zmm1\n",
            "vfmadd231ps zmm",
            $z,
            ", zmm",
            $v,
            ", zmm2\n",
        )
    };
}

/// One step of the AVX-512 microkernel, as assembly text: row `$p` of the packed B panel
/// (three 16-lane vectors) times each of the eight A values of that step (broadcast in turn
/// into zmm3..zmm7), added into the 24 accumulators zmm8..zmm31, row i in zmm(8 + 3i)..
/// zmm(10 + 3i).
#[cfg(target_arch = "x86_64")]
macro_rules! avx512_step {
    ($p:literal) => {
        concat!(
            "vmovups zmm0, [{b} + ",
            $p,
            "*192]\n",
            "vmovups zmm1, [{b} + ",
            $p,
            "*192 + 64]\n",
            "vmovups zmm2, [{b} + ",
            $p,
            "*192 + 128]\n",
            avx512_row!($p, "0", "3", "8", "9", "10"),
            avx512_row!($p, "1", "4", "11", "12", "13"),
            avx512_row!($p, "2", "5", "14", "15", "16"),
            avx512_row!($p, "3", "6", "17", "18", "19"),
            avx512_row!($p, "4", "7", "20", "21", "22"),
            avx512_row!($p, "5", "3", "23", "24", "25"),
            avx512_row!($p, "6", "4", "26", "27", "28"),
            avx512_row!($p, "7", "5", "29", "30", "31"),
        )
    };
}

/// The eight rows of the tile, as assembly text: `$row` expanded with each row's address (row
/// i at {c} + i * ldc, reached from {c}, {c2} = {c} + 2 ldc and {c3} = {c} + 3 ldc) and its
/// three accumulators.
#[cfg(target_arch = "x86_64")]
macro_rules! avx512_rows {
    ($row:ident) => {
        concat!(
            $row!("{c}", "8", "9", "10"),
            $row!("{c} + {ldc}", "11", "12", "13"),
            $row!("{c2}", "14", "15", "16"),
            $row!("{c3}", "17", "18", "19"),
            $row!("{c} + 4*{ldc}", "20", "21", "22"),
            $row!("{c3} + 2*{ldc}", "23", "24", "25"),
            $row!("{c2} + 4*{ldc}", "26", "27", "28"),
            $row!("{c3} + 4*{ldc}", "29", "30", "31"),
        )
    };
}

/// Adds a row of C into its accumulators, as assembly text.
#[cfg(target_arch = "x86_64")]
macro_rules! avx512_add_row {
    ($at:literal, $x:literal, $y:literal, $z:literal) => {
        concat!(
            "vaddps zmm",
            $x,
            ", zmm",
            $x,
            ", [",
            $at,
            "]\n",
            "vaddps zmm",
            $y,
            ", zmm",
            $y,
            ", [",
            $at,
            " + 64]\n",
            "vaddps zmm",
            $z,
            ", zmm",
            $z,
            ", [",
            $at,
            " + 128]\n",
        )
    };
}

/// Stores a row's accumulators to C, as assembly text.
#[cfg(target_arch = "x86_64")]
macro_rules! avx512_store_row {
    ($at:literal, $x:literal, $y:literal, $z:literal) => {
        concat!(
            "vmovups [",
            $at,
            "], zmm",
            $x,
            "\n",
            "vmovups [",
            $at,
            " + 64], zmm",
            $y,
            "\n",
            "vmovups [",
            $at,
            " + 128], zmm",
            $z,
            "\n",
        )
    };
}

/// The AVX-512 microkernel: C[0..8][0..48] (row stride `ldc`) = (or +=, unless `overwrite`) the
/// product of a packed A panel (kc x 8, column by column) and a packed B panel (kc x 48, row by
/// row): 24 16-lane accumulators, three FMAs per broadcast element of A.
///
/// # Safety
/// AVX-512F present; `a` holds 8 kc floats, `b` 48 kc floats; the 8 x 48 tile of `c` is valid
/// for reads and writes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn avx512_kernel(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    prefetch_tile(c, ldc, (8, 48));
    // In assembly, as the AVX2 kernel: the 24 accumulators, three vectors of B and the
    // broadcasts take 32 registers, which leaves the register allocator no room.
    // SAFETY: the loop reads kc x 8 floats from a and kc x 48 from b (the panels' sizes),
    // writes only registers, then reads (unless overwrite) and writes the 8 x 48 tile of c.
    unsafe {
        std::arch::asm!(
            "vpxord zmm8, zmm8, zmm8",
            "vpxord zmm9, zmm9, zmm9",
            "vpxord zmm10, zmm10, zmm10",
            "vpxord zmm11, zmm11, zmm11",
            "vpxord zmm12, zmm12, zmm12",
            "vpxord zmm13, zmm13, zmm13",
            "vpxord zmm14, zmm14, zmm14",
            "vpxord zmm15, zmm15, zmm15",
            "vpxord zmm16, zmm16, zmm16",
            "vpxord zmm17, zmm17, zmm17",
            "vpxord zmm18, zmm18, zmm18",
            "vpxord zmm19, zmm19, zmm19",
            "vpxord zmm20, zmm20, zmm20",
            "vpxord zmm21, zmm21, zmm21",
            "vpxord zmm22, zmm22, zmm22",
            "vpxord zmm23, zmm23, zmm23",
            "vpxord zmm24, zmm24, zmm24",
            "vpxord zmm25, zmm25, zmm25",
            "vpxord zmm26, zmm26, zmm26",
            "vpxord zmm27, zmm27, zmm27",
            "vpxord zmm28, zmm28, zmm28",
            "vpxord zmm29, zmm29, zmm29",
            "vpxord zmm30, zmm30, zmm30",
            "vpxord zmm31, zmm31, zmm31",
            // Four steps per iteration, then the remaining kc % 4 one at a time.
            "mov {r}, {k}",
            "and {r}, 3",
            "shr {k}, 2",
            "jz 4f",
            "2:",
            // A streams from L2 (a new panel every tile), two lines per iteration, four
            // iterations ahead; the B panel stays in L1.
            "prefetcht0 [{a} + 512]",
            "prefetcht0 [{a} + 576]",
            avx512_step!("0"),
            avx512_step!("1"),
            avx512_step!("2"),
            avx512_step!("3"),
            "add {a}, 128",
            "add {b}, 768",
            "dec {k}",
            "jnz 2b",
            "4:",
            "test {r}, {r}",
            "jz 3f",
            "5:",
            avx512_step!("0"),
            "add {a}, 32",
            "add {b}, 192",
            "dec {r}",
            "jnz 5b",
            "3:",
            "lea {c2}, [{c} + 2*{ldc}]",
            "lea {c3}, [{c2} + {ldc}]",
            "test {overwrite}, {overwrite}",
            "jnz 6f",
            avx512_rows!(avx512_add_row),
            "6:",
            avx512_rows!(avx512_store_row),
            // The callers' code may use SSE: leave no upper halves dirty.
            "vzeroupper",
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            k = inout(reg) kc => _,
            r = out(reg) _,
            c = in(reg) c,
            ldc = in(reg) ldc * 4,
            c2 = out(reg) _,
            c3 = out(reg) _,
            overwrite = in(reg) overwrite as usize,
            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
            out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
            out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
            out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
            out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm19") _,
            out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _,
            out("zmm24") _, out("zmm25") _, out("zmm26") _, out("zmm27") _,
            out("zmm28") _, out("zmm29") _, out("zmm30") _, out("zmm31") _,
            options(nostack),
        );
    }
}

/// The AVX-512 tile's first `V` vectors of columns (16 V of its 48), overwritten into `tile`
/// (row stride 48): 8 V accumulators, so intrinsics suffice.
///
/// # Safety
/// AVX-512F present; `a` holds 8 kc floats, `b` 48 kc floats, `tile` 8 x 48.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_edge_kernel<const V: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    tile: *mut f32,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); V]; 8];
    for p in 0..kc {
        let mut bv = [_mm512_setzero_ps(); V];
        for (v, lane) in bv.iter_mut().enumerate() {
            // SAFETY: row p of the B panel holds 48 floats from b + 48 p.
            *lane = unsafe { _mm512_loadu_ps(b.add(p * 48 + 16 * v)) };
        }
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: step p of the A panel holds 8 floats from a + 8 p.
            let av = _mm512_set1_ps(unsafe { *a.add(p * 8 + i) });
            for (sum, &bl) in row.iter_mut().zip(&bv) {
                *sum = _mm512_fmadd_ps(av, bl, *sum);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (v, &sum) in row.iter().enumerate() {
            // SAFETY: row i of the tile holds 48 floats from tile + 48 i.
            unsafe { _mm512_storeu_ps(tile.add(i * 48 + 16 * v), sum) };
        }
    }
}

/// `$op` (fmla or fmul) by lane, as assembly text: for each position, accumulator `v$acc`
/// (+)= B's vector `v$b` times lane `$lane` of A's `v$a`.
#[cfg(target_arch = "aarch64")]
macro_rules! neon_by_lane {
    ($op:literal, [$($acc:literal),*], [$($b:literal),*], [$($a:literal),*], [$($lane:literal),*]) => {
        concat!($($op, " v", $acc, ".4s, v", $b, ".4s, v", $a, ".s[", $lane, "]\n",)*)
    };
}

/// One step of the NEON microkernel, as assembly text: the step's 8 values of A in `$lo` (rows
/// 0-3) and `$hi` (rows 4-7) times its row of B, loaded here into v4, v5, v6 with one
/// three-register load, added into the accumulators by `fmla` (or written to them by `fmul`),
/// row i of C in v(8 + 3i)..v(10 + 3i).
#[cfg(target_arch = "aarch64")]
macro_rules! neon_step {
    ($op:literal, $lo:literal, $hi:literal) => {
        concat!(
            "ld1 {{v4.4s, v5.4s, v6.4s}}, [{b}], #48\n",
            neon_by_lane!(
                $op,
                [
                    "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20",
                    "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31"
                ],
                [
                    "4", "5", "6", "4", "5", "6", "4", "5", "6", "4", "5", "6", "4", "5", "6", "4",
                    "5", "6", "4", "5", "6", "4", "5", "6"
                ],
                [
                    $lo, $lo, $lo, $lo, $lo, $lo, $lo, $lo, $lo, $lo, $lo, $lo, $hi, $hi, $hi, $hi,
                    $hi, $hi, $hi, $hi, $hi, $hi, $hi, $hi
                ],
                [
                    "0", "0", "0", "1", "1", "1", "2", "2", "2", "3", "3", "3", "0", "0", "0", "1",
                    "1", "1", "2", "2", "2", "3", "3", "3"
                ]
            ),
        )
    };
}

/// The eight rows of the tile, as assembly text: `$row` expanded with each row's three
/// accumulators.
#[cfg(target_arch = "aarch64")]
macro_rules! neon_rows {
    ($row:ident) => {
        concat!(
            $row!(8, 9, 10),
            $row!(11, 12, 13),
            $row!(14, 15, 16),
            $row!(17, 18, 19),
            $row!(20, 21, 22),
            $row!(23, 24, 25),
            $row!(26, 27, 28),
            $row!(29, 30, 31),
        )
    };
}

/// Adds a row of C (at `{cp}`, which then moves to the next row) into its accumulators.
#[cfg(target_arch = "aarch64")]
macro_rules! neon_add_row {
    ($x:literal, $y:literal, $z:literal) => {
        concat!(
            "ld1 {{v0.4s, v1.4s, v2.4s}}, [{cp}], {ldc}\n",
            "fadd v",
            $x,
            ".4s, v",
            $x,
            ".4s, v0.4s\n",
            "fadd v",
            $y,
            ".4s, v",
            $y,
            ".4s, v1.4s\n",
            "fadd v",
            $z,
            ".4s, v",
            $z,
            ".4s, v2.4s\n",
        )
    };
}

/// Stores a row's accumulators to C (at `{c}`, which then moves to the next row).
#[cfg(target_arch = "aarch64")]
macro_rules! neon_store_row {
    ($x:literal, $y:literal, $z:literal) => {
        concat!(
            "st1 {{v",
            $x,
            ".4s, v",
            $y,
            ".4s, v",
            $z,
            ".4s}}, [{c}], {ldc}\n"
        )
    };
}

/// Fetches a row of C (at `{cp}`, which then moves to the next row) into L1: 48 bytes, in one
/// or two cache lines.
#[cfg(target_arch = "aarch64")]
macro_rules! neon_prefetch_row {
    ($x:literal, $y:literal, $z:literal) => {
        "prfm pldl1keep, [{cp}]\nprfum pldl1keep, [{cp}, #44]\nadd {cp}, {cp}, {ldc}\n"
    };
}

/// C[0..8][0..12] (row stride `ldc`) = (or +=, unless `overwrite`) the product of a packed
/// A panel (kc x 8, column by column) and a packed B panel (kc x 12, row by row): 24 4-lane
/// accumulators, each step one 8-float column of A and one 12-float row of B, three FMAs per
/// element of A (by lane, without a broadcast).
///
/// # Safety
/// kc >= 1; `a` holds 8 kc floats, `b` 12 kc floats; the 8 x 12 tile of `c` is valid for
/// reads and writes.
#[cfg(target_arch = "aarch64")]
unsafe fn neon_kernel(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    // The loop in assembly, as on x86_64: the 24 accumulators and the step's five operands
    // take 29 of the 32 vector registers, and code generated from intrinsics tends to spill
    // with that many live values. Only base ASIMD instructions: a Cortex-A57 runs them.
    // SAFETY: the loop reads kc x 8 floats from a and kc x 12 from b (the panels' sizes),
    // writes only registers, then reads (unless overwrite) and writes the 8 x 12 tile of c;
    // prefetches do not fault.
    unsafe {
        std::arch::asm!(
            // The tile of C is read (or written) after kc steps: fetching it now hides a miss
            // behind the loop instead of stalling at its end.
            "mov {cp}, {c}",
            neon_rows!(neon_prefetch_row),
            // The first step multiplies into the accumulators instead of zeroing them and
            // adding (kc >= 1, the caller's promise): 24 instructions fewer per tile.
            "ld1 {{v0.4s, v1.4s}}, [{a}], #32",
            neon_step!("fmul", "0", "1"),
            "sub {k}, {k}, #1",
            // Four steps per iteration, then the remaining ones one at a time.
            "and {r}, {k}, #3",
            "lsr {k}, {k}, #2",
            "cbz {k}, 4f",
            "2:",
            // A streams from L2 (a new panel every tile), two cache lines per iteration; the
            // B panel stays in L1. Multi-register loads: A for two steps in one (v0-v3), each
            // step's B in one, so 96 FMAs take 6 loads (pairs and singles would take 12).
            "prfm pldl1keep, [{a}, #256]",
            "prfm pldl1keep, [{a}, #320]",
            "ld1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{a}], #64",
            neon_step!("fmla", "0", "1"),
            neon_step!("fmla", "2", "3"),
            "ld1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{a}], #64",
            neon_step!("fmla", "0", "1"),
            neon_step!("fmla", "2", "3"),
            "subs {k}, {k}, #1",
            "b.ne 2b",
            "4:",
            "cbz {r}, 3f",
            "5:",
            "ld1 {{v0.4s, v1.4s}}, [{a}], #32",
            neon_step!("fmla", "0", "1"),
            "subs {r}, {r}, #1",
            "b.ne 5b",
            "3:",
            "cbnz {overwrite}, 6f",
            "mov {cp}, {c}",
            neon_rows!(neon_add_row),
            "6:",
            neon_rows!(neon_store_row),
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            k = inout(reg) kc => _,
            r = out(reg) _,
            c = inout(reg) c => _,
            cp = out(reg) _,
            ldc = in(reg) ldc * 4,
            overwrite = in(reg) overwrite as usize,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v12") _, out("v13") _, out("v14") _, out("v15") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            out("v24") _, out("v25") _, out("v26") _, out("v27") _,
            out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            options(nostack),
        );
    }
}

/// Eight `$op` (fmla or fmul) of the edge kernel: `$acc` (rows 0-7) += (or =) the vector
/// `v$b` of B times lane r of A's rows 0-3 (`v$lo`) and 4-7 (`v$hi`).
#[cfg(target_arch = "aarch64")]
macro_rules! neon_edge_step {
    ($op:literal, $b:literal, $lo:literal, $hi:literal, [$($acc:literal),*]) => {
        neon_by_lane!($op, [$($acc),*], [$b, $b, $b, $b, $b, $b, $b, $b],
            [$lo, $lo, $lo, $lo, $hi, $hi, $hi, $hi], ["0", "1", "2", "3", "0", "1", "2", "3"])
    };
}

/// The edge kernel's loop around its steps, as one `asm!`: `$first` (the first step, which
/// multiplies), then pairs of steps (`$pair`, A for both in v0-v3), a last single step
/// (`$single`) when kc - 1 is odd, and `$store`, which writes the 8 rows (12 floats apart).
#[cfg(target_arch = "aarch64")]
macro_rules! neon_edge_asm {
    (($a:expr, $b:expr, $kc:expr, $tile:expr), first: [$($first:expr),*], pair: [$($pair:expr),*],
     single: [$($single:expr),*], store: [$($store:expr),*]) => {
        std::arch::asm!(
            "ld1 {{v0.4s, v1.4s}}, [{a}], #32",
            $($first,)*
            "sub {k}, {k}, #1",
            "and {r}, {k}, #1",
            "lsr {k}, {k}, #1",
            "cbz {k}, 4f",
            "2:",
            "ld1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{a}], #64",
            $($pair,)*
            "subs {k}, {k}, #1",
            "b.ne 2b",
            "4:",
            "cbz {r}, 3f",
            "ld1 {{v0.4s, v1.4s}}, [{a}], #32",
            $($single,)*
            "3:",
            $($store,)*
            a = inout(reg) $a => _,
            b = inout(reg) $b => _,
            k = inout(reg) $kc => _,
            r = out(reg) _,
            c = inout(reg) $tile => _,
            bs = in(reg) 48usize,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            out("v24") _, out("v25") _, out("v26") _, out("v27") _,
            out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            options(nostack),
        )
    };
}

/// One step of the one-vector edge kernel: B's vector in `$b`, rows 0-7 in v16-v23 (`even`)
/// or v24-v31 (`odd`).
#[cfg(target_arch = "aarch64")]
macro_rules! neon_edge1 {
    ($op:literal, even, $b:literal, $lo:literal, $hi:literal) => {
        neon_edge_step!(
            $op,
            $b,
            $lo,
            $hi,
            ["16", "17", "18", "19", "20", "21", "22", "23"]
        )
    };
    ($op:literal, odd, $b:literal, $lo:literal, $hi:literal) => {
        neon_edge_step!(
            $op,
            $b,
            $lo,
            $hi,
            ["24", "25", "26", "27", "28", "29", "30", "31"]
        )
    };
}

/// One step of the two-vector edge kernel: B's row in v4, v5, row i in v(16 + 2i), v(17 + 2i).
#[cfg(target_arch = "aarch64")]
macro_rules! neon_edge2 {
    ($op:literal, $lo:literal, $hi:literal) => {
        concat!(
            "ld1 {{v4.4s, v5.4s}}, [{b}], {bs}\n",
            neon_edge_step!(
                $op,
                "4",
                $lo,
                $hi,
                ["16", "18", "20", "22", "24", "26", "28", "30"]
            ),
            neon_edge_step!(
                $op,
                "5",
                $lo,
                $hi,
                ["17", "19", "21", "23", "25", "27", "29", "31"]
            ),
        )
    };
}

/// The first `V` (1 or 2) four-column vectors of the NEON tile, overwritten into `tile` (row
/// stride 12): 8 or 16 fmla per step where the whole tile takes 24. One vector of columns keeps
/// two sets of eight accumulators (even and odd steps), so that consecutive FMAs into one
/// register do not wait on each other.
///
/// # Safety
/// kc >= 1; `a` holds 8 kc floats, `b` 12 kc floats; `tile` is valid for 8 x 12 floats.
#[cfg(target_arch = "aarch64")]
unsafe fn neon_edge_kernel<const V: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    tile: *mut f32,
) {
    // SAFETY: the loops read kc x 8 floats from a and the first 4 V of each 12-float row of b,
    // and write the first 4 V columns of the tile's 8 rows.
    unsafe {
        if V == 1 {
            neon_edge_asm!(
                (a, b, kc, tile),
                first: [
                    "ld1 {{v4.4s}}, [{b}], {bs}",
                    neon_edge1!("fmul", even, "4", "0", "1"),
                    "movi v24.16b, #0", "movi v25.16b, #0", "movi v26.16b, #0", "movi v27.16b, #0",
                    "movi v28.16b, #0", "movi v29.16b, #0", "movi v30.16b, #0", "movi v31.16b, #0"
                ],
                pair: [
                    "ld1 {{v4.4s}}, [{b}], {bs}",
                    "ld1 {{v5.4s}}, [{b}], {bs}",
                    neon_edge1!("fmla", even, "4", "0", "1"),
                    neon_edge1!("fmla", odd, "5", "2", "3")
                ],
                single: ["ld1 {{v4.4s}}, [{b}], {bs}", neon_edge1!("fmla", even, "4", "0", "1")],
                store: [
                    "fadd v16.4s, v16.4s, v24.4s", "fadd v17.4s, v17.4s, v25.4s",
                    "fadd v18.4s, v18.4s, v26.4s", "fadd v19.4s, v19.4s, v27.4s",
                    "fadd v20.4s, v20.4s, v28.4s", "fadd v21.4s, v21.4s, v29.4s",
                    "fadd v22.4s, v22.4s, v30.4s", "fadd v23.4s, v23.4s, v31.4s",
                    "st1 {{v16.4s}}, [{c}], {bs}", "st1 {{v17.4s}}, [{c}], {bs}",
                    "st1 {{v18.4s}}, [{c}], {bs}", "st1 {{v19.4s}}, [{c}], {bs}",
                    "st1 {{v20.4s}}, [{c}], {bs}", "st1 {{v21.4s}}, [{c}], {bs}",
                    "st1 {{v22.4s}}, [{c}], {bs}", "st1 {{v23.4s}}, [{c}], {bs}"
                ]
            );
        } else {
            // Sixteen independent sums.
            neon_edge_asm!(
                (a, b, kc, tile),
                first: [neon_edge2!("fmul", "0", "1")],
                pair: [neon_edge2!("fmla", "0", "1"), neon_edge2!("fmla", "2", "3")],
                single: [neon_edge2!("fmla", "0", "1")],
                store: [
                    "st1 {{v16.4s, v17.4s}}, [{c}], {bs}", "st1 {{v18.4s, v19.4s}}, [{c}], {bs}",
                    "st1 {{v20.4s, v21.4s}}, [{c}], {bs}", "st1 {{v22.4s, v23.4s}}, [{c}], {bs}",
                    "st1 {{v24.4s, v25.4s}}, [{c}], {bs}", "st1 {{v26.4s, v27.4s}}, [{c}], {bs}",
                    "st1 {{v28.4s, v29.4s}}, [{c}], {bs}", "st1 {{v30.4s, v31.4s}}, [{c}], {bs}"
                ]
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::Rng;

    /// `len` values uniform in [-1, 1) from `seed`.
    fn fill(len: usize, seed: u64) -> Vec<f32> {
        Rng::new(seed)
            .vec(len)
            .into_iter()
            .map(|v| v as f32)
            .collect()
    }

    fn reference(a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize)) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for l in 0..k {
                let av = a[i * k + l] as f64;
                for j in 0..n {
                    c[i * n + j] += av * b[l * n + j] as f64;
                }
            }
        }
        c
    }

    /// C against the f64 reference, within f32 rounding over a depth of k.
    fn assert_close(c: &[f32], want: &[f64], (n, k): (usize, usize), context: &str) {
        for (idx, (&got, &want)) in c.iter().zip(want).enumerate() {
            assert!(
                (got as f64 - want).abs() <= 1e-5 * k as f64 + 1e-6,
                "{context}: c[{}, {}] = {got}, want {want}",
                idx / n,
                idx % n
            );
        }
    }

    /// `product` with kernel K on the current pool's threads, as [`sgemm`] runs its kernel.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn sgemm_with<K: Microkernel<MR, NR>, const MR: usize, const NR: usize>(
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        (m, n, k): (usize, usize, usize),
    ) {
        assert!(
            K::available(),
            "the CPU lacks the instructions of this kernel"
        );
        assert!(a.len() == m * k && b.len() == k * n && c.len() == m * n);
        let (a, b) = (
            Operand {
                data: a,
                rs: k,
                cs: 1,
            },
            Operand {
                data: b,
                rs: n,
                cs: 1,
            },
        );
        let threads = rayon::current_num_threads();
        // SAFETY: K is available (asserted); c holds m x n floats, row stride n.
        unsafe { blocked::<K, MR, NR>(a, b, (c.as_mut_ptr(), n), (m, n, k), false, threads) };
    }

    /// Shapes around every block edge (MR, NR, KC, MC, a group of packed depth blocks and a
    /// row split across threads), each against the f64 triple loop in pools of 1 to 16 threads.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn matches_the_f64_reference_at_every_thread_count<
        K: Microkernel<MR, NR>,
        const MR: usize,
        const NR: usize,
    >() {
        let (kc, mc) = (K::KC, K::MC);
        // B packed in three groups of two depth blocks each, the last group partial, its last
        // panel too.
        let groups_n = K::PACKED_B_FLOATS / (2 * kc * NR) * NR - 5;
        let group_depth = K::PACKED_B_FLOATS / (groups_n.div_ceil(NR) * NR * kc) * kc;
        let groups_k = 2 * group_depth + kc / 2 + 3;
        assert!(group_depth == 2 * kc && groups_k.div_ceil(group_depth) == 3);
        let shapes = [
            (1, 1, 1),
            (5, 17, 3),
            (6, 16, 1),
            (7, 15, 2),
            (MR, NR, 1),
            (MR - 1, NR - 1, 4),
            (MR + 1, NR + 1, 5),
            // Edge panels of 4 and 8 columns and less, at even, odd and unit depths.
            (MR, 4, 3),
            (2 * MR, NR + 8, 6),
            (MR + 3, 7, 1),
            (MR, 2 * NR + 6, 2),
            (3 * MR, 2 * NR, 8),
            (37, 41, 29),
            (13, 33, kc + 1),
            (MR, 3 * NR, kc - 1),
            (mc + 7, 2 * NR + 5, kc * 2 + 3),
            (2 * mc + 1, 50, 70),
            (300, 9, 11),
            (4, K::NC + 21, 5),
            (9, groups_n, groups_k),
            // Several groups and several row runs: one group's products may not overlap the
            // previous group's on the same rows.
            (40, groups_n, groups_k),
        ];
        crate::test_util::on_thread_counts(|| {
            let threads = rayon::current_num_threads();
            for (s, &(m, n, k)) in shapes.iter().enumerate() {
                let a = fill(m * k, 11 + s as u64);
                let b = fill(k * n, 23 + s as u64);
                let want = reference(&a, &b, (m, n, k));
                // Stale values in C must be overwritten, not added to.
                let mut c = vec![f32::NAN; m * n];
                sgemm_with::<K, MR, NR>(&a, &b, &mut c, (m, n, k));
                assert_close(
                    &c,
                    &want,
                    (n, k),
                    &format!("{threads} threads, {m}x{n}x{k}"),
                );
            }
        });
    }

    /// The `rows` x `cols` values of `v` (row-major) at (row, column) strides `rs`, `cs`, the
    /// gaps between them NaN.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn strided(v: &[f32], (rows, cols): (usize, usize), (rs, cs): (usize, usize)) -> Vec<f32> {
        let mut out = vec![f32::NAN; (rows - 1) * rs + (cols - 1) * cs + 1];
        for r in 0..rows {
            for c in 0..cols {
                out[r * rs + c * cs] = v[r * cols + c];
            }
        }
        out
    }

    /// (row, column) strides of a `rows` x `cols` matrix: row-major, stored transposed, and
    /// neither stride 1.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn layouts((rows, cols): (usize, usize)) -> [(usize, usize); 3] {
        [(cols, 1), (1, rows), (2 * cols + 1, 2)]
    }

    /// The packed layouts element by element: A's panels column by column, B's row by row,
    /// both padded with zeros (depths around the transposes' four and eight columns, rows
    /// that fill a panel or do not, and B's runs of panels with a partial last panel), from
    /// operands row-major, transposed and with both strides above 1.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn packed_panels_hold_their_elements_and_zero_padding<
        K: Microkernel<MR, NR>,
        const MR: usize,
        const NR: usize,
    >() {
        assert!(
            K::available(),
            "the CPU lacks the instructions of this kernel"
        );
        let (m, k) = (11, 45);
        let a = fill(m * k, 3);
        for ((pc, kc), (rs, cs)) in [(0, 1), (2, 7), (5, 8), (3, 19), (0, 45)]
            .into_iter()
            .flat_map(|depths| layouts((m, k)).map(|strides| (depths, strides)))
        {
            let data = strided(&a, (m, k), (rs, cs));
            let mut packed = vec![f32::NAN; m.div_ceil(MR) * MR * kc];
            // SAFETY: K is available (asserted above).
            unsafe {
                pack_a::<K, MR, NR>(
                    Operand {
                        data: &data,
                        rs,
                        cs,
                    },
                    m,
                    (pc, kc),
                    &mut packed,
                )
            };
            for (idx, &got) in packed.iter().enumerate() {
                let (panel, p, i) = (idx / (kc * MR), idx % (kc * MR) / MR, idx % MR);
                let row = panel * MR + i;
                let want = if row < m { a[row * k + pc + p] } else { 0.0 };
                assert_eq!(
                    got, want,
                    "A kc {kc}, strides {rs}, {cs}: panel {panel}, depth {p}, row {i}"
                );
            }
        }
        let (k, n) = (9, 20 * NR + 5);
        let b = fill(k * n, 4);
        // (depths, columns, the run of panels packed): whole ranges and runs inside them, the
        // last panel partial or not.
        let cases = [
            ((0, 9), (0, n), 0..21),
            ((2, 5), (3, NR - 1), 0..1),
            ((1, 8), (NR + 2, 9 * NR + 1), 0..10),
            ((1, 8), (NR + 2, 9 * NR + 1), 3..7),
            ((1, 8), (NR + 2, 9 * NR + 1), 7..10),
        ];
        for (((pc, kc), (jc, nc), panels), (rs, cs)) in cases
            .into_iter()
            .flat_map(|case| layouts((k, n)).map(|strides| (case.clone(), strides)))
        {
            let data = strided(&b, (k, n), (rs, cs));
            let mut packed = vec![f32::NAN; panels.len() * NR * kc];
            let operand = Operand {
                data: &data,
                rs,
                cs,
            };
            pack_b::<NR>(operand, (pc, kc), (jc, nc), panels.start, &mut packed);
            for (idx, &got) in packed.iter().enumerate() {
                let (panel, p, j) = (idx / (kc * NR), idx % (kc * NR) / NR, idx % NR);
                let col = (panels.start + panel) * NR + j;
                let want = if col < nc {
                    b[(pc + p) * n + jc + col]
                } else {
                    0.0
                };
                assert_eq!(
                    got, want,
                    "B nc {nc}, strides {rs}, {cs}: panel {panel}, depth {p}, column {j}"
                );
            }
        }
    }

    /// The blocked product of strided operands (row-major, transposed, neither stride 1) into
    /// a C whose rows are longer than n, overwritten or added to, on the calling thread alone
    /// and on every thread of pools of 1 to 16: the columns past n stay as they were.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn strided_operands_into_a_wider_c_overwrite_or_accumulate<
        K: Microkernel<MR, NR>,
        const MR: usize,
        const NR: usize,
    >() {
        assert!(
            K::available(),
            "the CPU lacks the instructions of this kernel"
        );
        let shapes = [
            (MR + 1, NR - 1, 5),
            (37, 41, K::KC + 3),
            (K::MC + 5, 2 * NR + 3, 2 * K::KC + 1),
        ];
        crate::test_util::on_thread_counts(|| {
            let pool = rayon::current_num_threads();
            let runs = [(false, 1), (true, 1), (false, pool), (true, pool)];
            for (s, &(m, n, k)) in shapes.iter().enumerate() {
                let (a, b) = (fill(m * k, 31 + s as u64), fill(k * n, 37 + s as u64));
                let product = reference(&a, &b, (m, n, k));
                let ldc = n + 3;
                let c_before = fill(m * ldc, 41 + s as u64);
                for ((a_strides, b_strides), (accumulate, threads)) in layouts((m, k))
                    .into_iter()
                    .flat_map(|sa| layouts((k, n)).map(move |sb| (sa, sb)))
                    .flat_map(|l| runs.map(move |r| (l, r)))
                {
                    let a_data = strided(&a, (m, k), a_strides);
                    let b_data = strided(&b, (k, n), b_strides);
                    let (lhs, rhs) = (
                        Operand {
                            data: &a_data,
                            rs: a_strides.0,
                            cs: a_strides.1,
                        },
                        Operand {
                            data: &b_data,
                            rs: b_strides.0,
                            cs: b_strides.1,
                        },
                    );
                    let mut c = c_before.clone();
                    // SAFETY: K is available (asserted above); c holds m rows of ldc >= n floats,
                    // its own allocation, initialised.
                    unsafe {
                        blocked::<K, MR, NR>(
                            lhs,
                            rhs,
                            (c.as_mut_ptr(), ldc),
                            (m, n, k),
                            accumulate,
                            threads,
                        )
                    };
                    let context = format!(
                        "{m}x{n}x{k}, strides {a_strides:?} {b_strides:?}, accumulate {accumulate}, \
                         {threads} threads"
                    );
                    for i in 0..m {
                        for j in 0..ldc {
                            let (got, before) = (c[i * ldc + j], c_before[i * ldc + j]);
                            if j >= n {
                                assert_eq!(got, before, "{context}: c[{i}, {j}] past n");
                                continue;
                            }
                            let want =
                                product[i * n + j] + if accumulate { before as f64 } else { 0.0 };
                            assert!(
                                (got as f64 - want).abs() <= 1e-5 * k as f64 + 1e-6,
                                "{context}: c[{i}, {j}] = {got}, want {want}"
                            );
                        }
                    }
                }
            }
        });
    }

    /// The threads of a product wait for each other only on work already claimed: a product
    /// whose pool's other threads are all busy elsewhere still finishes, on one thread.
    #[test]
    fn a_product_finishes_when_the_other_threads_of_its_pool_are_busy() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        // Several row runs, B panels and depth blocks for every kernel.
        let (m, n, k) = (2 * 256 + 3, 3 * 48 + 1, 2 * 256 + 5);
        let a = fill(m * k, 7);
        let b = fill(k * n, 8);
        let want = reference(&a, &b, (m, n, k));
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(4)
                .build()
                .unwrap();
            let (busy, done) = (AtomicUsize::new(0), AtomicBool::new(false));
            let mut c = vec![f32::NAN; m * n];
            pool.scope(|scope| {
                for _ in 0..3 {
                    scope.spawn(|_| {
                        busy.fetch_add(1, Ordering::SeqCst);
                        while !done.load(Ordering::SeqCst) {
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                    });
                }
                while busy.load(Ordering::SeqCst) < 3 {
                    std::thread::yield_now();
                }
                sgemm(&a, &b, &mut c, (m, n, k));
                done.store(true, Ordering::SeqCst);
            });
            sender.send(c).unwrap();
        });
        let c = receiver
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the product waited for threads that were busy elsewhere");
        assert_close(&c, &want, (n, k), "one of four threads");
    }

    /// Every aarch64 CPU has NEON: the tests above run the 8 x 12 microkernel there, not the
    /// `gemm` crate.
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn aarch64_takes_the_neon_kernel() {
        assert_eq!(Kernel::widest(), Kernel::Neon);
        // Whole tiles, and AlexNet's batch-1 convolutions (169 columns: 6.5 % padding), take
        // it; a matrix-vector product or 9 rows (16 computed) are left to the gemm crate.
        assert!(tiles_fit(8, 12) && tiles_fit(96, 169) && tiles_fit(384, 3025));
        assert!(!tiles_fit(1, 4096) && !tiles_fit(4096, 1) && !tiles_fit(9, 48));
    }

    #[test]
    fn even_runs_cover_every_unit_once_and_differ_by_at_most_one() {
        for (units, parts) in [(596, 18), (1, 1), (7, 7), (10, 3), (165, 2)] {
            let runs: Vec<_> = (0..parts).map(|i| even_run(units, parts, i)).collect();
            assert_eq!(runs[0].start, 0);
            assert_eq!(runs[parts - 1].end, units);
            assert!(runs.windows(2).all(|w| w[0].end == w[1].start));
            let lens = runs.iter().map(|r| r.len());
            let (shortest, longest) = (lens.clone().min().unwrap(), lens.max().unwrap());
            assert!(longest - shortest <= 1, "{units} in {parts}: {runs:?}");
        }
    }

    #[test]
    fn empty_depth_gives_zeros_and_empty_shapes_are_no_ops() {
        let mut c = vec![f32::NAN; 6];
        sgemm(&[], &[], &mut c, (2, 3, 0));
        assert_eq!(c, [0.0; 6]);
        sgemm(&[], &[1.0, 2.0], &mut [], (0, 2, 1));
        sgemm(&[1.0, 2.0], &[], &mut [], (2, 0, 1));
    }

    #[test]
    fn agrees_with_the_gemm_crate() {
        let (m, n, k) = (97, 131, 300);
        let a = fill(m * k, 5);
        let b = fill(k * n, 6);
        let mut ours = vec![0f32; m * n];
        let mut theirs = vec![0f32; m * n];
        sgemm(&a, &b, &mut ours, (m, n, k));
        gemm_crate(&a, &b, &mut theirs, (m, n, k));
        let worst = ours
            .iter()
            .zip(&theirs)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-4, "worst difference {worst}");
    }

    /// Each microkernel's tests, in a module of its own: `$ignore` names what the CPU that built
    /// the tests lacks, so that they show as ignored, not passed, where they cannot run (and
    /// fail, by the kernels' availability assert, on a test machine that lacks what the
    /// building one had).
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    macro_rules! kernel_tests {
        ($module:ident, $kernel:ty, $mr:literal, $nr:literal, $(#[$ignore:meta])?) => {
            mod $module {
                use super::*;

                #[test]
                $(#[$ignore])?
                fn matches_the_f64_reference_at_every_thread_count() {
                    super::matches_the_f64_reference_at_every_thread_count::<$kernel, $mr, $nr>();
                }

                #[test]
                $(#[$ignore])?
                fn packed_panels_hold_their_elements_and_zero_padding() {
                    super::packed_panels_hold_their_elements_and_zero_padding::<$kernel, $mr, $nr>(
                    );
                }

                #[test]
                $(#[$ignore])?
                fn strided_operands_into_a_wider_c_overwrite_or_accumulate() {
                    super::strided_operands_into_a_wider_c_overwrite_or_accumulate::<
                        $kernel,
                        $mr,
                        $nr,
                    >();
                }
            }
        };
    }

    #[cfg(target_arch = "x86_64")]
    kernel_tests!(
        avx512,
        Avx512,
        8,
        48,
        #[cfg_attr(not(host_avx512f), ignore = "the CPU that built the tests has no AVX-512F")]
    );
    #[cfg(target_arch = "x86_64")]
    kernel_tests!(
        avx2,
        Avx2,
        4,
        24,
        #[cfg_attr(not(host_avx2_fma), ignore = "the CPU that built the tests has no AVX2 and FMA")]
    );
    #[cfg(target_arch = "aarch64")]
    kernel_tests!(neon, Neon, 8, 12,);

    /// sgemm runs the widest kernel the CPU has.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_64_takes_the_widest_kernel_it_has() {
        let want = if std::is_x86_feature_detected!("avx512f") {
            Kernel::Avx512
        } else if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            Kernel::Avx2
        } else {
            Kernel::GemmCrate
        };
        assert_eq!(Kernel::widest(), want);
    }
}
