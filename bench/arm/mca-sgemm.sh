#!/usr/bin/env bash
# Static cycle estimate (llvm-mca) of the aarch64 SGEMM microkernel's loops (sgemm/neon.rs:
# 8 x 12 NEON, eight k steps per iteration, with A packed and with A read in place; the edge
# tiles' 8 x 8 and 8 x 4 variants with A packed, two k steps per iteration; the one-column
# kernel, eight), read out of a built aarch64 binary that holds them (the kernels crate's test
# binary, or edgebench itself). Prints a Markdown table.
#
#   bench/arm/mca-sgemm.sh BINARY
#
# A loop: in a function of the sgemm module, the first one whose body holds 192 (32, 16)
# `fmla v.4s, v.4s, v.s[i]`, from the target of its backward branch to that branch (the 8 x 12
# loop that prefetches reads A packed); the one-column kernel is the function so named, with
# 16 such fmla among its 34 instructions, hence the slack of 20 over two per fmla. llvm-mca is
# a static model of one core's pipeline: no caches, no memory, no branch misses. LLVM 14 has
# no Cortex-A76 model of its own: -mcpu=cortex-a76 takes the Cortex-A57's scheduling model, so
# that row repeats the A57's.
set -euo pipefail
bin=${1:?usage: $0 AARCH64_BINARY}
command -v llvm-mca >/dev/null || { echo "llvm-mca missing: apt-get install llvm" >&2; exit 1; }
command -v aarch64-linux-gnu-objdump >/dev/null || { echo "aarch64-linux-gnu-objdump missing: apt-get install binutils-aarch64-linux-gnu" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
aarch64-linux-gnu-objdump -d --no-show-raw-insn "$bin" > "$tmp/dis.txt"
python3 - "$tmp/dis.txt" "$tmp" <<'PY'
import re, sys
insns = []  # (address, text, function)
function = ""
for line in open(sys.argv[1]):
    f = re.match(r"[0-9a-f]+ <(.*)>:$", line)
    if f:
        function = f.group(1)
        continue
    m = re.match(r"\s*([0-9a-f]+):\s+(\S.*)$", line)
    if m:
        insns.append((int(m.group(1), 16), m.group(2).split("//")[0].strip(), function))
index = {addr: i for i, (addr, _, _) in enumerate(insns)}
wanted = {192: "8x12", 32: "8x8", 16: "8x4"}
found = set()
for i, (addr, text, function) in enumerate(insns):
    m = re.match(r"b\.ne\s+([0-9a-f]+)\b", text)
    if not m or "sgemm" not in function or int(m.group(1), 16) >= addr:
        continue
    if int(m.group(1), 16) not in index:
        continue
    body = [t for _, t, _ in insns[index[int(m.group(1), 16)]:i]]
    by_lane = [t for t in body if re.match(r"fmla\s+v\d+\.4s, v\d+\.4s, v\d+\.s\[\d\]", t)]
    name = wanted.get(len(by_lane))
    if name == "8x12" and not any(t.startswith("prfm") for t in body):
        name = "8x12-a-in-place"
    if "edge_column" in function:
        name = "8x1" if len(by_lane) == 16 else None
    if name and name not in found and len(body) < 2 * len(by_lane) + 20:
        found.add(name)
        with open(f"{sys.argv[2]}/{name}.s", "w") as out:
            out.write(".Lloop:\n" + "".join(f"  {t}\n" for t in body) + "  b.ne .Lloop\n")
if "8x12" not in found:
    sys.exit("no loop with 192 by-lane fmla (the 8 x 12 microkernel's) in the binary")
PY
echo "llvm-mca: $(llvm-mca --version | grep -m1 -i 'llvm version' | sed 's/^ *//'); $(date -u +%Y-%m-%d); $(basename "$bin")"
echo
echo "| loop | -mcpu | instructions / iteration | FMLA (128-bit) / iteration | cycles / iteration | % of A57 FMA peak (1 FMLA / cycle) | FLOP / instruction |"
echo "|---|---|---:|---:|---:|---:|---:|"
for loop in 8x12 8x12-a-in-place 8x8 8x4 8x1; do
    [ -f "$tmp/$loop.s" ] || { echo "| $loop | (not in the binary) | | | | | |"; continue; }
    fmla=$(grep -c 'fmla' "$tmp/$loop.s")
    insns=$(grep -vc '^\.Lloop:' "$tmp/$loop.s")
    for cpu in cortex-a57 cortex-a76; do
        iters=200
        cycles=$(llvm-mca -mtriple=aarch64 -mcpu=$cpu -iterations=$iters "$tmp/$loop.s" 2>/dev/null |
            sed -n 's/^Total Cycles: *//p')
        python3 -c "
insns, fmla, cycles, iters = $insns, $fmla, $cycles, $iters
per = cycles / iters
print(f'| $loop | $cpu | {insns} | {fmla} | {per:.2f} | {100 * fmla / per:.1f} % | {fmla * 8 / insns:.2f} |')"
    done
done
