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



std::vector<float> ramp(size_t n, float start, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

// x [3, 4] @ W [4, 5] + b [5], then the given activation ("" for none).
onnx::ModelProto matmul_bias(const std::string& act, bool bias_first = false) {
  auto m = make_model(20);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"3", "4"});
  add_initializer_f32(m, "w", {4, 5}, ramp(20, -1.0f, 0.1f));
  add_initializer_f32(m, "b", {5}, ramp(5, -0.5f, 0.25f));
  add_node(m, "MatMul", {"x", "w"}, {"mm"}, "matmul");
  if (bias_first) add_node(m, "Add", {"b", "mm"}, {act.empty() ? "y" : "s"}, "add");
  else add_node(m, "Add", {"mm", "b"}, {act.empty() ? "y" : "s"}, "add");
  if (!act.empty()) add_node(m, act, {"s"}, {"y"}, "act");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"3", "5"});
  return m;
}

TEST(FuseGemmEpilogue, MatMulBiasRelu) {
  auto m = matmul_bias("Relu");
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_gemm_epilogue), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* n = g->nodes()[0];
  EXPECT_EQ(n->op(), Op::FusedGemm);
  EXPECT_EQ(n->attrs.get_string("activation", ""), "Relu");
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  expect_same_outputs(m, *g, 0.0);
}

TEST(FuseGemmEpilogue, MatMulBiasGeluAndNoActivation) {
  for (auto m : {matmul_bias("Gelu"), matmul_bias("", true)}) {
    auto g = load(m);
    EXPECT_EQ(run_pass(*g, fuse_gemm_epilogue), 1);
    ASSERT_EQ(g->num_nodes(), 1u);
    EXPECT_EQ(g->nodes()[0]->op(), Op::FusedGemm);
    expect_same_outputs(m, *g, 0.0);
  }
}

TEST(FuseGemmEpilogue, ActivationOnOtherOpStaysOutside) {
  auto m = matmul_bias("Sigmoid");
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_gemm_epilogue), 1);
  EXPECT_EQ(g->num_nodes(), 2u);
  EXPECT_EQ(count(*g, Op::FusedGemm), 1);
  EXPECT_EQ(count(*g, Op::Sigmoid), 1);
  expect_same_outputs(m, *g, 0.0);
}

TEST(FuseGemmEpilogue, NearMissesStay) {
  auto m = make_model(20);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"3", "4"});
  add_input(m, "wi", onnx::TensorProto::FLOAT, {"4", "5"});
  add_initializer_f32(m, "w", {4, 5}, ramp(20, -1.0f, 0.1f));
  add_initializer_f32(m, "b", {5}, ramp(5, -0.5f, 0.25f));
  add_initializer_f32(m, "b2", {3, 5}, ramp(15, -0.5f, 0.1f));
  // Non-constant weight.
  add_node(m, "MatMul", {"x", "wi"}, {"mm1"}, "mm1");
  add_node(m, "Add", {"mm1", "b"}, {"y1"}, "add1");
  // 2-D bias.
  add_node(m, "MatMul", {"x", "w"}, {"mm2"}, "mm2");
  add_node(m, "Add", {"mm2", "b2"}, {"y2"}, "add2");
  // MatMul output with a second user.
  add_node(m, "MatMul", {"x", "w"}, {"mm3"}, "mm3");
  add_node(m, "Add", {"mm3", "b"}, {"y3"}, "add3");
  for (const char* o : {"y1", "y2", "mm3", "y3"}) add_output(m, o, onnx::TensorProto::FLOAT, {"3", "5"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_gemm_epilogue), 0);
  EXPECT_EQ(g->num_nodes(), 6u);
  expect_same_outputs(m, *g, 0.0);
}

}  // namespace
}  // namespace kiln
