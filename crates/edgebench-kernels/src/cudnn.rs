//! `Conv2d` on CUDA through cuDNN (the `cudnn` feature): forward, input gradient and weight
//! gradient, as PyTorch and Caffe train on NVIDIA GPUs. The bias and the fused ReLU are one pass
//! over the output (`bias_act`), the bias gradient one reduction (`bias_grad`), both kernels of
//! `cuda/bias.cu`.
//!
//! Per thread (cuDNN handles are neither Send nor Sync) and device: one cuDNN handle on candle's
//! stream, one plan per convolution shape (descriptors plus the algorithm of each direction,
//! chosen once by cuDNN's heuristics, as PyTorch does without `cudnn.benchmark`) and one
//! workspace, grown to the largest any plan asked for, so a training step allocates none.
//!
//! Math: strict fp32 (`CUDNN_FMA_MATH`) unless `set_tf32(true)`, which lets cuDNN use TF32 tensor
//! cores, as PyTorch's default `allow_tf32` does.

use crate::cuda::{config, i32_of, Module};
use crate::geom::Geom;
use crate::tuning;
use crate::util::{image_stride, images_len};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::cudnn::{
    sys, ConvBackwardData, ConvBackwardFilter, ConvDescriptor, ConvForward, Cudnn,
    FilterDescriptor, TensorDescriptor,
};
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, CudaViewMut, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{DeviceId, WrapErr};
use candle_core::{bail, CudaDevice, CudaStorage, Layout, Result};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    dev: DeviceId,
    g: Geom,
    /// Elements between consecutive images of x (C·H·W when dense).
    image_stride: usize,
    tf32: bool,
}

type Choice<A> = Option<(A, usize)>;

/// Descriptors of one convolution shape and the algorithm (with its workspace bytes) chosen for
/// each direction the first time it ran.
struct Plan {
    conv: ConvDescriptor<f32>,
    x: TensorDescriptor<f32>,
    w: FilterDescriptor<f32>,
    y: TensorDescriptor<f32>,
    fwd: Choice<sys::cudnnConvolutionFwdAlgo_t>,
    bwd_data: Choice<sys::cudnnConvolutionBwdDataAlgo_t>,
    bwd_filter: Choice<sys::cudnnConvolutionBwdFilterAlgo_t>,
}

#[derive(Default)]
struct State {
    handles: HashMap<DeviceId, Arc<Cudnn>>,
    plans: HashMap<Key, Plan>,
    workspaces: HashMap<DeviceId, CudaSlice<u8>>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::default();
}

/// An f32 NCHW input whose images are each contiguous (`image_stride`), from the first image's
/// start to the last one's end, and the distance between images.
pub(crate) fn images_input<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    op: &str,
) -> Result<(CudaView<'a, f32>, usize)> {
    let (&[n, c, h, w], Some(stride)) = (l.dims(), image_stride(l)) else {
        bail!(
            "{op}: expects NCHW images that are each contiguous, got shape {:?} strides {:?}",
            l.dims(),
            l.stride()
        );
    };
    let len = images_len(n, c * h * w, stride);
    let start = l.start_offset();
    match s.dtype() {
        candle_core::DType::F32 => Ok((
            s.as_cuda_slice::<f32>()?.slice(start..start + len),
            stride.max(1),
        )),
        dt => bail!("{op}: the CUDA kernel supports f32 only, got {dt:?}"),
    }
}

fn int(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v)
        .map_err(|_| candle_core::Error::Msg(format!("{what} {v} is too large for cuDNN")))
}

fn new_plan(cudnn: &Arc<Cudnn>, g: &Geom, image_stride: usize, tf32: bool) -> Result<Plan> {
    use sys::{cudnnConvolutionMode_t as Mode, cudnnMathType_t as Math, cudnnTensorFormat_t as F};
    let [n, c, h, w, o, ho, wo, kh, kw] = [g.n, g.c, g.h, g.w, g.o, g.ho, g.wo, g.kh, g.kw];
    let d = |v: usize| int(v, "convolution size");
    let mut conv = cudnn.create_conv2d::<f32>(
        [d(g.pad)?; 2],
        [d(g.stride)?; 2],
        [1, 1],
        Mode::CUDNN_CROSS_CORRELATION,
    )?;
    conv.set_group_count(d(g.groups)?)?;
    conv.set_math_type(if tf32 {
        Math::CUDNN_DEFAULT_MATH
    } else {
        Math::CUDNN_FMA_MATH
    })?;
    let x = cudnn.create_4d_tensor_ex::<f32>(
        [d(n)?, d(c)?, d(h)?, d(w)?],
        [d(image_stride)?, d(h * w)?, d(w)?, 1],
    )?;
    let wd =
        cudnn.create_4d_filter::<f32>(F::CUDNN_TENSOR_NCHW, [d(o)?, d(g.cg())?, d(kh)?, d(kw)?])?;
    let y = cudnn.create_4d_tensor::<f32>(F::CUDNN_TENSOR_NCHW, [d(n)?, d(o)?, d(ho)?, d(wo)?])?;
    Ok(Plan {
        conv,
        x,
        w: wd,
        y,
        fwd: None,
        bwd_data: None,
        bwd_filter: None,
    })
}

/// The workspace of `dev`, at least `bytes` long (None for none).
fn workspace<'a>(
    workspaces: &'a mut HashMap<DeviceId, CudaSlice<u8>>,
    dev: &CudaDevice,
    bytes: usize,
) -> Result<Option<&'a mut CudaSlice<u8>>> {
    if bytes == 0 {
        return Ok(None);
    }
    let id = dev.id();
    // A larger one replaces the old, which goes back to the pool first (stream-ordered: after
    // its last use).
    if workspaces.get(&id).is_some_and(|ws| ws.len() < bytes) {
        workspaces.remove(&id);
    }
    if let std::collections::hash_map::Entry::Vacant(e) = workspaces.entry(id) {
        // SAFETY: cuDNN uses a workspace as scratch; it never reads what it did not write.
        e.insert(unsafe { dev.alloc::<u8>(bytes)? });
    }
    Ok(workspaces.get_mut(&id))
}

/// Runs `f` with the plan for (`g`, `image_stride`) on `dev` and the device's workspaces.
fn with_plan<R>(
    dev: &CudaDevice,
    g: &Geom,
    image_stride: usize,
    f: impl FnOnce(&mut Plan, &mut HashMap<DeviceId, CudaSlice<u8>>) -> Result<R>,
) -> Result<R> {
    let tf32 = tuning::tf32();
    STATE.with(|state| {
        let mut state = state.borrow_mut();
        let State {
            handles,
            plans,
            workspaces,
        } = &mut *state;
        let cudnn = match handles.get(&dev.id()) {
            Some(h) => h.clone(),
            None => {
                let h = Cudnn::new(dev.cuda_stream())?;
                handles.insert(dev.id(), h.clone());
                h
            }
        };
        let key = Key {
            dev: dev.id(),
            g: *g,
            image_stride,
            tf32,
        };
        let plan = match plans.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(new_plan(&cudnn, g, image_stride, tf32)?)
            }
        };
        f(plan, workspaces)
    })
}

fn check_len(what: &str, have: usize, want: usize) -> Result<()> {
    if have != want {
        bail!("cuDNN convolution: {what} has {have} elements, the shape needs {want}");
    }
    Ok(())
}

/// y = relu?(conv(x, w) + b): x (N, C, H, W) with images `image_stride` apart, w (O, C/g, KH, KW),
/// b (O) -> y (N, O, HO, WO), contiguous.
pub(crate) fn conv_fwd(
    dev: &CudaDevice,
    (x, image_stride): (&CudaView<'_, f32>, usize),
    w: &CudaView<'_, f32>,
    b: &CudaView<'_, f32>,
    g: &Geom,
    relu: bool,
) -> Result<CudaSlice<f32>> {
    check_len("x", x.len(), images_len(g.n, g.c * g.h * g.w, image_stride))?;
    check_len("w", w.len(), g.o * g.kk())?;
    check_len("b", b.len(), g.o)?;
    // SAFETY: cuDNN writes every element (beta = 0: y is not read).
    let mut y = unsafe { dev.alloc::<f32>(g.n * g.o * g.ho * g.wo)? };
    with_plan(dev, g, image_stride, |plan, workspaces| {
        let op = ConvForward {
            conv: &plan.conv,
            x: &plan.x,
            w: &plan.w,
            y: &plan.y,
        };
        let (algo, bytes) = match plan.fwd {
            Some(c) => c,
            None => {
                let a = op.pick_algorithm()?;
                (a, op.get_workspace_size(a)?)
            }
        };
        let ws = workspace(workspaces, dev, bytes)?;
        // SAFETY: the buffers match the plan's descriptors (lengths checked above).
        unsafe { op.launch(algo, ws, (1.0, 0.0), x, w, &mut y) }?;
        plan.fwd = Some((algo, bytes));
        Ok(())
    })?;
    if g.n * g.o * g.ho * g.wo > 0 {
        bias_act(dev, &mut y, b, g.o, g.ho * g.wo, relu)?;
    }
    Ok(y)
}

/// dx (N, C, H, W), contiguous, from dy (N, O, HO, WO) and w.
pub(crate) fn conv_bwd_data(
    dev: &CudaDevice,
    dy: &CudaView<'_, f32>,
    w: &CudaView<'_, f32>,
    g: &Geom,
) -> Result<CudaSlice<f32>> {
    let chw = g.c * g.h * g.w;
    check_len("dy", dy.len(), g.n * g.o * g.ho * g.wo)?;
    check_len("w", w.len(), g.o * g.kk())?;
    // SAFETY: cuDNN writes every element (beta = 0).
    let mut dx = unsafe { dev.alloc::<f32>(g.n * chw)? };
    with_plan(dev, g, chw, |plan, workspaces| {
        let op = ConvBackwardData {
            conv: &plan.conv,
            dx: &plan.x,
            w: &plan.w,
            dy: &plan.y,
        };
        let (algo, bytes) = match plan.bwd_data {
            Some(c) => c,
            None => {
                let a = op.pick_algorithm()?;
                (a, op.get_workspace_size(a)?)
            }
        };
        let ws = workspace(workspaces, dev, bytes)?;
        // SAFETY: the buffers match the plan's descriptors (lengths checked above).
        unsafe { op.launch(algo, ws, (1.0, 0.0), &mut dx, w, dy) }?;
        plan.bwd_data = Some((algo, bytes));
        Ok(())
    })?;
    Ok(dx)
}

/// [dW (O·C/g·KH·KW) | db (O)] from x (images `image_stride` apart) and dy.
pub(crate) fn conv_bwd_filter(
    dev: &CudaDevice,
    (x, image_stride): (&CudaView<'_, f32>, usize),
    dy: &CudaView<'_, f32>,
    g: &Geom,
) -> Result<CudaSlice<f32>> {
    let nw = g.o * g.kk();
    check_len("x", x.len(), images_len(g.n, g.c * g.h * g.w, image_stride))?;
    check_len("dy", dy.len(), g.n * g.o * g.ho * g.wo)?;
    // SAFETY: cuDNN writes every dW element (beta = 0), the bias kernel every db element.
    let mut out = unsafe { dev.alloc::<f32>(nw + g.o)? };
    let (mut dw, mut db) = out.split_at_mut(nw);
    with_plan(dev, g, image_stride, |plan, workspaces| {
        let op = ConvBackwardFilter {
            conv: &plan.conv,
            x: &plan.x,
            dw: &plan.w,
            dy: &plan.y,
        };
        let (algo, bytes) = match plan.bwd_filter {
            Some(c) => c,
            None => {
                let a = op.pick_algorithm()?;
                (a, op.get_workspace_size(a)?)
            }
        };
        let ws = workspace(workspaces, dev, bytes)?;
        // SAFETY: the buffers match the plan's descriptors (lengths checked above).
        unsafe { op.launch(algo, ws, (1.0, 0.0), x, &mut dw, dy) }?;
        plan.bwd_filter = Some((algo, bytes));
        Ok(())
    })?;
    bias_grad(dev, dy, &mut db, (g.n, g.o, g.ho * g.wo))?;
    Ok(out)
}

/// The bias kernels: the epilogue and the bias gradient.
static BIAS: Module = Module::new("edgebench_bias", include_str!("cuda/bias.cu"));

/// The convolution epilogue: `y += b` per channel, then ReLU if `relu`, in place.
fn bias_act(
    dev: &CudaDevice,
    y: &mut CudaSlice<f32>,
    b: &CudaView<'_, f32>,
    c: usize,
    hw: usize,
    relu: bool,
) -> Result<()> {
    let total = y.len();
    let (n, c, hw, relu) = (
        total as i64,
        i32_of(c, "channels")?,
        hw as i64,
        i32::from(relu),
    );
    let func = BIAS.kernel(dev, "eb_bias_act")?;
    let stream = dev.cuda_stream();
    let mut l = stream.launch_builder(&func);
    l.arg(y).arg(b).arg(&n).arg(&c).arg(&hw).arg(&relu);
    // SAFETY: the arguments match eb_bias_act's signature; y holds total = N·c·hw elements and
    // b holds c (the caller's checked geometry).
    unsafe { l.launch(config(total)) }.w()?;
    Ok(())
}

/// `db[ch]` = the sum of `dy` (N, c, hw) over images and positions, into `db` (c elements).
fn bias_grad(
    dev: &CudaDevice,
    dy: &CudaView<'_, f32>,
    db: &mut CudaViewMut<'_, f32>,
    (n, c, hw): (usize, usize, usize),
) -> Result<()> {
    if dy.len() != n * c * hw {
        bail!("bias gradient: {} gradients for {n}x{c}x{hw}", dy.len());
    }
    let (ni, ci, hwi) = (i32_of(n, "batch")?, i32_of(c, "channels")?, hw as i64);
    let func = BIAS.kernel(dev, "eb_bias_grad")?;
    let stream = dev.cuda_stream();
    let mut l = stream.launch_builder(&func);
    l.arg(dy).arg(db).arg(&ni).arg(&ci).arg(&hwi);
    let cfg = LaunchConfig {
        grid_dim: (ci.max(1) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the arguments match eb_bias_grad's signature; dy holds n·c·hw elements (checked)
    // and db at least c (the caller's slice of the output); one block per channel, 256 threads
    // as the kernel's shared array assumes.
    unsafe { l.launch(cfg) }.w()?;
    Ok(())
}
