#!/usr/bin/env bash
# Sets up what `cargo build --release --target aarch64-unknown-linux-gnu --features cudnn` needs
# on an x86_64 Linux host with no CUDA toolkit, to build edgebench for a Jetson AGX Orin (sm_87,
# JetPack 6.1/6.2: CUDA 12.6, cuDNN 9.3), from NVIDIA's wheels on PyPI:
#
#   DIR/host     x86_64 build tools: nvcc from the CUDA 13.0 wheels (the nvidia-cuda-nvcc-cu12
#                wheels carry ptxas but no nvcc driver), and ptxas 12.6 (nvidia-cuda-nvcc-cu12)
#   DIR/aarch64  what the aarch64 binary links: libcublas/libcublasLt/libnvrtc/libcudart 12.6,
#                libcurand 10.3.7, libcudnn.so.9 (cuDNN 9.3's loader only) and their headers, a
#                libcuda.so stub (soname libcuda.so.1) built with aarch64-linux-gnu-gcc
#   DIR/env.sh   CUDA_PATH/CUDA_HOME=DIR/aarch64 (cudarc's link search: lib, lib/stubs),
#                CUDARC_CUDA_VERSION=12060 (cudarc's API level; its nvcc is 13.0),
#                NVCC=DIR/host/bin/nvcc-orin, NVCC_CCBIN=aarch64-linux-gnu-g++,
#                CUDA_COMPUTE_CAP=87, and the cross C compiler for the bundled SQLite
#
# nvcc-orin runs the CUDA 13 nvcc; for each PTX file (candle-kernels' kernels, loaded by the
# driver's JIT at run time) it lowers the header `.version 9.0` to `.version 8.5` (the newest PTX
# ISA a CUDA 12.6 driver accepts) and assembles the result with ptxas 12.6 for sm_87, so the build
# fails if the PTX uses anything CUDA 12.6 does not know.
#
#   cross/cuda-orin-from-pypi.sh DIR          (needs gcc/g++-aarch64-linux-gnu, python3 + pip)
#   . DIR/env.sh && cargo build --release --target aarch64-unknown-linux-gnu --features cudnn
#
# Only the build is tested (cross/README.md); on the board the binary uses JetPack's own
# libraries (/usr/local/cuda/lib64, libcudnn.so.9 in /usr/lib/aarch64-linux-gnu).
set -euo pipefail
DIR=$(realpath -m "${1:?usage: cross/cuda-orin-from-pypi.sh DIR}")
pip_dl() { # pip_dl DEST ARCH SPEC...
    local dest=$1 arch=$2
    shift 2
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform "manylinux_2_28_$arch" --platform "manylinux_2_27_$arch" \
        --platform "manylinux_2_17_$arch" --platform "manylinux2014_$arch" \
        --platform "manylinux_2_5_$arch" --platform "manylinux2010_$arch" \
        --platform "manylinux1_$arch" -d "$dest" "$@"
}
mkdir -p "$DIR/host" "$DIR/aarch64/lib/stubs" "$DIR/aarch64/include"

# x86_64 host tools.
pip_dl "$DIR/wheels-host" x86_64 "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-crt==13.0.*" \
    "nvidia-cuda-cccl==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cuda-runtime==13.0.*"
pip_dl "$DIR/wheels-ptxas" x86_64 "nvidia-cuda-nvcc-cu12==12.6.*"
for w in "$DIR"/wheels-host/*.whl; do python3 -m zipfile -e "$w" "$DIR/host/tree"; done
python3 -m zipfile -e "$DIR"/wheels-ptxas/*.whl "$DIR/host/tree-12.6"
NVCC_ROOT=$DIR/host/tree/nvidia/cu13
chmod +x "$NVCC_ROOT"/bin/* "$NVCC_ROOT"/nvvm/bin/* "$DIR"/host/tree-12.6/nvidia/cuda_nvcc/bin/*
mkdir -p "$DIR/host/bin"
ln -sfn "$NVCC_ROOT/include" "$DIR/host/include"  # cudaforge: include dir = nvcc/../../include
ln -sf "$DIR/host/tree-12.6/nvidia/cuda_nvcc/bin/ptxas" "$DIR/host/bin/ptxas-12.6"

# aarch64 libraries: the shared libraries and headers only (cuDNN: its loader libcudnn.so.9;
# the engines it opens at run time come with JetPack on the board).
pip_dl "$DIR/wheels-aarch64" aarch64 "nvidia-cuda-runtime-cu12==12.6.*" \
    "nvidia-cuda-nvrtc-cu12==12.6.*" "nvidia-cublas-cu12==12.6.*" "nvidia-curand-cu12==10.3.7.*" \
    "nvidia-cudnn-cu12==9.3.*"
python3 - "$DIR/aarch64" "$DIR"/wheels-aarch64/*.whl <<'PY'
import os, sys, zipfile
dest, wheels = sys.argv[1], sys.argv[2:]
for wheel in wheels:
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            base = name.rsplit("/", 1)[1]
            if "/lib/" in name and ".so" in base:
                if "cudnn" in base and not base.startswith("libcudnn.so"):
                    continue  # cuDNN's engine libraries: loaded at run time, not linked
                out = f"{dest}/lib/{base}"
            elif "/include/" in name and base.endswith((".h", ".hpp")):
                out = f"{dest}/include/{name.split('/include/', 1)[1]}"
            else:
                continue
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "wb") as f:
                f.write(z.read(name))
PY
# The linker wants unversioned names; the wheels carry only the versioned ones.
for lib in cublas cublasLt curand nvrtc cudart cudnn; do
    real=$(cd "$DIR/aarch64/lib" && ls "lib$lib.so."* | grep -v -e builtins -e alt | head -1)
    ln -sf "$real" "$DIR/aarch64/lib/lib$lib.so"
done
# libcuda.so stub: every cu* entry point of CUDA 12.6's cuda.h as an empty aarch64 function.
grep -ohE '\bcu[A-Z][A-Za-z0-9_]*\b' "$DIR/aarch64/include/cuda.h" | sort -u |
    awk '{print "void " $1 "(void) {}"}' >"$DIR/aarch64/cuda_stub.c"
aarch64-linux-gnu-gcc -shared -fPIC -w -Wl,-soname,libcuda.so.1 \
    -o "$DIR/aarch64/lib/stubs/libcuda.so" "$DIR/aarch64/cuda_stub.c"

# nvcc wrapper: CUDA 13's nvcc, PTX lowered to ISA 8.5 and checked with ptxas 12.6.
cat >"$DIR/host/bin/nvcc-orin" <<WRAP
#!/usr/bin/env bash
set -e
"$NVCC_ROOT/bin/nvcc" "\$@"
ptx= outdir=.
while [ \$# -gt 0 ]; do
    case \$1 in
        --ptx) ptx=1 ;;
        --output-directory) outdir=\$2; shift ;;
    esac
    last=\$1; shift
done
[ -n "\$ptx" ] || exit 0
f=\$outdir/\$(basename "\${last%.cu}").ptx
sed -i 's/^\.version 9\.0\$/.version 8.5/' "\$f"
"$DIR/host/bin/ptxas-12.6" -arch=sm_\${CUDA_COMPUTE_CAP:-87} -O0 -o /dev/null "\$f" ||
    { echo "nvcc-orin: \$f is not valid PTX 8.5 for CUDA 12.6's ptxas" >&2; exit 1; }
WRAP
chmod +x "$DIR/host/bin/nvcc-orin"

cat >"$DIR/env.sh" <<ENV
export PATH=$NVCC_ROOT/bin:\$PATH
export NVCC=$DIR/host/bin/nvcc-orin NVCC_CCBIN=aarch64-linux-gnu-g++
export CUDA_HOME=$DIR/aarch64 CUDA_PATH=$DIR/aarch64 CUDARC_CUDA_VERSION=12060
export CUDA_COMPUTE_CAP=87
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
export CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++
ENV
"$NVCC_ROOT/bin/nvcc" --version | tail -2
"$DIR/host/bin/ptxas-12.6" --version | tail -2
echo "now: . $DIR/env.sh && cargo build --release --target aarch64-unknown-linux-gnu --features cudnn"
