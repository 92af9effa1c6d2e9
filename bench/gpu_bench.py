#!/usr/bin/env python3
"""kiln CUDA engines vs PyTorch FP16 peers on one GPU: latency, throughput and accuracy.

    python3 bench/gpu_bench.py --kiln ./devpack/kiln --out results.json \
        [--models resnet50,mobilenetv3,vit_b_16,bert_base,gpt2] [--precisions fp16[,fp32]] \
        [--batches 1,256 | --cnn-batches 1,256 --nlp-batches 1,64] \
        [--peers eager,cudagraph,compile-ro[,compile-ma]] [--time-budget-s 450]

For each model (exported by bench/export_gpu_models.py into --model-dir when missing), batch
and precision:
  kiln      `kiln build MODEL -o ENGINE --device cuda [--fp16] --shapes <inputs at the batch>`
            (wall time of the command = build_s), then `kiln bench ENGINE --input ... --json F`
            on the same inputs the peers get; kiln ms = its latency_ms.median (a steady clock
            around each synchronous execute()).
  peers     PyTorch, same precision as the row (fp16: model.half(); fp32: TF32 off), inputs on
            the GPU, torch.inference_mode, cudnn.benchmark on, channels_last for the CNNs:
              eager       the module as is
              cudagraph   the same captured once in a torch.cuda.CUDAGraph with static inputs
                          (torch.tensor(scalar, device=cuda) made capturable: see
                          capturable_scalar_tensors)
              compile-ro  torch.compile(mode="reduce-overhead", dynamic=False)
              compile-ma  torch.compile(mode="max-autotune", dynamic=False)
            Timing: --warmup (20) untimed runs, then --iters (100) timed runs, each between two
            CUDA events, with a synchronize before each run so it starts on an idle GPU (what
            kiln's synchronous execute() sees); the median is reported. When that median is
            under --group-below-ms (0.1 ms), the runs are timed again in groups of K back to back
            (one event pair per group, K chosen so a group takes >= 1 ms) and the median of the
            per-run group means is reported instead; each result says which ("timing").
  accuracy  `kiln run ENGINE --input NAME=FILE.npy --output-dir D` on the saved batch-2
            reference inputs (rows repeated to fill a larger batch, one run per row for batch 1),
            against the PyTorch FP32 output (GPU, TF32 off): relative L2 error
            ||kiln - ref|| / ||ref|| and top-1 agreement (arg-max over the last axis).
            Targets: fp32 rel L2 <= 1e-4; fp16/bf16/tf32 rel L2 <= 1e-2 and top-1 >= 99%.
            The PyTorch eager model in the row's precision gets the same check, as a baseline.

Scheduling: kiln and the cheap peers (eager, cudagraph) run first for every row; then
compile-ro for every row, then compile-ma, each only while the --time-budget-s left is larger
than its estimate (otherwise "skipped: time budget"). A failing step records its error text and
the run goes on. Results are rewritten to --out after every step; a markdown table is printed
at the end.
"""
import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import export_gpu_models as egm  # noqa: E402

PEERS = ["eager", "cudagraph", "compile-ro", "compile-ma"]
PEER_TITLES = {"eager": "eager", "cudagraph": "cuda graph", "compile-ro": "compile-ro", "compile-ma": "compile-ma"}
CHANNELS_LAST = {"resnet50", "mobilenetv3"}          # the convolutional nets (ViT is a transformer)
PRECISION_FLAGS = {"fp32": [], "fp16": ["--fp16"], "bf16": ["--bf16"], "tf32": ["--tf32"]}
TARGETS = {"fp32": {"rel_l2": 1e-4, "top1": None}, "tf32": {"rel_l2": 1e-2, "top1": 0.99},
           "fp16": {"rel_l2": 1e-2, "top1": 0.99}, "bf16": {"rel_l2": 1e-2, "top1": 0.99}}

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def short_error(e, limit=4000):
    text = f"{type(e).__name__}: {e}" if isinstance(e, BaseException) else str(e)
    return text if len(text) <= limit else text[:limit] + " ..."


class Budget:
    def __init__(self, seconds):
        self.seconds = seconds

    def left(self):
        return self.seconds - (time.time() - T0)

    def fits(self, estimate_s):
        return self.left() >= estimate_s


# ----------------------------------------------------------------------------- kiln


class KilnError(RuntimeError):
    pass


def run_kiln(cmd, timeout_s):
    """Runs a kiln command; returns (stdout, stderr, seconds). Raises KilnError with the error
    line(s) on a non-zero exit or a timeout."""
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise KilnError(f"timed out after {timeout_s:.0f} s: {shlex.join(cmd)}") from e
    dt = time.time() - t0
    if p.returncode != 0:
        lines = (p.stderr + "\n" + p.stdout).strip().splitlines()
        err = [ln for ln in lines if ln.startswith("error")] or lines[-15:]
        raise KilnError(f"exit {p.returncode}: {shlex.join(cmd)}\n" + "\n".join(err)[-4000:])
    return p.stdout, p.stderr, dt


def shapes_arg(feeds):
    return ",".join(f"{k}:{'x'.join(str(d) for d in v.shape)}" for k, v in feeds.items())


def write_inputs(feeds, d):
    """Writes feeds as D/<name>.npy; returns the --input arguments."""
    os.makedirs(d, exist_ok=True)
    args = []
    for k, v in feeds.items():
        f = os.path.join(d, f"{k}.npy")
        np.save(f, np.ascontiguousarray(v))
        args += ["--input", f"{k}={f}"]
    return args


def kiln_build(args, onnx_path, engine, feeds, precision):
    cmd = [args.kiln, "build", onnx_path, "-o", engine, "--device", args.kiln_device,
           *PRECISION_FLAGS[precision], "--shapes", shapes_arg(feeds), *shlex.split(args.build_args)]
    if args.timing_cache:
        cmd += ["--timing-cache", os.path.join(args.work_dir, f"timing_{args.kiln_device}.cache")]
    out, err, dt = run_kiln(cmd, args.step_timeout_s)
    m = re.search(r"^Built .* in ([0-9.]+) s", out, re.M)
    return {"build_s": round(dt, 3), "build_reported_s": float(m.group(1)) if m else None,
            "build_cmd": shlex.join(cmd), "build_summary": out.strip()[-3000:],
            "build_warnings": [ln for ln in err.splitlines() if ln.startswith("warning")][:20]}


def kiln_inspect(args, engine):
    out, _, _ = run_kiln([args.kiln, "inspect", engine], 120)
    keep = ("Engine:", "Layers:", "Fused ops:", "Memory:", "engine:", "precision flags:", "tactics:")
    return [ln for ln in out.splitlines() if ln.startswith(keep)]


def kiln_bench(args, engine, input_args, json_path):
    cmd = [args.kiln, "bench", engine, *input_args, "--warmup-ms", str(args.kiln_warmup_ms),
           "--iterations", str(args.iters), "--duration-s", str(args.kiln_duration_s), "--json", json_path]
    if args.kiln_profile:
        cmd.append("--profile")
    run_kiln(cmd, args.step_timeout_s)
    with open(json_path) as f:
        j = json.load(f)
    layers = j.pop("layers", None)
    if layers:
        # Per-op totals and the slowest layers: what `kiln bench --profile` says costs most.
        by_op = {}
        for ly in layers:
            key = f"{ly['op']} [{ly['tactic']}]"
            n, ms = by_op.get(key, (0, 0.0))
            by_op[key] = (n + 1, ms + ly["ms"])
        total = sum(ly["ms"] for ly in layers) or 1.0
        j["profile_by_op"] = [{"op": k, "layers": n, "ms": round(ms, 4), "percent": round(100 * ms / total, 1)}
                              for k, (n, ms) in sorted(by_op.items(), key=lambda kv: -kv[1][1])]
        j["profile_top_layers"] = sorted(layers, key=lambda ly: -ly["ms"])[:12]
        j["profile_total_ms"] = round(total, 4)
    return j


class ErrorStats:
    """Accumulates ||a - b||^2, ||b||^2, max |a - b| and top-1 matches over chunks of rows."""

    def __init__(self):
        self.num = self.den = self.max_abs = 0.0
        self.top1_match = self.top1_total = self.nonfinite = 0

    def add(self, got, ref):
        if got.shape != ref.shape:
            raise ValueError(f"output shape {list(got.shape)} != reference shape {list(ref.shape)}")
        for r in range(got.shape[0]):
            a = got[r].astype(np.float64)
            b = ref[r].astype(np.float64)
            fin = np.isfinite(a)
            self.nonfinite += int(a.size - np.count_nonzero(fin))
            d = a - b
            self.num += float(np.sum(d * d))
            self.den += float(np.sum(b * b))
            self.max_abs = max(self.max_abs, float(np.max(np.abs(d))) if d.size else 0.0)
            if a.ndim >= 1 and a.shape[-1] > 1:
                self.top1_match += int(np.count_nonzero(np.argmax(a, -1) == np.argmax(b, -1)))
                self.top1_total += int(np.prod(a.shape[:-1]))

    def result(self, precision):
        rel = math.sqrt(self.num / self.den) if self.den > 0 else math.sqrt(self.num)
        if self.nonfinite:
            rel = float("nan")
        top1 = self.top1_match / self.top1_total if self.top1_total else None
        t = TARGETS.get(precision, TARGETS["fp16"])
        ok = (rel <= t["rel_l2"]) and (t["top1"] is None or top1 is None or top1 >= t["top1"])
        return {"rel_l2": rel, "top1": top1, "max_abs": self.max_abs, "nonfinite": self.nonfinite,
                "top1_positions": self.top1_total, "target_rel_l2": t["rel_l2"], "target_top1": t["top1"],
                "pass": bool(ok)}


def accuracy_chunks(n_ref, batch):
    """Index arrays into the reference rows, one per engine run of `batch` rows."""
    if batch >= n_ref:
        return [np.arange(batch) % n_ref]
    return [np.arange(k * batch, (k + 1) * batch) % n_ref for k in range(math.ceil(n_ref / batch))]


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def kiln_accuracy(args, engine, ref_inputs, out_name, ref_out, batch, precision, tmp):
    stats = ErrorStats()
    n_ref = ref_out.shape[0]
    chunks = accuracy_chunks(n_ref, batch)
    for i, idx in enumerate(chunks):
        d_in = os.path.join(tmp, f"acc_in{i}")
        d_out = os.path.join(tmp, f"acc_out{i}")
        shutil.rmtree(d_out, ignore_errors=True)
        input_args = write_inputs({k: v[idx] for k, v in ref_inputs.items()}, d_in)
        run_kiln([args.kiln, "run", engine, *input_args, "--output-dir", d_out], args.step_timeout_s)
        f = os.path.join(d_out, sanitize(out_name) + ".npy")
        if not os.path.exists(f):
            found = sorted(x for x in os.listdir(d_out) if x.endswith(".npy")) if os.path.isdir(d_out) else []
            if len(found) != 1:
                raise KilnError(f"kiln run wrote no '{sanitize(out_name)}.npy' in {d_out} (found {found})")
            f = os.path.join(d_out, found[0])
        got = np.load(f)
        stats.add(got, ref_out[idx])
        del got
        shutil.rmtree(d_out, ignore_errors=True)
        shutil.rmtree(d_in, ignore_errors=True)
    r = stats.result(precision)
    r["runs"] = len(chunks)
    return r


# ----------------------------------------------------------------------------- PyTorch peers


def torch_dtype(precision):
    import torch
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "tf32": torch.float32}[precision]


def set_torch_precision(precision):
    import torch
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True


class PeerModels:
    """The PyTorch models on the GPU, one per (model, dtype), kept across the phases."""

    def __init__(self):
        self.cache = {}

    def get(self, name, precision):
        import torch
        dt = torch_dtype(precision)
        key = (name, dt)
        if key not in self.cache:
            m = egm.build_model(name).to(device="cuda", dtype=dt)
            if name in CHANNELS_LAST:
                m = m.to(memory_format=torch.channels_last)
            self.cache[key] = m
        return self.cache[key]

    def inputs(self, name, precision, feeds):
        import torch
        dt = torch_dtype(precision)
        xs = []
        for v in feeds.values():
            t = torch.from_numpy(np.ascontiguousarray(v)).cuda()
            if t.is_floating_point():
                t = t.to(dt)
                if name in CHANNELS_LAST and t.dim() == 4:
                    t = t.contiguous(memory_format=torch.channels_last)
            xs.append(t)
        return xs

    def drop(self, name):
        for k in [k for k in self.cache if k[0] == name]:
            del self.cache[k]
        free_gpu()


def free_gpu():
    import torch
    gc.collect()
    torch.cuda.empty_cache()


@contextlib.contextmanager
def capturable_scalar_tensors():
    """During a CUDA graph capture, makes torch.tensor(python_scalar, device=cuda) a fill kernel
    (torch.full) instead of a copy from pageable host memory, which a capture refuses.
    transformers 5's mask code (masking_utils.eager_mask) does torch.tensor(0.0, device=...)
    in every forward. Same values; only during the capture."""
    import torch
    orig = torch.tensor

    def tensor(data, *a, **kw):
        dev = kw.get("device")
        if (not a and isinstance(data, (bool, int, float)) and dev is not None
                and set(kw) <= {"device", "dtype"} and torch.device(dev).type == "cuda"):
            return torch.full((), data, dtype=kw.get("dtype"), device=dev)
        return orig(data, *a, **kw)
    torch.tensor = tensor
    try:
        yield
    finally:
        torch.tensor = orig


def time_fn(fn, warmup, iters, group_below_ms):
    """Median ms of fn() timed with CUDA events: per run (synchronized before each), or per group
    of K back-to-back runs when the per-run median is below group_below_ms."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for s, e in ev:
        torch.cuda.synchronize()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in ev]
    med = statistics.median(ms)
    res = {"ms": med, "p90_ms": float(np.percentile(ms, 90)), "min_ms": min(ms), "iters": iters, "warmup": warmup,
           "timing": "per-iteration CUDA events, synchronized before each run"}
    if med < group_below_ms:
        k = max(2, math.ceil(1.0 / max(med, 1e-3)))
        groups = max(10, iters // 10)
        gev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(groups)]
        for s, e in gev:
            torch.cuda.synchronize()
            s.record()
            for _ in range(k):
                fn()
            e.record()
        torch.cuda.synchronize()
        per = [s.elapsed_time(e) / k for s, e in gev]
        res.update(ms=statistics.median(per), per_iteration_ms=med, min_ms=min(per), p90_ms=float(np.percentile(per, 90)),
                   iters=groups * k, timing=f"CUDA events per group of {k} back-to-back runs ({groups} groups)")
    return res


def quiet_autotune():
    """max-autotune prints a table per tuned op to stderr; keep the progress lines readable."""
    try:
        import torch._inductor.config as ic
        import torch._inductor.select_algorithm as sa
        for k, v in (("autotune_num_choices_displayed", 0), ("max_autotune_report_choices_stats", False)):
            if hasattr(ic, k):
                setattr(ic, k, v)
        if hasattr(sa, "PRINT_AUTOTUNE"):
            sa.PRINT_AUTOTUNE = False
    except Exception:  # noqa: BLE001 - cosmetic only
        pass


def rel_l2_torch(a, b):
    """||a - b|| / ||b|| in float32 (a peer's output vs eager's, as a sanity check)."""
    a = a.float()
    b = b.float()
    d = b.norm().item()
    return (a - b).norm().item() / d if d > 0 else (a - b).norm().item()


def measure_peer(peer, model, xs, args):
    """Times one PyTorch peer; returns its result dict."""
    import torch
    res = {}
    with torch.inference_mode():
        if peer == "eager":
            def fn():
                return model(*xs)
            res.update(time_fn(fn, args.warmup, args.iters, args.group_below_ms))
        elif peer == "cudagraph":
            static = [x.clone() for x in xs]
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    model(*static)
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            t0 = time.time()
            with capturable_scalar_tensors(), torch.cuda.graph(g):
                out = model(*static)  # noqa: F841 - keeps the graph's output alive
            torch.cuda.synchronize()
            res["capture_s"] = round(time.time() - t0, 3)
            g.replay()
            res["rel_l2_vs_eager"] = rel_l2_torch(out, model(*static))
            res.update(time_fn(g.replay, args.warmup, args.iters, args.group_below_ms))
            del g, out, static
        elif peer in ("compile-ro", "compile-ma"):
            import torch._dynamo
            torch._dynamo.reset()
            mode = "reduce-overhead" if peer == "compile-ro" else "max-autotune"
            quiet_autotune()
            cm = torch.compile(model, mode=mode, dynamic=False)
            mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

            def fn():
                if mark is not None:
                    mark()
                return cm(*xs)
            t0 = time.time()
            fn()
            torch.cuda.synchronize()
            res["compile_s"] = round(time.time() - t0, 2)
            res["rel_l2_vs_eager"] = rel_l2_torch(fn().clone(), model(*xs))
            res.update(time_fn(fn, args.warmup, args.iters, args.group_below_ms))
            del cm
            torch._dynamo.reset()
        else:
            raise ValueError(peer)
    free_gpu()
    return res


def torch_accuracy(model, name, precision, ref_inputs, ref_out, peers):
    """The PyTorch eager model in this precision vs the FP32 reference (baseline for kiln's)."""
    import torch
    xs = peers.inputs(name, precision, ref_inputs)
    with torch.inference_mode():
        out = model(*xs).float().cpu().numpy()
    st = ErrorStats()
    st.add(out, ref_out)
    return st.result(precision)


# ----------------------------------------------------------------------------- report


def fmt_ms(p):
    if p is None:
        return "-"
    if "ms" in p:
        return f"{p['ms']:.3f}"
    if "skipped" in p:
        return "skip"
    if "error" in p:
        return "err"
    return "-"


def best_peer(row):
    best = None
    for k, p in row.get("peers", {}).items():
        if p and "ms" in p and (best is None or p["ms"] < best[1]):
            best = (k, p["ms"])
    return best


def finish_row(row):
    b = best_peer(row)
    row["best_peer"] = b[0] if b else None
    row["best_peer_ms"] = b[1] if b else None
    k = row.get("kiln_ms")
    row["best_peer_over_kiln"] = (b[1] / k) if (b and k) else None
    row["throughput_items_s"] = (row["batch"] * 1000.0 / k) if k else None


def markdown_table(rows, peers):
    head = ["model", "batch", "precision", "kiln ms"] + [PEER_TITLES[p] for p in PEERS] + \
        ["best peer", "best peer / kiln", "throughput (items/s)", "rel L2", "top-1"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 3 else "---:" for i in range(len(head))) + "|"]
    for r in rows:
        kerr = set(r.get("errors", {})) & {"kiln", "build", "bench", "export"}
        kiln = f"{r['kiln_ms']:.3f}" if r.get("kiln_ms") else ("err" if kerr else "-")
        cells = [r["model"], str(r["batch"]), r["precision"], kiln]
        for p in PEERS:
            cells.append(fmt_ms(r.get("peers", {}).get(p)) if p in peers else "-")
        cells.append(f"{r['best_peer']} {r['best_peer_ms']:.3f}" if r.get("best_peer") else "-")
        cells.append(f"{r['best_peer_over_kiln']:.2f}x" if r.get("best_peer_over_kiln") else "-")
        cells.append(f"{r['throughput_items_s']:.1f}" if r.get("throughput_items_s") else "-")
        a = r.get("accuracy")
        if a and "rel_l2" in a:
            mark = "" if a["pass"] else " FAIL"
            cells.append(f"{a['rel_l2']:.2e}{mark}")
            cells.append(f"{100 * a['top1']:.2f}%" if a.get("top1") is not None else "-")
        else:
            cells += ["err" if "accuracy" in r.get("errors", {}) else "-", "-"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def error_lines(doc):
    lines = []
    for name, e in doc.get("export_errors", {}).items():
        lines.append(f"- {name} export: {e.splitlines()[0][:300] if e else ''}")
    for r in doc["rows"]:
        tag = f"{r['model']} b{r['batch']} {r['precision']}"
        for step, e in r.get("errors", {}).items():
            first = [ln for ln in e.splitlines() if ln.strip()]
            msg = " / ".join(first[:3])[:400]
            lines.append(f"- {tag} {step}: {msg}")
        for p, v in r.get("peers", {}).items():
            if v and "error" in v:
                lines.append(f"- {tag} {p}: {v['error'].splitlines()[0][:300] if v['error'] else ''}")
            elif v and "skipped" in v:
                lines.append(f"- {tag} {p}: skipped, {v['skipped']}")
    return lines


def torch_acc_table(doc):
    rows = doc.get("torch_accuracy", [])
    if not rows:
        return ""
    out = ["| model | precision | PyTorch eager rel L2 vs FP32 | top-1 |", "|---|---|---:|---:|"]
    for r in rows:
        if "rel_l2" in r:
            t = f"{100 * r['top1']:.2f}%" if r.get("top1") is not None else "-"
            out.append(f"| {r['model']} | {r['precision']} | {r['rel_l2']:.2e} | {t} |")
        else:
            out.append(f"| {r['model']} | {r['precision']} | err | - |")
    return "\n".join(out)


def write_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    os.replace(tmp, path)


def environment(args):
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
            "python": platform.python_version(), "kiln": args.kiln, "kiln_device": args.kiln_device,
            "argv": sys.argv[1:]}
    try:
        import torch
        meta["torch"] = torch.__version__
        meta["cuda"] = torch.version.cuda
        meta["cudnn"] = torch.backends.cudnn.version()
        if torch.cuda.is_available():
            meta["gpu"] = torch.cuda.get_device_name(0)
    except Exception as e:  # noqa: BLE001
        meta["torch_error"] = short_error(e)
    for mod in ("torchvision", "transformers", "onnx", "onnxruntime"):
        try:
            meta[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            meta[mod] = None
    return meta


# ----------------------------------------------------------------------------- main


def parse_list(s):
    return [x.strip() for x in s.split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--kiln", required=True, help="the kiln binary ('none': PyTorch peers only)")
    ap.add_argument("--models", default=egm.DEFAULT_MODELS)
    ap.add_argument("--precisions", default="fp16", help="comma-separated: fp16, fp32, bf16, tf32 (default fp16)")
    ap.add_argument("--batches", help="batch sizes for every model (overrides the two below)")
    ap.add_argument("--cnn-batches", default="1,256", help="image models (default 1,256)")
    ap.add_argument("--nlp-batches", default="1,64", help="BERT and GPT-2, sequence 128 (default 1,64)")
    ap.add_argument("--peers", default="eager,cudagraph,compile-ro",
                    help=f"PyTorch peers, from {','.join(PEERS)} (default eager,cudagraph,compile-ro)")
    ap.add_argument("--out", default="gpu_results.json", help="JSON results (rewritten after every step)")
    ap.add_argument("--time-budget-s", type=float, default=450,
                    help="seconds for the whole run; compile peers that would not fit are skipped (default 450)")
    ap.add_argument("--model-dir", default=os.path.join(ROOT, "build", "gpu_models"),
                    help="ONNX files and references (exported when missing)")
    ap.add_argument("--work-dir", default=os.path.join(ROOT, "build", "gpu_bench"), help="engines and scratch files")
    ap.add_argument("--kiln-device", default="cuda", help="kiln build --device (cpu: a dry run of this script)")
    ap.add_argument("--build-args", default="", help="extra kiln build flags, e.g. '-O 1'")
    ap.add_argument("--timing-cache", action="store_true", help="kiln build with a timing cache in --work-dir")
    ap.add_argument("--iters", type=int, default=100, help="timed runs (peers; kiln bench --iterations)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed runs before the peers' timed runs")
    ap.add_argument("--kiln-warmup-ms", type=int, default=500)
    ap.add_argument("--kiln-duration-s", type=float, default=1.0, help="kiln bench --duration-s (at least)")
    ap.add_argument("--group-below-ms", type=float, default=0.1,
                    help="time peers per group of runs when the per-run median is below this")
    ap.add_argument("--step-timeout-s", type=float, default=300, help="timeout of one kiln command")
    ap.add_argument("--compile-estimate-s", type=float, default=30,
                    help="budget estimate of a compile-ro before one was measured (default 30; "
                         "compile-ma: max(180, 20x the row's compile-ro))")
    ap.add_argument("--no-accuracy", action="store_true")
    ap.add_argument("--kiln-profile", action="store_true",
                    help="kiln bench --profile: per-op totals and the slowest layers in the JSON and the log")
    ap.add_argument("--keep-engines", action="store_true", help="keep the engine files in --work-dir")
    args = ap.parse_args()

    models = parse_list(args.models)
    bad = [m for m in models if m not in egm.MODELS]
    if bad:
        ap.error(f"unknown model(s) {bad}; known: {egm.DEFAULT_MODELS}")
    precisions = parse_list(args.precisions)
    bad = [p for p in precisions if p not in PRECISION_FLAGS]
    if bad:
        ap.error(f"unknown precision(s) {bad}; known: {','.join(PRECISION_FLAGS)}")
    peers = parse_list(args.peers)
    bad = [p for p in peers if p not in PEERS]
    if bad:
        ap.error(f"unknown peer(s) {bad}; known: {','.join(PEERS)}")
    use_kiln = args.kiln.lower() != "none"
    if use_kiln:
        args.kiln = os.path.abspath(args.kiln) if os.path.sep in args.kiln else (shutil.which(args.kiln) or args.kiln)
        if not (os.path.isfile(args.kiln) and os.access(args.kiln, os.X_OK)):
            ap.error(f"--kiln {args.kiln}: not an executable file")
    os.makedirs(args.model_dir, exist_ok=True)
    os.makedirs(args.work_dir, exist_ok=True)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    budget = Budget(args.time_budget_s)

    import torch
    if not torch.cuda.is_available():
        log("warning: PyTorch sees no GPU: the peers will fail (kiln steps still run)")
    doc = {"meta": environment(args), "exports": {}, "export_errors": {}, "rows": [], "torch_accuracy": []}
    log(f"gpu {doc['meta'].get('gpu')}, torch {doc['meta'].get('torch')}, kiln {args.kiln if use_kiln else 'none'} "
        f"(--device {args.kiln_device}); models {models}, precisions {precisions}, peers {peers}, "
        f"budget {args.time_budget_s:.0f} s")

    # Phase 0: exports.
    refs = {}
    for name in models:
        try:
            info = egm.export_model(name, args.model_dir)
            doc["exports"][name] = info
            refs[name] = egm.load_reference(info["ref"])
        except Exception as e:  # noqa: BLE001
            doc["export_errors"][name] = short_error(e) + "\n" + traceback.format_exc()[-3000:]
            log(f"{name}: export FAILED: {short_error(e, 300)}")
        write_json(args.out, doc)

    # Rows.
    rows = []
    for name in models:
        kind = egm.MODELS[name]["kind"]
        bl = parse_list(args.batches or (args.cnn_batches if kind == "cnn" else args.nlp_batches))
        for prec in precisions:
            for b in bl:
                row = {"model": name, "batch": int(b), "precision": prec, "peers": {}, "errors": {}}
                if name in doc["export_errors"]:
                    row["errors"]["export"] = doc["export_errors"][name].splitlines()[0]
                rows.append(row)
    doc["rows"] = rows
    pm = PeerModels()

    def feeds_for(name, batch):
        ref_in = refs[name][0]
        n = next(iter(ref_in.values())).shape[0]
        idx = np.arange(batch) % n
        return {k: np.ascontiguousarray(v[idx]) for k, v in ref_in.items()}

    # Phase 1: kiln + accuracy + cheap peers, row by row.
    baseline_done = set()
    for row in rows:
        name, b, prec = row["model"], row["batch"], row["precision"]
        if name not in refs:
            continue
        tag = f"{name} b{b} {prec}"
        onnx_path = doc["exports"][name]["onnx"]
        ref_in, out_name, ref_out, _ = refs[name]
        feeds = feeds_for(name, b)
        tmp = os.path.join(args.work_dir, f"{name}_b{b}_{prec}")
        os.makedirs(tmp, exist_ok=True)
        engine = os.path.join(args.work_dir, f"{name}_b{b}_{prec}.kiln")
        if use_kiln:
            built = False
            if not budget.fits(20):
                row["errors"]["kiln"] = "skipped: time budget"
            else:
                try:
                    log(f"{tag}: kiln build ...")
                    row.update(kiln_build(args, onnx_path, engine, feeds, prec))
                    built = True
                    log(f"{tag}: built in {row['build_s']:.1f} s")
                    try:
                        row["engine_info"] = kiln_inspect(args, engine)
                    except Exception as e:  # noqa: BLE001 - informational
                        row["engine_info"] = [short_error(e, 500)]
                except Exception as e:  # noqa: BLE001
                    row["errors"]["build"] = short_error(e)
                    log(f"{tag}: kiln build FAILED: {short_error(e, 400)}")
            if built:
                try:
                    input_args = write_inputs(feeds, os.path.join(tmp, "bench_in"))
                    j = kiln_bench(args, engine, input_args, os.path.join(tmp, "bench.json"))
                    row["kiln_bench"] = j
                    row["kiln_ms"] = j["latency_ms"]["median"]
                    row["kiln_p90_ms"] = j["latency_ms"].get("p90")
                    log(f"{tag}: kiln median {row['kiln_ms']:.3f} ms ({j.get('iterations')} runs)")
                    for o in j.get("profile_by_op", [])[:10]:
                        log(f"{tag}:   profile {o['ms']:8.4f} ms {o['percent']:5.1f}%  {o['layers']:3d} x {o['op']}")
                except Exception as e:  # noqa: BLE001
                    row["errors"]["bench"] = short_error(e)
                    log(f"{tag}: kiln bench FAILED: {short_error(e, 400)}")
                shutil.rmtree(os.path.join(tmp, "bench_in"), ignore_errors=True)
                if not args.no_accuracy:
                    try:
                        row["accuracy"] = kiln_accuracy(args, engine, ref_in, out_name, ref_out, b, prec, tmp)
                        a = row["accuracy"]
                        top1 = f"{100 * a['top1']:.2f}%" if a["top1"] is not None else "-"
                        log(f"{tag}: accuracy rel L2 {a['rel_l2']:.2e}, top-1 {top1} "
                            f"({'PASS' if a['pass'] else 'FAIL'})")
                    except Exception as e:  # noqa: BLE001
                        row["errors"]["accuracy"] = short_error(e)
                        log(f"{tag}: accuracy FAILED: {short_error(e, 400)}")
                if not args.keep_engines and os.path.exists(engine):
                    os.remove(engine)
        write_json(args.out, doc)

        cheap = [p for p in peers if p in ("eager", "cudagraph")]
        if cheap or (name, prec) not in baseline_done:
            try:
                set_torch_precision(prec)
                model = pm.get(name, prec)
                if (name, prec) not in baseline_done and not args.no_accuracy:
                    baseline_done.add((name, prec))
                    try:
                        ta = torch_accuracy(model, name, prec, ref_in, ref_out, pm)
                        doc["torch_accuracy"].append({"model": name, "precision": prec, **ta})
                        log(f"{name} {prec}: PyTorch eager vs FP32 rel L2 {ta['rel_l2']:.2e}")
                    except Exception as e:  # noqa: BLE001
                        doc["torch_accuracy"].append({"model": name, "precision": prec, "error": short_error(e)})
                xs = pm.inputs(name, prec, feeds)
                for p in cheap:
                    try:
                        row["peers"][p] = measure_peer(p, model, xs, args)
                        log(f"{tag}: {p} {row['peers'][p]['ms']:.3f} ms")
                    except Exception as e:  # noqa: BLE001
                        row["peers"][p] = {"error": short_error(e) + "\n" + traceback.format_exc()[-2000:]}
                        log(f"{tag}: {p} FAILED: {short_error(e, 300)}")
                    write_json(args.out, doc)
                del xs
            except Exception as e:  # noqa: BLE001
                for p in cheap:
                    row["peers"].setdefault(p, {"error": short_error(e)})
                log(f"{tag}: PyTorch model FAILED: {short_error(e, 300)}")
            free_gpu()
        shutil.rmtree(tmp, ignore_errors=True)
        finish_row(row)
        write_json(args.out, doc)

    # Phases 2 and 3: torch.compile peers while the budget lasts.
    compile_times = {"compile-ro": [], "compile-ma": []}
    for p in [p for p in ("compile-ro", "compile-ma") if p in peers]:
        for row in rows:
            name, b, prec = row["model"], row["batch"], row["precision"]
            if name not in refs:
                continue
            tag = f"{name} b{b} {prec}"
            # Estimates: the slowest compile so far; before any, --compile-estimate-s for
            # compile-ro, and for compile-ma 20x this row's compile-ro, at least 180 s (seen on
            # an H200: ResNet-50 batch 1, reduce-overhead 13 s, max-autotune 239 s).
            est = max(compile_times[p] + [args.compile_estimate_s])
            if p == "compile-ma":
                ro = row["peers"].get("compile-ro", {}).get("compile_s") or args.compile_estimate_s
                est = max(compile_times[p] + [max(180.0, 20 * ro)])
            if not budget.fits(est):
                row["peers"][p] = {"skipped": f"time budget ({budget.left():.0f} s left, estimate {est:.0f} s)"}
                log(f"{tag}: {p} skipped ({budget.left():.0f} s left, estimate {est:.0f} s)")
                continue
            try:
                set_torch_precision(prec)
                model = pm.get(name, prec)
                xs = pm.inputs(name, prec, feeds_for(name, b))
                log(f"{tag}: {p} compiling ...")
                r = measure_peer(p, model, xs, args)
                row["peers"][p] = r
                compile_times[p].append(r["compile_s"])
                log(f"{tag}: {p} {r['ms']:.3f} ms (compile {r['compile_s']:.0f} s)")
                del xs
            except Exception as e:  # noqa: BLE001
                row["peers"][p] = {"error": short_error(e) + "\n" + traceback.format_exc()[-2000:]}
                log(f"{tag}: {p} FAILED: {short_error(e, 300)}")
                free_gpu()
            finish_row(row)
            write_json(args.out, doc)

    for row in rows:
        finish_row(row)
    doc["meta"]["wall_s"] = round(time.time() - T0, 1)
    write_json(args.out, doc)
    print(flush=True)
    print(markdown_table(rows, peers), flush=True)
    t = torch_acc_table(doc)
    if t:
        print("\nBaseline: PyTorch eager in the row's precision vs the FP32 reference (batch 2):\n", flush=True)
        print(t, flush=True)
    errs = error_lines(doc)
    if errs:
        print("\nErrors and skips:", flush=True)
        print("\n".join(errs), flush=True)
    print(f"\nkiln ms: `kiln bench` median; peers: median ms (see 'timing' in the JSON); best peer / kiln > 1: "
          f"kiln is faster. Wrote {args.out} in {time.time() - T0:.0f} s.", flush=True)


if __name__ == "__main__":
    main()
