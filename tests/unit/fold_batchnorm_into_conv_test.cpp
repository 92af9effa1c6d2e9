// fold_batchnorm_into_conv: structure (BN folded into Conv / ConvTranspose; near misses
// kept) and numerics (same outputs as the original graph).
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

void add_int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// x[1,3,6,6] -> Conv(W[4,3,3,3], B?) -> BatchNormalization(4 channels) -> y
onnx::ModelProto conv_bn_model(bool with_bias) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "3", "6", "6"});
  add_initializer_f32(m, "w", {4, 3, 3, 3}, values(108, 1));
  std::vector<std::string> conv_in = {"x", "w"};
  if (with_bias) {
    add_initializer_f32(m, "b", {4}, values(4, 2));
    conv_in.push_back("b");
  }
  add_initializer_f32(m, "scale", {4}, values(4, 3, 0.5f, 2.0f));
  add_initializer_f32(m, "bias", {4}, values(4, 4));
  add_initializer_f32(m, "mean", {4}, values(4, 5));
  add_initializer_f32(m, "var", {4}, values(4, 6, 0.2f, 3.0f));
  add_ints_attr(add_node(m, "Conv", conv_in, {"c"}, "conv"), "pads", {1, 1, 1, 1});
  add_float_attr(add_node(m, "BatchNormalization", {"c", "scale", "bias", "mean", "var"}, {"y"}, "bn"), "epsilon", 1e-3f);
  add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "4", "6", "6"});
  return m;
}

TEST(FoldBatchNormIntoConv, FoldsWithAndWithoutBias) {
  for (bool with_bias : {true, false}) {
    auto m = conv_bn_model(with_bias);
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_batchnorm_into_conv), 1);
    EXPECT_EQ(g->num_nodes(), 1u);
    ASSERT_EQ(count(*g, Op::Conv), 1);
    Node* conv = g->nodes()[0];
    ASSERT_EQ(conv->num_inputs(), 3u);
    EXPECT_TRUE(conv->input(1)->is_constant());
    EXPECT_TRUE(conv->input(2)->is_constant());
    EXPECT_EQ(g->outputs()[0]->name(), "y");  // the graph output keeps its name
    expect_same_outputs(m, *g, 1e-5);
  }
}

TEST(FoldBatchNormIntoConv, FoldsIntoGroupedConvTranspose) {
  // ConvTranspose W[4,3,2,2], group 2: 6 output channels, then BN(6) -> Relu.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "4", "3", "3"});
  add_initializer_f32(m, "w", {4, 3, 2, 2}, values(48, 7));
  add_initializer_f32(m, "b", {6}, values(6, 8));
  add_initializer_f32(m, "scale", {6}, values(6, 9, 0.5f, 2.0f));
  add_initializer_f32(m, "bias", {6}, values(6, 10));
  add_initializer_f32(m, "mean", {6}, values(6, 11));
  add_initializer_f32(m, "var", {6}, values(6, 12, 0.2f, 3.0f));
  auto* ct = add_node(m, "ConvTranspose", {"x", "w", "b"}, {"c"}, "convt");
  add_int_attr(ct, "group", 2);
  add_ints_attr(ct, "strides", {2, 2});
  add_node(m, "BatchNormalization", {"c", "scale", "bias", "mean", "var"}, {"n"}, "bn");
  add_node(m, "Relu", {"n"}, {"y"}, "relu");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "6", "6", "6"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_pass(*g, fold_batchnorm_into_conv), 1);
  EXPECT_EQ(count(*g, Op::BatchNormalization), 0);
  EXPECT_EQ(count(*g, Op::ConvTranspose), 1);
  expect_same_outputs(m, *g, 1e-5);
}

TEST(FoldBatchNormIntoConv, KeepsNearMisses) {
  {  // the Conv output has a second user (a graph output)
    auto m = conv_bn_model(true);
    add_output(m, "c", onnx::TensorProto::FLOAT, {"1", "4", "6", "6"});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_batchnorm_into_conv), 0);
    EXPECT_EQ(count(*g, Op::BatchNormalization), 1);
    expect_same_outputs(m, *g, 1e-5);
  }
  {  // the Conv output also feeds a Relu
    auto m = conv_bn_model(true);
    add_node(m, "Relu", {"c"}, {"r"}, "relu");
    add_output(m, "r", onnx::TensorProto::FLOAT, {"1", "4", "6", "6"});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_batchnorm_into_conv), 0);
    EXPECT_EQ(count(*g, Op::BatchNormalization), 1);
    expect_same_outputs(m, *g, 1e-5);
  }
  {  // non-constant BN scale (a graph input)
    auto m = conv_bn_model(true);
    auto* inits = m.mutable_graph()->mutable_initializer();
    for (int i = 0; i < inits->size(); ++i) {
      if (inits->Get(i).name() == "scale") {
        inits->DeleteSubrange(i, 1);
        break;
      }
    }
    add_input(m, "scale", onnx::TensorProto::FLOAT, {"4"});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_batchnorm_into_conv), 0);
    EXPECT_EQ(count(*g, Op::BatchNormalization), 1);
    expect_same_outputs(m, *g, 1e-5);
  }
  {  // training_mode=1 normalizes with the batch statistics
    auto m = conv_bn_model(true);
    for (auto& n : *m.mutable_graph()->mutable_node()) {
      if (n.op_type() == "BatchNormalization") add_int_attr(&n, "training_mode", 1);
    }
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(run_pass(*g, fold_batchnorm_into_conv), 0);
    EXPECT_EQ(count(*g, Op::BatchNormalization), 1);
    expect_same_outputs(m, *g, 1e-5);
  }
}

}  // namespace
}  // namespace kiln
