#include "backends/cpu/reference/kernel.h"

namespace kiln {

const KernelRegistry& reference_kernels() {
  static const KernelRegistry* reg = [] {
    auto* r = new KernelRegistry();
    register_elementwise_kernels(*r);
    register_nn_kernels(*r);
    register_linalg_kernels(*r);
    register_reduction_kernels(*r);
    register_shape_kernels(*r);
    register_control_flow_kernels(*r);
    register_sequence_kernels(*r);
    register_rnn_signal_kernels(*r);
    register_string_kernels(*r);
    register_transformer_kernels(*r);
    register_vision_kernels(*r);
    register_quant_kernels(*r);
    register_random_kernels(*r);
    register_fused_conv_kernels(*r);
    register_fused_gemm_kernels(*r);
    register_fused_elementwise_kernels(*r);
    register_fused_norm_kernels(*r);
    return r;
  }();
  return *reg;
}

Status run_reference_op(Op op, const Attributes& attrs, std::vector<const Tensor*> inputs, Tensor* out) {
  KernelFn fn = reference_kernels().find(op);
  KILN_ENSURE(fn != nullptr, "no reference kernel for ", op_name(op));
  KernelContext kc;
  kc.op = op;
  kc.attrs = &attrs;
  kc.inputs = std::move(inputs);
  kc.outputs.resize(1);
  kc.output_wanted = {true};
  KILN_RETURN_IF_ERROR(fn(kc));
  *out = std::move(kc.outputs[0]);
  return Status::ok();
}

Status unsupported_dtype(Op op, DataType dt, const char* what) {
  return unsupported(op_name(op), " does not support ", what, " dtype ", dtype_name(dt));
}

}  // namespace kiln
