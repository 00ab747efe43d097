#!/usr/bin/env bash
# Builds edgebench for aarch64-unknown-linux-gnu (Jetson boards) on an x86_64 Debian/Ubuntu
# host. Installs what it needs when run as root; prints the binary's path.
#   cross/build-aarch64.sh            release build
#   cross/build-aarch64.sh --check    also run it under qemu-user: --version, models --json,
#                                     and a one-iteration CPU trial into a temporary DB
#   cross/build-aarch64.sh --test-ops build the kernels crate's unit tests (edgebench-kernels)
#                                     for aarch64 and run its reference tests under qemu-user, on
#                                     1 to 16 threads (the aarch64 code paths: edgebench's
#                                     NEON SGEMM, gemm's kernels and the vectorised loops), as a
#                                     Cortex-A57 and as a Cortex-A76 (EDGEBENCH_QEMU_CPUS picks
#                                     others)
# PROFILE=ci-aarch64 picks a cargo profile other than release (CI's quicker smoke build).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v aarch64-linux-gnu-gcc >/dev/null || need_apt+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
mode=${1:-}
if [ "$mode" = "--check" ] || [ "$mode" = "--test-ops" ]; then
    command -v qemu-aarch64 >/dev/null || command -v qemu-aarch64-static >/dev/null || need_apt+=(qemu-user)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
    else
        echo "missing: ${need_apt[*]} (sudo apt-get install ${need_apt[*]})" >&2
        exit 1
    fi
fi
rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 || rustup target add aarch64-unknown-linux-gnu

# rusqlite's bundled SQLite is C: compile it with the cross gcc too.
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
profile=${PROFILE:-release}
if [ "$mode" = "--test-ops" ]; then
    # The kernels crate's unit-test binary: the path is the one cargo reports as its executable.
    testbin=$(cargo test --locked -p edgebench-kernels --lib --no-run --profile "$profile" \
        --target aarch64-unknown-linux-gnu --message-format=json |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
    [ -n "$testbin" ] || { echo "cargo did not report the kernels' test binary" >&2; exit 1; }
    aarch64-linux-gnu-readelf -h "$testbin" | grep -q AArch64 || { echo "$testbin is not an aarch64 binary" >&2; exit 1; }
    qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static)
    echo "== $testbin (qemu-user)"
    # Two test threads: the tests build their own rayon pools of up to 16 threads each. The
    # convolution's finite-difference check is left to the native run (its gradients are
    # checked against candle's here): under qemu it alone took over 10 minutes. Once per CPU
    # model the boards have: the Cortex-A57 (TX1, TX2, Nano) has neither fp16 arithmetic nor
    # dot-product instructions, and qemu raises SIGILL if a kernel it runs uses one; the
    # Cortex-A76 is qemu's nearest to Orin's A78AE (both have them).
    for cpu in ${EDGEBENCH_QEMU_CPUS:-cortex-a57 cortex-a76}; do
        start=$SECONDS
        echo "== -cpu $cpu"
        "$qemu" -cpu "$cpu" -L /usr/aarch64-linux-gnu "$testbin" --test-threads 2 \
            --skip conv::tests::gradients_match_finite_differences
        echo "aarch64 kernel tests ok on $cpu ($((SECONDS - start)) s under qemu)"
    done
    exit 0
fi
cargo build --locked --profile "$profile" --target aarch64-unknown-linux-gnu
bin=${CARGO_TARGET_DIR:-target}/aarch64-unknown-linux-gnu/$profile/edgebench
echo "$bin"

if [ "$mode" = "--check" ]; then
    qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static)
    # A Cortex-A57, the oldest core the boards have: an instruction it lacks fails the run.
    emu="$qemu -cpu cortex-a57 -L /usr/aarch64-linux-gnu"
    aarch64-linux-gnu-readelf -h "$bin" | grep -q AArch64 || { echo "$bin is not an aarch64 binary" >&2; exit 1; }
    echo "== $bin --version (qemu-user)"
    $emu "$bin" --version
    echo "== models --json"
    $emu "$bin" models --json > "$bin.models.json"
    grep -q '"params": 60965224' "$bin.models.json" || { echo "models --json: AlexNet's 60,965,224 parameters missing" >&2; exit 1; }
    echo "== one-iteration CPU trial"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # The worker is another process of the same aarch64 binary: qemu runs it too.
    EDGEBENCH_WORKER_PREFIX="$emu" RAYON_NUM_THREADS=2 $emu "$bin" run --net alexnet \
        --batch 1 --images 1 --epochs 1 --warmup 0 --db "$tmp/smoke.db" --quiet
    $emu "$bin" results --json --db "$tmp/smoke.db" > "$tmp/results.json"
    grep -q '"status": "ok"' "$tmp/results.json" || { cat "$tmp/results.json" >&2; echo "the trial did not end ok" >&2; exit 1; }
    echo "aarch64 smoke run ok"
fi
