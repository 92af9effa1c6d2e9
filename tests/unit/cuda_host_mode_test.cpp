// Host mode of CUDA contexts (runtime/cuda_host_mode.cpp): a graph with a data-dependent
// shape runs every layer on the CPU instead of being refused. These tests run without a
// GPU: they take a CPU-built engine, mark it as a CUDA engine and create its context
// directly (Engine::create_execution_context would ask for a device). Host mode needs no
// CUDA until a bound (device) buffer has to be copied; the GPU side is in
// tests/gpu/engine_cuda_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "kiln/kiln.h"
#include "model_builder.h"
#include "onnx/importer.h"
#include "passes/pass.h"
#include "runtime/bench.h"
#include "runtime/cuda_hooks.h"
#include "runtime/engine_impl.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

using namespace kiln::testing;

bool have_gpu() { return cuda_compiled() && cuda_device_status().is_ok(); }

void add_int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// x -> NonZero -> Transpose -> idx (int64 [n, 2], an output) -> Cast -> ReduceSum (all,
// keepdims: [1, 1]) -> Mul by x -> y (float [3, 5], a static output).
onnx::ModelProto nonzero_model() {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"3", "5"});
  add_node(m, "NonZero", {"x"}, {"nz_out"}, "nz");
  add_node(m, "Transpose", {"nz_out"}, {"idx"}, "tr");
  add_int_attr(add_node(m, "Cast", {"idx"}, {"f"}, "cast"), "to", onnx::TensorProto::FLOAT);
  add_node(m, "ReduceSum", {"f"}, {"s"}, "sum");
  add_node(m, "Mul", {"x", "s"}, {"y"}, "mul");
  add_output(m, "idx", onnx::TensorProto::INT64, {"n", "2"});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"3", "5"});
  return m;
}

// ReduceSum with its axes a graph input (a data-dependent shape), then Tanh.
onnx::ModelProto runtime_axes_model() {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"4", "6"});
  add_input(m, "axes", onnx::TensorProto::INT64, {"a"});
  add_node(m, "ReduceSum", {"x", "axes"}, {"r"}, "sum");
  add_node(m, "Tanh", {"r"}, {"z"}, "tanh");
  add_output(m, "z", onnx::TensorProto::FLOAT, {"p", "q"});
  return m;
}

Tensor sparse_input(uint32_t seed) {
  Tensor x(DataType::kFloat32, {3, 5});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = (i * 7 + seed) % 3 == 0 ? 0.0f : 0.25f * static_cast<float>(i + seed);
  return x;
}

Tensor int64s(const std::vector<int64_t>& v) {
  Tensor t(DataType::kInt64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

std::map<std::string, Tensor> reference(const onnx::ModelProto& m, const std::map<std::string, Tensor>& in) {
  auto g = import_onnx_bytes(m.SerializeAsString(), ".");
  EXPECT_TRUE(g) << g.status().message();
  auto r = Interpreter(*g->graph).run(in);
  EXPECT_TRUE(r) << r.status().message();
  std::map<std::string, Tensor> out;
  for (size_t i = 0; r && i < g->graph->outputs().size(); ++i) out[g->graph->outputs()[i]->name()] = (*r)[i];
  return out;
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.dims(), want.dims()) << what;
  for (int64_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got.get_double(i), want.get_double(i), 1e-5) << what << "[" << i << "]";
}

// A CPU build of `m` marked as a CUDA engine, and a context of it made without asking for a
// device.
struct FakeCudaEngine {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<ExecutionContext> ctx;
};

FakeCudaEngine fake_cuda_engine(const onnx::ModelProto& m, const BuilderConfig& config = {}) {
  FakeCudaEngine f;
  auto e = Builder().build_from_memory(m.SerializeAsString(), config);
  EXPECT_TRUE(e) << e.status().message();
  if (!e) return f;
  f.engine = e.value();
  const_cast<EngineImpl&>(f.engine->impl()).device = DeviceKind::kCUDA;
  auto c = std::make_unique<ContextImpl>();
  c->engine = f.engine;
  c->e = &f.engine->impl();
  f.ctx = std::make_unique<ExecutionContext>(std::move(c));
  return f;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(CudaHostMode, ReasonNamesTheFirstDataDependentNode) {
  for (bool dynamic : {true, false}) {
    onnx::ModelProto m = dynamic ? nonzero_model() : make_model();
    if (!dynamic) {
      add_input(m, "x", onnx::TensorProto::FLOAT, {"3", "5"});
      add_node(m, "Relu", {"x"}, {"y"}, "relu");
      add_output(m, "y", onnx::TensorProto::FLOAT, {"3", "5"});
    }
    auto g = import_onnx_bytes(m.SerializeAsString(), ".");
    ASSERT_TRUE(g) << g.status().message();
    PassReport r;
    PassContext pc(r);
    ASSERT_TRUE(infer_shapes(*g->graph, pc).is_ok());
    const std::string why = data_dependent_shape_reason(*g->graph);
    if (dynamic) {
      EXPECT_EQ(why.rfind("node 'nz' (NonZero): output 'nz_out' has a data-dependent shape [2,", 0), 0u) << why;
    } else {
      EXPECT_EQ(why, "");
    }
  }
}

TEST(CudaHostMode, DataDependentShapesRunEveryLayerOnTheCpu) {
  const auto m = nonzero_model();
  auto f = fake_cuda_engine(m);
  ASSERT_TRUE(f.ctx);
  ExecutionContext& ctx = *f.ctx;
  const Tensor x = sparse_input(1);
  ::testing::internal::CaptureStderr();
  auto got = ctx.run({{"x", x}});
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(got) << got.status().message();
  EXPECT_TRUE(ctx.impl().host_mode);
  EXPECT_EQ(count(log, "kiln warning: node 'nz' (NonZero): output 'nz_out' has a data-dependent shape"), 1u) << log;
  EXPECT_NE(log.find("CUDA engines plan device memory before running, so this context runs every layer on the CPU"),
            std::string::npos) << log;
  EXPECT_FALSE(ctx.impl().steps.empty());
  EXPECT_FALSE(cuda_uses_graph(ctx.impl()));
  auto want = reference(m, {{"x", x}});
  expect_same(got->at("idx"), want.at("idx"), "idx");
  expect_same(got->at("y"), want.at("y"), "y");

  // Same shapes: no setup, no second warning; execute() and output() read host memory.
  ::testing::internal::CaptureStderr();
  const Tensor x2 = sparse_input(2);
  got = ctx.run({{"x", x2}});
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(got) << got.status().message();
  want = reference(m, {{"x", x2}});
  expect_same(got->at("idx"), want.at("idx"), "idx (second run)");
  ASSERT_TRUE(ctx.execute().is_ok());
  auto idx = ctx.output("idx");
  ASSERT_TRUE(idx) << idx.status().message();
  expect_same(*idx, want.at("idx"), "output(idx)");
  EXPECT_EQ(ctx.tensor_shape("y").value(), (Dims{3, 5}));

  // A buffer bound to a data-dependent output cannot be known to be large enough.
  int64_t dummy[64];
  ASSERT_TRUE(ctx.set_tensor_address("idx", dummy).is_ok());
  Status s = ctx.execute();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("output 'idx' has a data-dependent shape"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("output()"), std::string::npos) << s.message();
  ASSERT_TRUE(ctx.unbind_tensor("idx").is_ok());

  // Bound buffers of a CUDA engine are device memory: copied in and out around the CPU run
  // (cudaMemcpyDefault also takes host memory, which this test binds).
  Tensor y(DataType::kFloat32, {3, 5});
  ASSERT_TRUE(ctx.set_tensor_address("x", const_cast<void*>(x.raw())).is_ok());
  ASSERT_TRUE(ctx.set_tensor_address("y", y.raw()).is_ok());
  s = ctx.execute();
  if (have_gpu()) {
    ASSERT_TRUE(s.is_ok()) << s.message();
    want = reference(m, {{"x", x}});
    expect_same(y, want.at("y"), "bound y");
  } else {
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("copying input 'x' to the host"), std::string::npos) << s.message();
  }
  ASSERT_TRUE(ctx.unbind_tensor("x").is_ok());
  ASSERT_TRUE(ctx.unbind_tensor("y").is_ok());
  got = ctx.run({{"x", x}});
  ASSERT_TRUE(got) << got.status().message();
  expect_same(got->at("y"), reference(m, {{"x", x}}).at("y"), "y after unbinding");
}

// Whether a context runs in host mode is decided at each setup: with an empty axes input
// the reduction's shape is known (all axes), and the context goes back to the device path.
TEST(CudaHostMode, DecidedAgainAtEachSetup) {
  const auto m = runtime_axes_model();
  BuilderConfig config;
  config.profiles.push_back(OptimizationProfile{{{"axes", ShapeRange{{0}, {1}, {2}}}}});
  auto f = fake_cuda_engine(m, config);
  ASSERT_TRUE(f.ctx);
  ExecutionContext& ctx = *f.ctx;
  Tensor x(DataType::kFloat32, {4, 6});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = 0.05f * static_cast<float>(i - 11);
  for (const auto& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0, -1}}) {
    ::testing::internal::CaptureStderr();
    auto got = ctx.run({{"x", x}, {"axes", int64s(axes)}});
    const std::string log = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(got) << got.status().message();
    EXPECT_TRUE(ctx.impl().host_mode);
    EXPECT_EQ(count(log, "kiln warning: node 'sum' (ReduceSum): output 'r' has a data-dependent shape"), 1u) << log;
    expect_same(got->at("z"), reference(m, {{"x", x}, {"axes", int64s(axes)}}).at("z"), "z");
  }
  auto got = ctx.run({{"x", x}, {"axes", int64s({})}});
  EXPECT_FALSE(ctx.impl().host_mode);
  EXPECT_EQ(ctx.impl().host_mode_reason, "");
  if (have_gpu()) {
    ASSERT_TRUE(got) << got.status().message();
    expect_same(got->at("z"), reference(m, {{"x", x}, {"axes", int64s({})}}).at("z"), "z (static)");
  } else {
    ASSERT_FALSE(got);  // the device path needs CUDA
    EXPECT_NE(got.status().message().find("CUDA"), std::string::npos) << got.status().message();
  }
}

// An input without elements is a constant once its shape is known: a CPU engine folds what
// depends only on it (here the axes of a reduction, which then has a static shape).
TEST(CudaHostMode, EmptyInputsFoldAsConstants) {
  const auto m = runtime_axes_model();
  BuilderConfig config;
  config.profiles.push_back(OptimizationProfile{{{"axes", ShapeRange{{0}, {1}, {2}}}}});
  auto e = Builder().build_from_memory(m.SerializeAsString(), config);
  ASSERT_TRUE(e) << e.status().message();
  auto ctx = e.value()->create_execution_context();
  ASSERT_TRUE(ctx);
  Tensor x(DataType::kFloat32, {4, 6});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = 0.01f * static_cast<float>(i);
  ASSERT_TRUE(ctx.value()->set_input_shape("axes", {0}).is_ok());
  EXPECT_EQ(ctx.value()->tensor_shape("z").value(), (Dims{1, 1}));
  auto got = ctx.value()->run({{"x", x}, {"axes", int64s({})}});
  ASSERT_TRUE(got) << got.status().message();
  expect_same(got->at("z"), reference(m, {{"x", x}, {"axes", int64s({})}}).at("z"), "z");
  got = ctx.value()->run({{"x", x}, {"axes", int64s({1})}});
  ASSERT_TRUE(got) << got.status().message();
  expect_same(got->at("z"), reference(m, {{"x", x}, {"axes", int64s({1})}}).at("z"), "z (axes [1])");
}

// kiln bench on a context in host mode reports no GPU times and no CUDA graph.
TEST(CudaHostMode, BenchReportSaysTheGpuIsNotUsed) {
  BenchReport r;
  r.device = "cuda";
  r.cuda_host_mode = true;
  r.cpu_fallback_layers = 5;
  r.latency_ms = {{"median", 1.0}};
  const std::string text = format_bench_report(r);
  EXPECT_NE(text.find("GPU: not used: host mode, all 5 layer(s) ran on the CPU"), std::string::npos) << text;
  EXPECT_EQ(text.find("CUDA graph on"), std::string::npos) << text;
  const nlohmann::json j = bench_report_json(r);
  EXPECT_EQ(j.value("cuda_host_mode", false), true);
  EXPECT_EQ(j.value("cuda_graph", true), false);
  EXPECT_EQ(j.value("cpu_fallback_layers", 0), 5);
  EXPECT_FALSE(j.contains("gpu_compute_ms"));
}

}  // namespace
}  // namespace kiln
