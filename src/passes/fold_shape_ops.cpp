// Folds shape computations that static shapes decide: Shape (respecting start/end) and
// Size of a value whose shape is fully known become constants, as does shape arithmetic
// over a partly static shape whose elements all come out known (Gather(Shape(x), 1) when
// dim 1 of x is static while dim 0 is not; see ir/shape_value.h), and Reshape / Expand /
// Squeeze / Unsqueeze / Flatten whose static output shape equals their input's are
// bypassed. Relies on infer_shapes having run.
#include <algorithm>

#include "ir/shape_inference.h"
#include "ir/shape_value.h"
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
  const DataType dt = t.dtype();
  Value* c = g.add_constant(g.unique_name(name + "_folded"), std::move(t));
  c->dtype = dt;
  g.replace_all_uses_with(o, c);
  g.remove_node(n);
  g.rename_value(c, name);  // graph outputs keep their names
}

// Shape arithmetic whose elements all come out known becomes a constant of its dtype
// (int64 or int32). Nodes of constants alone are left to fold_constants.
bool fold_shape_arithmetic(Graph& g, Node* n, PassContext& ctx) {
  switch (n->op()) {
    case Op::Shape: case Op::Gather: case Op::Slice: case Op::Concat: case Op::Unsqueeze: case Op::Squeeze: case Op::Cast:
    case Op::Reshape: case Op::ConstantOfShape: case Op::Add: case Op::Sub: case Op::Mul: case Op::Div:
    case Op::Where: case Op::Identity:
      break;
    default:
      return false;
  }
  Value* y = n->output(0);
  if (n->num_outputs() != 1 || !y || (y->uses().empty() && !g.is_graph_output(y))) return false;
  if (y->dtype != DataType::kInt64 && y->dtype != DataType::kInt32) return false;
  if (std::all_of(n->inputs().begin(), n->inputs().end(), [](const Value* v) { return !v || v->is_constant(); }))
    return false;
  auto sv = shape_value(y);
  if (!sv || !sv->all_known()) return false;
  Tensor t = sv->scalar ? make_scalar_int64(sv->ints()[0]) : make_int64_vector(sv->ints());
  if (y->dtype != DataType::kInt64) t = cast_tensor(t, y->dtype);
  ctx.rewrote(cat("folded ", n->describe(), " to ", t.describe(), " from static dims"));
  replace_by_constant(g, n, std::move(t));
  return true;
}

}  // namespace

Status fold_shape_ops(Graph& g, PassContext& ctx) {
  for (Node* n : g.nodes()) {
    Value* x = n->input(0);
    Value* y = n->output(0);
    if (!x || !y || x->is_sequence || x->is_optional) continue;
    const bool used = !y->uses().empty() || g.is_graph_output(y);
    if (fold_shape_arithmetic(g, n, ctx)) continue;
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
