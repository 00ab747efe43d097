#!/usr/bin/env bash
# Side-by-side time per iteration of the MLP workload: edgebench (candle, `benches/mlp.rs`) vs
# PyTorch running the study's own three algorithms (`bench/torch_mlp.py`), CPU, this machine.
#
#   bench/compare-mlp.sh [SIZES] [STYLES] [ROUNDS]
#     SIZES   comma separated: small,medium,large (default all)
#     STYLES  comma separated: tensors,autograd,function (default all)
#     ROUNDS  runs of each side, alternating edgebench and PyTorch (default 1); with more than
#             one every column is the median over the rounds
#
# Installs torch into bench/.venv-torch (or $EDGEBENCH_TORCH_VENV) if it is missing. edgebench's
# column is criterion's median time per iteration; PyTorch's is the median over its iterations
# after the first (20 for small, 10 for medium, 6 for large). Both use all cores. Timings on a
# shared machine are noisy: run more rounds there. PROFILE=dev measures the dev profile's build
# (dependencies at opt-level 3, as tests run them) when a release build is not at hand.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${1:-small,medium,large}
STYLES=${2:-tensors,autograd,function}
ROUNDS=${3:-1}
VENV=${EDGEBENCH_TORCH_VENV:-bench/.venv-torch}
PROFILE=${PROFILE:-bench}

if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
    echo "installing torch into $VENV ..." >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch
fi
cargo bench -q --profile "$PROFILE" --bench mlp --no-run
TARGET=${CARGO_TARGET_DIR:-target}

field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

printf '%-8s %-9s %14s %14s %8s\n' size style edgebench_ms pytorch_ms ratio
for size in ${SIZES//,/ }; do
    case $size in small) iters=21 ;; medium) iters=11 ;; *) iters=7 ;; esac
    for style in ${STYLES//,/ }; do
        eb=(); pt=()
        for _ in $(seq "$ROUNDS"); do
            cargo bench -q --profile "$PROFILE" --bench mlp -- --noplot "^mlp/$size/$style\$" >/dev/null
            est="$TARGET/criterion/mlp_$size/$style/new/estimates.json"
            eb+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"] / 1e6)' "$est")")
            line=$("$VENV/bin/python" bench/torch_mlp.py "$style" "$size" "$iters" cpu | tail -1)
            pt+=("$(python3 -c 'import sys; print(float(sys.argv[1]) * 1e3)' "$(field median_s_per_iteration "$line")")")
        done
        e=$(printf '%s\n' "${eb[@]}" | median)
        p=$(printf '%s\n' "${pt[@]}" | median)
        printf '%-8s %-9s %14.1f %14.1f %7.2fx\n' "$size" "$style" "$e" "$p" \
            "$(python3 -c "print($e / $p)")"
    done
done
