#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ir/verifier.h"
#include "model_builder.h"
#include "pass_test_util.h"
#include "onnx/importer.h"
#include "passes/pass.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

using namespace kiln::testing;

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
  expect_same_outputs(m, *g, 2e-6);
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
  expect_same_outputs(m, *g, 2e-6);
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
  expect_same_outputs(m, *g, 2e-6);
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
  expect_same_outputs(m, *g, 2e-6);
}

}  // namespace
}  // namespace kiln
