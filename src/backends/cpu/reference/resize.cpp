// Resize reference kernel (opset 11-19 form: X, roi, scales, sizes). Separable: each resized
// axis is interpolated in turn, in double, as the ONNX reference implementation does.
// Modes nearest / linear / cubic, every coordinate_transformation_mode, antialias,
// exclude_outside, axes and keep_aspect_ratio_policy.
#include <cmath>
#include <limits>

#include <algorithm>
#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/nn_common.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

namespace {

double cubic_weight(double d, double a) {
  d = std::fabs(d);
  if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0.0;
}

}  // namespace

ResizeAttrs resize_attrs(const Attributes& a) {
  ResizeAttrs p;
  p.mode = a.get_string("mode", "nearest");
  p.coord = a.get_string("coordinate_transformation_mode", "half_pixel");
  p.nearest_mode = a.get_string("nearest_mode", "round_prefer_floor");
  p.cubic_a = a.get_float("cubic_coeff_a", -0.75f);
  p.exclude_outside = a.get_int("exclude_outside", 0) != 0;
  p.antialias = a.get_int("antialias", 0) != 0 && p.mode != "nearest";
  p.extrapolation = a.get_float("extrapolation_value", 0.0f);
  return p;
}

double resize_source_coordinate(const ResizeAttrs& p, double j, double scale, int64_t in, int64_t out_int,
                                double roi_start, double roi_end) {
  const double out_f = scale * static_cast<double>(in);
  const double inf = static_cast<double>(in);
  if (p.coord == "align_corners") return out_f == 1 ? 0.0 : j * (inf - 1) / (out_f - 1);
  if (p.coord == "asymmetric") return j / scale;
  if (p.coord == "tf_crop_and_resize") {
    // A float32 roi is combined in float32 (as the ONNX reference and onnxruntime do), which
    // decides ties of nearest rounding: 0.1f * 5 is exactly 0.5 in float32.
    double extent = roi_end - roi_start, offset = roi_start * (inf - 1);
    if (p.roi_is_float32) {
      extent = static_cast<double>(static_cast<float>(roi_end) - static_cast<float>(roi_start));
      offset = static_cast<double>(static_cast<float>(roi_start) * static_cast<float>(in - 1));
    }
    const double x = out_f == 1 ? extent * (inf - 1) / 2 : j * extent * (inf - 1) / (out_f - 1);
    return x + offset;
  }
  if (p.coord == "pytorch_half_pixel") return out_f == 1 ? -0.5 : (j + 0.5) / scale - 0.5;
  if (p.coord == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(out_int) / out_f;
    const double offset = inf / 2 * (1 - adjustment);
    return offset + (j + 0.5) / scale - 0.5;
  }
  if (p.coord == "tf_half_pixel_for_nn") return (j + 0.5) / scale;  // Resize-11 only
  return (j + 0.5) / scale - 0.5;  // half_pixel
}

ResizeTaps resize_taps(const ResizeAttrs& p, double x, double scale, int64_t in) {
  ResizeTaps t;
  const double fl = std::floor(x);
  const bool integral = x == fl;
  const double ratio = integral ? 1.0 : x - fl;
  std::vector<double> c;
  if (p.mode == "nearest") {
    bool take_upper = true;  // integral positions: coefficients [0, 1] pick base + 1 == x
    if (!integral) {
      if (p.nearest_mode == "round_prefer_ceil") take_upper = ratio >= 0.5;
      else if (p.nearest_mode == "floor") take_upper = false;
      else if (p.nearest_mode == "ceil") take_upper = true;
      else take_upper = ratio > 0.5;  // round_prefer_floor
    }
    c = {take_upper ? 0.0 : 1.0, take_upper ? 1.0 : 0.0};
  } else if (p.antialias) {
    const double s = std::min(scale, 1.0);
    const double support = p.mode == "linear" ? 1.0 : 2.0;
    const int64_t start = static_cast<int64_t>(std::floor(-support / s)) + 1;
    const int64_t n = 2 - 2 * start;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double arg = (static_cast<double>(start + i) - ratio) * s;
      const double w = p.mode == "linear" ? std::clamp(1 - std::fabs(arg), 0.0, 1.0) : cubic_weight(arg, p.cubic_a);
      c.push_back(w);
      sum += w;
    }
    for (double& w : c) w /= sum;
  } else if (p.mode == "linear") {
    c = {1 - ratio, ratio};
  } else {  // cubic
    for (int i = 0; i < 4; ++i) c.push_back(cubic_weight(static_cast<double>(i - 1) - ratio, p.cubic_a));
  }
  const int64_t n = static_cast<int64_t>(c.size());
  const int64_t base = static_cast<int64_t>(fl) - n / 2 + (integral ? 0 : 1);
  if (p.exclude_outside) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (base + i < 0 || base + i >= in) c[static_cast<size_t>(i)] = 0;
      sum += c[static_cast<size_t>(i)];
    }
    if (sum != 0) {
      for (double& w : c) w /= sum;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (c[static_cast<size_t>(i)] == 0) continue;
    t.index.push_back(std::clamp<int64_t>(base + i, 0, in - 1));
    t.weight.push_back(c[static_cast<size_t>(i)]);
  }
  return t;
}

namespace {

// Resizes `data` (dims `dims`) along `axis` to `out` positions.
void resize_axis(const ResizeAttrs& p, std::vector<double>& data, Dims& dims, size_t axis, int64_t out, double scale,
                 double roi_start, double roi_end) {
  const int64_t in = dims[axis];
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= dims[d];
  for (size_t d = axis + 1; d < dims.size(); ++d) inner *= dims[d];
  std::vector<ResizeTaps> taps(static_cast<size_t>(out));
  for (int64_t j = 0; j < out; ++j) {
    const double x = resize_source_coordinate(p, static_cast<double>(j), scale, in, out, roi_start, roi_end);
    if (p.coord == "tf_crop_and_resize" && (x < 0 || x > static_cast<double>(in - 1))) {
      taps[static_cast<size_t>(j)].extrapolate = true;
    } else {
      taps[static_cast<size_t>(j)] = resize_taps(p, x, scale, in);
    }
  }
  std::vector<double> res(static_cast<size_t>(outer * out * inner));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < out; ++j) {
      const ResizeTaps& t = taps[static_cast<size_t>(j)];
      double* dst = res.data() + (o * out + j) * inner;
      for (int64_t k = 0; k < inner; ++k) {
        if (t.extrapolate) {
          dst[k] = p.extrapolation;
          continue;
        }
        double acc = 0;
        for (size_t q = 0; q < t.index.size(); ++q) acc += t.weight[q] * data[static_cast<size_t>((o * in + t.index[q]) * inner + k)];
        dst[k] = acc;
      }
    }
  }
  data = std::move(res);
  dims[axis] = out;
}

// A float vector input (roi / scales); an omitted or empty tensor yields an empty vector.
Status read_doubles(const Tensor* t, const char* what, std::vector<double>* out) {
  out->clear();
  if (!t || t->size() == 0) return Status::ok();
  KILN_ENSURE(is_float(t->dtype()) && t->rank() <= 1, "input '", what, "' must be a 1-D float tensor, got ",
              t->describe());
  for (int64_t i = 0; i < t->size(); ++i) out->push_back(t->get_double(i));
  return Status::ok();
}

Status resize_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Attributes& a = ctx.attr();
  const int64_t rank = x.rank();
  ResizeAttrs p = resize_attrs(a);
  const std::string policy = a.get_string("keep_aspect_ratio_policy", "stretch");
  KILN_ENSURE(p.mode == "nearest" || p.mode == "linear" || p.mode == "cubic", "unknown mode '", p.mode, "'");
  KILN_ENSURE(p.coord == "half_pixel" || p.coord == "half_pixel_symmetric" || p.coord == "pytorch_half_pixel" ||
                  p.coord == "align_corners" || p.coord == "asymmetric" || p.coord == "tf_crop_and_resize" ||
                  p.coord == "tf_half_pixel_for_nn",
              "unknown coordinate_transformation_mode '", p.coord, "'");
  KILN_ENSURE(p.nearest_mode == "round_prefer_floor" || p.nearest_mode == "round_prefer_ceil" ||
                  p.nearest_mode == "floor" || p.nearest_mode == "ceil",
              "unknown nearest_mode '", p.nearest_mode, "'");
  KILN_ENSURE(policy == "stretch" || policy == "not_larger" || policy == "not_smaller",
              "unknown keep_aspect_ratio_policy '", policy, "'");

  std::vector<int64_t> axes;
  if (a.has("axes")) {
    axes = a.get_ints("axes");
    KILN_RETURN_IF_ERROR(normalize_axes(axes, rank));
    for (size_t i = 0; i < axes.size(); ++i) {
      for (size_t j = 0; j < i; ++j) KILN_ENSURE(axes[i] != axes[j], "axis ", axes[i], " appears twice in 'axes'");
    }
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  const size_t na = axes.size();

  std::vector<double> roi, scales_in;
  KILN_RETURN_IF_ERROR(read_doubles(ctx.input(1), "roi", &roi));
  p.roi_is_float32 = ctx.input(1) && ctx.input(1)->dtype() == DataType::kFloat32;
  KILN_RETURN_IF_ERROR(read_doubles(ctx.input(2), "scales", &scales_in));
  std::vector<int64_t> sizes_in;
  if (const Tensor* s = ctx.input(3); s && s->size() > 0) {
    KILN_ENSURE(is_integer(s->dtype()) && s->rank() <= 1, "input 'sizes' must be a 1-D integer tensor, got ",
                s->describe());
    sizes_in = s->to_int_vector();
  }
  KILN_ENSURE(scales_in.empty() != sizes_in.empty(), "exactly one of 'scales' and 'sizes' must be given");

  std::vector<double> scale(static_cast<size_t>(rank), 1.0);
  Dims out = x.dims();
  if (!scales_in.empty()) {
    KILN_ENSURE(scales_in.size() == na, "'scales' has ", scales_in.size(), " values, expected ", na);
    for (size_t i = 0; i < na; ++i) {
      const double s = scales_in[i];
      KILN_ENSURE(std::isfinite(s) && s > 0, "scale ", s, " must be positive");
      const size_t d = static_cast<size_t>(axes[i]);
      const double o = std::floor(s * static_cast<double>(x.dims()[d]));
      KILN_ENSURE(o <= static_cast<double>(int64_t{1} << 32), "scale ", s, " gives an absurd output size");
      scale[d] = s;
      out[d] = static_cast<int64_t>(o);
    }
  } else {
    KILN_ENSURE(sizes_in.size() == na, "'sizes' has ", sizes_in.size(), " values, expected ", na);
    for (size_t i = 0; i < na; ++i) {
      const size_t d = static_cast<size_t>(axes[i]);
      KILN_ENSURE(sizes_in[i] >= 0 && sizes_in[i] <= (int64_t{1} << 32), "invalid size ", sizes_in[i]);
      KILN_ENSURE(x.dims()[d] > 0 || sizes_in[i] == 0, "cannot resize empty axis ", d, " to ", sizes_in[i]);
      out[d] = sizes_in[i];
      scale[d] = x.dims()[d] > 0 ? static_cast<double>(sizes_in[i]) / static_cast<double>(x.dims()[d]) : 1.0;
    }
    if (policy != "stretch" && na > 0) {
      double s = scale[static_cast<size_t>(axes[0])];
      for (int64_t d : axes) {
        const double v = scale[static_cast<size_t>(d)];
        s = policy == "not_larger" ? std::min(s, v) : std::max(s, v);
      }
      for (int64_t d : axes) {
        scale[static_cast<size_t>(d)] = s;
        out[static_cast<size_t>(d)] = static_cast<int64_t>(s * static_cast<double>(x.dims()[static_cast<size_t>(d)]) + 0.5);
      }
    }
  }
  for (size_t i = 0; i < na; ++i) {
    const size_t d = static_cast<size_t>(axes[i]);
    KILN_ENSURE(out[d] == 0 || scale[d] > 0, "axis ", d, " has a zero scale");
  }
  std::vector<double> roi_start(static_cast<size_t>(rank), 0.0), roi_end(static_cast<size_t>(rank), 1.0);
  if (p.coord == "tf_crop_and_resize") {
    KILN_ENSURE(roi.size() == 2 * na, "'roi' has ", roi.size(), " values, expected ", 2 * na,
                " for tf_crop_and_resize");
    for (size_t i = 0; i < na; ++i) {
      roi_start[static_cast<size_t>(axes[i])] = roi[i];
      roi_end[static_cast<size_t>(axes[i])] = roi[na + i];
    }
  }
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(out, &total));
  for (size_t i = 0; i < na; ++i) {  // intermediate buffers stay within limits too
    Dims partial = x.dims();
    for (size_t j = 0; j <= i; ++j) partial[static_cast<size_t>(axes[j])] = out[static_cast<size_t>(axes[j])];
    int64_t n = 0;
    KILN_RETURN_IF_ERROR(checked_num_elements(partial, &n));
  }

  bool ok = dispatch_numeric(x.dtype(), [&]<typename T>() {
    std::vector<double> data(static_cast<size_t>(x.size()));
    const T* px = x.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) data[static_cast<size_t>(i)] = static_cast<double>(to_compute(px[i]));
    Dims dims = x.dims();
    for (int64_t ax : axes) {
      const size_t d = static_cast<size_t>(ax);
      const bool identity = std::fabs(scale[d] - 1.0) <= 1e-9 && out[d] == dims[d] &&
                            (p.coord != "tf_crop_and_resize" || (roi_start[d] == 0.0 && roi_end[d] == 1.0));
      if (identity) continue;
      resize_axis(p, data, dims, d, out[d], scale[d], roi_start[d], roi_end[d]);
    }
    Tensor& y = ctx.alloc_output(0, x.dtype(), out);
    T* py = y.data<T>();
    for (size_t i = 0; i < data.size(); ++i) {
      if constexpr (std::is_integral_v<T>) {
        const double r = std::nearbyint(data[i]);
        const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
        const double hi = static_cast<double>(std::numeric_limits<T>::max());
        py[i] = std::isnan(r) ? T(0) : r <= lo ? std::numeric_limits<T>::lowest()
                                      : r >= hi ? std::numeric_limits<T>::max() : static_cast<T>(r);
      } else {
        py[i] = from_compute<T>(static_cast<compute_t<T>>(data[i]));
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

}  // namespace

void register_resize_kernels(KernelRegistry& r) { r.add(Op::Resize, resize_kernel); }

}  // namespace kiln
