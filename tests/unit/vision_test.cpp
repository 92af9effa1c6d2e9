// Unit tests of the detection / vision reference kernels (NonMaxSuppression, RoiAlign,
// MaxRoiPool, GridSample, AffineGrid, Col2Im, DeformConv, MaxUnpool, TfIdfVectorizer):
// 16-bit float paths, cases the ONNX test data covers thinly, and error handling. Expected
// values come from independent double-precision loops written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "backends/cpu/reference/kernel.h"
#include "kernel_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

// Bilinear sample of an H x W plane at (y, x), zero outside.
double bilinear_zero(const double* p, int64_t h, int64_t w, double y, double x) {
  const double fy = std::floor(y), fx = std::floor(x);
  const double ty = y - fy, tx = x - fx;
  double acc = 0;
  for (int dy = 0; dy < 2; ++dy) {
    for (int dx = 0; dx < 2; ++dx) {
      const int64_t yy = static_cast<int64_t>(fy) + dy, xx = static_cast<int64_t>(fx) + dx;
      if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
      acc += (dy ? ty : 1 - ty) * (dx ? tx : 1 - tx) * p[yy * w + xx];
    }
  }
  return acc;
}

// ---- NonMaxSuppression ----

double iou_corners(const double* a, const double* b) {
  const double ay0 = std::min(a[0], a[2]), ay1 = std::max(a[0], a[2]), ax0 = std::min(a[1], a[3]), ax1 = std::max(a[1], a[3]);
  const double by0 = std::min(b[0], b[2]), by1 = std::max(b[0], b[2]), bx0 = std::min(b[1], b[3]), bx1 = std::max(b[1], b[3]);
  const double iw = std::min(ax1, bx1) - std::max(ax0, bx0), ih = std::min(ay1, by1) - std::max(ay0, by0);
  if (iw <= 0 || ih <= 0) return 0;
  const double inter = iw * ih;
  return inter / ((ax1 - ax0) * (ay1 - ay0) + (bx1 - bx0) * (by1 - by0) - inter);
}

TEST(VisionNms, MatchesGreedyReference) {
  const int64_t B = 2, C = 3, N = 30, max_out = 5;
  const double iou_t = 0.4, score_t = 0.2;
  auto bv = random_values(B * N * 4, 11, 0.0, 10.0);
  std::vector<double> sv = random_values(B * C * N, 12, 0.0, 1.0);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64}) {
    std::vector<double> b2 = bv, s2 = sv;
    Tensor boxes = make(dt, {B, N, 4}, b2), scores = make(dt, {B, C, N}, s2);
    Tensor mo = make_tensor<int64_t>({1}, {max_out});
    Tensor it = make_tensor<float>({1}, {static_cast<float>(iou_t)});
    Tensor st = make_tensor<float>({1}, {static_cast<float>(score_t)});
    RunResult r = run_kernel(Op::NonMaxSuppression, {&boxes, &scores, &mo, &it, &st}, Attributes());
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    std::vector<int64_t> want;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t c = 0; c < C; ++c) {
        std::vector<int64_t> order;
        for (int64_t i = 0; i < N; ++i) {
          if (s2[static_cast<size_t>((b * C + c) * N + i)] > score_t) order.push_back(i);
        }
        std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
          return s2[static_cast<size_t>((b * C + c) * N + x)] > s2[static_cast<size_t>((b * C + c) * N + y)];
        });
        std::vector<int64_t> kept;
        for (int64_t i : order) {
          if (static_cast<int64_t>(kept.size()) == max_out) break;
          bool ok = true;
          for (int64_t k : kept) {
            if (iou_corners(&b2[static_cast<size_t>((b * N + i) * 4)], &b2[static_cast<size_t>((b * N + k) * 4)]) > iou_t) ok = false;
          }
          if (!ok) continue;
          kept.push_back(i);
          want.insert(want.end(), {b, c, i});
        }
      }
    }
    const Tensor& y = r.outputs[0];
    ASSERT_EQ(y.dims(), (Dims{static_cast<int64_t>(want.size() / 3), 3}));
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(y.data<int64_t>()[i], want[i]) << i;
  }
}

TEST(VisionNms, OmittedMaxOutputGivesEmptyResult) {
  Tensor boxes = make_tensor<float>({1, 1, 4}, {0, 0, 1, 1});
  Tensor scores = make_tensor<float>({1, 1, 1}, {0.9f});
  RunResult r = run_kernel(Op::NonMaxSuppression, {&boxes, &scores}, Attributes());
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  EXPECT_EQ(r.outputs[0].dims(), (Dims{0, 3}));
}

TEST(VisionNms, RejectsMismatchedShapes) {
  Tensor boxes = make_tensor<float>({1, 2, 4}, {0, 0, 1, 1, 0, 0, 1, 1});
  Tensor scores = make_tensor<float>({1, 1, 3}, {0.9f, 0.8f, 0.7f});
  Tensor mo = make_tensor<int64_t>({1}, {3});
  EXPECT_FALSE(run_kernel(Op::NonMaxSuppression, {&boxes, &scores, &mo}, Attributes()).status.is_ok());
  Tensor bad = make_tensor<float>({1, 2, 3}, {0, 0, 1, 1, 0, 0});
  EXPECT_FALSE(run_kernel(Op::NonMaxSuppression, {&bad, &scores, &mo}, Attributes()).status.is_ok());
}

// ---- RoiAlign / MaxRoiPool ----

TEST(VisionRoiAlign, AvgMatchesIndependentLoopAllFloatTypes) {
  const int64_t N = 2, C = 3, H = 9, W = 8, OH = 3, OW = 2, S = 2;
  const double scale = 0.5;
  auto xv = random_values(N * C * H * W, 21);
  std::vector<double> rv = {2, 3, 12, 15, 0.5, 1, 9, 7, -2, -1, 20, 19};
  const std::vector<int64_t> bi = {1, 0, 1};
  for (DataType dt : kFloatTypes) {
    std::vector<double> x2 = xv, r2 = rv;
    Tensor x = make(dt, {N, C, H, W}, x2), rois = make(dt, {3, 4}, r2);
    Tensor b = make_tensor<int64_t>({3}, bi);
    Attributes a;
    a.set("output_height", OH);
    a.set("output_width", OW);
    a.set("sampling_ratio", S);
    a.set("spatial_scale", static_cast<float>(scale));
    RunResult r = run_kernel(Op::RoiAlign, {&x, &rois, &b}, a);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    std::vector<double> want;
    for (int64_t k = 0; k < 3; ++k) {
      const double x0 = r2[k * 4] * scale - 0.5, y0 = r2[k * 4 + 1] * scale - 0.5;
      const double bw = (r2[k * 4 + 2] * scale - 0.5 - x0) / OW, bh = (r2[k * 4 + 3] * scale - 0.5 - y0) / OH;
      for (int64_t c = 0; c < C; ++c) {
        const double* plane = &x2[static_cast<size_t>((bi[k] * C + c) * H * W)];
        for (int64_t ph = 0; ph < OH; ++ph) {
          for (int64_t pw = 0; pw < OW; ++pw) {
            double acc = 0;
            for (int64_t iy = 0; iy < S; ++iy) {
              for (int64_t ix = 0; ix < S; ++ix) {
                double yy = y0 + ph * bh + (iy + 0.5) * bh / S, xx = x0 + pw * bw + (ix + 0.5) * bw / S;
                if (yy < -1 || yy > H || xx < -1 || xx > W) continue;
                yy = std::min(std::max(yy, 0.0), static_cast<double>(H - 1));
                xx = std::min(std::max(xx, 0.0), static_cast<double>(W - 1));
                acc += bilinear_zero(plane, H, W, yy, xx);
              }
            }
            want.push_back(acc / (S * S));
          }
        }
      }
    }
    expect_tensor_near(r.outputs[0], want, tol_for(dt), dtype_name(dt));
  }
}

TEST(VisionRoiAlign, RejectsBadBatchIndexAndMode) {
  Tensor x = make_tensor<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor rois = make_tensor<float>({1, 4}, {0, 0, 1, 1});
  Tensor b = make_tensor<int64_t>({1}, {1});
  EXPECT_FALSE(run_kernel(Op::RoiAlign, {&x, &rois, &b}, Attributes()).status.is_ok());
  Tensor b0 = make_tensor<int64_t>({1}, {0});
  Attributes a;
  a.set("mode", std::string("median"));
  EXPECT_FALSE(run_kernel(Op::RoiAlign, {&x, &rois, &b0}, a).status.is_ok());
  Tensor huge = make_tensor<float>({1, 4}, {0, 0, 1e30f, 1e30f});
  EXPECT_FALSE(run_kernel(Op::RoiAlign, {&x, &huge, &b0}, Attributes()).status.is_ok());
  Tensor nan_roi = make_tensor<float>({1, 4}, {std::nanf(""), 0, 1, 1});
  EXPECT_FALSE(run_kernel(Op::RoiAlign, {&x, &nan_roi, &b0}, Attributes()).status.is_ok());
  Attributes fixed;
  fixed.set("sampling_ratio", int64_t{2});
  RunResult r = run_kernel(Op::RoiAlign, {&x, &nan_roi, &b0}, fixed);  // fixed grid: NaN taps read nothing
  EXPECT_TRUE(r.status.is_ok()) << r.status.message();
}

TEST(VisionMaxRoiPool, MatchesWindowMax) {
  // One ROI covering rows 1..4, cols 0..3 of a 6x5 image, pooled to 2x2.
  std::vector<double> xv = random_values(6 * 5, 31);
  for (DataType dt : kFloatTypes) {
    std::vector<double> x2 = xv;
    Tensor x = make(dt, {1, 1, 6, 5}, x2);
    std::vector<double> rv = {0, 0, 1, 3, 4};
    Tensor rois = make(dt, {1, 5}, rv);
    Attributes a;
    a.set("pooled_shape", std::vector<int64_t>{2, 2});
    RunResult r = run_kernel(Op::MaxRoiPool, {&x, &rois}, a);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    std::vector<double> want;
    for (int ph = 0; ph < 2; ++ph) {
      for (int pw = 0; pw < 2; ++pw) {
        double m = -1e300;
        for (int y = 1 + 2 * ph; y < 3 + 2 * ph; ++y) {
          for (int xx = 2 * pw; xx < 2 + 2 * pw; ++xx) m = std::max(m, x2[static_cast<size_t>(y * 5 + xx)]);
        }
        want.push_back(m);
      }
    }
    expect_tensor_near(r.outputs[0], want, 1e-6, dtype_name(dt));
  }
}

// ---- GridSample / AffineGrid ----

TEST(VisionGridSample, BilinearZerosMatchesIndependentLoop) {
  const int64_t N = 2, C = 2, H = 5, W = 4, OH = 3, OW = 6;
  auto xv = random_values(N * C * H * W, 41);
  auto gv = random_values(N * OH * OW * 2, 42, -1.3, 1.3);
  for (int align = 0; align < 2; ++align) {
    for (DataType dt : kFloatTypes) {
      std::vector<double> x2 = xv, g2 = gv;
      Tensor x = make(dt, {N, C, H, W}, x2), g = make(dt, {N, OH, OW, 2}, g2);
      Attributes a;
      a.set("align_corners", int64_t{align});
      RunResult r = run_kernel(Op::GridSample, {&x, &g}, a);
      ASSERT_TRUE(r.status.is_ok()) << r.status.message();
      std::vector<double> want;
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 0; c < C; ++c) {
          for (int64_t o = 0; o < OH * OW; ++o) {
            const double gx = g2[static_cast<size_t>((n * OH * OW + o) * 2)], gy = g2[static_cast<size_t>((n * OH * OW + o) * 2 + 1)];
            const double px = align ? (gx + 1) / 2 * (W - 1) : ((gx + 1) * W - 1) / 2;
            const double py = align ? (gy + 1) / 2 * (H - 1) : ((gy + 1) * H - 1) / 2;
            want.push_back(bilinear_zero(&x2[static_cast<size_t>((n * C + c) * H * W)], H, W, py, px));
          }
        }
      }
      expect_tensor_near(r.outputs[0], want, tol_for(dt), cat(dtype_name(dt), " align ", align));
    }
  }
}

TEST(VisionGridSample, IdentityAffineGridReproducesInput3d) {
  // AffineGrid with the identity transform, then GridSample (align_corners 1): X itself.
  const int64_t N = 1, C = 2, D = 3, H = 4, W = 5;
  auto xv = random_values(N * C * D * H * W, 51);
  for (const char* mode : {"linear", "nearest", "cubic"}) {
    for (DataType dt : {DataType::kFloat32, DataType::kFloat16}) {
      std::vector<double> x2 = xv;
      Tensor x = make(dt, {N, C, D, H, W}, x2);
      std::vector<double> tv = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
      Tensor theta = make(dt, {N, 3, 4}, tv);
      Tensor size = make_tensor<int64_t>({5}, {N, C, D, H, W});
      Attributes a;
      a.set("align_corners", int64_t{1});
      RunResult g = run_kernel(Op::AffineGrid, {&theta, &size}, a);
      ASSERT_TRUE(g.status.is_ok()) << g.status.message();
      ASSERT_EQ(g.outputs[0].dims(), (Dims{N, D, H, W, 3}));
      a.set("mode", std::string(mode));
      a.set("padding_mode", std::string("border"));
      RunResult r = run_kernel(Op::GridSample, {&x, &g.outputs[0]}, a);
      ASSERT_TRUE(r.status.is_ok()) << r.status.message();
      expect_tensor_near(r.outputs[0], x2, dt == DataType::kFloat16 ? 2e-2 : 1e-5, cat(mode, " ", dtype_name(dt)));
    }
  }
}

TEST(VisionGridSample, IntegerInputAndNanGridDoNotCrash) {
  Tensor x = make_tensor<int32_t>({1, 1, 2, 2}, {10, 20, 30, 40});
  const float nan = std::nanf("");
  Tensor g = make_tensor<float>({1, 1, 3, 2}, {0.f, 0.f, nan, 0.f, 1e30f, -1e30f});
  for (const char* pad : {"zeros", "border", "reflection"}) {
    for (const char* mode : {"linear", "nearest", "cubic"}) {
      Attributes a;
      a.set("padding_mode", std::string(pad));
      a.set("mode", std::string(mode));
      RunResult r = run_kernel(Op::GridSample, {&x, &g}, a);
      ASSERT_TRUE(r.status.is_ok()) << r.status.message();
      ASSERT_EQ(r.outputs[0].dims(), (Dims{1, 1, 1, 3}));
      if (std::string(mode) == "linear") {
        EXPECT_EQ(r.outputs[0].data<int32_t>()[0], 25);
      }
    }
  }
}

TEST(VisionGridSample, RejectsBadArguments) {
  Tensor x = make_tensor<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor g3 = make_tensor<float>({1, 1, 1, 3}, {0, 0, 0});
  EXPECT_FALSE(run_kernel(Op::GridSample, {&x, &g3}, Attributes()).status.is_ok());
  Tensor g = make_tensor<float>({1, 1, 1, 2}, {0, 0});
  Attributes a;
  a.set("mode", std::string("area"));
  EXPECT_FALSE(run_kernel(Op::GridSample, {&x, &g}, a).status.is_ok());
  Tensor theta = make_tensor<float>({1, 2, 2}, {1, 0, 0, 1});
  Tensor size = make_tensor<int64_t>({4}, {1, 1, 2, 2});
  EXPECT_FALSE(run_kernel(Op::AffineGrid, {&theta, &size}, Attributes()).status.is_ok());
  Tensor theta2 = make_tensor<float>({1, 2, 3}, {1, 0, 0, 0, 1, 0});
  Tensor neg = make_tensor<int64_t>({4}, {1, 1, -2, 2});
  EXPECT_FALSE(run_kernel(Op::AffineGrid, {&theta2, &neg}, Attributes()).status.is_ok());
}

// ---- Col2Im ----

TEST(VisionCol2Im, MatchesNaiveScatterAllFloatTypes) {
  const int64_t N = 2, C = 2, H = 6, W = 7, KH = 2, KW = 3, sh = 2, sw = 1, dh = 2, dw = 1, pt = 1, pl = 0, pb = 0, pr = 2;
  const int64_t BH = (H + pt + pb - (dh * (KH - 1) + 1)) / sh + 1, BW = (W + pl + pr - (dw * (KW - 1) + 1)) / sw + 1;
  auto xv = random_values(N * C * KH * KW * BH * BW, 61);
  for (DataType dt : kFloatTypes) {
    std::vector<double> x2 = xv;
    Tensor x = make(dt, {N, C * KH * KW, BH * BW}, x2);
    Tensor img = make_tensor<int64_t>({2}, {H, W}), blk = make_tensor<int64_t>({2}, {KH, KW});
    Attributes a;
    a.set("strides", std::vector<int64_t>{sh, sw});
    a.set("dilations", std::vector<int64_t>{dh, dw});
    a.set("pads", std::vector<int64_t>{pt, pl, pb, pr});
    RunResult r = run_kernel(Op::Col2Im, {&x, &img, &blk}, a);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    std::vector<double> want(static_cast<size_t>(N * C * H * W), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw)
            for (int64_t bh = 0; bh < BH; ++bh)
              for (int64_t bw = 0; bw < BW; ++bw) {
                const int64_t y = bh * sh - pt + kh * dh, xx = bw * sw - pl + kw * dw;
                if (y < 0 || y >= H || xx < 0 || xx >= W) continue;
                want[static_cast<size_t>(((n * C + c) * H + y) * W + xx)] +=
                    x2[static_cast<size_t>(((n * C + c) * KH * KW + kh * KW + kw) * BH * BW + bh * BW + bw)];
              }
    expect_tensor_near(r.outputs[0], want, tol_for(dt) * 4, dtype_name(dt));
  }
}

TEST(VisionCol2Im, RejectsBlockCountMismatch) {
  Tensor x = make_tensor<float>({1, 4, 5}, std::vector<float>(20, 1.f));
  Tensor img = make_tensor<int64_t>({2}, {3, 3}), blk = make_tensor<int64_t>({2}, {2, 2});
  EXPECT_FALSE(run_kernel(Op::Col2Im, {&x, &img, &blk}, Attributes()).status.is_ok());
  Tensor blk3 = make_tensor<int64_t>({2}, {3, 0});
  EXPECT_FALSE(run_kernel(Op::Col2Im, {&x, &img, &blk3}, Attributes()).status.is_ok());
}

// ---- DeformConv ----

TEST(VisionDeformConv, MatchesIndependentLoopAllFloatTypes) {
  const int64_t N = 1, C = 4, H = 5, W = 6, M = 4, G = 2, OG = 2, KH = 2, KW = 3, sh = 1, sw = 2, pt = 1, pl = 1;
  const int64_t OH = (H + 2 * pt - KH) / sh + 1, OW = (W + 2 * pl - KW) / sw + 1;
  auto xv = random_values(N * C * H * W, 71), wv = random_values(M * C / G * KH * KW, 72);
  auto ov = random_values(N * OG * KH * KW * 2 * OH * OW, 73, -1.5, 1.5), mv = random_values(N * OG * KH * KW * OH * OW, 74, 0, 1);
  auto bv = random_values(M, 75);
  for (DataType dt : kFloatTypes) {
    std::vector<double> x2 = xv, w2 = wv, o2 = ov, m2 = mv, b2 = bv;
    Tensor x = make(dt, {N, C, H, W}, x2), w = make(dt, {M, C / G, KH, KW}, w2);
    Tensor off = make(dt, {N, OG * KH * KW * 2, OH, OW}, o2), mask = make(dt, {N, OG * KH * KW, OH, OW}, m2);
    Tensor b = make(dt, {M}, b2);
    Attributes a;
    a.set("group", G);
    a.set("offset_group", OG);
    a.set("strides", std::vector<int64_t>{sh, sw});
    a.set("pads", std::vector<int64_t>{pt, pl, pt, pl});
    RunResult r = run_kernel(Op::DeformConv, {&x, &w, &off, &b, &mask}, a);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    std::vector<double> want;
    for (int64_t m = 0; m < M; ++m) {
      const int64_t g = m / (M / G);
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = b2[static_cast<size_t>(m)];
          for (int64_t icg = 0; icg < C / G; ++icg) {
            const int64_t ic = g * (C / G) + icg, og = ic / (C / OG);
            for (int64_t kh = 0; kh < KH; ++kh) {
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t k = kh * KW + kw;
                const double dy = o2[static_cast<size_t>(((og * KH * KW + k) * 2 + 0) * OH * OW + oh * OW + ow)];
                const double dx = o2[static_cast<size_t>(((og * KH * KW + k) * 2 + 1) * OH * OW + oh * OW + ow)];
                const double mk = m2[static_cast<size_t>((og * KH * KW + k) * OH * OW + oh * OW + ow)];
                const double v = bilinear_zero(&x2[static_cast<size_t>(ic * H * W)], H, W,
                                               static_cast<double>(oh * sh - pt + kh) + dy,
                                               static_cast<double>(ow * sw - pl + kw) + dx);
                acc += w2[static_cast<size_t>((m * (C / G) + icg) * KH * KW + k)] * v * mk;
              }
            }
          }
          want.push_back(acc);
        }
      }
    }
    expect_tensor_near(r.outputs[0], want, tol_for(dt) * 4, dtype_name(dt));
  }
}

TEST(VisionDeformConv, RejectsBadOffsetShape) {
  Tensor x = make_tensor<float>({1, 1, 3, 3}, std::vector<float>(9, 1.f));
  Tensor w = make_tensor<float>({1, 1, 2, 2}, std::vector<float>(4, 1.f));
  Tensor off = make_tensor<float>({1, 6, 2, 2}, std::vector<float>(24, 0.f));
  EXPECT_FALSE(run_kernel(Op::DeformConv, {&x, &w, &off}, Attributes()).status.is_ok());
  Tensor ok_off = make_tensor<float>({1, 8, 2, 2}, std::vector<float>(32, 0.f));
  RunResult r = run_kernel(Op::DeformConv, {&x, &w, &ok_off}, Attributes());
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  expect_tensor_near(r.outputs[0], {4, 4, 4, 4}, 1e-6, "zero offsets");
}

// ---- MaxUnpool ----

TEST(VisionMaxUnpool, InvertsMaxPoolIndices) {
  auto xv = random_values(2 * 3 * 4 * 4, 81);
  for (DataType dt : kFloatTypes) {
    std::vector<double> x2 = xv;
    Tensor x = make(dt, {2, 3, 4, 4}, x2);
    Attributes a;
    a.set("kernel_shape", std::vector<int64_t>{2, 2});
    a.set("strides", std::vector<int64_t>{2, 2});
    RunResult p = run_kernel(Op::MaxPool, {&x}, a, 2);
    ASSERT_TRUE(p.status.is_ok()) << p.status.message();
    RunResult u = run_kernel(Op::MaxUnpool, {&p.outputs[0], &p.outputs[1]}, a);
    ASSERT_TRUE(u.status.is_ok()) << u.status.message();
    ASSERT_EQ(u.outputs[0].dims(), x.dims());
    std::vector<double> want(x2.size(), 0.0);
    for (int64_t i = 0; i < p.outputs[1].size(); ++i) {
      const int64_t at = p.outputs[1].data<int64_t>()[i];
      want[static_cast<size_t>(at)] = x2[static_cast<size_t>(at)];
    }
    expect_tensor_near(u.outputs[0], want, 1e-6, dtype_name(dt));
  }
}

TEST(VisionMaxUnpool, RejectsOutOfRangeIndexAndSmallOutputShape) {
  Tensor x = make_tensor<float>({1, 1, 1, 1}, {5.f});
  Tensor bad = make_tensor<int64_t>({1, 1, 1, 1}, {4});
  Attributes a;
  a.set("kernel_shape", std::vector<int64_t>{2, 2});
  EXPECT_FALSE(run_kernel(Op::MaxUnpool, {&x, &bad}, a).status.is_ok());
  Tensor ind = make_tensor<int64_t>({1, 1, 1, 1}, {3});
  Tensor small = make_tensor<int64_t>({4}, {1, 1, 1, 2});
  EXPECT_FALSE(run_kernel(Op::MaxUnpool, {&x, &ind, &small}, a).status.is_ok());
}

// ---- TfIdfVectorizer ----

TEST(VisionTfIdf, CountsSkipBigramsForIntAndStringInputs) {
  // Pool: unigrams {2, 3}, bigrams {(2,3), (3,2)}; max_skip_count 1.
  Attributes a;
  a.set("min_gram_length", int64_t{1});
  a.set("max_gram_length", int64_t{2});
  a.set("max_skip_count", int64_t{1});
  a.set("mode", std::string("TFIDF"));
  a.set("ngram_counts", std::vector<int64_t>{0, 2});
  a.set("ngram_indexes", std::vector<int64_t>{0, 1, 2, 3});
  a.set("weights", std::vector<float>{1.f, 2.f, 3.f, 4.f});
  a.set("pool_int64s", std::vector<int64_t>{2, 3, 2, 3, 3, 2});
  // Row 2 3 7 2: unigram 2 x2, 3 x1; bigram (2,3) at distance 1; (3,2) at distance 2 (3 _ 2 -> skip 1).
  Tensor x = make_tensor<int32_t>({2, 4}, {2, 3, 7, 2, 5, 5, 5, 5});
  RunResult r = run_kernel(Op::TfIdfVectorizer, {&x}, a);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  ASSERT_EQ(r.outputs[0].dims(), (Dims{2, 4}));
  expect_tensor_near(r.outputs[0], {2 * 1, 1 * 2, 1 * 3, 1 * 4, 0, 0, 0, 0}, 1e-6, "int");

  Attributes s = a;
  s.erase("pool_int64s");
  s.set("pool_strings", std::vector<std::string>{"a", "b", "a", "b", "b", "a"});
  Tensor xs(DataType::kString, {4});
  const char* words[] = {"a", "b", "z", "a"};
  for (int i = 0; i < 4; ++i) xs.data<std::string>()[i] = words[i];
  RunResult rs = run_kernel(Op::TfIdfVectorizer, {&xs}, s);
  ASSERT_TRUE(rs.status.is_ok()) << rs.status.message();
  ASSERT_EQ(rs.outputs[0].dims(), (Dims{4}));
  expect_tensor_near(rs.outputs[0], {2, 2, 3, 4}, 1e-6, "string");
}

TEST(VisionTfIdf, RejectsBadAttributes) {
  Attributes a;
  a.set("min_gram_length", int64_t{2});
  a.set("max_gram_length", int64_t{1});
  a.set("mode", std::string("TF"));
  a.set("ngram_counts", std::vector<int64_t>{0});
  a.set("ngram_indexes", std::vector<int64_t>{0});
  a.set("pool_int64s", std::vector<int64_t>{1});
  Tensor x = make_tensor<int64_t>({3}, {1, 2, 3});
  EXPECT_FALSE(run_kernel(Op::TfIdfVectorizer, {&x}, a).status.is_ok());
  a.set("max_gram_length", int64_t{2});
  a.set("min_gram_length", int64_t{1});
  a.set("ngram_counts", std::vector<int64_t>{0, 5});
  EXPECT_FALSE(run_kernel(Op::TfIdfVectorizer, {&x}, a).status.is_ok());
  Tensor f = make_tensor<float>({3}, {1, 2, 3});
  a.set("ngram_counts", std::vector<int64_t>{0});
  EXPECT_FALSE(run_kernel(Op::TfIdfVectorizer, {&f}, a).status.is_ok());
}

}  // namespace
}  // namespace kiln
