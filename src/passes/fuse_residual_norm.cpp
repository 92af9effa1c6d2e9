// Fuses the residual Add in front of a normalization:
//   s = Add(x, r); y = LayerNormalization(s, scale[, bias]) or RMSNormalization(s, scale)
// over the last axis into FusedResidualNorm(x, r, scale[, bias]) -> y[, s]. Pre-norm
// blocks (GPT-2, LLaMA) keep reading the residual stream s after the norm: then the
// fused node also outputs s (Sum) and those users read it. The Add must not broadcast
// (x and r have the same shape), and the norm's Mean/InvStdDev outputs must be unused.
#include <string>
#include <vector>

#include "passes/pass.h"
#include "passes/pattern_util.h"

namespace kiln {

namespace {

bool same_shape(const Value* a, const Value* b) {
  if (!a->shape || !b->shape || a->shape->size() != b->shape->size() || a->shape->empty()) return false;
  for (size_t i = 0; i < a->shape->size(); ++i) {
    const Dim& da = (*a->shape)[i];
    const Dim& db = (*b->shape)[i];
    if (da.known() != db.known()) return false;
    if (da.known() ? da.value != db.value : (da.symbol.empty() || da.symbol != db.symbol)) return false;
  }
  return true;
}

bool over_last_axis(const Node* n, const Value* x) {
  const int64_t axis = n->attrs.get_int("axis", -1);
  return axis == -1 || (x->shape && axis == static_cast<int64_t>(x->shape->size()) - 1);
}

// The normalization node `n` is one FusedResidualNorm can express; sets *norm.
bool fusable_norm(const Graph& g, const Node* n, std::string* norm) {
  if (n->op() == Op::LayerNormalization) {
    *norm = "LayerNorm";
  } else if (n->op() == Op::RMSNormalization) {
    *norm = "RMSNorm";
  } else {
    return false;
  }
  if (!n->output(0) || !n->input(0) || !n->input(1) || n->attrs.get_int("stash_type", 1) != 1) return false;
  for (size_t i = 1; i < n->num_outputs(); ++i) {  // Mean, InvStdDev
    const Value* o = n->output(i);
    if (o && (!o->uses().empty() || g.is_graph_output(o))) return false;
  }
  return true;
}

}  // namespace

Status fuse_residual_norm(Graph& g, PassContext& ctx) {
  // Whether the sum has users besides the norm decides the Sum output, so the dead
  // chains earlier fusions of this round left behind must not count as users.
  PassReport dce_report;
  PassContext dce_ctx(dce_report);
  KILN_RETURN_IF_ERROR(eliminate_dead_code(g, dce_ctx));
  bool changed = false;
  std::vector<Node*> matched;  // norm, then its Add
  for (Node* n : g.nodes()) {
    std::string norm;
    if (!fusable_norm(g, n, &norm)) continue;
    Value* s = n->input(0);
    Value* y = n->output(0);
    if (y->uses().empty() && !g.is_graph_output(y)) continue;  // dead
    Node* add = s->producer();
    if (!add || add->op() != Op::Add || add->num_inputs() != 2 || add->num_outputs() != 1) continue;
    Value* a = add->input(0);
    Value* b = add->input(1);
    // Same shapes on both sides: the Add does not broadcast, and its shape is a's.
    if (!a || !b || a->dtype != b->dtype || !is_supported_dtype(a->dtype) || !is_float(a->dtype) ||
        !same_shape(a, b) || !over_last_axis(n, a))
      continue;
    bool need_sum = g.is_graph_output(s);
    for (const Use& u : s->uses()) need_sum |= u.node != n;
    std::vector<Value*> inputs = {a, b, n->input(1)};
    if (norm == "LayerNorm" && n->input(2)) inputs.push_back(n->input(2));
    const std::string base = n->name().empty() ? std::string("residual_norm") : n->name() + "_residual";
    Node* f = g.add_node(Op::FusedResidualNorm, g.unique_name(base), inputs,
                         {g.unique_name(y->name() + "_fused"), need_sum ? g.unique_name(s->name() + "_sum") : ""});
    f->onnx_op_type = "FusedResidualNorm";
    f->onnx_domain = "kiln";
    f->attrs.set("norm", norm);
    f->attrs.set("epsilon", n->attrs.get_float("epsilon", 1e-5f));
    f->attrs.set("axis", int64_t{-1});
    f->output(0)->dtype = y->dtype;
    f->output(0)->shape = y->shape;
    pattern::replace_keeping_name(g, y, f->output(0));
    if (need_sum) {
      f->output(1)->dtype = a->dtype;
      f->output(1)->shape = a->shape;
      pattern::replace_keeping_name(g, s, f->output(1));
    }
    matched.push_back(n);
    matched.push_back(add);
    ctx.rewrote(cat("fused residual Add + ", norm, need_sum ? " (Sum kept)" : "", " into ", f->describe()));
    changed = true;
  }
  // Removed now, so the passes after this one in the round see no stale users.
  for (Node* n : matched) g.remove_node(n);
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln
