#!/usr/bin/env bash
# Installs dependencies, builds kiln with warnings as errors, and runs the whole test
# suite (unit tests, CLI tests, and the ONNX conformance suites) with ctest, then the fuzzers.
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
  -DKILN_PYTHON="$PWD/$VENV/bin/python" -DKILN_PYTHON_MODULE=ON >/dev/null
cmake --build build -j"$(nproc)"
(cd build && ctest --output-on-failure -j"$(nproc)" "$@")
# libFuzzer targets (docs/fuzzing.md): a clang build in build-fuzz, the seed corpora
# replayed, then KILN_FUZZ_SECONDS (default 60) of fuzzing per target; KILN_SKIP_FUZZ=1 skips.
if [ "${KILN_SKIP_FUZZ:-0}" != 1 ]; then
  bash scripts/fuzz.sh "${KILN_FUZZ_SECONDS:-60}"
fi
