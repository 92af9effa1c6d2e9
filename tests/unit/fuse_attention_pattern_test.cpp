#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "model_builder.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "pass_test_util.h"
#include "passes/pass.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

using namespace kiln::testing;

constexpr int64_t B = 2, S = 5, H = 2, D = 4, E = H * D;
constexpr float kInf = std::numeric_limits<float>::infinity();

void add_i64(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims,
             const std::vector<int64_t>& v) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t x : v) t->add_int64_data(x);
}

void add_bool(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims,
              const std::vector<bool>& v) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::BOOL);
  for (int64_t d : dims) t->add_dims(d);
  for (bool x : v) t->add_int32_data(x ? 1 : 0);
}

// [rows, cols] with keep(i, j) -> bool.
template <typename F>
std::vector<bool> bool_matrix(int64_t rows, int64_t cols, F keep) {
  std::vector<bool> v;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) v.push_back(keep(i, j));
  return v;
}

std::string s(int64_t v) { return std::to_string(v); }

void add_int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

struct Spec {
  std::string scale = "div";  // div | mul | none | qk_sqrt | q_only | vector | input
  bool k_two_transposes = false;
  // none | add | add_last1 | causal_where | causal_where_inv | causal_add | bool_const |
  // bool_computed_inv | where_weak
  std::string mask = "none";
  int64_t softmax_axis = -1;
  bool probs_output = false;
  bool tail = true;      // Transpose + Reshape back to [B, S, E]
  bool dynamic = false;  // symbolic batch and sequence, reshape targets computed from shapes
  // The ONNX Attention function body's guard after the softmax (with mask "add"):
  // Where(Equal(ReduceMax(mask, last axis), -inf), CastLike(0, probs), probs).
  bool row_guard = false;
};

// A [B, S, H, D] reshape target for `src`: a constant, or Shape -> Gather -> Concat.
std::string split_target(onnx::ModelProto& m, const Spec& sp, const std::string& src, const std::vector<int64_t>& c) {
  const std::string t = src + "_split_shape";
  if (!sp.dynamic) {
    add_i64(m, t, {4}, c);
    return t;
  }
  add_node(m, "Shape", {src}, {src + "_shape"});
  add_i64(m, src + "_i0", {}, {0});
  add_i64(m, src + "_i1", {}, {1});
  add_node(m, "Gather", {src + "_shape", src + "_i0"}, {src + "_b"});
  add_node(m, "Gather", {src + "_shape", src + "_i1"}, {src + "_s"});
  add_i64(m, src + "_ax0", {1}, {0});
  add_node(m, "Unsqueeze", {src + "_b", src + "_ax0"}, {src + "_b1"});
  add_node(m, "Unsqueeze", {src + "_s", src + "_ax0"}, {src + "_s1"});
  add_i64(m, src + "_hd", {2}, {H, D});
  add_int_attr(add_node(m, "Concat", {src + "_b1", src + "_s1", src + "_hd"}, {t}), "axis", 0);
  return t;
}

// q, k, v [B, S, E] -> scaled dot-product attention written out as exporters do -> y.
onnx::ModelProto attention_model(const Spec& sp) {
  auto m = make_model(18);
  const std::string b = sp.dynamic ? "batch" : s(B), q = sp.dynamic ? "seq" : s(S);
  for (const char* n : {"q", "k", "v"}) add_input(m, n, onnx::TensorProto::FLOAT, {b, q, s(E)});
  add_node(m, "Reshape", {"q", split_target(m, sp, "q", {0, 0, H, D})}, {"q4r"});
  add_node(m, "Reshape", {"k", split_target(m, sp, "k", {B, S, H, D})}, {"k4r"});
  add_node(m, "Reshape", {"v", split_target(m, sp, "v", {0, -1, H, D})}, {"v4r"});
  add_ints_attr(add_node(m, "Transpose", {"q4r"}, {"q4"}), "perm", {0, 2, 1, 3});
  if (sp.k_two_transposes) {
    add_ints_attr(add_node(m, "Transpose", {"k4r"}, {"k4"}), "perm", {0, 2, 1, 3});
    add_ints_attr(add_node(m, "Transpose", {"k4"}, {"kt"}), "perm", {0, 1, 3, 2});
  } else {
    add_ints_attr(add_node(m, "Transpose", {"k4r"}, {"kt"}), "perm", {0, 2, 3, 1});
  }
  add_ints_attr(add_node(m, "Transpose", {"v4r"}, {"v4"}), "perm", {0, 2, 1, 3});
  const float root = std::sqrt(static_cast<float>(D));
  std::string qa = "q4", ka = "kt";
  if (sp.scale == "qk_sqrt") {
    add_scalar(m, "quarter", 1.0f / std::sqrt(root));
    add_node(m, "Mul", {"q4", "quarter"}, {"q4s"});
    add_node(m, "Mul", {"quarter", "kt"}, {"kts"});
    qa = "q4s";
    ka = "kts";
  } else if (sp.scale == "q_only") {
    add_scalar(m, "root", root);
    add_node(m, "Div", {"q4", "root"}, {"q4s"});
    qa = "q4s";
  }
  add_node(m, "MatMul", {qa, ka}, {"mm"});
  std::string cur = "mm";
  auto step = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    add_node(m, op, in, {out});
    cur = out;
  };
  if (sp.scale == "div") {
    add_scalar(m, "root", root);
    step("Div", {cur, "root"}, "scaled");
  } else if (sp.scale == "mul") {
    add_scalar(m, "inv_root", 1.0f / root);
    step("Mul", {"inv_root", cur}, "scaled");
  } else if (sp.scale == "vector") {
    add_initializer_f32(m, "roots", {S}, values(S, 7, 1.0f, 3.0f));
    step("Div", {cur, "roots"}, "scaled");
  } else if (sp.scale == "input") {
    add_input(m, "root_in", onnx::TensorProto::FLOAT, {});
    step("Div", {cur, "root_in"}, "scaled");
  }
  auto lower = [](int64_t i, int64_t j) { return j <= i; };
  if (sp.mask == "add") {
    add_input(m, "mask", onnx::TensorProto::FLOAT, {b, "1", "1", q});
    step("Add", {cur, "mask"}, "masked");
  } else if (sp.mask == "add_last1") {
    add_input(m, "mask", onnx::TensorProto::FLOAT, {b, "1", q, "1"});
    step("Add", {cur, "mask"}, "masked");
  } else if (sp.mask == "causal_where" || sp.mask == "where_weak") {
    add_bool(m, "causal", {1, 1, S, S}, bool_matrix(S, S, lower));
    add_scalar(m, "fill", sp.mask == "where_weak" ? -1.0f : -kInf);
    step("Where", {"causal", cur, "fill"}, "masked");
  } else if (sp.mask == "causal_where_inv") {
    add_bool(m, "future", {S, S}, bool_matrix(S, S, [](int64_t i, int64_t j) { return j > i; }));
    add_scalar(m, "fill", -1e9f);
    step("Where", {"future", "fill", cur}, "masked");
  } else if (sp.mask == "causal_add") {
    std::vector<float> bias;
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = 0; j < S; ++j) bias.push_back(j <= i ? 0.0f : -kInf);
    add_initializer_f32(m, "bias", {S, S}, bias);
    step("Add", {"bias", cur}, "masked");
  } else if (sp.mask == "bool_const") {
    add_bool(m, "keep", {S, S}, bool_matrix(S, S, [](int64_t i, int64_t j) { return i == j || (i * 3 + j) % 4 != 0; }));
    add_scalar(m, "fill", -kInf);
    step("Where", {"keep", cur, "fill"}, "masked");
  } else if (sp.mask == "bool_computed_inv") {
    add_input(m, "mask", onnx::TensorProto::FLOAT, {b, "1", "1", q});
    add_scalar(m, "thr", -1.5f);
    add_node(m, "Less", {"mask", "thr"}, {"pad"});
    add_scalar(m, "fill", -1e4f);
    step("Where", {"pad", "fill", cur}, "masked");
  }
  add_int_attr(add_node(m, "Softmax", {cur}, {"probs"}), "axis", sp.softmax_axis);
  std::string probs = "probs";
  if (sp.row_guard) {
    add_i64(m, "last_axis", {1}, {-1});
    add_node(m, "ReduceMax", {"mask", "last_axis"}, {"row_max"});
    add_scalar(m, "neg_inf", -kInf);
    add_node(m, "Equal", {"row_max", "neg_inf"}, {"row_masked"});
    add_scalar(m, "zero_f", 0.0f);
    add_node(m, "CastLike", {"zero_f", "probs"}, {"zero_t"});
    add_node(m, "Where", {"row_masked", "zero_t", "probs"}, {"probs_safe"});
    probs = "probs_safe";
  }
  add_node(m, "MatMul", {probs, "v4"}, {sp.tail ? "ctx" : "y"});
  if (sp.tail) {
    add_ints_attr(add_node(m, "Transpose", {"ctx"}, {"ctx_t"}), "perm", {0, 2, 1, 3});
    if (sp.dynamic) {
      add_node(m, "Shape", {"ctx_t"}, {"ctx_shape"});
      add_i64(m, "zero", {1}, {0});
      add_i64(m, "two", {1}, {2});
      add_node(m, "Slice", {"ctx_shape", "zero", "two"}, {"ctx_bs"});
      add_i64(m, "hidden", {1}, {E});
      add_int_attr(add_node(m, "Concat", {"ctx_bs", "hidden"}, {"merge_shape"}), "axis", 0);
    } else {
      add_i64(m, "merge_shape", {3}, {0, 0, -1});
    }
    add_node(m, "Reshape", {"ctx_t", "merge_shape"}, {"y"});
    add_output(m, "y", onnx::TensorProto::FLOAT, {b, q, s(E)});
  } else {
    add_output(m, "y", onnx::TensorProto::FLOAT, {b, s(H), q, s(D)});
  }
  if (sp.probs_output) add_output(m, "probs", onnx::TensorProto::FLOAT, {b, s(H), q, q});
  return m;
}

// Shape inference first (as in the pipeline), then the pass and dead-code elimination.
int fuse(Graph& g) {
  PassReport r;
  PassContext ctx(r);
  EXPECT_TRUE(infer_shapes(g, ctx).is_ok());
  return run_pass(g, fuse_attention_pattern);
}

Node* find(const Graph& g, Op op) {
  for (Node* n : g.nodes())
    if (n->op() == op) return n;
  return nullptr;
}

TEST(FuseAttentionPattern, BertStyleWithAdditiveMask) {
  Spec sp;
  sp.mask = "add";
  auto m = attention_model(sp);
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* a = g->nodes()[0];
  ASSERT_EQ(a->op(), Op::Attention);
  ASSERT_EQ(a->num_inputs(), 4u);
  EXPECT_EQ(a->input(0)->name(), "q");
  EXPECT_EQ(a->input(1)->name(), "k");
  EXPECT_EQ(a->input(2)->name(), "v");
  EXPECT_EQ(a->input(3)->name(), "mask");
  EXPECT_EQ(a->attrs.get_int("q_num_heads", 0), H);
  EXPECT_EQ(a->attrs.get_int("kv_num_heads", 0), H);
  EXPECT_FLOAT_EQ(a->attrs.get_float("scale", 0), 0.5f);
  EXPECT_EQ(a->attrs.get_int("is_causal", -1), 0);
  EXPECT_EQ(a->output(0)->name(), "y");
  expect_same_outputs(m, *g, 1e-5);
}

TEST(FuseAttentionPattern, ScaleForms) {
  // scale mode -> the scale the fused node must carry (none: 1, not the op's 1/sqrt(D)).
  const std::vector<std::pair<std::string, float>> cases = {
      {"mul", 0.5f}, {"none", 1.0f}, {"qk_sqrt", 0.5f}, {"q_only", 0.5f}};
  for (const auto& [mode, want] : cases) {
    SCOPED_TRACE(mode);
    Spec sp;
    sp.scale = mode;
    sp.k_two_transposes = true;
    auto m = attention_model(sp);
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(fuse(*g), 1);
    ASSERT_EQ(g->num_nodes(), 1u);
    Node* a = find(*g, Op::Attention);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->num_inputs(), 3u);
    EXPECT_NEAR(a->attrs.get_float("scale", 0), want, 1e-6);
    expect_same_outputs(m, *g, 1e-5);
  }
}

TEST(FuseAttentionPattern, CausalMasksBecomeIsCausal) {
  for (const char* mask : {"causal_where", "causal_where_inv", "causal_add"}) {
    SCOPED_TRACE(mask);
    Spec sp;
    sp.mask = mask;
    auto m = attention_model(sp);
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(fuse(*g), 1);
    ASSERT_EQ(g->num_nodes(), 1u);
    Node* a = find(*g, Op::Attention);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->num_inputs(), 3u);  // no attn_mask: is_causal says it all
    EXPECT_EQ(a->attrs.get_int("is_causal", 0), 1);
    expect_same_outputs(m, *g, 1e-5);
  }
}

TEST(FuseAttentionPattern, BooleanMasksArePassedOn) {
  {
    // A constant that is not causal: passed as it is.
    Spec sp;
    sp.mask = "bool_const";
    auto m = attention_model(sp);
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(fuse(*g), 1);
    Node* a = find(*g, Op::Attention);
    ASSERT_TRUE(a);
    ASSERT_EQ(a->num_inputs(), 4u);
    EXPECT_EQ(a->input(3)->dtype, DataType::kBool);
    EXPECT_EQ(a->input(3)->name(), "keep");
    EXPECT_EQ(a->attrs.get_int("is_causal", -1), 0);
    expect_same_outputs(m, *g, 1e-5);
  }
  {
    // Where(padding, -1e4, s) with a computed condition: the op gets Not(padding).
    Spec sp;
    sp.mask = "bool_computed_inv";
    auto m = attention_model(sp);
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(fuse(*g), 1);
    Node* a = find(*g, Op::Attention);
    ASSERT_TRUE(a);
    ASSERT_EQ(a->num_inputs(), 4u);
    ASSERT_TRUE(a->input(3)->producer());
    EXPECT_EQ(a->input(3)->producer()->op(), Op::Not);
    EXPECT_EQ(count(*g, Op::Where), 0);
    EXPECT_EQ(count(*g, Op::Softmax), 0);
    expect_same_outputs(m, *g, 1e-5);
  }
}

TEST(FuseAttentionPattern, OnnxFunctionBodyRowGuard) {
  // The guard zeroes rows whose mask is all -inf, which the op does itself: absorbed.
  Spec sp;
  sp.mask = "add";
  sp.row_guard = true;
  auto m = attention_model(sp);
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->op(), Op::Attention);
  expect_same_outputs(m, *g, 1e-5);
  // A guard over another tensor than the scores' mask is not the op's behaviour.
  auto other = attention_model(sp);
  for (auto& n : *other.mutable_graph()->mutable_node()) {
    if (n.op_type() == "ReduceMax") n.set_input(0, "q");
  }
  auto g2 = load(other);
  ASSERT_TRUE(g2);
  EXPECT_EQ(fuse(*g2), 0);
}

TEST(FuseAttentionPattern, FourDimensionalFormWithoutReshapes) {
  // Without the head-merging tail the op reads and writes [B, H, S, D].
  Spec sp;
  sp.tail = false;
  sp.mask = "add";
  auto m = attention_model(sp);
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 1);
  Node* a = find(*g, Op::Attention);
  ASSERT_TRUE(a);
  // Q and V are read after their head transposes; K in [B,H,S,D] never exists (Kt comes
  // from one Transpose(0,2,3,1)), so the pass adds a Transpose(0,2,1,3) for it.
  EXPECT_EQ(a->input(0)->name(), "q4");
  EXPECT_EQ(a->input(2)->name(), "v4");
  Node* kt = a->input(1)->producer();
  ASSERT_TRUE(kt);
  EXPECT_EQ(kt->op(), Op::Transpose);
  EXPECT_EQ(kt->attrs.get_ints("perm"), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(kt->input(0)->name(), "k4r");
  EXPECT_EQ(count(*g, Op::MatMul), 0);
  EXPECT_EQ(count(*g, Op::Softmax), 0);
  expect_same_outputs(m, *g, 1e-5);
}

// Plain 4-D inputs [B, H, S, D]: Q.Kt via Transpose(0,1,3,2), scaled, softmax, .V.
onnx::ModelProto attention_4d(int64_t k_batch, bool rank5_mask) {
  auto m = make_model(18);
  add_input(m, "q", onnx::TensorProto::FLOAT, {s(B), s(H), s(S), s(D)});
  add_input(m, "k", onnx::TensorProto::FLOAT, {s(k_batch), s(H), s(S), s(D)});
  add_input(m, "v", onnx::TensorProto::FLOAT, {s(B), s(H), s(S), s(D)});
  add_ints_attr(add_node(m, "Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  add_node(m, "MatMul", {"q", "kt"}, {"mm"});
  add_scalar(m, "root", 2.0f);
  add_node(m, "Div", {"mm", "root"}, {"scaled"});
  std::string cur = "scaled";
  if (rank5_mask) {
    add_input(m, "mask", onnx::TensorProto::FLOAT, {"1", "1", "1", "1", s(S)});
    add_node(m, "Add", {cur, "mask"}, {"masked"});
    cur = "masked";
  }
  add_node(m, "Softmax", {cur}, {"probs"});
  add_node(m, "MatMul", {"probs", "v"}, {"y"});
  if (rank5_mask) add_output(m, "y", onnx::TensorProto::FLOAT, {"1", s(B), s(H), s(S), s(D)});
  else add_output(m, "y", onnx::TensorProto::FLOAT, {s(B), s(H), s(S), s(D)});
  return m;
}

TEST(FuseAttentionPattern, FourDimensionalInputs) {
  auto m = attention_4d(B, false);
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* a = g->nodes()[0];
  ASSERT_EQ(a->op(), Op::Attention);
  EXPECT_EQ(a->input(1)->name(), "k");
  EXPECT_FLOAT_EQ(a->attrs.get_float("scale", 0), 0.5f);
  expect_same_outputs(m, *g, 1e-5);
}

// Inputs with symbolic dims: concrete sizes per symbol.
TensorMap symbolic_inputs(const Graph& g, const std::map<std::string, int64_t>& sizes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  TensorMap m;
  for (Value* v : g.inputs()) {
    Dims d;
    for (const Dim& dim : *v->shape) d.push_back(dim.known() ? dim.value : sizes.at(dim.symbol));
    Tensor t(DataType::kFloat32, d);
    for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = dist(rng);
    m[v->name()] = t;
  }
  return m;
}

// expect_same_outputs for models with symbolic "batch" and "seq" dims, at two sizes each.
void expect_same_outputs_symbolic(const onnx::ModelProto& m, const Graph& optimized) {
  auto original = load(m);
  ASSERT_TRUE(original);
  for (auto [batch, seq] : {std::pair<int64_t, int64_t>{1, 3}, {3, 6}}) {
    TensorMap in = symbolic_inputs(*original, {{"batch", batch}, {"seq", seq}}, static_cast<uint32_t>(batch * 10 + seq));
    auto want = Interpreter(*original).run(in);
    auto got = Interpreter(optimized).run(in);
    ASSERT_TRUE(want.is_ok()) << want.status().message();
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    ASSERT_EQ(want->size(), got->size());
    for (size_t k = 0; k < want->size(); ++k) {
      const Tensor& w = (*want)[k];
      const Tensor& o = (*got)[k];
      ASSERT_EQ(w.dims(), o.dims());
      EXPECT_EQ(w.dim(0), batch);
      for (int64_t i = 0; i < w.size(); ++i) {
        ASSERT_FALSE(std::isnan(o.get_double(i)));
        EXPECT_NEAR(w.get_double(i), o.get_double(i), 1e-5 * (1 + std::fabs(w.get_double(i))));
      }
    }
  }
}

TEST(FuseAttentionPattern, DynamicBatchAndSequence) {
  Spec sp;
  sp.dynamic = true;
  sp.mask = "add";
  sp.k_two_transposes = true;
  auto m = attention_model(sp);
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 1);
  // The shape arithmetic behind the reshapes is dead with them.
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* a = g->nodes()[0];
  ASSERT_EQ(a->op(), Op::Attention);
  EXPECT_EQ(a->attrs.get_int("q_num_heads", 0), H);
  expect_same_outputs_symbolic(m, *g);
}

TEST(FuseAttentionPattern, NearMissesStay) {
  std::vector<std::pair<std::string, Spec>> cases;
  Spec sp;
  sp.softmax_axis = 2;
  cases.push_back({"softmax over the query axis", sp});
  sp = Spec();
  sp.probs_output = true;
  cases.push_back({"probabilities are a graph output", sp});
  sp = Spec();
  sp.mask = "add_last1";
  cases.push_back({"mask broadcast over the keys", sp});
  sp = Spec();
  sp.scale = "vector";
  cases.push_back({"per-key (non-scalar) scale", sp});
  sp = Spec();
  sp.scale = "input";
  cases.push_back({"non-constant scale", sp});
  sp = Spec();
  sp.mask = "where_weak";
  cases.push_back({"Where fill not a masking value", sp});
  for (const auto& [what, spec] : cases) {
    SCOPED_TRACE(what);
    auto m = attention_model(spec);
    auto g = load(m);
    ASSERT_TRUE(g);
    const size_t before = g->num_nodes();
    EXPECT_EQ(fuse(*g), 0);
    EXPECT_EQ(g->num_nodes(), before);
    EXPECT_EQ(count(*g, Op::Attention), 0);
    expect_same_outputs(m, *g, 0.0);
  }
  for (auto [k_batch, rank5] : {std::pair<int64_t, bool>{1, false}, {B, true}}) {
    SCOPED_TRACE(rank5 ? "rank-5 mask" : "MatMul broadcasts K's batch");
    auto m = attention_4d(k_batch, rank5);
    auto g = load(m);
    ASSERT_TRUE(g);
    EXPECT_EQ(fuse(*g), 0);
    EXPECT_EQ(count(*g, Op::Attention), 0);
    expect_same_outputs(m, *g, 0.0);
  }
}

// ---- the whole pipeline on transformer blocks ----

Node* only(const Graph& g, Op op) {
  Node* found = nullptr;
  for (Node* n : g.nodes()) {
    if (n->op() != op) continue;
    EXPECT_EQ(found, nullptr) << "more than one " << op_name(op);
    found = n;
  }
  return found;
}

void add_linear(onnx::ModelProto& m, const std::string& x, const std::string& name, int64_t k, int64_t n,
                const std::string& out, uint32_t seed) {
  add_initializer_f32(m, name + "_w", {k, n}, values(static_cast<size_t>(k * n), seed, -0.5f, 0.5f));
  add_initializer_f32(m, name + "_b", {n}, values(static_cast<size_t>(n), seed + 100, -0.2f, 0.2f));
  add_node(m, "MatMul", {x, name + "_w"}, {name + "_mm"});
  add_node(m, "Add", {name + "_mm", name + "_b"}, {out});
}

// Shape(src) -> Gather(0), Gather(1) -> Unsqueeze -> Concat with `rest`: torch's
// x.size()[:2] + (...) as exported.
std::string computed_shape(onnx::ModelProto& m, const std::string& src, const std::vector<int64_t>& rest) {
  add_node(m, "Shape", {src}, {src + "_shape"});
  add_i64(m, src + "_i0", {}, {0});
  add_i64(m, src + "_i1", {}, {1});
  add_i64(m, src + "_ax", {1}, {0});
  add_node(m, "Gather", {src + "_shape", src + "_i0"}, {src + "_d0"});
  add_node(m, "Gather", {src + "_shape", src + "_i1"}, {src + "_d1"});
  add_node(m, "Unsqueeze", {src + "_d0", src + "_ax"}, {src + "_u0"});
  add_node(m, "Unsqueeze", {src + "_d1", src + "_ax"}, {src + "_u1"});
  add_i64(m, src + "_rest", {static_cast<int64_t>(rest.size())}, rest);
  add_int_attr(add_node(m, "Concat", {src + "_u0", src + "_u1", src + "_rest"}, {src + "_target"}), "axis", 0);
  return src + "_target";
}

onnx::ModelProto bert_self_attention(bool dynamic) {
  // x -> Q, K, V linears -> heads -> Q.Kt / sqrt(D) + extended mask -> softmax -> .V ->
  // merge heads -> output linear, as torch.onnx.export writes HF BERT's self-attention.
  const std::string b = dynamic ? "batch" : s(B), q = dynamic ? "seq" : s(S);
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {b, q, s(E)});
  add_input(m, "attention_mask", onnx::TensorProto::FLOAT, {b, q});
  add_linear(m, "x", "query", E, E, "q3", 1);
  add_linear(m, "x", "key", E, E, "k3", 2);
  add_linear(m, "x", "value", E, E, "v3", 3);
  for (const char* t : {"q", "k", "v"}) {
    const std::string n = t;
    add_node(m, "Reshape", {n + "3", computed_shape(m, n + "3", {H, D})}, {n + "4r"});
  }
  add_ints_attr(add_node(m, "Transpose", {"q4r"}, {"q4"}), "perm", {0, 2, 1, 3});
  add_ints_attr(add_node(m, "Transpose", {"k4r"}, {"k4"}), "perm", {0, 2, 1, 3});
  add_ints_attr(add_node(m, "Transpose", {"v4r"}, {"v4"}), "perm", {0, 2, 1, 3});
  add_ints_attr(add_node(m, "Transpose", {"k4"}, {"kt"}), "perm", {0, 1, 3, 2});
  add_node(m, "MatMul", {"q4", "kt"}, {"scores"});
  add_scalar(m, "root", std::sqrt(static_cast<float>(D)));
  add_node(m, "Div", {"scores", "root"}, {"scaled"});
  // extended mask: (1 - keep[:, None, None, :]) * -10000 with keep = attention_mask > -1.5.
  add_scalar(m, "thr", -1.5f);
  add_node(m, "Greater", {"attention_mask", "thr"}, {"keep_b"});
  add_int_attr(add_node(m, "Cast", {"keep_b"}, {"keep"}), "to", onnx::TensorProto::FLOAT);
  add_i64(m, "mask_axes", {2}, {1, 2});
  add_node(m, "Unsqueeze", {"keep", "mask_axes"}, {"keep4"});
  add_scalar(m, "one", 1.0f);
  add_node(m, "Sub", {"one", "keep4"}, {"inv"});
  add_scalar(m, "big", -10000.0f);
  add_node(m, "Mul", {"inv", "big"}, {"ext_mask"});
  add_node(m, "Add", {"scaled", "ext_mask"}, {"masked"});
  add_node(m, "Softmax", {"masked"}, {"probs"});
  add_node(m, "MatMul", {"probs", "v4"}, {"ctx"});
  add_ints_attr(add_node(m, "Transpose", {"ctx"}, {"ctx_t"}), "perm", {0, 2, 1, 3});
  add_node(m, "Shape", {"ctx_t"}, {"ctx_shape"});
  add_i64(m, "zero", {1}, {0});
  add_i64(m, "two", {1}, {2});
  add_node(m, "Slice", {"ctx_shape", "zero", "two"}, {"ctx_bs"});
  add_i64(m, "hidden", {1}, {E});
  add_int_attr(add_node(m, "Concat", {"ctx_bs", "hidden"}, {"merge_shape"}), "axis", 0);
  add_node(m, "Reshape", {"ctx_t", "merge_shape"}, {"ctx3"});
  add_linear(m, "ctx3", "output", E, E, "y", 4);
  add_output(m, "y", onnx::TensorProto::FLOAT, {b, q, s(E)});
  return m;
}

TEST(AttentionPipeline, BertSelfAttentionBlock) {
  for (bool dynamic : {false, true}) {
    SCOPED_TRACE(dynamic ? "symbolic batch and sequence" : "static shapes");
    auto m = bert_self_attention(dynamic);
    auto g = load(m);
    ASSERT_TRUE(g);
    auto r = optimize_graph(*g);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    // FusedGemm(QKV) -> Split -> Attention(mask) -> FusedGemm(output); only the mask's own
    // arithmetic stays beside them.
    EXPECT_EQ(count(*g, Op::FusedGemm), 2);
    EXPECT_EQ(count(*g, Op::MatMul), 0);
    EXPECT_EQ(count(*g, Op::Transpose), 0);
    EXPECT_EQ(count(*g, Op::Reshape), 0);
    EXPECT_EQ(count(*g, Op::Softmax), 0);
    Node* split = only(*g, Op::Split);
    Node* att = only(*g, Op::Attention);
    ASSERT_TRUE(split && att);
    ASSERT_EQ(split->num_outputs(), 3u);
    ASSERT_TRUE(split->input(0)->producer());
    Node* qkv = split->input(0)->producer();
    EXPECT_EQ(qkv->op(), Op::FusedGemm);
    EXPECT_EQ(qkv->input(0)->name(), "x");
    EXPECT_EQ(qkv->input(1)->constant().dims(), (Dims{E, 3 * E}));
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(att->input(i), split->output(i));
    ASSERT_EQ(att->num_inputs(), 4u);
    EXPECT_EQ(att->attrs.get_int("is_causal", -1), 0);
    ASSERT_EQ(att->output(0)->uses().size(), 1u);
    Node* out = att->output(0)->uses()[0].node;
    EXPECT_EQ(out->op(), Op::FusedGemm);
    EXPECT_EQ(out->output(0)->name(), "y");
    EXPECT_LE(g->num_nodes(), 4u + 5u);  // + Greater, Cast, Unsqueeze, Sub, Mul at most
    if (dynamic) expect_same_outputs_symbolic(m, *g);
    else expect_same_outputs(m, *g, 1e-5);
  }
}

TEST(AttentionPipeline, Gpt2CausalBlock) {
  // GPT-2: c_attn [E, 3E] -> Split -> heads; Kt as two transposes; causal Where over a
  // slice of a larger lower-triangular buffer with float.min as the fill.
  constexpr int64_t kMax = 8;
  auto m = make_model(18);
  add_input(m, "x", onnx::TensorProto::FLOAT, {s(B), s(S), s(E)});
  add_linear(m, "x", "c_attn", E, 3 * E, "qkv", 11);
  add_i64(m, "split_sizes", {3}, {E, E, E});
  add_int_attr(add_node(m, "Split", {"qkv", "split_sizes"}, {"q3", "k3", "v3"}), "axis", 2);
  for (const char* t : {"q", "k", "v"}) {
    const std::string n = t;
    add_node(m, "Reshape", {n + "3", computed_shape(m, n + "3", {H, D})}, {n + "4r"});
    add_ints_attr(add_node(m, "Transpose", {n + "4r"}, {n + "4"}), "perm", {0, 2, 1, 3});
  }
  add_ints_attr(add_node(m, "Transpose", {"k4"}, {"kt"}), "perm", {0, 1, 3, 2});
  add_node(m, "MatMul", {"q4", "kt"}, {"scores"});
  add_scalar(m, "root", std::sqrt(static_cast<float>(D)));
  add_node(m, "Div", {"scores", "root"}, {"scaled"});
  add_bool(m, "bias_buffer", {1, 1, kMax, kMax}, bool_matrix(kMax, kMax, [](int64_t i, int64_t j) { return j <= i; }));
  add_i64(m, "starts", {2}, {0, 0});
  add_i64(m, "ends", {2}, {S, S});
  add_i64(m, "axes", {2}, {2, 3});
  add_node(m, "Slice", {"bias_buffer", "starts", "ends", "axes"}, {"causal"});
  add_scalar(m, "fill", std::numeric_limits<float>::lowest());
  add_node(m, "Where", {"causal", "scaled", "fill"}, {"masked"});
  add_node(m, "Softmax", {"masked"}, {"probs"});
  add_node(m, "MatMul", {"probs", "v4"}, {"ctx"});
  add_ints_attr(add_node(m, "Transpose", {"ctx"}, {"ctx_t"}), "perm", {0, 2, 1, 3});
  add_i64(m, "merge_shape", {3}, {B, S, E});
  add_node(m, "Reshape", {"ctx_t", "merge_shape"}, {"ctx3"});
  add_linear(m, "ctx3", "c_proj", E, E, "y", 12);
  add_output(m, "y", onnx::TensorProto::FLOAT, {s(B), s(S), s(E)});

  auto g = load(m);
  ASSERT_TRUE(g);
  auto r = optimize_graph(*g);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(g->num_nodes(), 4u);
  Node* split = only(*g, Op::Split);
  Node* att = only(*g, Op::Attention);
  ASSERT_TRUE(split && att);
  EXPECT_EQ(count(*g, Op::FusedGemm), 2);
  EXPECT_EQ(split->input(0)->producer()->op(), Op::FusedGemm);
  ASSERT_EQ(att->num_inputs(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(att->input(i), split->output(i));
  EXPECT_EQ(att->attrs.get_int("is_causal", 0), 1);
  EXPECT_EQ(att->attrs.get_int("q_num_heads", 0), H);
  EXPECT_FLOAT_EQ(att->attrs.get_float("scale", 0), 0.5f);
  expect_same_outputs(m, *g, 1e-5);

  // The optimized graph exports (Attention in the kiln domain: the export opset predates
  // it) and re-imports to the same function.
  auto bytes = export_onnx_bytes(*g);
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  auto back = import_onnx_bytes(*bytes, ".", "roundtrip.onnx");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(count(*back->graph, Op::Attention), 1);
  expect_same_outputs(m, *back->graph, 1e-5);
}

}  // namespace
}  // namespace kiln
