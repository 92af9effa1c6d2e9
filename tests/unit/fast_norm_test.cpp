// Fast normalization kernels (kiln_softmax, kiln_layernorm, kiln_rmsnorm,
// kiln_residual_norm) against the reference kernels on random inputs.
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fast_kernel_test_util.h"

namespace kiln::testing::fast {
namespace {

// Runs tactic on `op`; `wanted` says which outputs the layer has (the others are omitted
// in the spec and not prepared); compares each wanted output with the reference.
void check(const std::string& tactic, Op op, const Attributes& at, const std::vector<Tensor>& ins,
           std::vector<bool> wanted, double tol, const std::string& what) {
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : ins) ptrs.push_back(t.defined() ? &t : nullptr);
  std::vector<Tensor> ref = run_ref(op, at, ptrs, wanted.size(), wanted);
  std::vector<DataType> out_dtypes;
  std::vector<TensorShape> out_shapes;
  for (size_t i = 0; i < wanted.size(); ++i) {
    out_dtypes.push_back(wanted[i] ? ref[i].dtype() : DataType::kUndefined);
    out_shapes.push_back(wanted[i] ? TensorShape{ref[i].dtype(), ref[i].dims()} : TensorShape{});
  }
  LayerSpec spec = make_spec(op, &at, ptrs, out_dtypes);
  FastRun r = run_fast(tactic, spec, ptrs, out_shapes);
  ASSERT_TRUE(r.status.is_ok()) << what << ": " << r.status.message();
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (wanted[i]) expect_near_tensor(r.outputs[i], ref[i], tol, cat(what, " output ", i));
  }
}

Attributes axis_attrs(int64_t axis) {
  Attributes a;
  a.set("axis", axis);
  return a;
}

TEST(FastNorm, SoftmaxAnyAxis) {
  struct Case {
    Dims dims;
    int64_t axis;
  };
  const std::vector<Case> cases = {{{12, 128, 128}, -1}, {{3, 7}, 0},  {{2, 3, 300}, 1}, {{5}, 0},
                                   {{4, 1}, -1},          {{2, 5, 3}, 2}, {{1, 3, 1000}, -1}, {{}, 0}};
  for (Op op : {Op::Softmax, Op::LogSoftmax}) {
    for (const Case& c : cases) {
      const uint32_t seed = fresh_seed();
      check("kiln_softmax", op, axis_attrs(c.axis), {random_f32(c.dims, seed, 0.01f, 8.0f)}, {true}, 1e-5,
            cat(op_name(op), dims_str(c.dims), " axis ", c.axis, " seed ", seed));
    }
  }
}

TEST(FastNorm, SoftmaxLegacyAndExtremes) {
  Attributes legacy = axis_attrs(1);
  legacy.set("kiln_coerce_2d", int64_t{1});
  check("kiln_softmax", Op::Softmax, legacy, {random_f32({2, 3, 4}, fresh_seed())}, {true}, 1e-5, "coerce 2d");
  // Large magnitudes (the max subtraction matters), -inf and NaN entries.
  Tensor x = random_f32({4, 50}, fresh_seed(), 20.0f, 80.0f);
  x.data<float>()[3] = -std::numeric_limits<float>::infinity();
  x.data<float>()[60] = std::numeric_limits<float>::quiet_NaN();
  for (Op op : {Op::Softmax, Op::LogSoftmax}) check("kiln_softmax", op, {}, {x}, {true}, 1e-5, "extremes");
}

TEST(FastNorm, LayerNormMatchesReference) {
  struct Case {
    Dims x, scale;
    int64_t axis;
    bool bias;
  };
  const std::vector<Case> cases = {{{128, 768}, {768}, -1, true},   {{4, 5, 6}, {5, 6}, 1, true},
                                   {{4, 5, 6}, {1, 5, 6}, -2, false}, {{3, 1}, {1}, -1, true},
                                   {{7, 33}, {1}, 1, false},          {{2, 3, 17}, {17}, 2, true},
                                   {{9}, {9}, 0, true}};
  for (const Case& c : cases) {
    for (bool stats : {false, true}) {
      const uint32_t seed = fresh_seed();
      std::vector<Tensor> ins = {random_f32(c.x, seed), random_f32(c.scale, seed + 1)};
      if (c.bias) ins.push_back(random_f32(c.scale, seed + 2));
      Attributes a = axis_attrs(c.axis);
      a.set("epsilon", 1e-3f);
      check("kiln_layernorm", Op::LayerNormalization, a, ins,
            stats ? std::vector<bool>{true, true, true} : std::vector<bool>{true}, 2e-5,
            cat("LayerNorm ", dims_str(c.x), " axis ", c.axis, stats ? " with stats" : "", " seed ", seed));
    }
  }
  // Rows with a large mean and a small spread: the two-pass variance keeps them accurate.
  Tensor x = random_f32({16, 512}, fresh_seed(), 0.01f, 0.1f);
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] += 1000.0f;
  check("kiln_layernorm", Op::LayerNormalization, {}, {x, random_f32({512}, 5), random_f32({512}, 6)}, {true, false, true},
        2e-4, "LayerNorm large mean, invstd only");
}

TEST(FastNorm, RMSNormMatchesReference) {
  check("kiln_rmsnorm", Op::RMSNormalization, {}, {random_f32({6, 33}, fresh_seed()), random_f32({33}, 7)}, {true}, 2e-5,
        "RMSNorm last axis");
  check("kiln_rmsnorm", Op::RMSNormalization, axis_attrs(1), {random_f32({2, 3, 4}, fresh_seed()), random_f32({3, 4}, 8)},
        {true}, 2e-5, "RMSNorm axis 1");
  check("kiln_rmsnorm", Op::RMSNormalization, {}, {random_f32({300, 1024}, fresh_seed()), random_f32({1}, 9)}, {true},
        2e-5, "RMSNorm scalar scale, threads");
}

TEST(FastNorm, FusedResidualNorm) {
  for (const Dims& d : {Dims{5, 768}, Dims{3, 17}, Dims{2, 64, 256}}) {
    for (bool want_sum : {false, true}) {
      const uint32_t seed = fresh_seed();
      const int64_t h = d.back();
      const Tensor x = random_f32(d, seed), r = random_f32(d, seed + 1);
      const Tensor s = random_f32({h}, seed + 2), b = random_f32({h}, seed + 3);
      Attributes ln;
      ln.set("norm", std::string("LayerNorm"));
      ln.set("epsilon", 1e-6f);
      const std::vector<bool> wanted = want_sum ? std::vector<bool>{true, true} : std::vector<bool>{true};
      check("kiln_residual_norm", Op::FusedResidualNorm, ln, {x, r, s, b}, wanted, 2e-5,
            cat("residual LayerNorm ", dims_str(d), " seed ", seed));
      check("kiln_residual_norm", Op::FusedResidualNorm, ln, {x, r, s}, wanted, 2e-5,
            cat("residual LayerNorm no bias ", dims_str(d), " seed ", seed));
      Attributes rms;
      rms.set("norm", std::string("RMSNorm"));
      check("kiln_residual_norm", Op::FusedResidualNorm, rms, {x, r, s}, wanted, 2e-5,
            cat("residual RMSNorm ", dims_str(d), " seed ", seed));
    }
  }
}

TEST(FastNorm, RejectsWhatItCannotDo) {
  const Tensor f = random_f32({4, 6}, 1), s = random_f32({6}, 2);
  const Tensor h(DataType::kFloat16, {4, 6}), dd(DataType::kFloat64, {4, 6});
  Attributes none;
  const std::vector<DataType> f32 = {DataType::kFloat32};
  EXPECT_TRUE(tactic_supports("kiln_softmax", make_spec(Op::Softmax, &none, {&f}, f32)));
  EXPECT_FALSE(tactic_supports("kiln_softmax", make_spec(Op::Softmax, &none, {&dd}, {DataType::kFloat64})));
  EXPECT_FALSE(tactic_supports("kiln_layernorm", make_spec(Op::LayerNormalization, &none, {&h, &s, &s}, {DataType::kFloat16})));
  // Statistics outputs in float64 (stash_type 11): not supported.
  Attributes stash;
  stash.set("stash_type", int64_t{11});
  EXPECT_FALSE(tactic_supports("kiln_layernorm", make_spec(Op::LayerNormalization, &stash, {&f, &s, &s},
                                                           {DataType::kFloat32, DataType::kFloat64})));
  EXPECT_TRUE(tactic_supports("kiln_layernorm", make_spec(Op::LayerNormalization, &stash, {&f, &s, &s}, f32)));
  Attributes rms_bias;
  rms_bias.set("norm", std::string("RMSNorm"));
  EXPECT_FALSE(tactic_supports("kiln_residual_norm", make_spec(Op::FusedResidualNorm, &rms_bias, {&f, &f, &s, &s}, f32)));
  Attributes unknown;
  unknown.set("norm", std::string("GroupNorm"));
  EXPECT_FALSE(tactic_supports("kiln_residual_norm", make_spec(Op::FusedResidualNorm, &unknown, {&f, &f, &s}, f32)));
  // A scale that broadcasts inside the normalized axes fails prepare (the reference runs).
  const Tensor x = random_f32({4, 5, 6}, 3), sc = random_f32({1, 6}, 4);
  Attributes a1 = axis_attrs(1);
  LayerSpec spec = make_spec(Op::LayerNormalization, &a1, {&x, &sc}, f32);
  EXPECT_FALSE(run_fast("kiln_layernorm", spec, {&x, &sc}, {{DataType::kFloat32, {4, 5, 6}}}).status.is_ok());
}

// Micro timing, fast (1 and 2 threads) vs reference; printed, not asserted.
TEST(FastNorm, MicroTiming) {
  Attributes none;
  const Tensor x = random_f32({128, 768}, 1), s = random_f32({768}, 2), b = random_f32({768}, 3);
  const Tensor z = random_f32({12, 128, 128}, 4);
  struct Case {
    const char* name;
    Op op;
    const char* tactic;
    std::vector<const Tensor*> ins;
  };
  for (const Case& c : {Case{"LayerNorm [128,768]", Op::LayerNormalization, "kiln_layernorm", {&x, &s, &b}},
                        Case{"Softmax [12,128,128]", Op::Softmax, "kiln_softmax", {&z}}}) {
    const std::vector<Tensor> ref = run_ref(c.op, none, c.ins);
    const double t1 = time_fast_ms(c.tactic, c.op, none, c.ins, shapes_of(ref), 1, 50);
    const double t2 = time_fast_ms(c.tactic, c.op, none, c.ins, shapes_of(ref), 2, 50);
    const double tr = min_time_ms([&] { (void)run_ref(c.op, none, c.ins); }, 5);
    std::printf("[ timing ] %s: fast %.3f ms (1 thread), %.3f ms (2 threads); reference %.3f ms\n", c.name, t1, t2, tr);
  }
}

}  // namespace
}  // namespace kiln::testing::fast
