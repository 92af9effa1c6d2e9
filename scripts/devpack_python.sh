#!/usr/bin/env bash
# Builds kiln's Python module for the GPU machine's Python (a different version from this
# machine's, with no pybind11 or compiler toolchain of ours there) and adds it to the devpack
# as devpack/py.tar.xz; `scripts/gpu_run.sh python` runs the pytest suite with it.
#
#   scripts/devpack_python.sh HEADERS_DIR KILN_BUILD_DIR
#
# HEADERS_DIR: the target Python's headers and pybind11's, as copied from the GPU machine
#   (usr/include/python3.X, usr/include/x86_64-linux-gnu/python3.X, include/pybind11 — the
#   one that ships inside torch), e.g. unpacked from
#   tar -czf $OUT/pyhdr.tar.gz -C / usr/include/python3.12 usr/include/x86_64-linux-gnu/python3.12 \
#       -C <torch dir> include/pybind11
# KILN_BUILD_DIR: a CUDA build of the kiln library compiled as position-independent code
#   (-DCMAKE_POSITION_INDEPENDENT_CODE=ON or -DKILN_PYTHON_MODULE=ON), holding libkiln.a.
set -euo pipefail
cd "$(dirname "$0")/.."
H=$(cd "$1" && pwd)
B=$(cd "$2" && pwd)
PYINC=$(ls -d "$H"/usr/include/python3.* | head -1)
PYVER=$(basename "$PYINC" | sed 's/python3\.//')
PLATINC=$(ls -d "$H"/usr/include/x86_64-linux-gnu/python3.* 2>/dev/null | head -1 || true)
OUTD=devpack/py/kiln
rm -rf devpack/py && mkdir -p "$OUTD" devpack/py/obj
pids=()
for f in python/*.cpp; do
  o=devpack/py/obj/$(basename "$f" .cpp).o
  c++ -DKILN_HAVE_CUDA=1 -DKILN_VERSION=\"$(sed -n 's/^project(kiln VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)\" \
    -DONNX_ML=1 -DONNX_NAMESPACE=onnx -Ipython -Isrc -Iinclude -isystem "$H/include" -isystem "$PYINC" \
    ${PLATINC:+-isystem "$PLATINC"} -isystem "$H/usr/include" -isystem /usr/local/cuda/include -O2 -DNDEBUG -fPIC -fvisibility=hidden \
    -fopenmp -std=c++20 -c "$f" -o "$o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done  # any failed compile stops the script
c++ -shared -fPIC -o "$OUTD/_kiln.cpython-3${PYVER}-x86_64-linux-gnu.so" devpack/py/obj/*.o "$B/libkiln.a" \
  -L/usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu/libonnx_proto.so.1 \
  /usr/lib/x86_64-linux-gnu/libprotobuf.so /usr/lib/x86_64-linux-gnu/libdnnl.so.2.6 -fopenmp \
  /usr/local/cuda/lib/libcudart_static.a /usr/local/cuda/lib/libcublasLt.so /usr/local/cuda/lib/libnvrtc.so \
  /usr/local/cuda/lib/stubs/libcuda.so /usr/local/cuda/lib/libcudnn.so -lrt -lpthread -ldl
strip --strip-unneeded "$OUTD"/_kiln.*.so
cp python/kiln/*.py python/kiln/*.pyi python/kiln/py.typed "$OUTD/"
rm -rf devpack/py/obj
tar -C devpack/py -cJf devpack/py.tar.xz kiln
rm -rf devpack/py
ls -la devpack/py.tar.xz
