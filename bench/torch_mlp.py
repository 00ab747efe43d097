#!/usr/bin/env python3
"""PyTorch peer of edgebench's MLP workload: the three algorithms of the PyTorch-on-embedded-GPUs
study (PyTorch's "learning PyTorch with examples" two-layer network), written as its listings
are: Alg1 tensors with a hand-written backward, Alg2 autograd, Alg3 autograd with a custom
MyReLU function. x, y, w1, w2 are drawn once from a seeded normal; loss = sum((y_pred - y)^2);
plain gradient descent at lr 1e-6.

usage: torch_mlp.py STYLE SIZE [ITERATIONS] [DEVICE]
  STYLE: tensors | autograd | function      SIZE: small | medium | large | NxD_inxHxD_out
  ITERATIONS: default 500                   DEVICE: cpu (default) | cuda
prints per step  EDGEBENCH step=N loss=L time=T  and a last line
  RESULT style=.. size=.. device=.. iterations=.. threads=.. median_s_per_iteration=..
         iqr_s_per_iteration=.. total_s=..
(median and IQR over the steps after the first, the warm-up; total_s sums the same steps).
"""
import statistics
import sys
import time

import torch

SIZES = {
    "small": (64, 15000, 100, 150),
    "medium": (192, 20000, 300, 200),
    "large": (384, 40000, 600, 400),
}


def parse_size(text):
    if text in SIZES:
        return SIZES[text]
    dims = tuple(int(d) for d in text.lower().split("x"))
    if len(dims) != 4 or min(dims) < 1:
        sys.exit(f"size '{text}': expected small, medium, large or NxD_inxHxD_out")
    return dims


# Alg1: PyTorch tensors, forward and backward by hand.
def alg1_tensors(x, y, w1, w2, learning_rate):
    # Forward pass: compute predicted y
    h = x.mm(w1)
    h_relu = h.clamp(min=0)
    y_pred = h_relu.mm(w2)

    # Compute and print loss
    loss = (y_pred - y).pow(2).sum().item()

    # Backprop to compute gradients of w1 and w2 with respect to loss
    grad_y_pred = 2.0 * (y_pred - y)
    grad_w2 = h_relu.t().mm(grad_y_pred)
    grad_h_relu = grad_y_pred.mm(w2.t())
    grad_h = grad_h_relu.clone()
    grad_h[h < 0] = 0
    grad_w1 = x.t().mm(grad_h)

    # Update weights using gradient descent
    w1 -= learning_rate * grad_w1
    w2 -= learning_rate * grad_w2
    return loss


# Alg2: PyTorch variables and autograd.
def alg2_autograd(x, y, w1, w2, learning_rate):
    y_pred = x.mm(w1).clamp(min=0).mm(w2)
    loss = (y_pred - y).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        w1 -= learning_rate * w1.grad
        w2 -= learning_rate * w2.grad
        # Manually zero the gradients after updating weights
        w1.grad.zero_()
        w2.grad.zero_()
    return loss.item()


# Alg3: PyTorch with a new autograd function.
class MyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input < 0] = 0
        return grad_input


def alg3_function(x, y, w1, w2, learning_rate):
    relu = MyReLU.apply
    y_pred = relu(x.mm(w1)).mm(w2)
    loss = (y_pred - y).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        w1 -= learning_rate * w1.grad
        w2 -= learning_rate * w2.grad
        w1.grad.zero_()
        w2.grad.zero_()
    return loss.item()


STYLES = {"tensors": alg1_tensors, "autograd": alg2_autograd, "function": alg3_function}


def main():
    args = sys.argv[1:]
    if len(args) < 2 or args[0] not in STYLES:
        sys.exit(__doc__)
    style, size = args[0], args[1]
    iterations = int(args[2]) if len(args) > 2 else 500
    dev = torch.device(args[3] if len(args) > 3 else "cpu")
    n, d_in, h, d_out = parse_size(size)
    learning_rate = 1e-6
    dtype = torch.float

    torch.manual_seed(0)
    x = torch.randn(n, d_in, device=dev, dtype=dtype)
    y = torch.randn(n, d_out, device=dev, dtype=dtype)
    grad = style != "tensors"
    w1 = torch.randn(d_in, h, device=dev, dtype=dtype, requires_grad=grad)
    w2 = torch.randn(h, d_out, device=dev, dtype=dtype, requires_grad=grad)

    step_fn = STYLES[style]
    times = []
    for t in range(iterations):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step_fn(x, y, w1, w2, learning_rate)
        if dev.type == "cuda":
            # Alg1 reads the loss after the forward: its backward and update are still queued.
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if t > 0:
            times.append(dt)
        print(f"EDGEBENCH step={t} loss={loss:.6g} time={dt:.6f}", flush=True)
    measured = times or [dt]
    q = statistics.quantiles(measured, n=4, method="inclusive") if len(measured) > 1 else [0, 0, 0]
    print(f"RESULT style={style} size={size} device={dev.type} iterations={iterations} "
          f"threads={torch.get_num_threads()} "
          f"median_s_per_iteration={statistics.median(measured):.6f} "
          f"iqr_s_per_iteration={q[2] - q[0]:.6f} total_s={sum(measured):.6f}")


if __name__ == "__main__":
    main()
