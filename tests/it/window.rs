//! One measured window per trial for energy and time, every workload through the binary on a
//! prepared Orin NX tree whose VDD_IN is a steady 7.5 W: energy per item over time per item is
//! that power, the trial's EDP is its energy times its window, and an idle trial measures the
//! whole rest it was asked for.

use crate::common::{arg, edgebench, ok, results};
use crate::fixtures::jetson::orin_nx_power;
use serde_json::Value;
use std::path::Path;

/// The fixture's VDD_IN: 5.0 V x 1.5 A.
const WATTS: f64 = 7.5;

/// `edgebench run --power` of `args` on the fixture into `db`, with a short baseline and a
/// short operator study; its standard output.
fn run(dir: &Path, sys: &Path, db: &Path, args: &[&str]) -> String {
    let config = dir.join("window.toml");
    std::fs::write(
        &config,
        "[power]\nbaseline_s = 0.3\n[ops]\nmin_executions = 3\nmin_time_s = 0.3\n",
    )
    .unwrap();
    let out = ok(edgebench(dir)
        .args([
            "run",
            "--power",
            "--config",
            arg(&config),
            "--sysfs",
            arg(sys),
        ])
        .args(["--db", arg(db)])
        .args(args)
        .output()
        .unwrap());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The invariants of one measured trial at a constant power.
pub(crate) fn assert_one_window(r: &Value) {
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
    assert_eq!(r["status"], "ok", "{r}");
    let (energy, window) = (f("energy_j"), f("window_s"));
    assert!(window > 0.0, "{r}");
    let implied = f("energy_per_item_j") / f("time_per_item_s");
    assert!(
        (implied - WATTS).abs() <= 0.01 * WATTS,
        "{}: J/item / s/item = {implied} W, not {WATTS} W: {r}",
        r["workload"]
    );
    assert!((energy - WATTS * window).abs() <= 0.01 * energy, "{r}");
    assert!(
        (f("edp_js") - energy * window).abs() <= 1e-9 * f("edp_js"),
        "EDP is not J x window s: {r}"
    );
    let edp_item = f("energy_per_item_j") * f("time_per_item_s");
    assert!(
        (f("edp_per_item_js") - edp_item).abs() <= 1e-9 * edp_item,
        "{r}"
    );
    // The window's items: its steps times the items of a step.
    let items = f("window_steps") * f("items_per_iteration");
    assert!(
        (f("time_per_item_s") - window / items).abs() <= 1e-9 * window,
        "{r}"
    );
    // The median keeps a key of its own.
    assert!(f("time_per_item_median_s") > 0.0, "{r}");
}

#[test]
fn every_workload_gives_energy_and_time_over_one_window() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let db = dir.path().join("window.db");
    let d = dir.path();
    let cnn = [
        "--net", "alexnet", "--batch", "2", "--images", "4", "--warmup", "1",
    ];
    run(d, &sys, &db, &cnn);
    let script = "for i in 0 1 2 3 4 5; do sleep 0.1; \
                  echo \"EDGEBENCH step=$i loss=$((20-i)) images=4\"; done";
    let exec = ok(edgebench(d)
        .args(["exec", "--power", "--sysfs", arg(&sys), "--db", arg(&db)])
        // No --batch: the step lines' images=4 count.
        .args(["--name", "script", "--parser", "edgebench"])
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap());
    assert!(exec.status.success());
    run(
        d,
        &sys,
        &db,
        &[
            "--workload",
            "mlp",
            "--style",
            "tensors",
            "--size",
            "8x32x16x4",
            "--iterations",
            "30",
        ],
    );
    run(
        d,
        &sys,
        &db,
        &["--workload", "ops", "--op", "sigmoid", "--mb", "1"],
    );
    let idle = run(d, &sys, &db, &["--workload", "idle", "--duration", "3s"]);

    let rows = results(d, &db);
    let workloads: Vec<&str> = rows.iter().filter_map(|r| r["workload"].as_str()).collect();
    for w in ["cnn", "exec", "mlp", "ops", "idle"] {
        assert!(workloads.contains(&w), "no {w} trial in {workloads:?}");
    }
    for r in &rows {
        assert_one_window(r);
    }

    // Columns that mean what they say: only CNN training has epochs and images here (the
    // command was not given them), an operator and the rest have no loss.
    let of = |w: &str| rows.iter().find(|r| r["workload"] == w).unwrap();
    assert_eq!(
        (&of("cnn")["epochs"], &of("cnn")["images"]),
        (&1.into(), &4.into())
    );
    for w in ["mlp", "ops", "idle", "exec"] {
        let r = of(w);
        assert!(r["epochs"].is_null() && r["images"].is_null(), "{w}: {r}");
    }
    for w in ["ops", "idle"] {
        let r = of(w);
        assert!(
            r["loss_first"].is_null() && r["loss_last"].is_null(),
            "{w}: {r}"
        );
    }
    assert_eq!(of("exec")["items_per_iteration"], 4, "{}", of("exec"));
    assert_eq!(of("exec")["images_per_step"], 4, "{}", of("exec"));

    // The rest asked for is measured whole: 3 one-second ticks, none a warm-up.
    let rest = rows.iter().find(|r| r["workload"] == "idle").unwrap();
    assert_eq!(rest["item"], "tick", "{rest}");
    assert_eq!(rest["warmup_iterations"], 0, "{rest}");
    // Every tick sleeps at least its second, and the energy is the window's (checked above):
    // at least 3 s at 7.5 W, not the one tick a warm-up of 2 would leave.
    assert_eq!(rest["window_steps"], 3, "{rest}");
    assert!(rest["window_s"].as_f64().unwrap() >= 3.0, "{rest}");
    let energy = rest["energy_j"].as_f64().unwrap();
    assert!(energy >= 0.99 * 3.0 * WATTS, "3 s at {WATTS} W: {rest}");
    assert!(!idle.contains("ms/img"), "{idle}");
    assert!(idle.contains("/tick"), "{idle}");
}
