// remove_noops on shape ops that provably keep their input: identity Transpose, Expand /
// Reshape / Flatten keeping the shape, zero Pad, whole-range Slice, one-input Concat, Split
// into one piece, Tile by ones, one-input Sum, CastLike to the same type. Static and
// symbolic shapes, near misses, numerics against the original graph.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <random>

#include "pass_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

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

// Shapes come from inference, as in the pipeline.
int run_noops(Graph& g) {
  run_pass(g, infer_shapes);
  return run_pass(g, remove_noops);
}

// Outputs of the original and optimized graphs on random inputs whose symbolic dims take
// the given sizes: bit-identical (a bypassed no-op computes nothing).
void expect_same_with_symbols(const onnx::ModelProto& m, const Graph& optimized,
                              const std::map<std::string, int64_t>& sizes) {
  auto original = load(m);
  ASSERT_TRUE(original);
  std::mt19937 rng(7);
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

TEST(RemoveNoopsMore, BypassesShapeOpsThatKeepStaticInput) {
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_i64(m, "e_shape", {3, 1});
  add_i64(m, "pads0", {0, 0, 0, 0, 0, 0});
  add_i64(m, "s_starts", {0, -100});
  add_i64(m, "s_ends", {kEnd, 4});
  add_i64(m, "s_axes", {0, 2});
  add_i64(m, "ones", {1, 1, 1});
  add_i64(m, "r_shape", {2, 3, -1});
  add_i64(m, "split4", {4});
  add_node(m, "Expand", {"x", "e_shape"}, {"a"}, "expand");
  add_node(m, "Pad", {"a", "pads0"}, {"b"}, "pad");
  add_node(m, "Slice", {"b", "s_starts", "s_ends", "s_axes"}, {"c"}, "slice");
  add_int_attr(add_node(m, "Concat", {"c"}, {"d"}, "concat"), "axis", 1);
  add_int_attr(add_node(m, "Split", {"d", "split4"}, {"e"}, "split"), "axis", -1);
  add_node(m, "Tile", {"e", "ones"}, {"f"}, "tile");
  add_ints_attr(add_node(m, "Transpose", {"f"}, {"g"}, "transpose"), "perm", {0, 1, 2});
  add_node(m, "Reshape", {"g", "r_shape"}, {"h"}, "reshape");
  add_node(m, "Sum", {"h"}, {"i"}, "sum");
  add_node(m, "CastLike", {"i", "x"}, {"j"}, "castlike");
  add_node(m, "Relu", {"j"}, {"y"}, "relu");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_noops(*g), 10);
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->op(), Op::Relu);
  EXPECT_EQ(g->nodes()[0]->input(0)->name(), "x");
  expect_same_outputs(m, *g, 0.0);
}

TEST(RemoveNoopsMore, BypassesWithSymbolicDims) {
  // x [N, 3, 4]: Expand [3, 1], Slice of the whole symbolic axis, Reshape copying N,
  // Split without sizes, Flatten of a 2-D value and Pad with axes keep it.
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"N", "3", "4"});
  add_i64(m, "e_shape", {3, 1});
  add_i64(m, "zero", {0});
  add_i64(m, "end", {kEnd});
  add_i64(m, "r_shape", {0, 3, 4});
  add_i64(m, "flat", {0, 12});
  add_i64(m, "pads0", {0, 0});
  add_i64(m, "pad_axes", {0});
  add_node(m, "Expand", {"x", "e_shape"}, {"a"}, "expand");
  add_node(m, "Slice", {"a", "zero", "end", "zero"}, {"b"}, "slice");
  add_node(m, "Reshape", {"b", "r_shape"}, {"c"}, "reshape");
  add_node(m, "Split", {"c"}, {"d"}, "split");
  add_node(m, "Reshape", {"d", "flat"}, {"e"}, "to_2d");  // a real reshape: stays
  add_node(m, "Flatten", {"e"}, {"f"}, "flatten");
  add_node(m, "Pad", {"f", "pads0", "", "pad_axes"}, {"y"}, "pad_out");  // graph output: stays
  add_output(m, "y", onnx::TensorProto::FLOAT, {"N", "12"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_noops(*g), 5);
  EXPECT_EQ(g->num_nodes(), 2u);
  EXPECT_EQ(count(*g, Op::Reshape), 1);
  EXPECT_EQ(count(*g, Op::Pad), 1);
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  expect_same_with_symbols(m, *g, {{"N", 5}});
}

TEST(RemoveNoopsMore, KeepsNearMisses) {
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_input(m, "s", onnx::TensorProto::FLOAT, {"N", "3"});
  add_i64(m, "grow", {2, 2, 3, 4});
  add_i64(m, "pads1", {0, 0, 0, 0, 0, 1});
  add_i64(m, "zero", {0});
  add_i64(m, "three", {3});
  add_i64(m, "two", {2});
  add_i64(m, "big", {1000});
  add_i64(m, "tiles", {1, 2, 1});
  add_i64(m, "r_shape", {3, 2, 4});
  add_i64(m, "split22", {2, 2});
  add_i64(m, "split_n", {4});
  // Expand that adds a dim, Pad by one, Slice ending early, Slice with step 2, Slice of a
  // symbolic axis to a finite end, Tile by 2, a real Transpose, a real Reshape, Split in
  // two, a sized Split of a symbolic axis, and one-input Concat producing a graph output.
  add_i64(m, "axis2", {2});
  add_node(m, "Expand", {"x", "grow"}, {"o1"}, "expand");
  add_node(m, "Pad", {"x", "pads1"}, {"o2"}, "pad");
  add_node(m, "Slice", {"x", "zero", "three", "axis2"}, {"o3"}, "slice_short");
  add_node(m, "Slice", {"x", "zero", "big", "zero", "two"}, {"o4"}, "slice_step");
  add_node(m, "Slice", {"s", "zero", "big"}, {"o5"}, "slice_symbolic");
  add_node(m, "Tile", {"x", "tiles"}, {"o6"}, "tile");
  add_ints_attr(add_node(m, "Transpose", {"x"}, {"o7"}, "transpose"), "perm", {0, 2, 1});
  add_node(m, "Reshape", {"x", "r_shape"}, {"o8"}, "reshape");
  add_int_attr(add_node(m, "Split", {"x", "split22"}, {"o9", "o10"}, "split2"), "axis", 2);
  add_int_attr(add_node(m, "Split", {"s", "split_n"}, {"o11"}, "split_sym"), "axis", 0);
  add_node(m, "Concat", {"x"}, {"o12"}, "concat_out");
  for (const char* o : {"o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8", "o9", "o10", "o11"}) {
    add_node(m, "Relu", {o}, {std::string(o) + "_r"}, std::string("relu_") + o);
    auto* vi = m.mutable_graph()->add_output();  // dtype only: shapes come from inference
    vi->set_name(std::string(o) + "_r");
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  add_output(m, "o12", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  auto g = load(m);
  ASSERT_TRUE(g);
  const size_t before = g->num_nodes();
  EXPECT_EQ(run_noops(*g), 0);
  EXPECT_EQ(g->num_nodes(), before);
  expect_same_with_symbols(m, *g, {{"N", 4}});
}

}  // namespace
}  // namespace kiln
