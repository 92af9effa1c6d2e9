// Corrupted models must give errors, never crashes: random byte mutations of the sample
// model go through import and, when they still import, through a run.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "onnx/importer.h"
#include "runtime/inputs.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

TEST(Robustness, MutatedModelsGiveErrorsNotCrashes) {
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/models/sample_cnn.onnx", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  std::mt19937 rng(12345);
  int imported = 0, ran = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string m = bytes;
    int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) m[rng() % m.size()] = static_cast<char>(rng());
    auto model = import_onnx_bytes(m, ".", "mutated.onnx");
    if (!model.is_ok()) {
      EXPECT_FALSE(model.status().message().empty());
      continue;
    }
    ++imported;
    const Graph& g = *model->graph;
    TensorMap feeds;
    bool feedable = true;
    for (Value* v : g.inputs()) {
      auto dims = concrete_input_shape(*v, {});
      if (!dims.is_ok() || num_elements(*dims) > (1 << 20) || num_elements(*dims) < 0) { feedable = false; break; }
      feeds[v->name()] = random_input(g, *v, *dims, 7);
    }
    if (!feedable) continue;
    auto out = Interpreter(g).run(feeds);
    ran += out.is_ok();
  }
  // Most single-byte flips land in weight data and still import and run.
  EXPECT_GT(imported, 0);
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace kiln
