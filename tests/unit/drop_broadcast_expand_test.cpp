// drop_broadcast_expand: an Expand whose consumers broadcast anyway is dropped (also in
// front of an embedding Gather); near misses where the Expand decides a shape stay.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ir/shape_inference.h"
#include "model_builder.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

void add_i64(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims,
             const std::vector<int64_t>& v) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t x : v) t->add_int64_data(x);
}

// infer_shapes, then the pass (and dead-code elimination); its rewrite count.
int drop(Graph& g) {
  run_pass(g, infer_shapes);
  return run_pass(g, drop_broadcast_expand);
}

// Random float inputs with every symbolic dim set to `sym`; outputs must match exactly.
void expect_same_outputs_sized(const onnx::ModelProto& m, const Graph& optimized, int64_t sym) {
  auto original = load(m);
  ASSERT_TRUE(original);
  std::mt19937 rng(static_cast<uint32_t>(sym));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  TensorMap in;
  for (Value* v : original->inputs()) {
    Dims d;
    for (const Dim& dim : *v->shape) d.push_back(dim.known() ? dim.value : sym);
    Tensor t(DataType::kFloat32, d);
    for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = dist(rng);
    in[v->name()] = t;
  }
  auto want = Interpreter(*original).run(in);
  auto got = Interpreter(optimized).run(in);
  ASSERT_TRUE(want.is_ok()) << want.status().message();
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  ASSERT_EQ(want->size(), got->size());
  for (size_t k = 0; k < want->size(); ++k) {
    ASSERT_EQ((*want)[k].dims(), (*got)[k].dims());
    for (int64_t i = 0; i < (*want)[k].size(); ++i) {
      ASSERT_FALSE(std::isnan((*got)[k].get_double(i)));
      EXPECT_EQ((*want)[k].get_double(i), (*got)[k].get_double(i));
    }
  }
}

TEST(DropBroadcastExpand, ExpandBeforeBroadcastingOps) {
  // Add(Expand(x [1,4], [3,4]), y [3,4]) and Mul(y, Expand(...)): both read x.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "4"});
  add_input(m, "y", onnx::TensorProto::FLOAT, {"3", "4"});
  add_i64(m, "s", {2}, {3, 4});
  add_node(m, "Expand", {"x", "s"}, {"e"}, "expand");
  add_node(m, "Add", {"e", "y"}, {"a"}, "add");
  add_node(m, "Mul", {"y", "e"}, {"b"}, "mul");
  add_output(m, "a", onnx::TensorProto::FLOAT, {"3", "4"});
  add_output(m, "b", onnx::TensorProto::FLOAT, {"3", "4"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(drop(*g), 1);
  EXPECT_EQ(count(*g, Op::Expand), 0);
  EXPECT_EQ(g->find_value("a")->producer()->input(0)->name(), "x");
  EXPECT_EQ(g->find_value("b")->producer()->input(1)->name(), "x");
  expect_same_outputs(m, *g, 0.0);
}

TEST(DropBroadcastExpand, ExpandedIndicesOfAnEmbeddingLookup) {
  // BERT's token types: Gather(table, Expand(ids [1,4], [w.0, w.1])) + w [batch,4,8]. The
  // lookup of the unexpanded ids folds, and the target's shape arithmetic dies.
  auto m = make_model();
  add_input(m, "w", onnx::TensorProto::FLOAT, {"batch", "4", "8"});
  add_i64(m, "ids", {1, 4}, {0, 2, 1, 2});
  add_initializer_f32(m, "table", {3, 8}, values(24, 5));
  add_node(m, "Shape", {"w"}, {"ws"});
  add_i64(m, "i0", {}, {0});
  add_i64(m, "i1", {}, {1});
  add_i64(m, "ax", {1}, {0});
  add_node(m, "Gather", {"ws", "i0"}, {"b"});
  add_node(m, "Gather", {"ws", "i1"}, {"q"});
  add_node(m, "Unsqueeze", {"b", "ax"}, {"b1"});
  add_node(m, "Unsqueeze", {"q", "ax"}, {"q1"});
  auto* cat = add_node(m, "Concat", {"b1", "q1"}, {"target"});
  auto* a = cat->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(0);
  add_node(m, "Expand", {"ids", "target"}, {"ids_e"}, "expand");
  add_node(m, "Gather", {"table", "ids_e"}, {"emb"}, "lookup");
  add_node(m, "Add", {"w", "emb"}, {"y"}, "add");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"batch", "4", "8"});
  {
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(drop(*g), 1);
    EXPECT_EQ(count(*g, Op::Expand), 0);
    Node* lookup = g->find_value("y")->producer()->input(1)->producer();
    ASSERT_TRUE(lookup);
    EXPECT_EQ(lookup->op(), Op::Gather);
    EXPECT_EQ(lookup->input(1)->name(), "ids");
    EXPECT_EQ(sym_shape_str(lookup->output(0)->shape), "[1,4,8]");
    for (int64_t batch : {1, 3}) expect_same_outputs_sized(m, *g, batch);
  }
  auto g = load(m);
  ASSERT_TRUE(g);
  ASSERT_TRUE(optimize_graph(*g).is_ok());
  EXPECT_EQ(g->num_nodes(), 1u);  // Add(w, constant)
  EXPECT_EQ(count(*g, Op::Add), 1);
  for (int64_t batch : {1, 3}) expect_same_outputs_sized(m, *g, batch);
}

TEST(DropBroadcastExpand, NearMissesStay) {
  // Each case: x [1,4] expanded to [3,4] (or [batch,4]) and read by ...
  struct Case {
    const char* what;
    const char* consumer;       // op reading the Expand (or the Gather for "gather")
    std::vector<std::string> other_dims;  // the consumer's other operand
    bool expand_is_output = false;
    int64_t gather_axis = 0;
  };
  const std::vector<Case> cases = {
      {"the other operand needs the broadcast", "Add", {"1", "4"}},
      {"a unary consumer", "Relu", {}},
      {"the Expand is a graph output", "Add", {"3", "4"}, true},
      {"a non-broadcasting consumer", "MatMul", {"4", "2"}},
      {"a lookup along axis 1", "gather", {"4", "3", "4"}, false, 1},
      {"a lookup feeding a MatMul", "gather_mm", {"4", "2"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto m = make_model();
    const bool gather = std::string(c.consumer).rfind("gather", 0) == 0;
    add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "4"});
    if (!c.other_dims.empty()) add_input(m, "o", onnx::TensorProto::FLOAT, c.other_dims);
    add_i64(m, "s", {2}, {3, 4});
    std::string e = "e";
    if (gather) {
      add_i64(m, "ids", {1, 4}, {0, 1, 2, 3});
      add_node(m, "Expand", {"ids", "s"}, {"e"}, "expand");
      add_initializer_f32(m, "table", {4, 4}, values(16, 9));
      auto* gn = add_node(m, "Gather", {"table", "e"}, {"emb"}, "lookup");
      auto* a = gn->add_attribute();
      a->set_name("axis");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(c.gather_axis);
      e = "emb";
    } else {
      add_node(m, "Expand", {"x", "s"}, {"e"}, "expand");
    }
    const std::string op = gather ? (std::string(c.consumer) == "gather" ? "Add" : "MatMul") : c.consumer;
    if (c.other_dims.empty()) add_node(m, op, {e}, {"y"}, "consumer");
    else add_node(m, op, {e, "o"}, {"y"}, "consumer");
    add_output(m, "y", onnx::TensorProto::FLOAT, {});
    if (c.expand_is_output) add_output(m, "e", onnx::TensorProto::FLOAT, {"3", "4"});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(drop(*g), 0);
    EXPECT_EQ(count(*g, Op::Expand), 1);
    expect_same_outputs(m, *g, 0.0);
  }
  // A symbolic target the consumer's other operand does not match: [batch,4] + [other,4].
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "4"});
  add_input(m, "w", onnx::TensorProto::FLOAT, {"batch", "4"});
  add_input(m, "o", onnx::TensorProto::FLOAT, {"other", "4"});
  add_node(m, "Shape", {"w"}, {"s"});
  add_node(m, "Expand", {"x", "s"}, {"e"}, "expand");
  add_node(m, "Add", {"e", "o"}, {"y"}, "add");
  add_output(m, "y", onnx::TensorProto::FLOAT, {});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(drop(*g), 0);
  EXPECT_EQ(count(*g, Op::Expand), 1);
}

}  // namespace
}  // namespace kiln
