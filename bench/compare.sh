#!/usr/bin/env bash
# Side-by-side training speed: edgebench vs TensorFlow (CPU) and PyTorch (CPU) on this machine,
# in one run.
#
#   bench/compare.sh [NETS] [BATCHES] [STEPS] [ROUNDS]
#     NETS     comma separated: alexnet,googlenet (default both)
#     BATCHES  comma separated (default 32)
#     STEPS    steps per side (default 6); the first is warm-up (graph tracing in TF), the median
#              of the others is reported
#     ROUNDS   runs of each side, alternating edgebench, TF and PyTorch (default 1); with more
#              than one every column is the median over the rounds, and the ratio is the median
#              of the rounds' own ratios with their range, so a slow spell of the machine that
#              hits one side of one round does not decide the comparison; each round's times and
#              ratio also go to stderr
#
# Installs tensorflow-cpu into bench/.venv (or $EDGEBENCH_TF_VENV) and torch into
# bench/.venv-torch (or $EDGEBENCH_TORCH_VENV) if they are missing, builds edgebench (release),
# measures the SGEMM peak with the faster of the GEMMs edgebench trains with (`edgebench
# bench-sgemm`: the gemm crate, or edgebench's own kernel, named in the header), and prints one
# table. The ratio is edgebench's time against the faster peer of each round. The SGEMM floor is
# the training FLOPs per image (AlexNet ~4.3 G, GoogLeNet ~9.5 G) at that peak; "% floor" =
# floor / measured. The product floor is the GFLOP of the matrix products edgebench's step ran
# per image (`product_gflop_per_image`: the Winograd layers' as multiplied) at that peak, so
# "% of product floor" is the share of the step that its products would take at the peak; the
# rest is the time spent around them. All sides use all cores. Timings on a shared machine are
# noisy: the CPU ms/img columns (process CPU time over all threads) are steadier than wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
NETS=${1:-alexnet,googlenet}
BATCHES=${2:-32}
STEPS=${3:-6}
ROUNDS=${4:-1}
VENV=${EDGEBENCH_TF_VENV:-bench/.venv}
TORCH_VENV=${EDGEBENCH_TORCH_VENV:-bench/.venv-torch}

if ! "$VENV/bin/python" -c 'import tensorflow' 2>/dev/null; then
    echo "installing tensorflow-cpu into $VENV ..." >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q tensorflow-cpu
fi
if ! "$TORCH_VENV/bin/python" -c 'import torch' 2>/dev/null; then
    echo "installing torch into $TORCH_VENV ..." >&2
    python3 -m venv "$TORCH_VENV"
    "$TORCH_VENV/bin/pip" install -q torch
fi
cargo build --release -q
EB=${CARGO_TARGET_DIR:-target}/release/edgebench

field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; }

sgemm=$("$EB" bench-sgemm)
peak=$(field sgemm_gflops "$sgemm")
tfver=$("$VENV/bin/python" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)
torchver=$("$TORCH_VENV/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
    "SGEMM peak $peak GFLOP/s (edgebench's kernel: $(field kernel "$sgemm"), $(field threads "$sgemm") threads);" \
    "TensorFlow $tfver, PyTorch $torchver"
printf '| net | batch | edgebench ms/img | TF ms/img | PyTorch ms/img | ratio eb/best peer | SGEMM floor ms/img | eb %% of floor | eb CPU ms/img | TF CPU ms/img | eb peak RSS MiB | TF peak RSS MiB | eb product GFLOP/img | eb %% of product floor |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for net in ${NETS//,/ }; do
    case $net in
        alexnet) gflop=4.3 ;;
        googlenet) gflop=9.5 ;;
        *) echo "unknown net $net" >&2; exit 2 ;;
    esac
    for batch in ${BATCHES//,/ }; do
        rounds=""
        for _ in $(seq "$ROUNDS"); do
            ours=$("$EB" --quiet profile --net "$net" --batch "$batch" --steps $((STEPS - 1)) --quick | grep '^RESULT')
            tf=$("$VENV/bin/python" bench/tf_train.py "$net" "$batch" "$STEPS" | grep '^RESULT')
            torch=$("$TORCH_VENV/bin/python" bench/torch_train.py "$net" "$batch" "$STEPS" | grep '^RESULT')
            rounds+="$(field median_s_per_image "$ours") $(field median_s_per_image "$tf") "
            rounds+="$(field median_s_per_image "$torch") "
            rounds+="$(field cpu_s_per_image "$ours") $(field cpu_s_per_image "$tf") "
            rounds+="$(field peak_rss_kb "$ours") $(field peak_rss_kb "$tf") "
            rounds+="$(field product_gflop_per_image "$ours")"$'\n'
        done
        python3 - "$net" "$batch" "$gflop" "$peak" "$rounds" <<'PY'
import statistics, sys
net, batch, gflop, peak, rounds = sys.argv[1:]
gflop, peak = float(gflop), float(peak)
rows = [list(map(float, line.split())) for line in rounds.splitlines() if line.strip()]
eb, tf, pt, ebc, tfc, ebr, tfr, prod = (statistics.median(col) for col in zip(*rows))
ratios = [r[0] / min(r[1], r[2]) for r in rows]
# Each round on stderr, the ratio to three places: the table rounds it to two.
for i, (r, q) in enumerate(zip(rows, ratios), 1):
    print(f"{net} batch {batch} round {i}: edgebench {r[0]*1e3:.1f}, TF {r[1]*1e3:.1f}, "
          f"PyTorch {r[2]*1e3:.1f} ms/img, ratio {q:.3f}", file=sys.stderr)
ratio = f"{statistics.median(ratios):.2f}"
if len(rows) > 1:
    ratio += f" ({min(ratios):.2f}-{max(ratios):.2f}, {len(rows)} rounds)"
floor = gflop / peak * 1e3
print(f"| {net} | {batch} | {eb*1e3:.1f} | {tf*1e3:.1f} | {pt*1e3:.1f} | {ratio} | {floor:.1f} | "
      f"{100*floor/(eb*1e3):.0f} % | {ebc*1e3:.1f} | {tfc*1e3:.1f} | "
      f"{int(ebr)/1024:.0f} | {int(tfr)/1024:.0f} | {prod:.2f} | "
      f"{100*prod/peak/eb:.0f} % |")
PY
    done
done
