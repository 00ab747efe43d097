#!/usr/bin/env bash
# Static cycle estimates (llvm-mca) for the hot loops of edgebench's aarch64 build.
#
#   bench/arm-mca.sh [HOT_BLOCKS_TSV]     default: target/arm-insn/hot-blocks.tsv
#
# The loops: the block that ran the most instructions of each code category (0.1 % of the step
# or more) in an emulated training step (HOT_BLOCKS_TSV, written by bench/arm-insn.sh, one set
# per run), widened to the loop it closes, and the innermost floating-point loops of the vectorised
# elementwise functions (exp, sigmoid, tanh), which a training step does not run. Each is
# disassembled from that run's release binary (aarch64-linux-gnu-objdump) and fed to llvm-mca with
# -mcpu=cortex-a57 and -mcpu=cortex-a76. llvm-mca is a static model of one core's pipeline:
# no caches, no memory, no branch misses; loop bodies run back to back with their branches
# dropped.
set -euo pipefail
cd "$(dirname "$0")/.."
hot=${1:-target/arm-insn/hot-blocks.tsv}
command -v llvm-mca >/dev/null || { echo "llvm-mca missing: apt-get install llvm" >&2; exit 1; }
command -v aarch64-linux-gnu-objdump >/dev/null || { echo "aarch64-linux-gnu-objdump missing: apt-get install binutils-aarch64-linux-gnu" >&2; exit 1; }
[ -f "$hot" ] || { echo "$hot missing: run bench/arm-insn.sh first (its first run picks the hot blocks)" >&2; exit 1; }
# The binary the hot blocks were counted in (bench/arm-insn.sh keeps a copy beside them).
bin=$(dirname "$hot")/edgebench
[ -x "$bin" ] || { echo "$bin missing: run bench/arm-insn.sh first" >&2; exit 1; }
echo "$(llvm-mca --version | grep -m1 -i 'llvm version' | sed 's/^ *//'); $(date -u +%Y-%m-%d)"
# sigmoid and tanh in f32 (each holds exp_f32, inlined): the lines of Elem for f32 that call it.
src=crates/edgebench-kernels/src/elementwise.rs
sig=$(grep -n 'fn sigmoid<const FMA: bool>(self) -> Self {' "$src" | head -n 1 | cut -d: -f1)
tanh=$(grep -n 'fn tanh<const FMA: bool>(self) -> Self {' "$src" | head -n 1 | cut -d: -f1)
python3 bench/arm/mca-report.py "$bin" "$hot" "sigmoid f32 (exp inlined)=elementwise.rs:$((sig + 1))" \
    "tanh f32 (exp inlined)=elementwise.rs:$((tanh + 3))"
