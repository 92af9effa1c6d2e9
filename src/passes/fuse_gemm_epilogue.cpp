// Fuses MatMul(A, W) + bias [-> Relu | Gelu] into FusedGemm(A, W, bias) when W is a 2-D
// constant [K, N] and bias a constant [N] of the same float dtype. The FusedGemm kernel
// runs the MatMul, Add and activation kernels themselves, so results are bit-identical.
#include "passes/pass.h"
#include "passes/pattern_util.h"

namespace kiln {

namespace {

using pattern::single_use;


}  // namespace

Status fuse_gemm_epilogue(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* mm : g.nodes()) {
    if (mm->op() != Op::MatMul || mm->num_inputs() != 2 || mm->num_outputs() != 1) continue;
    Value* a = mm->input(0);
    Value* w = mm->input(1);
    Value* y = mm->output(0);
    if (!a || !w || !w->is_constant() || !single_use(g, y)) continue;
    const Tensor& wt = w->constant();
    if (wt.rank() != 2 || !is_supported_dtype(wt.dtype()) || !is_float(wt.dtype()) || a->dtype != wt.dtype()) continue;
    Node* add = y->uses()[0].node;
    if (add->op() != Op::Add || add->num_inputs() != 2 || add->num_outputs() != 1 || !add->output(0)) continue;
    Value* bias = add->input(0) == y ? add->input(1) : add->input(0);
    if (!bias || !bias->is_constant()) continue;
    const Tensor& bt = bias->constant();
    if (bt.dtype() != wt.dtype() || bt.rank() != 1 || bt.dim(0) != wt.dim(1)) continue;
    Value* out = add->output(0);
    std::string act = "None";
    std::string approx;
    if (single_use(g, out)) {
      Node* u = out->uses()[0].node;
      if (u->num_outputs() == 1 && u->output(0) && u->op() == Op::Relu) {
        act = "Relu";
        out = u->output(0);
      } else if (u->num_outputs() == 1 && u->output(0) && u->op() == Op::Gelu) {
        approx = u->attrs.get_string("approximate", "none");
        if (approx == "none" || approx == "tanh") {
          act = "Gelu";
          out = u->output(0);
        }
      }
    }
    // The fused output takes over the last matched output's name (graph outputs keep
    // their names); the unfused nodes are left dead for eliminate_dead_code.
    const std::string name = out->name();
    g.rename_value(out, g.unique_name(name + "_unfused"));
    Node* f = g.add_node(Op::FusedGemm, g.unique_name(mm->name().empty() ? std::string("fused_gemm") : mm->name() + "_fused"),
                         {a, w, bias}, {name});
    f->onnx_op_type = "FusedGemm";
    f->attrs.set("activation", act);
    if (act == "Gelu") f->attrs.set("approximate", approx);
    f->output(0)->dtype = out->dtype;
    f->output(0)->shape = out->shape;
    g.replace_all_uses_with(out, f->output(0));
    ctx.rewrote(cat("fused MatMul + bias", act == "None" ? "" : " + " + act, " into ", f->describe()));
    changed = true;
  }
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln
