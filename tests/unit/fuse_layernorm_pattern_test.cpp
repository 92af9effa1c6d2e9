#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
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

// ---- ONNX's LayerNormalization function body ----

struct BodyOptions {
  int64_t axis = 2;               // Flatten axis = LayerNormalization axis, of x [2, 3, 4]
  bool affine = true;
  bool stats_outputs = true;      // Mean and InvStdDev are graph outputs
  Dims reduced;                   // shape the statistics are reshaped to; empty: the right one
  bool var_added = false;         // Var = E[x^2] + mean^2: not a variance
  bool dev_is_output = false;     // the deviation has a second user
};

void add_int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void add_int64s(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& v) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t a : v) t->add_int64_data(a);
}

// The body as onnx's function expansion writes it (opset 18), its shape arithmetic reduced
// to Shape(X) and a constant reduced shape; W and B are graph inputs.
onnx::ModelProto body_model(const BodyOptions& o) {
  auto m = make_model(18);
  const Dims xd = {2, 3, 4};
  std::vector<std::string> xs, ws, rs;
  for (int64_t d : xd) xs.push_back(std::to_string(d));
  for (size_t i = static_cast<size_t>(o.axis); i < xd.size(); ++i) ws.push_back(std::to_string(xd[i]));
  Dims reduced = o.reduced;
  if (reduced.empty()) {
    for (size_t i = 0; i < xd.size(); ++i) reduced.push_back(i < static_cast<size_t>(o.axis) ? xd[i] : 1);
  }
  for (int64_t d : reduced) rs.push_back(std::to_string(d));
  add_input(m, "X", onnx::TensorProto::FLOAT, xs);
  if (o.affine) {
    add_input(m, "W", onnx::TensorProto::FLOAT, ws);
    add_input(m, "B", onnx::TensorProto::FLOAT, ws);
  }
  add_scalar(m, "float_eps", 1e-5f);
  add_int64s(m, "axes1", {1});
  add_int64s(m, "reduced_shape", reduced);
  add_int_attr(add_node(m, "Cast", {"float_eps"}, {"eps"}), "to", onnx::TensorProto::FLOAT);
  add_node(m, "Shape", {"X"}, {"x_shape"});
  add_int_attr(add_node(m, "Flatten", {"X"}, {"x2"}), "axis", o.axis);
  add_node(m, "ReduceMean", {"x2", "axes1"}, {"mean2"});
  add_node(m, "Mul", {"x2", "x2"}, {"sq"});
  add_node(m, "ReduceMean", {"sq", "axes1"}, {"msq"});
  add_node(m, "Mul", {"mean2", "mean2"}, {"sqm"});
  add_node(m, o.var_added ? "Add" : "Sub", {"msq", "sqm"}, {"var"});
  add_node(m, "Add", {"var", "eps"}, {"ve"});
  add_node(m, "Sqrt", {"ve"}, {"std"});
  add_node(m, "Sub", {"x2", "mean2"}, {"dev"});
  add_node(m, "Div", {"dev", "std"}, {o.affine ? "n" : "biased"}, "div");
  if (o.affine) {
    add_int_attr(add_node(m, "Flatten", {"W"}, {"w2"}), "axis", 0);
    add_int_attr(add_node(m, "Flatten", {"B"}, {"b2"}), "axis", 0);
    add_node(m, "Mul", {"n", "w2"}, {"scaled"});
    add_node(m, "Add", {"scaled", "b2"}, {"biased"});
  }
  add_node(m, "Reshape", {"biased", "x_shape"}, {"Y"});
  add_output(m, "Y", onnx::TensorProto::FLOAT, xs);
  if (o.stats_outputs) {
    add_node(m, "Reciprocal", {"std"}, {"inv2"});
    add_node(m, "Reshape", {"mean2", "reduced_shape"}, {"Mean"});
    add_node(m, "Reshape", {"inv2", "reduced_shape"}, {"InvStdDev"});
    add_output(m, "Mean", onnx::TensorProto::FLOAT, rs);
    add_output(m, "InvStdDev", onnx::TensorProto::FLOAT, rs);
  }
  if (o.dev_is_output) add_output(m, "dev", onnx::TensorProto::FLOAT, {"6", "4"});
  return m;
}

TEST(FuseLayerNormPattern, FunctionBodyWithStatistics) {
  for (int64_t axis : {2, 1, 0}) {
    BodyOptions o;
    o.axis = axis;
    auto m = body_model(o);
    auto g = load(m);
    run_pass(*g, infer_shapes);
    EXPECT_EQ(run_pass(*g, fuse_layernorm_pattern), 1) << "axis " << axis;
    ASSERT_EQ(g->num_nodes(), 1u) << "axis " << axis;
    Node* n = g->nodes()[0];
    ASSERT_EQ(n->op(), Op::LayerNormalization);
    EXPECT_EQ(n->attrs.get_int("axis", 0), axis - 3);
    EXPECT_FLOAT_EQ(n->attrs.get_float("epsilon", 0.0f), 1e-5f);
    ASSERT_EQ(n->num_inputs(), 3u);
    EXPECT_EQ(n->input(0)->name(), "X");
    EXPECT_EQ(n->input(1)->name(), "W");
    EXPECT_EQ(n->input(2)->name(), "B");
    ASSERT_EQ(n->num_outputs(), 3u);
    EXPECT_EQ(n->output(0)->name(), "Y");
    EXPECT_EQ(n->output(1)->name(), "Mean");
    EXPECT_EQ(n->output(2)->name(), "InvStdDev");
    expect_same_outputs(m, *g, 1e-4);
  }
}

TEST(FuseLayerNormPattern, FunctionBodyWithoutAffineOrStatistics) {
  BodyOptions o;
  o.affine = false;
  o.stats_outputs = false;
  auto m = body_model(o);
  auto g = load(m);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(run_pass(*g, fuse_layernorm_pattern), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* n = g->nodes()[0];
  ASSERT_EQ(n->op(), Op::LayerNormalization);
  EXPECT_EQ(n->num_inputs(), 2u);
  EXPECT_TRUE(n->output(1) == nullptr && n->output(2) == nullptr);
  expect_same_outputs(m, *g, 1e-4);
}

TEST(FuseLayerNormPattern, FunctionBodyNearMissesStay) {
  BodyOptions wrong_reduced;
  wrong_reduced.reduced = {6, 1};
  BodyOptions not_variance;
  not_variance.var_added = true;
  BodyOptions shared_dev;
  shared_dev.dev_is_output = true;
  for (const BodyOptions& o : {wrong_reduced, not_variance, shared_dev}) {
    auto m = body_model(o);
    auto g = load(m);
    run_pass(*g, infer_shapes);
    const size_t before = g->num_nodes();
    EXPECT_EQ(run_pass(*g, fuse_layernorm_pattern), 0);
    EXPECT_EQ(count(*g, Op::LayerNormalization), 0);
    EXPECT_EQ(g->num_nodes(), before);
    expect_same_outputs(m, *g, 1e-6);
  }
}

// The expanded LayerNormalization cases of the ONNX backend test data fold whole through
// the pipeline, and compute what the unfused models compute.
TEST(FuseLayerNormPattern, OnnxExpandedTestModels) {
  const std::string root = "/usr/share/libonnx-testdata/data/node";
  if (!std::filesystem::exists(root)) GTEST_SKIP() << root << " not installed";
  int models = 0;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("test_layer_normalization_", 0) != 0 || name.find("_expanded") == std::string::npos) continue;
    std::ifstream f(e.path() / "model.onnx", std::ios::binary);
    onnx::ModelProto m;
    ASSERT_TRUE(m.ParseFromIstream(&f)) << name;
    auto g = load(m);
    ASSERT_TRUE(g) << name;
    auto r = optimize_graph(*g);
    ASSERT_TRUE(r.is_ok()) << name << ": " << r.status().message();
    EXPECT_EQ(count(*g, Op::LayerNormalization), 1) << name;
    EXPECT_EQ(count(*g, Op::ReduceMean), 0) << name;
    expect_same_outputs(m, *g, 1e-4);
    ++models;
  }
  EXPECT_GE(models, 10);
}

// ---- an affine Mul/Add after a LayerNormalization node ----

struct AffineOptions {
  std::vector<float> scale = std::vector<float>(8, 1.0f);  // the LayerNormalization's own
  bool zero_bias = false;            // LayerNormalization(x, ones, zeros)
  std::vector<int64_t> gamma_dims = {8};
  std::vector<int64_t> beta_dims = {1, 1, 8};
  bool gamma_first = true;           // Mul(gamma, y) rather than Mul(y, gamma)
  bool mul = true, add = true;
  bool gamma_input = false;          // gamma a graph input
  bool ln_is_output = false;         // the LayerNormalization's output has a second user
  bool beta_onto_bias = false;       // a nonzero bias is already there
};

// x [2,3,8] -> LayerNormalization(x, scale[, bias]) [-> Mul(gamma)] [-> Add(beta)] -> y.
onnx::ModelProto ln_affine_model(const AffineOptions& o) {
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  add_initializer_f32(m, "scale", {8}, o.scale);
  std::vector<std::string> ln_in = {"x", "scale"};
  if (o.zero_bias || o.beta_onto_bias) {
    add_initializer_f32(m, "bias", {8}, o.beta_onto_bias ? values(8, 4) : std::vector<float>(8, 0.0f));
    ln_in.push_back("bias");
  }
  add_node(m, "LayerNormalization", ln_in, {"n"}, "ln");
  int64_t gsize = 1, bsize = 1;
  for (int64_t d : o.gamma_dims) gsize *= d;
  for (int64_t d : o.beta_dims) bsize *= d;
  if (o.gamma_input) add_input(m, "gamma", onnx::TensorProto::FLOAT, {"8"});
  else add_initializer_f32(m, "gamma", o.gamma_dims, values(static_cast<size_t>(gsize), 2, 0.5f, 1.5f));
  add_initializer_f32(m, "beta", o.beta_dims, values(static_cast<size_t>(bsize), 3));
  std::string cur = "n";
  if (o.mul) {
    if (o.gamma_first) add_node(m, "Mul", {"gamma", cur}, {"scaled"}, "mul_gamma");
    else add_node(m, "Mul", {cur, "gamma"}, {"scaled"}, "mul_gamma");
    cur = "scaled";
  }
  if (o.add) {
    add_node(m, "Add", {cur, "beta"}, {"y"}, "add_beta");
    cur = "y";
  }
  add_output(m, cur, onnx::TensorProto::FLOAT, {"2", "3", "8"});
  if (o.ln_is_output) add_output(m, "n", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  return m;
}

TEST(FuseLayerNormPattern, AffineAfterLayerNormalizationNode) {
  AffineOptions mul_add, mul_only, add_only, swapped_zero_bias, scalar_gamma;
  mul_only.add = false;
  add_only.mul = false;
  swapped_zero_bias.gamma_first = false;
  swapped_zero_bias.zero_bias = true;
  scalar_gamma.gamma_dims = {1, 1};
  for (const AffineOptions& o : {mul_add, mul_only, add_only, swapped_zero_bias, scalar_gamma}) {
    auto m = ln_affine_model(o);
    auto g = load(m);
    ASSERT_TRUE(g);
    run_pass(*g, infer_shapes);
    EXPECT_EQ(run_pass(*g, fuse_layernorm_pattern), int{o.mul} + int{o.add});  // one per absorbed op
    ASSERT_EQ(g->num_nodes(), 1u);
    Node* ln = g->nodes()[0];
    ASSERT_EQ(ln->op(), Op::LayerNormalization);
    EXPECT_EQ(ln->output(0)->name(), o.add ? "y" : "scaled");
    ASSERT_TRUE(ln->input(1)->is_constant());
    EXPECT_EQ(ln->input(1)->constant().dims(), (Dims{8}));
    if (o.add || o.zero_bias) {
      ASSERT_EQ(ln->num_inputs(), 3u);
      EXPECT_EQ(ln->input(2)->constant().dims(), (Dims{8}));
    } else {
      EXPECT_EQ(ln->num_inputs(), 2u);
    }
    expect_same_outputs(m, *g, 1e-6);
  }
}

TEST(FuseLayerNormPattern, AffineAfterLayerNormalizationNearMissesStay) {
  AffineOptions scaled, over_rows, gamma_input, shared, onto_bias;
  scaled.scale = values(8, 7, 0.5f, 1.5f);  // not a ones scale
  over_rows.gamma_dims = {3, 1};            // varies over a non-normalized axis
  over_rows.add = false;
  gamma_input.gamma_input = true;
  gamma_input.add = false;
  shared.ln_is_output = true;
  onto_bias.mul = false;
  onto_bias.beta_onto_bias = true;
  for (const AffineOptions& o : {scaled, over_rows, gamma_input, shared, onto_bias}) {
    auto m = ln_affine_model(o);
    auto g = load(m);
    ASSERT_TRUE(g);
    run_pass(*g, infer_shapes);
    const size_t before = g->num_nodes();
    EXPECT_EQ(run_pass(*g, fuse_layernorm_pattern), 0);
    EXPECT_EQ(g->num_nodes(), before);
    expect_same_outputs(m, *g, 0.0);
  }
}

}  // namespace
}  // namespace kiln
