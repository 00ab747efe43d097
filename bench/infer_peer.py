#!/usr/bin/env python3
"""Inference peers of `edgebench run --workload infer`, measured the way it measures:

usage: infer_peer.py ENGINE MODEL SCENARIO BATCH QUERIES THREADS
  ENGINE    onnxruntime (MODEL: an .onnx file; CPU execution provider) or torch (MODEL: alexnet
            or googlenet from bench/torch_train.py, eval mode under torch.inference_mode)
  SCENARIO  single-stream (queries of 1 sample, one after another) or offline (batches of BATCH)
  QUERIES   measured queries, after 10 warm-up ones
prints:  RESULT engine=.. model=.. scenario=.. batch=.. p50_s=.. samples_per_s=..
p50 is the median query latency; samples/s is samples over the window from the first measured
query's start to the last one's end, as edgebench's `samples_per_s`.
"""
import os
import statistics
import sys
import time

engine, model, scenario, batch, queries, threads = sys.argv[1:7]
batch = 1 if scenario == "single-stream" else int(batch)
queries, threads = int(queries), int(threads)
rng_seed = 1

if engine == "onnxruntime":
    import numpy as np
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    first = session.get_inputs()[0]
    shape = [batch] + [int(d) for d in first.shape[1:]]
    x = np.random.default_rng(rng_seed).standard_normal(shape, dtype=np.float32)
    feed = {first.name: x}
    def query():
        session.run(None, feed)
    name = os.path.splitext(os.path.basename(model))[0]
elif engine == "torch":
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_train import alexnet, GoogLeNet
    torch.set_num_threads(threads)
    torch.manual_seed(rng_seed)
    net = alexnet() if model == "alexnet" else GoogLeNet()
    net.eval()
    size = 227 if model == "alexnet" else 224
    x = torch.randn(batch, 3, size, size)
    if model != "alexnet":
        # GoogLeNet's module returns [logits, aux1, aux2]: the inference graph is its tower.
        class Tower(torch.nn.Module):
            def __init__(self, g):
                super().__init__()
                self.g = g
            def forward(self, x):
                g = self.g
                return g.i4e5(g.i4bcd(g.i4a(g.i3(g.stem(x)))))
        net = Tower(net).eval()
    def query():
        with torch.inference_mode():
            return net(x)
    name = model
else:
    sys.exit(f"unknown engine {engine}: use onnxruntime or torch")

for _ in range(10):
    query()
lat = []
start = time.perf_counter()
for _ in range(queries):
    t0 = time.perf_counter()
    query()
    lat.append(time.perf_counter() - t0)
window = time.perf_counter() - start
print(f"RESULT engine={engine} model={name} scenario={scenario} batch={batch} "
      f"p50_s={statistics.median(lat):.6f} samples_per_s={batch * queries / window:.3f}")
