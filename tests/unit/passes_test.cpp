// Optimizer passes: each alone on structure (the rewrite happened, and did not happen
// where the pattern almost matches) and on numerics (same outputs as the original graph).
#include <gtest/gtest.h>

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

TEST(EliminateDeadCode, RemovesUnusedBranchKeepsOutputs) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3"});
  add_node(m, "Relu", {"x"}, {"r"}, "used");
  add_node(m, "Sigmoid", {"x"}, {"s"}, "unused");
  add_node(m, "Exp", {"s"}, {"e"}, "unused2");
  add_output(m, "r", onnx::TensorProto::FLOAT, {"2", "3"});
  auto g = load(m);
  PassReport r;
  PassContext ctx(r);
  ASSERT_TRUE(eliminate_dead_code(*g, ctx).is_ok());
  EXPECT_EQ(r.rewrites, 2);
  EXPECT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(count(*g, Op::Relu), 1);
  expect_same_outputs(m, *g);
}

TEST(FoldConstants, FoldsShapeArithmeticFeedingReshape) {
  // Reshape(x, Concat(Gather(Shape(c), 0), [-1])) where c is a constant [4, 6]: the shape
  // chain folds, Reshape stays (its data input is not constant).
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"4", "6"});
  std::vector<float> cv(24, 1.0f);
  add_initializer_f32(m, "c", {4, 6}, cv);
  auto* idx = m.mutable_graph()->add_initializer();
  idx->set_name("zero");
  idx->set_data_type(onnx::TensorProto::INT64);
  idx->add_dims(1);
  idx->add_int64_data(0);
  auto* minus1 = m.mutable_graph()->add_initializer();
  minus1->set_name("minus1");
  minus1->set_data_type(onnx::TensorProto::INT64);
  minus1->add_dims(1);
  minus1->add_int64_data(-1);
  add_node(m, "Shape", {"c"}, {"shape"}, "shape");
  add_node(m, "Gather", {"shape", "zero"}, {"rows"}, "gather");
  auto* concat = add_node(m, "Concat", {"rows", "minus1"}, {"target"}, "concat");
  auto* axis = concat->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(0);
  add_node(m, "Reshape", {"x", "target"}, {"y"}, "reshape");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"4", "6"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fold_constants), 3);
  EXPECT_EQ(g->num_nodes(), 1u);
  Node* reshape = g->nodes()[0];
  ASSERT_EQ(reshape->op(), Op::Reshape);
  ASSERT_TRUE(reshape->input(1)->is_constant());
  EXPECT_EQ(reshape->input(1)->constant().to_int_vector(), (std::vector<int64_t>{4, -1}));
  expect_same_outputs(m, *g);
}

TEST(FoldConstants, FoldedGraphOutputKeepsItsName) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"3"});
  add_initializer_f32(m, "c", {3}, {1.0f, -2.0f, 3.0f});
  add_node(m, "Relu", {"c"}, {"rc"}, "relu_const");
  add_node(m, "Add", {"x", "rc"}, {"y"}, "add");
  add_output(m, "rc", onnx::TensorProto::FLOAT, {"3"});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"3"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fold_constants), 1);
  EXPECT_EQ(g->outputs()[0]->name(), "rc");
  EXPECT_TRUE(g->outputs()[0]->is_constant());
  expect_same_outputs(m, *g);
}

TEST(RemoveNoops, BypassesIdentityAndNeutralArithmetic) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3"});
  add_initializer_f32(m, "one", {}, {1.0f});
  add_initializer_f32(m, "zero11", {1, 1}, {0.0f});
  add_node(m, "Identity", {"x"}, {"a"}, "id");
  add_node(m, "Mul", {"a", "one"}, {"b"}, "mul1");
  add_node(m, "Add", {"zero11", "b"}, {"c"}, "add0");
  add_node(m, "Relu", {"c"}, {"y"}, "relu");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, remove_noops), 3);
  EXPECT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->input(0)->name(), "x");
  expect_same_outputs(m, *g);
}

TEST(RemoveNoops, KeepsNearMisses) {
  // x[1,3] * ones[2,3] broadcasts (changes the shape), x + 0.5 is not neutral, and an
  // Identity that produces a graph output keeps the output's name: none is removed.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "3"});
  add_initializer_f32(m, "ones", {2, 3}, std::vector<float>(6, 1.0f));
  add_initializer_f32(m, "half", {}, {0.5f});
  add_node(m, "Mul", {"x", "ones"}, {"a"}, "broadcasting_mul");
  add_node(m, "Add", {"a", "half"}, {"b"}, "add_half");
  add_node(m, "Identity", {"b"}, {"y"}, "id_out");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, remove_noops), 0);
  EXPECT_EQ(g->num_nodes(), 3u);
  expect_same_outputs(m, *g);
}

TEST(RemoveNoops, CancelsInverseTransposesOnly) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_ints_attr(add_node(m, "Transpose", {"x"}, {"t1"}, "t1"), "perm", {1, 2, 0});
  add_ints_attr(add_node(m, "Transpose", {"t1"}, {"t2"}, "t2"), "perm", {2, 0, 1});  // inverse of t1
  add_ints_attr(add_node(m, "Transpose", {"t2"}, {"t3"}, "t3"), "perm", {1, 0, 2});
  add_ints_attr(add_node(m, "Transpose", {"t3"}, {"t4"}, "t4"), "perm", {0, 2, 1});  // not the inverse of t3
  add_node(m, "Relu", {"t4"}, {"y"}, "relu");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"3", "4", "2"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, remove_noops), 1);
  EXPECT_EQ(count(*g, Op::Transpose), 2);
  expect_same_outputs(m, *g);
}

TEST(EliminateCommonSubexpressions, MergesOnlyIdenticalNodes) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"5"});
  add_node(m, "Relu", {"x"}, {"r1"}, "relu1");
  add_node(m, "Relu", {"x"}, {"r2"}, "relu2");
  add_float_attr(add_node(m, "LeakyRelu", {"x"}, {"l1"}, "leaky1"), "alpha", 0.1f);
  add_float_attr(add_node(m, "LeakyRelu", {"x"}, {"l2"}, "leaky2"), "alpha", 0.2f);  // different attribute
  add_node(m, "Add", {"r1", "r2"}, {"s"}, "add1");
  add_node(m, "Add", {"l1", "l2"}, {"t"}, "add2");
  add_node(m, "Mul", {"s", "t"}, {"y"}, "mul");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"5"});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, eliminate_common_subexpressions), 1);
  EXPECT_EQ(count(*g, Op::Relu), 1);
  EXPECT_EQ(count(*g, Op::LeakyRelu), 2);
  expect_same_outputs(m, *g);
}

TEST(Pipeline, OptimizesSampleModelAndKeepsOutputs) {
  auto r = import_onnx_file(std::string(KILN_SOURCE_DIR) + "/models/sample_cnn.onnx");
  ASSERT_TRUE(r.is_ok());
  auto reports = optimize_graph(*r->graph);
  ASSERT_TRUE(reports.is_ok()) << reports.status().message();
  EXPECT_FALSE(reports->empty());
  EXPECT_TRUE(verify_graph(*r->graph).is_ok());
}

}  // namespace
}  // namespace kiln
