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

void add_int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

struct ResOptions {
  bool rms = false;
  bool broadcast = false;     // the residual is [8], broadcast over x [2, 3, 8]
  int64_t axis = -1;
  bool sum_reused = false;    // pre-norm: the sum feeds a later Add too
  bool sum_is_output = false; // the sum is also a graph output
  bool mean_used = false;     // LayerNormalization's Mean output is a graph output
};

// x, r [2, 3, 8] -> s = x + r -> y = LayerNormalization(s) or RMSNormalization(s).
onnx::ModelProto residual_model(const ResOptions& o) {
  auto m = make_model(o.rms ? 23 : 17);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  if (o.broadcast) add_input(m, "r", onnx::TensorProto::FLOAT, {"8"});
  else add_input(m, "r", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  const int64_t n = o.axis == 1 ? 24 : 8;
  const std::vector<int64_t> pdims = o.axis == 1 ? std::vector<int64_t>{3, 8} : std::vector<int64_t>{8};
  add_initializer_f32(m, "gamma", pdims, values(static_cast<size_t>(n), 11, 0.5f, 1.5f));
  add_initializer_f32(m, "beta", pdims, values(static_cast<size_t>(n), 12));
  add_node(m, "Add", {"x", "r"}, {"s"}, "residual");
  std::vector<std::string> outs = {"y"};
  if (o.mean_used) outs.push_back("mean");
  auto* norm = o.rms ? add_node(m, "RMSNormalization", {"s", "gamma"}, outs, "norm")
                     : add_node(m, "LayerNormalization", {"s", "gamma", "beta"}, outs, "norm");
  add_int_attr(norm, "axis", o.axis);
  add_float_attr(norm, "epsilon", 1e-3f);
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  if (o.mean_used) add_output(m, "mean", onnx::TensorProto::FLOAT, {"2", "3", "1"});
  if (o.sum_reused) {
    add_node(m, "Mul", {"y", "y"}, {"f"}, "sublayer");
    add_node(m, "Add", {"s", "f"}, {"next"}, "next_residual");
    add_output(m, "next", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  }
  if (o.sum_is_output) add_output(m, "s", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  return m;
}

Node* find(const Graph& g, Op op) {
  for (Node* n : g.nodes()) {
    if (n->op() == op) return n;
  }
  return nullptr;
}

TEST(FuseResidualNorm, PostNormLayerNorm) {
  auto m = residual_model({});
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_residual_norm), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* f = g->nodes()[0];
  ASSERT_EQ(f->op(), Op::FusedResidualNorm);
  EXPECT_EQ(f->attrs.get_string("norm", ""), "LayerNorm");
  EXPECT_FLOAT_EQ(f->attrs.get_float("epsilon", 0.0f), 1e-3f);
  ASSERT_EQ(f->num_inputs(), 4u);
  EXPECT_EQ(f->input(0)->name(), "x");
  EXPECT_EQ(f->input(1)->name(), "r");
  EXPECT_EQ(f->input(3)->name(), "beta");
  EXPECT_TRUE(f->num_outputs() < 2 || f->output(1) == nullptr);  // no Sum needed
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  expect_same_outputs(m, *g, 0.0);  // the same kernels: bit-identical
}

TEST(FuseResidualNorm, RmsNorm) {
  ResOptions o;
  o.rms = true;
  auto m = residual_model(o);
  auto g = load(m);
  EXPECT_EQ(run_pass(*g, fuse_residual_norm), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* f = g->nodes()[0];
  ASSERT_EQ(f->op(), Op::FusedResidualNorm);
  EXPECT_EQ(f->attrs.get_string("norm", ""), "RMSNorm");
  EXPECT_EQ(f->num_inputs(), 3u);
  expect_same_outputs(m, *g, 0.0);
}

// Pre-norm blocks read the residual stream after the norm: the fused node outputs Sum.
TEST(FuseResidualNorm, PreNormKeepsSum) {
  for (bool output : {false, true}) {
    ResOptions o;
    o.sum_reused = true;
    o.sum_is_output = output;
    auto m = residual_model(o);
    auto g = load(m);
    EXPECT_EQ(run_pass(*g, fuse_residual_norm), 1);
    Node* f = find(*g, Op::FusedResidualNorm);
    ASSERT_TRUE(f);
    ASSERT_EQ(f->num_outputs(), 2u);
    ASSERT_TRUE(f->output(1));
    EXPECT_EQ(count(*g, Op::LayerNormalization), 0);
    EXPECT_EQ(count(*g, Op::Add), 1);  // only the next block's residual Add
    Node* next = find(*g, Op::Add);
    EXPECT_TRUE(next->input(0) == f->output(1) || next->input(1) == f->output(1));
    if (output) {
      EXPECT_EQ(f->output(1)->name(), "s");
    }
    expect_same_outputs(m, *g, 0.0);
  }
}

TEST(FuseResidualNorm, NearMissesStay) {
  ResOptions broadcast;
  broadcast.broadcast = true;
  ResOptions middle_axis;
  middle_axis.axis = 1;
  ResOptions mean_used;
  mean_used.mean_used = true;
  for (const ResOptions& o : {broadcast, middle_axis, mean_used}) {
    auto m = residual_model(o);
    auto g = load(m);
    EXPECT_EQ(run_pass(*g, fuse_residual_norm), 0);
    EXPECT_EQ(count(*g, Op::FusedResidualNorm), 0);
    EXPECT_EQ(g->num_nodes(), 2u);
    expect_same_outputs(m, *g, 0.0);
  }
}

// A BERT encoder layer's tail and a GPT-2 pre-norm step, through the whole pipeline:
//   h = LN(x + (x @ Wo + bo)); f = Gelu(h @ W1 + b1) @ W2 + b2; y = LN(h + f)
// must end as GEMM + residual + LayerNorm, GEMM + GELU, GEMM + residual + LayerNorm.
TEST(FuseResidualNorm, BertLayerTailPipeline) {
  auto m = make_model(20);  // Gelu
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  add_initializer_f32(m, "wo", {8, 8}, values(64, 21, -0.3f, 0.3f));
  add_initializer_f32(m, "bo", {8}, values(8, 22));
  add_initializer_f32(m, "w1", {8, 16}, values(128, 23, -0.3f, 0.3f));
  add_initializer_f32(m, "b1", {16}, values(16, 24));
  add_initializer_f32(m, "w2", {16, 8}, values(128, 25, -0.3f, 0.3f));
  add_initializer_f32(m, "b2", {8}, values(8, 26));
  add_initializer_f32(m, "g1", {8}, values(8, 27, 0.5f, 1.5f));
  add_initializer_f32(m, "be1", {8}, values(8, 28));
  add_initializer_f32(m, "g2", {8}, values(8, 29, 0.5f, 1.5f));
  add_initializer_f32(m, "be2", {8}, values(8, 30));
  add_node(m, "MatMul", {"x", "wo"}, {"o"});
  add_node(m, "Add", {"o", "bo"}, {"ob"});
  add_node(m, "Add", {"x", "ob"}, {"r1"});
  add_node(m, "LayerNormalization", {"r1", "g1", "be1"}, {"h"});
  add_node(m, "MatMul", {"h", "w1"}, {"u"});
  add_node(m, "Add", {"u", "b1"}, {"ub"});
  add_node(m, "Gelu", {"ub"}, {"ug"});
  add_node(m, "MatMul", {"ug", "w2"}, {"d"});
  add_node(m, "Add", {"d", "b2"}, {"db"});
  add_node(m, "Add", {"h", "db"}, {"r2"});
  add_node(m, "LayerNormalization", {"r2", "g2", "be2"}, {"y"});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3", "8"});
  auto g = load(m);
  auto r = optimize_graph(*g);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(count(*g, Op::FusedGemm), 3);
  EXPECT_EQ(count(*g, Op::FusedResidualNorm), 2);
  EXPECT_EQ(g->num_nodes(), 5u);
  expect_same_outputs(m, *g, 1e-6);
  // The kiln-domain op survives an ONNX export and re-import.
  auto bytes = export_onnx_bytes(*g);
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  auto back = import_onnx_bytes(*bytes, ".", "optimized.onnx");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(count(*back->graph, Op::FusedResidualNorm), 2);
  expect_same_outputs(m, *back->graph, 1e-6);
}

}  // namespace
}  // namespace kiln
