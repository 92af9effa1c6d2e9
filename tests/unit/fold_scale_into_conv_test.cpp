// fold_scale_into_conv: structure (per-channel Mul/Add folded into Conv; near misses
// kept) and numerics (same outputs as the original graph).
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
    expect_same_outputs(m, *g, 1e-5);
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
    expect_same_outputs(m, *g, 1e-5);
  }
  {  // a rank-5 constant broadcasts the output to a higher rank
    auto m = conv_model();
    add_initializer_f32(m, "s", {1, 1, 4, 1, 1}, values(4, 3));
    add_node(m, "Mul", {"c", "s"}, {"y"}, "mul");
    add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "1", "4", "3", "3"});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_scale_into_conv), 0);
    expect_same_outputs(m, *g, 1e-5);
  }
  {  // a non-constant scale
    auto m = conv_model();
    add_input(m, "s", onnx::TensorProto::FLOAT, {"4", "1", "1"});
    add_node(m, "Mul", {"c", "s"}, {"y"}, "mul");
    add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "4", "3", "3"});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_scale_into_conv), 0);
    expect_same_outputs(m, *g, 1e-5);
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
    expect_same_outputs(m, *g, 1e-5);
  }
}

}  // namespace
}  // namespace kiln
