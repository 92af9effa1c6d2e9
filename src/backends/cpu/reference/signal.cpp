// Signal-processing reference kernels: DFT, STFT, HannWindow, HammingWindow,
// BlackmanWindow, MelWeightMatrix. Transforms are computed as plain O(n^2) DFTs in double.
//
// Complex values use a trailing dimension of 2 (real, imaginary); real signals may use a
// trailing dimension of 1.
#include <cmath>
#include <numbers>
#include <vector>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

void register_rnn_kernels(KernelRegistry& r);  // rnn.cpp

namespace {

constexpr int64_t kMaxSignalElements = int64_t{1} << 31;

// Reads a scalar (or one-element) integer input.
Status scalar_int(const Tensor* t, const char* what, int64_t* out) {
  KILN_ENSURE(t != nullptr, what, " is required");
  KILN_ENSURE(t->dtype() == DataType::kInt32 || t->dtype() == DataType::kInt64, what, " must be int32 or int64, got ",
              dtype_name(t->dtype()));
  KILN_ENSURE(t->size() == 1 && t->rank() <= 1, what, " must be a scalar, got shape ", dims_str(t->dims()));
  *out = t->get_int(0);
  return Status::ok();
}

Status check_output_size(const Dims& dims, const char* what) {
  int64_t n = 1;
  for (int64_t d : dims) {
    KILN_ENSURE(d >= 0, what, " has a negative dimension: ", dims_str(dims));
    if (d != 0 && n > kMaxSignalElements / d) return invalid_argument(what, " ", dims_str(dims), " is too large");
    n *= d;
  }
  return Status::ok();
}

// Twiddle table: tw[k] = exp(sign * 2*pi*i*k/n) for k in [0, n).
struct Twiddles {
  std::vector<double> re, im;
  Twiddles(int64_t n, double sign) : re(static_cast<size_t>(n)), im(static_cast<size_t>(n)) {
    for (int64_t k = 0; k < n; ++k) {
      const double a = 2.0 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(n);
      re[static_cast<size_t>(k)] = std::cos(a);
      im[static_cast<size_t>(k)] = sign * std::sin(a);
    }
  }
};

// Full complex DFT of (in_re, in_im) (length n, zero padded by the caller) into bins
// [0, nbins): out[k] = sum_j in[j] * tw[(j*k) mod n].
void dft_1d(const std::vector<double>& in_re, const std::vector<double>& in_im, int64_t n, int64_t nbins,
            const Twiddles& tw, std::vector<double>& out_re, std::vector<double>& out_im) {
  out_re.assign(static_cast<size_t>(nbins), 0.0);
  out_im.assign(static_cast<size_t>(nbins), 0.0);
  for (int64_t k = 0; k < nbins; ++k) {
    double sr = 0.0, si = 0.0;
    int64_t idx = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double c = tw.re[static_cast<size_t>(idx)], s = tw.im[static_cast<size_t>(idx)];
      const double xr = in_re[static_cast<size_t>(j)], xi = in_im[static_cast<size_t>(j)];
      sr += xr * c - xi * s;
      si += xr * s + xi * c;
      idx += k;
      if (idx >= n) idx %= n;
    }
    out_re[static_cast<size_t>(k)] = sr;
    out_im[static_cast<size_t>(k)] = si;
  }
}

// ---- DFT ----
// Inputs: input [..., 1|2], dft_length (optional scalar), axis (optional scalar, default -2;
// the importer turns the opset-17 attribute into this input).
template <typename T>
void run_dft(const Tensor& x, Tensor& out, int64_t axis, int64_t n, bool inverse, bool onesided) {
  const Dims& in = x.dims();
  const Dims& od = out.dims();
  const int64_t cin = in.back(), cout = od.back();
  const int64_t len = in[static_cast<size_t>(axis)], obins = od[static_cast<size_t>(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= in[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d + 1 < in.size(); ++d) inner *= in[d];
  const T* px = x.data<T>();
  T* po = out.data<T>();
  const Twiddles tw(n, inverse ? 1.0 : -1.0);
  std::vector<double> re(static_cast<size_t>(n)), im(static_cast<size_t>(n)), ore, oim;
  // irfft: the input holds bins [0, n/2]; the rest follow from Hermitian symmetry.
  const int64_t take = inverse && onesided ? std::min(len, n / 2 + 1) : std::min(len, n);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::fill(re.begin(), re.end(), 0.0);
      std::fill(im.begin(), im.end(), 0.0);
      for (int64_t j = 0; j < take; ++j) {
        const int64_t off = ((o * len + j) * inner + i) * cin;
        re[static_cast<size_t>(j)] = static_cast<double>(to_compute(px[off]));
        im[static_cast<size_t>(j)] = cin == 2 ? static_cast<double>(to_compute(px[off + 1])) : 0.0;
      }
      if (inverse && onesided) {
        im[0] = 0.0;
        if (n % 2 == 0) im[static_cast<size_t>(n / 2)] = 0.0;
        for (int64_t j = n / 2 + 1; j < n; ++j) {
          re[static_cast<size_t>(j)] = re[static_cast<size_t>(n - j)];
          im[static_cast<size_t>(j)] = -im[static_cast<size_t>(n - j)];
        }
      }
      dft_1d(re, im, n, obins, tw, ore, oim);
      const double scale = inverse ? 1.0 / static_cast<double>(n) : 1.0;
      for (int64_t k = 0; k < obins; ++k) {
        const int64_t off = ((o * obins + k) * inner + i) * cout;
        po[off] = from_compute<T>(static_cast<compute_t<T>>(ore[static_cast<size_t>(k)] * scale));
        if (cout == 2) po[off + 1] = from_compute<T>(static_cast<compute_t<T>>(oim[static_cast<size_t>(k)] * scale));
      }
    }
  }
}

Status dft_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const int64_t inverse = ctx.attr().get_int("inverse", 0);
  const int64_t onesided = ctx.attr().get_int("onesided", 0);
  KILN_ENSURE(inverse == 0 || inverse == 1, "inverse must be 0 or 1, got ", inverse);
  KILN_ENSURE(onesided == 0 || onesided == 1, "onesided must be 0 or 1, got ", onesided);
  const int64_t rank = x.rank();
  KILN_ENSURE(rank >= 2, "input must have rank >= 2 ([..., signal, 1 or 2]), got shape ", dims_str(x.dims()));
  const int64_t comp = x.dims().back();
  KILN_ENSURE(comp == 1 || comp == 2, "the last dimension of input must be 1 (real) or 2 (complex), got ", comp);
  int64_t axis = -2;
  if (ctx.input(2)) KILN_RETURN_IF_ERROR(scalar_int(ctx.input(2), "axis", &axis));
  KILN_RETURN_IF_ERROR(normalize_axis(axis, rank, &axis));
  KILN_ENSURE(axis != rank - 1, "axis must not be the last (complex) dimension");
  const int64_t len = x.dim(static_cast<int>(axis));
  int64_t n = inverse && onesided ? 2 * (len - 1) : len;
  if (ctx.input(1)) KILN_RETURN_IF_ERROR(scalar_int(ctx.input(1), "dft_length", &n));
  KILN_ENSURE(n >= 1, "dft_length must be positive, got ", n);
  Dims od = x.dims();
  if (inverse && onesided) {
    od[static_cast<size_t>(axis)] = n;
    od.back() = 1;
  } else {
    od[static_cast<size_t>(axis)] = onesided ? n / 2 + 1 : n;
    od.back() = 2;
  }
  KILN_RETURN_IF_ERROR(check_output_size(od, "output"));
  KILN_ENSURE(n <= (int64_t{1} << 24), "dft_length ", n, " is too large");
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, x.dtype(), od);
    if (len > 0) run_dft<T>(x, out, axis, n, inverse != 0, onesided != 0);
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// ---- STFT ----
// Inputs: signal [batch, length, 1|2], frame_step (scalar), window [frame_length] (optional),
// frame_length (optional scalar). Output [batch, frames, bins, 2].
Status stft_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const int64_t onesided = ctx.attr().get_int("onesided", 1);
  KILN_ENSURE(onesided == 0 || onesided == 1, "onesided must be 0 or 1, got ", onesided);
  KILN_ENSURE(x.rank() == 3, "signal must have shape [batch, length, 1 or 2], got ", dims_str(x.dims()));
  const int64_t batch = x.dim(0), length = x.dim(1), comp = x.dim(2);
  KILN_ENSURE(comp == 1 || comp == 2, "the last dimension of signal must be 1 (real) or 2 (complex), got ", comp);
  int64_t step = 0;
  KILN_RETURN_IF_ERROR(scalar_int(ctx.input(1), "frame_step", &step));
  KILN_ENSURE(step >= 1, "frame_step must be positive, got ", step);
  const Tensor* window = ctx.input(2);
  if (window) {
    KILN_ENSURE(window->rank() == 1, "window must have rank 1, got shape ", dims_str(window->dims()));
    KILN_ENSURE(window->dtype() == x.dtype(), "window has dtype ", dtype_name(window->dtype()), " but signal has ",
                dtype_name(x.dtype()));
  }
  int64_t frame_length = window ? window->dim(0) : length;
  if (ctx.input(3)) {
    KILN_RETURN_IF_ERROR(scalar_int(ctx.input(3), "frame_length", &frame_length));
    if (window) {
      KILN_ENSURE(window->dim(0) == frame_length, "window length ", window->dim(0), " does not match frame_length ",
                  frame_length);
    }
  }
  KILN_ENSURE(frame_length >= 1 && frame_length <= length, "frame_length ", frame_length,
              " must be in [1, signal length ", length, "]");
  const int64_t frames = 1 + (length - frame_length) / step;
  const int64_t bins = onesided ? frame_length / 2 + 1 : frame_length;
  const Dims od = {batch, frames, bins, 2};
  KILN_RETURN_IF_ERROR(check_output_size(od, "output"));
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, x.dtype(), od);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const Twiddles tw(frame_length, -1.0);
    std::vector<double> re(static_cast<size_t>(frame_length)), im(static_cast<size_t>(frame_length)), ore, oim;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t f = 0; f < frames; ++f) {
        for (int64_t j = 0; j < frame_length; ++j) {
          const double w = window ? static_cast<double>(to_compute(window->data<T>()[j])) : 1.0;
          const int64_t off = (b * length + f * step + j) * comp;
          re[static_cast<size_t>(j)] = w * static_cast<double>(to_compute(px[off]));
          im[static_cast<size_t>(j)] = comp == 2 ? w * static_cast<double>(to_compute(px[off + 1])) : 0.0;
        }
        dft_1d(re, im, frame_length, bins, tw, ore, oim);
        for (int64_t k = 0; k < bins; ++k) {
          const int64_t off = ((b * frames + f) * bins + k) * 2;
          po[off] = from_compute<T>(static_cast<compute_t<T>>(ore[static_cast<size_t>(k)]));
          po[off + 1] = from_compute<T>(static_cast<compute_t<T>>(oim[static_cast<size_t>(k)]));
        }
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// ---- window functions ----

Status output_datatype(const KernelContext& ctx, DataType* dt) {
  const int64_t v = ctx.attr().get_int("output_datatype", static_cast<int64_t>(DataType::kFloat32));
  const DataType d = static_cast<DataType>(v);
  KILN_ENSURE(v >= 0 && v <= 16 && is_supported_dtype(d) && d != DataType::kBool && d != DataType::kString,
              "output_datatype ", v, " is not a supported numeric dtype");
  *dt = d;
  return Status::ok();
}

template <typename Fn>
Status window_kernel(KernelContext& ctx, Fn&& fn) {
  int64_t size = 0;
  KILN_RETURN_IF_ERROR(scalar_int(ctx.input(0), "size", &size));
  KILN_ENSURE(size >= 0 && size <= kMaxSignalElements, "size must be in [0, 2^31], got ", size);
  const int64_t periodic = ctx.attr().get_int("periodic", 1);
  KILN_ENSURE(periodic == 0 || periodic == 1, "periodic must be 0 or 1, got ", periodic);
  DataType dt;
  KILN_RETURN_IF_ERROR(output_datatype(ctx, &dt));
  const double denom = static_cast<double>(periodic ? size : size - 1);
  dispatch_numeric(dt, [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, dt, {size});
    T* po = out.data<T>();
    for (int64_t i = 0; i < size; ++i) {
      // A symmetric window of length 1 is the single value 1.
      const double v = denom > 0 ? fn(2.0 * std::numbers::pi * static_cast<double>(i) / denom) : 1.0;
      po[i] = convert_element<T>(v);
    }
  });
  return Status::ok();
}

Status hann_kernel(KernelContext& ctx) {
  return window_kernel(ctx, [](double a) { return 0.5 - 0.5 * std::cos(a); });
}
Status hamming_kernel(KernelContext& ctx) {
  return window_kernel(ctx, [](double a) { return 25.0 / 46.0 - (21.0 / 46.0) * std::cos(a); });
}
Status blackman_kernel(KernelContext& ctx) {
  return window_kernel(ctx, [](double a) { return 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2.0 * a); });
}

// ---- MelWeightMatrix ----
// Inputs: num_mel_bins, dft_length, sample_rate (integer scalars), lower_edge_hertz,
// upper_edge_hertz (float scalars). Output [dft_length/2 + 1, num_mel_bins] of triangular
// filters over mel-spaced bins (the ONNX reference formulation).
Status scalar_float(const Tensor* t, const char* what, double* out) {
  KILN_ENSURE(t != nullptr, what, " is required");
  KILN_ENSURE(is_float(t->dtype()), what, " must be a float tensor, got ", dtype_name(t->dtype()));
  KILN_ENSURE(t->size() == 1 && t->rank() <= 1, what, " must be a scalar, got shape ", dims_str(t->dims()));
  *out = t->get_double(0);
  return Status::ok();
}

Status mel_kernel(KernelContext& ctx) {
  int64_t mel_bins = 0, dft_length = 0, sample_rate = 0;
  double lower = 0.0, upper = 0.0;
  KILN_RETURN_IF_ERROR(scalar_int(ctx.input(0), "num_mel_bins", &mel_bins));
  KILN_RETURN_IF_ERROR(scalar_int(ctx.input(1), "dft_length", &dft_length));
  KILN_RETURN_IF_ERROR(scalar_int(ctx.input(2), "sample_rate", &sample_rate));
  KILN_RETURN_IF_ERROR(scalar_float(ctx.input(3), "lower_edge_hertz", &lower));
  KILN_RETURN_IF_ERROR(scalar_float(ctx.input(4), "upper_edge_hertz", &upper));
  KILN_ENSURE(mel_bins >= 1, "num_mel_bins must be positive, got ", mel_bins);
  KILN_ENSURE(dft_length >= 1, "dft_length must be positive, got ", dft_length);
  KILN_ENSURE(sample_rate >= 1, "sample_rate must be positive, got ", sample_rate);
  KILN_ENSURE(lower >= 0.0 && lower <= upper && std::isfinite(upper), "need 0 <= lower_edge_hertz (", lower,
              ") <= upper_edge_hertz (", upper, ")");
  const int64_t spec_bins = dft_length / 2 + 1;
  const Dims od = {spec_bins, mel_bins};
  KILN_RETURN_IF_ERROR(check_output_size(od, "output"));
  DataType dt;
  KILN_RETURN_IF_ERROR(output_datatype(ctx, &dt));

  const double ln10 = std::log(10.0);
  const double low_mel = 2595.0 * std::log1p(lower / 700.0) / ln10;
  const double high_mel = 2595.0 * std::log1p(upper / 700.0) / ln10;
  const double mel_step = (high_mel - low_mel) / static_cast<double>(mel_bins + 2);
  std::vector<int64_t> edges(static_cast<size_t>(mel_bins + 2));
  for (int64_t i = 0; i < mel_bins + 2; ++i) {
    const double mel = static_cast<double>(i) * mel_step + low_mel;
    const double hz = 700.0 * std::expm1(mel / 2595.0 * ln10);
    const double bin = std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(sample_rate));
    KILN_ENSURE(bin >= 0 && bin < static_cast<double>(spec_bins), "mel filter edge ", i, " falls in frequency bin ", bin,
                ", outside [0, ", spec_bins, "); upper_edge_hertz is too high for sample_rate");
    edges[static_cast<size_t>(i)] = static_cast<int64_t>(bin);
  }
  std::vector<double> w(static_cast<size_t>(spec_bins * mel_bins), 0.0);
  auto at = [&](int64_t j, int64_t i) -> double& { return w[static_cast<size_t>(j * mel_bins + i)]; };
  for (int64_t i = 0; i < mel_bins; ++i) {
    const int64_t lo = edges[static_cast<size_t>(i)], center = edges[static_cast<size_t>(i + 1)],
                  hi = edges[static_cast<size_t>(i + 2)];
    if (center == lo) {
      at(center, i) = 1.0;
    } else {
      for (int64_t j = lo; j <= center; ++j) at(j, i) = static_cast<double>(j - lo) / static_cast<double>(center - lo);
    }
    if (hi > center) {
      for (int64_t j = center; j < hi; ++j) at(j, i) = static_cast<double>(hi - j) / static_cast<double>(hi - center);
    }
  }
  dispatch_numeric(dt, [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, dt, od);
    T* po = out.data<T>();
    for (size_t k = 0; k < w.size(); ++k) po[k] = convert_element<T>(w[k]);
  });
  return Status::ok();
}

}  // namespace

void register_rnn_signal_kernels(KernelRegistry& r) {
  register_rnn_kernels(r);
  r.add(Op::DFT, dft_kernel);
  r.add(Op::STFT, stft_kernel);
  r.add(Op::HannWindow, hann_kernel);
  r.add(Op::HammingWindow, hamming_kernel);
  r.add(Op::BlackmanWindow, blackman_kernel);
  r.add(Op::MelWeightMatrix, mel_kernel);
}

}  // namespace kiln
