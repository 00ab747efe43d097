//! `edgebench models`: the networks described, or exported as ONNX files.

use super::Outcome;
use edgebench::{models, report};
use std::path::Path;

pub(crate) fn run(json: bool, export_onnx: Option<&Path>, seed: u64) -> Outcome {
    if let Some(dir) = export_onnx {
        for path in edgebench::workloads::infer::export::export_all(dir, seed)? {
            println!("{}", path.display());
        }
        return Ok(0);
    }
    let summaries: Vec<_> = models::all().iter().map(|n| n.summary()).collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&summaries)?);
    } else {
        print!("{}", report::models_text(&summaries));
    }
    Ok(0)
}
