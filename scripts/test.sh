#!/usr/bin/env bash
# Installs dependencies, builds kiln with warnings as errors, and runs the whole test
# suite (unit tests, CLI tests, and the ONNX conformance suites) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# Python tooling for tests lives in a virtual environment inside the build folder.
VENV=build/venv
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r tests/requirements.txt
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON -DKILN_BUILD_TESTS=ON \
  -DKILN_PYTHON="$PWD/$VENV/bin/python" >/dev/null
cmake --build build -j"$(nproc)"
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
