#!/usr/bin/env bash
# Quick start: install dependencies, build kiln, then take the bundled sample model through
# the whole flow: inspect it, build an engine, benchmark the engine, check it against the
# original model, and run it once (docs/cli.md explains every command and its output).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF >/dev/null
cmake --build build --target kiln_cli -j"$(nproc)"
# The engine targets the GPU when this machine has an NVIDIA GPU and kiln was built with
# its CUDA backend (the CUDA toolkit was found), else the CPU.
DEVICE=(--device cpu)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 \
   && grep -q '^KILN_CUDA:BOOL=ON' build/CMakeCache.txt; then
  DEVICE=(--device cuda)  # FP32, so `kiln compare` holds it to FP32 tolerances
fi
echo
echo "== kiln inspect models/sample_cnn.onnx"
./build/kiln inspect models/sample_cnn.onnx | head -20
echo
echo "== kiln build models/sample_cnn.onnx -o build/sample_cnn.kiln ${DEVICE[*]}"
./build/kiln build models/sample_cnn.onnx -o build/sample_cnn.kiln "${DEVICE[@]}"
echo
echo "== kiln inspect build/sample_cnn.kiln"
./build/kiln inspect build/sample_cnn.kiln
echo
echo "== kiln bench build/sample_cnn.kiln --duration-s 1"
./build/kiln bench build/sample_cnn.kiln --duration-s 1
echo
echo "== kiln compare models/sample_cnn.onnx --engine build/sample_cnn.kiln"
./build/kiln compare models/sample_cnn.onnx --engine build/sample_cnn.kiln
echo
echo "== kiln run build/sample_cnn.kiln --output-dir build/sample_out"
./build/kiln run build/sample_cnn.kiln --output-dir build/sample_out
