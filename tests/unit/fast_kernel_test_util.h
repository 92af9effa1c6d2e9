// Shared helpers for the fast CPU kernel tests (fast_*_test.cpp): run a tactic through
// create/prepare/run into preallocated outputs pre-filled with NaN (or a byte pattern for
// non-float outputs), run the reference kernel of the same op, and compare.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/fast/fast_kernel.h"
#include "backends/cpu/reference/kernel.h"
#include "core/tensor.h"

namespace kiln::testing::fast {

using kiln::fast::Kernel;
using kiln::fast::LayerSpec;
using kiln::fast::Tactic;
using kiln::fast::TensorShape;

// A seed per process run (printed by the tests on failure, so that it reproduces).
inline uint32_t fresh_seed() {
  static std::mt19937 gen(std::random_device{}());
  return gen();
}

// A fixed seed per case name (FNV-1a: the same on every platform).
inline uint32_t seed_for(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  return h;
}

// Random float32 tensor with values of magnitude [lo, hi] and random sign (never zero).
inline Tensor random_f32(const Dims& dims, uint32_t seed, float lo = 0.25f, float hi = 2.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mag(lo, hi);
  std::bernoulli_distribution neg(0.5);
  Tensor t(DataType::kFloat32, dims);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.size(); ++i) p[i] = neg(gen) ? -mag(gen) : mag(gen);
  return t;
}

// Random tensor of any dtype: random_f32 values in [0.25, 100] with random signs, cast.
inline Tensor random_any(DataType dt, const Dims& dims, uint32_t seed) {
  Tensor f = random_f32(dims, seed, 0.25f, 100.0f);
  if (dt == DataType::kFloat32) return f;
  return cast_tensor(f, dt);
}

// Uniform float32 tensor in [lo, hi) (may cross zero; for ranges such as Log's domain).
inline Tensor uniform_f32(const Dims& dims, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t(DataType::kFloat32, dims);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.size(); ++i) p[i] = d(gen);
  return t;
}

// The spec of a layer whose inputs are `inputs` (nullptr: omitted); `constant[i]` marks an
// input as a constant of the layer (its value is passed to the factory).
inline LayerSpec make_spec(Op op, const Attributes* attrs, const std::vector<const Tensor*>& inputs,
                           const std::vector<DataType>& output_dtypes, const std::vector<bool>& constant = {},
                           int threads = 2) {
  LayerSpec s;
  s.op = op;
  s.attrs = attrs;
  s.output_dtypes = output_dtypes;
  s.threads = threads;
  for (size_t i = 0; i < inputs.size(); ++i) {
    s.input_dtypes.push_back(inputs[i] ? inputs[i]->dtype() : DataType::kUndefined);
    const bool c = i < constant.size() && constant[i] && inputs[i] != nullptr;
    s.constants.push_back(c ? inputs[i] : nullptr);
  }
  return s;
}

// Fills a tensor with NaN (floats) or 0xA5 bytes, so tests see any element a kernel skips.
inline void poison(Tensor& t) {
  if (t.dtype() == DataType::kFloat32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.size(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
  } else if (t.nbytes() > 0) {
    std::memset(t.raw(), 0xA5, t.nbytes());
  }
}

// The tactic called `name` registered for `op` (a family may register one name for
// several ops, so kiln::fast::find_tactic(name) alone can return another op's entry).
inline const Tactic* find_tactic_for(const std::string& name, Op op) {
  for (const Tactic& t : kiln::fast::tactics()) {
    if (t.op == op && name == t.name) return &t;
  }
  return nullptr;
}

// Number of C++ heap allocations (operator new) made while f runs, on any thread. Defined
// in fast_elementwise_test.cpp, which replaces the global operator new to count them.
int64_t count_allocations(const std::function<void()>& f);

struct FastRun {
  Status status;               // first failing step (supports/create/prepare/run), or ok
  std::vector<Tensor> outputs;
  size_t scratch_bytes = 0;
  int64_t run_allocations = 0;  // heap allocations during the last run() (must be 0)
};

// Runs tactic `name` on the layer: supports() must accept it, then create, prepare with
// the given output shapes, run into NaN-poisoned outputs, `runs` times (to check that a
// kernel can be re-run with the same scratch). The scratch buffer is also poisoned.
// `allowed_run_allocations` is 0 except for tactics that run a library whose execute call
// itself allocates a few small bookkeeping objects (oneDNN 2.6: see fast_onednn_test.cpp).
inline FastRun run_fast(const std::string& name, const LayerSpec& spec, const std::vector<const Tensor*>& inputs,
                        const std::vector<TensorShape>& out_shapes, int runs = 2,
                        int64_t allowed_run_allocations = 0) {
  FastRun r;
  const Tactic* t = find_tactic_for(name, spec.op);
  if (!t) {
    r.status = internal_error("no tactic ", name, " for ", op_name(spec.op));
    return r;
  }
  if (!t->supports(spec)) {
    r.status = unsupported("tactic ", name, " does not support the layer");
    return r;
  }
  auto k = t->create(spec);
  if (!k.is_ok()) {
    r.status = k.status();
    return r;
  }
  std::vector<TensorShape> in_shapes;
  for (const Tensor* x : inputs) in_shapes.push_back(x ? TensorShape{x->dtype(), x->dims()} : TensorShape{});
  size_t scratch = 0;
  r.status = (*k)->prepare(in_shapes, out_shapes, &scratch);
  if (!r.status.is_ok()) return r;
  r.scratch_bytes = scratch;
  std::vector<std::byte> scratch_buf(scratch + 64);
  std::memset(scratch_buf.data(), 0xFF, scratch_buf.size());  // NaN bytes for floats
  // Scratch comes 64-byte aligned from the engine's arena; do the same here.
  void* sp = scratch_buf.data();
  size_t space = scratch_buf.size();
  std::align(64, scratch, sp, space);
  for (const TensorShape& s : out_shapes) {
    r.outputs.push_back(s.dtype == DataType::kUndefined ? Tensor() : Tensor(s.dtype, s.dims));
  }
  std::vector<Tensor*> outs;
  // Omitted outputs (undefined dtype) get nullptr, as the engine passes them.
  for (Tensor& o : r.outputs) outs.push_back(o.dtype() == DataType::kUndefined ? nullptr : &o);
  for (int i = 0; i < runs && r.status.is_ok(); ++i) {
    for (Tensor& o : r.outputs) poison(o);
    r.run_allocations = count_allocations([&] { r.status = (*k)->run(inputs, outs, scratch > 0 ? sp : nullptr); });
  }
  // "After setup, an inference allocates nothing" (an error status may allocate its message).
  if (r.status.is_ok()) {
    EXPECT_LE(r.run_allocations, allowed_run_allocations) << "tactic " << name << " allocated in run()";
  }
  return r;
}

// Runs the reference kernel of spec.op with `num_outputs` outputs wanted (or `wanted`).
inline std::vector<Tensor> run_ref(Op op, const Attributes& attrs, const std::vector<const Tensor*>& inputs,
                                   size_t num_outputs = 1, std::vector<bool> wanted = {}) {
  KernelContext ctx;
  ctx.op = op;
  ctx.attrs = &attrs;
  ctx.inputs = inputs;
  ctx.outputs.resize(num_outputs);
  ctx.output_wanted = wanted.empty() ? std::vector<bool>(num_outputs, true) : wanted;
  KernelFn fn = reference_kernels().find(op);
  EXPECT_NE(fn, nullptr) << op_name(op);
  if (!fn) return {};
  Status s = fn(ctx);
  EXPECT_TRUE(s.is_ok()) << op_name(op) << ": " << s.message();
  return std::move(ctx.outputs);
}

// Every element of `got` within tol * (1 + |want|) of `want` (same dtype and shape); NaN
// in got fails unless want has NaN at the same place. Reports the worst element.
inline void expect_near_tensor(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.dims(), want.dims()) << what << ": got " << dims_str(got.dims()) << ", want " << dims_str(want.dims());
  double worst = 0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double g = got.get_double(i), w = want.get_double(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    const double err = std::isnan(g) || std::isnan(w) ? std::numeric_limits<double>::infinity()
                                                       : std::fabs(g - w) / (1 + std::fabs(w));
    if (!(err <= worst)) {
      worst = err;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": worst element " << worst_i << " got "
                        << (worst_i >= 0 ? got.get_double(worst_i) : 0.0) << " want "
                        << (worst_i >= 0 ? want.get_double(worst_i) : 0.0);
}

// Exact equality of every byte (data movement kernels).
inline void expect_equal_tensor(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.dims(), want.dims()) << what << ": got " << dims_str(got.dims()) << ", want " << dims_str(want.dims());
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0) << what;
}

// Shapes of reference outputs, to prepare a fast kernel with exactly those.
inline std::vector<TensorShape> shapes_of(const std::vector<Tensor>& ts) {
  std::vector<TensorShape> out;
  for (const Tensor& t : ts) out.push_back({t.dtype(), t.dims()});
  return out;
}

// Whether tactic `name` exists for spec.op and accepts the layer (for "rejects" tests).
inline bool tactic_supports(const std::string& name, const LayerSpec& spec) {
  const Tactic* t = find_tactic_for(name, spec.op);
  return t != nullptr && t->supports(spec);
}

// ---- micro timing (benchmarks print, they never assert) ----

// Fastest of `reps` runs of f, in milliseconds (the minimum is robust to a busy machine).
inline double min_time_ms(const std::function<void()>& f, int reps) {
  f();
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Fastest run() of tactic `name` on the layer with `threads` threads, in milliseconds.
inline double time_fast_ms(const std::string& name, Op op, const Attributes& attrs,
                           const std::vector<const Tensor*>& inputs, const std::vector<TensorShape>& out_shapes,
                           int threads, int reps) {
  std::vector<DataType> dts;
  for (const TensorShape& s : out_shapes) dts.push_back(s.dtype);
  const LayerSpec spec = make_spec(op, &attrs, inputs, dts, {}, threads);
  const Tactic* t = find_tactic_for(name, op);
  if (!t || !t->supports(spec)) return -1;
  auto k = t->create(spec);
  if (!k.is_ok()) return -1;
  std::vector<TensorShape> in_shapes;
  for (const Tensor* x : inputs) in_shapes.push_back(x ? TensorShape{x->dtype(), x->dims()} : TensorShape{});
  size_t scratch = 0;
  if (!(*k)->prepare(in_shapes, out_shapes, &scratch).is_ok()) return -1;
  std::vector<std::byte> sbuf(scratch + 64);
  std::vector<Tensor> outs;
  for (const TensorShape& s : out_shapes) outs.emplace_back(s.dtype, s.dims);
  std::vector<Tensor*> out_ptrs;
  for (Tensor& o : outs) out_ptrs.push_back(&o);
  return min_time_ms([&] { (void)(*k)->run(inputs, out_ptrs, sbuf.data()); }, reps);
}

}  // namespace kiln::testing::fast
