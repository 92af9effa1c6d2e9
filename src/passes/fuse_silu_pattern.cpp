// Fuses x * Sigmoid(alpha * x) into Swish(alpha) (alpha = 1 for the plain SiLU form
// x * Sigmoid(x)) and x * HardSigmoid(x; alpha=1/6, beta=0.5) into HardSwish.
#include <cmath>

#include "passes/pass.h"
#include "passes/pattern_util.h"

namespace kiln {

namespace {

using pattern::scalar_value;
using pattern::single_use;


bool near(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::fabs(b); }


// Computes `op`(x) in place of `old_out`: the new output takes over old_out's name (graph
// outputs keep their names); the unfused nodes are left dead for eliminate_dead_code.
Node* replace_with(Graph& g, Value* old_out, Op op, const char* onnx_name, Value* x) {
  Node* old = old_out->producer();
  const std::string name = old_out->name();
  g.rename_value(old_out, g.unique_name(name + "_unfused"));
  Node* n = g.add_node(op, g.unique_name(old->name().empty() ? std::string(onnx_name) : old->name() + "_fused"),
                       {x}, {name});
  n->onnx_op_type = onnx_name;
  n->output(0)->dtype = old_out->dtype;
  n->output(0)->shape = old_out->shape;
  g.replace_all_uses_with(old_out, n->output(0));
  return n;
}

}  // namespace

Status fuse_silu_pattern(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (n->op() != Op::Mul || n->num_inputs() != 2 || n->num_outputs() != 1 || !n->output(0)) continue;
    if (n->output(0)->uses().empty() && !g.is_graph_output(n->output(0))) continue;  // dead
    for (int side = 0; side < 2; ++side) {
      Value* x = n->input(static_cast<size_t>(side));
      Value* s = n->input(static_cast<size_t>(1 - side));
      if (!x || !s || !is_supported_dtype(x->dtype) || !is_float(x->dtype) || !single_use(g, s)) continue;
      Node* act = s->producer();
      if (!act || act->num_outputs() != 1) continue;
      if (act->op() == Op::Sigmoid) {
        Value* in = act->input(0);
        double alpha = 1.0;
        if (in != x) {
          // Sigmoid(alpha * x) with a scalar constant alpha.
          Node* m = in ? in->producer() : nullptr;
          if (!m || m->op() != Op::Mul || !single_use(g, in)) continue;
          int xi = m->input(0) == x ? 0 : (m->input(1) == x ? 1 : -1);
          if (xi < 0 || !scalar_value(m->input(static_cast<size_t>(1 - xi)), x, &alpha)) continue;
        }
        Node* f = replace_with(g, n->output(0), Op::Swish, "Swish", x);
        f->attrs.set("alpha", static_cast<float>(alpha));
        ctx.rewrote(cat("fused x*Sigmoid(", alpha == 1.0 ? "" : "alpha*", "x) into Swish at ", f->describe()));
        changed = true;
        break;
      }
      if (act->op() == Op::HardSigmoid && act->input(0) == x) {
        const double alpha = act->attrs.get_float("alpha", 0.2f);
        const double beta = act->attrs.get_float("beta", 0.5f);
        if (!near(alpha, 1.0 / 6.0, 1e-6) || beta != 0.5) continue;
        Node* f = replace_with(g, n->output(0), Op::HardSwish, "HardSwish", x);
        ctx.rewrote(cat("fused x*HardSigmoid(x) into HardSwish at ", f->describe()));
        changed = true;
        break;
      }
    }
  }
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln
