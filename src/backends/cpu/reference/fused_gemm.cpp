// FusedGemm reference kernel: Y = activation(MatMul(A, B) + bias). It runs the MatMul,
// Add and activation reference kernels themselves, so the result is exactly what the
// unfused subgraph computes.
#include <string>

#include "backends/cpu/reference/kernel.h"

namespace kiln {

namespace {

Status fused_gemm_kernel(KernelContext& ctx) {
  const Attributes& a = ctx.attr();
  const Attributes none;
  Tensor y;
  KILN_RETURN_IF_ERROR(run_reference_op(Op::MatMul, none, {ctx.input(0), ctx.input(1)}, &y));
  Tensor biased;
  KILN_RETURN_IF_ERROR(run_reference_op(Op::Add, none, {&y, ctx.input(2)}, &biased));
  const std::string act = a.get_string("activation", "None");
  if (act == "None") {
    ctx.set_output(0, std::move(biased));
    return Status::ok();
  }
  Tensor out;
  if (act == "Relu") {
    KILN_RETURN_IF_ERROR(run_reference_op(Op::Relu, none, {&biased}, &out));
  } else if (act == "Gelu") {
    Attributes ga;
    ga.set("approximate", a.get_string("approximate", "none"));
    KILN_RETURN_IF_ERROR(run_reference_op(Op::Gelu, ga, {&biased}, &out));
  } else {
    return invalid_argument("FusedGemm: unknown activation '", act, "'");
  }
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

}  // namespace

void register_fused_gemm_kernels(KernelRegistry& r) { r.add(Op::FusedGemm, fused_gemm_kernel); }

}  // namespace kiln
