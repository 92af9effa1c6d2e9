// Collapses chains of layout-only ops into one node:
//  - Reshape / Flatten / Squeeze / Unsqueeze chains whose intermediates feed only the next
//    link become one Reshape (allowzero=0) to the chain's final shape, or nothing when that
//    shape is the input's own. The final shape must be a constant shape tensor: known dims
//    as literals, a symbolic dim sitting at the same index in the input as a 0 (copy), and
//    at most one other unknown dim as -1. Anything else (two free unknown dims, a zero-size
//    dim, whose literal 0 would mean "copy") stays as it is.
//  - Transpose(p2) of a single-use Transpose(p1) becomes one Transpose with the composed
//    perm, bypassed when that perm is the identity.
// Relies on infer_shapes having run.
#include <algorithm>

#include "ir/shape_inference.h"
#include "passes/pass.h"
#include "passes/pattern_util.h"

namespace kiln {

namespace {

using pattern::single_use;

bool is_reshape_like(Op op) {
  return op == Op::Reshape || op == Op::Flatten || op == Op::Squeeze || op == Op::Unsqueeze;
}

// The output shape follows from the data input's shape alone: shape / axes are constants,
// so inference derived the chain's shapes instead of trusting a runtime tensor.
bool has_constant_params(const Node& n) {
  if (!is_reshape_like(n.op()) || n.num_outputs() != 1 || !n.output(0) || !n.input(0)) return false;
  if (n.input(0)->is_sequence || n.input(0)->is_optional) return false;
  const Value* p = n.input(1);
  switch (n.op()) {
    case Op::Reshape:
    case Op::Unsqueeze:
      return p && p->is_constant();
    case Op::Squeeze:
      return !p || p->is_constant();
    default:
      return true;
  }
}

// The chain link that reads `n`'s output: the one node using it, as its data input.
Node* next_link(const Graph& g, const Node& n) {
  Value* y = n.output(0);
  if (!single_use(g, y)) return nullptr;
  const Use& u = y->uses()[0];
  return u.input_index == 0 && has_constant_params(*u.node) ? u.node : nullptr;
}

bool same_dim(const Dim& a, const Dim& b) {
  if (a.known() || b.known()) return a.value == b.value;
  return !a.symbol.empty() && a.symbol == b.symbol;
}

// The constant Reshape target for `out` read from `in`; false when it cannot be written.
bool target_shape(const Value* in, const SymShape& out, std::vector<int64_t>* target) {
  target->clear();
  bool inferred = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const Dim& d = out[i];
    if (d.known()) {
      if (d.value == 0) return false;
      target->push_back(d.value);
    } else if (in->shape && i < in->shape->size() && same_dim((*in->shape)[i], d)) {
      target->push_back(0);
    } else {
      if (inferred) return false;
      inferred = true;
      target->push_back(-1);
    }
  }
  // Cheap consistency check where both ends are static: the element counts agree.
  if (is_static_shape(in->shape) && !inferred) {
    int64_t a = 1, b = 1;
    for (const Dim& d : *in->shape) a *= d.value;
    for (size_t i = 0; i < out.size(); ++i) b *= (*target)[i] == 0 ? (*in->shape)[i].value : (*target)[i];
    if (a != b) return false;
  }
  return true;
}

// The axes of one Unsqueeze doing what the Unsqueeze chain (first link last) does, from
// the input rank alone; empty when an axis is out of range.
std::vector<int64_t> composed_unsqueeze_axes(const std::vector<Node*>& chain, size_t in_rank) {
  std::vector<bool> inserted(in_rank, false);  // per output axis: added by the chain
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    std::vector<int64_t> axes = (*it)->input(1)->constant().to_int_vector();
    const int64_t r = static_cast<int64_t>(inserted.size() + axes.size());
    for (int64_t& a : axes) {
      if (a < 0) a += r;
      if (a < 0 || a >= r) return {};
    }
    std::sort(axes.begin(), axes.end());
    if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) return {};
    for (int64_t a : axes) inserted.insert(inserted.begin() + a, true);
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < inserted.size(); ++i) {
    if (inserted[i]) out.push_back(static_cast<int64_t>(i));
  }
  return out;
}

bool collapse_chain(Graph& g, Node* tail, PassContext& ctx) {
  // Walk back from the tail while the producer is a link whose only user is this one.
  std::vector<Node*> chain{tail};
  for (;;) {
    Node* p = chain.back()->input(0)->producer();
    if (!p || !has_constant_params(*p) || next_link(g, *p) != chain.back()) break;
    chain.push_back(p);
  }
  if (chain.size() < 2) return false;
  Value* x = chain.back()->input(0);
  Value* y = tail->output(0);
  if (!y->shape || (x->dtype != y->dtype && y->dtype != DataType::kUndefined)) return false;
  const SymShape& out = *y->shape;
  bool same = x->shape && x->shape->size() == out.size();
  for (size_t i = 0; same && i < out.size(); ++i) same = same_dim((*x->shape)[i], out[i]);
  if (same && !g.is_graph_output(y)) {
    g.replace_all_uses_with(y, x);
    ctx.rewrote(cat("removed ", chain.size(), "-op reshape chain ending at ", tail->describe(), " (keeps ",
                    sym_shape_str(x->shape), ")"));
    return true;
  }
  // Only Unsqueezes: one Unsqueeze, which needs no static dims and keeps every symbol.
  const bool unsqueezes = std::all_of(chain.begin(), chain.end(), [](const Node* n) { return n->op() == Op::Unsqueeze; });
  if (unsqueezes && x->shape) {
    const std::vector<int64_t> axes = composed_unsqueeze_axes(chain, x->shape->size());
    if (!axes.empty()) {
      Value* ax = g.add_constant(g.unique_name(y->name() + "_axes"), make_int64_vector(axes));
      Node* u = g.add_node(Op::Unsqueeze, g.unique_name(tail->name().empty() ? std::string("unsqueeze") : tail->name() + "_collapsed"),
                           {x, ax}, {g.unique_name(y->name() + "_collapsed")});
      u->onnx_op_type = "Unsqueeze";
      u->output(0)->dtype = x->dtype;
      u->output(0)->shape = y->shape;
      pattern::replace_keeping_name(g, y, u->output(0));
      ctx.rewrote(cat("collapsed ", chain.size(), "-op Unsqueeze chain ending at ", tail->describe(), " into ",
                      u->describe(), " (axes ", dims_str(axes), ")"));
      return true;
    }
  }
  std::vector<int64_t> target;
  if (!target_shape(x, out, &target)) return false;
  Value* shape = g.add_constant(g.unique_name(y->name() + "_shape"), make_int64_vector(target));
  Node* r = g.add_node(Op::Reshape, g.unique_name(tail->name().empty() ? std::string("reshape") : tail->name() + "_collapsed"),
                       {x, shape}, {g.unique_name(y->name() + "_collapsed")});
  r->onnx_op_type = "Reshape";
  r->attrs.set("allowzero", int64_t{0});
  r->output(0)->dtype = x->dtype;
  r->output(0)->shape = y->shape;
  pattern::replace_keeping_name(g, y, r->output(0));
  ctx.rewrote(cat("collapsed ", chain.size(), "-op reshape chain ending at ", tail->describe(), " into ",
                  r->describe(), " to ", dims_str(target)));
  return true;
}

// perm of a Transpose, the default (reversed axes) resolved from the input rank; empty when
// unknown or not a permutation.
std::vector<int64_t> perm_of(const Node& t) {
  std::vector<int64_t> p = t.attrs.get_ints("perm");
  if (!t.attrs.has("perm")) {
    const Value* x = t.input(0);
    if (!x || !x->shape) return {};
    for (size_t i = x->shape->size(); i-- > 0;) p.push_back(static_cast<int64_t>(i));
  }
  std::vector<bool> seen(p.size(), false);
  for (int64_t v : p) {
    if (v < 0 || v >= static_cast<int64_t>(p.size()) || seen[static_cast<size_t>(v)]) return {};
    seen[static_cast<size_t>(v)] = true;
  }
  return p;
}

bool merge_transposes(Graph& g, Node* n, PassContext& ctx) {
  Value* x = n->input(0);
  Node* prev = x ? x->producer() : nullptr;
  if (!prev || prev->op() != Op::Transpose || !single_use(g, x)) return false;
  const auto p1 = perm_of(*prev);
  const auto p2 = perm_of(*n);
  if (p1.empty() || p1.size() != p2.size()) return false;
  // Transpose(p2)(Transpose(p1)(a)) reads axis p1[p2[i]] of a at position i.
  std::vector<int64_t> composed(p2.size());
  bool identity = true;
  for (size_t i = 0; i < p2.size(); ++i) {
    composed[i] = p1[static_cast<size_t>(p2[i])];
    identity &= composed[i] == static_cast<int64_t>(i);
  }
  Value* a = prev->input(0);
  Value* y = n->output(0);
  if (identity && !g.is_graph_output(y)) {
    g.replace_all_uses_with(y, a);
    ctx.rewrote(cat("removed cancelling transposes ", prev->describe(), " and ", n->describe()));
    return true;
  }
  n->set_input(0, a);  // n's output keeps its value: no user sees a change
  n->attrs.set("perm", composed);
  ctx.rewrote(cat("merged ", prev->describe(), " into ", n->describe(), " (perm ", dims_str(composed), ")"));
  return true;
}

}  // namespace

Status collapse_reshape_chains(Graph& g, PassContext& ctx) {
  bool added = false;
  for (Node* n : g.nodes()) {
    if (n->op() == Op::Transpose && n->num_outputs() == 1 && n->output(0)) {
      merge_transposes(g, n, ctx);
      continue;
    }
    // A chain is rewritten once, from its tail (the link whose output leaves the chain).
    if (!has_constant_params(*n) || next_link(g, *n)) continue;
    added |= collapse_chain(g, n, ctx);
  }
  if (added) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln
