// Reduction reference kernels (Reduce*, Softmax family, ArgMax/ArgMin, TopK, CumSum):
// dtype paths the conformance data does not cover (float16, bfloat16, integers, bool),
// empty sets, noop_with_empty_axes, NaN handling and error cases. Expected values come
// from independent double-precision loops over fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "backends/cpu/reference/kernel.h"
#include "core/tensor.h"
#include "kernel_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

// expect_close that also accepts matching infinities and NaNs.
template <typename T>
void expect_close_nonfinite(const Tensor& got, const std::vector<double>& want, double rtol) {
  ASSERT_EQ(got.size(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.size(); ++i) {
    const double w = want[static_cast<size_t>(i)];
    if (std::isinf(w) || std::isnan(w)) {
      if (std::isnan(w)) EXPECT_TRUE(std::isnan(at<T>(got, i))) << "element " << i;
      else EXPECT_EQ(at<T>(got, i), w) << "element " << i;
      continue;
    }
    EXPECT_NEAR(at<T>(got, i), w, rtol * std::fabs(w) + 1e-6) << "element " << i;
  }
}

Attributes attrs_of(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  Attributes a;
  for (auto& [k, v] : kv) a.set(k, v);
  return a;
}

// ---- Reduce* over axes {0, 2} of a [3, 4, 5] tensor ----

using Fold = std::function<double(const std::vector<double>&)>;

template <typename T>
void check_reduce(Op op, const Fold& fold, double rtol, bool keepdims) {
  Tensor x = random_tensor<T>({3, 4, 5});
  Tensor axes = make_int64_vector({0, -1});
  Attributes a = attrs_of({{"keepdims", keepdims ? 1 : 0}});
  Tensor y = run_ok(op, {&x, &axes}, a);
  ASSERT_EQ(y.dims(), keepdims ? (Dims{1, 4, 1}) : (Dims{4})) << op_name(op);
  ASSERT_EQ(y.dtype(), x.dtype());
  std::vector<double> want;
  for (int j = 0; j < 4; ++j) {
    std::vector<double> vals;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 5; ++k) vals.push_back(at<T>(x, i * 20 + j * 5 + k));
    want.push_back(fold(vals));
  }
  expect_close_nonfinite<T>(y, want, rtol);
}

double f_sum(const std::vector<double>& v) { double s = 0; for (double x : v) s += x; return s; }
double f_mean(const std::vector<double>& v) { return f_sum(v) / static_cast<double>(v.size()); }
double f_max(const std::vector<double>& v) { double m = -INFINITY; for (double x : v) m = std::max(m, x); return m; }
double f_min(const std::vector<double>& v) { double m = INFINITY; for (double x : v) m = std::min(m, x); return m; }
double f_prod(const std::vector<double>& v) { double p = 1; for (double x : v) p *= x; return p; }
double f_l1(const std::vector<double>& v) { double s = 0; for (double x : v) s += std::fabs(x); return s; }
double f_ssq(const std::vector<double>& v) { double s = 0; for (double x : v) s += x * x; return s; }
double f_l2(const std::vector<double>& v) { return std::sqrt(f_ssq(v)); }
double f_logsum(const std::vector<double>& v) { return std::log(f_l1(v)); }  // positive inputs only
double f_lse(const std::vector<double>& v) { double s = 0; for (double x : v) s += std::exp(x); return std::log(s); }

template <typename T>
void check_all_float_reductions(double rtol) {
  for (bool keep : {true, false}) {
    check_reduce<T>(Op::ReduceSum, f_sum, rtol, keep);
    check_reduce<T>(Op::ReduceMean, f_mean, rtol, keep);
    check_reduce<T>(Op::ReduceMax, f_max, 0, keep);
    check_reduce<T>(Op::ReduceMin, f_min, 0, keep);
    check_reduce<T>(Op::ReduceProd, f_prod, rtol, keep);
    check_reduce<T>(Op::ReduceL1, f_l1, rtol, keep);
    check_reduce<T>(Op::ReduceL2, f_l2, rtol, keep);
    check_reduce<T>(Op::ReduceSumSquare, f_ssq, rtol, keep);
    check_reduce<T>(Op::ReduceLogSumExp, f_lse, rtol, keep);
  }
}

TEST(Reduce, AllOpsFloatTypes) {
  check_all_float_reductions<float>(1e-5);
  check_all_float_reductions<double>(1e-12);
  check_all_float_reductions<Half>(2e-3);
  check_all_float_reductions<BFloat16>(1e-2);
}

TEST(Reduce, LogSumOfPositiveValues) {
  Tensor x = random_tensor<float>({3, 4, 5});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = std::fabs(x.data<float>()[i]);
  Tensor y = run_ok(Op::ReduceLogSum, {&x});  // no axes: all, keepdims
  ASSERT_EQ(y.dims(), (Dims{1, 1, 1}));
  std::vector<double> all;
  for (int64_t i = 0; i < x.size(); ++i) all.push_back(at<float>(x, i));
  expect_close_nonfinite<float>(y, {f_logsum(all)}, 1e-5);
}

TEST(Reduce, IntegerTypesExact) {
  for (bool keep : {true, false}) {
    check_reduce<int32_t>(Op::ReduceSum, f_sum, 0, keep);
    check_reduce<int64_t>(Op::ReduceSumSquare, f_ssq, 0, keep);
    check_reduce<uint32_t>(Op::ReduceL1, f_l1, 0, keep);
    check_reduce<uint64_t>(Op::ReduceSum, f_sum, 0, keep);
    check_reduce<int8_t>(Op::ReduceMax, f_max, 0, keep);
    check_reduce<uint8_t>(Op::ReduceMin, f_min, 0, keep);
    check_reduce<int64_t>(Op::ReduceMin, f_min, 0, keep);
  }
  // int64 sums beyond 2^53 stay exact.
  Tensor big = make_tensor<int64_t>({2}, {(int64_t{1} << 60) + 1, 2});
  EXPECT_EQ(run_ok(Op::ReduceSum, {&big}).data<int64_t>()[0], (int64_t{1} << 60) + 3);
  // Mean of ints truncates toward zero like numpy's astype.
  Tensor m = make_tensor<int32_t>({2}, {-1, -2});
  EXPECT_EQ(run_ok(Op::ReduceMean, {&m}).data<int32_t>()[0], -1);
}

TEST(Reduce, BoolMaxMin) {
  Tensor x = make_tensor<bool>({2, 3}, {false, true, false, false, false, false});
  Tensor axes = make_int64_vector({1});
  Tensor mx = run_ok(Op::ReduceMax, {&x, &axes});
  ASSERT_EQ(mx.dtype(), DataType::kBool);
  EXPECT_EQ(mx.data<bool>()[0], true);
  EXPECT_EQ(mx.data<bool>()[1], false);
  Tensor mn = run_ok(Op::ReduceMin, {&x, &axes});
  EXPECT_EQ(mn.data<bool>()[0], false);
  expect_error(Op::ReduceSum, {&x, &axes});  // bool is only valid for Max/Min
}

TEST(Reduce, EmptySet) {
  Tensor x(DataType::kFloat32, {2, 0, 4});
  Tensor axes = make_int64_vector({1});
  auto reduce = [&](Op op) { return run_ok(op, {&x, &axes}); };
  Tensor s = reduce(Op::ReduceSum);
  ASSERT_EQ(s.dims(), (Dims{2, 1, 4}));
  expect_close_nonfinite<float>(s, std::vector<double>(8, 0.0), 0);
  expect_close_nonfinite<float>(reduce(Op::ReduceProd), std::vector<double>(8, 1.0), 0);
  expect_close_nonfinite<float>(reduce(Op::ReduceMax), std::vector<double>(8, -INFINITY), 0);
  expect_close_nonfinite<float>(reduce(Op::ReduceMin), std::vector<double>(8, INFINITY), 0);
  expect_close_nonfinite<float>(reduce(Op::ReduceLogSumExp), std::vector<double>(8, -INFINITY), 0);
  expect_close_nonfinite<float>(reduce(Op::ReduceLogSum), std::vector<double>(8, -INFINITY), 0);
  expect_close_nonfinite<float>(reduce(Op::ReduceL2), std::vector<double>(8, 0.0), 0);
  Tensor xi(DataType::kInt32, {0, 3});
  Tensor a0 = make_int64_vector({0});
  Tensor mi = run_ok(Op::ReduceMax, {&xi, &a0});
  ASSERT_EQ(mi.dims(), (Dims{1, 3}));
  EXPECT_EQ(mi.data<int32_t>()[0], std::numeric_limits<int32_t>::lowest());
  // Reducing a non-empty axis of an empty tensor gives an empty result.
  Tensor a2 = make_int64_vector({2});
  EXPECT_EQ(run_ok(Op::ReduceSum, {&x, &a2}).dims(), (Dims{2, 0, 1}));
}

TEST(Reduce, EmptyAxesNoopAndReduceAll) {
  Tensor x = random_tensor<float>({2, 3});
  Tensor none(DataType::kInt64, {0});
  Tensor all = run_ok(Op::ReduceSum, {&x, &none}, attrs_of({{"keepdims", 0}}));
  EXPECT_EQ(all.dims(), Dims{});
  std::vector<double> v;
  for (int i = 0; i < 6; ++i) v.push_back(at<float>(x, i));
  expect_close_nonfinite<float>(all, {f_sum(v)}, 1e-5);
  // noop_with_empty_axes: no reduction; ReduceSum is the identity, ReduceSumSquare squares.
  Attributes noop = attrs_of({{"noop_with_empty_axes", 1}});
  Tensor id = run_ok(Op::ReduceSum, {&x, &none}, noop);
  ASSERT_EQ(id.dims(), x.dims());
  expect_close_nonfinite<float>(id, v, 0);
  Tensor sq = run_ok(Op::ReduceSumSquare, {&x}, noop);
  std::vector<double> v2;
  for (double d : v) v2.push_back(d * d);
  expect_close_nonfinite<float>(sq, v2, 1e-6);
}

TEST(Reduce, NaNPropagatesThroughMax) {
  Tensor x = make_tensor<float>({3}, {1.0f, NAN, 2.0f});
  EXPECT_TRUE(std::isnan(run_ok(Op::ReduceMax, {&x}).data<float>()[0]));
  EXPECT_TRUE(std::isnan(run_ok(Op::ReduceMin, {&x}).data<float>()[0]));
}

TEST(Reduce, Errors) {
  Tensor x = random_tensor<float>({2, 3});
  Tensor bad = make_int64_vector({2});
  expect_error(Op::ReduceSum, {&x, &bad});
  Tensor neg = make_int64_vector({-3});
  expect_error(Op::ReduceMean, {&x, &neg});
  Tensor dup = make_int64_vector({1, -1});
  expect_error(Op::ReduceMax, {&x, &dup});
  Tensor fax = make_tensor<float>({1}, {0.0f});
  expect_error(Op::ReduceSum, {&x, &fax});
  Tensor ax2 = make_tensor<int64_t>({1, 1}, {0});
  expect_error(Op::ReduceSum, {&x, &ax2});
}

// ---- Softmax family ----

template <typename T>
void check_softmax(double rtol) {
  // axis 1 of [2, 3, 4] (opset 13 semantics): normalize each of the 2*4 columns.
  Tensor x = random_tensor<T>({2, 3, 4});
  Attributes a = attrs_of({{"axis", 1}});
  Tensor sm = run_ok(Op::Softmax, {&x}, a);
  Tensor lsm = run_ok(Op::LogSoftmax, {&x}, a);
  std::vector<double> want_sm(24), want_lsm(24);
  for (int o = 0; o < 2; ++o)
    for (int in = 0; in < 4; ++in) {
      double s = 0;
      for (int k = 0; k < 3; ++k) s += std::exp(at<T>(x, o * 12 + k * 4 + in));
      for (int k = 0; k < 3; ++k) {
        const int i = o * 12 + k * 4 + in;
        want_sm[static_cast<size_t>(i)] = std::exp(at<T>(x, i)) / s;
        want_lsm[static_cast<size_t>(i)] = at<T>(x, i) - std::log(s);
      }
    }
  expect_close_nonfinite<T>(sm, want_sm, rtol);
  expect_close_nonfinite<T>(lsm, want_lsm, rtol);
}

TEST(Softmax, AxisSemanticsAllFloatTypes) {
  check_softmax<float>(1e-6);
  check_softmax<double>(1e-12);
  check_softmax<Half>(2e-3);
  check_softmax<BFloat16>(1e-2);
}

TEST(Softmax, LegacyCoerce2D) {
  Tensor x = random_tensor<float>({2, 3, 4});
  Attributes a = attrs_of({{"axis", 1}, {"kiln_coerce_2d", 1}});
  Tensor y = run_ok(Op::Softmax, {&x}, a);
  ASSERT_EQ(y.dims(), x.dims());
  for (int o = 0; o < 2; ++o) {  // each row of 12 elements sums to 1
    double s = 0, e = 0;
    for (int k = 0; k < 12; ++k) e += std::exp(at<float>(x, o * 12 + k));
    for (int k = 0; k < 12; ++k) {
      s += at<float>(y, o * 12 + k);
      EXPECT_NEAR(at<float>(y, o * 12 + k), std::exp(at<float>(x, o * 12 + k)) / e, 1e-6);
    }
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
  Tensor h = run_ok(Op::Hardmax, {&x}, a);
  for (int o = 0; o < 2; ++o) {
    int best = 0;
    for (int k = 1; k < 12; ++k) {
      if (at<float>(x, o * 12 + k) > at<float>(x, o * 12 + best)) best = k;
    }
    for (int k = 0; k < 12; ++k) EXPECT_EQ(at<float>(h, o * 12 + k), k == best ? 1.0 : 0.0);
  }
}

TEST(Softmax, LargeValuesAreStable) {
  Tensor x = make_tensor<float>({3}, {10000.0f, 10001.0f, 10002.0f});
  Attributes a = attrs_of({{"axis", -1}});
  Tensor y = run_ok(Op::Softmax, {&x}, a);
  const double s = 1 + std::exp(-1.0) + std::exp(-2.0);
  expect_close_nonfinite<float>(y, {std::exp(-2.0) / s, std::exp(-1.0) / s, 1 / s}, 1e-6);
  Tensor l = run_ok(Op::LogSoftmax, {&x}, a);
  expect_close_nonfinite<float>(l, {-2 - std::log(s), -1 - std::log(s), -std::log(s)}, 1e-5);
}

TEST(Softmax, HardmaxTiesPickFirst) {
  Tensor x = make_tensor<Half>({2, 3}, {Half(1.0f), Half(3.0f), Half(3.0f), Half(-1.0f), Half(-1.0f), Half(-1.0f)});
  Tensor y = run_ok(Op::Hardmax, {&x}, attrs_of({{"axis", 1}}));
  expect_close_nonfinite<Half>(y, {0, 1, 0, 1, 0, 0}, 0);
}

TEST(Softmax, Errors) {
  Tensor x = random_tensor<float>({2, 3});
  expect_error(Op::Softmax, {&x}, attrs_of({{"axis", 2}}));
  expect_error(Op::LogSoftmax, {&x}, attrs_of({{"axis", -3}}));
  expect_error(Op::Hardmax, {&x}, attrs_of({{"axis", 3}, {"kiln_coerce_2d", 1}}));
  Tensor i = random_tensor<int32_t>({2, 3});
  expect_error(Op::Softmax, {&i}, attrs_of({{"axis", 1}}));
}

// ---- ArgMax / ArgMin ----

template <typename T>
void check_arg(bool is_max, bool last, bool keepdims) {
  // Few distinct values so ties are common.
  Tensor x(dtype_of<T>::value, {3, 4, 5});
  std::uniform_int_distribution<int> d(0, 3);
  for (int64_t i = 0; i < x.size(); ++i) x.data<T>()[i] = from_compute<T>(static_cast<compute_t<T>>(d(rng())));
  Attributes a = attrs_of({{"axis", -2}, {"keepdims", keepdims}, {"select_last_index", last}});
  Tensor y = run_ok(is_max ? Op::ArgMax : Op::ArgMin, {&x}, a);
  ASSERT_EQ(y.dtype(), DataType::kInt64);
  ASSERT_EQ(y.dims(), keepdims ? (Dims{3, 1, 5}) : (Dims{3, 5}));
  for (int o = 0; o < 3; ++o)
    for (int in = 0; in < 5; ++in) {
      int best = 0;
      for (int k = 1; k < 4; ++k) {
        double v = at<T>(x, o * 20 + k * 5 + in), b = at<T>(x, o * 20 + best * 5 + in);
        if ((is_max ? v > b : v < b) || (last && v == b)) best = k;
      }
      EXPECT_EQ(y.data<int64_t>()[o * 5 + in], best);
    }
}

TEST(ArgMax, TiesAndSelectLastIndex) {
  for (bool last : {false, true})
    for (bool keep : {false, true}) {
      check_arg<float>(true, last, keep);
      check_arg<BFloat16>(false, last, keep);
      check_arg<Half>(true, last, keep);
      check_arg<int8_t>(false, last, keep);
      check_arg<uint64_t>(true, last, keep);
      check_arg<double>(false, last, keep);
    }
}

TEST(ArgMax, NaNWinsAndErrors) {
  Tensor x = make_tensor<float>({4}, {1.0f, NAN, 5.0f, NAN});
  EXPECT_EQ(run_ok(Op::ArgMax, {&x}).data<int64_t>()[0], 1);
  EXPECT_EQ(run_ok(Op::ArgMin, {&x}).data<int64_t>()[0], 1);
  EXPECT_EQ(run_ok(Op::ArgMax, {&x}, attrs_of({{"select_last_index", 1}})).data<int64_t>()[0], 3);
  expect_error(Op::ArgMax, {&x}, attrs_of({{"axis", 1}}));
  Tensor e(DataType::kFloat32, {0, 3});
  expect_error(Op::ArgMin, {&e});  // empty reduction axis
}

// ---- TopK ----

TEST(TopK, LargestSmallestAndTies) {
  Tensor x = make_tensor<float>({2, 5}, {1, 3, 3, 2, 5, 4, 4, 4, 0, 9});
  Tensor k = make_int64_vector({3});
  auto out = run_ok_outputs(Op::TopK, {&x, &k}, attrs_of({{"axis", 1}}), 2);
  ASSERT_EQ(out[0].dims(), (Dims{2, 3}));
  expect_close_nonfinite<float>(out[0], {5, 3, 3, 9, 4, 4}, 0);
  EXPECT_EQ(out[1].to_int_vector(), (std::vector<int64_t>{4, 1, 2, 4, 0, 1}));
  auto sm = run_ok_outputs(Op::TopK, {&x, &k}, attrs_of({{"axis", -1}, {"largest", 0}}), 2);
  expect_close_nonfinite<float>(sm[0], {1, 2, 3, 0, 4, 4}, 0);
  EXPECT_EQ(sm[1].to_int_vector(), (std::vector<int64_t>{0, 3, 1, 3, 0, 1}));
}

template <typename T>
void check_topk_axis0() {
  Tensor x = random_tensor<T>({6, 3});
  Tensor k = make_int64_vector({2});
  auto out = run_ok_outputs(Op::TopK, {&x, &k}, attrs_of({{"axis", 0}}), 2);
  ASSERT_EQ(out[0].dims(), (Dims{2, 3}));
  ASSERT_EQ(out[0].dtype(), x.dtype());
  for (int c = 0; c < 3; ++c) {
    std::vector<std::pair<double, int>> col;
    for (int r = 0; r < 6; ++r) col.push_back({-at<T>(x, r * 3 + c), r});
    std::stable_sort(col.begin(), col.end(), [](auto& a, auto& b) { return a.first < b.first; });
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(at<T>(out[0], j * 3 + c), -col[static_cast<size_t>(j)].first);
      EXPECT_EQ(out[1].data<int64_t>()[j * 3 + c], col[static_cast<size_t>(j)].second);
    }
  }
}

TEST(TopK, DtypesAlongAxis0) {
  check_topk_axis0<float>();
  check_topk_axis0<Half>();
  check_topk_axis0<BFloat16>();
  check_topk_axis0<int32_t>();
  check_topk_axis0<uint8_t>();
  check_topk_axis0<int64_t>();
}

TEST(TopK, Errors) {
  Tensor x = random_tensor<float>({2, 5});
  Tensor k6 = make_int64_vector({6});
  expect_error(Op::TopK, {&x, &k6}, {}, 2);
  Tensor kneg = make_int64_vector({-1});
  expect_error(Op::TopK, {&x, &kneg}, {}, 2);
  Tensor k2 = make_int64_vector({1, 2});
  expect_error(Op::TopK, {&x, &k2}, {}, 2);
  Tensor k1 = make_int64_vector({1});
  expect_error(Op::TopK, {&x, &k1}, attrs_of({{"axis", 2}}), 2);
  Tensor kf = make_tensor<float>({1}, {1.0f});
  expect_error(Op::TopK, {&x, &kf}, {}, 2);
  Tensor s = make_tensor<float>({}, {1.0f});
  expect_error(Op::TopK, {&s, &k1}, {}, 2);
}

// ---- CumSum ----

template <typename T>
void check_cumsum(bool exclusive, bool reverse, double rtol) {
  Tensor x = random_tensor<T>({3, 4});
  Tensor axis = make_tensor<int32_t>({}, {-2});
  Tensor y = run_ok(Op::CumSum, {&x, &axis}, attrs_of({{"exclusive", exclusive}, {"reverse", reverse}}));
  ASSERT_EQ(y.dims(), x.dims());
  std::vector<double> want(12);
  for (int c = 0; c < 4; ++c) {
    double s = 0;
    for (int j = 0; j < 3; ++j) {
      const int r = reverse ? 2 - j : j;
      if (exclusive) {
        want[static_cast<size_t>(r * 4 + c)] = s;
        s += at<T>(x, r * 4 + c);
      } else {
        s += at<T>(x, r * 4 + c);
        want[static_cast<size_t>(r * 4 + c)] = s;
      }
    }
  }
  expect_close_nonfinite<T>(y, want, rtol);
}

TEST(CumSum, ExclusiveReverseDtypes) {
  for (bool ex : {false, true})
    for (bool rev : {false, true}) {
      check_cumsum<float>(ex, rev, 1e-6);
      check_cumsum<double>(ex, rev, 1e-12);
      check_cumsum<Half>(ex, rev, 2e-3);
      check_cumsum<BFloat16>(ex, rev, 1e-2);
      check_cumsum<int32_t>(ex, rev, 0);
      check_cumsum<int64_t>(ex, rev, 0);
      check_cumsum<uint32_t>(ex, rev, 0);
      check_cumsum<uint64_t>(ex, rev, 0);
    }
}

TEST(CumSum, Errors) {
  Tensor x = random_tensor<float>({3, 4});
  Tensor bad = make_scalar_int64(2);
  expect_error(Op::CumSum, {&x, &bad});
  Tensor two = make_int64_vector({0, 1});
  expect_error(Op::CumSum, {&x, &two});
  Tensor fa = make_tensor<float>({}, {0.0f});
  expect_error(Op::CumSum, {&x, &fa});
  Tensor s = make_tensor<float>({}, {1.0f});
  Tensor zero = make_scalar_int64(0);
  expect_error(Op::CumSum, {&s, &zero});
}

}  // namespace
}  // namespace kiln
