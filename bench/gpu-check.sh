#!/usr/bin/env bash
# Checks and times a CUDA build of edgebench on a machine with an NVIDIA GPU and PyTorch but no
# Rust toolchain: the binaries are built elsewhere (cross/README.md, "CUDA") and brought along.
#
#   bench/gpu-check.sh BIN_DIR [OUT_DIR]
#
# BIN_DIR holds `edgebench` (built with `--features cudnn`) and the test binaries
# `kernels-tests` (`cargo test --release --features cudnn -p edgebench-kernels --no-run`) and
# `it-tests` (`... --features cudnn --test it --no-run`), each optionally .xz
# compressed. Runs the CUDA tests, a short recorded sweep (`run --device cuda`, to see
# peak_gpu_bytes reach the database), per-stage profiles, then bench/compare-gpu.sh at batch 32
# and 1. Logs go to OUT_DIR (default ./gpu-check-out); the tables print last.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:?usage: bench/gpu-check.sh BIN_DIR [OUT_DIR]}")
OUT=$(realpath -m "${2:-gpu-check-out}")
mkdir -p "$OUT"
PY=${PYTHON:-python3}
RUN=$(mktemp -d)
for f in "$BIN"/*; do
    name=$(basename "$f" .xz)
    if [[ $f == *.xz ]]; then
        "$PY" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "$RUN/$name"
    else
        cp "$f" "$RUN/$name"
    fi
    chmod +x "$RUN/$name"
done
# The CUDA libraries of PyTorch's wheels (cuBLAS, NVRTC, cuRAND, runtime, cuDNN).
SITE=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
for d in "$SITE"/nvidia/cu*/lib "$SITE"/nvidia/cudnn/lib "$SITE"/nvidia/*/lib; do
    [[ -d $d ]] && LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
export LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
status=0
step() {
    local name=$1
    shift
    echo "== $name: $*"
    "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 4 "$OUT/$name.log"
    [[ $rc == 0 ]] || { echo "!! $name failed ($rc)"; status=1; }
}
step kernels-tests "$RUN/kernels-tests" cuda
step models-tests "$RUN/it-tests" models::cuda_
DB=$RUN/check.db
step run "$RUN/edgebench" run --device cuda --net alexnet,googlenet --batch 8 --images 24 \
    --warmup 1 --db "$DB"
"$RUN/edgebench" results --db "$DB" --json >"$OUT/results.json" 2>&1
grep -o '"\(net\|status\|peak_gpu_bytes\|time_per_image_s\)": [^,]*' "$OUT/results.json"
# The MLP study on the GPU: edgebench's mlp workload against bench/torch_mlp.py, same sizes.
MLP_DB=$RUN/mlp.db
step mlp "$RUN/edgebench" run --workload mlp --device cuda --style tensors,autograd,function \
    --size small,medium,large --iterations 100 --warmup 5 --db "$MLP_DB"
"$RUN/edgebench" results --db "$MLP_DB" --json >"$OUT/mlp.json" 2>&1
for style in tensors autograd function; do
    for size in small medium large; do
        "$PY" bench/torch_mlp.py "$style" "$size" 100 cuda 2>/dev/null | grep '^RESULT'
    done
done >"$OUT/mlp-torch.txt"
"$PY" - "$OUT/mlp.json" "$OUT/mlp-torch.txt" <<'PY' | tee "$OUT/mlp-table.txt"
import json, re, sys
ours = {(r["style"], r["size"]): r["time_per_iteration_s"] for r in json.load(open(sys.argv[1]))
        if r.get("status") == "ok"}
print("| style | size | edgebench ms/iter | PyTorch ms/iter | ratio |\n|---|---|---|---|---|")
for line in open(sys.argv[2]):
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    key, pt = (f["style"], f["size"]), float(f["median_s_per_iteration"])
    eb = ours.get(key)
    print(f"| {key[0]} | {key[1]} | {eb * 1e3:.3f} | {pt * 1e3:.3f} | {eb / pt:.2f} |" if eb
          else f"| {key[0]} | {key[1]} | - | {pt * 1e3:.3f} | - |")
PY
for net in alexnet googlenet; do
    step "profile-$net" "$RUN/edgebench" profile --device cuda --net "$net" --batch 32 --steps 5
done
grep -h -A40 'stage' "$OUT"/profile-*.log | head -80
EB="$RUN/edgebench" bench/compare-gpu.sh alexnet,googlenet 32 21 2>&1 | tee "$OUT/compare-32.txt"
EB="$RUN/edgebench" bench/compare-gpu.sh alexnet,googlenet 1 21 2>&1 | tee "$OUT/compare-1.txt"
rm -rf "$RUN"
exit $status
