// The `kiln._kiln` extension module (wrapped by the `kiln` package, python/kiln/): build
// engines from ONNX models, save and load them, run them on numpy arrays or DLPack
// tensors, compare them against the original model and benchmark them.
#include "py_engine.h"
#include "runtime/cuda_hooks.h"

namespace kiln::pyapi {
namespace {

std::vector<std::string> dtype_names() {
  std::vector<std::string> out;
  for (int i = 0; i <= 26; ++i) {
    const DataType dt = static_cast<DataType>(i);
    if (dt != DataType::kString && dtype_size(dt) != 0) out.push_back(dtype_name(dt));
  }
  return out;
}

}  // namespace
}  // namespace kiln::pyapi

PYBIND11_MODULE(_kiln, m) {
  namespace py = pybind11;
  using namespace kiln::pyapi;
  m.doc() = "kiln: an ONNX inference optimizer and runtime (the compiled part of the kiln package).";
  m.attr("__version__") = KILN_VERSION;
  register_errors(m);
  register_tensor(m);
  register_config(m);
  register_engine(m);
  register_tools(m);
  m.def("dtypes", &dtype_names, "kiln's tensor dtype names (engine inputs and outputs use these).");
  m.def("cuda_compiled", [] { return kiln::cuda_compiled(); }, "Whether this build of kiln has the CUDA backend.");
  m.def(
      "cuda_available", [] { return kiln::cuda_device_status().is_ok(); },
      "Whether CUDA engines can be built and run here: a build with the CUDA backend and a usable GPU.");
}
