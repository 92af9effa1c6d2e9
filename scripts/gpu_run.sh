#!/usr/bin/env bash
# Runs on the GPU machine (the `device` tool): unpacks devpack/pack.tar.xz (scripts/devpack.sh)
# and runs the steps named in $@ with results under $OUT:
#   tests        kiln_cuda_tests (ctest label gpu's binary)
#   conformance  kiln_conformance --engine cuda on the onnx wheel's node tests
#   bench ARGS   bench/gpu_bench.py with the packed kiln
#   all          tests, conformance and the bench of all five models at batch 1, in one call
#                that fits the device tool's 10-minute limit (each step time-boxed)
#   python ARGS  the pytest suite (python/tests) with the module of scripts/devpack_python.sh
#   check        tests, python and conformance in one call (time-boxed)
#   final        the benchmark of record: all five models at batch 1 against eager, CUDA graph and
#                torch.compile (with kiln's per-op profile), then ResNet-50 b256 and BERT-base b64
#   profile      kiln alone (CUDA-graph peer only) with `kiln bench --profile` per-op totals:
#                FP16 at batch 1 and 256/64, NCHW and NHWC convs, and FP32 accuracy at batch 1
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/kp
tar -C /tmp/kp -xJf devpack/pack.tar.xz
CUDA_LIBS=$(ls -d /usr/local/cuda*/targets/x86_64-linux/lib 2>/dev/null | tr '\n' ':')
PYLIBS=$(python3 -c 'import nvidia,os;print(":".join(os.path.join(p,d,"lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null || true)
export LD_LIBRARY_PATH=/tmp/kp/lib:${CUDA_LIBS}${PYLIBS}:${LD_LIBRARY_PATH:-}
export KILN=/tmp/kp/bin/kiln
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
step=${1:-tests}; shift || true
case "$step" in
  tests)
    /tmp/kp/bin/kiln_cuda_tests --gtest_color=no "$@" 2>&1 | tee "$OUT/tests.log" | grep -Ev '^\[ +(RUN|OK) ' | tail -150 ;;
  conformance)
    mkdir -p /tmp/kp/data && tar -C /tmp/kp/data -xJf devpack/node.tar.xz
    /tmp/kp/bin/kiln_conformance --engine cuda "$@" node=/tmp/kp/data/node 2>&1 | tee "$OUT/conformance.log" | tail -120 ;;
  bench)
    PYTHONUNBUFFERED=1 python3 bench/gpu_bench.py --kiln "$KILN" "$@" 2>&1 | tee "$OUT/bench.log" | tail -150 ;;
  all)
    timeout 90 "$0" tests > "$OUT/all_tests.txt" 2>&1; tail -40 "$OUT/all_tests.txt"
    timeout 200 "$0" conformance > "$OUT/all_conformance.txt" 2>&1; grep -E "passed|CUDA kernel" "$OUT/all_conformance.txt"
    timeout 270 "$0" bench --cnn-batches 1 --nlp-batches 1 --peers eager,cudagraph,compile-ro --time-budget-s 240 \
      --out "$OUT/results.json" > "$OUT/all_bench.txt" 2>&1; tail -30 "$OUT/all_bench.txt" ;;
  python)
    mkdir -p /tmp/kp/py && tar -C /tmp/kp/py -xJf devpack/py.tar.xz
    PYTHONPATH=/tmp/kp/py python3 -m pytest -q -rs -p no:cacheprovider python/tests "$@" 2>&1 | tee "$OUT/python.log" | tail -60 ;;
  check)
    timeout 230 "$0" tests > "$OUT/check_tests.txt" 2>&1; tail -25 "$OUT/check_tests.txt"
    timeout 90 "$0" python > "$OUT/check_python.txt" 2>&1; tail -25 "$OUT/check_python.txt"
    timeout 150 "$0" conformance > "$OUT/check_conformance.txt" 2>&1; grep -E "passed|CUDA kernel|all layers on CUDA" "$OUT/check_conformance.txt" | head -30 ;;
  final)
    B="python3 bench/gpu_bench.py --kiln $KILN --kiln-profile"
    timeout 250 $B --peers eager,cudagraph,compile-ro --batches 1 --time-budget-s 235 --out "$OUT/final_b1.json" \
      > "$OUT/final_b1.txt" 2>&1; grep -vE "^\[export\]|^ +%|Torch IR" "$OUT/final_b1.txt" | grep -E "^\||profile|FAIL" | cut -c1-200 | tail -70
    timeout 170 $B --peers eager,cudagraph,compile-ro --models resnet50,bert_base --cnn-batches 256 --nlp-batches 64 \
      --time-budget-s 160 --out "$OUT/final_big.json" > "$OUT/final_big.txt" 2>&1; grep -E "^\||profile|FAIL" "$OUT/final_big.txt" | cut -c1-200 | tail -30 ;;
  profile)
    B="python3 bench/gpu_bench.py --kiln $KILN --kiln-profile"
    timeout 200 $B --peers cudagraph --cnn-batches 1,256 --nlp-batches 1,64 --time-budget-s 180 \
      --out "$OUT/profile_fp16.json" > "$OUT/profile_fp16.txt" 2>&1; grep -E "kiln median|profile|accuracy|FAIL|cudagraph [0-9]" "$OUT/profile_fp16.txt" | cut -c1-160 | head -150
    timeout 100 $B --peers "" --models resnet50,mobilenetv3 --cnn-batches 1,256 --build-args "--conv-layout nhwc" \
      --time-budget-s 90 --out "$OUT/profile_nhwc.json" > "$OUT/profile_nhwc.txt" 2>&1; grep -E "kiln median|profile|accuracy|FAIL" "$OUT/profile_nhwc.txt" | cut -c1-160 | head -60
    timeout 100 $B --peers "" --precisions fp32 --batches 1 --time-budget-s 90 \
      --out "$OUT/fp32.json" > "$OUT/fp32.txt" 2>&1; grep -E "kiln median|accuracy|FAIL" "$OUT/fp32.txt" | cut -c1-160 ;;
  *) echo "unknown step $step"; exit 2 ;;
esac
