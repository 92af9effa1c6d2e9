// Build an engine from an ONNX model, save it, load it back and run it: the C++ API
// end to end (docs/api.md walks through it).
//
//   kiln_api_example MODEL.onnx [ENGINE.kiln]
#include <cstdio>
#include <random>

#include "kiln/kiln.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx [ENGINE.kiln]\n", argv[0]);
    return 2;
  }
  const std::string model = argv[1];
  const std::string plan = argc > 2 ? argv[2] : "model.kiln";

  // 1. Build once: import, optimize, pick a kernel per layer, plan memory.
  kiln::BuilderConfig config;
  config.threads = 0;  // all cores
  config.progress = [](const std::string& stage, double done) {
    std::fprintf(stderr, "\r%-10s %3.0f%%", stage.c_str(), 100 * done);
  };
  auto built = kiln::Builder().build_from_file(model, config);
  std::fprintf(stderr, "\n");
  if (!built) {
    std::fprintf(stderr, "build failed: %s\n", built.status().message().c_str());
    return 1;
  }
  std::printf("built %zu layers (%d fusions) in %.2f s\n", built.value()->summary().layers,
              built.value()->summary().fusions, built.value()->summary().build_seconds);
  if (auto s = built.value()->save(plan); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }

  // 2. Load anywhere: the plan is validated, weights are mapped, not copied.
  auto engine = kiln::Engine::load(plan);
  if (!engine) {
    std::fprintf(stderr, "load failed: %s\n", engine.status().message().c_str());
    return 1;
  }
  auto ctx = engine.value()->create_execution_context();
  if (!ctx) return 1;

  // 3. Set shapes, bind buffers once, execute many times (no allocation per inference).
  const kiln::TensorDesc& in = engine.value()->inputs()[0];
  kiln::Dims dims = in.dims;
  for (auto& d : dims) d = d < 0 ? 1 : d;  // dynamic dims: 1 here
  if (auto s = ctx.value()->set_input_shape(in.name, dims); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  kiln::Tensor x(in.dtype, dims);
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> uniform(-1, 1);
  if (in.dtype == kiln::DataType::kFloat32) {
    for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = uniform(rng);
  }
  const kiln::TensorDesc& out = engine.value()->outputs()[0];
  auto out_dims = ctx.value()->tensor_shape(out.name);
  if (!out_dims) return 1;
  kiln::Tensor y(out.dtype, out_dims.value());
  if (!ctx.value()->set_tensor_address(in.name, x.raw()) || !ctx.value()->set_tensor_address(out.name, y.raw())) return 1;
  for (int i = 0; i < 3; ++i) {
    if (auto s = ctx.value()->execute(); !s) {
      std::fprintf(stderr, "execute failed: %s\n", s.message().c_str());
      return 1;
    }
  }
  std::printf("%s: %s\n", out.name.c_str(), y.describe().c_str());
  return 0;
}
