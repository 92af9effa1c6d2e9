// The cuBLASLt tactic "cublaslt_gemm" (MatMul, Gemm, FusedGemm) against the CPU reference
// kernels: random non-zero inputs, fp32 / fp16 / bf16 (the low-precision inputs are rounded
// first and the reference runs in fp32 on the rounded values), outputs pre-filled with NaN.
#include <gtest/gtest.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/fast/fast_kernel.h"

// cuda_test_util.h names TensorShape unqualified in this namespace without declaring it
// (reported to the lead); a repeated using-declaration is harmless once it does.
namespace kiln::testing::gpu {
using kiln::fast::TensorShape;
}  // namespace kiln::testing::gpu

#include "cuda_test_util.h"

namespace kiln::testing::gpu {
namespace {

constexpr DataType kF32 = DataType::kFloat32;
constexpr DataType kF16 = DataType::kFloat16;
constexpr DataType kBF16 = DataType::kBFloat16;
constexpr const char* kTactic = "cublaslt_gemm";

double tol_for(DataType dt, bool tf32 = false) {
  if (dt == kF16) return 2e-2;
  if (dt == kBF16) return 5e-2;
  return tf32 ? 5e-3 : 1e-4;
}

// Runs the tactic on `inputs` (float32 host tensors, rounded to dt first) and compares with
// the float32 reference on the rounded values. nullptr inputs are omitted optional inputs.
void check(Op op, const Attributes& at, const std::vector<const Tensor*>& inputs, DataType dt,
           const std::vector<bool>& constant, const std::string& what, bool tf32 = false) {
  std::vector<Tensor> rounded(inputs.size()), rounded_f32(inputs.size());
  std::vector<const Tensor*> gpu_in, ref_in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) {
      gpu_in.push_back(nullptr);
      ref_in.push_back(nullptr);
      continue;
    }
    rounded[i] = convert(*inputs[i], dt);
    rounded_f32[i] = to_f32(rounded[i]);
    gpu_in.push_back(&rounded[i]);
    ref_in.push_back(&rounded_f32[i]);
  }
  std::vector<Tensor> ref = run_ref(op, at, ref_in);
  ASSERT_EQ(ref.size(), 1u) << what;
  kiln::cuda::LayerSpec spec = make_cuda_spec(op, &at, gpu_in, {dt}, constant);
  kiln::cuda::Env env = test_env();
  env.tf32 = tf32;
  spec.env = &env;
  std::vector<TensorShape> out_shapes{{dt, ref[0].dims()}};
  CudaRun r = run_cuda(kTactic, spec, gpu_in, out_shapes);
  const std::string full = std::string(op_name(op)) + " " + dtype_name(dt) + (tf32 ? " tf32" : "") + " " + what;
  ASSERT_TRUE(r.status.is_ok()) << full << ": " << r.status.message();
  EXPECT_LE(r.workspace_bytes, size_t{32} << 20) << full;
  expect_near_tensor(to_f32(r.outputs[0]), ref[0], tol_for(dt, tf32), full);
}

const std::vector<DataType> kDtypes = {kF32, kF16, kBF16};

TEST(CudaGemm, MatMulShapes) {
  KILN_REQUIRE_GPU();
  struct Case {
    Dims a, b;
  };
  const std::vector<Case> cases = {
      {{5, 7}, {7, 3}},                    // 2-D
      {{2, 3, 5, 7}, {7, 9}},              // batch folded into rows
      {{1, 17, 33}, {33, 65}},             // odd sizes
      {{3, 5, 8}, {3, 8, 6}},              // strided batch
      {{2, 1, 5, 7}, {3, 7, 4}},           // broadcast both ways
      {{3, 5, 7}, {1, 7, 4}},              // B batch of 1
      {{5, 7}, {4, 7, 6}},                 // A broadcast over B's batch
      {{2, 1, 6, 3}, {1, 4, 3, 5}},        // outer loop + strided batch
      {{2, 3, 1, 4, 5, 6}, {3, 1, 6, 7}},  // rank 6
      {{7}, {7, 3}},                       // 1-D A
      {{5, 7}, {7}},                       // 1-D B
      {{7}, {7}},                          // dot product
      {{9}, {2, 9, 4}},                    // 1-D A, batched B
      {{2, 5, 9}, {9}},                    // batched A, 1-D B
      {{2, 5, 7}, {2, 7, 1}},              // N = 1
      {{4, 64, 128}, {4, 128, 96}},        // tensor-core sized
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    const Tensor a = random_f32(c.a, seed++), b = random_f32(c.b, seed++);
    const Attributes none;
    const std::string what = dims_str(c.a) + " x " + dims_str(c.b);
    for (DataType dt : kDtypes) {
      check(Op::MatMul, none, {&a, &b}, dt, {false, false}, what);
      check(Op::MatMul, none, {&a, &b}, dt, {false, true}, what + " (constant B)");
    }
  }
}

TEST(CudaGemm, MatMulTf32) {
  KILN_REQUIRE_GPU();
  // TF32 keeps 10 mantissa bits: small magnitudes keep the absolute error within tolerance.
  const Tensor a = random_f32({3, 65, 129}, 1, 0.05f, 0.5f), b = random_f32({129, 70}, 2, 0.05f, 0.5f);
  const Attributes none;
  check(Op::MatMul, none, {&a, &b}, kF32, {false, true}, "[3,65,129] x [129,70]", true);
  const Tensor a2 = random_f32({4, 33, 64}, 3, 0.05f, 0.5f), b2 = random_f32({4, 64, 48}, 4, 0.05f, 0.5f);
  check(Op::MatMul, none, {&a2, &b2}, kF32, {false, false}, "[4,33,64] x [4,64,48]", true);
}

TEST(CudaGemm, Gemm) {
  KILN_REQUIRE_GPU();
  const int64_t M = 6, K = 11, N = 9;
  const std::vector<Dims> c_shapes = {{}, {1}, {N}, {1, N}, {M, 1}, {M, N}};
  uint32_t seed = 200;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const Tensor a = random_f32(ta ? Dims{K, M} : Dims{M, K}, seed++);
      const Tensor b = random_f32(tb ? Dims{N, K} : Dims{K, N}, seed++);
      const std::string tr = "transA " + std::to_string(ta) + " transB " + std::to_string(tb);
      for (DataType dt : kDtypes) {
        for (const Dims& cd : c_shapes) {
          const Tensor c = random_f32(cd, seed++);
          for (auto [alpha, beta] : {std::pair{1.0f, 1.0f}, std::pair{0.5f, 2.0f}, std::pair{-1.5f, 0.0f}}) {
            Attributes at;
            at.set("transA", int64_t{ta});
            at.set("transB", int64_t{tb});
            at.set("alpha", alpha);
            at.set("beta", beta);
            const std::string what =
                tr + " C" + dims_str(cd) + " alpha " + std::to_string(alpha) + " beta " + std::to_string(beta);
            check(Op::Gemm, at, {&a, &b, &c}, dt, {false, true, true}, what);
            check(Op::Gemm, at, {&a, &b, &c}, dt, {false, false, false}, what + " runtime B, C");
          }
        }
        Attributes plain;
        plain.set("transA", int64_t{ta});
        plain.set("transB", int64_t{tb});
        check(Op::Gemm, plain, {&a, &b}, dt, {false, true}, tr + " no C");
        check(Op::Gemm, plain, {&a, &b, nullptr}, dt, {false, true}, tr + " omitted C");
      }
    }
  }
  // A classifier: [2, 2048] x [1000, 2048]^T + [1000].
  const Tensor a = random_f32({2, 2048}, 1, 0.05f, 0.5f), b = random_f32({1000, 2048}, 2, 0.05f, 0.5f),
               c = random_f32({1000}, 3);
  Attributes fc;
  fc.set("transB", int64_t{1});
  for (DataType dt : kDtypes) check(Op::Gemm, fc, {&a, &b, &c}, dt, {false, true, true}, "classifier");
}

TEST(CudaGemm, FusedGemm) {
  KILN_REQUIRE_GPU();
  struct Case {
    Dims a;
    int64_t n;
    Dims bias;
  };
  const std::vector<Case> cases = {{{1, 13, 48}, 37, {37}}, {{2, 3, 5, 16}, 8, {1, 8}}, {{16}, 20, {20}},
                                   {{64, 96}, 128, {128}}};
  const std::vector<std::pair<std::string, std::string>> acts = {
      {"None", ""}, {"Relu", ""}, {"Gelu", "none"}, {"Gelu", "tanh"}};
  uint32_t seed = 300;
  for (const Case& c : cases) {
    const int64_t K = c.a.back();
    // Small enough values that GELU's negative side is exercised (not only ~0 or ~x).
    const Tensor a = random_f32(c.a, seed++, 0.05f, 0.6f), w = random_f32({K, c.n}, seed++, 0.05f, 0.6f),
                 b = random_f32(c.bias, seed++);
    for (const auto& [act, approx] : acts) {
      Attributes at;
      at.set("activation", act);
      if (!approx.empty()) at.set("approximate", approx);
      const std::string what = act + approx + " " + dims_str(c.a) + " N=" + std::to_string(c.n);
      for (DataType dt : kDtypes) {
        check(Op::FusedGemm, at, {&a, &w, &b}, dt, {false, true, true}, what);
        check(Op::FusedGemm, at, {&a, &w, &b}, dt, {false, false, false}, what + " runtime W, B");
      }
    }
  }
}

TEST(CudaGemm, EmptyAndZeroK) {
  KILN_REQUIRE_GPU();
  const Attributes none;
  for (DataType dt : kDtypes) {
    const Tensor a0 = random_f32({0, 7}, 1), b = random_f32({7, 5}, 2);
    check(Op::MatMul, none, {&a0, &b}, dt, {false, true}, "M = 0");
    const Tensor a3 = random_f32({2, 0, 7}, 3);
    check(Op::MatMul, none, {&a3, &b}, dt, {false, true}, "batch M = 0");
    const Tensor ak = random_f32({2, 4, 0}, 4), bk = random_f32({0, 5}, 5);
    check(Op::MatMul, none, {&ak, &bk}, dt, {false, true}, "K = 0 (zeros)");
    const Tensor bb0 = random_f32({0, 7, 5}, 6), a2 = random_f32({3, 7}, 7);
    check(Op::MatMul, none, {&a2, &bb0}, dt, {false, false}, "batch 0");

    const Tensor ga = random_f32({4, 0}, 8), gb = random_f32({0, 6}, 9), gc = random_f32({4, 1}, 10);
    Attributes g;
    g.set("beta", 0.5f);
    check(Op::Gemm, g, {&ga, &gb, &gc}, dt, {false, true, true}, "K = 0 -> beta * C");
    check(Op::Gemm, none, {&ga, &gb}, dt, {false, true}, "K = 0, no C");

    Attributes relu;
    relu.set("activation", std::string("Relu"));
    const Tensor fb = random_f32({6}, 11);
    check(Op::FusedGemm, relu, {&ak, &gb, &fb}, dt, {false, true, true}, "K = 0 -> relu(bias)");
  }
}

TEST(CudaGemm, LargerShapes) {
  KILN_REQUIRE_GPU();
  const Attributes none;
  const Tensor a = random_f32({2, 128, 384}, 1, 0.05f, 0.5f), b = random_f32({384, 320}, 2, 0.05f, 0.5f);
  for (DataType dt : kDtypes) check(Op::MatMul, none, {&a, &b}, dt, {false, true}, "[2,128,384] x [384,320]");
  // Attention-like batched products with odd sizes.
  const Tensor q = random_f32({2, 4, 77, 40}, 3, 0.05f, 0.5f), k = random_f32({2, 4, 40, 77}, 4, 0.05f, 0.5f);
  for (DataType dt : kDtypes) check(Op::MatMul, none, {&q, &k}, dt, {false, false}, "Q x K^T");
}

TEST(CudaGemm, RejectsWhatItCannotRun) {
  KILN_REQUIRE_GPU();
  const Tensor a = random_f32({4, 8}, 1), w = random_f32({8, 5}, 2), b = random_f32({5}, 3);
  const Attributes none;
  auto supports = [](const kiln::cuda::LayerSpec& s) {
    const kiln::cuda::Tactic* t = cuda_tactic_for(kTactic, s.op);
    return t != nullptr && t->supports(s);
  };
  const Tensor ai = convert(a, DataType::kInt32), wi = convert(w, DataType::kInt32);
  EXPECT_FALSE(supports(make_cuda_spec(Op::MatMul, &none, {&ai, &wi}, {DataType::kInt32})));
  const Tensor a64 = convert(a, DataType::kFloat64), w64 = convert(w, DataType::kFloat64);
  EXPECT_FALSE(supports(make_cuda_spec(Op::MatMul, &none, {&a64, &w64}, {DataType::kFloat64})));
  const Tensor w16 = convert(w, kF16);
  EXPECT_FALSE(supports(make_cuda_spec(Op::MatMul, &none, {&a, &w16}, {kF32})));  // mixed dtypes
  EXPECT_TRUE(supports(make_cuda_spec(Op::MatMul, &none, {&a, &w}, {kF32})));
  Attributes tanh_act;
  tanh_act.set("activation", std::string("Tanh"));
  EXPECT_FALSE(supports(make_cuda_spec(Op::FusedGemm, &tanh_act, {&a, &w, &b}, {kF32}, {false, true, true})));
  Attributes bad_gelu;
  bad_gelu.set("activation", std::string("Gelu"));
  bad_gelu.set("approximate", std::string("sigmoid"));
  EXPECT_FALSE(supports(make_cuda_spec(Op::FusedGemm, &bad_gelu, {&a, &w, &b}, {kF32}, {false, true, true})));
  Attributes relu;
  relu.set("activation", std::string("Relu"));
  const Tensor b_bad = random_f32({4, 5}, 4);  // a full bias is not a row
  EXPECT_FALSE(supports(make_cuda_spec(Op::FusedGemm, &relu, {&a, &w, &b_bad}, {kF32}, {false, true, true})));
  EXPECT_TRUE(supports(make_cuda_spec(Op::FusedGemm, &relu, {&a, &w, &b}, {kF32}, {false, true, true})));
  const Tensor c3 = random_f32({1, 4, 5}, 5);
  EXPECT_FALSE(supports(make_cuda_spec(Op::Gemm, &none, {&a, &w, &c3}, {kF32}, {false, true, true})));
  // Shapes that do not multiply fail prepare cleanly.
  const Tensor w_bad = random_f32({7, 5}, 6);
  CudaRun r = run_cuda(kTactic, make_cuda_spec(Op::MatMul, &none, {&a, &w_bad}, {kF32}), {&a, &w_bad},
                       {{kF32, {4, 5}}});
  EXPECT_FALSE(r.status.is_ok());
  const Tensor cb = random_f32({3, 5}, 7);  // does not broadcast to [4, 5]
  r = run_cuda(kTactic, make_cuda_spec(Op::Gemm, &none, {&a, &w, &cb}, {kF32}), {&a, &w, &cb}, {{kF32, {4, 5}}});
  EXPECT_FALSE(r.status.is_ok());
}

// enqueue() captured into a CUDA graph and replayed gives the same result.
TEST(CudaGemm, GraphCapture) {
  KILN_REQUIRE_GPU();
  Attributes gelu;
  gelu.set("activation", std::string("Gelu"));  // erf: BIAS epilogue + own kernel
  const Tensor a = convert(random_f32({2, 1, 6, 32}, 1, 0.05f, 0.6f), kF16);
  const Tensor w = convert(random_f32({32, 24}, 2, 0.05f, 0.6f), kF16);
  const Tensor bias = convert(random_f32({24}, 3), kF16);
  const std::vector<const Tensor*> in{&a, &w, &bias};
  const kiln::cuda::LayerSpec spec = make_cuda_spec(Op::FusedGemm, &gelu, in, {kF16}, {false, true, true});
  const kiln::cuda::Tactic* t = cuda_tactic_for(kTactic, Op::FusedGemm);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->supports(spec));
  auto k = t->create(spec);
  ASSERT_TRUE(k.is_ok()) << k.status().message();
  const Dims out_dims{2, 1, 6, 24};
  size_t ws = 0;
  ASSERT_TRUE((*k)->prepare({{kF16, a.dims()}, {kF16, w.dims()}, {kF16, bias.dims()}}, {{kF16, out_dims}}, &ws).is_ok());
  kiln::cuda::DeviceBuffer da, dw, db, dy, dws;
  ASSERT_TRUE(da.upload(a.raw(), a.nbytes()).is_ok());
  ASSERT_TRUE(dw.upload(w.raw(), w.nbytes()).is_ok());
  ASSERT_TRUE(db.upload(bias.raw(), bias.nbytes()).is_ok());
  Tensor y(kF16, out_dims);
  ASSERT_TRUE(dy.reserve(y.nbytes()).is_ok());
  ASSERT_TRUE(dws.reserve(ws ? ws : 1).is_ok());
  Tensor va = Tensor::wrap(kF16, a.dims(), da.get()), vw = Tensor::wrap(kF16, w.dims(), dw.get()),
         vb = Tensor::wrap(kF16, bias.dims(), db.get()), vy = Tensor::wrap(kF16, out_dims, dy.get());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(dy.get(), 0xFF, y.nbytes(), stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status s = (*k)->enqueue({&va, &vw, &vb}, {&vy}, ws ? dws.get() : nullptr, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(s.is_ok()) << s.message();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(y.raw(), dy.get(), y.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  const Tensor af = to_f32(a), wf = to_f32(w), bf = to_f32(bias);
  std::vector<Tensor> ref = run_ref(Op::FusedGemm, gelu, {&af, &wf, &bf});
  ASSERT_EQ(ref.size(), 1u);
  expect_near_tensor(to_f32(y), ref[0], 2e-2, "FusedGemm gelu in a CUDA graph");
}

// Throughput of a 4096^3 product (prints, never asserts).
TEST(CudaGemm, PerfSanity) {
  KILN_REQUIRE_GPU();
  const int64_t n = 4096;
  for (DataType dt : {kF16, kBF16, kF32}) {
    const size_t es = dtype_size(dt);
    const size_t bytes = static_cast<size_t>(n * n) * es;
    // Cheap pseudo-random operands in [-1, 1): an LCG on the host, converted per dtype.
    std::vector<float> host(static_cast<size_t>(n * n));
    uint32_t x = 12345;
    for (float& v : host) {
      x = x * 1664525u + 1013904223u;
      v = static_cast<float>(x >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
    }
    Tensor hf = Tensor::wrap(kF32, {n, n}, host.data());
    const Tensor ha = convert(hf, dt);
    kiln::cuda::DeviceBuffer da, db, dy, dws;
    ASSERT_TRUE(da.upload(ha.raw(), bytes).is_ok());
    ASSERT_TRUE(db.upload(ha.raw(), bytes).is_ok());
    ASSERT_TRUE(dy.reserve(bytes).is_ok());
    const Attributes none;
    kiln::cuda::LayerSpec spec;
    spec.op = Op::MatMul;
    spec.attrs = &none;
    spec.input_dtypes = {dt, dt};
    spec.output_dtypes = {dt};
    spec.constants = {nullptr, nullptr};
    kiln::cuda::Env env = test_env();
    env.tf32 = dt == kF32;
    spec.env = &env;
    const kiln::cuda::Tactic* t = cuda_tactic_for(kTactic, Op::MatMul);
    ASSERT_NE(t, nullptr);
    auto k = t->create(spec);
    ASSERT_TRUE(k.is_ok());
    size_t ws = 0;
    ASSERT_TRUE((*k)->prepare({{dt, {n, n}}, {dt, {n, n}}}, {{dt, {n, n}}}, &ws).is_ok());
    ASSERT_TRUE(dws.reserve(ws ? ws : 1).is_ok());
    Tensor va = Tensor::wrap(dt, {n, n}, da.get()), vb = Tensor::wrap(dt, {n, n}, db.get()),
           vy = Tensor::wrap(dt, {n, n}, dy.get());
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*k)->enqueue({&va, &vb}, {&vy}, dws.get(), stream).is_ok());
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const int reps = 20;
    cudaEventRecord(e0, stream);
    for (int i = 0; i < reps; ++i) ASSERT_TRUE((*k)->enqueue({&va, &vb}, {&vy}, dws.get(), stream).is_ok());
    cudaEventRecord(e1, stream);
    ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    const double tflops = 2.0 * n * n * n * reps / (ms * 1e-3) / 1e12;
    std::printf("cublaslt_gemm MatMul %s%s 4096^3: %.3f ms, %.1f TFLOP/s (workspace %zu bytes)\n", dtype_name(dt),
                dt == kF32 ? " (tf32)" : "", ms / reps, tflops, ws);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(stream);
  }
}

}  // namespace
}  // namespace kiln::testing::gpu
