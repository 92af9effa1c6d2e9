// kiln's fast normalization kernels (float32): Softmax/LogSoftmax (any axis),
// LayerNormalization (trailing axes from `axis`, optional Mean/InvStdDev outputs),
// RMSNormalization, and FusedResidualNorm (Sum = X + R, then LayerNorm or RMSNorm).
//
// The reference kernels compute statistics in double; these use float with vectorized
// partial sums and a two-pass variance, which stays within ~1e-6 relative for the row
// lengths of real models. Rows run in parallel.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/fast/fast_common.h"
#include "backends/cpu/fast/geometry.h"

namespace kiln::fast {

Status softmax_geometry(const Dims& in_dims, int64_t axis, bool coerce, int64_t* outer, int64_t* n, int64_t* inner) {
  Dims dims = in_dims;
  if (dims.empty()) dims.push_back(1);
  const int64_t r = static_cast<int64_t>(dims.size());
  if (coerce) {  // legacy: flatten to [prod(dims[:axis]), prod(dims[axis:])]
    KILN_ENSURE(axis >= -r && axis <= r, "Softmax: axis ", axis, " out of range");
  } else {
    KILN_ENSURE(axis >= -r && axis < r, "Softmax: axis ", axis, " out of range");
  }
  if (axis < 0) axis += r;
  *outer = *n = *inner = 1;
  for (int64_t d = 0; d < r; ++d) {
    const int64_t v = dims[static_cast<size_t>(d)];
    if (d < axis) *outer *= v;
    else if (d == axis || coerce) *n *= v;
    else *inner *= v;
  }
  return Status::ok();
}

namespace {

using namespace detail;

// ---- row routines ----

// Statistics of a row. The mean is kept as shift + dmean with shift = x[0]: x - shift is
// exact for a row with a large mean and a small spread, so (x - shift) - dmean keeps the
// precision the reference gets from double sums. For RMS: shift = dmean = 0 and var is
// the mean square.
struct RowStats {
  float shift = 0.0f, dmean = 0.0f, var = 0.0f;
  float mean() const { return shift + dmean; }
};

KILN_FAST_CLONES void row_stats(const float* __restrict x, int64_t n, bool rms, RowStats* st) {
  RowStats r;
  if (n == 0) {
    *st = r;
    return;
  }
  if (rms) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    r.var = ss / static_cast<float>(n);
    *st = r;
    return;
  }
  const float shift = x[0];
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i] - shift;
  const float dmean = s / static_cast<float>(n);
  float v = 0.0f;
#pragma omp simd reduction(+ : v)
  for (int64_t i = 0; i < n; ++i) {
    const float d = (x[i] - shift) - dmean;
    v += d * d;
  }
  r.shift = shift;
  r.dmean = dmean;
  r.var = v / static_cast<float>(n);
  *st = r;
}

// Scale and bias of a normalization: a vector over the row, or one value (stride 0).
struct Affine {
  const float* scale = nullptr;
  int64_t scale_stride = 1;
  const float* bias = nullptr;  // nullptr: none
  int64_t bias_stride = 1;
};

// y = ((x - shift) - dmean) * inv * scale + bias (LayerNorm) or x * inv * scale (RMS:
// shift and dmean 0, no bias). xat(i) reads x[i]; the in-place variant reads y itself,
// so the compiler sees one pointer, not two that might overlap (scalar fallback).
template <typename XAt>
inline void apply_row(XAt xat, float* y, int64_t n, const RowStats& st, float inv, const Affine& a) {
  const float shift = st.shift, dmean = st.dmean;
  const float* s = a.scale;
  const float* b = a.bias;
  if (a.scale_stride == 1 && b && a.bias_stride == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = ((xat(i) - shift) - dmean) * inv * s[i] + b[i];
  } else if (a.scale_stride == 1 && !b) {
    for (int64_t i = 0; i < n; ++i) y[i] = ((xat(i) - shift) - dmean) * inv * s[i];
  } else {  // one scale or bias value for the whole row
    const int64_t ss = a.scale_stride, bs = b ? a.bias_stride : 0;
    const float zero = 0.0f;
    const float* bp = b ? b : &zero;
    for (int64_t i = 0; i < n; ++i) y[i] = ((xat(i) - shift) - dmean) * inv * s[i * ss] + bp[i * bs];
  }
}

KILN_FAST_CLONES void normalize_row(const float* __restrict x, float* __restrict y, int64_t n, const RowStats& st,
                                    float inv, const Affine& a) {
  apply_row([x](int64_t i) { return x[i]; }, y, n, st, inv, a);
}
KILN_FAST_CLONES void normalize_row_inplace(float* y, int64_t n, const RowStats& st, float inv, const Affine& a) {
  apply_row([y](int64_t i) { return y[i]; }, y, n, st, inv, a);
}

KILN_FAST_CLONES void add_row(const float* __restrict a, const float* __restrict b, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// Softmax (or LogSoftmax) of one contiguous row. NaNs are skipped by the max, as in the
// reference (std::max), and then poison the sum.
KILN_FAST_CLONES void softmax_row(const float* __restrict x, float* __restrict y, int64_t n, bool log) {
  float m = -kInf;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  float s = 0.0f;
  if (log) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += exp_f(x[i] - m);
    const float ls = std::log(s);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - ls;
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) {
      const float e = exp_f(x[i] - m);
      y[i] = e;
      s += e;
    }
    const float r = 1.0f / s;
    for (int64_t i = 0; i < n; ++i) y[i] *= r;
  }
}

// Softmax along an axis with `inner` > 1: x is [n, inner] with row stride `inner`; this
// handles columns [0, w) using m and s (w floats each) as accumulators.
KILN_FAST_CLONES void softmax_columns(const float* __restrict x, float* __restrict y, int64_t n, int64_t inner,
                                      int64_t w, float* __restrict m, float* __restrict s, bool log) {
  for (int64_t j = 0; j < w; ++j) {
    m[j] = -kInf;
    s[j] = 0.0f;
  }
  for (int64_t k = 0; k < n; ++k) {
    const float* xr = x + k * inner;
    for (int64_t j = 0; j < w; ++j) m[j] = xr[j] > m[j] ? xr[j] : m[j];
  }
  for (int64_t k = 0; k < n; ++k) {
    const float* xr = x + k * inner;
    float* yr = y + k * inner;
    for (int64_t j = 0; j < w; ++j) {
      const float e = exp_f(xr[j] - m[j]);
      if (!log) yr[j] = e;
      s[j] += e;
    }
  }
  for (int64_t j = 0; j < w; ++j) s[j] = log ? std::log(s[j]) : 1.0f / s[j];
  for (int64_t k = 0; k < n; ++k) {
    const float* xr = x + k * inner;
    float* yr = y + k * inner;
    if (log) {
      for (int64_t j = 0; j < w; ++j) yr[j] = (xr[j] - m[j]) - s[j];
    } else {
      for (int64_t j = 0; j < w; ++j) yr[j] *= s[j];
    }
  }
}

// ---- Softmax / LogSoftmax ----

constexpr int64_t kColumnBlock = 256;

class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(bool log, int64_t axis, bool coerce, int threads)
      : log_(log), axis_(axis), coerce_(coerce), threads_(threads) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    KILN_ENSURE(!in.empty() && !out.empty() && in[0].dims == out[0].dims, "Softmax: output shape differs from input");
    KILN_RETURN_IF_ERROR(softmax_geometry(in[0].dims, axis_, coerce_, &outer_, &n_, &inner_));
    nt_ = threads_for(num_elements(in[0].dims), threads_, 4096);
    *scratch = inner_ > 1 ? static_cast<size_t>(nt_) * 2 * kColumnBlock * sizeof(float) : 0;
    return Status::ok();
  }
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void* scratch) override {
    const float* x = in[0]->data<float>();
    float* y = out[0]->data<float>();
    const int64_t outer = outer_, n = n_, inner = inner_;
    const bool log = log_;
    const int nt = nt_;
    if (n == 0 || outer == 0 || inner == 0) return Status::ok();
    if (inner == 1) {
      parallel_for(outer, nt, [=](int64_t o) { softmax_row(x + o * n, y + o * n, n, log); });
      return Status::ok();
    }
    const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
    float* sbase = static_cast<float*>(scratch);
    parallel_for_tid(outer * blocks, nt, false, [=](int64_t item, int tid) {
      float* m = sbase + static_cast<size_t>(tid) * 2 * kColumnBlock;
      const int64_t o = item / blocks, j0 = (item % blocks) * kColumnBlock;
      const int64_t off = o * n * inner + j0;
      softmax_columns(x + off, y + off, n, inner, std::min(kColumnBlock, inner - j0), m, m + kColumnBlock, log);
    });
    return Status::ok();
  }

 private:
  bool log_;
  int64_t axis_;
  bool coerce_;
  int threads_;
  int nt_ = 1;
  int64_t outer_ = 1, n_ = 1, inner_ = 1;
};

bool f32_in_out(const LayerSpec& spec, size_t num_in) {
  for (size_t i = 0; i < num_in; ++i) {
    if (spec.input_dtype(i) != DataType::kFloat32) return false;
  }
  return spec.output_dtype(0) == DataType::kFloat32;
}

bool softmax_supports(const LayerSpec& spec) {
  return spec.input_dtypes.size() == 1 && spec.output_dtypes.size() == 1 && f32_in_out(spec, 1);
}

Result<std::unique_ptr<Kernel>> softmax_create(const LayerSpec& spec) {
  if (!softmax_supports(spec)) return unsupported("kiln_softmax: unsupported layer");
  const Attributes& a = spec.attributes();
  const bool coerce = a.get_int("kiln_coerce_2d", 0) != 0;
  return std::unique_ptr<Kernel>(
      new SoftmaxKernel(spec.op == Op::LogSoftmax, a.get_int("axis", coerce ? 1 : -1), coerce, spec.threads));
}

// ---- LayerNormalization / RMSNormalization / FusedResidualNorm ----

// Checks that a scale/bias of `pdims` broadcasts to X (`xdims`) and varies only along the
// normalized axes [axis, rank); returns its stride along the row (1 or 0 for one value).
Status param_stride(const Dims& pdims, const Dims& xdims, int64_t axis, int64_t inner, const char* what,
                    int64_t* stride) {
  KILN_ENSURE(pdims.size() <= xdims.size(), what, " ", dims_str(pdims), " has more dimensions than X");
  const size_t lead = xdims.size() - pdims.size();
  for (size_t d = 0; d < pdims.size(); ++d) {
    const int64_t pd = pdims[d], xd = xdims[lead + d];
    KILN_ENSURE(pd == xd || pd == 1, what, " ", dims_str(pdims), " does not broadcast to X ", dims_str(xdims));
    KILN_ENSURE(static_cast<int64_t>(lead + d) >= axis || pd == 1, what, " ", dims_str(pdims),
                " varies outside the normalized axes");
  }
  const int64_t count = num_elements(pdims);
  if (count == 1) *stride = 0;
  else if (count == inner) *stride = 1;
  else return unsupported(what, " ", dims_str(pdims), " broadcasts within the normalized axes");
  return Status::ok();
}

enum class NormKind { kLayerNorm, kRMSNorm };

// Inputs: LayerNorm X, scale, bias?; RMSNorm X, scale; residual: X, R, scale, bias?.
// Outputs: Y, then Mean and InvStdDev (LayerNorm) or Sum (residual), each optional.
class NormKernel final : public Kernel {
 public:
  NormKernel(NormKind kind, bool residual, int64_t axis, float eps, int threads)
      : kind_(kind), residual_(residual), axis_(axis), eps_(eps), threads_(threads) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    *scratch = 0;
    const size_t p0 = residual_ ? 2 : 1;  // index of scale
    KILN_ENSURE(in.size() > p0 && !out.empty(), "normalization: missing inputs");
    const Dims& x = in[0].dims;
    KILN_ENSURE(!x.empty(), "normalization: X must have rank >= 1");
    KILN_ENSURE(out[0].dims == x, "normalization: Y shape differs from X");
    const int64_t r = static_cast<int64_t>(x.size());
    int64_t axis = axis_;
    KILN_ENSURE(axis >= -r && axis < r, "normalization: axis ", axis_, " out of range for rank ", r);
    if (axis < 0) axis += r;
    if (residual_) {
      KILN_ENSURE(axis == r - 1, "FusedResidualNorm: only the last axis");
      KILN_ENSURE(in[1].dims == x, "FusedResidualNorm: R shape differs from X");
    }
    rows_ = inner_ = 1;
    for (int64_t d = 0; d < r; ++d) (d < axis ? rows_ : inner_) *= x[static_cast<size_t>(d)];
    KILN_RETURN_IF_ERROR(param_stride(in[p0].dims, x, axis, inner_, "scale", &scale_stride_));
    has_bias_ = in.size() > p0 + 1 && in[p0 + 1].dtype != DataType::kUndefined;
    if (has_bias_) KILN_RETURN_IF_ERROR(param_stride(in[p0 + 1].dims, x, axis, inner_, "bias", &bias_stride_));
    for (size_t i = 1; i < out.size(); ++i) {
      if (out[i].dtype == DataType::kUndefined) continue;
      if (residual_) {
        KILN_ENSURE(out[i].dims == x, "FusedResidualNorm: Sum shape differs from X");
      } else {
        KILN_ENSURE(num_elements(out[i].dims) == rows_, "LayerNormalization: statistics output has the wrong size");
      }
    }
    nt_ = threads_for(rows_ * inner_, threads_, 8192);
    return Status::ok();
  }

  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*) override {
    const size_t p0 = residual_ ? 2 : 1;
    const float* x = in[0]->data<float>();
    const float* res = residual_ ? in[1]->data<float>() : nullptr;
    Affine aff;
    aff.scale = in[p0]->data<float>();
    aff.scale_stride = scale_stride_;
    if (has_bias_ && in.size() > p0 + 1 && in[p0 + 1]) {
      aff.bias = in[p0 + 1]->data<float>();
      aff.bias_stride = bias_stride_;
    }
    float* y = out[0]->data<float>();
    float* sum = residual_ && out.size() > 1 && out[1] ? out[1]->data<float>() : nullptr;
    float* mean_out = !residual_ && out.size() > 1 && out[1] ? out[1]->data<float>() : nullptr;
    float* inv_out = !residual_ && out.size() > 2 && out[2] ? out[2]->data<float>() : nullptr;
    const bool rms = kind_ == NormKind::kRMSNorm;
    const int64_t n = inner_;
    const float eps = eps_;
    const int nt = nt_;
    parallel_for(rows_, nt, [&](int64_t o) {
      const float* xr = x + o * n;
      float* yr = y + o * n;
      RowStats st;
      if (res) {
        // Sum goes to its output when wanted, else into Y, normalized in place.
        float* s = sum ? sum + o * n : yr;
        add_row(xr, res + o * n, s, n);
        row_stats(s, n, rms, &st);
        const float inv = 1.0f / std::sqrt(st.var + eps);
        if (sum) normalize_row(s, yr, n, st, inv, aff);
        else normalize_row_inplace(yr, n, st, inv, aff);
      } else {
        row_stats(xr, n, rms, &st);
        const float inv = 1.0f / std::sqrt(st.var + eps);
        normalize_row(xr, yr, n, st, inv, aff);
        if (mean_out) mean_out[o] = st.mean();
        if (inv_out) inv_out[o] = inv;
      }
    });
    return Status::ok();
  }

 private:
  NormKind kind_;
  bool residual_;
  int64_t axis_;
  float eps_;
  int threads_;
  int nt_ = 1;
  int64_t rows_ = 1, inner_ = 1, scale_stride_ = 1, bias_stride_ = 1;
  bool has_bias_ = false;
};

bool valid_stash(const Attributes& a) {
  const int64_t s = a.get_int("stash_type", 1);
  return s == 1 || s == 10 || s == 11 || s == 16;
}

bool layernorm_supports(const LayerSpec& spec) {
  const size_t nin = spec.input_dtypes.size();
  if (nin < 2 || nin > 3 || !f32_in_out(spec, 2)) return false;
  if (nin == 3 && spec.has_input(2) && spec.input_dtype(2) != DataType::kFloat32) return false;
  // Mean / InvStdDev only in float32 (stash_type 1).
  for (size_t i = 1; i < spec.output_dtypes.size(); ++i) {
    if (spec.wants_output(i) && spec.output_dtype(i) != DataType::kFloat32) return false;
  }
  return spec.output_dtypes.size() <= 3 && valid_stash(spec.attributes());
}

bool rmsnorm_supports(const LayerSpec& spec) {
  return spec.input_dtypes.size() == 2 && spec.output_dtypes.size() == 1 && f32_in_out(spec, 2) &&
         valid_stash(spec.attributes());
}

bool residual_norm_supports(const LayerSpec& spec) {
  const size_t nin = spec.input_dtypes.size();
  if (nin < 3 || nin > 4 || !f32_in_out(spec, 3)) return false;
  const std::string norm = spec.attributes().get_string("norm", "LayerNorm");
  const bool bias = nin == 4 && spec.has_input(3);
  if (bias && (norm != "LayerNorm" || spec.input_dtype(3) != DataType::kFloat32)) return false;
  if (norm != "LayerNorm" && norm != "RMSNorm") return false;
  if (spec.output_dtypes.size() > 2) return false;
  return !spec.wants_output(1) || spec.output_dtype(1) == DataType::kFloat32;
}

Result<std::unique_ptr<Kernel>> norm_create(const LayerSpec& spec) {
  const Attributes& a = spec.attributes();
  const float eps = a.get_float("epsilon", 1e-5f);
  const int64_t axis = a.get_int("axis", -1);
  switch (spec.op) {
    case Op::LayerNormalization:
      if (!layernorm_supports(spec)) break;
      return std::unique_ptr<Kernel>(new NormKernel(NormKind::kLayerNorm, false, axis, eps, spec.threads));
    case Op::RMSNormalization:
      if (!rmsnorm_supports(spec)) break;
      return std::unique_ptr<Kernel>(new NormKernel(NormKind::kRMSNorm, false, axis, eps, spec.threads));
    case Op::FusedResidualNorm: {
      if (!residual_norm_supports(spec)) break;
      const bool rms = a.get_string("norm", "LayerNorm") == "RMSNorm";
      return std::unique_ptr<Kernel>(
          new NormKernel(rms ? NormKind::kRMSNorm : NormKind::kLayerNorm, true, axis, eps, spec.threads));
    }
    default: break;
  }
  return unsupported("kiln norm kernels: unsupported layer");
}

}  // namespace

void add_norm_tactics(std::vector<Tactic>& out) {
  out.push_back({"kiln_softmax", Op::Softmax, softmax_supports, softmax_create});
  out.push_back({"kiln_softmax", Op::LogSoftmax, softmax_supports, softmax_create});
  out.push_back({"kiln_layernorm", Op::LayerNormalization, layernorm_supports, norm_create});
  out.push_back({"kiln_rmsnorm", Op::RMSNormalization, rmsnorm_supports, norm_create});
  out.push_back({"kiln_residual_norm", Op::FusedResidualNorm, residual_norm_supports, norm_create});
}

}  // namespace kiln::fast
