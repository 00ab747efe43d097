//! The two-layer perceptron itself: its weights and data, one gradient-descent step in each
//! programming style, and the study's custom ReLU.

use super::{MlpSize, Style};
use candle_core::backend::BackendStorage;
use candle_core::{
    bail, CpuStorage, CudaStorage, CustomOp1, DType, Device, Layout, Result, Shape, Tensor, Var,
};
use edgebench_kernels::mm;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

/// The loss and the weights' gradients at the current weights.
pub struct Gradients {
    /// Scalar.
    pub loss: Tensor,
    pub w1: Tensor,
    pub w2: Tensor,
}

/// The model and its data.
pub struct Mlp {
    style: Style,
    pub(super) x: Tensor,
    pub(super) y: Tensor,
    pub(super) w1: Var,
    pub(super) w2: Var,
    pub(super) learning_rate: f64,
    /// Zeros shaped like h: what the hand-written ReLU backward selects where h < 0.
    zeros_h: Tensor,
}

fn normal(rng: &mut StdRng, rows: usize, cols: usize, device: &Device) -> Result<Tensor> {
    let values: Vec<f32> = (0..rows * cols)
        .map(|_| StandardNormal.sample(&mut *rng))
        .collect();
    Tensor::from_vec(values, (rows, cols), device)
}

impl Mlp {
    /// Draws x, y, w1, w2 (in that order) from the seeded standard normal.
    pub fn new(
        style: Style,
        size: &MlpSize,
        seed: u64,
        learning_rate: f64,
        device: &Device,
    ) -> Result<Mlp> {
        let mut rng = StdRng::seed_from_u64(seed);
        let x = normal(&mut rng, size.n, size.d_in, device)?;
        let y = normal(&mut rng, size.n, size.d_out, device)?;
        let w1 = Var::from_tensor(&normal(&mut rng, size.d_in, size.h, device)?)?;
        let w2 = Var::from_tensor(&normal(&mut rng, size.h, size.d_out, device)?)?;
        let zeros_h = Tensor::zeros((size.n, size.h), DType::F32, device)?;
        Ok(Mlp {
            style,
            x,
            y,
            w1,
            w2,
            learning_rate,
            zeros_h,
        })
    }

    pub fn style(&self) -> Style {
        self.style
    }

    /// The current weights (w1, w2).
    pub fn weights(&self) -> (&Tensor, &Tensor) {
        (self.w1.as_tensor(), self.w2.as_tensor())
    }

    /// One iteration: gradients, then w -= lr·grad. Returns the loss before the update. Reading
    /// it back synchronises the device, so the iteration is complete when this returns.
    pub fn step(&mut self) -> Result<f64> {
        let grads = self.gradients()?;
        self.descend(&self.w1, &grads.w1)?;
        self.descend(&self.w2, &grads.w2)?;
        Ok(grads.loss.to_scalar::<f32>()? as f64)
    }

    /// The loss and gradients at the current weights, in this model's style.
    pub fn gradients(&self) -> Result<Gradients> {
        match self.style {
            Style::Tensors => self.gradients_by_hand(),
            Style::Autograd => self.gradients_by_autograd(|h| h.relu()),
            Style::Function => self.gradients_by_autograd(|h| h.apply_op1(MyRelu)),
        }
    }

    /// Alg1: every gradient written out.
    fn gradients_by_hand(&self) -> Result<Gradients> {
        // Detached views of the weights' storage: no graph is recorded.
        let w1 = self.w1.as_detached_tensor();
        let w2 = self.w2.as_detached_tensor();
        let h = mm(&self.x, &w1)?;
        let h_relu = h.relu()?;
        let y_pred = mm(&h_relu, &w2)?;
        let diff = (y_pred - &self.y)?;
        let loss = diff.sqr()?.sum_all()?;

        let grad_y_pred = diff.affine(2.0, 0.0)?;
        // Transposes are strided views; the CPU products read them without a copy.
        let grad_w2 = mm(&h_relu.t()?, &grad_y_pred)?;
        let grad_h_relu = mm(&grad_y_pred, &w2.t()?)?;
        // grad_h = grad_h_relu with the entries where h < 0 set to 0.
        let grad_h = h
            .ge(&self.zeros_h)?
            .where_cond(&grad_h_relu, &self.zeros_h)?;
        let grad_w1 = mm(&self.x.t()?, &grad_h)?;
        Ok(Gradients {
            loss,
            w1: grad_w1,
            w2: grad_w2,
        })
    }

    /// Alg2 and Alg3: the forward on the weights' `Var`s, the gradients from `backward`.
    fn gradients_by_autograd(&self, relu: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Gradients> {
        let h = mm(&self.x, self.w1.as_tensor())?;
        let y_pred = mm(&relu(&h)?, self.w2.as_tensor())?;
        let loss = (y_pred - &self.y)?.sqr()?.sum_all()?;
        let mut grads = loss.backward()?;
        let mut take = |w: &Var, name: &str| {
            grads.remove(w.as_tensor()).ok_or_else(|| {
                candle_core::Error::Msg(format!("backward gave no gradient for {name}"))
            })
        };
        let w1 = take(&self.w1, "w1")?;
        let w2 = take(&self.w2, "w2")?;
        Ok(Gradients {
            loss: loss.detach(),
            w1,
            w2,
        })
    }

    /// w -= lr·grad in place: one pass, no temporaries (CPU and CUDA); elsewhere through tensor
    /// ops and a copy into the weight.
    fn descend(&self, w: &Var, grad: &Tensor) -> Result<()> {
        let rate = self.learning_rate as f32;
        if w.device().is_cpu() || w.device().is_cuda() {
            edgebench_kernels::descend(w.as_tensor(), &grad.contiguous()?, rate)
        } else {
            let updated = (w.as_detached_tensor() - grad.affine(self.learning_rate, 0.0)?)?;
            w.set(&updated)
        }
    }
}

/// The study's `MyReLU`: forward clamps at 0 and keeps the input for the backward, which passes
/// the output's gradient where the input is not negative.
pub(crate) struct MyRelu;

fn clamp_min_zero<T: Copy + PartialOrd + Default>(values: &[T], layout: &Layout) -> Vec<T> {
    let zero = T::default();
    let clamp = |v: T| if v < zero { zero } else { v };
    match layout.contiguous_offsets() {
        Some((start, end)) => values[start..end].iter().map(|&v| clamp(v)).collect(),
        None => strided_offsets(layout)
            .into_iter()
            .map(|i| clamp(values[i]))
            .collect(),
    }
}

/// Storage offsets of a layout's elements in row-major order.
fn strided_offsets(layout: &Layout) -> Vec<usize> {
    let mut offsets = vec![layout.start_offset()];
    for (&dim, &stride) in layout.dims().iter().zip(layout.stride()) {
        offsets = offsets
            .iter()
            .flat_map(|&base| (0..dim).map(move |i| base + i * stride))
            .collect();
    }
    offsets
}

impl CustomOp1 for MyRelu {
    fn name(&self) -> &'static str {
        "my-relu"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let out = match storage {
            CpuStorage::F32(v) => CpuStorage::F32(clamp_min_zero(v, layout)),
            CpuStorage::F64(v) => CpuStorage::F64(clamp_min_zero(v, layout)),
            other => bail!("my-relu: expects f32 or f64, got {:?}", other.dtype()),
        };
        Ok((out, layout.shape().clone()))
    }

    fn cuda_fwd(&self, storage: &CudaStorage, layout: &Layout) -> Result<(CudaStorage, Shape)> {
        let out = storage.unary_impl::<candle_core::op::Relu>(layout)?;
        Ok((out, layout.shape().clone()))
    }

    fn bwd(
        &self,
        input: &Tensor,
        _output: &Tensor,
        grad_output: &Tensor,
    ) -> Result<Option<Tensor>> {
        // grad_input = grad_output.clone(); grad_input[input < 0] = 0
        let zeros = grad_output.zeros_like()?;
        Ok(Some(input.ge(&zeros)?.where_cond(grad_output, &zeros)?))
    }
}

