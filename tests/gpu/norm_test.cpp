// CUDA normalization kernels (kiln_cuda_layernorm for LayerNormalization, RMSNormalization
// and FusedResidualNorm; kiln_cuda_softmax for Softmax and LogSoftmax) against the CPU
// reference kernels, in float32, float16 and bfloat16. Low-precision runs compare with the
// float32 reference on the rounded inputs.
#include <cmath>
#include <random>
#include <string>
#include <vector>

// cuda_test_util.h names TensorShape unqualified; declare it first (harmless if the header
// gets its own using-declaration).
#include "backends/cpu/fast/fast_kernel.h"
namespace kiln::testing::gpu {
using kiln::fast::TensorShape;
}  // namespace kiln::testing::gpu

#include "cuda_test_util.h"

namespace kiln::testing::gpu {
namespace {

const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16};

double tol_for(DataType dt, double f32_tol) {
  return dt == DataType::kFloat32 ? f32_tol : dt == DataType::kFloat16 ? 2e-2 : 5e-2;
}

// Runs `tactic` on `op` with the float32 inputs `ins` (undefined: omitted) converted to
// `dt`; `wanted` says which outputs the layer has. Compares each wanted output with the
// float32 reference computed on the (rounded) inputs.
void check(const std::string& tactic, Op op, const Attributes& at, const std::vector<Tensor>& ins,
           const std::vector<bool>& wanted, DataType dt, double f32_tol, const std::string& what) {
  std::vector<Tensor> dev_in, ref_in;
  for (const Tensor& t : ins) {
    if (!t.defined()) {
      dev_in.emplace_back();
      ref_in.emplace_back();
      continue;
    }
    Tensor c = dt == DataType::kFloat32 ? t.clone() : convert(t, dt);
    ref_in.push_back(dt == DataType::kFloat32 ? t.clone() : to_f32(c));
    dev_in.push_back(std::move(c));
  }
  std::vector<const Tensor*> dev_ptrs, ref_ptrs;
  for (size_t i = 0; i < ins.size(); ++i) {
    dev_ptrs.push_back(dev_in[i].defined() ? &dev_in[i] : nullptr);
    ref_ptrs.push_back(ref_in[i].defined() ? &ref_in[i] : nullptr);
  }
  std::vector<Tensor> ref = run_ref(op, at, ref_ptrs, wanted.size(), wanted);
  ASSERT_EQ(ref.size(), wanted.size()) << what;
  std::vector<DataType> out_dtypes;
  std::vector<TensorShape> out_shapes;
  for (size_t i = 0; i < wanted.size(); ++i) {
    out_dtypes.push_back(wanted[i] ? dt : DataType::kUndefined);
    out_shapes.push_back(wanted[i] ? TensorShape{dt, ref[i].dims()} : TensorShape{});
  }
  const kiln::cuda::LayerSpec spec = make_cuda_spec(op, &at, dev_ptrs, out_dtypes);
  CudaRun r = run_cuda(tactic, spec, dev_ptrs, out_shapes);
  ASSERT_TRUE(r.status.is_ok()) << what << ": " << r.status.message();
  const double tol = tol_for(dt, f32_tol);
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (!wanted[i]) continue;
    const Tensor got = dt == DataType::kFloat32 ? r.outputs[i].clone() : to_f32(r.outputs[i]);
    expect_near_tensor(got, ref[i], tol, cat(what, " output ", i));
  }
}

Attributes axis_attrs(int64_t axis) {
  Attributes a;
  a.set("axis", axis);
  return a;
}

std::string dt_name(DataType dt) { return dtype_name(dt); }

TEST(CudaNorm, SoftmaxAnyAxis) {
  KILN_REQUIRE_GPU();
  struct Case {
    Dims dims;
    int64_t axis;
  };
  const std::vector<Case> cases = {{{12, 128, 128}, -1}, {{2, 12, 16, 9}, 1}, {{3, 7}, 0},     {{2, 3, 300}, 1},
                                   {{5}, 0},             {{4, 1}, -1},        {{2, 5, 3}, 2},  {{1, 3, 1000}, -1},
                                   {{2, 20000}, -1},     {{3, 37}, -1},       {{}, 0}};
  for (DataType dt : kDtypes) {
    for (Op op : {Op::Softmax, Op::LogSoftmax}) {
      for (const Case& c : cases) {
        const uint32_t seed = fresh_seed();
        check("kiln_cuda_softmax", op, axis_attrs(c.axis), {random_f32(c.dims, seed, 0.01f, 8.0f)}, {true}, dt, 1e-5,
              cat(op_name(op), " ", dt_name(dt), " ", dims_str(c.dims), " axis ", c.axis, " seed ", seed));
      }
    }
  }
}

TEST(CudaNorm, SoftmaxLegacyCoerce2d) {
  KILN_REQUIRE_GPU();
  Attributes legacy;
  legacy.set("kiln_coerce_2d", int64_t{1});
  legacy.set("axis", int64_t{1});
  for (DataType dt : kDtypes) {
    check("kiln_cuda_softmax", Op::Softmax, legacy, {random_f32({2, 3, 4}, fresh_seed())}, {true}, dt, 1e-5,
          cat("coerce 2d ", dt_name(dt)));
  }
}

TEST(CudaNorm, LayerNormMatchesReference) {
  KILN_REQUIRE_GPU();
  struct Case {
    Dims x, scale;
    int64_t axis;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{4, 128, 768}, {768}, -1, true},  {{3, 37}, {37}, -1, true},        {{2, 5, 37}, {37}, -1, false},
      {{2, 3, 4, 5}, {4, 5}, 2, true},   {{2, 3, 4, 5}, {5}, 2, true},     {{2, 6, 7}, {1}, -1, true},
      {{8, 1024}, {1024}, 1, true},      {{2, 4096}, {4096}, -1, true},    {{1, 20000}, {20000}, -1, true},
      {{3, 4, 5}, {3, 4, 5}, 0, true},   {{1, 1}, {1}, -1, true}};
  for (DataType dt : kDtypes) {
    for (const Case& c : cases) {
      const uint32_t seed = fresh_seed();
      std::vector<Tensor> ins = {random_f32(c.x, seed), random_f32(c.scale, seed + 1)};
      if (c.bias) ins.push_back(random_f32(c.scale, seed + 2));
      Attributes a = axis_attrs(c.axis);
      a.set("epsilon", 1e-5f);
      check("kiln_cuda_layernorm", Op::LayerNormalization, a, ins, {true}, dt, 2e-5,
            cat("LayerNorm ", dt_name(dt), " ", dims_str(c.x), " axis ", c.axis, " seed ", seed));
    }
  }
}

TEST(CudaNorm, LayerNormLargeMeanSmallSpread) {
  KILN_REQUIRE_GPU();
  Tensor x = random_f32({16, 768}, fresh_seed(), 0.01f, 0.1f);
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] += 100.0f;
  check("kiln_cuda_layernorm", Op::LayerNormalization, {}, {x, random_f32({768}, 5), random_f32({768}, 6)}, {true},
        DataType::kFloat32, 1e-3, "large mean");
}

TEST(CudaNorm, RMSNormMatchesReference) {
  KILN_REQUIRE_GPU();
  for (DataType dt : kDtypes) {
    const uint32_t seed = fresh_seed();
    check("kiln_cuda_layernorm", Op::RMSNormalization, {}, {random_f32({6, 33}, seed), random_f32({33}, seed + 1)},
          {true}, dt, 2e-5, cat("RMSNorm [6,33] ", dt_name(dt), " seed ", seed));
    check("kiln_cuda_layernorm", Op::RMSNormalization, axis_attrs(1),
          {random_f32({2, 3, 4}, seed + 2), random_f32({3, 4}, seed + 3)}, {true}, dt, 2e-5,
          cat("RMSNorm axis 1 ", dt_name(dt), " seed ", seed));
    check("kiln_cuda_layernorm", Op::RMSNormalization, {}, {random_f32({64, 4096}, seed + 4), random_f32({4096}, seed + 5)},
          {true}, dt, 2e-5, cat("RMSNorm 4096 ", dt_name(dt), " seed ", seed));
    check("kiln_cuda_layernorm", Op::RMSNormalization, {}, {random_f32({30, 1024}, seed + 6), random_f32({1}, seed + 7)},
          {true}, dt, 2e-5, cat("RMSNorm scalar scale ", dt_name(dt), " seed ", seed));
  }
}

TEST(CudaNorm, FusedResidualNorm) {
  KILN_REQUIRE_GPU();
  struct Case {
    Dims x;
    std::string norm;
    bool bias, sum;
  };
  const std::vector<Case> cases = {{{2, 128, 768}, "LayerNorm", true, true},  {{2, 128, 768}, "LayerNorm", true, false},
                                   {{3, 37}, "LayerNorm", false, true},       {{3, 37}, "RMSNorm", false, true},
                                   {{4, 4096}, "RMSNorm", false, false},      {{5, 1024}, "LayerNorm", true, true}};
  for (DataType dt : kDtypes) {
    for (const Case& c : cases) {
      const uint32_t seed = fresh_seed();
      const int64_t n = c.x.back();
      std::vector<Tensor> ins = {random_f32(c.x, seed), random_f32(c.x, seed + 1), random_f32({n}, seed + 2)};
      if (c.bias) ins.push_back(random_f32({n}, seed + 3));
      Attributes a;
      a.set("norm", c.norm);
      a.set("epsilon", 1e-5f);
      check("kiln_cuda_layernorm", Op::FusedResidualNorm, a, ins, {true, c.sum}, dt, 2e-5,
            cat("FusedResidualNorm ", c.norm, " ", dt_name(dt), " ", dims_str(c.x), c.bias ? " bias" : "",
                c.sum ? " sum" : "", " seed ", seed));
    }
  }
}

TEST(CudaNorm, EmptyTensorsAreNoOps) {
  KILN_REQUIRE_GPU();
  Tensor x(DataType::kFloat32, {0, 768});
  Tensor s = random_f32({768}, 1), b = random_f32({768}, 2);
  Attributes none;
  {
    std::vector<const Tensor*> ins = {&x, &s, &b};
    auto spec = make_cuda_spec(Op::LayerNormalization, &none, ins, {DataType::kFloat32});
    CudaRun r = run_cuda("kiln_cuda_layernorm", spec, ins, {{DataType::kFloat32, {0, 768}}});
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    EXPECT_EQ(r.outputs[0].size(), 0);
  }
  {
    Tensor e(DataType::kFloat32, {3, 0, 5});
    std::vector<const Tensor*> ins = {&e};
    Attributes a = axis_attrs(1);
    auto spec = make_cuda_spec(Op::Softmax, &a, ins, {DataType::kFloat32});
    CudaRun r = run_cuda("kiln_cuda_softmax", spec, ins, {{DataType::kFloat32, {3, 0, 5}}});
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  }
}

TEST(CudaNorm, RejectsWhatItCannotDo) {
  KILN_REQUIRE_GPU();
  const auto supports = [](const kiln::cuda::LayerSpec& s, const char* name) {
    const kiln::cuda::Tactic* t = cuda_tactic_for(name, s.op);
    return t && t->supports(s);
  };
  Tensor x = random_f32({2, 8}, 1), sc = random_f32({8}, 2), bi = random_f32({8}, 3);
  Attributes none;
  // Mean / InvStdDev wanted.
  EXPECT_FALSE(supports(make_cuda_spec(Op::LayerNormalization, &none, {&x, &sc, &bi},
                                       {DataType::kFloat32, DataType::kFloat32, DataType::kUndefined}),
                        "kiln_cuda_layernorm"));
  EXPECT_TRUE(supports(make_cuda_spec(Op::LayerNormalization, &none, {&x, &sc, &bi},
                                      {DataType::kFloat32, DataType::kUndefined, DataType::kUndefined}),
                       "kiln_cuda_layernorm"));
  // Mixed dtypes.
  Tensor sc16 = convert(sc, DataType::kFloat16);
  EXPECT_FALSE(supports(make_cuda_spec(Op::LayerNormalization, &none, {&x, &sc16, &bi}, {DataType::kFloat32}),
                        "kiln_cuda_layernorm"));
  // Double.
  Tensor xd = convert(x, DataType::kFloat64);
  EXPECT_FALSE(supports(make_cuda_spec(Op::Softmax, &none, {&xd}, {DataType::kFloat64}), "kiln_cuda_softmax"));
  // RMSNorm residual with bias.
  Attributes rms;
  rms.set("norm", std::string("RMSNorm"));
  EXPECT_FALSE(supports(make_cuda_spec(Op::FusedResidualNorm, &rms, {&x, &x, &sc, &bi}, {DataType::kFloat32}),
                        "kiln_cuda_layernorm"));
  // A scale that broadcasts inside the normalized axes fails prepare cleanly.
  Tensor x3 = random_f32({2, 3, 4}, 4), s31 = random_f32({3, 1}, 5);
  Attributes ax1 = axis_attrs(1);
  std::vector<const Tensor*> ins = {&x3, &s31};
  auto spec = make_cuda_spec(Op::LayerNormalization, &ax1, ins, {DataType::kFloat32});
  CudaRun r = run_cuda("kiln_cuda_layernorm", spec, ins, {{DataType::kFloat32, {2, 3, 4}}});
  EXPECT_FALSE(r.status.is_ok());
}

}  // namespace
}  // namespace kiln::testing::gpu
