#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model_builder.h"
#include "onnx/exporter.h"
#include "pass_test_util.h"
#include "passes/pass.h"

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

enum class Inverse { kDiv, kReciprocal, kOneOver };
enum class Weight { kNone, kConstant, kConstantFirst, kInput, kPerRow };

struct RmsOptions {
  std::vector<int64_t> axes = {-1};
  bool axes_as_attribute = false;  // opset 13 ReduceMean
  bool pow_square = false;         // Pow(x, 2) instead of Mul(x, x)
  float exponent = 2.0f;           // of the Pow (4 in a near miss: positive, not a square)
  bool square_other = false;       // the mean square is of another tensor z, not x
  Inverse inverse = Inverse::kDiv;
  Weight weight = Weight::kConstant;
  bool eps_input = false;          // epsilon as a graph input (not constant)
  bool ms_is_output = false;       // the mean square has a second user
};

// x [2, 3, 8] -> y, RMS normalization written out.
onnx::ModelProto rms_model(const RmsOptions& o) {
  auto m = make_model(o.axes_as_attribute ? 13 : 18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  if (o.square_other) add_input(m, "z", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  if (o.eps_input) add_input(m, "eps", onnx::TensorProto::FLOAT, {});
  else add_scalar(m, "eps", 1e-5f);
  add_scalar(m, "two", o.exponent);
  add_scalar(m, "one", 1.0f);
  if (o.weight == Weight::kInput) add_input(m, "w", onnx::TensorProto::FLOAT, {"8"});
  else if (o.weight == Weight::kPerRow) add_initializer_f32(m, "w", {3, 1}, values(3, 7, 0.5f, 1.5f));
  else add_initializer_f32(m, "w", {8}, values(8, 7, 0.5f, 1.5f));
  const std::string sq_in = o.square_other ? "z" : "x";
  if (o.pow_square) add_node(m, "Pow", {sq_in, "two"}, {"sq"}, "square");
  else add_node(m, "Mul", {sq_in, sq_in}, {"sq"}, "square");
  if (o.axes_as_attribute) {
    add_ints_attr(add_node(m, "ReduceMean", {"sq"}, {"ms"}, "mean"), "axes", o.axes);
  } else {
    add_axes(m, "axes", o.axes);
    add_node(m, "ReduceMean", {"sq", "axes"}, {"ms"}, "mean");
  }
  add_node(m, "Add", {"ms", "eps"}, {"mse"}, "add_eps");
  add_node(m, "Sqrt", {"mse"}, {"rms"}, "sqrt");
  const std::string n = o.weight == Weight::kNone ? "y" : "n";
  switch (o.inverse) {
    case Inverse::kDiv:
      add_node(m, "Div", {"x", "rms"}, {n}, "div");
      break;
    case Inverse::kReciprocal:
      add_node(m, "Reciprocal", {"rms"}, {"inv"}, "reciprocal");
      add_node(m, "Mul", {"x", "inv"}, {n}, "normalize");
      break;
    case Inverse::kOneOver:
      add_node(m, "Div", {"one", "rms"}, {"inv"}, "one_over");
      add_node(m, "Mul", {"inv", "x"}, {n}, "normalize");
      break;
  }
  if (o.weight == Weight::kConstantFirst) add_node(m, "Mul", {"w", "n"}, {"y"}, "mul_weight");
  else if (o.weight != Weight::kNone) add_node(m, "Mul", {"n", "w"}, {"y"}, "mul_weight");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  if (o.ms_is_output) add_output(m, "ms", onnx::TensorProto::FLOAT, {"2", "3", "1"});
  return m;
}

Node* only_node(const Graph& g) {
  EXPECT_EQ(g.num_nodes(), 1u);
  return g.num_nodes() == 1 ? g.nodes()[0] : nullptr;
}

TEST(FuseRmsNormPattern, DivMulSquareConstantWeight) {
  auto m = rms_model({});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_rmsnorm_pattern), 1);
  Node* n = only_node(*g);
  ASSERT_TRUE(n);
  ASSERT_EQ(n->op(), Op::RMSNormalization);
  EXPECT_EQ(n->attrs.get_int("axis", 0), -1);
  EXPECT_FLOAT_EQ(n->attrs.get_float("epsilon", 0.0f), 1e-5f);
  EXPECT_EQ(n->input(0)->name(), "x");
  EXPECT_EQ(n->input(1)->name(), "w");
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  expect_same_outputs(m, *g, 1e-5);
}

// The LLaMA export: x * Reciprocal(Sqrt(mean(Pow(x, 2)) + eps)), weight * that.
TEST(FuseRmsNormPattern, ReciprocalPowWeightFirst) {
  RmsOptions o;
  o.inverse = Inverse::kReciprocal;
  o.pow_square = true;
  o.weight = Weight::kConstantFirst;
  auto m = rms_model(o);
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_rmsnorm_pattern), 1);
  Node* n = only_node(*g);
  ASSERT_TRUE(n);
  ASSERT_EQ(n->op(), Op::RMSNormalization);
  EXPECT_EQ(n->input(1)->name(), "w");
  expect_same_outputs(m, *g, 1e-5);
}

TEST(FuseRmsNormPattern, OneOverNoWeightAxesAttribute) {
  RmsOptions o;
  o.inverse = Inverse::kOneOver;
  o.weight = Weight::kNone;
  o.axes = {2};
  o.axes_as_attribute = true;
  auto m = rms_model(o);
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_rmsnorm_pattern), 1);
  Node* n = only_node(*g);
  ASSERT_TRUE(n);
  ASSERT_EQ(n->op(), Op::RMSNormalization);
  ASSERT_TRUE(n->input(1)->is_constant());  // the required scale: ones
  EXPECT_EQ(n->input(1)->constant().get_double(0), 1.0);
  EXPECT_EQ(n->attrs.get_int("axis", 0), -1);
  expect_same_outputs(m, *g, 1e-5);
}

// ONNX's RMSNormalization function body with axis = 1: Range-made axes [1, 2] and the
// weight a graph input.
TEST(FuseRmsNormPattern, TrailingAxesAndWeightInput) {
  RmsOptions o;
  o.axes = {1, 2};
  auto m = rms_model(o);
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_rmsnorm_pattern), 1);
  Node* n = only_node(*g);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->attrs.get_int("axis", 0), -2);
  expect_same_outputs(m, *g, 1e-5);

  RmsOptions in;
  in.weight = Weight::kInput;
  auto m2 = rms_model(in);
  auto g2 = load(m2);
  EXPECT_EQ(run_pass(*g2, fuse_rmsnorm_pattern), 1);
  Node* n2 = only_node(*g2);
  ASSERT_TRUE(n2);
  EXPECT_EQ(n2->input(1)->name(), "w");
  expect_same_outputs(m2, *g2, 1e-5);
}

// A weight that varies over a non-normalized axis stays a separate Mul.
TEST(FuseRmsNormPattern, PerRowWeightStaysOutside) {
  RmsOptions o;
  o.weight = Weight::kPerRow;
  auto m = rms_model(o);
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_rmsnorm_pattern), 1);
  EXPECT_EQ(g->num_nodes(), 2u);
  EXPECT_EQ(count(*g, Op::RMSNormalization), 1);
  EXPECT_EQ(count(*g, Op::Mul), 1);
  expect_same_outputs(m, *g, 1e-5);
}

TEST(FuseRmsNormPattern, NearMissesStay) {
  RmsOptions middle_axis;
  middle_axis.axes = {1};
  RmsOptions non_trailing;
  non_trailing.axes = {0, 2};
  RmsOptions fourth;
  fourth.pow_square = true;
  fourth.exponent = 4.0f;
  RmsOptions other;
  other.square_other = true;
  RmsOptions eps_input;
  eps_input.eps_input = true;
  RmsOptions shared_ms;
  shared_ms.ms_is_output = true;
  for (const RmsOptions& o : {middle_axis, non_trailing, fourth, other, eps_input, shared_ms}) {
    auto m = rms_model(o);
    auto g = load(m);
    const size_t before = g->num_nodes();
    EXPECT_EQ(run_pass(*g, fuse_rmsnorm_pattern), 0);
    EXPECT_EQ(g->num_nodes(), before);
    EXPECT_EQ(count(*g, Op::RMSNormalization), 0);
    if (!o.eps_input) expect_same_outputs(m, *g, 1e-5);
  }
}

// Through the whole pipeline (level 2) the pattern ends as one RMSNormalization, and the
// graph still computes the same function after an ONNX export and re-import.
TEST(FuseRmsNormPattern, Pipeline) {
  RmsOptions o;
  o.inverse = Inverse::kReciprocal;
  o.pow_square = true;
  auto m = rms_model(o);
  auto g = load(m);
  auto r = optimize_graph(*g);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(count(*g, Op::RMSNormalization), 1);
  EXPECT_EQ(g->num_nodes(), 1u);
  expect_same_outputs(m, *g, 1e-5);
  auto bytes = export_onnx_bytes(*g);
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  auto back = import_onnx_bytes(*bytes, ".", "optimized.onnx");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(count(*back->graph, Op::RMSNormalization), 1);
  expect_same_outputs(m, *back->graph, 1e-5);
}

}  // namespace
}  // namespace kiln
