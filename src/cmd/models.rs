//! `edgebench models`: the networks described.

use super::Outcome;
use edgebench::{models, report};

pub(crate) fn run(json: bool) -> Outcome {
    let summaries: Vec<_> = models::all().iter().map(|n| n.summary()).collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&summaries)?);
    } else {
        print!("{}", report::models_text(&summaries));
    }
    Ok(0)
}
