#!/usr/bin/env bash
# Inference on this machine's CPU: edgebench's `infer` workload (its own AlexNet/GoogLeNet
# forward, and tract-onnx on the exported ONNX files) against ONNX Runtime (the onnxruntime
# wheel, CPU execution provider, the same ONNX files) and PyTorch eval mode
# (torch.inference_mode), alternating engine by engine in one invocation, same thread count.
#
#   bench/compare-infer.sh [NETS] [QUERIES] [THREADS]
#     NETS     comma separated: alexnet,googlenet (default both)
#     QUERIES  measured queries per run (default 50); offline runs QUERIES / 4 batches of 32
#     THREADS  threads of every engine (default: the number of cores)
#
# Prints, per net and scenario (single-stream p50 latency at batch 1, offline samples/s at
# batch 32), each engine's figure and the ratios edgebench/ONNX Runtime and edgebench/PyTorch
# (latency: lower is better, so a ratio < 1 is edgebench ahead; throughput is given as the
# inverse ratio, time per sample, so the same reading holds). Installs onnxruntime and torch
# into bench/.venv-infer (or $EDGEBENCH_INFER_VENV) if missing; TORCH=0 leaves PyTorch out (its
# column shows nan), PYTHON=python3 uses that interpreter as it is. PROFILE=dev measures the
# dev build (dependencies at opt-level 3, edgebench at 2) when a release build is not at hand.
set -euo pipefail
cd "$(dirname "$0")/.."
NETS=${1:-alexnet,googlenet}
QUERIES=${2:-50}
THREADS=${3:-$(nproc)}
VENV=${EDGEBENCH_INFER_VENV:-bench/.venv-infer}
PROFILE=${PROFILE:-release}

TORCH=${TORCH:-1}
PY=${PYTHON:-$VENV/bin/python}
want=(onnxruntime numpy)
[ "$TORCH" = 1 ] && want+=(torch)
if [ -z "${PYTHON:-}" ] && ! "$PY" -c "import $(IFS=,; echo "${want[*]}")" 2>/dev/null; then
    echo "installing ${want[*]} into $VENV ..." >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "${want[@]}"
fi
cargo build -q --profile "$PROFILE" --bin edgebench
BIN=${CARGO_TARGET_DIR:-target}/$PROFILE/edgebench
[ "$PROFILE" = dev ] && BIN=${CARGO_TARGET_DIR:-target}/debug/edgebench
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$BIN" models --export-onnx "$WORK/models" >/dev/null

# edgebench: one trial, its figure from `results --json`.
edgebench() { # MODEL SCENARIO BATCH QUERIES
    local db="$WORK/run-$RANDOM.db" key
    RAYON_NUM_THREADS=$THREADS "$BIN" -q run --workload infer --model "$1" --scenario "$2" \
        --batch "$3" --min-queries "$4" --min-duration 1ms --warmup 10 --threads "$THREADS" \
        --db "$db" >/dev/null
    key=$([ "$2" = offline ] && echo samples_per_s || echo latency_p50_s)
    "$BIN" results --json --db "$db" | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['$key'])"
}
peer() { # ENGINE MODEL SCENARIO BATCH QUERIES
    local line key
    if [ "$1" = torch ] && [ "$TORCH" != 1 ]; then echo nan; return; fi
    line=$("$PY" bench/infer_peer.py "$1" "$2" "$3" "$4" "$5" "$THREADS" | tail -1)
    key=$([ "$3" = offline ] && echo samples_per_s || echo p50_s)
    sed -n "s/.*[ ]$key=\([^ ]*\).*/\1/p" <<<"$line"
}

printf '%-10s %-14s %12s %12s %12s %12s %9s %9s %9s\n' net scenario own tract onnxruntime \
    pytorch own/ort own/torch tract/ort
for net in ${NETS//,/ }; do
    for scenario in single-stream offline; do
        if [ "$scenario" = offline ]; then batch=32; q=$(( (QUERIES + 3) / 4 )); unit=samples/s
        else batch=1; q=$QUERIES; unit=p50_s; fi
        own=$(edgebench "$net" "$scenario" "$batch" "$(( q * batch ))")
        ort=$(peer onnxruntime "$WORK/models/$net.onnx" "$scenario" "$batch" "$q")
        torch=$(peer torch "$net" "$scenario" "$batch" "$q")
        tract=$(edgebench "$WORK/models/$net.onnx" "$scenario" "$batch" "$(( q * batch ))")
        python3 - "$net" "$scenario" "$unit" "$own" "$tract" "$ort" "$torch" <<'PY'
import sys
net, scenario, unit, own, tract, ort, torch = sys.argv[1:4] + [float(v) for v in sys.argv[4:]]
# Time per sample either way: a ratio below 1 means the first engine is faster.
t = (lambda v: 1 / v) if unit == "samples/s" else (lambda v: v)
print(f"{net:<10} {scenario:<14} {own:12.5g} {tract:12.5g} {ort:12.5g} {torch:12.5g} "
      f"{t(own) / t(ort):8.2f}x {t(own) / t(torch):8.2f}x {t(tract) / t(ort):8.2f}x")
PY
    done
done
echo "(single-stream: p50 seconds at batch 1; offline: samples/s at batch 32; $THREADS threads)"
