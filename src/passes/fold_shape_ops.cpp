// Folds shape computations that static shapes decide: Shape (respecting start/end) and
// Size of a value whose shape is fully known become constants, and Reshape / Expand /
// Squeeze / Unsqueeze / Flatten whose static output shape equals their input's are
// bypassed. Relies on infer_shapes having run.
#include <algorithm>

#include "ir/shape_inference.h"
#include "passes/pass.h"

namespace kiln {

namespace {

bool same_static_shape(const Value* a, const Value* b) {
  if (!is_static_shape(a->shape) || !is_static_shape(b->shape) || a->shape->size() != b->shape->size()) return false;
  for (size_t i = 0; i < a->shape->size(); ++i) {
    if ((*a->shape)[i].value != (*b->shape)[i].value) return false;
  }
  return true;
}

// Replaces n's single output by the constant t (keeping the output's name).
void replace_by_constant(Graph& g, Node* n, Tensor t) {
  Value* o = n->output(0);
  const std::string name = o->name();
  Value* c = g.add_constant(g.unique_name(name + "_folded"), std::move(t));
  c->dtype = DataType::kInt64;
  g.replace_all_uses_with(o, c);
  g.remove_node(n);
  g.rename_value(c, name);  // graph outputs keep their names
}

}  // namespace

Status fold_shape_ops(Graph& g, PassContext& ctx) {
  for (Node* n : g.nodes()) {
    Value* x = n->input(0);
    Value* y = n->output(0);
    if (!x || !y || x->is_sequence || x->is_optional) continue;
    const bool used = !y->uses().empty() || g.is_graph_output(y);
    switch (n->op()) {
      case Op::Shape: {
        if (!used || !is_static_shape(x->shape)) break;
        const int64_t r = static_cast<int64_t>(x->shape->size());
        auto clamp = [r](int64_t v) {
          if (v < 0) v += r;
          return std::clamp<int64_t>(v, 0, r);
        };
        const int64_t start = clamp(n->attrs.get_int("start", 0));
        const int64_t end = n->attrs.has("end") ? clamp(n->attrs.get_int("end", r)) : r;
        std::vector<int64_t> dims;
        for (int64_t i = start; i < end; ++i) dims.push_back((*x->shape)[static_cast<size_t>(i)].value);
        ctx.rewrote(cat("folded ", n->describe(), " of static ", sym_shape_str(x->shape)));
        replace_by_constant(g, n, make_int64_vector(dims));
        break;
      }
      case Op::Size: {
        if (!used || !is_static_shape(x->shape)) break;
        int64_t size = 1;
        for (const Dim& d : *x->shape) size *= d.value;
        ctx.rewrote(cat("folded ", n->describe(), " of static ", sym_shape_str(x->shape)));
        replace_by_constant(g, n, make_scalar_int64(size));
        break;
      }
      case Op::Reshape:
      case Op::Expand:
      case Op::Squeeze:
      case Op::Unsqueeze:
      case Op::Flatten:
        if (g.is_graph_output(y) || y->uses().empty() || !same_static_shape(x, y)) break;
        if (x->dtype != y->dtype && y->dtype != DataType::kUndefined) break;
        g.replace_all_uses_with(y, x);
        ctx.rewrote(cat("bypassed ", n->describe(), " keeping ", sym_shape_str(x->shape)));
        break;
      default:
        break;
    }
  }
  return Status::ok();
}

}  // namespace kiln
