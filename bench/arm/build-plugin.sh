#!/usr/bin/env bash
# Builds bench/arm/insn-count.c, the instruction-counting qemu plugin, into OUT_DIR and prints
# the library's path:  bench/arm/build-plugin.sh OUT_DIR
# The plugin must be built against the plugin API of the qemu that loads it: qemu refuses a
# plugin of another API version, and the header changed between releases. The header comes
# from Debian's source package of the installed qemu-user (apt-get source), or from
# QEMU_PLUGIN_H=path (include/qemu/qemu-plugin.h of the same qemu release).
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
cd "$(dirname "$0")/../.."
qemu=$(command -v qemu-aarch64 || true)
[ -n "$qemu" ] || { echo "qemu-aarch64 missing: apt-get install qemu-user" >&2; exit 1; }
command -v gcc >/dev/null || { echo "gcc missing (for the qemu plugin): apt-get install gcc" >&2; exit 1; }
plugin=$out/libinsncount.so
header=${QEMU_PLUGIN_H:-}
if [ -z "$header" ]; then
    # "qemu-aarch64 version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)": Debian's source version
    # is the package version without the binNMU suffix (+bN).
    pkgver=$(dpkg-query -W -f '${Version}' qemu-user 2>/dev/null || true)
    [ -n "$pkgver" ] || { echo "qemu-user is not a Debian package here: set QEMU_PLUGIN_H to the include/qemu/qemu-plugin.h of qemu $("$qemu" --version | head -n 1)" >&2; exit 1; }
    srcver=$(printf '%s' "$pkgver" | sed 's/+b[0-9]*$//')
    src=$out/qemu-src
    header=$src/qemu-plugin.h
    if [ ! -f "$header" ]; then
        mkdir -p "$src/lists/partial"
        . /etc/os-release
        # A private deb-src list, so the host's apt configuration stays as it is.
        printf 'deb-src http://deb.debian.org/debian %s main\ndeb-src http://deb.debian.org/debian-security %s-security main\n' \
            "$VERSION_CODENAME" "$VERSION_CODENAME" > "$src/sources.list"
        apt_opts=(-o Dir::Etc::SourceList="$src/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o Dir::State::Lists="$src/lists" -o Debug::NoLocking=1 -qq)
        apt-get "${apt_opts[@]}" update >&2
        (cd "$src" && apt-get "${apt_opts[@]}" source --download-only "qemu=$srcver" >&2) ||
            { echo "could not fetch Debian's source of qemu $srcver: set QEMU_PLUGIN_H to qemu's include/qemu/qemu-plugin.h of that release" >&2; exit 1; }
        orig=$(ls "$src"/qemu_*.orig.tar.xz | head -n 1)
        member=$(tar -tJf "$orig" | grep '/include/qemu/qemu-plugin.h$' | head -n 1)
        tar -xJf "$orig" -O "$member" > "$header"
    fi
fi
[ -f "$header" ] || { echo "no qemu-plugin.h at $header" >&2; exit 1; }
gcc -O2 -Wall -shared -fPIC -I"$(dirname "$header")" bench/arm/insn-count.c -o "$plugin" >&2
echo "$plugin"

