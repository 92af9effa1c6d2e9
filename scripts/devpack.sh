#!/usr/bin/env bash
# Packs the CUDA build (build-cuda: kiln, kiln_cuda_tests, kiln_conformance) with the
# non-system shared libraries they need into devpack/pack.tar.xz, for running on a GPU
# machine that has the CUDA 13 runtime libraries but none of kiln's build dependencies
# (scripts/gpu_run.sh unpacks and runs it there).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-cuda}
rm -rf devpack && mkdir -p devpack/stage/lib devpack/stage/bin
for b in "$B/kiln" "$B/tests/kiln_cuda_tests" "$B/tests/kiln_conformance"; do
  strip -o "devpack/stage/bin/$(basename "$b")" "$b"
done
# Libraries from Debian packages (not CUDA's, not glibc's): found with ldd.
for b in devpack/stage/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libz)\.so|/usr/local/cuda|libcudnn|libcublas|libnvrtc|libcuda' \
  | while read -r l; do cp -L "$l" devpack/stage/lib/; done
tar -C devpack/stage -cJf devpack/pack.tar.xz .
rm -rf devpack/stage
# The current onnx wheel's node tests (the GPU machine's onnx install has no test data).
if [ -d build/onnx-testdata/node ]; then tar -C build/onnx-testdata -cJf devpack/node.tar.xz node; fi
ls -la devpack/
