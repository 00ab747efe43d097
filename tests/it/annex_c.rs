//! The thesis's own log parser (annex C, `bench/study/annex_c.py`) and edgebench's
//! `import logs` + `export csv` on the same complete set of study logs give the same bytes:
//! Caffe 1.0 glog logs (display 1, as the study ran Caffe) and TF-Slim logs (every step
//! logged), every net and mode the parser reads, batches from 1 up, one point missing as a
//! run that did not fit in memory leaves it. Needs python3.

use crate::common::{arg, cannot_run, describe, ok, run_edgebench};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

const ANNEX_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/study/annex_c.py");

/// Runs annex C with the float sum of the Python 3 the thesis ran (before 3.12, `sum` added
/// floats one after the other; 3.12 compensates, which changes last digits of `avg_time`).
const RUN_ANNEX_C: &str = "\
import builtins, functools, operator, runpy, sys
if sys.version_info >= (3, 12):
    builtins.sum = lambda items, start=0: functools.reduce(operator.add, items, start)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
";

const MACHINE: &str = "lsc5";

/// (net, mode, batch) of the study logs; googlenet's largest GPU batch ran out of memory.
fn points() -> Vec<(&'static str, &'static str, usize)> {
    let mut points = Vec::new();
    for net in ["alexnet", "googlenet"] {
        for mode in ["CPU", "GPU"] {
            for batch in [1, 2, 16, 128] {
                if (net, mode, batch) != ("googlenet", "GPU", 128) {
                    points.push((net, mode, batch));
                }
            }
        }
    }
    points
}

/// A small deterministic generator (xorshift64*), one stream per log.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `x` as a C++ stream writes it by default (`%g`, 6 significant digits), as glog lines hold
/// Caffe's floats.
fn cpp(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let sci = format!("{x:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    let trim = |s: &str| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.unsigned_abs())
    } else {
        trim(&format!("{x:.*}", (5 - exp) as usize))
    }
}

/// A glog prefix at `t` seconds after 14:03:20 on 22 December.
fn glog(t: f64, source: &str) -> String {
    let us = (t * 1e6).round() as u64;
    let s = 14 * 3600 + 3 * 60 + 20 + us / 1_000_000;
    format!(
        "I1222 {:02}:{:02}:{:02}.{:06}  2471 {source}] ",
        s / 3600,
        s / 60 % 60,
        s % 60,
        us % 1_000_000
    )
}

/// Iterations of a study run at `batch` (fewer images per epoch than the study's 1024).
fn iterations(batch: usize) -> usize {
    (96 / batch).max(3)
}

/// A Caffe 1.0 log as `caffe train` writes it through glog with display 1: the solver's
/// dump, a test pass, each iteration's display, net output and lr lines, the snapshot, the
/// rate-less loss line after it and "Optimization Done.". The loss falls below zero at the
/// end, as the thesis saw Caffe's loss do, down to values glog writes with an exponent.
fn caffe_log(net: &str, mode: &str, batch: usize, rng: &mut Rng) -> String {
    let n = iterations(batch);
    let mut log = String::from(
        "Log file created at: 2017/12/22 14:03:20\n\
         Running on machine: lsc5\n\
         Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg\n",
    );
    let mut t = 0.0;
    let mut line = |t: f64, source: &str, msg: &str| {
        writeln!(log, "{}{msg}", glog(t, source)).unwrap();
    };
    line(t, "caffe.cpp:197", &format!("Use {mode}."));
    line(
        t,
        "solver.cpp:44",
        &format!(
            "Initializing solver from parameters: \ntest_iter: 1\ntest_interval: 1000\n\
             base_lr: 0.01\ndisplay: 1\nmax_iter: {n}\nlr_policy: \"step\"\n\
             solver_mode: {mode}\nnet: \"models/bvlc_{net}/train_val.prototxt\"\naverage_loss: 1"
        ),
    );
    line(t, "net.cpp:84", "Creating Layer data");
    line(t, "net.cpp:122", "Setting up data");
    line(
        t,
        "net.cpp:129",
        &format!("Top shape: {batch} 3 227 227 (154587)"),
    );
    line(t, "solver.cpp:289", &format!("Solving {net}"));
    line(t, "solver.cpp:347", "Iteration 0, Testing net (#0)");
    line(
        t,
        "solver.cpp:414",
        "    Test net output #0: loss = 6.90776 (* 1 = 6.90776 loss)",
    );
    let per_image = if mode == "GPU" { 0.002 } else { 0.03 };
    let mut loss = 6.9 + 0.02 * rng.uniform();
    for i in 0..n {
        // Caffe writes floats: the lapse and loss as glog shows them.
        let lapse = cpp(per_image * batch as f64 * (0.9 + 0.2 * rng.uniform()));
        t += lapse.parse::<f64>().unwrap();
        let rate = if i == 0 {
            "0".to_string()
        } else {
            cpp(1.0 / lapse.parse::<f64>().unwrap())
        };
        loss = if i + 2 >= n {
            -(1.0 + 8.0 * rng.uniform()) * 1e-5
        } else {
            loss * (0.8 + 0.15 * rng.uniform())
        };
        let shown = cpp(loss);
        line(
            t,
            "solver.cpp:218",
            &format!("Iteration {i} ({rate} iter/s, {lapse}s/1 iters), loss = {shown}"),
        );
        line(
            t,
            "solver.cpp:237",
            &format!("    Train net output #0: loss = {shown} (* 1 = {shown} loss)"),
        );
        line(
            t,
            "sgd_solver.cpp:105",
            &format!("Iteration {i}, lr = 0.01"),
        );
    }
    t += 0.4;
    line(
        t,
        "solver.cpp:447",
        &format!("Snapshotting to binary proto file caffe_{net}_train_iter_{n}.caffemodel"),
    );
    line(
        t,
        "solver.cpp:310",
        &format!("Iteration {n}, loss = {}", cpp(loss)),
    );
    line(t, "solver.cpp:315", "Optimization Done.");
    line(t, "caffe.cpp:259", "Optimization Done.");
    log
}

/// A TF-Slim log (`train_image_classifier.py --log_every_n_steps=1` on TensorFlow 1.4): TF's
/// own start-up lines and each step's `%.4f` loss and `%.3f` seconds.
fn tensorflow_log(mode: &str, batch: usize, rng: &mut Rng) -> String {
    let mut log = String::from(
        "2017-12-22 14:03:20.123456: I tensorflow/core/platform/cpu_feature_guard.cc:137] Your \
         CPU supports instructions that this TensorFlow binary was not compiled to use: SSE4.1 \
         SSE4.2 AVX AVX2 FMA\n\
         INFO:tensorflow:Starting Session.\n\
         INFO:tensorflow:Saving checkpoint to path /tmp/train/model.ckpt\n\
         INFO:tensorflow:Starting Queues.\n\
         INFO:tensorflow:global_step/sec: 0\n",
    );
    let per_image = if mode == "GPU" { 0.0004 } else { 0.02 };
    let mut loss = 6.9 + 0.02 * rng.uniform();
    for step in 1..=iterations(batch) {
        loss *= 0.8 + 0.2 * rng.uniform();
        let time = if mode == "GPU" && batch == 1 {
            // Mostly 0.000 s and now and then 0.001 s: a mean below 1e-4, which Python
            // writes with an exponent.
            0.00048 + 0.000021 * rng.uniform()
        } else {
            per_image * batch as f64 * (0.5 + rng.uniform())
        };
        writeln!(
            log,
            "INFO:tensorflow:global step {step}: loss = {loss:.4} ({time:.3} sec/step)"
        )
        .unwrap();
        if step == 2 {
            log.push_str("INFO:tensorflow:Recording summary at step 2.\n");
        }
    }
    log.push_str(
        "INFO:tensorflow:Stopping Training.\n\
         INFO:tensorflow:Finished training! Saving model to disk.\n",
    );
    log
}

fn python3() -> Option<String> {
    let out = Command::new("python3").arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn annex_c_and_export_csv_write_the_same_bytes() {
    let Some(python) = python3() else {
        cannot_run("no python3 to run annex C (bench/study/annex_c.py)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let db = dir.join("results.db");
    for (lib, parser) in [("caffe", "caffe"), ("tensorflow", "tensorflow")] {
        let logs = dir.join(format!("{lib}_logs"));
        std::fs::create_dir(&logs).unwrap();
        for (seed, (net, mode, batch)) in points().into_iter().enumerate() {
            let mut rng = Rng::new(seed as u64 + 1);
            let text = match lib {
                "caffe" => caffe_log(net, mode, batch, &mut rng),
                _ => tensorflow_log(mode, batch, &mut rng),
            };
            let name = format!("train_{net}_{mode}_{batch:03}.log");
            std::fs::write(logs.join(name), text).unwrap();
        }

        let annex = dir.join(format!("annex_c_{lib}"));
        std::fs::create_dir(&annex).unwrap();
        let out = Command::new("python3")
            .current_dir(&annex)
            .args(["-c", RUN_ANNEX_C, ANNEX_C, arg(&logs), MACHINE, lib])
            .output()
            .unwrap();
        let said = describe(&out);
        assert!(out.status.success(), "annex C ({python}): {said}");
        // Every log was read and found to hold iterations.
        assert_eq!(
            said.matches("iterations found").count() - said.matches(" 0 iterations found").count(),
            points().len(),
            "{said}"
        );

        ok(run_edgebench(
            dir,
            &[
                "import",
                "logs",
                arg(&logs),
                "--parser",
                parser,
                "--engine",
                lib,
                "--host",
                MACHINE,
                "--db",
                arg(&db),
            ],
        ));
    }
    let export = dir.join("export");
    ok(run_edgebench(
        dir,
        &[
            "export",
            "csv",
            "--db",
            arg(&db),
            "--out",
            arg(&export),
            "--machine",
            MACHINE,
        ],
    ));

    for lib in ["caffe", "tensorflow"] {
        for kind in ["loss", "times"] {
            let name = format!("{kind}_{MACHINE}_{lib}.csv");
            let theirs = read(&dir.join(format!("annex_c_{lib}")).join("csv").join(&name));
            let ours = read(&export.join(&name));
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs),
                "{name} ({python})"
            );
            assert_eq!(ours, theirs, "{name}");
        }
        let times =
            String::from_utf8(read(&export.join(format!("times_{MACHINE}_{lib}.csv")))).unwrap();
        // One average per log, every line ended as Python's csv module ends it.
        assert_eq!(times.lines().count(), 1 + points().len(), "{times}");
        assert_eq!(times.matches("\r\n").count(), 1 + points().len(), "{times}");
        if lib == "tensorflow" {
            assert!(times.contains("e-05\r\n"), "{times}");
        }
    }
}
