"""Fixtures for the kiln Python tests: small ONNX models made with onnx.helper.

Run from the repository root with the build tree's package on the path:
    PYTHONPATH=build/python build/venv/bin/python -m pytest -q python/tests
(ctest runs this as `python_tests`.)
"""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SAMPLE_CNN = os.path.join(REPO, "models", "sample_cnn.onnx")

# kiln dtype name -> ONNX TensorProto type.
ONNX_TYPES = {
    "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16, "int8": TensorProto.INT8, "int16": TensorProto.INT16,
    "int32": TensorProto.INT32, "int64": TensorProto.INT64, "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16, "uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64,
    "bool": TensorProto.BOOL, "float8e4m3fn": TensorProto.FLOAT8E4M3FN,
    "float8e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ, "float8e5m2": TensorProto.FLOAT8E5M2,
    "float8e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ, "uint4": TensorProto.UINT4, "int4": TensorProto.INT4,
    "float4e2m1": TensorProto.FLOAT4E2M1, "float8e8m0": TensorProto.FLOAT8E8M0,
    "uint2": TensorProto.UINT2, "int2": TensorProto.INT2,
}


def make_model(nodes, inputs, outputs, initializers=(), opset=21):
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def mlp_model(seed=0, batch="N", features=6, hidden=5):
    """y = Relu(x @ W1 + b1) @ W2 + b2 with a symbolic batch dim; returns (model, numpy fn)."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((features, hidden)).astype(np.float32)
    b1 = rng.standard_normal(hidden).astype(np.float32)
    w2 = rng.standard_normal((hidden, 3)).astype(np.float32)
    b2 = rng.standard_normal(3).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["y0"]),
        helper.make_node("Add", ["y0", "b2"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])], inits)

    def reference(x):
        return np.maximum(x.astype(np.float64) @ w1 + b1, 0) @ w2 + b2

    return model, reference


def transpose_model(dtype, shape=(2, 3)):
    """y = Transpose(x) for one dtype: data movement every dtype supports."""
    t = ONNX_TYPES[dtype]
    return make_model([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
                      [helper.make_tensor_value_info("x", t, list(shape))],
                      [helper.make_tensor_value_info("y", t, [shape[1], shape[0]])])


def two_input_model():
    """sum = a + b (float32 [2, 4]), idx = Cast(k) * 2 (int64 [3])."""
    return make_model(
        [helper.make_node("Add", ["a", "b"], ["sum"]),
         helper.make_node("Mul", ["k", "two"], ["idx"])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
        [numpy_helper.from_array(np.array(2, dtype=np.int64), "two")])


@pytest.fixture(scope="session")
def mlp():
    return mlp_model()


@pytest.fixture(scope="session")
def mlp_engine(mlp):
    return kiln.build(mlp[0], shapes={"x": (4, 6)})


@pytest.fixture(scope="session")
def cnn_engine():
    return kiln.build(SAMPLE_CNN, shapes={"image": (2, 3, 32, 32)})


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def try_import_torch():
    try:
        import torch  # noqa: F401
        return torch
    except Exception:  # not installed, or built for another numpy
        return None
