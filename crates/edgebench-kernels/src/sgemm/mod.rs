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
use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
mod portable;
#[cfg(test)]
mod tests;

#[cfg(target_arch = "x86_64")]
use avx2::Avx2;
#[cfg(target_arch = "x86_64")]
use avx512::Avx512;
#[cfg(target_arch = "aarch64")]
use neon::{transpose_rows_neon, Neon};
pub(crate) use portable::gemm_crate;

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

    /// C[0..MR][0..NR] (row stride `ldc`) = (or +=, unless `overwrite`) the product of kc
    /// columns of MR floats of A, `lda` floats apart (MR: a packed panel, column by column), and
    /// kc rows of NR floats of B, `ldb` floats apart (NR: a packed panel, row by row).
    ///
    /// # Safety
    /// [`Self::available`]; kc >= 1; the MR floats at `a + p·lda` and the NR floats at
    /// `b + p·ldb` are readable for p < kc; `lda` is MR unless [`Self::A_COLUMNS_IN_PLACE`],
    /// and `ldb` is NR unless [`Self::B_ROWS_IN_PLACE`]; the MR x NR tile of `c` is valid for
    /// reads and writes.
    unsafe fn kernel(
        kc: usize,
        a: (*const f32, usize),
        b: (*const f32, usize),
        c: *mut f32,
        ldc: usize,
        overwrite: bool,
    );

    /// Whether [`Self::kernel`] takes B's rows at any stride: then a narrow row-major B (see
    /// [`IN_PLACE_COLUMNS`]) is read where it lies instead of packed.
    const B_ROWS_IN_PLACE: bool = false;

    /// Whether [`Self::kernel`] and [`Self::edge_kernel`] take A's columns at any stride: then
    /// a column-major A of a narrow product (see [`IN_PLACE_COLUMNS`]) is read where it lies;
    /// only a last panel of fewer than MR rows is packed.
    const A_COLUMNS_IN_PLACE: bool = false;

    /// The tile of an edge panel whose first `cols` (<= NR) columns are wanted, overwritten into
    /// an MR x NR scratch tile (row stride NR), which may be uninitialised: at least those
    /// columns of every row are written; by default the whole tile, its other columns computed
    /// from the zero padding.
    ///
    /// # Safety
    /// As for [`Self::kernel`] with `ldb` = NR (B's rows as a packed panel's), with `tile` valid
    /// for MR x NR floats.
    unsafe fn edge_kernel(
        kc: usize,
        a: (*const f32, usize),
        b: *const f32,
        tile: *mut f32,
        cols: usize,
    ) {
        let _ = cols;
        // SAFETY: as the caller promises.
        unsafe { Self::kernel(kc, a, (b, NR), tile, NR, true) }
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
/// `jc + first_panel * NR`), each kc x NR row by row. Columns of a last, partial panel past
/// `jc + nc` hold whatever floats lie there (B's next columns or a repeat of its last wanted
/// one): the microkernel computes those tile columns, and the macro-kernel never stores them.
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
            if b.rs == 1 && NR.is_multiple_of(4) && j_run + g * NR < jc + nc {
                // A partial panel repeats its last wanted column: the same transposes, where
                // scalar copies took about twice the instructions of the whole panel's.
                let last = jc + nc - 1;
                let cols: [&[f32]; NR] = std::array::from_fn(|j| {
                    let col = (j_run + g * NR + j).min(last);
                    &b.data[col * b.cs + pc..][..kc]
                });
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
    for (g, panel) in dst.chunks_exact_mut(panel_len).enumerate() {
        // Row p of the panel from row pc + p of B: fixed-size copies, inlined vector moves,
        // not a memcpy call per row. A partial panel's rows are copied whole as well, as far as
        // B's floats reach (past its wanted columns they run into B's next columns or rows);
        // column by column its scalar copies took about as many instructions as the whole
        // panels' copies.
        let j0 = j_run + g * NR;
        let first = pc * b.rs + j0;
        let whole_rows = if j0 + NR <= jc + nc {
            kc
        } else {
            match b.data.len().checked_sub(first + NR) {
                Some(room) => (room / b.rs.max(1) + 1).min(kc),
                None => 0,
            }
        };
        copy_runs::<NR>(
            (&b.data[first.min(b.data.len())..], b.rs),
            (panel, NR),
            whole_rows,
        );
        let wanted = (jc + nc).saturating_sub(j0).min(NR);
        for p in whole_rows..kc {
            let row = &mut panel[p * NR..][..NR];
            row[..wanted].copy_from_slice(&b.data[(pc + p) * b.rs + j0..][..wanted]);
            row[wanted..].fill(0.0);
        }
    }
}

/// Copies `count` runs of `R` floats, run i from `src[i·src_stride..]` to
/// `dst[i·dst_stride..]`, two per step. The bounds are checked once, for the last run: per run,
/// the checked slice copies of the packing took twice to three times the instructions of the
/// copy itself.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn copy_runs<const R: usize>(
    (src, src_stride): (&[f32], usize),
    (dst, dst_stride): (&mut [f32], usize),
    count: usize,
) {
    if count == 0 {
        return;
    }
    assert!(
        src.len() >= (count - 1) * src_stride + R && dst.len() >= (count - 1) * dst_stride + R,
        "copy_runs: the last run lies past its slice"
    );
    let (from, to) = (src.as_ptr(), dst.as_mut_ptr());
    let copy = |i: usize| {
        // SAFETY: run i < count lies inside both slices (the last one was checked above),
        // and a shared and a mutable slice do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(from.add(i * src_stride), to.add(i * dst_stride), R)
        }
    };
    for i in (0..count - count % 2).step_by(2) {
        copy(i);
        copy(i + 1);
    }
    if count % 2 == 1 {
        copy(count - 1);
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
            // One bounds check for the panel's rows, not one per row (a sixth of the packing's
            // instructions at GoogLeNet's depths).
            let first = i0 * a.rs + pc;
            let rows = &a.data[first..first + (MR - 1) * a.rs + kc];
            // SAFETY: row i < MR spans rows[i·rs..i·rs + kc], inside `rows` (checked above).
            let src: [&[f32]; MR] =
                std::array::from_fn(|i| unsafe { rows.get_unchecked(i * a.rs..i * a.rs + kc) });
            // SAFETY: the caller's promise.
            unsafe { K::transpose_rows(src, dst) };
            continue;
        }
        if valid == MR && a.rs == 1 {
            // A stored transposed: each column of the panel is MR contiguous floats.
            copy_runs::<MR>((&a.data[i0 + pc * a.cs..], a.cs), (dst, MR), kc);
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

/// Run `index` of `units` units cut into `parts` runs whose sizes differ by at most one unit:
/// equal shares let the threads finish together (cut into runs of 136 rows, 2383 rows give two
/// threads 9 and 8.5 runs' work in every depth block; even runs are 0-7 % faster on two threads
/// at n = 661 to 2383).
fn even_run(units: usize, parts: usize, index: usize) -> std::ops::Range<usize> {
    index * units / parts..(index + 1) * units / parts
}

/// Most columns of a product whose row-major B a microkernel with
/// [`Microkernel::B_ROWS_IN_PLACE`] reads where it lies instead of packing it (as BLIS's
/// unpacked path for skinny products does): a depth block of it (KC rows, 256 KiB at KC = 256)
/// fits in L2, where its rows of NR floats are read as a packed panel's would be, and the copy
/// is saved. GoogLeNet's products at batch 1 are 16 to 196 columns wide (Winograd tiles, 14x14
/// and 7x7 maps); copying their B is 0.7 % of the step's instructions on aarch64. The same
/// bound holds for a column-major A read in place ([`Microkernel::A_COLUMNS_IN_PLACE`]): its
/// strided columns are read again from L2 by each of at most 22 tiles, where a packed panel
/// is copied once per task and depth block and then read contiguously; wider products reuse
/// each panel over more tiles and keep the copy (GoogLeNet's batch-1 step spent 7.3 M
/// instructions copying A of the narrow ones).
const IN_PLACE_COLUMNS: usize = 256;

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
    // A narrow row-major B is read where it lies; only each depth block's last, partial panel
    // is packed.
    let b_in_place = K::B_ROWS_IN_PLACE && b.cs == 1 && n <= IN_PLACE_COLUMNS;
    // So is a column-major A of such a product; only a task's last panel of fewer than MR rows
    // is packed.
    let a_in_place = K::A_COLUMNS_IN_PLACE && a.rs == 1 && n <= IN_PLACE_COLUMNS;
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
            let (panels, block_len) = (group.panels(), group.block_len());
            let runs = if b_in_place {
                usize::from(!group.nc.is_multiple_of(NR))
            } else {
                group.runs_per_block()
            };
            let items = group.blocks() * runs;
            while let Some(item) = claim(&progress.next_run, items) {
                let (blk, run) = (item / runs, item % runs);
                let pc = group.pg + blk * K::KC;
                let kc = K::KC.min(group.pg + group.kg - pc);
                let run_panels = if b_in_place {
                    panels - 1..panels
                } else {
                    even_run(panels, runs, run)
                };
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
                // Rows packed: all, or with A in place only a last panel of fewer than MR.
                let first_packed = if a_in_place { rows - rows % MR } else { 0 };
                let packed_rows = rows - first_packed;
                let a_packed = Operand {
                    data: &a.data[first_packed * a.rs..],
                    ..a
                };
                PACK_A.with_borrow_mut(|pack_a_buf| {
                    for (blk, packed_b) in packed_group.chunks(block_len).enumerate() {
                        let pc = group.pg + blk * K::KC;
                        let kc = K::KC.min(k - pc);
                        let packed_a = pack_a_buf.slice(packed_rows.div_ceil(MR) * MR * kc);
                        // SAFETY: K::available(), the caller's promise.
                        unsafe { pack_a::<K, MR, NR>(a_packed, packed_rows, (pc, kc), packed_a) };
                        let overwrite = pc == 0 && !accumulate;
                        let a_cols = a_in_place.then(|| (a.data[pc * a.cs..].as_ptr(), a.cs));
                        let b_rows =
                            b_in_place.then(|| (b.data[pc * b.rs + group.jc..].as_ptr(), b.rs));
                        // SAFETY: native_kernel() holds (the caller's promise); the packed
                        // panels hold kc x MR and kc x NR floats, A and B read in place reach
                        // kc columns of this task's rows and kc rows of columns jc..jc + nc,
                        // and the tile writes stay inside this task's rows 0..rows and
                        // columns jc..jc + nc of C.
                        unsafe {
                            macro_kernel::<K, MR, NR>(
                                kc,
                                (packed_a, packed_b),
                                (c, rows, ldc),
                                (group.jc, group.nc),
                                (a_cols, b_rows),
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

/// An operand read where it lies, if it is: its first float and its stride (A's columns' or
/// B's rows').
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
type InPlace = Option<(*const f32, usize)>;

/// Every MR x NR tile of a thread's rows of C against one packed B block: B panel outer (it
/// stays in L1 while the A panels stream from L2), A panel inner. With `b_rows` (the block's
/// first row of B at its column `jc`, and B's row stride), the full panels are read from B's
/// rows instead: only a last, partial panel comes from `packed_b`. Likewise with `a_cols` (the
/// block's first column of A at the task's first row, and A's column stride), the panels of
/// MR rows are read from A's columns: `packed_a` then holds only a last panel of fewer rows.
///
/// # Safety
/// The microkernel's instructions are present; `c` is valid for reads and writes of `rows`
/// rows (row stride `ldc`) of columns `jc..jc + nc`; `a_cols`, if given, reaches kc columns of
/// rows 0..rows of A and [`Microkernel::A_COLUMNS_IN_PLACE`] holds; `b_rows`, if given,
/// reaches kc rows of columns `jc..jc + nc` of B and [`Microkernel::B_ROWS_IN_PLACE`] holds.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe fn macro_kernel<K: Microkernel<MR, NR>, const MR: usize, const NR: usize>(
    kc: usize,
    (packed_a, packed_b): (&[f32], &[f32]),
    (c, rows, ldc): (*mut f32, usize, usize),
    (jc, nc): (usize, usize),
    (a_cols, b_rows): (InPlace, InPlace),
    overwrite: bool,
) {
    let a_panels = rows.div_ceil(MR);
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
        // B read in place is narrow: its rows are in L2 already.
        let next_lines = match b_rows {
            Some(_) => 0,
            None => b_panel_lines.min(next_b.len() / 16),
        };
        let b_src = match b_rows {
            Some((first, ldb)) if cols == NR => (first.wrapping_add(jp * NR), ldb),
            _ => (b_panel.as_ptr(), NR),
        };
        for ip in 0..a_panels {
            let i0 = ip * MR;
            let a_src = match a_cols {
                Some((first, lda)) if i0 + MR <= rows => (first.wrapping_add(i0), lda),
                Some(_) => (packed_a.as_ptr(), MR),
                None => (packed_a[ip * kc * MR..].as_ptr(), MR),
            };
            let first_line = ip * lines_per_tile;
            prefetch_l2_lines(
                next_b.as_ptr().wrapping_add(first_line * 16),
                lines_per_tile.min(next_lines.saturating_sub(first_line)),
            );
            let valid_rows = MR.min(rows - i0);
            if valid_rows == MR && cols == NR {
                // SAFETY: rows i0..i0 + MR and columns j0..j0 + NR lie inside c; panels read
                // in place are full ones, inside A and B (the caller's promise).
                unsafe { K::kernel(kc, a_src, b_src, c.add(i0 * ldc + j0), ldc, overwrite) }
            } else {
                // An edge tile: the full tile into a scratch tile, then its valid part.
                let mut tile = [[std::mem::MaybeUninit::<f32>::uninit(); NR]; MR];
                let tile_at = tile.as_mut_ptr().cast::<f32>();
                // SAFETY: the scratch tile is MR x NR with row stride NR; the panels are packed,
                // or full ones read in place (as above).
                unsafe {
                    if b_src.1 == NR {
                        K::edge_kernel(kc, a_src, b_src.0, tile_at, cols)
                    } else {
                        K::kernel(kc, a_src, b_src, tile_at, NR, true)
                    }
                };
                for (i, row) in tile.iter().enumerate().take(valid_rows) {
                    // SAFETY: the kernels wrote (at least) the first `cols` floats of every row
                    // of the tile; row i0 + i, columns j0..j0 + cols, lie inside c; a
                    // destination that is overwritten may be uninitialised, so it is written
                    // through the pointer, and one that is added to is initialised (the
                    // caller's promise).
                    unsafe {
                        let src = row.as_ptr().cast::<f32>();
                        let dst = c.add((i0 + i) * ldc + j0);
                        if overwrite {
                            crate::util::copy_few(src, dst, cols);
                        } else {
                            let src = std::slice::from_raw_parts(src, cols);
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

/// Fetches `lines` consecutive cache lines from `first` into L2. On aarch64 four per loop step:
/// one at a time, the loop's counter, address and branch took four of every five of its
/// instructions (GoogLeNet's batch-8 step counted 0.5 % fewer under qemu). x86 keeps one per
/// step: no timing there has compared the two.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
fn prefetch_l2_lines(first: *const f32, lines: usize) {
    let mut line = first;
    #[cfg(target_arch = "aarch64")]
    let lines = {
        for _ in 0..lines / 4 {
            prefetch_l2_four(line);
            line = line.wrapping_add(64);
        }
        lines % 4
    };
    for _ in 0..lines {
        prefetch_l2(line);
        line = line.wrapping_add(16);
    }
}

/// Fetches the four cache lines from `first` on into L2: one asm block with immediate offsets,
/// where four calls of `prefetch_l2` would each compute the address into a register.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn prefetch_l2_four(first: *const f32) {
    // SAFETY: PRFM is a hint that does not fault and writes no register.
    unsafe {
        std::arch::asm!(
            "prfm pldl2keep, [{line}]",
            "prfm pldl2keep, [{line}, #64]",
            "prfm pldl2keep, [{line}, #128]",
            "prfm pldl2keep, [{line}, #192]",
            line = in(reg) first,
            options(nostack, preserves_flags, readonly)
        )
    };
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
