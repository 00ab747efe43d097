//! `run --workload infer` end to end through the binary: ONNX files edgebench writes itself
//! (`models --export-onnx`), every query in the iterations table, the figures `results --json`
//! gives, the refusal of an operator the engine lacks, and energy per inference on a prepared
//! Orin NX tree.

use crate::common::{arg, describe, edgebench, ok, results};
use crate::fixtures::jetson::orin_nx_power;
use rusqlite::Connection;
use std::path::Path;

/// `models --export-onnx DIR`: the three files, listed on stdout.
fn export(dir: &Path) -> std::path::PathBuf {
    let models = dir.join("models");
    let out = ok(edgebench(dir)
        .args(["models", "--export-onnx"])
        .arg(&models)
        .output()
        .unwrap());
    let listed = String::from_utf8_lossy(&out.stdout);
    for name in ["alexnet.onnx", "googlenet.onnx", "residual.onnx"] {
        assert!(models.join(name).is_file(), "{name} not written");
        assert!(listed.contains(name), "{listed}");
    }
    models
}

/// The flags infer adds to `models` ask for its export only: `models` alone still describes
/// the networks, and `--seed` without `--export-onnx` is refused before anything is written.
#[test]
fn models_takes_the_export_flags_of_the_infer_workload() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(edgebench(dir.path()).arg("models").output().unwrap());
    assert!(String::from_utf8_lossy(&out.stdout).contains("googlenet"));
    let help = ok(edgebench(dir.path())
        .args(["models", "--help"])
        .output()
        .unwrap());
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--export-onnx <DIR>") && help.contains("--seed"),
        "{help}"
    );
    let seed_alone = edgebench(dir.path())
        .args(["models", "--seed", "3"])
        .output()
        .unwrap();
    assert_eq!(
        seed_alone.status.code(),
        Some(2),
        "{}",
        describe(&seed_alone)
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// Type-7 quantile (linear between order statistics) of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

#[test]
fn single_stream_and_offline_store_every_query_and_give_the_figures() {
    let dir = tempfile::tempdir().unwrap();
    let models = export(dir.path());
    let db = dir.path().join("i.db");
    let model = models.join("residual.onnx");
    ok(edgebench(dir.path())
        .args(["run", "--workload", "infer", "--model", arg(&model)])
        .args(["--scenario", "single-stream,offline", "--batch", "4"])
        .args([
            "--min-queries",
            "24",
            "--min-duration",
            "20ms",
            "--warmup",
            "2",
        ])
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap());
    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let c = Connection::open(&db).unwrap();
    for r in &rows {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["workload"], "infer");
        assert_eq!(r["net"], "residual");
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
        let (p50, p90, p99) = (f("latency_p50_s"), f("latency_p90_s"), f("latency_p99_s"));
        assert!(
            0.0 < p50 && p50 <= p90 && p90 <= p99 && p99 <= f("latency_max_s"),
            "{r}"
        );
        assert!(f("samples_per_s") > 0.0);
        // No power measured: the key is there, empty.
        assert!(r["energy_per_inference_j"].is_null(), "{r}");
        // Every query is a row: the percentiles recomputed from the database are the trial's.
        let trial = r["trial_id"].as_str().unwrap();
        let mut lat: Vec<f64> = c
            .prepare(
                "SELECT (i.t_end_ns - i.t_start_ns) * 1e-9 FROM iterations i JOIN trials t \
                 ON t.id = i.trial_id WHERE t.uuid = ?1 AND i.step >= 2 ORDER BY i.step",
            )
            .unwrap()
            .query_map([trial], |row| row.get::<_, f64>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let batch = r["batch"].as_u64().unwrap() as usize;
        assert!(lat.len() * batch >= 24, "{} queries of {batch}", lat.len());
        assert_eq!(r["queries"].as_u64().unwrap() as usize, lat.len());
        lat.sort_by(f64::total_cmp);
        for (q, got) in [(0.5, p50), (0.9, p90), (0.99, p99)] {
            assert!((quantile(&lat, q) - got).abs() < 1e-6, "p{q}: {got} vs DB");
        }
    }
    let scenarios: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["scenario"].as_str().unwrap().to_string(),
                r["batch"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        scenarios.contains(&("single-stream".into(), 1)),
        "{scenarios:?}"
    );
    assert!(scenarios.contains(&("offline".into(), 4)), "{scenarios:?}");
}

#[test]
fn a_graph_with_an_operator_the_engine_lacks_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let models = export(dir.path());
    // The exported residual block with its softmax renamed to an operator no engine has: the
    // node keeps its name.
    let bytes = std::fs::read(models.join("residual.onnx")).unwrap();
    let needle = b"Softmax";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the op type is in the file");
    let mut patched = bytes.clone();
    patched[at..at + needle.len()].copy_from_slice(b"Softmix");
    let model = dir.path().join("bad.onnx");
    std::fs::write(&model, patched).unwrap();
    let db = dir.path().join("i.db");
    let out = edgebench(dir.path())
        .args(["run", "--workload", "infer", "--model", arg(&model)])
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Softmix") && stderr.contains("'probabilities'"),
        "{stderr}"
    );
    assert!(!db.exists(), "a database was written");
}

#[test]
fn energy_per_inference_is_rail_power_times_mean_latency_in_single_stream() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let cfg = dir.path().join("p.toml");
    std::fs::write(&cfg, "[power]\nbaseline_s = 0.2\n").unwrap();
    let db = dir.path().join("p.db");
    // AlexNet queries last tens of milliseconds: the microseconds between two queries are far
    // below 1 % of the window.
    ok(edgebench(dir.path())
        .args([
            "run",
            "--power",
            "--workload",
            "infer",
            "--model",
            "alexnet",
        ])
        .args([
            "--min-queries",
            "8",
            "--min-duration",
            "300ms",
            "--warmup",
            "1",
        ])
        .arg("--config")
        .arg(&cfg)
        .arg("--sysfs")
        .arg(&sys)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap());
    let rows = results(dir.path(), &db);
    let r = &rows[0];
    assert_eq!(r["status"], "ok", "{r}");
    // Energy and time over one window, as every workload's.
    crate::window::assert_one_window(r);
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
    // The fixture's VDD_IN: 5 V x 1.5 A.
    assert!((f("avg_power_w") - 7.5).abs() < 1e-6, "{r}");
    let want = 7.5 * f("latency_mean_s");
    let got = f("energy_per_inference_j");
    assert!(
        (got - want).abs() <= 0.01 * want,
        "J/inference {got}, 7.5 W x mean latency {want}"
    );
    // The same window as the throughput: energy / window = power, inferences / window = rate.
    assert!(
        (f("energy_j") / f("window_s") - 7.5).abs() < 1e-3 * 7.5,
        "{r}"
    );
    assert!((got * f("samples_per_s") - 7.5).abs() < 1e-3 * 7.5, "{r}");
}

/// The end of a `trtexec --loadEngine=resnet50.engine --iterations=500 --percentile=95,99.9`
/// run (TensorRT 10), as NVIDIA documents its performance summary.
const TRTEXEC_TRT10: &str = "\
[12/02/2026-11:30:07] [I] === Performance summary ===
[12/02/2026-11:30:07] [I] Throughput: 402.5 qps
[12/02/2026-11:30:07] [I] Latency: min = 2.375 ms, max = 3.125 ms, mean = 2.4812 ms, median = 2.46875 ms, percentile(95%) = 2.5625 ms, percentile(99.9%) = 3.0625 ms
[12/02/2026-11:30:07] [I] Enqueue Time: min = 0.01 ms, max = 0.2 ms, mean = 0.02 ms, median = 0.02 ms, percentile(95%) = 0.03 ms, percentile(99.9%) = 0.1 ms
[12/02/2026-11:30:07] [I] GPU Compute Time: min = 2.25 ms, max = 3 ms, mean = 2.35 ms, median = 2.34375 ms, percentile(95%) = 2.4375 ms, percentile(99.9%) = 2.9375 ms
[12/02/2026-11:30:07] [I] Total Host Walltime: 1.24224 s
[12/02/2026-11:30:07] [I] Total GPU Compute Time: 1.175 s
&&&& PASSED TensorRT.trtexec [TensorRT v100300] # trtexec --loadEngine=resnet50.engine --iterations=500 --percentile=95,99.9
";

#[test]
fn a_trtexec_run_lands_with_its_percentiles_throughput_gpu_time_and_power_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let cfg = dir.path().join("p.toml");
    std::fs::write(&cfg, "[power]\nbaseline_s = 0.2\n").unwrap();
    let log = dir.path().join("trtexec.log");
    std::fs::write(&log, TRTEXEC_TRT10).unwrap();
    let db = dir.path().join("t.db");
    let script = format!("sleep 0.5; cat '{}'", log.display());
    ok(edgebench(dir.path())
        .args([
            "exec", "--power", "--name", "tensorrt", "--parser", "trtexec",
        ])
        .arg("--config")
        .arg(&cfg)
        .arg("--sysfs")
        .arg(&sys)
        .arg("--db")
        .arg(&db)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap());
    let r = &results(dir.path(), &db)[0];
    assert_eq!(r["status"], "ok", "{r}");
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
    assert!(close(f("throughput_qps"), 402.5), "{r}");
    assert!(close(f("latency_p50_s"), 2.46875e-3), "{r}");
    assert!(close(f("latency_p95_s"), 2.5625e-3), "{r}");
    assert!(close(f("latency_p99.9_s"), 3.0625e-3), "{r}");
    assert!(close(f("gpu_compute_mean_s"), 2.35e-3), "{r}");
    assert!(close(f("gpu_compute_total_s"), 1.175), "{r}");
    // Power measured by edgebench around the whole command: 7.5 W over at least its sleep.
    assert!((f("avg_power_w") - 7.5).abs() < 1e-6, "{r}");
    assert!(f("energy_j") >= 7.5 * 0.5, "{r}");
}
