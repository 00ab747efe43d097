use super::engine::{read_onnx, Loaded, ModelRef};
use super::export::{self, GraphBuilder, INPUT};
use super::*;
use crate::testkit::rows::iteration_ms as record;
use crate::workloads::{Job, Prepared, Workload};
use prost::Message as _;
use std::path::Path;

/// The trials of `c` planned with no ONNX file read.
fn plan_unprepared(c: &Config) -> Vec<PlannedTrial<InferJob>> {
    let prepared = InferPrepared {
        sweep: InferSweep::of(c).unwrap(),
        fixed_batch: BTreeMap::new(),
    };
    let none = Prepared::default();
    TypedWorkload::plan(&Infer, &none.plan_input(c, &HostPaths::default()), &prepared)
}

fn config(toml: &str, flags: &[(&str, &str)]) -> Config {
    let mut c = Config::from_toml(toml, Path::new("c.toml")).unwrap();
    let flags: Vec<String> = flags
        .iter()
        .map(|(k, v)| format!("--{}={v}", k.replace('_', "-")))
        .collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    crate::workloads::apply_flags(&mut c, &flags);
    c
}

fn write(dir: &Path, name: &str, model: &tract_onnx::pb::ModelProto) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

#[test]
fn models_scenarios_and_numbers_come_from_flags_or_the_file() {
    let c = config(
        "[sweep]\nnets = [\"googlenet\"]\n",
        &[
            ("model", "alexnet,m/resnet.onnx"),
            ("scenario", "offline,single-stream"),
            ("min_queries", "64"),
            ("min_duration", "2s"),
        ],
    );
    let s = InferSweep::of(&c).unwrap();
    assert_eq!(s.models.len(), 2);
    assert_eq!(s.models[0].name(), "alexnet");
    assert_eq!(s.models[1].name(), "resnet");
    assert_eq!(s.scenarios, [Scenario::Offline, Scenario::SingleStream]);
    assert_eq!((s.min_queries, s.min_duration.as_secs()), (64, 2));

    let c = config(
        "[sweep]\nnets = [\"googlenet\"]\n[infer]\nscenario = [\"server\"]\nqps = 12.5\n\
         min_queries = 8\nlatency_bound = \"20ms\"\n",
        &[],
    );
    let s = InferSweep::of(&c).unwrap();
    // No model named: the sweep's nets.
    assert_eq!(s.models[0].name(), "googlenet");
    assert_eq!(s.qps, Some(12.5));
    assert_eq!(s.latency_bound, Duration::from_millis(20));
    // The defaults are MLPerf's single-stream minimums.
    let s = InferSweep::of(&Config::default()).unwrap();
    assert_eq!((s.min_queries, s.min_duration.as_secs()), (1024, 60));
    assert_eq!(s.scenarios, [Scenario::SingleStream]);
}

#[test]
fn bad_parameters_are_refused_naming_the_flag() {
    let refused = |toml: &str, flags: &[(&str, &str)]| {
        Workload::check(&Infer, &config(toml, flags)).unwrap_err()
    };
    assert!(refused("", &[("scenario", "multi-stream")]).contains("--scenario"));
    assert!(refused("", &[("model", "vgg")]).contains("--model"));
    assert!(refused("", &[("min_queries", "0")]).contains("--min-queries"));
    assert!(refused("", &[("min_queries", "1.5")]).contains("--min-queries"));
    assert!(refused("", &[("scenario", "server")]).contains("--qps"));
    assert!(refused("", &[("scenario", "server"), ("qps", "-3")]).contains("--qps"));
    assert!(refused("", &[("model", "a/x.onnx,b/x.onnx")]).contains("two models named 'x'"));
    assert!(refused("[infer]\nmodels = \"alexnet\"\n", &[]).contains("models"));
}

#[test]
fn single_stream_and_server_at_batch_one_offline_at_the_sweep_batches() {
    let c = config(
        "[sweep]\nbatches = [1, 8, 32]\nwarmup_iterations = 3\n",
        &[
            ("model", "alexnet"),
            ("scenario", "single-stream,offline,server"),
            ("qps", "10"),
            ("min_queries", "100"),
        ],
    );
    Workload::check(&Infer, &c).unwrap();
    let trials = plan_unprepared(&c);
    let got: Vec<(String, usize, usize)> = trials
        .iter()
        .map(|t| (t.job.scenario.to_string(), t.key.batch, t.iterations))
        .collect();
    let want = [
        ("single-stream", 1, 103),
        ("offline", 1, 103),
        ("offline", 8, 3 + 13),
        ("offline", 32, 3 + 4),
        ("server", 1, 103),
    ];
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.0.as_str(), g.1, g.2), w);
    }
    assert_eq!(trials[0].key.net, "alexnet");
    assert_eq!(trials[0].items_per_iteration, Some(1));
    assert!(trials[4].key.params.contains("\"qps\":10.0"), "{}", trials[4].key.params);
    assert_ne!(trials[0].key.params, trials[1].key.params);
}

#[test]
fn percentiles_are_the_projects_quantile_of_the_latencies() {
    let step_s: Vec<f64> = (1..=100).rev().map(f64::from).collect();
    let l = latencies(&step_s).unwrap();
    assert!((l.p50 - 50.5).abs() < 1e-12);
    assert!((l.p90 - 90.1).abs() < 1e-12);
    assert!((l.p99 - 99.01).abs() < 1e-12);
    assert_eq!(l.max, 100.0);
    assert!((l.mean - 50.5).abs() < 1e-12);
    assert!(latencies(&[]).is_none());
}

fn job(model: ModelRef, scenario: Scenario, batch: usize) -> InferJob {
    InferJob {
        model,
        device: DeviceKind::Cpu,
        scenario,
        batch,
        seed: 5,
        warmup: 1,
        min_queries: 6,
        min_duration_s: 0.0,
        qps: None,
        latency_bound_s: 0.05,
        find_qps: false,
    }
}

#[test]
fn throughput_is_samples_over_the_window_of_the_measured_queries() {
    let alexnet = ModelRef::Own {
        net: "alexnet".into(),
    };
    // Four batches of 8 from 0 to 400 ms, with 10 ms between them.
    let measured: Vec<IterationRecord> = (0..4)
        .map(|i| record(i, i as i64 * 100, i as i64 * 100 + 90))
        .collect();
    let m = metrics(&job(alexnet.clone(), Scenario::Offline, 8), &measured);
    let f = |k: &str| m.extra[k].as_f64().unwrap();
    assert!((f("window_s") - 0.39).abs() < 1e-12);
    assert!((f("samples_per_s") - 32.0 / 0.39).abs() < 1e-9);
    assert!((f("latency_p50_s") - 0.09).abs() < 1e-12);
    assert_eq!(m.extra["energy_per_inference_j"], serde_json::Value::Null);
    assert!(!m.extra.contains_key("latency_bound_held"));

    let mut server = job(alexnet, Scenario::Server, 1);
    server.qps = Some(10.0);
    let held = metrics(&server, &measured);
    assert_eq!(held.extra["latency_bound_held"], false);
    server.latency_bound_s = 0.1;
    assert_eq!(metrics(&server, &measured).extra["latency_bound_held"], true);
    let e = Workload::energy_metrics(&Infer, &Job::of(KIND, &job(ModelRef::Own { net: "alexnet".into() }, Scenario::Offline, 8)), 4, 6.4);
    assert!((e["energy_per_inference_j"].as_f64().unwrap() - 0.2).abs() < 1e-12);
}

#[test]
fn an_unsupported_operator_is_refused_naming_it_and_its_node() {
    let dir = tempfile::tempdir().unwrap();
    let model = |op: &str, domain: &str| {
        let mut g = GraphBuilder::default();
        g.input(INPUT, &[None, Some(4)]);
        let relu = g.node("Relu", "first", &[INPUT], vec![]);
        let y = g.node(op, "mystery", &[&relu], vec![]);
        g.output(&y, &[None, Some(4)]);
        let mut m = g.model("m");
        m.graph.as_mut().unwrap().node[1].domain = domain.into();
        m
    };
    let path = write(dir.path(), "m.onnx", &model("FancyOp", ""));
    let err = format!("{:#}", read_onnx(&path).err().unwrap());
    assert!(err.contains("FancyOp") && err.contains("'mystery'"), "{err}");
    let path = write(dir.path(), "d.onnx", &model("Relu", "com.example"));
    let err = format!("{:#}", read_onnx(&path).err().unwrap());
    assert!(err.contains("com.example.Relu") && err.contains("'mystery'"), "{err}");
    // The same graph with a standard operator reads.
    let path = write(dir.path(), "ok.onnx", &model("Sigmoid", ""));
    let file = read_onnx(&path).unwrap();
    assert_eq!(file.fixed_batch(), None);
    assert_eq!(file.inputs[0].shape, [None, Some(4)]);
    // Not a model at all.
    std::fs::write(dir.path().join("junk.onnx"), b"\xff\xff\xff not protobuf").unwrap();
    let err = format!("{:#}", read_onnx(&dir.path().join("junk.onnx")).err().unwrap());
    assert!(err.contains("junk.onnx"), "{err}");
}

fn residual(dir: &Path) -> ModelRef {
    let path = write(dir, "residual.onnx", &export::residual_block(3));
    ModelRef::parse(path.to_str().unwrap()).unwrap()
}

#[test]
fn single_stream_runs_until_both_minimums_one_query_after_another() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = job(residual(dir.path()), Scenario::SingleStream, 1);
    j.min_queries = 5;
    j.min_duration_s = 0.05;
    let mut records = Vec::new();
    let end = run(&j, &AtomicBool::new(false), &mut |r| {
        records.push(*r);
        Ok(Control::Continue)
    })
    .unwrap();
    assert_eq!(end.end, TrialEnd::Completed);
    let measured = &records[1..];
    assert!(measured.len() >= 5);
    let window = measured.last().unwrap().t_end_ns - measured[0].t_start_ns;
    assert!(window as f64 * 1e-9 >= 0.05);
    // Stops at the first query that meets both.
    let before = measured[measured.len() - 2].t_end_ns - measured[0].t_start_ns;
    assert!(measured.len() == 5 || (before as f64) * 1e-9 < 0.05);
    for pair in records.windows(2) {
        assert!(pair[1].t_start_ns >= pair[0].t_end_ns, "queries overlap");
        assert_eq!(pair[1].step, pair[0].step + 1);
    }
    for r in &records {
        assert_eq!(r.step_s, (r.t_end_ns - r.t_start_ns) as f64 * 1e-9);
    }
    // A stop ends it at once.
    let end = run(&j, &AtomicBool::new(true), &mut |_| Ok(Control::Continue)).unwrap();
    assert_eq!(end.end, TrialEnd::Stopped);
}

#[test]
fn offline_counts_samples_and_server_queries_arrive_at_seeded_poisson_times() {
    let dir = tempfile::tempdir().unwrap();
    let model = residual(dir.path());
    let mut j = job(model.clone(), Scenario::Offline, 4);
    j.min_queries = 10;
    let mut n = 0;
    run(&j, &AtomicBool::new(false), &mut |_| {
        n += 1;
        Ok(Control::Continue)
    })
    .unwrap();
    // One warm-up batch, then ceil(10 / 4) = 3.
    assert_eq!(n, 4);

    let mut j = job(model, Scenario::Server, 1);
    j.qps = Some(400.0);
    j.min_queries = 12;
    let mut records = Vec::new();
    run(&j, &AtomicBool::new(false), &mut |r| {
        records.push(*r);
        Ok(Control::Continue)
    })
    .unwrap();
    assert_eq!(records.len(), 13);
    // The arrivals are the seeded exponential gaps, whatever the service took.
    let mut rng = StdRng::seed_from_u64(j.seed ^ 0x5e1e_c7ed);
    let gap = Exp::new(400.0).unwrap();
    for pair in records.windows(2) {
        let want = (gap.sample(&mut rng) * 1e9) as i64;
        assert_eq!(pair[1].t_start_ns - pair[0].t_start_ns, want);
    }
    for r in &records {
        // Latency runs from arrival to answer and includes the wait.
        assert!(r.step_s >= r.data_s);
        assert_eq!(r.step_s, (r.t_end_ns - r.t_start_ns) as f64 * 1e-9);
    }
}

/// `|got - want| <= rel * max |want|`, elementwise.
fn assert_close(what: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "{what}: all zeros");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rel * scale,
            "{what}[{i}]: onnx {g}, edgebench {w} (scale {scale})"
        );
    }
}

#[test]
fn exported_networks_through_tract_give_edgebenchs_logits() {
    let dir = tempfile::tempdir().unwrap();
    let files = export::export_all(dir.path(), 7).unwrap();
    assert_eq!(files.len(), 3);
    for net in ["alexnet", "googlenet"] {
        let own = ModelRef::Own { net: net.into() };
        let onnx = ModelRef::parse(dir.path().join(format!("{net}.onnx")).to_str().unwrap())
            .unwrap();
        let batch = 2;
        let want = Loaded::load(&own, DeviceKind::Cpu, batch, 7).unwrap().logits().unwrap();
        let got = Loaded::load(&onnx, DeviceKind::Cpu, batch, 7).unwrap().logits().unwrap();
        assert_eq!(want.len(), batch * 1000);
        assert_close(net, &got, &want, 1e-4);
    }
    // The residual block reads with its BatchNormalization, Add and depthwise convolution, and
    // its softmax rows sum to 1.
    let res = ModelRef::parse(dir.path().join("residual.onnx").to_str().unwrap()).unwrap();
    let p = Loaded::load(&res, DeviceKind::Cpu, 3, 1).unwrap().logits().unwrap();
    assert_eq!(p.len(), 30);
    for row in p.chunks(10) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{row:?}");
    }
}

/// The Python that runs an ONNX file through ONNX Runtime (CPU execution provider) on raw
/// little-endian f32 input and writes its first output the same way.
const ORT_SCRIPT: &str = r#"
import sys
import numpy as np
import onnxruntime as ort
model, inp, out = sys.argv[1], sys.argv[2], sys.argv[3]
shape = [int(d) for d in sys.argv[4].split(",")]
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
x = np.fromfile(inp, dtype="<f4").reshape(shape)
y = session.run(None, {session.get_inputs()[0].name: x})[0]
y.astype("<f4").tofile(out)
"#;

/// ONNX Runtime's first output for `model` on `input` of `shape`, or why it cannot run here.
fn onnxruntime(model: &Path, input: &[f32], shape: &[usize]) -> Result<Vec<f32>, String> {
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("x.f32"), dir.path().join("y.f32"));
    let bytes: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&inp, bytes).unwrap();
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let run = std::process::Command::new("python3")
        .arg("-c")
        .arg(ORT_SCRIPT)
        .args([model, &inp, &out])
        .arg(dims.join(","))
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !run.status.success() {
        return Err(String::from_utf8_lossy(&run.stderr).into_owned());
    }
    let raw = std::fs::read(&out).unwrap();
    Ok(raw
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

#[test]
fn onnx_runtime_on_the_exported_files_agrees_with_edgebench_and_tract() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import numpy, onnxruntime"])
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "python3 cannot import onnxruntime: pip install -r src/workloads/infer/test-requirements.txt"
    );
    let dir = tempfile::tempdir().unwrap();
    export::export_all(dir.path(), 11).unwrap();
    let batch = 2;
    for net in ["alexnet", "googlenet", "residual"] {
        let path = dir.path().join(format!("{net}.onnx"));
        let onnx = ModelRef::parse(path.to_str().unwrap()).unwrap();
        let chw = match crate::models::by_name(net) {
            Some(spec) => spec.input,
            None => [3, 32, 32],
        };
        let input = super::engine::own_input(batch, chw, 11, &candle_core::Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let shape = [batch, chw[0], chw[1], chw[2]];
        let ort = onnxruntime(&path, &input, &shape).unwrap();
        let tract = Loaded::load(&onnx, DeviceKind::Cpu, batch, 11)
            .unwrap()
            .logits()
            .unwrap();
        assert_close(&format!("{net}: tract vs onnxruntime"), &tract, &ort, 1e-4);
        if net != "residual" {
            let own = ModelRef::Own { net: net.into() };
            let want = Loaded::load(&own, DeviceKind::Cpu, batch, 11)
                .unwrap()
                .logits()
                .unwrap();
            assert_close(&format!("{net}: onnxruntime vs edgebench"), &ort, &want, 1e-4);
        }
    }
}

#[test]
fn a_folder_gives_its_onnx_files_which_run_on_the_cpu_only() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["b.onnx", "a.ONNX", "notes.txt"] {
        std::fs::write(dir.path().join(name), b"").unwrap();
    }
    let folder = dir.path().to_str().unwrap();
    let c = config(
        "[sweep]\ndevices = [\"cpu\", \"cuda\"]\n",
        &[("model", &format!("alexnet,{folder}"))],
    );
    let s = InferSweep::of(&c).unwrap();
    let names: Vec<&str> = s.models.iter().map(|m| m.name()).collect();
    assert_eq!(names, ["alexnet", "a", "b"]);
    let trials = plan_unprepared(&c);
    let got: Vec<(String, String)> = trials
        .iter()
        .map(|t| (t.key.net.clone(), t.key.device.clone()))
        .collect();
    let want = [("alexnet", "cpu"), ("alexnet", "cuda"), ("a", "cpu"), ("b", "cpu")];
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.0.as_str(), g.1.as_str()), w);
    }
    let cuda_only = config(
        "[sweep]\ndevices = [\"cuda\"]\n",
        &[("model", &format!("{folder}/a.ONNX"))],
    );
    assert!(Workload::check(&Infer, &cuda_only).unwrap_err().contains("CPU only"));
}

#[test]
fn find_qps_bisects_in_a_bounded_number_of_probes_each_stored() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = job(residual(dir.path()), Scenario::Server, 1);
    j.find_qps = true;
    j.min_queries = 8;
    // A bound no probe can miss, then one none can hold.
    for (bound, holds) in [(10.0, true), (1e-9, false)] {
        j.latency_bound_s = bound;
        let mut records = Vec::new();
        let end = run(&j, &AtomicBool::new(false), &mut |r| {
            records.push(*r);
            Ok(Control::Continue)
        })
        .unwrap();
        let outcome = end.outcome.unwrap();
        let probes: Vec<Probe> = serde_json::from_value(outcome["probes"].clone()).unwrap();
        assert_eq!(probes.len(), MAX_PROBES - 1);
        let service = outcome["service_time_s"].as_f64().unwrap();
        let capacity = 1.0 / service;
        // Bisection of [0, capacity]: halves up when it holds, down when not.
        let mut want = capacity / 2.0;
        for p in &probes {
            assert!((p.qps - want).abs() < 1e-9 * capacity, "{probes:?}");
            assert_eq!(p.held, holds);
            want += if holds { (capacity - p.qps) / 2.0 } else { -p.qps / 2.0 };
        }
        match holds {
            true => assert_eq!(outcome["found_qps"].as_f64(), Some(probes[6].qps)),
            false => assert!(outcome["found_qps"].is_null()),
        }
        // Every probe's queries are stored under its number: 1 warm-up + 8, then 8 each.
        for epoch in 0..MAX_PROBES {
            let n = records.iter().filter(|r| r.epoch == epoch).count();
            assert_eq!(n, if epoch == 0 { 9 } else { 8 }, "epoch {epoch}");
        }
        let steps: Vec<usize> = records.iter().map(|r| r.step).collect();
        assert_eq!(steps, (0..records.len()).collect::<Vec<_>>());

        // The trial's figures are the found probe's.
        let mut m = metrics(&j, &records[1..]);
        let recorded = crate::workloads::Recorded {
            iterations: &records,
            warmup: 1,
            measured: &records[1..],
            whole: None,
        };
        Workload::complete_metrics(&Infer, &Job::of(KIND, &j), Some(&outcome), &recorded, &mut m);
        assert_eq!(m.extra["latency_bound_held"], holds);
        if holds {
            assert_eq!(m.extra["found_qps"].as_f64(), Some(probes[6].qps));
            assert_eq!(m.extra["queries"], 8);
            assert_eq!(m.extra["qps"].as_f64(), Some(probes[6].qps));
        }
    }
}
