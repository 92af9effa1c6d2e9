// Neural-network reference kernels: registration and the shared window geometry.
// The kernels themselves live in conv.cpp, pool.cpp, norm.cpp, resize.cpp and pad.cpp.
#include <limits>

#include <algorithm>
#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/nn_common.h"
#include "backends/cpu/reference/util.h"
#include "ir/layout.h"

namespace kiln {

Status spatial_ints(const Attributes& a, const char* name, size_t nsp, int64_t def, int64_t min_value, Dims* out) {
  if (!a.has(name)) {
    out->assign(nsp, def);
    return Status::ok();
  }
  *out = a.get_ints(name);
  KILN_ENSURE(out->size() == nsp, "attribute '", name, "' has ", out->size(), " values but the input has ", nsp,
              " spatial axes");
  for (int64_t v : *out) {
    KILN_ENSURE(v >= min_value, "attribute '", name, "' has value ", v, " (must be >= ", min_value, ")");
    KILN_ENSURE(v <= (int64_t{1} << 32), "attribute '", name, "' has absurd value ", v);
  }
  return Status::ok();
}

Status spatial_pads(const Attributes& a, size_t nsp, Dims* out) {
  if (!a.has("pads")) {
    out->assign(2 * nsp, 0);
    return Status::ok();
  }
  *out = a.get_ints("pads");
  KILN_ENSURE(out->size() == 2 * nsp, "attribute 'pads' has ", out->size(), " values, expected ", 2 * nsp);
  for (int64_t v : *out) {
    KILN_ENSURE(v >= 0 && v <= (int64_t{1} << 32), "attribute 'pads' has invalid value ", v);
  }
  return Status::ok();
}

bool known_auto_pad(const std::string& auto_pad) {
  return auto_pad == "NOTSET" || auto_pad.empty() || auto_pad == "VALID" || auto_pad == "SAME_UPPER" ||
         auto_pad == "SAME_LOWER";
}

bool conv_weight_fits(const Attributes& a, const Dims& w, int64_t group) {
  if (w.size() < 3 || w.size() > 5) return false;
  for (int64_t d : w) {
    if (d < 1) return false;
  }
  if (group < 1 || w[0] % group != 0) return false;
  const size_t nsp = w.size() - 2;
  const Dims kernel(w.begin() + 2, w.end());
  if (a.has("kernel_shape") && a.get_ints("kernel_shape") != kernel) return false;
  Dims v;
  if (!spatial_ints(a, "strides", nsp, 1, 1, &v).is_ok()) return false;
  if (!spatial_ints(a, "dilations", nsp, 1, 1, &v).is_ok()) return false;
  return spatial_pads(a, nsp, &v).is_ok();
}

Status compute_window_geometry(const std::string& auto_pad, bool ceil_mode, WindowGeometry* g) {
  const size_t n = g->nsp();
  g->out.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = g->in[i], s = g->strides[i];
    const int64_t window = (g->kernel[i] - 1) * g->dilations[i] + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t out = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + window - in);
      const int64_t small = total / 2, big = total - total / 2;
      g->pads[i] = auto_pad == "SAME_UPPER" ? small : big;
      g->pads[n + i] = auto_pad == "SAME_UPPER" ? big : small;
      g->out[i] = out;
      continue;
    }
    if (auto_pad == "VALID") {
      g->pads[i] = 0;
      g->pads[n + i] = 0;
    } else if (auto_pad != "NOTSET" && !auto_pad.empty()) {
      return invalid_argument("unknown auto_pad '", auto_pad, "'");
    }
    const int64_t span = in + g->pads[i] + g->pads[n + i] - window;
    KILN_ENSURE(span >= 0, "the window (kernel ", g->kernel[i], ", dilation ", g->dilations[i],
                ") is larger than the padded input (", in, " + pads) along spatial axis ", i);
    int64_t out = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
    // In ceil mode the last window must start inside the input or the begin padding.
    if (ceil_mode && (out - 1) * s >= in + g->pads[i]) --out;
    g->out[i] = out;
  }
  return Status::ok();
}

Status run_with_layout(KernelContext& ctx, KernelFn nchw_kernel, std::initializer_list<size_t> activation_inputs) {
  KILN_ASSIGN_OR_RETURN(TensorLayout layout, read_layout(ctx.attr()));
  if (layout == TensorLayout::kNCHW) return nchw_kernel(ctx);
  for (size_t i = 1; i < ctx.output_wanted.size(); ++i) {
    KILN_ENSURE(!ctx.output_wanted[i], op_name(ctx.op), ": output ", i, " is not supported with ", kLayoutAttr,
                " = \"NHWC\"");
  }
  Attributes to_nchw, to_nhwc;
  to_nchw.set("perm", std::vector<int64_t>{0, 3, 1, 2});
  to_nhwc.set("perm", std::vector<int64_t>{0, 2, 3, 1});
  KernelContext inner;
  inner.op = ctx.op;
  inner.attrs = ctx.attrs;
  inner.inputs = ctx.inputs;
  inner.outputs.resize(1);
  inner.output_wanted = {true};
  inner.run_subgraph = ctx.run_subgraph;
  std::vector<Tensor> nchw(ctx.num_inputs());
  for (size_t i : activation_inputs) {
    const Tensor* t = ctx.input(i);
    if (!t) continue;
    KILN_ENSURE(t->rank() == 4, kLayoutAttr, " = \"NHWC\" needs 4-D activations, but input ", i, " has shape ",
                dims_str(t->dims()));
    KILN_RETURN_IF_ERROR(run_reference_op(Op::Transpose, to_nchw, {t}, &nchw[i]));
    inner.inputs[i] = &nchw[i];
  }
  KILN_RETURN_IF_ERROR(nchw_kernel(inner));
  Tensor y;
  KILN_RETURN_IF_ERROR(run_reference_op(Op::Transpose, to_nhwc, {&inner.outputs[0]}, &y));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

Status require_rank_at_least(const Tensor& t, int min_rank, const char* what) {
  KILN_ENSURE(t.rank() >= min_rank, what, " must have rank >= ", min_rank, " but has shape ", dims_str(t.dims()));
  return Status::ok();
}

Status checked_num_elements(const Dims& dims, int64_t* out) {
  int64_t n = 1;
  for (int64_t d : dims) {
    KILN_ENSURE(d >= 0, "negative dimension in shape ", dims_str(dims));
    if (d != 0 && n > (int64_t{1} << 32) / d) return invalid_argument("shape ", dims_str(dims), " is too large");
    n *= d;
  }
  *out = n;
  return Status::ok();
}

Status WindowTaps::create(const Dims& bound, const Dims& kernel, const Dims& strides, const Dims& dilations,
                          const Dims& pad_begin, const Dims& pad_end, WindowTaps* out) {
  int64_t nk = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(kernel, &nk));
  KILN_ENSURE(nk <= (int64_t{1} << 24), "kernel ", dims_str(kernel), " has too many elements");
  out->bound_ = bound;
  out->kernel_ = kernel;
  out->strides_ = strides;
  out->dilations_ = dilations;
  out->pad_begin_ = pad_begin;
  out->pad_end_ = pad_end;
  out->bound_strides_ = contiguous_strides(bound);
  out->num_taps_ = nk;
  out->offsets_.assign(static_cast<size_t>(nk), -1);
  return Status::ok();
}

int64_t WindowTaps::compute(const std::vector<int64_t>& p) {
  const size_t n = kernel_.size();
  int64_t padded = 0;
  if (num_taps_ == 0) return 0;
  std::vector<int64_t> k(n, 0);
  size_t t = 0;
  do {
    int64_t off = 0;
    bool inside = true, in_padded = true;
    for (size_t d = 0; d < n; ++d) {
      const int64_t c = p[d] * strides_[d] - pad_begin_[d] + k[d] * dilations_[d];
      if (c < 0 || c >= bound_[d]) inside = false;
      if (c < -pad_begin_[d] || c >= bound_[d] + pad_end_[d]) in_padded = false;
      off += c * bound_strides_[d];
    }
    offsets_[t++] = inside ? off : -1;
    if (in_padded) ++padded;
  } while (next_index(k, kernel_));
  return padded;
}

void register_nn_kernels(KernelRegistry& r) {
  register_conv_kernels(r);
  register_pool_kernels(r);
  register_norm_kernels(r);
  register_resize_kernels(r);
  register_pad_kernels(r);
}

}  // namespace kiln
