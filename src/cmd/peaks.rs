//! `edgebench peaks`: each device's theoretical and measured roofs.

use super::{usage, Outcome};
use edgebench::config::DeviceKind;
use edgebench::host::HostPaths;

pub(crate) fn run(devices: &[DeviceKind], threads: usize, json: bool, host: &HostPaths) -> Outcome {
    let board = edgebench::board::detect(host);
    let report =
        edgebench::workloads::ops::peaks::report(host, board.profile, devices, threads, true)
            .map_err(usage)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text());
    }
    Ok(0)
}
