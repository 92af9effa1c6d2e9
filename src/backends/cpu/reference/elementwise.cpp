// Elementwise reference kernels: unary math, activations, binary ops with numpy
// broadcasting, comparisons, logic, Where, Clip, Cast.
#include <cmath>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

namespace {

template <typename Fn>
Status binary_same_type(KernelContext& ctx, Fn&& f) {
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  if (a.dtype() != b.dtype()) {
    return invalid_argument("inputs have different dtypes: ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  }
  Dims out_dims;
  KILN_RETURN_IF_ERROR(broadcast_shapes({a.dims(), b.dims()}, &out_dims));
  bool ok = dispatch_numeric(a.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, a.dtype(), out_dims);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    BroadcastIndexer(out_dims, {a.dims(), b.dims()}).for_each([&](int64_t i, const int64_t* off) {
      po[i] = from_compute<T>(f(to_compute(pa[off[0]]), to_compute(pb[off[1]])));
    });
  });
  if (!ok) return unsupported_dtype(ctx.op, a.dtype());
  return Status::ok();
}

Status add_kernel(KernelContext& ctx) { return binary_same_type(ctx, [](auto x, auto y) { return x + y; }); }
Status sub_kernel(KernelContext& ctx) { return binary_same_type(ctx, [](auto x, auto y) { return x - y; }); }
Status mul_kernel(KernelContext& ctx) { return binary_same_type(ctx, [](auto x, auto y) { return x * y; }); }
Status div_kernel(KernelContext& ctx) {
  return binary_same_type(ctx, [](auto x, auto y) -> decltype(x) {
    if constexpr (std::is_integral_v<decltype(x)>) {
      if (y == 0) return 0;  // integer division by zero is undefined in ONNX; avoid a crash
    }
    return x / y;
  });
}

template <typename Fn>
Status unary_float(KernelContext& ctx, Fn&& f) {
  const Tensor& x = *ctx.input(0);
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) po[i] = from_compute<T>(f(to_compute(px[i])));
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

Status relu_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  bool ok = dispatch_numeric(x.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) {
      auto v = to_compute(px[i]);
      po[i] = from_compute<T>(v > 0 ? v : decltype(v)(0));
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

Status identity_kernel(KernelContext& ctx) {
  ctx.set_output(0, *ctx.input(0));
  return Status::ok();
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& r) {
  r.add(Op::Add, add_kernel);
  r.add(Op::Sub, sub_kernel);
  r.add(Op::Mul, mul_kernel);
  r.add(Op::Div, div_kernel);
  r.add(Op::Relu, relu_kernel);
  r.add(Op::Sigmoid, [](KernelContext& ctx) { return unary_float(ctx, [](auto v) { return decltype(v)(1) / (decltype(v)(1) + std::exp(-v)); }); });
  r.add(Op::Identity, identity_kernel);
}

}  // namespace kiln
