// oneDNN convolution tactics for Conv and FusedConv (1-D/2-D/3-D, groups incl. depthwise,
// strides, dilations, pads, auto_pad). The bias becomes the convolution bias, FusedConv's
// residual Z a sum post-op and its activation eltwise post-ops, so one primitive computes
// activation(conv(X, W) + B + Z). Weights are reordered once per layout (at prepare).
//
// Two tactics per op (names are unique across ops: find_tactic looks them up by name alone)
// differ in the activation layout the primitive works in (the engine hands plain NCHW
// tensors to every layer):
//   onednn_conv, onednn_fusedconv            let oneDNN pick (format_tag::any: usually nhwc
//                                            or nChw16c for the AVX-512 brgemm kernels) and
//                                            reorder X, Z and Y at the layer's edges
//                                            through scratch memory;
//   onednn_conv_nchw, onednn_fusedconv_nchw  force plain NCHW in and out (oneDNN then uses
//                                            its gemm-based convolution), no reorders.
// Neither wins everywhere (3x3 convs favour the first, many 1x1 convs the second on a
// 2-core AVX-512 machine), so the builder times both.
#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cpu/fast/onednn_common.h"
#include "backends/cpu/reference/nn_common.h"
#include "ir/layout.h"

namespace kiln::fast::onednn {

namespace {

using dnnl::memory;

bool conv_supports(const LayerSpec& s) {
  if (s.op != Op::Conv && s.op != Op::FusedConv) return false;
  if (!s.attrs) return false;
  const Attributes& a = *s.attrs;
  // The engine hands these kernels plain NCHW tensors; channels-last layers (kiln_layout
  // NHWC, ir/layout.h) run on the reference kernel.
  if (has_non_nchw_layout(a)) return false;
  if (s.input_dtype(0) != DataType::kFloat32 || s.input_dtype(1) != DataType::kFloat32) return false;
  if (s.output_dtypes.size() != 1 || s.output_dtypes[0] != DataType::kFloat32) return false;
  const DataType b = s.input_dtype(2), z = s.input_dtype(3);
  if (b != DataType::kUndefined && b != DataType::kFloat32) return false;
  if (z != DataType::kUndefined && (s.op != Op::FusedConv || z != DataType::kFloat32)) return false;
  if (s.input_dtypes.size() > 4) return false;
  const Tensor* w = s.constant(1);
  if (!w || w->dtype() != DataType::kFloat32 || !conv_weight_fits(a, w->dims(), a.get_int("group", 1))) return false;
  if (!known_auto_pad(a.get_string("auto_pad", "NOTSET"))) return false;
  std::vector<Eltwise> post;
  return s.op != Op::FusedConv || activation_post_ops(a, &post);
}

class ConvKernel final : public Kernel {
 public:
  ConvKernel(const LayerSpec& s, bool any_layout)
      : any_layout_(any_layout),
        threads_(std::max(1, s.threads)),
        attrs_(*s.attrs),
        weights_(*s.constant(1)) {
    fused_ = s.op == Op::FusedConv;
    group_ = attrs_.get_int("group", 1);
    has_bias_ = s.input_dtype(2) != DataType::kUndefined;
    has_z_ = s.input_dtype(3) != DataType::kUndefined;
    if (s.op == Op::FusedConv) activation_post_ops(attrs_, &post_);
  }

  Status prepare(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                 size_t* scratch_bytes) override {
    *scratch_bytes = 0;
    ready_ = false;
    return guarded(name(), [&] { return prepare_impl(inputs, outputs, scratch_bytes); });
  }

  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs, void* scratch) override {
    if (!ready_) return internal_error(name(), ": run() before a successful prepare()");
    if (empty_) return Status::ok();
    ThreadScope threads(threads_);
    char* base = ScratchLayout::base(scratch);
    const Tensor* x = inputs[0];
    const Tensor* z = has_z_ ? input_at(inputs, 3) : nullptr;
    Tensor* y = outputs[0];
    KILN_RETURN_IF_ERROR(x_.bind(x->raw()));
    KILN_RETURN_IF_ERROR(y_.bind(y->raw()));
    if (has_bias_) KILN_RETURN_IF_ERROR(bias_.bind(input_at(inputs, 2)->raw()));
    if (!x_reorder_.empty()) KILN_RETURN_IF_ERROR(xb_.bind(base + xb_off_));
    if (!y_reorder_.empty()) KILN_RETURN_IF_ERROR(yb_.bind(base + yb_off_));
    // The sum post-op adds what dst holds: put Z there first, reordered into the blocked
    // dst, or copied into Y (nothing to do when Z is Y, in place).
    if (z && !z_copy_.empty()) {
      KILN_RETURN_IF_ERROR(z_.bind(z->raw()));
      KILN_RETURN_IF_ERROR(z_copy_.run(stream_, base, name()));
    } else if (z && z->raw() != y->raw()) {
      parallel_copy(y->data<float>(), z->data<float>(), y->size());
    }
    if (!x_reorder_.empty()) KILN_RETURN_IF_ERROR(x_reorder_.run(stream_, base, name()));
    KILN_RETURN_IF_ERROR(conv_.run(stream_, base, name()));
    if (!y_reorder_.empty()) KILN_RETURN_IF_ERROR(y_reorder_.run(stream_, base, name()));
    return Status::ok();
  }

 private:
  // A plain copy split over the kernel's threads (a reorder primitive would do the same
  // with more per-call overhead).
  void parallel_copy(float* dst, const float* src, int64_t n) const {
    constexpr int64_t kChunk = int64_t{1} << 15;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for num_threads(threads_) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kChunk;
      std::memcpy(dst + begin, src + begin, static_cast<size_t>(std::min(kChunk, n - begin)) * sizeof(float));
    }
  }

  const char* name() const {
    if (fused_) return any_layout_ ? "onednn_fusedconv" : "onednn_fusedconv_nchw";
    return any_layout_ ? "onednn_conv" : "onednn_conv_nchw";
  }

  Status prepare_impl(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                      size_t* scratch_bytes) {
    KILN_ENSURE(!inputs.empty() && outputs.size() == 1, name(), ": expected X and one output");
    const Dims& xd = inputs[0].dims;
    const Dims& wd = weights_.dims();
    KILN_ENSURE(xd.size() == wd.size(), name(), ": X ", dims_str(xd), " and W ", dims_str(wd), " ranks differ");
    const size_t nsp = xd.size() - 2;
    const int64_t N = xd[0], C = xd[1], M = wd[0];
    KILN_ENSURE(C == wd[1] * group_, name(), ": X has ", C, " channels, W expects ", wd[1] * group_);
    if (has_bias_) {
      KILN_ENSURE(inputs.size() > 2 && num_elements(inputs[2].dims) == M, name(), ": B must have ", M, " elements");
    }
    WindowGeometry g;
    g.in.assign(xd.begin() + 2, xd.end());
    g.kernel.assign(wd.begin() + 2, wd.end());
    KILN_RETURN_IF_ERROR(spatial_ints(attrs_, "strides", nsp, 1, 1, &g.strides));
    KILN_RETURN_IF_ERROR(spatial_ints(attrs_, "dilations", nsp, 1, 1, &g.dilations));
    KILN_RETURN_IF_ERROR(spatial_pads(attrs_, nsp, &g.pads));
    KILN_RETURN_IF_ERROR(compute_window_geometry(attrs_.get_string("auto_pad", "NOTSET"), false, &g));
    Dims yd = {N, M};
    yd.insert(yd.end(), g.out.begin(), g.out.end());
    KILN_ENSURE(outputs[0].dims == yd, name(), ": output ", dims_str(outputs[0].dims), ", expected ", dims_str(yd));
    if (has_z_) {
      KILN_ENSURE(inputs.size() > 3 && inputs[3].dims == yd, name(), ": residual Z must have the output's shape ",
                  dims_str(yd));
    }
    empty_ = num_elements(yd) == 0;
    if (empty_) {
      ready_ = true;
      return Status::ok();
    }

    ThreadScope threads(threads_);
    const memory::dims x_dims(xd.begin(), xd.end()), y_dims(yd.begin(), yd.end());
    memory::dims w_dims(wd.begin(), wd.end());
    if (group_ > 1) {  // oneDNN's grouped weights: [G, M/G, C/G, k...], the same bytes as ONNX's [M, C/G, k...]
      w_dims[0] = M / group_;
      w_dims.insert(w_dims.begin(), group_);
    }
    memory::dims strides(g.strides.begin(), g.strides.end()), dil(nsp), pad_l(nsp), pad_r(nsp);
    for (size_t i = 0; i < nsp; ++i) {
      dil[i] = g.dilations[i] - 1;  // oneDNN counts the holes
      pad_l[i] = g.pads[i];
      pad_r[i] = g.pads[nsp + i];
    }
    const memory::desc x_plain = plain_desc(x_dims), y_plain = plain_desc(y_dims);
    const memory::desc any_x(x_dims, memory::data_type::f32, memory::format_tag::any);
    const memory::desc any_y(y_dims, memory::data_type::f32, memory::format_tag::any);
    const memory::desc any_w(w_dims, memory::data_type::f32, memory::format_tag::any);
    const memory::desc b_md({M}, memory::data_type::f32, memory::format_tag::x);
    const memory::desc& x_md = any_layout_ ? any_x : x_plain;
    const memory::desc& y_md = any_layout_ ? any_y : y_plain;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_post_ops(make_post_ops(post_, has_z_));
    const auto prop = dnnl::prop_kind::forward_inference;
    const auto alg = dnnl::algorithm::convolution_direct;
    dnnl::convolution_forward::primitive_desc pd =
        has_bias_ ? dnnl::convolution_forward::primitive_desc(
                        dnnl::convolution_forward::desc(prop, alg, x_md, any_w, b_md, y_md, strides, dil, pad_l, pad_r),
                        attr, cpu_engine())
                  : dnnl::convolution_forward::primitive_desc(
                        dnnl::convolution_forward::desc(prop, alg, x_md, any_w, y_md, strides, dil, pad_l, pad_r), attr,
                        cpu_engine());
    if (!stream_) stream_ = dnnl::stream(cpu_engine());

    // Weights: reordered into the primitive's layout once per layout.
    if (!w_packed_ || w_packed_.get_desc() != pd.weights_desc()) {
      memory w_user(plain_desc(w_dims), cpu_engine(), const_cast<void*>(weights_.raw()));
      memory packed(pd.weights_desc(), cpu_engine());
      dnnl::reorder(w_user, packed).execute(stream_, w_user, packed);
      stream_.wait();
      w_packed_ = packed;
    }

    // Activations: the engine's plain tensors, and blocked copies in scratch where the
    // primitive wants another layout.
    x_.make(x_plain);
    y_.make(y_plain);
    const bool x_blocked = pd.src_desc() != x_plain, y_blocked = pd.dst_desc() != y_plain;
    size_t pad_bytes = 0;
    x_reorder_ = Exec();
    y_reorder_ = Exec();
    z_copy_ = Exec();
    if (x_blocked) {
      xb_.make(pd.src_desc());
      auto rpd = reorder_pd(x_plain, pd.src_desc());
      x_reorder_.reset(dnnl::reorder(rpd), rpd);
      x_reorder_.arg(DNNL_ARG_FROM, x_.mem);
      x_reorder_.arg(DNNL_ARG_TO, xb_.mem);
      pad_bytes = std::max(pad_bytes, x_reorder_.scratchpad_bytes());
    }
    if (y_blocked) {
      yb_.make(pd.dst_desc());
      auto rpd = reorder_pd(pd.dst_desc(), y_plain);
      y_reorder_.reset(dnnl::reorder(rpd), rpd);
      y_reorder_.arg(DNNL_ARG_FROM, yb_.mem);
      y_reorder_.arg(DNNL_ARG_TO, y_.mem);
      pad_bytes = std::max(pad_bytes, y_reorder_.scratchpad_bytes());
    }
    const memory& dst = y_blocked ? yb_.mem : y_.mem;
    if (has_z_ && y_blocked) {  // Z reordered into the blocked dst for the sum post-op
      z_.make(y_plain);
      auto rpd = reorder_pd(y_plain, pd.dst_desc());
      z_copy_.reset(dnnl::reorder(rpd), rpd);
      z_copy_.arg(DNNL_ARG_FROM, z_.mem);
      z_copy_.arg(DNNL_ARG_TO, dst);
      pad_bytes = std::max(pad_bytes, z_copy_.scratchpad_bytes());
    }
    conv_.reset(dnnl::convolution_forward(pd), pd);
    conv_.arg(DNNL_ARG_SRC, x_blocked ? xb_.mem : x_.mem);
    conv_.arg(DNNL_ARG_WEIGHTS, w_packed_);
    if (has_bias_) {
      bias_.make(b_md);
      conv_.arg(DNNL_ARG_BIAS, bias_.mem);
    }
    conv_.arg(DNNL_ARG_DST, dst);
    pad_bytes = std::max(pad_bytes, conv_.scratchpad_bytes());
    // Scratch: the primitives run one after another, so they share one scratchpad region at
    // offset 0 (Exec::run gets the base); the blocked copies of X and Y follow it.
    ScratchLayout layout;
    layout.add(pad_bytes);
    if (x_blocked) xb_off_ = layout.add(pd.src_desc().get_size());
    if (y_blocked) yb_off_ = layout.add(pd.dst_desc().get_size());
    *scratch_bytes = layout.total();
    ready_ = true;
    return Status::ok();
  }

  bool any_layout_;
  int threads_;
  Attributes attrs_;
  Tensor weights_;  // shares the constant's storage
  int64_t group_ = 1;
  bool fused_ = false, has_bias_ = false, has_z_ = false;
  std::vector<Eltwise> post_;

  bool ready_ = false, empty_ = false;
  dnnl::stream stream_;
  memory w_packed_;
  Slot x_, y_, z_, bias_, xb_, yb_;
  size_t xb_off_ = 0, yb_off_ = 0;
  Exec x_reorder_, y_reorder_, z_copy_, conv_;
};

template <bool kAnyLayout>
Result<std::unique_ptr<Kernel>> create_conv(const LayerSpec& s) {
  if (!conv_supports(s)) return unsupported("onednn_conv: layer not supported");
  return std::unique_ptr<Kernel>(std::make_unique<ConvKernel>(s, kAnyLayout));
}

}  // namespace

void add_conv_tactics(std::vector<Tactic>& out) {
  out.push_back({"onednn_conv", Op::Conv, conv_supports, create_conv<true>});
  out.push_back({"onednn_conv_nchw", Op::Conv, conv_supports, create_conv<false>});
  out.push_back({"onednn_fusedconv", Op::FusedConv, conv_supports, create_conv<true>});
  out.push_back({"onednn_fusedconv_nchw", Op::FusedConv, conv_supports, create_conv<false>});
}

}  // namespace kiln::fast::onednn
