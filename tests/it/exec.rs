//! The external-command workload end to end through the binary: `edgebench exec` and `[[exec]]`
//! sweeps of small shell scripts that print each log format, allocate memory, spawn children,
//! sleep, fail, run past a timeout, are interrupted or OOM-killed. No framework is needed.
//! Then `edgebench import logs` of folders in the study scripts' layout (Caffe's glog lines,
//! TensorFlow's TF-Slim lines), and the engines as a series in `export csv` and `report`.

use crate::common;
use crate::common::{arg, count, describe, edgebench, ok, results, run_edgebench, wait_for};
use crate::fixtures;
use crate::fixtures::jetson::orin_nx_power;
use serde_json::Value;
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
    // A sampler stalled past the gap threshold on a busy host leaves that span out, and says so.
    let measured_s = span_s - r["power_gap_s"].as_f64().unwrap_or(0.0);
    assert!(
        (energy - 7.5 * measured_s).abs() < 1e-6 * energy.max(1.0),
        "{energy} vs {measured_s} s measured: {r}"
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
    // dd, a grandchild of the worker, fills a 96 MiB buffer over and over: long enough for
    // several of the memory sampler's readings (every 100 ms) on a fast host.
    let script =
        "dd if=/dev/zero of=/dev/null bs=96M count=100 2>/dev/null; sleep 0.3; echo finished";
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
    let measured_s = wall - r["power_gap_s"].as_f64().unwrap_or(0.0);
    assert!(
        (energy - 7.5 * measured_s).abs() < 1e-6 * energy,
        "{energy} J over {measured_s} s measured of {wall} s: {r}"
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
        common::cannot_run(&format!("memory cgroup unusable: {why}"));
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

/// A glog timestamp `seconds` after 14:03:20 on Dec 22.
fn glog(seconds: f64) -> String {
    let us = (seconds * 1e6).round() as u64 + (14 * 3600 + 3 * 60 + 20) * 1_000_000;
    let (s, us) = (us / 1_000_000, us % 1_000_000);
    format!(
        "I1222 {:02}:{:02}:{:02}.{us:06}",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// A Caffe run as `caffe train` logs it with `display: 20`, `max_iter: 60`: iteration 0 takes
/// `first_s`, every other iteration `per_iter_s`; the learning rate follows each display line.
fn caffe_log(first_s: f64, per_iter_s: f64, losses: [f64; 4]) -> String {
    let mut log = format!(
        "Log file created at: 2017/12/22 14:03:20\n\
         Running on machine: tegra-ubuntu\n\
         Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg\n\
         {} 2471 caffe.cpp:217] Using GPUs 0\n\
         {} 2471 solver.cpp:289] Solving AlexNet\n",
        glog(0.0),
        glog(0.0)
    );
    let mut t = first_s;
    log += &format!(
        "{} 2471 solver.cpp:218] Iteration 0 (0 iter/s, {first_s}s/20 iters), loss = {}\n\
         {} 2471 sgd_solver.cpp:105] Iteration 0, lr = 0.01\n",
        glog(t),
        losses[0],
        glog(t + 0.0001)
    );
    for (i, loss) in losses[1..3].iter().enumerate() {
        t += 20.0 * per_iter_s;
        log += &format!(
            "{} 2471 solver.cpp:218] Iteration {} ({} iter/s, {}s/20 iters), loss = {loss}\n\
             {} 2471 sgd_solver.cpp:105] Iteration {}, lr = 0.01\n",
            glog(t),
            20 * (i + 1),
            1.0 / per_iter_s,
            20.0 * per_iter_s,
            glog(t + 0.0001),
            20 * (i + 1)
        );
    }
    t += 20.0 * per_iter_s;
    log += &format!(
        "{} 2471 solver.cpp:310] Iteration 60, loss = {}\n\
         {} 2471 solver.cpp:315] Optimization Done.\n",
        glog(t),
        losses[3],
        glog(t + 0.01)
    );
    log
}

/// TF-Slim's training loop logging every 10th step: no timestamps, no learning rate.
fn tensorflow_log(sec_per_step: f64) -> String {
    let mut log = String::from("INFO:tensorflow:Starting Session.\n");
    for (i, loss) in [6.9078, 6.8812, 6.8520].iter().enumerate() {
        log += &format!(
            "INFO:tensorflow:global step {}: loss = {loss:.4} ({sec_per_step:.3} sec/step)\n",
            10 * (i + 1)
        );
    }
    log + "INFO:tensorflow:Stopping Training.\n"
}

fn folder(dir: &Path, files: &[(&str, String)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

fn import(dir: &Path, logs: &Path, parser: &str, engine: &str, db: &Path) -> std::process::Output {
    run_edgebench(
        dir,
        &[
            "import",
            "logs",
            arg(logs),
            "--parser",
            parser,
            "--engine",
            engine,
            "--host",
            "tx1",
            "--db",
            arg(db),
        ],
    )
}

fn row<'a>(rows: &'a [Value], engine: &str, device: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["engine"] == engine && r["device"] == device)
        .unwrap_or_else(|| panic!("no {engine} {device} row in {rows:#?}"))
}

/// The last column (`avg_time`) of a times CSV's first data row.
fn first_avg_time(times: &str) -> f64 {
    let row = times.lines().nth(1).expect("a data row");
    row.rsplit_once(',').unwrap().1.parse().unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn import_logs_of_study_folders_records_exec_trials_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, db) = (tmp.path(), tmp.path().join("results.db"));
    let caffe = dir.join("caffe_logs");
    folder(
        &caffe,
        &[
            (
                "train_alexnet_GPU_016.log",
                caffe_log(1.0, 0.25, [6.91, 6.88, 6.85, 6.8]),
            ),
            (
                "train_alexnet_CPU_016.log",
                caffe_log(4.0, 2.0, [6.92, 6.9, 6.87, 6.83]),
            ),
            ("README.txt", "logs of the TX1 runs\n".into()),
        ],
    );
    let tf = dir.join("tf_logs");
    folder(&tf, &[("train_googlenet_CPU_008.log", tensorflow_log(1.5))]);

    let out = ok(import(dir, &caffe, "caffe", "caffe", &db));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("imported 2 log(s) as engine caffe"), "{text}");
    ok(import(dir, &tf, "tensorflow", "tensorflow", &db));

    let rows = results(dir, &db);
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let gpu = row(&rows, "caffe", "cuda");
    for (key, want) in [
        ("workload", Value::from("exec")),
        ("host", "tx1".into()),
        ("net", "alexnet".into()),
        ("batch", 16.into()),
        ("status", "ok".into()),
        ("command", Value::Array(Vec::new())),
        ("exit_code", Value::Null),
        ("energy_j", Value::Null),
        ("edp_js", Value::Null),
        ("power_samples", Value::Null),
        ("power_note", "imported log: no power measured".into()),
        // Display lines at 0, 20 and 40; the line for 60 is the loss after training.
        ("iterations", 3.into()),
        ("iterations_planned", 0.into()),
        ("warmup_iterations", 0.into()),
        ("wall_time_s", Value::Null),
        ("loss_first", 6.91.into()),
        ("loss_last", 6.85.into()),
    ] {
        assert_eq!(gpu[key], want, "{key} in {gpu:#?}");
    }
    // Every record's time is per iteration: 0.25 s, so 15.625 ms per image of 16.
    assert!(
        close(gpu["time_per_image_s"].as_f64().unwrap(), 0.25 / 16.0),
        "{gpu:#?}"
    );
    // Iteration 0 (1 s) and the 40 displayed after it at 0.25 s; the snapshot is no iteration.
    assert!(
        close(gpu["total_time_s"].as_f64().unwrap(), 11.0),
        "{gpu:#?}"
    );
    assert!(gpu["imported_log"]
        .as_str()
        .unwrap()
        .ends_with("caffe_logs/train_alexnet_GPU_016.log"));
    let tf_row = row(&rows, "tensorflow", "cpu");
    assert_eq!(tf_row["net"], "googlenet");
    assert_eq!(tf_row["batch"], 8);
    assert!(close(
        tf_row["time_per_image_s"].as_f64().unwrap(),
        1.5 / 8.0
    ));

    // The iterations, with Caffe's learning rate on its own step and none from TensorFlow.
    let iterations = |sql: &str| count(&db, sql);
    assert_eq!(iterations("SELECT count(*) FROM iterations"), 3 + 3 + 3);
    assert_eq!(
        iterations(
            "SELECT count(*) FROM iterations i JOIN trials t ON t.id = i.trial_id \
             WHERE t.device = 'cuda' AND i.lr = 0.01 AND i.step IN (0, 20, 40) \
             AND i.step_s IN (1.0, 0.25)"
        ),
        3
    );
    assert_eq!(
        iterations(
            "SELECT count(*) FROM iterations i JOIN trials t ON t.id = i.trial_id \
             WHERE t.net = 'googlenet' AND i.lr IS NULL AND i.step_s = 1.5"
        ),
        3
    );
    // One run per import, saying where it came from.
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 2);
    assert_eq!(
        count(
            &db,
            &format!(
                "SELECT count(*) FROM run_provenance WHERE key = 'import.dir' AND value = '{}'",
                caffe.display()
            )
        ),
        1
    );

    // The same folder again, and a copy of it under another host name: nothing new.
    let out = ok(import(dir, &caffe, "caffe", "caffe", &db));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("train_alexnet_GPU_016.log: already imported (host tx1")
            && text.contains("nothing imported"),
        "{text}"
    );
    let copy = dir.join("copy");
    folder(
        &copy,
        &[(
            "train_alexnet_GPU_016.log",
            std::fs::read_to_string(caffe.join("train_alexnet_GPU_016.log")).unwrap(),
        )],
    );
    ok(run_edgebench(
        dir,
        &[
            "import",
            "logs",
            arg(&copy),
            "--parser",
            "caffe",
            "--engine",
            "caffe",
            "--host",
            "other",
            "--db",
            arg(&db),
        ],
    ));
    assert_eq!(results(dir, &db).len(), 3);
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 2);

    // A new log beside the old ones (another run of the study): only it is imported.
    folder(
        &caffe,
        &[(
            "train_alexnet_GPU_032.log",
            caffe_log(1.0, 0.4, [6.9, 6.8, 6.7, 6.6]),
        )],
    );
    let out = ok(import(dir, &caffe, "caffe", "caffe", &db));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("imported 1 log(s)") && text.contains("2 already there"),
        "{text}"
    );
    assert_eq!(results(dir, &db).len(), 4);

    // `results` names the engine.
    let out = ok(run_edgebench(dir, &["results", "--db", arg(&db)]));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("caffe alexnet"),
        "{}",
        describe(&out)
    );
}

#[test]
fn import_logs_refuses_bad_input_naming_it_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, db) = (tmp.path(), tmp.path().join("results.db"));
    let refused = |args: &[&str], says: &str| {
        let mut all = vec!["import", "logs"];
        all.extend_from_slice(args);
        all.extend(["--db", arg(&db)]);
        let out = run_edgebench(dir, &all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?} should say {says:?}: {err}");
    };
    let missing = dir.join("absent");
    refused(
        &[arg(&missing), "--parser", "caffe", "--engine", "caffe"],
        "cannot read the log folder",
    );
    let empty = dir.join("empty");
    folder(&empty, &[("notes.txt", "no logs yet".into())]);
    refused(
        &[arg(&empty), "--parser", "caffe", "--engine", "caffe"],
        "no log named train_{net}_{CPU|GPU}_{batch}.log",
    );
    assert!(!db.exists(), "a refused import created the database");

    let good = dir.join("good");
    folder(
        &good,
        &[(
            "train_alexnet_GPU_016.log",
            caffe_log(1.0, 0.25, [6.9, 6.8, 6.7, 6.6]),
        )],
    );
    refused(
        &[arg(&good), "--parser", "mxnet", "--engine", "mxnet"],
        "unknown log parser 'mxnet'",
    );
    refused(
        &[arg(&good), "--parser", "caffe", "--engine", "edgebench"],
        "--engine edgebench",
    );
    refused(
        &[arg(&good), "--parser", "caffe", "--engine", "../caffe"],
        "--engine \"../caffe\"",
    );
    assert!(!db.exists(), "a refused import created the database");

    // A database with a run in it stays as it was when a folder holds one bad log.
    ok(import(dir, &good, "caffe", "caffe", &db));
    let before = fixtures::db::table_counts(&db);
    folder(
        &good,
        &[
            (
                "train_alexnet_CPU_016.log",
                caffe_log(4.0, 2.0, [6.9, 6.8, 6.7, 6.6]),
            ),
            (
                "train_googlenet_GPU_004.log",
                "I1222 14:03:20.000000  2471 caffe.cpp:217] Using GPUs 0\nKilled\n".into(),
            ),
        ],
    );
    refused(
        &[arg(&good), "--parser", "caffe", "--engine", "caffe"],
        "train_googlenet_GPU_004.log: no caffe step line",
    );
    // A TensorFlow log read as Caffe's: the wrong parser names the file too.
    let tf = dir.join("tf");
    folder(&tf, &[("train_alexnet_CPU_001.log", tensorflow_log(1.0))]);
    refused(
        &[arg(&tf), "--parser", "caffe", "--engine", "tensorflow"],
        "train_alexnet_CPU_001.log: no caffe step line",
    );
    assert_eq!(fixtures::db::table_counts(&db), before);
}

/// A log holding a killed run and a full one appended is refused naming its line, never
/// spliced; a log cut off in its last line is imported with a warning.
#[test]
fn a_log_of_two_runs_is_refused_and_a_cut_off_log_warned_about() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, db) = (tmp.path(), tmp.path().join("results.db"));
    let full = caffe_log(1.0, 0.25, [6.9, 6.8, 6.7, 6.6]);
    // The killed run: its header and first display line (lines 1 to 7).
    let killed: String = full.lines().take(7).map(|l| format!("{l}\n")).collect();
    for (parser, name, text, says) in [
        (
            "caffe",
            "train_alexnet_GPU_016.log",
            format!("{killed}{full}"),
            "train_alexnet_GPU_016.log: line 12: a second run starts here",
        ),
        (
            "tensorflow",
            "train_alexnet_CPU_001.log",
            format!("{}{}", tensorflow_log(1.0), tensorflow_log(0.5)),
            "train_alexnet_CPU_001.log: line 6: a second run starts here",
        ),
    ] {
        let logs = dir.join(parser);
        folder(&logs, &[(name, text)]);
        let out = import(dir, &logs, parser, parser, &db);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "should say {says:?}: {err}");
    }
    assert!(!db.exists(), "a refused import created the database");

    let cut = dir.join("cut");
    let text = full.trim_end().rsplit_once('\n').unwrap().0.to_string() + "\nI1222 14:0";
    folder(&cut, &[("train_alexnet_GPU_016.log", text)]);
    let out = ok(import(dir, &cut, "caffe", "caffe", &db));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has no end of line: the log was cut off"),
        "{err}"
    );
    // Dated by the log (created 2017/12/22 14:03:20), the import's own time kept beside.
    let rows = results(dir, &db);
    let r = &rows[0];
    let date = |k: &str| {
        r[k].as_str()
            .unwrap_or_else(|| panic!("{k}: {r}"))
            .to_string()
    };
    assert!(date("started_at").starts_with("2017-12-22T14:03:2"), "{r}");
    assert!(date("ended_at").starts_with("2017-12-22T14:0"), "{r}");
    assert!(!date("imported_at").starts_with("2017"), "{r}");
}

/// The edgebench files byte for byte as before any import, and a pair of files per engine.
#[test]
fn export_csv_writes_the_studies_files_for_every_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, db) = (tmp.path(), tmp.path().join("results.db"));
    fixtures::db::board_db(&db, "tx1");
    let export = |out: &str| {
        let out_dir = dir.join(out);
        ok(run_edgebench(
            dir,
            &[
                "export",
                "csv",
                "--db",
                arg(&db),
                "--out",
                arg(&out_dir),
                "--machine",
                "tx1",
            ],
        ));
        out_dir
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    let before = export("before");

    let caffe = dir.join("caffe_logs");
    folder(
        &caffe,
        &[
            (
                "train_alexnet_GPU_016.log",
                caffe_log(1.0, 0.25, [6.91, 6.88, 6.85, 6.8]),
            ),
            (
                "train_alexnet_CPU_016.log",
                caffe_log(4.0, 2.0, [6.92, 6.9, 6.87, 6.83]),
            ),
        ],
    );
    ok(import(dir, &caffe, "caffe", "caffe", &db));
    let tf = dir.join("tf_logs");
    folder(&tf, &[("train_googlenet_CPU_008.log", tensorflow_log(1.5))]);
    ok(import(dir, &tf, "tensorflow", "tensorflow", &db));
    let after = export("after");

    for name in ["loss_tx1_edgebench.csv", "times_tx1_edgebench.csv"] {
        assert_eq!(read(&after.join(name)), read(&before.join(name)), "{name}");
    }
    assert!(!before.join("loss_tx1_caffe.csv").exists());
    // The trials' own file is each engine's, with the net and batch that tell them apart.
    assert!(!after.join("exec_tx1_edgebench.csv").exists());
    let exec_caffe = read(&after.join("exec_tx1_caffe.csv"));
    assert!(
        exec_caffe.starts_with("#host,net,device,batch,"),
        "{exec_caffe}"
    );
    assert_eq!(
        exec_caffe.matches("tx1,alexnet,").count(),
        2,
        "{exec_caffe}"
    );
    assert!(read(&after.join("exec_tx1_tensorflow.csv")).contains("\ntx1,googlenet,cpu,8,"));

    let loss = read(&after.join("loss_tx1_caffe.csv"));
    let lines: Vec<&str> = loss.lines().collect();
    assert_eq!(lines[0], "#network,mode,batch,step,loss,time");
    assert_eq!(
        &lines[1..],
        [
            "alexnet,CPU,016,0,6.92,4",
            "alexnet,CPU,016,20,6.9,2",
            "alexnet,CPU,016,40,6.87,2",
            "alexnet,GPU,016,0,6.91,1",
            "alexnet,GPU,016,20,6.88,0.25",
            "alexnet,GPU,016,40,6.85,0.25",
        ]
    );
    // Per iteration: iteration 0's time and the 40 displayed after it, over 41 iterations.
    let times = read(&after.join("times_tx1_caffe.csv"));
    let avg: Vec<(String, f64)> = times
        .lines()
        .skip(1)
        .map(|l| {
            let (head, avg) = l.rsplit_once(',').unwrap();
            (head.to_string(), avg.parse().unwrap())
        })
        .collect();
    assert_eq!(avg.len(), 2, "{times}");
    assert_eq!(avg[0].0, "alexnet,CPU,016");
    assert!(close(avg[0].1, (4.0 + 40.0 * 2.0) / 41.0), "{times}");
    assert_eq!(avg[1].0, "alexnet,GPU,016");
    assert!(close(avg[1].1, (1.0 + 40.0 * 0.25) / 41.0), "{times}");

    // A command measured here is an engine too: a script logging every 5th step, each
    // line with its time per step.
    let script = "echo 'EDGEBENCH step=0 loss=7 time=0.5'; \
                  echo 'EDGEBENCH step=5 loss=6 time=0.125'; \
                  echo 'EDGEBENCH step=10 loss=5 time=0.125'";
    ok(exec(
        dir,
        &db,
        &[
            "--name",
            "torch",
            "--parser",
            "edgebench",
            "--net",
            "alexnet",
            "--batch",
            "4",
        ],
        &["sh", "-c", script],
    ));
    let measured = export("measured");
    assert_eq!(
        read(&measured.join("loss_tx1_torch.csv")),
        "#network,mode,batch,step,loss,time\r\n\
         alexnet,CPU,004,0,7,0.5\r\n\
         alexnet,CPU,004,5,6,0.125\r\n\
         alexnet,CPU,004,10,5,0.125\r\n"
    );
    let times = read(&measured.join("times_tx1_torch.csv"));
    let avg = first_avg_time(&times);
    assert!(close(avg, (0.5 + 10.0 * 0.125) / 11.0), "{times}");
    for name in [
        "loss_tx1_edgebench.csv",
        "loss_tx1_caffe.csv",
        "times_tx1_caffe.csv",
    ] {
        assert_eq!(
            read(&measured.join(name)),
            read(&after.join(name)),
            "{name}"
        );
    }

    // TF-Slim logs every 10th step, each line that step's own time.
    let times = read(&after.join("times_tx1_tensorflow.csv"));
    assert_eq!(times.lines().count(), 2, "{times}");
    let avg = first_avg_time(&times);
    assert!(close(avg, 1.5), "{times}");
    assert_eq!(
        read(&after.join("loss_tx1_tensorflow.csv")).lines().count(),
        4
    );
}

#[test]
fn report_shows_each_engine_with_its_speedup_and_unmeasured_energy() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, db) = (tmp.path(), tmp.path().join("results.db"));
    fixtures::db::board_db(&db, "tx1");
    let caffe = dir.join("caffe_logs");
    folder(
        &caffe,
        &[
            (
                "train_alexnet_GPU_016.log",
                caffe_log(1.0, 0.25, [6.91, 6.88, 6.85, 6.8]),
            ),
            (
                "train_alexnet_CPU_016.log",
                caffe_log(4.0, 2.0, [6.92, 6.9, 6.87, 6.83]),
            ),
            (
                "train_alexnet_CPU_032.log",
                caffe_log(6.0, 3.0, [6.92, 6.9, 6.87, 6.83]),
            ),
        ],
    );
    ok(import(dir, &caffe, "caffe", "caffe", &db));
    let out = dir.join("report");
    ok(run_edgebench(
        dir,
        &["report", arg(&db), "--out", arg(&out)],
    ));
    let host = out.join("tx1");
    let md = std::fs::read_to_string(host.join("summary.md")).unwrap();

    let table = |title: &str| -> Vec<Vec<String>> {
        let start = md
            .find(title)
            .unwrap_or_else(|| panic!("no {title} in {md}"));
        md[start..]
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().to_string())
                    .collect()
            })
            .collect()
    };
    // A table per device.
    let cpu_rows = table("## Engine caffe on cpu — tx1");
    let caffe_rows = table("## Engine caffe on cuda — tx1");
    let header = &caffe_rows[0];
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    assert_eq!(cpu_rows[0], *header);
    assert_eq!(cpu_rows.len() + caffe_rows.len(), 2 * (1 + 1) + 3, "{md}");
    assert_eq!(caffe_rows.len(), 1 + 1 + 1, "{md}");
    let gpu = &caffe_rows[2];
    // The median step: 0.25 s per iteration of 16 images.
    assert_eq!(gpu[col("median ms")], "15.625");
    // The time: the measured window (the first, slower step included) over its images.
    let rows = results(dir, &db);
    let logged = rows
        .iter()
        .find(|r| r["engine"] == "caffe" && r["device"] == "cuda")
        .unwrap();
    let f = |k: &str| logged[k].as_f64().unwrap();
    let per_image_ms = f("window_s") / (f("window_steps") * 16.0) * 1e3;
    assert!(per_image_ms > 15.625, "{logged}");
    assert_eq!(gpu[col("ms/image")], format!("{per_image_ms:.3}"));
    assert_eq!(gpu[col("GPU/CPU")], "8.00");
    assert_eq!(gpu[col("J/image")], "not measured");
    assert_eq!(gpu[col("EDP J·s")], "not measured");
    assert_eq!(gpu[col("source")], "imported log");
    let cpu32 = cpu_rows.iter().find(|r| r[col("batch")] == "32").unwrap();
    assert_eq!(cpu32[col("GPU/CPU")], "-");

    // Both engines' speedups side by side: edgebench's own (board_db: 0.2 / 0.01 = 20x).
    let speedups = table("## GPU-over-CPU speedup per engine — tx1");
    let engines: Vec<(&str, &str, &str, &str)> = speedups[2..]
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str(), r[2].as_str(), r[5].as_str()))
        .collect();
    assert!(
        engines.contains(&("caffe", "alexnet", "16", "8.00")),
        "{md}"
    );
    assert!(
        engines.contains(&("edgebench", "alexnet", "1", "20.00")),
        "{md}"
    );

    for plot in ["time_per_image_engines.svg", "speedup_engines.svg"] {
        let svg = std::fs::read_to_string(host.join(plot)).unwrap();
        assert!(svg.contains("caffe alexnet"), "{plot}");
        assert!(svg.contains("edgebench alexnet"), "{plot}");
    }
    // No engine other than edgebench's was measured: no per-engine energy plots.
    assert!(!host.join("edp_engines.svg").exists());
    assert!(host.join("loss_tx1_caffe.csv").exists());
}

/// `edgebench exec --db DB -- sh -c SCRIPT`, started in a process group of its own (like a
/// shell's job), output captured.
fn spawn_exec(dir: &Path, db: &Path, flags: &[&str], script: &str) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    edgebench(dir)
        .arg("exec")
        .arg("--db")
        .arg(db)
        .args(flags)
        .args(["--", "sh", "-c", script])
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The pid a script wrote to `file`, once it has.
fn pid_from(file: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never written",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn gone_within(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if !common::alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The trial cgroups `edgebench-<pid>-*` that the edgebench process `pid` made beside this
/// test's own memory cgroup.
fn trial_cgroups_of(pid: u32) -> Vec<std::path::PathBuf> {
    let parent = edgebench::memory::cgroup::locate(&Default::default()).unwrap();
    std::fs::read_dir(&parent.dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("edgebench-{pid}-"))
        })
        .map(|e| e.path())
        .collect()
}

#[test]
fn a_command_flooding_its_output_is_not_oom_under_a_tight_memory_limit() {
    if let Some(why) = common::cgroup_unusable() {
        return common::cannot_run(&format!("memory cgroup unusable: {why}"));
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flood.db");
    // 200 MB of output through the parser; the command itself needs about 2 MB. The console
    // copy of the output is not this test's business.
    let out = edgebench(dir.path())
        .args([
            "exec",
            "--db",
            arg(&db),
            "--mem-limit",
            "64M",
            "--mem-swap-limit",
            "0",
        ])
        .args(["--parser", "edgebench", "--", "sh", "-c"])
        .arg(
            "yes abcdefghijklmnopqrstuvwxyz0123456789 | head -n 5600000; \
             echo 'EDGEBENCH step=2 loss=0.5'",
        )
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let r = &results(dir.path(), &db)[0];
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["iterations"], 1, "{r}");
}

#[test]
fn kill_9_of_edgebench_ends_every_process_its_command_started() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k9.db");
    let pidfile = dir.path().join("sleep.pid");
    // A wrapper script's child, like bench/study/caffe.sh's framework: not the group leader.
    let script = format!("sleep 322 & echo $! > {}; wait; true", pidfile.display());
    let mut child = spawn_exec(dir.path(), &db, &[], &script);
    let sleeper = pid_from(&pidfile);
    common::signal(child.id(), libc::SIGKILL);
    child.wait().unwrap();
    assert!(
        gone_within(sleeper, Duration::from_secs(10)),
        "the command's child {sleeper} outlived edgebench"
    );
}

#[test]
fn a_sweep_after_kill_9_kills_what_a_dead_trial_left_and_removes_its_cgroup() {
    if let Some(why) = common::cgroup_unusable() {
        return common::cannot_run(&format!("memory cgroup unusable: {why}"));
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("stale.db");
    let pidfile = dir.path().join("sleep.pid");
    // The child leaves the command's process group: only the trial's cgroup still holds it.
    let script = format!(
        "setsid sleep 323 & echo $! > {}; wait; true",
        pidfile.display()
    );
    let child = spawn_exec(dir.path(), &db, &[], &script);
    let edgebench_pid = child.id();
    let sleeper = pid_from(&pidfile);
    // edgebench and its worker at once, as an OOM kill of the session or a power cut of the
    // terminal would: nobody is left to clean up.
    // SAFETY: kill(2) on the process group the test created.
    unsafe { libc::kill(-(edgebench_pid as i32), libc::SIGKILL) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), None, "{}", describe(&out));
    // Every sweep removes the cgroups of dead edgebench processes beside its own, so a sweep of
    // a test running beside this one may be the one that removes it: what is asserted is that
    // the next sweep starts with it gone and its process killed, whoever removed it.
    let stale = trial_cgroups_of(edgebench_pid);
    assert!(stale.len() <= 1, "{stale:?}");

    let next = exec(dir.path(), &db, &["--name", "next"], &["true"]);
    assert_eq!(next.status.code(), Some(0), "{}", describe(&next));
    assert!(
        gone_within(sleeper, Duration::from_secs(5)),
        "{sleeper} still runs"
    );
    for cgroup in &stale {
        assert!(!cgroup.exists(), "{} was not removed", cgroup.display());
    }
    let rows = results(dir.path(), &db);
    assert_eq!(rows[0]["status"], "interrupted", "{}", rows[0]);
    assert_eq!(rows[1]["status"], "ok", "{}", rows[1]);
}

#[test]
fn a_second_interrupt_kills_a_command_that_ignores_signals_and_records_the_trial_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("twice.db");
    let pidfile = dir.path().join("sleep.pid");
    let script = format!(
        "trap '' INT TERM; sleep 316 & echo $! > {}; wait; sleep 316",
        pidfile.display()
    );
    let child = spawn_exec(dir.path(), &db, &[], &script);
    let sleeper = pid_from(&pidfile);
    common::signal(child.id(), libc::SIGINT);
    std::thread::sleep(Duration::from_millis(300));
    let second = Instant::now();
    common::signal(child.id(), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    // Far below the command's 316 s; above the sweep's own 3 s deadline for the abort.
    assert!(
        second.elapsed() < Duration::from_secs(10),
        "{:?}\n{}",
        second.elapsed(),
        describe(&out)
    );
    assert_eq!(out.status.code(), Some(130), "{}", describe(&out));
    assert!(
        gone_within(sleeper, Duration::from_secs(2)),
        "the command's {sleeper} outlived the second interrupt"
    );
    let rows = results(dir.path(), &db);
    assert_eq!(rows[0]["status"], "interrupted", "{}", rows[0]);
    assert!(
        rows[0]["error"]
            .as_str()
            .unwrap()
            .contains("second interrupt"),
        "{}",
        rows[0]
    );
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM runs WHERE status = 'running'"),
        0
    );
}

#[test]
fn a_database_deleted_during_a_run_is_reported_and_its_results_kept_in_a_recovery_copy() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("del.db");
    // Two trials (batch 1 and 2) of one second each.
    let child = spawn_exec(
        dir.path(),
        &db,
        &["--batch", "1,2", "--name", "nap"],
        "sleep 1; echo {batch} > /dev/null",
    );
    wait_for(
        &db,
        "SELECT COUNT(*) FROM trials",
        1,
        Duration::from_secs(60),
    );
    for suffix in ["", "-wal", "-shm"] {
        let mut path = db.as_os_str().to_owned();
        path.push(suffix);
        let _ = std::fs::remove_file(path);
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr.contains("was deleted while edgebench was writing to it"),
        "{}",
        describe(&out)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("trial(s) run"));
    let copy = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("del.db.recovered-"))
        .unwrap_or_else(|| panic!("no recovery copy: {}", describe(&out)));
    assert!(stderr.contains(&*copy.to_string_lossy()), "{stderr}");
    assert!(!db.exists());
    let rows = results(dir.path(), &copy);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "ok", "{}", rows[0]);
    assert_eq!(
        count(
            &copy,
            "SELECT COUNT(*) FROM runs WHERE status = 'interrupted'"
        ),
        1
    );
}

#[test]
fn a_command_runs_as_the_user_its_entry_names_and_an_unknown_user_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return common::cannot_run("switching to another user needs root");
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("user.db");
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let out = exec(
        dir.path(),
        &db,
        &["--user", "nobody"],
        &["sh", "-c", "id -u; id -g; echo \"$HOME\""],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let said: Vec<String> = tail(&db, "stdout").lines().map(String::from).collect();
    assert_eq!(
        said,
        [
            nobody.uid.to_string(),
            nobody.gid.to_string(),
            nobody.dir.display().to_string()
        ]
    );

    let out = exec(dir.path(), &db, &["--user", "no-such-user-here"], &["true"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("user 'no-such-user-here' does not exist"),
        "{}",
        describe(&out)
    );
}

#[test]
fn a_step_that_stalls_far_beyond_the_median_flags_the_trial() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("stall.db");
    // Step 8 waits 1.6 s where the others take 0.05 s: a stopped process or a swap storm.
    let script = "for i in 0 1 2 3 4 5 6 7 8 9 10 11; do \
        if [ $i = 8 ]; then sleep 1.6; else sleep 0.05; fi; \
        echo \"EDGEBENCH step=$i loss=1\"; done";
    let out = exec(
        dir.path(),
        &db,
        &["--parser", "edgebench"],
        &["sh", "-c", script],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("STALL"),
        "{}",
        describe(&out)
    );
    let r = &results(dir.path(), &db)[0];
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["stalled_steps"], 1, "{r}");
    // 1.6 s of sleep and what starting the commands around it took.
    let note = r["stall_note"].as_str().unwrap();
    let took: f64 = note
        .split_once("took ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no step time in {note:?}"));
    assert!((1.6..3.0).contains(&took), "{r}");

    // An even trial is not flagged, and says so (0, not null).
    let db = dir.path().join("even.db");
    let out = exec(
        dir.path(),
        &db,
        &["--parser", "edgebench"],
        &[
            "sh",
            "-c",
            "for i in 0 1 2 3 4 5; do sleep 0.05; echo \"EDGEBENCH step=$i loss=1\"; done",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let r = &results(dir.path(), &db)[0];
    assert_eq!(r["stalled_steps"], 0, "{r}");
    assert_eq!(r["stall_note"], Value::Null, "{r}");
}

#[test]
fn a_live_caffe_run_records_its_display_lines_and_not_the_loss_line_after_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("caffe.db");
    // max_iter 3, display 1: iterations 0, 1 and 2, then the snapshot and the final line.
    let script = "p='I1222 14:03:21.000000  2471 solver.cpp:218]'; \
        echo \"$p Iteration 0 (0 iter/s, 0.1s/1 iters), loss = 6.9\"; \
        echo \"$p Iteration 1 (10 iter/s, 0.1s/1 iters), loss = 6.8\"; \
        echo \"$p Iteration 2 (10 iter/s, 0.1s/1 iters), loss = 6.7\"; \
        sleep 0.6; \
        echo 'I1222 14:03:22.000000  2471 solver.cpp:447] Snapshotting to binary proto file x_iter_3.caffemodel'; \
        echo 'I1222 14:03:22.100000  2471 solver.cpp:310] Iteration 3, loss = 6.6'; \
        echo 'I1222 14:03:22.100100  2471 solver.cpp:315] Optimization Done.'";
    let out = exec(
        dir.path(),
        &db,
        &["--parser", "caffe", "--warmup", "0", "--batch", "4"],
        &["sh", "-c", script],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let r = &results(dir.path(), &db)[0];
    assert_eq!(r["iterations"], 3, "{r}");
    assert_eq!(r["loss_last"], 6.7, "{r}");
    // Three iterations of 0.1 s; the snapshot's 0.6 s is in none of them.
    assert!(close(r["total_time_s"].as_f64().unwrap(), 0.3), "{r}");
}

#[test]
fn the_caffe_study_wrapper_displays_every_iteration_with_its_own_loss() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("caffe");
    let models = root.join("models/bvlc_googlenet");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::create_dir_all(root.join("build/tools")).unwrap();
    // BVLC GoogLeNet's solver settings that the study changes, and a Caffe that prints the
    // solver it is given.
    std::fs::write(
        models.join("solver.prototxt"),
        "net: \"models/bvlc_googlenet/train_val.prototxt\"\ndisplay: 40\naverage_loss: 40\n\
         base_lr: 0.01\nmax_iter: 10000000\nsnapshot_prefix: \"models/bvlc_googlenet/x\"\n\
         solver_mode: GPU\n",
    )
    .unwrap();
    std::fs::write(
        models.join("train_val.prototxt"),
        "layer {\n  data_param {\n    batch_size: 32\n  }\n}\nlayer {\n  batch_size: 50\n}\n",
    )
    .unwrap();
    let caffe = root.join("build/tools/caffe");
    std::fs::write(&caffe, "#!/bin/sh\ncat \"${2#-solver=}\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&caffe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/study/caffe.sh");
    let out = std::process::Command::new("sh")
        .arg(&script)
        .args(["googlenet", "cpu", "8", "1024", "2"])
        .env("CAFFE_ROOT", &root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let solver = String::from_utf8_lossy(&out.stdout);
    for line in [
        "display: 1",
        "average_loss: 1",
        "max_iter: 256",
        "solver_mode: CPU",
        "base_lr: 0.01",
    ] {
        assert!(
            solver.lines().any(|l| l == line),
            "{line} not in:\n{solver}"
        );
    }
}
