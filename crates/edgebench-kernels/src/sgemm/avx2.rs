//! The 4 x 24 AVX2/FMA microkernel (x86_64) and its A-panel transpose.

use super::{prefetch_tile, Microkernel};

/// 4 x 24 AVX2/FMA: three 8-lane vectors of B. 4 x 24 needs 4 broadcasts of A per 12 FMAs where
/// 6 x 16 needs 6; on Zen 3 the microkernel alone ran at ~89 GFLOP/s per core in L1 against ~70
/// for 6 x 16.
pub(super) struct Avx2;

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
        (a, lda): (*const f32, usize),
        (b, ldb): (*const f32, usize),
        c: *mut f32,
        ldc: usize,
        overwrite: bool,
    ) {
        debug_assert_eq!((lda, ldb), (4, 24), "this kernel reads packed panels only");
        // SAFETY: as the caller promises.
        unsafe { avx2_kernel(kc, a, b, c, ldc, overwrite) }
    }
}

/// `dst[p * 4 + i] = rows[i][p]`, eight columns at a time by a 4 x 8 register transpose and
/// four full-vector stores rather than four strided scalar stores per column.
///
/// # Safety
/// AVX2 present.
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

/// One step of the microkernel's loop, as assembly text: row `$p` of the packed B panel (three
/// vectors) times each of the four A values of that step (broadcast), added into the twelve
/// accumulators ymm4..ymm15.
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
