// Internal helpers shared by the elementwise reference kernels (elementwise*.cpp):
// dtype sets, unary maps and broadcasting binary maps, wrapping integer arithmetic.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/util.h"

namespace kiln {
namespace elementwise {

// dispatch_numeric without instantiating fn for bool (dispatch_numeric instantiates
// every type, so arithmetic in fn would have to compile for bool).
template <typename Fn>
bool dispatch_numeric_only(DataType dt, Fn&& fn) {
  if (dispatch_float(dt, fn)) return true;
  return dispatch_integer(dt, fn);
}

// ---- dtype sets: each has a static dispatch(dt, fn) like dispatch_all ----
struct FloatTypes {
  template <typename Fn> static bool dispatch(DataType dt, Fn&& fn) { return dispatch_float(dt, std::forward<Fn>(fn)); }
};
struct NumericTypes {
  template <typename Fn> static bool dispatch(DataType dt, Fn&& fn) { return dispatch_numeric_only(dt, std::forward<Fn>(fn)); }
};
// Floats and signed integers (ops such as Neg that make no sense on unsigned types).
struct SignedTypes {
  template <typename Fn> static bool dispatch(DataType dt, Fn&& fn) {
    if (is_unsigned_int(dt)) return false;
    return dispatch_numeric_only(dt, std::forward<Fn>(fn));
  }
};
struct IntegerTypes {
  template <typename Fn> static bool dispatch(DataType dt, Fn&& fn) { return dispatch_integer(dt, std::forward<Fn>(fn)); }
};
struct BoolTypes {
  template <typename Fn> static bool dispatch(DataType dt, Fn&& fn) {
    if (dt != DataType::kBool) return false;
    fn.template operator()<bool>();
    return true;
  }
};
struct AllTypes {
  template <typename Fn> static bool dispatch(DataType dt, Fn&& fn) { return dispatch_all(dt, std::forward<Fn>(fn)); }
};

template <typename T> inline constexpr bool is_int_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// ---- wrapping integer arithmetic (signed overflow is UB in C++; ONNX ints wrap) ----
template <typename C> inline C wrap_add(C a, C b) {
  if constexpr (is_int_v<C>) return static_cast<C>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else return a + b;
}
template <typename C> inline C wrap_sub(C a, C b) {
  if constexpr (is_int_v<C>) return static_cast<C>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
  else return a - b;
}
template <typename C> inline C wrap_mul(C a, C b) {
  if constexpr (is_int_v<C>) return static_cast<C>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else return a * b;
}
template <typename C> inline C wrap_neg(C a) {
  if constexpr (is_int_v<C>) return static_cast<C>(uint64_t{0} - static_cast<uint64_t>(a));
  else return -a;
}
// Integer division truncating toward zero; x/0 gives 0 and MIN/-1 wraps (no SIGFPE).
template <typename C> inline C safe_div(C a, C b) {
  if constexpr (is_int_v<C>) {
    if (b == 0) return 0;
    if constexpr (std::is_signed_v<C>) {
      if (b == -1) return wrap_neg(a);
    }
    return static_cast<C>(a / b);
  } else {
    return a / b;
  }
}
// C-style remainder (sign of the dividend); x%0 gives 0.
template <typename C> inline C safe_rem(C a, C b) {
  if (b == 0) return 0;
  if constexpr (std::is_signed_v<C>) {
    if (b == -1) return 0;
  }
  return static_cast<C>(a % b);
}

template <typename C> inline bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) return std::isnan(v);
  else return false;
}

// ---- maps ----
// out[i] = f(x[i]) for x of a dtype in Types; the output has x's dtype. f receives and
// returns compute_t<T> (float for the 16-bit floats).
template <typename Types, typename Fn>
Status unary_map(KernelContext& ctx, Fn&& f) {
  const Tensor& x = *ctx.input(0);
  bool ok = Types::dispatch(x.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) po[i] = from_compute<T>(f(to_compute(px[i])));
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// out[i] = pred(x[i]) with a bool output.
template <typename Types, typename Fn>
Status unary_predicate(KernelContext& ctx, Fn&& pred) {
  const Tensor& x = *ctx.input(0);
  bool ok = Types::dispatch(x.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, DataType::kBool, x.dims());
    const T* px = x.data<T>();
    bool* po = out.data<bool>();
    for (int64_t i = 0; i < x.size(); ++i) po[i] = pred(to_compute(px[i]));
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// Binary op with numpy broadcasting over two inputs of the same dtype (in Types).
// Output dtype: the inputs' dtype, or bool when kBoolOut.
template <typename Types, bool kBoolOut, typename Fn>
Status binary_map(KernelContext& ctx, Fn&& f) {
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  if (a.dtype() != b.dtype()) {
    return invalid_argument("inputs have different dtypes: ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  }
  Dims out_dims;
  KILN_RETURN_IF_ERROR(broadcast_shapes({a.dims(), b.dims()}, &out_dims));
  bool ok = Types::dispatch(a.dtype(), [&]<typename T>() {
    using OutT = std::conditional_t<kBoolOut, bool, T>;
    Tensor& out = ctx.alloc_output(0, kBoolOut ? DataType::kBool : a.dtype(), out_dims);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    OutT* po = out.data<OutT>();
    BroadcastIndexer(out_dims, {a.dims(), b.dims()}).for_each([&](int64_t i, const int64_t* off) {
      if constexpr (kBoolOut) po[i] = f(to_compute(pa[off[0]]), to_compute(pb[off[1]]));
      else po[i] = from_compute<T>(f(to_compute(pa[off[0]]), to_compute(pb[off[1]])));
    });
  });
  if (!ok) return unsupported_dtype(ctx.op, a.dtype());
  return Status::ok();
}

}  // namespace elementwise

// Registration of the unary math and activation kernels (elementwise_unary.cpp);
// called by register_elementwise_kernels.
void register_elementwise_unary_kernels(KernelRegistry& r);

}  // namespace kiln
