// Drops Expands whose broadcast the consumers would do anyway:
//   y = Expand(x, s) read only by broadcasting elementwise ops (Add, Mul, Where...): each
//   reads x instead when its output shape provably stays the same;
//   y = Expand(i, s) read only as the indices of Gather(T, y, axis=0), whose output is read
//   only by such ops: they read Gather(T, i) instead (Gather is index-wise on its indices,
//   so Gather(T, Expand(i, s)) is the broadcast of Gather(T, i)).
// Exporters emit the second form for BERT's token_type_ids buffer (a [1, max_len] constant
// sliced and expanded to [batch, seq] before the embedding lookup); with it gone the
// lookup folds to a constant that the embedding sum broadcasts, and the Shape/Gather/
// Concat/Equal/Where arithmetic behind the Expand's target becomes dead. Bit-identical:
// every output element reads the same input elements as before.
#include "ir/shape_inference.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// Ops that broadcast all their inputs numpy-style (multidirectional).
bool broadcasts_all_inputs(Op op) {
  switch (op) {
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::Mod:
    case Op::Max: case Op::Min: case Op::Sum: case Op::Mean:
    case Op::Equal: case Op::Less: case Op::LessOrEqual: case Op::Greater: case Op::GreaterOrEqual:
    case Op::And: case Op::Or: case Op::Xor: case Op::BitShift:
    case Op::BitwiseAnd: case Op::BitwiseOr: case Op::BitwiseXor: case Op::Where:
      return true;
    default:
      return false;
  }
}

// Known and equal, or the same named symbol.
bool dim_equal(const Dim& a, const Dim& b) {
  if (a.known() || b.known()) return a.value == b.value;
  return !a.symbol.empty() && a.symbol == b.symbol;
}

// Whether user `u` computes a result of the same shape when `from` is replaced by `to`
// (`to_shape` its shape): the broadcast of the inputs must equal u's output shape.
bool same_result_with(const Node* u, const Value* from, const SymShape& to_shape) {
  if (!broadcasts_all_inputs(u->op()) || u->num_outputs() != 1 || !u->output(0) || !u->output(0)->shape) return false;
  SymShape s;
  bool first = true;
  for (const Value* in : u->inputs()) {
    if (!in) continue;
    const SymShape* si = in == from ? &to_shape : (in->shape ? &*in->shape : nullptr);
    if (!si) return false;
    s = first ? *si : broadcast_shapes(s, *si);
    first = false;
  }
  const SymShape& y = *u->output(0)->shape;
  if (first || s.size() != y.size()) return false;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!dim_equal(s[i], y[i])) return false;
  }
  return true;
}

// Every user of v is such an op that keeps its result shape with v replaced by a value of
// shape `to_shape`; v is no graph output.
bool all_users_keep_shape(const Graph& g, const Value* v, const SymShape& to_shape) {
  if (g.is_graph_output(v) || v->uses().empty()) return false;
  for (const Use& u : v->uses()) {
    if (!same_result_with(u.node, v, to_shape)) return false;
  }
  return true;
}

// The output shape of Gather(T, i, axis=0): i's dims then T's trailing dims.
std::optional<SymShape> gather0_shape(const Value* t, const Value* i) {
  if (!t->shape || t->shape->empty() || !i->shape) return std::nullopt;
  SymShape s = *i->shape;
  s.insert(s.end(), t->shape->begin() + 1, t->shape->end());
  return s;
}

}  // namespace

Status drop_broadcast_expand(Graph& g, PassContext& ctx) {
  bool added = false;
  for (Node* e : g.nodes()) {
    if (e->op() != Op::Expand || e->num_outputs() != 1 || !e->output(0) || !e->input(0)) continue;
    Value* x = e->input(0);
    Value* y = e->output(0);
    if (!x->shape || x->is_sequence || x->is_optional || x->dtype != y->dtype) continue;
    if (all_users_keep_shape(g, y, *x->shape)) {
      g.replace_all_uses_with(y, x);
      ctx.rewrote(cat("dropped ", e->describe(), ": its users broadcast ", sym_shape_str(x->shape), " themselves"));
      continue;
    }
    // Expand as the indices of one Gather over axis 0.
    if (y->uses().size() != 1 || g.is_graph_output(y)) continue;
    Node* gather = y->uses()[0].node;
    if (gather->op() != Op::Gather || y->uses()[0].input_index != 1 || gather->attrs.get_int("axis", 0) != 0 ||
        gather->num_outputs() != 1 || !gather->output(0) || !gather->input(0) || gather->input(0) == y) {
      continue;
    }
    Value* table = gather->input(0);
    const std::optional<SymShape> shape = gather0_shape(table, x);
    if (!shape || !all_users_keep_shape(g, gather->output(0), *shape)) continue;
    const std::string name = g.unique_name(gather->output(0)->name() + "_unexpanded");
    Node* ng = g.add_node(Op::Gather, g.unique_name(gather->name().empty() ? std::string("gather") : gather->name() + "_unexpanded"),
                          {table, x}, {name});
    ng->onnx_op_type = "Gather";
    ng->attrs.set("axis", int64_t{0});
    ng->output(0)->dtype = gather->output(0)->dtype;
    ng->output(0)->shape = shape;
    g.replace_all_uses_with(gather->output(0), ng->output(0));
    added = true;
    ctx.rewrote(cat("dropped ", e->describe(), " before ", gather->describe(), ": its users broadcast ",
                    sym_shape_str(shape), " themselves"));
  }
  return added ? g.topological_sort() : Status::ok();
}

}  // namespace kiln
