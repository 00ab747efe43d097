#!/usr/bin/env python3
"""llvm-mca's cycles per iteration for the hot loops of the aarch64 binary (bench/arm-mca.sh).

usage: mca-report.py BIN HOT_BLOCKS_TSV [LABEL=FILE:LINE ...]

Loops: the blocks in HOT_BLOCKS_TSV (bench/arm-insn.sh: the block that ran the most
instructions of each code category in a training step) and, for each LABEL=FILE:LINE, the
innermost loop with the most floating-point instructions among those holding code of that
source line (the binary's line table; inlined code keeps its own file and line), e.g. a line
of a function that is only ever inlined into generic rayon loops. A block that ends in a branch back to an earlier address of the
same function is widened to the whole loop (branch target to branch); branches are dropped
from the text llvm-mca reads, so the figure is for the loop body run back to back.
"""
import re
import subprocess
import sys

OBJDUMP = "aarch64-linux-gnu-objdump"
# Per lane: fused multiply-add type 2, other arithmetic 1 (as bench/arm/insn-count.c counts).
FUSED = {"fmla", "fmls", "fmadd", "fmsub", "fnmadd", "fnmsub"}
SINGLE = {"fadd", "fsub", "fmul", "fmulx", "fnmul", "fdiv", "fsqrt", "fabd", "faddp"}
BRANCH = re.compile(r"^(b(\.\w+)?|cbn?z|tbn?z|bl|br|blr|ret)$")
# FP32 FLOP per cycle at the core's FMA peak: Cortex-A57 issues one 128-bit FMLA per cycle
# (ARM's Cortex-A57 Software Optimization Guide, UAN 0015B: ASIMD FP multiply accumulate,
# Q-form, throughput 1), the Cortex-A78 two (Cortex-A78 Software Optimization Guide: two
# ASIMD/FP pipes V0/V1, FMLA throughput 2).
PEAK = {"cortex-a57": 8, "cortex-a78": 16}


def lanes(op):
    m = re.match(r"v\d+\.(\d+)[bhsd]", op)
    if m:
        return int(m.group(1))
    return 1 if re.match(r"[hsd]\d+$", op) else 0


def flops(mnem, ops):
    if mnem in FUSED:
        return 2 * lanes(ops[0])
    if mnem in SINGLE:
        return lanes(ops[0])
    return 0


def disassemble(binary, start, stop):
    """[(address, mnemonic, operands text, branch target or None)] for [start, stop)."""
    out = subprocess.run([OBJDUMP, "-d", "--no-show-raw-insn", f"--start-address={start:#x}",
                          f"--stop-address={stop:#x}", binary],
                         capture_output=True, text=True, check=True).stdout
    insns = []
    for line in out.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
        if not m:
            continue
        addr, mnem, rest = int(m.group(1), 16), m.group(2), m.group(3)
        rest = rest.split("//")[0].strip()
        target = None
        if BRANCH.match(mnem):
            t = re.search(r"\b([0-9a-f]+) <", rest)
            target = int(t.group(1), 16) if t else None
        insns.append((addr, mnem, rest, target))
    return insns


def symbols(binary):
    out = subprocess.run(["aarch64-linux-gnu-nm", "-C", "-S", "--defined-only", binary],
                         capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[2] in "tT":
            syms.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    return syms


def loop_of_block(binary, start, length, syms):
    """The loop that the block at `start` closes, else the block itself."""
    insns = disassemble(binary, start, start + 4 * length)
    last = insns[-1] if insns else None
    if last and last[3] is not None and last[3] <= start:
        func = next((s for s in syms if s[0] <= start < s[0] + s[1]), None)
        if func and last[3] >= func[0] and (start - last[3]) // 4 < 400:
            return disassemble(binary, last[3], last[0] + 4), True
    return insns, False


def line_addresses(binary, file, line):
    """Addresses whose line-table row is FILE:LINE."""
    out = subprocess.Popen([OBJDUMP, "--dwarf=decodedline", binary], stdout=subprocess.PIPE,
                           text=True)
    addrs = []
    for row in out.stdout:
        if not row.startswith(file):
            continue
        parts = row.split()
        if len(parts) >= 3 and parts[0] == file and parts[1] == str(line):
            addrs.append(int(parts[2], 16))
    out.wait()
    return addrs


def innermost_fp_loop(binary, sym, marks):
    """The innermost loop (backward branch whose body holds no other) with the most FP32 FLOP
    per iteration that holds one of the addresses `marks` (the vectorised loop rather than its
    scalar remainder)."""
    insns = disassemble(binary, sym[0], sym[0] + sym[1])
    best = None
    for i, (addr, mnem, rest, target) in enumerate(insns):
        if target is None or target > addr or target < sym[0]:
            continue
        if not any(target <= m <= addr for m in marks):
            continue
        body = [x for x in insns if target <= x[0] <= addr]
        if any(x[3] is not None and x[3] <= x[0] and x[0] != addr and x[3] >= target
               for x in body):
            continue
        work = sum(flops(x[1], [o.strip() for o in x[2].split(",")]) for x in body)
        if best is None or work > best[0]:
            best = (work, body)
    return best[1] if best else []


def mca(text, cpu):
    out = subprocess.run(["llvm-mca", "-mtriple=aarch64", f"-mcpu={cpu}", "-iterations=200"],
                         input=text, capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1]
    m = re.search(r"Total Cycles:\s+(\d+)", out.stdout)
    return int(m.group(1)) / 200, None


def report(name, insns, widened):
    body = [x for x in insns if x[3] is None and not BRANCH.match(x[1])]
    # objdump's operands that llvm-mca cannot assemble (symbolic addresses) are dropped.
    body = [x for x in body if "<" not in x[2]]
    text = "\n".join(f"{x[1]} {x[2]}" for x in body) + "\n"
    fl = sum(flops(x[1], [o.strip() for o in x[2].split(",")]) for x in body)
    fmla_q = sum(1 for x in body if x[1] in ("fmla", "fmls") and ".4s" in x[2].split(",")[0])
    a57, err = mca(text, "cortex-a57")
    a76, _ = mca(text, "cortex-a76")
    if a57 is None:
        print(f"| {name} | {len(body)} | – | – | – | – | – | llvm-mca: {err} |")
        return
    a78_fma_bound = fmla_q / 2
    print(f"| {name} | {len(body)} | {fl} | {a57:.2f} | {a76:.2f} | {fl / a57 / PEAK['cortex-a57'] * 100:.0f} % "
          f"| {fmla_q} ({a78_fma_bound:.1f} cycles at 2/cycle) "
          f"| {insns[0][0]:#x}{', whole loop' if widened else ''} |")


def main():
    binary, hot = sys.argv[1], sys.argv[2]
    syms = symbols(binary)
    print("| loop | instructions | FP32 FLOP per iteration | cycles/iteration, llvm-mca -mcpu=cortex-a57 "
          "| -mcpu=cortex-a76 | % of A57 FMA peak (8 FLOP/cycle) | 128-bit FMLA per iteration "
          "(A78 FMA bound) | address |")
    print("|---|---|---|---|---|---|---|---|")
    # One row per block: its largest share of a step over the runs that list it.
    blocks = {}
    with open(hot) as f:
        for line in f:
            cat, off, length, n, share, run = line.rstrip("\n").split("\t")
            if float(share) >= 0.1 and float(share) > blocks.get(off, ("", 0, 0.0))[2]:
                blocks[off] = (cat, int(length), float(share), run)
    for off, (cat, length, share, run) in sorted(blocks.items(), key=lambda kv: -kv[1][2]):
        insns, widened = loop_of_block(binary, int(off, 16), length, syms)
        if insns:
            report(f"{cat} (hottest block: {share} % of the step in {run})", insns, widened)
    for arg in sys.argv[3:]:
        label, where = arg.split("=", 1)
        file, line = where.rsplit(":", 1)
        marks = line_addresses(binary, file, int(line))
        funcs = {s for s in syms for m in marks if s[0] <= m < s[0] + s[1]}
        best = None
        for sym in funcs:
            body = innermost_fp_loop(binary, sym, [m for m in marks if sym[0] <= m < sym[0] + sym[1]])
            work = sum(flops(x[1], [o.strip() for o in x[2].split(",")]) for x in body)
            if body and (best is None or work > best[0]):
                best = (work, body)
        if best is None:
            print(f"| {label} | no loop holds {file}:{line} | | | | | | |")
            continue
        report(f"{label} (innermost loop with code of {file}:{line})", best[1], True)


if __name__ == "__main__":
    main()
