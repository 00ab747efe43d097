//! SGD with momentum and weight decay exactly as Caffe's SGDSolver applies it, with the BVLC
//! learning-rate policies. candle_nn::SGD has neither momentum nor weight decay.

use crate::models::spec::{LrPolicy, SolverSpec};
use crate::models::Param;
use candle_core::backprop::GradStore;
use candle_core::{bail, CpuStorage, InplaceOp2, Layout, Result, Tensor, TensorId};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Learning rate at 0-based iteration `iter` of a trial of `max_iter` iterations.
pub fn learning_rate(solver: &SolverSpec, iter: usize, max_iter: usize) -> f64 {
    match solver.policy {
        LrPolicy::Step { gamma, stepsize } => {
            solver.base_lr * gamma.powi((iter / stepsize.max(1)) as i32)
        }
        LrPolicy::Poly { power } => {
            let progress = iter as f64 / max_iter.max(1) as f64;
            solver.base_lr * (1.0 - progress).max(0.0).powf(power)
        }
    }
}

pub struct Sgd {
    solver: SolverSpec,
    max_iter: usize,
    /// One momentum ("history") blob per parameter, in `params` order.
    history: Vec<History>,
    /// Each parameter's index in `params`, by its variable.
    index: HashMap<TensorId, usize>,
}

/// Gradients handed over during the backward wait until they hold this many elements (4 MiB of
/// f32, which the last-level caches of x86 hosts and of the larger boards hold), then are
/// applied in one parallel pass: the pool wakes once per group instead of once per parameter,
/// and the gradients are read back while still cached.
const IN_BACKWARD_GROUP: usize = 1 << 20;

/// A gradient of more elements than this (8 MiB of f32) is read back from memory wherever its
/// update runs: the update is a task of its own, which a core that the backward leaves idle
/// takes up while the backward goes on (AlexNet's fc6, fc7 and fc8; GoogLeNet's largest, its
/// auxiliary classifiers' first layers, have 2 M elements). Within the backward's own
/// sequence, as the smaller ones are, such a gradient made AlexNet's batch-1 step slower.
const STREAMED_FROM: usize = 1 << 21;

/// A parameter's momentum: a plain vector for f32 parameters on the CPU, which the update
/// writes in the same pass as the parameter; a tensor on other devices (on CUDA written in place
/// by the fused update, so it must stay this optimiser's alone).
enum History {
    Host(Vec<f32>),
    Device(Tensor),
}

impl Sgd {
    pub fn new(solver: SolverSpec, params: &[Param], max_iter: usize) -> Result<Sgd> {
        let history = params
            .iter()
            .map(|p| {
                let w = p.var.as_tensor();
                Ok(
                    if w.device().is_cpu() && w.dtype() == candle_core::DType::F32 {
                        History::Host(vec![0.0; w.elem_count()])
                    } else {
                        History::Device(w.zeros_like()?)
                    },
                )
            })
            .collect::<Result<_>>()?;
        let index = params
            .iter()
            .enumerate()
            .map(|(i, p)| (p.var.as_tensor().id(), i))
            .collect();
        Ok(Sgd {
            solver,
            max_iter,
            history,
            index,
        })
    }

    /// The backward of `loss` and the update of [`Sgd::step`], with the same arithmetic and
    /// results. On the host each parameter is updated as soon as the backward has completed
    /// its gradient, in groups of [`IN_BACKWARD_GROUP`] elements: the gradient is read back
    /// from cache instead of memory (at batch 1 the update is a large part of the step), and
    /// the network's gradients are not all held at once. A gradient of more than
    /// [`STREAMED_FROM`] elements is applied on whichever core is free while the backward goes
    /// on. Elsewhere the backward then [`Sgd::step`]. Returns the learning rate used.
    pub fn backward_and_step(
        &mut self,
        iter: usize,
        params: &[Param],
        loss: &Tensor,
    ) -> Result<f64> {
        if !self.history.iter().all(|h| matches!(h, History::Host(_))) {
            let grads = loss.backward()?;
            return self.step(iter, params, &grads);
        }
        let lr = learning_rate(&self.solver, iter, self.max_iter);
        let (solver, index) = (&self.solver, &self.index);
        // Each parameter's momentum, taken by its update: once per step.
        let mut histories: Vec<Option<&mut [f32]>> = self
            .history
            .iter_mut()
            .map(|h| match h {
                History::Host(v) => Some(v.as_mut_slice()),
                History::Device(_) => None,
            })
            .collect();
        let streamed_failure: Mutex<Option<candle_core::Error>> = Mutex::new(None);
        rayon::scope(|scope| -> Result<()> {
            let mut group: Vec<(&Tensor, Tensor, Momentum)> = Vec::new();
            let mut group_elements = 0;
            loss.backward_handing_variables(&mut |var, grad| {
                let Some(&i) = index.get(&var.id()) else {
                    return Ok(()); // a variable the optimiser does not own
                };
                let Some(v) = histories[i].take() else {
                    bail!("sgd: two gradients for {} in one step", params[i].name);
                };
                let w = params[i].var.as_tensor();
                let update = momentum_for(solver, &params[i], lr, v);
                let grad = grad.detach().contiguous()?;
                if grad.elem_count() > STREAMED_FROM {
                    let failure = &streamed_failure;
                    scope.spawn(move |_| {
                        if let Err(e) = w.inplace_op2(&grad, &update) {
                            *failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                        }
                    });
                    return Ok(());
                }
                group_elements += grad.elem_count();
                group.push((w, grad, update));
                if group_elements >= IN_BACKWARD_GROUP {
                    apply_group(&mut group)?;
                    group_elements = 0;
                }
                Ok(())
            })?;
            apply_group(&mut group)
        })?;
        match streamed_failure
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
        {
            Some(e) => Err(e),
            None => Ok(lr),
        }
    }

    /// One update (Caffe's SGDSolver::ApplyUpdate):
    /// g += decay * decay_mult * w;  v = momentum * v + lr * lr_mult * g;  w -= v.
    /// Returns the learning rate used.
    pub fn step(&mut self, iter: usize, params: &[Param], grads: &GradStore) -> Result<f64> {
        let lr = learning_rate(&self.solver, iter, self.max_iter);
        // The host updates run all at once, one task per parameter, so that the many small
        // parameters (biases, 1x1 filters: one chunk each) share the cores instead of each
        // running alone, and the pool wakes once per step instead of once per parameter.
        let mut on_host: Vec<(&Tensor, Tensor, Momentum)> = Vec::new();
        // CUDA f32 parameters are updated together after the loop (one launch per 32): weight,
        // gradient, momentum (a clone shares the history's buffer, which the kernel updates in
        // place), rate, decay.
        let mut on_gpu: Vec<(&Tensor, Tensor, Tensor, f32, f32)> = Vec::new();
        for (param, history) in params.iter().zip(self.history.iter_mut()) {
            let w = param.var.as_tensor();
            let Some(grad) = grads.get(w) else {
                continue; // not on this step's graph
            };
            // Gradients computed from Vars carry autograd history that reaches back to this
            // step's activations; detached, the momentum buffer cannot keep them (and, through
            // the previous buffer, every earlier step's) alive.
            let grad = grad.detach();
            let decay = self.solver.weight_decay * param.decay_mult;
            let rate = lr * param.lr_mult;
            match history {
                History::Host(v) => {
                    let update = momentum_for(&self.solver, param, lr, v);
                    on_host.push((w, grad.contiguous()?, update));
                }
                History::Device(history)
                    if w.device().is_cuda() && w.dtype() == candle_core::DType::F32 =>
                {
                    // Fused on the GPU instead of six element-wise ops and their temporaries
                    // per parameter (at batch 1 the update is much of the step).
                    let (grad, rate, decay) = (grad.contiguous()?, rate as f32, decay as f32);
                    on_gpu.push((w, grad, history.clone(), rate, decay));
                }
                History::Device(history) => {
                    let grad = if decay != 0.0 {
                        (grad + (w.detach() * decay)?)?
                    } else {
                        grad
                    };
                    let update = ((&*history * self.solver.momentum)? + (grad * rate)?)?;
                    param.var.set(&(w.detach() - &update)?)?;
                    *history = update.detach();
                }
            }
        }
        on_host
            .par_iter()
            .try_for_each(|(w, grad, update)| w.inplace_op2(grad, update))?;
        let updates: Vec<_> = on_gpu
            .iter()
            .map(|(w, g, v, rate, decay)| edgebench_kernels::SgdUpdate {
                w,
                g,
                v,
                rate: *rate,
                decay: *decay,
            })
            .collect();
        edgebench_kernels::sgd_momentum_all(&updates, self.solver.momentum as f32)?;
        Ok(lr)
    }
}

/// The updates of `group`, one task per parameter; empties it.
fn apply_group(group: &mut Vec<(&Tensor, Tensor, Momentum)>) -> Result<()> {
    group
        .par_drain(..)
        .try_for_each(|(w, grad, update)| w.inplace_op2(&grad, &update))
}

/// The host update of `param` at learning rate `lr`, writing its history `v`: one in-place pass
/// over w, g and v, memory-bound (at batch 1 the update is a large part of the step; AlexNet's
/// 61 M parameters: ~1.2 GB read and written per step), so no temporaries and no second pass.
fn momentum_for<'a>(solver: &SolverSpec, param: &Param, lr: f64, v: &'a mut [f32]) -> Momentum<'a> {
    Momentum {
        momentum: solver.momentum as f32,
        rate: (lr * param.lr_mult) as f32,
        decay: (solver.weight_decay * param.decay_mult) as f32,
        history: Mutex::new(v),
    }
}

/// v = momentum * v + rate * (g + decay * w);  w -= v: in place on w and on the history v
/// (f32, CPU).
struct Momentum<'a> {
    momentum: f32,
    rate: f32,
    decay: f32,
    /// Written by `cpu_fwd` (which takes `&self`); locked once per update.
    history: Mutex<&'a mut [f32]>,
}

const CHUNK: usize = 1 << 16;

fn f32_slice<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => bail!("{op}: expects contiguous f32 tensors"),
    }
}

fn f32_slice_mut<'a>(s: &'a mut CpuStorage, l: &Layout, op: &str) -> Result<&'a mut [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&mut v[a..b]),
        _ => bail!("{op}: expects contiguous f32 tensors"),
    }
}

impl InplaceOp2 for Momentum<'_> {
    fn name(&self) -> &'static str {
        "sgd-momentum"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let mut v = self
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if l1.shape() != l2.shape() || l1.shape().elem_count() != v.len() {
            bail!("sgd-momentum: shapes differ");
        }
        let w = f32_slice_mut(s1, l1, "sgd-momentum")?;
        let g = f32_slice(s2, l2, "sgd-momentum")?;
        let (m, r, d) = (self.momentum, self.rate, self.decay);
        w.par_chunks_mut(CHUNK)
            .zip(v.par_chunks_mut(CHUNK).zip(g.par_chunks(CHUNK)))
            .for_each(|(w, (v, g))| {
                edgebench_kernels::sgd_momentum_host(w, v, g, m, r, d);
            });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models;
    use candle_core::{Device, Var};

    fn solver(policy: LrPolicy) -> SolverSpec {
        SolverSpec {
            base_lr: 0.01,
            momentum: 0.9,
            weight_decay: 0.0005,
            policy,
            bias_lr_mult: 2.0,
            bias_decay_mult: 0.0,
        }
    }

    #[test]
    fn lr_policies_follow_caffe() {
        let step = solver(LrPolicy::Step {
            gamma: 0.1,
            stepsize: 10,
        });
        assert_eq!(learning_rate(&step, 9, 100), 0.01);
        assert!((learning_rate(&step, 10, 100) - 0.001).abs() < 1e-15);
        assert!((learning_rate(&step, 25, 100) - 0.0001).abs() < 1e-15);
        let poly = solver(LrPolicy::Poly { power: 0.5 });
        assert_eq!(learning_rate(&poly, 0, 100), 0.01);
        assert!((learning_rate(&poly, 75, 100) - 0.005).abs() < 1e-12);
        assert_eq!(learning_rate(&poly, 100, 100), 0.0);
        // The shipped solvers
        assert!(matches!(
            models::by_name("alexnet").unwrap().solver.policy,
            LrPolicy::Step { .. }
        ));
        assert!(matches!(
            models::by_name("googlenet").unwrap().solver.policy,
            LrPolicy::Poly { .. }
        ));
    }

    /// Many parameters, small and larger than one chunk, with their own rates and decays: each
    /// is updated exactly once per step, as the update written out in f64 does it; after the
    /// backward, and during it (the sizes fill more than one group).
    #[test]
    fn every_parameter_is_updated_once_per_step() -> Result<()> {
        every_parameter_updated_once(false)?;
        every_parameter_updated_once(true)
    }

    fn every_parameter_updated_once(during_backward: bool) -> Result<()> {
        let dev = Device::Cpu;
        let sizes = [
            1,
            7,
            CHUNK - 1,
            CHUNK + 3,
            3 * CHUNK + 5,
            2,
            IN_BACKWARD_GROUP + 9,
            STREAMED_FROM + 1,
            64,
            9 * 64,
        ];
        let params: Vec<Param> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let init: Vec<f32> = (0..n)
                    .map(|k| ((k * 7 + i) % 13) as f32 * 0.1 - 0.6)
                    .collect();
                Ok(Param {
                    name: format!("p{i}"),
                    var: Var::from_vec(init, n, &dev)?,
                    lr_mult: 1.0 + i as f64,
                    decay_mult: (i % 2) as f64,
                })
            })
            .collect::<Result<_>>()?;
        let s = solver(LrPolicy::Step {
            gamma: 0.1,
            stepsize: 1000,
        });
        let mut sgd = Sgd::new(s, &params, 10)?;
        let mut want: Vec<Vec<f64>> = params
            .iter()
            .map(|p| {
                p.var
                    .as_tensor()
                    .to_vec1::<f32>()
                    .map(|v| v.into_iter().map(f64::from).collect())
            })
            .collect::<Result<_>>()?;
        let mut hist: Vec<Vec<f64>> = sizes.iter().map(|&n| vec![0.0; n]).collect();
        for iter in 0..2 {
            // loss = Σ_i (i + 1) · Σ w_i: parameter i's gradient is i + 1 everywhere.
            let mut loss = Tensor::new(0f32, &dev)?;
            for (i, p) in params.iter().enumerate() {
                loss = (loss + (p.var.as_tensor().sum_all()? * (i + 1) as f64)?)?;
            }
            if during_backward {
                sgd.backward_and_step(iter, &params, &loss)?;
            } else {
                sgd.step(iter, &params, &loss.backward()?)?;
            }
            for (i, p) in params.iter().enumerate() {
                let (rate, decay) = (0.01 * p.lr_mult, 0.0005 * p.decay_mult);
                for (w, v) in want[i].iter_mut().zip(&mut hist[i]) {
                    *v = 0.9 * *v + rate * ((i + 1) as f64 + decay * *w);
                    *w -= *v;
                }
            }
        }
        for (i, p) in params.iter().enumerate() {
            let got = p.var.as_tensor().to_vec1::<f32>()?;
            for (k, (&g, &w)) in got.iter().zip(&want[i]).enumerate() {
                assert!(
                    (g as f64 - w).abs() < 1e-5,
                    "p{i}[{k}] (during the backward: {during_backward}): {g} vs {w}"
                );
            }
        }
        Ok(())
    }

    /// Two steps on a weight and a bias, checked against the update written out by hand.
    #[test]
    fn momentum_and_decay_match_hand_computation() -> Result<()> {
        let dev = Device::Cpu;
        let w = Var::from_vec(vec![1.0f32, -2.0], 2, &dev)?;
        let b = Var::from_vec(vec![0.5f32], 1, &dev)?;
        let params = vec![
            Param {
                name: "w".into(),
                var: w.clone(),
                lr_mult: 1.0,
                decay_mult: 1.0,
            },
            Param {
                name: "b".into(),
                var: b.clone(),
                lr_mult: 2.0,
                decay_mult: 0.0,
            },
        ];
        let s = solver(LrPolicy::Step {
            gamma: 0.1,
            stepsize: 1000,
        });
        let mut sgd = Sgd::new(s, &params, 10)?;
        // loss = 3*w0 + 5*w1 + 7*b: constant gradients (3, 5) and 7.
        let (mut vw, mut vb) = ([0.0f64; 2], 0.0f64);
        let (mut ew, mut eb) = ([1.0f64, -2.0], 0.5f64);
        for iter in 0..2 {
            let loss = ((w.as_tensor() * &Tensor::new(&[3.0f32, 5.0], &dev)?)?.sum_all()?
                + (b.as_tensor() * 7.0)?.sum_all()?)?;
            let grads = loss.backward()?;
            sgd.step(iter, &params, &grads)?;
            for (i, g) in [3.0, 5.0].into_iter().enumerate() {
                vw[i] = 0.9 * vw[i] + 0.01 * (g + 0.0005 * ew[i]);
                ew[i] -= vw[i];
            }
            vb = 0.9 * vb + 0.01 * 2.0 * 7.0;
            eb -= vb;
        }
        let got_w = w.as_tensor().to_vec1::<f32>()?;
        let got_b = b.as_tensor().to_vec1::<f32>()?;
        for i in 0..2 {
            assert!(
                (got_w[i] as f64 - ew[i]).abs() < 1e-6,
                "w[{i}] {} vs {}",
                got_w[i],
                ew[i]
            );
        }
        assert!(
            (got_b[0] as f64 - eb).abs() < 1e-6,
            "b {} vs {eb}",
            got_b[0]
        );
        Ok(())
    }
}
