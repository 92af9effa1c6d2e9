#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/reference/kernel.h"
#include "ir/elementwise_expr.h"
#include "ir/shape_inference.h"
#include "model_builder.h"
#include "onnx/exporter.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

void add_string_attr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

// The pass reads dtypes, which the pipeline infers first: infer, then fuse.
int fuse(Graph& g) {
  run_pass(g, infer_shapes);
  return run_pass(g, fuse_elementwise_chains);
}

std::vector<Node*> fused_nodes(const Graph& g) {
  std::vector<Node*> out;
  for (Node* n : g.nodes()) {
    if (n->op() == Op::FusedElementwise) out.push_back(n);
  }
  return out;
}

// x [2,3,4] with b [4] and c [1,3,1]: y = LeakyRelu(x * b + c) - 0.5.
onnx::ModelProto broadcast_chain() {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_input(m, "b", onnx::TensorProto::FLOAT, {"4"});
  add_input(m, "c", onnx::TensorProto::FLOAT, {"1", "3", "1"});
  add_scalar(m, "half", 0.5f);
  add_node(m, "Mul", {"x", "b"}, {"t"}, "mul");
  add_node(m, "Add", {"t", "c"}, {"u"}, "add");
  add_float_attr(add_node(m, "LeakyRelu", {"u"}, {"v"}, "leaky"), "alpha", 0.1f);
  add_node(m, "Sub", {"v", "half"}, {"y"}, "sub");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  return m;
}

TEST(FuseElementwiseChains, ChainOfFourWithBroadcastingBecomesOneNode) {
  auto m = broadcast_chain();
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* f = g->nodes()[0];
  ASSERT_EQ(f->op(), Op::FusedElementwise);
  EXPECT_EQ(f->output(0)->name(), "y");
  ASSERT_EQ(f->num_inputs(), 4u);  // x, b, c and the constant 0.5 (kept as a constant input)
  EXPECT_EQ(f->input(0)->name(), "x");
  EXPECT_TRUE(f->input(3)->is_constant());
  EXPECT_EQ(f->attrs.get_string("expr", ""),
            "t0 = Mul(x0, x1); t1 = Add(t0, x2); t2 = LeakyRelu[alpha=0.1](t1); t3 = Sub(t2, x3); y = t3");
  // The optimized graph computes exactly what the chain computes (the same kernels run).
  expect_same_outputs(m, *g, 0.0);
}

TEST(FuseElementwiseChains, ShapeInferenceBroadcastsThroughTheExpr) {
  auto m = broadcast_chain();
  auto g = load(m);
  ASSERT_TRUE(g);
  fuse(*g);
  Node* f = fused_nodes(*g).at(0);
  InferredTypes t;
  ASSERT_TRUE(infer_node_types(*f, &t));
  EXPECT_EQ(t.dtypes[0], DataType::kFloat32);
  EXPECT_EQ(sym_shape_str(t.shapes[0]), sym_shape_str(SymShape{{2, ""}, {3, ""}, {4, ""}}));
  // Symbolic dims go through broadcasting too, and a bad expr infers nothing.
  f->input(0)->shape = SymShape{{-1, "N"}, {3, ""}, {1, ""}};
  ASSERT_TRUE(infer_node_types(*f, &t));
  EXPECT_EQ(sym_shape_str(t.shapes[0]), sym_shape_str(SymShape{{-1, "N"}, {3, ""}, {4, ""}}));
  f->attrs.set("expr", std::string("t0 = Nope(x0); y = t0"));
  ASSERT_TRUE(infer_node_types(*f, &t));
  EXPECT_FALSE(t.shapes[0].has_value());
}

TEST(FuseElementwiseChains, IntermediateUsedTwiceInsideTheGroupJoins) {
  // y = a * Sigmoid(a) with a = x + b: a's two users are both in the group.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"3", "4"});
  add_input(m, "b", onnx::TensorProto::FLOAT, {"4"});
  add_node(m, "Add", {"x", "b"}, {"a"}, "add");
  add_node(m, "Sigmoid", {"a"}, {"s"}, "sigmoid");
  add_node(m, "Mul", {"a", "s"}, {"y"}, "mul");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"3", "4"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->attrs.get_string("expr", ""),
            "t0 = Add(x0, x1); t1 = Sigmoid(t0); t2 = Mul(t0, t1); y = t2");
  expect_same_outputs(m, *g, 0.0);
}

TEST(FuseElementwiseChains, BranchWithOutsideUserSplitsTheGroup) {
  // r = Relu(x + b) feeds two chains: r ends the group of each and sinks its own.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "5"});
  add_input(m, "b", onnx::TensorProto::FLOAT, {"5"});
  add_input(m, "c", onnx::TensorProto::FLOAT, {"2", "1"});
  add_node(m, "Add", {"x", "b"}, {"a"}, "add");
  add_node(m, "Relu", {"a"}, {"r"}, "relu");
  add_node(m, "Tanh", {"r"}, {"t"}, "tanh");
  add_node(m, "Mul", {"t", "c"}, {"y1"}, "mul");
  add_node(m, "Exp", {"r"}, {"e"}, "exp");
  add_node(m, "Abs", {"e"}, {"y2"}, "abs");
  add_output(m, "y1", onnx::TensorProto::FLOAT, {"2", "5"});
  add_output(m, "y2", onnx::TensorProto::FLOAT, {"2", "5"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 3);
  ASSERT_EQ(g->num_nodes(), 3u);
  for (Node* f : fused_nodes(*g)) EXPECT_EQ(parse_elementwise_expr(f->attrs.get_string("expr", ""))->instrs.size(), 2u);
  EXPECT_TRUE(g->find_value("r") && g->find_value("r")->producer()->op() == Op::FusedElementwise);
  EXPECT_EQ(g->outputs()[0]->name(), "y1");
  EXPECT_EQ(g->outputs()[1]->name(), "y2");
  expect_same_outputs(m, *g, 0.0);
}

TEST(FuseElementwiseChains, GraphOutputIntermediateIsKept) {
  // r is a graph output: Relu(x + b) fuses with r as its output, the Mul after it stays.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "5"});
  add_input(m, "b", onnx::TensorProto::FLOAT, {"5"});
  add_node(m, "Add", {"x", "b"}, {"a"}, "add");
  add_node(m, "Relu", {"a"}, {"r"}, "relu");
  add_node(m, "Mul", {"r", "x"}, {"y"}, "mul");
  add_output(m, "r", onnx::TensorProto::FLOAT, {"2", "5"});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "5"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 1);
  EXPECT_EQ(g->num_nodes(), 2u);
  EXPECT_EQ(count(*g, Op::Mul), 1);
  ASSERT_EQ(fused_nodes(*g).size(), 1u);
  EXPECT_EQ(fused_nodes(*g)[0]->output(0)->name(), "r");
  EXPECT_TRUE(g->is_graph_output(fused_nodes(*g)[0]->output(0)));
  expect_same_outputs(m, *g, 0.0);
}

TEST(FuseElementwiseChains, SingleOpsAndNonFloatChainsStay) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"3", "4"});
  add_input(m, "i", onnx::TensorProto::INT32, {"3", "4"});
  add_input(m, "j", onnx::TensorProto::INT32, {"4"});
  add_initializer_f32(m, "w", {4, 4}, values(16, 1));
  // A single Relu after a MatMul.
  add_node(m, "MatMul", {"x", "w"}, {"mm"}, "matmul");
  add_node(m, "Relu", {"mm"}, {"y1"}, "relu");
  // An int32 chain.
  add_node(m, "Add", {"i", "j"}, {"ia"}, "iadd");
  add_node(m, "Mul", {"ia", "i"}, {"im"}, "imul");
  add_node(m, "Neg", {"im"}, {"y2"}, "ineg");
  // Float ops around a comparison and a Where.
  add_node(m, "Exp", {"x"}, {"e"}, "exp");
  add_node(m, "Greater", {"e", "x"}, {"gt"}, "greater");
  add_node(m, "Where", {"gt", "e", "x"}, {"y3"}, "where");
  for (const char* o : {"y1", "y3"}) add_output(m, o, onnx::TensorProto::FLOAT, {"3", "4"});
  add_output(m, "y2", onnx::TensorProto::INT32, {"3", "4"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 0);
  EXPECT_EQ(g->num_nodes(), 8u);
  EXPECT_EQ(count(*g, Op::FusedElementwise), 0);
}

TEST(FuseElementwiseChains, CastBreaksTheChain) {
  // Exp -> Cast -> Neg -> Sqrt -> Abs: the Cast stays, the three ops after it fuse.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"6"});
  add_node(m, "Exp", {"x"}, {"e"}, "exp");
  auto* cast = add_node(m, "Cast", {"e"}, {"d"}, "cast");
  auto* to = cast->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::DOUBLE);
  add_node(m, "Neg", {"d"}, {"n"}, "neg");
  add_node(m, "Abs", {"n"}, {"a"}, "abs");
  add_node(m, "Sqrt", {"a"}, {"y"}, "sqrt");
  add_output(m, "y", onnx::TensorProto::DOUBLE, {"6"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 1);
  EXPECT_EQ(count(*g, Op::Exp), 1);
  EXPECT_EQ(count(*g, Op::Cast), 1);
  ASSERT_EQ(fused_nodes(*g).size(), 1u);
  EXPECT_EQ(fused_nodes(*g)[0]->attrs.get_string("expr", ""), "t0 = Neg(x0); t1 = Abs(t0); t2 = Sqrt(t1); y = t2");
  EXPECT_EQ(fused_nodes(*g)[0]->output(0)->dtype, DataType::kFloat64);
  expect_same_outputs(m, *g, 0.0);
}

TEST(FuseElementwiseChains, AbsorbsOpsWithAttributesAndOptionalInputs) {
  auto m = make_model(20);  // Gelu
  add_input(m, "x", onnx::TensorProto::FLOAT, {"4", "5"});
  add_scalar(m, "lo", -1.5f);
  add_scalar(m, "hi", 1.25f);
  add_node(m, "Clip", {"x", "lo", "hi"}, {"c"}, "clip");
  auto* hs = add_node(m, "HardSigmoid", {"c"}, {"h"}, "hardsigmoid");
  add_float_attr(hs, "alpha", 0.3f);
  add_float_attr(hs, "beta", 0.45f);
  add_string_attr(add_node(m, "Gelu", {"h"}, {"ge"}, "gelu"), "approximate", "tanh");
  add_float_attr(add_node(m, "Elu", {"ge"}, {"el"}, "elu"), "alpha", 0.7f);
  add_float_attr(add_node(m, "Celu", {"el"}, {"ce"}, "celu"), "alpha", 1.3f);
  add_node(m, "Clip", {"ce", "", "hi"}, {"y"}, "clip_max_only");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"4", "5"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 1);
  ASSERT_EQ(g->num_nodes(), 1u);
  const std::string expr = g->nodes()[0]->attrs.get_string("expr", "");
  EXPECT_EQ(expr,
            "t0 = Clip(x0, x1, x2); t1 = HardSigmoid[alpha=0.3,beta=0.45](t0); t2 = Gelu[approximate=tanh](t1); "
            "t3 = Elu[alpha=0.7](t2); t4 = Celu[alpha=1.3](t3); t5 = Clip(t4, _, x2); y = t5");
  expect_same_outputs(m, *g, 0.0);
}

TEST(FuseElementwiseChains, SubgraphCaptureKeepsAnIntermediate) {
  // a = x + b is read by an If branch: Add stays outside; Relu/Mul after it fuse.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3"});
  add_input(m, "b", onnx::TensorProto::FLOAT, {"3"});
  auto* cond = m.mutable_graph()->add_initializer();
  cond->set_name("cond");
  cond->set_data_type(onnx::TensorProto::BOOL);
  cond->add_int32_data(1);
  add_node(m, "Add", {"x", "b"}, {"a"}, "add");
  add_node(m, "Relu", {"a"}, {"r"}, "relu");
  add_node(m, "Mul", {"r", "b"}, {"y"}, "mul");
  auto* iff = add_node(m, "If", {"cond"}, {"z"}, "if");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = iff->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    auto* sub = a->mutable_g();
    sub->set_name(branch);
    auto* n = sub->add_node();
    n->set_op_type(std::string(branch) == "then_branch" ? "Neg" : "Abs");
    n->add_input("a");
    n->add_output(std::string(branch) + "_out");
    add_value_info(sub->add_output(), std::string(branch) + "_out", onnx::TensorProto::FLOAT, {"2", "3"});
  }
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3"});
  add_output(m, "z", onnx::TensorProto::FLOAT, {"2", "3"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 1);
  EXPECT_EQ(count(*g, Op::Add), 1);
  EXPECT_EQ(count(*g, Op::If), 1);
  ASSERT_EQ(fused_nodes(*g).size(), 1u);
  EXPECT_EQ(fused_nodes(*g)[0]->attrs.get_string("expr", ""), "t0 = Relu(x0); t1 = Mul(t0, x1); y = t1");
  expect_same_outputs(m, *g, 0.0);
}

TEST(FuseElementwiseChains, ManyInputsSplitAtTheInputLimit) {
  // Sum of 24 distinct inputs through a chain of Adds: each fused node takes at most 16.
  auto m = make_model();
  std::string prev = "in0";
  add_input(m, "in0", onnx::TensorProto::FLOAT, {"3"});
  for (int i = 1; i < 24; ++i) {
    const std::string in = "in" + std::to_string(i), s = "s" + std::to_string(i);
    add_input(m, in, onnx::TensorProto::FLOAT, {"3"});
    add_node(m, "Add", {prev, in}, {s}, "add" + std::to_string(i));
    prev = s;
  }
  add_output(m, prev, onnx::TensorProto::FLOAT, {"3"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(fuse(*g), 2);
  for (Node* f : fused_nodes(*g)) EXPECT_LE(f->num_inputs(), 16u);
  EXPECT_EQ(count(*g, Op::Add), 0);
  expect_same_outputs(m, *g, 0.0);
}

TEST(FuseElementwiseChains, ExportRoundTripKeepsTheFusedNode) {
  auto m = broadcast_chain();
  auto g = load(m);
  ASSERT_TRUE(g);
  fuse(*g);
  const std::string expr = fused_nodes(*g).at(0)->attrs.get_string("expr", "");
  auto bytes = export_onnx_bytes(*g);
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  onnx::ModelProto exported;
  ASSERT_TRUE(exported.ParseFromString(*bytes));
  ASSERT_EQ(exported.graph().node_size(), 1);
  EXPECT_EQ(exported.graph().node(0).domain(), "kiln");
  EXPECT_EQ(exported.graph().node(0).op_type(), "FusedElementwise");
  auto back = import_onnx_bytes(*bytes, ".", "roundtrip.onnx");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  ASSERT_EQ(back->graph->num_nodes(), 1u);
  Node* f = back->graph->nodes()[0];
  EXPECT_EQ(f->op(), Op::FusedElementwise);
  EXPECT_EQ(f->attrs.get_string("expr", ""), expr);
  expect_same_outputs(m, *back->graph, 0.0);
}

TEST(FuseElementwiseChains, PipelineFusesAfterThePatternPasses) {
  // Erf-form GELU, then * s + t: fuse_gelu_pattern makes a Gelu first, and the final
  // pass fuses Gelu, Mul and Add (not the Erf pieces).
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "6"});
  add_input(m, "s", onnx::TensorProto::FLOAT, {"6"});
  add_input(m, "t", onnx::TensorProto::FLOAT, {"2", "1"});
  add_scalar(m, "sqrt2", 1.4142135f);
  add_scalar(m, "one", 1.0f);
  add_scalar(m, "half", 0.5f);
  add_node(m, "Div", {"x", "sqrt2"}, {"d"}, "div");
  add_node(m, "Erf", {"d"}, {"e"}, "erf");
  add_node(m, "Add", {"e", "one"}, {"p"}, "add");
  add_node(m, "Mul", {"x", "p"}, {"xp"}, "mul1");
  add_node(m, "Mul", {"xp", "half"}, {"gelu"}, "mul2");
  add_node(m, "Mul", {"gelu", "s"}, {"scaled"}, "scale");
  add_node(m, "Add", {"scaled", "t"}, {"y"}, "shift");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "6"});
  auto g = load(m);
  ASSERT_TRUE(g);
  auto reports = optimize_graph(*g);
  ASSERT_TRUE(reports.is_ok()) << reports.status().message();
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->attrs.get_string("expr", ""),
            "t0 = Gelu[approximate=none](x0); t1 = Mul(t0, x1); t2 = Add(t1, x2); y = t2");
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  expect_same_outputs(m, *g, 2e-6);
  // At level 1 nothing is fused.
  auto g1 = load(m);
  OptimizeOptions opt;
  opt.level = 1;
  ASSERT_TRUE(optimize_graph(*g1, opt).is_ok());
  EXPECT_EQ(count(*g1, Op::FusedElementwise), 0);
}

TEST(ElementwiseExpr, FloatAttributesRoundTripExactly) {
  const float cases[] = {0.1f, 1e-30f, -0.0f, 3.4028235e38f, 1.17549435e-38f, 1.4e-45f, 0.3333333f,
                         std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (float v : cases) {
    ElementwiseProgram p;
    ExprInstr in;
    in.op = Op::LeakyRelu;
    in.attrs.set("alpha", v);
    in.args = {ExprArg{ExprArg::Kind::kInput, 0}};
    p.instrs.push_back(in);
    p.output = 0;
    auto text = format_elementwise_expr(p);
    ASSERT_TRUE(text.is_ok());
    auto back = parse_elementwise_expr(*text);
    ASSERT_TRUE(back.is_ok()) << *text << ": " << back.status().message();
    const float got = back->instrs[0].attrs.get_float("alpha", 0);
    EXPECT_EQ(std::memcmp(&got, &v, sizeof v), 0) << *text;
  }
}

TEST(ElementwiseExpr, ParsesNewlinesAndSpacing) {
  auto p = parse_elementwise_expr("  t0=Max(x0,x3,x1)\n\n t1 = Mod[fmod=1]( t0 , x2 ) ;\ny=t1 ;");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  ASSERT_EQ(p->instrs.size(), 2u);
  EXPECT_EQ(p->num_inputs, 4);
  EXPECT_EQ(p->instrs[1].attrs.get_int("fmod", 0), 1);
  EXPECT_EQ(p->output, 1);
}

TEST(ElementwiseExpr, MalformedExprsAreClearErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "no statements"},
      {"t0 = Relu(x0)", "does not end with the output"},
      {"t0 = Relu(x0); y = t1", "'t1' is not a defined temp"},
      {"t0 = Relu(x0); y = t0; t1 = Neg(t0)", "nothing may follow"},
      {"t1 = Relu(x0); y = t1", "expected the statement to assign t0"},
      {"t0 = Frobnicate(x0); y = t0", "unknown op 'Frobnicate'"},
      {"t0 = Conv(x0, x1); y = t0", "not an elementwise op"},
      {"t0 = Cast[to=1](x0); y = t0", "not an elementwise op"},
      {"t0 = Relu(t0); y = t0", "'t0' is not defined before"},
      {"t0 = Relu(x16); y = t0", "bad input 'x16'"},
      {"t0 = Relu(x01); y = t0", "bad input 'x01'"},
      {"t0 = Add(x0); y = t0", "Add takes 2 to 2 arguments, got 1"},
      {"t0 = Relu(x0, x1); y = t0", "Relu takes 1 to 1 arguments, got 2"},
      {"t0 = Clip(x0, x1, _); y = t0", "cannot be omitted"},
      {"t0 = Add(_, x1); y = t0", "cannot be omitted"},
      {"t0 = LeakyRelu[alpha=abc](x0); y = t0", "'abc' is not a float"},
      {"t0 = LeakyRelu[alpha=1e99](x0); y = t0", "'1e99' is not a float"},
      {"t0 = LeakyRelu[beta=1](x0); y = t0", "has no attribute 'beta'"},
      {"t0 = LeakyRelu[alpha=1,alpha=2](x0); y = t0", "given twice"},
      {"t0 = LeakyRelu[alpha 1](x0); y = t0", "expected '='"},
      {"t0 = LeakyRelu[alpha=1 (x0); y = t0", "expected ']'"},
      {"t0 = Mod[fmod=1.5](x0, x1); y = t0", "'1.5' is not an integer"},
      {"t0 = Gelu[approximate=\"tanh\"](x0); y = t0", "is not a plain string"},
      {"t0 = Relu x0; y = t0", "expected '('"},
      {"t0 = Relu(x0; y = t0", "expected ')'"},
      {"t0 = Relu(x0) junk; y = t0", "unexpected text"},
      {"t0 = Relu(x0); y = t0 t0", "unexpected text"},
      {"garbage", "expected 'tK = Op(...)'"},
      {"t0 = (x0); y = t0", "expected an op name"},
      {"t0 = Relu(,); y = t0", "expected an argument"},
      {"t0 = Relu(q3); y = t0", "bad argument 'q3'"},
  };
  for (const auto& [expr, want] : cases) {
    auto r = parse_elementwise_expr(expr);
    ASSERT_FALSE(r.is_ok()) << expr;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << expr;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << expr << " -> " << r.status().message();
  }
}

TEST(ElementwiseExpr, KernelRunsExprAndRejectsBadOnes) {
  Tensor a(DataType::kFloat32, {2, 3});
  Tensor b(DataType::kFloat32, {3});
  const auto av = values(6, 11), bv = values(3, 12);
  std::copy(av.begin(), av.end(), a.data<float>());
  std::copy(bv.begin(), bv.end(), b.data<float>());
  Attributes attrs;
  attrs.set("expr", std::string("t0 = Add(x0, x1); t1 = Mul(t0, t0); t2 = Sub(t1, x1); y = t2"));
  Tensor y;
  ASSERT_TRUE(run_reference_op(Op::FusedElementwise, attrs, {&a, &b}, &y).is_ok());
  ASSERT_EQ(y.dims(), (Dims{2, 3}));
  for (int64_t i = 0; i < 6; ++i) {
    const float s = av[static_cast<size_t>(i)] + bv[static_cast<size_t>(i % 3)];
    EXPECT_EQ(y.data<float>()[i], s * s - bv[static_cast<size_t>(i % 3)]);
  }
  // Malformed exprs, too few inputs and failing statements are errors, not crashes.
  attrs.set("expr", std::string("t0 = Add(x0 x1); y = t0"));
  Status st = run_reference_op(Op::FusedElementwise, attrs, {&a, &b}, &y);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("FusedElementwise expr, statement 1"), std::string::npos) << st.message();
  attrs.set("expr", std::string("t0 = Add(x0, x2); y = t0"));
  st = run_reference_op(Op::FusedElementwise, attrs, {&a, &b}, &y);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("reads x2 but the node has 2 inputs"), std::string::npos) << st.message();
  Tensor c(DataType::kFloat32, {4});
  attrs.set("expr", std::string("t0 = Neg(x0); t1 = Add(t0, x1); y = t1"));
  st = run_reference_op(Op::FusedElementwise, attrs, {&a, &c}, &y);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("statement t1 (Add)"), std::string::npos) << st.message();
  Attributes none;
  EXPECT_FALSE(run_reference_op(Op::FusedElementwise, none, {&a}, &y).is_ok());
}

}  // namespace
}  // namespace kiln
