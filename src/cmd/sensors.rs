//! `edgebench sensors`: the power sources found and what they read now.

use super::{usage, Outcome};
use edgebench::config::Config;
use edgebench::host::HostPaths;
use std::path::Path;

pub(crate) fn run(
    config: Option<&Path>,
    board: Option<String>,
    json: bool,
    host: &HostPaths,
) -> Outcome {
    let (mut config, _) = Config::resolve(config)?;
    if board.is_some() {
        config.power.board = board;
    }
    let report = edgebench::power::sensors(host, &config.power).map_err(usage)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", edgebench::power::sensors_text(&report));
    }
    Ok(0)
}
