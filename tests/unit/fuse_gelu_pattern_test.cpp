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

// Erf form in PyTorch's export order: Mul(Mul(x, 1 + Erf(x / 1.4142)), 0.5).
onnx::ModelProto erf_gelu_torch_order(float sqrt2 = 1.4142135f, float half = 0.5f) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "6"});
  add_scalar(m, "sqrt2", sqrt2);
  add_scalar(m, "one", 1.0f);
  add_scalar(m, "half", half);
  add_node(m, "Div", {"x", "sqrt2"}, {"d"}, "div");
  add_node(m, "Erf", {"d"}, {"e"}, "erf");
  add_node(m, "Add", {"e", "one"}, {"p"}, "add");
  add_node(m, "Mul", {"x", "p"}, {"xp"}, "mul1");
  add_node(m, "Mul", {"xp", "half"}, {"y"}, "mul2");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "6"});
  return m;
}

TEST(FuseGeluPattern, ErfFormTorchOrder) {
  auto m = erf_gelu_torch_order();
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_gelu_pattern), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* n = g->nodes()[0];
  EXPECT_EQ(n->op(), Op::Gelu);
  EXPECT_EQ(n->attrs.get_string("approximate", ""), "none");
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  expect_same_outputs(m, *g, 2e-6);
}

TEST(FuseGeluPattern, ErfFormOnnxOrderWithReciprocalAndSum) {
  // Mul(Mul(0.5, x), Sum(1, Erf(x * 0.70710678))), feeding another node.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "6"});
  add_scalar(m, "rsqrt2", 0.70710678f);
  add_scalar(m, "one", 1.0f);
  add_initializer_f32(m, "half", {1, 1}, {0.5f});
  add_node(m, "Mul", {"rsqrt2", "x"}, {"d"}, "scale");
  add_node(m, "Erf", {"d"}, {"e"}, "erf");
  add_node(m, "Sum", {"one", "e"}, {"p"}, "sum");
  add_node(m, "Mul", {"half", "x"}, {"hx"}, "mul1");
  add_node(m, "Mul", {"hx", "p"}, {"y"}, "mul2");
  add_node(m, "Neg", {"y"}, {"z"}, "neg");
  add_output(m, "z", onnx::TensorProto::FLOAT, {"2", "6"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_gelu_pattern), 1);
  EXPECT_EQ(g->num_nodes(), 2u);
  EXPECT_EQ(count(*g, Op::Gelu), 1);
  expect_same_outputs(m, *g, 2e-6);
}

onnx::ModelProto tanh_gelu(bool pow_cube) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"3", "4"});
  add_scalar(m, "three", 3.0f);
  add_scalar(m, "c", 0.044715f);
  add_scalar(m, "k", 0.7978845608f);
  add_scalar(m, "one", 1.0f);
  add_scalar(m, "half", 0.5f);
  if (pow_cube) {
    add_node(m, "Pow", {"x", "three"}, {"x3"}, "pow");
  } else {
    add_node(m, "Mul", {"x", "x"}, {"x2"}, "sq");
    add_node(m, "Mul", {"x2", "x"}, {"x3"}, "cube");
  }
  add_node(m, "Mul", {"x3", "c"}, {"cx3"}, "mulc");
  add_node(m, "Add", {"x", "cx3"}, {"s"}, "adds");
  add_node(m, "Mul", {"k", "s"}, {"t"}, "mulk");
  add_node(m, "Tanh", {"t"}, {"th"}, "tanh");
  add_node(m, "Add", {"one", "th"}, {"p"}, "add1");
  add_node(m, "Mul", {"x", "half"}, {"hx"}, "mulh");
  add_node(m, "Mul", {"p", "hx"}, {"y"}, "mul");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"3", "4"});
  return m;
}

TEST(FuseGeluPattern, TanhFormWithPow) {
  auto m = tanh_gelu(true);
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_gelu_pattern), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->op(), Op::Gelu);
  EXPECT_EQ(g->nodes()[0]->attrs.get_string("approximate", ""), "tanh");
  expect_same_outputs(m, *g, 2e-6);
}

TEST(FuseGeluPattern, TanhFormWithMulCube) {
  auto m = tanh_gelu(false);
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_gelu_pattern), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->attrs.get_string("approximate", ""), "tanh");
  expect_same_outputs(m, *g, 2e-6);
}

TEST(FuseGeluPattern, OnnxFunctionBodyWithCastLikeConstants) {
  // The ONNX Gelu function body: constants are CastLike(c, x), sqrt(2) is Sqrt(CastLike(2, x)).
  auto m = make_model(20);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "6"});
  add_scalar(m, "half", 0.5f);
  add_scalar(m, "one", 1.0f);
  add_scalar(m, "two", 2.0f);
  add_node(m, "CastLike", {"half", "x"}, {"half_c"}, "cl_half");
  add_node(m, "CastLike", {"one", "x"}, {"one_c"}, "cl_one");
  add_node(m, "CastLike", {"two", "x"}, {"two_c"}, "cl_two");
  add_node(m, "Sqrt", {"two_c"}, {"sqrt2"}, "sqrt");
  add_node(m, "Div", {"x", "sqrt2"}, {"d"}, "div");
  add_node(m, "Erf", {"d"}, {"e"}, "erf");
  add_node(m, "Sum", {"one_c", "e"}, {"p"}, "sum");
  add_node(m, "Mul", {"half_c", "x"}, {"hx"}, "mul1");
  add_node(m, "Mul", {"hx", "p"}, {"y"}, "mul2");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "6"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_gelu_pattern), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->op(), Op::Gelu);
  expect_same_outputs(m, *g, 2e-6);
}

TEST(FuseGeluPattern, WrongConstantsStay) {
  for (auto m : {erf_gelu_torch_order(1.5f, 0.5f), erf_gelu_torch_order(1.4142135f, 0.6f)}) {
    auto g = load(m);
    EXPECT_EQ(run_pass(*g, fuse_gelu_pattern), 0);
    EXPECT_EQ(g->num_nodes(), 5u);
    expect_same_outputs(m, *g, 2e-6);
  }
}

TEST(FuseGeluPattern, IntermediateWithSecondUserStays) {
  auto m = erf_gelu_torch_order();
  add_output(m, "e", onnx::TensorProto::FLOAT, {"2", "6"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_gelu_pattern), 0);
  EXPECT_EQ(count(*g, Op::Gelu), 0);
  expect_same_outputs(m, *g, 2e-6);
}

TEST(FuseGeluPattern, ErfOfOtherTensorStays) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "6"});
  add_input(m, "w", onnx::TensorProto::FLOAT, {"2", "6"});
  add_scalar(m, "sqrt2", 1.4142135f);
  add_scalar(m, "one", 1.0f);
  add_scalar(m, "half", 0.5f);
  add_node(m, "Div", {"w", "sqrt2"}, {"d"}, "div");
  add_node(m, "Erf", {"d"}, {"e"}, "erf");
  add_node(m, "Add", {"e", "one"}, {"p"}, "add");
  add_node(m, "Mul", {"x", "p"}, {"xp"}, "mul1");
  add_node(m, "Mul", {"xp", "half"}, {"y"}, "mul2");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "6"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_gelu_pattern), 0);
  expect_same_outputs(m, *g, 2e-6);
}

}  // namespace
}  // namespace kiln
