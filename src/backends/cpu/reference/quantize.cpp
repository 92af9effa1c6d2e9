// Low-precision dtypes and quantization: Cast to/from fp8, fp4, e8m0, int4/uint4/int2/uint2
// (routed here from the Cast kernel), QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear and BitCast. The integer matmul/conv ops live in qlinear.cpp.
#include "backends/cpu/reference/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/reference/quantize_common.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

using namespace quant;

Status require_inputs(const KernelContext& ctx, std::initializer_list<size_t> idx) {
  for (size_t i : idx) {
    if (!ctx.has_input(i)) return invalid_argument("required input ", i, " is missing");
  }
  return Status::ok();
}

// ---- Cast ----

Status cast_low_precision(KernelContext& ctx, DataType to) {
  const Tensor& x = *ctx.input(0);
  const DataType from = x.dtype();
  if (!readable(from)) return unsupported_dtype(ctx.op, from);
  if (!readable(to)) return unsupported("Cast to ", dtype_name(to), " is not supported");
  const bool saturate = ctx.attr().get_int("saturate", 1) != 0;
  E8M0Rounding rounding = E8M0Rounding::kUp;
  std::string mode = ctx.attr().get_string("round_mode", "up");
  if (mode == "nearest") rounding = E8M0Rounding::kNearest;
  else if (mode == "down") rounding = E8M0Rounding::kDown;
  else if (mode != "up") return invalid_argument("round_mode must be 'up', 'down' or 'nearest', got '", mode, "'");

  const int64_t n = x.size();
  // Integer-valued sources convert to the 4/2-bit ints by wrapping; float sources truncate
  // toward zero first (NaN and inf become 0), as the ONNX reference (ml_dtypes) does.
  const bool int_source = is_integer(from) || from == DataType::kBool || is_low_precision_int(from);
  Tensor& out = ctx.alloc_output(0, to, x.dims());
  if (is_low_precision(to)) {
    uint8_t* po = out.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (is_low_precision_int(to)) {
        int64_t v;
        if (int_source && (from == DataType::kInt64 || from == DataType::kUInt64)) {
          v = static_cast<int64_t>(from == DataType::kInt64 ? static_cast<uint64_t>(x.data<int64_t>()[i])
                                                            : x.data<uint64_t>()[i]);
        } else {
          double d = element_as_double(x, i);
          v = (std::isfinite(d) && std::fabs(d) < 9.2e18) ? static_cast<int64_t>(d) : 0;
        }
        po[i] = wrap_low_precision_int(to, v);
      } else if (to == DataType::kFloat8E8M0) {
        po[i] = float_to_e8m0(static_cast<float>(element_as_double(x, i)), saturate, rounding);
      } else {
        po[i] = float_to_low_precision_float(to, element_as_double(x, i), saturate);
      }
    }
    return Status::ok();
  }
  // Low-precision source, ordinary target: every source value is exact in float (the floats)
  // or int64 (the ints).
  bool ok = dispatch_all(to, [&]<typename To>() {
    To* po = out.data<To>();
    const uint8_t* px = x.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (int_source) {
        po[i] = convert_element<To>(static_cast<int64_t>(low_precision_to_double(from, px[i])));
      } else {
        po[i] = convert_element<To>(low_precision_float_to_float(from, px[i]));
      }
    }
  });
  if (!ok) return unsupported("Cast to ", dtype_name(to), " is not supported");
  return Status::ok();
}

namespace {

// ---- scale / zero-point layout shared by QuantizeLinear and DequantizeLinear ----

// Maps an element of x to its scale element: per-tensor (one scale), per-axis (a 1-D scale
// along axis) or blocked (scale has x's shape with dim axis divided by block_size, rounded up).
struct ScaleLayout {
  enum Mode { kPerTensor, kPerAxis, kBlocked } mode = kPerTensor;
  int64_t axis_dim = 1, inner = 1, block = 1, scale_axis_dim = 1;
  int64_t index(int64_t i) const {
    if (mode == kPerTensor) return 0;
    int64_t outer = i / (axis_dim * inner), a = (i / inner) % axis_dim, in = i % inner;
    if (mode == kPerAxis) return a;
    return (outer * scale_axis_dim + a / block) * inner + in;
  }
};

Status make_scale_layout(const KernelContext& ctx, const Tensor& x, const Tensor& scale, const Tensor* zp,
                         ScaleLayout* out) {
  if (zp && zp->dims() != scale.dims() && !(zp->size() == 1 && scale.size() == 1)) {
    return invalid_argument("zero point shape ", dims_str(zp->dims()), " must match scale shape ",
                            dims_str(scale.dims()));
  }
  const int64_t block_size = ctx.attr().get_int("block_size", 0);
  if (block_size < 0) return invalid_argument("block_size must be >= 0, got ", block_size);
  if (scale.size() == 1) {
    out->mode = ScaleLayout::kPerTensor;
    return Status::ok();
  }
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", 1), x.rank(), &axis));
  out->axis_dim = x.dim(static_cast<int>(axis));
  out->inner = 1;
  for (int d = static_cast<int>(axis) + 1; d < x.rank(); ++d) out->inner *= x.dim(d);
  if (block_size == 0) {
    if (scale.rank() != 1 || scale.size() != out->axis_dim) {
      return invalid_argument("per-axis scale must be 1-D with ", out->axis_dim, " elements (dim ", axis,
                              " of input ", dims_str(x.dims()), "), got shape ", dims_str(scale.dims()));
    }
    out->mode = ScaleLayout::kPerAxis;
    return Status::ok();
  }
  if (scale.rank() != x.rank()) {
    return invalid_argument("blocked scale must have the input's rank ", x.rank(), ", got shape ",
                            dims_str(scale.dims()));
  }
  for (int d = 0; d < x.rank(); ++d) {
    int64_t want = d == axis ? (x.dim(d) + block_size - 1) / block_size : x.dim(d);
    if (scale.dim(d) != want) {
      return invalid_argument("blocked scale shape ", dims_str(scale.dims()), " does not match input shape ",
                              dims_str(x.dims()), " with block_size ", block_size, " on axis ", axis);
    }
  }
  out->mode = ScaleLayout::kBlocked;
  out->block = block_size;
  out->scale_axis_dim = scale.dim(static_cast<int>(axis));
  return Status::ok();
}

bool is_fp8(DataType dt) {
  return dt == DataType::kFloat8E4M3FN || dt == DataType::kFloat8E4M3FNUZ || dt == DataType::kFloat8E5M2 ||
         dt == DataType::kFloat8E5M2FNUZ;
}

// ---- QuantizeLinear: y = saturate(round(x / scale) + zero_point) ----

Status quantize_linear_kernel(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, {0, 1}));
  const Tensor& x = *ctx.input(0);
  const Tensor& scale = *ctx.input(1);
  const Tensor* zp = ctx.input(2);
  if (!(is_float(x.dtype()) || x.dtype() == DataType::kInt32)) return unsupported_dtype(ctx.op, x.dtype());
  if (!is_float(scale.dtype()) && scale.dtype() != DataType::kInt32) {
    return unsupported_dtype(ctx.op, scale.dtype(), "scale");
  }
  const int64_t output_dtype = ctx.attr().get_int("output_dtype", 0);
  DataType out_dt = DataType::kUInt8;
  if (zp) {
    out_dt = zp->dtype();
    if (output_dtype != 0 && output_dtype != static_cast<int64_t>(out_dt)) {
      return invalid_argument("output_dtype ", output_dtype, " does not match the zero point dtype ",
                              dtype_name(out_dt));
    }
  } else if (output_dtype != 0) {
    out_dt = static_cast<DataType>(output_dtype);
  }
  int64_t lo = 0, hi = 0;
  const bool int_out = out_dt != DataType::kInt32 && int_range(out_dt, &lo, &hi);
  const bool float_out = is_fp8(out_dt) || out_dt == DataType::kFloat4E2M1;
  if (!int_out && !float_out) return unsupported_dtype(ctx.op, out_dt, "output");
  ScaleLayout layout;
  KILN_RETURN_IF_ERROR(make_scale_layout(ctx, x, scale, zp, &layout));

  // The division runs in numpy's result type of (x, scale), or in 'precision' when given.
  DataType div_dt = promote(x.dtype(), scale.dtype());
  if (int64_t precision = ctx.attr().get_int("precision", 0); precision != 0) {
    div_dt = static_cast<DataType>(precision);
    if (!is_float(div_dt)) return invalid_argument("precision must be a float type, got ", precision);
  }
  const bool saturate = ctx.attr().get_int("saturate", 1) != 0;
  std::vector<double> xs = read_as_double(x), ss = read_as_double(scale);
  std::vector<double> zs = zp ? read_as_double(*zp) : std::vector<double>(ss.size(), 0.0);
  Tensor& y = ctx.alloc_output(0, out_dt, x.dims());
  for (int64_t i = 0; i < x.size(); ++i) {
    size_t s = static_cast<size_t>(layout.index(i));
    double q = round_to(div_dt, round_to(div_dt, xs[static_cast<size_t>(i)]) / round_to(div_dt, ss[s]));
    if (int_out) {
      store_int(y, i, std::isnan(q) ? lo : round_clamp(std::nearbyint(q) + zs[s], lo, hi));
    } else if (is_fp8(out_dt)) {
      // A float8 zero point must be zero; it is not added (that would turn -0 into +0).
      y.data<uint8_t>()[i] = float_to_low_precision_float(out_dt, q, saturate);
    } else {
      y.data<uint8_t>()[i] = float_to_low_precision_float(out_dt, zp ? q + zs[s] : q, true);
    }
  }
  return Status::ok();
}

// ---- DequantizeLinear: y = (x - zero_point) * scale ----

Status dequantize_linear_kernel(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, {0, 1}));
  const Tensor& x = *ctx.input(0);
  const Tensor& scale = *ctx.input(1);
  const Tensor* zp = ctx.input(2);
  const DataType xt = x.dtype();
  int64_t lo, hi;
  const bool int_in = int_range(xt, &lo, &hi);
  if (!int_in && !is_fp8(xt) && xt != DataType::kFloat4E2M1) return unsupported_dtype(ctx.op, xt);
  if (!is_float(scale.dtype())) return unsupported_dtype(ctx.op, scale.dtype(), "scale");
  if (zp && zp->dtype() != xt) {
    return invalid_argument("zero point dtype ", dtype_name(zp->dtype()), " must match input dtype ", dtype_name(xt));
  }
  DataType out_dt = scale.dtype();
  if (int64_t od = ctx.attr().get_int("output_dtype", 0); od != 0) {
    out_dt = static_cast<DataType>(od);
    if (!is_float(out_dt)) return invalid_argument("output_dtype must be a float type, got ", od);
  }
  ScaleLayout layout;
  KILN_RETURN_IF_ERROR(make_scale_layout(ctx, x, scale, zp, &layout));
  std::vector<double> xs = read_as_double(x), ss = read_as_double(scale);
  std::vector<double> zs = zp ? read_as_double(*zp) : std::vector<double>(ss.size(), 0.0);
  if (zp && is_fp8(xt)) {
    for (double z : zs) {
      if (z != 0) return invalid_argument("a float8 zero point must be zero");
    }
  }
  // numpy arithmetic of the reference: float32, or float64 for int32 inputs with a zero
  // point or a float64 scale.
  DataType calc = (xt == DataType::kInt32 && zp) || scale.dtype() == DataType::kFloat64 ? DataType::kFloat64
                                                                                        : DataType::kFloat32;
  Tensor& y = ctx.alloc_output(0, out_dt, x.dims());
  dispatch_float(out_dt, [&]<typename T>() {
    T* py = y.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) {
      size_t s = static_cast<size_t>(layout.index(i));
      double dx = round_to(calc, round_to(DataType::kFloat32, xs[static_cast<size_t>(i)]) - zs[s]);
      double v = round_to(calc, dx * ss[s]);
      py[i] = from_compute<T>(static_cast<compute_t<T>>(v));
    }
  });
  return Status::ok();
}

// ---- DynamicQuantizeLinear (uint8, float32 arithmetic as in the ONNX reference) ----

Status dynamic_quantize_linear_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  if (!is_float(x.dtype())) return unsupported_dtype(ctx.op, x.dtype());
  std::vector<double> xs = read_as_double(x);
  float maxx = 0, minx = 0;
  for (double v : xs) {
    float f = static_cast<float>(v);
    if (std::isnan(f)) return invalid_argument("input contains NaN");
    maxx = std::max(maxx, f);
    minx = std::min(minx, f);
  }
  const float qmin = 0, qmax = 255;
  float scale = (maxx == minx ? 1.0f : (maxx - minx)) / (qmax - qmin);
  float initial_zp = qmin - minx / scale;
  float zp = std::nearbyint(std::max(qmin, std::min(qmax, initial_zp)));
  Tensor& y = ctx.alloc_output(0, DataType::kUInt8, x.dims());
  for (int64_t i = 0; i < x.size(); ++i) {
    float q = std::nearbyint(static_cast<float>(xs[static_cast<size_t>(i)]) / scale) + zp;
    y.data<uint8_t>()[i] = static_cast<uint8_t>(std::clamp(q, qmin, qmax));
  }
  Tensor& ys = ctx.alloc_output(1, x.dtype(), {});
  dispatch_float(x.dtype(), [&]<typename T>() { ys.data<T>()[0] = from_compute<T>(static_cast<compute_t<T>>(scale)); });
  Tensor& yz = ctx.alloc_output(2, DataType::kUInt8, {});
  yz.data<uint8_t>()[0] = static_cast<uint8_t>(zp);
  return Status::ok();
}

// ---- BitCast (opset 26): reinterpret the bytes of each element ----

Status bitcast_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(ctx.attr().has("to"), "attribute 'to' is missing");
  int64_t to_attr = ctx.attr().get_int("to", 0);
  auto to = static_cast<DataType>(to_attr);
  auto byte_type = [](DataType dt) { return readable(dt) && !packed_bits(dt) && dtype_size(dt) > 0; };
  if (!byte_type(x.dtype())) return unsupported_dtype(ctx.op, x.dtype());
  if (!is_supported_dtype(to) || !byte_type(to)) return unsupported("BitCast to ONNX data type ", to_attr, " is not supported");
  if (dtype_size(to) != dtype_size(x.dtype())) {
    return invalid_argument("BitCast needs types of the same width, got ", dtype_name(x.dtype()), " (",
                            dtype_size(x.dtype()) * 8, " bits) and ", dtype_name(to), " (", dtype_size(to) * 8, " bits)");
  }
  Tensor& y = ctx.alloc_output(0, to, x.dims());
  if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
  if (to == DataType::kBool) {  // keep bools canonical (0/1)
    for (int64_t i = 0; i < y.size(); ++i) y.data<uint8_t>()[i] = y.data<uint8_t>()[i] != 0;
  }
  return Status::ok();
}

}  // namespace

void register_quant_kernels(KernelRegistry& r) {
  r.add(Op::QuantizeLinear, quantize_linear_kernel);
  r.add(Op::DequantizeLinear, dequantize_linear_kernel);
  r.add(Op::DynamicQuantizeLinear, dynamic_quantize_linear_kernel);
  r.add(Op::BitCast, bitcast_kernel);
  register_qlinear_kernels(r);
}

}  // namespace kiln
