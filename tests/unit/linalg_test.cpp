// Linear algebra reference kernels (MatMul, Gemm, Einsum): dtype paths the conformance
// data does not cover (float16, bfloat16, integers), broadcasting and einsum forms,
// and error handling. Expected values come from independent double-precision loops.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/cpu/reference/kernel.h"
#include "core/tensor.h"
#include "kernel_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

// Double-precision batched matmul on already-broadcast operands [B,M,K] x [B,K,N].
std::vector<double> ref_matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t B, int64_t M,
                               int64_t K, int64_t N) {
  std::vector<double> o(static_cast<size_t>(B * M * N), 0.0);
  for (int64_t z = 0; z < B; ++z)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a[static_cast<size_t>(z * M * K + m * K + k)] * b[static_cast<size_t>(z * K * N + k * N + n)];
        o[static_cast<size_t>(z * M * N + m * N + n)] = s;
      }
  return o;
}

// ---- MatMul ----

template <typename T>
void check_matmul_broadcast(double rtol) {
  // A [2,1,3,4] x B [3,4,5] -> [2,3,3,5]; A broadcasts along dim 1, B along dim 0.
  Tensor a = random_tensor<T>({2, 1, 3, 4});
  Tensor b = random_tensor<T>({3, 4, 5});
  Tensor y = run_ok(Op::MatMul, {&a, &b});
  ASSERT_EQ(y.dims(), (Dims{2, 3, 3, 5}));
  ASSERT_EQ(y.dtype(), a.dtype());
  std::vector<double> av = values<T>(a), bv = values<T>(b), ab, bb;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      ab.insert(ab.end(), av.begin() + i * 12, av.begin() + (i + 1) * 12);
      bb.insert(bb.end(), bv.begin() + j * 20, bv.begin() + (j + 1) * 20);
    }
  expect_close<T>(y, ref_matmul(ab, bb, 6, 3, 4, 5), rtol);
}

TEST(MatMul, BatchBroadcastAllFloatTypes) {
  check_matmul_broadcast<float>(1e-6);
  check_matmul_broadcast<double>(1e-12);
  check_matmul_broadcast<Half>(2e-3);
  check_matmul_broadcast<BFloat16>(1e-2);
}

TEST(MatMul, IntegerTypesExact) {
  check_matmul_broadcast<int32_t>(0);
  check_matmul_broadcast<int64_t>(0);
  check_matmul_broadcast<uint32_t>(0);
  check_matmul_broadcast<uint64_t>(0);
}

TEST(MatMul, OneDimensionalOperands) {
  Tensor v = random_tensor<float>({4});
  Tensor w = random_tensor<float>({4});
  Tensor y = run_ok(Op::MatMul, {&v, &w});
  EXPECT_EQ(y.dims(), Dims{});
  double dot = 0;
  for (int i = 0; i < 4; ++i) dot += at<float>(v, i) * at<float>(w, i);
  expect_close<float>(y, {dot}, 1e-6);
}

TEST(MatMul, VectorTimesBatch) {
  Tensor v = random_tensor<double>({4});
  Tensor m = random_tensor<double>({2, 4, 3});
  Tensor y = run_ok(Op::MatMul, {&v, &m});
  ASSERT_EQ(y.dims(), (Dims{2, 3}));
  std::vector<double> want;
  for (int z = 0; z < 2; ++z)
    for (int n = 0; n < 3; ++n) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += at<double>(v, k) * at<double>(m, z * 12 + k * 3 + n);
      want.push_back(s);
    }
  expect_close<double>(y, want, 1e-12);
  Tensor u = random_tensor<double>({3});
  Tensor y2 = run_ok(Op::MatMul, {&m, &u});  // [2,4,3] x [3] -> [2,4]
  ASSERT_EQ(y2.dims(), (Dims{2, 4}));
  std::vector<double> want2;
  for (int r = 0; r < 8; ++r) {
    double s = 0;
    for (int k = 0; k < 3; ++k) s += at<double>(m, r * 3 + k) * at<double>(u, k);
    want2.push_back(s);
  }
  expect_close<double>(y2, want2, 1e-12);
}

TEST(MatMul, Errors) {
  Tensor a = random_tensor<float>({2, 3});
  Tensor b = random_tensor<float>({4, 2});
  expect_error(Op::MatMul, {&a, &b});  // inner dims 3 vs 4
  Tensor s = make_tensor<float>({}, {1.0f});
  expect_error(Op::MatMul, {&s, &a});  // rank 0
  Tensor bi = random_tensor<int32_t>({3, 2});
  expect_error(Op::MatMul, {&a, &bi});  // dtype mismatch
  Tensor c = random_tensor<float>({2, 2, 3});
  Tensor d = random_tensor<float>({3, 3, 2});
  expect_error(Op::MatMul, {&c, &d});  // batch 2 vs 3
  Tensor bo(DataType::kBool, {2, 2});
  expect_error(Op::MatMul, {&bo, &bo});
}

// ---- Gemm ----

template <typename T>
void check_gemm(bool ta, bool tb, float alpha, float beta, Dims c_dims, double rtol) {
  const int64_t M = 3, K = 4, N = 5;
  Tensor a = random_tensor<T>(ta ? Dims{K, M} : Dims{M, K});
  Tensor b = random_tensor<T>(tb ? Dims{N, K} : Dims{K, N});
  Tensor c = random_tensor<T>(c_dims);
  Attributes attrs;
  attrs.set("transA", int64_t{ta});
  attrs.set("transB", int64_t{tb});
  attrs.set("alpha", alpha);
  attrs.set("beta", beta);
  Tensor y = run_ok(Op::Gemm, {&a, &b, &c}, attrs);
  ASSERT_EQ(y.dims(), (Dims{M, N}));
  std::vector<double> want;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += at<T>(a, ta ? k * M + m : m * K + k) * at<T>(b, tb ? n * K + k : k * N + n);
      // C broadcast: [N], [1,N], [M,1], [M,N] or scalar.
      int64_t ci = 0;
      if (c_dims.size() == 1) ci = c_dims[0] == 1 ? 0 : n;
      if (c_dims.size() == 2) ci = (c_dims[0] == 1 ? 0 : m) * c_dims[1] + (c_dims[1] == 1 ? 0 : n);
      want.push_back(alpha * s + beta * at<T>(c, ci));
    }
  expect_close<T>(y, want, rtol);
}

TEST(Gemm, TransposesAndBiasBroadcast) {
  check_gemm<float>(false, false, 1.0f, 1.0f, {3, 5}, 1e-5);
  check_gemm<float>(true, false, 0.5f, 2.0f, {5}, 1e-5);
  check_gemm<float>(false, true, 1.5f, -1.0f, {3, 1}, 1e-5);
  check_gemm<double>(true, true, 0.25f, 0.5f, {}, 1e-12);
  check_gemm<Half>(true, false, 1.0f, 1.0f, {1, 5}, 5e-3);
  check_gemm<BFloat16>(false, true, 1.0f, 1.0f, {3, 5}, 2e-2);
  check_gemm<int64_t>(false, false, 1.0f, 1.0f, {5}, 0);
  check_gemm<uint32_t>(true, true, 1.0f, 1.0f, {3, 5}, 0);
}

TEST(Gemm, WithoutC) {
  Tensor a = random_tensor<float>({2, 3});
  Tensor b = random_tensor<float>({3, 2});
  Tensor y = run_ok(Op::Gemm, {&a, &b});
  expect_close<float>(y, ref_matmul(values<float>(a), values<float>(b), 1, 2, 3, 2), 1e-6);
}

TEST(Gemm, Errors) {
  Tensor a = random_tensor<float>({2, 3});
  Tensor b = random_tensor<float>({4, 2});
  expect_error(Op::Gemm, {&a, &b});
  Tensor b2 = random_tensor<float>({3, 2});
  Tensor c = random_tensor<float>({3, 2});  // not broadcastable to [2,2]
  expect_error(Op::Gemm, {&a, &b2, &c});
  Tensor c3 = random_tensor<float>({1, 2, 2});  // rank 3
  expect_error(Op::Gemm, {&a, &b2, &c3});
  Tensor v = random_tensor<float>({3});
  expect_error(Op::Gemm, {&v, &b2});  // A must be 2-D
}

// ---- Einsum ----

Tensor einsum(const std::string& eq, const std::vector<const Tensor*>& ins) {
  Attributes a;
  a.set("equation", eq);
  return run_ok(Op::Einsum, ins, a);
}

void einsum_error(const std::string& eq, const std::vector<const Tensor*>& ins) {
  Attributes a;
  a.set("equation", eq);
  expect_error(Op::Einsum, ins, a);
}

TEST(Einsum, MatMulExplicitAndImplicit) {
  Tensor a = random_tensor<float>({3, 4});
  Tensor b = random_tensor<float>({4, 2});
  std::vector<double> want = ref_matmul(values<float>(a), values<float>(b), 1, 3, 4, 2);
  Tensor y = einsum("ij,jk->ik", {&a, &b});
  ASSERT_EQ(y.dims(), (Dims{3, 2}));
  expect_close<float>(y, want, 1e-6);
  Tensor y2 = einsum("ij, jk", {&a, &b});  // implicit: j appears twice -> summed, output "ik"
  ASSERT_EQ(y2.dims(), (Dims{3, 2}));
  expect_close<float>(y2, want, 1e-6);
  Tensor y3 = einsum("ij,jk->ki", {&a, &b});  // transposed output
  ASSERT_EQ(y3.dims(), (Dims{2, 3}));
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(at<float>(y3, k * 3 + i), want[static_cast<size_t>(i * 2 + k)], 1e-5);
}

TEST(Einsum, ImplicitOutputIsSortedByCharCode) {
  Tensor x = random_tensor<float>({2, 3});
  Tensor y = einsum("ba", {&x});  // output "ab": a transpose
  ASSERT_EQ(y.dims(), (Dims{3, 2}));
  EXPECT_EQ(at<float>(y, 1), at<float>(x, 3));
  Tensor z = einsum("Ba", {&x});  // 'B' < 'a': no transpose
  ASSERT_EQ(z.dims(), (Dims{2, 3}));
  EXPECT_EQ(at<float>(z, 1), at<float>(x, 1));
}

TEST(Einsum, DiagonalTraceAndSum) {
  Tensor x = random_tensor<double>({3, 3});
  Tensor d = einsum("ii->i", {&x});
  ASSERT_EQ(d.dims(), (Dims{3}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(at<double>(d, i), at<double>(x, i * 4));
  Tensor t = einsum("ii", {&x});
  ASSERT_EQ(t.dims(), Dims{});
  expect_close<double>(t, {at<double>(x, 0) + at<double>(x, 4) + at<double>(x, 8)}, 1e-12);
  Tensor s = einsum("ij->", {&x});
  double sum = 0;
  for (int i = 0; i < 9; ++i) sum += at<double>(x, i);
  expect_close<double>(s, {sum}, 1e-12);
  Tensor r = einsum("ij->j", {&x});  // column sums
  ASSERT_EQ(r.dims(), (Dims{3}));
  expect_close<double>(r, {at<double>(x, 0) + at<double>(x, 3) + at<double>(x, 6),
                           at<double>(x, 1) + at<double>(x, 4) + at<double>(x, 7),
                           at<double>(x, 2) + at<double>(x, 5) + at<double>(x, 8)},
                       1e-12);
}

TEST(Einsum, EllipsisBroadcastBatchMatMul) {
  Tensor a = random_tensor<float>({2, 1, 3, 4});
  Tensor b = random_tensor<float>({3, 4, 5});
  Tensor y = einsum("...ij,...jk->...ik", {&a, &b});
  Tensor m = run_ok(Op::MatMul, {&a, &b});
  ASSERT_EQ(y.dims(), m.dims());
  expect_close<float>(y, values<float>(m), 1e-5);
  Tensor y2 = einsum("...ij,...jk", {&a, &b});  // implicit: "..." first, then i,k
  ASSERT_EQ(y2.dims(), m.dims());
  expect_close<float>(y2, values<float>(m), 1e-5);
  Tensor t = einsum("...ij->...ji", {&b});
  ASSERT_EQ(t.dims(), (Dims{3, 5, 4}));
  EXPECT_EQ(at<float>(t, 1 * 20 + 2 * 4 + 3), at<float>(b, 1 * 20 + 3 * 5 + 2));
}

TEST(Einsum, ThreeOperandsAndOuterProduct) {
  Tensor a = random_tensor<double>({2, 3});
  Tensor b = random_tensor<double>({3, 4});
  Tensor c = random_tensor<double>({4, 2});
  Tensor y = einsum("ij,jk,kl->il", {&a, &b, &c});
  std::vector<double> ab = ref_matmul(values<double>(a), values<double>(b), 1, 2, 3, 4);
  expect_close<double>(y, ref_matmul(ab, values<double>(c), 1, 2, 4, 2), 1e-12);
  Tensor u = random_tensor<double>({2});
  Tensor v = random_tensor<double>({3});
  Tensor o = einsum("i,j->ij", {&u, &v});
  ASSERT_EQ(o.dims(), (Dims{2, 3}));
  EXPECT_DOUBLE_EQ(at<double>(o, 5), at<double>(u, 1) * at<double>(v, 2));
}

TEST(Einsum, HalfAndIntegerTypes) {
  Tensor a = random_tensor<BFloat16>({2, 5});
  Tensor b = random_tensor<BFloat16>({5, 3});
  expect_close<BFloat16>(einsum("ij,jk->ik", {&a, &b}), ref_matmul(values<BFloat16>(a), values<BFloat16>(b), 1, 2, 5, 3),
                         1e-2);
  Tensor h = random_tensor<Half>({4, 4});
  double tr = 0;
  for (int i = 0; i < 4; ++i) tr += at<Half>(h, i * 5);
  expect_close<Half>(einsum("ii", {&h}), {tr}, 2e-3);
  Tensor ia = random_tensor<int64_t>({3, 2});
  Tensor ib = random_tensor<int64_t>({2, 3});
  expect_close<int64_t>(einsum("ij,jk", {&ia, &ib}), ref_matmul(values<int64_t>(ia), values<int64_t>(ib), 1, 3, 2, 3), 0);
}

TEST(Einsum, Errors) {
  Tensor a = random_tensor<float>({2, 3});
  Tensor b = random_tensor<float>({4, 2});
  einsum_error("ij,jk->ik", {&a, &b});  // j: 3 vs 4
  einsum_error("ijk->i", {&a});         // rank mismatch
  einsum_error("ij->iz", {&a});         // output label not in inputs
  einsum_error("ij->ii", {&a});         // repeated output label
  einsum_error("i1->i", {&a});          // bad character
  einsum_error("ij,jk->ik", {&a});      // two terms, one input
  einsum_error("ii->i", {&a});          // diagonal of a non-square operand
  einsum_error("i..j->ij", {&a});       // malformed ellipsis
  Tensor c = random_tensor<float>({2, 3, 4});
  einsum_error("...j->j", {&c});        // broadcast dims dropped without '...'
  Attributes empty;
  expect_error(Op::Einsum, {&a}, empty);  // no equation
}

}  // namespace
}  // namespace kiln
