// Helpers shared by kiln's own fast CPU kernels (elementwise, norm, attention, movement):
// ISA dispatch, vectorizable float math, and threading thresholds.
//
// The library is compiled for baseline x86-64 (SSE2), so hot loops live in functions
// marked KILN_FAST_CLONES: GCC compiles them twice (AVX2+FMA and baseline) and picks one
// at load time through an ifunc. Code they call must be inlinable (templates, inline
// functions) to get the wide version. OpenMP regions stay outside the cloned functions:
// the parallel loop calls a cloned function per chunk.
//
// The math below avoids data-dependent branches (the vectorizer cannot if-convert the
// branches GCC's jump threading makes of clamps such as `x < lo ? lo : x`), so selects go
// through integer masks.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <omp.h>

#include "backends/cpu/fast/fast_kernel.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define KILN_FAST_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define KILN_FAST_CLONES
#endif

// Small math helpers are always inlined: called out of line from a cloned loop they
// would stop its vectorization (and run the baseline build).
#define KILN_FAST_INLINE inline __attribute__((always_inline))

namespace kiln::fast::detail {

// ---- threading ----

// Threads for `work` units of roughly one element of cheap arithmetic: 1 when a parallel
// region (a few microseconds to fork and join) would not pay off, else all of them, so
// every region of every kernel uses the same team of workers.
inline int threads_for(int64_t work, int max_threads, int64_t per_thread = 16384) {
  return max_threads > 1 && work >= 2 * per_thread ? max_threads : 1;
}

// f(i) for i in [0, n) on nt threads (static schedule). With one thread, f runs inline
// without the cost of entering an OpenMP region. Per-item work belongs in
// KILN_FAST_CLONES functions that f calls (this template's outlined region is compiled
// for the baseline ISA).
template <typename F>
void parallel_for(int64_t n, int nt, F&& f) {
  if (nt <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// As parallel_for, also telling f(i, tid) its thread's index in [0, nt) (per-thread
// scratch). dynamic: items are handed out one at a time (uneven items).
template <typename F>
void parallel_for_tid(int64_t n, int nt, bool dynamic, F&& f) {
  if (nt <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i, 0);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num();
    if (dynamic) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < n; ++i) f(i, tid);
    } else {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; ++i) f(i, tid);
    }
  }
}

// ---- vectorizable float math ----

KILN_FAST_INLINE uint32_t f2u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
KILN_FAST_INLINE float u2f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// c ? a : b without a branch.
KILN_FAST_INLINE float select(bool c, float a, float b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return u2f((f2u(a) & m) | (f2u(b) & ~m));
}

// exp(x): n = round(x / ln2), r = x - n ln2 (Cody-Waite), exp(r) by the Cephes expf
// polynomial, times 2^n applied as two factors so that results down to the denormals and
// up to overflow (inf) come out right. About 1 ulp; NaN propagates.
KILN_FAST_INLINE float exp_f(float x) {
  const bool nan = x != x;
  float xc = select(x < -104.0f, -104.0f, x);
  xc = select(xc > 89.0f, 89.0f, xc);
  xc = select(nan, 0.0f, xc);
  // Round to nearest with the 1.5 * 2^23 trick (no libm call, exact for |v| < 2^22).
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1;  // floor(n / 2)
  const int32_t n2 = ni - n1;
  const float s1 = u2f(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = u2f(static_cast<uint32_t>(n2 + 127) << 23);
  return select(nan, x, p * s1 * s2);
}

// 1 / (1 + exp(-x)) written as the reference writes it for either sign (no overflow).
KILN_FAST_INLINE float sigmoid_f(float x) {
  const float e = exp_f(-std::fabs(x));
  const float s = 1.0f / (1.0f + e);
  return select(x >= 0.0f, s, e * s);
}

// tanh (Cephes tanhf): an odd polynomial for |x| <= 0.625, 1 - 2 / (exp(2|x|) + 1) above.
KILN_FAST_INLINE float tanh_f(float x) {
  const float z = std::fabs(x);
  const float e = exp_f(select(z > 20.0f, 20.0f, z) * 2.0f);
  const float big = 1.0f - 2.0f / (e + 1.0f);
  const float x2 = x * x;
  float p = -5.70498872745e-3f;
  p = p * x2 + 2.06390887954e-2f;
  p = p * x2 - 5.37397155531e-2f;
  p = p * x2 + 1.33314422036e-1f;
  p = p * x2 - 3.33332819422e-1f;
  const float small = p * x2 * x + x;
  const float r = select(z > 0.625f, std::copysign(big, x), small);
  return select(x != x, x, r);
}

// erf: x * P(x^2) / Q(x^2) on [-4, 4] (outside, erf is +-1 in float), the rational
// approximation Eigen and TensorFlow use. A few ulp.
KILN_FAST_INLINE float erf_f(float x) {
  float xc = select(x > 4.0f, 4.0f, x);
  xc = select(xc < -4.0f, -4.0f, xc);
  const float x2 = xc * xc;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * xc;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return select(x != x, x, p / q);
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace kiln::fast::detail
