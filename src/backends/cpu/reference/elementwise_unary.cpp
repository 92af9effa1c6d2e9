// Elementwise reference kernels: unary math (Abs..BitwiseNot) and activations
// (Relu..Shrink, PRelu). Float math runs in compute_t<T> (float for float16/bfloat16).
#include <cmath>
#include <numbers>
#include <string>

#include "backends/cpu/reference/elementwise_common.h"

namespace kiln {

namespace {

using namespace elementwise;

// A float-only unary op whose body is an expression of v (of compute type C).
#define KILN_FLOAT_UNARY(OP, EXPR)                                   \
  r.add(Op::OP, [](KernelContext& ctx) {                             \
    return unary_map<FloatTypes>(ctx, [](auto v) {                   \
      using C = decltype(v);                                         \
      return static_cast<C>(EXPR);                                   \
    });                                                              \
  })

// ---- unary math on several dtype families ----

Status abs_kernel(KernelContext& ctx) {
  return unary_map<NumericTypes>(ctx, [](auto v) {
    using C = decltype(v);
    if constexpr (std::is_floating_point_v<C>) return std::fabs(v);
    else if constexpr (std::is_unsigned_v<C>) return v;
    else return v < 0 ? wrap_neg(v) : v;
  });
}

Status neg_kernel(KernelContext& ctx) {
  return unary_map<SignedTypes>(ctx, [](auto v) { return wrap_neg(v); });
}

Status sign_kernel(KernelContext& ctx) {
  return unary_map<NumericTypes>(ctx, [](auto v) {
    using C = decltype(v);
    if (is_nan(v)) return v;
    return static_cast<C>(v > C(0) ? 1 : (v < C(0) ? -1 : 0));
  });
}

Status erf_kernel(KernelContext& ctx) {
  return unary_map<NumericTypes>(ctx, [](auto v) {
    using C = decltype(v);
    if constexpr (std::is_floating_point_v<C>) return std::erf(v);
    else return convert_element<C>(std::erf(static_cast<double>(v)));
  });
}

Status isinf_kernel(KernelContext& ctx) {
  const bool neg = ctx.attr().get_int("detect_negative", 1) != 0;
  const bool pos = ctx.attr().get_int("detect_positive", 1) != 0;
  return unary_predicate<FloatTypes>(ctx, [&](auto v) {
    return std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg));
  });
}

// ---- activations ----

Status relu_kernel(KernelContext& ctx) {
  return unary_map<NumericTypes>(ctx, [](auto v) {
    using C = decltype(v);
    if (is_nan(v)) return v;  // like numpy maximum(x, 0)
    return v > C(0) ? v : C(0);
  });
}

Status leaky_relu_kernel(KernelContext& ctx) {
  const float alpha = ctx.attr().get_float("alpha", 0.01f);
  return unary_map<FloatTypes>(ctx, [&](auto v) {
    using C = decltype(v);
    return v < C(0) ? static_cast<C>(alpha) * v : v;
  });
}

Status elu_kernel(KernelContext& ctx) {
  const float alpha = ctx.attr().get_float("alpha", 1.0f);
  return unary_map<FloatTypes>(ctx, [&](auto v) {
    using C = decltype(v);
    return v < C(0) ? static_cast<C>(alpha) * std::expm1(v) : v;
  });
}

Status selu_kernel(KernelContext& ctx) {
  const float alpha = ctx.attr().get_float("alpha", 1.67326319217681884765625f);
  const float gamma = ctx.attr().get_float("gamma", 1.05070102214813232421875f);
  return unary_map<FloatTypes>(ctx, [&](auto v) {
    using C = decltype(v);
    const C g = static_cast<C>(gamma), a = static_cast<C>(alpha);
    return v > C(0) ? g * v : g * (a * std::exp(v) - a);
  });
}

Status celu_kernel(KernelContext& ctx) {
  const float alpha = ctx.attr().get_float("alpha", 1.0f);
  KILN_ENSURE(alpha != 0.0f, "alpha must be non-zero");
  return unary_map<FloatTypes>(ctx, [&](auto v) {
    using C = decltype(v);
    const C a = static_cast<C>(alpha);
    return std::max(C(0), v) + std::min(C(0), a * std::expm1(v / a));
  });
}

Status thresholded_relu_kernel(KernelContext& ctx) {
  const float alpha = ctx.attr().get_float("alpha", 1.0f);
  return unary_map<FloatTypes>(ctx, [&](auto v) {
    using C = decltype(v);
    return v > static_cast<C>(alpha) ? v : C(0);
  });
}

Status hard_sigmoid_kernel(KernelContext& ctx) {
  const float alpha = ctx.attr().get_float("alpha", 0.2f);
  const float beta = ctx.attr().get_float("beta", 0.5f);
  return unary_map<FloatTypes>(ctx, [&](auto v) {
    using C = decltype(v);
    return std::max(C(0), std::min(C(1), static_cast<C>(alpha) * v + static_cast<C>(beta)));
  });
}

Status gelu_kernel(KernelContext& ctx) {
  const std::string approx = ctx.attr().get_string("approximate", "none");
  if (approx == "none") {
    return unary_map<FloatTypes>(ctx, [](auto v) {
      using C = decltype(v);
      return C(0.5) * v * (C(1) + std::erf(v / std::numbers::sqrt2_v<C>));
    });
  }
  if (approx == "tanh") {
    return unary_map<FloatTypes>(ctx, [](auto v) {
      using C = decltype(v);
      const C k = std::sqrt(C(2) / std::numbers::pi_v<C>);
      return C(0.5) * v * (C(1) + std::tanh(k * (v + C(0.044715) * v * v * v)));
    });
  }
  return invalid_argument("approximate must be 'none' or 'tanh', got '", approx, "'");
}

// log(1 + exp(v)) without overflow for large v.
template <typename C>
C softplus(C v) {
  return v > C(0) ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v));
}

template <typename C>
C sigmoid(C v) {
  if (v >= C(0)) return C(1) / (C(1) + std::exp(-v));
  C e = std::exp(v);
  return e / (C(1) + e);
}

// Swish (opset 24): x * sigmoid(alpha * x).
Status swish_kernel(KernelContext& ctx) {
  const float alpha = ctx.attr().get_float("alpha", 1.0f);
  return unary_map<FloatTypes>(ctx, [&](auto v) {
    using C = decltype(v);
    return v * sigmoid(static_cast<C>(alpha) * v);
  });
}

Status shrink_kernel(KernelContext& ctx) {
  const double bias = ctx.attr().get_float("bias", 0.0f);
  const double lambd = ctx.attr().get_float("lambd", 0.5f);
  return unary_map<NumericTypes>(ctx, [&](auto v) {
    using C = decltype(v);
    const double x = static_cast<double>(v);
    double y = x < -lambd ? x + bias : (x > lambd ? x - bias : 0.0);
    return convert_element<C>(y);
  });
}

// PRelu: slope broadcasts to X's shape (unidirectional).
Status prelu_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& slope = *ctx.input(1);
  if (x.dtype() != slope.dtype()) {
    return invalid_argument("X and slope have different dtypes: ", dtype_name(x.dtype()), " and ",
                            dtype_name(slope.dtype()));
  }
  Dims out_dims;
  KILN_RETURN_IF_ERROR(broadcast_shapes({x.dims(), slope.dims()}, &out_dims));
  if (out_dims != x.dims()) {
    return invalid_argument("slope shape ", dims_str(slope.dims()), " does not broadcast to X shape ",
                            dims_str(x.dims()));
  }
  bool ok = NumericTypes::dispatch(x.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, x.dtype(), out_dims);
    const T* px = x.data<T>();
    const T* ps = slope.data<T>();
    T* po = out.data<T>();
    BroadcastIndexer(out_dims, {x.dims(), slope.dims()}).for_each([&](int64_t i, const int64_t* off) {
      auto v = to_compute(px[off[0]]);
      using C = decltype(v);
      po[i] = from_compute<T>(v < C(0) ? wrap_mul(to_compute(ps[off[1]]), v) : v);
    });
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

}  // namespace

void register_elementwise_unary_kernels(KernelRegistry& r) {
  // unary math
  r.add(Op::Abs, abs_kernel);
  r.add(Op::Neg, neg_kernel);
  r.add(Op::Sign, sign_kernel);
  KILN_FLOAT_UNARY(Exp, std::exp(v));
  KILN_FLOAT_UNARY(Log, std::log(v));
  KILN_FLOAT_UNARY(Sqrt, std::sqrt(v));
  KILN_FLOAT_UNARY(Reciprocal, C(1) / v);
  KILN_FLOAT_UNARY(Floor, std::floor(v));
  KILN_FLOAT_UNARY(Ceil, std::ceil(v));
  KILN_FLOAT_UNARY(Round, std::nearbyint(v));  // default rounding mode: half to even
  KILN_FLOAT_UNARY(Sin, std::sin(v));
  KILN_FLOAT_UNARY(Cos, std::cos(v));
  KILN_FLOAT_UNARY(Tan, std::tan(v));
  KILN_FLOAT_UNARY(Asin, std::asin(v));
  KILN_FLOAT_UNARY(Acos, std::acos(v));
  KILN_FLOAT_UNARY(Atan, std::atan(v));
  KILN_FLOAT_UNARY(Sinh, std::sinh(v));
  KILN_FLOAT_UNARY(Cosh, std::cosh(v));
  KILN_FLOAT_UNARY(Asinh, std::asinh(v));
  KILN_FLOAT_UNARY(Acosh, std::acosh(v));
  KILN_FLOAT_UNARY(Atanh, std::atanh(v));
  r.add(Op::Erf, erf_kernel);
  r.add(Op::IsNaN, [](KernelContext& ctx) {
    return unary_predicate<FloatTypes>(ctx, [](auto v) { return std::isnan(v); });
  });
  r.add(Op::IsInf, isinf_kernel);
  r.add(Op::Not, [](KernelContext& ctx) { return unary_map<BoolTypes>(ctx, [](bool v) { return !v; }); });
  r.add(Op::BitwiseNot, [](KernelContext& ctx) {
    return unary_map<IntegerTypes>(ctx, [](auto v) { return static_cast<decltype(v)>(~v); });
  });

  // activations
  r.add(Op::Relu, relu_kernel);
  r.add(Op::LeakyRelu, leaky_relu_kernel);
  r.add(Op::Elu, elu_kernel);
  r.add(Op::Selu, selu_kernel);
  r.add(Op::Celu, celu_kernel);
  r.add(Op::ThresholdedRelu, thresholded_relu_kernel);
  KILN_FLOAT_UNARY(Sigmoid, sigmoid(v));
  r.add(Op::HardSigmoid, hard_sigmoid_kernel);
  KILN_FLOAT_UNARY(HardSwish, v * std::max(C(0), std::min(C(1), v / C(6) + C(0.5))));
  KILN_FLOAT_UNARY(Tanh, std::tanh(v));
  r.add(Op::Gelu, gelu_kernel);
  KILN_FLOAT_UNARY(Softplus, softplus(v));
  KILN_FLOAT_UNARY(Softsign, v / (C(1) + std::fabs(v)));
  KILN_FLOAT_UNARY(Mish, v * std::tanh(softplus(v)));
  r.add(Op::Swish, swish_kernel);
  r.add(Op::Shrink, shrink_kernel);
  r.add(Op::PRelu, prelu_kernel);
}

#undef KILN_FLOAT_UNARY

}  // namespace kiln
