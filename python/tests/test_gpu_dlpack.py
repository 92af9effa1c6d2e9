"""GPU tensors and CUDA engines (docs/python.md, "GPU tensors"): torch/cupy CUDA tensors in
and out without copies, outputs= binding, user streams, fp16 engines, results equal to the
host path, and the errors of wrong devices, layouts, dtypes and shapes.

The GPU tests skip (with the reason) unless torch has CUDA and this kiln has a CUDA backend
with a usable GPU. The tests of the error paths that need no GPU (fake DLPack producers,
CPU engines) run everywhere."""
import gc

import numpy as np
import pytest

import kiln
from conftest import mlp_model, transpose_model, two_input_model, try_import_torch

torch = try_import_torch()


def gpu_skip_reason():
    if torch is None:
        return "torch is not importable"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if not kiln.cuda_compiled():
        return "this build of kiln has no CUDA backend"
    if not kiln.cuda_available():
        return "kiln finds no usable CUDA device"
    return None


@pytest.fixture(scope="module")
def gpu():
    """The GPU tests' guard: skips them unless torch and kiln can both use the GPU."""
    reason = gpu_skip_reason()
    if reason:
        pytest.skip(reason)
    return torch.device("cuda", torch.cuda.current_device())


class FakeDLPack:
    """A DLPack producer that only says where it lives: kiln must refuse it before asking
    for its data."""

    def __init__(self, device):
        self.device = device

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, **kwargs):
        raise AssertionError("kiln must not ask for the data of a tensor it cannot use")


def no_cuda_why():
    """The reason a CPU engine (or a build without CUDA) gives for refusing GPU tensors."""
    return "this engine runs on the CPU" if kiln.cuda_compiled() else "no CUDA backend"


# ---------------------------------------------------------------------------------------
# Error paths that need no GPU.

def test_gpu_tensor_into_cpu_engine_names_the_input():
    engine = kiln.build(transpose_model("float32", (2, 3)))
    with pytest.raises(kiln.UnsupportedError, match=f"input 'x' is on cuda:0, .*{no_cuda_why()}"):
        engine.run({"x": FakeDLPack((2, 0))})
    with pytest.raises(kiln.UnsupportedError, match=r"input 'x' is on cuda:0 \(managed memory\)"):
        engine.create_execution_context().run(FakeDLPack((13, 0)), output="dlpack")
    with pytest.raises(kiln.UnsupportedError, match="input 'x' is on rocm:1, which kiln cannot read"):
        engine.run({"x": FakeDLPack((10, 1))})
    # The context is unharmed.
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(engine.run({"x": x})["y"], x.T)


def test_gpu_tensor_among_host_inputs_of_a_cpu_engine():
    engine = kiln.build(two_input_model())
    a = np.ones((2, 4), np.float32)
    with pytest.raises(kiln.UnsupportedError, match=f"input 'b' is on cuda:0, .*{no_cuda_why()}"):
        engine.run({"a": a, "b": FakeDLPack((2, 0)), "k": np.arange(3)})


def test_outputs_argument_needs_a_cuda_engine():
    engine = kiln.build(transpose_model("float32", (2, 3)))
    x = np.ones((2, 3), np.float32)
    why = "needs a CUDA engine" if kiln.cuda_compiled() else "no CUDA backend"
    with pytest.raises(kiln.UnsupportedError, match=f"outputs=.*{why}"):
        engine.run({"x": x}, outputs={"y": np.empty((3, 2), np.float32)})
    with pytest.raises(kiln.UnsupportedError, match="outputs="):
        engine.run({"x": x}, outputs={"y": FakeDLPack((2, 0))})


def test_stream_argument():
    engine = kiln.build(transpose_model("float32", (2, 3)))
    x = np.ones((2, 3), np.float32)

    class TorchLikeStream:
        cuda_stream = 12345

    class CupyLikeStream:
        ptr = 0

    class ProtocolStream:
        def __cuda_stream__(self):
            return (0, 2)

    # A CPU engine (and any run on host inputs) is synchronous and does not use the stream.
    for stream in (None, 0, 1, 2, 12345, TorchLikeStream(), CupyLikeStream(), ProtocolStream()):
        np.testing.assert_array_equal(engine.run({"x": x}, stream=stream)["y"], x.T)
    for bad in ("default", -1, 1.5, object()):
        with pytest.raises(kiln.InvalidArgumentError, match="stream: expected None, an int"):
            engine.run({"x": x}, stream=bad)


def test_cpu_kiln_tensor_protocols():
    engine = kiln.build(transpose_model("float32", (2, 3)))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = engine.run({"x": x}, output="dlpack")["y"]
    assert out.device == "cpu" and out.__dlpack_device__() == (1, 0)
    assert "float32[3,2]" in repr(out) and "cuda" not in repr(out)
    np.testing.assert_array_equal(np.asarray(out), x.T)
    np.testing.assert_array_equal(out.__array__(), x.T)
    assert out.__array__(np.float64).dtype == np.float64
    np.testing.assert_array_equal(np.from_dlpack(out), x.T)
    out.__dlpack__(stream=7)  # host tensors ignore the stream
    with pytest.raises(kiln.UnsupportedError, match="lives on the CPU"):
        out.__dlpack__(dl_device=(2, 0))


def test_cuda_flags():
    assert isinstance(kiln.cuda_compiled(), bool) and isinstance(kiln.cuda_available(), bool)
    if not kiln.cuda_compiled():
        assert not kiln.cuda_available()


# ---------------------------------------------------------------------------------------
# On the GPU.

@pytest.fixture(scope="module")
def cuda_mlp(gpu):
    """(engine, numpy reference): the MLP built for CUDA at x: (4, 6)."""
    model, reference = mlp_model()
    return kiln.build(model, device="cuda", shapes={"x": (4, 6)}), reference


def ref(reference, x):
    return reference(x.detach().cpu().numpy()).astype(np.float32)


def test_torch_in_and_out_zero_copy(gpu, cuda_mlp):
    engine, reference = cuda_mlp
    assert engine.device == "cuda"
    ctx = engine.create_execution_context()
    x = torch.randn(4, 6, device=gpu)
    out = ctx.run({"x": x}, output="dlpack")["y"]
    assert isinstance(out, kiln.Tensor)
    assert out.device == f"cuda:{gpu.index}" and out.__dlpack_device__() == (2, gpu.index)
    assert out.shape == (4, 3) and out.dtype == "float32" and out.nbytes == 48
    y = torch.from_dlpack(out)
    assert y.device == gpu and y.dtype == torch.float32 and tuple(y.shape) == (4, 3)
    assert torch.from_dlpack(out).data_ptr() == y.data_ptr()  # both view kiln's memory
    np.testing.assert_allclose(y.cpu().numpy(), ref(reference, x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out.numpy(), y.cpu().numpy())  # numpy(): a host copy
    with pytest.raises(kiln.UnsupportedError, match="numpy cannot view GPU memory"):
        np.asarray(out)
    # The memory outlives the kiln.Tensor while torch holds it (freed by the DLPack deleter).
    expected = y.clone()
    del out
    gc.collect()
    assert torch.equal(y, expected)
    # Results equal the host path's (host inputs: copied through the context's staging).
    host = ctx.run({"x": x.cpu()})["y"]
    assert isinstance(host, np.ndarray)
    np.testing.assert_allclose(host, y.cpu().numpy(), rtol=1e-6, atol=1e-6)
    host_t = ctx.run({"x": x.cpu().numpy()}, output="dlpack")["y"]
    assert host_t.device == "cpu"  # host inputs give host outputs
    np.testing.assert_allclose(host_t.numpy(), host, rtol=1e-6, atol=1e-6)
    # GPU inputs with output="numpy" (the default): host copies.
    got = engine.run({"x": x})["y"]
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, host, rtol=1e-6, atol=1e-6)


def test_outputs_are_written_in_place(gpu, cuda_mlp):
    engine, reference = cuda_mlp
    ctx = engine.create_execution_context()
    x = torch.randn(4, 6, device=gpu)
    out = torch.full((4, 3), float("nan"), device=gpu)
    ptr = out.data_ptr()
    result = ctx.run({"x": x}, outputs={"y": out})
    assert result["y"] is out and out.data_ptr() == ptr
    np.testing.assert_allclose(out.cpu().numpy(), ref(reference, x), rtol=1e-4, atol=1e-5)
    # Again, same buffers (the fast path: the CUDA graph is replayed).
    x.copy_(torch.randn(4, 6, device=gpu))
    assert ctx.run({"x": x}, outputs={"y": out}, output="dlpack")["y"] is out
    np.testing.assert_allclose(out.cpu().numpy(), ref(reference, x), rtol=1e-4, atol=1e-5)


def test_kiln_tensor_back_in(gpu, cuda_mlp):
    engine, reference = cuda_mlp
    x = torch.randn(4, 6, device=gpu)
    y = engine.run({"x": x}, output="dlpack")["y"]
    transpose = kiln.build(transpose_model("float32", (4, 3)), device="cuda")
    yt = torch.from_dlpack(transpose.run({"x": y}, output="dlpack")["y"])
    assert torch.equal(yt, torch.from_dlpack(y).t())
    cpu_engine = kiln.build(transpose_model("float32", (4, 3)))
    with pytest.raises(kiln.UnsupportedError, match="input 'x' is on cuda:.*this engine runs on the CPU"):
        cpu_engine.run({"x": y})
    with pytest.raises(kiln.UnsupportedError, match="input 'x' is on cuda:.*this engine runs on the CPU"):
        cpu_engine.run({"x": torch.randn(4, 3, device=gpu)})


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64", "int32", "int8", "uint8"])
def test_dtypes(gpu, dtype):
    engine = kiln.build(transpose_model(dtype, (2, 3)), device="cuda")
    x = (torch.randn(2, 3, device=gpu) * 10).to(getattr(torch, dtype))
    y = torch.from_dlpack(engine.run({"x": x}, output="dlpack")["y"])
    assert y.dtype == x.dtype and torch.equal(y, x.t())


def test_fp16_engine(gpu):
    model, reference = mlp_model()
    engine = kiln.build(model, device="cuda", fp16=True, shapes={"x": (4, 6)})
    assert engine.inputs[0].dtype == "float32"  # the interface keeps the model's dtypes
    x = torch.randn(4, 6, device=gpu)
    out = torch.empty(4, 3, device=gpu)
    engine.run({"x": x}, outputs={"y": out})
    want = ref(reference, x)
    assert np.linalg.norm(out.cpu().numpy() - want) <= 1e-2 * np.linalg.norm(want)
    np.testing.assert_allclose(engine.run({"x": x.cpu()})["y"], out.cpu().numpy(), rtol=1e-6, atol=1e-6)


def delay(stream, ms=30):
    """Keeps `stream` busy for a while, so that missing synchronization shows."""
    if hasattr(torch.cuda, "_sleep"):
        with torch.cuda.stream(stream):
            torch.cuda._sleep(int(ms * 1e6))  # ~1 GHz cycles


def test_user_stream(gpu, cuda_mlp):
    engine, reference = cuda_mlp
    ctx = engine.create_execution_context()
    s = torch.cuda.Stream()
    # Produced on torch's current stream (the default one), run on s: kiln passes s to
    # __dlpack__, and torch makes s wait for its current stream.
    delay(torch.cuda.default_stream())
    x = torch.randn(4, 6, device=gpu)
    out = ctx.run({"x": x}, output="dlpack", stream=s)["y"]  # queued on s; returns at once
    # Read on the default stream: torch.from_dlpack passes it, and it waits for the run.
    y = torch.from_dlpack(out).clone()
    np.testing.assert_allclose(y.cpu().numpy(), ref(reference, x), rtol=1e-4, atol=1e-5)
    # Streams as ints, and outputs= with a stream: the caller synchronizes.
    bound = torch.empty(4, 3, device=gpu)
    with torch.cuda.stream(s):
        delay(s)
        x2 = torch.randn(4, 6, device=gpu)
        assert ctx.run({"x": x2}, outputs={"y": bound}, stream=s.cuda_stream)["y"] is bound
    s.synchronize()
    np.testing.assert_allclose(bound.cpu().numpy(), ref(reference, x2), rtol=1e-4, atol=1e-5)
    # The default stream as an int (0) and a numpy output (the call waits).
    np.testing.assert_allclose(ctx.run({"x": x}, stream=0)["y"], y.cpu().numpy(), rtol=1e-6, atol=1e-6)
    # Temporaries: kiln keeps them until the queued run has finished.
    with torch.cuda.stream(s):
        delay(s)
        out = ctx.run({"x": torch.ones(4, 6, device=gpu)}, output="dlpack", stream=s)["y"]
    gc.collect()
    s.synchronize()
    np.testing.assert_allclose(out.numpy(), ref(reference, torch.ones(4, 6)), rtol=1e-4, atol=1e-5)


def test_runs_on_one_context_are_ordered(gpu, cuda_mlp):
    """A run with host inputs (or on another stream) waits for a queued one: they share the
    context's memory."""
    engine, reference = cuda_mlp
    ctx = engine.create_execution_context()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    x1, x2, x3 = (torch.randn(4, 6, device=gpu) for _ in range(3))
    torch.cuda.synchronize()
    delay(s1, 60)
    with torch.cuda.stream(s1):
        out1 = ctx.run({"x": x1}, output="dlpack", stream=s1)["y"]
    out2 = ctx.run({"x": x2}, output="dlpack", stream=s2)["y"]
    host3 = ctx.run({"x": x3.cpu()})["y"]
    torch.cuda.synchronize()
    np.testing.assert_allclose(out1.numpy(), ref(reference, x1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out2.numpy(), ref(reference, x2), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(host3, ref(reference, x3), rtol=1e-4, atol=1e-5)


def test_switching_between_bound_and_own_outputs(gpu, cuda_mlp):
    """A buffer bound by one run is never written by later runs that do not bind it."""
    engine, reference = cuda_mlp
    ctx = engine.create_execution_context()
    x1, x2, x3 = (torch.randn(4, 6, device=gpu) for _ in range(3))
    out = torch.empty(4, 3, device=gpu)
    ctx.run({"x": x1}, outputs={"y": out})
    kept = out.clone()
    np.testing.assert_allclose(ctx.run({"x": x2.cpu()})["y"], ref(reference, x2), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ctx.run({"x": x3})["y"], ref(reference, x3), rtol=1e-4, atol=1e-5)
    assert torch.equal(out, kept)
    t = ctx.run({"x": x1}, output="dlpack")["y"]
    t_kept = torch.from_dlpack(t).clone()
    np.testing.assert_allclose(ctx.run({"x": x2})["y"], ref(reference, x2), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ctx.run({"x": x3.cpu()})["y"], ref(reference, x3), rtol=1e-4, atol=1e-5)
    assert torch.equal(torch.from_dlpack(t), t_kept) and torch.equal(out, kept)
    ctx.run({"x": x3}, outputs={"y": out})
    np.testing.assert_allclose(out.cpu().numpy(), ref(reference, x3), rtol=1e-4, atol=1e-5)


def test_dynamic_shapes(gpu):
    model, reference = mlp_model()
    engine = kiln.build(model, device="cuda", min_shapes={"x": (1, 6)}, opt_shapes={"x": (4, 6)},
                        max_shapes={"x": (8, 6)})
    ctx = engine.create_execution_context()
    for batch in (1, 8, 3, 3):
        x = torch.randn(batch, 6, device=gpu)
        out = ctx.run({"x": x}, output="dlpack")["y"]
        assert out.shape == (batch, 3)
        np.testing.assert_allclose(out.numpy(), ref(reference, x), rtol=1e-4, atol=1e-5)
        bound = torch.empty(batch, 3, device=gpu)
        ctx.run({"x": x}, outputs={"y": bound})
        np.testing.assert_allclose(bound.cpu().numpy(), ref(reference, x), rtol=1e-4, atol=1e-5)
    with pytest.raises(kiln.InvalidArgumentError, match=r"output 'y': these inputs give float32\[2,3\]"):
        ctx.run({"x": torch.randn(2, 6, device=gpu)}, outputs={"y": torch.empty(3, 3, device=gpu)})
    with pytest.raises(kiln.InvalidArgumentError, match="outside profile"):
        ctx.run({"x": torch.randn(9, 6, device=gpu)})


def test_layout_errors(gpu, cuda_mlp):
    engine, _ = cuda_mlp
    strided = torch.randn(6, 4, device=gpu).t()
    with pytest.raises(kiln.InvalidArgumentError, match="input 'x' is a non-contiguous cuda:.*never copies"):
        engine.run({"x": strided})
    view = torch.randn(5, 6, device=gpu)[1:]  # contiguous, 24 bytes into its storage
    with pytest.raises(kiln.InvalidArgumentError, match="input 'x': its device address .* not 256-byte aligned"):
        engine.run({"x": view})
    with pytest.raises(kiln.InvalidArgumentError, match="input 'x': its __dlpack__"):
        engine.run({"x": torch.randn(4, 6, device=gpu, requires_grad=True)})
    x = torch.randn(4, 6, device=gpu)
    with pytest.raises(kiln.InvalidArgumentError, match="output 'y' is a non-contiguous"):
        engine.run({"x": x}, outputs={"y": torch.empty(3, 4, device=gpu).t()})
    aliased = x.view(-1)[:12].view(4, 3)
    with pytest.raises(kiln.InvalidArgumentError, match="output 'y' overlaps input 'x'"):
        engine.run({"x": x}, outputs={"y": aliased})


def test_shape_and_dtype_errors(gpu, cuda_mlp):
    engine, reference = cuda_mlp
    ctx = engine.create_execution_context()
    x = torch.randn(4, 6, device=gpu)
    with pytest.raises(kiln.InvalidArgumentError, match="input 'x': expected dtype float32, got float64"):
        ctx.run({"x": x.double()})
    with pytest.raises(kiln.InvalidArgumentError, match="input 'x'"):
        ctx.run({"x": torch.randn(5, 6, device=gpu)})
    with pytest.raises(kiln.InvalidArgumentError, match=r"output 'y': these inputs give float32\[4,3\]"):
        ctx.run({"x": x}, outputs={"y": torch.empty(3, 4, device=gpu)})
    with pytest.raises(kiln.InvalidArgumentError, match=r"output 'y': .* is float16\[4,3\]"):
        ctx.run({"x": x}, outputs={"y": torch.empty(4, 3, device=gpu, dtype=torch.float16)})
    with pytest.raises(kiln.InvalidArgumentError, match="outputs: 'z' is not an output of the engine"):
        ctx.run({"x": x}, outputs={"z": torch.empty(4, 3, device=gpu)})
    with pytest.raises(kiln.InvalidArgumentError, match=r"output 'y' \(outputs=\) is on cpu"):
        ctx.run({"x": x}, outputs={"y": torch.empty(4, 3)})
    with pytest.raises(kiln.InvalidArgumentError, match="outputs= needs the inputs on the GPU"):
        ctx.run({"x": x.cpu()}, outputs={"y": torch.empty(4, 3, device=gpu)})
    with pytest.raises(kiln.InvalidArgumentError, match="outputs must be a dict"):
        ctx.run({"x": x}, outputs=[torch.empty(4, 3, device=gpu)])
    # The context still runs after all of these.
    np.testing.assert_allclose(ctx.run({"x": x})["y"], ref(reference, x), rtol=1e-4, atol=1e-5)


def test_mixed_and_wrong_devices(gpu):
    engine = kiln.build(two_input_model(), device="cuda")
    a, b = torch.randn(2, 4, device=gpu), torch.randn(2, 4, device=gpu)
    k = torch.arange(3, device=gpu)
    with pytest.raises(kiln.InvalidArgumentError, match="input 'k' is in host memory but input 'a' is on cuda:"):
        engine.run({"a": a, "b": b, "k": k.cpu()})
    out = engine.run({"a": a, "b": b, "k": k}, output="dlpack")
    assert torch.equal(torch.from_dlpack(out["sum"]), a + b)
    assert torch.equal(torch.from_dlpack(out["idx"]), k * 2)
    host = engine.run({"a": a.cpu(), "b": b.cpu(), "k": k.cpu()})  # all on the host: fine
    np.testing.assert_allclose(host["sum"], (a + b).cpu().numpy(), rtol=1e-6)
    other = (gpu.index + 1) % max(torch.cuda.device_count(), 2)
    with pytest.raises(kiln.InvalidArgumentError,
                       match=f"input 'a' is on cuda:{other}, but the current CUDA device is cuda:{gpu.index}"):
        engine.run({"a": FakeDLPack((2, other)), "b": b, "k": k})
    if torch.cuda.device_count() > 1:
        with pytest.raises(kiln.InvalidArgumentError, match="current CUDA device"):
            engine.run({"a": a.to(f"cuda:{other}"), "b": b, "k": k})


def test_cupy(gpu, cuda_mlp):
    cupy = pytest.importorskip("cupy")
    engine, reference = cuda_mlp
    s = cupy.cuda.Stream(non_blocking=True)
    with s:  # cupy's current stream: its __dlpack__ orders x's work before kiln's on s
        x = cupy.random.standard_normal((4, 6), dtype=cupy.float32)
        out = engine.run({"x": x}, output="dlpack", stream=s)["y"]
        y = cupy.from_dlpack(out)
    s.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(y), reference(cupy.asnumpy(x)).astype(np.float32), rtol=1e-4, atol=1e-5)
