// fuse_conv_epilogue: structure (Conv + residual Add + activation become one FusedConv;
// near misses kept) and numerics (same outputs as the original graph).
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

const std::vector<std::string> kOut = {"1", "4", "5", "5"};

// x[1,3,5,5] -> Conv(W[4,3,3,3], B, pads 1) -> c [1,4,5,5]; residual input r[1,4,5,5].
onnx::ModelProto conv_model(int64_t opset = 17) {
  auto m = make_model(opset);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "3", "5", "5"});
  add_input(m, "r", onnx::TensorProto::FLOAT, kOut);
  add_initializer_f32(m, "w", {4, 3, 3, 3}, values(108, 1));
  add_initializer_f32(m, "b", {4}, values(4, 2));
  add_ints_attr(add_node(m, "Conv", {"x", "w", "b"}, {"c"}, "conv"), "pads", {1, 1, 1, 1});
  add_value_info(m.mutable_graph()->add_value_info(), "c", onnx::TensorProto::FLOAT, kOut);
  return m;
}

// Declares the shape of intermediate value `name` (the residual check needs known shapes).
void declare(onnx::ModelProto& m, const std::string& name) {
  add_value_info(m.mutable_graph()->add_value_info(), name, onnx::TensorProto::FLOAT, kOut);
}

// Appends activation `act` from `in` to `out`.
void add_activation(onnx::ModelProto& m, const std::string& act, const std::string& in, const std::string& out) {
  if (act == "SiLU") {
    add_node(m, "Sigmoid", {in}, {"sig"}, "sig");
    add_node(m, "Mul", {"sig", in}, {out}, "silu_mul");
  } else if (act == "Clip") {
    add_initializer_f32(m, "lo", {}, {0.0f});
    add_initializer_f32(m, "hi", {}, {0.75f});
    add_node(m, "Clip", {in, "lo", "hi"}, {out}, "clip");
  } else if (act == "LeakyRelu") {
    add_float_attr(add_node(m, "LeakyRelu", {in}, {out}, "act"), "alpha", 0.3f);
  } else if (act == "HardSigmoid") {
    auto* n = add_node(m, "HardSigmoid", {in}, {out}, "act");
    add_float_attr(n, "alpha", 0.25f);
    add_float_attr(n, "beta", 0.4f);
  } else if (act == "GeluTanh") {
    auto* n = add_node(m, "Gelu", {in}, {out}, "act");
    auto* a = n->add_attribute();
    a->set_name("approximate");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("tanh");
  } else {
    add_node(m, act, {in}, {out}, "act");
  }
}

TEST(FuseConvEpilogue, FusesEveryActivationWithAndWithoutResidual) {
  for (const std::string act : {"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "SiLU", "Tanh",
                                "Gelu", "GeluTanh"}) {
    for (bool residual : {false, true}) {
      SCOPED_TRACE(act + (residual ? " with residual" : ""));
      auto m = conv_model(20);
      std::string in = "c";
      if (residual) {
        add_node(m, "Add", {"r", "c"}, {"s"}, "residual");
        declare(m, "s");
        in = "s";
      }
      add_activation(m, act, in, "y");
      add_output(m, "y", onnx::TensorProto::FLOAT, kOut);
      auto g = load(m);
      ASSERT_TRUE(g);
      EXPECT_EQ(run_pass(*g, fuse_conv_epilogue), 1);
      ASSERT_EQ(g->num_nodes(), 1u);
      Node* f = g->nodes()[0];
      ASSERT_EQ(f->op(), Op::FusedConv);
      EXPECT_EQ(f->num_inputs(), residual ? 4u : 3u);
      EXPECT_EQ(f->attrs.get_string("activation", ""), act == "GeluTanh" ? "Gelu" : act);
      EXPECT_EQ(f->attrs.get_ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
      EXPECT_EQ(g->outputs()[0]->name(), "y");
      expect_same_outputs(m, *g, 1e-5);
    }
  }
}

TEST(FuseConvEpilogue, FusesResidualAloneAndFeedsLaterNodes) {
  // Conv + Add(residual) with no activation, its result feeding an Exp.
  auto m = conv_model();
  add_node(m, "Add", {"c", "r"}, {"s"}, "residual");
  declare(m, "s");
  add_node(m, "Exp", {"s"}, {"y"}, "exp");
  add_output(m, "y", onnx::TensorProto::FLOAT, kOut);
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_pass(*g, fuse_conv_epilogue), 1);
  EXPECT_EQ(count(*g, Op::FusedConv), 1);
  EXPECT_EQ(count(*g, Op::Add), 0);
  EXPECT_EQ(count(*g, Op::Exp), 1);
  expect_same_outputs(m, *g, 1e-5);
}

TEST(FuseConvEpilogue, KeepsNearMisses) {
  {  // the Conv output is also a graph output
    auto m = conv_model();
    add_node(m, "Relu", {"c"}, {"y"}, "relu");
    add_output(m, "y", onnx::TensorProto::FLOAT, kOut);
    add_output(m, "c", onnx::TensorProto::FLOAT, kOut);
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fuse_conv_epilogue), 0);
    EXPECT_EQ(count(*g, Op::FusedConv), 0);
    expect_same_outputs(m, *g, 1e-5);
  }
  {  // a broadcasting Add (not a residual of the output's shape) blocks the chain
    auto m = conv_model();
    add_input(m, "t", onnx::TensorProto::FLOAT, {"1", "4", "1", "1"});
    add_node(m, "Add", {"c", "t"}, {"s"}, "add");
    add_node(m, "Relu", {"s"}, {"y"}, "relu");
    add_output(m, "y", onnx::TensorProto::FLOAT, kOut);
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fuse_conv_epilogue), 0);
    expect_same_outputs(m, *g, 1e-5);
  }
  {  // Clip with a non-constant bound
    auto m = conv_model();
    add_input(m, "hi", onnx::TensorProto::FLOAT, {});
    add_node(m, "Clip", {"c", "", "hi"}, {"y"}, "clip");
    add_output(m, "y", onnx::TensorProto::FLOAT, kOut);
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fuse_conv_epilogue), 0);
    expect_same_outputs(m, *g, 1e-5);
  }
  {  // the residual sum has a second user: only nothing is fused past it
    auto m = conv_model();
    add_node(m, "Add", {"c", "r"}, {"s"}, "residual");
    declare(m, "s");
    add_node(m, "Relu", {"s"}, {"y"}, "relu");
    add_node(m, "Exp", {"s"}, {"e"}, "exp");
    add_output(m, "y", onnx::TensorProto::FLOAT, kOut);
    add_output(m, "e", onnx::TensorProto::FLOAT, kOut);
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fuse_conv_epilogue), 1);  // Conv + Add only
    EXPECT_EQ(count(*g, Op::FusedConv), 1);
    EXPECT_EQ(count(*g, Op::Relu), 1);
    EXPECT_EQ(count(*g, Op::Exp), 1);
    for (Node* n : g->nodes()) {
      if (n->op() == Op::FusedConv) {
        EXPECT_EQ(n->attrs.get_string("activation", ""), "None");
      }
    }
    expect_same_outputs(m, *g, 1e-5);
  }
}

TEST(FuseConvEpilogue, PipelineFoldsBatchNormScaleAndFusesActivation) {
  // Conv -> BN -> Mul(per-channel) -> Add(residual) -> Relu: one FusedConv at level 2.
  auto m = conv_model();
  add_initializer_f32(m, "scale", {4}, values(4, 3, 0.5f, 2.0f));
  add_initializer_f32(m, "bias", {4}, values(4, 4));
  add_initializer_f32(m, "mean", {4}, values(4, 5));
  add_initializer_f32(m, "var", {4}, values(4, 6, 0.2f, 3.0f));
  add_initializer_f32(m, "k", {4, 1, 1}, values(4, 7));
  add_node(m, "BatchNormalization", {"c", "scale", "bias", "mean", "var"}, {"n"}, "bn");
  add_node(m, "Mul", {"n", "k"}, {"p"}, "mul");
  add_node(m, "Add", {"p", "r"}, {"s"}, "residual");
  declare(m, "s");
  add_node(m, "Relu", {"s"}, {"y"}, "relu");
  add_output(m, "y", onnx::TensorProto::FLOAT, kOut);
  auto g = load(m);
  ASSERT_TRUE(g);
  auto reports = optimize_graph(*g);
  ASSERT_TRUE(reports.is_ok()) << reports.status().message();
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->op(), Op::FusedConv);
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  expect_same_outputs(m, *g, 1e-5);
}

}  // namespace
}  // namespace kiln
