//! Provenance and throttling through the binary, against a prepared Jetson tree: a JetPack 6
//! Orin NX's sysfs (device tree, cpufreq policies, GPU devfreq, thermal zones, cooling
//! devices), procfs (kernel) and rootfs (/etc/nv_tegra_release, nvpmodel's files).

use crate::common::{count, edgebench, ok, results, wait_for};
use crate::fixtures::jetson::{
    orin_nx_board, orin_nx_device_tree, thor_device_tree, write, ORIN_NX_GPU, ORIN_NX_POLICY0,
    TX2_COMPATIBLE,
};
use rusqlite::Connection;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Tree {
    fn sys(&self) -> PathBuf {
        self.root.join("sys")
    }
    fn proc(&self) -> PathBuf {
        self.root.join("proc")
    }
    fn rootfs(&self) -> PathBuf {
        self.root.join("rootfs")
    }
}

/// The fake Orin NX (nvpmodel mode 0, clocks free, cool) in a fresh folder.
fn orin_nx() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    orin_nx_board(&root);
    Tree { _dir: dir, root }
}

fn roots(cmd: &mut std::process::Command, t: &Tree, fake_proc: bool) {
    cmd.arg("--sysfs")
        .arg(t.sys())
        .arg("--rootfs")
        .arg(t.rootfs());
    if fake_proc {
        cmd.arg("--procfs").arg(t.proc());
    }
}

#[test]
fn provenance_reads_a_jetson_tree_and_leaves_out_what_is_missing() {
    let t = orin_nx();
    let mut cmd = edgebench(&t.root);
    cmd.args(["provenance", "--json"]);
    roots(&mut cmd, &t, true);
    let out = ok(cmd.output().unwrap());
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &all["now"];
    let get = |k: &str| {
        p[k].as_str()
            .unwrap_or_else(|| panic!("{k} missing in {p}"))
    };
    assert_eq!(get("board"), "orin-nx");
    assert_eq!(get("board.model"), "NVIDIA Orin NX Developer Kit");
    assert_eq!(get("l4t"), "R36.3.0 (generic)");
    assert_eq!(get("nvpmodel"), "0 (MAXN)");
    assert!(get("jetson_clocks").starts_with("off"), "{p}");
    assert_eq!(get("kernel"), "5.15.136-tegra");
    assert_eq!(get("cpu.online"), "0-7");
    assert_eq!(get("cpu.policy4.cpus"), "4 5 6 7");
    assert_eq!(get("cpu.policy0.governor"), "schedutil");
    assert_eq!(get("cpu.policy0.cur_khz"), "1984000");
    assert_eq!(get("gpu.devfreq"), "17000000.ga10b");
    assert_eq!(get("gpu.cur_hz"), "918000000");
    assert_eq!(get("gpu.load_permille"), "512");
    assert_eq!(get("temp.cpu-thermal.start_c"), "45.5");
    // A zone reading -256 C has no sensor behind it: left out, not recorded as a temperature.
    assert!(p.get("temp.cv0-thermal.start_c").is_none(), "{p}");

    // jetson_clocks pins the minimum clocks at the maximum.
    for policy in ["policy0", "policy4"] {
        write(
            &t.sys(),
            &format!("devices/system/cpu/cpufreq/{policy}/scaling_min_freq"),
            "1984000\n",
        );
    }
    write(&t.sys(), &format!("{ORIN_NX_GPU}/min_freq"), "918000000\n");
    let mut cmd = edgebench(&t.root);
    cmd.args(["provenance", "--json"]);
    roots(&mut cmd, &t, true);
    let all: Value = serde_json::from_slice(&ok(cmd.output().unwrap()).stdout).unwrap();
    assert!(all["now"]["jetson_clocks"]
        .as_str()
        .unwrap()
        .starts_with("on"));

    // A bare host (empty roots): only what can be known, no error, no Jetson items.
    let empty = tempfile::tempdir().unwrap();
    let out = ok(edgebench(&t.root)
        .args(["provenance", "--json", "--sysfs"])
        .arg(empty.path())
        .arg("--procfs")
        .arg(empty.path())
        .arg("--rootfs")
        .arg(empty.path())
        .output()
        .unwrap());
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys: Vec<&String> = all["now"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["board", "board.detected_by"], "{all}");
}

/// A run of `steps` AlexNet iterations at batch 1 on the tree, into `db`; `during` runs once
/// the worker has recorded two iterations.
fn run_on(t: &Tree, db: &Path, steps: usize, during: impl FnOnce()) -> Value {
    let mut cmd = edgebench(&t.root);
    cmd.args(["run", "--net", "alexnet", "--batch", "1", "--epochs", "1"])
        .args([
            "--warmup",
            "1",
            "--images",
            &steps.to_string(),
            "--force",
            "--db",
        ])
        .arg(db);
    roots(&mut cmd, t, false);
    let before = count(db, "SELECT COUNT(*) FROM trials");
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(
        db,
        &format!(
            "SELECT COUNT(*) FROM iterations WHERE trial_id = (SELECT MAX(id) FROM trials) \
             AND (SELECT COUNT(*) FROM trials) > {before}"
        ),
        2,
        Duration::from_secs(120),
    );
    during();
    let out = ok(child.wait_with_output().unwrap());
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let mut last = results(&t.root, db).pop().unwrap();
    last["stderr"] = Value::String(stderr);
    last
}

#[test]
fn a_run_records_provenance_and_a_mid_trial_clock_cap_marks_the_trial_throttled() {
    let t = orin_nx();
    let db = t.root.join("r.db");

    // Steady clocks: recorded, not throttled, with start and end temperatures.
    let steady = run_on(&t, &db, 6, || {
        // A free-running clock moving under schedutil is not throttling.
        write(
            &t.sys(),
            &format!("{ORIN_NX_POLICY0}/scaling_cur_freq"),
            "1420800\n",
        );
    });
    assert_eq!(steady["status"], "ok", "{steady}");
    assert_eq!(steady["throttled"], false, "{steady}");
    assert!(steady["throttle_note"].as_str().unwrap().contains("steady"));
    let c = Connection::open(&db).unwrap();
    let (start, min, end): (f64, f64, f64) = c
        .query_row(
            "SELECT start_value, min_value, end_value FROM trial_clocks \
             WHERE key = 'cpu.policy0.cur_khz'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((start, min, end), (1984000.0, 1420800.0, 1420800.0));
    let item = |k: &str| -> Option<String> {
        c.query_row(
            "SELECT value FROM run_provenance WHERE key = ?1",
            [k],
            |r| r.get(0),
        )
        .ok()
    };
    assert_eq!(item("l4t").as_deref(), Some("R36.3.0 (generic)"));
    assert_eq!(item("nvpmodel").as_deref(), Some("0 (MAXN)"));
    assert_eq!(item("temp.gpu-thermal.start_c").as_deref(), Some("44.0"));
    assert_eq!(item("temp.gpu-thermal.end_c").as_deref(), Some("44.0"));
    drop(c);

    // The thermal framework caps the CPU mid-trial: throttled, and the note says why.
    let capped = run_on(&t, &db, 6, || {
        write(
            &t.sys(),
            &format!("{ORIN_NX_POLICY0}/scaling_max_freq"),
            "1113600\n",
        );
        write(&t.sys(), "class/thermal/thermal_zone0/temp", "99500\n");
        write(&t.sys(), "class/thermal/cooling_device1/cur_state", "4\n");
    });
    assert_eq!(capped["status"], "ok", "{capped}");
    assert_eq!(capped["throttled"], true, "{capped}");
    let note = capped["throttle_note"].as_str().unwrap();
    assert!(
        note.contains("maximum clock changed 1984000 -> 1113600"),
        "{note}"
    );
    assert!(
        note.contains("devfreq-gpu raised its state 0 -> 4"),
        "{note}"
    );
    assert!(capped["stderr"].as_str().unwrap().contains("THROTTLED"));
    // The summary and the report say so too.
    let out = ok(edgebench(&t.root)
        .args(["results", "--db"])
        .arg(&db)
        .output()
        .unwrap());
    assert!(String::from_utf8_lossy(&out.stdout).contains("throttled"));
    let mut cmd = edgebench(&t.root);
    cmd.args(["provenance", "--json", "--db"]).arg(&db);
    let stored: Value = serde_json::from_slice(&ok(cmd.output().unwrap()).stdout).unwrap();
    let runs = stored.as_object().unwrap();
    assert_eq!(runs.len(), 2);
    for p in runs.values() {
        assert_eq!(p["board"], "orin-nx");
        assert_eq!(p["temp.cpu-thermal.start_c"], "45.5");
    }
}

#[test]
fn device_cuda_on_a_board_whose_gpu_candle_cannot_use_says_why() {
    let t = orin_nx();
    // A TX2: sm_62, CPU only.
    write(
        &t.sys(),
        "firmware/devicetree/base/compatible",
        TX2_COMPATIBLE,
    );
    let mut cmd = edgebench(&t.root);
    cmd.args(["run", "--net", "alexnet", "--device", "cuda", "--db"])
        .arg(t.root.join("x.db"));
    roots(&mut cmd, &t, false);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot work on this board") && err.contains("sm_62"),
        "{err}"
    );
    assert!(!t.root.join("x.db").exists(), "nothing may be written");

    // An Orin with CUDA 12.2 installed gets past the board check (to the build's own check).
    orin_nx_device_tree(&t.sys());
    write(
        &t.rootfs(),
        "usr/local/cuda/version.json",
        r#"{"cuda": {"name": "CUDA SDK", "version": "12.2.140"}}"#,
    );
    let mut cmd = edgebench(&t.root);
    cmd.args(["run", "--net", "alexnet", "--device", "cuda", "--db"])
        .arg(t.root.join("x.db"));
    roots(&mut cmd, &t, false);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("cannot work on this board"), "{err}");
    if cfg!(not(feature = "cuda")) {
        assert_eq!(out.status.code(), Some(2));
        assert!(err.contains("without the `cuda` feature"), "{err}");
    }
}

/// AGX Thor on JetPack 7 (L4T R38): detected by its device tree, its nvpmodel mode recorded;
/// its Blackwell GPU refused with a CUDA older than 12.8, accepted by the board check with 13.0.
#[test]
fn agx_thor_provenance_and_its_cuda_obstacle() {
    let t = orin_nx();
    thor_device_tree(&t.sys());
    write(
        &t.rootfs(),
        "etc/nv_tegra_release",
        "# R38 (release), REVISION: 2.1, GCID: 41844464, BOARD: generic, EABI: aarch64, DATE: Thu Aug 21 09:04:39 UTC 2025\n",
    );
    let mut cmd = edgebench(&t.root);
    cmd.args(["provenance", "--json"]);
    roots(&mut cmd, &t, true);
    let out = ok(cmd.output().unwrap());
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &all["now"];
    assert_eq!(p["board"], "agx-thor", "{p}");
    assert_eq!(p["l4t"], "R38.2.1 (generic)", "{p}");
    assert_eq!(p["nvpmodel"], "0 (MAXN)", "{p}");

    let cuda = |version: &str| {
        write(
            &t.rootfs(),
            "usr/local/cuda/version.json",
            &format!(r#"{{"cuda": {{"name": "CUDA SDK", "version": "{version}"}}}}"#),
        );
        let mut cmd = edgebench(&t.root);
        cmd.args(["run", "--net", "alexnet", "--device", "cuda", "--db"])
            .arg(t.root.join("x.db"));
        roots(&mut cmd, &t, false);
        cmd.output().unwrap()
    };
    let out = cuda("12.6.68");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot work on this board") && err.contains("CUDA >= 12.8"),
        "{err}"
    );
    assert!(!t.root.join("x.db").exists(), "nothing may be written");
    let out = cuda("13.0.48");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("cannot work on this board"), "{err}");
}
