// Engine builder, plan file and execution context: numerics against the reference
// interpreter, plan round trips, determinism, damaged files, dynamic shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "builder/plan_file.h"
#include "kiln/kiln.h"
#include "model_builder.h"
#include "onnx/importer.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

using namespace kiln::testing;

const std::string kSample = std::string(KILN_SOURCE_DIR) + "/models/sample_cnn.onnx";

Tensor random_f32(const Dims& dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  Tensor t(DataType::kFloat32, dims);
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// The engine's outputs must match the reference interpreter on the original model.
void expect_matches_reference(const std::string& model_path, Engine& engine, const std::map<std::string, Tensor>& inputs,
                              double tol = 1e-4) {
  auto model = import_onnx_file(model_path);
  ASSERT_TRUE(model) << model.status().message();
  auto want = Interpreter(*model->graph).run(inputs);
  ASSERT_TRUE(want) << want.status().message();
  auto ctx = engine.create_execution_context();
  ASSERT_TRUE(ctx) << ctx.status().message();
  auto got = ctx.value()->run(inputs);
  ASSERT_TRUE(got) << got.status().message();
  const auto& outs = model->graph->outputs();
  ASSERT_EQ(outs.size(), got->size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor& w = want.value()[i];
    const Tensor& g = got->at(outs[i]->name());
    ASSERT_EQ(w.dims(), g.dims()) << outs[i]->name();
    ASSERT_EQ(w.dtype(), g.dtype());
    for (int64_t j = 0; j < w.size(); ++j) {
      const double a = w.get_double(j), b = g.get_double(j);
      ASSERT_FALSE(std::isnan(b)) << outs[i]->name() << "[" << j << "]";
      ASSERT_NEAR(a, b, tol * (1 + std::fabs(a))) << outs[i]->name() << "[" << j << "]";
    }
  }
}

std::shared_ptr<Engine> build_sample(const BuilderConfig& config = {}) {
  auto e = Builder().build_from_file(kSample, config);
  EXPECT_TRUE(e) << e.status().message();
  return e ? e.value() : nullptr;
}

Dims sample_input_dims(const Engine& e) {
  Dims d = e.inputs()[0].dims;
  for (auto& x : d) x = x < 0 ? 1 : x;
  return d;
}

TEST(Engine, BuildsAndMatchesReference) {
  auto e = build_sample();
  ASSERT_TRUE(e);
  EXPECT_GT(e->layers().size(), 0u);
  EXPECT_GT(e->summary().weight_bytes, 0u);
  EXPECT_GT(e->summary().peak_activation_bytes, 0u);
  for (uint32_t seed : {1u, 2u, 3u}) {
    expect_matches_reference(kSample, *e, {{e->inputs()[0].name, random_f32(sample_input_dims(*e), seed)}});
  }
}

TEST(Engine, SaveLoadRoundTripIsExactAndRunsTheSame) {
  auto e = build_sample();
  ASSERT_TRUE(e);
  const std::string path = ::testing::TempDir() + "/sample.kiln";
  ASSERT_TRUE(e->save(path).is_ok());
  auto loaded = Engine::load(path);
  ASSERT_TRUE(loaded) << loaded.status().message();
  EXPECT_TRUE(loaded.value()->serialize() == e->serialize()) << "plans differ";
  Tensor x = random_f32(sample_input_dims(*e), 9);
  auto c1 = e->create_execution_context();
  auto c2 = loaded.value()->create_execution_context();
  auto o1 = c1.value()->run({{e->inputs()[0].name, x}});
  auto o2 = c2.value()->run({{e->inputs()[0].name, x}});
  ASSERT_TRUE(o1 && o2);
  for (const auto& [name, t] : o1.value()) {
    const Tensor& u = o2->at(name);
    ASSERT_EQ(t.nbytes(), u.nbytes());
    EXPECT_EQ(0, std::memcmp(t.raw(), u.raw(), t.nbytes())) << name;
  }
  std::filesystem::remove(path);
}

TEST(Engine, SameModelConfigAndTimingCacheGiveIdenticalPlans) {
  BuilderConfig config;
  config.timing_cache_path = ::testing::TempDir() + "/timing_cache.json";
  std::filesystem::remove(config.timing_cache_path);
  auto a = build_sample(config);
  auto b = build_sample(config);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->serialize() == b->serialize()) << "plans differ";
  EXPECT_TRUE(std::filesystem::exists(config.timing_cache_path));
  std::filesystem::remove(config.timing_cache_path);
}

TEST(Engine, DamagedPlansAreRejectedWithClearErrors) {
  auto e = build_sample();
  ASSERT_TRUE(e);
  const std::string good = e->serialize();
  // Every truncation is rejected (stride keeps the test fast while covering each section).
  for (size_t n = 0; n < good.size(); n += 1 + good.size() / 300) {
    auto r = Engine::deserialize(good.data(), n);
    ASSERT_FALSE(r) << "truncated to " << n;
  }
  // Any flipped byte is caught by the checksum (or the header checks).
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    std::string bad = good;
    size_t at = rng() % bad.size();
    bad[at] = static_cast<char>(bad[at] ^ (1 + rng() % 255));
    auto r = Engine::deserialize(bad.data(), bad.size());
    ASSERT_FALSE(r) << "flipped byte " << at;
    EXPECT_FALSE(r.status().message().empty());
  }
  {
    std::string bad = good;
    bad[8] = 99;  // format version
    auto r = Engine::deserialize(bad.data(), bad.size());
    ASSERT_FALSE(r);
    EXPECT_NE(r.status().message().find("version"), std::string::npos) << r.status().message();
  }
  {
    auto r = Engine::deserialize("not a plan at all, just text", 28);
    ASSERT_FALSE(r);
    EXPECT_NE(r.status().message().find("not a kiln engine"), std::string::npos) << r.status().message();
  }
  auto missing = Engine::load("/nonexistent/model.kiln");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("/nonexistent/model.kiln"), std::string::npos);
}

TEST(Engine, PlanForAnotherTargetIsRejected) {
  auto e = build_sample();
  ASSERT_TRUE(e);
  const std::string good = e->serialize();
  auto storage = copy_plan_bytes(good.data(), good.size());
  auto sections = read_plan(*storage, "engine");
  ASSERT_TRUE(sections);
  auto graph = import_plan_graph(sections.value(), "engine");
  ASSERT_TRUE(graph);
  nlohmann::json meta = sections->meta;
  meta["target"]["arch"] = "riscv64";
  auto bytes = write_plan(meta, *graph.value());
  ASSERT_TRUE(bytes);
  auto r = Engine::deserialize(bytes->data(), bytes->size());
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("riscv64"), std::string::npos) << r.status().message();
  meta = sections->meta;
  meta["inputs"] = "garbage";
  bytes = write_plan(meta, *graph.value());
  r = Engine::deserialize(bytes->data(), bytes->size());
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("metadata"), std::string::npos) << r.status().message();
}

// x [batch, 8] -> MatMul(W) + b -> Relu -> Softmax: dynamic batch served by one profile.
onnx::ModelProto dynamic_mlp() {
  auto m = make_model(17);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"batch", "8"});
  std::vector<float> w(8 * 6), b(6);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto& v : w) v = d(rng);
  for (auto& v : b) v = d(rng);
  add_initializer_f32(m, "W", {8, 6}, w);
  add_initializer_f32(m, "B", {6}, b);
  add_node(m, "MatMul", {"x", "W"}, {"mm"});
  add_node(m, "Add", {"mm", "B"}, {"lin"});
  add_node(m, "Relu", {"lin"}, {"act"});
  add_node(m, "Softmax", {"act"}, {"y"});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"batch", "6"});
  return m;
}

TEST(Engine, DynamicShapesWithinTheProfile) {
  const auto m = dynamic_mlp();
  BuilderConfig config;
  config.profiles.push_back(OptimizationProfile{{{"x", ShapeRange{{1, 8}, {2, 8}, {4, 8}}}}});
  auto e = Builder().build_from_memory(m.SerializeAsString(), config);
  ASSERT_TRUE(e) << e.status().message();
  EXPECT_EQ(e.value()->inputs()[0].dims, (Dims{-1, 8}));
  auto model = import_onnx_bytes(m.SerializeAsString(), ".");
  ASSERT_TRUE(model);
  auto ctx = e.value()->create_execution_context();
  ASSERT_TRUE(ctx);
  for (int64_t batch : {3, 1, 4, 3}) {
    Tensor x = random_f32({batch, 8}, static_cast<uint32_t>(batch));
    auto got = ctx.value()->run({{"x", x}});
    ASSERT_TRUE(got) << got.status().message();
    auto want = Interpreter(*model->graph).run({{"x", x}});
    ASSERT_TRUE(want);
    const Tensor& g = got->at("y");
    ASSERT_EQ(g.dims(), (Dims{batch, 6}));
    for (int64_t i = 0; i < g.size(); ++i) ASSERT_NEAR(want.value()[0].data<float>()[i], g.data<float>()[i], 1e-5);
  }
  auto too_big = ctx.value()->run({{"x", random_f32({5, 8}, 1)}});
  ASSERT_FALSE(too_big);
  EXPECT_NE(too_big.status().message().find("outside profile"), std::string::npos) << too_big.status().message();
  auto wrong = ctx.value()->run({{"x", random_f32({2, 7}, 1)}});
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.status().message().find("'x'"), std::string::npos) << wrong.status().message();
}

TEST(Engine, BadProfilesAreRejected) {
  const auto m = dynamic_mlp();
  BuilderConfig config;
  config.profiles.push_back(OptimizationProfile{{{"nope", ShapeRange{{1, 8}, {1, 8}, {1, 8}}}}});
  auto e = Builder().build_from_memory(m.SerializeAsString(), config);
  ASSERT_FALSE(e);
  EXPECT_NE(e.status().message().find("'nope' is not an input"), std::string::npos) << e.status().message();
  config.profiles[0] = OptimizationProfile{{{"x", ShapeRange{{4, 8}, {2, 8}, {8, 8}}}}};
  e = Builder().build_from_memory(m.SerializeAsString(), config);
  ASSERT_FALSE(e);
  config.profiles[0] = OptimizationProfile{{{"x", ShapeRange{{1, 7}, {1, 7}, {1, 7}}}}};
  e = Builder().build_from_memory(m.SerializeAsString(), config);
  ASSERT_FALSE(e);
  EXPECT_NE(e.status().message().find("fixed at 8"), std::string::npos) << e.status().message();
}

TEST(Engine, BoundOutputIsWrittenInPlace) {
  auto e = build_sample();
  ASSERT_TRUE(e);
  auto ctx = e->create_execution_context();
  ASSERT_TRUE(ctx);
  Tensor x = random_f32(sample_input_dims(*e), 4);
  const std::string out = e->outputs()[0].name;
  auto ref = ctx.value()->run({{e->inputs()[0].name, x}});
  ASSERT_TRUE(ref);
  Tensor y(e->outputs()[0].dtype, ref->at(out).dims());
  ASSERT_TRUE(ctx.value()->set_tensor_address(e->inputs()[0].name, x.raw()).is_ok());
  ASSERT_TRUE(ctx.value()->set_tensor_address(out, y.raw()).is_ok());
  ASSERT_TRUE(ctx.value()->execute().is_ok());
  EXPECT_EQ(0, std::memcmp(y.raw(), ref->at(out).raw(), y.nbytes()));
  EXPECT_FALSE(ctx.value()->set_tensor_address("nope", x.raw()).is_ok());
}

// unbind_tensor: after unbinding, the output goes to the context's memory again and the
// caller's buffer is left alone.
TEST(Engine, UnboundOutputGoesToContextMemory) {
  auto e = build_sample();
  ASSERT_TRUE(e);
  auto ctx = e->create_execution_context();
  ASSERT_TRUE(ctx);
  Tensor x = random_f32(sample_input_dims(*e), 5);
  const std::string in = e->inputs()[0].name, out = e->outputs()[0].name;
  auto ref = ctx.value()->run({{in, x}});
  ASSERT_TRUE(ref);
  Tensor y(e->outputs()[0].dtype, ref->at(out).dims());
  ASSERT_TRUE(ctx.value()->set_tensor_address(in, x.raw()).is_ok());
  ASSERT_TRUE(ctx.value()->set_tensor_address(out, y.raw()).is_ok());
  ASSERT_TRUE(ctx.value()->execute().is_ok());
  ASSERT_TRUE(ctx.value()->unbind_tensor(out).is_ok());
  std::memset(y.raw(), 0x7F, y.nbytes());
  ASSERT_TRUE(ctx.value()->execute().is_ok());
  auto got = ctx.value()->output(out);
  ASSERT_TRUE(got);
  EXPECT_NE(got->raw(), y.raw());
  EXPECT_EQ(0, std::memcmp(got->raw(), ref->at(out).raw(), got->nbytes()));
  for (int64_t i = 0; i < y.size(); ++i) ASSERT_EQ(reinterpret_cast<const uint8_t*>(y.raw())[i], 0x7F);
  EXPECT_FALSE(ctx.value()->unbind_tensor("nope").is_ok());
}

}  // namespace
}  // namespace kiln
