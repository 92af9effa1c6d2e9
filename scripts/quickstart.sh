#!/usr/bin/env bash
# Quick start: install dependencies, build kiln, and run the bundled sample model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF >/dev/null
cmake --build build --target kiln_cli -j"$(nproc)"
echo
echo "== kiln inspect models/sample_cnn.onnx"
./build/kiln inspect models/sample_cnn.onnx | head -20
echo
echo "== kiln run models/sample_cnn.onnx --output-dir build/sample_out"
./build/kiln run models/sample_cnn.onnx --output-dir build/sample_out
