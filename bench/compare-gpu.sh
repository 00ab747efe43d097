#!/usr/bin/env bash
# Side-by-side training speed on an NVIDIA GPU: edgebench (`cuda` feature) vs PyTorch, one run.
#
#   bench/compare-gpu.sh [NETS] [BATCHES] [STEPS]
#     NETS     comma separated: alexnet,googlenet (default both)
#     BATCHES  comma separated (default 32)
#     STEPS    steps per side (default 11); the first is warm-up, the median of the rest counts
#
# Needs python3 with torch (CUDA build) and an edgebench built with `--features cudnn` (or
# `cuda`): $EB, or `cargo build --release --features cudnn` here (nvcc on PATH, CUDA_COMPUTE_CAP
# set where there is no nvidia-smi). Each side runs twice: strict fp32 (the like-for-like
# columns) and with TF32 convolutions and matrix products (PyTorch's default for convolutions;
# edgebench's `--tf32`). Peak GPU memory: the most bytes allocated at once, PyTorch's
# max_memory_allocated and edgebench's pool high-water mark, in the fp32 runs.
set -euo pipefail
cd "$(dirname "$0")/.."
NETS=${1:-alexnet,googlenet}
BATCHES=${2:-32}
STEPS=${3:-11}
PY=${PYTHON:-python3}
if [[ -z "${EB:-}" ]]; then
    cargo build --release -q --features cuda
    EB=${CARGO_TARGET_DIR:-target}/release/edgebench
fi

field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; }

echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo unknown);" \
    "PyTorch $("$PY" -c 'import torch; print(torch.__version__)')"
printf '| net | batch | edgebench fp32 ms/img | PyTorch fp32 ms/img | ratio | edgebench TF32 ms/img | PyTorch TF32 ms/img | ratio | edgebench peak GPU MiB | PyTorch peak GPU MiB |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for net in ${NETS//,/ }; do
    for batch in ${BATCHES//,/ }; do
        ours=$("$EB" --quiet profile --device cuda --net "$net" --batch "$batch" --steps $((STEPS - 1)) --quick | grep '^RESULT')
        ours_tf32=$("$EB" --quiet profile --device cuda --net "$net" --batch "$batch" --steps $((STEPS - 1)) --quick --tf32 | grep '^RESULT')
        fp32=$("$PY" bench/torch_train.py "$net" "$batch" "$STEPS" --cuda | grep '^RESULT')
        tf32=$("$PY" bench/torch_train.py "$net" "$batch" "$STEPS" --cuda --tf32 | grep '^RESULT')
        "$PY" - "$net" "$batch" "$(field median_s_per_image "$ours")" \
            "$(field median_s_per_image "$fp32")" "$(field median_s_per_image "$ours_tf32")" \
            "$(field median_s_per_image "$tf32")" "$(field peak_gpu_bytes "$ours")" \
            "$(field peak_gpu_mib "$fp32")" <<'PY'
import sys
net, batch, eb, fp32, eb_tf32, tf32, eb_bytes, mib = sys.argv[1:]
eb, fp32, eb_tf32, tf32 = map(float, (eb, fp32, eb_tf32, tf32))
print(f"| {net} | {batch} | {eb*1e3:.2f} | {fp32*1e3:.2f} | {eb/fp32:.2f} | {eb_tf32*1e3:.2f} "
      f"| {tf32*1e3:.2f} | {eb_tf32/tf32:.2f} | {int(eb_bytes) / 2**20:.0f} | {mib} |")
PY
    done
done
