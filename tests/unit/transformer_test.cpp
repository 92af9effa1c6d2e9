// Unit tests of the transformer and loss reference kernels: Attention (GQA, KV cache,
// masks, causal offsets), NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss,
// RMSNormalization, RotaryEmbedding, CumProd, Det, LinearAttention, SwiGLU and
// CausalConvWithState, on every float dtype, plus error handling for bad shapes/attributes.
// Expected values come from independent double-precision loops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "backends/cpu/reference/kernel.h"
#include "kernel_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- Attention ----

// Naive attention over [B, H, L, D] arrays: bias(b, h, i, j) is added to the scaled scores.
template <typename Bias>
std::vector<double> naive_attention(const std::vector<double>& q, const std::vector<double>& k,
                                    const std::vector<double>& v, int64_t B, int64_t Hq, int64_t Hkv, int64_t Lq,
                                    int64_t L, int64_t D, int64_t Dv, double scale, Bias bias) {
  std::vector<double> y(static_cast<size_t>(B * Hq * Lq * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t hk = h / (Hq / Hkv);
        std::vector<double> s(static_cast<size_t>(L));
        double m = -kInf;
        for (int64_t j = 0; j < L; ++j) {
          double acc = 0;
          for (int64_t e = 0; e < D; ++e) acc += q[((b * Hq + h) * Lq + i) * D + e] * k[((b * Hkv + hk) * L + j) * D + e];
          s[j] = acc * scale + bias(b, h, i, j);
          m = std::max(m, s[j]);
        }
        if (m == -kInf) continue;  // fully masked: zeros
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - m));
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < L; ++j) acc += s[j] / sum * v[((b * Hkv + hk) * L + j) * Dv + e];
          y[((b * Hq + h) * Lq + i) * Dv + e] = acc;
        }
      }
  return y;
}

TEST(TransformerAttention, GqaCausalWithPastAndFloatMask4d) {
  const int64_t B = 2, Hq = 4, Hkv = 2, Lq = 3, Lk = 3, P = 2, L = P + Lk, D = 4, Dv = 5;
  for (DataType dt : kFloatTypes) {
    auto qv = random_values(B * Hq * Lq * D, 1, -1, 1), kv = random_values(B * Hkv * Lk * D, 2, -1, 1);
    auto vv = random_values(B * Hkv * Lk * Dv, 3), pkv = random_values(B * Hkv * P * D, 4, -1, 1);
    auto pvv = random_values(B * Hkv * P * Dv, 5), mv = random_values(Lq * L, 6, -1, 0);
    Tensor q = make(dt, {B, Hq, Lq, D}, qv), k = make(dt, {B, Hkv, Lk, D}, kv), v = make(dt, {B, Hkv, Lk, Dv}, vv);
    Tensor pk = make(dt, {B, Hkv, P, D}, pkv), pv = make(dt, {B, Hkv, P, Dv}, pvv), mask = make(dt, {Lq, L}, mv);
    Attributes a;
    a.set("is_causal", int64_t{1});
    RunResult r = run_kernel(Op::Attention, {&q, &k, &v, &mask, &pk, &pv}, a, 3);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    ASSERT_EQ(r.outputs[0].dims(), (Dims{B, Hq, Lq, Dv}));
    ASSERT_EQ(r.outputs[1].dims(), (Dims{B, Hkv, L, D}));
    ASSERT_EQ(r.outputs[2].dims(), (Dims{B, Hkv, L, Dv}));
    // Full K/V = concat(past, new) along the sequence axis.
    std::vector<double> fk, fv;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hkv; ++h) {
        for (int64_t j = 0; j < P * D; ++j) fk.push_back(pkv[(b * Hkv + h) * P * D + j]);
        for (int64_t j = 0; j < Lk * D; ++j) fk.push_back(kv[(b * Hkv + h) * Lk * D + j]);
        for (int64_t j = 0; j < P * Dv; ++j) fv.push_back(pvv[(b * Hkv + h) * P * Dv + j]);
        for (int64_t j = 0; j < Lk * Dv; ++j) fv.push_back(vv[(b * Hkv + h) * Lk * Dv + j]);
      }
    expect_tensor_near(r.outputs[1], fk, 0, "present_key");
    expect_tensor_near(r.outputs[2], fv, 0, "present_value");
    auto want = naive_attention(qv, fk, fv, B, Hq, Hkv, Lq, L, D, Dv, 1 / std::sqrt(double(D)),
                                [&](int64_t, int64_t, int64_t i, int64_t j) {
                                  return mv[i * L + j] + (j <= i + P ? 0.0 : -kInf);
                                });
    expect_tensor_near(r.outputs[0], want, tol_for(dt) * 2, dtype_name(dt));
  }
}

TEST(TransformerAttention, ThreeDInputsMatch4dLayout) {
  // 3D [B, L, H*D] inputs are the 4D computation on transposed heads.
  const int64_t B = 1, H = 2, Lq = 2, L = 3, D = 3;
  auto qv = random_values(B * Lq * H * D, 11), kv = random_values(B * L * H * D, 12), vv = random_values(B * L * H * D, 13);
  Tensor q = make(DataType::kFloat32, {B, Lq, H * D}, qv), k = make(DataType::kFloat32, {B, L, H * D}, kv);
  Tensor v = make(DataType::kFloat32, {B, L, H * D}, vv);
  Attributes a;
  a.set("q_num_heads", H);
  a.set("kv_num_heads", H);
  a.set("scale", 0.25f);
  RunResult r = run_kernel(Op::Attention, {&q, &k, &v}, a);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  ASSERT_EQ(r.outputs[0].dims(), (Dims{B, Lq, H * D}));
  auto to4d = [&](const std::vector<double>& x, int64_t len) {
    std::vector<double> o;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < len; ++l)
        for (int64_t e = 0; e < D; ++e) o.push_back(x[(l * H + h) * D + e]);
    return o;
  };
  auto y4 = naive_attention(to4d(qv, Lq), to4d(kv, L), to4d(vv, L), B, H, H, Lq, L, D, D, 0.25,
                            [](int64_t, int64_t, int64_t, int64_t) { return 0.0; });
  std::vector<double> want;
  for (int64_t l = 0; l < Lq; ++l)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t e = 0; e < D; ++e) want.push_back(y4[(h * Lq + l) * D + e]);
  expect_tensor_near(r.outputs[0], want, 1e-5, "3d");
}

TEST(TransformerAttention, FullyMaskedRowIsZeroAndNonpadOffsetsCausal) {
  const int64_t B = 2, H = 1, Lq = 2, L = 4, D = 2;
  auto qv = random_values(B * H * Lq * D, 21), kv = random_values(B * H * L * D, 22), vv = random_values(B * H * L * D, 23);
  Tensor q = make(DataType::kFloat32, {B, H, Lq, D}, qv), k = make(DataType::kFloat32, {B, H, L, D}, kv);
  Tensor v = make(DataType::kFloat32, {B, H, L, D}, vv);
  // Row 0 of the boolean mask attends nothing.
  Tensor mask = make_tensor<bool>({Lq, L}, {false, false, false, false, true, true, true, true});
  Attributes a;
  a.set("qk_matmul_output_mode", int64_t{3});
  RunResult r = run_kernel(Op::Attention, {&q, &k, &v, &mask}, a, 4);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t e = 0; e < D; ++e) EXPECT_EQ(r.outputs[0].get_double((b * Lq + 0) * D + e), 0.0);
    for (int64_t j = 0; j < L; ++j) EXPECT_EQ(r.outputs[3].get_double((b * Lq + 0) * L + j), 0.0);
    double psum = 0;
    for (int64_t j = 0; j < L; ++j) psum += r.outputs[3].get_double((b * Lq + 1) * L + j);
    EXPECT_NEAR(psum, 1.0, 1e-6);
  }
  // External cache: causal frontier at i + nonpad[b] - Lq, keys >= nonpad[b] masked.
  Tensor nonpad = make_tensor<int64_t>({B}, {3, 2});
  Attributes c;
  c.set("is_causal", int64_t{1});
  RunResult r2 = run_kernel(Op::Attention, {&q, &k, &v, nullptr, nullptr, nullptr, &nonpad}, c);
  ASSERT_TRUE(r2.status.is_ok()) << r2.status.message();
  const int64_t np[2] = {3, 2};
  auto want = naive_attention(qv, kv, vv, B, H, H, Lq, L, D, D, 1 / std::sqrt(2.0),
                              [&](int64_t b, int64_t, int64_t i, int64_t j) {
                                return (j <= i + np[b] - Lq && j < np[b]) ? 0.0 : -kInf;
                              });
  expect_tensor_near(r2.outputs[0], want, 1e-5, "nonpad causal");
}

TEST(TransformerAttention, RejectsBadShapesAndAttributes) {
  auto v4 = random_values(2 * 3 * 4 * 8, 31);
  Tensor q = make(DataType::kFloat32, {2, 3, 4, 8}, v4);
  auto kvals = random_values(2 * 2 * 4 * 8, 32);
  Tensor k2 = make(DataType::kFloat32, {2, 2, 4, 8}, kvals);  // 3 q heads vs 2 kv heads
  Attributes none;
  EXPECT_FALSE(run_kernel(Op::Attention, {&q, &k2, &k2}, none).status.is_ok());
  auto v3 = random_values(2 * 4 * 24, 33);
  Tensor q3 = make(DataType::kFloat32, {2, 4, 24}, v3);
  EXPECT_FALSE(run_kernel(Op::Attention, {&q3, &q, &q}, none).status.is_ok());   // rank mismatch
  EXPECT_FALSE(run_kernel(Op::Attention, {&q3, &q3, &q3}, none).status.is_ok());  // 3D without heads
  Attributes heads;
  heads.set("q_num_heads", int64_t{5});
  heads.set("kv_num_heads", int64_t{5});
  EXPECT_FALSE(run_kernel(Op::Attention, {&q3, &q3, &q3}, heads).status.is_ok());  // 24 % 5 != 0
  auto mv = random_values(3 * 5, 34);
  Tensor bad_mask = make(DataType::kFloat32, {3, 5}, mv);  // 3 rows vs 4 queries, 5 keys vs 4
  EXPECT_FALSE(run_kernel(Op::Attention, {&q, &q, &q, &bad_mask}, none).status.is_ok());
  EXPECT_FALSE(run_kernel(Op::Attention, {&q, &q, &q, nullptr, &q}, none).status.is_ok());  // past_key alone
  Tensor nonpad = make_tensor<int64_t>({2}, {4, 4});
  EXPECT_FALSE(run_kernel(Op::Attention, {&q, &q, &q, nullptr, &q, &q, &nonpad}, none).status.is_ok());
  Attributes mode;
  mode.set("qk_matmul_output_mode", int64_t{7});
  EXPECT_FALSE(run_kernel(Op::Attention, {&q, &q, &q}, mode, 4).status.is_ok());
}

// ---- losses ----

TEST(TransformerLoss, NllAndSoftmaxCrossEntropyWeightedMeanWithIgnoreIndex) {
  const int64_t N = 3, C = 4, D1 = 2;
  const std::vector<int64_t> tv = {0, 3, 2, -1, 1, 1};  // -1 is ignored
  Tensor target = make_tensor<int64_t>({N, D1}, tv);
  for (DataType dt : kFloatTypes) {
    auto xv = random_values(N * C * D1, 41), wv = random_values(C, 42, 0.2, 1.5);
    Tensor x = make(dt, {N, C, D1}, xv), w = make(dt, {C}, wv);
    Attributes a;
    a.set("ignore_index", int64_t{-1});
    a.set("reduction", std::string("mean"));
    // log-softmax over classes, computed independently.
    std::vector<double> lp(xv.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D1; ++d) {
        double m = -kInf, s = 0;
        for (int64_t c = 0; c < C; ++c) m = std::max(m, xv[(n * C + c) * D1 + d]);
        for (int64_t c = 0; c < C; ++c) s += std::exp(xv[(n * C + c) * D1 + d] - m);
        for (int64_t c = 0; c < C; ++c) lp[(n * C + c) * D1 + d] = xv[(n * C + c) * D1 + d] - m - std::log(s);
      }
    double nll = 0, sce = 0, wsum = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D1; ++d) {
        const int64_t t = tv[n * D1 + d];
        if (t == -1) continue;
        nll -= wv[t] * xv[(n * C + t) * D1 + d];
        sce -= wv[t] * lp[(n * C + t) * D1 + d];
        wsum += wv[t];
      }
    RunResult r = run_kernel(Op::NegativeLogLikelihoodLoss, {&x, &target, &w}, a);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    EXPECT_EQ(r.outputs[0].rank(), 0);
    expect_tensor_near(r.outputs[0], {nll / wsum}, tol_for(dt), std::string("nll ") + dtype_name(dt));
    RunResult s = run_kernel(Op::SoftmaxCrossEntropyLoss, {&x, &target, &w}, a, 2);
    ASSERT_TRUE(s.status.is_ok()) << s.status.message();
    expect_tensor_near(s.outputs[0], {sce / wsum}, tol_for(dt), std::string("sce ") + dtype_name(dt));
    expect_tensor_near(s.outputs[1], lp, tol_for(dt), std::string("log_prob ") + dtype_name(dt));
  }
}

TEST(TransformerLoss, RejectsBadTargets) {
  auto xv = random_values(2 * 3, 51);
  Tensor x = make(DataType::kFloat32, {2, 3}, xv);
  Tensor out_of_range = make_tensor<int64_t>({2}, {0, 3});
  Tensor wrong_shape = make_tensor<int64_t>({3}, {0, 1, 2});
  Tensor ok = make_tensor<int64_t>({2}, {0, 2});
  Attributes a;
  EXPECT_FALSE(run_kernel(Op::NegativeLogLikelihoodLoss, {&x, &out_of_range}, a).status.is_ok());
  EXPECT_FALSE(run_kernel(Op::SoftmaxCrossEntropyLoss, {&x, &wrong_shape}, a).status.is_ok());
  Tensor bad_w = make_tensor<float>({2}, {1, 1});
  EXPECT_FALSE(run_kernel(Op::NegativeLogLikelihoodLoss, {&x, &ok, &bad_w}, a).status.is_ok());
  Attributes bad_red;
  bad_red.set("reduction", std::string("max"));
  EXPECT_FALSE(run_kernel(Op::NegativeLogLikelihoodLoss, {&x, &ok}, bad_red).status.is_ok());
  Attributes none_red;
  none_red.set("reduction", std::string("none"));
  RunResult r = run_kernel(Op::NegativeLogLikelihoodLoss, {&x, &ok}, none_red);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  expect_tensor_near(r.outputs[0], {-xv[0], -xv[5]}, 1e-6, "none");
}

// ---- RMSNormalization, RotaryEmbedding ----

TEST(TransformerNorm, RmsNormalizationOverTrailingAxes) {
  const int64_t A = 3, Bd = 2, Cd = 5;
  for (DataType dt : kFloatTypes) {
    auto xv = random_values(A * Bd * Cd, 61), sv = random_values(Cd, 62);
    Tensor x = make(dt, {A, Bd, Cd}, xv), s = make(dt, {Cd}, sv);
    Attributes a;
    a.set("axis", int64_t{-2});
    a.set("epsilon", 1e-3f);
    RunResult r = run_kernel(Op::RMSNormalization, {&x, &s}, a);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    std::vector<double> want;
    for (int64_t i = 0; i < A; ++i) {
      double ss = 0;
      for (int64_t k = 0; k < Bd * Cd; ++k) ss += xv[i * Bd * Cd + k] * xv[i * Bd * Cd + k];
      const double inv = 1 / std::sqrt(ss / (Bd * Cd) + double(1e-3f));
      for (int64_t k = 0; k < Bd * Cd; ++k) want.push_back(xv[i * Bd * Cd + k] * inv * sv[k % Cd]);
    }
    expect_tensor_near(r.outputs[0], want, tol_for(dt), dtype_name(dt));
  }
  auto xv = random_values(6, 63), sv = random_values(3, 64);
  Tensor x = make(DataType::kFloat32, {2, 3}, xv), s = make(DataType::kFloat32, {3}, sv);
  Attributes bad;
  bad.set("axis", int64_t{2});
  EXPECT_FALSE(run_kernel(Op::RMSNormalization, {&x, &s}, bad).status.is_ok());
  Tensor s4 = make_tensor<float>({4}, {1, 1, 1, 1});
  EXPECT_FALSE(run_kernel(Op::RMSNormalization, {&x, &s4}, Attributes()).status.is_ok());
}

TEST(TransformerRotary, InterleavedAndHalvesWithPositionIds) {
  const int64_t B = 1, S = 2, H = 2, D = 6, rd = 4, half = rd / 2, maxpos = 5;
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    for (int64_t inter = 0; inter < 2; ++inter) {
      auto xv = random_values(B * S * H * D, 71), cv = random_values(maxpos * half, 72, -1, 1);
      auto sv = random_values(maxpos * half, 73, -1, 1);
      Tensor x = make(dt, {B, S, H * D}, xv), cc = make(dt, {maxpos, half}, cv), sc = make(dt, {maxpos, half}, sv);
      Tensor pos = make_tensor<int64_t>({B, S}, {4, 1});
      Attributes a;
      a.set("num_heads", H);
      a.set("rotary_embedding_dim", rd);
      a.set("interleaved", inter);
      RunResult r = run_kernel(Op::RotaryEmbedding, {&x, &cc, &sc, &pos}, a);
      ASSERT_TRUE(r.status.is_ok()) << r.status.message();
      std::vector<double> want = xv;
      const int64_t p[2] = {4, 1};
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t k = 0; k < half; ++k) {
            const int64_t base = (s * H + h) * D;
            const int64_t i1 = base + (inter ? 2 * k : k), i2 = base + (inter ? 2 * k + 1 : k + half);
            const double c = cv[p[s] * half + k], sn = sv[p[s] * half + k];
            want[i1] = c * xv[i1] - sn * xv[i2];
            want[i2] = sn * xv[i1] + c * xv[i2];
          }
      expect_tensor_near(r.outputs[0], want, tol_for(dt) * 2, dtype_name(dt));
      Tensor bad_pos = make_tensor<int64_t>({B, S}, {5, 0});
      EXPECT_FALSE(run_kernel(Op::RotaryEmbedding, {&x, &cc, &sc, &bad_pos}, a).status.is_ok());
    }
  }
}

// ---- CumProd, Det, SwiGLU, CausalConvWithState, LinearAttention ----

TEST(TransformerMisc, CumProdExclusiveReverseAndIntegerWrap) {
  Tensor x = make_tensor<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor axis = make_scalar_int64(1);
  Attributes a;
  a.set("exclusive", int64_t{1});
  a.set("reverse", int64_t{1});
  RunResult r = run_kernel(Op::CumProd, {&x, &axis}, a);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  expect_tensor_near(r.outputs[0], {6, 3, 1, 30, 6, 1}, 0, "exclusive reverse");
  Tensor big = make_tensor<int64_t>({3}, {int64_t{1} << 40, int64_t{1} << 40, 3});
  Tensor axis0 = make_scalar_int64(0);
  RunResult w = run_kernel(Op::CumProd, {&big, &axis0}, Attributes());
  ASSERT_TRUE(w.status.is_ok());  // wraps instead of undefined behavior
  Tensor bad_axis = make_scalar_int64(2);
  EXPECT_FALSE(run_kernel(Op::CumProd, {&x, &bad_axis}, Attributes()).status.is_ok());
  for (DataType dt : kFloatTypes) {
    std::vector<double> v = {1.5, -2, 0.5, 3};
    Tensor f = make(dt, {4}, v);
    RunResult rf = run_kernel(Op::CumProd, {&f, &axis0}, Attributes());
    ASSERT_TRUE(rf.status.is_ok());
    expect_tensor_near(rf.outputs[0], {1.5, -3, -1.5, -4.5}, tol_for(dt), dtype_name(dt));
  }
}

TEST(TransformerMisc, DetOfBatchedMatrices) {
  for (DataType dt : kFloatTypes) {
    // det [[2,1,0],[1,3,1],[0,1,4]] = 18; a singular matrix gives 0; a row swap flips the sign.
    std::vector<double> v = {2, 1, 0, 1, 3, 1, 0, 1, 4, 1, 2, 3, 2, 4, 6, 0, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0, 1};
    Tensor x = make(dt, {3, 3, 3}, v);
    RunResult r = run_kernel(Op::Det, {&x}, Attributes());
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    EXPECT_EQ(r.outputs[0].dims(), (Dims{3}));
    expect_tensor_near(r.outputs[0], {18, 0, -1}, tol_for(dt), dtype_name(dt));
  }
  Tensor ns = make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_FALSE(run_kernel(Op::Det, {&ns}, Attributes()).status.is_ok());
}

TEST(TransformerMisc, SwiGluAndCausalConv) {
  for (DataType dt : kFloatTypes) {
    auto av = random_values(6, 81), bv = random_values(6, 82);
    Tensor a = make(dt, {2, 3}, av), b = make(dt, {2, 3}, bv);
    Attributes at;
    at.set("alpha", 0.7f);
    RunResult r = run_kernel(Op::SwiGLU, {&a, &b}, at);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    std::vector<double> want;
    for (size_t i = 0; i < av.size(); ++i) want.push_back(av[i] / (1 + std::exp(-double(0.7f) * av[i])) * bv[i]);
    expect_tensor_near(r.outputs[0], want, tol_for(dt) * 2, dtype_name(dt));
  }
  Tensor a = make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6}), b3 = make_tensor<float>({3}, {1, 2, 3});
  EXPECT_FALSE(run_kernel(Op::SwiGLU, {&a, &b3}, Attributes()).status.is_ok());

  // CausalConvWithState: B=1, C=2, L=3, k=3 with a past state.
  Tensor x = make_tensor<float>({1, 2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor w = make_tensor<float>({2, 1, 3}, {1, 10, 100, 2, 0, 1});
  Tensor bias = make_tensor<float>({2}, {0.5f, -1});
  Tensor past = make_tensor<float>({1, 2, 2}, {7, 8, 9, 10});
  RunResult c = run_kernel(Op::CausalConvWithState, {&x, &w, &bias, &past}, Attributes(), 2);
  ASSERT_TRUE(c.status.is_ok()) << c.status.message();
  // channel 0 padded: 7 8 1 2 3 ; channel 1 padded: 9 10 4 5 6
  expect_tensor_near(c.outputs[0],
                     {7 + 80 + 100 + 0.5, 8 + 10 + 200 + 0.5, 1 + 20 + 300 + 0.5, 18 + 4 - 1, 20 + 5 - 1, 8 + 6 - 1},
                     1e-6, "conv");
  expect_tensor_near(c.outputs[1], {2, 3, 5, 6}, 0, "present_state");
  Tensor bad_w = make_tensor<float>({2, 2, 3}, std::vector<float>(12, 1));
  EXPECT_FALSE(run_kernel(Op::CausalConvWithState, {&x, &bad_w}, Attributes(), 2).status.is_ok());
}

TEST(TransformerMisc, LinearAttentionMatchesQuadraticForm) {
  // With update_rule=linear and no past state, output_t = scale * sum_{s<=t} (q_t . k_s) v_s.
  const int64_t B = 1, T = 3, Hq = 2, Hkv = 1, dk = 2, dv = 3;
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    auto qv = random_values(B * T * Hq * dk, 91, -1, 1), kv = random_values(B * T * Hkv * dk, 92, -1, 1);
    auto vv = random_values(B * T * Hkv * dv, 93, -1, 1);
    Tensor q = make(dt, {B, T, Hq * dk}, qv), k = make(dt, {B, T, Hkv * dk}, kv), v = make(dt, {B, T, Hkv * dv}, vv);
    Attributes a;
    a.set("q_num_heads", Hq);
    a.set("kv_num_heads", Hkv);
    a.set("update_rule", std::string("linear"));
    RunResult r = run_kernel(Op::LinearAttention, {&q, &k, &v}, a, 2);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    const double scale = 1 / std::sqrt(double(dk));
    std::vector<double> want;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t m = 0; m < dv; ++m) {
          double acc = 0;
          for (int64_t s = 0; s <= t; ++s) {
            double qk = 0;
            for (int64_t i = 0; i < dk; ++i) qk += qv[(t * Hq + h) * dk + i] * kv[s * dk + i];
            acc += qk * vv[s * dv + m];
          }
          want.push_back(scale * acc);
        }
    expect_tensor_near(r.outputs[0], want, tol_for(dt) * 2, dtype_name(dt));
    EXPECT_EQ(r.outputs[1].dims(), (Dims{B, Hkv, dk, dv}));
    Attributes gated = a;
    gated.set("update_rule", std::string("gated"));
    EXPECT_FALSE(run_kernel(Op::LinearAttention, {&q, &k, &v}, gated, 2).status.is_ok());  // decay missing
  }
}

}  // namespace
}  // namespace kiln
