// Helpers shared by the detection / vision reference kernels (vision.cpp, vision_more.cpp).
#pragma once
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/reference/kernel.h"

namespace kiln {

// Col2Im, DeformConv, MaxUnpool, TfIdfVectorizer (vision_more.cpp).
void register_vision_more_kernels(KernelRegistry& r);

// dispatch_float / dispatch_numeric with a Status-returning body `fn.template operator()<T>()`.
template <typename Fn>
Status dispatch_float_status(Op op, DataType dt, Fn&& fn) {
  Status st;
  if (!dispatch_float(dt, [&]<typename T>() { st = fn.template operator()<T>(); })) return unsupported_dtype(op, dt);
  return st;
}
template <typename Fn>
Status dispatch_numeric_status(Op op, DataType dt, Fn&& fn) {
  Status st;
  const bool ok = dispatch_numeric(dt, [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) st = fn.template operator()<T>();
  });
  if (!ok) return unsupported_dtype(op, dt);
  return st;
}

// double -> T; integers truncate toward zero and saturate (NaN -> 0).
template <typename T>
T saturate_from_double(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (std::isnan(v)) return T(0);
    const double lo = static_cast<double>(std::numeric_limits<T>::min());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    if (v <= lo) return std::numeric_limits<T>::min();
    if (v >= hi) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return from_compute<T>(static_cast<compute_t<T>>(v));
  }
}

}  // namespace kiln
