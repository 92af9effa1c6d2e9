// Unit tests of the neural-network reference kernels (conv, pool, norm, resize, pad):
// the 16-bit float paths, options the ONNX test data covers thinly, and error handling.
// Expected values come from independent double-precision loops written for 2-D cases.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/cpu/reference/kernel.h"
#include "kernel_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

// Tighter than the shared tol_for for the 16-bit types.
double nn_tol_for(DataType dt) {
  return dt == DataType::kBFloat16 ? 2e-2 : dt == DataType::kFloat16 ? 4e-3 : 1e-5;
}

TEST(NnConv, Grouped2dMatchesNaiveLoop) {
  // X [2,4,7,6], W [6,2,3,2], group 2, strides (2,1), dilations (1,2), pads (1,0,2,1).
  const int64_t N = 2, C = 4, H = 7, W = 6, M = 6, G = 2, KH = 3, KW = 2;
  const int64_t sh = 2, sw = 1, dh = 1, dw = 2, pt = 1, pl = 0, pb = 2, pr = 1;
  const int64_t OH = (H + pt + pb - dh * (KH - 1) - 1) / sh + 1, OW = (W + pl + pr - dw * (KW - 1) - 1) / sw + 1;
  for (DataType dt : kFloatTypes) {
    auto xv = random_values(N * C * H * W, 1), wv = random_values(M * C / G * KH * KW, 2), bv = random_values(M, 3);
    Tensor x = make(dt, {N, C, H, W}, xv), w = make(dt, {M, C / G, KH, KW}, wv), b = make(dt, {M}, bv);
    Attributes a;
    a.set("group", G);
    a.set("strides", std::vector<int64_t>{sh, sw});
    a.set("dilations", std::vector<int64_t>{dh, dw});
    a.set("pads", std::vector<int64_t>{pt, pl, pb, pr});
    RunResult r = run_kernel(Op::Conv, {&x, &w, &b}, a);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    EXPECT_EQ(r.outputs[0].dims(), (Dims{N, M, OH, OW}));
    EXPECT_EQ(r.outputs[0].dtype(), dt);
    std::vector<double> want;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double acc = bv[m];
            const int64_t g = m / (M / G);
            for (int64_t c = 0; c < C / G; ++c)
              for (int64_t kh = 0; kh < KH; ++kh)
                for (int64_t kw = 0; kw < KW; ++kw) {
                  const int64_t ih = oh * sh - pt + kh * dh, iw = ow * sw - pl + kw * dw;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  acc += xv[((n * C + g * C / G + c) * H + ih) * W + iw] * wv[((m * C / G + c) * KH + kh) * KW + kw];
                }
            want.push_back(acc);
          }
    expect_tensor_near(r.outputs[0], want, nn_tol_for(dt) * 4, dtype_name(dt));
  }
}

TEST(NnConv, TransposeGroupedMatchesNaiveScatter) {
  // X [1,4,3,4], W [4,3,3,2] (C, M/group, kh, kw), group 2 -> M = 6; strides (2,3), pads (1,0,0,1),
  // output_padding (1,2).
  const int64_t C = 4, H = 3, W = 4, G = 2, Mg = 3, KH = 3, KW = 2, sh = 2, sw = 3;
  const int64_t pt = 1, pl = 0, pb = 0, pr = 1, oph = 1, opw = 2;
  const int64_t OH = sh * (H - 1) + oph + KH - pt - pb, OW = sw * (W - 1) + opw + KW - pl - pr;
  for (DataType dt : kFloatTypes) {
    auto xv = random_values(C * H * W, 4), wv = random_values(C * Mg * KH * KW, 5);
    Tensor x = make(dt, {1, C, H, W}, xv), w = make(dt, {C, Mg, KH, KW}, wv);
    Attributes a;
    a.set("group", G);
    a.set("strides", std::vector<int64_t>{sh, sw});
    a.set("pads", std::vector<int64_t>{pt, pl, pb, pr});
    a.set("output_padding", std::vector<int64_t>{oph, opw});
    RunResult r = run_kernel(Op::ConvTranspose, {&x, &w}, a);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    ASSERT_EQ(r.outputs[0].dims(), (Dims{1, G * Mg, OH, OW}));
    std::vector<double> want(static_cast<size_t>(G * Mg * OH * OW), 0.0);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t m = 0; m < Mg; ++m)
        for (int64_t ih = 0; ih < H; ++ih)
          for (int64_t iw = 0; iw < W; ++iw)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t oh = ih * sh - pt + kh, ow = iw * sw - pl + kw;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                const int64_t oc = (c / (C / G)) * Mg + m;
                want[(oc * OH + oh) * OW + ow] += xv[(c * H + ih) * W + iw] * wv[((c * Mg + m) * KH + kh) * KW + kw];
              }
    expect_tensor_near(r.outputs[0], want, nn_tol_for(dt) * 4, dtype_name(dt));
  }
}

TEST(NnConv, RejectsBadShapes) {
  Tensor x(DataType::kFloat32, {1, 3, 5, 5});
  Tensor w(DataType::kFloat32, {2, 2, 3, 3});  // expects 3 input channels per group
  Attributes a;
  RunResult r = run_kernel(Op::Conv, {&x, &w}, a);
  EXPECT_FALSE(r.status.is_ok());
  EXPECT_NE(r.status.message().find("C/group"), std::string::npos) << r.status.message();

  Tensor w3(DataType::kFloat32, {2, 3, 3});  // rank mismatch
  EXPECT_FALSE(run_kernel(Op::Conv, {&x, &w3}, a).status.is_ok());

  Tensor wbig(DataType::kFloat32, {2, 3, 7, 7});  // kernel larger than the input
  EXPECT_FALSE(run_kernel(Op::Conv, {&x, &wbig}, a).status.is_ok());

  Tensor w_ok(DataType::kFloat32, {2, 3, 3, 3});
  Attributes bad_pads;
  bad_pads.set("pads", std::vector<int64_t>{1, 1});
  EXPECT_FALSE(run_kernel(Op::Conv, {&x, &w_ok, nullptr}, bad_pads).status.is_ok());
  Attributes bad_group;
  bad_group.set("group", int64_t{2});
  EXPECT_FALSE(run_kernel(Op::Conv, {&x, &w_ok}, bad_group).status.is_ok());
  Tensor b(DataType::kFloat32, {3});  // wrong bias length
  EXPECT_FALSE(run_kernel(Op::Conv, {&x, &w_ok, &b}, a).status.is_ok());
  Tensor xi(DataType::kInt32, {1, 3, 5, 5}), wi(DataType::kInt32, {2, 3, 3, 3});
  EXPECT_FALSE(run_kernel(Op::Conv, {&xi, &wi}, a).status.is_ok());
}

TEST(NnPool, MaxPoolIndicesCeilModeAndStorageOrder) {
  const int64_t C = 2, H = 5, W = 6, K = 2, S = 2;
  const int64_t OH = 3, OW = 3;  // ceil((5-2)/2)+1 = 3, ceil((6-2)/2)+1 = 3
  auto xv = random_values(C * H * W, 7);
  for (int64_t order : {0, 1}) {
    Tensor x = make(DataType::kFloat32, {1, C, H, W}, xv);
    Attributes a;
    a.set("kernel_shape", std::vector<int64_t>{K, K});
    a.set("strides", std::vector<int64_t>{S, S});
    a.set("ceil_mode", int64_t{1});
    a.set("storage_order", order);
    RunResult r = run_kernel(Op::MaxPool, {&x}, a, 2);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    ASSERT_EQ(r.outputs[0].dims(), (Dims{1, C, OH, OW}));
    ASSERT_EQ(r.outputs[1].dtype(), DataType::kInt64);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double best = -1e300;
          int64_t bh = -1, bw = -1;
          for (int64_t h = oh * S; h < std::min(H, oh * S + K); ++h)
            for (int64_t w = ow * S; w < std::min(W, ow * S + K); ++w)
              if (xv[(c * H + h) * W + w] > best) best = xv[(c * H + h) * W + w], bh = h, bw = w;
          const int64_t o = (c * OH + oh) * OW + ow;
          EXPECT_EQ(r.outputs[0].get_double(o), best);
          const int64_t want_idx = c * H * W + (order == 0 ? bh * W + bw : bh + bw * H);
          EXPECT_EQ(r.outputs[1].get_int(o), want_idx);
        }
  }
}

TEST(NnPool, MaxPoolInt8AndAveragePoolCountIncludePad) {
  Tensor x = make_tensor<int8_t>({1, 1, 2, 3}, {-5, 7, -128, 3, 127, -1});
  Attributes a;
  a.set("kernel_shape", std::vector<int64_t>{2, 2});
  RunResult r = run_kernel(Op::MaxPool, {&x}, a);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  ASSERT_EQ(r.outputs[0].dtype(), DataType::kInt8);
  EXPECT_EQ(r.outputs[0].data<int8_t>()[0], 127);
  EXPECT_EQ(r.outputs[0].data<int8_t>()[1], 127);

  // AveragePool 3x3, pads 1, on a 3x3 input: corner has 4 real values out of 9 slots.
  for (int64_t include : {0, 1}) {
    for (DataType dt : kFloatTypes) {
      std::vector<double> v = random_values(9, 8);
      Tensor xf = make(dt, {1, 1, 3, 3}, v);
      Attributes p;
      p.set("kernel_shape", std::vector<int64_t>{3, 3});
      p.set("pads", std::vector<int64_t>{1, 1, 1, 1});
      p.set("count_include_pad", include);
      RunResult ra = run_kernel(Op::AveragePool, {&xf}, p);
      ASSERT_TRUE(ra.status.is_ok()) << ra.status.message();
      const double corner = (v[0] + v[1] + v[3] + v[4]) / (include ? 9.0 : 4.0);
      EXPECT_NEAR(ra.outputs[0].get_double(0), corner, nn_tol_for(dt) * 4) << dtype_name(dt);
    }
  }
}

TEST(NnPool, RejectsBadAttributes) {
  Tensor x(DataType::kFloat32, {1, 1, 4, 4});
  Attributes no_kernel;
  EXPECT_FALSE(run_kernel(Op::MaxPool, {&x}, no_kernel).status.is_ok());
  Attributes wrong_len;
  wrong_len.set("kernel_shape", std::vector<int64_t>{2});
  EXPECT_FALSE(run_kernel(Op::AveragePool, {&x}, wrong_len).status.is_ok());
  Attributes zero_stride;
  zero_stride.set("kernel_shape", std::vector<int64_t>{2, 2});
  zero_stride.set("strides", std::vector<int64_t>{0, 1});
  EXPECT_FALSE(run_kernel(Op::MaxPool, {&x}, zero_stride).status.is_ok());
  Attributes too_big;
  too_big.set("kernel_shape", std::vector<int64_t>{5, 5});
  EXPECT_FALSE(run_kernel(Op::LpPool, {&x}, too_big).status.is_ok());
  Tensor x1(DataType::kFloat32, {4});
  EXPECT_FALSE(run_kernel(Op::GlobalAveragePool, {&x1}, no_kernel).status.is_ok());
}

TEST(NnNorm, LayerNormHalfTypesWithStatistics) {
  const int64_t R = 3, D = 5;
  for (DataType dt : kFloatTypes) {
    auto xv = random_values(R * D, 9), sv = random_values(D, 10), bv = random_values(D, 11);
    Tensor x = make(dt, {R, D}, xv), s = make(dt, {D}, sv), b = make(dt, {D}, bv);
    Attributes a;
    a.set("epsilon", 1e-3f);
    RunResult r = run_kernel(Op::LayerNormalization, {&x, &s, &b}, a, 3);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    EXPECT_EQ(r.outputs[0].dtype(), dt);
    EXPECT_EQ(r.outputs[1].dims(), (Dims{R, 1}));
    EXPECT_EQ(r.outputs[1].dtype(), DataType::kFloat32);
    std::vector<double> want, means, invs;
    for (int64_t i = 0; i < R; ++i) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < D; ++j) mean += xv[i * D + j] / D;
      for (int64_t j = 0; j < D; ++j) var += (xv[i * D + j] - mean) * (xv[i * D + j] - mean) / D;
      const double inv = 1 / std::sqrt(var + 1e-3);
      for (int64_t j = 0; j < D; ++j) want.push_back((xv[i * D + j] - mean) * inv * sv[j] + bv[j]);
      means.push_back(mean);
      invs.push_back(inv);
    }
    expect_tensor_near(r.outputs[0], want, nn_tol_for(dt) * 4, dtype_name(dt));
    expect_tensor_near(r.outputs[1], means, 1e-5, "mean");
    expect_tensor_near(r.outputs[2], invs, 1e-5, "inv_std_dev");
  }
  Tensor x(DataType::kFloat32, {2, 3}), s(DataType::kFloat32, {4});
  Attributes a;
  EXPECT_FALSE(run_kernel(Op::LayerNormalization, {&x, &s}, a).status.is_ok());  // scale mismatch
  Attributes bad_axis;
  bad_axis.set("axis", int64_t{2});
  Tensor s3(DataType::kFloat32, {3});
  EXPECT_FALSE(run_kernel(Op::LayerNormalization, {&x, &s3}, bad_axis).status.is_ok());
}

TEST(NnNorm, GroupNormPerGroupAndPerChannelScale) {
  const int64_t N = 2, C = 4, G = 2, S = 3;
  auto xv = random_values(N * C * S, 12);
  for (bool per_channel : {false, true}) {
    const int64_t n = per_channel ? C : G;
    auto sv = random_values(n, 13), bv = random_values(n, 14);
    Tensor x = make(DataType::kFloat32, {N, C, S}, xv), s = make(DataType::kFloat32, {n}, sv),
           b = make(DataType::kFloat32, {n}, bv);
    Attributes a;
    a.set("num_groups", G);
    RunResult r = run_kernel(Op::GroupNormalization, {&x, &s, &b}, a);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    std::vector<double> want;
    const int64_t block = C / G * S;
    for (int64_t i = 0; i < N * G; ++i) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < block; ++j) mean += xv[i * block + j] / block;
      for (int64_t j = 0; j < block; ++j) var += (xv[i * block + j] - mean) * (xv[i * block + j] - mean) / block;
      for (int64_t j = 0; j < block; ++j) {
        const int64_t c = (i % G) * (C / G) + j / S;
        const int64_t p = per_channel ? c : c / (C / G);
        want.push_back((xv[i * block + j] - mean) / std::sqrt(var + 1e-5) * sv[p] + bv[p]);
      }
    }
    expect_tensor_near(r.outputs[0], want, 1e-5, per_channel ? "per channel" : "per group");
  }
  Tensor x(DataType::kFloat32, {1, 4, 2}), s(DataType::kFloat32, {4});
  Attributes a;
  a.set("num_groups", int64_t{3});
  EXPECT_FALSE(run_kernel(Op::GroupNormalization, {&x, &s, &s}, a).status.is_ok());
}

TEST(NnNorm, BatchNormTrainingModeRunningStats) {
  const int64_t N = 3, C = 2, S = 4;
  auto xv = random_values(N * C * S, 15);
  std::vector<double> sv = {1.5, -0.5}, bv = {0.25, 1}, mv = {0.1, -0.2}, vv = {1.2, 0.7};
  Tensor x = make(DataType::kFloat32, {N, C, S}, xv), s = make(DataType::kFloat32, {C}, sv),
         b = make(DataType::kFloat32, {C}, bv), m = make(DataType::kFloat32, {C}, mv), v = make(DataType::kFloat32, {C}, vv);
  Attributes a;
  a.set("training_mode", int64_t{1});
  a.set("momentum", 0.8f);
  RunResult r = run_kernel(Op::BatchNormalization, {&x, &s, &b, &m, &v}, a, 3);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  for (int64_t c = 0; c < C; ++c) {
    double mean = 0, var = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) mean += xv[(n * C + c) * S + i] / (N * S);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) var += std::pow(xv[(n * C + c) * S + i] - mean, 2) / (N * S);
    EXPECT_NEAR(r.outputs[1].get_double(c), mv[c] * 0.8 + mean * 0.2, 1e-5);
    EXPECT_NEAR(r.outputs[2].get_double(c), vv[c] * 0.8 + var * 0.2, 1e-5);
    const int64_t i0 = c * S;
    EXPECT_NEAR(r.outputs[0].get_double(i0), (xv[i0] - mean) / std::sqrt(var + 1e-5) * sv[c] + bv[c], 1e-4);
  }
  Tensor short_mean(DataType::kFloat32, {1});
  EXPECT_FALSE(run_kernel(Op::BatchNormalization, {&x, &s, &b, &short_mean, &v}, Attributes()).status.is_ok());
}

TEST(NnResize, BilinearHalfPixelMatchesFormula) {
  const int64_t H = 3, W = 4, OH = 5, OW = 7;
  for (DataType dt : kFloatTypes) {
    auto xv = random_values(H * W, 16);
    Tensor x = make(dt, {1, 1, H, W}, xv);
    Tensor sizes = make_int64_vector({1, 1, OH, OW});
    Attributes a;
    a.set("mode", std::string("linear"));
    RunResult r = run_kernel(Op::Resize, {&x, nullptr, nullptr, &sizes}, a);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    ASSERT_EQ(r.outputs[0].dims(), (Dims{1, 1, OH, OW}));
    std::vector<double> want;
    auto src = [](int64_t o, int64_t in, int64_t out, int64_t* i0, int64_t* i1, double* f) {
      double c = (o + 0.5) * in / out - 0.5;
      c = std::clamp(c, 0.0, static_cast<double>(in - 1));
      *i0 = static_cast<int64_t>(std::floor(c));
      *i1 = std::min(*i0 + 1, in - 1);
      *f = c - *i0;
    };
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t h0, h1, w0, w1;
        double fh, fw;
        src(oh, H, OH, &h0, &h1, &fh);
        src(ow, W, OW, &w0, &w1, &fw);
        const double top = xv[h0 * W + w0] * (1 - fw) + xv[h0 * W + w1] * fw;
        const double bot = xv[h1 * W + w0] * (1 - fw) + xv[h1 * W + w1] * fw;
        want.push_back(top * (1 - fh) + bot * fh);
      }
    expect_tensor_near(r.outputs[0], want, nn_tol_for(dt) * 2, dtype_name(dt));
  }
}

TEST(NnResize, NearestIntegerTypesAndAxes) {
  Tensor x = make_tensor<uint8_t>({2, 2}, {1, 2, 250, 4});
  Tensor scales = make_tensor<float>({1}, {2.0f});
  Attributes a;
  a.set("axes", std::vector<int64_t>{-1});
  a.set("coordinate_transformation_mode", std::string("asymmetric"));
  a.set("nearest_mode", std::string("floor"));
  RunResult r = run_kernel(Op::Resize, {&x, nullptr, &scales}, a);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  ASSERT_EQ(r.outputs[0].dims(), (Dims{2, 4}));
  const std::vector<uint8_t> want = {1, 1, 2, 2, 250, 250, 4, 4};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r.outputs[0].data<uint8_t>()[i], want[i]);
}

TEST(NnResize, RejectsBadInputs) {
  Tensor x(DataType::kFloat32, {1, 1, 2, 2});
  Tensor scales = make_tensor<float>({4}, {1, 1, 2, 2});
  Tensor sizes = make_int64_vector({1, 1, 4, 4});
  Attributes a;
  EXPECT_FALSE(run_kernel(Op::Resize, {&x, nullptr, &scales, &sizes}, a).status.is_ok());  // both
  EXPECT_FALSE(run_kernel(Op::Resize, {&x}, a).status.is_ok());                             // neither
  Tensor short_scales = make_tensor<float>({2}, {2, 2});
  EXPECT_FALSE(run_kernel(Op::Resize, {&x, nullptr, &short_scales}, a).status.is_ok());
  Tensor neg_scales = make_tensor<float>({4}, {1, 1, -2, 2});
  EXPECT_FALSE(run_kernel(Op::Resize, {&x, nullptr, &neg_scales}, a).status.is_ok());
  Tensor neg_sizes = make_int64_vector({1, 1, -4, 4});
  EXPECT_FALSE(run_kernel(Op::Resize, {&x, nullptr, nullptr, &neg_sizes}, a).status.is_ok());
  Attributes bad_mode;
  bad_mode.set("mode", std::string("bicubic"));
  EXPECT_FALSE(run_kernel(Op::Resize, {&x, nullptr, &scales}, bad_mode).status.is_ok());
  Attributes crop;
  crop.set("coordinate_transformation_mode", std::string("tf_crop_and_resize"));
  EXPECT_FALSE(run_kernel(Op::Resize, {&x, nullptr, &scales}, crop).status.is_ok());  // roi missing
}

// Independent per-axis index mapping for the Pad tests.
int64_t pad_source(int64_t o, int64_t pb, int64_t n, const std::string& mode) {
  int64_t i = o - pb;
  if (i >= 0 && i < n) return i;
  if (mode == "constant") return -1;
  if (mode == "edge") return i < 0 ? 0 : n - 1;
  if (mode == "wrap") return ((i % n) + n) % n;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;  // reflect
  return i;
}

TEST(NnPad, ModesOnEveryFloatType) {
  const int64_t H = 3, W = 4;
  const std::vector<int64_t> pads = {2, 1, 1, 5};  // begin h, begin w, end h, end w
  for (const std::string mode : {"constant", "reflect", "edge", "wrap"}) {
    for (DataType dt : kFloatTypes) {
      auto xv = random_values(H * W, 17);
      Tensor x = make(dt, {H, W}, xv);
      Tensor p = make_int64_vector(pads);
      Tensor cv = cast_tensor(make_tensor<float>({}, {1.5f}), dt);
      Attributes a;
      a.set("mode", mode);
      RunResult r = run_kernel(Op::Pad, {&x, &p, &cv}, a);
      ASSERT_TRUE(r.status.is_ok()) << mode << ": " << r.status.message();
      const int64_t OH = H + 3, OW = W + 6;
      ASSERT_EQ(r.outputs[0].dims(), (Dims{OH, OW}));
      std::vector<double> want;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t h = pad_source(oh, 2, H, mode), w = pad_source(ow, 1, W, mode);
          want.push_back(h < 0 || w < 0 ? 1.5 : xv[h * W + w]);
        }
      expect_tensor_near(r.outputs[0], want, 0, mode + " " + dtype_name(dt));
    }
  }
}

TEST(NnPad, NegativePadsAxesAndBool) {
  Tensor x = make_tensor<int32_t>({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor p = make_int64_vector({-1, 2});  // axis 1: crop one at the start, pad two at the end
  Tensor axes = make_int64_vector({-1});
  Tensor cv = make_tensor<int32_t>({}, {9});
  RunResult r = run_kernel(Op::Pad, {&x, &p, &cv, &axes}, Attributes());
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  ASSERT_EQ(r.outputs[0].dims(), (Dims{2, 5}));
  const std::vector<int32_t> want = {2, 3, 4, 9, 9, 6, 7, 8, 9, 9};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r.outputs[0].data<int32_t>()[i], want[i]);

  Tensor b = make_tensor<bool>({2}, {true, false});
  Tensor pb = make_int64_vector({1, 1});
  Attributes edge;
  edge.set("mode", std::string("edge"));
  RunResult rb = run_kernel(Op::Pad, {&b, &pb}, edge);
  ASSERT_TRUE(rb.status.is_ok()) << rb.status.message();
  const std::vector<bool> wb = {true, true, false, false};
  for (size_t i = 0; i < wb.size(); ++i) EXPECT_EQ(rb.outputs[0].data<bool>()[i], wb[i]);
}

TEST(NnPad, RejectsBadPads) {
  Tensor x(DataType::kFloat32, {2, 3});
  Tensor short_pads = make_int64_vector({1, 1});
  EXPECT_FALSE(run_kernel(Op::Pad, {&x, &short_pads}, Attributes()).status.is_ok());
  Tensor over_crop = make_int64_vector({0, -4, 0, 0});
  EXPECT_FALSE(run_kernel(Op::Pad, {&x, &over_crop}, Attributes()).status.is_ok());
  Tensor pads = make_int64_vector({0, 1, 0, 1});
  Tensor bad_axes = make_int64_vector({5});
  Tensor two = make_int64_vector({1, 1});
  EXPECT_FALSE(run_kernel(Op::Pad, {&x, &two, nullptr, &bad_axes}, Attributes()).status.is_ok());
  Attributes bad_mode;
  bad_mode.set("mode", std::string("mirror"));
  EXPECT_FALSE(run_kernel(Op::Pad, {&x, &pads}, bad_mode).status.is_ok());
  Tensor empty(DataType::kFloat32, {0, 3});
  Attributes reflect;
  reflect.set("mode", std::string("reflect"));
  EXPECT_TRUE(run_kernel(Op::Pad, {&empty, &pads}, reflect).status.is_ok());  // empty axis not padded
  Tensor pads_rows = make_int64_vector({1, 0, 1, 0});
  EXPECT_FALSE(run_kernel(Op::Pad, {&empty, &pads_rows}, reflect).status.is_ok());
}

}  // namespace
}  // namespace kiln
