// FusedConv reference kernel: the Conv reference kernel, then the residual Add and the
// activation through the very kernels the unfused ops use, so the result is exactly what
// the unfused subgraph computes.
#include <optional>
#include <string>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/nn_common.h"

namespace kiln {

namespace {

// A rank-0 tensor of dtype dt holding v (Clip bounds must match the data's dtype; writing
// a float into a float16/bfloat16 tensor's 2 bytes gave garbage bounds).
Tensor scalar_like(DataType dt, double v) {
  Tensor t(dt, {});
  dispatch_all(dt, [&]<typename T>() { t.data<T>()[0] = convert_element<T>(v); });
  return t;
}

Status fused_conv_nchw(KernelContext& ctx) {
  const Attributes& a = ctx.attr();
  KernelContext conv;  // the Conv reference kernel itself (it ignores the extra attributes)
  conv.op = Op::Conv;
  conv.attrs = &a;
  conv.inputs = {ctx.input(0), ctx.input(1), ctx.input(2)};
  conv.outputs.resize(1);
  conv.output_wanted = {true};
  KILN_RETURN_IF_ERROR(conv_reference(conv));
  Tensor y = std::move(conv.outputs[0]);
  if (const Tensor* z = ctx.input(3)) {
    Tensor sum;
    KILN_RETURN_IF_ERROR(run_reference_op(Op::Add, Attributes(), {&y, z}, &sum));
    y = std::move(sum);
  }
  const std::string act = a.get_string("activation", "None");
  Attributes aa;
  Tensor out;
  if (act == "None") {
    out = std::move(y);
  } else if (act == "Relu") {
    KILN_RETURN_IF_ERROR(run_reference_op(Op::Relu, aa, {&y}, &out));
  } else if (act == "Sigmoid") {
    KILN_RETURN_IF_ERROR(run_reference_op(Op::Sigmoid, aa, {&y}, &out));
  } else if (act == "Tanh") {
    KILN_RETURN_IF_ERROR(run_reference_op(Op::Tanh, aa, {&y}, &out));
  } else if (act == "HardSwish") {
    KILN_RETURN_IF_ERROR(run_reference_op(Op::HardSwish, aa, {&y}, &out));
  } else if (act == "LeakyRelu") {
    aa.set("alpha", a.get_float("alpha", 0.01f));
    KILN_RETURN_IF_ERROR(run_reference_op(Op::LeakyRelu, aa, {&y}, &out));
  } else if (act == "HardSigmoid") {
    aa.set("alpha", a.get_float("alpha", 0.2f));
    aa.set("beta", a.get_float("beta", 0.5f));
    KILN_RETURN_IF_ERROR(run_reference_op(Op::HardSigmoid, aa, {&y}, &out));
  } else if (act == "Gelu") {
    aa.set("approximate", a.get_string("approximate", "none"));
    KILN_RETURN_IF_ERROR(run_reference_op(Op::Gelu, aa, {&y}, &out));
  } else if (act == "Clip") {
    Tensor lo, hi;
    if (a.has("min")) lo = scalar_like(y.dtype(), a.get_float("min", 0.0f));
    if (a.has("max")) hi = scalar_like(y.dtype(), a.get_float("max", 0.0f));
    KILN_RETURN_IF_ERROR(run_reference_op(Op::Clip, aa, {&y, a.has("min") ? &lo : nullptr, a.has("max") ? &hi : nullptr}, &out));
  } else if (act == "SiLU") {
    Tensor s;
    KILN_RETURN_IF_ERROR(run_reference_op(Op::Sigmoid, aa, {&y}, &s));
    KILN_RETURN_IF_ERROR(run_reference_op(Op::Mul, aa, {&y, &s}, &out));
  } else if (act == "Swish") {  // the op fuse_silu_pattern makes, when the op table has it
    std::optional<Op> swish = op_from_name("Swish");
    KILN_ENSURE(swish.has_value(), "FusedConv: no Swish op");
    aa.set("alpha", a.get_float("alpha", 1.0f));
    KILN_RETURN_IF_ERROR(run_reference_op(*swish, aa, {&y}, &out));
  } else {
    return invalid_argument("FusedConv: unknown activation '", act, "'");
  }
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

// kiln_layout NHWC: X, Z and Y channels-last (run_with_layout transposes X and Z to NCHW
// and Y back; the Conv kernel inside always runs NCHW).
Status fused_conv_kernel(KernelContext& ctx) { return run_with_layout(ctx, fused_conv_nchw, {0, 3}); }

}  // namespace

void register_fused_conv_kernels(KernelRegistry& r) { r.add(Op::FusedConv, fused_conv_kernel); }

}  // namespace kiln
