// Fuses scaled dot-product attention written out with MatMul/Softmax into one Attention
// node (ONNX opset-23 semantics, reference kernel in backends/cpu/reference/attention.cpp):
//
//   q = [Reshape(Q3, [B,S,H,D]) ->] Transpose(0,2,1,3)        [* or / scalar]
//   k = [Reshape(K3, [B,S,H,D]) ->] Transpose(0,2,3,1)        (or 0,2,1,3 then 0,1,3,2)
//   v = [Reshape(V3, [B,S,H,D]) ->] Transpose(0,2,1,3)
//   s = MatMul(q, k) [* or / scalar] [+ mask] [Where(bool, s, -inf or very negative)]
//   p = Softmax(s, last axis) [-> Where(rows_all_masked, 0, p)]
//   o = MatMul(p, v) [-> Transpose(0,2,1,3) -> Reshape([B,S,H*D])]
//
// With the head-splitting reshapes and the head-merging tail present the node takes the
// 3-D tensors [B,S,H*D] (q_num_heads = kv_num_heads = H); otherwise it takes the 4-D
// [B,H,S,D] tensors the chains start from (adding a Transpose where K only exists as
// Kt). Reshape targets computed from Shape (dynamic batch/sequence) are verified by
// following the shape arithmetic. The scale is always set (the op's default is
// 1/sqrt(D)); a constant lower-triangular mask becomes is_causal=1, any other mask is
// passed as attn_mask (additive, or boolean for Where); an all-zero constant bias is
// dropped. Every absorbed intermediate must feed only the pattern, and the shapes must
// prove that no MatMul/Add broadcast is lost.
//
// Where(cond, s, fill) with a finite fill <= -1e4 (GPT-2 uses -1e4 or float.min) is read
// as masking with -inf: exp(fill - max) is 0 in float for any realistic score. The one
// difference is a row whose keys are all masked, which the original turns into a uniform
// (finite fill) or NaN (-inf) row and the Attention op into zeros.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "passes/pass.h"
#include "passes/pattern_util.h"

namespace kiln {

namespace {

using pattern::scalar_value;

// Known and equal, or the same named symbol.
bool dim_equal(const Dim& a, const Dim& b) {
  if (a.known() || b.known()) return a.value == b.value;
  return !a.symbol.empty() && a.symbol == b.symbol;
}

Dim known_dim(int64_t v) { return Dim{v, ""}; }

// Use lists restricted to live nodes: the passes before this one in a round can leave
// dead nodes behind until the next eliminate_dead_code, and those must not make a value
// look shared. (Counting only affects what is absorbed: nothing still used is removed.)
class LiveUses {
 public:
  explicit LiveUses(const Graph& g) {
    std::vector<const Value*> work(g.outputs().begin(), g.outputs().end());
    auto capture = [&](const Graph& sub, auto&& self) -> void {
      for (const Value* r : sub.outer_refs()) {
        if (const Value* v = g.find_value(r->name())) work.push_back(v);
      }
      for (const Node* n : sub.nodes()) {
        for (const Graph* s : n->subgraphs()) self(*s, self);
      }
    };
    while (!work.empty()) {
      const Value* v = work.back();
      work.pop_back();
      const Node* p = v ? v->producer() : nullptr;
      if (!p || !live_.insert(p).second) continue;
      work.insert(work.end(), p->inputs().begin(), p->inputs().end());
      for (const Graph* sub : p->subgraphs()) capture(*sub, capture);
    }
  }
  void add(const Node* n) { live_.insert(n); }
  std::vector<Use> of(const Value* v) const {
    std::vector<Use> out;
    for (const Use& u : v->uses()) {
      if (live_.count(u.node)) out.push_back(u);
    }
    return out;
  }
  // v feeds exactly one live node and is not a graph output: a fusion may absorb it.
  bool single(const Graph& g, const Value* v) const { return v && !g.is_graph_output(v) && of(v).size() == 1; }
  Use only_use(const Value* v) const { return of(v).at(0); }

 private:
  std::unordered_set<const Node*> live_;
};

// ---- reshape targets ----

// One element of a 1-D int64 shape tensor: a constant, or dimension `axis` of value `of`.
struct ShapeElem {
  int64_t value = 0;
  const Value* of = nullptr;
  int64_t axis = -1;
};

// Follows the shape arithmetic exporters emit for dynamic shapes (Shape -> Gather/Slice
// -> Unsqueeze -> Concat, with Casts) so that a computed Reshape target can be checked.
// Shape(x) reads `x_shape` where inference could not tell x's shape.
bool trace_shape(const Value* v, std::vector<ShapeElem>* out, const Value* x, const SymShape* x_shape, int depth = 0) {
  if (!v || depth > 8) return false;
  if (v->is_constant()) {
    const Tensor& t = v->constant();
    if (!t.defined() || t.is_sequence() || t.is_none() || t.rank() > 1 || !is_integer(t.dtype())) return false;
    for (int64_t x : t.to_int_vector()) out->push_back({x, nullptr, -1});
    return true;
  }
  const Node* p = v->producer();
  if (!p || p->num_outputs() != 1) return false;
  switch (p->op()) {
    case Op::Shape: {
      const Value* in = p->input(0);
      const SymShape* shape = in == x && x_shape ? x_shape : (in && in->shape ? &*in->shape : nullptr);
      if (!in || !shape) return false;
      const int64_t r = static_cast<int64_t>(shape->size());
      auto clamp = [r](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + r : a, 0, r); };
      const int64_t start = clamp(p->attrs.get_int("start", 0));
      const int64_t end = p->attrs.has("end") ? clamp(p->attrs.get_int("end", r)) : r;
      for (int64_t i = start; i < end; ++i) out->push_back({0, in, i});
      return true;
    }
    case Op::Cast:
    case Op::Unsqueeze:
    case Op::Squeeze: {
      // Only 0-D/1-element values: Unsqueeze/Squeeze then do not reorder anything.
      std::vector<ShapeElem> in;
      if (!trace_shape(p->input(0), &in, x, x_shape, depth + 1)) return false;
      if (p->op() != Op::Cast && in.size() != 1) return false;
      if (p->op() == Op::Cast) {
        const DataType to = p->input(1) ? p->input(1)->dtype : static_cast<DataType>(p->attrs.get_int("to", 0));
        if (to != DataType::kInt64 && to != DataType::kInt32) return false;
      }
      out->insert(out->end(), in.begin(), in.end());
      return true;
    }
    case Op::Concat: {
      if (p->attrs.get_int("axis", 0) != 0 && p->attrs.get_int("axis", 0) != -1) return false;
      for (const Value* in : p->inputs()) {
        if (!trace_shape(in, out, x, x_shape, depth + 1)) return false;
      }
      return true;
    }
    case Op::Gather: {
      std::vector<ShapeElem> in;
      const Value* idx = p->input(1);
      if (p->attrs.get_int("axis", 0) != 0 || !idx || !idx->is_constant()) return false;
      if (!trace_shape(p->input(0), &in, x, x_shape, depth + 1)) return false;
      const int64_t n = static_cast<int64_t>(in.size());
      for (int64_t i : idx->constant().to_int_vector()) {
        if (i < 0) i += n;
        if (i < 0 || i >= n) return false;
        out->push_back(in[static_cast<size_t>(i)]);
      }
      return true;
    }
    case Op::Slice: {
      std::vector<ShapeElem> in;
      if (!trace_shape(p->input(0), &in, x, x_shape, depth + 1)) return false;
      for (size_t i = 1; i < p->num_inputs(); ++i) {
        if (p->input(i) && !p->input(i)->is_constant()) return false;
      }
      if (!p->input(1) || !p->input(2)) return false;
      const auto starts = p->input(1)->constant().to_int_vector();
      const auto ends = p->input(2)->constant().to_int_vector();
      if (starts.size() != 1 || ends.size() != 1) return false;
      if (p->input(3) && p->input(3)->constant().to_int_vector() != std::vector<int64_t>{0}) return false;
      if (p->input(4) && p->input(4)->constant().to_int_vector() != std::vector<int64_t>{1}) return false;
      const int64_t n = static_cast<int64_t>(in.size());
      auto clamp = [n](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + n : a, 0, n); };
      for (int64_t i = clamp(starts[0]); i < clamp(ends[0]); ++i) out->push_back(in[static_cast<size_t>(i)]);
      return true;
    }
    default:
      return false;
  }
}

// Whether Reshape `r` keeps its input's first `lead` dims and reshapes the rest into
// `tail` (all known, returned), proven from the inferred shapes or the traced target.
// `x_shape` stands in for the input's shape when the caller knows it better (a dynamic
// shape that inference could not carry through the head-splitting reshapes).
bool reshape_keeps_lead(const Node* r, size_t lead, std::vector<int64_t>* tail, const SymShape* x_shape = nullptr) {
  const Value* x = r->input(0);
  const Value* y = r->output(0);
  if (!x_shape && x && x->shape) x_shape = &*x->shape;
  if (!x || !y || !x_shape || x_shape->size() <= lead) return false;
  const SymShape& xs = *x_shape;
  const bool allowzero = r->attrs.get_int("allowzero", 0) != 0;
  std::vector<ShapeElem> elems;
  const bool traced = trace_shape(r->input(1), &elems, x, x_shape);
  size_t n = 0;
  if (traced) n = elems.size();
  else if (y->shape) n = y->shape->size();
  else return false;
  if (y->shape && y->shape->size() != n) return false;
  if (n <= lead) return false;
  std::vector<bool> keep(n, false), infer(n, false);
  std::vector<int64_t> val(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (y->shape) {
      const Dim& d = (*y->shape)[i];
      if (d.known()) val[i] = d.value;
      if (i < lead && dim_equal(d, xs[i])) keep[i] = true;
    }
    if (traced) {
      const ShapeElem& e = elems[i];
      if (!e.of) {
        if (e.value == 0 && !allowzero) {
          if (i < xs.size() && i < lead) keep[i] = true;
          if (i < xs.size() && xs[i].known()) val[i] = xs[i].value;
        } else if (e.value == -1) {
          infer[i] = true;
        } else if (e.value > 0) {
          val[i] = e.value;
        }
      } else if (const SymShape* os = e.of == x ? &xs : (e.of->shape ? &*e.of->shape : nullptr);
                 os && e.axis >= 0 && static_cast<size_t>(e.axis) < os->size()) {
        const Dim& d = (*os)[static_cast<size_t>(e.axis)];
        if (d.known()) val[i] = d.value;
        if (i < lead && static_cast<size_t>(e.axis) == i && (e.of == x || dim_equal(d, xs[i]))) keep[i] = true;
      }
    }
    if (i < lead && val[i] >= 0 && xs[i].known() && xs[i].value == val[i]) keep[i] = true;
  }
  int64_t in_tail = 1;
  for (size_t i = lead; i < xs.size(); ++i) {
    if (!xs[i].known()) return false;
    in_tail *= xs[i].value;
  }
  int unresolved = -1, count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i < lead ? !keep[i] : val[i] < 0) {
      unresolved = static_cast<int>(i);
      ++count;
    }
  }
  int64_t other_tail = 1;
  for (size_t i = lead; i < n; ++i) {
    if (static_cast<int>(i) != unresolved) other_tail *= val[i];
  }
  if (count > 1) return false;
  if (count == 1) {
    // A -1 entry: the element count is preserved, so it resolves when all else is known.
    const size_t u = static_cast<size_t>(unresolved);
    if (!infer[u]) return false;
    if (u < lead) {
      if (other_tail != in_tail || in_tail == 0) return false;
    } else {
      if (other_tail <= 0 || in_tail % other_tail != 0) return false;
      val[u] = in_tail / other_tail;
      other_tail = in_tail;
    }
  }
  if (other_tail != in_tail) return false;
  tail->assign(val.begin() + static_cast<std::ptrdiff_t>(lead), val.end());
  return true;
}

// ---- Q, K and V chains ----

enum Axis { kB, kH, kS, kD };
using Layout = std::array<int, 4>;
constexpr Layout kBHSD = {kB, kH, kS, kD};
constexpr Layout kBSHD = {kB, kS, kH, kD};

std::vector<int64_t> transpose_perm(const Node* t) {
  std::vector<int64_t> perm = t->attrs.get_ints("perm");
  if (perm.empty()) perm = {3, 2, 1, 0};
  return perm;
}

// Where a MatMul operand can come from: a 4-D value (axes `layout4`, [B,H,S,D] unless
// no such value is on the chain, then a Transpose is inserted) and/or a 3-D [B,S,H*D]
// value behind a head-splitting Reshape, each with the scale the skipped Mul/Divs apply.
struct Operand {
  Value* v4 = nullptr;
  Layout layout4{};
  double scale4 = 1.0;
  std::vector<Node*> nodes4;  // absorbed when reading v4
  Value* v3 = nullptr;
  double scale3 = 1.0;
  std::vector<Node*> nodes3;  // absorbed when reading v3
  int64_t heads = 0, head_size = 0;

  // The size of `axis` (kB...) of the 4-D input.
  const Dim& dim4(int axis) const {
    size_t i = 0;
    while (i < 3 && layout4[i] != axis) ++i;
    return (*v4->shape)[i];
  }
};

// Walks from a MatMul operand (axes labelled `layout`) up through single-use Transposes,
// scalar Mul/Div (when allow_scale) and a final head-splitting Reshape. The 4-D input is
// the farthest [B,H,S,D] value, else the farthest 4-D value in another layout.
Operand walk_operand(const Graph& g, const LiveUses& lu, Value* operand, Layout layout, bool allow_scale) {
  Operand r, any;
  Value* cur = operand;
  double scale = 1.0;
  std::vector<Node*> nodes;
  for (int step = 0; step < 16 && cur; ++step) {
    if (cur->shape && cur->shape->size() == 4) {
      Operand& o = layout == kBHSD ? r : any;
      o.v4 = cur;
      o.layout4 = layout;
      o.scale4 = scale;
      o.nodes4 = nodes;
    }
    if (!lu.single(g, cur)) break;
    Node* p = cur->producer();
    if (!p || p->num_outputs() != 1) break;
    if (p->op() == Op::Transpose) {
      const std::vector<int64_t> perm = transpose_perm(p);
      if (perm.size() != 4) break;
      Layout in{};
      std::array<bool, 4> seen{};
      bool ok = true;
      for (size_t a = 0; a < 4; ++a) {
        if (perm[a] < 0 || perm[a] > 3 || seen[static_cast<size_t>(perm[a])]) ok = false;
        if (!ok) break;
        seen[static_cast<size_t>(perm[a])] = true;
        in[static_cast<size_t>(perm[a])] = layout[a];
      }
      if (!ok) break;
      layout = in;
      cur = p->input(0);
    } else if ((p->op() == Op::Mul || p->op() == Op::Div) && allow_scale && p->num_inputs() == 2) {
      double c = 0;
      Value* x = nullptr;
      if (scalar_value(p->input(1), p->input(0), &c)) x = p->input(0);
      else if (p->op() == Op::Mul && scalar_value(p->input(0), p->input(1), &c)) x = p->input(1);
      if (!x || x->dtype != cur->dtype || !std::isfinite(c) || c == 0) break;
      scale = p->op() == Op::Mul ? scale * c : scale / c;
      cur = x;
    } else if (p->op() == Op::Reshape && layout == kBSHD) {
      std::vector<int64_t> tail;
      Value* x = p->input(0);
      if (!x || !x->shape || x->shape->size() != 3 || !reshape_keeps_lead(p, 2, &tail) || tail.size() != 2) break;
      nodes.push_back(p);
      r.v3 = x;
      r.scale3 = scale;
      r.nodes3 = nodes;
      r.heads = tail[0];
      r.head_size = tail[1];
      break;
    } else {
      break;
    }
    nodes.push_back(p);
  }
  if (!r.v4 && any.v4) {
    r.v4 = any.v4;
    r.layout4 = any.layout4;
    r.scale4 = any.scale4;
    r.nodes4 = any.nodes4;
  }
  return r;
}

// The 4-D input in [B,H,S,D], through a new Transpose when the chain has no such value.
Value* bhsd_input(Graph& g, const Operand& o) {
  if (o.layout4 == kBHSD) return o.v4;
  std::vector<int64_t> perm(4);
  SymShape shape(4);
  for (int a = 0; a < 4; ++a) {
    size_t i = 0;
    while (i < 3 && o.layout4[i] != a) ++i;
    perm[static_cast<size_t>(a)] = static_cast<int64_t>(i);
    shape[static_cast<size_t>(a)] = (*o.v4->shape)[i];
  }
  Node* t = g.add_node(Op::Transpose, g.unique_name(o.v4->name() + "_bhsd"), {o.v4}, {g.unique_name(o.v4->name() + "_bhsd")});
  t->onnx_op_type = "Transpose";
  t->attrs.set("perm", perm);
  t->output(0)->dtype = o.v4->dtype;
  t->output(0)->shape = shape;
  return t->output(0);
}

// ---- masks ----

// A mask that the Attention op broadcasts exactly as the Add/Where did: rank <= 4,
// right-aligned against [B, H, Sq, Skv], each dim 1 or equal, and all Skv keys present.
// (`keys_may_broadcast`: a dim of 1 on the key axis is fine too, for other operands.)
bool mask_broadcasts(const Value* m, const std::array<Dim, 4>& target, bool keys_may_broadcast = false) {
  if (!m || !m->shape || m->shape->size() > 4) return false;
  const SymShape& s = *m->shape;
  if (s.empty() && !keys_may_broadcast) return false;
  for (size_t k = 0; k < s.size(); ++k) {
    const size_t axis = 4 - s.size() + k;
    if (axis == 3 && !keys_may_broadcast) {
      if (!dim_equal(s[k], target[3])) return false;
    } else if (!(s[k].known() && s[k].value == 1) && !dim_equal(s[k], target[axis])) {
      return false;
    }
  }
  return true;
}

// A constant [..1.., Sq, Skv] mask that is exactly the top-left causal mask (key j visible
// to query i iff j <= i): true/false for a boolean mask (false/true when Where applies it
// `inverted`), 0/-inf for an additive one.
bool is_causal_constant(const Value* m, const std::array<Dim, 4>& target, bool inverted) {
  if (!m || !m->is_constant() || !target[2].known() || !target[3].known()) return false;
  const Tensor& t = m->constant();
  if (t.rank() < 2 || t.dim(t.rank() - 2) != target[2].value || t.dim(t.rank() - 1) != target[3].value) return false;
  for (int i = 0; i + 2 < t.rank(); ++i) {
    if (t.dim(i) != 1) return false;
  }
  const bool is_bool = t.dtype() == DataType::kBool;
  if (!is_bool && (!is_supported_dtype(t.dtype()) || !is_float(t.dtype()))) return false;
  const int64_t rows = target[2].value, cols = target[3].value;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t k = i * cols + j;
      if (is_bool) {
        if ((t.data<bool>()[k] != inverted) != (j <= i)) return false;
      } else {
        const double x = t.get_double(k);
        if (j <= i ? x != 0.0 : x != -std::numeric_limits<double>::infinity()) return false;
      }
    }
  }
  return true;
}

bool is_zero_constant(const Value* m) {
  if (!m->is_constant() || !is_supported_dtype(m->dtype) || !is_float(m->dtype)) return false;
  const Tensor& t = m->constant();
  for (int64_t i = 0; i < t.size(); ++i) {
    if (t.get_double(i) != 0.0) return false;
  }
  return true;
}

// The score chain between the two MatMuls.
struct Scores {
  double scale = 1.0;
  Value* add_mask = nullptr;
  Value* cond = nullptr;     // Where condition
  bool cond_inverted = false;  // Where(cond, fill, s): cond marks the masked keys
  Node* softmax = nullptr;
  std::vector<Node*> nodes;  // Mul/Div/Add/Where/Softmax
};

bool walk_scores(const Graph& g, const LiveUses& lu, Value* s, Scores* out) {
  Value* cur = s;
  for (int step = 0; step < 8; ++step) {
    if (!lu.single(g, cur)) return false;
    const Use use = lu.only_use(cur);
    Node* u = use.node;
    if (u->num_outputs() != 1 || !u->output(0)) return false;
    const bool masked = out->add_mask || out->cond;
    double c = 0;
    if (u->op() == Op::Softmax) {
      out->softmax = u;
      out->nodes.push_back(u);
      return true;
    } else if (u->op() == Op::Mul && !masked && u->num_inputs() == 2 &&
               scalar_value(u->input(1 - use.input_index), cur, &c) && std::isfinite(c)) {
      out->scale *= c;
    } else if (u->op() == Op::Div && !masked && u->num_inputs() == 2 && use.input_index == 0 &&
               scalar_value(u->input(1), cur, &c) && std::isfinite(c) && c != 0) {
      out->scale /= c;
    } else if (u->op() == Op::Add && !out->add_mask && u->num_inputs() == 2) {
      Value* m = u->input(1 - use.input_index);
      if (!m || m == cur || m->dtype != cur->dtype) return false;
      out->add_mask = m;
    } else if (u->op() == Op::Where && !out->cond && (use.input_index == 1 || use.input_index == 2)) {
      Value* fill = u->input(use.input_index == 1 ? 2 : 1);
      Value* cond = u->input(0);
      if (!fill || fill == cur || !cond || cond == cur || cond->dtype != DataType::kBool) return false;
      if (!scalar_value(fill, cur, &c) || !(c <= -1e4)) return false;
      out->cond = cond;
      out->cond_inverted = use.input_index == 2;
    } else {
      return false;
    }
    out->nodes.push_back(u);
    cur = u->output(0);
  }
  return false;
}

// ReduceMax(x) over x's last axis, keeping dims; its input or nullptr.
const Value* row_max_of(const Node* r) {
  if (!r || r->op() != Op::ReduceMax || r->attrs.get_int("keepdims", 1) != 1 || !r->input(0)) return nullptr;
  std::vector<int64_t> axes;
  if (r->input(1)) {
    if (!r->input(1)->is_constant()) return nullptr;
    axes = r->input(1)->constant().to_int_vector();
  } else {
    axes = r->attrs.get_ints("axes");
  }
  const Value* x = r->input(0);
  if (axes.size() != 1) return nullptr;
  if (axes[0] == -1) return x;
  return x->shape && axes[0] == static_cast<int64_t>(x->shape->size()) - 1 ? x : nullptr;
}

// Where(rows_all_masked, 0, probs), the ONNX Attention function body's guard that zeroes
// the rows whose mask is all -inf, as the op does itself: rows_all_masked is either a
// constant that flags no row, or Equal(ReduceMax(mask, last axis), -inf) over the additive
// mask the scores received. (Rows that only the causal mask empties come out of the
// original as NaN and of the op as zeros.) Returns the Where node; `extra` gets the
// condition's nodes.
Node* masked_row_guard(const Use& use, const Scores& sc, std::vector<Node*>* extra) {
  Node* w = use.node;
  if (w->op() != Op::Where || use.input_index != 2 || w->num_outputs() != 1 || !w->output(0)) return nullptr;
  const Value* cond = w->input(0);
  const Value* probs = w->input(2);
  double zero = 1;
  if (!cond || cond->dtype != DataType::kBool) return nullptr;
  if (!scalar_value(w->input(1), probs, &zero) || zero != 0.0) return nullptr;
  if (cond->is_constant()) {
    const Tensor& c = cond->constant();
    for (int64_t i = 0; i < c.size(); ++i) {
      if (c.data<bool>()[i]) return nullptr;
    }
    return w;
  }
  Node* eq = cond->producer();
  if (!sc.add_mask || !eq || eq->op() != Op::Equal || eq->num_inputs() != 2) return nullptr;
  for (int side = 0; side < 2; ++side) {
    Value* m = eq->input(static_cast<size_t>(side));
    Value* c = eq->input(static_cast<size_t>(1 - side));
    double v = 0;
    if (!m || !c || !scalar_value(c, m, &v) || v != -std::numeric_limits<double>::infinity()) continue;
    if (row_max_of(m->producer()) != sc.add_mask) continue;
    extra->push_back(eq);
    extra->push_back(m->producer());
    return w;
  }
  return nullptr;
}

bool softmax_over_last_axis(const Node* sm) {
  const int64_t axis = sm->attrs.get_int("axis", -1);
  return axis == -1 || axis == 3;
}

// Whether v flows only into input 1 (the target shape) of Reshape `r` through shape
// arithmetic; collects those nodes.
bool feeds_only_target(const Graph& g, const LiveUses& lu, const Value* v, const Node* r, std::vector<Node*>* nodes,
                       int depth = 0) {
  if (!v || g.is_graph_output(v) || depth > 8) return false;
  const std::vector<Use> uses = lu.of(v);
  if (uses.empty()) return false;
  for (const Use& u : uses) {
    if (u.node == r && u.input_index == 1) continue;
    const Op op = u.node->op();
    if (op != Op::Gather && op != Op::Slice && op != Op::Unsqueeze && op != Op::Squeeze && op != Op::Concat &&
        op != Op::Cast) {
      return false;
    }
    if (u.node->num_outputs() != 1 || !feeds_only_target(g, lu, u.node->output(0), r, nodes, depth + 1)) return false;
    nodes->push_back(u.node);
  }
  return true;
}

// The head-merging tail o -> Transpose(0,2,1,3) -> Reshape([B,S,H*D]) where the
// Transpose's output is [B,S,H,D] = `merged_in`; its final Reshape node, or nullptr.
// Exporters compute the Reshape's target from Shape(Transpose output) (torch's
// x.size()[:-2] + (H*D,)): such Shape nodes may read the Transpose too.
Node* merge_heads_tail(const Graph& g, const LiveUses& lu, Value* o, const SymShape& merged_in,
                       std::vector<Node*>* nodes) {
  if (!lu.single(g, o)) return nullptr;
  Node* t = lu.only_use(o).node;
  if (t->op() != Op::Transpose || transpose_perm(t) != std::vector<int64_t>{0, 2, 1, 3} || !t->output(0)) return nullptr;
  Value* tv = t->output(0);
  if (g.is_graph_output(tv)) return nullptr;
  Node* r = nullptr;
  const std::vector<Use> tv_uses = lu.of(tv);
  for (const Use& u : tv_uses) {
    if (u.node->op() == Op::Reshape && u.input_index == 0) {
      if (r) return nullptr;
      r = u.node;
    }
  }
  if (!r || !r->output(0)) return nullptr;
  std::vector<Node*> shape_nodes;
  for (const Use& u : tv_uses) {
    if (u.node == r) continue;
    if (u.node->op() != Op::Shape || !feeds_only_target(g, lu, u.node->output(0), r, &shape_nodes)) return nullptr;
    shape_nodes.push_back(u.node);
  }
  const std::optional<SymShape>& ts = tv->shape;
  if (ts && ts->size() != 4) return nullptr;
  std::vector<int64_t> tail;
  if (!reshape_keeps_lead(r, 2, &tail, &merged_in) || tail.size() != 1 ||
      tail[0] != merged_in[2].value * merged_in[3].value) {
    return nullptr;
  }
  nodes->push_back(t);
  nodes->insert(nodes->end(), shape_nodes.begin(), shape_nodes.end());
  nodes->push_back(r);
  return r;
}

bool float_dtype(DataType dt) { return is_supported_dtype(dt) && is_float(dt); }

// The Attention op reads the whole bool/additive mask tensor; a constant bool mask that
// Where applies inverted is inverted here, a computed one through a Not node.
Value* positive_mask(Graph& g, Value* cond, bool inverted, const std::string& base) {
  if (!inverted) return cond;
  if (cond->is_constant()) {
    Tensor t = cond->constant().clone();
    for (int64_t i = 0; i < t.size(); ++i) t.data<bool>()[i] = !t.data<bool>()[i];
    Value* c = g.add_constant(g.unique_name(cond->name() + "_inverted"), std::move(t));
    c->dtype = DataType::kBool;
    c->shape = cond->shape;
    return c;
  }
  Node* n = g.add_node(Op::Not, g.unique_name(base + "_mask_not"), {cond}, {g.unique_name(cond->name() + "_not")});
  n->onnx_op_type = "Not";
  n->output(0)->dtype = DataType::kBool;
  n->output(0)->shape = cond->shape;
  return n->output(0);
}

}  // namespace

Status fuse_attention_pattern(Graph& g, PassContext& ctx) {
  LiveUses lu(g);
  std::vector<Node*> absorbed;
  bool changed = false;
  for (Node* qk : g.nodes()) {
    if (qk->op() != Op::MatMul || qk->num_inputs() != 2 || qk->num_outputs() != 1 || !qk->output(0)) continue;
    const DataType dt = qk->output(0)->dtype;
    if (!float_dtype(dt)) continue;
    Scores sc;
    if (!walk_scores(g, lu, qk->output(0), &sc) || !softmax_over_last_axis(sc.softmax)) continue;
    // The probabilities feed the ·V MatMul, possibly through the masked-row guard (whose
    // zero the function body makes with CastLike(0, probs): a use for the dtype only).
    Value* p = sc.softmax->output(0);
    if (g.is_graph_output(p)) continue;
    std::vector<Use> main_uses;
    std::vector<Node*> dtype_uses;
    for (const Use& u : lu.of(p)) {
      if (u.node->op() == Op::Cast && u.input_index == 1) dtype_uses.push_back(u.node);
      else main_uses.push_back(u);
    }
    if (main_uses.size() != 1) continue;
    std::vector<Node*> guard_nodes;
    Node* guard = masked_row_guard(main_uses[0], sc, &guard_nodes);
    bool dtype_uses_ok = true;
    for (Node* c : dtype_uses) {
      const std::vector<Use> cu = lu.of(c->output(0));
      dtype_uses_ok = dtype_uses_ok && guard && !g.is_graph_output(c->output(0)) && cu.size() == 1 &&
                      cu[0].node == guard && cu[0].input_index == 1;
    }
    if (!dtype_uses_ok) continue;
    if (guard) {
      sc.nodes.push_back(guard);
      sc.nodes.insert(sc.nodes.end(), dtype_uses.begin(), dtype_uses.end());
      sc.nodes.insert(sc.nodes.end(), guard_nodes.begin(), guard_nodes.end());
      p = guard->output(0);
      if (!lu.single(g, p)) continue;
    }
    Node* pv = lu.only_use(p).node;
    if (pv->op() != Op::MatMul || pv->num_inputs() != 2 || pv->input(0) != p || pv->input(1) == p ||
        pv->num_outputs() != 1 || !pv->output(0)) {
      continue;
    }
    const Operand q = walk_operand(g, lu, qk->input(0), kBHSD, true);
    const Operand k = walk_operand(g, lu, qk->input(1), {kB, kH, kD, kS}, true);
    const Operand v = walk_operand(g, lu, pv->input(1), kBHSD, false);

    // The 3-D form needs all three head splits with one head count and the merging tail.
    std::vector<Node*> tail_nodes;
    Node* tail = nullptr;
    bool form3 = q.v3 && k.v3 && v.v3 && q.heads > 0 && q.heads == k.heads && q.heads == v.heads &&
                 q.head_size == k.head_size && dim_equal((*q.v3->shape)[0], (*k.v3->shape)[0]) &&
                 dim_equal((*q.v3->shape)[0], (*v.v3->shape)[0]);
    if (form3) {
      const SymShape merged_in = {(*q.v3->shape)[0], (*q.v3->shape)[1], known_dim(q.heads), known_dim(v.head_size)};
      tail = merge_heads_tail(g, lu, pv->output(0), merged_in, &tail_nodes);
      form3 = tail != nullptr;
    }
    Value *qin = nullptr, *kin = nullptr, *vin = nullptr;
    double scale = sc.scale;
    std::array<Dim, 4> target;  // [B, H, Sq, Skv]
    if (form3) {
      qin = q.v3;
      kin = k.v3;
      vin = v.v3;
      scale *= q.scale3 * k.scale3;
      target = {(*qin->shape)[0], known_dim(q.heads), (*qin->shape)[1], (*kin->shape)[1]};
    } else {
      if (!q.v4 || !k.v4 || !v.v4) continue;
      // The MatMuls would broadcast a batch or head dim of 1; the op would not.
      if (!dim_equal(q.dim4(kB), k.dim4(kB)) || !dim_equal(q.dim4(kB), v.dim4(kB)) ||
          !dim_equal(q.dim4(kH), k.dim4(kH)) || !dim_equal(q.dim4(kH), v.dim4(kH))) {
        continue;
      }
      qin = q.v4;
      kin = k.v4;
      vin = v.v4;
      scale *= q.scale4 * k.scale4;
      target = {q.dim4(kB), q.dim4(kH), q.dim4(kS), k.dim4(kS)};
    }
    if (qin->dtype != dt || kin->dtype != dt || vin->dtype != dt) continue;
    // A constant guard condition must not broadcast the probabilities to a larger shape
    // (a computed one is shaped like the mask, checked below).
    if (guard && guard->input(0)->is_constant() && !mask_broadcasts(guard->input(0), target, true)) continue;
    if (!std::isfinite(scale) || scale <= 0) continue;

    // Masks: a causal constant becomes is_causal; at most one other mask is passed on.
    bool causal = false;
    Value* mask = nullptr;
    bool mask_inverted = false;
    bool ok = true;
    if (sc.cond) {
      if (!mask_broadcasts(sc.cond, target)) continue;
      causal = is_causal_constant(sc.cond, target, sc.cond_inverted);
      if (!causal) {
        mask = sc.cond;
        mask_inverted = sc.cond_inverted;
      }
    }
    if (sc.add_mask && is_zero_constant(sc.add_mask)) {
      // A no-op bias (the ONNX function body adds one when there is no mask).
      if (!mask_broadcasts(sc.add_mask, target, true)) continue;
    } else if (sc.add_mask) {
      if (!mask_broadcasts(sc.add_mask, target)) continue;
      if (!causal && is_causal_constant(sc.add_mask, target, false)) {
        causal = true;
      } else if (mask) {
        ok = false;  // two masks that are not causal: the op takes one attn_mask
      } else {
        mask = sc.add_mask;
      }
    }
    if (!ok) continue;

    // The fused node takes over the name of the last matched value (graph outputs keep
    // their names); the matched nodes are removed after the loop.
    Value* out = form3 ? tail->output(0) : pv->output(0);
    const std::string base = qk->name().empty() ? std::string("attention") : qk->name() + "_attention";
    if (mask) mask = positive_mask(g, mask, mask_inverted, base);
    if (!form3) {
      qin = bhsd_input(g, q);
      kin = bhsd_input(g, k);
      vin = bhsd_input(g, v);
    }
    const std::string name = out->name();
    g.rename_value(out, g.unique_name(name + "_unfused"));
    std::vector<Value*> inputs = {qin, kin, vin};
    if (mask) inputs.push_back(mask);
    Node* att = g.add_node(Op::Attention, g.unique_name(base), inputs, {name});
    const int64_t heads = form3 ? q.heads : (target[1].known() ? target[1].value : 0);
    if (heads > 0) {
      att->attrs.set("q_num_heads", heads);
      att->attrs.set("kv_num_heads", heads);
    }
    att->attrs.set("scale", static_cast<float>(scale));
    att->attrs.set("is_causal", int64_t{causal ? 1 : 0});
    lu.add(att);
    for (const Value* in : att->inputs()) {
      if (in->producer()) lu.add(in->producer());  // the Transposes/Not just added too
    }
    att->output(0)->dtype = out->dtype;
    att->output(0)->shape = out->shape;
    g.replace_all_uses_with(out, att->output(0));
    ctx.rewrote(cat("fused ", form3 ? "3-D" : "4-D", " attention (", heads, " heads, scale ", scale,
                    causal ? ", causal" : "", mask ? ", mask" : "", ") into ", att->describe()));
    changed = true;
    // Consumers first, so each node is unused when its turn comes.
    absorbed.insert(absorbed.end(), tail_nodes.rbegin(), tail_nodes.rend());
    absorbed.push_back(pv);
    absorbed.insert(absorbed.end(), sc.nodes.rbegin(), sc.nodes.rend());
    absorbed.push_back(qk);
    for (const Operand* o : {&q, &k, &v}) {
      const std::vector<Node*>& ns = form3 ? o->nodes3 : o->nodes4;
      absorbed.insert(absorbed.end(), ns.begin(), ns.end());
    }
  }
  // Remove the absorbed nodes now, so the passes after this one in the same round see
  // true use counts (the shape arithmetic behind the split Reshapes is left to dead-code
  // elimination). Repeated until nothing more goes: a node is removed once it is unused.
  std::unordered_set<Node*> removed;
  for (bool progress = true; progress;) {
    progress = false;
    for (Node* n : absorbed) {
      if (removed.count(n)) continue;
      bool used = false;
      for (Value* o : n->outputs()) used = used || (o && (!o->uses().empty() || g.is_graph_output(o)));
      if (used) continue;
      removed.insert(n);
      g.remove_node(n);
      progress = true;
    }
  }
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln
