// Elementwise reference kernels: float16/bfloat16/double paths, integer edge cases
// (wrap-around, division by zero, exact Pow), broadcasting, mixed-dtype inputs (Pow,
// Clip bounds, Cast) and error handling. Expected values come from independent
// double-precision computations on random non-zero inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "backends/cpu/reference/kernel.h"
#include "core/tensor.h"
#include "kernel_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

// expect_close that also requires the result dtype to be T.
template <typename T>
void expect_typed_close(const Tensor& got, const std::vector<double>& want, double rtol, double atol = 1e-6) {
  ASSERT_EQ(got.dtype(), dtype_of<T>::value);
  expect_close<T>(got, want, rtol, atol);
}

template <typename T> double tol() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  else if constexpr (std::is_same_v<T, double>) return 1e-12;
  else if constexpr (std::is_same_v<T, Half>) return 2e-3;
  else return 1.6e-2;
}

// ---- unary math and activations ----

template <typename T, typename Ref>
void check_unary(Op op, Ref ref, const Attributes& attrs = {}) {
  Tensor x = random_tensor<T>({3, 5});
  Tensor y = run_ok(op, {&x}, attrs);
  std::vector<double> want;
  for (double v : values<T>(x)) want.push_back(ref(v));
  SCOPED_TRACE(op_name(op));
  expect_typed_close<T>(y, want, tol<T>(), tol<T>());
}

template <typename T>
void check_float_unaries() {
  check_unary<T>(Op::Exp, [](double v) { return std::exp(v); });
  check_unary<T>(Op::Abs, [](double v) { return std::fabs(v); });
  check_unary<T>(Op::Neg, [](double v) { return -v; });
  check_unary<T>(Op::Sign, [](double v) { return v > 0 ? 1.0 : -1.0; });
  check_unary<T>(Op::Reciprocal, [](double v) { return 1.0 / v; });
  check_unary<T>(Op::Atan, [](double v) { return std::atan(v); });
  check_unary<T>(Op::Erf, [](double v) { return std::erf(v); });
  check_unary<T>(Op::Sigmoid, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
  check_unary<T>(Op::Tanh, [](double v) { return std::tanh(v); });
  check_unary<T>(Op::Softplus, [](double v) { return std::log(1.0 + std::exp(v)); });
  check_unary<T>(Op::Softsign, [](double v) { return v / (1.0 + std::fabs(v)); });
  check_unary<T>(Op::Mish, [](double v) { return v * std::tanh(std::log(1.0 + std::exp(v))); });
  check_unary<T>(Op::HardSwish, [](double v) { return v * std::max(0.0, std::min(1.0, v / 6 + 0.5)); });
  check_unary<T>(Op::Relu, [](double v) { return std::max(v, 0.0); });
  check_unary<T>(Op::Gelu, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); });
  Attributes tanh_approx;
  tanh_approx.set("approximate", std::string("tanh"));
  check_unary<T>(
      Op::Gelu,
      [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); },
      tanh_approx);
  Attributes alpha;
  alpha.set("alpha", 0.25f);  // exact in float, so double paths match a double reference
  check_unary<T>(Op::LeakyRelu, [](double v) { return v < 0 ? 0.25 * v : v; }, alpha);
  check_unary<T>(Op::Elu, [](double v) { return v < 0 ? 0.25 * (std::exp(v) - 1) : v; }, alpha);
  check_unary<T>(Op::Celu, [](double v) { return std::max(0.0, v) + std::min(0.0, 0.25 * (std::exp(v / 0.25) - 1)); },
                 alpha);
  check_unary<T>(Op::ThresholdedRelu, [](double v) { return v > 0.25 ? v : 0.0; }, alpha);
  check_unary<T>(Op::Swish, [](double v) { return v / (1.0 + std::exp(-0.25 * v)); }, alpha);
  check_unary<T>(Op::HardSigmoid, [](double v) { return std::max(0.0, std::min(1.0, 0.25 * v + 0.5)); }, alpha);
  check_unary<T>(Op::Selu, [](double v) {
    const double a = 1.67326319217681884765625, g = 1.05070102214813232421875;
    return v > 0 ? g * v : g * (a * std::exp(v) - a);
  });
  Attributes shrink;
  shrink.set("lambd", 1.0f);
  shrink.set("bias", 0.5f);
  check_unary<T>(Op::Shrink, [](double v) { return v < -1 ? v + 0.5 : (v > 1 ? v - 0.5 : 0.0); }, shrink);
}

TEST(ElementwiseUnary, AllFloatTypesMatchDoubleReference) {
  check_float_unaries<float>();
  check_float_unaries<double>();
  check_float_unaries<Half>();
  check_float_unaries<BFloat16>();
}

TEST(ElementwiseUnary, RoundHalfToEven) {
  Tensor x = make_tensor<float>({6}, {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 2.6f});
  Tensor y = run_ok(Op::Round, {&x});
  expect_typed_close<float>(y, {0, 2, 2, -0.0, -2, 3}, 0, 0);
  Tensor h = make_tensor<Half>({2}, {Half(2.5f), Half(3.5f)});
  expect_typed_close<Half>(run_ok(Op::Round, {&h}), {2, 4}, 0, 0);
}

TEST(ElementwiseUnary, IntegerAbsNegSignWrap) {
  const int32_t mn = std::numeric_limits<int32_t>::min();
  Tensor x = make_tensor<int32_t>({4}, {mn, -5, 0, 7});
  Tensor a = run_ok(Op::Abs, {&x});
  EXPECT_EQ(a.data<int32_t>()[0], mn);  // wraps, like numpy
  EXPECT_EQ(a.data<int32_t>()[1], 5);
  Tensor n = run_ok(Op::Neg, {&x});
  EXPECT_EQ(n.data<int32_t>()[3], -7);
  Tensor s = run_ok(Op::Sign, {&x});
  EXPECT_EQ((std::vector<int32_t>(s.data<int32_t>(), s.data<int32_t>() + 4)), (std::vector<int32_t>{-1, -1, 0, 1}));
  Tensor u = make_tensor<uint8_t>({2}, {0, 200});
  expect_error(Op::Neg, {&u});
  Tensor bn = run_ok(Op::BitwiseNot, {&u});
  EXPECT_EQ(bn.data<uint8_t>()[1], 55);
}

TEST(ElementwiseUnary, IsNaNIsInfNot) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = make_tensor<Half>({4}, {Half(inf), Half(-inf), Half(nan), Half(1.0f)});
  Tensor isnan = run_ok(Op::IsNaN, {&x});
  ASSERT_EQ(isnan.dtype(), DataType::kBool);
  EXPECT_TRUE(isnan.data<bool>()[2]);
  EXPECT_FALSE(isnan.data<bool>()[0]);
  Attributes neg_only;
  neg_only.set("detect_positive", int64_t{0});
  Tensor isinf = run_ok(Op::IsInf, {&x}, neg_only);
  EXPECT_FALSE(isinf.data<bool>()[0]);
  EXPECT_TRUE(isinf.data<bool>()[1]);
  EXPECT_FALSE(isinf.data<bool>()[2]);
  Tensor b = make_tensor<bool>({2}, {true, false});
  Tensor nb = run_ok(Op::Not, {&b});
  EXPECT_FALSE(nb.data<bool>()[0]);
  EXPECT_TRUE(nb.data<bool>()[1]);
  expect_error(Op::Not, {&x});
  expect_error(Op::IsNaN, {&b});
}

TEST(ElementwiseUnary, PReluBroadcastsSlope) {
  Tensor x = random_tensor<BFloat16>({2, 3, 4});
  Tensor slope = random_tensor<BFloat16>({3, 1});
  Tensor y = run_ok(Op::PRelu, {&x, &slope});
  std::vector<double> xv = values<BFloat16>(x), sv = values<BFloat16>(slope), want;
  for (int64_t i = 0; i < 24; ++i) {
    double v = xv[static_cast<size_t>(i)];
    want.push_back(v < 0 ? v * sv[static_cast<size_t>((i / 4) % 3)] : v);
  }
  expect_typed_close<BFloat16>(y, want, tol<BFloat16>());
  Tensor bad = random_tensor<BFloat16>({2, 3, 4, 1});
  expect_error(Op::PRelu, {&x, &bad});  // slope would grow X's shape
}

TEST(ElementwiseUnary, BadAttributesAreErrors) {
  Tensor x = random_tensor<float>({3});
  Attributes gelu;
  gelu.set("approximate", std::string("erf"));
  expect_error(Op::Gelu, {&x}, gelu);
  Tensor i = random_tensor<int32_t>({3});
  expect_error(Op::Exp, {&i});
}

// ---- binary arithmetic ----

template <typename T>
void check_binary_broadcast() {
  Tensor a = random_tensor<T>({2, 1, 4});
  Tensor b = random_tensor<T>({3, 1});
  std::vector<double> av = values<T>(a), bv = values<T>(b);
  auto ref = [&](auto f) {
    std::vector<double> w;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) w.push_back(f(av[static_cast<size_t>(i * 4 + k)], bv[static_cast<size_t>(j)]));
    return w;
  };
  const double rt = is_float_v<T> ? tol<T>() : 0;
  Tensor y = run_ok(Op::Add, {&a, &b});
  ASSERT_EQ(y.dims(), (Dims{2, 3, 4}));
  expect_typed_close<T>(y, ref([](double x, double z) { return x + z; }), rt);
  expect_typed_close<T>(run_ok(Op::Sub, {&a, &b}), ref([](double x, double z) {
                    // unsigned results wrap modulo 2^bits
                    return std::is_unsigned_v<T> && x < z ? x - z + std::ldexp(1.0, 8 * sizeof(T)) : x - z;
                  }),
                  rt);
  expect_typed_close<T>(run_ok(Op::Mul, {&a, &b}), ref([](double x, double z) { return x * z; }), rt);
  if constexpr (is_float_v<T>) {
    expect_typed_close<T>(run_ok(Op::Div, {&a, &b}), ref([](double x, double z) { return x / z; }), rt);
    Tensor abs_a = run_ok(Op::Abs, {&a});  // a positive base keeps the real power defined
    expect_typed_close<T>(run_ok(Op::Pow, {&abs_a, &b}),
                          ref([](double x, double z) { return std::pow(std::fabs(x), z); }), rt, 1e-3);
  } else {
    expect_typed_close<T>(run_ok(Op::Div, {&a, &b}), ref([](double x, double z) { return std::trunc(x / z); }), 0);
  }
  Tensor less = run_ok(Op::Less, {&a, &b});
  ASSERT_EQ(less.dtype(), DataType::kBool);
  std::vector<double> lw = ref([](double x, double z) { return x < z ? 1.0 : 0.0; });
  for (int64_t i = 0; i < less.size(); ++i) EXPECT_EQ(less.data<bool>()[i], lw[static_cast<size_t>(i)] != 0);
}

TEST(ElementwiseBinary, BroadcastAllTypes) {
  check_binary_broadcast<float>();
  check_binary_broadcast<double>();
  check_binary_broadcast<Half>();
  check_binary_broadcast<BFloat16>();
  check_binary_broadcast<int8_t>();
  check_binary_broadcast<int32_t>();
  check_binary_broadcast<int64_t>();
  check_binary_broadcast<uint16_t>();
  check_binary_broadcast<uint64_t>();
}

TEST(ElementwiseBinary, PowNegativeBaseIntegerExponent) {
  Tensor a = make_tensor<float>({2}, {-2.0f, -3.0f});
  Tensor b = make_tensor<int64_t>({2}, {3, 2});
  expect_typed_close<float>(run_ok(Op::Pow, {&a, &b}), {-8, 9}, 0);
}

TEST(ElementwiseBinary, IntegerEdgeCasesDoNotCrash) {
  const int32_t mn = std::numeric_limits<int32_t>::min();
  Tensor a = make_tensor<int32_t>({4}, {7, mn, mn, std::numeric_limits<int32_t>::max()});
  Tensor b = make_tensor<int32_t>({4}, {0, -1, 0, 1});
  Tensor d = run_ok(Op::Div, {&a, &b});
  EXPECT_EQ(d.data<int32_t>()[0], 0);
  EXPECT_EQ(d.data<int32_t>()[1], mn);  // wraps instead of SIGFPE
  Tensor m = run_ok(Op::Mod, {&a, &b});
  EXPECT_EQ(m.data<int32_t>()[0], 0);
  EXPECT_EQ(m.data<int32_t>()[1], 0);
  Tensor s = run_ok(Op::Add, {&a, &b});
  EXPECT_EQ(s.data<int32_t>()[3], mn);  // wrap-around
  Attributes fmod;
  fmod.set("fmod", int64_t{1});
  Tensor f = run_ok(Op::Mod, {&a, &b}, fmod);
  EXPECT_EQ(f.data<int32_t>()[1], 0);
  Tensor u = make_tensor<uint16_t>({1}, {65535});
  Tensor u2 = run_ok(Op::Mul, {&u, &u});
  EXPECT_EQ(u2.data<uint16_t>()[0], 1);  // 65535^2 mod 2^16
}

TEST(ElementwiseBinary, ModSignSemantics) {
  Tensor a = make_tensor<int64_t>({4}, {-4, 7, 5, -3});
  Tensor b = make_tensor<int64_t>({4}, {3, -3, 2, -2});
  Tensor m = run_ok(Op::Mod, {&a, &b});
  EXPECT_EQ((std::vector<int64_t>(m.data<int64_t>(), m.data<int64_t>() + 4)), (std::vector<int64_t>{2, -2, 1, -1}));
  Attributes fmod;
  fmod.set("fmod", int64_t{1});
  Tensor f = run_ok(Op::Mod, {&a, &b}, fmod);
  EXPECT_EQ((std::vector<int64_t>(f.data<int64_t>(), f.data<int64_t>() + 4)), (std::vector<int64_t>{-1, 1, 1, -1}));
  Tensor x = make_tensor<double>({3}, {-4.5, 4.5, 3.0});
  Tensor y = make_tensor<double>({3}, {2.0, -2.0, 3.0});
  expect_typed_close<double>(run_ok(Op::Mod, {&x, &y}), {1.5, -1.5, 0}, 1e-12);
  expect_typed_close<double>(run_ok(Op::Mod, {&x, &y}, fmod), {-0.5, 0.5, 0}, 1e-12);
  fmod.set("fmod", int64_t{2});
  expect_error(Op::Mod, {&x, &y}, fmod);
}

TEST(ElementwiseBinary, PowIntegerIsExact) {
  Tensor a = make_tensor<int64_t>({4}, {3, -2, 2, 5});
  Tensor b = make_tensor<int64_t>({4}, {39, 63, -1, 0});
  Tensor y = run_ok(Op::Pow, {&a, &b});
  EXPECT_EQ(y.data<int64_t>()[0], 4052555153018976267LL);  // 3^39, not representable in double
  EXPECT_EQ(y.data<int64_t>()[1], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(y.data<int64_t>()[2], 0);
  EXPECT_EQ(y.data<int64_t>()[3], 1);
  // Mixed dtypes: the output has the base's dtype.
  Tensor fi = make_tensor<int32_t>({2}, {2, 3});
  Tensor ef = make_tensor<float>({2}, {0.5f, 2.0f});
  Tensor p = run_ok(Op::Pow, {&fi, &ef});
  ASSERT_EQ(p.dtype(), DataType::kInt32);
  EXPECT_EQ(p.data<int32_t>()[0], 1);  // trunc(sqrt 2)
  EXPECT_EQ(p.data<int32_t>()[1], 9);
  Tensor h = make_tensor<Half>({1}, {Half(1.5f)});
  Tensor e = make_tensor<uint64_t>({1}, {3});
  expect_typed_close<Half>(run_ok(Op::Pow, {&h, &e}), {3.375}, 1e-3);
}

TEST(ElementwiseBinary, ShapeAndDtypeMismatchAreErrors) {
  Tensor a = random_tensor<float>({2, 3});
  Tensor b = random_tensor<float>({4});
  Tensor c = random_tensor<double>({2, 3});
  expect_error(Op::Add, {&a, &b});
  expect_error(Op::Add, {&a, &c});
  expect_error(Op::Equal, {&a, &c});
  expect_error(Op::Pow, {&a, &b});
  expect_error(Op::Max, {&a, &b});
  expect_error(Op::Max, {&a, &c});
  Tensor bl = make_tensor<bool>({2}, {true, false});
  expect_error(Op::And, {&a, &a});
  expect_error(Op::Add, {&bl, &bl});
  expect_error(Op::BitwiseAnd, {&a, &a});
}

// ---- variadic ----

TEST(ElementwiseVariadic, BroadcastAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = make_tensor<float>({2, 1}, {1.0f, nan});
  Tensor b = make_tensor<float>({3}, {0.0f, 2.0f, -1.0f});
  Tensor c = make_tensor<float>({}, {0.5f});
  Tensor mx = run_ok(Op::Max, {&a, &b, &c});
  ASSERT_EQ(mx.dims(), (Dims{2, 3}));
  expect_typed_close<float>(mx.reshaped({3}), {1, 2, 1}, 0);  // first row
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isnan(mx.data<float>()[i]));
  Tensor mn = run_ok(Op::Min, {&b, &a});
  EXPECT_EQ(mn.data<float>()[2], -1.0f);
  EXPECT_TRUE(std::isnan(mn.data<float>()[4]));
  Tensor mean = run_ok(Op::Mean, {&a, &b, &c});
  EXPECT_NEAR(mean.data<float>()[1], (1.0 + 2.0 + 0.5) / 3, 1e-6);
  Tensor sum = run_ok(Op::Sum, {&a});
  EXPECT_EQ(sum.dims(), a.dims());
  Tensor hi = random_tensor<Half>({4});
  Tensor hj = random_tensor<Half>({4});
  std::vector<double> want;
  for (int i = 0; i < 4; ++i) want.push_back(std::max(at<Half>(hi, i), at<Half>(hj, i)));
  expect_typed_close<Half>(run_ok(Op::Max, {&hi, &hj}), want, 0);
  Tensor u = make_tensor<uint32_t>({2}, {4000000000u, 1u});
  Tensor v = make_tensor<uint32_t>({2}, {1u, 3u});
  Tensor umax = run_ok(Op::Max, {&u, &v});
  EXPECT_EQ(umax.data<uint32_t>()[0], 4000000000u);
}

// ---- comparisons, logic, bitwise ----

TEST(ElementwiseLogic, ComparisonsAndBool) {
  Tensor a = make_tensor<bool>({4}, {true, true, false, false});
  Tensor b = make_tensor<bool>({4}, {true, false, true, false});
  auto bools = [](const Tensor& t) { return std::vector<bool>(t.data<bool>(), t.data<bool>() + t.size()); };
  EXPECT_EQ(bools(run_ok(Op::Equal, {&a, &b})), (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(bools(run_ok(Op::And, {&a, &b})), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(bools(run_ok(Op::Or, {&a, &b})), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(bools(run_ok(Op::Xor, {&a, &b})), (std::vector<bool>{false, true, true, false}));
  Tensor h = make_tensor<BFloat16>({3}, {BFloat16(1.0f), BFloat16(2.0f), BFloat16(std::nanf(""))});
  Tensor g = make_tensor<BFloat16>({1}, {BFloat16(2.0f)});
  EXPECT_EQ(bools(run_ok(Op::GreaterOrEqual, {&h, &g})), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(bools(run_ok(Op::LessOrEqual, {&h, &g})), (std::vector<bool>{true, true, false}));
}

TEST(ElementwiseLogic, BitShiftSaturates) {
  Tensor x = make_tensor<int8_t>({4}, {-8, 4, 64, 3});
  Tensor s = make_tensor<int8_t>({4}, {8, -1, 1, 1});
  Attributes left, right;
  left.set("direction", std::string("LEFT"));
  right.set("direction", std::string("RIGHT"));
  Tensor l = run_ok(Op::BitShift, {&x, &s}, left);
  EXPECT_EQ((std::vector<int8_t>(l.data<int8_t>(), l.data<int8_t>() + 4)), (std::vector<int8_t>{0, 0, -128, 6}));
  Tensor r = run_ok(Op::BitShift, {&x, &s}, right);
  EXPECT_EQ((std::vector<int8_t>(r.data<int8_t>(), r.data<int8_t>() + 4)), (std::vector<int8_t>{-1, 0, 32, 1}));
  Tensor u = make_tensor<uint64_t>({1}, {1});
  Tensor us = make_tensor<uint64_t>({1}, {64});
  EXPECT_EQ(run_ok(Op::BitShift, {&u, &us}, left).data<uint64_t>()[0], 0u);
  Attributes bad;
  bad.set("direction", std::string("UP"));
  expect_error(Op::BitShift, {&u, &us}, bad);
  Tensor f = random_tensor<float>({1});
  expect_error(Op::BitShift, {&f, &f}, left);
}

// ---- Where, Clip ----

TEST(ElementwiseSelect, WhereBroadcasts) {
  Tensor c = make_tensor<bool>({2, 1}, {true, false});
  Tensor x = make_tensor<int16_t>({3}, {1, 2, 3});
  Tensor y = make_tensor<int16_t>({}, {-1});
  Tensor w = run_ok(Op::Where, {&c, &x, &y});
  ASSERT_EQ(w.dims(), (Dims{2, 3}));
  EXPECT_EQ((std::vector<int16_t>(w.data<int16_t>(), w.data<int16_t>() + 6)),
            (std::vector<int16_t>{1, 2, 3, -1, -1, -1}));
  Tensor notbool = make_tensor<int16_t>({2, 1}, {1, 0});
  expect_error(Op::Where, {&notbool, &x, &y});
  Tensor yf = make_tensor<float>({}, {-1.0f});
  expect_error(Op::Where, {&c, &x, &yf});
}

TEST(ElementwiseSelect, ClipConvertsBounds) {
  Tensor x = make_tensor<Half>({4}, {Half(-3.0f), Half(0.25f), Half(7.0f), Half(std::nanf(""))});
  Tensor lo = make_tensor<float>({}, {-1.0f});
  Tensor hi = make_tensor<float>({}, {std::numeric_limits<float>::max()});
  Tensor y = run_ok(Op::Clip, {&x, &lo, &hi});
  ASSERT_EQ(y.dtype(), DataType::kFloat16);
  EXPECT_EQ(at<Half>(y, 0), -1.0);
  EXPECT_EQ(at<Half>(y, 2), 7.0);
  EXPECT_TRUE(std::isnan(at<Half>(y, 3)));
  Tensor i = make_tensor<int8_t>({3}, {-100, 5, 100});
  Tensor ilo = make_tensor<float>({}, {-std::numeric_limits<float>::max()});
  Tensor ihi = make_tensor<int64_t>({1}, {50});
  Tensor iy = run_ok(Op::Clip, {&i, &ilo, &ihi});
  EXPECT_EQ((std::vector<int8_t>(iy.data<int8_t>(), iy.data<int8_t>() + 3)), (std::vector<int8_t>{-100, 5, 50}));
  Tensor only_max = run_ok(Op::Clip, {&i, nullptr, &ihi});
  EXPECT_EQ(only_max.data<int8_t>()[0], -100);
  Tensor a = make_tensor<float>({2}, {0.0f, 10.0f});
  Tensor l5 = make_tensor<float>({}, {5.0f});
  Tensor h2 = make_tensor<float>({}, {2.0f});
  expect_typed_close<float>(run_ok(Op::Clip, {&a, &l5, &h2}), {2, 2}, 0);  // min > max gives max
  Tensor two = make_tensor<float>({2}, {0.0f, 1.0f});
  expect_error(Op::Clip, {&a, &two});
}

// ---- Cast, Dropout, Identity ----

TEST(ElementwiseCast, EveryDtypePair) {
  const DataType all[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                          DataType::kInt8,    DataType::kInt16,   DataType::kInt32,   DataType::kInt64,
                          DataType::kUInt8,   DataType::kUInt16,  DataType::kUInt32,  DataType::kUInt64};
  Tensor src = make_tensor<int64_t>({3}, {0, 3, 100});
  for (DataType from : all) {
    Tensor x = cast_tensor(src, from);
    for (DataType to : all) {
      Attributes attrs;
      attrs.set("to", static_cast<int64_t>(to));
      Tensor y = run_ok(Op::Cast, {&x}, attrs);
      ASSERT_EQ(y.dtype(), to);
      for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(y.get_double(i), src.get_double(i)) << dtype_name(from) << "->" << dtype_name(to);
      Tensor like(to, {});
      Tensor z = run_ok(Op::Cast, {&x, &like});  // CastLike
      EXPECT_EQ(z.dtype(), to);
    }
    Attributes to_bool;
    to_bool.set("to", static_cast<int64_t>(DataType::kBool));
    Tensor b = run_ok(Op::Cast, {&x}, to_bool);
    EXPECT_EQ((std::vector<bool>(b.data<bool>(), b.data<bool>() + 3)), (std::vector<bool>{false, true, true}));
  }
}

TEST(ElementwiseCast, FloatSpecialsAndErrors) {
  Tensor x = make_tensor<float>({4}, {-2.7f, 2.7f, std::nanf(""), 1e10f});
  Attributes to_i32, to_bool, to_string, missing;
  to_i32.set("to", static_cast<int64_t>(DataType::kInt32));
  to_bool.set("to", static_cast<int64_t>(DataType::kBool));
  to_string.set("to", static_cast<int64_t>(DataType::kString));
  Tensor i = run_ok(Op::Cast, {&x}, to_i32);
  EXPECT_EQ(i.data<int32_t>()[0], -2);
  EXPECT_EQ(i.data<int32_t>()[1], 2);
  Tensor b = run_ok(Op::Cast, {&x}, to_bool);
  EXPECT_TRUE(b.data<bool>()[2]);  // NaN is true
  Tensor bf = make_tensor<bool>({2}, {true, false});
  Attributes to_h;
  to_h.set("to", static_cast<int64_t>(DataType::kFloat16));
  expect_typed_close<Half>(run_ok(Op::Cast, {&bf}, to_h), {1, 0}, 0);
  // Cast to string gives numpy's shortest round-trip text.
  Tensor s = run_ok(Op::Cast, {&x}, to_string);
  ASSERT_TRUE(s.is_string());
  EXPECT_EQ(s.data<std::string>()[0], "-2.7");
  EXPECT_EQ(s.data<std::string>()[2], "nan");
  EXPECT_EQ(s.data<std::string>()[3], "1e+10");
  expect_error(Op::Cast, {&x}, missing);
  Attributes bogus;
  bogus.set("to", int64_t{99});
  expect_error(Op::Cast, {&x}, bogus);
}

TEST(ElementwiseDropout, InferenceAndTraining) {
  Tensor x = make_tensor<float>({5}, {1, 2, 3, 4, 5});
  RunResult r = try_run_kernel(Op::Dropout, {&x}, {}, 2);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  expect_typed_close<float>(r.outputs[0], {1, 2, 3, 4, 5}, 0);
  ASSERT_EQ(r.outputs[1].dtype(), DataType::kBool);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(r.outputs[1].data<bool>()[i]);
  // Training: numpy.random.seed(0); uniform(0, 1, 5) = [0.549, 0.715, 0.603, 0.545, 0.424].
  Tensor ratio = make_tensor<float>({}, {0.5f});
  Tensor on = make_tensor<bool>({}, {true});
  Attributes seed;
  seed.set("seed", int64_t{0});
  RunResult t = try_run_kernel(Op::Dropout, {&x, &ratio, &on}, seed, 2);
  ASSERT_TRUE(t.status.is_ok()) << t.status.message();
  expect_typed_close<float>(t.outputs[0], {2, 4, 6, 8, 0}, 0);
  EXPECT_FALSE(t.outputs[1].data<bool>()[4]);
  Tensor one = make_tensor<float>({}, {1.0f});
  expect_error(Op::Dropout, {&x, &one, &on}, seed);
  Tensor not_bool = make_tensor<float>({}, {1.0f});
  expect_error(Op::Dropout, {&x, &ratio, &not_bool}, seed);
  Tensor id = run_ok(Op::Identity, {&x});
  EXPECT_EQ(id.dims(), x.dims());
}

}  // namespace
}  // namespace kiln
