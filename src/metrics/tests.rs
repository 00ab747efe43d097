use super::server::{start_or_log, MetricsServer};
use super::{Format, Identity, Metrics, TrialLabelValues, SCOPE_RAIL, TOTAL_RAIL};
use crate::memory::procfs::MemInfo;
use crate::memory::MemorySample;
use crate::power::Reading;
use crate::provenance::clocks::{ClockState, CpuPolicy, GpuClock, ThermalZone};
use crate::store::TrialStatus;
use std::io::{Read, Write};

/// The identity of the metrics of these tests.
const IDENTITY: &str = "host=\"lab-1\",board=\"orin-nx\"";

/// Metrics as a sweep makes them: every workload's counters at 0.
fn metrics() -> Metrics {
    let m = Metrics::new(&Identity {
        host: "lab-1".into(),
        board: "orin-nx".into(),
    });
    m.count_from_zero(&crate::workloads::names(), &crate::runner::ended_statuses());
    m
}

/// `series` (name and its own labels) as written, with the identity labels first.
fn labelled(series: &str) -> String {
    match series.split_once('{') {
        Some((name, labels)) => format!("{name}{{{IDENTITY},{labels}"),
        None => format!("{series}{{{IDENTITY}}}"),
    }
}

/// The value of the sample written exactly as `series` (name and labels, identity added),
/// if present.
fn value(text: &str, series: &str) -> Option<f64> {
    let series = labelled(series);
    text.lines().find_map(|l| {
        let (name, v) = l.rsplit_once(' ')?;
        (name == series).then(|| v.parse().unwrap())
    })
}

fn reading(watts: f64) -> Reading {
    Reading {
        volts: None,
        amps: None,
        watts,
    }
}

#[test]
fn every_metric_is_registered_with_its_type_and_base_unit_name() {
    let m = metrics();
    let bare = m.encode();
    // A family is written once it has a series.
    assert!(!bare.contains("edgebench_power_watts"), "{bare}");
    let mut sinks = m.power_sinks(&[vec![("VDD_IN".to_string(), true)]], "module");
    sinks[0].sample(0, Some(&[reading(1.0)]));
    m.memory_observer()(&MemorySample::default());
    m.clock_observer()(&ClockState {
        cpus: vec![CpuPolicy {
            name: "policy0".into(),
            cpus: None,
            governor: None,
            cur_khz: Some(1),
            min_khz: None,
            max_khz: None,
            hw_max_khz: None,
        }],
        zones: vec![ThermalZone {
            name: "z".into(),
            temp_c: 1.0,
            passive_c: None,
        }],
        ..Default::default()
    });
    let idle = TrialLabelValues {
        workload: "idle",
        net: "idle",
        batch: 0,
        device: "board",
    };
    m.trial(idle, 1).ended("ok");
    let trial = m.trial(idle, 1);
    trial.iteration();
    let text = m.encode();
    drop(trial);
    for (name, kind) in [
        ("edgebench_power_watts", "gauge"),
        ("edgebench_energy_joules", "counter"),
        ("edgebench_temperature_celsius", "gauge"),
        ("edgebench_clock_hertz", "gauge"),
        ("edgebench_memory_available_bytes", "gauge"),
        ("edgebench_swap_used_bytes", "gauge"),
        ("edgebench_trial_info", "gauge"),
        ("edgebench_trial_iterations_done", "gauge"),
        ("edgebench_trial_iterations_planned", "gauge"),
        ("edgebench_iterations", "counter"),
        ("edgebench_trials", "counter"),
        ("edgebench_sync_backlog_trials", "gauge"),
        ("edgebench_build_info", "gauge"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} {kind} in\n{text}"
        );
    }
    assert!(text.ends_with("# EOF\n"), "{text}");
    let build = format!(
        "edgebench_build_info{{version=\"{}\"}}",
        crate::host::VERSION
    );
    assert_eq!(value(&text, &build), Some(1.0), "{text}");
    assert_eq!(value(&text, "edgebench_sync_backlog_trials"), Some(0.0));
}

#[test]
fn power_is_the_latest_reading_and_energy_the_integral_of_the_good_readings() {
    let m = metrics();
    // Two sources: rails A (in the total) and B on the first, C (in the total) on the second.
    let rails = vec![
        vec![("A".to_string(), true), ("B".to_string(), false)],
        vec![("C".to_string(), true)],
    ];
    let mut sinks = m.power_sinks(&rails, "module");
    assert_eq!(sinks.len(), 2);
    let s = 1_000_000_000i64;
    let (a, b, c) = ([2.0, 4.0, 4.0, 8.0], [1.0, 1.0, 3.0, 3.0], 5.0);
    sinks[0].sample(0, Some(&[reading(a[0]), reading(b[0])]));
    sinks[0].sample(s, Some(&[reading(a[1]), reading(b[1])]));
    // A failed read: the time from the last good reading to the next is left out.
    sinks[0].sample(2 * s, None);
    sinks[0].sample(3 * s, Some(&[reading(a[2]), reading(b[2])]));
    sinks[0].sample(5 * s, Some(&[reading(a[3]), reading(b[3])]));
    sinks[1].sample(0, Some(&[reading(c)]));
    sinks[1].sample(2 * s, Some(&[reading(c)]));
    let text = m.encode();
    let watts = |rail: &str, scope: &str| {
        value(
            &text,
            &format!("edgebench_power_watts{{rail=\"{rail}\",scope=\"{scope}\"}}"),
        )
        .unwrap_or_else(|| panic!("{rail} {scope} in\n{text}"))
    };
    let joules = |rail: &str| {
        value(
            &text,
            &format!("edgebench_energy_joules_total{{rail=\"{rail}\"}}"),
        )
        .unwrap_or_else(|| panic!("{rail} in\n{text}"))
    };
    assert_eq!(watts("A", SCOPE_RAIL), a[3]);
    assert_eq!(watts("B", SCOPE_RAIL), b[3]);
    assert_eq!(watts(TOTAL_RAIL, "module"), a[3] + c);
    // Trapezoids over [0,1] and [3,5] s.
    let ea = (a[0] + a[1]) / 2.0 + (a[2] + a[3]) / 2.0 * 2.0;
    let eb = (b[0] + b[1]) / 2.0 + (b[2] + b[3]) / 2.0 * 2.0;
    let ec = c * 2.0;
    assert!((joules("A") - ea).abs() < 1e-9, "{text}");
    assert!((joules("B") - eb).abs() < 1e-9, "{text}");
    assert!((joules(TOTAL_RAIL) - (ea + ec)).abs() < 1e-9, "{text}");
}

#[test]
fn energy_counters_never_decrease() {
    let m = metrics();
    let mut sinks = m.power_sinks(&[vec![("R".to_string(), true)]], "board");
    let mut last = 0.0;
    // Plausible readings go slightly negative (an offset at idle); time may repeat.
    for (k, w) in [0.5, -1.0, -1.0, 3.0, 0.0, 2.0].iter().enumerate() {
        sinks[0].sample((k as i64 / 2) * 1_000_000, Some(&[reading(*w)]));
        let j = value(&m.encode(), "edgebench_energy_joules_total{rail=\"total\"}").unwrap();
        assert!(j >= last, "{j} after {last}");
        last = j;
    }
    assert!(last > 0.0);
}

#[test]
fn the_trial_series_lives_while_the_trial_runs() {
    let m = metrics();
    let info = "edgebench_trial_info{workload=\"cnn\",net=\"alexnet\",batch=\"8\",device=\"cpu\"}";
    let t = m.trial(
        TrialLabelValues {
            workload: "cnn",
            net: "alexnet",
            batch: 8,
            device: "cpu",
        },
        3,
    );
    t.iteration();
    t.iteration();
    let during = m.encode();
    assert_eq!(value(&during, info), Some(1.0), "{during}");
    assert_eq!(value(&during, "edgebench_trial_iterations_done"), Some(2.0));
    assert_eq!(
        value(&during, "edgebench_trial_iterations_planned"),
        Some(3.0)
    );
    t.ended("ok");
    let after = m.encode();
    assert_eq!(value(&after, info), None, "{after}");
    assert_eq!(value(&after, "edgebench_trial_iterations_done"), Some(0.0));
    let total = "edgebench_iterations_total{workload=\"cnn\"}";
    assert_eq!(value(&after, total), Some(2.0), "{after}");
    let ok = "edgebench_trials_total{workload=\"cnn\",status=\"ok\"}";
    assert_eq!(value(&after, ok), Some(1.0), "{after}");
    // A second trial of the workload adds to the counters.
    let t = m.trial(
        TrialLabelValues {
            workload: "cnn",
            net: "alexnet",
            batch: 8,
            device: "cpu",
        },
        1,
    );
    t.iteration();
    t.ended("ok");
    let again = m.encode();
    assert_eq!(value(&again, total), Some(3.0));
    assert_eq!(value(&again, ok), Some(2.0));
}

#[test]
fn memory_clocks_and_temperatures_come_from_the_samplers_reads() {
    let m = metrics();
    let mut memory = m.memory_observer();
    memory(&MemorySample {
        system: Some(MemInfo {
            mem_total: 16 << 30,
            mem_available: 9 << 30,
            swap_total: 8 << 30,
            swap_free: 5 << 30,
        }),
        ..Default::default()
    });
    let mut clocks = m.clock_observer();
    let state = |temp: f64| ClockState {
        cpus: vec![CpuPolicy {
            name: "policy0".into(),
            cpus: None,
            governor: None,
            cur_khz: Some(1_984_000),
            min_khz: None,
            max_khz: None,
            hw_max_khz: None,
        }],
        gpu: Some(GpuClock {
            name: "17000000.ga10b".into(),
            governor: None,
            cur_hz: Some(918_000_000),
            min_hz: None,
            max_hz: None,
            load_permille: None,
        }),
        zones: vec![ThermalZone {
            name: "cpu-thermal".into(),
            temp_c: temp,
            passive_c: None,
        }],
        ..Default::default()
    };
    clocks(&state(45.5));
    clocks(&state(47.0));
    m.set_sync_backlog(4);
    let text = m.encode();
    let v = |s: &str| value(&text, s).unwrap_or_else(|| panic!("{s} in\n{text}"));
    assert_eq!(v("edgebench_memory_available_bytes"), (9u64 << 30) as f64);
    assert_eq!(v("edgebench_swap_used_bytes"), (3u64 << 30) as f64);
    assert_eq!(v("edgebench_clock_hertz{clock=\"cpu_policy0\"}"), 1.984e9);
    assert_eq!(v("edgebench_clock_hertz{clock=\"gpu\"}"), 9.18e8);
    assert_eq!(
        v("edgebench_temperature_celsius{zone=\"cpu-thermal\"}"),
        47.0
    );
    assert_eq!(v("edgebench_sync_backlog_trials"), 4.0);
}

fn get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn the_server_answers_metrics_and_404_elsewhere_and_names_an_address_it_cannot_bind() {
    let m = metrics();
    m.set_sync_backlog(2);
    let server = MetricsServer::start("127.0.0.1:0", m.clone()).unwrap();
    let ok = get(server.addr(), "/metrics");
    assert!(ok.starts_with("HTTP/1.0 200"), "{ok}");
    assert!(ok.contains(Format::Text.content_type()), "{ok}");
    assert!(
        ok.contains(&format!(
            "{} 2\n",
            labelled("edgebench_sync_backlog_trials")
        )),
        "{ok}"
    );
    let missing = get(server.addr(), "/");
    assert!(missing.starts_with("HTTP/1.0 404"), "{missing}");

    let taken = server.addr().to_string();
    let e = MetricsServer::start(&taken, m.clone()).err().unwrap();
    assert!(format!("{e:#}").contains(&taken), "{e:#}");
    // The daemon goes on without an endpoint: off, or an address it cannot bind.
    assert!(start_or_log("off", &m).is_none());
    assert!(start_or_log(&taken, &m).is_none());
    drop(server);
}

#[test]
fn every_series_names_its_host_and_board_and_odd_names_are_made_safe() {
    let m = metrics();
    m.set_sync_backlog(0);
    let text = m.encode();
    let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(samples.len() > 10, "{text}");
    for line in samples {
        assert!(line.contains(&format!("{{{IDENTITY}")), "{line}");
    }
    let odd = Metrics::new(&Identity {
        host: "lab \"1\"\nx".into(),
        board: "b".repeat(100),
    });
    let text = odd.encode();
    let expected = format!("host=\"lab__1__x\",board=\"{}\"", "b".repeat(64));
    assert!(text.contains(&expected), "{text}");
    let blank = Metrics::new(&Identity {
        host: String::new(),
        board: "x".into(),
    });
    assert!(blank.encode().contains("host=\"unknown\""));
}

#[test]
fn counters_exist_at_zero_for_every_workload_and_ended_status_before_any_trial() {
    let host = crate::host::HostPaths::default();
    let board = crate::board::detect(&host);
    let text = crate::runner::live_metrics(&host, &board).encode();
    let ended = crate::runner::ended_statuses();
    assert_eq!(ended.len(), TrialStatus::ALL.len() - 1);
    assert!(!ended.contains(&"running"));
    let ours = |series: &str| {
        let (name, labels) = series.split_once('{').unwrap();
        text.lines().find_map(|l| {
            let (s, v) = l.rsplit_once(' ')?;
            (s.starts_with(&format!("{name}{{host=")) && s.ends_with(&format!(",{labels}")))
                .then(|| v.parse::<f64>().unwrap())
        })
    };
    for workload in crate::workloads::names() {
        let it = format!("edgebench_iterations_total{{workload=\"{workload}\"}}");
        assert_eq!(ours(&it), Some(0.0), "{it} in\n{text}");
        for status in &ended {
            let t =
                format!("edgebench_trials_total{{workload=\"{workload}\",status=\"{status}\"}}");
            assert_eq!(ours(&t), Some(0.0), "{t} in\n{text}");
        }
    }
}

#[test]
fn the_backlog_grows_as_trials_end_once_it_is_known() {
    let m = metrics();
    let idle = TrialLabelValues {
        workload: "idle",
        net: "idle",
        batch: 0,
        device: "board",
    };
    // Unknown (no server to push to): trials that end leave it alone.
    m.trial(idle, 1).ended("ok");
    assert_eq!(
        value(&m.encode(), "edgebench_sync_backlog_trials"),
        Some(0.0)
    );
    m.set_sync_backlog(2);
    m.trial(idle, 1).ended("ok");
    m.trial(idle, 1).ended("failed");
    assert_eq!(
        value(&m.encode(), "edgebench_sync_backlog_trials"),
        Some(4.0)
    );
    // A trial dropped without an end (its row stays running) is not final: nothing waits.
    drop(m.trial(idle, 1));
    assert_eq!(
        value(&m.encode(), "edgebench_sync_backlog_trials"),
        Some(4.0)
    );
    // A push says how many wait.
    m.set_sync_backlog(0);
    assert_eq!(
        value(&m.encode(), "edgebench_sync_backlog_trials"),
        Some(0.0)
    );
}

#[test]
fn available_memory_is_read_from_procfs_at_each_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let meminfo = |available_kib: u64| {
        format!(
            "MemTotal: 8000000 kB\nMemFree: 1000 kB\nMemAvailable: {available_kib} kB\n\
             SwapTotal: 4000 kB\nSwapFree: 1000 kB\n"
        )
    };
    std::fs::write(dir.path().join("meminfo"), meminfo(5_000_000)).unwrap();
    let host = crate::host::HostPaths {
        procfs: dir.path().to_path_buf(),
        ..crate::host::HostPaths::default()
    };
    let m = Metrics::for_host(&host, crate::board::generic());
    let first = m.encode();
    let ours = |text: &str, name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.rsplit_once(' '))
            .map(|(_, v)| v.parse::<f64>().unwrap())
    };
    assert_eq!(
        ours(&first, "edgebench_memory_available_bytes"),
        Some(5_000_000.0 * 1024.0),
        "{first}"
    );
    assert_eq!(
        ours(&first, "edgebench_swap_used_bytes"),
        Some(3000.0 * 1024.0)
    );
    assert!(first.contains("board=\"generic\""), "{first}");
    std::fs::write(dir.path().join("meminfo"), meminfo(4_000_000)).unwrap();
    assert_eq!(
        ours(&m.encode(), "edgebench_memory_available_bytes"),
        Some(4_000_000.0 * 1024.0)
    );
}

#[test]
fn the_format_follows_the_accept_header() {
    // What Prometheus 2.x sends.
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                      version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    for (accept, format) in [
        (Some(prometheus), Format::OpenMetrics),
        (Some("application/openmetrics-text"), Format::OpenMetrics),
        (Some("text/plain;version=0.0.4"), Format::Text),
        (Some("text/plain; version=0.0.4; q=1"), Format::Text),
        (Some("*/*"), Format::Text),
        (None, Format::Text),
        (Some("application/json"), Format::Text),
        (
            Some("application/openmetrics-text;q=0.2, text/plain;q=0.5"),
            Format::Text,
        ),
        (Some("application/openmetrics-text;q=0"), Format::Text),
        (
            Some("application/openmetrics-text;q=nonsense"),
            Format::Text,
        ),
        (
            Some("APPLICATION/OpenMetrics-Text, text/plain;q=0.9"),
            Format::OpenMetrics,
        ),
    ] {
        assert_eq!(Format::negotiate(accept), format, "{accept:?}");
    }
}

#[test]
fn the_text_format_names_each_counter_by_its_samples_and_has_no_eof() {
    let m = metrics();
    let mut sinks = m.power_sinks(&[vec![("VDD_IN".to_string(), true)]], "module");
    sinks[0].sample(0, Some(&[reading(1.0)]));
    let text = m.encode_as(Format::Text);
    assert!(!text.contains("# EOF"), "{text}");
    for counter in [
        "edgebench_iterations",
        "edgebench_trials",
        "edgebench_energy_joules",
    ] {
        assert!(
            text.contains(&format!("# TYPE {counter}_total counter\n")),
            "{counter} in\n{text}"
        );
        assert!(text.contains(&format!("# HELP {counter}_total ")), "{text}");
        assert!(!text.contains(&format!("# TYPE {counter} ")), "{text}");
    }
    // Every sample's name has its HELP and TYPE; nothing else changed.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap();
        assert!(text.contains(&format!("# HELP {name} ")), "{name}");
        assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
    }
    let open_text = m.encode();
    let open: Vec<&str> = open_text.lines().filter(|l| !l.starts_with('#')).collect();
    let plain: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(open, plain);
}

#[test]
fn the_server_answers_each_client_in_the_format_it_asks_for() {
    let m = metrics();
    let server = MetricsServer::start("127.0.0.1:0", m).unwrap();
    let ask = |accept: &str| {
        let mut s = std::net::TcpStream::connect(server.addr()).unwrap();
        write!(
            s,
            "GET /metrics HTTP/1.0\r\nHost: x\r\nAccept: {accept}\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let plain = ask("text/plain;version=0.0.4");
    assert!(plain.contains(Format::Text.content_type()), "{plain}");
    assert!(
        plain.contains("# TYPE edgebench_trials_total counter"),
        "{plain}"
    );
    assert!(!plain.contains("# EOF"), "{plain}");
    let open = ask("application/openmetrics-text;version=1.0.0,text/plain;q=0.5");
    assert!(open.contains(Format::OpenMetrics.content_type()), "{open}");
    assert!(open.ends_with("# EOF\n"), "{open}");
}
