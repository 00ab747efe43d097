//! How much memory a trial will need, predicted before it runs, so configurations that cannot
//! fit are skipped instead of taking the board down, and so the prediction can be checked
//! against the measured peak (both are stored).
//!
//! peak ≈ base + params x 4 B x PARAM_COPIES + activations/image x batch x 4 B x ACTIVATION_COPIES
//!
//! PARAM_COPIES covers weights, gradients, momentum and the transient copies of the backward
//! pass; ACTIVATION_COPIES the forward outputs kept for backward (conv, bias and ReLU are one
//! fused output) plus the gradients alive during backward. The constants were fitted to
//! the peak RSS (VmHWM) of 4-iteration CPU trials of both nets at batch 1, 8 and 32
//! (docs/memory.md, "Estimate"); one iteration is not enough, the allocator's peak still grows
//! after the first.

use crate::models::NetSpec;
use serde::Serialize;

pub(crate) const BASE_BYTES: u64 = 8 << 20;
pub(crate) const PARAM_COPIES: f64 = 3.8;
pub(crate) const ACTIVATION_COPIES: f64 = 1.35;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct MemoryEstimate {
    pub params_bytes: u64,
    pub activations_bytes: u64,
    pub base_bytes: u64,
    pub total_bytes: u64,
}

pub(crate) fn estimate(net: &NetSpec, batch: usize) -> MemoryEstimate {
    let activations = net.activation_elements_per_image() * batch;
    MemoryEstimate::of(
        BASE_BYTES,
        (net.summary().params, PARAM_COPIES),
        (activations, ACTIVATION_COPIES),
    )
}

impl MemoryEstimate {
    /// `base` plus `p_copies` of `params` f32 parameters plus `a_copies` of `elements` f32
    /// activations.
    fn of(base: u64, (params, p_copies): (usize, f64), (elements, a_copies): (usize, f64)) -> Self {
        let params = (params as f64 * 4.0 * p_copies) as u64;
        let activations = (elements as f64 * 4.0 * a_copies) as u64;
        MemoryEstimate {
            params_bytes: params,
            activations_bytes: activations,
            base_bytes: base,
            total_bytes: base + params + activations,
        }
    }
}

/// The inference forward's peak: a frozen network (`Network::frozen`) keeps its weights once,
/// with their kept transforms (stacked inception heads, Winograd filters), and only the
/// activations of the layers in flight, so
///
/// peak ≈ base + params x 4 B x INFER_PARAM_COPIES + largest layer output/image x batch x 4 B x
/// INFER_ACTIVATION_COPIES
///
/// fitted, as the training constants were, to the peak RSS of CPU trials of both nets at batch
/// 1, 8 and 32 (docs/memory.md); the base is the process's own (code, threads, allocator).
pub(crate) const INFER_BASE_BYTES: u64 = 40 << 20;
pub(crate) const INFER_PARAM_COPIES: f64 = 1.2;
pub(crate) const INFER_ACTIVATION_COPIES: f64 = 2.8;

pub(crate) fn inference_estimate(net: &NetSpec, batch: usize) -> MemoryEstimate {
    let summary = net.summary();
    let largest = summary
        .stages
        .iter()
        .map(|s| s.output.iter().product::<usize>())
        .chain([net.input.iter().product()])
        .max()
        .unwrap_or(0);
    MemoryEstimate::of(
        INFER_BASE_BYTES,
        (summary.params, INFER_PARAM_COPIES),
        (largest * batch, INFER_ACTIVATION_COPIES),
    )
}

/// What the host offers a trial: RAM (or the cgroup cap) and swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capacity {
    pub ram_bytes: u64,
    pub available_bytes: u64,
    pub swap_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fit {
    Fits,
    /// More than the RAM available now: it will swap (a warning; the trial runs).
    NeedsSwap,
    /// More than RAM + swap: skipped unless --try-anyway.
    TooLarge,
}

pub(crate) fn fit(need: u64, cap: Capacity) -> Fit {
    if need > cap.ram_bytes.saturating_add(cap.swap_bytes) {
        Fit::TooLarge
    } else if need > cap.available_bytes.min(cap.ram_bytes) {
        Fit::NeedsSwap
    } else {
        Fit::Fits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models;

    #[test]
    fn estimate_grows_with_batch_and_counts_parameters() {
        let alex = models::by_name("alexnet").unwrap();
        let e1 = estimate(alex, 1);
        let e32 = estimate(alex, 32);
        assert_eq!(e1.params_bytes, (60_965_224.0 * 4.0 * PARAM_COPIES) as u64);
        // linear in the batch (up to rounding to whole bytes)
        assert!((e32.activations_bytes as i64 - 32 * e1.activations_bytes as i64).abs() <= 32);
        assert_eq!(
            e32.total_bytes,
            BASE_BYTES + e32.params_bytes + e32.activations_bytes
        );
        let goog = models::by_name("googlenet").unwrap();
        // GoogLeNet has 4.5x fewer parameters but far more activations per image
        assert!(goog.activation_elements_per_image() > 4 * alex.activation_elements_per_image());
    }

    #[test]
    fn inference_needs_the_weights_once_and_the_largest_layer() {
        for (name, largest) in [("alexnet", 96 * 55 * 55), ("googlenet", 64 * 112 * 112)] {
            let net = models::by_name(name).unwrap();
            let (e1, e32) = (inference_estimate(net, 1), inference_estimate(net, 32));
            let params = net.summary().params as f64 * 4.0 * INFER_PARAM_COPIES;
            assert_eq!(e1.params_bytes, params as u64, "{name}");
            let per_image = largest as f64 * 4.0 * INFER_ACTIVATION_COPIES;
            assert_eq!(e1.activations_bytes, per_image as u64, "{name}");
            assert!((e32.activations_bytes as f64 - 32.0 * per_image).abs() <= 1.0);
            assert_eq!(
                e32.total_bytes,
                INFER_BASE_BYTES + e32.params_bytes + e32.activations_bytes
            );
            // No gradients, no momentum, no activations kept for a backward.
            for batch in [1, 8, 32] {
                let (infer, train) = (inference_estimate(net, batch), estimate(net, batch));
                assert!(
                    infer.total_bytes < train.total_bytes,
                    "{name} batch {batch}"
                );
            }
        }
    }

    #[test]
    fn activation_elements_count_every_output() {
        // AlexNet per image: input + every layer output (hand-summed from the stage shapes)
        let alex = models::by_name("alexnet").unwrap();
        let by_hand = 3 * 227 * 227
            + 2 * 96 * 55 * 55 // conv1, norm1
            + 96 * 27 * 27
            + 2 * 256 * 27 * 27
            + 256 * 13 * 13
            + 2 * 384 * 13 * 13
            + 256 * 13 * 13
            + 256 * 6 * 6
            + 4 * 4096
            + 1000;
        assert_eq!(alex.activation_elements_per_image(), by_hand);
    }

    #[test]
    fn fit_verdicts() {
        let cap = Capacity {
            ram_bytes: 4 << 30,
            available_bytes: 3 << 30,
            swap_bytes: 2 << 30,
        };
        assert_eq!(fit(1 << 30, cap), Fit::Fits);
        assert_eq!(fit(7 << 29, cap), Fit::NeedsSwap);
        assert_eq!(fit(7 << 30, cap), Fit::TooLarge);
    }
}
