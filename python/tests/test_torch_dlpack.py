"""torch (and cupy) tensors in and out through DLPack, with CPU engines. Skipped where
torch is missing (the build/venv interpreter has no torch; Debian's python3-torch does).
GPU tensors into a CPU engine get a clear UnsupportedError (those tests skip when no GPU
is present); CUDA engines on GPU tensors: test_gpu_dlpack.py."""
import numpy as np
import pytest

import kiln
from conftest import mlp_model, transpose_model, try_import_torch

torch = try_import_torch()
pytestmark = pytest.mark.skipif(torch is None, reason="torch is not importable")
has_cuda = torch is not None and torch.cuda.is_available()


def test_cpu_tensor_in_and_out_zero_copy():
    model, reference = mlp_model()
    engine = kiln.build(model, shapes={"x": (4, 6)})
    x = torch.randn(4, 6)
    out = engine.run({"x": x}, output="dlpack")["y"]
    y = torch.from_dlpack(out)
    assert y.dtype == torch.float32 and tuple(y.shape) == (4, 3)
    assert y.data_ptr() == np.asarray(out).__array_interface__["data"][0]  # a view, not a copy
    np.testing.assert_allclose(y.numpy(), reference(x.numpy()), rtol=1e-4, atol=1e-5)
    # kiln output straight back in.
    engine2 = kiln.build(transpose_model("float32", (4, 3)))
    np.testing.assert_array_equal(engine2.run({"x": out})["y"], y.numpy().T)


def test_dtypes_through_torch():
    for name, dt in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("int64", torch.int64),
                     ("int8", torch.int8), ("uint8", torch.uint8), ("float64", torch.float64), ("bool", torch.bool)):
        engine = kiln.build(transpose_model(name, (2, 3)))
        x = (torch.randn(2, 3) * 4).to(dt)
        if name == "bfloat16":
            y = torch.from_dlpack(engine.run({"x": x}, output="dlpack")["y"])
            assert y.dtype == torch.bfloat16
            assert torch.equal(y, x.t())
        else:
            y = engine.run({"x": x})["y"]
            np.testing.assert_array_equal(y, x.numpy().T)


def test_non_contiguous_and_grad_tensors():
    engine = kiln.build(transpose_model("float32", (3, 2)))
    x = torch.randn(2, 3).t()  # strided view
    np.testing.assert_array_equal(engine.run({"x": x})["y"], x.numpy().T)
    with pytest.raises(kiln.InvalidArgumentError, match="input 'x'"):
        engine.run({"x": torch.randn(3, 2, requires_grad=True)})


@pytest.mark.skipif(not has_cuda, reason="no CUDA device")
def test_cuda_tensor_is_rejected_clearly():
    engine = kiln.build(transpose_model("float32", (2, 3)))
    x = torch.randn(2, 3, device="cuda")
    why = "this engine runs on the CPU" if kiln.cuda_compiled() else "no CUDA backend"
    with pytest.raises(kiln.UnsupportedError, match=f"input 'x' is on cuda:0.*{why}"):
        engine.run({"x": x}, stream=torch.cuda.current_stream())
    np.testing.assert_array_equal(engine.run({"x": x.cpu()})["y"], x.cpu().numpy().T)


@pytest.mark.skipif(not has_cuda, reason="no CUDA device")
def test_cupy_tensor_is_rejected_clearly():
    cupy = pytest.importorskip("cupy")
    engine = kiln.build(transpose_model("float32", (2, 3)))
    why = "this engine runs on the CPU" if kiln.cuda_compiled() else "no CUDA backend"
    with pytest.raises(kiln.UnsupportedError, match=why):
        engine.run({"x": cupy.ones((2, 3), dtype=cupy.float32)})
