//! Live metrics end to end: `edgebench run --power --metrics` on the prepared Orin NX tree,
//! scraped every second by a real Prometheus; what Prometheus stored is checked against the
//! simulated sensors, and every PromQL query of the Grafana dashboard is run against it. The
//! dashboard's SQL queries are listed (macros and variables substituted) for the tests that run
//! them against PostgreSQL.

use crate::common::{describe, edgebench, ok, results};
use crate::fixtures::jetson::{orin_nx_board, orin_nx_power, ORIN_NX_GPU, ORIN_NX_HWMON};
use crate::fixtures::prometheus::{free_port, Prometheus};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The dashboard, as committed.
pub(crate) fn dashboard() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/dashboards/edgebench.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What `$host` becomes in [`dashboard_sql_queries`].
pub(crate) const DASHBOARD_HOST: &str = "orin-lab";
/// What `$workload` becomes in [`dashboard_sql_queries`].
pub(crate) const DASHBOARD_WORKLOAD: &str = "cnn";

/// Every PostgreSQL query of the dashboard (panels and template variables) as (where it is,
/// SQL) with Grafana's macros and variables substituted: `$__timeFilter(col)` becomes the last
/// 30 days of `col`, `$host` [`DASHBOARD_HOST`], `$workload` [`DASHBOARD_WORKLOAD`].
pub(crate) fn dashboard_sql_queries() -> Vec<(String, String)> {
    let d = dashboard();
    let time_filter =
        regex::Regex::new(r"\$__timeFilter\(\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\)").unwrap();
    let substitute = |sql: &str| {
        let sql = time_filter.replace_all(sql, "$1 BETWEEN now() - interval '30 days' AND now()");
        sql.replace("$host", DASHBOARD_HOST)
            .replace("$workload", DASHBOARD_WORKLOAD)
    };
    let is_postgres = |v: &Value| v["datasource"]["type"] == "postgres";
    let mut out = Vec::new();
    for var in d["templating"]["list"].as_array().unwrap() {
        if is_postgres(var) {
            let q = var["query"].as_str().unwrap();
            out.push((
                format!("variable ${}", var["name"].as_str().unwrap()),
                substitute(q),
            ));
        }
    }
    for panel in d["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if is_postgres(target) || (is_postgres(panel) && target.get("rawSql").is_some()) {
                let title = panel["title"].as_str().unwrap();
                let sql = target["rawSql"].as_str().unwrap();
                out.push((format!("panel {title:?}"), substitute(sql)));
            }
        }
    }
    out
}

/// Every live query of the dashboard as (panel title, expression, legend) with Grafana's
/// interval variables substituted and `$board` (the boards chosen) as `boards`, a regex.
fn dashboard_promql(boards: &str) -> Vec<(String, String, String)> {
    let d = dashboard();
    let mut out = Vec::new();
    for panel in d["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let expr = expr
                    .replace("$__rate_interval", "30s")
                    .replace("$__interval", "1s")
                    .replace("$__range", "5m")
                    .replace("$board", boards);
                let legend = target["legendFormat"].as_str().unwrap_or("").to_string();
                out.push((panel["title"].as_str().unwrap().to_string(), expr, legend));
            }
        }
    }
    out
}

/// `legend` (Grafana's `{{label}}` form) for a series with `labels`.
fn legend_of(legend: &str, labels: &Value) -> String {
    let re = regex::Regex::new(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}").unwrap();
    re.replace_all(legend, |c: &regex::Captures| {
        labels[&c[1]].as_str().unwrap_or("").to_string()
    })
    .into_owned()
}

#[test]
fn every_live_panel_is_keyed_on_the_chosen_boards_and_names_them() {
    let d = dashboard();
    let vars = d["templating"]["list"].as_array().unwrap();
    let board = vars
        .iter()
        .find(|v| v["name"] == "board")
        .expect("a `board` variable");
    assert_eq!(board["datasource"]["type"], "prometheus", "{board}");
    assert_eq!(board["multi"], true, "{board}");
    assert!(
        board["definition"]
            .as_str()
            .unwrap()
            .contains("edgebench_build_info, host"),
        "{board}"
    );
    // Every selector of an edgebench metric is narrowed to the chosen boards, and every
    // legend names the board.
    let selector = regex::Regex::new(r"edgebench_[a-z_]+(\{[^}]*\})?").unwrap();
    let raw = dashboard_promql("$board");
    assert!(raw.len() >= 10, "{raw:?}");
    for (title, expr, legend) in &raw {
        for m in selector.captures_iter(expr) {
            let labels = m.get(1).map_or("", |l| l.as_str());
            assert!(
                labels.contains("host=~\"$board\""),
                "{title}: {} in {expr} is not narrowed to $board",
                &m[0]
            );
        }
        assert!(legend.contains("{{host}}"), "{title}: legend {legend:?}");
    }
    // The default range shows live data; the fleet panels keep their month.
    let from = d["time"]["from"].as_str().unwrap();
    assert!(
        ["now-5m", "now-15m", "now-30m", "now-1h"].contains(&from),
        "{from}"
    );
    for panel in d["panels"].as_array().unwrap() {
        if panel["datasource"]["type"] == "postgres" {
            assert_eq!(panel["timeFrom"], "30d", "{}", panel["title"]);
        }
    }
}

#[test]
fn the_dashboard_sql_is_listed_with_every_macro_and_variable_substituted() {
    let queries = dashboard_sql_queries();
    let text: String = queries.iter().map(|(_, q)| q.as_str()).collect();
    for view in [
        "edgebench.trial_summary",
        "edgebench.board_workload_summary",
        "edgebench.gpu_cpu_speedup",
    ] {
        assert!(text.contains(view), "{view} in {queries:#?}");
    }
    for (place, sql) in &queries {
        assert!(!sql.contains('$'), "{place}: {sql}");
        assert!(sql.trim_start().starts_with("SELECT"), "{place}: {sql}");
    }
    assert!(
        queries
            .iter()
            .any(|(_, q)| q.contains(&format!("host = '{DASHBOARD_HOST}'"))),
        "{queries:#?}"
    );
    assert!(
        text.contains("started_at BETWEEN now() - interval '30 days' AND now()"),
        "{queries:#?}"
    );
    // The PromQL panels use only the metrics edgebench serves.
    for (title, expr, _) in dashboard_promql(".+") {
        assert!(expr.contains("edgebench_"), "{title}: {expr}");
    }
}

/// A fixture file's number.
fn number(root: &Path, rel: &str) -> f64 {
    std::fs::read_to_string(root.join(rel))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Watts of each rail of the simulated ina3221, from its label, voltage and current files.
fn fixture_rails(sys: &Path) -> Vec<(String, f64)> {
    (1..=3)
        .map(|k| {
            let label = std::fs::read_to_string(sys.join(format!("{ORIN_NX_HWMON}/in{k}_label")))
                .unwrap()
                .trim()
                .to_string();
            let mv = number(sys, &format!("{ORIN_NX_HWMON}/in{k}_input"));
            let ma = number(sys, &format!("{ORIN_NX_HWMON}/curr{k}_input"));
            (label, mv * ma * 1e-6)
        })
        .collect()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

/// A prepared Orin NX in `root` (sysfs with its sensors, procfs) named `host`, with this
/// machine's memory figures.
fn orin_nx_named(root: &Path, host: &str) {
    orin_nx_board(root);
    orin_nx_power(&root.join("sys"));
    let proc_ = root.join("proc");
    std::fs::write(proc_.join("sys/kernel/hostname"), format!("{host}\n")).unwrap();
    for file in ["meminfo", "cpuinfo", "vmstat", "swaps", "loadavg", "uptime"] {
        if let Ok(text) = std::fs::read_to_string(Path::new("/proc").join(file)) {
            std::fs::write(proc_.join(file), text).unwrap();
        }
    }
}

/// `edgebench run --workload idle --repeat 2 --power --metrics listen` on the tree at `root`.
fn idle_run(root: &Path, listen: &str, duration_s: u32) -> std::process::Child {
    let cfg = root.join("m.toml");
    std::fs::write(&cfg, "[power]\nbaseline_s = 0.3\n").unwrap();
    edgebench(root)
        .args(["run", "--workload", "idle", "--repeat", "2", "--duration"])
        .arg(format!("{duration_s}s"))
        .args(["--power", "--metrics", listen, "--config"])
        .arg(&cfg)
        .arg("--sysfs")
        .arg(root.join("sys"))
        .arg("--procfs")
        .arg(root.join("proc"))
        .arg("--rootfs")
        .arg(root.join("rootfs"))
        .arg("--db")
        .arg(root.join("m.db"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// `promtool check metrics` on `text`: (success, what it said).
fn promtool_check(text: &str) -> (bool, String) {
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus) runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && said.trim().is_empty(), said)
}

/// The body of `GET /metrics` from `addr` with `accept`: (content type, body).
fn scrape(addr: &str, accept: &str) -> (String, String) {
    let (answer, _) = exchange(
        addr,
        format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
        Duration::from_secs(5),
    );
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (content_type, body.to_string())
}

#[test]
fn two_boards_are_told_apart_in_prometheus_and_every_dashboard_query_and_promtool_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = ["orin-lab", "orin-lab-2"];
    let roots: Vec<PathBuf> = hosts.iter().map(|h| dir.path().join(h)).collect();
    for (root, host) in roots.iter().zip(hosts) {
        orin_nx_named(root, host);
    }
    let targets: Vec<String> = hosts
        .iter()
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let prometheus = Prometheus::start(&targets.iter().map(String::as_str).collect::<Vec<_>>());
    let duration_s = 3;
    let start = unix_now();
    let mut runs: Vec<std::process::Child> = roots
        .iter()
        .zip(&targets)
        .map(|(root, target)| idle_run(root, target, duration_s))
        .collect();

    // While the trials run, every family has a series: the text format each serves (asked
    // for, or by default) passes promtool, and a scraper asking for OpenMetrics gets it.
    for target in &targets {
        let deadline = Instant::now() + Duration::from_secs(60);
        let text = loop {
            let (_, body) = scrape(target, "text/plain;version=0.0.4");
            if body.contains("edgebench_trial_info{") && body.contains("edgebench_power_watts{") {
                break body;
            }
            assert!(Instant::now() < deadline, "no trial on {target}: {body}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let (ok, said) = promtool_check(&text);
        assert!(ok, "promtool check metrics: {said}\n{text}");
        let (_, default) = crate::fixtures::prometheus::http_get(target, "/metrics").unwrap();
        let (ok, said) = promtool_check(&default);
        assert!(ok, "promtool check metrics (no Accept): {said}\n{default}");
        let (content_type, open) = scrape(
            target,
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        );
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        assert!(open.ends_with("# EOF\n"), "{open}");
        // Available memory is right from the first scrape on.
        let available: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("edgebench_memory_available_bytes{"))
            .and_then(|l| l.rsplit_once(' '))
            .map(|(_, v)| v.parse().unwrap())
            .unwrap_or_else(|| panic!("no available memory in\n{text}"));
        assert!(available > 0.0, "{text}");
    }
    for run in runs.drain(..) {
        let out = ok(run.wait_with_output().unwrap());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("/metrics"), "{}", describe(&out));
    }
    let end = unix_now();
    // Scraped after the runs' last samples.
    std::thread::sleep(Duration::from_secs(2));
    let rows = results(&roots[0], &roots[0].join("m.db"));
    let row = &rows[0];
    assert_eq!(row["status"], "ok", "{row}");
    assert_eq!(row["host"], hosts[0], "{row}");

    let p = &prometheus;
    let last = |series: &str| p.scalar(&format!("last_over_time({series}[10m])"));
    // Each board's series carry its host and board.
    for host in hosts {
        let v = p.vector(&format!(
            "last_over_time(edgebench_power_watts{{host=\"{host}\",rail=\"total\"}}[10m])"
        ));
        assert_eq!(v.len(), 1, "{host}: {v:?}");
        assert_eq!(v[0].0["board"], "orin-nx", "{v:?}");
        let build = p.vector(&format!(
            "last_over_time(edgebench_build_info{{host=\"{host}\"}}[10m])"
        ));
        assert_eq!(build.len(), 1, "{host}: {build:?}");
        // Never 0, from the first sample Prometheus stored.
        let lowest = p.scalar(&format!(
            "min_over_time(edgebench_memory_available_bytes{{host=\"{host}\"}}[10m])"
        ));
        assert!(lowest > 0.0, "{host}: {lowest}");
        // The first trial of the workload counted: the counter was there at 0 before it ended
        // (seen while the second repetition ran).
        let ok_trials =
            format!("edgebench_trials_total{{host=\"{host}\",workload=\"idle\",status=\"ok\"}}");
        assert_eq!(p.scalar(&format!("min_over_time({ok_trials}[10m])")), 0.0);
        let counted = p.scalar(&format!("increase({ok_trials}[10m])"));
        assert!(counted >= 1.0, "{host}: {counted}");
    }
    let a = format!("host=\"{}\"", hosts[0]);
    // Every rail as the sensor reads it; the total is VDD_IN alone on an Orin NX.
    let sys = roots[0].join("sys");
    let rails = fixture_rails(&sys);
    for (rail, watts) in &rails {
        let got = last(&format!(
            "edgebench_power_watts{{{a},rail=\"{rail}\",scope=\"rail\"}}"
        ));
        assert!(
            close(got, *watts),
            "{rail}: {got} W, the sensor gives {watts} W"
        );
    }
    let vdd_in = rails.iter().find(|(r, _)| r == "VDD_IN").unwrap().1;
    let total = p.vector(&format!(
        "last_over_time(edgebench_power_watts{{{a},rail=\"total\"}}[10m])"
    ));
    assert_eq!(total.len(), 1, "{total:?}");
    assert_eq!(total[0].0["scope"], "module", "{total:?}");
    assert!(close(total[0].1, vdd_in), "{total:?}");
    // Constant power: every rail's energy over the same samples is its power times one span.
    let energy = |rail: &str| {
        last(&format!(
            "edgebench_energy_joules_total{{{a},rail=\"{rail}\"}}"
        ))
    };
    let span_s = energy("total") / vdd_in;
    assert!(span_s > 0.0, "no energy integrated\n{}", p.log());
    for (rail, watts) in &rails {
        assert!(
            close(energy(rail) / watts, span_s),
            "{rail}: {} J at {watts} W, total {} J at {vdd_in} W",
            energy(rail),
            energy("total")
        );
    }
    // Temperatures and clocks as the tree has them.
    let temp_c = number(&sys, "class/thermal/thermal_zone0/temp") / 1e3;
    let got = last(&format!(
        "edgebench_temperature_celsius{{{a},zone=\"cpu-thermal\"}}"
    ));
    assert!(close(got, temp_c), "{got} C, the tree has {temp_c}");
    let cpu_hz = number(&sys, "devices/system/cpu/cpufreq/policy0/scaling_cur_freq") * 1e3;
    assert!(close(
        last(&format!(
            "edgebench_clock_hertz{{{a},clock=\"cpu_policy0\"}}"
        )),
        cpu_hz
    ));
    let gpu_hz = number(&sys, &format!("{ORIN_NX_GPU}/cur_freq"));
    assert!(close(
        last(&format!("edgebench_clock_hertz{{{a},clock=\"gpu\"}}")),
        gpu_hz
    ));
    // The trial, labelled as recorded, with its progress.
    let info = p.vector(&format!("max_over_time(edgebench_trial_info{{{a}}}[10m])"));
    assert_eq!(info.len(), 1, "{info:?}");
    let labels = &info[0].0;
    assert_eq!(info[0].1, 1.0);
    for key in ["workload", "net", "device"] {
        assert_eq!(labels[key], row[key], "{key}: {labels} vs {row}");
    }
    assert_eq!(
        labels["batch"],
        row["batch"].to_string(),
        "{labels} vs {row}"
    );
    let planned = p.scalar(&format!(
        "max_over_time(edgebench_trial_iterations_planned{{{a}}}[10m])"
    ));
    assert_eq!(planned, duration_s as f64);
    let done = p.scalar(&format!(
        "max_over_time(edgebench_trial_iterations_done{{{a}}}[10m])"
    ));
    assert!(done >= 1.0 && done <= planned, "{done} of {planned}");
    // Two repetitions.
    let iterations = last(&format!(
        "edgebench_iterations_total{{{a},workload=\"idle\"}}"
    ));
    assert!(
        iterations >= done && iterations <= 2.0 * planned,
        "{iterations}"
    );
    let version = p.vector(&format!("last_over_time(edgebench_build_info{{{a}}}[10m])"));
    assert_eq!(
        version[0].0["version"],
        env!("CARGO_PKG_VERSION"),
        "{version:?}"
    );

    // Every live query of the dashboard, for one board and for both: one board's shows only
    // its series, both boards' show both, and no legend is shared between two boards.
    let hosts_of = |v: &Value| -> Vec<String> {
        let mut h: Vec<String> = v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["metric"]["host"].as_str().unwrap_or("").to_string())
            .collect();
        h.sort();
        h.dedup();
        h
    };
    let (from, to) = (start - 5.0, end + 2.0);
    for host in hosts {
        for (title, expr, _) in dashboard_promql(host) {
            let v = p.query_range(&expr, from, to);
            assert_eq!(v["status"], "success", "{title}: {expr}: {v}");
            let seen = hosts_of(&v);
            assert!(seen.iter().all(|h| h == host), "{title}: {expr}: {seen:?}");
            if expr.contains("edgebench_power_watts") || expr.contains("edgebench_memory") {
                assert_eq!(seen, [host], "{title}: {expr}: no data: {v}");
            }
        }
    }
    let both = hosts.join("|");
    for (title, expr, legend) in dashboard_promql(&both) {
        let v = p.query_range(&expr, from, to);
        assert_eq!(v["status"], "success", "{title}: {expr}: {v}");
        let series = v["data"]["result"].as_array().unwrap();
        let seen = hosts_of(&v);
        if expr.contains("edgebench_power_watts") || expr.contains("edgebench_trial_info") {
            assert_eq!(seen, hosts, "{title}: {expr}: {v}");
        }
        let legends = |host: &str| -> std::collections::HashSet<String> {
            series
                .iter()
                .filter(|s| s["metric"]["host"] == host)
                .map(|s| legend_of(&legend, &s["metric"]))
                .collect()
        };
        let (la, lb) = (legends(hosts[0]), legends(hosts[1]));
        assert!(la.is_disjoint(&lb), "{title}: legends {la:?} and {lb:?}");
    }
    drop(prometheus);
}

#[test]
fn a_metrics_address_that_cannot_be_bound_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let db = dir.path().join("m.db");
    let out = edgebench(dir.path())
        .args([
            "run",
            "--workload",
            "idle",
            "--duration",
            "1s",
            "--metrics",
            &addr,
        ])
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&addr),
        "{}",
        describe(&out)
    );
    assert!(!db.exists(), "nothing is written");
}

/// A daemon running one idle sweep of `duration_s` into `dir`, serving metrics on `listen`;
/// its log is `dir/daemon.log`. Killed on drop should a test fail first.
struct Daemon(std::process::Child);

impl Daemon {
    fn start(dir: &Path, listen: &str, duration_s: u32) -> Daemon {
        let cfg = dir.join("d.toml");
        std::fs::write(
            &cfg,
            format!(
                "[sweep]\nworkload = \"idle\"\n[idle]\nduration = \"{duration_s}s\"\n\
                 [store]\ndb = \"{}\"\n[daemon]\nschedule = \"once\"\n\
                 [metrics]\nlisten = \"{listen}\"\n",
                dir.join("d.db").display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
        Daemon(
            edgebench(dir)
                .args(["daemon", "--config"])
                .arg(&cfg)
                .stdout(std::process::Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        )
    }

    /// Its exit code, waiting at most a minute.
    fn wait(&mut self) -> Option<i32> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_daemon_serves_metrics_during_its_sweep_and_sweeps_without_an_endpoint_it_cannot_bind() {
    use crate::fixtures::prometheus::http_get;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut daemon = Daemon::start(dir.path(), &listen, 3);
    let log = || std::fs::read_to_string(dir.path().join("daemon.log")).unwrap_or_default();
    // Polled until the trial shows (the daemon starts the sweep after binding).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let body = loop {
        if let Ok((200, body)) = http_get(&listen, "/metrics") {
            if body.contains("edgebench_trial_info{") {
                break body;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no trial on http://{listen}/metrics\n{}",
            log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(body.contains("workload=\"idle\""), "{body}");
    assert!(
        body.lines().any(
            |l| l.starts_with("edgebench_trial_iterations_planned{host=") && l.ends_with(" 3")
        ),
        "{body}"
    );
    assert_eq!(http_get(&listen, "/").unwrap().0, 404);
    assert_eq!(daemon.wait(), Some(0), "{}", log());

    // The address taken: the error is logged, naming it, and the sweep runs all the same.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &addr, 1);
    let code = daemon.wait();
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains(&addr) && log.contains("without a metrics endpoint"),
        "{log}"
    );
    let rows = results(dir.path(), &dir.path().join("d.db"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "ok", "{rows:?}");
}

/// One request's raw bytes to `addr`, then whatever comes back before the server closes or
/// `limit` passes: (the answer, whether the server closed); nothing when nothing listens.
/// Writes that fail (the server closed first) are no error: the server may stop reading
/// whenever it has answered.
fn exchange(addr: &str, request: &[u8], limit: Duration) -> (String, bool) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (String::new(), false);
    };
    s.set_read_timeout(Some(limit)).unwrap();
    let _ = s.write_all(request);
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let deadline = Instant::now() + limit;
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
        if Instant::now() > deadline {
            break false;
        }
    };
    (String::from_utf8_lossy(&raw).into_owned(), closed)
}

/// `GET /metrics` answered 200 with the trial's series within 5 s.
fn answers(addr: &str) -> bool {
    let (answer, _) = exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    answer.starts_with("HTTP/1.1 200") && answer.contains("edgebench_build_info")
}

/// An MLP sweep long enough for the clients below (a few seconds of 0.5 ms steps), serving
/// metrics on `listen` when given; with its median step time once it ends.
struct Sweep {
    child: std::process::Child,
    db: PathBuf,
    dir: PathBuf,
}

impl Sweep {
    fn start(dir: &Path, name: &str, listen: Option<&str>) -> Sweep {
        let db = dir.join(format!("{name}.db"));
        let mut cmd = edgebench(dir);
        // One thread each: two of these run side by side without starving other tests.
        cmd.env("RAYON_NUM_THREADS", "1")
            .args(["run", "--workload", "mlp", "--style", "tensors"])
            .args(["--size", "64x512x512x10", "--iterations", "5000", "--db"])
            .arg(&db)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("{name}.log"))).unwrap());
        if let Some(listen) = listen {
            cmd.args(["--metrics", listen]);
        }
        Sweep {
            child: cmd.spawn().unwrap(),
            db,
            dir: dir.to_path_buf(),
        }
    }

    /// Exit code (within 5 minutes) and the trial's median step time.
    fn finish(mut self) -> (Option<i32>, f64) {
        let deadline = Instant::now() + Duration::from_secs(300);
        let code = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status.code();
            }
            assert!(Instant::now() < deadline, "the sweep did not end");
            std::thread::sleep(Duration::from_millis(50));
        };
        let rows = results(&self.dir, &self.db);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0]["status"], "ok", "{}", rows[0]);
        (code, rows[0]["time_per_iteration_s"].as_f64().unwrap())
    }
}

impl Drop for Sweep {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn hostile_clients_neither_stop_the_sweep_nor_slow_it_nor_keep_metrics_from_others() {
    let dir = tempfile::tempdir().unwrap();
    // The same sweep beside it, unattacked: both share whatever else loads the machine.
    let baseline = Sweep::start(dir.path(), "baseline", None);
    let listen = format!("127.0.0.1:{}", free_port());
    let sweep = Sweep::start(dir.path(), "attacked", Some(&listen));
    let log = || std::fs::read_to_string(dir.path().join("attacked.log")).unwrap_or_default();
    // Until the trial runs.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !crate::fixtures::prometheus::http_get(&listen, "/metrics")
        .is_ok_and(|(s, body)| s == 200 && body.contains("edgebench_trial_info{"))
    {
        assert!(Instant::now() < deadline, "no trial on {listen}\n{}", log());
        std::thread::sleep(Duration::from_millis(20));
    }

    // A stated body of 100 GB: answered at once, closed, nothing allocated for it.
    let (answer, closed) = exchange(
        &listen,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(answer.starts_with("HTTP/1.1 200") && closed, "{answer}");
    // The same on any path or method.
    let (answer, closed) = exchange(
        &listen,
        b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(answer.starts_with("HTTP/1.1 404") && closed, "{answer}");
    let (answer, _) = exchange(
        &listen,
        b"PUT /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");

    // A body that never comes: this client holds its connection open, sending nothing more;
    // another is answered all the same.
    let mut holder = TcpStream::connect(&listen).unwrap();
    holder
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n")
        .unwrap();
    assert!(answers(&listen), "{}", log());
    drop(holder);

    // A request head of 1 MB: refused (431) or cut off, never read whole.
    let mut big = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Filler: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 1 << 20));
    big.extend_from_slice(b"\r\n\r\n");
    let (answer, closed) = exchange(&listen, &big, Duration::from_secs(5));
    assert!(
        closed && (answer.is_empty() || answer.starts_with("HTTP/1.1 431")),
        "{answer}"
    );

    // 500 connections that send nothing (each mid-request): a scraper is still answered.
    let idle: Vec<TcpStream> = (0..500)
        .map(|_| {
            let mut s = TcpStream::connect(&listen).unwrap();
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n");
            s
        })
        .collect();
    assert!(answers(&listen), "{}", log());
    drop(idle);
    assert!(answers(&listen), "{}", log());

    let (code, attacked) = sweep.finish();
    assert_eq!(code, Some(0), "{}", log());
    let (baseline_code, baseline) = baseline.finish();
    assert_eq!(baseline_code, Some(0));
    // A shared machine: the same step time within a generous factor.
    assert!(
        attacked <= 3.0 * baseline + 1e-3,
        "median step {attacked} s under attack, {baseline} s without"
    );
}

#[test]
fn a_stated_body_of_100_gb_leaves_the_daemon_sweeping() {
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut daemon = Daemon::start(dir.path(), &listen, 3);
    let log = || std::fs::read_to_string(dir.path().join("daemon.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !answers(&listen) {
        assert!(
            Instant::now() < deadline,
            "no endpoint on {listen}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for _ in 0..3 {
        let _ = exchange(
            &listen,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
            Duration::from_secs(5),
        );
    }
    assert!(answers(&listen), "{}", log());
    assert_eq!(daemon.wait(), Some(0), "{}", log());
    let rows = results(dir.path(), &dir.path().join("d.db"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "ok", "{rows:?}");
}
