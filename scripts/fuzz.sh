#!/usr/bin/env bash
# Builds kiln's libFuzzer targets with clang (AddressSanitizer + UBSan) in build-fuzz,
# replays the committed seed corpora, then fuzzes each target for SECONDS (default 60;
# 0 only replays). Fails on any crash, sanitizer report, leak, timeout or out-of-memory;
# the input that caused it is saved as build-fuzz/artifacts/<target>-crash-<sha1> and can
# be replayed with `build-fuzz/tests/fuzz/<target> FILE`. See docs/fuzzing.md.
#
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
BUILD=${KILN_FUZZ_BUILD_DIR:-build-fuzz}
TARGETS=(fuzz_plan_loader fuzz_onnx_importer)
declare -A CORPUS=([fuzz_plan_loader]=tests/fuzz/corpus/plan [fuzz_onnx_importer]=tests/fuzz/corpus/onnx)

start=$(date +%s)
# -O1 without NDEBUG: fast enough to fuzz, and kiln's internal asserts stay armed.
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target "${TARGETS[@]}"
echo "kiln fuzz: build took $(($(date +%s) - start)) s"

# One OpenMP thread: the fuzzers run inputs one at a time, and thread start-up would
# dominate these tiny graphs.
export OMP_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
mkdir -p "$BUILD/artifacts"
COMMON=(-max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1)
for t in "${TARGETS[@]}"; do
  bin="$BUILD/tests/fuzz/$t"
  seeds="${CORPUS[$t]}"
  echo "kiln fuzz: $t: replaying $(ls "$seeds" | wc -l) seeds from $seeds"
  "$bin" "${COMMON[@]}" -artifact_prefix="$BUILD/artifacts/$t-" -runs=0 "$seeds"
  if [ "$SECS" -gt 0 ]; then
    # New interesting inputs go to the first (scratch) folder; the committed seeds stay as
    # they are. The scratch corpus persists between runs of this script in the build folder.
    work="$BUILD/corpus/$t"
    mkdir -p "$work"
    echo "kiln fuzz: $t: fuzzing for $SECS s"
    "$bin" "${COMMON[@]}" -artifact_prefix="$BUILD/artifacts/$t-" -max_total_time="$SECS" "$work" "$seeds"
  fi
done
echo "kiln fuzz: all targets passed ($(($(date +%s) - start)) s in all)"
