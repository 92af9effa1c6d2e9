// Low-precision dtypes and quantization: fp8/fp4/e8m0 conversions checked against a
// brute-force nearest-value search, 4-bit/2-bit TensorProto packing, Cast routing,
// QuantizeLinear/DequantizeLinear (per-axis, blocked, float16/bfloat16), the integer
// matmul/conv ops against double loops, and error handling for bad shapes and attributes.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backends/cpu/reference/kernel.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "onnx/tensor_io.h"

namespace kiln {
namespace {

using namespace kiln::testing;

double rand_nonzero(double lo, double hi) {
  std::uniform_real_distribution<double> mag(lo, hi);
  std::uniform_int_distribution<int> sign(0, 1);
  double v = mag(rng());
  return sign(rng()) ? -v : v;
}

Tensor raw_tensor(DataType dt, Dims dims, const std::vector<uint8_t>& bytes) {
  Tensor t(dt, std::move(dims));
  for (int64_t i = 0; i < t.size(); ++i) t.data<uint8_t>()[i] = bytes[static_cast<size_t>(i)];
  return t;
}

const DataType kFp8[] = {DataType::kFloat8E4M3FN, DataType::kFloat8E4M3FNUZ, DataType::kFloat8E5M2,
                         DataType::kFloat8E5M2FNUZ, DataType::kFloat4E2M1};

int num_patterns(DataType dt) { return dt == DataType::kFloat4E2M1 ? 16 : 256; }

// ---- conversions ----

TEST(QuantDtype, SizesNamesAndPredicates) {
  for (DataType dt : {DataType::kFloat8E4M3FN, DataType::kFloat8E4M3FNUZ, DataType::kFloat8E5M2,
                      DataType::kFloat8E5M2FNUZ, DataType::kUInt4, DataType::kInt4, DataType::kFloat4E2M1,
                      DataType::kFloat8E8M0, DataType::kUInt2, DataType::kInt2}) {
    EXPECT_EQ(dtype_size(dt), 1u);
    EXPECT_TRUE(is_supported_dtype(dt));
    EXPECT_TRUE(is_low_precision(dt));
    DataType back;
    ASSERT_TRUE(dtype_from_name(dtype_name(dt), &back)) << dtype_name(dt);
    EXPECT_EQ(back, dt);
    EXPECT_FALSE(dispatch_all(dt, [&]<typename T>() {}));  // arithmetic kernels keep rejecting them
  }
  EXPECT_EQ(static_cast<int>(DataType::kFloat8E4M3FN), 17);
  EXPECT_EQ(static_cast<int>(DataType::kInt2), 26);
  EXPECT_EQ(low_precision_float_to_float(DataType::kFloat8E4M3FN, 0x7E), 448.0f);
  EXPECT_EQ(low_precision_float_to_float(DataType::kFloat8E4M3FNUZ, 0x7F), 240.0f);
  EXPECT_EQ(low_precision_float_to_float(DataType::kFloat8E5M2, 0x7B), 57344.0f);
  EXPECT_EQ(low_precision_float_to_float(DataType::kFloat8E5M2FNUZ, 0x7F), 57344.0f);
  EXPECT_EQ(low_precision_float_to_float(DataType::kFloat4E2M1, 0x7), 6.0f);
  EXPECT_TRUE(std::isinf(low_precision_float_to_float(DataType::kFloat8E5M2, 0xFC)));
  EXPECT_TRUE(std::isnan(low_precision_float_to_float(DataType::kFloat8E4M3FN, 0xFF)));
  EXPECT_EQ(low_precision_float_to_float(DataType::kFloat8E4M3FN, 0x01), std::ldexp(1.0f, -9));  // smallest subnormal
}

TEST(QuantDtype, DecodeEncodeRoundTripsEveryPattern) {
  for (DataType dt : kFp8) {
    for (int b = 0; b < num_patterns(dt); ++b) {
      float f = low_precision_float_to_float(dt, static_cast<uint8_t>(b));
      if (std::isnan(f) || std::isinf(f)) continue;
      EXPECT_EQ(float_to_low_precision_float(dt, f, false), b) << dtype_name(dt) << " pattern " << b;
    }
  }
}

// Independent oracle: the nearest finite value by exhaustive search, ties to the even pattern.
uint8_t brute_force_encode(DataType dt, double v) {
  int best = -1;
  double best_err = 0;
  for (int b = 0; b < num_patterns(dt); ++b) {
    double f = low_precision_float_to_float(dt, static_cast<uint8_t>(b));
    if (std::isnan(f) || std::isinf(f)) continue;
    const bool has_neg_zero = dt != DataType::kFloat8E4M3FNUZ && dt != DataType::kFloat8E5M2FNUZ;
    if (f == 0 && has_neg_zero && std::signbit(f) != std::signbit(v)) continue;
    if (f != 0 && (f < 0) != (v < 0)) continue;
    double err = std::fabs(f - v);
    if (best < 0 || err < best_err || (err == best_err && (b & 1) == 0)) {
      best = b;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

// Saturating conversion by the oracle: clip to the largest finite value, then nearest.
uint8_t expected_saturating(DataType dt, double v) {
  double max = dt == DataType::kFloat8E4M3FN ? 448 : dt == DataType::kFloat8E4M3FNUZ ? 240
             : dt == DataType::kFloat4E2M1 ? 6 : 57344;
  uint8_t want = brute_force_encode(dt, std::max(-max, std::min(max, v)));
  if ((dt == DataType::kFloat8E4M3FNUZ || dt == DataType::kFloat8E5M2FNUZ) &&
      low_precision_float_to_float(dt, want) == 0) {
    want = 0;  // no negative zero
  }
  return want;
}

TEST(QuantDtype, EncodeMatchesNearestValueWithSaturation) {
  for (DataType dt : kFp8) {
    for (int i = 0; i < 3000; ++i) {
      double v = rand_nonzero(0, 1) * std::ldexp(1.0, std::uniform_int_distribution<int>(-20, 18)(rng()));
      ASSERT_EQ(float_to_low_precision_float(dt, v, true), expected_saturating(dt, v)) << dtype_name(dt) << " v=" << v;
    }
  }
}

TEST(QuantDtype, SpecialValues) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // saturate: inf -> max finite; no saturation: inf (E5M2) or NaN.
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat8E4M3FN, inf, true), 0x7E);
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat8E4M3FN, -inf, false), 0xFF);
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat8E4M3FN, 1e6, false), 0x7F);
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat8E4M3FN, 464, false), 0x7E);  // tie rounds to even (448)
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat8E5M2, inf, false), 0x7C);
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat8E5M2, -1e6, false), 0xFC);
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat8E5M2, -1e6, true), 0xFB);
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat8E5M2FNUZ, inf, false), 0x80);
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat8E4M3FNUZ, -0.0, true), 0x00);
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat8E4M3FN, -0.0, true), 0x80);
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat8E4M3FNUZ, nan, true), 0x80);
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat4E2M1, 100, false), 0x7);
  EXPECT_EQ(float_to_low_precision_float(DataType::kFloat4E2M1, -inf, false), 0xF);
  // e8m0
  EXPECT_EQ(float_to_e8m0(1.0f, true, E8M0Rounding::kUp), 127);
  EXPECT_EQ(float_to_e8m0(1.1f, true, E8M0Rounding::kUp), 128);
  EXPECT_EQ(float_to_e8m0(1.1f, true, E8M0Rounding::kDown), 127);
  EXPECT_EQ(float_to_e8m0(1.6f, true, E8M0Rounding::kNearest), 128);
  EXPECT_EQ(float_to_e8m0(std::numeric_limits<float>::infinity(), true, E8M0Rounding::kUp), 0xFF);
  EXPECT_EQ(float_to_e8m0(3e38f, true, E8M0Rounding::kUp), 0xFE);
  EXPECT_EQ(float_to_e8m0(3e38f, false, E8M0Rounding::kUp), 0xFF);
  EXPECT_EQ(low_precision_float_to_float(DataType::kFloat8E8M0, 130), 8.0f);
  // 4/2-bit wrapping
  EXPECT_EQ(static_cast<int8_t>(wrap_low_precision_int(DataType::kInt4, 9)), -7);
  EXPECT_EQ(static_cast<int8_t>(wrap_low_precision_int(DataType::kInt4, -9)), 7);
  EXPECT_EQ(wrap_low_precision_int(DataType::kUInt4, 17), 1);
  EXPECT_EQ(static_cast<int8_t>(wrap_low_precision_int(DataType::kInt2, 2)), -2);
  EXPECT_EQ(wrap_low_precision_int(DataType::kUInt2, -1), 3);
}

// ---- TensorProto packing ----

TEST(QuantProto, PacksFourAndTwoBitLowBitsFirst) {
  Tensor t = raw_tensor(DataType::kInt4, {5}, {static_cast<uint8_t>(-8), 7, static_cast<uint8_t>(-1), 1, 3});
  onnx::TensorProto p;
  tensor_to_proto(t, "t", &p);
  ASSERT_EQ(p.raw_data().size(), 3u);
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[0]), 0x78);
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[1]), 0x1F);
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[2]), 0x03);
  auto back = tensor_from_proto(p, "", "test");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(back.value().data<int8_t>()[i], t.data<int8_t>()[i]);

  Tensor u = raw_tensor(DataType::kUInt2, {6}, {0, 1, 2, 3, 3, 1});
  tensor_to_proto(u, "u", &p);
  ASSERT_EQ(p.raw_data().size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[0]), 0xE4);
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[1]), 0x07);

  // int32_data form: one packed byte per int32.
  onnx::TensorProto q;
  q.set_data_type(static_cast<int>(DataType::kInt2));
  q.add_dims(5);
  q.add_int32_data(0xE4);
  q.add_int32_data(0x02);
  auto r = tensor_from_proto(q, "", "test");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const int8_t want[] = {0, 1, -2, -1, -2};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(r.value().data<int8_t>()[i], want[i]);

  q.add_int32_data(0);  // one value too many
  EXPECT_FALSE(tensor_from_proto(q, "", "test").is_ok());
  onnx::TensorProto bad;
  bad.set_data_type(static_cast<int>(DataType::kUInt4));
  bad.add_dims(5);
  bad.set_raw_data(std::string(2, '\0'));  // needs 3 bytes
  EXPECT_FALSE(tensor_from_proto(bad, "", "test").is_ok());
}

// ---- Cast routing ----

TEST(QuantCast, Float16ToFp8AndBack) {
  Tensor x(DataType::kFloat16, {64});
  for (int i = 0; i < 64; ++i) x.data<Half>()[i] = Half(static_cast<float>(rand_nonzero(0.01, 500)));
  for (DataType dt : kFp8) {
    Attributes a;
    a.set("to", static_cast<int64_t>(dt));
    Tensor y = run_ok(Op::Cast, {&x}, a);
    ASSERT_EQ(y.dtype(), dt);
    Attributes b;
    b.set("to", static_cast<int64_t>(DataType::kFloat32));
    Tensor z = run_ok(Op::Cast, {&y}, b);
    for (int i = 0; i < 64; ++i) {
      float v = static_cast<float>(x.data<Half>()[i]);
      EXPECT_EQ(y.data<uint8_t>()[i], expected_saturating(dt, v));
      EXPECT_EQ(z.data<float>()[i], low_precision_float_to_float(dt, y.data<uint8_t>()[i]));
    }
  }
  // bad round_mode is an error, not a crash
  Attributes bad;
  bad.set("to", static_cast<int64_t>(DataType::kFloat8E8M0));
  bad.set("round_mode", std::string("sideways"));
  expect_error(Op::Cast, {&x}, bad);
}

TEST(QuantCast, IntegersWrapIntoInt4) {
  Tensor x = make_tensor<int32_t>({6}, {-9, -8, 7, 8, 15, 100});
  Attributes a;
  a.set("to", static_cast<int64_t>(DataType::kInt4));
  Tensor y = run_ok(Op::Cast, {&x}, a);
  const int8_t want[] = {7, -8, 7, -8, -1, 4};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y.data<int8_t>()[i], want[i]);
  Attributes b;
  b.set("to", static_cast<int64_t>(DataType::kBFloat16));
  Tensor z = run_ok(Op::Cast, {&y}, b);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(static_cast<float>(z.data<BFloat16>()[i]), want[i]);
}

TEST(QuantCast, ArithmeticRejectsLowPrecision) {
  Tensor x = raw_tensor(DataType::kFloat8E4M3FN, {2}, {0x38, 0x40});
  RunResult r = try_run_kernel(Op::Add, {&x, &x});
  EXPECT_FALSE(r.status.is_ok());
}

// ---- QuantizeLinear / DequantizeLinear ----

TEST(QuantLinear, PerAxisFloat16ToInt8) {
  const int64_t A = 2, C = 3, B = 4;
  Tensor x(DataType::kFloat16, {A, C, B});
  for (int64_t i = 0; i < x.size(); ++i) x.data<Half>()[i] = Half(static_cast<float>(rand_nonzero(0.1, 40)));
  Tensor scale(DataType::kFloat16, {C});
  Tensor zp(DataType::kInt8, {C});
  for (int64_t c = 0; c < C; ++c) {
    scale.data<Half>()[c] = Half(static_cast<float>(std::fabs(rand_nonzero(0.05, 0.5))));
    zp.data<int8_t>()[c] = static_cast<int8_t>(c * 5 - 4);
  }
  Attributes a;
  a.set("axis", int64_t{1});
  Tensor y = run_ok(Op::QuantizeLinear, {&x, &scale, &zp}, a);
  ASSERT_EQ(y.dtype(), DataType::kInt8);
  for (int64_t i = 0; i < x.size(); ++i) {
    int64_t c = (i / B) % C;
    double q = static_cast<float>(Half(static_cast<float>(x.data<Half>()[i]) / static_cast<float>(scale.data<Half>()[c])));
    double want = std::max(-128.0, std::min(127.0, std::nearbyint(q) + zp.data<int8_t>()[c]));
    EXPECT_EQ(y.data<int8_t>()[i], want) << i;
  }
  // and back
  Tensor d = run_ok(Op::DequantizeLinear, {&y, &scale, &zp}, a);
  ASSERT_EQ(d.dtype(), DataType::kFloat16);
  for (int64_t i = 0; i < x.size(); ++i) {
    int64_t c = (i / B) % C;
    float want = static_cast<float>(Half((static_cast<float>(y.data<int8_t>()[i]) - zp.data<int8_t>()[c]) *
                                         static_cast<float>(scale.data<Half>()[c])));
    EXPECT_EQ(static_cast<float>(d.data<Half>()[i]), want);
  }
}

TEST(QuantLinear, BlockedWithRemainderToUInt4AndBFloat16Output) {
  const int64_t R = 3, K = 7, block = 3;  // blocks of 3, 3, 1 along axis 1
  Tensor x(DataType::kFloat32, {R, K});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = static_cast<float>(rand_nonzero(0.1, 5));
  Tensor scale(DataType::kFloat32, {R, 3});
  Tensor zp(DataType::kUInt4, {R, 3});
  for (int64_t i = 0; i < scale.size(); ++i) {
    scale.data<float>()[i] = static_cast<float>(std::fabs(rand_nonzero(0.2, 1)));
    zp.data<uint8_t>()[i] = static_cast<uint8_t>(i % 16);
  }
  Attributes a;
  a.set("axis", int64_t{1});
  a.set("block_size", block);
  Tensor y = run_ok(Op::QuantizeLinear, {&x, &scale, &zp}, a);
  ASSERT_EQ(y.dtype(), DataType::kUInt4);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) {
      int64_t s = r * 3 + k / block;
      double q = std::nearbyint(x.data<float>()[r * K + k] / scale.data<float>()[s]) + zp.data<uint8_t>()[s];
      EXPECT_EQ(y.data<uint8_t>()[r * K + k], std::max(0.0, std::min(15.0, q)));
    }
  Attributes b = a;
  b.set("output_dtype", static_cast<int64_t>(DataType::kBFloat16));
  Tensor d = run_ok(Op::DequantizeLinear, {&y, &scale, &zp}, b);
  ASSERT_EQ(d.dtype(), DataType::kBFloat16);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) {
      int64_t s = r * 3 + k / block;
      float want = (static_cast<float>(y.data<uint8_t>()[r * K + k]) - zp.data<uint8_t>()[s]) * scale.data<float>()[s];
      EXPECT_EQ(static_cast<float>(d.data<BFloat16>()[r * K + k]), static_cast<float>(BFloat16(want)));
    }
}

TEST(QuantLinear, Fp8OutputSaturates) {
  Tensor x = make_tensor<float>({3}, {1000.0f, -1000.0f, 0.3f});
  Tensor scale = make_tensor<float>({}, {0.5f});
  Attributes a;
  a.set("output_dtype", static_cast<int64_t>(DataType::kFloat8E4M3FN));
  Tensor y = run_ok(Op::QuantizeLinear, {&x, &scale}, a);
  EXPECT_EQ(y.data<uint8_t>()[0], 0x7E);
  EXPECT_EQ(y.data<uint8_t>()[1], 0xFE);
  EXPECT_EQ(y.data<uint8_t>()[2], float_to_low_precision_float(DataType::kFloat8E4M3FN, 0.6f, true));
  a.set("saturate", int64_t{0});
  Tensor z = run_ok(Op::QuantizeLinear, {&x, &scale}, a);
  EXPECT_EQ(z.data<uint8_t>()[0], 0x7F);  // NaN
}

TEST(QuantLinear, Errors) {
  Tensor x = make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor s3 = make_tensor<float>({3}, {1, 1, 1});
  Tensor s2 = make_tensor<float>({2}, {1, 1});
  Tensor zp_u8 = make_tensor<uint8_t>({3}, {0, 0, 0});
  Tensor zp_i8 = make_tensor<int8_t>({2}, {0, 0});
  Attributes axis5;
  axis5.set("axis", int64_t{5});
  expect_error(Op::QuantizeLinear, {&x, &s3}, axis5);                 // axis out of range
  expect_error(Op::QuantizeLinear, {&x, &s2});                        // per-axis size mismatch
  expect_error(Op::QuantizeLinear, {&x, &s3, &zp_i8});                // zp shape != scale shape
  Attributes od;
  od.set("output_dtype", static_cast<int64_t>(DataType::kInt8));
  expect_error(Op::QuantizeLinear, {&x, &s3, &zp_u8}, od);            // output_dtype vs zp dtype
  Attributes neg_block;
  neg_block.set("block_size", int64_t{-1});
  expect_error(Op::QuantizeLinear, {&x, &s3}, neg_block);
  Attributes block;
  block.set("block_size", int64_t{2});
  expect_error(Op::QuantizeLinear, {&x, &s3}, block);                 // blocked scale must have rank 2
  Tensor q = make_tensor<int8_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_error(Op::DequantizeLinear, {&q, &s3, &zp_u8});             // zp dtype != x dtype
  expect_error(Op::DequantizeLinear, {&x, &s3});                      // float input
  expect_error(Op::QuantizeLinear, {&x, nullptr});                    // missing scale
  Tensor f8 = raw_tensor(DataType::kFloat8E4M3FN, {3}, {0x38, 0x40, 0x44});
  Tensor f8zp = raw_tensor(DataType::kFloat8E4M3FN, {3}, {0x38, 0, 0});
  Attributes ax0;
  ax0.set("axis", int64_t{0});
  expect_error(Op::DequantizeLinear, {&f8, &s3, &f8zp}, ax0);         // non-zero float8 zero point
}

TEST(QuantLinear, DynamicQuantizeMatchesFormula) {
  Tensor x(DataType::kFloat32, {17});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = static_cast<float>(rand_nonzero(0.1, 3));
  RunResult r = try_run_kernel(Op::DynamicQuantizeLinear, {&x}, {}, 3);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  float mx = 0, mn = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    mx = std::max(mx, x.data<float>()[i]);
    mn = std::min(mn, x.data<float>()[i]);
  }
  float scale = (mx - mn) / 255.0f;
  float zp = std::nearbyint(std::max(0.0f, std::min(255.0f, -mn / scale)));
  EXPECT_EQ(r.outputs[1].data<float>()[0], scale);
  EXPECT_EQ(r.outputs[2].data<uint8_t>()[0], zp);
  for (int64_t i = 0; i < x.size(); ++i) {
    float q = std::max(0.0f, std::min(255.0f, std::nearbyint(x.data<float>()[i] / scale) + zp));
    EXPECT_EQ(r.outputs[0].data<uint8_t>()[i], q);
  }
}

// ---- integer matmul / conv ----

template <typename T>
Tensor random_q(Dims dims) {
  Tensor t(dtype_of<T>::value, dims);
  std::uniform_int_distribution<int> d(std::is_signed_v<T> ? -128 : 0, std::is_signed_v<T> ? 127 : 255);
  for (int64_t i = 0; i < t.size(); ++i) t.data<T>()[i] = static_cast<T>(d(rng()));
  return t;
}

TEST(QuantInteger, MatMulIntegerPerRowZeroPointAndBatch) {
  const int64_t Bt = 2, M = 3, K = 5, N = 4;
  Tensor a = random_q<uint8_t>({Bt, M, K});
  Tensor b = random_q<int8_t>({K, N});
  Tensor azp = make_tensor<uint8_t>({M}, {3, 100, 250});
  Tensor bzp = make_tensor<int8_t>({N}, {-5, 0, 7, 127});
  Tensor y = run_ok(Op::MatMulInteger, {&a, &b, &azp, &bzp});
  ASSERT_EQ(y.dtype(), DataType::kInt32);
  ASSERT_EQ(y.dims(), (Dims{Bt, M, N}));
  for (int64_t bt = 0; bt < Bt; ++bt)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          acc += (double(a.data<uint8_t>()[(bt * M + m) * K + k]) - azp.data<uint8_t>()[m]) *
                 (double(b.data<int8_t>()[k * N + n]) - bzp.data<int8_t>()[n]);
        }
        EXPECT_EQ(y.data<int32_t>()[(bt * M + m) * N + n], acc);
      }
  Tensor bad = random_q<int8_t>({K + 1, N});
  expect_error(Op::MatMulInteger, {&a, &bad});
  Tensor f = make_tensor<float>({K, N}, {});
  expect_error(Op::MatMulInteger, {&a, &f});
}

TEST(QuantInteger, QLinearMatMulRequantizes) {
  const int64_t M = 3, K = 6, N = 2;
  Tensor a = random_q<int8_t>({M, K}), b = random_q<int8_t>({K, N});
  Tensor as = make_tensor<float>({}, {0.02f}), bs = make_tensor<float>({}, {0.03f}), ys = make_tensor<float>({}, {0.5f});
  Tensor azp = make_tensor<int8_t>({}, {3}), bzp = make_tensor<int8_t>({}, {-2}), yzp = make_tensor<int8_t>({}, {10});
  Tensor y = run_ok(Op::QLinearMatMul, {&a, &as, &azp, &b, &bs, &bzp, &ys, &yzp});
  ASSERT_EQ(y.dtype(), DataType::kInt8);
  const double mult = static_cast<float>(static_cast<float>(0.02f * 0.03f) / 0.5f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        acc += (double(a.data<int8_t>()[m * K + k]) - 3) * (double(b.data<int8_t>()[k * N + n]) + 2);
      }
      double want = std::max(-128.0, std::min(127.0, std::nearbyint(acc * mult + 10)));
      EXPECT_EQ(y.data<int8_t>()[m * N + n], want);
    }
}

TEST(QuantInteger, ConvIntegerGroupsStridesPads) {
  const int64_t N = 1, C = 4, H = 5, W = 6, M = 4, G = 2, KH = 3, KW = 2;
  Tensor x = random_q<uint8_t>({N, C, H, W});
  Tensor w = random_q<uint8_t>({M, C / G, KH, KW});
  Tensor xzp = make_tensor<uint8_t>({}, {128});
  Tensor wzp = make_tensor<uint8_t>({M}, {1, 2, 3, 4});
  Attributes a;
  a.set("group", G);
  a.set("strides", std::vector<int64_t>{2, 1});
  a.set("pads", std::vector<int64_t>{1, 0, 1, 1});
  a.set("dilations", std::vector<int64_t>{1, 2});
  Tensor y = run_ok(Op::ConvInteger, {&x, &w, &xzp, &wzp}, a);
  const int64_t OH = (H + 2 - KH) / 2 + 1, OW = (W + 1 - ((KW - 1) * 2 + 1)) / 1 + 1;
  ASSERT_EQ(y.dims(), (Dims{N, M, OH, OW}));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double acc = 0;
        const int64_t g = m / (M / G);
        for (int64_t c = 0; c < C / G; ++c)
          for (int64_t kh = 0; kh < KH; ++kh)
            for (int64_t kw = 0; kw < KW; ++kw) {
              int64_t ih = oh * 2 - 1 + kh, iw = ow - 0 + kw * 2;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              acc += (double(x.data<uint8_t>()[((g * (C / G) + c) * H + ih) * W + iw]) - 128) *
                     (double(w.data<uint8_t>()[((m * (C / G) + c) * KH + kh) * KW + kw]) - (m + 1));
            }
        EXPECT_EQ(y.data<int32_t>()[(m * OH + oh) * OW + ow], acc);
      }
  Tensor wbad = random_q<uint8_t>({M, 3, KH, KW});  // channels don't match
  expect_error(Op::ConvInteger, {&x, &wbad}, a);
  Tensor x2 = random_q<uint8_t>({C, H});  // rank 2
  expect_error(Op::ConvInteger, {&x2, &w});
}

TEST(QuantInteger, QLinearConvPerChannelScale) {
  Tensor x = random_q<uint8_t>({1, 2, 4, 4});
  Tensor w = random_q<int8_t>({3, 2, 2, 2});
  Tensor xs = make_tensor<float>({}, {0.01f}), ys = make_tensor<float>({}, {0.2f});
  Tensor ws = make_tensor<float>({3}, {0.01f, 0.02f, 0.03f});
  Tensor xzp = make_tensor<uint8_t>({}, {100}), wzp = make_tensor<int8_t>({3}, {0, 1, -1});
  Tensor yzp = make_tensor<uint8_t>({}, {128});
  Tensor bias = make_tensor<int32_t>({3}, {10, -20, 300});
  Tensor y = run_ok(Op::QLinearConv, {&x, &xs, &xzp, &w, &ws, &wzp, &ys, &yzp, &bias});
  ASSERT_EQ(y.dims(), (Dims{1, 3, 3, 3}));
  for (int64_t m = 0; m < 3; ++m)
    for (int64_t oh = 0; oh < 3; ++oh)
      for (int64_t ow = 0; ow < 3; ++ow) {
        double acc = bias.data<int32_t>()[m];
        for (int64_t c = 0; c < 2; ++c)
          for (int64_t kh = 0; kh < 2; ++kh)
            for (int64_t kw = 0; kw < 2; ++kw) {
              acc += (double(x.data<uint8_t>()[(c * 4 + oh + kh) * 4 + ow + kw]) - 100) *
                     (double(w.data<int8_t>()[((m * 2 + c) * 2 + kh) * 2 + kw]) - wzp.data<int8_t>()[m]);
            }
        double mult = static_cast<float>(static_cast<float>(0.01f * ws.data<float>()[m]) / 0.2f);
        double want = std::max(0.0, std::min(255.0, std::nearbyint(acc * mult + 128)));
        EXPECT_EQ(y.data<uint8_t>()[(m * 3 + oh) * 3 + ow], want);
      }
  Tensor bad_ws = make_tensor<float>({2}, {0.1f, 0.1f});
  expect_error(Op::QLinearConv, {&x, &xs, &xzp, &w, &bad_ws, &wzp, &ys, &yzp});
}

TEST(QuantInteger, BitCast) {
  Tensor x = make_tensor<float>({2}, {1.0f, -2.5f});
  Attributes a;
  a.set("to", static_cast<int64_t>(DataType::kInt32));
  Tensor y = run_ok(Op::BitCast, {&x}, a);
  uint32_t bits;
  std::memcpy(&bits, &x.data<float>()[1], 4);
  EXPECT_EQ(static_cast<uint32_t>(y.data<int32_t>()[1]), bits);
  Attributes bad;
  bad.set("to", static_cast<int64_t>(DataType::kInt64));
  expect_error(Op::BitCast, {&x}, bad);
  Tensor u = make_tensor<uint8_t>({2}, {0x38, 0xC0});
  Attributes f8;
  f8.set("to", static_cast<int64_t>(DataType::kFloat8E4M3FN));
  Tensor z = run_ok(Op::BitCast, {&u}, f8);
  EXPECT_EQ(z.dtype(), DataType::kFloat8E4M3FN);
  EXPECT_EQ(z.data<uint8_t>()[1], 0xC0);
}

}  // namespace
}  // namespace kiln
