//! The board a sweep runs on is resolved once: forced with `--board` on a tree that detects as
//! another board, the forced one is what every part of the sweep uses and records.

use crate::common::{arg, describe, edgebench, ok, results};
use crate::fixtures::jetson::{orin_nx_board, orin_nx_power, write, TX2_COMPATIBLE};
use crate::fixtures::prometheus::{free_port, http_get};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// `edgebench provenance --json` of `db` (each run's recorded provenance), or of the host now.
fn provenance(root: &Path, db: Option<&Path>) -> Value {
    let mut cmd = edgebench(root);
    cmd.args(["provenance", "--json", "--sysfs"])
        .arg(root.join("sys"))
        .arg("--rootfs")
        .arg(root.join("rootfs"));
    if let Some(db) = db {
        cmd.arg("--db").arg(db);
    }
    serde_json::from_slice(&ok(cmd.output().unwrap()).stdout).unwrap()
}

#[test]
fn a_forced_board_is_the_one_provenance_power_peaks_and_metrics_record() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    orin_nx_board(root);
    orin_nx_power(&root.join("sys"));
    // The tree is an Orin NX to detection.
    assert_eq!(provenance(root, None)["now"]["board"], "orin-nx");

    // An ops sweep with power and live metrics, forced to the AGX Orin profile.
    let db = root.join("forced.db");
    let config = root.join("forced.toml");
    std::fs::write(
        &config,
        "[ops]\nmin_executions = 3\nmin_time_s = 0.2\n[power]\nbaseline_s = 0.5\n",
    )
    .unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = edgebench(root)
        .args(["run", "--workload", "ops", "--op", "mul", "--mb", "4"])
        .args(["--power", "--board", "agx-orin", "--metrics", &listen])
        .args(["--config", arg(&config), "--db", arg(&db)])
        .args(["--sysfs", arg(&root.join("sys"))])
        .args(["--rootfs", arg(&root.join("rootfs"))])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The endpoint serves from before the peaks are measured until the sweep returns.
    let deadline = Instant::now() + Duration::from_secs(120);
    let scraped = loop {
        if let Ok((200, body)) = http_get(&listen, "/metrics") {
            break Some(body);
        }
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let scraped = scraped.unwrap_or_else(|| panic!("no metrics on {listen}\n{}", describe(&out)));
    let series: Vec<&str> = scraped
        .lines()
        .filter(|l| l.starts_with("edgebench_") && l.contains('{'))
        .collect();
    assert!(!series.is_empty(), "{scraped}");
    for line in series {
        assert!(line.contains("board=\"agx-orin\""), "{line}");
    }

    // Power discovery: the run's board.
    let rows = results(root, &db);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "ok", "{}", rows[0]);
    assert_eq!(rows[0]["board"], "agx-orin", "{}", rows[0]);
    // Provenance: the board, how it was chosen, and the roofs of that board's profile
    // (AGX Orin: 422.4 GFLOP/s, 204.8 GB/s; an Orin NX's are 256 and 102.4).
    let recorded = provenance(root, Some(&db));
    let runs = recorded.as_object().unwrap();
    assert_eq!(runs.len(), 1, "{recorded}");
    let p = runs.values().next().unwrap();
    assert_eq!(p["board"], "agx-orin", "{p}");
    assert!(
        p["board.detected_by"]
            .as_str()
            .is_some_and(|how| how.contains("forced")),
        "{p}"
    );
    assert_eq!(p["peaks.cpu.theoretical_gflops"], "422.4", "{p}");
    assert_eq!(p["peaks.cpu.theoretical_gbs"], "204.8", "{p}");
}

/// The CUDA check judges the forced board: a TX2 profile (sm_62) forced on an Orin NX with
/// CUDA 12.2 is refused for the TX2's reason, and a TX2 tree forced to the Orin NX passes the
/// board check.
#[test]
fn the_cuda_check_judges_the_forced_board() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    orin_nx_board(root);
    write(
        &root.join("rootfs"),
        "usr/local/cuda/version.json",
        r#"{"cuda": {"name": "CUDA SDK", "version": "12.2.140"}}"#,
    );
    let db = root.join("x.db");
    let cuda_run = |board: &str| {
        edgebench(root)
            .args([
                "run", "--net", "alexnet", "--device", "cuda", "--board", board,
            ])
            .args(["--db", arg(&db)])
            .args(["--sysfs", arg(&root.join("sys"))])
            .args(["--rootfs", arg(&root.join("rootfs"))])
            .output()
            .unwrap()
    };
    let out = cuda_run("tx2");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        err.contains("cannot work on this board")
            && err.contains("sm_62")
            && err.contains("forced"),
        "{err}"
    );
    assert!(!db.exists(), "nothing may be written");

    write(
        &root.join("sys"),
        "firmware/devicetree/base/compatible",
        TX2_COMPATIBLE,
    );
    let out = cuda_run("orin-nx");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("cannot work on this board"), "{err}");

    // An unknown name is bad input, refused before anything is written.
    let out = cuda_run("orin-xyz");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(err.contains("unknown board 'orin-xyz'"), "{err}");
    assert!(!db.exists(), "nothing may be written");
}
