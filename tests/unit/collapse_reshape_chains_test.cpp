// collapse_reshape_chains: Reshape/Flatten/Squeeze/Unsqueeze chains become one Reshape (or
// nothing), Transpose pairs one Transpose; near misses stay; numerics against the original.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>

#include "pass_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

void add_i64(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& v) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
}

void add_int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

int run_collapse(Graph& g) {
  run_pass(g, infer_shapes);
  return run_pass(g, collapse_reshape_chains);
}

Node* only(const Graph& g, Op op) {
  for (Node* n : g.nodes()) if (n->op() == op) return n;
  return nullptr;
}

std::vector<int64_t> reshape_target(const Node* r) {
  EXPECT_TRUE(r && r->input(1) && r->input(1)->is_constant());
  return r && r->input(1) ? r->input(1)->constant().to_int_vector() : std::vector<int64_t>{};
}

// Bit-identical outputs on random inputs whose symbolic dims take the given sizes.
void expect_same_with_symbols(const onnx::ModelProto& m, const Graph& optimized,
                              const std::map<std::string, int64_t>& sizes) {
  auto original = load(m);
  ASSERT_TRUE(original);
  for (uint32_t seed : {1u, 2u}) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    TensorMap in;
    for (Value* v : original->inputs()) {
      Dims d;
      for (const Dim& dim : *v->shape) d.push_back(dim.known() ? dim.value : sizes.at(dim.symbol));
      Tensor t(DataType::kFloat32, d);
      for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = dist(rng);
      in[v->name()] = t;
    }
    auto want = Interpreter(*original).run(in);
    auto got = Interpreter(optimized).run(in);
    ASSERT_TRUE(want.is_ok()) << want.status().message();
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    ASSERT_EQ(want->size(), got->size());
    for (size_t i = 0; i < want->size(); ++i) {
      ASSERT_EQ((*want)[i].dims(), (*got)[i].dims());
      for (int64_t k = 0; k < (*want)[i].size(); ++k) {
        ASSERT_FALSE(std::isnan((*got)[i].get_double(k)));
        EXPECT_EQ((*want)[i].get_double(k), (*got)[i].get_double(k));
      }
    }
  }
}

TEST(CollapseReshapeChains, StaticChainBecomesOneReshape) {
  // [2,3,4] -> Reshape [6,4] -> Unsqueeze 1 -> Squeeze 1 -> Flatten(0) = [1,24].
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_i64(m, "s64", {6, 4});
  add_i64(m, "ax1", {1});
  add_node(m, "Reshape", {"x", "s64"}, {"a"}, "reshape");
  add_node(m, "Unsqueeze", {"a", "ax1"}, {"b"}, "unsqueeze");
  add_node(m, "Squeeze", {"b", "ax1"}, {"c"}, "squeeze");
  add_int_attr(add_node(m, "Flatten", {"c"}, {"d"}, "flatten"), "axis", 0);
  add_node(m, "Relu", {"d"}, {"y"}, "relu");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "24"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_collapse(*g), 1);
  EXPECT_EQ(g->num_nodes(), 2u);
  Node* r = only(*g, Op::Reshape);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->input(0)->name(), "x");
  EXPECT_EQ(reshape_target(r), (std::vector<int64_t>{1, 24}));
  EXPECT_EQ(r->attrs.get_int("allowzero", -1), 0);
  expect_same_outputs(m, *g, 0.0);
}

TEST(CollapseReshapeChains, GraphOutputTailKeepsItsName) {
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "6"});
  add_i64(m, "ax0", {0});
  add_i64(m, "s", {3, 4});
  add_node(m, "Unsqueeze", {"x", "ax0"}, {"a"}, "unsqueeze");
  add_node(m, "Reshape", {"a", "s"}, {"y"}, "reshape");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"3", "4"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_collapse(*g), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  EXPECT_EQ(g->outputs()[0]->producer()->op(), Op::Reshape);
  EXPECT_EQ(g->outputs()[0]->producer()->input(0)->name(), "x");
  expect_same_outputs(m, *g, 0.0);
}

TEST(CollapseReshapeChains, SymbolicDimsAsCopyOrMinusOne) {
  // x [N,3,4]: Flatten -> [N,12] -> Unsqueeze 2 -> [N,12,1] -> Reshape [0,3,4,1]: N stays
  // at index 0, so the target copies it with 0.
  // z [N,3,4]: Reshape [3,-1] -> [3,?] -> Unsqueeze 0 -> [1,3,?]: one unknown, as -1.
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"N", "3", "4"});
  add_input(m, "z", onnx::TensorProto::FLOAT, {"N", "3", "4"});
  add_i64(m, "ax0", {0});
  add_i64(m, "ax2", {2});
  add_i64(m, "s0341", {0, 3, 4, 1});
  add_i64(m, "s3m1", {3, -1});
  add_node(m, "Flatten", {"x"}, {"a"}, "flatten");
  add_node(m, "Unsqueeze", {"a", "ax2"}, {"b"}, "unsqueeze_b");
  add_node(m, "Reshape", {"b", "s0341"}, {"c"}, "reshape_c");
  add_node(m, "Relu", {"c"}, {"y1"}, "relu1");
  add_node(m, "Reshape", {"z", "s3m1"}, {"d"}, "reshape_d");
  add_node(m, "Unsqueeze", {"d", "ax0"}, {"e"}, "unsqueeze_e");
  add_node(m, "Relu", {"e"}, {"y2"}, "relu2");
  add_output(m, "y1", onnx::TensorProto::FLOAT, {"N", "3", "4", "1"});
  add_output(m, "y2", onnx::TensorProto::FLOAT, {"1", "3", "K"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_collapse(*g), 2);
  EXPECT_EQ(g->num_nodes(), 4u);
  EXPECT_EQ(count(*g, Op::Reshape), 2);
  for (Node* n : g->nodes()) {
    if (n->op() != Op::Reshape) continue;
    if (n->input(0)->name() == "x") {
      EXPECT_EQ(reshape_target(n), (std::vector<int64_t>{0, 3, 4, 1}));
    } else {
      EXPECT_EQ(reshape_target(n), (std::vector<int64_t>{1, 3, -1}));
    }
  }
  expect_same_with_symbols(m, *g, {{"N", 5}});
}

TEST(CollapseReshapeChains, ChainBackToTheInputShapeIsRemoved) {
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"N", "3"});
  add_i64(m, "ax1", {1});
  add_node(m, "Unsqueeze", {"x", "ax1"}, {"a"}, "unsqueeze");
  add_node(m, "Squeeze", {"a", "ax1"}, {"b"}, "squeeze");
  add_node(m, "Relu", {"b"}, {"y"}, "relu");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"N", "3"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_collapse(*g), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->input(0)->name(), "x");
  expect_same_with_symbols(m, *g, {{"N", 2}});
}

TEST(CollapseReshapeChains, NearMissesStay) {
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_input(m, "w", onnx::TensorProto::FLOAT, {"N", "M", "4"});
  add_i64(m, "ax0", {0});
  add_i64(m, "s64", {6, 4});
  add_i64(m, "s24", {24});
  add_i64(m, "s00022", {0, 0, 0, 2, 2});
  // Intermediate with two users: Reshape a feeds Unsqueeze and Relu.
  add_node(m, "Reshape", {"x", "s64"}, {"a"}, "reshape_a");
  add_node(m, "Unsqueeze", {"a", "ax0"}, {"y1"}, "unsqueeze_y1");
  add_node(m, "Relu", {"a"}, {"y2"}, "relu_y2");
  // Intermediate that is a graph output.
  add_node(m, "Reshape", {"x", "s24"}, {"b"}, "reshape_b");
  add_node(m, "Unsqueeze", {"b", "ax0"}, {"y3"}, "unsqueeze_y3");
  // Two unknown dims that move: [N,M,4] -> [1,N,M,4] -> [1,N,M,2,2].
  add_node(m, "Unsqueeze", {"w", "ax0"}, {"c"}, "unsqueeze_c");
  add_node(m, "Reshape", {"c", "s00022"}, {"y4"}, "reshape_y4");
  add_output(m, "y1", onnx::TensorProto::FLOAT, {"1", "6", "4"});
  add_output(m, "y2", onnx::TensorProto::FLOAT, {"6", "4"});
  add_output(m, "b", onnx::TensorProto::FLOAT, {"24"});
  add_output(m, "y3", onnx::TensorProto::FLOAT, {"1", "24"});
  add_output(m, "y4", onnx::TensorProto::FLOAT, {"1", "N", "M", "2", "2"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_collapse(*g), 0);
  EXPECT_EQ(g->num_nodes(), 7u);
  expect_same_with_symbols(m, *g, {{"N", 2}, {"M", 3}});
}

TEST(CollapseReshapeChains, TransposePairsCompose) {
  // [1,2,0] then [0,2,1] is [1,0,2]; [1,2,0] then [2,0,1] is the identity; a chain of
  // three composes into one.
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_ints_attr(add_node(m, "Transpose", {"x"}, {"a"}, "t_a"), "perm", {1, 2, 0});
  add_ints_attr(add_node(m, "Transpose", {"a"}, {"b"}, "t_b"), "perm", {0, 2, 1});
  add_node(m, "Relu", {"b"}, {"y1"}, "relu1");
  add_ints_attr(add_node(m, "Transpose", {"x"}, {"c"}, "t_c"), "perm", {1, 2, 0});
  add_ints_attr(add_node(m, "Transpose", {"c"}, {"d"}, "t_d"), "perm", {2, 0, 1});
  add_node(m, "Relu", {"d"}, {"y2"}, "relu2");
  add_ints_attr(add_node(m, "Transpose", {"x"}, {"e"}, "t_e"), "perm", {1, 0, 2});
  add_ints_attr(add_node(m, "Transpose", {"e"}, {"f"}, "t_f"), "perm", {0, 2, 1});
  add_ints_attr(add_node(m, "Transpose", {"f"}, {"y3"}, "t_g"), "perm", {2, 1, 0});
  add_output(m, "y1", onnx::TensorProto::FLOAT, {"3", "2", "4"});
  add_output(m, "y2", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_output(m, "y3", onnx::TensorProto::FLOAT, {});
  m.mutable_graph()->mutable_output(2)->mutable_type()->mutable_tensor_type()->clear_shape();
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_collapse(*g), 4);
  EXPECT_EQ(count(*g, Op::Transpose), 2);
  for (Node* n : g->nodes()) {
    if (n->op() == Op::Transpose) {
      EXPECT_EQ(n->input(0)->name(), "x");
    }
  }
  EXPECT_EQ(g->outputs()[2]->name(), "y3");
  expect_same_outputs(m, *g, 0.0);
}

TEST(CollapseReshapeChains, SharedTransposeStays) {
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_ints_attr(add_node(m, "Transpose", {"x"}, {"a"}, "t_a"), "perm", {1, 2, 0});
  add_ints_attr(add_node(m, "Transpose", {"a"}, {"b"}, "t_b"), "perm", {0, 2, 1});
  add_node(m, "Relu", {"a"}, {"y1"}, "relu1");
  add_node(m, "Relu", {"b"}, {"y2"}, "relu2");
  add_output(m, "y1", onnx::TensorProto::FLOAT, {"3", "4", "2"});
  add_output(m, "y2", onnx::TensorProto::FLOAT, {"3", "2", "4"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_collapse(*g), 0);
  EXPECT_EQ(count(*g, Op::Transpose), 2);
  expect_same_outputs(m, *g, 0.0);
}

TEST(CollapseReshapeChains, UnsqueezeChainBecomesOneUnsqueeze) {
  // mask [batch,seq] -> Unsqueeze 1 -> Unsqueeze 2 = [batch,1,1,seq] (BERT's extended
  // attention mask): one Unsqueeze, no static dims needed. x [2,3] -> Unsqueeze 0 ->
  // Unsqueeze -1 = [1,2,3,1]: axes [0,3]. A chain with a Reshape still becomes a Reshape.
  auto m = make_model(18);
  add_input(m, "mask", onnx::TensorProto::FLOAT, {"batch", "seq"});
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3"});
  add_i64(m, "ax1", {1});
  add_i64(m, "ax2", {2});
  add_i64(m, "ax0", {0});
  add_i64(m, "axm1", {-1});
  add_i64(m, "flat", {6});
  add_node(m, "Unsqueeze", {"mask", "ax1"}, {"m3"}, "u1");
  add_node(m, "Unsqueeze", {"m3", "ax2"}, {"m4"}, "u2");
  add_node(m, "Relu", {"m4"}, {"y1"}, "relu1");
  add_node(m, "Unsqueeze", {"x", "ax0"}, {"x3"}, "u3");
  add_node(m, "Unsqueeze", {"x3", "axm1"}, {"x4"}, "u4");
  add_node(m, "Relu", {"x4"}, {"y2"}, "relu2");
  add_node(m, "Unsqueeze", {"x", "ax0"}, {"x5"}, "u5");
  add_node(m, "Reshape", {"x5", "flat"}, {"y3"}, "reshape");
  add_output(m, "y1", onnx::TensorProto::FLOAT, {"batch", "1", "1", "seq"});
  add_output(m, "y2", onnx::TensorProto::FLOAT, {"1", "2", "3", "1"});
  add_output(m, "y3", onnx::TensorProto::FLOAT, {"6"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_collapse(*g), 3);
  EXPECT_EQ(count(*g, Op::Unsqueeze), 2);
  EXPECT_EQ(count(*g, Op::Reshape), 1);
  for (const char* y : {"y1", "y2"}) {
    Node* u = g->find_value(y)->producer()->input(0)->producer();
    ASSERT_TRUE(u && u->op() == Op::Unsqueeze);
    EXPECT_EQ(u->input(0)->name(), y == std::string("y1") ? "mask" : "x");
    EXPECT_EQ(u->input(1)->constant().to_int_vector(),
              y == std::string("y1") ? (std::vector<int64_t>{1, 2}) : (std::vector<int64_t>{0, 3}));
  }
  EXPECT_EQ(sym_shape_str(g->find_value("y1")->shape), "[batch,1,1,seq]");
  expect_same_with_symbols(m, *g, {{"batch", 3}, {"seq", 5}});
}

}  // namespace
}  // namespace kiln
