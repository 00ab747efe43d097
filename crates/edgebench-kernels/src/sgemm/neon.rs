//! The 8 x 12 NEON microkernel (aarch64), its narrow edge kernels and the panel transpose
//! that packs A (and a B stored transposed).

use super::Microkernel;

// aarch64, for the Jetson boards' cores: Cortex-A57 (32 KiB L1d, 2 MiB L2 shared by four
// cores), Carmel (64 KiB L1d, 2 MiB L2 per pair of cores, 4 MiB L3) and Cortex-A78AE (64 KiB
// L1d, 256 KiB L2 per core, 2 MiB L3 per cluster of four). Chosen from those sizes; no ARM
// machine has timed them.

/// BLIS's Cortex-A57 shape, 8 x 12: three 4-lane vectors of B. Its 24 accumulators take
/// v8..v31, and one step's 8 values of A and 12 of B take five of the remaining eight
/// registers: 24 FMAs per 5 vector loads.
pub(super) struct Neon;

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

    /// The step's B row loads with a register post-increment: the same instruction whatever
    /// the stride.
    const B_ROWS_IN_PLACE: bool = true;

    /// A read in place takes a loop of its own, one load per step stepping `lda` by a register
    /// post-increment (see `neon_kernel`).
    const A_COLUMNS_IN_PLACE: bool = true;

    unsafe fn kernel(
        kc: usize,
        a: (*const f32, usize),
        b: (*const f32, usize),
        c: *mut f32,
        ldc: usize,
        overwrite: bool,
    ) {
        // SAFETY: as the caller promises.
        unsafe { neon_kernel(kc, a, b, c, ldc, overwrite) }
    }

    /// A last panel of up to 4 or 8 wanted columns computes one or two vectors per row, not
    /// three: GoogLeNet's 7x7 and 14x14 maps (49 and 196 columns) leave 1 and 4. One wanted
    /// column (49 = 4 x 12 + 1: also the Winograd tiles of a 13x13 map) takes a kernel of its
    /// own, 2 FMAs per step instead of 8.
    unsafe fn edge_kernel(
        kc: usize,
        a: (*const f32, usize),
        b: *const f32,
        tile: *mut f32,
        cols: usize,
    ) {
        // SAFETY: as the caller promises.
        unsafe {
            match cols.div_ceil(4) {
                1 if cols == 1 => neon_edge_column(kc, a, b, tile),
                1 => neon_edge_kernel::<1>(kc, a, b, tile),
                2 => neon_edge_kernel::<2>(kc, a, b, tile),
                _ => neon_kernel(kc, a, (b, 12), tile, 12, true),
            }
        }
    }
}

/// `dst[p * R + i] = rows[i][p]`, four depths and four rows at a time by 4 x 4 register
/// transposes and full-vector stores, rather than R strided scalar stores per depth: an A panel
/// (R = 8) from its rows, or a B panel (R = 12) from the columns of a B stored transposed.
pub(super) fn transpose_rows_neon<const R: usize>(rows: &[&[f32]; R], dst: &mut [f32]) {
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
                vst1q_f32(out, vreinterpretq_f32_f64(low_halves(t0, t2)));
                vst1q_f32(out.add(R), vreinterpretq_f32_f64(low_halves(t1, t3)));
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

/// (a[0], b[0]) as one `zip1`: LLVM lowers `vtrn1q_f64` to a register copy and an insert
/// when `a` is still live (it was, for both of the transpose's pairs), two instructions.
#[inline(always)]
fn low_halves(
    a: std::arch::aarch64::float64x2_t,
    b: std::arch::aarch64::float64x2_t,
) -> std::arch::aarch64::float64x2_t {
    let out;
    // SAFETY: one register-to-register instruction of the aarch64 baseline.
    unsafe {
        std::arch::asm!(
            "zip1 {out:v}.2d, {a:v}.2d, {b:v}.2d",
            out = lateout(vreg) out,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// `$op` (fmla or fmul) by lane, as assembly text: for each position, accumulator `v$acc`
/// (+)= B's vector `v$b` times lane `$lane` of A's `v$a`.
macro_rules! neon_by_lane {
    ($op:literal, [$($acc:literal),*], [$($b:literal),*], [$($a:literal),*], [$($lane:literal),*]) => {
        concat!($($op, " v", $acc, ".4s, v", $b, ".4s, v", $a, ".s[", $lane, "]\n",)*)
    };
}

/// One step of the NEON microkernel, as assembly text: the step's 8 values of A in `$lo` (rows
/// 0-3) and `$hi` (rows 4-7) times its row of B, loaded here into v4, v5, v6 with one
/// three-register load (which then steps `{ldb}` bytes on, to the next row), added into the
/// accumulators by `fmla` (or written to them by `fmul`), row i of C in v(8 + 3i)..v(10 + 3i).
macro_rules! neon_step {
    ($op:literal, $lo:literal, $hi:literal) => {
        concat!(
            "ld1 {{v4.4s, v5.4s, v6.4s}}, [{b}], {ldb}\n",
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

/// Loads a row of C (at `{cp}`, which then moves to the next row) into its accumulators.
macro_rules! neon_load_row {
    ($x:literal, $y:literal, $z:literal) => {
        concat!(
            "ld1 {{v",
            $x,
            ".4s, v",
            $y,
            ".4s, v",
            $z,
            ".4s}}, [{cp}], {ldc}\n"
        )
    };
}

/// Four steps with A from a packed panel, as assembly text. A streams from L2 (a new panel
/// every tile): two cache lines of it fetched ahead per four steps, while the B panel stays in
/// L1. Multi-register loads: A for two steps in one (v0-v3), each step's B in one, so 96 FMAs
/// take 6 loads (pairs and singles would take 12).
macro_rules! neon_packed_a_steps {
    () => {
        concat!(
            "prfm pldl1keep, [{a}, #256]\n",
            "prfm pldl1keep, [{a}, #320]\n",
            "ld1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{a}], #64\n",
            neon_step!("fmla", "0", "1"),
            neon_step!("fmla", "2", "3"),
            "ld1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{a}], #64\n",
            neon_step!("fmla", "0", "1"),
            neon_step!("fmla", "2", "3"),
        )
    };
}

/// Four steps with A's columns read where they lie, `{lda}` bytes apart, as assembly text.
macro_rules! neon_in_place_a_steps {
    () => {
        concat!(
            "ld1 {{v0.4s, v1.4s}}, [{a}], {lda}\n",
            "ld1 {{v2.4s, v3.4s}}, [{a}], {lda}\n",
            neon_step!("fmla", "0", "1"),
            neon_step!("fmla", "2", "3"),
            "ld1 {{v0.4s, v1.4s}}, [{a}], {lda}\n",
            "ld1 {{v2.4s, v3.4s}}, [{a}], {lda}\n",
            neon_step!("fmla", "0", "1"),
            neon_step!("fmla", "2", "3"),
        )
    };
}

/// Stores a row's accumulators to C (at `{c}`, which then moves to the next row).
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
macro_rules! neon_prefetch_row {
    ($x:literal, $y:literal, $z:literal) => {
        "prfm pldl1keep, [{cp}]\nprfum pldl1keep, [{cp}, #44]\nadd {cp}, {cp}, {ldc}\n"
    };
}

/// C[0..8][0..12] (row stride `ldc`) = (or +=, unless `overwrite`) the product of kc columns
/// of 8 floats of A, `lda` floats apart (8: a packed panel), and kc rows of 12 floats of B,
/// `ldb` floats apart (12: a packed panel): 24 4-lane accumulators, each step one 8-float
/// column of A and one 12-float row of B, three FMAs per element of A (by lane, without a
/// broadcast).
///
/// # Safety
/// kc >= 1; the 8 floats at `a + p·lda` and the 12 floats at `b + p·ldb` are readable for
/// p < kc; the 8 x 12 tile of `c` is valid for reads and writes.
unsafe fn neon_kernel(
    kc: usize,
    (a, lda): (*const f32, usize),
    (b, ldb): (*const f32, usize),
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    // The loop in assembly, as on x86_64: the 24 accumulators and the step's five operands
    // take 29 of the 32 vector registers, and code generated from intrinsics tends to spill
    // with that many live values. Only base ASIMD instructions: a Cortex-A57 runs them.
    // SAFETY: the loop reads 8 floats of each of a's kc columns and 12 floats of each of b's
    // kc rows and writes only registers; the 8 x 12 tile of c is read before it (unless
    // overwrite) and written after it; prefetches do not fault.
    unsafe {
        std::arch::asm!(
            "mov {cp}, {c}",
            "cbz {overwrite}, 8f",
            // Overwritten, the tile of C is written after kc steps: fetching it now hides a
            // miss behind the loop instead of stalling at its end. The first step multiplies
            // into the accumulators instead of zeroing them and adding (kc >= 1, the caller's
            // promise): 24 instructions fewer per tile.
            neon_rows!(neon_prefetch_row),
            "ld1 {{v0.4s, v1.4s}}, [{a}], {lda}",
            neon_step!("fmul", "0", "1"),
            "b 9f",
            // Added to, the tile is loaded into the accumulators before the first step, which
            // then adds like every other: 48 instructions fewer per tile than fetching it
            // first and adding it after the loop.
            "8:",
            neon_rows!(neon_load_row),
            "ld1 {{v0.4s, v1.4s}}, [{a}], {lda}",
            neon_step!("fmla", "0", "1"),
            "9:",
            "sub {k}, {k}, #1",
            // Eight steps per iteration (its count and branch are 2 of 210 instructions; per
            // four steps they would be 2 of 106), then the remaining ones one at a time.
            "and {r}, {k}, #7",
            "lsr {k}, {k}, #3",
            "cbz {k}, 4f",
            "cmp {lda}, #32",
            "b.ne 7f",
            "2:",
            neon_packed_a_steps!(),
            neon_packed_a_steps!(),
            "subs {k}, {k}, #1",
            "b.ne 2b",
            "b 4f",
            // A read where it lies: one load per step, as many instructions per four steps as
            // the packed loop's loads and prefetches (the hardware prefetcher follows a
            // constant stride).
            "7:",
            neon_in_place_a_steps!(),
            neon_in_place_a_steps!(),
            "subs {k}, {k}, #1",
            "b.ne 7b",
            "4:",
            "cbz {r}, 3f",
            "5:",
            "ld1 {{v0.4s, v1.4s}}, [{a}], {lda}",
            neon_step!("fmla", "0", "1"),
            "subs {r}, {r}, #1",
            "b.ne 5b",
            "3:",
            neon_rows!(neon_store_row),
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            k = inout(reg) kc => _,
            r = out(reg) _,
            c = inout(reg) c => _,
            cp = out(reg) _,
            ldc = in(reg) ldc * 4,
            lda = in(reg) lda * 4,
            ldb = in(reg) ldb * 4,
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
macro_rules! neon_edge_step {
    ($op:literal, $b:literal, $lo:literal, $hi:literal, [$($acc:literal),*]) => {
        neon_by_lane!($op, [$($acc),*], [$b, $b, $b, $b, $b, $b, $b, $b],
            [$lo, $lo, $lo, $lo, $hi, $hi, $hi, $hi], ["0", "1", "2", "3", "0", "1", "2", "3"])
    };
}

/// The edge kernel's loop around its steps, as one `asm!`: `$first` (the first step, which
/// multiplies), then pairs of steps (`$pair`, A for both in v0-v3), a last single step
/// (`$single`) when kc - 1 is odd, and `$store`, which writes the 8 rows (12 floats apart).
macro_rules! neon_edge_asm {
    (($a:expr, $b:expr, $kc:expr, $tile:expr), first: [$($first:expr),*], pair: [$($pair:expr),*],
     single: [$($single:expr),*], store: [$($store:expr),*]) => {
        std::arch::asm!(
            "ld1 {{v0.4s, v1.4s}}, [{a}], {lda}",
            $($first,)*
            "sub {k}, {k}, #1",
            "and {r}, {k}, #1",
            "lsr {k}, {k}, #1",
            "cbz {k}, 4f",
            "cmp {lda}, #32",
            "b.ne 7f",
            "2:",
            "ld1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{a}], #64",
            $($pair,)*
            "subs {k}, {k}, #1",
            "b.ne 2b",
            "b 4f",
            // A read where it lies (see `neon_kernel`).
            "7:",
            "ld1 {{v0.4s, v1.4s}}, [{a}], {lda}",
            "ld1 {{v2.4s, v3.4s}}, [{a}], {lda}",
            $($pair,)*
            "subs {k}, {k}, #1",
            "b.ne 7b",
            "4:",
            "cbz {r}, 3f",
            "ld1 {{v0.4s, v1.4s}}, [{a}], {lda}",
            $($single,)*
            "3:",
            $($store,)*
            a = inout(reg) $a.0 => _,
            lda = in(reg) $a.1 * 4,
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

/// One step of the one-column edge kernel, as assembly text: A's column (v0, v1, then `{a}`
/// steps `{lda}` bytes on) times the first float of B's row (v2, then `{b}` steps to the next
/// row), into the accumulators of rows 0-3 (`v$lo`) and 4-7 (`v$hi`).
macro_rules! neon_column_step {
    ($lo:literal, $hi:literal) => {
        concat!(
            "ld1 {{v0.4s, v1.4s}}, [{a}], {lda}\n",
            "ldr s2, [{b}], #48\n",
            "fmla v",
            $lo,
            ".4s, v0.4s, v2.s[0]\n",
            "fmla v",
            $hi,
            ".4s, v1.4s, v2.s[0]\n",
        )
    };
}

/// The first column of the NEON tile, overwritten into `tile` (row stride 12): A's 8-float
/// column times the first float of B's row, per step two FMAs (rows 0-3 and 4-7) by lane,
/// into four pairs of accumulators (steps mod 4), so that consecutive FMAs into one register
/// do not wait on each other. Eight steps per iteration, every load stepping its own pointer:
/// 4.25 instructions per step (the intrinsics' loop compiles to 5.75 with A in place).
///
/// # Safety
/// kc >= 1; the 8 floats at `a + p·lda` are readable for p < kc, and `b` holds 12 kc floats;
/// `tile` is valid for 8 x 12 floats.
// Not inlined: inside the macro kernel it changed the code of the full tiles' path.
#[inline(never)]
unsafe fn neon_edge_column(
    kc: usize,
    (a, lda): (*const f32, usize),
    b: *const f32,
    tile: *mut f32,
) {
    // SAFETY: step p reads a[p·lda..p·lda + 8] and b[12p] (p < kc, inside the operands), and
    // the stores write column 0 of the tile's 8 rows.
    unsafe {
        std::arch::asm!(
            "movi v16.16b, #0", "movi v17.16b, #0", "movi v18.16b, #0", "movi v19.16b, #0",
            "movi v20.16b, #0", "movi v21.16b, #0", "movi v22.16b, #0", "movi v23.16b, #0",
            "and {r}, {k}, #7",
            "lsr {k}, {k}, #3",
            "cbz {k}, 2f",
            "1:",
            neon_column_step!("16", "17"),
            neon_column_step!("18", "19"),
            neon_column_step!("20", "21"),
            neon_column_step!("22", "23"),
            neon_column_step!("16", "17"),
            neon_column_step!("18", "19"),
            neon_column_step!("20", "21"),
            neon_column_step!("22", "23"),
            "subs {k}, {k}, #1",
            "b.ne 1b",
            "2:",
            "cbz {r}, 3f",
            "4:",
            neon_column_step!("16", "17"),
            "subs {r}, {r}, #1",
            "b.ne 4b",
            "3:",
            "fadd v16.4s, v16.4s, v18.4s", "fadd v20.4s, v20.4s, v22.4s",
            "fadd v16.4s, v16.4s, v20.4s",
            "fadd v17.4s, v17.4s, v19.4s", "fadd v21.4s, v21.4s, v23.4s",
            "fadd v17.4s, v17.4s, v21.4s",
            "st1 {{v16.s}}[0], [{c}], {cs}", "st1 {{v16.s}}[1], [{c}], {cs}",
            "st1 {{v16.s}}[2], [{c}], {cs}", "st1 {{v16.s}}[3], [{c}], {cs}",
            "st1 {{v17.s}}[0], [{c}], {cs}", "st1 {{v17.s}}[1], [{c}], {cs}",
            "st1 {{v17.s}}[2], [{c}], {cs}", "st1 {{v17.s}}[3], [{c}], {cs}",
            a = inout(reg) a => _,
            lda = in(reg) lda * 4,
            b = inout(reg) b => _,
            k = inout(reg) kc => _,
            r = out(reg) _,
            c = inout(reg) tile => _,
            cs = in(reg) 48usize,
            out("v0") _, out("v1") _, out("v2") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            options(nostack),
        );
    }
}

/// One step of the one-vector edge kernel: B's vector in `$b`, rows 0-7 in v16-v23 (`even`)
/// or v24-v31 (`odd`).
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
/// kc >= 1; the 8 floats at `a + p·lda` are readable for p < kc, and `b` holds 12 kc floats;
/// `tile` is valid for 8 x 12 floats.
unsafe fn neon_edge_kernel<const V: usize>(
    kc: usize,
    a: (*const f32, usize),
    b: *const f32,
    tile: *mut f32,
) {
    // SAFETY: the loops read 8 floats of each of a's kc columns and the first 4 V of each
    // 12-float row of b, and write the first 4 V columns of the tile's 8 rows.
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
