// Shape and type inference (ir/shape_inference.h), the infer_shapes pass and the
// fold_shape_ops pass: symbolic shapes through small graphs, folding of shape chains on
// static models, numerics unchanged.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "ir/shape_inference.h"
#include "ir/shape_value.h"
#include "ir/verifier.h"
#include "model_builder.h"
#include "pass_test_util.h"
#include "onnx/importer.h"
#include "passes/pass.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

using namespace kiln::testing;

// Forgets what the importer recorded for node outputs, so only inference speaks.
void clear_types(Graph& g) {
  for (Node* n : g.nodes()) {
    for (Value* o : n->outputs()) {
      if (!o) continue;
      o->dtype = DataType::kUndefined;
      o->shape.reset();
    }
  }
}

std::string shape_of(const Graph& g, const std::string& name) {
  Value* v = g.find_value(name);
  return v ? sym_shape_str(v->shape) : "<missing>";
}

void add_int64_init(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims,
                    const std::vector<int64_t>& values) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t v : values) t->add_int64_data(v);
}

void add_int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

TEST(ShapeInference, ConvReluPoolFlattenGemmKeepsSymbolicBatch) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"N", "3", "8", "8"});
  add_initializer_f32(m, "w", {4, 3, 3, 3}, std::vector<float>(108, 0.1f));
  add_initializer_f32(m, "b", {10, 4}, std::vector<float>(40, 0.2f));
  add_initializer_f32(m, "c", {10}, std::vector<float>(10, 0.3f));
  auto* conv = add_node(m, "Conv", {"x", "w"}, {"conv"}, "conv");
  add_ints_attr(conv, "pads", {1, 1, 1, 1});
  add_ints_attr(conv, "strides", {2, 2});
  add_node(m, "Relu", {"conv"}, {"relu"}, "relu");
  add_node(m, "GlobalAveragePool", {"relu"}, {"gap"}, "gap");
  add_node(m, "Flatten", {"gap"}, {"flat"}, "flat");
  auto* gemm = add_node(m, "Gemm", {"flat", "b", "c"}, {"y"}, "gemm");
  add_int_attr(gemm, "transB", 1);
  add_output(m, "y", onnx::TensorProto::FLOAT, {"N", "10"});
  auto g = load(m);
  clear_types(*g);
  EXPECT_GT(run_pass(*g, infer_shapes), 0);
  EXPECT_EQ(shape_of(*g, "conv"), "[N,4,4,4]");
  EXPECT_EQ(shape_of(*g, "relu"), "[N,4,4,4]");
  EXPECT_EQ(shape_of(*g, "gap"), "[N,4,1,1]");
  EXPECT_EQ(shape_of(*g, "flat"), "[N,4]");
  EXPECT_EQ(shape_of(*g, "y"), "[N,10]");
  EXPECT_EQ(g->find_value("y")->dtype, DataType::kFloat32);
  // A second run changes nothing, so the pipeline's fixed point terminates.
  EXPECT_EQ(run_pass(*g, infer_shapes), 0);
}

TEST(ShapeInference, MatMulBroadcastsSymbolicBatch) {
  auto m = make_model();
  add_input(m, "a", onnx::TensorProto::FLOAT, {"batch", "seq", "64"});
  add_initializer_f32(m, "w", {64, 128}, std::vector<float>(64 * 128, 0.01f));
  add_node(m, "MatMul", {"a", "w"}, {"y"}, "mm");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"?", "?", "?"});
  auto g = load(m);
  clear_types(*g);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(shape_of(*g, "y"), "[batch,seq,128]");
}

TEST(ShapeInference, ReshapeZeroAndMinusOne) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"N", "6", "4"});
  add_input(m, "s", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_int64_init(m, "t1", {2}, {0, -1});
  add_int64_init(m, "t2", {3}, {0, -1, 2});
  add_node(m, "Reshape", {"x", "t1"}, {"r1"}, "r1");
  add_node(m, "Reshape", {"s", "t2"}, {"r2"}, "r2");
  add_output(m, "r1", onnx::TensorProto::FLOAT, {"N", "24"});
  add_output(m, "r2", onnx::TensorProto::FLOAT, {"2", "6", "2"});
  auto g = load(m);
  clear_types(*g);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(shape_of(*g, "r1"), "[N,24]");
  EXPECT_EQ(shape_of(*g, "r2"), "[2,6,2]");
}

TEST(ShapeInference, BroadcastComparisonPoolSliceConcat) {
  auto m = make_model();
  add_input(m, "a", onnx::TensorProto::FLOAT, {"N", "1", "5"});
  add_input(m, "b", onnx::TensorProto::FLOAT, {"3", "1"});
  add_input(m, "p", onnx::TensorProto::FLOAT, {"1", "2", "5", "5"});
  add_node(m, "Add", {"a", "b"}, {"sum"}, "add");
  add_node(m, "Less", {"a", "b"}, {"less"}, "less");
  auto* pool = add_node(m, "MaxPool", {"p"}, {"pool"}, "pool");
  add_ints_attr(pool, "kernel_shape", {2, 2});
  add_ints_attr(pool, "strides", {2, 2});
  add_int_attr(pool, "ceil_mode", 1);
  add_int64_init(m, "starts", {1}, {1});
  add_int64_init(m, "ends", {1}, {100});
  add_int64_init(m, "axes", {1}, {2});
  add_node(m, "Slice", {"sum", "starts", "ends", "axes"}, {"sl"}, "slice");
  auto* concat = add_node(m, "Concat", {"sum", "sl"}, {"cat"}, "concat");
  add_int_attr(concat, "axis", -1);
  add_node(m, "Shape", {"cat"}, {"shp"}, "shape");
  add_output(m, "less", onnx::TensorProto::BOOL, {"N", "3", "5"});
  add_output(m, "pool", onnx::TensorProto::FLOAT, {"1", "2", "3", "3"});
  add_output(m, "shp", onnx::TensorProto::INT64, {"3"});
  auto g = load(m);
  clear_types(*g);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(shape_of(*g, "sum"), "[N,3,5]");
  EXPECT_EQ(shape_of(*g, "less"), "[N,3,5]");
  EXPECT_EQ(g->find_value("less")->dtype, DataType::kBool);
  EXPECT_EQ(shape_of(*g, "pool"), "[1,2,3,3]");
  EXPECT_EQ(shape_of(*g, "sl"), "[N,3,4]");
  EXPECT_EQ(shape_of(*g, "cat"), "[N,3,9]");
  EXPECT_EQ(shape_of(*g, "shp"), "[3]");
  EXPECT_EQ(g->find_value("shp")->dtype, DataType::kInt64);
}

TEST(ShapeInference, DtypesAndShapeOpsWithSymbolicDims) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"N", "4", "6"});
  add_input(m, "c", onnx::TensorProto::BOOL, {"4", "1"});
  add_int64_init(m, "ax", {1}, {-1});
  add_int64_init(m, "k", {1}, {2});
  add_int64_init(m, "split", {2}, {1, 3});
  auto* cast = add_node(m, "Cast", {"x"}, {"xi"}, "cast");
  add_int_attr(cast, "to", onnx::TensorProto::INT32);
  add_node(m, "Where", {"c", "x", "x"}, {"w"}, "where");
  auto* tr = add_node(m, "Transpose", {"x"}, {"t"}, "transpose");
  add_ints_attr(tr, "perm", {2, 0, 1});
  add_node(m, "Unsqueeze", {"x", "ax"}, {"u"}, "unsqueeze");
  add_node(m, "ReduceMean", {"x", "ax"}, {"rm"}, "reduce");
  add_node(m, "TopK", {"x", "k"}, {"tv", "ti"}, "topk");
  auto* split = add_node(m, "Split", {"x", "split"}, {"s0", "s1"}, "split");
  add_int_attr(split, "axis", 1);
  for (const char* o : {"xi", "w", "t", "u", "rm", "tv", "ti", "s0", "s1"}) add_output(m, o, 0, {});
  auto g = load(m);
  clear_types(*g);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(g->find_value("xi")->dtype, DataType::kInt32);
  EXPECT_EQ(shape_of(*g, "xi"), "[N,4,6]");
  EXPECT_EQ(g->find_value("w")->dtype, DataType::kFloat32);
  EXPECT_EQ(shape_of(*g, "w"), "[N,4,6]");
  EXPECT_EQ(shape_of(*g, "t"), "[6,N,4]");
  EXPECT_EQ(shape_of(*g, "u"), "[N,4,6,1]");
  EXPECT_EQ(shape_of(*g, "rm"), "[N,4,1]");
  EXPECT_EQ(shape_of(*g, "tv"), "[N,4,2]");
  EXPECT_EQ(g->find_value("ti")->dtype, DataType::kInt64);
  EXPECT_EQ(shape_of(*g, "s0"), "[N,1,6]");
  EXPECT_EQ(shape_of(*g, "s1"), "[N,3,6]");
}

TEST(ShapeInference, KeepsRecordedShapeInferenceCannotDerive) {
  // Reshape to a computed (non-constant) shape: the value_info's [N,24] stays.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"N", "6", "4"});
  add_input(m, "t", onnx::TensorProto::INT64, {"2"});
  add_node(m, "Reshape", {"x", "t"}, {"r"}, "r");
  add_node(m, "Relu", {"r"}, {"y"}, "relu");
  add_value_info(m.mutable_graph()->add_value_info(), "r", onnx::TensorProto::FLOAT, {"N", "24"});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"N", "24"});
  auto g = load(m);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(shape_of(*g, "r"), "[N,24]");
  EXPECT_EQ(shape_of(*g, "y"), "[N,24]");
}

TEST(FoldShapeOps, ShapeChainBecomesOneReshapeWithConstantShape) {
  // Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) on a static x.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_int64_init(m, "zero", {}, {0});
  add_int64_init(m, "axes0", {1}, {0});
  add_int64_init(m, "minus1", {1}, {-1});
  add_node(m, "Shape", {"x"}, {"shape"}, "shape");
  add_node(m, "Gather", {"shape", "zero"}, {"rows"}, "gather");
  add_node(m, "Unsqueeze", {"rows", "axes0"}, {"rows1"}, "unsqueeze");
  auto* concat = add_node(m, "Concat", {"rows1", "minus1"}, {"target"}, "concat");
  add_int_attr(concat, "axis", 0);
  add_node(m, "Reshape", {"x", "target"}, {"y"}, "reshape");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "12"});
  auto g = load(m);
  OptimizeOptions opt;
  opt.level = 1;
  auto reports = optimize_graph(*g, opt);
  ASSERT_TRUE(reports.is_ok()) << reports.status().message();
  ASSERT_EQ(g->num_nodes(), 1u);
  Node* reshape = g->nodes()[0];
  ASSERT_EQ(reshape->op(), Op::Reshape);
  ASSERT_TRUE(reshape->input(1)->is_constant());
  EXPECT_EQ(reshape->input(1)->constant().to_int_vector(), (std::vector<int64_t>{2, -1}));
  EXPECT_EQ(shape_of(*g, "y"), "[2,12]");
  expect_same_outputs(m, *g, 1e-6, NanCheck::kNone);
}

TEST(FoldShapeOps, FoldsShapeWithStartEndAndSize) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  auto* shape = add_node(m, "Shape", {"x"}, {"tail"}, "shape");
  add_int_attr(shape, "start", 1);
  add_node(m, "Size", {"x"}, {"size"}, "size");
  add_output(m, "tail", onnx::TensorProto::INT64, {"2"});
  add_output(m, "size", onnx::TensorProto::INT64, {});
  auto g = load(m);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(run_pass(*g, fold_shape_ops), 2);
  EXPECT_EQ(g->num_nodes(), 0u);
  ASSERT_TRUE(g->outputs()[0]->is_constant());
  EXPECT_EQ(g->outputs()[0]->name(), "tail");
  EXPECT_EQ(g->outputs()[0]->constant().to_int_vector(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(g->outputs()[1]->constant().to_int_vector(), (std::vector<int64_t>{24}));
}

TEST(FoldShapeOps, NoFoldOnSymbolicShapeOrGraphOutputReshape) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"N", "3"});
  add_input(m, "s", onnx::TensorProto::FLOAT, {"2", "3"});
  add_int64_init(m, "same", {2}, {2, 3});
  add_node(m, "Shape", {"x"}, {"shp"}, "shape");
  add_node(m, "Reshape", {"s", "same"}, {"r"}, "reshape_out");  // a graph output: stays
  add_output(m, "shp", onnx::TensorProto::INT64, {"2"});
  add_output(m, "r", onnx::TensorProto::FLOAT, {"2", "3"});
  auto g = load(m);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(run_pass(*g, fold_shape_ops), 0);
  EXPECT_EQ(count(*g, Op::Shape), 1);
  EXPECT_EQ(count(*g, Op::Reshape), 1);
}

TEST(FoldShapeOps, BypassesShapePreservingReshapeAndUnsqueezeSqueeze) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3"});
  add_int64_init(m, "same", {2}, {2, -1});
  add_int64_init(m, "ax", {1}, {0});
  add_node(m, "Reshape", {"x", "same"}, {"r"}, "reshape");
  add_node(m, "Unsqueeze", {"r", "ax"}, {"u"}, "unsqueeze");
  add_node(m, "Squeeze", {"u", "ax"}, {"q"}, "squeeze");  // [1,2,3] -> [2,3]: not shape-preserving itself
  add_node(m, "Relu", {"q"}, {"y"}, "relu");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3"});
  auto g = load(m);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(run_pass(*g, fold_shape_ops), 1);  // only the Reshape
  EXPECT_EQ(count(*g, Op::Reshape), 0);
  EXPECT_EQ(count(*g, Op::Unsqueeze), 1);
  expect_same_outputs(m, *g, 1e-6, NanCheck::kNone);
}

TEST(ShapeInference, FiveHundredNodeModelOptimizesFast) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"N", "16"});
  add_initializer_f32(m, "w", {16, 16}, std::vector<float>(256, 0.01f));
  std::string prev = "x";
  for (int i = 0; i < 250; ++i) {
    const std::string mm = "mm" + std::to_string(i), act = "act" + std::to_string(i);
    add_node(m, "MatMul", {prev, "w"}, {mm}, mm);
    add_node(m, "Tanh", {mm}, {act}, act);
    prev = act;
  }
  add_output(m, prev, onnx::TensorProto::FLOAT, {"N", "16"});
  auto g = load(m);
  clear_types(*g);
  const auto t0 = std::chrono::steady_clock::now();
  auto reports = optimize_graph(*g);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(reports.is_ok()) << reports.status().message();
  EXPECT_LT(secs, 0.5);
  EXPECT_EQ(shape_of(*g, "act249"), "[N,16]");
}


// ---- shape arithmetic over partly symbolic shapes (ir/shape_value.h) ----

// Shape(x) -> Gather(i) -> Unsqueeze(0): the exporters' way to read one dim as a [1] tensor.
std::string dim_of(onnx::ModelProto& m, const std::string& x, int64_t i) {
  const std::string base = x + "_d" + std::to_string(i);
  bool has_shape = false;
  for (const auto& n : m.graph().node()) has_shape = has_shape || n.output(0) == x + "_shape";
  if (!has_shape) add_node(m, "Shape", {x}, {x + "_shape"});
  add_int64_init(m, base + "_i", {}, {i});
  add_int64_init(m, base + "_ax", {1}, {0});
  add_node(m, "Gather", {x + "_shape", base + "_i"}, {base + "_s"});
  add_node(m, "Unsqueeze", {base + "_s", base + "_ax"}, {base});
  return base;
}

// Random float inputs with the symbolic dims given sizes; the optimized graph must compute
// what the original computes.
void expect_same_outputs_sized(const onnx::ModelProto& m, const Graph& optimized, int64_t sym_size) {
  auto original = load(m);
  ASSERT_TRUE(original);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  TensorMap in;
  for (Value* v : original->inputs()) {
    Dims d;
    for (const Dim& dim : *v->shape) d.push_back(dim.known() ? dim.value : sym_size);
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

TEST(ShapeInference, ComputedReshapeTargetsKeepSymbolicDims) {
  // Split heads: Reshape(x, [x.0, x.1, 2, 4]); merge: Reshape(r1, Shape(r1)[0:2] ++ [8]);
  // a target read from an input gives the rank only.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"batch", "seq", "8"});
  add_input(m, "t3", onnx::TensorProto::INT64, {"3"});
  const std::string b = dim_of(m, "x", 0), q = dim_of(m, "x", 1);
  add_int64_init(m, "heads", {2}, {2, 4});
  add_int_attr(add_node(m, "Concat", {b, q, "heads"}, {"split_shape"}), "axis", 0);
  add_node(m, "Reshape", {"x", "split_shape"}, {"r1"}, "split");
  add_node(m, "Shape", {"r1"}, {"r1_shape"});
  add_int64_init(m, "zero", {1}, {0});
  add_int64_init(m, "two", {1}, {2});
  add_node(m, "Slice", {"r1_shape", "zero", "two"}, {"lead"});
  add_int64_init(m, "hidden", {1}, {8});
  add_int_attr(add_node(m, "Concat", {"lead", "hidden"}, {"merge_shape"}), "axis", 0);
  add_node(m, "Reshape", {"r1", "merge_shape"}, {"r2"}, "merge");
  add_node(m, "Reshape", {"x", "t3"}, {"r3"}, "free");
  for (const char* o : {"r2", "r3"}) add_output(m, o, 0, {});
  auto g = load(m);
  ASSERT_TRUE(g);
  clear_types(*g);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(shape_of(*g, "r1"), "[batch,seq,2,4]");
  EXPECT_EQ(shape_of(*g, "r2"), "[batch,seq,8]");
  EXPECT_EQ(shape_of(*g, "r3"), "[?,?,?]");
}

TEST(ShapeInference, ExpandAndConstantOfShapeThroughTorchShapeArithmetic) {
  // torch's expand(batch, seq) as exported: Where(shape == -1, 1, shape) over
  // Concat(dims of ids); a target tensor read from an input keeps x's non-1 dims only.
  auto m = make_model();
  add_input(m, "ids", onnx::TensorProto::FLOAT, {"batch", "16"});
  add_input(m, "dyn", onnx::TensorProto::INT64, {"2"});
  add_initializer_f32(m, "buf", {1, 16}, std::vector<float>(16, 0.5f));
  const std::string b = dim_of(m, "ids", 0), q = dim_of(m, "ids", 1);
  add_int_attr(add_node(m, "Concat", {b, q}, {"cat"}), "axis", 0);
  add_int64_init(m, "minus1", {2}, {-1, -1});
  add_int64_init(m, "ones", {2}, {1, 1});
  add_node(m, "Equal", {"cat", "minus1"}, {"is_free"});
  add_node(m, "Where", {"is_free", "ones", "cat"}, {"target"});
  add_node(m, "Expand", {"buf", "target"}, {"e"}, "expand");
  add_node(m, "Expand", {"buf", "dyn"}, {"e_dyn"}, "expand_dyn");
  add_node(m, "ConstantOfShape", {"cat"}, {"zeros"}, "cos");
  for (const char* o : {"e", "e_dyn", "zeros"}) add_output(m, o, 0, {});
  auto g = load(m);
  ASSERT_TRUE(g);
  clear_types(*g);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(shape_of(*g, "e"), "[batch,16]");
  EXPECT_EQ(shape_of(*g, "e_dyn"), "[?,16]");
  EXPECT_EQ(shape_of(*g, "zeros"), "[batch,16]");
  EXPECT_EQ(g->find_value("zeros")->dtype, DataType::kFloat32);
}

TEST(ShapeInference, SliceToComputedEnds) {
  // pos[:, :ids.1] with a static ids.1; x[:, :x.1] keeps x's own symbolic dim; an end that
  // is another value's dim of another symbol gives an unknown dim.
  auto m = make_model();
  add_input(m, "ids", onnx::TensorProto::FLOAT, {"batch", "16"});
  add_input(m, "x", onnx::TensorProto::FLOAT, {"batch", "seq", "8"});
  add_input(m, "y", onnx::TensorProto::FLOAT, {"batch", "other"});
  add_initializer_f32(m, "pos", {1, 32}, std::vector<float>(32, 1.0f));
  add_int64_init(m, "zero", {1}, {0});
  add_int64_init(m, "axis1", {1}, {1});
  add_node(m, "Slice", {"pos", "zero", dim_of(m, "ids", 1), "axis1"}, {"p"}, "slice_pos");
  add_node(m, "Slice", {"x", "zero", dim_of(m, "x", 1), "axis1"}, {"xs"}, "slice_x");
  add_node(m, "Slice", {"x", "zero", dim_of(m, "y", 1), "axis1"}, {"xo"}, "slice_other");
  for (const char* o : {"p", "xs", "xo"}) add_output(m, o, 0, {});
  auto g = load(m);
  ASSERT_TRUE(g);
  clear_types(*g);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(shape_of(*g, "p"), "[1,16]");
  EXPECT_EQ(shape_of(*g, "xs"), "[batch,seq,8]");
  EXPECT_EQ(shape_of(*g, "xo"), "[batch,?,8]");
}

TEST(ShapeInference, SliceOfAStaticBufferToASymbolicLength) {
  // pos[:, :x.1] of a [1,32] buffer is [1, min(seq,32)], which broadcasts against x's seq
  // to seq; pos[:, 1:x.1] is not min(seq,32) long and stays unknown.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"batch", "seq"});
  add_initializer_f32(m, "pos", {1, 32}, std::vector<float>(32, 1.0f));
  add_int64_init(m, "zero", {1}, {0});
  add_int64_init(m, "one", {1}, {1});
  const std::string q = dim_of(m, "x", 1);
  add_node(m, "Slice", {"pos", "zero", q, "one"}, {"p"}, "slice_pos");
  add_node(m, "Slice", {"pos", "one", q, "one"}, {"p1"}, "slice_pos1");
  add_node(m, "Add", {"x", "p"}, {"sum"}, "add");
  add_node(m, "Add", {"x", "p1"}, {"sum1"}, "add1");
  for (const char* o : {"sum", "sum1"}) add_output(m, o, 0, {});
  auto g = load(m);
  ASSERT_TRUE(g);
  clear_types(*g);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(shape_of(*g, "p"), "[1,min(seq,32)]");
  EXPECT_EQ(shape_of(*g, "sum"), "[batch,seq]");
  EXPECT_EQ(shape_of(*g, "p1"), "[1,?]");
  EXPECT_EQ(shape_of(*g, "sum1"), "[batch,?]");
}

TEST(ShapeInference, ShapeValueElementRules) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"batch", "6", ""});
  add_node(m, "Shape", {"x"}, {"s"});
  add_int64_init(m, "minus1", {}, {-1});
  add_int64_init(m, "one", {}, {1});
  add_int64_init(m, "two", {}, {2});
  add_node(m, "Equal", {"s", "minus1"}, {"eq"});      // dims are never -1: [0,0,0]
  add_node(m, "Mul", {"s", "one"}, {"times1"});       // [batch,6,?]
  add_node(m, "Div", {"s", "two"}, {"half"});         // [?,3,?]
  add_node(m, "Add", {"s", "s"}, {"twice"});          // [?,12,?]
  add_int64_init(m, "ends", {1}, {-4});
  add_int64_init(m, "starts", {1}, {-1});
  add_int64_init(m, "back", {1}, {-1});
  add_node(m, "Slice", {"s", "starts", "ends", "zero_axis", "back"}, {"rev"});  // reversed
  add_int64_init(m, "zero_axis", {1}, {0});
  add_int64_init(m, "flat", {1}, {-1});
  add_node(m, "Reshape", {"s", "flat"}, {"same"});
  add_int64_init(m, "i2", {}, {2});
  add_node(m, "Gather", {"s", "i2"}, {"last"});       // 0-D, an unnamed dim
  for (const char* o : {"eq", "times1", "half", "twice", "rev", "same", "last"}) add_output(m, o, 0, {});
  auto g = load(m);
  ASSERT_TRUE(g);
  run_pass(*g, infer_shapes);
  auto str = [&](const std::string& name) {
    auto sv = shape_value(g->find_value(name));
    if (!sv) return std::string("none");
    std::string r = sv->scalar ? "scalar " : "";
    for (const ShapeElem& e : sv->elems) {
      r += e.is_int() ? std::to_string(e.value) : e.kind == ShapeElem::Kind::kDim ? (e.symbol.empty() ? "dim" : e.symbol) : "?";
      r += " ";
    }
    return r;
  };
  EXPECT_EQ(str("s"), "batch 6 dim ");
  EXPECT_EQ(str("eq"), "0 0 0 ");
  EXPECT_EQ(str("times1"), "batch 6 dim ");
  EXPECT_EQ(str("half"), "? 3 ? ");
  EXPECT_EQ(str("twice"), "? 12 ? ");
  EXPECT_EQ(str("rev"), "dim 6 batch ");
  EXPECT_EQ(str("same"), "batch 6 dim ");
  EXPECT_EQ(str("last"), "scalar dim ");
  EXPECT_EQ(str("x"), "none");  // float data, not shape arithmetic
}

TEST(FoldShapeOps, FoldsStaticDimsOfPartlySymbolicShapes) {
  // x [batch,16,8]: Gather(Shape(x), 1) is 16 whatever the batch and folds (the Reshape
  // target keeps the batch's Gather); ConstantOfShape of Shape(x)[1:] folds too.
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"batch", "16", "8"});
  const std::string b = dim_of(m, "x", 0), q = dim_of(m, "x", 1);
  add_int64_init(m, "heads", {2}, {2, 4});
  add_int_attr(add_node(m, "Concat", {b, q, "heads"}, {"target"}), "axis", 0);
  add_node(m, "Reshape", {"x", "target"}, {"r"}, "split");
  auto* tail = add_node(m, "Shape", {"x"}, {"tail"}, "tail_shape");
  add_int_attr(tail, "start", 1);
  add_int_attr(add_node(m, "Cast", {"tail"}, {"tail32"}, "cast32"), "to", onnx::TensorProto::INT32);
  add_int_attr(add_node(m, "Cast", {"tail32"}, {"tail64"}, "cast64"), "to", onnx::TensorProto::INT64);
  add_node(m, "ConstantOfShape", {"tail64"}, {"zeros"}, "cos");
  add_node(m, "Add", {"x", "zeros"}, {"y"}, "add");
  add_output(m, "r", onnx::TensorProto::FLOAT, {"batch", "16", "2", "4"});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"batch", "16", "8"});
  auto g = load(m);
  ASSERT_TRUE(g);
  OptimizeOptions opt;
  opt.level = 1;
  auto reports = optimize_graph(*g, opt);
  ASSERT_TRUE(reports.is_ok()) << reports.status().message();
  EXPECT_EQ(count(*g, Op::Gather), 1);  // the batch
  EXPECT_EQ(count(*g, Op::Cast), 0);
  EXPECT_EQ(count(*g, Op::ConstantOfShape), 0);
  EXPECT_EQ(shape_of(*g, "r"), "[batch,16,2,4]");
  Node* reshape = g->find_value("r")->producer();
  ASSERT_TRUE(reshape && reshape->op() == Op::Reshape);
  ASSERT_TRUE(reshape->input(1)->producer());
  EXPECT_EQ(reshape->input(1)->producer()->op(), Op::Concat);
  for (int64_t batch : {1, 3}) expect_same_outputs_sized(m, *g, batch);
}

TEST(FoldShapeOps, NoFoldOfSymbolicOrUnknownDims) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"batch", "", "8"});
  const std::string b = dim_of(m, "x", 0), q = dim_of(m, "x", 1);
  add_int_attr(add_node(m, "Concat", {b, q}, {"lead"}), "axis", 0);
  add_output(m, "lead", onnx::TensorProto::INT64, {"2"});
  auto g = load(m);
  ASSERT_TRUE(g);
  run_pass(*g, infer_shapes);
  EXPECT_EQ(run_pass(*g, fold_shape_ops), 0);
  EXPECT_EQ(count(*g, Op::Gather), 2);
  EXPECT_EQ(count(*g, Op::Concat), 1);
}

}  // namespace
}  // namespace kiln
