// Shape and indexing reference kernels: dtype paths the conformance data does not
// cover (float16, bfloat16, small ints), edge cases and error handling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "backends/cpu/reference/kernel.h"
#include "core/tensor.h"
#include "kernel_test_util.h"

namespace kiln {
namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

using namespace kiln::testing;

// Random values in [1, 100] (16-bit floats: [1, 100] / 8, bools: even or not).
template <typename T>
Tensor random_int_tensor(Dims dims, std::mt19937& rng) {
  Tensor t(dtype_of<T>::value, dims);
  std::uniform_int_distribution<int> dist(1, 100);
  for (int64_t i = 0; i < t.size(); ++i) {
    int v = dist(rng);
    if constexpr (is_half_like_v<T>) t.data<T>()[i] = T(static_cast<float>(v) / 8.0f);
    else if constexpr (std::is_same_v<T, bool>) t.data<T>()[i] = v % 2 == 0;
    else t.data<T>()[i] = static_cast<T>(v);
  }
  return t;
}

template <typename T>
double as_double(T v) {
  if constexpr (is_half_like_v<T>) return static_cast<float>(v);
  else return static_cast<double>(v);
}

std::vector<int64_t> ints(const Tensor& t) { return t.to_int_vector(); }

// ---- Transpose / DepthToSpace, every element size ----

template <typename T>
void check_transpose() {
  std::mt19937 rng(7);
  Tensor x = random_int_tensor<T>({2, 3, 4}, rng);
  Attributes a;
  a.set("perm", std::vector<int64_t>{2, 0, 1});
  Tensor y = run_ok(Op::Transpose, {&x}, a);
  ASSERT_EQ(y.dims(), (Dims{4, 2, 3}));
  ASSERT_EQ(y.dtype(), x.dtype());
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(as_double(y.data<T>()[k * 6 + i * 3 + j]), as_double(x.data<T>()[i * 12 + j * 4 + k]));
}

TEST(RefTranspose, AllElementSizes) {
  check_transpose<Half>();
  check_transpose<BFloat16>();
  check_transpose<float>();
  check_transpose<double>();
  check_transpose<int8_t>();
  check_transpose<uint16_t>();
  check_transpose<int64_t>();
  check_transpose<bool>();
}

TEST(RefTranspose, DefaultReversesAndRejectsBadPerm) {
  Tensor x = make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor y = run_ok(Op::Transpose, {&x});
  EXPECT_EQ(y.dims(), (Dims{3, 2}));
  EXPECT_EQ(y.data<float>()[1], 4.0f);
  Attributes bad;
  bad.set("perm", std::vector<int64_t>{0, 0});
  expect_error(Op::Transpose, {&x}, bad);
  bad.set("perm", std::vector<int64_t>{0, 5});
  expect_error(Op::Transpose, {&x}, bad);
  bad.set("perm", std::vector<int64_t>{0});
  expect_error(Op::Transpose, {&x}, bad);
}

TEST(RefDepthToSpace, CrdModeBFloat16) {
  std::mt19937 rng(3);
  const int64_t n = 1, c = 8, h = 2, w = 3, b = 2, oc = c / (b * b);
  Tensor x = random_int_tensor<BFloat16>({n, c, h, w}, rng);
  Attributes a;
  a.set("blocksize", b);
  a.set("mode", std::string("CRD"));
  Tensor y = run_ok(Op::DepthToSpace, {&x}, a);
  ASSERT_EQ(y.dims(), (Dims{n, oc, h * b, w * b}));
  for (int64_t co = 0; co < oc; ++co)
    for (int64_t yy = 0; yy < h * b; ++yy)
      for (int64_t xx = 0; xx < w * b; ++xx) {
        int64_t ci = co * b * b + (yy % b) * b + (xx % b);
        float want = static_cast<float>(x.data<BFloat16>()[(ci * h + yy / b) * w + xx / b]);
        EXPECT_EQ(static_cast<float>(y.data<BFloat16>()[(co * h * b + yy) * w * b + xx]), want);
      }
  // Round trip through SpaceToDepth in CRD mode is the identity.
  Attributes s;
  s.set("blocksize", b);
  s.set("mode", std::string("CRD"));
  Tensor back = run_ok(Op::SpaceToDepth, {&y}, s);
  ASSERT_EQ(back.dims(), x.dims());
  for (int64_t i = 0; i < x.size(); ++i) EXPECT_EQ(back.data<BFloat16>()[i].bits, x.data<BFloat16>()[i].bits);
  Attributes bad;
  bad.set("blocksize", int64_t{3});
  expect_error(Op::DepthToSpace, {&x}, bad);
  expect_error(Op::SpaceToDepth, {&x}, bad);
  Tensor empty(DataType::kFloat32, {1, 0, 2, 2});
  bad.set("blocksize", kI64Max);
  expect_error(Op::DepthToSpace, {&empty}, bad);
}

// ---- Reshape family ----

TEST(RefReshape, ZeroMinusOneAndErrors) {
  Tensor x(DataType::kFloat16, {2, 3, 4});
  Tensor s1 = make_int64_vector({0, -1});
  EXPECT_EQ(run_ok(Op::Reshape, {&x, &s1}).dims(), (Dims{2, 12}));
  Tensor two_inferred = make_int64_vector({-1, -1});
  expect_error(Op::Reshape, {&x, &two_inferred});
  Tensor wrong = make_int64_vector({5, 5});
  expect_error(Op::Reshape, {&x, &wrong});
  Tensor neg = make_int64_vector({-2, -12});
  expect_error(Op::Reshape, {&x, &neg});
  Tensor copy_past_rank = make_int64_vector({24, 1, 1, 0});
  expect_error(Op::Reshape, {&x, &copy_past_rank});
  Tensor indivisible = make_int64_vector({5, -1});
  expect_error(Op::Reshape, {&x, &indivisible});
  // allowzero=1: 0 is a real zero-size dim.
  Tensor empty(DataType::kFloat32, {0, 3});
  Tensor z = make_int64_vector({3, 0});
  Attributes az;
  az.set("allowzero", int64_t{1});
  EXPECT_EQ(run_ok(Op::Reshape, {&empty, &z}, az).dims(), (Dims{3, 0}));
  Tensor zm = make_int64_vector({0, -1});
  expect_error(Op::Reshape, {&empty, &zm}, az);
  Tensor fshape = make_tensor<float>({2}, {2, 12});
  expect_error(Op::Reshape, {&x, &fshape});
  Tensor overflow = make_int64_vector({kI64Max, kI64Max, -1});
  expect_error(Op::Reshape, {&x, &overflow});
}

TEST(RefFlatten, AxisRange) {
  Tensor x(DataType::kInt8, {2, 3, 4});
  Attributes a;
  a.set("axis", int64_t{3});
  EXPECT_EQ(run_ok(Op::Flatten, {&x}, a).dims(), (Dims{24, 1}));
  a.set("axis", int64_t{-1});
  EXPECT_EQ(run_ok(Op::Flatten, {&x}, a).dims(), (Dims{6, 4}));
  a.set("axis", int64_t{0});
  EXPECT_EQ(run_ok(Op::Flatten, {&x}, a).dims(), (Dims{1, 24}));
  a.set("axis", int64_t{4});
  expect_error(Op::Flatten, {&x}, a);
  a.set("axis", int64_t{-4});
  expect_error(Op::Flatten, {&x}, a);
}

TEST(RefSqueeze, AxesAndErrors) {
  Tensor x(DataType::kBFloat16, {1, 3, 1, 2});
  EXPECT_EQ(run_ok(Op::Squeeze, {&x}).dims(), (Dims{3, 2}));
  Tensor ax = make_int64_vector({-2});
  EXPECT_EQ(run_ok(Op::Squeeze, {&x, &ax}).dims(), (Dims{1, 3, 2}));
  Tensor not_one = make_int64_vector({1});
  expect_error(Op::Squeeze, {&x, &not_one});
  Tensor out_of_range = make_int64_vector({4});
  expect_error(Op::Squeeze, {&x, &out_of_range});
}

TEST(RefUnsqueeze, NegativeAxesUseOutputRank) {
  Tensor x(DataType::kUInt8, {3, 4});
  Tensor ax = make_int64_vector({-1, 0});
  EXPECT_EQ(run_ok(Op::Unsqueeze, {&x, &ax}).dims(), (Dims{1, 3, 4, 1}));
  Tensor dup = make_int64_vector({1, 1});
  expect_error(Op::Unsqueeze, {&x, &dup});
  Tensor far = make_int64_vector({4});
  expect_error(Op::Unsqueeze, {&x, &far});
  Tensor scalar(DataType::kFloat32, {});
  Tensor z = make_int64_vector({0});
  EXPECT_EQ(run_ok(Op::Unsqueeze, {&scalar, &z}).dims(), (Dims{1}));
}

TEST(RefShape, StartEndClamp) {
  Tensor x(DataType::kFloat32, {2, 3, 4, 5});
  Attributes a;
  a.set("start", int64_t{-3});
  a.set("end", int64_t{100});
  EXPECT_EQ(ints(run_ok(Op::Shape, {&x}, a)), (std::vector<int64_t>{3, 4, 5}));
  a.set("start", int64_t{3});
  a.set("end", int64_t{1});
  EXPECT_EQ(run_ok(Op::Shape, {&x}, a).dims(), (Dims{0}));
  Tensor sz = run_ok(Op::Size, {&x});
  EXPECT_EQ(sz.rank(), 0);
  EXPECT_EQ(sz.data<int64_t>()[0], 120);
}

// ---- Slice ----

// Independent reference for 1-D slicing (python semantics with ONNX clamping).
std::vector<int64_t> slice_ref(int64_t n, int64_t start, int64_t end, int64_t step) {
  auto norm = [n](int64_t v, int64_t lo, int64_t hi) {
    if (v < 0) v = v < -n ? -1 : v + n;  // keep INT64_MIN safe
    return std::min(std::max(v, lo), hi);
  };
  std::vector<int64_t> out;
  if (step > 0) {
    int64_t s = norm(start, 0, n), e = norm(end, 0, n);
    for (int64_t i = s; i < e; i += step) {
      out.push_back(i);
      if (step >= e - i) break;  // avoid overflowing i
    }
  } else {
    int64_t s = norm(start, 0, n - 1), e = norm(end, -1, n - 1);
    if (end < -n) e = -1;
    for (int64_t i = s; i > e; i += step) {
      out.push_back(i);
      if (step <= e - i) break;
    }
  }
  return out;
}

TEST(RefSlice, ClampingMatchesReference) {
  const int64_t n = 7;
  std::vector<int64_t> vals(n);
  for (int64_t i = 0; i < n; ++i) vals[i] = 100 + i;
  Tensor x = make_tensor<int64_t>({n}, vals);
  const std::vector<int64_t> bounds = {kI64Min, -100, -8, -7, -3, -1, 0, 1, 3, 6, 7, 8, 100, kI64Max};
  const std::vector<int64_t> steps = {1, 2, 3, -1, -2, -5, kI64Max, kI64Min};
  for (int64_t s : bounds)
    for (int64_t e : bounds)
      for (int64_t st : steps) {
        Tensor ts = make_int64_vector({s}), te = make_int64_vector({e}), ta = make_int64_vector({0}),
               tst = make_int64_vector({st});
        Tensor y = run_ok(Op::Slice, {&x, &ts, &te, &ta, &tst});
        std::vector<int64_t> want;
        for (int64_t i : slice_ref(n, s, e, st)) want.push_back(100 + i);
        EXPECT_EQ(ints(y), want) << "start " << s << " end " << e << " step " << st;
      }
}

TEST(RefSlice, Int32IndicesMultiAxisFloat16) {
  std::mt19937 rng(11);
  Tensor x = random_int_tensor<Half>({4, 5, 6}, rng);
  Tensor s = make_tensor<int32_t>({2}, {-1, 1});
  Tensor e = make_tensor<int32_t>({2}, {std::numeric_limits<int32_t>::min(), 5});
  Tensor a = make_tensor<int32_t>({2}, {0, -1});
  Tensor st = make_tensor<int32_t>({2}, {-2, 2});
  Tensor y = run_ok(Op::Slice, {&x, &s, &e, &a, &st});
  ASSERT_EQ(y.dims(), (Dims{2, 5, 2}));
  const int64_t is[] = {3, 1}, ks[] = {1, 3};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 2; ++k)
        EXPECT_EQ(y.data<Half>()[(i * 5 + j) * 2 + k].bits, x.data<Half>()[(is[i] * 5 + j) * 6 + ks[k]].bits);
}

TEST(RefSlice, Errors) {
  Tensor x(DataType::kFloat32, {3, 4});
  Tensor s = make_int64_vector({0}), e = make_int64_vector({2});
  Tensor zero_step = make_int64_vector({0});
  Tensor ax = make_int64_vector({0});
  expect_error(Op::Slice, {&x, &s, &e, &ax, &zero_step});
  Tensor bad_axis = make_int64_vector({2});
  expect_error(Op::Slice, {&x, &s, &e, &bad_axis});
  Tensor two = make_int64_vector({0, 1});
  expect_error(Op::Slice, {&x, &s, &two});
  Tensor dup_axes = make_int64_vector({0, 0});
  expect_error(Op::Slice, {&x, &two, &two, &dup_axes});
  Tensor fs = make_tensor<float>({1}, {0});
  expect_error(Op::Slice, {&x, &fs, &e});
}

// ---- Expand / Tile / Concat / Split ----

TEST(RefExpand, BidirectionalAndErrors) {
  Tensor x = make_tensor<int16_t>({3, 1}, {1, 2, 3});
  Tensor shape = make_int64_vector({2, 1, 4});
  Tensor y = run_ok(Op::Expand, {&x, &shape});
  ASSERT_EQ(y.dims(), (Dims{2, 3, 4}));
  for (int64_t i = 0; i < y.size(); ++i) EXPECT_EQ(y.data<int16_t>()[i], (i / 4) % 3 + 1);
  Tensor bad = make_int64_vector({2, 5});
  expect_error(Op::Expand, {&x, &bad});
  Tensor neg = make_int64_vector({-1, 1});
  expect_error(Op::Expand, {&x, &neg});
  Tensor huge = make_int64_vector({kI64Max / 2, 4, 1});
  expect_error(Op::Expand, {&x, &huge});
}

TEST(RefTile, RepeatsAndErrors) {
  Tensor x = make_tensor<uint32_t>({2, 2}, {1, 2, 3, 4});
  Tensor r = make_int64_vector({2, 3});
  Tensor y = run_ok(Op::Tile, {&x, &r});
  ASSERT_EQ(y.dims(), (Dims{4, 6}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(y.data<uint32_t>()[i * 6 + j], x.data<uint32_t>()[(i % 2) * 2 + j % 2]);
  Tensor zero = make_int64_vector({0, 3});
  EXPECT_EQ(run_ok(Op::Tile, {&x, &zero}).dims(), (Dims{0, 6}));
  Tensor wrong_len = make_int64_vector({2});
  expect_error(Op::Tile, {&x, &wrong_len});
  Tensor neg = make_int64_vector({-1, 2});
  expect_error(Op::Tile, {&x, &neg});
  Tensor huge = make_int64_vector({kI64Max, kI64Max});
  expect_error(Op::Tile, {&x, &huge});
}

TEST(RefConcat, ZeroSizeAndErrors) {
  Tensor a = make_tensor<double>({2, 1}, {1, 2});
  Tensor empty(DataType::kFloat64, {2, 0});
  Tensor b = make_tensor<double>({2, 2}, {3, 4, 5, 6});
  Attributes at;
  at.set("axis", int64_t{-1});
  Tensor y = run_ok(Op::Concat, {&a, &empty, &b}, at);
  ASSERT_EQ(y.dims(), (Dims{2, 3}));
  EXPECT_EQ(std::vector<double>(y.data<double>(), y.data<double>() + 6), (std::vector<double>{1, 3, 4, 2, 5, 6}));
  Tensor c(DataType::kFloat64, {3, 2});
  expect_error(Op::Concat, {&a, &c}, at);
  Tensor f(DataType::kFloat32, {2, 1});
  expect_error(Op::Concat, {&a, &f}, at);
  at.set("axis", int64_t{2});
  expect_error(Op::Concat, {&a, &b}, at);
}

TEST(RefSplit, UnevenNumOutputsAndSizes) {
  Tensor x = make_tensor<int8_t>({7}, {0, 1, 2, 3, 4, 5, 6});
  Attributes a;
  a.set("num_outputs", int64_t{3});
  RunResult r = try_run_kernel(Op::Split, {&x}, a, 3);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  EXPECT_EQ(ints(r.outputs[0]), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(ints(r.outputs[1]), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(ints(r.outputs[2]), (std::vector<int64_t>{6}));
  Tensor sizes = make_int64_vector({2, 0, 5});
  r = try_run_kernel(Op::Split, {&x, &sizes}, {}, 3);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  EXPECT_EQ(r.outputs[1].dims(), (Dims{0}));
  EXPECT_EQ(ints(r.outputs[2]), (std::vector<int64_t>{2, 3, 4, 5, 6}));
  Tensor bad_sum = make_int64_vector({2, 2, 2});
  expect_error(Op::Split, {&x, &bad_sum}, {}, 3);
  expect_error(Op::Split, {&x}, {}, 3);  // 7 does not split evenly into 3
  expect_error(Op::Split, {&x}, a, 2);   // num_outputs disagrees with the node
}

// ---- Gather family ----

TEST(RefGather, NegativeIndicesAllTypesAndErrors) {
  std::mt19937 rng(5);
  Tensor x = random_int_tensor<Half>({3, 4, 2}, rng);
  Tensor idx = make_tensor<int32_t>({2, 2}, {-1, 0, 2, -4});
  Attributes a;
  a.set("axis", int64_t{1});
  Tensor y = run_ok(Op::Gather, {&x, &idx}, a);
  ASSERT_EQ(y.dims(), (Dims{3, 2, 2, 2}));
  const int64_t real[] = {3, 0, 2, 0};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 2; ++k)
        EXPECT_EQ(y.data<Half>()[(i * 4 + j) * 2 + k].bits, x.data<Half>()[(i * 4 + real[j]) * 2 + k].bits);
  Tensor oob = make_int64_vector({4});
  expect_error(Op::Gather, {&x, &oob}, a);
  Tensor oob_neg = make_int64_vector({-5});
  expect_error(Op::Gather, {&x, &oob_neg}, a);
  a.set("axis", int64_t{3});
  expect_error(Op::Gather, {&x, &idx}, a);
  Tensor fidx = make_tensor<float>({1}, {0});
  expect_error(Op::Gather, {&x, &fidx});
}

TEST(RefGatherElements, MatchesLoopsAndRejectsOutOfRange) {
  Tensor x = make_tensor<BFloat16>({2, 3}, {BFloat16(1), BFloat16(2), BFloat16(3), BFloat16(4), BFloat16(5), BFloat16(6)});
  Tensor idx = make_int64_vector({-1, 0, 1, 2});
  idx = idx.reshaped({2, 2});
  Attributes a;
  a.set("axis", int64_t{1});
  Tensor y = run_ok(Op::GatherElements, {&x, &idx}, a);
  ASSERT_EQ(y.dims(), (Dims{2, 2}));
  EXPECT_EQ(static_cast<float>(y.data<BFloat16>()[0]), 3.0f);
  EXPECT_EQ(static_cast<float>(y.data<BFloat16>()[1]), 1.0f);
  EXPECT_EQ(static_cast<float>(y.data<BFloat16>()[2]), 5.0f);
  EXPECT_EQ(static_cast<float>(y.data<BFloat16>()[3]), 6.0f);
  Tensor oob = make_int64_vector({3, 0}).reshaped({1, 2});
  expect_error(Op::GatherElements, {&x, &oob}, a);
  Tensor too_big = Tensor(DataType::kInt64, {3, 1});  // dim 0 larger than data's
  expect_error(Op::GatherElements, {&x, &too_big}, a);
  Tensor wrong_rank = make_int64_vector({0});
  expect_error(Op::GatherElements, {&x, &wrong_rank}, a);
}

TEST(RefGatherND, BatchDims) {
  std::mt19937 rng(9);
  Tensor x = random_int_tensor<int32_t>({2, 3, 4}, rng);
  Tensor idx = make_tensor<int64_t>({2, 2, 2}, {0, 1, -1, 3, 2, 0, 1, -2});  // batch 2, 2 tuples of 2
  Attributes a;
  a.set("batch_dims", int64_t{1});
  Tensor y = run_ok(Op::GatherND, {&x, &idx}, a);
  ASSERT_EQ(y.dims(), (Dims{2, 2}));
  EXPECT_EQ(y.data<int32_t>()[0], x.data<int32_t>()[0 * 12 + 0 * 4 + 1]);
  EXPECT_EQ(y.data<int32_t>()[1], x.data<int32_t>()[0 * 12 + 2 * 4 + 3]);
  EXPECT_EQ(y.data<int32_t>()[2], x.data<int32_t>()[1 * 12 + 2 * 4 + 0]);
  EXPECT_EQ(y.data<int32_t>()[3], x.data<int32_t>()[1 * 12 + 1 * 4 + 2]);
  Tensor oob = make_tensor<int64_t>({2, 1, 2}, {0, 4, 0, 0});
  expect_error(Op::GatherND, {&x, &oob}, a);
  Tensor too_long = Tensor(DataType::kInt64, {2, 1, 3});
  expect_error(Op::GatherND, {&x, &too_long}, a);
  a.set("batch_dims", int64_t{3});
  expect_error(Op::GatherND, {&x, &idx}, a);
}

// ---- Scatter family ----

template <typename T>
void check_scatter_elements_reduction(const std::string& red) {
  std::mt19937 rng(13);
  Tensor x = random_int_tensor<T>({3, 4}, rng);
  Tensor upd = random_int_tensor<T>({2, 4}, rng);
  Tensor idx = make_tensor<int64_t>({2, 4}, {0, -1, 1, 1, 2, 2, 1, 1});  // duplicates on purpose
  Attributes a;
  a.set("axis", int64_t{0});
  a.set("reduction", red);
  Tensor y = run_ok(Op::ScatterElements, {&x, &idx, &upd}, a);
  std::vector<double> want(12);
  for (int i = 0; i < 12; ++i) want[i] = as_double(x.data<T>()[i]);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      int64_t r = idx.data<int64_t>()[i * 4 + j];
      if (r < 0) r += 3;
      double& w = want[r * 4 + j];
      double u = as_double(upd.data<T>()[i * 4 + j]);
      if (red == "add") w += u;
      else if (red == "mul") w *= u;
      else if (red == "max") w = std::max(w, u);
      else if (red == "min") w = std::min(w, u);
      else w = u;
    }
  for (int i = 0; i < 12; ++i) {
    if constexpr (std::is_integral_v<T>) {  // integer products wrap (values are small enough for int64)
      EXPECT_EQ(y.data<T>()[i], static_cast<T>(static_cast<int64_t>(want[i]))) << red << " element " << i;
    } else {
      EXPECT_NEAR(as_double(y.data<T>()[i]), want[i], std::abs(want[i]) * 1e-2) << red << " element " << i;
    }
  }
}

TEST(RefScatterElements, ReductionsAcrossTypes) {
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    check_scatter_elements_reduction<Half>(red);
    check_scatter_elements_reduction<BFloat16>(red);
    check_scatter_elements_reduction<float>(red);
    check_scatter_elements_reduction<int32_t>(red);
    check_scatter_elements_reduction<uint8_t>(red);
  }
}

TEST(RefScatterElements, Errors) {
  Tensor x(DataType::kFloat32, {3, 4});
  Tensor idx = make_tensor<int64_t>({1, 1}, {3});
  Tensor upd(DataType::kFloat32, {1, 1});
  expect_error(Op::ScatterElements, {&x, &idx, &upd});  // index 3 out of range on axis 0
  Tensor idx_ok = make_tensor<int64_t>({1, 1}, {0});
  Tensor upd_bad(DataType::kFloat32, {1, 2});
  expect_error(Op::ScatterElements, {&x, &idx_ok, &upd_bad});
  Tensor upd_type(DataType::kFloat64, {1, 1});
  expect_error(Op::ScatterElements, {&x, &idx_ok, &upd_type});
  Attributes a;
  a.set("reduction", std::string("avg"));
  expect_error(Op::ScatterElements, {&x, &idx_ok, &upd}, a);
}

TEST(RefScatterND, MulAndErrors) {
  Tensor x = make_tensor<Half>({2, 3}, {Half(1), Half(2), Half(3), Half(4), Half(5), Half(6)});
  Tensor idx = make_tensor<int64_t>({2, 1}, {1, -1});  // the same row twice
  Tensor upd = make_tensor<Half>({2, 3}, {Half(2), Half(2), Half(2), Half(0.5f), Half(3), Half(1)});
  Attributes a;
  a.set("reduction", std::string("mul"));
  Tensor y = run_ok(Op::ScatterND, {&x, &idx, &upd}, a);
  const float want[] = {1, 2, 3, 4, 30, 12};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(static_cast<float>(y.data<Half>()[i]), want[i]);
  Tensor oob = make_tensor<int64_t>({2, 1}, {2, 0});
  expect_error(Op::ScatterND, {&x, &oob, &upd});
  Tensor bad_upd(DataType::kFloat16, {2, 2});
  expect_error(Op::ScatterND, {&x, &idx, &bad_upd});
}

// ---- Generators ----

TEST(RefConstantOfShape, ValueAndErrors) {
  Tensor shape = make_int64_vector({2, 3});
  Attributes a;
  a.set("value", make_tensor<int8_t>({1}, {-7}));
  Tensor y = run_ok(Op::ConstantOfShape, {&shape}, a);
  ASSERT_EQ(y.dtype(), DataType::kInt8);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y.data<int8_t>()[i], -7);
  Tensor def = run_ok(Op::ConstantOfShape, {&shape});
  EXPECT_EQ(def.dtype(), DataType::kFloat32);
  Tensor empty = make_int64_vector({});
  EXPECT_EQ(run_ok(Op::ConstantOfShape, {&empty}, a).rank(), 0);
  Tensor neg = make_int64_vector({2, -3});
  expect_error(Op::ConstantOfShape, {&neg}, a);
  Tensor huge = make_int64_vector({kI64Max, 2});
  expect_error(Op::ConstantOfShape, {&huge}, a);
}

TEST(RefRange, TypesAndErrors) {
  Tensor s = make_tensor<int8_t>({}, {-128}), l = make_tensor<int8_t>({}, {127}), d = make_tensor<int8_t>({}, {1});
  Tensor y = run_ok(Op::Range, {&s, &l, &d});
  ASSERT_EQ(y.dims(), (Dims{255}));
  for (int64_t i = 0; i < 255; ++i) EXPECT_EQ(y.data<int8_t>()[i], -128 + i);
  Tensor fs = make_tensor<float>({}, {1.0f}), fl = make_tensor<float>({}, {-1.0f}), fd = make_tensor<float>({}, {-0.3f});
  Tensor fy = run_ok(Op::Range, {&fs, &fl, &fd});
  ASSERT_EQ(fy.dims(), (Dims{7}));
  for (int64_t i = 0; i < 7; ++i) EXPECT_NEAR(fy.data<float>()[i], 1.0 - 0.3 * i, 1e-6);
  Tensor empty_l = make_tensor<float>({}, {5.0f});
  EXPECT_EQ(run_ok(Op::Range, {&fs, &empty_l, &fd}).dims(), (Dims{0}));
  Tensor zero = make_tensor<float>({}, {0.0f});
  expect_error(Op::Range, {&fs, &fl, &zero});
  Tensor big_s = make_tensor<int64_t>({}, {kI64Min}), big_l = make_tensor<int64_t>({}, {kI64Max}),
         one = make_tensor<int64_t>({}, {1});
  expect_error(Op::Range, {&big_s, &big_l, &one});
  expect_error(Op::Range, {&fs, &l, &fd});  // mixed dtypes
}

TEST(RefEyeLike, DtypeAndOffsets) {
  Tensor x(DataType::kFloat32, {3, 4});
  Attributes a;
  a.set("dtype", static_cast<int64_t>(DataType::kFloat16));
  a.set("k", int64_t{-1});
  Tensor y = run_ok(Op::EyeLike, {&x}, a);
  ASSERT_EQ(y.dtype(), DataType::kFloat16);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(static_cast<float>(y.data<Half>()[i * 4 + j]), j - i == -1 ? 1.0f : 0.0f);
  a.set("k", kI64Max);
  Tensor z = run_ok(Op::EyeLike, {&x}, a);
  for (int64_t i = 0; i < z.size(); ++i) EXPECT_EQ(z.data<Half>()[i].bits, 0);
  a.set("k", kI64Min);
  run_ok(Op::EyeLike, {&x}, a);
  a.set("dtype", int64_t{12345});
  expect_error(Op::EyeLike, {&x}, a);
  Tensor v(DataType::kFloat32, {3});
  expect_error(Op::EyeLike, {&v});
}

TEST(RefTrilu, BatchedAndExtremeK) {
  std::mt19937 rng(17);
  Tensor x = random_int_tensor<BFloat16>({2, 3, 4}, rng);
  for (int64_t k : {kI64Min, int64_t{-2}, int64_t{0}, int64_t{1}, int64_t{5}, kI64Max}) {
    for (int64_t upper : {0, 1}) {
      Tensor kt = make_scalar_int64(k);
      Attributes a;
      a.set("upper", upper);
      Tensor y = run_ok(Op::Trilu, {&x, &kt}, a);
      for (int b = 0; b < 2; ++b)
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 4; ++j) {
            const double diff = static_cast<double>(j) - static_cast<double>(i);
            const bool keep = upper ? diff >= static_cast<double>(k) : diff <= static_cast<double>(k);
            const int64_t o = b * 12 + i * 4 + j;
            EXPECT_EQ(y.data<BFloat16>()[o].bits, keep ? x.data<BFloat16>()[o].bits : BFloat16(0.0f).bits);
          }
    }
  }
  Tensor v(DataType::kFloat32, {3});
  expect_error(Op::Trilu, {&v});
}

// ---- OneHot / NonZero / Compress / ReverseSequence / Unique / CenterCropPad ----

TEST(RefOneHot, NegativeAndOutOfRangeIndices) {
  Tensor idx = make_tensor<float>({3}, {-1, 5, 1});
  Tensor depth = make_tensor<int32_t>({}, {3});
  Tensor values = make_tensor<Half>({2}, {Half(-2), Half(7)});
  Attributes a;
  a.set("axis", int64_t{0});
  Tensor y = run_ok(Op::OneHot, {&idx, &depth, &values}, a);
  ASSERT_EQ(y.dims(), (Dims{3, 3}));
  const float want[] = {-2, -2, -2, -2, -2, 7, 7, -2, -2};  // [depth, n]
  for (int i = 0; i < 9; ++i) EXPECT_EQ(static_cast<float>(y.data<Half>()[i]), want[i]) << i;
  Tensor zero_depth = make_tensor<int64_t>({}, {0});
  expect_error(Op::OneHot, {&idx, &zero_depth, &values}, a);
  Tensor huge_depth = make_tensor<double>({}, {1e300});
  expect_error(Op::OneHot, {&idx, &huge_depth, &values}, a);
  Tensor three_values = make_tensor<float>({3}, {0, 1, 2});
  expect_error(Op::OneHot, {&idx, &depth, &three_values}, a);
  a.set("axis", int64_t{2});
  expect_error(Op::OneHot, {&idx, &depth, &values}, a);
}

TEST(RefNonZero, CoordinatesAndScalar) {
  Tensor x = make_tensor<Half>({2, 3}, {Half(0), Half(1), Half(0), Half(-2), Half(0), Half(0.5f)});
  Tensor y = run_ok(Op::NonZero, {&x});
  ASSERT_EQ(y.dims(), (Dims{2, 3}));
  EXPECT_EQ(ints(y), (std::vector<int64_t>{0, 1, 1, 1, 0, 2}));
  Tensor b = make_tensor<bool>({}, {true});
  EXPECT_EQ(run_ok(Op::NonZero, {&b}).dims(), (Dims{1, 1}));
}

TEST(RefCompress, AxisAndFlat) {
  Tensor x = make_tensor<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor c = make_tensor<bool>({2}, {true, true});
  Attributes a;
  a.set("axis", int64_t{-1});
  Tensor y = run_ok(Op::Compress, {&x, &c}, a);
  EXPECT_EQ(y.dims(), (Dims{2, 2}));
  EXPECT_EQ(ints(y), (std::vector<int64_t>{1, 2, 4, 5}));
  Tensor c2 = make_tensor<bool>({5}, {false, true, false, false, true});
  EXPECT_EQ(ints(run_ok(Op::Compress, {&x, &c2})), (std::vector<int64_t>{2, 5}));
  Tensor too_long = make_tensor<bool>({4}, {false, false, false, true});
  expect_error(Op::Compress, {&x, &too_long}, a);
}

TEST(RefReverseSequence, BatchMajor) {
  Tensor x = make_tensor<float>({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor lens = make_int64_vector({3, 0});
  Attributes a;
  a.set("batch_axis", int64_t{0});
  a.set("time_axis", int64_t{1});
  Tensor y = run_ok(Op::ReverseSequence, {&x, &lens}, a);
  EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + 8), (std::vector<float>{3, 2, 1, 4, 5, 6, 7, 8}));
  Tensor bad = make_int64_vector({5, 1});
  expect_error(Op::ReverseSequence, {&x, &bad}, a);
  a.set("time_axis", int64_t{0});
  expect_error(Op::ReverseSequence, {&x, &lens}, a);
}

TEST(RefUnique, SortedAndUnsorted) {
  Tensor x = make_tensor<float>({6}, {2, 1, 1, 3, 4, 3});
  for (int64_t sorted : {0, 1}) {
    Attributes a;
    a.set("sorted", sorted);
    RunResult r = try_run_kernel(Op::Unique, {&x}, a, 4);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    std::vector<float> y(r.outputs[0].data<float>(), r.outputs[0].data<float>() + r.outputs[0].size());
    if (sorted) {
      EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 4}));
      EXPECT_EQ(ints(r.outputs[1]), (std::vector<int64_t>{1, 0, 3, 4}));
      EXPECT_EQ(ints(r.outputs[2]), (std::vector<int64_t>{1, 0, 0, 2, 3, 2}));
      EXPECT_EQ(ints(r.outputs[3]), (std::vector<int64_t>{2, 1, 2, 1}));
    } else {
      EXPECT_EQ(y, (std::vector<float>{2, 1, 3, 4}));
      EXPECT_EQ(ints(r.outputs[1]), (std::vector<int64_t>{0, 1, 3, 4}));
      EXPECT_EQ(ints(r.outputs[2]), (std::vector<int64_t>{0, 1, 1, 2, 3, 2}));
      EXPECT_EQ(ints(r.outputs[3]), (std::vector<int64_t>{1, 2, 2, 1}));
    }
  }
  // NaNs must not break the sort.
  Tensor n = make_tensor<float>({4}, {NAN, 1, NAN, 0});
  RunResult r = try_run_kernel(Op::Unique, {&n}, {}, 1);
  ASSERT_TRUE(r.status.is_ok());
  EXPECT_EQ(r.outputs[0].size(), 3);
}

TEST(RefUnique, AlongAxis) {
  Tensor x = make_tensor<int32_t>({2, 3}, {1, 0, 1, 2, 5, 2});
  Attributes a;
  a.set("axis", int64_t{1});
  a.set("sorted", int64_t{0});
  RunResult r = try_run_kernel(Op::Unique, {&x}, a, 3);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  EXPECT_EQ(r.outputs[0].dims(), (Dims{2, 2}));
  EXPECT_EQ(ints(r.outputs[0]), (std::vector<int64_t>{1, 0, 2, 5}));
  EXPECT_EQ(ints(r.outputs[2]), (std::vector<int64_t>{0, 1, 0}));
}

TEST(RefCenterCropPad, CropAndPadOddDifferences) {
  Tensor x = make_tensor<uint8_t>({3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Tensor shape = make_int64_vector({6, 1});
  Tensor y = run_ok(Op::CenterCropPad, {&x, &shape});
  ASSERT_EQ(y.dims(), (Dims{6, 1}));
  // Rows padded: offset (6-3)/2 = 1; columns cropped: offset (4-1)/2 = 1.
  EXPECT_EQ(ints(y), (std::vector<int64_t>{0, 2, 6, 10, 0, 0}));
  Tensor wrong = make_int64_vector({1});
  expect_error(Op::CenterCropPad, {&x, &wrong});
  Tensor neg = make_int64_vector({-1, 2});
  expect_error(Op::CenterCropPad, {&x, &neg});
}

TEST(RefTensorScatter, LinearAndCircular) {
  // past_cache [batch 2, seq 4, 1], update [2, 2, 1], write at 1 and 3.
  Tensor cache = make_tensor<Half>({2, 4, 1}, std::vector<Half>(8, Half(0)));
  Tensor upd = make_tensor<Half>({2, 2, 1}, {Half(1), Half(2), Half(3), Half(4)});
  Tensor w = make_int64_vector({1, 3});
  Attributes a;
  a.set("mode", std::string("circular"));
  Tensor y = run_ok(Op::TensorScatter, {&cache, &upd, &w}, a);
  const float want[] = {0, 1, 2, 0, 4, 0, 0, 3};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(static_cast<float>(y.data<Half>()[i]), want[i]) << i;
  expect_error(Op::TensorScatter, {&cache, &upd, &w});  // linear: 3 + 2 > 4
  Tensor neg = make_int64_vector({-1, 0});
  expect_error(Op::TensorScatter, {&cache, &upd, &neg}, a);
}

}  // namespace
}  // namespace kiln
