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

void add_int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

struct GemmOptions {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 1.0f;
  std::vector<int64_t> c_dims = {5};  // empty: no C
  bool c_input = false;               // C a graph input (not constant)
  bool b_input = false;               // B a graph input (not constant)
  std::string act;                    // following activation, "" for none
};

// Gemm(x, B, C) [-> act] with x [3, 4] (or [4, 3] with transA), output [3, 5].
onnx::ModelProto gemm_model(const GemmOptions& o) {
  auto m = make_model(20);
  add_input(m, "x", onnx::TensorProto::FLOAT, o.trans_a ? std::vector<std::string>{"4", "3"} : std::vector<std::string>{"3", "4"});
  const std::vector<int64_t> bdims = o.trans_b ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5};
  if (o.b_input) add_input(m, "b", onnx::TensorProto::FLOAT, {std::to_string(bdims[0]), std::to_string(bdims[1])});
  else add_initializer_f32(m, "b", bdims, values(20, 31));
  std::vector<std::string> inputs = {"x", "b"};
  if (!o.c_dims.empty()) {
    size_t n = 1;
    for (int64_t d : o.c_dims) n *= static_cast<size_t>(d);
    if (o.c_input) {
      std::vector<std::string> cd;
      for (int64_t d : o.c_dims) cd.push_back(std::to_string(d));
      add_input(m, "c", onnx::TensorProto::FLOAT, cd);
    } else {
      add_initializer_f32(m, "c", o.c_dims, values(n, 32));
    }
    inputs.push_back("c");
  }
  auto* gm = add_node(m, "Gemm", inputs, {o.act.empty() ? "y" : "g"}, "gemm");
  if (o.trans_a) add_int_attr(gm, "transA", 1);
  if (o.trans_b) add_int_attr(gm, "transB", 1);
  if (o.alpha != 1.0f) add_float_attr(gm, "alpha", o.alpha);
  if (o.beta != 1.0f) add_float_attr(gm, "beta", o.beta);
  if (!o.act.empty()) add_node(m, o.act, {"g"}, {"y"}, "act");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"3", "5"});
  return m;
}

TEST(FuseGemmEpilogue, GemmTransBAlphaBetaRelu) {
  GemmOptions o;
  o.trans_b = true;
  o.alpha = 0.5f;
  o.beta = 2.0f;
  o.act = "Relu";
  auto m = gemm_model(o);
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_gemm_epilogue), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* n = g->nodes()[0];
  ASSERT_EQ(n->op(), Op::FusedGemm);
  EXPECT_EQ(n->attrs.get_string("activation", ""), "Relu");
  ASSERT_TRUE(n->input(1)->is_constant());
  EXPECT_EQ(n->input(1)->constant().dims(), (Dims{4, 5}));
  ASSERT_TRUE(n->input(2)->is_constant());
  EXPECT_EQ(n->input(2)->constant().dims(), (Dims{5}));
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  expect_same_outputs(m, *g, 1e-5);
}

TEST(FuseGemmEpilogue, GemmBiasShapes) {
  GemmOptions none;
  none.c_dims = {};
  none.act = "Gelu";
  GemmOptions row;
  row.c_dims = {1, 5};
  GemmOptions scalar;
  scalar.c_dims = {1};
  scalar.beta = -1.5f;
  for (const GemmOptions& o : {none, row, scalar}) {
    auto m = gemm_model(o);
    auto g = load(m);
    EXPECT_EQ(run_pass(*g, fuse_gemm_epilogue), 1);
    ASSERT_EQ(g->num_nodes(), 1u);
    EXPECT_EQ(g->nodes()[0]->op(), Op::FusedGemm);
    expect_same_outputs(m, *g, 1e-5);
  }
}

TEST(FuseGemmEpilogue, GemmNearMissesStay) {
  GemmOptions trans_a;
  trans_a.trans_a = true;
  GemmOptions b_input;
  b_input.b_input = true;
  GemmOptions per_row;
  per_row.c_dims = {3, 5};
  GemmOptions column;
  column.c_dims = {3, 1};
  GemmOptions c_input;
  c_input.c_input = true;
  for (const GemmOptions& o : {trans_a, b_input, per_row, column, c_input}) {
    auto m = gemm_model(o);
    auto g = load(m);
    EXPECT_EQ(run_pass(*g, fuse_gemm_epilogue), 0);
    ASSERT_EQ(g->num_nodes(), 1u);
    EXPECT_EQ(g->nodes()[0]->op(), Op::Gemm);
    expect_same_outputs(m, *g, 0.0);
  }
}

// MatMul(x, W) -> act with no bias: a zero bias; a bare MatMul or another activation stays.
TEST(FuseGemmEpilogue, MatMulActivationWithoutBias) {
  for (const std::string act : {"Relu", "Gelu", "Sigmoid", ""}) {
    auto m = make_model(20);
    add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
    add_initializer_f32(m, "w", {4, 5}, ramp(20, -1.0f, 0.1f));
    add_node(m, "MatMul", {"x", "w"}, {act.empty() ? "y" : "mm"}, "matmul");
    if (!act.empty()) add_node(m, act, {"mm"}, {"y"}, "act");
    add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3", "5"});
    auto g = load(m);
    const bool fuses = act == "Relu" || act == "Gelu";
    EXPECT_EQ(run_pass(*g, fuse_gemm_epilogue), fuses ? 1 : 0) << act;
    if (fuses) {
      ASSERT_EQ(g->num_nodes(), 1u);
      Node* n = g->nodes()[0];
      ASSERT_EQ(n->op(), Op::FusedGemm);
      EXPECT_EQ(n->attrs.get_string("activation", ""), act);
      ASSERT_TRUE(n->input(2)->is_constant());
      EXPECT_EQ(n->input(2)->constant().get_double(4), 0.0);
    } else {
      EXPECT_EQ(count(*g, Op::FusedGemm), 0);
    }
    expect_same_outputs(m, *g, 0.0);
  }
}

// A FusedGemm made in an earlier round takes in a Relu/Gelu that appeared after it; one with
// an activation already, or whose output has a second user, keeps its own.
TEST(FuseGemmEpilogue, ActivationJoinsExistingFusedGemm) {
  for (const std::string first : {"None", "Relu"}) {
    for (bool shared : {false, true}) {
      auto m = make_model(20);
      auto* kos = m.add_opset_import();
      kos->set_domain("kiln");
      kos->set_version(1);
      add_input(m, "x", onnx::TensorProto::FLOAT, {"3", "4"});
      add_initializer_f32(m, "w", {4, 5}, ramp(20, -1.0f, 0.1f));
      add_initializer_f32(m, "b", {5}, ramp(5, -0.5f, 0.25f));
      auto* fg = add_node(m, "FusedGemm", {"x", "w", "b"}, {"f"}, "fg", "kiln");
      auto* a = fg->add_attribute();
      a->set_name("activation");
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(first);
      add_node(m, "Gelu", {"f"}, {"y"}, "gelu");
      add_output(m, "y", onnx::TensorProto::FLOAT, {"3", "5"});
      if (shared) add_output(m, "f", onnx::TensorProto::FLOAT, {"3", "5"});
      auto g = load(m);
      const bool absorbs = first == "None" && !shared;
      EXPECT_EQ(run_pass(*g, fuse_gemm_epilogue), absorbs ? 1 : 0) << first << shared;
      EXPECT_EQ(g->num_nodes(), absorbs ? 1u : 2u);
      if (absorbs) {
        EXPECT_EQ(g->nodes()[0]->attrs.get_string("activation", ""), "Gelu");
        EXPECT_EQ(g->outputs()[0]->name(), "y");
      }
      expect_same_outputs(m, *g, 0.0);
    }
  }
}

}  // namespace
}  // namespace kiln
