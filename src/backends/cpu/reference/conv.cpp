// Conv and ConvTranspose reference kernels (1D/2D/3D/N-D, groups, dilations, strides,
// pads and auto_pad). Accumulation happens in double.
#include <cmath>

#include <algorithm>
#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/nn_common.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

namespace {

// Checks W and B against X for both conv ops. `w_in_ch_dim` is the W axis holding input
// channels per group (1 for Conv, 0 for ConvTranspose, where it holds all input channels).
Status check_conv_inputs(const KernelContext& ctx, int64_t group, Dims* kernel) {
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  KILN_RETURN_IF_ERROR(require_rank_at_least(x, 3, "X"));
  KILN_ENSURE(w.rank() == x.rank(), "W has shape ", dims_str(w.dims()), " but X has shape ", dims_str(x.dims()),
              " (ranks must match)");
  KILN_ENSURE(w.dtype() == x.dtype(), "W has dtype ", dtype_name(w.dtype()), " but X has ", dtype_name(x.dtype()));
  KILN_ENSURE(group >= 1, "attribute 'group' must be >= 1, got ", group);
  KILN_ENSURE(x.dim(1) % group == 0, "input channels ", x.dim(1), " are not divisible by group ", group);
  kernel->assign(w.dims().begin() + 2, w.dims().end());
  for (int64_t k : *kernel) KILN_ENSURE(k >= 1, "W has an empty kernel axis: ", dims_str(w.dims()));
  if (ctx.attr().has("kernel_shape")) {
    Dims ks = ctx.attr().get_ints("kernel_shape");
    KILN_ENSURE(ks == *kernel, "attribute kernel_shape ", dims_str(ks), " does not match W's shape ",
                dims_str(w.dims()));
  }
  if (const Tensor* b = ctx.input(2)) {
    KILN_ENSURE(b->dtype() == x.dtype(), "B has dtype ", dtype_name(b->dtype()), " but X has ",
                dtype_name(x.dtype()));
  }
  return Status::ok();
}

Status conv_nchw_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  const Tensor* b = ctx.input(2);
  const Attributes& a = ctx.attr();
  const int64_t group = a.get_int("group", 1);
  WindowGeometry g;
  KILN_RETURN_IF_ERROR(check_conv_inputs(ctx, group, &g.kernel));
  const size_t nsp = static_cast<size_t>(x.rank() - 2);
  const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0), Cg = C / group;
  KILN_ENSURE(w.dim(1) == Cg, "W has shape ", dims_str(w.dims()), ": dimension 1 must be C/group = ", Cg);
  KILN_ENSURE(M % group == 0, "output channels ", M, " are not divisible by group ", group);
  if (b) KILN_ENSURE(b->size() == M, "B has shape ", dims_str(b->dims()), ", expected ", M, " elements");
  g.in.assign(x.dims().begin() + 2, x.dims().end());
  KILN_RETURN_IF_ERROR(spatial_ints(a, "strides", nsp, 1, 1, &g.strides));
  KILN_RETURN_IF_ERROR(spatial_ints(a, "dilations", nsp, 1, 1, &g.dilations));
  KILN_RETURN_IF_ERROR(spatial_pads(a, nsp, &g.pads));
  KILN_RETURN_IF_ERROR(compute_window_geometry(a.get_string("auto_pad", "NOTSET"), false, &g));

  Dims out_dims = {N, M};
  out_dims.insert(out_dims.end(), g.out.begin(), g.out.end());
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(out_dims, &total));
  WindowTaps taps;
  KILN_RETURN_IF_ERROR(WindowTaps::create(g.in, g.kernel, g.strides, g.dilations, Dims(g.pads.begin(), g.pads.begin() + static_cast<long>(nsp)),
                                          Dims(g.pads.begin() + static_cast<long>(nsp), g.pads.end()), &taps));
  const int64_t in_sp = num_elements(g.in), out_sp = num_elements(g.out), ksize = taps.num_taps();
  const int64_t Mg = M / group;

  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    Tensor& y = ctx.alloc_output(0, x.dtype(), out_dims);
    if (total == 0) return;
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    T* py = y.data<T>();
    std::vector<int64_t> pos(nsp, 0);
    int64_t o = 0;
    do {  // every output position; its window taps are shared by all images and channels
      taps.compute(pos);
      const int64_t* row = taps.offsets().data();
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t m = 0; m < M; ++m) {
          const int64_t gi = m / Mg;
          double acc = b ? static_cast<double>(to_compute(b->data<T>()[m])) : 0.0;
          for (int64_t c = 0; c < Cg; ++c) {
            const T* xc = px + (n * C + gi * Cg + c) * in_sp;
            const T* wc = pw + (m * Cg + c) * ksize;
            for (int64_t k = 0; k < ksize; ++k) {
              if (row[k] < 0) continue;
              acc += static_cast<double>(to_compute(xc[row[k]])) * static_cast<double>(to_compute(wc[k]));
            }
          }
          py[(n * M + m) * out_sp + o] = from_compute<T>(static_cast<compute_t<T>>(acc));
        }
      }
      ++o;
    } while (next_index(pos, g.out));
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

Status conv_transpose_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  const Tensor* b = ctx.input(2);
  const Attributes& a = ctx.attr();
  const int64_t group = a.get_int("group", 1);
  Dims kernel;
  KILN_RETURN_IF_ERROR(check_conv_inputs(ctx, group, &kernel));
  const size_t nsp = static_cast<size_t>(x.rank() - 2);
  const int64_t N = x.dim(0), C = x.dim(1), Cg = C / group;
  KILN_ENSURE(w.dim(0) == C, "W has shape ", dims_str(w.dims()), ": dimension 0 must be the input channels ", C);
  const int64_t Mg = w.dim(1), M = Mg * group;
  if (b) KILN_ENSURE(b->size() == M, "B has shape ", dims_str(b->dims()), ", expected ", M, " elements");
  Dims in(x.dims().begin() + 2, x.dims().end());
  Dims strides, dilations, pads, out_pad;
  KILN_RETURN_IF_ERROR(spatial_ints(a, "strides", nsp, 1, 1, &strides));
  KILN_RETURN_IF_ERROR(spatial_ints(a, "dilations", nsp, 1, 1, &dilations));
  KILN_RETURN_IF_ERROR(spatial_ints(a, "output_padding", nsp, 0, 0, &out_pad));
  KILN_RETURN_IF_ERROR(spatial_pads(a, nsp, &pads));
  const std::string auto_pad = a.get_string("auto_pad", "NOTSET");
  KILN_ENSURE(auto_pad == "NOTSET" || auto_pad == "VALID" || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER",
              "unknown auto_pad '", auto_pad, "'");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  Dims out_shape;
  if (a.has("output_shape")) {
    out_shape = a.get_ints("output_shape");
    if (out_shape.size() == nsp + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    KILN_ENSURE(out_shape.size() == nsp, "attribute 'output_shape' has ", out_shape.size(), " values, expected ", nsp);
    for (int64_t v : out_shape) KILN_ENSURE(v >= 0, "attribute 'output_shape' has negative value ", v);
  }
  if (auto_pad == "VALID") pads.assign(2 * nsp, 0);
  Dims out(nsp);
  for (size_t i = 0; i < nsp; ++i) {
    const int64_t full = strides[i] * (in[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1;
    if (same || (!out_shape.empty() && !a.has("pads"))) {
      // pads are derived from the output shape (given, or input * stride for SAME).
      out[i] = !out_shape.empty() ? out_shape[i] : in[i] * strides[i];
      int64_t total = full - out[i];
      if (!same) total = std::max<int64_t>(total, 0);
      const int64_t half = floor_div(total, 2);
      pads[i] = auto_pad == "SAME_UPPER" ? half : total - half;
      pads[nsp + i] = total - pads[i];
    } else {
      out[i] = !out_shape.empty() ? out_shape[i] : full - pads[i] - pads[nsp + i];
    }
    KILN_ENSURE(out[i] >= 0, "computed output extent ", out[i], " is negative along spatial axis ", i);
  }
  Dims out_dims = {N, M};
  out_dims.insert(out_dims.end(), out.begin(), out.end());
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(out_dims, &total));
  WindowTaps taps;
  KILN_RETURN_IF_ERROR(WindowTaps::create(out, kernel, strides, dilations, Dims(pads.begin(), pads.begin() + static_cast<long>(nsp)),
                                          Dims(pads.begin() + static_cast<long>(nsp), pads.end()), &taps));
  const int64_t in_sp = num_elements(in), out_sp = num_elements(out), ksize = taps.num_taps();

  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    std::vector<double> acc(static_cast<size_t>(total), 0.0);
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    std::vector<int64_t> pos(nsp, 0);
    int64_t i = 0;
    if (in_sp > 0 && out_sp > 0) {
      do {  // every input position scatters through its window into the output
        taps.compute(pos);
        const int64_t* row = taps.offsets().data();
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t c = 0; c < C; ++c) {
            const int64_t gi = c / Cg;
            const double xv = static_cast<double>(to_compute(px[(n * C + c) * in_sp + i]));
            for (int64_t m = 0; m < Mg; ++m) {
              double* yc = acc.data() + (n * M + gi * Mg + m) * out_sp;
              const T* wc = pw + (c * Mg + m) * ksize;
              for (int64_t k = 0; k < ksize; ++k) {
                if (row[k] >= 0) yc[row[k]] += xv * static_cast<double>(to_compute(wc[k]));
              }
            }
          }
        }
        ++i;
      } while (next_index(pos, in));
    }
    Tensor& y = ctx.alloc_output(0, x.dtype(), out_dims);
    T* py = y.data<T>();
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t m = 0; m < M; ++m) {
        const double bias = b ? static_cast<double>(to_compute(b->data<T>()[m])) : 0.0;
        for (int64_t o = 0; o < out_sp; ++o) {
          const size_t idx = static_cast<size_t>((n * M + m) * out_sp + o);
          py[idx] = from_compute<T>(static_cast<compute_t<T>>(acc[idx] + bias));
        }
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// Conv by kiln_layout: NHWC transposes X to NCHW and Y back (run_with_layout).
Status conv_kernel(KernelContext& ctx) { return run_with_layout(ctx, conv_nchw_kernel, {0}); }

}  // namespace

Status conv_reference(KernelContext& ctx) { return conv_nchw_kernel(ctx); }

void register_conv_kernels(KernelRegistry& r) {
  r.add(Op::Conv, conv_kernel);
  r.add(Op::ConvTranspose, conv_transpose_kernel);
}

}  // namespace kiln
