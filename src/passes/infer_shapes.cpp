// Runs shape and type inference (ir/shape_inference.h) over the graph in order and records
// each node output's dtype and symbolic shape. What the model's value_info recorded and
// inference cannot derive is kept; where both know a dim and disagree, inference wins.
// Counts a rewrite only for a value whose type actually changed.
#include "ir/shape_inference.h"
#include "passes/pass.h"

namespace kiln {

namespace {

bool same_dim(const Dim& a, const Dim& b) { return a.value == b.value && a.symbol == b.symbol; }

bool same_shape(const std::optional<SymShape>& a, const std::optional<SymShape>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  if (a->size() != b->size()) return false;
  for (size_t i = 0; i < a->size(); ++i) if (!same_dim((*a)[i], (*b)[i])) return false;
  return true;
}

// Inferred dims win when known; otherwise a recorded known dim, then a named symbol.
std::optional<SymShape> merge(const std::optional<SymShape>& recorded, const std::optional<SymShape>& inferred) {
  if (!inferred) return recorded;
  if (!recorded || recorded->size() != inferred->size()) return inferred;
  SymShape out = *inferred;
  for (size_t i = 0; i < out.size(); ++i) {
    const Dim& r = (*recorded)[i];
    if (out[i].known()) continue;
    if (r.known()) out[i] = r;
    else if (out[i].symbol.empty()) out[i] = r;
  }
  return out;
}

}  // namespace

Status infer_shapes(Graph& g, PassContext& ctx) {
  InferredTypes t;
  for (Node* n : g.nodes()) {
    if (!infer_node_types(*n, &t)) continue;
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      Value* o = n->output(i);
      if (!o) continue;
      bool changed = false;
      if (t.dtypes[i] != DataType::kUndefined && is_supported_dtype(t.dtypes[i]) && t.dtypes[i] != o->dtype) {
        o->dtype = t.dtypes[i];
        changed = true;
      }
      std::optional<SymShape> s = merge(o->shape, t.shapes[i]);
      if (!same_shape(s, o->shape)) {
        o->shape = std::move(s);
        changed = true;
      }
      if (changed) ctx.rewrote(cat("inferred ", o->name(), " of ", n->describe(), ": ", dtype_name(o->dtype),
                                   sym_shape_str(o->shape)));
    }
  }
  return Status::ok();
}

}  // namespace kiln
