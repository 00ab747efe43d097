//! Reports from the store: the summary table, the models listing, the studies' CSV files,
//! engines (frameworks) side by side.

pub mod aggregate;
pub mod build;
pub mod csv;
pub mod engines;
pub mod models;
pub mod plots;
pub mod summary;
pub mod workloads;

pub use self::csv::export_csv;
pub use aggregate::results_json;
pub use models::models_text;

use crate::store::{ResultRow, TrialStatus};
use std::borrow::Borrow;
use std::collections::BTreeMap;

/// For each key, the trial standing for it among `rows` (oldest first), as the studies'
/// files choose: the latest `ok` one, else the latest. Rows keyed `None` are left out; keys in
/// the order they first appear.
pub fn latest_per_key<K: Ord + Clone, R: Borrow<ResultRow>>(
    rows: impl IntoIterator<Item = R>,
    key: impl Fn(&ResultRow) -> Option<K>,
) -> Vec<(K, R)> {
    let mut index: BTreeMap<K, usize> = BTreeMap::new();
    let mut chosen: Vec<(K, R)> = Vec::new();
    for r in rows {
        let Some(k) = key(r.borrow()) else { continue };
        match index.get(&k) {
            // A later trial wins unless it would replace an ok one with one that is not.
            Some(&i) => {
                let prev = chosen[i].1.borrow();
                if r.borrow().status == TrialStatus::Ok || prev.status != TrialStatus::Ok {
                    chosen[i].1 = r;
                }
            }
            None => {
                index.insert(k.clone(), chosen.len());
                chosen.push((k, r));
            }
        }
    }
    chosen
}
