// push_transpose_through_elementwise: a Transpose and its inverse around elementwise ops
// both disappear (constants transposed to match), Transposes of one perm feeding one
// binary op become one Transpose after it; near misses stay; numerics against the original.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

int run_push(Graph& g) {
  run_pass(g, infer_shapes);
  return run_pass(g, push_transpose_through_elementwise);
}

onnx::NodeProto* transpose(onnx::ModelProto& m, const std::string& in, const std::string& out,
                           const std::vector<int64_t>& perm) {
  auto* n = add_node(m, "Transpose", {in}, {out}, "t_" + out);
  add_ints_attr(n, "perm", perm);
  return n;
}

TEST(PushTransposeThroughElementwise, RemovesPairAroundUnaryAndConstantOps) {
  // NCHW [1,2,3,4] -> NHWC [1,3,4,2] -> Relu -> * c[2] (per channel) + d[4,1] -> Sigmoid
  // -> back to NCHW. Both Transposes go; c and d (its dims are W, C) become [1,2,1,1] and
  // [1,1,1,4].
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "2", "3", "4"});
  add_initializer_f32(m, "c", {2}, values(2, 11));
  add_initializer_f32(m, "d", {4, 1}, values(4, 12));
  add_scalar(m, "half", 0.5f);
  transpose(m, "x", "t", {0, 2, 3, 1});
  add_node(m, "Relu", {"t"}, {"a"}, "relu");
  add_node(m, "Mul", {"a", "c"}, {"b"}, "mul");
  add_node(m, "Add", {"d", "b"}, {"e"}, "add");
  add_node(m, "Sub", {"e", "half"}, {"f"}, "sub");
  add_node(m, "Sigmoid", {"f"}, {"s"}, "sigmoid");
  transpose(m, "s", "y", {0, 3, 1, 2});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "2", "3", "4"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_push(*g), 1);
  EXPECT_EQ(count(*g, Op::Transpose), 0);
  EXPECT_EQ(g->num_nodes(), 5u);
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  for (Node* n : g->nodes()) {
    if (n->op() == Op::Relu) {
      EXPECT_EQ(n->input(0)->name(), "x");
    }
    if (n->op() == Op::Mul) {
      EXPECT_EQ(n->input(1)->constant().dims(), (Dims{1, 2, 1, 1}));
    }
    if (n->op() == Op::Add) {
      EXPECT_EQ(n->input(0)->constant().dims(), (Dims{1, 1, 1, 4}));
    }
  }
  EXPECT_EQ(sym_shape_str(g->outputs()[0]->shape), "[1,2,3,4]");
  expect_same_outputs(m, *g, 0.0);
}

TEST(PushTransposeThroughElementwise, RemovesAllTransposesOfABinaryTree) {
  // Transpose(a) + Transpose(b), Tanh, closing Transpose: three Transposes go.
  auto m = make_model(18);
  add_input(m, "a", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_input(m, "b", onnx::TensorProto::FLOAT, {"2", "1", "4"});
  transpose(m, "a", "ta", {2, 0, 1});
  transpose(m, "b", "tb", {2, 0, 1});
  add_node(m, "Add", {"ta", "tb"}, {"s"}, "add");
  add_node(m, "Tanh", {"s"}, {"h"}, "tanh");
  transpose(m, "h", "y", {1, 2, 0});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_push(*g), 1);
  EXPECT_EQ(count(*g, Op::Transpose), 0);
  EXPECT_EQ(g->num_nodes(), 2u);
  expect_same_outputs(m, *g, 0.0);
}

TEST(PushTransposeThroughElementwise, SinksTwoTransposesBelowABinaryOp) {
  auto m = make_model(18);
  add_input(m, "a", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_input(m, "b", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_initializer_f32(m, "c", {4, 1}, values(4, 5));
  transpose(m, "a", "ta", {1, 2, 0});
  transpose(m, "b", "tb", {1, 2, 0});
  add_node(m, "Mul", {"ta", "tb"}, {"p"}, "mul");
  add_node(m, "Add", {"p", "c"}, {"y"}, "add");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"3", "4", "2"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_push(*g), 1);
  EXPECT_EQ(count(*g, Op::Transpose), 1);
  for (Node* n : g->nodes()) {
    if (n->op() == Op::Mul) {
      EXPECT_EQ(n->input(0)->name(), "a");
      EXPECT_EQ(n->input(1)->name(), "b");
    }
    if (n->op() == Op::Transpose) {
      EXPECT_EQ(n->input(0)->producer()->op(), Op::Mul);
    }
  }
  expect_same_outputs(m, *g, 0.0);
}

TEST(PushTransposeThroughElementwise, NearMissesStay) {
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_input(m, "v", onnx::TensorProto::FLOAT, {"3", "4", "2"});
  // Perms that do not cancel.
  transpose(m, "x", "t1", {1, 2, 0});
  add_node(m, "Relu", {"t1"}, {"r1"}, "relu1");
  transpose(m, "r1", "y1", {1, 2, 0});
  // An intermediate with a second user.
  transpose(m, "x", "t2", {1, 2, 0});
  add_node(m, "Relu", {"t2"}, {"r2"}, "relu2");
  add_node(m, "Neg", {"r2"}, {"n2"}, "neg2");
  transpose(m, "n2", "y2", {2, 0, 1});
  add_node(m, "Abs", {"r2"}, {"y3"}, "abs_r2");
  // An operand that is neither transposed nor constant.
  transpose(m, "x", "t4", {1, 2, 0});
  add_node(m, "Add", {"t4", "v"}, {"s4"}, "add_v");
  transpose(m, "s4", "y4", {2, 0, 1});
  // Two transposes into one op, one of them also used elsewhere: no net gain.
  transpose(m, "x", "t5", {1, 2, 0});
  transpose(m, "x", "t6", {1, 2, 0});
  add_node(m, "Mul", {"t5", "t6"}, {"y5"}, "mul56");
  add_node(m, "Sigmoid", {"t6"}, {"y6"}, "sigmoid6");
  // Two transposes into one op that broadcasts them to a larger output.
  add_input(m, "u", onnx::TensorProto::FLOAT, {"2", "1", "4"});
  add_input(m, "w", onnx::TensorProto::FLOAT, {"1", "3", "4"});
  transpose(m, "u", "tu", {1, 2, 0});
  transpose(m, "w", "tw", {1, 2, 0});
  add_node(m, "Add", {"tu", "tw"}, {"y9"}, "add_broadcast");
  // An intermediate that is a graph output.
  transpose(m, "x", "t7", {1, 2, 0});
  add_node(m, "Exp", {"t7"}, {"y7"}, "exp7");
  transpose(m, "y7", "y8", {2, 0, 1});
  for (const char* o : {"y1", "y2", "y3", "y4", "y5", "y6", "y7", "y8", "y9"}) {
    auto* vi = m.mutable_graph()->add_output();
    vi->set_name(o);
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  auto g = load(m);
  ASSERT_TRUE(g);
  const size_t before = g->num_nodes();
  EXPECT_EQ(run_push(*g), 0);
  EXPECT_EQ(g->num_nodes(), before);
  expect_same_outputs(m, *g, 0.0);
}

TEST(PushTransposeThroughElementwise, SharedOpeningTransposeStaysForItsOtherUser) {
  // The closing Transpose goes; the opening one still feeds Abs, so it stays.
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  transpose(m, "x", "t", {1, 0, 2});
  add_node(m, "Relu", {"t"}, {"r"}, "relu");
  transpose(m, "r", "y1", {1, 0, 2});
  add_node(m, "Abs", {"t"}, {"y2"}, "abs");
  add_output(m, "y1", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_output(m, "y2", onnx::TensorProto::FLOAT, {"3", "2", "4"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_push(*g), 1);
  EXPECT_EQ(count(*g, Op::Transpose), 1);
  EXPECT_EQ(g->outputs()[0]->producer()->op(), Op::Relu);
  EXPECT_EQ(g->outputs()[0]->producer()->input(0)->name(), "x");
  expect_same_outputs(m, *g, 0.0);
}

}  // namespace
}  // namespace kiln
