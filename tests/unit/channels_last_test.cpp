// Channels-last (kiln_layout = "NHWC", ir/layout.h): shape inference and the reference
// kernels of Conv/FusedConv and the pooling ops in NHWC against NCHW, and the
// convert_to_channels_last pass (passes/channels_last.cpp) on the e2e CNNs: the converted
// graph verifies, computes what the original model computes (also in float16 and after an
// ONNX export/re-import), converts every conv and pool, and keeps only the Transposes at
// the borders of its NHWC region.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/reference/kernel.h"
#include "ir/layout.h"
#include "ir/shape_inference.h"
#include "ir/verifier.h"
#include "kiln/kiln.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "pass_test_util.h"
#include "passes/pass.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

using namespace kiln::testing;

const std::vector<int64_t> kToNhwc = {0, 2, 3, 1};
const std::vector<int64_t> kToNchw = {0, 3, 1, 2};

Dim dim(int64_t v) { return Dim{v, ""}; }
SymShape shape(std::initializer_list<int64_t> dims) {
  SymShape s;
  for (int64_t d : dims) s.push_back(dim(d));
  return s;
}

Tensor random_tensor(Dims dims, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DataType::kFloat32, std::move(dims));
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

Tensor transposed(const Tensor& t, const std::vector<int64_t>& perm) {
  Attributes a;
  a.set("perm", perm);
  Tensor out;
  Status s = run_reference_op(Op::Transpose, a, {&t}, &out);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return out;
}

// Not a zero (or constant) comparison: some element of t is clearly away from zero.
void expect_not_trivial(const Tensor& t, const std::string& what) {
  double m = 0;
  for (int64_t i = 0; i < t.size(); ++i) m = std::max(m, std::fabs(t.get_double(i)));
  EXPECT_GT(m, 1e-3) << what << ": the reference output is (nearly) all zeros";
}

void expect_near(const Tensor& want, const Tensor& got, double rel, const std::string& what) {
  ASSERT_EQ(want.dims(), got.dims()) << what;
  expect_not_trivial(want, what);
  int bad = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double a = want.get_double(i), b = got.get_double(i);
    ASSERT_FALSE(std::isnan(b)) << what << ": NaN at " << i;
    if (std::fabs(a - b) > rel * (1 + std::fabs(a)) && ++bad <= 5) {
      ADD_FAILURE() << what << " [" << i << "]: " << a << " vs " << b;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// ---------------------------------------------------------------------------------------
// Shape inference

std::optional<SymShape> infer(const Node& n) {
  InferredTypes t;
  EXPECT_TRUE(infer_node_types(n, &t));
  return t.shapes.empty() ? std::nullopt : t.shapes[0];
}

TEST(ChannelsLastShapeInference, ConvAndPoolsInferOnNchwAndPermuteBack) {
  Graph g;
  SymShape nhwc = {Dim{-1, "N"}, dim(9), dim(7), dim(6)};
  Value* x = g.add_input("x", DataType::kFloat32, nhwc);
  Value* w = g.add_constant("w", random_tensor({4, 3, 3, 3}, 1));
  Value* z = g.add_input("z", DataType::kFloat32, SymShape{Dim{-1, "N"}, dim(5), dim(7), dim(4)});

  Node* conv = g.add_node(Op::Conv, "conv", {x, w}, {"y"});
  conv->attrs.set("group", int64_t{2});
  conv->attrs.set("strides", std::vector<int64_t>{2, 1});
  conv->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  conv->attrs.set(kLayoutAttr, std::string("NHWC"));
  EXPECT_EQ(sym_shape_str(infer(*conv)), "[N,5,7,4]");
  conv->attrs.set(kLayoutAttr, std::string("NCHW"));  // the same X read as NCHW [N,9,7,6]
  EXPECT_EQ(sym_shape_str(infer(*conv)), "[N,4,4,6]");

  Node* fused = g.add_node(Op::FusedConv, "fused", {x, w, nullptr, z}, {"f"});
  fused->attrs = conv->attrs;
  fused->attrs.set(kLayoutAttr, std::string("NHWC"));
  fused->attrs.set("activation", std::string("Relu"));
  EXPECT_EQ(sym_shape_str(infer(*fused)), "[N,5,7,4]");

  Node* maxpool = g.add_node(Op::MaxPool, "maxpool", {x}, {"m"});
  maxpool->attrs.set("kernel_shape", std::vector<int64_t>{3, 3});
  maxpool->attrs.set("strides", std::vector<int64_t>{2, 2});
  maxpool->attrs.set("ceil_mode", int64_t{1});
  maxpool->attrs.set(kLayoutAttr, std::string("NHWC"));
  EXPECT_EQ(sym_shape_str(infer(*maxpool)), "[N,4,3,6]");

  Node* avg = g.add_node(Op::AveragePool, "avg", {x}, {"a"});
  avg->attrs.set("kernel_shape", std::vector<int64_t>{2, 3});
  avg->attrs.set("auto_pad", std::string("SAME_UPPER"));
  avg->attrs.set("strides", std::vector<int64_t>{2, 2});
  avg->attrs.set(kLayoutAttr, std::string("NHWC"));
  EXPECT_EQ(sym_shape_str(infer(*avg)), "[N,5,4,6]");

  for (Op op : {Op::GlobalAveragePool, Op::GlobalMaxPool}) {
    Node* gp = g.add_node(op, "global", {x}, {g.unique_name("gp")});
    gp->attrs.set(kLayoutAttr, std::string("NHWC"));
    EXPECT_EQ(sym_shape_str(infer(*gp)), "[N,1,1,6]") << op_name(op);
    gp->attrs.erase(kLayoutAttr);
    EXPECT_EQ(sym_shape_str(infer(*gp)), "[N,9,1,1]") << op_name(op);
  }
}

TEST(ChannelsLastShapeInference, RejectsOtherLayoutsAndRanks) {
  Graph g;
  Value* x = g.add_input("x", DataType::kFloat32, shape({1, 8, 8, 3}));
  Value* x3 = g.add_input("x3", DataType::kFloat32, shape({1, 8, 3}));
  Value* w = g.add_constant("w", random_tensor({4, 3, 3, 3}, 1));
  Value* w3 = g.add_constant("w3", random_tensor({4, 3, 3}, 1));
  Node* conv = g.add_node(Op::Conv, "conv", {x, w}, {"y"});
  for (const char* bad : {"NCWH", "nhwc", ""}) {
    conv->attrs.set(kLayoutAttr, std::string(bad));
    EXPECT_FALSE(infer(*conv).has_value()) << bad;
    EXPECT_FALSE(read_layout(conv->attrs).is_ok()) << bad;
  }
  conv->attrs.set(kLayoutAttr, int64_t{1});  // not a string
  EXPECT_FALSE(infer(*conv).has_value());
  auto st = read_layout(conv->attrs);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("kiln_layout"), std::string::npos) << st.status().message();
  // NHWC is 4-D only.
  Node* conv1d = g.add_node(Op::Conv, "conv1d", {x3, w3}, {"y1"});
  conv1d->attrs.set(kLayoutAttr, std::string("NHWC"));
  EXPECT_FALSE(infer(*conv1d).has_value());
  conv1d->attrs.erase(kLayoutAttr);
  EXPECT_EQ(sym_shape_str(infer(*conv1d)), "[1,4,1]");
  Node* pool = g.add_node(Op::GlobalAveragePool, "gap", {x3}, {"p"});
  pool->attrs.set(kLayoutAttr, std::string("NHWC"));
  EXPECT_FALSE(infer(*pool).has_value());
}

// ---------------------------------------------------------------------------------------
// Reference kernels: NHWC = transpose(NCHW kernel(transpose(inputs))), bit for bit.

// Runs op on NCHW inputs, and on the same inputs in NHWC (`layout_inputs` transposed) with
// kiln_layout = NHWC; the second result, transposed back, must equal the first exactly.
void check_kernel_layouts(Op op, Attributes attrs, std::vector<Tensor> inputs, std::vector<size_t> layout_inputs) {
  std::vector<const Tensor*> nchw_in;
  for (const Tensor& t : inputs) nchw_in.push_back(t.defined() ? &t : nullptr);
  Tensor want;
  Status s = run_reference_op(op, attrs, nchw_in, &want);
  ASSERT_TRUE(s.is_ok()) << op_name(op) << ": " << s.message();
  std::vector<Tensor> nhwc = inputs;
  for (size_t i : layout_inputs) nhwc[i] = transposed(inputs[i], kToNhwc);
  std::vector<const Tensor*> nhwc_in;
  for (const Tensor& t : nhwc) nhwc_in.push_back(t.defined() ? &t : nullptr);
  attrs.set(kLayoutAttr, std::string("NHWC"));
  Tensor got;
  s = run_reference_op(op, attrs, nhwc_in, &got);
  ASSERT_TRUE(s.is_ok()) << op_name(op) << " NHWC: " << s.message();
  ASSERT_EQ(got.rank(), 4);
  EXPECT_EQ(got.dims(), (Dims{want.dim(0), want.dim(2), want.dim(3), want.dim(1)})) << op_name(op);
  expect_near(want, transposed(got, kToNchw), 0.0, op_name(op));
  // An explicit NCHW is the default.
  attrs.set(kLayoutAttr, std::string("NCHW"));
  Tensor same;
  ASSERT_TRUE(run_reference_op(op, attrs, nchw_in, &same).is_ok());
  expect_near(want, same, 0.0, cat(op_name(op), " NCHW"));
}

TEST(ChannelsLastReference, ConvAndFusedConvMatchNchw) {
  const Tensor x = random_tensor({2, 6, 7, 5}, 1);
  const Tensor w = random_tensor({4, 3, 3, 2}, 2, -0.5f, 0.5f);
  const Tensor b = random_tensor({4}, 3);
  Attributes conv;
  conv.set("group", int64_t{2});
  conv.set("strides", std::vector<int64_t>{2, 1});
  conv.set("dilations", std::vector<int64_t>{1, 2});
  conv.set("pads", std::vector<int64_t>{1, 0, 2, 1});
  check_kernel_layouts(Op::Conv, conv, {x, w, b}, {0});
  check_kernel_layouts(Op::Conv, conv, {x, w}, {0});

  Tensor probe;
  ASSERT_TRUE(run_reference_op(Op::Conv, conv, {&x, &w, &b}, &probe).is_ok());
  const Tensor z = random_tensor(probe.dims(), 4);
  Attributes fused = conv;
  fused.set("activation", std::string("HardSwish"));
  check_kernel_layouts(Op::FusedConv, fused, {x, w, b, z}, {0, 3});
  fused.set("activation", std::string("Relu"));
  check_kernel_layouts(Op::FusedConv, fused, {x, w, b}, {0});
  // float16 too (the CUDA engines' dtype).
  check_kernel_layouts(Op::FusedConv, fused,
                       {cast_tensor(x, DataType::kFloat16), cast_tensor(w, DataType::kFloat16),
                        cast_tensor(b, DataType::kFloat16), cast_tensor(z, DataType::kFloat16)},
                       {0, 3});
}

TEST(ChannelsLastReference, PoolsMatchNchw) {
  const Tensor x = random_tensor({2, 5, 9, 8}, 5);
  Attributes max;
  max.set("kernel_shape", std::vector<int64_t>{3, 3});
  max.set("strides", std::vector<int64_t>{2, 2});
  max.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  check_kernel_layouts(Op::MaxPool, max, {x}, {0});
  Attributes avg;
  avg.set("kernel_shape", std::vector<int64_t>{2, 3});
  avg.set("pads", std::vector<int64_t>{1, 1, 0, 1});
  avg.set("count_include_pad", int64_t{1});
  avg.set("ceil_mode", int64_t{1});
  avg.set("strides", std::vector<int64_t>{2, 2});
  check_kernel_layouts(Op::AveragePool, avg, {x}, {0});
  Attributes lp;
  lp.set("kernel_shape", std::vector<int64_t>{2, 2});
  check_kernel_layouts(Op::LpPool, lp, {x}, {0});
  for (Op op : {Op::GlobalAveragePool, Op::GlobalMaxPool, Op::GlobalLpPool}) check_kernel_layouts(op, {}, {x}, {0});
}

TEST(ChannelsLastReference, RejectsBadLayoutsRanksAndIndices) {
  const Tensor x = random_tensor({1, 4, 4, 3}, 6);
  const Tensor x3 = random_tensor({1, 4, 3}, 6);
  const Tensor w = random_tensor({2, 3, 1, 1}, 7);
  const Tensor w3 = random_tensor({2, 3, 1}, 7);
  Attributes a;
  a.set(kLayoutAttr, std::string("CHWN"));
  Tensor out;
  Status s = run_reference_op(Op::Conv, a, {&x, &w}, &out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("\"NCHW\" or \"NHWC\""), std::string::npos) << s.message();
  EXPECT_FALSE(run_reference_op(Op::GlobalMaxPool, a, {&x}, &out).is_ok());
  a.set(kLayoutAttr, std::string("NHWC"));
  s = run_reference_op(Op::Conv, a, {&x3, &w3}, &out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("4-D"), std::string::npos) << s.message();
  // MaxPool's Indices are NCHW positions: refused in NHWC.
  a.set("kernel_shape", std::vector<int64_t>{2, 2});
  KernelContext kc;
  kc.op = Op::MaxPool;
  kc.attrs = &a;
  kc.inputs = {&x};
  kc.outputs.resize(2);
  kc.output_wanted = {true, true};
  s = reference_kernels().find(Op::MaxPool)(kc);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("output 1"), std::string::npos) << s.message();
}

// ---------------------------------------------------------------------------------------
// The pass

std::unique_ptr<Graph> load_model(const std::string& file) {
  auto r = import_onnx_file(std::string(KILN_SOURCE_DIR) + "/tests/models/" + file);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r->graph) : nullptr;
}

int run_channels_last(Graph& g) {
  PassReport r;
  PassContext ctx(r);
  Status s = convert_to_channels_last(g, ctx);
  EXPECT_TRUE(s.is_ok()) << s.message();
  Status v = verify_graph(g);
  EXPECT_TRUE(v.is_ok()) << v.message();
  return r.rewrites;
}

bool is_layout_op(Op op) {
  return op == Op::Conv || op == Op::FusedConv || op == Op::MaxPool || op == Op::AveragePool ||
         op == Op::GlobalAveragePool || op == Op::GlobalMaxPool;
}

struct LayoutCounts {
  int layout_ops = 0, nhwc = 0, transposes = 0;
};

LayoutCounts layout_counts(const Graph& g) {
  LayoutCounts c;
  for (const Node* n : g.nodes()) {
    c.layout_ops += is_layout_op(n->op());
    c.nhwc += is_channels_last(n->attrs);
    c.transposes += n->op() == Op::Transpose;
  }
  return c;
}

// Fresh random images for the model's float inputs.
TensorMap model_inputs(const Graph& g, uint32_t seed) {
  TensorMap m;
  for (const Value* v : g.inputs()) {
    Dims d;
    for (const Dim& x : *v->shape) d.push_back(x.known() ? x.value : 1);
    m[v->name()] = random_tensor(d, seed);
  }
  return m;
}

double rel_l2(const Tensor& want, const Tensor& got) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double a = want.get_double(i), b = got.get_double(i);
    if (!std::isfinite(b)) return INFINITY;
    num += (a - b) * (a - b);
    den += a * a;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// `got` computes what `want` computes on three fresh input sets: per element within
// rel * (1 + |want|), or (l2 = true) within a relative L2 error of rel per output.
void expect_same_function(const Graph& want_g, const Graph& got_g, double rel, bool l2, const std::string& what) {
  for (uint32_t seed : {21u, 22u, 23u}) {
    TensorMap in = model_inputs(want_g, seed);
    auto want = Interpreter(want_g).run(in);
    auto got = Interpreter(got_g).run(in);
    ASSERT_TRUE(want.is_ok()) << want.status().message();
    ASSERT_TRUE(got.is_ok()) << what << ": " << got.status().message();
    ASSERT_EQ(want->size(), got->size());
    for (size_t i = 0; i < want->size(); ++i) {
      const std::string w = cat(what, ", seed ", seed, ", output ", i);
      if (l2) {
        ASSERT_EQ((*want)[i].dims(), (*got)[i].dims()) << w;
        expect_not_trivial((*want)[i], w);
        const double err = rel_l2((*want)[i], (*got)[i]);
        EXPECT_LE(err, rel) << w;
        EXPECT_GT(err, 0.0) << w << ": no rounding error at all, so it did not run in 16 bits";
      } else {
        expect_near((*want)[i], (*got)[i], rel, w);
      }
    }
  }
}

std::unique_ptr<Graph> round_trip(const Graph& g) {
  auto bytes = export_onnx_bytes(g);
  EXPECT_TRUE(bytes.is_ok()) << bytes.status().message();
  if (!bytes.is_ok()) return nullptr;
  auto back = import_onnx_bytes(*bytes, ".", "re-imported");
  EXPECT_TRUE(back.is_ok()) << back.status().message();
  return back.is_ok() ? std::move(back->graph) : nullptr;
}

// The Transposes a converted CNN keeps: one at the image input (NCHW -> NHWC) and one
// after the global average pool, in front of the Flatten feeding the classifier (the
// Flatten reads NCHW). Everything between runs NHWC: the Transposes between adjacent
// convs/pools cancel, and the squeeze-excite Mul (mobilenet) and residual sums (fused into
// FusedConv's Z) run on NHWC values.
constexpr int kModelTransposes = 2;

void check_model(const std::string& file) {
  auto original = load_model(file);
  auto g = load_model(file);
  ASSERT_TRUE(original && g);
  auto reports = optimize_graph(*g);
  ASSERT_TRUE(reports.is_ok()) << reports.status().message();
  const size_t before = g->num_nodes();
  EXPECT_GT(run_channels_last(*g), 0);
  const LayoutCounts c = layout_counts(*g);
  std::printf("  %s: %zu -> %zu nodes, %d conv/pool nodes, %d NHWC, %d Transpose\n", file.c_str(), before,
              g->num_nodes(), c.layout_ops, c.nhwc, c.transposes);
  EXPECT_GT(c.layout_ops, 0);
  EXPECT_EQ(c.nhwc, c.layout_ops) << file << ": every conv and pool converts";
  EXPECT_EQ(c.transposes, kModelTransposes) << file;
  EXPECT_EQ(g->num_nodes(), before + static_cast<size_t>(kModelTransposes)) << file;
  for (size_t i = 0; i < g->outputs().size(); ++i) {
    EXPECT_EQ(g->outputs()[i]->name(), original->outputs()[i]->name());
  }
  expect_same_function(*original, *g, 1e-4, false, "channels-last " + file);
  // The second run finds nothing left to convert.
  PassReport r;
  PassContext ctx(r);
  ASSERT_TRUE(convert_to_channels_last(*g, ctx).is_ok());
  EXPECT_EQ(r.rewrites, 0);
  EXPECT_EQ(layout_counts(*g).transposes, kModelTransposes);

  // A plan stores the graph as ONNX: kiln_layout survives the round trip.
  auto back = round_trip(*g);
  ASSERT_TRUE(back);
  ASSERT_TRUE(verify_graph(*back).is_ok());
  const LayoutCounts cb = layout_counts(*back);
  EXPECT_EQ(cb.nhwc, c.nhwc) << file << ": kiln_layout lost in the ONNX round trip";
  EXPECT_EQ(cb.transposes, c.transposes);
  expect_same_function(*original, *back, 1e-4, false, "re-imported channels-last " + file);
}

TEST(ChannelsLast, ResNetTiny) { check_model("resnet_tiny.onnx"); }
TEST(ChannelsLast, MobileNetV3Tiny) { check_model("mobilenetv3_tiny.onnx"); }

// The builder's order for a CUDA fp16 engine: optimize, lower to float16, then NHWC.
void check_model_fp16(const std::string& file) {
  auto original = load_model(file);
  auto g = load_model(file);
  ASSERT_TRUE(original && g);
  ASSERT_TRUE(optimize_graph(*g).is_ok());
  PassReport r;
  PassContext ctx(r);
  Status s = lower_float_precision(*g, DataType::kFloat16, ctx);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const size_t before = g->num_nodes();
  run_channels_last(*g);
  const LayoutCounts c = layout_counts(*g);
  std::printf("  %s float16: %zu -> %zu nodes, %d NHWC, %d Transpose\n", file.c_str(), before, g->num_nodes(), c.nhwc,
              c.transposes);
  EXPECT_EQ(c.nhwc, c.layout_ops);
  EXPECT_EQ(c.transposes, kModelTransposes) << file;
  for (const Node* n : g->nodes()) {
    if (is_channels_last(n->attrs)) {
      EXPECT_EQ(n->input(0)->dtype, DataType::kFloat16) << n->describe();
    }
  }
  expect_same_function(*original, *g, 1e-2, true, "float16 channels-last " + file);
  auto back = round_trip(*g);
  ASSERT_TRUE(back);
  EXPECT_EQ(layout_counts(*back).nhwc, c.nhwc);
  expect_same_function(*original, *back, 1e-2, true, "re-imported float16 channels-last " + file);
}

TEST(ChannelsLast, ResNetTinyFloat16) { check_model_fp16("resnet_tiny.onnx"); }
TEST(ChannelsLast, MobileNetV3TinyFloat16) { check_model_fp16("mobilenetv3_tiny.onnx"); }

// A CPU engine built from the converted model (exported as ONNX, as a plan stores it): the
// oneDNN tactics are NCHW-only and decline the NHWC layers, which run on the reference
// kernels, and the engine computes what the original model computes.
TEST(ChannelsLast, CpuEngineRunsNhwcLayersOnTheReferenceKernels) {
  auto original = load_model("resnet_tiny.onnx");
  auto g = load_model("resnet_tiny.onnx");
  ASSERT_TRUE(original && g);
  ASSERT_TRUE(optimize_graph(*g).is_ok());
  run_channels_last(*g);
  auto bytes = export_onnx_bytes(*g);
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  BuilderConfig config;
  config.threads = 1;
  auto engine = Builder().build_from_memory(*bytes, config);
  ASSERT_TRUE(engine.is_ok()) << engine.status().message();
  int layout_layers = 0;
  for (const LayerInfo& l : (*engine)->layers()) {
    auto op = op_from_name(l.op);
    if (!op || !is_layout_op(*op)) continue;
    ++layout_layers;
    EXPECT_EQ(l.tactic, "reference") << l.name << " (" << l.op << ")";
  }
  EXPECT_EQ(layout_layers, layout_counts(*g).nhwc);
  auto ctx = (*engine)->create_execution_context();
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
  for (uint32_t seed : {31u, 32u}) {
    TensorMap in = model_inputs(*original, seed);
    auto want = Interpreter(*original).run(in);
    ASSERT_TRUE(want.is_ok()) << want.status().message();
    auto got = ctx.value()->run(in);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    const std::string out = original->outputs()[0]->name();
    expect_near((*want)[0], got->at(out), 1e-4, cat("CPU engine, seed ", seed));
  }
}

// x -> Conv -> y1 (graph output, and read by the next Conv) -> Relu -> Conv -> y2 (graph
// output). The outputs keep their names and NCHW values; the NHWC chain between them
// needs no Transpose beyond the input's and one per output.
TEST(ChannelsLast, ConvOutputsThatAreGraphOutputs) {
  auto m = make_model(17);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "3", "8", "8"});
  add_initializer_f32(m, "w1", {4, 3, 3, 3}, values(108, 1));
  add_initializer_f32(m, "b1", {4}, values(4, 2));
  add_initializer_f32(m, "w2", {5, 4, 1, 1}, values(20, 3));
  auto* c1 = add_node(m, "Conv", {"x", "w1", "b1"}, {"y1"}, "conv1");
  add_ints_attr(c1, "pads", {1, 1, 1, 1});
  add_node(m, "Relu", {"y1"}, {"r"}, "relu");
  add_node(m, "Conv", {"r", "w2"}, {"y2"}, "conv2");
  add_output(m, "y1", onnx::TensorProto::FLOAT, {"1", "4", "8", "8"});
  add_output(m, "y2", onnx::TensorProto::FLOAT, {"1", "5", "8", "8"});
  auto original = load(m);
  auto g = load(m);
  ASSERT_TRUE(original && g);
  run_channels_last(*g);
  const LayoutCounts c = layout_counts(*g);
  EXPECT_EQ(c.nhwc, 2);
  EXPECT_EQ(c.transposes, 3);  // x in, y1 out, y2 out
  ASSERT_EQ(g->outputs().size(), 2u);
  EXPECT_EQ(g->outputs()[0]->name(), "y1");
  EXPECT_EQ(g->outputs()[1]->name(), "y2");
  for (const Value* o : g->outputs()) {
    ASSERT_TRUE(o->producer());
    EXPECT_EQ(o->producer()->op(), Op::Transpose);
  }
  EXPECT_EQ(sym_shape_str(g->outputs()[0]->shape), "[1,4,8,8]");
  // The Relu runs on the NHWC value between the convs.
  for (const Node* n : g->nodes()) {
    if (n->op() == Op::Relu) {
      EXPECT_EQ(sym_shape_str(n->input(0)->shape), "[1,8,8,4]");
    }
  }
  expect_same_function(*original, *g, 1e-5, false, "conv outputs as graph outputs");
  auto back = round_trip(*g);
  ASSERT_TRUE(back);
  expect_same_function(*original, *back, 1e-5, false, "re-imported conv outputs as graph outputs");
}

// W computed at run time (here a graph input): the NHWC kernels need W constant, so the
// Conv stays NCHW and no Transpose appears.
TEST(ChannelsLast, NonConstantWeightIsNotConverted) {
  auto m = make_model(17);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "3", "8", "8"});
  add_input(m, "w", onnx::TensorProto::FLOAT, {"4", "3", "3", "3"});
  add_node(m, "Conv", {"x", "w"}, {"y"}, "conv");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "4", "6", "6"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_channels_last(*g), 0);
  const LayoutCounts c = layout_counts(*g);
  EXPECT_EQ(c.nhwc, 0);
  EXPECT_EQ(c.transposes, 0);
  EXPECT_EQ(g->num_nodes(), 1u);
}

// Nodes the pass leaves: a 1-D conv (3-D X), MaxPool with its Indices output, and nodes of
// unknown input rank.
TEST(ChannelsLast, SkipsNon2DAndIndices) {
  auto m = make_model(17);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "3", "8"});
  add_input(m, "img", onnx::TensorProto::FLOAT, {"1", "2", "6", "6"});
  add_initializer_f32(m, "w", {4, 3, 3}, values(36, 1));
  add_node(m, "Conv", {"x", "w"}, {"y"}, "conv1d");
  auto* mp = add_node(m, "MaxPool", {"img"}, {"p", "idx"}, "maxpool");
  add_ints_attr(mp, "kernel_shape", {2, 2});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "4", "6"});
  add_output(m, "p", onnx::TensorProto::FLOAT, {"1", "2", "5", "5"});
  add_output(m, "idx", onnx::TensorProto::INT64, {"1", "2", "5", "5"});
  auto g = load(m);
  ASSERT_TRUE(g);
  EXPECT_EQ(run_channels_last(*g), 0);
  EXPECT_EQ(layout_counts(*g).nhwc, 0);
  EXPECT_EQ(layout_counts(*g).transposes, 0);
}

// conv -> [Sin, Mul by a constant over (H, W), Cos] fused into one FusedElementwise ->
// conv, plus a residual Add of the first conv's output: push_transpose_through_elementwise
// moves the Transposes across the FusedElementwise (its constant input transposed to
// NHWC) and the Add, so only the input's and the output's Transposes stay.
TEST(ChannelsLast, TransposesCrossFusedElementwise) {
  auto m = make_model(17);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "3", "6", "5"});
  add_initializer_f32(m, "w1", {4, 3, 3, 3}, values(108, 1));
  add_initializer_f32(m, "w2", {4, 4, 1, 1}, values(16, 2));
  add_initializer_f32(m, "c", {6, 5}, values(30, 3, 0.5f, 1.5f));
  auto* c1 = add_node(m, "Conv", {"x", "w1"}, {"a"}, "conv1");
  add_ints_attr(c1, "pads", {1, 1, 1, 1});
  add_node(m, "Sin", {"a"}, {"s"}, "sin");
  add_node(m, "Mul", {"s", "c"}, {"t"}, "mul");
  add_node(m, "Cos", {"t"}, {"u"}, "cos");
  add_node(m, "Conv", {"u", "w2"}, {"v"}, "conv2");
  add_node(m, "Add", {"v", "a"}, {"y"}, "add");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "4", "6", "5"});
  auto original = load(m);
  auto g = load(m);
  ASSERT_TRUE(original && g);
  run_pass(*g, infer_shapes);
  run_pass(*g, fuse_elementwise_chains);
  ASSERT_EQ(count(*g, Op::FusedElementwise), 1);
  run_channels_last(*g);
  const LayoutCounts c = layout_counts(*g);
  EXPECT_EQ(c.nhwc, 2);
  EXPECT_EQ(c.transposes, 2);
  for (const Node* n : g->nodes()) {
    if (n->op() == Op::FusedElementwise) {
      EXPECT_EQ(sym_shape_str(n->output(0)->shape), "[1,6,5,4]");
      for (const Value* in : n->inputs()) {
        if (in->is_constant()) {
          EXPECT_EQ(in->constant().dims(), (Dims{1, 6, 5, 1}));
        }
      }
    }
  }
  expect_same_function(*original, *g, 1e-5, false, "FusedElementwise between NHWC convs");
}

}  // namespace
}  // namespace kiln
