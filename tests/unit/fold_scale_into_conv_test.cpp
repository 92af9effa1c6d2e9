// fold_scale_into_conv: structure (per-channel Mul/Add folded into Conv; near misses
// kept) and numerics (same outputs as the original graph).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ir/verifier.h"
#include "model_builder.h"
#include "onnx/importer.h"
#include "passes/pass.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

using namespace kiln::testing;

std::unique_ptr<Graph> load(const onnx::ModelProto& m) {
  auto r = import_onnx_bytes(m.SerializeAsString(), ".", "test.onnx");
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r->graph) : nullptr;
}

int count(const Graph& g, Op op) {
  int c = 0;
  for (Node* n : g.nodes()) c += n->op() == op;
  return c;
}

// Runs one pass (and dead-code elimination after it) and returns its rewrite count.
int run_pass(Graph& g, PassFn pass) {
  PassReport r;
  PassContext ctx(r);
  EXPECT_TRUE(pass(g, ctx).is_ok());
  PassReport d;
  PassContext dctx(d);
  EXPECT_TRUE(eliminate_dead_code(g, dctx).is_ok());
  EXPECT_TRUE(verify_graph(g).is_ok());
  return r.rewrites;
}

// Fresh random float inputs for every graph input (all tests use static float inputs).
TensorMap random_inputs(const Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  TensorMap m;
  for (Value* v : g.inputs()) {
    Dims d;
    for (const Dim& dim : *v->shape) d.push_back(dim.value);
    Tensor t(DataType::kFloat32, d);
    for (int64_t i = 0; i < t.size(); ++i) {
      float x = dist(rng);
      t.data<float>()[i] = x == 0.0f ? 0.5f : x;
    }
    m[v->name()] = t;
  }
  return m;
}

// The optimized graph must compute what the original computes, output by output.
void expect_same_outputs(const onnx::ModelProto& m, const Graph& optimized) {
  auto original = load(m);
  ASSERT_TRUE(original);
  for (uint32_t seed : {1u, 2u, 3u}) {
    TensorMap in = random_inputs(*original, seed);
    auto want = Interpreter(*original).run(in);
    auto got = Interpreter(optimized).run(in);
    ASSERT_TRUE(want.is_ok()) << want.status().message();
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    ASSERT_EQ(want->size(), got->size());
    for (size_t i = 0; i < want->size(); ++i) {
      const Tensor& a = (*want)[i];
      const Tensor& b = (*got)[i];
      ASSERT_EQ(a.dims(), b.dims());
      for (int64_t k = 0; k < a.size(); ++k) {
        ASSERT_FALSE(std::isnan(b.get_double(k)));
        EXPECT_NEAR(a.get_double(k), b.get_double(k), 1e-5 * (1 + std::fabs(a.get_double(k))));
      }
    }
  }
}

// Deterministic values in [lo, hi).
std::vector<float> values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// x[1,3,5,5] -> Conv(W[4,3,3,3], B) -> c
onnx::ModelProto conv_model(bool with_bias = true) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "3", "5", "5"});
  add_initializer_f32(m, "w", {4, 3, 3, 3}, values(108, 1));
  std::vector<std::string> in = {"x", "w"};
  if (with_bias) {
    add_initializer_f32(m, "b", {4}, values(4, 2));
    in.push_back("b");
  }
  add_node(m, "Conv", in, {"c"}, "conv");
  return m;
}

TEST(FoldScaleIntoConv, FoldsPerChannelMulAndAddChain) {
  for (bool with_bias : {true, false}) {
    auto m = conv_model(with_bias);
    add_initializer_f32(m, "s", {4, 1, 1}, values(4, 3, 0.5f, 2.0f));
    add_initializer_f32(m, "t", {1, 4, 1, 1}, values(4, 4));
    add_initializer_f32(m, "k", {}, {1.5f});
    add_node(m, "Mul", {"c", "s"}, {"m1"}, "mul_channels");
    add_node(m, "Add", {"t", "m1"}, {"a1"}, "add_channels");
    add_node(m, "Mul", {"k", "a1"}, {"y"}, "mul_scalar");
    add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "4", "3", "3"});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_scale_into_conv), 3);
    EXPECT_EQ(g->num_nodes(), 1u);
    EXPECT_EQ(count(*g, Op::Conv), 1);
    EXPECT_EQ(g->outputs()[0]->name(), "y");
    expect_same_outputs(m, *g);
  }
}

TEST(FoldScaleIntoConv, KeepsNearMisses) {
  {  // a constant that varies over space, not per channel
    auto m = conv_model();
    add_initializer_f32(m, "s", {4, 3, 3}, values(36, 3));
    add_node(m, "Mul", {"c", "s"}, {"y"}, "mul");
    add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "4", "3", "3"});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_scale_into_conv), 0);
    EXPECT_EQ(count(*g, Op::Mul), 1);
    expect_same_outputs(m, *g);
  }
  {  // a rank-5 constant broadcasts the output to a higher rank
    auto m = conv_model();
    add_initializer_f32(m, "s", {1, 1, 4, 1, 1}, values(4, 3));
    add_node(m, "Mul", {"c", "s"}, {"y"}, "mul");
    add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "1", "4", "3", "3"});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_scale_into_conv), 0);
    expect_same_outputs(m, *g);
  }
  {  // a non-constant scale
    auto m = conv_model();
    add_input(m, "s", onnx::TensorProto::FLOAT, {"4", "1", "1"});
    add_node(m, "Mul", {"c", "s"}, {"y"}, "mul");
    add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "4", "3", "3"});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_scale_into_conv), 0);
    expect_same_outputs(m, *g);
  }
  {  // the Conv output has a second user
    auto m = conv_model();
    add_initializer_f32(m, "t", {4, 1, 1}, values(4, 4));
    add_node(m, "Add", {"c", "t"}, {"y"}, "add");
    add_node(m, "Relu", {"c"}, {"r"}, "relu");
    add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "4", "3", "3"});
    add_output(m, "r", onnx::TensorProto::FLOAT, {"1", "4", "3", "3"});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_scale_into_conv), 0);
    expect_same_outputs(m, *g);
  }
}

}  // namespace
}  // namespace kiln
