#!/usr/bin/env python3
"""edgebench's own copy of the PyTorch peer (from ../shared/peers/torch_train.py). Changes: the
RESULT line adds the peak GPU memory PyTorch allocated, and on CUDA the arithmetic is strict fp32
unless --tf32 is given (PyTorch lets cuDNN convolutions use TF32 by default; edgebench's candle
kernels compute in fp32), so the default row compares like with like.

Peer baseline: train BVLC AlexNet or GoogLeNet with PyTorch (CPU, or CUDA when --cuda and a GPU
is present) and print the time per image, for side-by-side comparison with edgebench.

usage: torch_train.py NET BATCH [STEPS] [--device=cpu|cuda | --cuda] [--tf32]      NET: alexnet | googlenet
prints two lines per step (the second, `EDGEBENCH step=N loss=L time=T images=B`, for
`edgebench exec --parser edgebench`) and a last line:  RESULT net=.. batch=.. median_s_per_image=..
"""
import sys, time, statistics
import torch
import torch.nn as nn

def lrn():
    return nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0)  # Caffe's definition

def alexnet():
    return nn.Sequential(
        nn.Conv2d(3, 96, 11, 4), nn.ReLU(True), lrn(), nn.MaxPool2d(3, 2),
        nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(True), lrn(), nn.MaxPool2d(3, 2),
        nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(True),
        nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(True),
        nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(True), nn.MaxPool2d(3, 2),
        nn.Flatten(), nn.Linear(9216, 4096), nn.ReLU(True), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(4096, 1000))

def conv(cin, cout, k, s=1, p=0):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, p), nn.ReLU(True))

class Inception(nn.Module):
    def __init__(self, cin, a, br, b, cr, c, p):
        super().__init__()
        self.b1 = conv(cin, a, 1)
        self.b2 = nn.Sequential(conv(cin, br, 1), conv(br, b, 3, p=1))
        self.b3 = nn.Sequential(conv(cin, cr, 1), conv(cr, c, 5, p=2))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv(cin, p, 1))
    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)

def aux(cin):
    return nn.Sequential(nn.AvgPool2d(5, 3, ceil_mode=True), conv(cin, 128, 1), nn.Flatten(),
                         nn.Linear(128 * 4 * 4, 1024), nn.ReLU(True), nn.Dropout(0.7),
                         nn.Linear(1024, 1000))

class GoogLeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv(3, 64, 7, 2, 3), nn.MaxPool2d(3, 2, ceil_mode=True), lrn(),
                                  conv(64, 64, 1), conv(64, 192, 3, p=1), lrn(),
                                  nn.MaxPool2d(3, 2, ceil_mode=True))
        self.i3 = nn.Sequential(Inception(192, 64, 96, 128, 16, 32, 32),
                                Inception(256, 128, 128, 192, 32, 96, 64),
                                nn.MaxPool2d(3, 2, ceil_mode=True))
        self.i4a = Inception(480, 192, 96, 208, 16, 48, 64)
        self.i4bcd = nn.Sequential(Inception(512, 160, 112, 224, 24, 64, 64),
                                   Inception(512, 128, 128, 256, 24, 64, 64),
                                   Inception(512, 112, 144, 288, 32, 64, 64))
        self.i4e5 = nn.Sequential(Inception(528, 256, 160, 320, 32, 128, 128),
                                  nn.MaxPool2d(3, 2, ceil_mode=True),
                                  Inception(832, 256, 160, 320, 32, 128, 128),
                                  Inception(832, 384, 192, 384, 48, 128, 128),
                                  nn.AvgPool2d(7, 1), nn.Flatten(), nn.Dropout(0.4),
                                  nn.Linear(1024, 1000))
        self.aux1, self.aux2 = aux(512), aux(528)
    def forward(self, x):
        x = self.i4a(self.i3(self.stem(x)))
        a1 = self.aux1(x)
        x = self.i4bcd(x)
        a2 = self.aux2(x)
        return [self.i4e5(x), a1, a2]

def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    net, batch = args[0], int(args[1])
    steps = int(args[2]) if len(args) > 2 else 6
    # --device=cpu|cuda (as `{device}` expands in an edgebench [[exec]] entry) insists on that
    # device; --cuda falls back to the CPU without a GPU.
    asked = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--device=")]
    if asked:
        if asked[0] not in ("cpu", "cuda"):
            sys.exit(f"--device={asked[0]}: use cpu or cuda")
        if asked[0] == "cuda" and not torch.cuda.is_available():
            sys.exit("--device=cuda: PyTorch sees no CUDA GPU")
        dev = torch.device(asked[0])
    else:
        dev = torch.device("cuda" if "--cuda" in sys.argv and torch.cuda.is_available() else "cpu")
    tf32 = "--tf32" in sys.argv
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    model = (alexnet() if net == "alexnet" else GoogLeNet()).to(dev).train()
    size = 227 if net == "alexnet" else 224
    weights = [1.0] if net == "alexnet" else [1.0, 0.3, 0.3]
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                          weight_decay=0.0005 if net == "alexnet" else 0.0002)
    xent = nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, size, size, device=dev)
    y = torch.zeros(batch, dtype=torch.long, device=dev)
    params = sum(p.numel() for p in model.parameters())
    times = []
    for i in range(steps):
        if dev.type == "cuda": torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = model(x)
        outs = outs if isinstance(outs, list) else [outs]
        loss = sum(w * xent(o, y) for w, o in zip(weights, outs))
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        lv = float(loss.detach())
        dt = time.perf_counter() - t0
        if i > 0:
            times.append(dt)
        print(f"step {i} s={dt:.4f} s_per_image={dt / batch:.5f} loss={lv:.4f}")
        # `edgebench exec --parser edgebench` reads this line (one per step).
        print(f"EDGEBENCH step={i} loss={lv:.6g} time={dt:.6f} images={batch}", flush=True)
    print(f"RESULT net={net} batch={batch} device={dev.type} params={params} "
          f"threads={torch.get_num_threads()} tf32={int(tf32)} "
          f"median_s_per_image={statistics.median(times) / batch:.6f} peak_gpu_mib="
          f"{torch.cuda.max_memory_allocated() / 2**20 if dev.type == 'cuda' else 0:.0f}")

if __name__ == "__main__":
    main()
