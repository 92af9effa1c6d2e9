// Corrupted models must give errors, never crashes: random byte mutations of the sample
// model go through import and, when they still import, through a run.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include "backends/cpu/reference/kernel.h"
#include "builder/plan_file.h"
#include "kiln/kiln.h"
#include "model_builder.h"
#include "onnx/importer.h"
#include "passes/pass.h"
#include "runtime/engine_impl.h"
#include "runtime/inputs.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

TEST(Robustness, MutatedModelsGiveErrorsNotCrashes) {
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/models/sample_cnn.onnx", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  std::mt19937 rng(12345);
  int imported = 0, ran = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string m = bytes;
    int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) m[rng() % m.size()] = static_cast<char>(rng());
    auto model = import_onnx_bytes(m, ".", "mutated.onnx");
    if (!model.is_ok()) {
      EXPECT_FALSE(model.status().message().empty());
      continue;
    }
    ++imported;
    const Graph& g = *model->graph;
    TensorMap feeds;
    bool feedable = true;
    for (Value* v : g.inputs()) {
      auto dims = concrete_input_shape(*v, {});
      if (!dims.is_ok() || num_elements(*dims) > (1 << 20) || num_elements(*dims) < 0) { feedable = false; break; }
      feeds[v->name()] = random_input(g, *v, *dims, 7);
    }
    if (!feedable) continue;
    auto out = Interpreter(g).run(feeds);
    ran += out.is_ok();
  }
  // Most single-byte flips land in weight data and still import and run.
  EXPECT_GT(imported, 0);
  EXPECT_GT(ran, 0);
}

// Regressions found by the fuzz targets (tests/fuzz, docs/fuzzing.md). Under the fuzz
// build's sanitizers each of these was undefined behaviour; here they check the visible
// part of the fix.

// fuzz_onnx_importer: a Conv with pads INT64_MIN made shape inference overflow int64
// (window_out); a ConvTranspose group of INT64_MAX likewise. Inference must leave such
// dims unknown, and running must give the kernel's error.
TEST(Robustness, ConvWithAbsurdAttributesInfersNoGarbageShape) {
  using namespace kiln::testing;
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  auto m = make_model(17);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "1", "8", "8"});
  add_initializer_f32(m, "w", {1, 1, 3, 3}, std::vector<float>(9, 0.5f));
  add_ints_attr(add_node(m, "Conv", {"x", "w"}, {"y"}), "pads", {kMin, 2, kMin, 4});
  auto* ct = add_node(m, "ConvTranspose", {"x", "w"}, {"z"});
  auto* group = ct->add_attribute();
  group->set_name("group");
  group->set_type(onnx::AttributeProto::INT);
  group->set_i(std::numeric_limits<int64_t>::max());
  add_output(m, "y", onnx::TensorProto::FLOAT, {});
  add_output(m, "z", onnx::TensorProto::FLOAT, {});
  auto model = import_onnx_bytes(m.SerializeAsString(), ".", "absurd_conv.onnx");
  ASSERT_TRUE(model) << model.status().message();
  Graph& g = *model->graph;
  PassReport report;
  PassContext ctx(report);
  ASSERT_TRUE(infer_shapes(g, ctx));
  const Value* y = g.outputs()[0];
  ASSERT_TRUE(y->shape);
  ASSERT_EQ(y->shape->size(), 4u);
  EXPECT_FALSE((*y->shape)[2].known()) << sym_shape_str(y->shape);
  EXPECT_FALSE((*y->shape)[3].known()) << sym_shape_str(y->shape);
  const Value* z = g.outputs()[1];
  if (z->shape && z->shape->size() == 4) {
    EXPECT_FALSE((*z->shape)[1].known()) << sym_shape_str(z->shape);
  }
  TensorMap feeds;
  feeds["x"] = random_input(g, *g.inputs()[0], {1, 1, 8, 8}, 3);
  auto out = Interpreter(g).run(feeds);
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("pads"), std::string::npos) << out.status().message();
}

// fuzz_onnx_importer: Softmax with a FLOAT axis of -inf reached get_int's float-to-int
// cast, undefined behaviour out of range. It saturates now; NaN gives the default.
TEST(Robustness, FloatAttributeReadAsIntSaturates) {
  Attributes a;
  a.set("inf", std::numeric_limits<float>::infinity());
  a.set("ninf", -std::numeric_limits<float>::infinity());
  a.set("nan", std::numeric_limits<float>::quiet_NaN());
  a.set("big", 1e30f);
  a.set("x", -3.75f);
  EXPECT_EQ(a.get_int("inf", 0), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(a.get_int("ninf", 0), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(a.get_int("nan", 7), 7);
  EXPECT_EQ(a.get_int("big", 0), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(a.get_int("x", 0), -3);

  using namespace kiln::testing;
  auto m = make_model(13);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3"});
  add_float_attr(add_node(m, "Softmax", {"x"}, {"y"}), "axis", std::numeric_limits<float>::infinity());
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2", "3"});
  auto model = import_onnx_bytes(m.SerializeAsString(), ".", "softmax_inf_axis.onnx");
  ASSERT_TRUE(model) << model.status().message();
  TensorMap feeds;
  feeds["x"] = random_input(*model->graph, *model->graph->inputs()[0], {2, 3}, 1);
  auto out = Interpreter(*model->graph).run(feeds);
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("axis"), std::string::npos) << out.status().message();
}

// fuzz_onnx_importer: Scan-8 (batched) with sequence_lens and a rank-1 scan input indexed
// the sequence axis of a rank-0 slice (dims()[0] of an empty vector).
TEST(Robustness, Scan8WithoutSequenceAxisIsAnError) {
  using namespace kiln::testing;
  auto m = make_model(8);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2"});
  auto* lens = m.mutable_graph()->add_initializer();
  lens->set_name("lens");
  lens->set_data_type(onnx::TensorProto::INT64);
  lens->add_dims(2);
  lens->add_int64_data(1);
  lens->add_int64_data(1);
  auto* scan = add_node(m, "Scan", {"lens", "x"}, {"z"});
  auto* num = scan->add_attribute();
  num->set_name("num_scan_inputs");
  num->set_type(onnx::AttributeProto::INT);
  num->set_i(1);
  auto* body = scan->add_attribute();
  body->set_name("body");
  body->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* b = body->mutable_g();
  b->set_name("body");
  add_value_info(b->add_input(), "e", onnx::TensorProto::FLOAT, {});
  add_value_info(b->add_output(), "o", onnx::TensorProto::FLOAT, {});
  auto* id = b->add_node();
  id->set_op_type("Identity");
  id->add_input("e");
  id->add_output("o");
  add_output(m, "z", onnx::TensorProto::FLOAT, {});
  auto model = import_onnx_bytes(m.SerializeAsString(), ".", "scan8.onnx");
  ASSERT_TRUE(model) << model.status().message();
  TensorMap feeds;
  feeds["x"] = random_input(*model->graph, *model->graph->inputs()[0], {2}, 1);
  auto out = Interpreter(*model->graph).run(feeds);
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("sequence axis"), std::string::npos) << out.status().message();
}

// fuzz_onnx_importer: ReduceLogSum of a SplitToSequence output: the reduction kernel read
// the sequence's (null) tensor buffer. Only sequence/optional ops, control flow and
// Identity take sequences; the interpreter rejects them elsewhere.
TEST(Robustness, SequenceFedToTensorOpIsAnError) {
  using namespace kiln::testing;
  auto m = make_model(13);
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "2"});
  add_node(m, "SplitToSequence", {"x"}, {"seq"});
  add_node(m, "ReduceLogSum", {"seq"}, {"y"});
  add_output(m, "y", onnx::TensorProto::FLOAT, {});
  auto model = import_onnx_bytes(m.SerializeAsString(), ".", "sequence_to_reduce.onnx");
  ASSERT_TRUE(model) << model.status().message();
  TensorMap feeds;
  feeds["x"] = random_input(*model->graph, *model->graph->inputs()[0], {2, 2}, 1);
  auto out = Interpreter(*model->graph).run(feeds);
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("is a sequence"), std::string::npos) << out.status().message();
}

// fuzz_onnx_importer: an initializer's dims were allocated before checking that the proto
// holds that many values: a string tensor [4,4,2^31,3] without data asked for 10^11
// strings. Also a non-numeric external data offset threw std::invalid_argument.
TEST(Robustness, InitializerDimsMustBeBackedByData) {
  using namespace kiln::testing;
  auto model_with = [](const std::function<void(onnx::TensorProto*)>& fill) {
    auto m = make_model(17);
    add_input(m, "x", onnx::TensorProto::FLOAT, {"1"});
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name("w");
    fill(t);
    add_node(m, "Identity", {"w"}, {"y"});
    add_output(m, "y", onnx::TensorProto::FLOAT, {});
    return m.SerializeAsString();
  };
  const std::vector<std::pair<std::string, std::function<void(onnx::TensorProto*)>>> cases = {
      {"strings", [](onnx::TensorProto* t) {
         t->set_data_type(onnx::TensorProto::STRING);
         for (int64_t d : {int64_t{4}, int64_t{4}, int64_t{1} << 31, int64_t{3}}) t->add_dims(d);
       }},
      {"values", [](onnx::TensorProto* t) {  // 512 GB of floats claimed, one given
         t->set_data_type(onnx::TensorProto::FLOAT);
         t->add_dims(int64_t{1} << 37);
         t->add_float_data(1.0f);
       }},
      {"packed", [](onnx::TensorProto* t) {
         t->set_data_type(22);  // INT4 (newer than this onnx release)
         t->add_dims(int64_t{1} << 38);
       }},
      {"bad external data offset", [](onnx::TensorProto* t) {
         t->set_data_type(onnx::TensorProto::FLOAT);
         t->add_dims(4);
         t->set_data_location(onnx::TensorProto::EXTERNAL);
         auto* loc = t->add_external_data();
         loc->set_key("location");
         loc->set_value("w.bin");
         auto* off = t->add_external_data();
         off->set_key("offset");
         off->set_value("abc");
       }},
  };
  for (const auto& [want, fill] : cases) {
    auto r = import_onnx_bytes(model_with(fill), "/nonexistent-kiln-dir", "dims.onnx");
    ASSERT_FALSE(r) << want;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
}

// fuzz_onnx_importer: an Optional without input whose `type` attribute was a STRING
// ("SAME_UPPER") rather than a TypeProto reached the kernel, whose std::stoi threw.
TEST(Robustness, OptionalWithBadTypeAttributeIsAnError) {
  for (const std::string type : {"SAME_UPPER", "tensor:", "seq:x7", "tensor:99999999999999999999", "tensor:1"}) {
    Attributes attrs;
    attrs.set("type", type);
    KernelContext kc;
    kc.op = Op::Optional;
    kc.attrs = &attrs;
    kc.outputs.resize(1);
    kc.output_wanted.push_back(true);
    Status s = reference_kernels().find(Op::Optional)(kc);
    if (type == "tensor:1") {
      ASSERT_TRUE(s) << s.message();
      EXPECT_TRUE(kc.outputs[0].is_none());
    } else {
      ASSERT_FALSE(s) << type;
      EXPECT_NE(s.message().find("type"), std::string::npos) << s.message();
    }
  }
}

// fuzz_onnx_importer: Squeeze of a scalar with axes [0] (constant-folded by the optimizer)
// read x.dim(0) of a rank-0 tensor.
TEST(Robustness, SqueezeOfScalarIsAnError) {
  Tensor x = make_tensor<float>({}, {2.0f});
  Tensor axes = make_int64_vector({0});
  KernelContext kc;
  kc.op = Op::Squeeze;
  Attributes attrs;
  kc.attrs = &attrs;
  kc.inputs = {&x, &axes};
  kc.outputs.resize(1);
  kc.output_wanted.push_back(true);
  Status s = reference_kernels().find(Op::Squeeze)(kc);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("out of range"), std::string::npos) << s.message();
}

// fuzz_plan_loader: an engine whose output is a sequence returned it through
// Tensor::clone(), which copied nbytes() from the sequence's null buffer.
TEST(Robustness, CloneOfSequenceAndNoneCopiesTheItems) {
  Tensor item = make_tensor<float>({2}, {1.5f, -2.0f});
  Tensor seq = Tensor::sequence(DataType::kFloat32, {item, item});
  Tensor copy = seq.clone();
  ASSERT_TRUE(copy.is_sequence());
  ASSERT_EQ(copy.items().size(), 2u);
  EXPECT_NE(copy.items()[0].raw(), item.raw());  // a deep copy
  EXPECT_EQ(copy.items()[1].data<float>()[1], -2.0f);
  Tensor none = Tensor::none(DataType::kFloat32, true);
  Tensor none_copy = none.clone();
  EXPECT_TRUE(none_copy.is_none());
  EXPECT_TRUE(none_copy.none_of_sequence());
}

// fuzz_plan_loader: engine metadata with a float where an integer belongs (dims 1e30) went
// through nlohmann's get<int64_t>(), an out-of-range float-to-int cast; a negative
// memory_limit_bytes wrapped into a huge size_t. Both must be rejected as corrupt.
TEST(Robustness, EngineMetadataWithNonIntegerFieldsIsRejected) {
  BuilderConfig config;
  config.time_tactics = false;
  auto engine = Builder().build_from_file(std::string(KILN_SOURCE_DIR) + "/models/sample_cnn.onnx", config);
  ASSERT_TRUE(engine) << engine.status().message();
  const std::string good = engine.value()->serialize();
  auto storage = copy_plan_bytes(good.data(), good.size());
  auto sections = read_plan(*storage, "engine");
  ASSERT_TRUE(sections);
  auto graph = import_plan_graph(sections.value(), "engine");
  ASSERT_TRUE(graph);
  const std::vector<std::pair<std::string, nlohmann::json>> edits = {
      {"/inputs/0/dims/0", 1e30}, {"/config/memory_limit_bytes", -1}, {"/config/threads", 1e10},
      {"/config/threads", -1}, {"/summary/layers", -3}, {"/inputs/0/dtype", 1.5}};
  for (const auto& [where, value] : edits) {
    nlohmann::json meta = sections->meta;
    meta[nlohmann::json::json_pointer(where)] = value;
    auto bytes = write_plan(meta, *graph.value());
    ASSERT_TRUE(bytes);
    auto r = Engine::deserialize(bytes->data(), bytes->size());
    ASSERT_FALSE(r) << where;
    EXPECT_NE(r.status().message().find("metadata"), std::string::npos) << where << ": " << r.status().message();
  }
  // A thread count of 65536 made OpenMP start 65536 threads (out of memory); the engine now
  // uses at most this machine's processors, and still runs.
  nlohmann::json meta = sections->meta;
  meta["config"]["threads"] = 65536;
  auto bytes = write_plan(meta, *graph.value());
  ASSERT_TRUE(bytes);
  auto many = Engine::deserialize(bytes->data(), bytes->size());
  ASSERT_TRUE(many) << many.status().message();
  EXPECT_GE(many.value()->impl().threads, 1);
  EXPECT_LE(many.value()->impl().threads, omp_get_num_procs());
  auto ctx = many.value()->create_execution_context();
  ASSERT_TRUE(ctx) << ctx.status().message();
  std::map<std::string, Tensor> feeds;
  feeds["image"] = random_input(*graph.value(), *graph.value()->inputs()[0], {1, 3, 32, 32}, 5);
  auto out = ctx.value()->run(feeds);
  ASSERT_TRUE(out) << out.status().message();
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// FusedConv with a Clip activation on float16 data: the reference wrote the Clip bounds as
// float32 into 2-byte tensors (found by the CUDA conv tests), so the bounds were garbage.
TEST(ReferenceFusedConv, ClipBoundsFollowTheDataType) {
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32}) {
    Tensor x(dt, {1, 1, 3, 3}), w(dt, {1, 1, 1, 1});
    dispatch_all(dt, [&]<typename T>() {
      for (int64_t i = 0; i < 9; ++i) x.data<T>()[i] = convert_element<T>(static_cast<double>(i) - 4.0);
      w.data<T>()[0] = convert_element<T>(1.0);
    });
    Attributes attrs;
    attrs.set("activation", std::string("Clip"));
    attrs.set("min", -1.5f);
    attrs.set("max", 2.5f);
    attrs.set("kernel_shape", std::vector<int64_t>{1, 1});
    Tensor y;
    ASSERT_TRUE(run_reference_op(Op::FusedConv, attrs, {&x, &w}, &y).is_ok()) << dtype_name(dt);
    for (int64_t i = 0; i < 9; ++i) {
      EXPECT_EQ(y.get_double(i), std::clamp(static_cast<double>(i) - 4.0, -1.5, 2.5)) << dtype_name(dt) << " " << i;
    }
  }
}

}  // namespace
}  // namespace kiln
