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

void add_axes(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& axes) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(axes.size()));
  for (int64_t a : axes) t->add_int64_data(a);
}

struct LnOptions {
  std::vector<int64_t> axes = {-1};
  bool axes_as_attribute = false;  // opset 13 ReduceMean
  bool mul_square = false;         // Mul(d, d) instead of Pow(d, 2)
  bool affine = true;
  bool eps_input = false;          // epsilon as a graph input (not constant)
  bool d_is_output = false;        // the deviation has a second user
};

// x [2, 3, 8] -> y, LayerNormalization written out.
onnx::ModelProto layernorm_model(const LnOptions& o) {
  auto m = make_model(o.axes_as_attribute ? 13 : 18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  if (o.eps_input) add_input(m, "eps", onnx::TensorProto::FLOAT, {});
  else add_scalar(m, "eps", 1e-5f);
  add_scalar(m, "two", 2.0f);
  std::vector<float> gamma(8), beta(8);
  for (int i = 0; i < 8; ++i) {
    gamma[static_cast<size_t>(i)] = 0.5f + 0.25f * static_cast<float>(i);
    beta[static_cast<size_t>(i)] = -1.0f + 0.3f * static_cast<float>(i);
  }
  add_initializer_f32(m, "gamma", {8}, gamma);
  add_initializer_f32(m, "beta", {8}, beta);
  auto reduce = [&](const std::string& in, const std::string& out, const std::string& name) {
    if (o.axes_as_attribute) {
      add_ints_attr(add_node(m, "ReduceMean", {in}, {out}, name), "axes", o.axes);
    } else {
      add_axes(m, name + "_axes", o.axes);
      add_node(m, "ReduceMean", {in, name + "_axes"}, {out}, name);
    }
  };
  reduce("x", "mean", "mean");
  add_node(m, "Sub", {"x", "mean"}, {"d"}, "sub");
  if (o.mul_square) add_node(m, "Mul", {"d", "d"}, {"sq"}, "square");
  else add_node(m, "Pow", {"d", "two"}, {"sq"}, "square");
  reduce("sq", "var", "var");
  add_node(m, "Add", {"var", "eps"}, {"ve"}, "add_eps");
  add_node(m, "Sqrt", {"ve"}, {"std"}, "sqrt");
  add_node(m, "Div", {"d", "std"}, {o.affine ? "n" : "y"}, "div");
  if (o.affine) {
    add_node(m, "Mul", {"gamma", "n"}, {"scaled"}, "mul_gamma");
    add_node(m, "Add", {"scaled", "beta"}, {"y"}, "add_beta");
  }
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  if (o.d_is_output) add_output(m, "d", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  return m;
}

TEST(FuseLayerNormPattern, AxesInputPowAffine) {
  auto m = layernorm_model({});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_layernorm_pattern), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* n = g->nodes()[0];
  ASSERT_EQ(n->op(), Op::LayerNormalization);
  EXPECT_EQ(n->attrs.get_int("axis", 0), -1);
  EXPECT_FLOAT_EQ(n->attrs.get_float("epsilon", 0.0f), 1e-5f);
  ASSERT_EQ(n->num_inputs(), 3u);
  EXPECT_EQ(n->input(1)->name(), "gamma");
  EXPECT_EQ(n->input(2)->name(), "beta");
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  expect_same_outputs(m, *g, 1e-5);
}

TEST(FuseLayerNormPattern, AxesAttributeMulSquareNoAffine) {
  LnOptions o;
  o.axes = {2};
  o.axes_as_attribute = true;
  o.mul_square = true;
  o.affine = false;
  auto m = layernorm_model(o);
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_layernorm_pattern), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* n = g->nodes()[0];
  ASSERT_EQ(n->op(), Op::LayerNormalization);
  EXPECT_EQ(n->num_inputs(), 2u);
  ASSERT_TRUE(n->input(1)->is_constant());
  EXPECT_EQ(n->input(1)->constant().get_double(0), 1.0);
  expect_same_outputs(m, *g, 1e-5);
}

TEST(FuseLayerNormPattern, NearMissesStay) {
  LnOptions other_axis;
  other_axis.axes = {1};
  LnOptions two_axes;
  two_axes.axes = {1, 2};
  LnOptions eps_input;
  eps_input.eps_input = true;
  LnOptions shared_d;
  shared_d.d_is_output = true;
  for (const LnOptions& o : {other_axis, two_axes, eps_input, shared_d}) {
    auto m = layernorm_model(o);
    auto g = load(m);
    const size_t before = g->num_nodes();
    EXPECT_EQ(run_pass(*g, fuse_layernorm_pattern), 0);
    EXPECT_EQ(g->num_nodes(), before);
    EXPECT_EQ(count(*g, Op::LayerNormalization), 0);
    if (!o.eps_input) expect_same_outputs(m, *g, 1e-5);
  }
}

}  // namespace
}  // namespace kiln
