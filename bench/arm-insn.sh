#!/usr/bin/env bash
# Counts the aarch64 instructions of one training step under qemu-user, without an ARM board.
#
#   bench/arm-insn.sh [NETS] [BATCHES] [CPUS]      defaults: alexnet,googlenet 1,8 cortex-a57,cortex-a76
#
# Builds edgebench for aarch64 (release, cross/build-aarch64.sh) and the qemu plugin
# bench/arm/insn-count.c against the qemu-plugin.h of the installed qemu's own source (Debian's
# source package of that exact version, fetched with `apt-get source`; or QEMU_PLUGIN_H=path to
# the header of the same qemu release). For every CPU model, net and batch it runs
# `edgebench profile --quick --threads 1 --steps 1` (a warm-up step, then the timed one) under
# `qemu-aarch64 -cpu CPU -plugin` and prints, as Markdown, the step's instructions (the
# difference of two snapshots of one run, taken as the timed step starts and ends) and where
# they go (bench/arm/insn-report.py).
# Output and the per-block counts: $ARM_INSN_OUT (default target/arm-insn).
# Counts are guest instructions retired by qemu's translator: no time, no caches, no pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."
nets=${1:-alexnet,googlenet}
batches=${2:-1,8}
cpus=${3:-cortex-a57,cortex-a76}
out=${ARM_INSN_OUT:-target/arm-insn}
mkdir -p "$out"
out=$(cd "$out" && pwd)

qemu=$(command -v qemu-aarch64 || true)
[ -n "$qemu" ] || { echo "qemu-aarch64 missing: apt-get install qemu-user" >&2; exit 1; }

# ARM_INSN_BIN: count that aarch64 binary (one built with line tables) instead of building.
built=${ARM_INSN_BIN:-$(PROFILE=release cross/build-aarch64.sh | tail -n 1)}
[ -x "$built" ] || { echo "no aarch64 binary to count ($built)" >&2; exit 1; }
# The runs and the attribution read this copy: a rebuild meanwhile (the build script embeds the
# git commit) would move the code the counts refer to. bench/arm-mca.sh reads it too.
bin=$out/edgebench
cp "$built" "$bin"

plugin=$(bench/arm/build-plugin.sh "$out")

# qemu-user loads the position-independent binary at the same base every run; its start_code.
"$qemu" -L /usr/aarch64-linux-gnu -d page -D "$out/page.log" "$bin" --version >/dev/null
base=$(awk '/^start_code/ {print $2}' "$out/page.log")
[ -n "$base" ] || { echo "qemu -d page did not report start_code" >&2; exit 1; }

gflop_of() { case $1 in alexnet) echo 4.3 ;; googlenet) echo 9.5 ;; *) echo 0 ;; esac; }
echo "edgebench $("$qemu" -L /usr/aarch64-linux-gnu "$bin" --version); $("$qemu" --version | head -n 1)"
echo "host: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(date -u +%Y-%m-%d)"
runs=()
for cpu in ${cpus//,/ }; do
    for net in ${nets//,/ }; do
        for batch in ${batches//,/ }; do
            # One run: profile calls getrusage (aarch64 system call 165) as each step starts
            # and as a timed step ends, and the plugin snapshots its counts at each call; the
            # timed step is the third snapshot minus the second (the first starts the warm-up).
            f=$out/$cpu-$net-b$batch.tb
            rm -f "$f" "$f".mark*
            start=$SECONDS
            RAYON_NUM_THREADS=1 "$qemu" -cpu "$cpu" -L /usr/aarch64-linux-gnu \
                -plugin "$plugin,out=$f,mark=165" "$bin" profile --net "$net" --batch "$batch" \
                --steps 1 --threads 1 --quick > "$f.stdout"
            [ -f "$f.mark3" ] || { echo "$f: fewer than 3 step marks (see $f.stdout)" >&2; exit 1; }
            echo "$cpu $net batch $batch: $(head -n 1 "$f.mark2") / $(head -n 1 "$f.mark3") instructions at the timed step's start / end, $((SECONDS - start)) s" >&2
            files=("$f.mark2" "$f.mark3")
            runs+=("$cpu $net b$batch=${files[0]},${files[1]},$batch,$(gflop_of "$net")")
        done
    done
done
python3 bench/arm/insn-report.py "$bin" "$base" "$out" "${runs[@]}" | tee "$out/report.md"
