#include <gtest/gtest.h>

#include "model_builder.h"
#include "pass_test_util.h"
#include "passes/pass.h"

namespace kiln {
namespace {

using namespace kiln::testing;

constexpr int64_t K = 6;

// x [2, 3, K] feeding linears; each spec is (name, N, epilogue) where epilogue is "bias",
// "bias+Relu", "bias+Gelu" or "" (a bare MatMul). Each linear's output is a graph output.
struct Linear {
  std::string name;
  int64_t n;
  std::string epilogue;
  std::string input = "x";
};

onnx::ModelProto linears(const std::vector<Linear>& ls, bool weight_input = false) {
  auto m = make_model(20);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", std::to_string(K)});
  add_input(m, "x2", onnx::TensorProto::FLOAT, {"2", "3", std::to_string(K)});
  uint32_t seed = 1;
  for (const Linear& l : ls) {
    const std::string w = l.name + "_w";
    if (weight_input && l.name == "wi") add_input(m, w, onnx::TensorProto::FLOAT, {std::to_string(K), std::to_string(l.n)});
    else add_initializer_f32(m, w, {K, l.n}, values(static_cast<size_t>(K * l.n), seed++));
    if (l.epilogue.empty()) {
      add_node(m, "MatMul", {l.input, w}, {l.name}, l.name + "_mm");
    } else {
      add_initializer_f32(m, l.name + "_b", {l.n}, values(static_cast<size_t>(l.n), seed++));
      add_node(m, "MatMul", {l.input, w}, {l.name + "_mm"}, l.name + "_mm");
      const bool act = l.epilogue != "bias";
      add_node(m, "Add", {l.name + "_mm", l.name + "_b"}, {act ? l.name + "_pre" : l.name});
      if (act) add_node(m, l.epilogue.substr(5), {l.name + "_pre"}, {l.name});
    }
    add_output(m, l.name, onnx::TensorProto::FLOAT, {"2", "3", std::to_string(l.n)});
  }
  return m;
}

// fuse_gemm_epilogue (which makes the FusedGemms), then the merge; returns merge rewrites.
int merge(Graph& g) {
  run_pass(g, fuse_gemm_epilogue);
  return run_pass(g, merge_parallel_gemms);
}

TEST(MergeParallelGemms, QkvProjectionsBecomeOneGemm) {
  auto m = linears({{"q", 8, "bias"}, {"k", 8, "bias"}, {"v", 4, "bias"}});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(merge(*g), 1);
  ASSERT_EQ(g->num_nodes(), 2u);
  ASSERT_EQ(count(*g, Op::FusedGemm), 1);
  ASSERT_EQ(count(*g, Op::Split), 1);
  Node* gemm = g->nodes()[0];
  Node* split = g->nodes()[1];
  ASSERT_EQ(gemm->op(), Op::FusedGemm);
  EXPECT_EQ(gemm->input(1)->constant().dims(), (Dims{K, 20}));
  EXPECT_EQ(gemm->input(2)->constant().dims(), (Dims{20}));
  EXPECT_EQ(split->input(0), gemm->output(0));
  EXPECT_EQ(split->input(1)->constant().to_int_vector(), (std::vector<int64_t>{8, 8, 4}));
  EXPECT_EQ(split->attrs.get_int("axis", 0), -1);
  // The graph outputs keep their names and order.
  ASSERT_EQ(g->outputs().size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(g->outputs()[i], split->output(i));
  EXPECT_EQ(g->outputs()[0]->name(), "q");
  EXPECT_EQ(g->outputs()[2]->name(), "v");
  // Each output element is the same dot product as before: bit-identical.
  expect_same_outputs(m, *g, 0.0);
}

TEST(MergeParallelGemms, ActivationsGroupSeparately) {
  auto m = linears({{"a", 5, "bias"}, {"r1", 3, "bias+Relu"}, {"b", 4, "bias"}, {"gl", 2, "bias+Gelu"},
                    {"r2", 6, "bias+Relu"}});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(merge(*g), 2);  // {a, b} and {r1, r2}; the lone Gelu stays
  EXPECT_EQ(count(*g, Op::FusedGemm), 3);
  EXPECT_EQ(count(*g, Op::Split), 2);
  for (Node* n : g->nodes()) {
    if (n->op() != Op::FusedGemm) continue;
    const std::string act = n->attrs.get_string("activation", "");
    const int64_t width = n->input(1)->constant().dim(1);
    EXPECT_EQ(width, act == "Gelu" ? 2 : 9) << act;
  }
  expect_same_outputs(m, *g, 0.0);
}

TEST(MergeParallelGemms, BareMatMuls) {
  {
    // Only MatMuls: one MatMul.
    auto m = linears({{"a", 5, ""}, {"b", 3, ""}});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(merge(*g), 1);
    ASSERT_EQ(g->num_nodes(), 2u);
    EXPECT_EQ(count(*g, Op::MatMul), 1);
    EXPECT_EQ(count(*g, Op::Split), 1);
    expect_same_outputs(m, *g, 0.0);
  }
  {
    // A MatMul joins the activation-free FusedGemms with a zero bias; not the Relu one.
    auto m = linears({{"a", 5, ""}, {"b", 3, "bias"}, {"r", 2, "bias+Relu"}});
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(merge(*g), 1);
    EXPECT_EQ(count(*g, Op::MatMul), 0);
    EXPECT_EQ(count(*g, Op::FusedGemm), 2);
    for (Node* n : g->nodes()) {
      if (n->op() == Op::FusedGemm && n->attrs.get_string("activation", "") == "None") {
        // The MatMul's 5 columns get a zero bias; b's 3 are its own (nonzero) values.
        const Tensor& b = n->input(2)->constant();
        ASSERT_EQ(b.dims(), (Dims{8}));
        int zeros = 0;
        for (int64_t i = 0; i < 8; ++i) zeros += b.get_double(i) == 0.0;
        EXPECT_EQ(zeros, 5);
      }
    }
    expect_same_outputs(m, *g, 0.0);
  }
}

TEST(MergeParallelGemms, NearMissesStay) {
  // Different inputs, a non-constant weight, and one GEMM alone per group.
  auto m = linears({{"a", 5, "bias", "x"}, {"b", 3, "bias", "x2"}, {"wi", 4, "", "x"}, {"c", 2, "bias+Relu", "x"}},
                   /*weight_input=*/true);
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(merge(*g), 0);
  EXPECT_EQ(count(*g, Op::Split), 0);
  EXPECT_EQ(count(*g, Op::FusedGemm), 3);
  EXPECT_EQ(count(*g, Op::MatMul), 1);
  expect_same_outputs(m, *g, 0.0);
}

}  // namespace
}  // namespace kiln
