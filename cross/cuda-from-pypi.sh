#!/usr/bin/env bash
# Sets up what `cargo build --features cuda` needs on an x86-64 Linux machine with no CUDA
# toolkit installed, from NVIDIA's wheels on PyPI: nvcc (candle-kernels compiles its PTX with
# it), the headers, and the libraries candle links (cuBLAS, cuRAND, NVRTC, the CUDA runtime),
# plus a link-time stub of the driver library libcuda.so (the real one comes with the driver on
# the machine that runs the binary), and cuDNN's loader library for the `cudnn` feature (its
# engines, several hundred MB, are loaded at run time from the machine that runs the binary).
#
#   cross/cuda-from-pypi.sh DIR [CUDA_MAJOR.MINOR]      (default 13.0)
#   . DIR/env.sh && CUDA_COMPUTE_CAP=90 cargo build --release --features cudnn   (or cuda)
#
# At run time the binary needs libcublas/libcublasLt/libcurand/libnvrtc/libcudart of the same
# major version on LD_LIBRARY_PATH (a PyTorch install carries them under
# site-packages/nvidia/cu13/lib), with `cudnn` also libcudnn*.so.9 (site-packages/nvidia/cudnn/lib),
# and a driver that supports that CUDA version.
set -euo pipefail
DIR=$(realpath -m "${1:?usage: cross/cuda-from-pypi.sh DIR [CUDA_MAJOR.MINOR]}")
VER=${2:-13.0}
MAJOR=${VER%%.*}
mkdir -p "$DIR/wheels" "$DIR/root"
# Wheel names and the library versions that go with CUDA 13.0 (cuRAND is versioned on its own).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux2010_x86_64 --platform manylinux1_x86_64 -d "$DIR/wheels" \
    "nvidia-cuda-nvcc==$VER.*" "nvidia-cuda-runtime==$VER.*" "nvidia-cuda-nvrtc==$VER.*" \
    "nvidia-cuda-crt==$VER.*" "nvidia-cuda-cccl==$VER.*" "nvidia-nvvm==$VER.*" \
    "nvidia-cublas==$MAJOR.*" "nvidia-curand==10.*"
for w in "$DIR"/wheels/*.whl; do
    python3 -m zipfile -e "$w" "$DIR/root"
done
# cuDNN 9: only the loader (libcudnn.so.9, which opens its engine libraries at run time) and the
# headers are needed to link; the wheel's 500 MB of engines stay out of the tree.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DIR/wheels-cudnn" "nvidia-cudnn-cu$MAJOR==9.*"
python3 - "$DIR"/wheels-cudnn/*.whl "$DIR/root/nvidia/cu$MAJOR" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.endswith("/lib/libcudnn.so.9") or "/include/cudnn" in name:
            sub = "lib" if "/lib/" in name else "include"
            with open(f"{dest}/{sub}/{name.rsplit('/', 1)[1]}", "wb") as f:
                f.write(z.read(name))
PY
CUDA=$DIR/root/nvidia/cu$MAJOR
chmod +x "$CUDA"/bin/* "$CUDA"/nvvm/bin/* 2>/dev/null || true
# The linker wants unversioned names; the wheels carry only the versioned ones.
for lib in cublas cublasLt curand nvrtc cudart cudnn; do
    real=$(cd "$CUDA/lib" && ls "lib$lib.so."* | grep -v -e builtins -e alt | head -1)
    ln -sf "$real" "$CUDA/lib/lib$lib.so"
done
# libcuda.so stub: every cu* entry point of cuda.h as an empty function, soname libcuda.so.1.
mkdir -p "$CUDA/lib/stubs"
grep -ohE '\bcu[A-Z][A-Za-z0-9_]*\b' "$CUDA/include/cuda.h" | sort -u |
    awk '{print "void " $1 "(void) {}"}' >"$DIR/cuda_stub.c"
cc -shared -fPIC -w -Wl,-soname,libcuda.so.1 -o "$CUDA/lib/stubs/libcuda.so" "$DIR/cuda_stub.c"
cat >"$DIR/env.sh" <<ENV
export PATH=$CUDA/bin:\$PATH
export CUDA_HOME=$CUDA CUDA_PATH=$CUDA
export LIBRARY_PATH=$CUDA/lib:$CUDA/lib/stubs\${LIBRARY_PATH:+:\$LIBRARY_PATH}
ENV
"$CUDA/bin/nvcc" --version | tail -2
echo "now: . $DIR/env.sh && CUDA_COMPUTE_CAP=<sm, e.g. 90 for H100/H200> cargo build --release --features cudnn"
