#!/usr/bin/env python3
"""Regenerates the fuzzers' seed corpora in tests/fuzz/corpus/ (committed; rerun after a
plan format change).

    python3 tests/fuzz/make_corpus.py path/to/kiln     # the kiln CLI of a normal build

corpus/onnx/  small models from the ONNX backend test data (Debian libonnx-testdata), one
              per op family, plus models/sample_cnn.onnx and a few tiny graphs written here
              whose patterns the optimizer fuses (Conv+BatchNorm+Relu+residual,
              MatMul+bias+Gelu, decomposed LayerNorm), so mutations start inside the passes.
corpus/plan/  engine files built by `kiln build` from some of those models (each < 64 KB):
              static shapes (they load and run) and one dynamic-batch engine.
Needs python3 with onnx and numpy (system packages or the test venv).
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NODE_DATA = "/usr/share/libonnx-testdata/data/node"
MAX_SEED_BYTES = 64 * 1024

NODE_TESTS = [
    "test_add", "test_relu", "test_conv_with_strides_padding", "test_gemm_default_vector_bias",
    "test_matmul_2d", "test_reshape_reduced_dims", "test_transpose_default", "test_softmax_axis_1",
    "test_concat_2d_axis_0", "test_slice", "test_gather_0", "test_maxpool_2d_default",
    "test_batchnorm_example", "test_reduce_mean_keepdims_example", "test_cast_FLOAT_to_DOUBLE",
    "test_if", "test_loop11", "test_scan9_sum", "test_layer_normalization_2d_axis0_expanded",
    "test_constantofshape_float_ones", "test_expand_dim_changed", "test_resize_upsample_scales_nearest",
    "test_split_equal_parts_1d", "test_where_example", "test_top_k", "test_lstm_defaults",
    "test_einsum_batch_matmul", "test_sequence_insert_at_back", "test_clip", "test_nonzero_example",
    "test_averagepool_2d_pads", "test_tile", "test_hardswish_expanded", "test_argmax_default_axis_example",
]


def rand(rng, name, *shape, scale=0.5):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def save(model, path):
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def conv_bn_relu_residual(rng):
    """x -> Conv -> BatchNorm -> Add(x) -> Relu: folding, residual and activation fusion."""
    inits = [rand(rng, "w", 4, 4, 3, 3), rand(rng, "b", 4),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "scale"),
             rand(rng, "bias", 4), rand(rng, "mean", 4),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "var")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
             helper.make_node("Add", ["n", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    g = helper.make_graph(nodes, "conv_bn_relu_residual",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def matmul_bias_gelu(rng):
    """MatMul + Add + the erf form of Gelu: the GELU pattern and the Gemm epilogue."""
    inits = [rand(rng, "w", 8, 6), rand(rng, "b", 6),
             numpy_helper.from_array(np.array(np.sqrt(2.0), np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["h"]),
             helper.make_node("Div", ["h", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["h", "e1"], ["p"]),
             helper.make_node("Mul", ["p", "half"], ["y"])]
    g = helper.make_graph(nodes, "matmul_bias_gelu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def layernorm_decomposed(rng):
    """ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add: the LayerNorm pattern."""
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
             rand(rng, "gamma", 8), rand(rng, "beta", 8),
             numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["mu"], keepdims=1),
             helper.make_node("Sub", ["x", "mu"], ["c"]),
             helper.make_node("Pow", ["c", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"], ["var"], keepdims=1),
             helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["c", "sd"], ["n"]),
             helper.make_node("Mul", ["n", "gamma"], ["g"]),
             helper.make_node("Add", ["g", "beta"], ["y"])]
    g = helper.make_graph(nodes, "layernorm_decomposed",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def write_onnx_corpus(out):
    os.makedirs(out, exist_ok=True)
    for name in NODE_TESTS:
        src = os.path.join(NODE_DATA, name, "model.onnx")
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(out, name[len("test_"):] + ".onnx"))
        else:
            print(f"note: {src} not found, skipped", file=sys.stderr)
    shutil.copyfile(os.path.join(ROOT, "models", "sample_cnn.onnx"), os.path.join(out, "sample_cnn.onnx"))
    rng = np.random.default_rng(7)
    for make in (conv_bn_relu_residual, matmul_bias_gelu, layernorm_decomposed):
        save(make(rng), os.path.join(out, make.__name__ + ".onnx"))


def write_plan_corpus(kiln, onnx_dir, out):
    os.makedirs(out, exist_ok=True)
    builds = [
        ("sample_cnn", "sample_cnn.onnx", ["--shapes", "image:1x3x32x32"]),
        ("sample_cnn_dynamic", "sample_cnn.onnx",
         ["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32", "--max-shapes", "image:4x3x32x32"]),
        ("conv_bn_relu_residual", "conv_bn_relu_residual.onnx", []),
        ("matmul_bias_gelu", "matmul_bias_gelu.onnx", []),
        ("layernorm_decomposed", "layernorm_decomposed.onnx", []),
        ("gemm", "gemm_default_vector_bias.onnx", []),
        ("relu_unoptimized", "relu.onnx", ["-O", "0"]),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, flags in builds:
            path = os.path.join(tmp, name + ".kiln")
            subprocess.run([kiln, "build", os.path.join(onnx_dir, model), "-o", path, "--threads", "1"] + flags,
                           check=True, stdout=subprocess.DEVNULL)
            size = os.path.getsize(path)
            if size > MAX_SEED_BYTES:
                sys.exit(f"{name}.kiln is {size} bytes, over the {MAX_SEED_BYTES}-byte seed limit")
            shutil.copyfile(path, os.path.join(out, name + ".kiln"))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    onnx_dir = os.path.join(HERE, "corpus", "onnx")
    write_onnx_corpus(onnx_dir)
    write_plan_corpus(os.path.abspath(sys.argv[1]), onnx_dir, os.path.join(HERE, "corpus", "plan"))
    for d in ("onnx", "plan"):
        files = os.listdir(os.path.join(HERE, "corpus", d))
        total = sum(os.path.getsize(os.path.join(HERE, "corpus", d, f)) for f in files)
        print(f"corpus/{d}: {len(files)} files, {total} bytes")


if __name__ == "__main__":
    main()
