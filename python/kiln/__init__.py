"""kiln: build an optimized inference engine from an ONNX model and run it.

    import kiln, numpy as np

    engine = kiln.build("model.onnx", shapes={"input": (1, 3, 224, 224)})
    engine.save("model.kiln")                      # later: kiln.load("model.kiln")
    ctx = engine.create_execution_context()
    outputs = ctx.run({"input": np.random.rand(1, 3, 224, 224).astype(np.float32)})

    report = kiln.compare("model.onnx", engine)    # engine vs. the original model
    print(report)                                  # as `kiln compare` prints it
    stats = kiln.bench(engine)                     # as `kiln bench --json`

Inputs are numpy arrays or any DLPack tensor (torch, cupy, jax), read without a copy
when C-contiguous; outputs are numpy arrays (or, with output="dlpack", kiln.Tensor
objects for torch.from_dlpack). CUDA engines also take CUDA tensors in place and give
GPU outputs (docs/python.md, "GPU tensors"). Errors are kiln.KilnError subclasses with
kiln's messages. docs/python.md has the whole API.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from ._kiln import (
    Builder,
    BuilderConfig,
    BuildSummary,
    Engine,
    ExecutionContext,
    InternalError,
    InvalidArgumentError,
    InvalidModelError,
    KilnError,
    KilnIOError,
    LayerInfo,
    NotFoundError,
    OptimizationProfile,
    Tensor,
    TensorDesc,
    UnsupportedError,
    __version__,
    _compare,
    bench,
    cuda_available,
    cuda_compiled,
    dtypes,
    load,
)

__all__ = [
    "Builder", "BuilderConfig", "BuildSummary", "CompareReport", "Engine", "ExecutionContext", "InternalError",
    "InvalidArgumentError", "InvalidModelError", "KilnError", "KilnIOError", "LayerComparison", "LayerInfo",
    "NotFoundError", "OptimizationProfile", "OutputComparison", "Tensor", "TensorDesc", "UnsupportedError",
    "__version__", "bench", "build", "compare", "cuda_available", "cuda_compiled", "dtypes", "load", "progress_bar",
]

ModelLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Any]


def build(model: ModelLike, config: Optional[BuilderConfig] = None, *,
          logger: Optional[Callable[[str, str], None]] = None, base_dir: str = ".", **options: Any) -> Engine:
    """Builds an engine from an ONNX model (a path, its bytes, or an onnx.ModelProto).

    Options are BuilderConfig's (the flags of `kiln build`): device, fp16, bf16, tf32,
    int8, fp8, threads, memory_limit_bytes, timing_cache, opt_level, time_tactics, shapes,
    min_shapes, opt_shapes, max_shapes, profiles, progress. They override `config`.
    progress=True draws a progress bar on stderr. The GIL is released while building and
    Ctrl-C stops the build at its next stage (KeyboardInterrupt).

        engine = kiln.build("resnet18.onnx", fp16=True, shapes={"input": (1, 3, 224, 224)})
    """
    if options.get("progress") is True:
        options["progress"] = progress_bar()
    elif options.get("progress") is False:
        options["progress"] = None
    return Builder(logger).build(model, config, base_dir=base_dir, **options)


def progress_bar(stream: Any = None) -> Callable[[str, float], None]:
    """A progress callback drawing `[=====     ]  50%  stage` on stderr (or `stream`)."""
    out = stream if stream is not None else sys.stderr
    tty = hasattr(out, "isatty") and out.isatty()

    def draw(stage: str, fraction: float) -> None:
        filled = round(fraction * 30)
        line = "[" + "=" * filled + " " * (30 - filled) + f"] {round(fraction * 100):3d}%  {stage}"
        if tty:
            out.write("\r\033[K" + line + ("\n" if fraction >= 1.0 else ""))
        elif fraction >= 1.0 or stage != getattr(draw, "last", None):
            out.write(line + "\n")
        draw.last = stage  # type: ignore[attr-defined]
        out.flush()

    return draw


@dataclass
class OutputComparison:
    """One model output, engine vs. reference (see CompareReport)."""

    name: str
    passed: bool
    compared: bool                  # False: not comparable (see problem)
    problem: Optional[str]
    reference: Any                  # the reference output (numpy array)
    engine: Any                     # the engine's output (numpy array)
    elements: int = 0
    out_of_tolerance: int = 0
    both_nan: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    rel_l2_err: float = 0.0
    cosine: float = 1.0
    worst_index: Optional[Tuple[int, ...]] = None
    worst_reference: Optional[float] = None
    worst_engine: Optional[float] = None
    # Classifier-like outputs ([N, C] floats, C >= 5): rows whose top-1 / top-5 agree.
    top_k_rows: Optional[int] = None
    top1_agreement: Optional[int] = None
    top5_agreement: Optional[int] = None


@dataclass
class LayerComparison:
    """One engine layer output against the same-named model value (layerwise=True)."""

    layer: str
    op: str
    value: str
    model_value: str
    passed: bool
    elements: int
    out_of_tolerance: int
    both_nan: int
    max_abs_err: float
    max_rel_err: float
    rel_l2_err: float
    cosine: float


@dataclass
class CompareReport:
    """What kiln.compare() found; str(report) is the `kiln compare` report, and a report
    is truthy when every output is within tolerance."""

    passed: bool
    atol: float
    rtol: float
    outputs: List[OutputComparison]
    layers: List[LayerComparison] = field(default_factory=list)
    layers_not_in_model: int = 0
    layers_shape_mismatch: int = 0
    inputs: Dict[str, Any] = field(default_factory=dict)      # the inputs both ran on
    random_inputs: List[str] = field(default_factory=list)    # which of them were random
    engine_built: bool = False                                 # built in memory from the model
    text: str = ""

    @property
    def first_divergence(self) -> Optional[LayerComparison]:
        """The first layer (in engine order) out of tolerance, or None."""
        return next((layer for layer in self.layers if not layer.passed), None)

    def output(self, name: str) -> OutputComparison:
        for o in self.outputs:
            if o.name == name:
                return o
        raise KeyError(name)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return self.text


def compare(model: ModelLike, engine: Union[Engine, str, "os.PathLike[str]", None] = None,
            inputs: Optional[Mapping[str, Any]] = None, *, shapes: Any = None, seed: int = 0, atol: float = 1e-4,
            rtol: float = 1e-3, layerwise: bool = False, config: Optional[BuilderConfig] = None,
            base_dir: str = ".", **options: Any) -> CompareReport:
    """Runs the original model on kiln's reference backend and the engine on the same
    inputs and reports how far apart they are, like `kiln compare`.

    engine: an Engine, an engine file, or None to build one in memory from the model with
    `config` / the keyword build options. inputs: {name: array}; the others are random,
    seeded by `seed` exactly as the CLI's --seed (shapes: {name: dims} for them).
    An element passes when |engine - reference| <= atol + rtol * |reference|.
    layerwise=True also compares every engine layer output with the same-named model
    value and reports the first divergence.
    """
    d = _compare(model, engine, dict(inputs) if inputs is not None else None, shapes=shapes, seed=seed, atol=atol,
                 rtol=rtol, layerwise=layerwise, config=config, base_dir=base_dir, **options)
    outputs = [OutputComparison(**o) for o in d["outputs"]]
    layers = [LayerComparison(**layer) for layer in d["layers"]]
    return CompareReport(passed=d["passed"], atol=d["atol"], rtol=d["rtol"], outputs=outputs, layers=layers,
                         layers_not_in_model=d["layers_not_in_model"], layers_shape_mismatch=d["layers_shape_mismatch"],
                         inputs=d["inputs"], random_inputs=list(d["random_inputs"]), engine_built=d["engine_built"],
                         text=d["text"])


def _engine_bench(self: Engine, inputs: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> Dict[str, Any]:
    """Benchmarks this engine: kiln.bench(self, inputs, **kwargs)."""
    return bench(self, dict(inputs) if inputs is not None else None, **kwargs)


Engine.bench = _engine_bench  # type: ignore[attr-defined]
