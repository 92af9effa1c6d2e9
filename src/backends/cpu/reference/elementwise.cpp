// Elementwise reference kernels: binary ops with numpy broadcasting, variadic
// Max/Min/Sum/Mean, comparisons, logic and bitwise ops, Where, Clip, Cast, Identity,
// Dropout. Unary math and activations live in elementwise_unary.cpp.
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "backends/cpu/reference/elementwise_common.h"
#include "backends/cpu/reference/numpy_random.h"
#include "backends/cpu/reference/quantize.h"

namespace kiln {

namespace {

using namespace elementwise;

// ---- arithmetic ----

Status add_kernel(KernelContext& ctx) {
  return binary_map<NumericTypes, false>(ctx, [](auto x, auto y) { return wrap_add(x, y); });
}
Status sub_kernel(KernelContext& ctx) {
  return binary_map<NumericTypes, false>(ctx, [](auto x, auto y) { return wrap_sub(x, y); });
}
Status mul_kernel(KernelContext& ctx) {
  return binary_map<NumericTypes, false>(ctx, [](auto x, auto y) { return wrap_mul(x, y); });
}
// Integer division by zero is undefined in ONNX; it gives 0 here instead of a crash.
Status div_kernel(KernelContext& ctx) {
  return binary_map<NumericTypes, false>(ctx, [](auto x, auto y) { return safe_div(x, y); });
}

// Python-style modulo: the result has the divisor's sign (numpy.mod).
template <typename C>
C python_mod(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    C m = std::fmod(a, b);
    if (b == C(0)) return m;  // NaN
    if (m != C(0)) {
      if ((b < C(0)) != (m < C(0))) m += b;
    } else {
      m = std::copysign(C(0), b);
    }
    return m;
  } else {
    C m = safe_rem(a, b);
    if constexpr (std::is_signed_v<C>) {
      if (m != 0 && ((m < 0) != (b < 0))) m = static_cast<C>(m + b);
    }
    return m;
  }
}

Status mod_kernel(KernelContext& ctx) {
  const int64_t fmod = ctx.attr().get_int("fmod", 0);
  KILN_ENSURE(fmod == 0 || fmod == 1, "fmod must be 0 or 1, got ", fmod);
  if (fmod == 1) {
    return binary_map<NumericTypes, false>(ctx, [](auto x, auto y) {
      if constexpr (std::is_floating_point_v<decltype(x)>) return std::fmod(x, y);
      else return safe_rem(x, y);
    });
  }
  return binary_map<NumericTypes, false>(ctx, [](auto x, auto y) { return python_mod(x, y); });
}

// Exact integer power with wrap-around; negative exponents truncate toward zero like
// the real result (only bases 1 and -1 give non-zero values).
template <typename B, typename E>
B int_pow(B base, E exp) {
  if constexpr (std::is_signed_v<E>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if constexpr (std::is_signed_v<B>) {
        if (base == -1) return (exp % 2 == 0) ? B(1) : B(-1);
      }
      return 0;
    }
  }
  uint64_t e = static_cast<uint64_t>(exp);
  B result = 1;
  B b = base;
  while (e != 0) {
    if (e & 1) result = wrap_mul(result, b);
    e >>= 1;
    if (e != 0) b = wrap_mul(b, b);
  }
  return result;
}

// Pow: base and exponent may have different dtypes; the output has the base's dtype.
Status pow_kernel(KernelContext& ctx) {
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  Dims out_dims;
  KILN_RETURN_IF_ERROR(broadcast_shapes({a.dims(), b.dims()}, &out_dims));
  bool exp_ok = true;
  bool ok = dispatch_numeric_only(a.dtype(), [&]<typename T>() {
    exp_ok = dispatch_numeric_only(b.dtype(), [&]<typename E>() {
      Tensor& out = ctx.alloc_output(0, a.dtype(), out_dims);
      const T* pa = a.data<T>();
      const E* pb = b.data<E>();
      T* po = out.data<T>();
      BroadcastIndexer(out_dims, {a.dims(), b.dims()}).for_each([&](int64_t i, const int64_t* off) {
        if constexpr (is_int_v<T> && is_int_v<E>) {
          po[i] = int_pow(pa[off[0]], pb[off[1]]);
        } else {
          double r = std::pow(static_cast<double>(to_compute(pa[off[0]])), static_cast<double>(to_compute(pb[off[1]])));
          po[i] = convert_element<T>(r);
        }
      });
    });
  });
  if (!ok) return unsupported_dtype(ctx.op, a.dtype(), "base");
  if (!exp_ok) return unsupported_dtype(ctx.op, b.dtype(), "exponent");
  return Status::ok();
}

// ---- variadic Max/Min/Sum/Mean ----

enum class Fold { kMax, kMin, kSum, kMean };

template <typename Types>
Status variadic_kernel(KernelContext& ctx, Fold fold) {
  const size_t n = ctx.num_inputs();
  KILN_ENSURE(n >= 1, "needs at least one input");
  std::vector<Dims> shapes;
  for (size_t k = 0; k < n; ++k) {
    const Tensor* t = ctx.input(k);
    KILN_ENSURE(t != nullptr, "input ", k, " is missing");
    if (t->dtype() != ctx.input(0)->dtype()) {
      return invalid_argument("input ", k, " has dtype ", dtype_name(t->dtype()), " but input 0 has ",
                              dtype_name(ctx.input(0)->dtype()));
    }
    shapes.push_back(t->dims());
  }
  Dims out_dims;
  KILN_RETURN_IF_ERROR(broadcast_shapes(shapes, &out_dims));
  const DataType dt = ctx.input(0)->dtype();
  bool ok = Types::dispatch(dt, [&]<typename T>() {
    using C = compute_t<T>;
    Tensor& out = ctx.alloc_output(0, dt, out_dims);
    std::vector<const T*> ptrs;
    for (size_t k = 0; k < n; ++k) ptrs.push_back(ctx.input(k)->data<T>());
    T* po = out.data<T>();
    BroadcastIndexer(out_dims, shapes).for_each([&](int64_t i, const int64_t* off) {
      C acc = to_compute(ptrs[0][off[0]]);
      for (size_t k = 1; k < n; ++k) {
        C v = to_compute(ptrs[k][off[k]]);
        switch (fold) {
          case Fold::kMax:
            if (is_nan(acc) || is_nan(v)) acc = is_nan(acc) ? acc : v;
            else if (v > acc) acc = v;
            break;
          case Fold::kMin:
            if (is_nan(acc) || is_nan(v)) acc = is_nan(acc) ? acc : v;
            else if (v < acc) acc = v;
            break;
          case Fold::kSum:
          case Fold::kMean:
            acc = wrap_add(acc, v);
            break;
        }
      }
      if (fold == Fold::kMean) acc = safe_div(acc, static_cast<C>(n));
      po[i] = from_compute<T>(acc);
    });
  });
  if (!ok) return unsupported_dtype(ctx.op, dt);
  return Status::ok();
}

// ---- bit shifts ----

Status bitshift_kernel(KernelContext& ctx) {
  const std::string dir = ctx.attr().get_string("direction", "");
  if (dir != "LEFT" && dir != "RIGHT") {
    return invalid_argument("direction must be 'LEFT' or 'RIGHT', got '", dir, "'");
  }
  const bool left = dir == "LEFT";
  // Shifts of at least the bit width (or negative) saturate like numpy: LEFT gives 0,
  // RIGHT gives 0 or -1 (sign fill). Left shifts of signed values wrap.
  return binary_map<IntegerTypes, false>(ctx, [left](auto x, auto y) {
    using C = decltype(x);
    using U = std::make_unsigned_t<C>;
    constexpr int kBits = static_cast<int>(sizeof(C) * 8);
    bool negative_shift = false, negative_x = false;
    if constexpr (std::is_signed_v<C>) {
      negative_shift = y < 0;
      negative_x = x < 0;
    }
    const bool in_range = !negative_shift && static_cast<uint64_t>(y) < static_cast<uint64_t>(kBits);
    if (left) {
      if (!in_range) return C(0);
      return static_cast<C>(static_cast<U>(static_cast<U>(x) << static_cast<int>(y)));
    }
    if (!in_range) return negative_x ? static_cast<C>(-1) : C(0);
    return static_cast<C>(x >> static_cast<int>(y));  // arithmetic for signed (C++20)
  });
}

// ---- Where ----

Status where_kernel(KernelContext& ctx) {
  const Tensor& c = *ctx.input(0);
  const Tensor& x = *ctx.input(1);
  const Tensor& y = *ctx.input(2);
  KILN_ENSURE(c.dtype() == DataType::kBool, "condition must be bool, got ", dtype_name(c.dtype()));
  KILN_ENSURE(x.dtype() == y.dtype(), "X and Y have different dtypes: ", dtype_name(x.dtype()), " and ",
              dtype_name(y.dtype()));
  Dims out_dims;
  KILN_RETURN_IF_ERROR(broadcast_shapes({c.dims(), x.dims(), y.dims()}, &out_dims));
  bool ok = dispatch_all(x.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, x.dtype(), out_dims);
    const bool* pc = c.data<bool>();
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    T* po = out.data<T>();
    BroadcastIndexer(out_dims, {c.dims(), x.dims(), y.dims()}).for_each([&](int64_t i, const int64_t* off) {
      po[i] = pc[off[0]] ? px[off[1]] : py[off[2]];
    });
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// ---- Clip ----

// Reads a Clip bound (a one-element tensor of any numeric dtype) converted to T.
template <typename T>
Status read_bound(const Tensor* t, const char* name, std::optional<T>* out) {
  if (t == nullptr) return Status::ok();
  KILN_ENSURE(t->size() == 1, name, " must have exactly one element, got shape ", dims_str(t->dims()));
  bool ok = dispatch_numeric_only(t->dtype(), [&]<typename B>() { *out = convert_element<T>(t->data<B>()[0]); });
  if (!ok) return invalid_argument(name, " has unsupported dtype ", dtype_name(t->dtype()));
  return Status::ok();
}

Status clip_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  Status st;
  bool ok = dispatch_numeric_only(x.dtype(), [&]<typename T>() {
    std::optional<T> lo, hi;
    st = read_bound<T>(ctx.input(1), "min", &lo);
    if (st.is_ok()) st = read_bound<T>(ctx.input(2), "max", &hi);
    if (!st.is_ok()) return;
    Tensor& out = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) {
      auto v = to_compute(px[i]);
      if (lo && v < to_compute(*lo)) v = to_compute(*lo);
      if (hi && v > to_compute(*hi)) v = to_compute(*hi);  // min > max gives max, like numpy
      po[i] = from_compute<T>(v);
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return st;
}

// ---- Cast / CastLike ----

Status cast_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  DataType to;
  if (ctx.has_input(1)) {
    to = ctx.input(1)->dtype();  // CastLike
  } else {
    KILN_ENSURE(ctx.attr().has("to"), "attribute 'to' is missing");
    to = static_cast<DataType>(ctx.attr().get_int("to", 0));
    if (!is_supported_dtype(to)) {
      return unsupported("Cast to ONNX data type ", ctx.attr().get_int("to", 0), " is not supported");
    }
  }
  if (to == x.dtype()) {
    ctx.set_output(0, x);
    return Status::ok();
  }
  if (to == DataType::kString || x.is_string()) return cast_with_strings(ctx, to);
  if (is_low_precision(to) || is_low_precision(x.dtype())) return cast_low_precision(ctx, to);  // quantize.cpp
  bool to_ok = true;
  bool ok = dispatch_all(x.dtype(), [&]<typename From>() {
    to_ok = dispatch_all(to, [&]<typename To>() {
      Tensor& out = ctx.alloc_output(0, to, x.dims());
      const From* px = x.data<From>();
      To* po = out.data<To>();
      for (int64_t i = 0; i < x.size(); ++i) po[i] = convert_element<To>(px[i]);
    });
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  if (!to_ok) return unsupported("Cast to ", dtype_name(to), " is not supported");
  return Status::ok();
}

// ---- Identity, Dropout ----

Status identity_kernel(KernelContext& ctx) {
  ctx.set_output(0, *ctx.input(0));
  return Status::ok();
}

bool wants_output(const KernelContext& ctx, size_t i) {
  return i < ctx.output_wanted.size() && ctx.output_wanted[i];
}

// Dropout: identity at inference. With training_mode true and ratio > 0 the mask comes
// from numpy's legacy generator (MT19937 seeded with 'seed', uniform doubles in [0, 1)),
// which reproduces the ONNX reference outputs exactly.
Status dropout_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  double ratio = 0.5;
  if (const Tensor* r = ctx.input(1)) {
    KILN_ENSURE(r->size() == 1, "ratio must be a scalar, got shape ", dims_str(r->dims()));
    KILN_ENSURE(is_float(r->dtype()), "ratio must be a float tensor, got ", dtype_name(r->dtype()));
    ratio = r->get_double(0);
  }
  bool training = false;
  if (const Tensor* t = ctx.input(2)) {
    KILN_ENSURE(t->size() == 1, "training_mode must be a scalar, got shape ", dims_str(t->dims()));
    KILN_ENSURE(t->dtype() == DataType::kBool, "training_mode must be bool, got ", dtype_name(t->dtype()));
    training = t->data<bool>()[0];
  }
  const bool want_mask = wants_output(ctx, 1);
  if (!training || ratio == 0.0) {
    ctx.set_output(0, x);
    if (want_mask) {
      Tensor& m = ctx.alloc_output(1, DataType::kBool, x.dims());
      bool* pm = m.data<bool>();
      for (int64_t i = 0; i < m.size(); ++i) pm[i] = true;
    }
    return Status::ok();
  }
  KILN_ENSURE(ratio > 0.0 && ratio < 1.0, "ratio must be in [0, 1) in training mode, got ", ratio);
  uint32_t seed;
  if (ctx.attr().has("seed")) {
    int64_t s = ctx.attr().get_int("seed", 0);
    KILN_ENSURE(s >= 0 && s <= 0xFFFFFFFFll, "seed must be in [0, 2^32), got ", s);
    seed = static_cast<uint32_t>(s);
  } else {
    seed = fresh_random_seed();
  }
  NumpyLegacyRandom gen(seed);
  Tensor mask(DataType::kBool, x.dims());
  bool* pm = mask.data<bool>();
  for (int64_t i = 0; i < mask.size(); ++i) pm[i] = gen.next_double() >= ratio;
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    // numpy: scale = 1 / (1 - ratio) in the ratio's precision (float32).
    const C scale = static_cast<C>(1.0f / (1.0f - static_cast<float>(ratio)));
    Tensor& out = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) po[i] = from_compute<T>(pm[i] ? to_compute(px[i]) * scale : C(0));
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  if (want_mask) ctx.set_output(1, mask);
  return Status::ok();
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& r) {
  register_elementwise_unary_kernels(r);

  r.add(Op::Add, add_kernel);
  r.add(Op::Sub, sub_kernel);
  r.add(Op::Mul, mul_kernel);
  r.add(Op::Div, div_kernel);
  r.add(Op::Pow, pow_kernel);
  r.add(Op::Mod, mod_kernel);
  r.add(Op::Max, [](KernelContext& ctx) { return variadic_kernel<NumericTypes>(ctx, Fold::kMax); });
  r.add(Op::Min, [](KernelContext& ctx) { return variadic_kernel<NumericTypes>(ctx, Fold::kMin); });
  r.add(Op::Sum, [](KernelContext& ctx) { return variadic_kernel<NumericTypes>(ctx, Fold::kSum); });
  r.add(Op::Mean, [](KernelContext& ctx) { return variadic_kernel<NumericTypes>(ctx, Fold::kMean); });

  r.add(Op::Equal, [](KernelContext& ctx) {
    if (ctx.input(0)->is_string() || ctx.input(1)->is_string()) return equal_strings(ctx);
    return binary_map<AllTypes, true>(ctx, [](auto x, auto y) { return x == y; });
  });
  r.add(Op::Less, [](KernelContext& ctx) {
    return binary_map<NumericTypes, true>(ctx, [](auto x, auto y) { return x < y; });
  });
  r.add(Op::LessOrEqual, [](KernelContext& ctx) {
    return binary_map<NumericTypes, true>(ctx, [](auto x, auto y) { return x <= y; });
  });
  r.add(Op::Greater, [](KernelContext& ctx) {
    return binary_map<NumericTypes, true>(ctx, [](auto x, auto y) { return x > y; });
  });
  r.add(Op::GreaterOrEqual, [](KernelContext& ctx) {
    return binary_map<NumericTypes, true>(ctx, [](auto x, auto y) { return x >= y; });
  });

  r.add(Op::And, [](KernelContext& ctx) { return binary_map<BoolTypes, false>(ctx, [](bool x, bool y) { return x && y; }); });
  r.add(Op::Or, [](KernelContext& ctx) { return binary_map<BoolTypes, false>(ctx, [](bool x, bool y) { return x || y; }); });
  r.add(Op::Xor, [](KernelContext& ctx) { return binary_map<BoolTypes, false>(ctx, [](bool x, bool y) { return x != y; }); });
  r.add(Op::BitShift, bitshift_kernel);
  r.add(Op::BitwiseAnd, [](KernelContext& ctx) {
    return binary_map<IntegerTypes, false>(ctx, [](auto x, auto y) { return static_cast<decltype(x)>(x & y); });
  });
  r.add(Op::BitwiseOr, [](KernelContext& ctx) {
    return binary_map<IntegerTypes, false>(ctx, [](auto x, auto y) { return static_cast<decltype(x)>(x | y); });
  });
  r.add(Op::BitwiseXor, [](KernelContext& ctx) {
    return binary_map<IntegerTypes, false>(ctx, [](auto x, auto y) { return static_cast<decltype(x)>(x ^ y); });
  });

  r.add(Op::Where, where_kernel);
  r.add(Op::Clip, clip_kernel);
  r.add(Op::Cast, cast_kernel);
  r.add(Op::Identity, identity_kernel);
  r.add(Op::Dropout, dropout_kernel);
}

}  // namespace kiln
