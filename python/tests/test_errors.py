"""kiln errors become kiln.KilnError subclasses carrying kiln's messages; bad inputs
are caught before anything runs."""
import numpy as np
import pytest

import kiln
from conftest import SAMPLE_CNN, transpose_model, two_input_model


@pytest.fixture(scope="module")
def engine():
    return kiln.build(two_input_model())


def good_inputs():
    return {"a": np.ones((2, 4), np.float32), "b": np.ones((2, 4), np.float32), "k": np.arange(3, dtype=np.int64)}


def test_hierarchy():
    assert issubclass(kiln.InvalidArgumentError, kiln.KilnError) and issubclass(kiln.InvalidArgumentError, ValueError)
    assert issubclass(kiln.InvalidModelError, ValueError)
    assert issubclass(kiln.UnsupportedError, NotImplementedError)
    assert issubclass(kiln.NotFoundError, LookupError)
    assert issubclass(kiln.KilnIOError, OSError)
    assert issubclass(kiln.InternalError, kiln.KilnError) and issubclass(kiln.KilnError, RuntimeError)
    assert kiln.KilnError.__module__ == "kiln"


def test_wrong_dtype(engine):
    inputs = good_inputs()
    inputs["a"] = inputs["a"].astype(np.float64)
    with pytest.raises(kiln.InvalidArgumentError, match="input 'a': expected dtype float32, got float64"):
        engine.run(inputs)
    inputs = good_inputs()
    inputs["k"] = inputs["k"].astype(np.int32)
    with pytest.raises(kiln.InvalidArgumentError, match="input 'k': expected dtype int64, got int32"):
        engine.run(inputs)


def test_wrong_shape(engine):
    inputs = good_inputs()
    inputs["a"] = np.ones((2, 5), np.float32)
    with pytest.raises(kiln.InvalidArgumentError, match=r"input 'a': expected shape \[2,4\].*dimension 1 must be 4"):
        engine.run(inputs)
    inputs["a"] = np.ones((8,), np.float32)
    with pytest.raises(kiln.InvalidArgumentError, match="rank"):
        engine.run(inputs)


def test_unknown_and_missing_inputs(engine):
    inputs = good_inputs()
    inputs["c"] = np.ones(1, np.float32)
    with pytest.raises(kiln.InvalidArgumentError, match="unknown input 'c'; the model's inputs are: a, b, k"):
        engine.run(inputs)
    inputs = good_inputs()
    del inputs["b"]
    with pytest.raises(kiln.InvalidArgumentError, match="missing input 'b'"):
        engine.run(inputs)
    with pytest.raises(kiln.InvalidArgumentError, match="input names must be str"):
        engine.run({1: np.ones(1)})
    with pytest.raises(kiln.InvalidArgumentError, match="must be a dict"):
        engine.run(np.ones((2, 4), np.float32))  # three inputs: a bare array is ambiguous


def test_unsupported_arrays(engine):
    inputs = good_inputs()
    inputs["a"] = np.ones((2, 4), np.complex64)
    with pytest.raises(kiln.InvalidArgumentError, match="numpy dtype complex64 has no kiln equivalent"):
        engine.run(inputs)
    inputs["a"] = np.array([["x"] * 4] * 2)
    with pytest.raises(kiln.UnsupportedError, match="input 'a'.*engines take numeric tensors"):
        engine.run(inputs)
    inputs["a"] = object()
    with pytest.raises(kiln.KilnError, match="input 'a'"):
        engine.run(inputs)


def test_bad_output_kind(engine):
    with pytest.raises(kiln.InvalidArgumentError, match='output must be "numpy" or "dlpack"'):
        engine.run(good_inputs(), output="torch")


def test_model_errors(tmp_path):
    with pytest.raises(kiln.KilnError) as e:
        kiln.build(str(tmp_path / "missing.onnx"))
    assert "missing.onnx" in str(e.value)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a model")
    with pytest.raises((kiln.InvalidModelError, kiln.KilnIOError)):
        kiln.build(bad)
    with pytest.raises(TypeError, match="expected a path, bytes or an onnx.ModelProto"):
        kiln.build(12345)


def test_unsupported_op():
    import onnx
    from onnx import TensorProto, helper
    model = helper.make_model(helper.make_graph(
        [helper.make_node("NoSuchOp", ["x"], ["y"], name="weird")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(kiln.KilnError, match="NoSuchOp"):
        kiln.build(model.SerializeToString())
    assert onnx  # imported for the helper


@pytest.mark.skipif(kiln.cuda_available(), reason="this kiln can build CUDA engines here")
def test_cuda_device_is_unsupported():
    why = "no usable CUDA device" if kiln.cuda_compiled() else "no CUDA backend"
    with pytest.raises(kiln.UnsupportedError, match=why):
        kiln.build(SAMPLE_CNN, device="cuda")


def test_engine_file_errors(tmp_path):
    engine = kiln.build(transpose_model("float32"))
    data = engine.serialize()
    path = tmp_path / "e.kiln"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(kiln.KilnError) as e:
        kiln.load(path)
    assert "e.kiln" in str(e.value) or "truncated" in str(e.value)
    corrupt = bytearray(data)
    corrupt[len(corrupt) // 2] ^= 0xFF
    with pytest.raises(kiln.KilnError):
        kiln.Engine.deserialize(bytes(corrupt))
    with pytest.raises(kiln.KilnIOError):
        kiln.load(tmp_path / "nope.kiln")
    with pytest.raises(kiln.KilnIOError):
        engine.save(tmp_path / "no_such_dir" / "x.kiln")


def test_device_tensor_rejected():
    """A DLPack tensor on a GPU gets a clear error from a CPU engine (and a CPU-only build)."""
    engine = kiln.build(transpose_model("float32", (2, 3)))
    host = np.ones((2, 3), np.float32)

    class FakeCudaTensor:
        def __dlpack__(self, stream=None):
            raise AssertionError("kiln must not ask for the data of a device it cannot use")

        def __dlpack_device__(self):
            return (2, 1)  # kDLCUDA, device 1

    why = "this engine runs on the CPU" if kiln.cuda_compiled() else "no CUDA backend"
    with pytest.raises(kiln.UnsupportedError, match=f"input 'x' is on cuda:1.*{why}"):
        engine.run({"x": FakeCudaTensor()})
    np.testing.assert_array_equal(engine.run({"x": host})["y"], host.T)


def test_bench_and_compare_argument_errors(tmp_path):
    with pytest.raises(kiln.InvalidArgumentError, match="iterations must be at least 1"):
        kiln.bench(SAMPLE_CNN, iterations=0)
    with pytest.raises(kiln.InvalidArgumentError, match="'nope' is not an input"):
        kiln.compare(SAMPLE_CNN, shapes={"nope": (1, 3)})
    with pytest.raises(kiln.InvalidArgumentError, match="atol and rtol must be >= 0"):
        kiln.compare(SAMPLE_CNN, atol=-1)
    other = kiln.build(transpose_model("float32"))
    with pytest.raises(kiln.InvalidArgumentError, match="the engine's input 'x' is not an input of the model"):
        kiln.compare(SAMPLE_CNN, other)
    not_engine = tmp_path / "x.kiln"
    not_engine.write_bytes(b"hello")
    with pytest.raises(kiln.InvalidArgumentError, match="not a kiln engine file"):
        kiln.compare(SAMPLE_CNN, str(not_engine))
