"""Writes the ONNX backend test suite of the installed `onnx` package into a folder.

Recent onnx wheels ship the model cases (pytorch-converted, pytorch-operator, simple)
as data but the node cases only as Python generators; this writes both in the
standard layout: <out>/<kind>/<case>/model.onnx + test_data_set_N/{input,output}_M.pb.
Used only by kiln's tests; kiln itself does not depend on Python.
"""
import os
import shutil
import sys
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case import node as node_cases


def write_value(path, value, name, type_proto):
    if type_proto.HasField("sequence_type"):
        proto = numpy_helper.from_list(value, name)
    elif type_proto.HasField("optional_type"):
        proto = numpy_helper.from_optional(value, name)
    elif type_proto.HasField("map_type"):
        proto = numpy_helper.from_dict(value, name)
    elif isinstance(value, onnx.TensorProto):
        proto = value
    else:
        proto = numpy_helper.from_array(np.asarray(value), name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def main():
    out = sys.argv[1]
    stamp = os.path.join(out, ".complete-" + onnx.__version__)
    if os.path.exists(stamp):
        print(f"test data for onnx {onnx.__version__} already in {out}")
        return
    shutil.rmtree(out, ignore_errors=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            cases = node_cases.collect_testcases(None)
    written = 0
    for case in cases:
        case_dir = os.path.join(out, case.kind, case.name)
        os.makedirs(case_dir, exist_ok=True)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets):
            ds = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(ds, exist_ok=True)
            graph = case.model.graph
            for j, value in enumerate(inputs):
                write_value(os.path.join(ds, f"input_{j}.pb"), value, graph.input[j].name, graph.input[j].type)
            for j, value in enumerate(outputs):
                write_value(os.path.join(ds, f"output_{j}.pb"), value, graph.output[j].name, graph.output[j].type)
        written += 1
    data_dir = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    for kind in ("pytorch-converted", "pytorch-operator", "simple"):
        src = os.path.join(data_dir, kind)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(out, kind), dirs_exist_ok=True)
    open(stamp, "w").close()
    print(f"wrote {written} node cases and the model cases of onnx {onnx.__version__} to {out}")


if __name__ == "__main__":
    main()
