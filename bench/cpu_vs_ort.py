#!/usr/bin/env python3
"""kiln (CPU engine) vs ONNX Runtime CPU, side by side, same thread count, fp32, batch 1.

Exports ResNet-50 (torchvision, random weights) and a BERT-base-style encoder (12 layers,
hidden 768, 12 heads, seq 128; the hand-written HF-style model of
tools/models/export_test_models.py) with PyTorch, then measures both runtimes on the same
inputs: median latency over many runs after a warm-up. kiln is timed by `kiln bench`
(steady clock around ExecutionContext::execute on bound buffers); ONNX Runtime by
perf_counter around InferenceSession.run with all graph optimizations on.

Needs: torch + torchvision (Debian python3-torch, python3-torchvision) and onnxruntime
(pip). Set up once:
    /usr/bin/python3 -m venv --system-site-packages build/bench-venv
    build/bench-venv/bin/pip install onnxruntime
Run:
    build/bench-venv/bin/python bench/cpu_vs_ort.py --kiln build/kiln --threads 2
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "models"))


def export_models(out_dir, which):
    import torch
    models = []
    if "resnet50" in which:
        import torchvision
        path = os.path.join(out_dir, "resnet50.onnx")
        if not os.path.exists(path):
            torch.manual_seed(0)
            m = torchvision.models.resnet50().eval()
            torch.onnx.export(m, torch.randn(1, 3, 224, 224), path, input_names=["input"], output_names=["logits"],
                              opset_version=17, do_constant_folding=True)
        models.append(("resnet50", path, {"input": np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)}))
    if "bert" in which:
        import export_test_models as etm
        path = os.path.join(out_dir, "bert_base_seq128.onnx")
        seq = 128
        if not os.path.exists(path):
            torch.manual_seed(0)
            m = etm.BertTiny(hidden=768, heads=12, intermediate=3072, layers=12, max_pos=512).eval()
            etm.randomize_layernorm(m)
            ids = torch.randint(0, etm.VOCAB, (1, seq))
            mask = torch.ones(1, seq, dtype=torch.long)
            torch.onnx.export(m, (ids, mask), path, input_names=["input_ids", "attention_mask"], output_names=["hidden"],
                              opset_version=17, do_constant_folding=True)
        rng = np.random.default_rng(0)
        models.append(("bert-base (seq 128)", path, {
            "input_ids": rng.integers(0, 100, (1, seq), dtype=np.int64),
            "attention_mask": np.ones((1, seq), dtype=np.int64)}))
    return models


def bench_ort(path, feeds, threads, warmup_s, duration_s):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        sess.run(None, feeds)
    times = []
    end = time.perf_counter() + duration_s
    while time.perf_counter() < end or len(times) < 10:
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), len(times)


def bench_kiln(kiln, path, feeds, threads, warmup_s, duration_s, out_dir):
    shapes = ",".join(f"{k}:{'x'.join(str(d) for d in v.shape)}" for k, v in feeds.items())
    js = os.path.join(out_dir, os.path.basename(path) + ".kiln-bench.json")
    cmd = [kiln, "bench", path, "--shapes", shapes, "--threads", str(threads), "--warmup-ms", str(int(warmup_s * 1000)),
           "--duration-s", str(duration_s), "--json", js]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(js) as f:
        r = json.load(f)
    return r["latency_ms"]["median"], r.get("iterations", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--duration-s", type=float, default=10.0)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = []
    for name, path, feeds in export_models(args.out, args.models.split(",")):
        ort_ms, ort_n = bench_ort(path, feeds, args.threads, args.warmup_s, args.duration_s)
        kiln_ms, kiln_n = bench_kiln(args.kiln, path, feeds, args.threads, args.warmup_s, args.duration_s, args.out)
        results.append({"model": name, "batch": 1, "precision": "fp32", "threads": args.threads,
                        "kiln_median_ms": round(kiln_ms, 3), "ort_median_ms": round(ort_ms, 3),
                        "kiln_runs": kiln_n, "ort_runs": ort_n, "ort_over_kiln": round(ort_ms / kiln_ms, 3)})
    import onnxruntime
    meta = {"date": datetime.date.today().isoformat(), "cpu": platform.processor() or platform.machine(),
            "onnxruntime": onnxruntime.__version__}
    print(f"{'model':24} {'kiln ms':>10} {'ORT ms':>10} {'ORT/kiln':>9}")
    for r in results:
        print(f"{r['model']:24} {r['kiln_median_ms']:10.3f} {r['ort_median_ms']:10.3f} {r['ort_over_kiln']:9.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
