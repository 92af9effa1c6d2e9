// oneDNN pooling tactic: MaxPool (without the Indices output), AveragePool and the global
// forms, 1-D to 3-D, on the engine's plain NCHW tensors (pooling is memory-bound; a
// reorder to a blocked layout and back would cost more than it saves).
//
// Exactness limits (the rest falls back to the reference kernel):
//   - ceil_mode is an extra end padding; AveragePool with count_include_pad then divides
//     differently from ONNX at the overhanging windows, so that pair is not supported;
//   - oneDNN wants every pad smaller than the dilated window; dilated pooling is taken
//     only without padding, where no window can lie wholly in the padding.
#include <algorithm>
#include <string>

#include "backends/cpu/fast/onednn_common.h"
#include "backends/cpu/reference/nn_common.h"
#include "ir/layout.h"

namespace kiln::fast::onednn {

namespace {

using dnnl::memory;

bool global_pool(Op op) { return op == Op::GlobalAveragePool || op == Op::GlobalMaxPool; }

bool pool_supports(const LayerSpec& s) {
  if (s.op != Op::MaxPool && s.op != Op::AveragePool && !global_pool(s.op)) return false;
  if (!s.attrs || s.input_dtypes.size() != 1 || s.input_dtype(0) != DataType::kFloat32) return false;
  // NCHW only: channels-last layers (kiln_layout NHWC, ir/layout.h) run on the reference kernel.
  if (has_non_nchw_layout(*s.attrs)) return false;
  // MaxPool's optional Indices output must be absent.
  if (s.output_dtypes.empty() || s.output_dtypes[0] != DataType::kFloat32) return false;
  for (size_t i = 1; i < s.output_dtypes.size(); ++i) {
    if (s.output_dtypes[i] != DataType::kUndefined) return false;
  }
  if (global_pool(s.op)) return true;
  const Attributes& a = *s.attrs;
  if (!a.has("kernel_shape")) return false;
  const Dims kernel = a.get_ints("kernel_shape");
  const size_t nsp = kernel.size();
  if (nsp < 1 || nsp > 3) return false;
  Dims checked, strides, dilations, pads;
  if (!spatial_ints(a, "kernel_shape", nsp, 1, 1, &checked).is_ok()) return false;
  if (!spatial_ints(a, "strides", nsp, 1, 1, &strides).is_ok()) return false;
  if (!spatial_ints(a, "dilations", nsp, 1, 1, &dilations).is_ok()) return false;
  if (!spatial_pads(a, nsp, &pads).is_ok()) return false;
  const std::string auto_pad = a.get_string("auto_pad", "NOTSET");
  if (!known_auto_pad(auto_pad)) return false;
  const bool explicit_pads = auto_pad == "NOTSET" || auto_pad.empty();
  const bool ceil_mode = a.get_int("ceil_mode", 0) != 0;
  const bool count_pad = s.op == Op::AveragePool && a.get_int("count_include_pad", 0) != 0;
  if (ceil_mode && count_pad) return false;
  for (size_t i = 0; i < nsp; ++i) {
    const int64_t window = (kernel[i] - 1) * dilations[i] + 1;
    if (dilations[i] > 1) {
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" || ceil_mode) return false;
      if (explicit_pads && (pads[i] != 0 || pads[nsp + i] != 0)) return false;
    }
    // ceil_mode's extra end padding stays below the window too: ONNX drops a last window
    // that would start past the begin padding plus the input (see compute_window_geometry).
    if (explicit_pads && (pads[i] >= window || pads[nsp + i] >= window)) return false;
  }
  return true;
}

class PoolKernel final : public Kernel {
 public:
  explicit PoolKernel(const LayerSpec& s) : op_(s.op), threads_(std::max(1, s.threads)), attrs_(*s.attrs) {}

  Status prepare(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                 size_t* scratch_bytes) override {
    *scratch_bytes = 0;
    ready_ = false;
    return guarded("onednn_pool", [&] { return prepare_impl(inputs, outputs, scratch_bytes); });
  }

  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs, void* scratch) override {
    if (!ready_) return internal_error("onednn_pool: run() before a successful prepare()");
    if (empty_) return Status::ok();
    ThreadScope threads(threads_);
    KILN_RETURN_IF_ERROR(x_.bind(inputs[0]->raw()));
    KILN_RETURN_IF_ERROR(y_.bind(outputs[0]->raw()));
    return pool_.run(stream_, ScratchLayout::base(scratch), "onednn_pool");
  }

 private:
  Status prepare_impl(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                      size_t* scratch_bytes) {
    KILN_ENSURE(inputs.size() == 1 && !outputs.empty(), "onednn_pool: expected one input and an output");
    const Dims& xd = inputs[0].dims;
    KILN_ENSURE(xd.size() >= 3 && xd.size() <= 5, "onednn_pool: X must have rank 3 to 5, got ", dims_str(xd));
    const size_t nsp = xd.size() - 2;
    WindowGeometry g;
    g.in.assign(xd.begin() + 2, xd.end());
    if (global_pool(op_)) {
      g.kernel = g.in;
      g.strides.assign(nsp, 1);
      g.dilations.assign(nsp, 1);
      g.pads.assign(2 * nsp, 0);
      g.out.assign(nsp, 1);
      for (int64_t d : g.in) KILN_ENSURE(d > 0, "onednn_pool: empty spatial extent");
    } else {
      KILN_ENSURE(attrs_.get_ints("kernel_shape").size() == nsp, "onednn_pool: kernel_shape does not match X ",
                  dims_str(xd));
      KILN_RETURN_IF_ERROR(spatial_ints(attrs_, "kernel_shape", nsp, 1, 1, &g.kernel));
      KILN_RETURN_IF_ERROR(spatial_ints(attrs_, "strides", nsp, 1, 1, &g.strides));
      KILN_RETURN_IF_ERROR(spatial_ints(attrs_, "dilations", nsp, 1, 1, &g.dilations));
      KILN_RETURN_IF_ERROR(spatial_pads(attrs_, nsp, &g.pads));
      KILN_RETURN_IF_ERROR(compute_window_geometry(attrs_.get_string("auto_pad", "NOTSET"),
                                                   attrs_.get_int("ceil_mode", 0) != 0, &g));
    }
    Dims yd = {xd[0], xd[1]};
    yd.insert(yd.end(), g.out.begin(), g.out.end());
    KILN_ENSURE(outputs[0].dims == yd, "onednn_pool: output ", dims_str(outputs[0].dims), ", expected ",
                dims_str(yd));
    empty_ = num_elements(yd) == 0;
    if (empty_) {
      ready_ = true;
      return Status::ok();
    }
    memory::dims strides(nsp), kernel(nsp), dil(nsp), pad_l(nsp), pad_r(nsp);
    for (size_t i = 0; i < nsp; ++i) {
      strides[i] = g.strides[i];
      kernel[i] = g.kernel[i];
      dil[i] = g.dilations[i] - 1;
      pad_l[i] = g.pads[i];
      // ceil_mode: widen the end padding until oneDNN's floor formula gives ONNX's extent.
      const int64_t window = (g.kernel[i] - 1) * g.dilations[i] + 1;
      pad_r[i] = std::max<int64_t>(g.pads[nsp + i], (g.out[i] - 1) * g.strides[i] + window - g.in[i] - g.pads[i]);
      KILN_ENSURE(pad_l[i] < window && pad_r[i] < window, "onednn_pool: padding as large as the window");
    }
    ThreadScope threads(threads_);
    const memory::desc x_md = plain_desc(memory::dims(xd.begin(), xd.end()));
    const memory::desc y_md = plain_desc(memory::dims(yd.begin(), yd.end()));
    dnnl::algorithm alg = dnnl::algorithm::pooling_max;
    if (op_ == Op::AveragePool || op_ == Op::GlobalAveragePool) {
      alg = attrs_.get_int("count_include_pad", 0) != 0 ? dnnl::algorithm::pooling_avg_include_padding
                                                        : dnnl::algorithm::pooling_avg_exclude_padding;
    }
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::pooling_v2_forward::primitive_desc pd(
        dnnl::pooling_v2_forward::desc(dnnl::prop_kind::forward_inference, alg, x_md, y_md, strides, kernel, dil,
                                       pad_l, pad_r),
        attr, cpu_engine());
    if (!stream_) stream_ = dnnl::stream(cpu_engine());
    x_.make(x_md);
    y_.make(y_md);
    pool_.reset(dnnl::pooling_v2_forward(pd), pd);
    pool_.arg(DNNL_ARG_SRC, x_.mem);
    pool_.arg(DNNL_ARG_DST, y_.mem);
    ScratchLayout layout;
    layout.add(pool_.scratchpad_bytes());
    *scratch_bytes = layout.total();
    ready_ = true;
    return Status::ok();
  }

  Op op_;
  int threads_;
  Attributes attrs_;
  bool ready_ = false, empty_ = false;
  dnnl::stream stream_;
  Slot x_, y_;
  Exec pool_;
};

Result<std::unique_ptr<Kernel>> create_pool(const LayerSpec& s) {
  if (!pool_supports(s)) return unsupported("onednn_pool: layer not supported");
  return std::unique_ptr<Kernel>(std::make_unique<PoolKernel>(s));
}

}  // namespace

void add_pool_tactics(std::vector<Tactic>& out) {
  // Names are unique across ops (find_tactic looks them up by name alone).
  out.push_back({"onednn_maxpool", Op::MaxPool, pool_supports, create_pool});
  out.push_back({"onednn_avgpool", Op::AveragePool, pool_supports, create_pool});
  out.push_back({"onednn_globalavgpool", Op::GlobalAveragePool, pool_supports, create_pool});
  out.push_back({"onednn_globalmaxpool", Op::GlobalMaxPool, pool_supports, create_pool});
}

}  // namespace kiln::fast::onednn
