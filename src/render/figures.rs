//! Figures more than one workload draws: the thesis' loss against iteration.

use super::plots::{Mark, Plot, Point, Series};
use crate::store::{ResultRow, Store};

/// Loss against iteration (step + 1) of each `(batch, trial)` with iterations, one series per
/// batch; a non-finite loss is no point.
pub(crate) fn loss_by_batch<'a>(
    store: &Store,
    trials: impl Iterator<Item = (usize, &'a ResultRow)>,
) -> anyhow::Result<Vec<Series>> {
    let mut out = Vec::new();
    for (batch, r) in trials {
        if r.iterations == 0 {
            continue;
        }
        let points = store
            .iterations(r.trial_rowid)?
            .iter()
            .map(|it| Point {
                x: (it.step + 1) as f64,
                y: it.loss.is_finite().then_some(it.loss),
                mark: Mark::Ok,
                err: None,
            })
            .collect();
        out.push(Series {
            label: format!("batch {batch}"),
            points,
            markers: false,
        });
    }
    Ok(out)
}

/// The loss figure of one net on one device: loss against iteration per batch.
pub(crate) fn loss_plot(title: String, series: Vec<Series>) -> Plot {
    Plot {
        title,
        x_desc: "iteration".into(),
        y_desc: "training loss".into(),
        series,
        caption: "Training loss against iteration, one line per batch size.".into(),
        ..Default::default()
    }
}
