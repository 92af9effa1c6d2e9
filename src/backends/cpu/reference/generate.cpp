// Reference kernels that generate or mask tensors: ConstantOfShape, Range, EyeLike, Trilu.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/shape_common.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

using shape_detail::check_dims;
using shape_detail::kMaxOutputElements;
using shape_detail::read_ints;

namespace {

Status constant_of_shape_kernel(KernelContext& ctx) {
  std::vector<int64_t> shape;
  KILN_RETURN_IF_ERROR(read_ints(*ctx.input(0), "shape", &shape));
  KILN_RETURN_IF_ERROR(check_dims(shape, "ConstantOfShape output shape"));
  const Tensor* value = ctx.attr().get_tensor("value");
  if (!value) {
    ctx.alloc_output(0, DataType::kFloat32, shape);  // zero-filled
    return Status::ok();
  }
  KILN_ENSURE(value->size() == 1, "attribute 'value' must have exactly one element, got ", value->describe());
  KILN_ENSURE(is_supported_dtype(value->dtype()), "attribute 'value' has unsupported dtype ",
              dtype_name(value->dtype()));
  Tensor& out = ctx.alloc_output(0, value->dtype(), shape);
  const size_t es = dtype_size(value->dtype());
  auto* dst = static_cast<std::byte*>(out.raw());
  for (int64_t i = 0; i < out.size(); ++i) std::memcpy(dst + i * static_cast<int64_t>(es), value->raw(), es);
  return Status::ok();
}

// Reads a scalar (or one-element tensor) input.
Status scalar_input(const Tensor& t, const char* what) {
  KILN_ENSURE(t.size() == 1 && t.rank() <= 1, what, " must be a scalar, got ", t.describe());
  return Status::ok();
}

Status range_kernel(KernelContext& ctx) {
  const Tensor& s = *ctx.input(0);
  const Tensor& l = *ctx.input(1);
  const Tensor& d = *ctx.input(2);
  KILN_RETURN_IF_ERROR(scalar_input(s, "start"));
  KILN_RETURN_IF_ERROR(scalar_input(l, "limit"));
  KILN_RETURN_IF_ERROR(scalar_input(d, "delta"));
  KILN_ENSURE(s.dtype() == l.dtype() && s.dtype() == d.dtype(), "start, limit and delta must have the same dtype, got ",
              dtype_name(s.dtype()), ", ", dtype_name(l.dtype()), ", ", dtype_name(d.dtype()));
  Status st;
  bool ok = dispatch_numeric(s.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const C start = to_compute(s.data<T>()[0]);
    const C limit = to_compute(l.data<T>()[0]);
    const C delta = to_compute(d.data<T>()[0]);
    if (delta == C(0)) {
      st = invalid_argument("delta is 0");
      return;
    }
    // Element count: ceil((limit - start) / delta), computed without overflow.
    long double n = std::ceil((static_cast<long double>(limit) - static_cast<long double>(start)) /
                              static_cast<long double>(delta));
    if (std::isnan(n)) {
      st = invalid_argument("Range bounds are not finite");
      return;
    }
    if (n < 0) n = 0;
    if (n > static_cast<long double>(kMaxOutputElements)) {
      st = invalid_argument("Range would produce ", static_cast<double>(n), " elements");
      return;
    }
    const int64_t count = static_cast<int64_t>(n);
    Tensor& out = ctx.alloc_output(0, s.dtype(), {count});
    T* po = out.data<T>();
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_integral_v<C>) {
        using W = std::conditional_t<std::is_signed_v<C>, int64_t, uint64_t>;  // no narrow wrap-around
        po[i] = static_cast<T>(static_cast<W>(start) + static_cast<W>(i) * static_cast<W>(delta));
      } else {
        po[i] = from_compute<T>(static_cast<C>(static_cast<double>(start) + static_cast<double>(i) * static_cast<double>(delta)));
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, s.dtype());
  return st;
}

Status eye_like_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.rank() == 2, "input must be 2-D, got ", x.describe());
  DataType dt = x.dtype();
  if (ctx.attr().has("dtype")) {
    dt = static_cast<DataType>(ctx.attr().get_int("dtype", 1));
    KILN_ENSURE(is_supported_dtype(dt) && dt != DataType::kString, "attribute 'dtype' (",
                ctx.attr().get_int("dtype", 1), ") is not a supported dtype");
  }
  const int64_t k = ctx.attr().get_int("k", 0);
  const int64_t rows = x.dim(0), cols = x.dim(1);
  bool ok = dispatch_all(dt, [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, dt, x.dims());
    T* po = out.data<T>();
    const T one = convert_element<T>(1);
    for (int64_t i = 0; i < rows; ++i) {
      // Column i + k, when it is inside the matrix (compare without overflow).
      if (k >= cols || k < -i) continue;
      const int64_t j = i + k;
      if (j >= 0 && j < cols) po[i * cols + j] = one;
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, dt, "output");
  return Status::ok();
}

Status trilu_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.rank() >= 2, "input must have rank >= 2, got ", x.describe());
  int64_t k = 0;
  if (ctx.input(1)) {
    std::vector<int64_t> kv;
    KILN_RETURN_IF_ERROR(read_ints(*ctx.input(1), "k", &kv));
    KILN_ENSURE(kv.size() == 1, "k must be a scalar, got ", ctx.input(1)->describe());
    k = kv[0];
  }
  const bool upper = ctx.attr().get_int("upper", 1) != 0;
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  const int64_t mat = rows * cols;
  const int64_t batch = mat == 0 ? 0 : x.size() / mat;
  Tensor& out = ctx.alloc_output(0, x.dtype(), x.dims());
  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const std::byte*>(x.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  // Clamp k to a range where j - i comparisons cannot overflow.
  const int64_t kc = std::clamp<int64_t>(k, -rows - 1, cols + 1);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const bool keep = upper ? (j - i >= kc) : (j - i <= kc);
        if (!keep) continue;  // output is zero-initialized
        const int64_t off = (b * mat + i * cols + j) * static_cast<int64_t>(es);
        std::memcpy(dst + off, src + off, es);
      }
    }
  }
  return Status::ok();
}

}  // namespace

namespace shape_detail {
void register_generator_kernels(KernelRegistry& r) {
  r.add(Op::ConstantOfShape, constant_of_shape_kernel);
  r.add(Op::Range, range_kernel);
  r.add(Op::EyeLike, eye_like_kernel);
  r.add(Op::Trilu, trilu_kernel);
}
}  // namespace shape_detail

}  // namespace kiln
