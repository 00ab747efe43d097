#!/usr/bin/env bash
# Static cycle estimate (llvm-mca) of the aarch64 SGEMM microkernel's loop (src/sgemm.rs,
# 8 x 12 NEON, four k steps per iteration), read out of a built aarch64 binary that holds it
# (the kernels crate's test binary, or edgebench itself). Prints a Markdown table.
#
#   bench/arm/mca-sgemm.sh BINARY
#
# The loop: the one whose body holds the 96 `fmla v.4s, v.4s, v.s[i]` of four steps, from the
# target of its backward branch to that branch. llvm-mca is a static model of one core's
# pipeline: no caches, no memory, no branch misses. LLVM 14 has no Cortex-A76 model of its own:
# -mcpu=cortex-a76 takes the Cortex-A57's scheduling model, so that row repeats the A57's.
set -euo pipefail
bin=${1:?usage: $0 AARCH64_BINARY}
command -v llvm-mca >/dev/null || { echo "llvm-mca missing: apt-get install llvm" >&2; exit 1; }
command -v aarch64-linux-gnu-objdump >/dev/null || { echo "aarch64-linux-gnu-objdump missing: apt-get install binutils-aarch64-linux-gnu" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
aarch64-linux-gnu-objdump -d --no-show-raw-insn "$bin" > "$tmp/dis.txt"
python3 - "$tmp/dis.txt" "$tmp/loop.s" <<'PY'
import re, sys
insns = []  # (address, text)
for line in open(sys.argv[1]):
    m = re.match(r"\s*([0-9a-f]+):\s+(\S.*)$", line)
    if m:
        insns.append((int(m.group(1), 16), m.group(2).split("//")[0].strip()))
index = {addr: i for i, (addr, _) in enumerate(insns)}
for i, (addr, text) in enumerate(insns):
    m = re.match(r"b\.ne\s+([0-9a-f]+)\b", text)
    if not m or int(m.group(1), 16) >= addr or int(m.group(1), 16) not in index:
        continue
    body = [t for _, t in insns[index[int(m.group(1), 16)]:i]]
    by_lane = [t for t in body if re.match(r"fmla\s+v\d+\.4s, v\d+\.4s, v\d+\.s\[\d\]", t)]
    if len(by_lane) == 96 and len(body) < 160:
        with open(sys.argv[2], "w") as out:
            out.write(".Lloop:\n" + "".join(f"  {t}\n" for t in body) + "  b.ne .Lloop\n")
        sys.exit(0)
sys.exit("no loop with 96 by-lane fmla (the 8 x 12 microkernel's) in the binary")
PY
fmla=$(grep -c 'fmla' "$tmp/loop.s")
insns=$(grep -vc '^\.Lloop:' "$tmp/loop.s")
echo "llvm-mca: $(llvm-mca --version | grep -m1 -i 'llvm version' | sed 's/^ *//'); $(date -u +%Y-%m-%d); $(basename "$bin")"
echo
echo "| -mcpu | instructions / iteration | FMLA (128-bit) / iteration | cycles / iteration | % of A57 FMA peak (1 FMLA / cycle) | FLOP / instruction |"
echo "|---|---:|---:|---:|---:|---:|"
for cpu in cortex-a57 cortex-a76; do
    iters=200
    cycles=$(llvm-mca -mtriple=aarch64 -mcpu=$cpu -iterations=$iters "$tmp/loop.s" 2>/dev/null |
        sed -n 's/^Total Cycles: *//p')
    python3 -c "
insns, fmla, cycles, iters = $insns, $fmla, $cycles, $iters
per = cycles / iters
print(f'| $cpu | {insns} | {fmla} | {per:.2f} | {100 * fmla / per:.1f} % | {fmla * 8 / insns:.2f} |')"
done
