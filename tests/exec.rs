//! The external-command workload end to end through the binary: `edgebench exec` and `[[exec]]`
//! sweeps of small shell scripts that print each log format, allocate memory, spawn children,
//! sleep, fail, run past a timeout, are interrupted or OOM-killed. No framework is needed.

mod common;

use common::jetson::orin_nx_power;
use common::{count, describe, edgebench, ok, results, wait_for};
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// `edgebench exec --db DB FLAGS -- COMMAND`.
fn exec(dir: &Path, db: &Path, flags: &[&str], command: &[&str]) -> Output {
    edgebench(dir)
        .arg("exec")
        .arg("--db")
        .arg(db)
        .args(flags)
        .arg("--")
        .args(command)
        .output()
        .unwrap()
}

/// A trial's stored output tail of `stream`.
fn tail(db: &Path, stream: &str) -> String {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT tail FROM trial_output WHERE stream = ?1 ORDER BY trial_id DESC LIMIT 1",
            [stream],
            |r| r.get(0),
        )
        .unwrap()
}

/// (t_start_ns, t_end_ns, step_s) of every stored iteration, in step order.
fn iterations(db: &Path) -> Vec<(i64, i64, f64)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut st = conn
        .prepare("SELECT t_start_ns, t_end_ns, step_s FROM iterations ORDER BY trial_id, step")
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn parsed_steps_are_records_with_energy_aligned_to_them() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let db = dir.path().join("exec.db");
    // Eight steps 0.15 s apart without a time of their own: the interval is the step time.
    let script = "for i in 0 1 2 3 4 5 6 7; do sleep 0.15; \
                  echo \"EDGEBENCH step=$i loss=$((20-i)) images=4\"; done";
    let out = exec(
        dir.path(),
        &db,
        &[
            "--name",
            "script",
            "--parser",
            "edgebench",
            "--net",
            "alexnet",
            "--batch",
            "4",
            "--power",
            "--sysfs",
            sys.to_str().unwrap(),
        ],
        &["sh", "-c", script],
    );
    ok(out);
    let rows = results(dir.path(), &db);
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["workload"], "exec", "{r}");
    assert_eq!(r["engine"], "script");
    assert_eq!(r["command"], serde_json::json!(["sh", "-c", script]));
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["status"], "ok");
    assert_eq!(
        (r["net"].as_str(), r["batch"].as_u64()),
        (Some("alexnet"), Some(4))
    );
    assert_eq!(r["iterations"], 8);
    assert_eq!(
        (r["loss_first"].as_f64(), r["loss_last"].as_f64()),
        (Some(20.0), Some(13.0))
    );
    let per_image = r["time_per_image_s"].as_f64().unwrap();
    assert!((0.025..0.1).contains(&per_image), "0.15 s / 4 images: {r}");
    // Energy covers exactly the measured records (after the 2 warm-up ones) at the fixture's
    // steady 7.5 W.
    let its = iterations(&db);
    assert_eq!(its.len(), 8);
    for pair in its.windows(2) {
        assert_eq!(pair[0].1, pair[1].0, "records are back to back");
    }
    let span_s = (its[7].1 - its[2].0) as f64 * 1e-9;
    let energy = r["energy_j"].as_f64().unwrap();
    assert!(
        (energy - 7.5 * span_s).abs() < 1e-6 * energy.max(1.0),
        "{energy} vs {span_s} s: {r}"
    );
    let per_image_j = r["energy_per_image_j"].as_f64().unwrap();
    assert!(
        (per_image_j - energy / 24.0).abs() < 1e-9,
        "6 measured steps x 4: {r}"
    );
    assert!(tail(&db, "stdout").contains("EDGEBENCH step=7 loss=13"));
}

#[test]
fn caffe_lines_that_cover_several_steps_count_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("caffe.db");
    // Caffe's display line every 10 iterations, on stderr as glog writes it.
    let script = "for i in 0 10 20 30 40; do sleep 0.1; \
                  echo \"I1222 14:03:21.372112  2471 solver.cpp:218] Iteration $i (10 iter/s, 1s/10 iters), loss = 6.9\" >&2; done";
    let out = exec(
        dir.path(),
        &db,
        &[
            "--name", "caffe", "--parser", "caffe", "--batch", "2", "--warmup", "1",
        ],
        &["sh", "-c", script],
    );
    ok(out);
    let r = &results(dir.path(), &db)[0];
    assert_eq!(r["iterations"], 5, "{r}");
    // 1 s per 10 iterations is 0.1 s each, whatever the interval between the lines.
    let per_iteration = r["time_per_iteration_s"].as_f64().unwrap();
    assert!((per_iteration - 0.1).abs() < 1e-9, "{r}");
    // Four measured records of 10 steps each.
    assert!(
        (r["total_time_s"].as_f64().unwrap() - 4.0).abs() < 1e-9,
        "{r}"
    );
    assert!(
        (r["time_per_image_s"].as_f64().unwrap() - 0.05).abs() < 1e-9,
        "{r}"
    );
}

#[test]
fn a_command_without_step_lines_is_measured_whole_with_its_childrens_memory() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    orin_nx_power(&sys);
    let db = dir.path().join("whole.db");
    // dd, a grandchild of the worker, fills a 96 MiB buffer over and over.
    let script =
        "dd if=/dev/zero of=/dev/null bs=96M count=40 2>/dev/null; sleep 0.3; echo finished";
    let started = Instant::now();
    ok(exec(
        dir.path(),
        &db,
        &[
            "--parser",
            "edgebench",
            "--power",
            "--sysfs",
            sys.to_str().unwrap(),
        ],
        &["sh", "-c", script],
    ));
    let outside = started.elapsed().as_secs_f64();
    let r = &results(dir.path(), &db)[0];
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["engine"], "sh", "named after its program");
    assert_eq!(r["iterations"], 0);
    assert!(r["time_per_image_s"].is_null() && r["loss_first"].is_null());
    let wall = r["wall_time_s"].as_f64().unwrap();
    assert!(
        wall >= 0.3 && wall < outside,
        "{wall} s of {outside} s: {r}"
    );
    assert_eq!(r["total_time_s"].as_f64(), Some(wall));
    let energy = r["energy_j"].as_f64().unwrap();
    assert!(
        (energy - 7.5 * wall).abs() < 1e-6 * energy,
        "{energy} J over {wall} s: {r}"
    );
    assert!((r["edp_js"].as_f64().unwrap() - energy * wall).abs() < 1e-6 * energy * wall);
    let peak = r["peak_rss_bytes"].as_u64().unwrap();
    assert!(
        peak >= 96 << 20,
        "the grandchild's 96 MiB counted: {peak} bytes"
    );
    assert!(
        r["swap_pressure"].is_boolean(),
        "a verdict for the whole command: {r}"
    );
    assert_eq!(tail(&db, "stdout"), "finished\n");
}

#[test]
fn a_failing_command_is_failed_with_the_end_of_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fail.db");
    let out = exec(
        dir.path(),
        &db,
        &["--parser", "edgebench"],
        &[
            "sh",
            "-c",
            "echo 'EDGEBENCH step=0 loss=1'; echo 'CUDA out of memory' >&2; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let r = &results(dir.path(), &db)[0];
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["exit_code"], 3);
    let error = r["error"].as_str().unwrap();
    assert!(
        error.contains("code 3") && error.contains("CUDA out of memory"),
        "{error}"
    );
    assert_eq!(r["iterations"], 1, "the step it logged is kept");
    assert_eq!(tail(&db, "stderr"), "CUDA out of memory\n");

    // A program that does not exist fails the trial, not the sweep.
    let out = exec(
        dir.path(),
        &db,
        &["--name", "missing"],
        &["/nonexistent/train"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let r = &results(dir.path(), &db)[1];
    assert_eq!(r["status"], "failed", "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("/nonexistent/train"),
        "{r}"
    );
    assert!(r["exit_code"].is_null(), "{r}");
}

#[test]
fn a_command_past_its_timeout_is_ended_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("timeout.db");
    let marker = dir.path().join("child.pid");
    // The script's child writes its pid and sleeps on.
    let script = format!("sleep 60 & echo $! > {}; wait", marker.display());
    let started = Instant::now();
    let out = exec(
        dir.path(),
        &db,
        &["--timeout", "1s"],
        &["sh", "-c", &script],
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{}",
        describe(&out)
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let r = &results(dir.path(), &db)[0];
    assert_eq!(r["status"], "failed", "{r}");
    assert!(r["error"].as_str().unwrap().contains("timeout"), "{r}");
    assert!(r["exit_code"].is_null(), "ended by edgebench: {r}");
    let child: u32 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !common::alive(child),
        "the command's child {child} was ended too"
    );
}

#[test]
fn ctrl_c_interrupts_the_command_and_the_next_run_resumes_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("int.db");
    let script = "i=0; while [ $i -lt 100 ]; do echo \"EDGEBENCH step=$i loss=1\"; i=$((i+1)); sleep 0.05; done";
    let run = || {
        let mut cmd = edgebench(dir.path());
        cmd.args(["exec", "--parser", "edgebench", "--name", "loop", "--db"])
            .arg(&db)
            .args(["--", "sh", "-c", script]);
        cmd
    };
    // In a process group of its own, like a shell's foreground job, so Ctrl-C (SIGINT to the
    // whole group) reaches edgebench and its worker but not the test.
    use std::os::unix::process::CommandExt;
    let child = run()
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(
        &db,
        "SELECT COUNT(*) FROM iterations",
        3,
        Duration::from_secs(60),
    );
    // SAFETY: kill(2) on the group we created; a negative pid addresses it.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{}",
        describe(&out)
    );
    assert_eq!(out.status.code(), Some(130), "{}", describe(&out));
    let rows = results(dir.path(), &db);
    assert_eq!(rows[0]["status"], "interrupted", "{}", rows[0]);
    let done = rows[0]["iterations"].as_u64().unwrap();
    assert!((3..100).contains(&done), "{}", rows[0]);
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM trials WHERE status = 'running'"),
        0
    );

    // An interrupted trial runs again; an ok one is not repeated.
    let again = |expect: &str| {
        let out = ok(run().output().unwrap());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains(expect), "{expect}: {text}");
    };
    again("1 trial(s) run, 0 already done");
    assert_eq!(results(dir.path(), &db)[1]["iterations"], 100);
    again("0 trial(s) run, 1 already done");
}

#[test]
fn a_config_sweep_expands_the_placeholders_and_resumes_by_command() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sweep.db");
    let config = dir.path().join("exec.toml");
    std::fs::write(
        &config,
        r#"
[sweep]
workload = "exec"
nets = ["alexnet", "resnet50"]
devices = ["cuda"]
batches = [2, 8]
images = 64

[[exec]]
name = "script"
command = ["sh", "-c", "echo EDGEBENCH step=0 loss={batch} images={batch}; echo {net} {device} {images}"]
parser = "edgebench"
timeout = "2m"
"#,
    )
    .unwrap();
    let run = || {
        edgebench(dir.path())
            .args(["run", "--config"])
            .arg(&config)
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap()
    };
    let out = ok(run());
    assert!(String::from_utf8_lossy(&out.stdout).contains("4 trial(s) run"));
    let rows = results(dir.path(), &db);
    let got: Vec<(String, u64, String)> = rows
        .iter()
        .map(|r| {
            (
                r["net"].as_str().unwrap().to_string(),
                r["batch"].as_u64().unwrap(),
                r["command"][2].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got[1],
        (
            "alexnet".to_string(),
            8,
            "echo EDGEBENCH step=0 loss=8 images=8; echo alexnet cuda 64".to_string()
        )
    );
    assert_eq!(
        got[2].0, "resnet50",
        "any net name: the command decides what it trains"
    );
    assert!(rows
        .iter()
        .all(|r| r["status"] == "ok" && r["iterations"] == 1));
    assert_eq!(rows[3]["loss_last"], 8.0);
    assert!(String::from_utf8_lossy(&ok(run()).stdout).contains("0 trial(s) run, 4 already done"));

    // A sweep whose command ignores an axis it varies would record one run twice: refused.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("loss={batch} images={batch}", "loss=1");
    std::fs::write(&config, text).unwrap();
    let out = run();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("gives the same command"));
}

#[test]
fn a_command_that_overflows_its_memory_limit_is_oom() {
    if let Some(why) = common::cgroup_unusable() {
        eprintln!("skipped: memory cgroup unusable: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("oom.db");
    let out = exec(
        dir.path(),
        &db,
        &["--mem-limit", "64M", "--mem-swap-limit", "0"],
        &["sh", "-c", "dd if=/dev/zero of=/dev/null bs=256M count=1"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let r = &results(dir.path(), &db)[0];
    assert_eq!(r["status"], "oom", "{r}");
    assert_eq!(r["mem_limit_bytes"], 64 << 20);
}
