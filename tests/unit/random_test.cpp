// Random generation kernels: seeded outputs equal to the ONNX reference implementation
// (numpy's legacy generator; expected values produced with onnx.reference), determinism,
// ranges and moments over many samples, Bernoulli edge probabilities, Multinomial
// frequencies, and error cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/numpy_random.h"
#include "core/tensor.h"
#include "kernel_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

Attributes shape_attrs(std::vector<int64_t> shape, DataType dt = DataType::kFloat32) {
  Attributes a;
  a.set("shape", shape);
  a.set("dtype", static_cast<int64_t>(dt));
  return a;
}

std::vector<double> all_values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.size(); ++i) v.push_back(t.get_double(i));
  return v;
}

void moments(const Tensor& t, double* mean, double* var) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < t.size(); ++i) s += t.get_double(i);
  *mean = s / static_cast<double>(t.size());
  for (int64_t i = 0; i < t.size(); ++i) s2 += (t.get_double(i) - *mean) * (t.get_double(i) - *mean);
  *var = s2 / static_cast<double>(t.size());
}

// ---- numpy's legacy generator ----

TEST(NumpyLegacyRandom, MatchesNumpy) {
  // np.random.RandomState(42).rand(5) / .randn(5)
  NumpyLegacyRandom u(42);
  const double want_u[] = {0.3745401188473625, 0.9507143064099162, 0.7319939418114051, 0.5986584841970366,
                           0.15601864044243652};
  for (double w : want_u) EXPECT_EQ(u.next_double(), w);
  NumpyLegacyRandom n(42);
  const double want_n[] = {0.4967141530112327, -0.13826430117118466, 0.6476885381006925, 1.5230298564080254,
                           -0.23415337472333597};
  for (double w : want_n) EXPECT_DOUBLE_EQ(n.gauss(), w);
  // RandomState(3).binomial(1, p)
  const double p[] = {0.0, 1.0, 0.3, 0.7, 0.5, 0.9, 0.1, 0.25, 0.75, 0.05, 0.95, 0.6};
  const int want_b[] = {0, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 1,
                        0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1};
  NumpyLegacyRandom b(3);
  for (int i = 0; i < 36; ++i) EXPECT_EQ(b.bernoulli(p[i % 12]), want_b[i]) << i;
}

// ---- seeded outputs equal to the ONNX reference ----

TEST(RandomUniform, SeededMatchesReference) {
  Attributes a = shape_attrs({2, 3}, DataType::kFloat16);
  a.set("low", -1.0f);
  a.set("high", 4.0f);
  a.set("seed", 5.0f);
  Tensor y = run_ok(Op::RandomUniform, {}, a);
  ASSERT_EQ(y.dtype(), DataType::kFloat16);
  ASSERT_EQ(y.dims(), (Dims{2, 3}));
  const uint16_t want[] = {0x2f10, 0x42b4, 0x2840, 0x4330, 0x3dc6, 0x401e};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y.data<Half>()[i].bits, want[i]) << i;

  Attributes f = shape_attrs({6});
  f.set("low", -2.0f);
  f.set("high", 3.0f);
  f.set("seed", 7.0f);
  Tensor yf = run_ok(Op::RandomUniform, {}, f);
  const float want_f[] = {-1.6184585094451904f, 1.8995938301086426f, 0.1920461654663086f,
                          1.617326021194458f,   2.8899474143981934f, 0.6924796104431152f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(yf.data<float>()[i], want_f[i]) << i;
}

TEST(RandomNormal, SeededMatchesReference) {
  Attributes a = shape_attrs({5});
  a.set("mean", 1.0f);
  a.set("scale", 2.5f);
  a.set("seed", 7.0f);
  Tensor y = run_ok(Op::RandomNormal, {}, a);
  const float want[] = {5.226314067840576f, -0.16484344005584717f, 1.0820504426956177f, 2.0187907218933105f,
                        -0.972307562828064f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(y.data<float>()[i], want[i]) << i;

  Attributes h = shape_attrs({7}, DataType::kFloat16);
  h.set("mean", 0.5f);
  h.set("scale", 3.0f);
  h.set("seed", 11.0f);
  Tensor yh = run_ok(Op::RandomNormal, {}, h);
  const uint16_t want_h[] = {0x45bf, 0xb5bc, 0xbba2, 0xc775, 0x379a, 0xb758, 0xbc70};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(yh.data<Half>()[i].bits, want_h[i]) << i;
}

TEST(RandomLike, SeededMatchesReferenceAndDtype) {
  // RandomNormalLike of a float32 input with dtype=double; seed 3.7 is int(3.7) = 3.
  Tensor x = make_tensor<float>({2, 2}, {0, 0, 0, 0});
  Attributes a;
  a.set("dtype", static_cast<int64_t>(DataType::kFloat64));
  a.set("seed", 3.7f);
  Tensor y = run_ok(Op::RandomNormalLike, {&x}, a);
  ASSERT_EQ(y.dtype(), DataType::kFloat64);
  ASSERT_EQ(y.dims(), (Dims{2, 2}));
  const double want[] = {1.7886284734303186, 0.43650985051198943, 0.09649746807200862, -1.8634927033644908};
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(y.data<double>()[i], want[i]) << i;

  // RandomUniformLike keeps the input's dtype (float64 here).
  Tensor xd = make_tensor<double>({3}, {9, 9, 9});
  Attributes u;
  u.set("seed", 123.0f);
  u.set("low", 0.25f);
  u.set("high", 0.75f);
  Tensor yd = run_ok(Op::RandomUniformLike, {&xd}, u);
  ASSERT_EQ(yd.dtype(), DataType::kFloat64);
  const double want_u[] = {0.5982345927989308, 0.39306966747518973, 0.36342572678210155};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(yd.data<double>()[i], want_u[i]) << i;

  // Any input dtype works when 'dtype' gives a float output; bfloat16 too.
  Tensor xi = make_tensor<int64_t>({4, 5}, std::vector<int64_t>(20, 3));
  Attributes b;
  b.set("dtype", static_cast<int64_t>(DataType::kBFloat16));
  Tensor yb = run_ok(Op::RandomUniformLike, {&xi}, b);
  ASSERT_EQ(yb.dtype(), DataType::kBFloat16);
  for (int64_t i = 0; i < yb.size(); ++i) {
    EXPECT_GE(yb.get_double(i), 0.0);
    EXPECT_LE(yb.get_double(i), 1.0);  // rounding to bfloat16 can reach high
  }
}

TEST(Bernoulli, SeededMatchesReference) {
  Tensor p = make_tensor<float>({10}, {0.5488135f, 0.71518934f, 0.60276335f, 0.5448832f, 0.4236548f, 0.6458941f,
                                       0.4375872f, 0.891773f, 0.96366274f, 0.3834415f});
  Attributes a;
  a.set("seed", 0.0f);
  Tensor y = run_ok(Op::Bernoulli, {&p}, a);
  ASSERT_EQ(y.dtype(), DataType::kFloat32);
  EXPECT_EQ(all_values(y), (std::vector<double>{1, 0, 0, 1, 0, 0, 0, 0, 0, 0}));

  Tensor pd = cast_tensor(p, DataType::kFloat64);
  Attributes b;
  b.set("seed", 9.0f);
  b.set("dtype", static_cast<int64_t>(DataType::kInt32));
  Tensor yi = run_ok(Op::Bernoulli, {&pd}, b);
  ASSERT_EQ(yi.dtype(), DataType::kInt32);
  EXPECT_EQ(all_values(yi), (std::vector<double>{1, 1, 1, 1, 0, 1, 0, 1, 1, 0}));
}

// ---- determinism and randomness ----

TEST(Random, SeedIsDeterministicAndNoSeedIsNot) {
  for (Op op : {Op::RandomUniform, Op::RandomNormal}) {
    Attributes a = shape_attrs({64});
    a.set("seed", 1234.0f);
    EXPECT_EQ(all_values(run_ok(op, {}, a)), all_values(run_ok(op, {}, a))) << op_name(op);
    Attributes b = shape_attrs({64});
    b.set("seed", 1235.0f);
    EXPECT_NE(all_values(run_ok(op, {}, a)), all_values(run_ok(op, {}, b))) << op_name(op);
    Attributes none = shape_attrs({64});
    EXPECT_NE(all_values(run_ok(op, {}, none)), all_values(run_ok(op, {}, none))) << op_name(op);
  }
  Tensor p = make_tensor<float>({256}, std::vector<float>(256, 0.5f));
  Attributes s;
  s.set("seed", 99.0f);
  EXPECT_EQ(all_values(run_ok(Op::Bernoulli, {&p}, s)), all_values(run_ok(Op::Bernoulli, {&p}, s)));
  EXPECT_NE(all_values(run_ok(Op::Bernoulli, {&p}, {})), all_values(run_ok(Op::Bernoulli, {&p}, {})));
  Tensor logits = make_tensor<float>({2, 4}, {0, 1, 2, 3, 3, 2, 1, 0});
  Attributes m;
  m.set("seed", 5.0f);
  m.set("sample_size", int64_t{50});
  EXPECT_EQ(all_values(run_ok(Op::Multinomial, {&logits}, m)), all_values(run_ok(Op::Multinomial, {&logits}, m)));
}

TEST(RandomUniform, RangeAndMomentsEveryFloatType) {
  for (DataType dt : kFloatTypes) {
    Attributes a = shape_attrs({200, 100}, dt);
    a.set("low", -3.0f);
    a.set("high", 5.0f);
    a.set("seed", 17.0f);
    Tensor y = run_ok(Op::RandomUniform, {}, a);
    ASSERT_EQ(y.dtype(), dt);
    ASSERT_EQ(y.dims(), (Dims{200, 100}));
    const bool exact = dt == DataType::kFloat32 || dt == DataType::kFloat64;
    for (int64_t i = 0; i < y.size(); ++i) {
      const double v = y.get_double(i);
      ASSERT_GE(v, -3.0) << dtype_name(dt);
      if (exact) {
        ASSERT_LT(v, 5.0) << dtype_name(dt);
      } else {
        ASSERT_LE(v, 5.0) << dtype_name(dt);  // rounding to 16 bits can reach high
      }
    }
    double mean, var;
    moments(y, &mean, &var);
    EXPECT_NEAR(mean, 1.0, 0.05) << dtype_name(dt);
    EXPECT_NEAR(var, 64.0 / 12.0, 0.15) << dtype_name(dt);
  }
}

TEST(RandomNormal, MomentsEveryFloatType) {
  for (DataType dt : kFloatTypes) {
    Attributes a = shape_attrs({20001}, dt);  // odd: the cached second value of the last pair is unused
    a.set("mean", -2.0f);
    a.set("scale", 0.5f);
    Tensor y = run_ok(Op::RandomNormal, {}, a);
    ASSERT_EQ(y.dtype(), dt);
    double mean, var;
    moments(y, &mean, &var);
    EXPECT_NEAR(mean, -2.0, 0.02) << dtype_name(dt);
    EXPECT_NEAR(var, 0.25, 0.015) << dtype_name(dt);
  }
  // RandomNormalLike takes its shape from the input; defaults mean 0, scale 1.
  Tensor x = make_tensor<double>({100, 100}, std::vector<double>(10000, 7.0));
  Tensor y = run_ok(Op::RandomNormalLike, {&x}, {});
  ASSERT_EQ(y.dtype(), DataType::kFloat64);
  ASSERT_EQ(y.dims(), (Dims{100, 100}));
  double mean, var;
  moments(y, &mean, &var);
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(var, 1.0, 0.06);
}

TEST(RandomUniform, DefaultsAndScalarShape) {
  Tensor y = run_ok(Op::RandomUniform, {}, [] { Attributes a; a.set("shape", std::vector<int64_t>{3, 0}); return a; }());
  EXPECT_EQ(y.dtype(), DataType::kFloat32);
  EXPECT_EQ(y.dims(), (Dims{3, 0}));
  Tensor s = run_ok(Op::RandomUniform, {}, [] { Attributes a; a.set("shape", std::vector<int64_t>{}); return a; }());
  EXPECT_EQ(s.dims(), Dims{});
  ASSERT_EQ(s.size(), 1);
  EXPECT_GE(s.get_double(0), 0.0);
  EXPECT_LT(s.get_double(0), 1.0);
}

// ---- Bernoulli ----

TEST(Bernoulli, ZeroOneProbabilitiesExactAndFrequencies) {
  std::vector<double> pv;
  for (int i = 0; i < 4000; ++i) pv.push_back(i % 4 == 0 ? 0.0 : i % 4 == 1 ? 1.0 : i % 4 == 2 ? 0.2 : 0.85);
  for (DataType in_dt : kFloatTypes) {
    Tensor p = make(in_dt, {4000}, pv);
    for (DataType out_dt : {DataType::kFloat32, DataType::kBool, DataType::kInt8, DataType::kUInt64, DataType::kFloat16,
                            DataType::kBFloat16, DataType::kFloat64}) {
      Attributes a;
      a.set("dtype", static_cast<int64_t>(out_dt));
      Tensor y = run_ok(Op::Bernoulli, {&p}, a);
      ASSERT_EQ(y.dtype(), out_dt);
      ASSERT_EQ(y.dims(), p.dims());
      double n02 = 0, n085 = 0;
      for (int64_t i = 0; i < y.size(); ++i) {
        const double v = y.get_double(i);
        ASSERT_TRUE(v == 0.0 || v == 1.0) << v;
        if (i % 4 == 0) {
          ASSERT_EQ(v, 0.0) << "p = 0 at " << i;
        }
        if (i % 4 == 1) {
          ASSERT_EQ(v, 1.0) << "p = 1 at " << i;
        }
        if (i % 4 == 2) n02 += v;
        if (i % 4 == 3) n085 += v;
      }
      EXPECT_NEAR(n02 / 1000, 0.2, 0.06) << dtype_name(in_dt) << " -> " << dtype_name(out_dt);
      EXPECT_NEAR(n085 / 1000, 0.85, 0.06) << dtype_name(in_dt) << " -> " << dtype_name(out_dt);
    }
  }
}

// ---- Multinomial ----

TEST(Multinomial, FrequenciesFollowSoftmax) {
  // Row 0: probabilities 0.1, 0.2, 0.3, 0.4 (as log-probabilities); row 1: class 2 only
  // (other classes -inf); row 2: one class with a +inf logit takes everything.
  std::vector<double> lv = {std::log(0.1), std::log(0.2), std::log(0.3), std::log(0.4),
                            -INFINITY,     -INFINITY,     5.0,           -INFINITY,
                            1.0,           INFINITY,      2.0,           3.0};
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16}) {
    Tensor x = cast_tensor(make_tensor<double>({3, 4}, lv), dt);
    for (DataType out : {DataType::kInt32, DataType::kInt64}) {
      Attributes a;
      a.set("sample_size", int64_t{20000});
      a.set("dtype", static_cast<int64_t>(out));
      a.set("seed", 1.0f);
      Tensor y = run_ok(Op::Multinomial, {&x}, a);
      ASSERT_EQ(y.dtype(), out);
      ASSERT_EQ(y.dims(), (Dims{3, 20000}));
      std::vector<double> count(4, 0);
      for (int64_t s = 0; s < 20000; ++s) {
        const int64_t k = y.get_int(s);
        ASSERT_TRUE(k >= 0 && k < 4) << k;
        count[static_cast<size_t>(k)] += 1;
        ASSERT_EQ(y.get_int(20000 + s), 2);
        ASSERT_EQ(y.get_int(40000 + s), 1);
      }
      for (int c = 0; c < 4; ++c) EXPECT_NEAR(count[c] / 20000, 0.1 * (c + 1), 0.015) << dtype_name(dt);
    }
  }
  // Default: one int32 sample per row.
  Tensor x = make_tensor<float>({2, 3}, {0, 0, 0, 1, 1, 1});
  Tensor y = run_ok(Op::Multinomial, {&x}, {});
  EXPECT_EQ(y.dtype(), DataType::kInt32);
  EXPECT_EQ(y.dims(), (Dims{2, 1}));
}

// ---- errors ----

TEST(Random, ErrorCases) {
  // Bad dtype: not a float type, or not a dtype at all.
  expect_error(Op::RandomUniform, {}, shape_attrs({2}, DataType::kInt32));
  expect_error(Op::RandomNormal, {}, shape_attrs({2}, static_cast<DataType>(1000)));
  expect_error(Op::RandomNormal, {}, shape_attrs({2}, static_cast<DataType>(-1)));
  // Negative or absurd shape; missing shape.
  expect_error(Op::RandomUniform, {}, shape_attrs({2, -1}));
  expect_error(Op::RandomNormal, {}, shape_attrs({1ll << 40, 1ll << 40}));
  expect_error(Op::RandomUniform, {}, Attributes{});
  // Non-finite seed.
  Attributes inf_seed = shape_attrs({2});
  inf_seed.set("seed", INFINITY);
  expect_error(Op::RandomUniform, {}, inf_seed);
  // *Like: an integer input without 'dtype' would give an integer output.
  Tensor xi = make_tensor<int32_t>({2}, {1, 2});
  expect_error(Op::RandomUniformLike, {&xi});
  expect_error(Op::RandomNormalLike, {&xi});
  Tensor xf = make_tensor<float>({2}, {0.5f, 0.5f});
  Attributes bad_dt;
  bad_dt.set("dtype", int64_t{7});
  expect_error(Op::RandomNormalLike, {&xf}, bad_dt);
  // Bernoulli: probabilities outside [0, 1] or NaN, integer input, string/unknown dtype.
  Tensor p_bad = make_tensor<float>({3}, {0.5f, 1.5f, 0.2f});
  expect_error(Op::Bernoulli, {&p_bad});
  Tensor p_neg = make_tensor<double>({1}, {-0.1});
  expect_error(Op::Bernoulli, {&p_neg});
  Tensor p_nan = make_tensor<float>({1}, {NAN});
  expect_error(Op::Bernoulli, {&p_nan});
  expect_error(Op::Bernoulli, {&xi});
  Attributes str_dt;
  str_dt.set("dtype", static_cast<int64_t>(DataType::kString));
  expect_error(Op::Bernoulli, {&xf}, str_dt);
  Attributes unk_dt;
  unk_dt.set("dtype", int64_t{99});
  expect_error(Op::Bernoulli, {&xf}, unk_dt);
  // Multinomial: rank, dtype, sample_size, NaN or all -inf logits, no classes.
  Tensor l1 = make_tensor<float>({3}, {0, 0, 0});
  expect_error(Op::Multinomial, {&l1});
  Tensor l2 = make_tensor<float>({1, 3}, {0, 0, 0});
  Attributes m_dt;
  m_dt.set("dtype", static_cast<int64_t>(DataType::kFloat32));
  expect_error(Op::Multinomial, {&l2}, m_dt);
  Attributes m_neg;
  m_neg.set("sample_size", int64_t{-2});
  expect_error(Op::Multinomial, {&l2}, m_neg);
  Tensor l_nan = make_tensor<float>({1, 2}, {0, NAN});
  expect_error(Op::Multinomial, {&l_nan});
  Tensor l_inf = make_tensor<float>({1, 2}, {-INFINITY, -INFINITY});
  expect_error(Op::Multinomial, {&l_inf});
  Tensor l_empty(DataType::kFloat32, {2, 0});
  expect_error(Op::Multinomial, {&l_empty});
  Tensor l_int = make_tensor<int64_t>({1, 2}, {0, 1});
  expect_error(Op::Multinomial, {&l_int});
}

}  // namespace
}  // namespace kiln
