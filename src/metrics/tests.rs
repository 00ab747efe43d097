use super::server::{start_or_log, MetricsServer, CONTENT_TYPE};
use super::{Metrics, TrialLabelValues, SCOPE_RAIL, TOTAL_RAIL};
use crate::memory::procfs::MemInfo;
use crate::memory::MemorySample;
use crate::power::Reading;
use crate::provenance::clocks::{ClockState, CpuPolicy, GpuClock, ThermalZone};
use std::io::{Read, Write};

/// The value of the sample written exactly as `series` (name and labels), if present.
fn value(text: &str, series: &str) -> Option<f64> {
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
    let m = Metrics::new();
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
    let m = Metrics::new();
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
    let m = Metrics::new();
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
    let m = Metrics::new();
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
    let m = Metrics::new();
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
    let m = Metrics::new();
    m.set_sync_backlog(2);
    let server = MetricsServer::start("127.0.0.1:0", m.clone()).unwrap();
    let ok = get(server.addr(), "/metrics");
    assert!(ok.starts_with("HTTP/1.0 200"), "{ok}");
    assert!(ok.contains(CONTENT_TYPE), "{ok}");
    assert!(ok.contains("edgebench_sync_backlog_trials 2\n"), "{ok}");
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
