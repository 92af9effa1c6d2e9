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

// The optimized graph must compute what the original computes, output by output (the
// fused op evaluates the same formula with other rounding: float tolerance).
void expect_same_outputs(const onnx::ModelProto& m, const Graph& optimized, double tol = 2e-6) {
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
        EXPECT_NEAR(a.get_double(k), b.get_double(k), tol * (1 + std::fabs(a.get_double(k))));
      }
    }
  }
}

void add_scalar(onnx::ModelProto& m, const std::string& name, float v) { add_initializer_f32(m, name, {}, {v}); }

TEST(FuseSiluPattern, SigmoidTimesInputBecomesSwish) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "5"});
  add_node(m, "Sigmoid", {"x"}, {"s"}, "sig");
  add_node(m, "Mul", {"s", "x"}, {"y"}, "mul");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "5"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_silu_pattern), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* n = g->nodes()[0];
  EXPECT_EQ(n->op(), Op::Swish);
  EXPECT_EQ(n->attrs.get_float("alpha", 0.0f), 1.0f);
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  expect_same_outputs(m, *g);
}

TEST(FuseSiluPattern, ScaledSigmoidBecomesSwishWithAlpha) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "5"});
  add_scalar(m, "alpha", 1.5f);
  add_node(m, "Mul", {"alpha", "x"}, {"ax"}, "scale");
  add_node(m, "Sigmoid", {"ax"}, {"s"}, "sig");
  add_node(m, "Mul", {"x", "s"}, {"y"}, "mul");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "5"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_silu_pattern), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->op(), Op::Swish);
  EXPECT_EQ(g->nodes()[0]->attrs.get_float("alpha", 0.0f), 1.5f);
  expect_same_outputs(m, *g);
}

TEST(FuseSiluPattern, HardSigmoidTimesInputBecomesHardSwish) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"3", "4"});
  auto* hs = add_node(m, "HardSigmoid", {"x"}, {"h"}, "hsig");
  add_float_attr(hs, "alpha", 1.0f / 6.0f);
  add_float_attr(hs, "beta", 0.5f);
  add_node(m, "Mul", {"x", "h"}, {"y"}, "mul");
  add_node(m, "Relu", {"y"}, {"z"}, "relu");
  add_output(m, "z", onnx::TensorProto::FLOAT, {"3", "4"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_silu_pattern), 1);
  EXPECT_EQ(g->num_nodes(), 2u);
  EXPECT_EQ(count(*g, Op::HardSwish), 1);
  EXPECT_EQ(count(*g, Op::HardSigmoid), 0);
  expect_same_outputs(m, *g);
}

TEST(FuseSiluPattern, NearMissesStay) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "5"});
  add_input(m, "z", onnx::TensorProto::FLOAT, {"2", "5"});
  // Sigmoid of another tensor.
  add_node(m, "Sigmoid", {"z"}, {"s1"}, "sig1");
  add_node(m, "Mul", {"x", "s1"}, {"y1"}, "mul1");
  // Sigmoid output with a second user (a graph output).
  add_node(m, "Sigmoid", {"x"}, {"s2"}, "sig2");
  add_node(m, "Mul", {"x", "s2"}, {"y2"}, "mul2");
  // HardSigmoid with the default alpha 0.2.
  add_node(m, "HardSigmoid", {"x"}, {"h"}, "hsig");
  add_node(m, "Mul", {"x", "h"}, {"y3"}, "mul3");
  for (const char* o : {"y1", "s2", "y2", "y3"}) add_output(m, o, onnx::TensorProto::FLOAT, {"2", "5"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_silu_pattern), 0);
  EXPECT_EQ(g->num_nodes(), 6u);
  expect_same_outputs(m, *g);
}

}  // namespace
}  // namespace kiln
