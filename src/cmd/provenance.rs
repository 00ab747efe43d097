//! `edgebench provenance`: what a run would record about this host now, or what each run of a
//! database recorded.

use super::{input, Outcome};
use edgebench::host::HostPaths;
use edgebench::provenance::Provenance;
use edgebench::store::{self, Store};
use std::path::Path;

pub(crate) fn run(db: Option<&Path>, json: bool, host: &HostPaths) -> Outcome {
    let recorded: Vec<(String, Provenance)> = match db {
        Some(db) => {
            let store = Store::open_readonly(db).map_err(input)?;
            let mut runs: Vec<String> = store
                .results()
                .map_err(input)?
                .into_iter()
                .map(|r| r.run_id)
                .collect();
            runs.dedup();
            runs.into_iter()
                .map(|run| Ok((run.clone(), store.provenance(&run)?)))
                .collect::<Result<_, store::StoreError>>()
                .map_err(input)?
        }
        None => {
            let board = edgebench::board::detect(host);
            vec![("now".into(), edgebench::provenance::capture(host, &board))]
        }
    };
    if json {
        let map: std::collections::BTreeMap<_, _> = recorded.into_iter().collect();
        println!("{}", serde_json::to_string_pretty(&map)?);
    } else {
        for (run, p) in recorded {
            println!("# {run}");
            print!("{}", p.text());
        }
    }
    Ok(0)
}
