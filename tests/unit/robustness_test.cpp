// Corrupted models must give errors, never crashes: random byte mutations of the sample
// model go through import and, when they still import, through a run.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <random>

#include "builder/plan_file.h"
#include "kiln/kiln.h"
#include "model_builder.h"
#include "onnx/importer.h"
#include "passes/pass.h"
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

// Regressions found by the fuzz targets (tests/fuzz, docs/fuzzing.md). Under the fuzz
// build's sanitizers each of these was undefined behaviour; here they check the visible
// part of the fix.

// fuzz_onnx_importer: a Conv with pads INT64_MIN made shape inference overflow int64
// (window_out); a ConvTranspose group of INT64_MAX likewise. Inference must leave such
// dims unknown, and running must give the kernel's error.
TEST(Robustness, ConvWithAbsurdAttributesInfersNoGarbageShape) {
  using namespace kiln::testing;
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  auto m = make_model(17);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "1", "8", "8"});
  add_initializer_f32(m, "w", {1, 1, 3, 3}, std::vector<float>(9, 0.5f));
  add_ints_attr(add_node(m, "Conv", {"x", "w"}, {"y"}), "pads", {kMin, 2, kMin, 4});
  auto* ct = add_node(m, "ConvTranspose", {"x", "w"}, {"z"});
  auto* group = ct->add_attribute();
  group->set_name("group");
  group->set_type(onnx::AttributeProto::INT);
  group->set_i(std::numeric_limits<int64_t>::max());
  add_output(m, "y", onnx::TensorProto::FLOAT, {});
  add_output(m, "z", onnx::TensorProto::FLOAT, {});
  auto model = import_onnx_bytes(m.SerializeAsString(), ".", "absurd_conv.onnx");
  ASSERT_TRUE(model) << model.status().message();
  Graph& g = *model->graph;
  PassReport report;
  PassContext ctx(report);
  ASSERT_TRUE(infer_shapes(g, ctx));
  const Value* y = g.outputs()[0];
  ASSERT_TRUE(y->shape);
  ASSERT_EQ(y->shape->size(), 4u);
  EXPECT_FALSE((*y->shape)[2].known()) << sym_shape_str(y->shape);
  EXPECT_FALSE((*y->shape)[3].known()) << sym_shape_str(y->shape);
  const Value* z = g.outputs()[1];
  if (z->shape && z->shape->size() == 4) {
    EXPECT_FALSE((*z->shape)[1].known()) << sym_shape_str(z->shape);
  }
  TensorMap feeds;
  feeds["x"] = random_input(g, *g.inputs()[0], {1, 1, 8, 8}, 3);
  auto out = Interpreter(g).run(feeds);
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("pads"), std::string::npos) << out.status().message();
}

// fuzz_plan_loader: engine metadata with a float where an integer belongs (dims 1e30) went
// through nlohmann's get<int64_t>(), an out-of-range float-to-int cast; a negative
// memory_limit_bytes wrapped into a huge size_t. Both must be rejected as corrupt.
TEST(Robustness, EngineMetadataWithNonIntegerFieldsIsRejected) {
  BuilderConfig config;
  config.time_tactics = false;
  auto engine = Builder().build_from_file(std::string(KILN_SOURCE_DIR) + "/models/sample_cnn.onnx", config);
  ASSERT_TRUE(engine) << engine.status().message();
  const std::string good = engine.value()->serialize();
  auto storage = copy_plan_bytes(good.data(), good.size());
  auto sections = read_plan(*storage, "engine");
  ASSERT_TRUE(sections);
  auto graph = import_plan_graph(sections.value(), "engine");
  ASSERT_TRUE(graph);
  const std::vector<std::pair<std::string, nlohmann::json>> edits = {
      {"/inputs/0/dims/0", 1e30}, {"/config/memory_limit_bytes", -1}, {"/config/threads", 1e10},
      {"/summary/layers", -3}, {"/inputs/0/dtype", 1.5}};
  for (const auto& [where, value] : edits) {
    nlohmann::json meta = sections->meta;
    meta[nlohmann::json::json_pointer(where)] = value;
    auto bytes = write_plan(meta, *graph.value());
    ASSERT_TRUE(bytes);
    auto r = Engine::deserialize(bytes->data(), bytes->size());
    ASSERT_FALSE(r) << where;
    EXPECT_NE(r.status().message().find("metadata"), std::string::npos) << where << ": " << r.status().message();
  }
}

}  // namespace
}  // namespace kiln
