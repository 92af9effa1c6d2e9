// Removes nodes that compute their input unchanged: Identity, inference Dropout, Cast
// to the same type, x*1, x/1, x+0, x-0, Transpose pairs that cancel, and shape ops that
// provably keep their input (identity Transpose, Expand/Reshape/Flatten keeping the shape,
// zero Pad, whole-range Slice, Concat of one input, Split into one piece, Tile by ones,
// one-input Max/Min/Sum/Mean).
#include <algorithm>
#include <limits>
#include <optional>

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

// A constant 0-D/1-D integer input, or nullopt (absent inputs too).
std::optional<std::vector<int64_t>> const_ints(const Value* v) {
  if (!v || !v->is_constant()) return std::nullopt;
  const Tensor& t = v->constant();
  if (!t.defined() || t.is_sequence() || t.is_none() || !is_integer(t.dtype()) || t.rank() > 1) return std::nullopt;
  return t.to_int_vector();
}

// The input's rank when its shape is known (dims may be symbolic), else -1.
int64_t rank_of(const Value* x) { return x && x->shape ? static_cast<int64_t>(x->shape->size()) : -1; }

// Normalizes axis a against rank r; -1 when out of range.
int64_t norm_axis(int64_t a, int64_t r) {
  if (a < 0) a += r;
  return (a >= 0 && a < r) ? a : -1;
}

// Expand to a constant shape that broadcasts into x without growing it: no more dims than
// x, and each dim 1 or equal to x's known dim (so symbolic dims of x may stay symbolic).
bool expand_keeps_shape(const Node& n) {
  auto target = const_ints(n.input(1));
  const Value* x = n.input(0);
  const int64_t r = rank_of(x);
  if (!target || r < 0 || static_cast<int64_t>(target->size()) > r) return false;
  const size_t off = static_cast<size_t>(r) - target->size();
  for (size_t i = 0; i < target->size(); ++i) {
    const Dim& d = (*x->shape)[off + i];
    if ((*target)[i] != 1 && !(d.known() && d.value == (*target)[i])) return false;
  }
  return true;
}

// Reshape whose target keeps every dim: 0 (copy, allowzero=0) or x's known size; a single
// -1 is allowed where x's dim is known and every other entry is a positive literal equal
// to x's dim (then -1 can only resolve to x's dim).
bool reshape_keeps_shape(const Node& n) {
  auto target = const_ints(n.input(1));
  const Value* x = n.input(0);
  const int64_t r = rank_of(x);
  if (!target || r < 0 || static_cast<int64_t>(target->size()) != r) return false;
  const bool allowzero = n.attrs.get_int("allowzero", 0) != 0;
  int minus_one = -1;
  bool all_literal = true;
  for (size_t i = 0; i < target->size(); ++i) {
    const int64_t t = (*target)[i];
    const Dim& d = (*x->shape)[i];
    if (t == 0 && !allowzero) {
      all_literal = false;
    } else if (t == -1 && minus_one < 0 && d.known()) {
      minus_one = static_cast<int>(i);
    } else if (!(t > 0 && d.known() && d.value == t)) {
      return false;
    }
  }
  return minus_one < 0 || all_literal;
}

// Pad with constant pads that are all zero (any mode: nothing is added or cropped).
bool pad_is_zero(const Node& n) {
  auto pads = const_ints(n.input(1));
  if (!pads || pads->empty()) return false;
  size_t axes = 0;
  if (n.input(3)) {
    auto a = const_ints(n.input(3));
    if (!a) return false;
    axes = a->size();
  } else {
    if (rank_of(n.input(0)) < 0) return false;
    axes = static_cast<size_t>(rank_of(n.input(0)));
  }
  if (pads->size() != 2 * axes) return false;
  for (int64_t p : *pads) if (p != 0) return false;
  return true;
}

// Slice that provably keeps every element: step 1 on each sliced axis, start clamping to 0
// and end clamping to the axis size (a symbolic axis needs start 0 and an "until the end"
// end, the same rule shape inference applies).
bool slice_keeps_all(const Node& n) {
  const Value* x = n.input(0);
  const int64_t r = rank_of(x);
  auto starts = const_ints(n.input(1));
  auto ends = const_ints(n.input(2));
  if (r < 0 || !starts || !ends || starts->size() != ends->size()) return false;
  const size_t k = starts->size();
  std::vector<int64_t> axes;
  if (n.input(3)) {
    auto a = const_ints(n.input(3));
    if (!a || a->size() != k) return false;
    axes = *a;
  } else {
    if (static_cast<int64_t>(k) > r) return false;
    for (size_t i = 0; i < k; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  std::vector<int64_t> steps(k, 1);
  if (n.input(4)) {
    auto s = const_ints(n.input(4));
    if (!s || s->size() != k) return false;
    steps = *s;
  }
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (size_t i = 0; i < k; ++i) {
    const int64_t a = norm_axis(axes[i], r);
    if (a < 0 || seen[static_cast<size_t>(a)] || steps[i] != 1) return false;
    seen[static_cast<size_t>(a)] = true;
    const Dim& d = (*x->shape)[static_cast<size_t>(a)];
    int64_t s = (*starts)[i], e = (*ends)[i];
    if (!d.known()) {
      if (s != 0 || e < std::numeric_limits<int32_t>::max()) return false;
      continue;
    }
    if (s < 0) s += d.value;
    if (e < 0) e += d.value;
    if (std::clamp<int64_t>(s, 0, d.value) != 0 || std::clamp<int64_t>(e, 0, d.value) != d.value) return false;
  }
  return true;
}

// Split into a single piece: the whole axis (no sizes, or one size equal to the known dim).
bool split_is_whole(const Node& n) {
  const Value* x = n.input(0);
  const int64_t r = rank_of(x);
  if (n.num_outputs() != 1 || r <= 0) return false;
  const int64_t a = norm_axis(n.attrs.get_int("axis", 0), r);
  if (a < 0 || n.attrs.get_int("num_outputs", 1) != 1) return false;
  if (!n.input(1)) return true;
  auto sizes = const_ints(n.input(1));
  if (!sizes) return false;
  if (sizes->empty()) return true;
  const Dim& d = (*x->shape)[static_cast<size_t>(a)];
  return sizes->size() == 1 && d.known() && (*sizes)[0] == d.value;
}

// Tile with every repeat 1.
bool tile_is_one(const Node& n) {
  auto reps = const_ints(n.input(1));
  if (!reps || static_cast<int64_t>(reps->size()) != rank_of(n.input(0))) return false;
  for (int64_t v : *reps) if (v != 1) return false;
  return true;
}

// A single Transpose whose perm (given, or the default reversal) leaves the order as is.
bool transpose_is_identity(const Node& n) {
  const int64_t r = rank_of(n.input(0));
  if (r < 0) return false;
  if (!n.attrs.has("perm")) return r <= 1;
  auto p = n.attrs.get_ints("perm");
  return static_cast<int64_t>(p.size()) == r && is_identity_perm(p);
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
        } else if (x && n->num_inputs() == 2 && n->input(1) && x->dtype != DataType::kUndefined &&
                   n->input(1)->dtype == x->dtype) {
          removed = bypass(g, y, x);  // CastLike to a tensor of x's own type
        }
        break;
      case Op::Expand:
        if (expand_keeps_shape(*n)) removed = bypass(g, y, x);
        break;
      case Op::Reshape:
        if (reshape_keeps_shape(*n)) removed = bypass(g, y, x);
        break;
      case Op::Flatten:
        // Flatten(axis 1) of a 2-D tensor is [d0, d1] again.
        if (rank_of(x) == 2 && norm_axis(n->attrs.get_int("axis", 1), 2) == 1) removed = bypass(g, y, x);
        break;
      case Op::Pad:
        if (pad_is_zero(*n)) removed = bypass(g, y, x);
        break;
      case Op::Slice:
        if (slice_keeps_all(*n)) removed = bypass(g, y, x);
        break;
      case Op::Concat:
        if (n->num_inputs() == 1 && rank_of(x) > 0 && norm_axis(n->attrs.get_int("axis", 0), rank_of(x)) >= 0)
          removed = bypass(g, y, x);
        break;
      case Op::Split:
        if (split_is_whole(*n)) removed = bypass(g, y, x);
        break;
      case Op::Tile:
        if (tile_is_one(*n)) removed = bypass(g, y, x);
        break;
      case Op::Max:
      case Op::Min:
      case Op::Sum:
      case Op::Mean:
        if (n->num_inputs() == 1) removed = bypass(g, y, x);
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
        if (transpose_is_identity(*n)) {
          removed = bypass(g, y, x);
          break;
        }
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
