#!/usr/bin/env bash
# Counts the aarch64 instructions of one PyTorch training step (bench/torch_train.py, the same
# step as `edgebench profile`) under qemu-user, the way bench/arm-insn.sh counts edgebench's.
#
#   bench/arm-torch-insn.sh [NETS] [BATCHES] [CPUS]   defaults: alexnet 1 cortex-a57
#
# The guest: PyTorch 2.6.0's CPU wheel for aarch64 and numpy (pip download --platform), and
# Debian's arm64 python3.11 with the libraries it loads (apt-get download with a private
# arm64 list, unpacked with dpkg -x), under $ARM_TORCH_ROOT (default target/arm-torch); qemu
# reads it as the guest's / (-L). One thread (OMP_NUM_THREADS=1). One run of 2 steps per case:
# torch_train.py prints to stdout only after each step, and the plugin snapshots its counts at
# each write to fd 1 (mark=64:1); the second step is the end of the second minus the end of
# the first (the first step is the warm-up).
set -euo pipefail
cd "$(dirname "$0")/.."
nets=${1:-alexnet}
batches=${2:-1}
cpus=${3:-cortex-a57}
dir=$(mkdir -p "${ARM_TORCH_ROOT:-target/arm-torch}" && cd "${ARM_TORCH_ROOT:-target/arm-torch}" && pwd)
qemu=$(command -v qemu-aarch64 || true)
[ -n "$qemu" ] || { echo "qemu-aarch64 missing: apt-get install qemu-user" >&2; exit 1; }
plugin=$(bench/arm/build-plugin.sh "$dir")

if [ ! -x "$dir/root/usr/bin/python3.11" ]; then
    mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/debs"
    . /etc/os-release
    printf 'deb [arch=arm64] http://deb.debian.org/debian %s main\ndeb [arch=arm64] http://deb.debian.org/debian-security %s-security main\n' \
        "$VERSION_CODENAME" "$VERSION_CODENAME" > "$dir/apt/sources.list"
    # arm64 package lists of the host's Debian release, kept apart from the host's apt state.
    apt_opts=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64
        -o Dir::Etc::SourceList="$dir/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o Dir::State::Lists="$dir/apt/lists" -o Dir::Cache="$dir/apt/cache"
        -o Dir::State::status=/dev/null -o Debug::NoLocking=1 -qq)
    apt-get "${apt_opts[@]}" update
    (cd "$dir/debs" && apt-get "${apt_opts[@]}" download python3.11-minimal libpython3.11-minimal \
        libpython3.11-stdlib libc6 libgcc-s1 libstdc++6 libgomp1 libexpat1 zlib1g libffi8 libssl3 \
        libbz2-1.0 liblzma5 libuuid1 libncursesw6 libtinfo6 libreadline8 libsqlite3-0 libcrypt1)
    rm -rf "$dir/root"
    for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
fi
if [ ! -d "$dir/site/torch" ]; then
    mkdir -p "$dir/wheels" "$dir/site"
    pip download -q torch==2.6.0 --platform manylinux_2_28_aarch64 --python-version 3.11 \
        --only-binary=:all: --no-deps -d "$dir/wheels"
    pip download -q numpy==2.2.6 --platform manylinux_2_17_aarch64 --python-version 3.11 \
        --only-binary=:all: --no-deps -d "$dir/wheels"
    # torch's own imports (pure Python).
    pip download -q filelock typing_extensions sympy==1.13.1 mpmath networkx jinja2 MarkupSafe \
        fsspec --platform manylinux_2_17_aarch64 --python-version 3.11 --only-binary=:all: \
        --no-deps -d "$dir/wheels"
    for whl in "$dir"/wheels/*.whl; do (cd "$dir/site" && unzip -q -o "$whl"); done
fi

echo "PyTorch $(PYTHONPATH=$dir/site "$qemu" -L "$dir/root" "$dir/root/usr/bin/python3.11" -c 'import torch; print(torch.__version__)'); $("$qemu" --version | head -n 1)"
runs=()
for cpu in ${cpus//,/ }; do
    for net in ${nets//,/ }; do
        for batch in ${batches//,/ }; do
            f=$dir/torch-$cpu-$net-b$batch.tb
            rm -f "$f" "$f".mark*
            start=$SECONDS
            OMP_NUM_THREADS=1 PYTHONPATH=$dir/site "$qemu" -cpu "$cpu" -L "$dir/root" \
                -plugin "$plugin,out=$f,mark=64:1" "$dir/root/usr/bin/python3.11" \
                bench/torch_train.py "$net" "$batch" 2 > "$f.stdout"
            # Python writes each printed line in pieces (text, then newline), so a step's end is
            # a burst of marks a few thousand instructions apart: the last mark of each burst
            # ends a step (the last burst also holds the final summary line).
            ends=$(for m in "$f".mark*; do echo "${m##*.mark} $(head -n 1 "$m" | cut -d' ' -f2)"; done |
                sort -n | awk 'NR > 1 && $2 - prev > 1000000 { print file } { prev = $2; file = $1 } END { print file }')
            set -- $ends
            [ $# -ge 2 ] || { echo "$f: fewer than 2 step ends among the marks (see $f.stdout)" >&2; exit 1; }
            files=("$f.mark$1" "$f.mark$2")
            echo "$cpu $net batch $batch: $(head -n 1 "${files[0]}") / $(head -n 1 "${files[1]}") instructions at the 1st / 2nd step's end, $((SECONDS - start)) s" >&2
            case $net in alexnet) gflop=4.3 ;; googlenet) gflop=9.5 ;; *) gflop=0 ;; esac
            runs+=("PyTorch $cpu $net b$batch=${files[0]},${files[1]},$batch,$gflop")
        done
    done
done
python3 bench/arm/insn-report.py - 0 "$dir" "${runs[@]}" | tee "$dir/report.md"
