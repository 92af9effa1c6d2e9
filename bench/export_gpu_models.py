#!/usr/bin/env python3
"""Export the GPU benchmark models to ONNX, with reference inputs and FP32 PyTorch outputs.

    python3 bench/export_gpu_models.py OUTDIR [--models resnet50,mobilenetv3,vit_b_16,bert_base,gpt2]

For each model (random weights, torch.manual_seed(0), FP32):
  OUTDIR/<name>.onnx       opset 18, weights embedded, dynamic batch axis named "batch"
  OUTDIR/<name>_ref.npz    batch-2 reference inputs ("input.<name>") and PyTorch FP32 outputs
                           ("output.<name>"), computed on the GPU with TF32 off (CPU when
                           there is no GPU; the file's "meta" entry says which)
  OUTDIR/<name>.export.json how it was exported (exporter, opset, seconds, ONNX Runtime check)
  OUTDIR/<name>.export.log  the exporters' warnings (TracerWarnings name traced-as-constant code)

Models (inputs -> the one output):
  resnet50, mobilenetv3, vit_b_16   torchvision resnet50(), mobilenet_v3_large(), vit_b_16():
                                    input float32[batch,3,224,224] -> logits [batch,1000]
  bert_base                         transformers BertModel(BertConfig()), eager attention:
                                    input_ids, attention_mask int64[batch,128]
                                    -> last_hidden_state [batch,128,768]
  gpt2                              transformers GPT2LMHeadModel(GPT2Config()), eager attention,
                                    use_cache=False: input_ids int64[batch,128]
                                    -> logits [batch,128,50257]

Two changes to the plain random init, so that the FP16 accuracy check means something:
MobileNetV3's BatchNorm statistics are calibrated on random images (else its logits are ~1e-10,
under FP16's range), and ViT's zero-initialized head gets N(0, 0.02) weights (else every logit
is 0). PyTorch's own FP16 error vs FP32 on the batch-2 references is then about 1e-3 to 6e-3
rel L2 for every model (gpu_bench.py prints it as a baseline).

The TorchScript exporter (dynamo=False) is tried first; if it fails, the dynamo exporter
(dynamo=True). The script prints which one each model used. The exported file is checked with
ONNX Runtime (CPU) on the reference inputs against the PyTorch output (--no-ort-check skips).
gpu_bench.py imports this module (build_model, MODELS, export_model) for its PyTorch peers.
"""
import argparse
import contextlib
import io
import json
import os
import sys
import time
import traceback

import numpy as np

SEQ = 128           # sequence length of the transformer models
REF_BATCH = 2       # batch of the reference inputs/outputs
OPSET = 18

# name -> kind ("cnn" or "nlp"), inputs [(name, per-sample dims, numpy dtype)], output name
MODELS = {
    "resnet50": {"kind": "cnn", "inputs": [("input", (3, 224, 224), "float32")], "output": "logits"},
    "mobilenetv3": {"kind": "cnn", "inputs": [("input", (3, 224, 224), "float32")], "output": "logits"},
    "vit_b_16": {"kind": "cnn", "inputs": [("input", (3, 224, 224), "float32")], "output": "logits"},
    "bert_base": {"kind": "nlp", "inputs": [("input_ids", (SEQ,), "int64"), ("attention_mask", (SEQ,), "int64")],
                  "output": "last_hidden_state"},
    "gpt2": {"kind": "nlp", "inputs": [("input_ids", (SEQ,), "int64")], "output": "logits"},
}
DEFAULT_MODELS = ",".join(MODELS)


def log(*a):
    print(*a, flush=True)


def _hf_config(cls, **kw):
    """A transformers config with eager (plain-op) attention, for any transformers 4.36+/5.x."""
    try:
        cfg = cls(attn_implementation="eager", **kw)
    except TypeError:
        cfg = cls(**kw)
    try:
        cfg._attn_implementation = "eager"
    except Exception:  # noqa: BLE001 - older/newer versions may not allow setting it; the kwarg above did
        pass
    return cfg


def build_model(name):
    """The FP32 torch.nn.Module for `name`, random weights from torch.manual_seed(0), eval mode.

    Every module takes the inputs of MODELS[name] positionally and returns one tensor."""
    import torch
    torch.manual_seed(0)
    if name in ("resnet50", "mobilenetv3", "vit_b_16"):
        import torchvision
        ctor = {"resnet50": torchvision.models.resnet50, "mobilenetv3": torchvision.models.mobilenet_v3_large,
                "vit_b_16": torchvision.models.vit_b_16}[name]
        m = ctor()
        if name == "vit_b_16":
            # torchvision zero-initializes the classifier head: every logit would be 0.
            torch.nn.init.normal_(m.heads.head.weight, std=0.02)
        if name == "mobilenetv3":
            # With the default BatchNorm statistics its activations vanish (logits ~1e-10).
            # Not for ResNet-50: calibrated, its FP16 error grows 50x (3e-2 rel L2 in PyTorch).
            _calibrate_batchnorm(m)
        return m.eval()
    if name == "bert_base":
        from transformers import BertConfig, BertModel

        class Bert(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = BertModel(_hf_config(BertConfig), add_pooling_layer=False)

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state
        return Bert().eval()
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        class GPT2(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = GPT2LMHeadModel(_hf_config(GPT2Config, use_cache=False))

            def forward(self, input_ids):
                return self.m(input_ids=input_ids, use_cache=False, return_dict=True).logits
        return GPT2().eval()
    raise ValueError(f"unknown model '{name}' (known: {DEFAULT_MODELS})")


def _calibrate_batchnorm(model, batches=2, batch=16, var_floor=1e-2):
    """Sets BatchNorm running statistics from random N(0,1) images (train-mode passes, cumulative
    average), the variances floored at var_floor (a BatchNorm gain of at most 10: near-dead
    channels would otherwise amplify rounding noise 100x). With the defaults (mean 0, var 1) a
    random-weight MobileNetV3's activations vanish through the layers (logits ~1e-10, below
    FP16's range), which makes an FP16 accuracy check meaningless. Deterministic on the CPU
    (up to summation order across thread counts)."""
    import torch
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    g = torch.Generator().manual_seed(1)
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(batch, 3, 224, 224, generator=g))
    for m in bns:
        m.momentum = 0.1
        m.running_var.clamp_(min=var_floor)
    model.eval()


def attn_impl(model):
    """The attention implementation a transformers model ended up with (None for others)."""
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            return cfg._attn_implementation
    return None


def reference_inputs(name, batch=REF_BATCH, seed=0):
    """Deterministic numpy inputs for `name` at `batch` (dict name -> array)."""
    spec = MODELS[name]
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp, dims, dtype in spec["inputs"]:
        shape = (batch,) + tuple(dims)
        if inp == "input":
            feeds[inp] = rng.standard_normal(shape, dtype=np.float32)
        elif inp == "input_ids":
            vocab = 30522 if name == "bert_base" else 50257
            feeds[inp] = rng.integers(0, vocab, shape, dtype=np.int64)
        elif inp == "attention_mask":
            m = np.ones(shape, dtype=np.int64)
            for b in range(1, batch, 2):      # every second row padded: last quarter masked out
                m[b, SEQ - SEQ // 4:] = 0
            feeds[inp] = m
        else:
            raise AssertionError(inp)
    return feeds


def _rel_l2(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    d = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / d) if d > 0 else float(np.linalg.norm(a - b))


def _torch_export(model, args, path, input_names, output_names, dynamo):
    import torch
    dyn_axes = {n: {0: "batch"} for n in input_names + output_names}
    kw = dict(input_names=input_names, output_names=output_names, opset_version=OPSET)
    if not dynamo:
        kw.update(dynamic_axes=dyn_axes, do_constant_folding=True)
        try:
            torch.onnx.export(model, args, path, dynamo=False, **kw)
        except TypeError as e:  # torch without the dynamo argument (< 2.5): TorchScript is the only exporter
            if "dynamo" not in str(e):
                raise
            torch.onnx.export(model, args, path, **kw)
        return
    batch = torch.export.Dim("batch", min=1, max=4096)
    import inspect
    params = list(inspect.signature(model.forward).parameters)
    dynamic_shapes = {p: {0: batch} for p in params[:len(args)]}
    try:
        torch.onnx.export(model, args, path, dynamo=True, dynamic_shapes=dynamic_shapes, external_data=False, **kw)
    except TypeError:  # older signature without external_data
        torch.onnx.export(model, args, path, dynamo=True, dynamic_shapes=dynamic_shapes, **kw)


def _finalize_onnx(path, input_names, output_names):
    """Load (with any external data), name the batch dim "batch" everywhere, save with the weights
    embedded. Returns (opset, file size)."""
    import onnx
    m = onnx.load(path, load_external_data=True)
    # The dynamo exporter names symbols itself (s0, s77, ...): rename dim 0's symbol of the
    # graph inputs to "batch" in every value of the graph.
    old = set()
    for vi in m.graph.input:
        if vi.name in input_names:
            d = vi.type.tensor_type.shape.dim[0]
            if d.dim_param and d.dim_param != "batch":
                old.add(d.dim_param)
            d.dim_param = "batch"
    for vi in m.graph.output:
        d = vi.type.tensor_type.shape.dim[0]
        if d.dim_param in old or not d.HasField("dim_value"):
            d.dim_param = "batch"
    if old:
        for vi in list(m.graph.value_info) + list(m.graph.output):
            for d in vi.type.tensor_type.shape.dim:
                if d.dim_param in old:
                    d.dim_param = "batch"
    data_files = set()
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for e in t.external_data:
                if e.key == "location":
                    data_files.add(e.value)
    onnx.save_model(m, path, save_as_external_data=False)   # load_external_data moved the weights in
    for f in data_files:
        p = os.path.join(os.path.dirname(path), f)
        if os.path.exists(p):
            os.remove(p)
    onnx.checker.check_model(path)
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    return opset, os.path.getsize(path)


def torch_reference(model, feeds):
    """PyTorch FP32 outputs for numpy `feeds`: on the GPU with TF32 off when there is one."""
    import torch
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    m = model.to(dev)
    with torch.inference_mode():
        out = m(*[torch.from_numpy(v).to(dev) for v in feeds.values()])
    out = out.float().cpu().numpy()
    model.to("cpu")
    if dev == "cuda":
        torch.cuda.empty_cache()
    return out, dev


def ort_check(path, feeds, ref):
    """Runs the ONNX file on ONNX Runtime (CPU) and returns its rel L2 error vs `ref`."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the graph as exported
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)[0]
    top1 = float(np.mean(np.argmax(got, -1) == np.argmax(ref, -1)))
    return _rel_l2(got, ref), top1, list(got.shape)


def export_model(name, out_dir, force=False, ort=True):
    """Exports `name` to OUT_DIR/<name>.onnx (+ _ref.npz, .export.json) unless they exist.

    Returns the info dict (also in <name>.export.json)."""
    import torch
    spec = MODELS[name]
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.onnx")
    ref_path = os.path.join(out_dir, f"{name}_ref.npz")
    info_path = os.path.join(out_dir, f"{name}.export.json")
    if not force and os.path.exists(path) and os.path.exists(ref_path):
        info = {"model": name, "onnx": path, "ref": ref_path, "cached": True}
        if os.path.exists(info_path):
            with open(info_path) as f:
                info.update(json.load(f), cached=True)
        log(f"[export] {name}: using existing {path}")
        return info

    t0 = time.time()
    log_path = os.path.join(out_dir, f"{name}.export.log")
    if os.path.exists(log_path):
        os.remove(log_path)
    model = build_model(name)
    input_names = [i[0] for i in spec["inputs"]]
    output_names = [spec["output"]]
    ex_feeds = reference_inputs(name, REF_BATCH, seed=1)
    ex_args = tuple(torch.from_numpy(v) for v in ex_feeds.values())
    info = {"model": name, "onnx": path, "ref": ref_path, "torch": torch.__version__,
            "attn_implementation": attn_impl(model), "inputs": input_names, "output": spec["output"]}
    try:
        import transformers
        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    errors = []
    exporter = None
    for dynamo in (False, True):
        label = "dynamo" if dynamo else "torchscript"
        try:
            if os.path.exists(path):
                os.remove(path)
            # Not under no_grad: that would turn on nn.MultiheadAttention's fast path (ViT), an
            # op the TorchScript exporter lacks. The TorchScript exporter's warnings and graph
            # dumps go to OUTDIR/<name>.export.log.
            buf = io.StringIO()
            try:
                with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                    _torch_export(model, ex_args, path, input_names, output_names, dynamo)
            finally:
                with open(os.path.join(out_dir, f"{name}.export.log"), "a") as f:
                    f.write(f"===== {label} exporter\n{buf.getvalue()}\n")
            exporter = label
            break
        except Exception as e:  # noqa: BLE001 - try the other exporter, report both
            msg = f"{type(e).__name__}: {e}"
            errors.append(f"{label}: {msg[:2000]}")
            log(f"[export] {name}: {label} exporter failed: {msg.splitlines()[0][:300] if msg else ''}")
    if exporter is None:
        raise RuntimeError(f"export of {name} failed with both exporters:\n" + "\n".join(errors))
    opset, size = _finalize_onnx(path, input_names, output_names)
    info.update(exporter=exporter, opset=opset, onnx_bytes=size, export_s=round(time.time() - t0, 2))
    if errors:
        info["exporter_errors"] = errors
    log(f"[export] {name}: {exporter} exporter, opset {opset}, {size / 2**20:.1f} MiB, {info['export_s']} s"
        + (f", attention {info['attn_implementation']}" if info["attn_implementation"] else ""))

    feeds = reference_inputs(name, REF_BATCH, seed=0)
    ref, dev = torch_reference(model, feeds)
    meta = {"model": name, "batch": REF_BATCH, "device": dev, "tf32": False, "torch": torch.__version__,
            "exporter": exporter, "output": spec["output"], "inputs": input_names}
    arrays = {f"input.{k}": v for k, v in feeds.items()}
    arrays[f"output.{spec['output']}"] = ref
    np.savez(ref_path, meta=np.array(json.dumps(meta)), **arrays)
    info["ref_device"] = dev
    log(f"[export] {name}: reference batch {REF_BATCH} on {dev} -> {ref_path} (output {list(ref.shape)})")
    if ort:
        try:
            rel, top1, shape = ort_check(path, feeds, ref)
            info["ort_check"] = {"rel_l2": rel, "top1": top1, "shape": shape}
            log(f"[export] {name}: ONNX Runtime CPU vs PyTorch: rel L2 {rel:.2e}, top-1 {100 * top1:.1f}%")
        except Exception as e:  # noqa: BLE001 - a check, not a requirement
            info["ort_check"] = {"error": f"{type(e).__name__}: {e}"[:2000]}
            log(f"[export] {name}: ONNX Runtime check failed: {type(e).__name__}: {str(e)[:300]}")
    with open(info_path, "w") as f:
        json.dump(info, f, indent=1)
    return info


def load_reference(ref_path):
    """(inputs dict, output name, output array, meta) from a <name>_ref.npz."""
    z = np.load(ref_path, allow_pickle=False)
    meta = json.loads(str(z["meta"]))
    inputs = {n: z[f"input.{n}"] for n in meta["inputs"]}
    out = meta["output"]
    return inputs, out, z[f"output.{out}"], meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated (default {DEFAULT_MODELS})")
    ap.add_argument("--force", action="store_true", help="export again even if the files exist")
    ap.add_argument("--no-ort-check", action="store_true", help="skip the ONNX Runtime check of the export")
    args = ap.parse_args()
    names = [m for m in args.models.split(",") if m]
    bad = [m for m in names if m not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {bad}; known: {DEFAULT_MODELS}")
    failed = 0
    for n in names:
        try:
            export_model(n, args.outdir, force=args.force, ort=not args.no_ort_check)
        except Exception:  # noqa: BLE001 - go on with the other models
            failed += 1
            log(f"[export] {n}: FAILED\n{traceback.format_exc()}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
