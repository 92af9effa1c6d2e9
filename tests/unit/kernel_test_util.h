// Shared helpers for the unit tests of the reference kernels: running one kernel,
// random inputs, and element-wise comparison against double-precision expectations.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/reference/kernel.h"
#include "core/tensor.h"

namespace kiln::testing {

// ---- running a kernel ----

struct RunResult {
  Status status;
  std::vector<Tensor> outputs;
};

// Runs the reference kernel of `op` with every output wanted. A missing kernel gives an
// Unsupported status and no outputs; nothing is asserted.
inline RunResult try_run_kernel(Op op, const std::vector<const Tensor*>& inputs, const Attributes& attrs = {},
                                size_t num_outputs = 1) {
  KernelContext ctx;
  ctx.op = op;
  ctx.attrs = &attrs;
  ctx.inputs = inputs;
  ctx.outputs.resize(num_outputs);
  ctx.output_wanted.assign(num_outputs, true);
  KernelFn fn = reference_kernels().find(op);
  if (!fn) return {unsupported("no kernel"), {}};
  Status s = fn(ctx);
  return {s, std::move(ctx.outputs)};
}

// As try_run_kernel, and also expects `op` to have a reference kernel.
inline RunResult run_kernel(Op op, const std::vector<const Tensor*>& inputs, const Attributes& attrs = {},
                            size_t num_outputs = 1) {
  EXPECT_NE(reference_kernels().find(op), nullptr) << op_name(op);
  return try_run_kernel(op, inputs, attrs, num_outputs);
}

// Runs `op`, expects success and returns all `num_outputs` outputs (empty tensors on failure).
inline std::vector<Tensor> run_ok_outputs(Op op, const std::vector<const Tensor*>& inputs, const Attributes& attrs,
                                          size_t num_outputs) {
  RunResult r = try_run_kernel(op, inputs, attrs, num_outputs);
  EXPECT_TRUE(r.status.is_ok()) << op_name(op) << ": " << r.status.message();
  if (r.outputs.size() < num_outputs) r.outputs.resize(num_outputs);
  return std::move(r.outputs);
}

// Runs single-output `op`, expects success and returns the output (empty on failure).
inline Tensor run_ok(Op op, const std::vector<const Tensor*>& inputs, const Attributes& attrs = {}) {
  return std::move(run_ok_outputs(op, inputs, attrs, 1)[0]);
}

// Runs `op` and expects it to fail with a message.
inline void expect_error(Op op, const std::vector<const Tensor*>& inputs, const Attributes& attrs = {},
                         size_t num_outputs = 1) {
  RunResult r = try_run_kernel(op, inputs, attrs, num_outputs);
  EXPECT_FALSE(r.status.is_ok()) << op_name(op) << " accepted bad input";
  EXPECT_FALSE(r.status.message().empty());
}

// ---- random inputs ----

// The shared generator behind random_tensor when no generator is passed (randomly seeded).
inline std::mt19937& rng() {
  static std::mt19937 g(std::random_device{}());
  return g;
}

// Random non-zero values: floats in +-[0.25, 2], ints in +-[1, 9] (unsigned: [1, 9]),
// bools either way.
template <typename T>
Tensor random_tensor(Dims dims, std::mt19937& gen = rng()) {
  Tensor t(dtype_of<T>::value, dims);
  std::uniform_real_distribution<double> mag(0.25, 2.0);
  std::uniform_int_distribution<int> imag(1, 9), sign(0, 1);
  for (int64_t i = 0; i < t.size(); ++i) {
    const bool neg = sign(gen) == 1;
    if constexpr (std::is_same_v<T, bool>) {
      t.data<T>()[i] = neg;
    } else if constexpr (is_float_v<T>) {
      double v = mag(gen) * (neg ? -1 : 1);
      t.data<T>()[i] = from_compute<T>(static_cast<compute_t<T>>(v));
    } else {
      int v = imag(gen);
      t.data<T>()[i] = static_cast<T>(std::is_signed_v<T> && neg ? -v : v);
    }
  }
  return t;
}

// `n` values uniform in [lo, hi) from a generator seeded with `seed`; values within 0.05
// of zero are replaced by 0.3 so inputs stay non-zero.
inline std::vector<double> random_values(size_t n, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) {
    x = d(gen);
    if (std::fabs(x) < 0.05) x = 0.3;
  }
  return v;
}

// A tensor of dtype dt holding `v`; `v` is replaced by the values actually stored (rounded
// to the dtype), so references computed from it see exactly what the kernel sees.
inline Tensor make(DataType dt, const Dims& dims, std::vector<double>& v) {
  Tensor t = cast_tensor(make_tensor<double>(dims, v), dt);
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.get_double(static_cast<int64_t>(i));
  return t;
}

inline constexpr DataType kFloatTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                           DataType::kBFloat16};

// ---- reading and comparing ----

// Element i of a tensor of C++ type T, as a double.
template <typename T>
double at(const Tensor& t, int64_t i) {
  if constexpr (is_half_like_v<T>) return static_cast<float>(t.data<T>()[i]);
  else return static_cast<double>(t.data<T>()[i]);
}

template <typename T>
std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.size(); ++i) v.push_back(at<T>(t, i));
  return v;
}

// Every element within rtol * |want| + atol (non-fatal per element).
template <typename T>
void expect_close(const Tensor& got, const std::vector<double>& want, double rtol, double atol = 1e-6) {
  ASSERT_EQ(got.size(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.size(); ++i) {
    const double w = want[static_cast<size_t>(i)];
    EXPECT_NEAR(at<T>(got, i), w, rtol * std::fabs(w) + atol) << "element " << i;
  }
}

// Every element (read with get_double) within tol * (1 + |want|); stops at the first
// mismatch, which is reported with `what`.
inline void expect_tensor_near(const Tensor& t, const std::vector<double>& want, double tol,
                               const std::string& what) {
  ASSERT_EQ(t.size(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = t.get_double(static_cast<int64_t>(i));
    ASSERT_NEAR(got, want[i], tol * (1 + std::fabs(want[i]))) << what << " element " << i;
  }
}

// Comparison tolerance for results of dtype dt.
inline double tol_for(DataType dt) {
  return dt == DataType::kBFloat16 ? 3e-2 : dt == DataType::kFloat16 ? 5e-3 : 1e-5;
}

}  // namespace kiln::testing
