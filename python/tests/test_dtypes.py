"""Every kiln dtype through an engine and back: numpy (with ml_dtypes for bfloat16, the
float8/float4 types and int4/int2), DLPack, and kiln.Tensor outputs."""
import numpy as np
import pytest

import kiln
from conftest import transpose_model

ml_dtypes = pytest.importorskip("ml_dtypes")

NUMPY_DTYPES = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16, "int8": np.int8, "int16": np.int16,
    "int32": np.int32, "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
    "uint64": np.uint64, "bool": np.bool_,
    "bfloat16": ml_dtypes.bfloat16, "float8e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "float8e5m2": ml_dtypes.float8_e5m2,
    "float8e5m2fnuz": ml_dtypes.float8_e5m2fnuz, "float8e8m0": ml_dtypes.float8_e8m0fnu,
    "float4e2m1": ml_dtypes.float4_e2m1fn, "uint4": ml_dtypes.uint4, "int4": ml_dtypes.int4,
    "uint2": ml_dtypes.uint2, "int2": ml_dtypes.int2,
}


def sample(dtype_name, shape, rng):
    dt = NUMPY_DTYPES[dtype_name]
    if dtype_name == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    info_int = {"int4": (-8, 8), "uint4": (0, 16), "int2": (-2, 2), "uint2": (0, 4)}
    if dtype_name in info_int:
        lo, hi = info_int[dtype_name]
        return rng.integers(lo, hi, shape).astype(np.int8).astype(dt)
    if np.issubdtype(np.dtype(dt), np.integer):
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    if dtype_name == "float8e8m0":
        return (2.0 ** rng.integers(-4, 5, shape)).astype(np.float32).astype(dt)
    return (rng.standard_normal(shape) * 3).astype(np.float32).astype(dt)


def bits(a):
    """The raw bytes of an array, for exact comparison whatever the dtype (NaN included)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype.itemsize == 1 else a.view(f"u{a.dtype.itemsize}")


def test_every_kiln_dtype_is_covered():
    assert set(kiln.dtypes()) == set(NUMPY_DTYPES)


@pytest.mark.parametrize("dtype_name", sorted(NUMPY_DTYPES))
def test_round_trip_numpy(dtype_name, rng):
    engine = kiln.build(transpose_model(dtype_name, (3, 5)))
    assert engine.inputs[0].dtype == dtype_name and engine.outputs[0].dtype == dtype_name
    x = sample(dtype_name, (3, 5), rng)
    y = engine.run({"x": x})["y"]
    assert y.dtype == np.dtype(NUMPY_DTYPES[dtype_name]) and y.shape == (5, 3)
    np.testing.assert_array_equal(bits(y), bits(x.T))


@pytest.mark.parametrize("dtype_name", sorted(NUMPY_DTYPES))
def test_round_trip_kiln_tensor(dtype_name, rng):
    """output="dlpack" gives kiln.Tensor objects; they go back in without a copy and
    numpy views them."""
    engine = kiln.build(transpose_model(dtype_name, (4, 2)))
    x = sample(dtype_name, (4, 2), rng)
    t = engine.run({"x": x}, output="dlpack")["y"]
    assert isinstance(t, kiln.Tensor) and t.shape == (2, 4) and t.dtype == dtype_name and t.device == "cpu"
    np.testing.assert_array_equal(bits(t.numpy()), bits(x.T))
    back = engine.run({"x": engine.run({"x": t.numpy().T.copy()}, output="dlpack")["y"].numpy().T.copy()})["y"]
    np.testing.assert_array_equal(bits(back), bits(x.T))
    if dtype_name in ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "uint16",
                      "uint32", "uint64", "bool"):
        a = np.from_dlpack(t) if dtype_name != "bool" or np.lib.NumpyVersion(np.__version__) >= "1.25.0" else None
        if a is not None:
            np.testing.assert_array_equal(a, x.T)
            assert np.shares_memory(a, np.asarray(t))  # DLPack export is zero-copy
    elif dtype_name not in ("bfloat16",):
        with pytest.raises(kiln.UnsupportedError, match="DLPack has no type code"):
            t.__dlpack__()


def test_numpy_dlpack_input(rng):
    """numpy's own __dlpack__ is not used for arrays (the array interface is), but any
    DLPack producer works: a wrapper exposing only the protocol."""
    engine = kiln.build(transpose_model("float32", (3, 5)))
    x = rng.standard_normal((3, 5)).astype(np.float32)

    class Producer:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    np.testing.assert_array_equal(engine.run({"x": Producer(x)})["y"], x.T)
    # Strided DLPack tensors are copied into a contiguous one.
    np.testing.assert_array_equal(engine.run({"x": Producer(np.ascontiguousarray(x.T).T)})["y"], x.T)


def test_bfloat16_values(rng):
    engine = kiln.build(transpose_model("bfloat16", (2, 3)))
    x = np.array([[1.5, -2.0, 3.25], [0.0, -0.5, 1e10]], dtype=ml_dtypes.bfloat16)
    y = engine.run({"x": x})["y"]
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32), x.T.astype(np.float32))


def test_big_endian_input(rng):
    engine = kiln.build(transpose_model("int32", (2, 3)))
    x = np.arange(6, dtype=">i4").reshape(2, 3)
    np.testing.assert_array_equal(engine.run({"x": x})["y"], x.T.astype(np.int32))
