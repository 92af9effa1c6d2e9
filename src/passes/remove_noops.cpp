// Removes nodes that compute their input unchanged: Identity, inference Dropout, Cast
// to the same type, x*1, x/1, x+0, x-0, and Transpose pairs that cancel.
#include "passes/pass.h"

namespace kiln {

namespace {

// True if c is a constant whose every element equals `value` and which broadcasts into
// x without changing x's shape or dtype.
bool is_neutral_constant(const Value* c, const Value* x, double value) {
  if (!c || !c->is_constant() || !x || x->dtype == DataType::kUndefined) return false;
  const Tensor& t = c->constant();
  if (t.dtype() != x->dtype || t.is_string() || !is_supported_dtype(t.dtype()) || t.size() == 0) return false;
  for (int64_t d : t.dims()) if (d != 1) return false;
  if (t.rank() > 0 && (!x->shape || static_cast<int>(x->shape->size()) < t.rank())) return false;
  return t.get_double(0) == value;
}

// Redirects users of `out` to `in`, unless `out` is a graph output (its name is the
// model's interface and must stay).
bool bypass(Graph& g, Value* out, Value* in) {
  if (!out || !in || g.is_graph_output(out)) return false;
  g.replace_all_uses_with(out, in);
  return true;
}

std::vector<int64_t> compose(const std::vector<int64_t>& first, const std::vector<int64_t>& second) {
  std::vector<int64_t> out(second.size());
  for (size_t i = 0; i < second.size(); ++i) out[i] = first[static_cast<size_t>(second[i])];
  return out;
}

bool is_identity_perm(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i) if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

}  // namespace

Status remove_noops(Graph& g, PassContext& ctx) {
  for (Node* n : g.nodes()) {
    Value* x = n->input(0);
    Value* y = n->output(0);
    bool removed = false;
    switch (n->op()) {
      case Op::Identity:
        removed = bypass(g, y, x);
        break;
      case Op::Dropout: {
        // Inference: no training_mode input (or a constant false) and no mask consumer.
        Value* training = n->input(2);
        bool inference = !training || (training->is_constant() && training->constant().size() == 1 &&
                                       training->constant().get_double(0) == 0.0);
        Value* mask = n->output(1);
        if (inference && (!mask || (mask->uses().empty() && !g.is_graph_output(mask)))) removed = bypass(g, y, x);
        break;
      }
      case Op::Cast:
        if (x && n->num_inputs() == 1 && n->attrs.has("to") && x->dtype != DataType::kUndefined &&
            static_cast<int64_t>(x->dtype) == n->attrs.get_int("to", -1)) {
          removed = bypass(g, y, x);
        }
        break;
      case Op::Mul:
        if (is_neutral_constant(n->input(1), x, 1.0)) removed = bypass(g, y, x);
        else if (is_neutral_constant(x, n->input(1), 1.0)) removed = bypass(g, y, n->input(1));
        break;
      case Op::Add:
        if (is_neutral_constant(n->input(1), x, 0.0)) removed = bypass(g, y, x);
        else if (is_neutral_constant(x, n->input(1), 0.0)) removed = bypass(g, y, n->input(1));
        break;
      case Op::Div:
        if (is_neutral_constant(n->input(1), x, 1.0)) removed = bypass(g, y, x);
        break;
      case Op::Sub:
        if (is_neutral_constant(n->input(1), x, 0.0)) removed = bypass(g, y, x);
        break;
      case Op::Transpose: {
        // Transpose(p2) of Transpose(p1) whose composition is the identity.
        Node* prev = x ? x->producer() : nullptr;
        if (!prev || prev->op() != Op::Transpose || !prev->attrs.has("perm") || !n->attrs.has("perm")) break;
        auto p1 = prev->attrs.get_ints("perm");
        auto p2 = n->attrs.get_ints("perm");
        if (p1.size() != p2.size()) break;
        bool valid = true;
        for (int64_t v : p2) valid &= (v >= 0 && v < static_cast<int64_t>(p1.size()));
        if (valid && is_identity_perm(compose(p1, p2))) removed = bypass(g, y, prev->input(0));
        break;
      }
      default:
        break;
    }
    if (removed) ctx.rewrote(cat("bypassed no-op ", n->describe()));
  }
  return Status::ok();  // the bypassed nodes are now dead; eliminate_dead_code removes them
}

}  // namespace kiln
