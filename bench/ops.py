#!/usr/bin/env python3
"""The operator micro-benchmark in numpy, for comparison with edgebench's ops workload.

    python3 bench/ops.py [OPS] [SIZES] [DTYPE] [MIN_TIME_S]
      OPS    comma separated: add,mul,dot,scalar,sigmoid,tanh (default all)
      SIZES  comma separated MiB the op touches (default 2,8,32,128,512; dot 5,17,65)
      DTYPE  f32 (default) or f64
      MIN_TIME_S  seconds of timed executions at least (default 1.0), and 10 executions at least

Shapes, counts and timing follow edgebench (src/workloads/ops.rs): the MiB are split over the
op's arrays (add, mul: A, B, C; scalar, sigmoid, tanh: A, C), dot takes square n x n matrices
with 3 n^2 elements; inputs are uniform in [-1, 1) ([-4, 4) for sigmoid and tanh); 2 warm-up
executions, then the median over the timed ones. Every op writes into a preallocated output
(`out=`), as edgebench's kernels do. numpy has no sigmoid: it is four in-place passes
(negate, exp, add 1, reciprocal). numpy's elementwise ops run on one thread; dot runs on
OpenBLAS's threads.

Prints one line per op and size:
    RESULT engine=numpy op=add dtype=f32 mb=32 elements=2796203 median_s=... gflop_per_s=... gbyte_per_s=...
"""
import sys
import time

import numpy as np

ARRAYS = {"add": 3, "mul": 3, "dot": 3, "scalar": 2, "sigmoid": 2, "tanh": 2}
FLOPS_PER_ELEMENT = {"add": 1, "mul": 1, "scalar": 1, "sigmoid": 4, "tanh": 6}
SCALAR = 1.5


def operands(op, mb, dtype, rng):
    elements = mb * 2**20 / np.dtype(dtype).itemsize
    lo, hi = (-4.0, 4.0) if op in ("sigmoid", "tanh") else (-1.0, 1.0)

    def draw(shape):
        return rng.uniform(lo, hi, size=shape).astype(dtype)

    if op == "dot":
        n = max(1, round((elements / 3) ** 0.5))
        a, b, c = draw((n, n)), draw((n, n)), np.zeros((n, n), dtype)
        return a, b, c, 2 * n**3, 3 * n * n * a.itemsize, n * n
    n = max(1, round(elements / ARRAYS[op]))
    a = draw(n)
    b = draw(n) if ARRAYS[op] == 3 else None
    c = np.zeros(n, dtype)
    return a, b, c, FLOPS_PER_ELEMENT[op] * n, ARRAYS[op] * n * a.itemsize, n


def execute(op, a, b, c):
    if op == "add":
        np.add(a, b, out=c)
    elif op == "mul":
        np.multiply(a, b, out=c)
    elif op == "dot":
        np.dot(a, b, out=c)
    elif op == "scalar":
        np.multiply(a, SCALAR, out=c)
    elif op == "sigmoid":
        np.negative(a, out=c)
        np.exp(c, out=c)
        np.add(c, 1, out=c)
        np.reciprocal(c, out=c)
    elif op == "tanh":
        np.tanh(a, out=c)
    else:
        raise SystemExit(f"unknown op {op!r}: use add, mul, dot, scalar, sigmoid, tanh")


def main():
    ops = (sys.argv[1] if len(sys.argv) > 1 else "add,mul,dot,scalar,sigmoid,tanh").split(",")
    sizes = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    dtype = {"f32": np.float32, "f64": np.float64}[sys.argv[3] if len(sys.argv) > 3 else "f32"]
    min_time = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    rng = np.random.default_rng(0x5EED)
    for op in ops:
        for mb in sizes or (["5", "17", "65"] if op == "dot" else ["2", "8", "32", "128", "512"]):
            a, b, c, flops, nbytes, elements = operands(op, float(mb), dtype, rng)
            for _ in range(2):
                execute(op, a, b, c)
            times = []
            start = time.perf_counter()
            while len(times) < 10 or time.perf_counter() - start < min_time:
                t0 = time.perf_counter()
                execute(op, a, b, c)
                times.append(time.perf_counter() - t0)
            median = float(np.median(times))
            print(
                f"RESULT engine=numpy op={op} dtype={np.dtype(dtype).name} mb={mb} "
                f"elements={elements} median_s={median:.6g} "
                f"gflop_per_s={flops / median * 1e-9:.4g} gbyte_per_s={nbytes / median * 1e-9:.4g}",
                flush=True,
            )
            del a, b, c


if __name__ == "__main__":
    main()
