#include "ir/shape_value.h"

#include <algorithm>
#include <unordered_map>

namespace kiln {

Dim ShapeElem::as_dim() const {
  if (kind == Kind::kInt) return value >= 0 ? Dim{value, ""} : Dim{};
  if (kind == Kind::kDim) return Dim{-1, symbol};
  return Dim{};
}

bool ShapeValue::all_known() const {
  return std::all_of(elems.begin(), elems.end(), [](const ShapeElem& e) { return e.is_int(); });
}

std::vector<int64_t> ShapeValue::ints() const {
  std::vector<int64_t> v;
  for (const ShapeElem& e : elems) v.push_back(e.value);
  return v;
}

namespace {

using Elem = ShapeElem;
using Kind = ShapeElem::Kind;

constexpr size_t kMaxElems = 64;  // shape tensors are short; anything longer is data
constexpr int kMaxDepth = 24;

bool same_symbol(const Elem& a, const Elem& b) {
  return a.kind == Kind::kDim && b.kind == Kind::kDim && !a.symbol.empty() && a.symbol == b.symbol;
}

// Numpy broadcasting of two shape values of at most one axis: equal lengths, or one side
// of one element. Calls f(a_i, b_i) per output element.
template <typename F>
std::optional<ShapeValue> broadcast(const ShapeValue& a, const ShapeValue& b, F f) {
  const size_t na = a.elems.size(), nb = b.elems.size();
  if (na != nb && na != 1 && nb != 1) return std::nullopt;
  ShapeValue out;
  out.scalar = a.scalar && b.scalar;
  const size_t n = na == 1 ? nb : na;
  for (size_t i = 0; i < n; ++i) out.elems.push_back(f(a.elems[na == 1 ? 0 : i], b.elems[nb == 1 ? 0 : i]));
  return out;
}

Elem arith(Op op, const Elem& a, const Elem& b) {
  if (a.is_int() && b.is_int()) {
    const int64_t x = a.value, y = b.value;
    int64_t r = 0;
    switch (op) {
      case Op::Add: return __builtin_add_overflow(x, y, &r) ? Elem::unknown() : Elem::of_int(r);
      case Op::Sub: return __builtin_sub_overflow(x, y, &r) ? Elem::unknown() : Elem::of_int(r);
      case Op::Mul: return __builtin_mul_overflow(x, y, &r) ? Elem::unknown() : Elem::of_int(r);
      // Integer Div truncates; on non-negative operands that is also the floor.
      case Op::Div: return x >= 0 && y > 0 ? Elem::of_int(x / y) : Elem::unknown();
      default: return Elem::unknown();
    }
  }
  // The identities keep a symbolic dim: d + 0, d - 0, d * 1, d / 1 (and 0 + d, 1 * d).
  if (!a.is_int() && !b.is_int()) return Elem::unknown();
  const bool b_is = b.is_int();
  const int64_t k = b_is ? b.value : a.value;
  const Elem& other = b_is ? a : b;
  if ((op == Op::Add && k == 0) || (op == Op::Mul && k == 1)) return other;
  if ((op == Op::Sub || op == Op::Div) && b_is && k == (op == Op::Sub ? 0 : 1)) return a;
  return Elem::unknown();
}

// Equal as 0/1: decided for two known integers, for a dim against a negative integer
// (a dim never is negative), and for two dims of one symbol.
Elem equal(const Elem& a, const Elem& b) {
  if (a.is_int() && b.is_int()) return Elem::of_int(a.value == b.value ? 1 : 0);
  if ((a.kind == Kind::kDim && b.is_int() && b.value < 0) || (b.kind == Kind::kDim && a.is_int() && a.value < 0))
    return Elem::of_int(0);
  if (same_symbol(a, b)) return Elem::of_int(1);
  return Elem::unknown();
}

// Integer constant axes of a node input (0-D or 1-D), or nullopt.
std::optional<std::vector<int64_t>> const_ints(const Value* v) {
  if (!v || !v->is_constant()) return std::nullopt;
  const Tensor& t = v->constant();
  if (!t.defined() || t.is_sequence() || t.is_none() || t.rank() > 1 || !is_integer(t.dtype())) return std::nullopt;
  return t.to_int_vector();
}

class Evaluator {
 public:
  std::optional<ShapeValue> eval(const Value* v, int depth) {
    if (!v || depth > kMaxDepth || v->is_sequence || v->is_optional) return std::nullopt;
    if (auto it = memo_.find(v); it != memo_.end()) return it->second;
    std::optional<ShapeValue> r = compute(v, depth);
    if (r && r->elems.size() > kMaxElems) r.reset();
    memo_[v] = r;
    return r;
  }

 private:
  std::optional<ShapeValue> compute(const Value* v, int depth) {
    if (v->is_constant()) {
      const Tensor& t = v->constant();
      if (!t.defined() || t.is_sequence() || t.is_none() || t.rank() > 1 || t.size() > static_cast<int64_t>(kMaxElems))
        return std::nullopt;
      if (!is_integer(t.dtype()) && t.dtype() != DataType::kBool) return std::nullopt;
      ShapeValue s;
      s.scalar = t.rank() == 0;
      for (int64_t x : t.to_int_vector()) s.elems.push_back(Elem::of_int(x));
      return s;
    }
    const Node* p = v->producer();
    if (!p || p->num_outputs() != 1 || !p->subgraphs().empty()) return std::nullopt;
    auto in = [&](size_t i) { return eval(p->input(i), depth + 1); };
    switch (p->op()) {
      case Op::Shape: {
        const Value* x = p->input(0);
        if (!x || !x->shape || x->is_sequence || x->is_optional) return std::nullopt;
        const int64_t r = static_cast<int64_t>(x->shape->size());
        auto clamp = [r](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + r : a, 0, r); };
        const int64_t start = clamp(p->attrs.get_int("start", 0));
        const int64_t end = p->attrs.has("end") ? clamp(p->attrs.get_int("end", r)) : r;
        ShapeValue s;
        for (int64_t i = start; i < end; ++i) s.elems.push_back(Elem::of_dim((*x->shape)[static_cast<size_t>(i)]));
        return s;
      }
      case Op::Identity:
        return in(0);
      case Op::Cast: {
        // Between integer types only (values that fit, as shapes do).
        const DataType to = p->input(1) ? p->input(1)->dtype : static_cast<DataType>(p->attrs.get_int("to", 0));
        if (!is_integer(to)) return std::nullopt;
        auto x = in(0);
        if (!x || !p->input(0) || !is_integer(p->input(0)->dtype)) return std::nullopt;
        return x;
      }
      case Op::Gather: {
        auto x = in(0);
        auto idx = const_ints(p->input(1));
        if (!x || x->scalar || !idx || p->attrs.get_int("axis", 0) != 0) return std::nullopt;
        const int64_t n = static_cast<int64_t>(x->elems.size());
        ShapeValue s;
        s.scalar = p->input(1)->constant().rank() == 0;
        for (int64_t i : *idx) {
          if (i < 0) i += n;
          if (i < 0 || i >= n) return std::nullopt;
          s.elems.push_back(x->elems[static_cast<size_t>(i)]);
        }
        return s;
      }
      case Op::Unsqueeze: {
        // 0-D -> [1] only: the one case that keeps the value a shape tensor.
        auto x = in(0);
        auto axes = const_ints(p->input(1));
        if (!x || !x->scalar || !axes || axes->size() != 1 || ((*axes)[0] != 0 && (*axes)[0] != -1)) return std::nullopt;
        x->scalar = false;
        return x;
      }
      case Op::Squeeze: {
        auto x = in(0);
        if (!x || x->scalar || x->elems.size() != 1) return std::nullopt;
        if (p->input(1)) {
          auto axes = const_ints(p->input(1));
          if (!axes || axes->size() != 1 || ((*axes)[0] != 0 && (*axes)[0] != -1)) return std::nullopt;
        }
        x->scalar = true;
        return x;
      }
      case Op::Concat: {
        const int64_t axis = p->attrs.get_int("axis", 0);
        if (axis != 0 && axis != -1) return std::nullopt;
        ShapeValue s;
        for (size_t i = 0; i < p->num_inputs(); ++i) {
          auto x = in(i);
          if (!x || x->scalar) return std::nullopt;
          s.elems.insert(s.elems.end(), x->elems.begin(), x->elems.end());
        }
        return s;
      }
      case Op::Slice: {
        auto x = in(0);
        if (!x || x->scalar) return std::nullopt;
        auto starts = const_ints(p->input(1)), ends = const_ints(p->input(2));
        if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
        if (p->input(3)) {
          auto axes = const_ints(p->input(3));
          if (!axes || axes->size() != 1 || ((*axes)[0] != 0 && (*axes)[0] != -1)) return std::nullopt;
        }
        int64_t step = 1;
        if (p->input(4)) {
          auto steps = const_ints(p->input(4));
          if (!steps || steps->size() != 1 || (*steps)[0] == 0) return std::nullopt;
          step = (*steps)[0];
        }
        const int64_t n = static_cast<int64_t>(x->elems.size());
        int64_t s = (*starts)[0], e = (*ends)[0];
        if (s < 0) s += n;
        if (e < 0) e += n;
        ShapeValue out;
        if (step > 0) {
          s = std::clamp<int64_t>(s, 0, n);
          e = std::clamp<int64_t>(e, 0, n);
          for (int64_t i = s; i < e; i += step) out.elems.push_back(x->elems[static_cast<size_t>(i)]);
        } else {
          s = std::clamp<int64_t>(s, 0, n - 1);
          e = std::clamp<int64_t>(e, -1, n - 1);
          for (int64_t i = s; i > e; i += step) out.elems.push_back(x->elems[static_cast<size_t>(i)]);
        }
        return out;
      }
      case Op::Reshape: {
        // Between 0-D and 1-D views of the same elements: target [] (one element), [n] or [-1].
        auto x = in(0);
        auto t = const_ints(p->input(1));
        if (!x || !t || t->size() > 1) return std::nullopt;
        const int64_t n = static_cast<int64_t>(x->elems.size());
        if (t->empty()) {
          if (n != 1) return std::nullopt;
          x->scalar = true;
        } else {
          const int64_t d = (*t)[0];
          if (!(d == n || d == -1 || (d == 0 && !x->scalar && p->attrs.get_int("allowzero", 0) == 0)))
            return std::nullopt;
          x->scalar = false;
        }
        return x;
      }
      case Op::ConstantOfShape: {
        auto shape = in(0);
        const Tensor* value = p->attrs.get_tensor("value");
        if (!shape || shape->scalar || shape->elems.size() > 1 || !value || value->size() != 1 ||
            !is_integer(value->dtype()))
          return std::nullopt;
        ShapeValue s;
        if (shape->elems.empty()) {
          s.scalar = true;
          s.elems.push_back(Elem::of_int(value->get_int(0)));
          return s;
        }
        if (!shape->elems[0].is_int() || shape->elems[0].value < 0 ||
            shape->elems[0].value > static_cast<int64_t>(kMaxElems))
          return std::nullopt;
        s.elems.assign(static_cast<size_t>(shape->elems[0].value), Elem::of_int(value->get_int(0)));
        return s;
      }
      case Op::Add:
      case Op::Sub:
      case Op::Mul:
      case Op::Div: {
        if (!p->output(0) || !is_integer(p->output(0)->dtype)) return std::nullopt;
        auto a = in(0), b = in(1);
        if (!a || !b) return std::nullopt;
        const Op op = p->op();
        return broadcast(*a, *b, [op](const Elem& x, const Elem& y) { return arith(op, x, y); });
      }
      case Op::Equal: {
        auto a = in(0), b = in(1);
        if (!a || !b) return std::nullopt;
        return broadcast(*a, *b, equal);
      }
      case Op::Where: {
        auto c = in(0), a = in(1), b = in(2);
        if (!c || !a || !b) return std::nullopt;
        // Index-wise cond_i ? a_i : b_i, each operand of one element or of the output's length.
        size_t n = 1;
        for (const ShapeValue* x : {&*c, &*a, &*b}) {
          const size_t k = x->elems.size();
          if (k == 1) continue;
          if (n != 1 && n != k) return std::nullopt;
          n = k;
        }
        ShapeValue s;
        s.scalar = c->scalar && a->scalar && b->scalar;
        auto at = [](const ShapeValue& x, size_t i) { return x.elems[x.elems.size() == 1 ? 0 : i]; };
        for (size_t i = 0; i < n; ++i) {
          const Elem cond = at(*c, i);
          if (!cond.is_int()) {
            const Elem x = at(*a, i), y = at(*b, i);
            const bool same = (x.is_int() && y.is_int() && x.value == y.value) || same_symbol(x, y);
            s.elems.push_back(same ? x : Elem::unknown());
          } else {
            s.elems.push_back(cond.value != 0 ? at(*a, i) : at(*b, i));
          }
        }
        return s;
      }
      default:
        return std::nullopt;
    }
  }

  std::unordered_map<const Value*, std::optional<ShapeValue>> memo_;
};

}  // namespace

std::optional<ShapeValue> shape_value(const Value* v) {
  Evaluator e;
  return e.eval(v, 0);
}

}  // namespace kiln
