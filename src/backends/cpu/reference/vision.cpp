// Detection and vision reference kernels: NonMaxSuppression, RoiAlign, MaxRoiPool,
// GridSample, AffineGrid. (Col2Im, DeformConv, MaxUnpool, TfIdfVectorizer: vision_more.cpp.)
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/nn_common.h"
#include "backends/cpu/reference/util.h"
#include "backends/cpu/reference/vision_common.h"

namespace kiln {

namespace {

// ---------------------------------------------------------------------------------------
// NonMaxSuppression
// ---------------------------------------------------------------------------------------

// True when box a suppresses box b (IoU above the threshold). Arithmetic in C (float for
// float32 boxes), like the ONNX reference.
template <typename C>
bool suppressed_by_iou(const C* a, const C* b, bool center_point_box, C iou_threshold) {
  C ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
  if (!center_point_box) {  // [y1, x1, y2, x2], corners in any order
    ay0 = std::min(a[0], a[2]), ay1 = std::max(a[0], a[2]);
    ax0 = std::min(a[1], a[3]), ax1 = std::max(a[1], a[3]);
    by0 = std::min(b[0], b[2]), by1 = std::max(b[0], b[2]);
    bx0 = std::min(b[1], b[3]), bx1 = std::max(b[1], b[3]);
  } else {  // [x_center, y_center, width, height]
    ax0 = a[0] - a[2] / C(2), ax1 = a[0] + a[2] / C(2);
    ay0 = a[1] - a[3] / C(2), ay1 = a[1] + a[3] / C(2);
    bx0 = b[0] - b[2] / C(2), bx1 = b[0] + b[2] / C(2);
    by0 = b[1] - b[3] / C(2), by1 = b[1] + b[3] / C(2);
  }
  const C ix0 = std::max(ax0, bx0), ix1 = std::min(ax1, bx1);
  if (!(ix1 > ix0)) return false;
  const C iy0 = std::max(ay0, by0), iy1 = std::min(ay1, by1);
  if (!(iy1 > iy0)) return false;
  const C inter = (ix1 - ix0) * (iy1 - iy0);
  if (!(inter > C(0))) return false;
  const C area_a = (ax1 - ax0) * (ay1 - ay0);
  const C area_b = (bx1 - bx0) * (by1 - by0);
  const C uni = area_a + area_b - inter;
  if (!(area_a > C(0)) || !(area_b > C(0)) || !(uni > C(0))) return false;
  return inter / uni > iou_threshold;
}

// Reads the first element of an optional scalar-ish input; false when absent or empty.
bool optional_scalar(const Tensor* t, double* out) {
  if (!t || t->size() == 0) return false;
  *out = t->get_double(0);
  return true;
}

Status non_max_suppression_kernel(KernelContext& ctx) {
  const Tensor& boxes = *ctx.input(0);
  const Tensor& scores = *ctx.input(1);
  KILN_ENSURE(boxes.rank() == 3 && boxes.dim(2) == 4, "boxes must have shape [batches, boxes, 4], got ",
              dims_str(boxes.dims()));
  KILN_ENSURE(scores.rank() == 3, "scores must have shape [batches, classes, boxes], got ", dims_str(scores.dims()));
  KILN_ENSURE(boxes.dim(0) == scores.dim(0) && boxes.dim(1) == scores.dim(2), "boxes ", dims_str(boxes.dims()),
              " and scores ", dims_str(scores.dims()), " disagree on the batch or box count");
  KILN_ENSURE(boxes.dtype() == scores.dtype(), "boxes and scores must have the same dtype");
  const int64_t cpb = ctx.attr().get_int("center_point_box", 0);
  KILN_ENSURE(cpb == 0 || cpb == 1, "attribute 'center_point_box' must be 0 or 1, got ", cpb);
  const Tensor* max_t = ctx.input(2);
  if (max_t) {
    KILN_ENSURE(max_t->dtype() == DataType::kInt64, "max_output_boxes_per_class must be int64");
    KILN_ENSURE(max_t->size() <= 1, "max_output_boxes_per_class must be a scalar");
  }
  for (size_t i : {size_t{3}, size_t{4}}) {
    const Tensor* t = ctx.input(i);
    KILN_ENSURE(!t || t->size() <= 1, i == 3 ? "iou_threshold" : "score_threshold", " must be a scalar");
  }
  int64_t max_per_class = (max_t && max_t->size() == 1) ? std::max<int64_t>(0, max_t->get_int(0)) : 0;
  double iou_d = 0.0, score_d = 0.0;
  optional_scalar(ctx.input(3), &iou_d);
  const bool has_score = optional_scalar(ctx.input(4), &score_d);

  const int64_t nb = boxes.dim(0), nc = scores.dim(1), nboxes = boxes.dim(1);
  std::vector<int64_t> selected;  // triples
  bool ok = dispatch_float(boxes.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* pb = boxes.data<T>();
    const T* ps = scores.data<T>();
    const C iou_threshold = static_cast<C>(iou_d), score_threshold = static_cast<C>(score_d);
    std::vector<C> box(static_cast<size_t>(nboxes) * 4);
    std::vector<int64_t> order;
    std::vector<int64_t> kept;
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t i = 0; i < nboxes * 4; ++i) box[static_cast<size_t>(i)] = to_compute(pb[b * nboxes * 4 + i]);
      for (int64_t c = 0; c < nc; ++c) {
        const T* s = ps + (b * nc + c) * nboxes;
        order.clear();
        for (int64_t i = 0; i < nboxes; ++i) {
          if (!has_score || to_compute(s[i]) > score_threshold) order.push_back(i);
        }
        // Highest score first; equal scores keep the lower box index first.
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t x, int64_t y) { return to_compute(s[x]) > to_compute(s[y]); });
        kept.clear();
        for (int64_t i : order) {
          if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
          bool keep = true;
          for (int64_t k : kept) {
            if (suppressed_by_iou<C>(&box[static_cast<size_t>(i * 4)], &box[static_cast<size_t>(k * 4)], cpb == 1,
                                     iou_threshold)) {
              keep = false;
              break;
            }
          }
          if (!keep) continue;
          kept.push_back(i);
          selected.insert(selected.end(), {b, c, i});
        }
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, boxes.dtype());
  const int64_t n = static_cast<int64_t>(selected.size() / 3);
  Tensor& y = ctx.alloc_output(0, DataType::kInt64, {n, 3});
  std::copy(selected.begin(), selected.end(), y.data<int64_t>());
  return Status::ok();
}

// ---------------------------------------------------------------------------------------
// RoiAlign
// ---------------------------------------------------------------------------------------

// Number of sampling points along one axis of a bin: sampling_ratio, or adaptive.
Status roi_grid_count(int64_t sampling_ratio, double roi_extent, int64_t pooled, int64_t* out) {
  if (sampling_ratio > 0) {
    *out = sampling_ratio;
    return Status::ok();
  }
  const double g = std::ceil(roi_extent / static_cast<double>(pooled));
  KILN_ENSURE(std::isfinite(g) && g <= 1e5, "region of interest extent ", roi_extent, " is not usable");
  *out = static_cast<int64_t>(g);
  return Status::ok();
}

Status roi_align_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& rois = *ctx.input(1);
  const Tensor& bidx = *ctx.input(2);
  const Attributes& a = ctx.attr();
  KILN_ENSURE(x.rank() == 4, "X must be 4-D [N, C, H, W], got ", dims_str(x.dims()));
  KILN_ENSURE(rois.rank() == 2 && rois.dim(1) == 4, "rois must have shape [num_rois, 4], got ", dims_str(rois.dims()));
  KILN_ENSURE(bidx.rank() == 1 && bidx.dim(0) == rois.dim(0), "batch_indices must have shape [", rois.dim(0),
              "], got ", dims_str(bidx.dims()));
  KILN_ENSURE(bidx.dtype() == DataType::kInt64 || bidx.dtype() == DataType::kInt32, "batch_indices must be int64");
  KILN_ENSURE(rois.dtype() == x.dtype(), "rois must have the dtype of X");
  const std::string mode = a.get_string("mode", "avg");
  KILN_ENSURE(mode == "avg" || mode == "max", "attribute 'mode' must be avg or max, got '", mode, "'");
  const std::string ctm = a.get_string("coordinate_transformation_mode", "half_pixel");
  KILN_ENSURE(ctm == "half_pixel" || ctm == "output_half_pixel",
              "attribute 'coordinate_transformation_mode' must be half_pixel or output_half_pixel, got '", ctm, "'");
  const bool half_pixel = ctm == "half_pixel";
  const int64_t oh = a.get_int("output_height", 1), ow = a.get_int("output_width", 1);
  KILN_ENSURE(oh >= 1 && ow >= 1, "output_height and output_width must be >= 1, got ", oh, " and ", ow);
  const int64_t sampling_ratio = a.get_int("sampling_ratio", 0);
  KILN_ENSURE(sampling_ratio >= 0 && sampling_ratio <= 100000, "attribute 'sampling_ratio' must be >= 0, got ",
              sampling_ratio);
  const double scale = a.get_float("spatial_scale", 1.0f);
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), nr = rois.dim(0);
  Dims out_dims = {nr, c, oh, ow};
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(out_dims, &total));
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t b = bidx.get_int(r);
    KILN_ENSURE(b >= 0 && b < n, "batch_indices[", r, "] = ", b, " is out of range for batch size ", n);
  }
  KILN_ENSURE(total == 0 || (h > 0 && w > 0), "X has an empty spatial extent ", dims_str(x.dims()));

  struct Tap {
    int64_t pos[4];
    double wt[4];
  };
  return dispatch_float_status(ctx.op, x.dtype(), [&]<typename T>() -> Status {
    Tensor& y = ctx.alloc_output(0, x.dtype(), out_dims);
    if (total == 0) return Status::ok();
    T* py = y.data<T>();
    const T* px = x.data<T>();
    std::vector<Tap> taps;
    for (int64_t r = 0; r < nr; ++r) {
      const double off = half_pixel ? 0.5 : 0.0;
      const double x0 = rois.get_double(r * 4 + 0) * scale - off, y0 = rois.get_double(r * 4 + 1) * scale - off;
      const double x1 = rois.get_double(r * 4 + 2) * scale - off, y1 = rois.get_double(r * 4 + 3) * scale - off;
      double rw = x1 - x0, rh = y1 - y0;
      if (!half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
      const double bin_h = rh / static_cast<double>(oh), bin_w = rw / static_cast<double>(ow);
      int64_t gh = 0, gw = 0;
      KILN_RETURN_IF_ERROR(roi_grid_count(sampling_ratio, rh, oh, &gh));
      KILN_RETURN_IF_ERROR(roi_grid_count(sampling_ratio, rw, ow, &gw));
      KILN_ENSURE(gh * gw * oh * ow <= (int64_t{1} << 26), "region of interest ", r, " needs too many samples");
      const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
      // Bilinear taps of every sampling point, shared by all channels.
      taps.clear();
      for (int64_t ph = 0; ph < oh; ++ph) {
        for (int64_t pw = 0; pw < ow; ++pw) {
          for (int64_t iy = 0; iy < gh; ++iy) {
            double yy = y0 + static_cast<double>(ph) * bin_h + (static_cast<double>(iy) + 0.5) * bin_h / static_cast<double>(gh);
            for (int64_t ix = 0; ix < gw; ++ix) {
              double xx = x0 + static_cast<double>(pw) * bin_w + (static_cast<double>(ix) + 0.5) * bin_w / static_cast<double>(gw);
              Tap t{{0, 0, 0, 0}, {0, 0, 0, 0}};
              if (yy >= -1.0 && yy <= static_cast<double>(h) && xx >= -1.0 && xx <= static_cast<double>(w)) {  // NaN: no tap
                double yv = std::max(yy, 0.0), xv = std::max(xx, 0.0);
                int64_t ylo = static_cast<int64_t>(yv), xlo = static_cast<int64_t>(xv), yhi, xhi;
                if (ylo >= h - 1) {
                  ylo = yhi = h - 1;
                  yv = static_cast<double>(ylo);
                } else {
                  yhi = ylo + 1;
                }
                if (xlo >= w - 1) {
                  xlo = xhi = w - 1;
                  xv = static_cast<double>(xlo);
                } else {
                  xhi = xlo + 1;
                }
                const double ly = yv - static_cast<double>(ylo), lx = xv - static_cast<double>(xlo);
                const double hy = 1.0 - ly, hx = 1.0 - lx;
                t = Tap{{ylo * w + xlo, ylo * w + xhi, yhi * w + xlo, yhi * w + xhi}, {hy * hx, hy * lx, ly * hx, ly * lx}};
              }
              taps.push_back(t);
            }
          }
        }
      }
      const int64_t b = bidx.get_int(r);
      const int64_t per_bin = gh * gw;
      for (int64_t ch = 0; ch < c; ++ch) {
        const T* plane = px + (b * c + ch) * h * w;
        T* out = py + (r * c + ch) * oh * ow;
        for (int64_t bin = 0; bin < oh * ow; ++bin) {
          double acc = 0.0;
          bool first = true;
          for (int64_t s = 0; s < per_bin; ++s) {
            const Tap& t = taps[static_cast<size_t>(bin * per_bin + s)];
            double v[4];
            for (int k = 0; k < 4; ++k) v[k] = t.wt[k] * static_cast<double>(to_compute(plane[t.pos[k]]));
            if (mode == "avg") {
              acc += v[0] + v[1] + v[2] + v[3];
            } else {
              // The ONNX reference (and onnxruntime) take the max of the weighted taps.
              const double m = std::max(std::max(v[0], v[1]), std::max(v[2], v[3]));
              acc = first ? m : std::max(acc, m);
              first = false;
            }
          }
          if (mode == "avg") acc /= count;
          out[bin] = from_compute<T>(static_cast<compute_t<T>>(acc));
        }
      }
    }
    return Status::ok();
  });
}

// ---------------------------------------------------------------------------------------
// MaxRoiPool (Caffe semantics, as onnxruntime)
// ---------------------------------------------------------------------------------------

Status max_roi_pool_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& rois = *ctx.input(1);
  const Attributes& a = ctx.attr();
  KILN_ENSURE(x.rank() == 4, "X must be 4-D [N, C, H, W], got ", dims_str(x.dims()));
  KILN_ENSURE(rois.rank() == 2 && rois.dim(1) == 5, "rois must have shape [num_rois, 5], got ", dims_str(rois.dims()));
  KILN_ENSURE(rois.dtype() == x.dtype(), "rois must have the dtype of X");
  KILN_ENSURE(a.has("pooled_shape"), "attribute 'pooled_shape' is required");
  const std::vector<int64_t> pooled = a.get_ints("pooled_shape");
  KILN_ENSURE(pooled.size() == 2 && pooled[0] >= 1 && pooled[1] >= 1,
              "attribute 'pooled_shape' must hold two positive values");
  const double scale = a.get_float("spatial_scale", 1.0f);
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), nr = rois.dim(0);
  const int64_t ph_n = pooled[0], pw_n = pooled[1];
  Dims out_dims = {nr, c, ph_n, pw_n};
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(out_dims, &total));
  auto clampi = [](double v, int64_t lo, int64_t hi) -> int64_t {
    if (!(v >= static_cast<double>(lo))) return lo;  // also NaN
    if (v > static_cast<double>(hi)) return hi;
    return static_cast<int64_t>(v);
  };
  return dispatch_float_status(ctx.op, x.dtype(), [&]<typename T>() -> Status {
    Tensor& y = ctx.alloc_output(0, x.dtype(), out_dims);
    T* py = y.data<T>();
    const T* px = x.data<T>();
    const int64_t big = int64_t{1} << 40;
    for (int64_t r = 0; r < nr; ++r) {
      const double bd = rois.get_double(r * 5);
      KILN_ENSURE(bd >= 0 && bd < static_cast<double>(n), "rois[", r, "] batch index ", bd, " is out of range");
      const int64_t b = static_cast<int64_t>(bd);
      const int64_t sw = clampi(std::round(rois.get_double(r * 5 + 1) * scale), -big, big);
      const int64_t sh = clampi(std::round(rois.get_double(r * 5 + 2) * scale), -big, big);
      const int64_t ew = clampi(std::round(rois.get_double(r * 5 + 3) * scale), -big, big);
      const int64_t eh = clampi(std::round(rois.get_double(r * 5 + 4) * scale), -big, big);
      const double rh = static_cast<double>(std::max<int64_t>(eh - sh + 1, 1));
      const double rw = static_cast<double>(std::max<int64_t>(ew - sw + 1, 1));
      const double bin_h = rh / static_cast<double>(ph_n), bin_w = rw / static_cast<double>(pw_n);
      for (int64_t ch = 0; ch < c; ++ch) {
        const T* plane = px + (b * c + ch) * h * w;
        for (int64_t ph = 0; ph < ph_n; ++ph) {
          const int64_t hs = clampi(std::floor(static_cast<double>(ph) * bin_h) + static_cast<double>(sh), 0, h);
          const int64_t he = clampi(std::ceil(static_cast<double>(ph + 1) * bin_h) + static_cast<double>(sh), 0, h);
          for (int64_t pw = 0; pw < pw_n; ++pw) {
            const int64_t ws = clampi(std::floor(static_cast<double>(pw) * bin_w) + static_cast<double>(sw), 0, w);
            const int64_t we = clampi(std::ceil(static_cast<double>(pw + 1) * bin_w) + static_cast<double>(sw), 0, w);
            double m = 0.0;
            if (he > hs && we > ws) {
              m = -std::numeric_limits<double>::infinity();
              for (int64_t yy = hs; yy < he; ++yy) {
                for (int64_t xx = ws; xx < we; ++xx) m = std::max(m, static_cast<double>(to_compute(plane[yy * w + xx])));
              }
            }
            py[((r * c + ch) * ph_n + ph) * pw_n + pw] = from_compute<T>(static_cast<compute_t<T>>(m));
          }
        }
      }
    }
    return Status::ok();
  });
}

// ---------------------------------------------------------------------------------------
// GridSample
// ---------------------------------------------------------------------------------------

enum class GsMode { kNearest, kLinear, kCubic };
enum class GsPad { kZeros, kBorder, kReflection };

// Reflects x into [lo, hi] by bouncing off the nearer border (the ONNX reference's rule).
double gs_reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (!(range > 0)) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const double n = std::trunc(dx / range);
    const double r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const double n = std::trunc(dx / range);
    const double r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? hi - r : lo + r;
  }
  return x;
}

void cubic_coeffs(double t, double c[4]) {
  const double A = -0.75;
  const double x = std::fabs(t);
  c[0] = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
  c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
  c[2] = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = ((A * (2 - x) - 5 * A) * (2 - x) + 8 * A) * (2 - x) - 4 * A;
}

// Converts a finite-or-not coordinate to an integer index, far out of range when absurd.
int64_t safe_index(double v) {
  if (!(v > -1e15 && v < 1e15)) return std::numeric_limits<int32_t>::min();
  return static_cast<int64_t>(v);
}

struct GridSampler {
  GsMode mode;
  GsPad pad;
  bool align;
  Dims in;  // spatial extents of X
  std::vector<double> lo, hi;  // reflection borders per axis

  // Index along axis d after padding rules; -1 when the tap reads a zero.
  int64_t fetch_index(size_t d, int64_t i) const {
    const int64_t len = in[d];
    if (i >= 0 && i < len) return i;
    switch (pad) {
      case GsPad::kZeros: return -1;
      case GsPad::kBorder: return i < 0 ? 0 : len - 1;
      case GsPad::kReflection: {
        const int64_t r = safe_index(gs_reflect(static_cast<double>(i), lo[d], hi[d]));
        return std::clamp<int64_t>(r, 0, len - 1);
      }
    }
    return -1;
  }

  // Samples one plane at the normalized coordinates nc (X axis order).
  template <typename T>
  double sample(const T* plane, const Dims& strides, const std::vector<double>& nc) const {
    const size_t r = in.size();
    std::vector<double> x(r);
    for (size_t d = 0; d < r; ++d) {
      double v = nc[d];
      const double len = static_cast<double>(in[d]);
      v = align ? (v + 1) / 2.0 * (len - 1) : ((v + 1) * len - 1) / 2.0;
      if (mode == GsMode::kNearest) v = std::nearbyint(v);
      if (std::isnan(v)) v = pad == GsPad::kZeros ? -1e18 : lo[d];
      if (v < lo[d] || v > hi[d]) {
        if (pad == GsPad::kBorder) v = std::clamp(v, 0.0, len - 1);
        else if (pad == GsPad::kReflection) v = std::isfinite(v) ? gs_reflect(v, lo[d], hi[d]) : lo[d];
      }
      x[d] = v;
    }
    if (mode == GsMode::kNearest) {
      int64_t off = 0;
      for (size_t d = 0; d < r; ++d) {
        const int64_t i = fetch_index(d, safe_index(x[d]));
        if (i < 0) return 0.0;
        off += i * strides[d];
      }
      return static_cast<double>(to_compute(plane[off]));
    }
    const int ntap = mode == GsMode::kLinear ? 2 : 4;
    std::vector<int64_t> base(r);
    std::vector<double> coef(r * 4);
    for (size_t d = 0; d < r; ++d) {
      const double f = std::floor(x[d]);
      const double t = x[d] - f;
      if (mode == GsMode::kLinear) {
        base[d] = safe_index(f);
        coef[d * 4] = 1 - t;
        coef[d * 4 + 1] = t;
      } else {
        base[d] = safe_index(f) - 1;
        cubic_coeffs(t, &coef[d * 4]);
      }
    }
    // Tensor-product interpolation over ntap^r taps.
    double acc = 0.0;
    std::vector<int64_t> k(r, 0);
    const Dims taps(r, ntap);
    do {
      double wgt = 1.0;
      int64_t off = 0;
      bool zero = false;
      for (size_t d = 0; d < r; ++d) {
        wgt *= coef[d * 4 + static_cast<size_t>(k[d])];
        const int64_t i = fetch_index(d, base[d] + k[d]);
        if (i < 0) {
          zero = true;
          break;
        }
        off += i * strides[d];
      }
      if (!zero) acc += wgt * static_cast<double>(to_compute(plane[off]));
    } while (next_index(k, taps));
    return acc;
  }
};

Status grid_sample_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& grid = *ctx.input(1);
  const Attributes& a = ctx.attr();
  KILN_ENSURE(x.rank() >= 3, "X must have rank >= 3 [N, C, spatial...], got ", dims_str(x.dims()));
  const size_t r = static_cast<size_t>(x.rank() - 2);
  KILN_ENSURE(grid.rank() == x.rank(), "grid must have rank ", x.rank(), ", got ", dims_str(grid.dims()));
  KILN_ENSURE(grid.dim(0) == x.dim(0), "grid batch ", grid.dim(0), " differs from X batch ", x.dim(0));
  KILN_ENSURE(grid.dims().back() == static_cast<int64_t>(r), "grid's last dimension must be ", r, ", got ",
              dims_str(grid.dims()));
  KILN_ENSURE(is_float(grid.dtype()), "grid must have a float dtype");
  GridSampler gs;
  const std::string mode = a.get_string("mode", "linear");
  if (mode == "bilinear" || mode == "linear") gs.mode = GsMode::kLinear;
  else if (mode == "bicubic" || mode == "cubic") gs.mode = GsMode::kCubic;
  else if (mode == "nearest") gs.mode = GsMode::kNearest;
  else return invalid_argument("attribute 'mode' must be linear, nearest or cubic, got '", mode, "'");
  const std::string pad = a.get_string("padding_mode", "zeros");
  if (pad == "zeros") gs.pad = GsPad::kZeros;
  else if (pad == "border") gs.pad = GsPad::kBorder;
  else if (pad == "reflection") gs.pad = GsPad::kReflection;
  else return invalid_argument("attribute 'padding_mode' must be zeros, border or reflection, got '", pad, "'");
  gs.align = a.get_int("align_corners", 0) != 0;
  gs.in.assign(x.dims().begin() + 2, x.dims().end());
  for (size_t d = 0; d < r; ++d) {
    const double len = static_cast<double>(gs.in[d]);
    gs.lo.push_back(gs.align ? 0.0 : -0.5);
    gs.hi.push_back(gs.align ? len - 1 : len - 0.5);
  }
  const int64_t n = x.dim(0), c = x.dim(1);
  Dims out_dims = {n, c};
  out_dims.insert(out_dims.end(), grid.dims().begin() + 1, grid.dims().end() - 1);
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(out_dims, &total));
  const int64_t in_sp = num_elements(gs.in);
  KILN_ENSURE(total == 0 || in_sp > 0, "X has an empty spatial extent ", dims_str(x.dims()));
  const int64_t out_sp = total == 0 ? 0 : total / (n * c);
  const Dims strides = contiguous_strides(gs.in);

  // Normalized coordinates, converted to double in the grid's own precision.
  std::vector<double> coords(static_cast<size_t>(grid.size()));
  dispatch_float(grid.dtype(), [&]<typename G>() {
    const G* pg = grid.data<G>();
    for (int64_t i = 0; i < grid.size(); ++i) coords[static_cast<size_t>(i)] = static_cast<double>(to_compute(pg[i]));
  });
  bool ok = dispatch_numeric(x.dtype(), [&]<typename T>() {
    Tensor& y = ctx.alloc_output(0, x.dtype(), out_dims);
    if (total == 0) return;
    T* py = y.data<T>();
    const T* px = x.data<T>();
    std::vector<double> nc(r);
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t o = 0; o < out_sp; ++o) {
        const double* g = &coords[static_cast<size_t>((b * out_sp + o) * static_cast<int64_t>(r))];
        for (size_t d = 0; d < r; ++d) nc[d] = g[r - 1 - d];  // grid holds (x, y[, z]): reversed axis order
        for (int64_t ch = 0; ch < c; ++ch) {
          const double v = gs.sample(px + (b * c + ch) * in_sp, strides, nc);
          py[(b * c + ch) * out_sp + o] = saturate_from_double<T>(v);
        }
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// ---------------------------------------------------------------------------------------
// AffineGrid
// ---------------------------------------------------------------------------------------

Status affine_grid_kernel(KernelContext& ctx) {
  const Tensor& theta = *ctx.input(0);
  const Tensor& size = *ctx.input(1);
  const bool align = ctx.attr().get_int("align_corners", 0) != 0;
  KILN_ENSURE(size.rank() == 1 && (size.size() == 4 || size.size() == 5),
              "size must be a 1-D tensor of 4 (2-D) or 5 (3-D) values, got ", dims_str(size.dims()));
  KILN_ENSURE(size.dtype() == DataType::kInt64, "size must be int64");
  const std::vector<int64_t> sz = size.to_int_vector();
  const int64_t r = static_cast<int64_t>(sz.size()) - 2;  // 2 or 3 spatial axes
  KILN_ENSURE(theta.rank() == 3 && theta.dim(1) == r && theta.dim(2) == r + 1, "theta must have shape [N, ", r, ", ",
              r + 1, "] for size ", dims_str(sz), ", got ", dims_str(theta.dims()));
  KILN_ENSURE(theta.dim(0) == sz[0], "theta batch ", theta.dim(0), " differs from size[0] = ", sz[0]);
  Dims out_dims = {sz[0]};
  out_dims.insert(out_dims.end(), sz.begin() + 2, sz.end());
  out_dims.push_back(r);
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(out_dims, &total));
  const Dims sp(sz.begin() + 2, sz.end());  // (H, W) or (D, H, W)
  // Base coordinate of index i along an axis of extent len.
  auto base = [&](int64_t i, int64_t len) -> double {
    if (align) return len <= 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(len - 1);
    return (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(len) - 1.0;
  };
  return dispatch_float_status(ctx.op, theta.dtype(), [&]<typename T>() -> Status {
    Tensor& y = ctx.alloc_output(0, theta.dtype(), out_dims);
    if (total == 0) return Status::ok();
    T* py = y.data<T>();
    const T* pt = theta.data<T>();
    std::vector<int64_t> idx(static_cast<size_t>(r), 0);
    std::vector<double> h(static_cast<size_t>(r) + 1, 1.0);  // homogeneous (x, y[, z], 1)
    int64_t o = 0;
    for (int64_t b = 0; b < sz[0]; ++b) {
      const T* th = pt + b * r * (r + 1);
      std::fill(idx.begin(), idx.end(), 0);
      do {
        // idx is (h, w) or (d, h, w); homogeneous coordinates list x (w) first.
        for (int64_t k = 0; k < r; ++k) h[static_cast<size_t>(k)] = base(idx[static_cast<size_t>(r - 1 - k)], sp[static_cast<size_t>(r - 1 - k)]);
        for (int64_t k = 0; k < r; ++k) {
          double acc = 0.0;
          for (int64_t j = 0; j <= r; ++j) acc += static_cast<double>(to_compute(th[k * (r + 1) + j])) * h[static_cast<size_t>(j)];
          py[o++] = from_compute<T>(static_cast<compute_t<T>>(acc));
        }
      } while (next_index(idx, sp));
    }
    return Status::ok();
  });
}

}  // namespace

void register_vision_kernels(KernelRegistry& r) {
  r.add(Op::NonMaxSuppression, non_max_suppression_kernel);
  r.add(Op::RoiAlign, roi_align_kernel);
  r.add(Op::MaxRoiPool, max_roi_pool_kernel);
  r.add(Op::GridSample, grid_sample_kernel);
  r.add(Op::AffineGrid, affine_grid_kernel);
  register_vision_more_kernels(r);
}

}  // namespace kiln
