// CUDA engines end to end: the e2e models (tests/models, exported from PyTorch) built for
// the GPU in FP32 and FP16 must match the CPU reference interpreter on the original graph;
// CUDA graph replay, user streams with device buffers, save/load, the CPU fallback for ops
// without a CUDA kernel and host mode for data-dependent shapes are checked too. Skipped
// (not passed) without a CUDA device.
#include <gtest/gtest.h>
#include <cuda_runtime_api.h>

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <string>

#include "cuda_test_util.h"
#include "kiln/kiln.h"
#include "onnx/importer.h"
#include "runtime/cuda_hooks.h"
#include "runtime/engine_impl.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

std::string model_path(const std::string& name) { return std::string(KILN_SOURCE_DIR) + "/tests/models/" + name; }

// Random inputs for an engine's inputs: floats N(0,1), token ids in [0, 100), masks of 1
// with the last quarter of each row 0 (so masking matters).
std::map<std::string, Tensor> random_inputs(const Engine& e, const std::map<std::string, Dims>& shapes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int64_t> ids(0, 99);
  std::map<std::string, Tensor> out;
  for (const TensorDesc& d : e.inputs()) {
    Dims dims = shapes.count(d.name) ? shapes.at(d.name) : d.dims;
    Tensor t(d.dtype, dims);
    if (d.dtype == DataType::kFloat32) {
      for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = nd(rng);
    } else if (d.dtype == DataType::kInt64) {
      const bool mask = d.name.find("mask") != std::string::npos;
      const int64_t row = dims.empty() ? 1 : dims.back();
      for (int64_t i = 0; i < t.size(); ++i) t.data<int64_t>()[i] = mask ? (i % row < row * 3 / 4 ? 1 : 0) : ids(rng);
    }
    out[d.name] = t;
  }
  return out;
}

double rel_l2(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double g = got.get_double(i), w = want.get_double(i);
    if (std::isnan(g)) return INFINITY;
    num += (g - w) * (g - w);
    den += w * w;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

std::shared_ptr<Engine> build_cuda(const std::string& file, const std::map<std::string, Dims>& shapes, bool fp16,
                                   bool tf32 = false, ConvLayout layout = ConvLayout::kAuto) {
  BuilderConfig c;
  c.device = DeviceKind::kCUDA;
  c.fp16 = fp16;
  c.tf32 = tf32;
  c.conv_layout = layout;
  c.profiles.push_back(OptimizationProfile::fixed(shapes));
  auto e = Builder().build_from_file(model_path(file), c);
  EXPECT_TRUE(e.is_ok()) << file << ": " << e.status().message();
  return e.is_ok() ? e.value() : nullptr;
}

std::map<std::string, Tensor> reference(const std::string& file, const std::map<std::string, Tensor>& inputs) {
  auto m = import_onnx_file(model_path(file));
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  auto r = Interpreter(*m->graph).run(inputs);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  std::map<std::string, Tensor> out;
  if (!r.is_ok()) return out;
  for (size_t i = 0; i < m->graph->outputs().size(); ++i) out[m->graph->outputs()[i]->name()] = (*r)[i];
  return out;
}

struct ModelCase {
  const char* file;
  std::map<std::string, Dims> shapes;
};

const std::vector<ModelCase>& model_cases() {
  static const std::vector<ModelCase> cases = {
      {"resnet_tiny.onnx", {{"image", {1, 3, 32, 32}}}},
      {"mobilenetv3_tiny.onnx", {{"image", {1, 3, 32, 32}}}},
      {"bert_tiny.onnx", {{"input_ids", {2, 16}}, {"attention_mask", {2, 16}}}},
      {"gpt_tiny.onnx", {{"input_ids", {1, 16}}}},
  };
  return cases;
}

// Layers that run as views of their input's memory (ContextImpl::find_views): no kernel.
int view_layers(const ContextImpl& c) {
  return static_cast<int>(std::count_if(c.steps.begin(), c.steps.end(), [](const Step& s) { return s.view; }));
}

void check_model(const ModelCase& mc, bool fp16, double tol, ConvLayout layout = ConvLayout::kAuto) {
  auto e = build_cuda(mc.file, mc.shapes, fp16, false, layout);
  ASSERT_TRUE(e);
  auto ctx = e->create_execution_context();
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
  for (uint32_t seed : {1u, 2u}) {
    auto in = random_inputs(*e, mc.shapes, seed);
    auto got = (*ctx)->run(in);
    ASSERT_TRUE(got.is_ok()) << mc.file << ": " << got.status().message();
    auto want = reference(mc.file, in);
    for (const auto& [name, w] : want) {
      ASSERT_TRUE(got->count(name)) << name;
      const Tensor& g = got->at(name);
      ASSERT_EQ(g.dims(), w.dims()) << mc.file << " " << name;
      const double err = rel_l2(g, w);
      EXPECT_LE(err, tol) << mc.file << (fp16 ? " fp16 " : " fp32 ") << name << " seed " << seed;
    }
  }
  std::cout << mc.file << (fp16 ? " fp16" : " fp32") << ": CPU fallback layers "
            << cuda_fallback_layers((*ctx)->impl()) << ", CUDA graph " << cuda_uses_graph((*ctx)->impl())
            << ", layers run as views " << view_layers((*ctx)->impl()) << "\n";
  // The CNNs' Flatten before the classifier runs as a view of the pooled activations. (The
  // tiny transformers keep no Reshape: attention fusion absorbs them.)
  const std::string file = mc.file;
  if (file.rfind("resnet", 0) == 0 || file.rfind("mobilenet", 0) == 0) {
    EXPECT_GT(view_layers((*ctx)->impl()), 0) << file;
  }
}

TEST(CudaEngine, ModelsMatchReferenceFp32) {
  KILN_REQUIRE_GPU();
  for (const ModelCase& mc : model_cases()) check_model(mc, false, 1e-4);
}

TEST(CudaEngine, ModelsMatchReferenceFp16) {
  KILN_REQUIRE_GPU();
  for (const ModelCase& mc : model_cases()) check_model(mc, true, 1e-2);
}

int count_nhwc_layers(const Engine& e) {
  int nhwc = 0;
  for (const Node* n : e.impl().graph->nodes()) nhwc += n->attrs.get_string("kiln_layout", "") == "NHWC";
  return nhwc;
}

// FP16 engines default to channels-last (ConvLayout::kAuto); NCHW stays available.
TEST(CudaEngine, AutoLayoutIsNhwcForFp16AndNchwKeepsWorking) {
  KILN_REQUIRE_GPU();
  for (size_t i = 0; i < 2; ++i) {
    const ModelCase& mc = model_cases()[i];
    auto fp16 = build_cuda(mc.file, mc.shapes, true);
    auto fp32 = build_cuda(mc.file, mc.shapes, false);
    ASSERT_TRUE(fp16 && fp32);
    EXPECT_GT(count_nhwc_layers(*fp16), 0) << mc.file;
    EXPECT_EQ(count_nhwc_layers(*fp32), 0) << mc.file;
    check_model(mc, true, 1e-2, ConvLayout::kNCHW);
  }
}

// Channels-last convolutions and pooling (--conv-layout nhwc): every conv/pool layer of the
// CNNs runs NHWC on a CUDA kernel, and the results still match the reference.
TEST(CudaEngine, ChannelsLastCnnsMatchReference) {
  KILN_REQUIRE_GPU();
  for (size_t i = 0; i < 2; ++i) {
    const ModelCase& mc = model_cases()[i];
    for (bool fp16 : {false, true}) {
      check_model(mc, fp16, fp16 ? 1e-2 : 1e-4, ConvLayout::kNHWC);
      auto e = build_cuda(mc.file, mc.shapes, fp16, false, ConvLayout::kNHWC);
      ASSERT_TRUE(e);
      int nhwc = 0;
      for (const Node* n : e->impl().graph->nodes()) {
        if (n->attrs.get_string("kiln_layout", "") != "NHWC") continue;
        ++nhwc;
        const LayerInfo* l = nullptr;
        for (const LayerInfo& x : e->layers()) {
          if (n->output(0) && x.output == n->output(0)->name()) l = &x;
        }
        ASSERT_TRUE(l) << n->describe();
        EXPECT_NE(l->tactic, "cpu fallback") << n->describe();
      }
      EXPECT_GT(nhwc, 0) << mc.file;
    }
  }
}

TEST(CudaEngine, GraphReplayMatchesLayerByLayerAndUserStream) {
  KILN_REQUIRE_GPU();
  const ModelCase& mc = model_cases()[0];
  auto e = build_cuda(mc.file, mc.shapes, false);
  ASSERT_TRUE(e);
  auto c1 = e->create_execution_context();
  auto c2 = e->create_execution_context();
  ASSERT_TRUE(c1.is_ok() && c2.is_ok());
  cuda_set_graphs((*c2)->impl(), false);
  auto in = random_inputs(*e, mc.shapes, 5);
  auto a = (*c1)->run(in);
  auto a2 = (*c1)->run(in);  // replay
  auto b = (*c2)->run(in);
  ASSERT_TRUE(a.is_ok() && a2.is_ok() && b.is_ok());
  EXPECT_TRUE(cuda_uses_graph((*c1)->impl()));
  EXPECT_FALSE(cuda_uses_graph((*c2)->impl()));
  for (const auto& [name, t] : *a) {
    EXPECT_EQ(std::memcmp(t.raw(), a2->at(name).raw(), t.nbytes()), 0) << name;
    EXPECT_LE(rel_l2(t, b->at(name)), 1e-6) << name;
  }
  // Device buffers bound by the caller, enqueued on the caller's stream.
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const Tensor& x = in.begin()->second;
  void* dx = nullptr;
  void* dy = nullptr;
  const TensorDesc& od = e->outputs()[0];
  auto oshape = (*c1)->tensor_shape(od.name);
  ASSERT_TRUE(oshape.is_ok());
  Tensor y(od.dtype, *oshape);
  ASSERT_EQ(cudaMalloc(&dx, x.nbytes()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, y.nbytes()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.raw(), x.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE((*c1)->set_tensor_address(in.begin()->first, dx).is_ok());
  ASSERT_TRUE((*c1)->set_tensor_address(od.name, dy).is_ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*c1)->enqueue(stream).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(y.raw(), dy, y.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(y.raw(), a->at(od.name).raw(), y.nbytes()), 0);
  cudaFree(dx);
  cudaFree(dy);
  cudaStreamDestroy(stream);
}

TEST(CudaEngine, SaveLoadRoundTrip) {
  KILN_REQUIRE_GPU();
  const ModelCase& mc = model_cases()[2];
  auto e = build_cuda(mc.file, mc.shapes, true);
  ASSERT_TRUE(e);
  std::string bytes = e->serialize();
  auto e2 = Engine::deserialize(bytes.data(), bytes.size());
  ASSERT_TRUE(e2.is_ok()) << e2.status().message();
  EXPECT_EQ((*e2)->device(), DeviceKind::kCUDA);
  auto in = random_inputs(*e, mc.shapes, 9);
  auto c1 = e->create_execution_context();
  auto c2 = (*e2)->create_execution_context();
  ASSERT_TRUE(c1.is_ok() && c2.is_ok());
  auto a = (*c1)->run(in);
  auto b = (*c2)->run(in);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  for (const auto& [name, t] : *a) EXPECT_EQ(std::memcmp(t.raw(), b->at(name).raw(), t.nbytes()), 0) << name;
  for (const LayerInfo& l : e->layers()) EXPECT_FALSE(l.tactic.empty()) << l.output;
  // FusedElementwise layers carry their CUBIN in the plan (loading needs no NVRTC).
  int fused = 0;
  for (const LayerInfo& l : e->layers()) {
    if (l.tactic != "nvrtc_fused") continue;
    ++fused;
    const Value* v = (*e2)->impl().graph->find_value(l.output);
    ASSERT_TRUE(v && v->producer()) << l.output;
    EXPECT_TRUE(v->producer()->attrs.has("kiln_cubin")) << l.output;
  }
  std::cout << mc.file << ": " << fused << " FusedElementwise layer(s) with stored CUBINs\n";
}

// An op without a CUDA kernel (CumSum) runs on the CPU between GPU layers.
TEST(CudaEngine, CpuFallbackForOpsWithoutCudaKernel) {
  KILN_REQUIRE_GPU();
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("fallback");
  auto add_vi = [](onnx::ValueInfoProto* vi, const std::string& name, const std::vector<int64_t>& dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  add_vi(g->add_input(), "x", {4, 64});
  add_vi(g->add_output(), "y", {4, 64});
  auto* axis = g->add_initializer();
  axis->set_name("axis");
  axis->set_data_type(onnx::TensorProto::INT64);
  axis->add_int64_data(1);
  auto node = [&](const std::string& op, std::vector<std::string> ins, const std::string& out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (auto& i : ins) n->add_input(i);
    n->add_output(out);
  };
  node("Relu", {"x"}, "r");
  node("CumSum", {"r", "axis"}, "c");
  node("Tanh", {"c"}, "y");
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  BuilderConfig c;
  c.device = DeviceKind::kCUDA;
  auto e = Builder().build_from_memory(bytes, c);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  auto ctx = (*e)->create_execution_context();
  ASSERT_TRUE(ctx.is_ok());
  std::map<std::string, Tensor> in = {{"x", testing::gpu::random_f32({4, 64}, 3)}};
  auto got = (*ctx)->run(in);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  auto imported = import_onnx_bytes(bytes, ".", "fallback");
  ASSERT_TRUE(imported.is_ok());
  auto want = Interpreter(*imported->graph).run(in);
  ASSERT_TRUE(want.is_ok());
  EXPECT_LE(rel_l2(got->at("y"), (*want)[0]), 1e-5);
  EXPECT_GE(cuda_fallback_layers((*ctx)->impl()), 1);
}

// ---- host mode: graphs with a data-dependent shape run every layer on the CPU ----

// A dim of -1 is symbolic ("d<index>").
void add_value_info(onnx::ValueInfoProto* vi, const std::string& name, int elem_type, const std::vector<int64_t>& dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  for (size_t i = 0; i < dims.size(); ++i) {
    auto* d = tt->mutable_shape()->add_dim();
    if (dims[i] >= 0) d->set_dim_value(dims[i]);
    else d->set_dim_param(cat(name, "_d", i));
  }
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& ins,
                          const std::string& out, const std::string& name) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : ins) n->add_input(i);
  n->add_output(out);
  return n;
}

// x -> NonZero -> Transpose -> idx (int64 [n, 2], an output) -> Cast -> ReduceSum (all axes,
// keepdims: [1, 1]) -> Mul by x -> y (float [3, 5], a static output).
std::string nonzero_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("nonzero");
  add_value_info(g->add_input(), "x", onnx::TensorProto::FLOAT, {3, 5});
  add_value_info(g->add_output(), "idx", onnx::TensorProto::INT64, {-1, 2});
  add_value_info(g->add_output(), "y", onnx::TensorProto::FLOAT, {3, 5});
  add_node(g, "NonZero", {"x"}, "nz_out", "nz");
  add_node(g, "Transpose", {"nz_out"}, "idx", "tr");
  auto* to = add_node(g, "Cast", {"idx"}, "f", "cast")->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  add_node(g, "ReduceSum", {"f"}, "s", "sum");
  add_node(g, "Mul", {"x", "s"}, "y", "mul");
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  return bytes;
}

// ReduceSum with its axes a graph input (int64 [a], a in [0, 2]), then Tanh.
std::string runtime_axes_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("runtime_axes");
  add_value_info(g->add_input(), "x", onnx::TensorProto::FLOAT, {4, 6});
  add_value_info(g->add_input(), "axes", onnx::TensorProto::INT64, {-1});
  add_value_info(g->add_output(), "z", onnx::TensorProto::FLOAT, {-1, -1});
  add_node(g, "ReduceSum", {"x", "axes"}, "r", "sum");
  add_node(g, "Tanh", {"r"}, "z", "tanh");
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  return bytes;
}

std::map<std::string, Tensor> reference_bytes(const std::string& bytes, const std::map<std::string, Tensor>& in) {
  auto m = import_onnx_bytes(bytes, ".", "model");
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  std::map<std::string, Tensor> out;
  if (!m.is_ok()) return out;
  auto r = Interpreter(*m->graph).run(in);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  for (size_t i = 0; r.is_ok() && i < m->graph->outputs().size(); ++i) out[m->graph->outputs()[i]->name()] = (*r)[i];
  return out;
}

Tensor sparse_input(uint32_t seed) {
  Tensor x = testing::gpu::random_f32({3, 5}, seed);
  for (int64_t i = 0; i < x.size(); ++i) {
    if ((i * 7 + seed) % 3 == 0) x.data<float>()[i] = 0.0f;
  }
  return x;
}

Tensor int64s(const std::vector<int64_t>& v) {
  Tensor t(DataType::kInt64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

void expect_equal_values(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.dims(), want.dims()) << what;
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << what;
}

// NonZero: the engine is not refused; the context warns once, runs every layer on the CPU,
// and serves run(), bound device buffers with enqueue on a user stream, and execute().
TEST(CudaEngine, HostModeForDataDependentShapes) {
  KILN_REQUIRE_GPU();
  const std::string bytes = nonzero_model();
  BuilderConfig c;
  c.device = DeviceKind::kCUDA;
  auto e = Builder().build_from_memory(bytes, c);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  auto ctx_r = (*e)->create_execution_context();
  ASSERT_TRUE(ctx_r.is_ok()) << ctx_r.status().message();
  ExecutionContext& ctx = **ctx_r;
  const Tensor x = sparse_input(1);
  ::testing::internal::CaptureStderr();
  auto got = ctx.run({{"x", x}});
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_TRUE(ctx.impl().host_mode);
  EXPECT_EQ(count_of(log, "kiln warning: node 'nz' (NonZero): output 'nz_out' has a data-dependent shape"), 1u) << log;
  EXPECT_NE(log.find("so this context runs every layer on the CPU"), std::string::npos) << log;
  EXPECT_EQ(cuda_fallback_layers(ctx.impl()), static_cast<int>(ctx.impl().steps.size()));
  EXPECT_GE(cuda_fallback_layers(ctx.impl()), 1);
  EXPECT_FALSE(cuda_uses_graph(ctx.impl()));
  auto want = reference_bytes(bytes, {{"x", x}});
  expect_equal_values(got->at("idx"), want.at("idx"), "idx");
  EXPECT_LE(rel_l2(got->at("y"), want.at("y")), 1e-6);

  // Device buffers bound by the caller; the input is written on the caller's stream just
  // before the enqueue, which must come after it.
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const Tensor x2 = sparse_input(2);
  Tensor y(DataType::kFloat32, {3, 5});
  void* dx = nullptr;
  void* dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, x2.nbytes()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, y.nbytes()), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(dx, 0, x2.nbytes(), stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dx, x2.raw(), x2.nbytes(), cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(dy, 0xFF, y.nbytes(), stream), cudaSuccess);
  ASSERT_TRUE(ctx.set_tensor_address("x", dx).is_ok());
  ASSERT_TRUE(ctx.set_tensor_address("y", dy).is_ok());
  Status s = ctx.enqueue(stream);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(y.raw(), dy, y.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  want = reference_bytes(bytes, {{"x", x2}});
  EXPECT_LE(rel_l2(y, want.at("y")), 1e-6);
  auto idx = ctx.output("idx");  // data-dependent outputs stay in the context's host memory
  ASSERT_TRUE(idx.is_ok()) << idx.status().message();
  expect_equal_values(*idx, want.at("idx"), "idx (bound run)");

  // A buffer bound to a data-dependent output is refused: its size is unknown.
  void* didx = nullptr;
  ASSERT_EQ(cudaMalloc(&didx, 1024), cudaSuccess);
  ASSERT_TRUE(ctx.set_tensor_address("idx", didx).is_ok());
  s = ctx.enqueue(stream);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("output 'idx' has a data-dependent shape"), std::string::npos) << s.message();
  ASSERT_TRUE(ctx.unbind_tensor("idx").is_ok());

  // execute() with the same bound buffers (set up again after the unbind: one more warning).
  const Tensor x3 = sparse_input(3);
  ASSERT_EQ(cudaMemcpy(dx, x3.raw(), x3.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  ::testing::internal::CaptureStderr();
  s = ctx.execute();
  EXPECT_EQ(count_of(::testing::internal::GetCapturedStderr(), "kiln warning:"), 1u);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_EQ(cudaMemcpy(y.raw(), dy, y.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  want = reference_bytes(bytes, {{"x", x3}});
  EXPECT_LE(rel_l2(y, want.at("y")), 1e-6);
  cudaFree(dx);
  cudaFree(dy);
  cudaFree(didx);
  cudaStreamDestroy(stream);
}

// ReduceSum with axes given at run time: host mode while the axes make the output shape
// data-dependent; with an empty axes input (all axes: a static shape) the same context goes
// back to the GPU path with a CUDA graph, and to host mode again after.
TEST(CudaEngine, HostModeIsDecidedAtEachSetup) {
  KILN_REQUIRE_GPU();
  const std::string bytes = runtime_axes_model();
  BuilderConfig c;
  c.device = DeviceKind::kCUDA;
  c.profiles.push_back(OptimizationProfile{{{"axes", ShapeRange{{0}, {1}, {2}}}}});
  auto e = Builder().build_from_memory(bytes, c);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  auto ctx_r = (*e)->create_execution_context();
  ASSERT_TRUE(ctx_r.is_ok()) << ctx_r.status().message();
  ExecutionContext& ctx = **ctx_r;
  const Tensor x = testing::gpu::random_f32({4, 6}, 11);
  auto check = [&](const std::vector<int64_t>& axes, bool host) {
    SCOPED_TRACE(cat("axes ", dims_str(axes)));
    const std::map<std::string, Tensor> in = {{"x", x}, {"axes", int64s(axes)}};
    ::testing::internal::CaptureStderr();
    auto got = ctx.run(in);
    const std::string log = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_EQ(ctx.impl().host_mode, host);
    EXPECT_EQ(count_of(log, "kiln warning: node 'sum' (ReduceSum): output 'r' has a data-dependent shape"), host ? 1u : 0u)
        << log;
    EXPECT_EQ(cuda_uses_graph(ctx.impl()), !host);
    if (host) EXPECT_EQ(cuda_fallback_layers(ctx.impl()), static_cast<int>(ctx.impl().steps.size()));
    else EXPECT_EQ(cuda_fallback_layers(ctx.impl()), 0);
    const auto want = reference_bytes(bytes, in);
    ASSERT_EQ(got->at("z").dims(), want.at("z").dims());
    EXPECT_LE(rel_l2(got->at("z"), want.at("z")), 1e-5);
  };
  check({1}, true);
  check({0, -1}, true);

  // Bound device inputs, enqueued on a user stream; the data-dependent output is read with
  // output().
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const Tensor axes = int64s({0});
  void* dx = nullptr;
  void* daxes = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, x.nbytes()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&daxes, axes.nbytes()), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dx, x.raw(), x.nbytes(), cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(daxes, axes.raw(), axes.nbytes(), cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_TRUE(ctx.set_input_shape("axes", {1}).is_ok());
  ASSERT_TRUE(ctx.set_tensor_address("x", dx).is_ok());
  ASSERT_TRUE(ctx.set_tensor_address("axes", daxes).is_ok());
  Status s = ctx.enqueue(stream);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_TRUE(ctx.impl().host_mode);
  auto z = ctx.output("z");
  ASSERT_TRUE(z.is_ok()) << z.status().message();
  auto want = reference_bytes(bytes, {{"x", x}, {"axes", axes}});
  ASSERT_EQ(z->dims(), want.at("z").dims());
  EXPECT_LE(rel_l2(*z, want.at("z")), 1e-5);
  cudaFree(dx);
  cudaFree(daxes);
  cudaStreamDestroy(stream);

  check({}, false);  // every shape known: device memory, CUDA kernels, a CUDA graph
  check({1}, true);
}

}  // namespace
}  // namespace kiln
