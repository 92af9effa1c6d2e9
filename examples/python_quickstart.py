#!/usr/bin/env python3
"""kiln from Python on one page: export a PyTorch model with torch.onnx.export, build a
kiln engine (FP16 when a GPU is present), run it, compare it with PyTorch's own output
and print the speedup.

    # torchvision resnet18 (random weights: nothing to download); needs torch + torchvision
    PYTHONPATH=build/python python3 examples/python_quickstart.py

    # any ONNX model, no torch needed: checked against kiln's reference backend, timed
    # against an unoptimized engine (opt_level=0)
    PYTHONPATH=build/python build/venv/bin/python examples/python_quickstart.py --model models/sample_cnn.onnx

Exits with status 1 when the engine's output is not within tolerance.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import kiln


def median_ms(fn, runs):
    """Median wall time of fn() in milliseconds, after two warm-up calls."""
    fn()
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def describe_build(engine):
    s = engine.summary
    fused = sorted({layer.op for layer in engine.layers if layer.op.startswith("Fused")})
    print(f"built in {s.build_seconds:.2f} s: {s.layers} layers ({s.fusions} fusions"
          f"{': ' + ', '.join(fused) if fused else ''}), device {engine.device}, "
          f"{kiln_bytes(s.weight_bytes)} weights, {kiln_bytes(s.peak_activation_bytes)} activations")


def kiln_bytes(n):
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def build(path, use_gpu, **options):
    """FP16 on the GPU when there is one and this kiln has a CUDA backend, else FP32 on the CPU."""
    if use_gpu:
        try:
            return kiln.build(path, device="cuda", fp16=True, **options)
        except kiln.UnsupportedError as e:
            print(f"note: {e}; building for the CPU instead")
    return kiln.build(path, **options)


def torch_model(arch, batch):
    import torch
    if arch == "resnet18":
        import torchvision
        model = torchvision.models.resnet18(weights=None)  # random weights: nothing to download
        shape = (batch, 3, 224, 224)
    else:  # "tiny": a small CNN, for quick runs
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
        shape = (batch, 3, 64, 64)
    torch.manual_seed(0)
    for p in model.parameters():  # fixed weights whatever the torch version's init
        torch.nn.init.normal_(p, std=0.05)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval(), torch.randn(*shape)


def run_torch(args):
    import torch
    use_gpu = torch.cuda.is_available()
    model, x = torch_model(args.arch, args.batch)
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, f"{args.arch}.onnx")
        torch.onnx.export(model, x, onnx_path, input_names=["input"], output_names=["logits"], opset_version=17)
        print(f"exported {args.arch} (batch {args.batch}) with torch.onnx.export: "
              f"{os.path.getsize(onnx_path) / 2**20:.1f} MiB")
        # The CPU engine gets the thread count PyTorch chose, for a like-for-like timing.
        threads = torch.get_num_threads()
        engine = build(onnx_path, use_gpu, threads=threads, progress=args.progress)
    describe_build(engine)
    ctx = engine.create_execution_context()

    # Run: the torch tensor goes in through DLPack, without a copy.
    got = ctx.run({"input": x})["logits"]
    with torch.inference_mode():
        want = model(x).numpy()
    err = float(np.abs(got - want).max())
    rel = err / max(float(np.abs(want).max()), 1e-30)
    top1 = float((got.argmax(1) == want.argmax(1)).mean())
    tol = 1e-2 if engine.device == "cuda" else 1e-3  # fp16 on the GPU, fp32 on the CPU
    ok = rel <= tol and top1 == 1.0
    print(f"check vs PyTorch: logits {got.dtype}{list(got.shape)}, max abs err {err:.3e} "
          f"(relative {rel:.2e}, tolerance {tol:g}), top-1 agreement {top1:.0%} -> {'PASS' if ok else 'FAIL'}")

    with torch.inference_mode():
        t_torch = median_ms(lambda: model(x), args.runs)
    t_kiln = median_ms(lambda: ctx.run({"input": x}), args.runs)
    print(f"latency (median of {args.runs}, {threads} CPU thread{'s' if threads != 1 else ''}): kiln {t_kiln:.3f} ms, PyTorch {t_torch:.3f} ms "
          f"-> speedup {t_torch / t_kiln:.2f}x")
    return ok


def run_onnx(args):
    engine = build(args.model, False, progress=args.progress)
    describe_build(engine)
    ctx = engine.create_execution_context()
    rng = np.random.default_rng(0)
    inputs = {}
    for d in engine.inputs:
        shape = tuple(1 if n is None else n for n in d.shape)
        if d.dtype.startswith("float"):
            inputs[d.name] = rng.uniform(-1, 1, shape).astype(d.dtype)
        else:
            inputs[d.name] = np.zeros(shape, dtype=d.dtype)
    outputs = ctx.run(inputs)
    for name, value in outputs.items():
        print(f"output {name}: {value.dtype}{list(value.shape)}")

    # The reference: the original model on kiln's reference backend, on the same inputs.
    report = kiln.compare(args.model, engine, inputs)
    for o in report.outputs:
        print(f"check vs reference backend: {o.name} max abs err {o.max_abs_err:.3e}, "
              f"rel L2 err {o.rel_l2_err:.3e} -> {'PASS' if o.passed else 'FAIL'}")

    unoptimized = kiln.build(args.model, opt_level=0, time_tactics=False)
    t_opt = kiln.bench(engine, inputs, iterations=args.runs, duration_s=0)["latency_ms"]["median"]
    t_base = kiln.bench(unoptimized, inputs, iterations=args.runs, duration_s=0)["latency_ms"]["median"]
    print(f"latency (median of {args.runs}): kiln {t_opt:.3f} ms, unoptimized (opt_level=0) {t_base:.3f} ms "
          f"-> speedup {t_base / t_opt:.2f}x")
    return report.passed


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="an ONNX model to use instead of exporting one from PyTorch (no torch needed)")
    p.add_argument("--arch", default="resnet18", choices=["resnet18", "tiny"], help="PyTorch model to export")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=20, help="timed runs per engine")
    p.add_argument("--progress", action="store_true", help="draw a build progress bar")
    args = p.parse_args()
    print(f"kiln {kiln.__version__}, Python {sys.version.split()[0]}, numpy {np.__version__}")
    if not args.model:
        try:
            import torch  # noqa: F401
        except ImportError:
            p.error("torch is not installed: give --model MODEL.onnx to run without it")
    ok = run_onnx(args) if args.model else run_torch(args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
