#!/usr/bin/env bash
# Installs what kiln needs to build and test on Debian 12 (run as root or with sudo).
# Idempotent: packages already present are skipped quickly.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config git
  libonnx-dev libprotobuf-dev protobuf-compiler   # ONNX protobuf classes (the importer)
  libcli11-dev                                    # command-line parsing for the kiln CLI
  libdnnl-dev                                     # oneDNN: the fast CPU backend's Conv/MatMul/pooling
  nlohmann-json3-dev                              # plan metadata, timing cache, bench --json
  libgtest-dev libgmock-dev                       # unit tests
  clang libclang-rt-dev libomp-dev                # fuzz targets: libFuzzer + ASan/UBSan runtimes, LLVM OpenMP
  libonnx-testdata                                # ONNX 1.12 backend test data (conformance)
  python3 python3-venv python3-pip                # generates the current ONNX test suite
  pybind11-dev python3-dev                        # the Python module (python/): pybind11 headers, Python.h
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "kiln: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
