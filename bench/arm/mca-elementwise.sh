#!/usr/bin/env bash
# Static cycle estimates (llvm-mca, Cortex-A57 model) for the f32 sigmoid and tanh loops and
# LRN's forward loop (beta = 3/4) of an aarch64 build of edgebench-kernels; prints a Markdown
# table.
#
#   bench/arm/mca-elementwise.sh BIN
#
# BIN: an aarch64 binary holding the kernels, e.g. the crate's unit-test binary:
#   CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc cargo test -p edgebench-kernels --lib \
#     --no-run --profile ci-aarch64 --target aarch64-unknown-linux-gnu --message-format=json
#   (its "executable").
#
# Two loops per function, where BIN holds them:
# - neon: the innermost loop with the most floating-point work that divides, in
#   edgebench_kernels::elementwise::neon::{sigmoid,tanh};
# - unary: `unary` over Elem::{sigmoid,tanh}::<true> as LLVM vectorises it (what runs without
#   the NEON loops): the innermost loop with the most floating-point work that divides, among
#   the functions edgebench_kernels::elementwise::{sigmoid,tanh} reach through direct calls
#   (rayon's generic helpers carry no name of the op), the neon ones excepted;
# - LRN: edgebench_kernels::lrn::neon::normalize_three_quarters, and the compiler's
#   vectorisation of Lrn::normalize for f32 (the loop with f32 square roots and a division
#   that Lrn::fwd_into reaches) where BIN holds it (the NEON loop replaces it).
# Elements per iteration: one division per element (4 per `fdiv v.4s`), in the NEON LRN loop
# two reciprocal square-root estimates per element. Stack accesses: loads
# and stores addressed from sp, registers spilled for want of the 32 vector ones. Each loop is
# disassembled (aarch64-linux-gnu-objdump -d --no-show-raw-insn) without its branches and fed
# to llvm-mca -mtriple=aarch64 -mcpu=cortex-a57 -iterations=200: a static model of one core's
# pipeline (no caches, no memory, no branch misses), loop bodies run back to back.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: bench/arm/mca-elementwise.sh AARCH64_BINARY}
command -v llvm-mca >/dev/null || { echo "llvm-mca missing: apt-get install llvm" >&2; exit 1; }
command -v aarch64-linux-gnu-objdump >/dev/null ||
    { echo "aarch64-linux-gnu-objdump missing: apt-get install binutils-aarch64-linux-gnu" >&2; exit 1; }
aarch64-linux-gnu-readelf -h "$bin" | grep -q AArch64 || { echo "$bin is not an aarch64 binary" >&2; exit 1; }
echo "$(llvm-mca --version | grep -m1 -i 'llvm version' | sed 's/^ *//'); -mcpu=cortex-a57; $(date -u +%Y-%m-%d)"
echo
python3 - "$bin" <<'EOF'
import importlib.util
import re
import subprocess
import sys

# The disassembly, symbol and FLOP helpers of bench/arm/mca-report.py.
spec = importlib.util.spec_from_file_location("mca_report", "bench/arm/mca-report.py")
mr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mr)

binary = sys.argv[1]
syms = mr.symbols(binary)
by_addr = {s[0]: s for s in syms}


def operands(insn):
    return [o.strip() for o in insn[2].split(",")]


def work(body):
    return sum(mr.flops(x[1], operands(x)) for x in body)


def divided_elements(body):
    """Elements per iteration: one division each."""
    return sum(mr.lanes(operands(x)[0]) for x in body if x[1] == "fdiv")


def innermost_loops(sym):
    """The bodies of the loops of `sym` that hold no other loop."""
    insns = mr.disassemble(binary, sym[0], sym[0] + sym[1])
    loops = []
    for addr, _, _, target in insns:
        if target is None or target > addr or target < sym[0]:
            continue
        body = [x for x in insns if target <= x[0] <= addr]
        if not any(x[3] is not None and target <= x[3] <= x[0] and x[0] != addr for x in body):
            loops.append(body)
    return loops


def f32_square_roots(body):
    return sum(1 for x in body if x[1] in ("fsqrt", "frsqrte") and operands(x)[0].endswith(".4s"))


def best_loop(funcs, divides, roots=False):
    best = None
    for sym in funcs:
        for body in innermost_loops(sym):
            if divides and not divided_elements(body):
                continue
            if roots and not f32_square_roots(body):
                continue
            if best is None or work(body) > work(best):
                best = body
    return best


def reached(root, depth=7):
    """Functions `root` reaches through direct calls and tail calls, `depth` levels deep."""
    seen, frontier = {root[0]: root}, [root]
    for _ in range(depth):
        nxt = []
        for sym in frontier:
            for addr, mnem, _, target in mr.disassemble(binary, sym[0], sym[0] + sym[1]):
                if mnem in ("bl", "b") and target in by_addr and target not in seen:
                    seen[target] = by_addr[target]
                    nxt.append(by_addr[target])
        frontier = nxt
    return list(seen.values())


def mca_cycles(body):
    text = "".join(f"{x[1]} {x[2]}\n" for x in body if x[3] is None and not mr.BRANCH.match(x[1]))
    out = subprocess.run(["llvm-mca", "-mtriple=aarch64", "-mcpu=cortex-a57", "-iterations=200"],
                         input=text, capture_output=True, text=True, check=True).stdout
    return int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200


print("| loop | instructions per iteration | elements per iteration | cycles per iteration "
      "| instructions per 4 elements | cycles per 4 elements | stack accesses per iteration "
      "| address |")
print("|---|---|---|---|---|---|---|---|")
def lrn_elements(body):
    """LRN: two reciprocal square roots per element in the NEON loop, else one division."""
    rsqrt = sum(mr.lanes(operands(x)[0]) for x in body if x[1] == "frsqrte")
    return rsqrt // 2 if rsqrt else divided_elements(body)


rows = []
for op in ("sigmoid", "tanh"):
    neon = [s for s in syms if s[2] == f"edgebench_kernels::elementwise::neon::{op}"]
    entry = [s for s in syms if s[2] == f"edgebench_kernels::elementwise::{op}"]
    rows.append((f"neon::{op}", best_loop(neon, divides=True), divided_elements))
    if entry:
        funcs = [s for s in reached(entry[0]) if "::neon::" not in s[2]]
        rows.append((f"unary over Elem::{op}::<true>", best_loop(funcs, divides=True),
                     divided_elements))
# LRN's forward for beta = 3/4 in f32: the NEON loop, and the compiler's vectorisation of
# Lrn::normalize (two fsqrt and one fdiv per vector) where BIN holds it.
neon = [s for s in syms if s[2] == "edgebench_kernels::lrn::neon::normalize_three_quarters"]
rows.append(("lrn::neon::normalize_three_quarters", best_loop(neon, False, roots=True),
             lrn_elements))
funcs = {f[0]: f for s in syms if s[2] == "edgebench_kernels::lrn::Lrn::fwd_into"
         for f in reached(s) if "::neon::" not in f[2]}
rows.append(("Lrn::normalize (beta = 3/4, f32)",
             best_loop(funcs.values(), divides=True, roots=True), lrn_elements))
for name, body, elements in rows:
    if not body:
        print(f"| {name} | not in this binary | | | | | | |")
        continue
    # Branches are dropped (llvm-mca runs the body back to back).
    insns = [x for x in body if x[3] is None and not mr.BRANCH.match(x[1])]
    elems = elements(body)
    cycles = mca_cycles(body)
    # Loads and stores addressed from sp: spilled registers.
    spills = sum(1 for x in insns if re.search(r"\[sp\b", x[2]))
    print(f"| {name} | {len(insns)} | {elems} | {cycles:.1f} | {len(insns) * 4 / elems:.1f} "
          f"| {cycles * 4 / elems:.1f} | {spills} | {body[0][0]:#x} |")
EOF
