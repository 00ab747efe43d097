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
        // One column past whole panels (13x13 Winograd tiles: 49), at depths that leave 0 to
        // 3 steps after the kernel's groups of four.
        (MR, 4 * NR + 1, 7),
        (2 * MR + 3, NR + 1, 8),
        (MR - 1, 1, 2),
        (3, 2 * NR + 1, kc + 2),
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

/// The packed layouts element by element: A's panels column by column, padded with zeros, B's
/// row by row, a partial last panel's columns past the wanted ones written with some of B's
/// floats (never left as they were; the tiles' columns they give are not stored), at depths
/// around the transposes' four and eight columns, rows that fill a panel or do not, and B's runs
/// of panels with a partial last panel, from operands row-major, transposed and with both
/// strides above 1.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn packed_panels_hold_their_elements<K: Microkernel<MR, NR>, const MR: usize, const NR: usize>() {
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
            let at = format!("B nc {nc}, strides {rs}, {cs}: panel {panel}, depth {p}, column {j}");
            if col < nc {
                assert_eq!(got, b[(pc + p) * n + jc + col], "{at}");
            } else {
                assert!(got == 0.0 || b.contains(&got), "{at}: {got}");
            }
        }
    }
}

/// The blocked product of strided operands (row-major, transposed, neither stride 1) into
/// a C whose rows are longer than n, overwritten or added to, on the calling thread alone
/// and on every thread of pools of 1 to 16: the columns past n stay as they were. The shapes
/// are narrow enough for a microkernel that reads A's columns or B's rows in place to do so,
/// with last panels of A's rows and of B's columns that are partial (one column among them)
/// and depths that leave 0 to 3 steps after the unrolled loops.
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
        (2 * MR + 1, 2 * NR + 1, 8),
        (3 * MR, NR + 1, 2),
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
            fn packed_panels_hold_their_elements() {
                super::packed_panels_hold_their_elements::<$kernel, $mr, $nr>(
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
