// CUDA engines end to end: the e2e models (tests/models, exported from PyTorch) built for
// the GPU in FP32 and FP16 must match the CPU reference interpreter on the original graph;
// CUDA graph replay, user streams with device buffers, save/load and the CPU fallback for
// ops without a CUDA kernel are checked too. Skipped (not passed) without a CUDA device.
#include <gtest/gtest.h>
#include <cuda_runtime_api.h>

#include <onnx/onnx_pb.h>

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
            << cuda_fallback_layers((*ctx)->impl()) << ", CUDA graph " << cuda_uses_graph((*ctx)->impl()) << "\n";
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

}  // namespace
}  // namespace kiln
