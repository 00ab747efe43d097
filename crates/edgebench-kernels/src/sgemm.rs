//! A row-major f32 GEMM for the operator benchmark's `dot` and its measured SGEMM roof:
//! BLIS-style blocking (B packed in KC x NC blocks shared by all threads, A packed per thread
//! in MC x KC blocks that stay in its core's L2) around a 4 x 24 AVX2/FMA microkernel chosen at
//! run time. CPUs without AVX2 and FMA, and other architectures, run the `gemm` crate.
//!
//! Why not the `gemm` crate everywhere: on an AMD Zen 3 (AVX2/FMA) its kernel left a fifth of
//! OpenBLAS's rate on the table; the figures are in docs/performance.md.

// Elsewhere only the `gemm` crate path is compiled; the blocking constants stay for the tests.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use rayon::prelude::*;

/// Rows of A (and C) per microkernel call.
const MR: usize = 4;
/// Columns of B (and C) per microkernel call: three 8-lane vectors. 4 x 24 needs 4 broadcasts
/// of A per 12 FMAs where 6 x 16 needs 6; on Zen 3 the microkernel alone ran at ~89 GFLOP/s
/// per core in L1 against ~70 for 6 x 16.
const NR: usize = 24;
/// 8-lane vectors per row of a tile.
const NV: usize = NR / 8;
/// Depth of a packed block: a KC x NR panel of B (18 KiB) stays in a 32 KiB L1d while the
/// microkernel walks down the A block (at KC = 256, 24 KiB, the kernel lost a quarter).
const KC: usize = 192;
/// Rows of a packed A block: MC x KC floats (108 KiB) stay in a 512 KiB L2 with room for
/// the B panels streaming through.
const MC: usize = 144;
/// Columns of a packed B block: KC x NC floats (3 MiB) are shared by all threads from L3.
const NC: usize = 4096;
/// Most floats of B packed at once (2 MiB): when B is narrow, several depth blocks share one
/// fork-join for their packing and one for their products, and a thread's rows of C stay in
/// its cache from one block to the next (two threads at n = 661: 117 -> 128 GFLOP/s, medians
/// of six alternating rounds). An 8 MiB limit measured 4-6 % slower at n = 2048, where the
/// blocks packed first are likelier to have left the cache before they are used.
const PACKED_B_FLOATS: usize = 1 << 19;

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
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        return blocked(a, b, c, (m, n, k));
    }
    crate::elementwise::gemm_crate(a, b, c, (m, n, k));
}

/// Whether [`sgemm`] runs its own AVX2/FMA kernel on this CPU (else the `gemm` crate).
pub fn native_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    return has_avx2_fma();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

/// A buffer of at least `len` floats starting on a 64-byte boundary (whole cache lines for
/// the microkernel's vector loads), reused between calls on the same thread.
#[cfg(target_arch = "x86_64")]
struct Aligned(Vec<f32>);

#[cfg(target_arch = "x86_64")]
impl Aligned {
    fn slice(&mut self, len: usize) -> &mut [f32] {
        if self.0.len() < len + 16 {
            self.0 = vec![0.0; len + 16];
        }
        let offset = self.0.as_ptr().align_offset(64).min(15);
        &mut self.0[offset..offset + len]
    }
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    static PACK_A: std::cell::RefCell<Aligned> = const { std::cell::RefCell::new(Aligned(Vec::new())) };
    static PACK_B: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Packs rows `pc..pc + kc` and columns `jc..jc + nc` of B (row stride `n`) into panels of NR
/// columns, each kc x NR row by row, the last one padded with zeros; in parallel by panel.
#[cfg(target_arch = "x86_64")]
fn pack_b(
    b: &[f32],
    n: usize,
    (pc, kc): (usize, usize),
    (jc, nc): (usize, usize),
    dst: &mut [f32],
) {
    dst.par_chunks_mut(kc * NR)
        .enumerate()
        .for_each(|(panel, dst)| {
            let j0 = jc + panel * NR;
            let cols = NR.min(jc + nc - j0);
            for (p, row) in dst.chunks_exact_mut(NR).enumerate() {
                let src = &b[(pc + p) * n + j0..][..cols];
                row[..cols].copy_from_slice(src);
                row[cols..].fill(0.0);
            }
        });
}

/// Packs the `rows` x kc block of A starting at `a` (row stride `k`, from column `pc`) into
/// panels of MR rows, each kc x MR column by column, the last one padded with zeros.
#[cfg(target_arch = "x86_64")]
fn pack_a(a: &[f32], k: usize, rows: usize, (pc, kc): (usize, usize), dst: &mut [f32]) {
    for (panel, dst) in dst.chunks_exact_mut(kc * MR).enumerate() {
        let i0 = panel * MR;
        let valid = MR.min(rows - i0);
        for i in 0..MR {
            if i < valid {
                let src = &a[(i0 + i) * k + pc..][..kc];
                for (p, &v) in src.iter().enumerate() {
                    dst[p * MR + i] = v;
                }
            } else {
                for p in 0..kc {
                    dst[p * MR + i] = 0.0;
                }
            }
        }
    }
}

/// The blocked product: for each group of KC x NC blocks of B (as many as fit in
/// [`PACKED_B_FLOATS`]), packed once and shared, every thread takes its own run of C's rows
/// and, block after block, packs those rows of A and runs the microkernel over them.
#[cfg(target_arch = "x86_64")]
fn blocked(a: &[f32], b: &[f32], c: &mut [f32], (m, n, k): (usize, usize, usize)) {
    let threads = rayon::current_num_threads().max(1);
    // An equal number of row blocks per thread, each at most about MC rows, in whole
    // microkernel rows: the threads finish together.
    let tasks = threads * m.div_ceil(threads * MC);
    let rows_per_task = m.div_ceil(tasks).next_multiple_of(MR);
    // Taken out of the thread-local while the pool runs: a worker that waits here may steal a
    // task that calls sgemm itself, which then packs into a buffer of its own.
    let mut pack_b_buf = Aligned(PACK_B.take());
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        let block_len = nc.div_ceil(NR) * NR * KC;
        // Depth blocks packed together, up to PACKED_B_FLOATS: one fork-join for their
        // packing and one for their products, and each thread's rows of C stay in its cache
        // from one depth block to the next.
        let group = (PACKED_B_FLOATS / block_len).max(1) * KC;
        for pg in (0..k).step_by(group) {
            let kg = group.min(k - pg);
            let packed_b = pack_b_buf.slice(nc.div_ceil(NR) * NR * kg);
            packed_b
                .par_chunks_mut(block_len)
                .enumerate()
                .for_each(|(blk, dst)| {
                    let pc = pg + blk * KC;
                    pack_b(b, n, (pc, KC.min(k - pc)), (jc, nc), dst)
                });
            let packed_b = &*packed_b;
            c.par_chunks_mut(rows_per_task * n)
                .zip(a.par_chunks(rows_per_task * k))
                .for_each(|(c, a)| {
                    let rows = c.len() / n;
                    PACK_A.with_borrow_mut(|pack_a_buf| {
                        for (blk, packed_b) in packed_b.chunks(block_len).enumerate() {
                            let pc = pg + blk * KC;
                            let kc = KC.min(k - pc);
                            let packed_a = pack_a_buf.slice(rows.div_ceil(MR) * MR * kc);
                            pack_a(a, k, rows, (pc, kc), packed_a);
                            // SAFETY: has_avx2_fma() was checked by the caller; the panels
                            // hold kc x MR and kc x NR floats, and the tile writes stay inside
                            // c's rows 0..rows and columns jc..jc + nc.
                            unsafe { macro_kernel(kc, packed_a, packed_b, c, n, jc, nc, pc == 0) }
                        }
                    });
                });
        }
    }
    PACK_B.set(pack_b_buf.0);
}

/// Every MR x NR tile of a thread's rows of C against one packed B block: B panel outer (it
/// stays in L1 while the A panels stream from L2), A panel inner.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn macro_kernel(
    kc: usize,
    packed_a: &[f32],
    packed_b: &[f32],
    c: &mut [f32],
    ldc: usize,
    jc: usize,
    nc: usize,
    overwrite: bool,
) {
    let rows = c.len() / ldc;
    for (jp, b_panel) in packed_b.chunks_exact(kc * NR).enumerate() {
        let j0 = jc + jp * NR;
        let cols = NR.min(jc + nc - j0);
        for (ip, a_panel) in packed_a.chunks_exact(kc * MR).enumerate() {
            let i0 = ip * MR;
            let valid_rows = MR.min(rows - i0);
            if valid_rows == MR && cols == NR {
                // SAFETY: rows i0..i0 + MR and columns j0..j0 + NR lie inside c.
                unsafe {
                    kernel(
                        kc,
                        a_panel.as_ptr(),
                        b_panel.as_ptr(),
                        c.as_mut_ptr().add(i0 * ldc + j0),
                        ldc,
                        overwrite,
                    )
                }
            } else {
                // An edge tile: the full tile into a scratch tile, then its valid part.
                let mut tile = [0f32; MR * NR];
                // SAFETY: the scratch tile is MR x NR with row stride NR.
                unsafe {
                    kernel(
                        kc,
                        a_panel.as_ptr(),
                        b_panel.as_ptr(),
                        tile.as_mut_ptr(),
                        NR,
                        true,
                    )
                };
                for i in 0..valid_rows {
                    let dst = &mut c[(i0 + i) * ldc + j0..][..cols];
                    let src = &tile[i * NR..][..cols];
                    if overwrite {
                        dst.copy_from_slice(src);
                    } else {
                        for (d, s) in dst.iter_mut().zip(src) {
                            *d += s;
                        }
                    }
                }
            }
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
unsafe fn kernel(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    use std::arch::x86_64::*;
    // The tile of C is read (or written) after kc steps: fetching it now hides a miss to
    // memory behind the loop instead of stalling at its end.
    for i in 0..MR {
        // SAFETY: prefetches do not fault; the addresses are the tile's rows.
        unsafe {
            let row = c.add(i * ldc);
            // A row of 24 floats spans two or three cache lines.
            _mm_prefetch::<_MM_HINT_T0>(row.cast());
            _mm_prefetch::<_MM_HINT_T0>(row.add(16).cast());
            _mm_prefetch::<_MM_HINT_T0>(row.add(NR - 1).cast());
        }
    }
    // The loop in assembly: written with intrinsics, LLVM spilled an accumulator of this tile
    // to the stack (all sixteen vector registers are in use) and the kernel ran at half speed.
    let mut acc = [_mm256_setzero_ps(); MR * NV];
    // SAFETY: the loop reads kc x 4 floats from a and kc x 24 from b (the panels' sizes),
    // writes only registers, and stores the twelve accumulators into acc (12 x 32 bytes).
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
            "vmovups [{acc}], ymm4",
            "vmovups [{acc} + 32], ymm5",
            "vmovups [{acc} + 64], ymm6",
            "vmovups [{acc} + 96], ymm7",
            "vmovups [{acc} + 128], ymm8",
            "vmovups [{acc} + 160], ymm9",
            "vmovups [{acc} + 192], ymm10",
            "vmovups [{acc} + 224], ymm11",
            "vmovups [{acc} + 256], ymm12",
            "vmovups [{acc} + 288], ymm13",
            "vmovups [{acc} + 320], ymm14",
            "vmovups [{acc} + 352], ymm15",
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            k = inout(reg) kc => _,
            r = out(reg) _,
            acc = in(reg) acc.as_mut_ptr(),
            out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
            out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
            out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
            out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
            options(nostack),
        );
    }
    for i in 0..MR {
        for v in 0..NV {
            let sum = acc[i * NV + v];
            // SAFETY: row i of the tile, NR floats, is valid for reads and writes.
            unsafe {
                let dst = c.add(i * ldc + 8 * v);
                let value = if overwrite {
                    sum
                } else {
                    _mm256_add_ps(sum, _mm256_loadu_ps(dst))
                };
                _mm256_storeu_ps(dst, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elementwise::fill;

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

    /// Shapes around every block edge (MR, NR, KC, MC, a group of packed depth blocks and a
    /// row split across threads), each against the f64 triple loop in pools of 1 to 16 threads.
    #[test]
    fn sgemm_matches_the_f64_reference_at_every_thread_count() {
        // B packed in three groups of depth blocks, the last one partial.
        let (groups_n, groups_k): (usize, usize) = (1000, 900);
        let group_depth = PACKED_B_FLOATS / (groups_n.div_ceil(NR) * NR * KC) * KC;
        assert!(group_depth > KC && groups_k.div_ceil(group_depth) == 3);
        let shapes = [
            (1, 1, 1),
            (5, 17, 3),
            (6, 16, 1),
            (7, 15, 2),
            (37, 41, 29),
            (13, 33, KC + 1),
            (MC + 7, 2 * NR + 5, KC * 2 + 3),
            (2 * MC + 1, 50, 70),
            (300, 9, 11),
            (4, NC + 21, 5),
            (9, groups_n, groups_k),
        ];
        crate::test_util::on_thread_counts(|| {
            let threads = rayon::current_num_threads();
            for (s, &(m, n, k)) in shapes.iter().enumerate() {
                let a: Vec<f32> = fill(m * k, 11 + s as u64, -1.0, 1.0);
                let b: Vec<f32> = fill(k * n, 23 + s as u64, -1.0, 1.0);
                let want = reference(&a, &b, (m, n, k));
                // Stale values in C must be overwritten, not added to.
                let mut c = vec![f32::NAN; m * n];
                sgemm(&a, &b, &mut c, (m, n, k));
                for (idx, (&got, &want)) in c.iter().zip(&want).enumerate() {
                    assert!(
                        (got as f64 - want).abs() <= 1e-5 * k as f64 + 1e-6,
                        "{threads} threads, {m}x{n}x{k}: c[{}, {}] = {got}, want {want}",
                        idx / n,
                        idx % n
                    );
                }
            }
        });
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
        let a: Vec<f32> = fill(m * k, 5, -1.0, 1.0);
        let b: Vec<f32> = fill(k * n, 6, -1.0, 1.0);
        let mut ours = vec![0f32; m * n];
        let mut theirs = vec![0f32; m * n];
        sgemm(&a, &b, &mut ours, (m, n, k));
        crate::elementwise::gemm_crate(&a, &b, &mut theirs, (m, n, k));
        let worst = ours
            .iter()
            .zip(&theirs)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-4, "worst difference {worst}");
    }
}
