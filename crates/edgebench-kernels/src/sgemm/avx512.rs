//! The 8 x 48 AVX-512F microkernel (x86_64), its narrow edge kernels and its A-panel
//! transpose.

use super::{prefetch_tile, Microkernel};

/// 8 x 48 AVX-512F: three 16-lane vectors of B and 24 of the 32 vector registers as
/// accumulators; 24 FMAs per 3 loads of B and 8 broadcasts of A (4 x 96 would need a B panel
/// twice as wide, which no L1d holds at a useful depth).
pub(super) struct Avx512;

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
        (a, lda): (*const f32, usize),
        (b, ldb): (*const f32, usize),
        c: *mut f32,
        ldc: usize,
        overwrite: bool,
    ) {
        debug_assert_eq!((lda, ldb), (8, 48), "this kernel reads packed panels only");
        // SAFETY: as the caller promises.
        unsafe { avx512_kernel(kc, a, b, c, ldc, overwrite) }
    }

    /// A last panel of up to 16 or 32 wanted columns computes one or two vectors per row, not
    /// three: a skinny product (the MLP's hidden layer of 100) wastes at most 15 columns.
    unsafe fn edge_kernel(
        kc: usize,
        (a, lda): (*const f32, usize),
        b: *const f32,
        tile: *mut f32,
        cols: usize,
    ) {
        debug_assert_eq!(lda, 8, "this kernel reads packed panels only");
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

/// `dst[p * 8 + i] = rows[i][p]`, eight columns at a time by an 8 x 8 register transpose and
/// eight full-vector stores.
///
/// # Safety
/// AVX2 present.
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

/// Element `$i` of step `$p`'s column of A broadcast into `$v` times the step's three vectors of
/// B (zmm0..zmm2), added into row `$i`'s accumulators, as assembly text.
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
