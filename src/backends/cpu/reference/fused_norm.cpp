// FusedResidualNorm reference kernel: Sum = X + R, Y = LayerNormalization or RMSNormalization
// of Sum over the last axis. It runs the Add and normalization reference kernels
// themselves, so Y and Sum are exactly what the unfused subgraph computes.
#include <string>

#include "backends/cpu/reference/kernel.h"

namespace kiln {

namespace {

Status fused_residual_norm_kernel(KernelContext& ctx) {
  const Attributes& a = ctx.attr();
  const Attributes none;
  const Tensor& x = *ctx.input(0);
  const Tensor& r = *ctx.input(1);
  // Same shapes only: the pass never fuses a broadcasting Add, and the kernel would
  // otherwise silently normalize a shape the graph did not describe.
  KILN_ENSURE(x.dims() == r.dims(), "FusedResidualNorm: X ", dims_str(x.dims()), " and R ", dims_str(r.dims()),
              " must have the same shape");
  KILN_ENSURE(x.rank() >= 1, "FusedResidualNorm: X must have rank >= 1");
  const int64_t axis = a.get_int("axis", -1);
  KILN_ENSURE(axis == -1 || axis == x.rank() - 1, "FusedResidualNorm: only the last axis is supported, got axis ",
              axis);
  Tensor sum;
  KILN_RETURN_IF_ERROR(run_reference_op(Op::Add, none, {&x, &r}, &sum));
  const std::string norm = a.get_string("norm", "LayerNorm");
  Attributes na;
  na.set("axis", int64_t{-1});
  na.set("epsilon", a.get_float("epsilon", 1e-5f));
  Tensor y;
  if (norm == "LayerNorm") {
    KILN_RETURN_IF_ERROR(run_reference_op(Op::LayerNormalization, na, {&sum, ctx.input(2), ctx.input(3)}, &y));
  } else if (norm == "RMSNorm") {
    KILN_ENSURE(!ctx.has_input(3), "FusedResidualNorm: RMSNorm takes no bias");
    KILN_RETURN_IF_ERROR(run_reference_op(Op::RMSNormalization, na, {&sum, ctx.input(2)}, &y));
  } else {
    return invalid_argument("FusedResidualNorm: unknown norm '", norm, "'");
  }
  ctx.set_output(0, std::move(y));
  if (ctx.output_wanted.size() > 1 && ctx.output_wanted[1]) ctx.set_output(1, std::move(sum));
  return Status::ok();
}

}  // namespace

void register_fused_norm_kernels(KernelRegistry& r) { r.add(Op::FusedResidualNorm, fused_residual_norm_kernel); }

}  // namespace kiln
