#!/usr/bin/env python3
"""Tables from the per-block counts of bench/arm/insn-count.c (bench/arm-insn.sh).

A training step's instructions are the counts of one run's snapshot at the step's end minus
those of its snapshot at the step's start (the plugin's mark=, taken at a system call the
program makes between steps): start-up, weight initialisation, the warm-up step and exit are
outside the two. Each block's difference is attributed, through
the binary's line tables (addr2line, inline frames included), to the innermost frame outside
Rust's standard library: its crate, and for edgebench's kernels crate its module.

usage: insn-report.py BIN|- BASE OUT_DIR LABEL=START_FILE,END_FILE,BATCH,GFLOP ...
Writes OUT_DIR/hot-blocks.tsv (the block with most of each category's instructions in each
run: category, offset in the binary, instructions in the block, instructions it ran per step,
its share of the step, run; for bench/arm-mca.sh) and prints Markdown tables.
"""
import collections
import os
import re
import subprocess
import sys


def read_blocks(path):
    """{vaddr: [instructions, flops, block length]}, summed over the blocks translated at that
    address (a block translated again, e.g. after its page was flushed, has several lines)."""
    blocks = collections.defaultdict(lambda: [0, 0, 0])
    total = None
    with open(path) as f:
        for line in f:
            parts = line.split()
            if parts[0] == "total":
                total = int(parts[1])
                continue
            vaddr, n, execs, flops = int(parts[0], 16), int(parts[1]), int(parts[2]), int(parts[3])
            blocks[vaddr][0] += n * execs
            blocks[vaddr][1] += flops * execs
            blocks[vaddr][2] = max(blocks[vaddr][2], n)
    if total is None:
        sys.exit(f"{path}: no 'total' line (did qemu exit before the plugin wrote it?)")
    return total, blocks


def category(frames):
    """The crate (and kernels module) of the innermost frame outside the standard library."""
    for func, path in frames:
        if path.startswith("/rustc/") or "/library/" in path and "/rustc/" in path:
            continue
        m = re.search(r"crates/edgebench-kernels/src/(\w+)(?:\.rs|/)", path)
        if m:
            return f"edgebench-kernels::{m.group(1)}"
        m = re.search(r"/registry/src/[^/]+/([A-Za-z0-9_-]+?)-\d+\.\d+", path)
        if m:
            crate = m.group(1)
            if crate == "gemm-f32" and path.endswith("microkernel.rs"):
                return "gemm-f32 microkernel"
            return crate
        if "/src/" in path and path != "??:0" and not path.startswith("??"):
            return "edgebench"
    if frames and frames[0][1].startswith("/rustc/"):
        return "Rust core/alloc/std"
    return "other (no line info)"


def attribute(binary, base, size, vaddrs):
    """{vaddr: category} for the addresses inside the binary's image."""
    inside = sorted(v for v in vaddrs if base <= v < base + size)
    cats = {}
    if not inside:
        return cats
    text = "\n".join(f"{v - base:x}" for v in inside) + "\n"
    out = subprocess.run(
        ["aarch64-linux-gnu-addr2line", "-a", "-i", "-f", "-C", "-e", binary],
        input=text, capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    # Each address: its line "0x…", then a function line and a file:line line per frame.
    groups, i = [], 0
    while i < len(out):
        if re.fullmatch(r"0x[0-9a-f]+", out[i]):
            groups.append([])
            i += 1
            continue
        groups[-1].append((out[i], out[i + 1] if i + 1 < len(out) else "??:0"))
        i += 2
    for v, frames in zip(inside, groups):
        cats[v] = category(frames)
    return cats


def image_size(binary):
    """Extent of the binary's loadable segments (it is loaded at BASE)."""
    out = subprocess.run(["aarch64-linux-gnu-readelf", "-lW", binary], capture_output=True,
                         text=True, check=True).stdout
    end = 0
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "LOAD":
            end = max(end, int(parts[2], 16) + int(parts[5], 16))
    return end


def main():
    binary, base, out_dir = sys.argv[1], int(sys.argv[2], 16), sys.argv[3]
    runs = []
    for arg in sys.argv[4:]:
        label, files = arg.split("=", 1)
        one, two, batch, gflop = files.split(",")
        t1, b1 = read_blocks(one)
        t2, b2 = read_blocks(two)
        zero = [0, 0, 0]
        diff = {v: [b2.get(v, zero)[0] - b1.get(v, zero)[0], b2.get(v, zero)[1] - b1.get(v, zero)[1],
                    max(b1.get(v, zero)[2], b2.get(v, zero)[2])]
                for v in set(b1) | set(b2)}
        runs.append((label, int(batch), float(gflop), t1, t2, diff))
    # BIN "-": a program without edgebench's line tables (PyTorch): totals only.
    size = image_size(binary) if binary != "-" else 0
    cats = attribute(binary, base, size, {v for r in runs for v in r[5]}) if size else {}

    print("| run | instructions at the step's start | at its end | one training step | per image "
          "| FP FLOP executed per step | FLOP/instruction | model FLOP per step / instructions |")
    print("|---|---|---|---|---|---|---|---|")
    per_run = []
    for label, batch, gflop, t1, t2, diff in runs:
        step = t2 - t1
        flops = sum(d[1] for d in diff.values())
        model = gflop * 1e9 * batch
        print(f"| {label} | {t1 / 1e9:.3f} G | {t2 / 1e9:.3f} G | {step / 1e9:.3f} G "
              f"| {step / batch / 1e9:.3f} G | {flops / 1e9:.2f} G | {flops / step:.2f} "
              f"| {model / step:.2f} |")
        by_cat = collections.defaultdict(lambda: [0, 0])
        hottest = {}
        for v, (n, fl, length) in diff.items():
            c = cats.get(v, "libc/ld.so (outside the binary)")
            by_cat[c][0] += n
            by_cat[c][1] += fl
            if n > hottest.get(c, (0, 0, 0))[1]:
                hottest[c] = (v, n, length)
        per_run.append((label, step, by_cat, hottest))

    if not size:
        return
    # The GEMM path: edgebench's own SGEMM (kernels crate, module sgemm) and the gemm crate.
    print("\n| run | GEMM instructions per step (edgebench-kernels::sgemm, gemm crate) | share of "
          "the step | FP FLOP they execute | FLOP/instruction | model FLOP per step / GEMM "
          "instructions |")
    print("|---|---|---|---|---|---|")
    for (label, step, by_cat, hottest), run in zip(per_run, runs):
        gemm = [v for c, v in by_cat.items()
                if c.startswith("gemm") or c == "edgebench-kernels::sgemm"]
        n, fl = sum(v[0] for v in gemm), sum(v[1] for v in gemm)
        model = run[2] * 1e9 * run[1]
        if n:
            print(f"| {label} | {n / 1e9:.3f} G | {100 * n / step:.1f} % | {fl / 1e9:.2f} G "
                  f"| {fl / n:.2f} | {model / n:.2f} |")
    for label, step, by_cat, hottest in per_run:
        print(f"\n{label}: one training step by code (innermost frame outside Rust's std)\n")
        print("| code | instructions | share | FP FLOP | FLOP/instruction |")
        print("|---|---|---|---|---|")
        for c, (n, fl) in sorted(by_cat.items(), key=lambda kv: -kv[1][0]):
            if n < step * 0.002:
                continue
            print(f"| {c} | {n / 1e6:.1f} M | {100 * n / step:.1f} % | {fl / 1e6:.1f} M "
                  f"| {fl / n if n else 0:.2f} |")
        rest = [n for c, (n, fl) in by_cat.items() if n < step * 0.002]
        print(f"| (others, each < 0.2 %) | {sum(rest) / 1e6:.1f} M | "
              f"{100 * sum(rest) / step:.1f} % | | |")

    # The hottest block of each category in each run, for llvm-mca.
    with open(os.path.join(out_dir, "hot-blocks.tsv"), "w") as f:
        for label, step, by_cat, hottest in per_run:
            for c, (v, n, length) in sorted(hottest.items(), key=lambda kv: -kv[1][1]):
                if base <= v < base + size and n > 0:
                    f.write(f"{c}\t{v - base:x}\t{length}\t{n}\t{100 * n / step:.1f}\t{label}\n")

if __name__ == "__main__":
    main()
