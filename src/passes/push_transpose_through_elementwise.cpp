// Moves Transposes across elementwise ops where that removes Transposes:
//  A. Transpose(q) closing a tree of elementwise ops (single-use intermediates) whose
//     operands are Transpose(p = q^-1) outputs, constants or size-1 values: the tree is
//     rebuilt on the untransposed inputs and both Transposes disappear (constants are
//     unsqueezed to full rank and transposed by q, size-1 values broadcast as they are).
//  B. An elementwise op fed by two or more distinct Transposes with the same perm p (each
//     used only there and of the op's output shape, so no broadcast result is transposed),
//     other operands constant or size-1: the op runs on the untransposed inputs and one
//     Transpose(p) follows it.
// Elementwise ops commute with a permutation of axes once every operand is brought to the
// same rank, since numpy broadcasting pairs dims position by position. FusedElementwise
// counts as elementwise: its expr is a program of elementwise ops over its inputs, each
// statement broadcasting numpy-style (PRelu's slope and Clip's bounds broadcast into their
// first argument), so its inputs relate to its output as a single op's would. The old nodes
// are left for eliminate_dead_code, so a value a subgraph captures by name keeps its meaning.
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "backends/cpu/reference/kernel.h"
#include "ir/elementwise_expr.h"
#include "passes/pass.h"
#include "passes/pattern_util.h"

namespace kiln {

namespace {

using pattern::single_use;

constexpr size_t kMaxRegion = 64;  // elementwise nodes per rewrite, to bound the walk

// perm of a Transpose, the default (reversed axes) resolved from the input rank; empty when
// unknown or not a permutation.
std::vector<int64_t> perm_of(const Node& t) {
  if (t.op() != Op::Transpose || t.num_outputs() != 1 || !t.output(0) || !t.input(0)) return {};
  std::vector<int64_t> p = t.attrs.get_ints("perm");
  if (!t.attrs.has("perm")) {
    const Value* x = t.input(0);
    if (!x->shape) return {};
    for (size_t i = x->shape->size(); i-- > 0;) p.push_back(static_cast<int64_t>(i));
  }
  std::vector<bool> seen(p.size(), false);
  for (int64_t v : p) {
    if (v < 0 || v >= static_cast<int64_t>(p.size()) || seen[static_cast<size_t>(v)]) return {};
    seen[static_cast<size_t>(v)] = true;
  }
  return p;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& p) {
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return inv;
}

// For an elementwise node (an op flagged kElementwise, or a FusedElementwise whose expr
// parses), which inputs are data; nullopt for any other node. Not data: CastLike's second
// input, which only names the target dtype (in an expr: an input read only that way).
std::optional<std::vector<bool>> data_inputs(const Node& n) {
  if (n.num_outputs() != 1 || !n.output(0) || !n.subgraphs().empty() || n.output(0)->is_sequence ||
      n.output(0)->is_optional) {
    return std::nullopt;
  }
  std::vector<bool> data(n.num_inputs(), true);
  if (n.op() == Op::FusedElementwise) {
    auto prog = parse_elementwise_expr(n.attrs.get_string("expr", ""));
    if (!prog.is_ok() || prog->num_inputs > static_cast<int>(n.num_inputs())) return std::nullopt;
    data.assign(n.num_inputs(), false);
    for (const ExprInstr& in : prog->instrs) {
      for (size_t k = 0; k < in.args.size(); ++k) {
        const ExprArg& a = in.args[k];
        if (a.kind == ExprArg::Kind::kInput && !(in.op == Op::Cast && k > 0)) data[static_cast<size_t>(a.index)] = true;
      }
    }
    return data;
  }
  if (!op_has_flag(n.op(), kElementwise)) return std::nullopt;
  if (n.op() == Op::Cast) {
    for (size_t i = 1; i < data.size(); ++i) data[i] = false;
  }
  return data;
}

// A value of known shape whose every dim is 1 and whose rank is at most `rank`: it
// broadcasts the same way in any layout.
bool is_size_one(const Value* v, size_t rank) {
  if (!v->shape || v->shape->size() > rank) return false;
  for (const Dim& d : *v->shape) if (!d.known() || d.value != 1) return false;
  return true;
}

// What one operand of a region node becomes once the region runs untransposed.
struct Operand {
  enum Kind { kKeep, kUntransposed, kConstant, kRegion } kind = kKeep;
  Value* value = nullptr;  // kKeep: the operand; kUntransposed: the Transpose input; kRegion: its producer's output
};

struct Region {
  std::vector<int64_t> p;                     // perm of the opening Transposes
  std::vector<Node*> nodes;                   // post-order: operands before users
  std::unordered_map<Node*, std::vector<Operand>> operands;
  std::unordered_set<Node*> openings;         // distinct opening Transposes
};

// Collects the elementwise tree rooted at n (n's own output is checked by the caller).
bool collect(const Graph& g, Node* n, Region& r) {
  if (r.nodes.size() >= kMaxRegion || r.operands.count(n)) return false;
  const auto data = data_inputs(*n);
  if (!data) return false;
  std::vector<Operand> ops(n->num_inputs());
  for (size_t i = 0; i < n->num_inputs(); ++i) {
    Value* v = n->input(i);
    Operand& o = ops[i];
    o.value = v;
    if (!v || !(*data)[i]) continue;
    if (v->is_sequence || v->is_optional) return false;
    Node* p = v->producer();
    if (p && p->op() == Op::Transpose && perm_of(*p) == r.p) {
      o.kind = Operand::kUntransposed;
      o.value = p->input(0);
      r.openings.insert(p);
    } else if (v->is_constant()) {
      const Tensor& t = v->constant();
      if (t.is_sequence() || t.is_none() || !t.defined() || static_cast<size_t>(t.rank()) > r.p.size()) return false;
      if (t.size() != 1) o.kind = Operand::kConstant;
    } else if (is_size_one(v, r.p.size())) {
      // kept as is
    } else if (p && single_use(g, v) && collect(g, p, r)) {
      o.kind = Operand::kRegion;
    } else {
      return false;
    }
  }
  r.operands[n] = std::move(ops);
  r.nodes.push_back(n);
  return true;
}

// t unsqueezed to `rank` dims and transposed by q: the operand that, transposed by q^-1,
// gives back t broadcast to full rank.
bool transpose_constant(const Tensor& t, const std::vector<int64_t>& q, Tensor* out) {
  Dims d(q.size() - static_cast<size_t>(t.rank()), 1);
  d.insert(d.end(), t.dims().begin(), t.dims().end());
  Tensor full = t.reshaped(d);
  Attributes a;
  a.set("perm", q);
  return run_reference_op(Op::Transpose, a, {&full}, out).is_ok();
}

// Untransposed shape of a region value: dim j of the new layout is dim q[j] of the old.
std::optional<SymShape> untransposed_shape(const std::optional<SymShape>& s, const std::vector<int64_t>& q) {
  if (!s || s->size() != q.size()) return std::nullopt;
  SymShape out;
  for (int64_t a : q) out.push_back((*s)[static_cast<size_t>(a)]);
  return out;
}

// Rebuilds the region's nodes on untransposed operands; returns the new root output, or
// nullptr (nothing added) when a constant cannot be transposed.
Value* rebuild(Graph& g, const Region& r) {
  const std::vector<int64_t> q = inverse(r.p);
  // Transposed constants first, so a failure leaves the graph untouched.
  std::unordered_map<const Value*, Tensor> transposed;
  for (Node* n : r.nodes) {
    for (const Operand& o : r.operands.at(n)) {
      if (o.kind != Operand::kConstant || transposed.count(o.value)) continue;
      Tensor t;
      if (!transpose_constant(o.value->constant(), q, &t)) return nullptr;
      transposed.emplace(o.value, std::move(t));
    }
  }
  std::unordered_map<const Value*, Value*> constants;
  for (auto& [v, t] : transposed) constants[v] = g.add_constant(g.unique_name(v->name() + "_transposed"), std::move(t));
  std::unordered_map<const Node*, Value*> rebuilt;
  Value* last = nullptr;
  for (Node* n : r.nodes) {
    std::vector<Value*> inputs;
    for (const Operand& o : r.operands.at(n)) {
      switch (o.kind) {
        case Operand::kKeep: inputs.push_back(o.value); break;
        case Operand::kUntransposed: inputs.push_back(o.value); break;
        case Operand::kConstant: inputs.push_back(constants.at(o.value)); break;
        case Operand::kRegion: inputs.push_back(rebuilt.at(o.value->producer())); break;
      }
    }
    Value* old = n->output(0);
    Node* m = g.add_node(n->op(), n->name().empty() ? std::string() : n->name() + "_untransposed", inputs,
                         {g.unique_name(old->name() + "_untransposed")});
    m->onnx_op_type = n->onnx_op_type;
    m->onnx_domain = n->onnx_domain;
    m->onnx_opset = n->onnx_opset;
    m->attrs = n->attrs;
    m->output(0)->dtype = old->dtype;
    m->output(0)->shape = untransposed_shape(old->shape, q);
    rebuilt[n] = m->output(0);
    last = m->output(0);
  }
  return last;
}

// Pattern A: `close` is Transpose(q) of a single-use elementwise output.
bool remove_closing_pair(Graph& g, Node* close, std::unordered_set<Node*>& consumed, PassContext& ctx) {
  const auto q = perm_of(*close);
  Value* v = close->input(0);
  Node* root = v ? v->producer() : nullptr;
  if (q.empty() || !root || consumed.count(root) || !single_use(g, v)) return false;
  Region r;
  r.p = inverse(q);
  if (!collect(g, root, r) || r.openings.empty()) return false;
  Value* out = rebuild(g, r);
  if (!out) return false;
  Value* y = close->output(0);
  if (y->shape) out->shape = y->shape;
  pattern::replace_keeping_name(g, y, out);
  for (Node* n : r.nodes) consumed.insert(n);
  ctx.rewrote(cat("removed ", close->describe(), " and its inverse by running ", r.nodes.size(),
                  " elementwise op(s) untransposed"));
  return true;
}

// Pattern B: n is fed by at least two distinct Transposes of one perm, each used only by n.
bool sink_transposes(Graph& g, Node* n, std::unordered_set<Node*>& consumed, PassContext& ctx) {
  if (consumed.count(n)) return false;
  const auto data = data_inputs(*n);
  if (!data) return false;
  Value* y = n->output(0);
  if (y->uses().empty() && !g.is_graph_output(y)) return false;
  Region r;
  for (size_t i = 0; i < n->num_inputs() && r.p.empty(); ++i) {
    Value* v = n->input(i);
    if (v && (*data)[i] && v->producer()) r.p = perm_of(*v->producer());
  }
  if (r.p.empty()) return false;
  // Operands only: the region is n alone (a tree below n would not remove more).
  for (size_t i = 0; i < n->num_inputs(); ++i) {
    Value* v = n->input(i);
    if (!v || !(*data)[i] || v->is_constant() || is_size_one(v, r.p.size())) continue;
    Node* p = v->producer();
    if (!p || p->op() != Op::Transpose || perm_of(*p) != r.p) return false;
  }
  if (!collect(g, n, r) || r.nodes.size() != 1) return false;
  // Transposing a broadcast result could move more data than the inputs held: every
  // Transpose must already carry the output's shape.
  if (!y->shape) return false;
  int removable = 0;
  for (Node* t : r.openings) {
    const auto& s = t->output(0)->shape;
    if (!s || s->size() != y->shape->size()) return false;
    for (size_t i = 0; i < s->size(); ++i) {
      const Dim& a = (*s)[i];
      const Dim& b = (*y->shape)[i];
      if (a.known() || b.known() ? a.value != b.value : (a.symbol.empty() || a.symbol != b.symbol)) return false;
    }
    bool only_n = !g.is_graph_output(t->output(0));
    for (const Use& u : t->output(0)->uses()) only_n &= u.node == n;
    removable += only_n;
  }
  if (removable < 2) return false;
  Value* out = rebuild(g, r);
  if (!out) return false;
  Node* t = g.add_node(Op::Transpose, n->name().empty() ? std::string() : n->name() + "_transpose", {out},
                       {g.unique_name(y->name() + "_transposed")});
  t->onnx_op_type = "Transpose";
  t->attrs.set("perm", r.p);
  t->output(0)->dtype = y->dtype;
  t->output(0)->shape = y->shape;
  pattern::replace_keeping_name(g, y, t->output(0));
  consumed.insert(n);
  ctx.rewrote(cat("moved ", r.openings.size(), " transposes below ", n->describe()));
  return true;
}

}  // namespace

Status push_transpose_through_elementwise(Graph& g, PassContext& ctx) {
  std::unordered_set<Node*> consumed;  // old region nodes, dead once rewritten
  bool added = false;
  for (Node* n : g.nodes()) {
    if (n->op() == Op::Transpose) added |= remove_closing_pair(g, n, consumed, ctx);
  }
  for (Node* n : g.nodes()) {
    if (!consumed.count(n)) added |= sink_transposes(g, n, consumed, ctx);
  }
  if (added) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln
