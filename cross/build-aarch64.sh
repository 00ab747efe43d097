#!/usr/bin/env bash
# Builds edgebench for aarch64-unknown-linux-gnu (Jetson boards) on an x86_64 Debian/Ubuntu
# host. Installs what it needs when run as root; prints the binary's path.
#   cross/build-aarch64.sh            release build
#   cross/build-aarch64.sh --check    also run `edgebench --version` under qemu-user
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v aarch64-linux-gnu-gcc >/dev/null || need_apt+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
if [ "${1:-}" = "--check" ]; then
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
cargo build --release --locked --target aarch64-unknown-linux-gnu
bin=target/aarch64-unknown-linux-gnu/release/edgebench
echo "$bin"

if [ "${1:-}" = "--check" ]; then
    qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static)
    "$qemu" -L /usr/aarch64-linux-gnu "$bin" --version
fi
