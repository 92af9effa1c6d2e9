// Shape and type inference (ir/shape_inference.h), the infer_shapes pass and the
// fold_shape_ops pass: symbolic shapes through small graphs, folding of shape chains on
// static models, numerics unchanged.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "ir/shape_inference.h"
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

}  // namespace
}  // namespace kiln
