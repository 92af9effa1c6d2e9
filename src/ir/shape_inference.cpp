#include "ir/shape_inference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/elementwise_expr.h"
#include "ir/layout.h"
#include "ir/shape_value.h"

namespace kiln {

namespace {

using Shape = std::optional<SymShape>;
using InferFn = void (*)(const Node& n, InferredTypes& out);

Dim known(int64_t v) { return Dim{v, ""}; }
Dim unknown() { return Dim{-1, ""}; }

DataType in_dtype(const Node& n, size_t i) {
  const Value* v = n.input(i);
  return v ? v->dtype : DataType::kUndefined;
}
const Shape& in_shape(const Node& n, size_t i) {
  static const Shape kNone;
  const Value* v = n.input(i);
  return v ? v->shape : kNone;
}
// A constant integer input (axes, shape, pads...), or nullopt.
std::optional<std::vector<int64_t>> const_ints(const Node& n, size_t i) {
  const Value* v = n.input(i);
  if (!v || !v->is_constant()) return std::nullopt;
  const Tensor& t = v->constant();
  if (!t.defined() || t.is_string() || t.is_sequence() || t.is_none() || t.rank() > 1) return std::nullopt;
  if (!is_integer(t.dtype())) return std::nullopt;
  return t.to_int_vector();
}
// An integer input whose values are all known: a constant, or shape arithmetic that
// shape_value() resolves (Gather(Shape(x), i) of a static dim...).
std::optional<std::vector<int64_t>> known_ints(const Node& n, size_t i) {
  if (auto c = const_ints(n, i)) return c;
  auto sv = shape_value(n.input(i));
  if (sv && sv->all_known()) return sv->ints();
  return std::nullopt;
}
// The elements of a 1-D shape input (a Reshape/Expand target, ConstantOfShape's shape):
// constant, computed (each element a known integer, a dim of some value, or unknown), or
// only its length from the input's static shape; nullopt when not even that is known.
std::optional<std::vector<ShapeElem>> shape_elems(const Node& n, size_t i) {
  std::vector<ShapeElem> e;
  if (auto c = const_ints(n, i)) {
    for (int64_t v : *c) e.push_back(ShapeElem::of_int(v));
    return e;
  }
  if (auto sv = shape_value(n.input(i)); sv && !sv->scalar) return sv->elems;
  const Value* v = n.input(i);
  if (v && v->shape && v->shape->size() == 1 && (*v->shape)[0].known() && (*v->shape)[0].value <= 64)
    return std::vector<ShapeElem>(static_cast<size_t>((*v->shape)[0].value), ShapeElem::unknown());
  return std::nullopt;
}
std::optional<std::vector<double>> const_doubles(const Node& n, size_t i) {
  const Value* v = n.input(i);
  if (!v || !v->is_constant()) return std::nullopt;
  const Tensor& t = v->constant();
  if (!t.defined() || t.is_string() || t.is_sequence() || t.is_none() || t.rank() > 1) return std::nullopt;
  std::vector<double> out;
  for (int64_t k = 0; k < t.size(); ++k) out.push_back(t.get_double(k));
  return out;
}
// Normalizes a possibly negative axis against rank r; -1 when out of range.
int64_t norm_axis(int64_t a, int64_t r) {
  if (a < 0) a += r;
  return (a >= 0 && a < r) ? a : -1;
}
// Normalizes a list of axes; nullopt when one is out of range or repeated.
std::optional<std::vector<int64_t>> norm_axes(std::vector<int64_t> axes, int64_t r) {
  for (int64_t& a : axes) {
    a = norm_axis(a, r);
    if (a < 0) return std::nullopt;
  }
  std::vector<int64_t> s = axes;
  std::sort(s.begin(), s.end());
  if (std::adjacent_find(s.begin(), s.end()) != s.end()) return std::nullopt;
  return axes;
}

void set(InferredTypes& out, size_t i, DataType dt, Shape s) {
  if (i >= out.dtypes.size()) return;
  out.dtypes[i] = dt;
  out.shapes[i] = std::move(s);
}

// The dim min(S, D) of a slice [0, S) of a static axis D by a symbolic size S (exporters
// slice position-id buffers to the sequence length this way) is named "min(S,D)".
std::string capped_symbol(const std::string& s, int64_t d) { return "min(" + s + "," + std::to_string(d) + ")"; }
// Whether `c` is min(`s`, D) for some D.
bool is_capped(const Dim& c, const Dim& s) {
  if (s.symbol.empty() || c.known()) return false;
  const std::string prefix = "min(" + s.symbol + ",";
  return c.symbol.size() > prefix.size() + 1 && c.symbol.compare(0, prefix.size(), prefix) == 0 && c.symbol.back() == ')';
}

Dim broadcast_dim(const Dim& a, const Dim& b) {
  // min(S, D) broadcasts against S only where the model is valid (S <= D, or S == 1),
  // and the result then is S.
  if (is_capped(b, a)) return a;
  if (is_capped(a, b)) return b;
  if (a.known() && a.value == 1) return b;
  if (b.known() && b.value == 1) return a;
  if (a.known() && b.known()) return a.value == b.value ? a : unknown();
  if (a.known()) return a;
  if (b.known()) return b;
  if (!a.symbol.empty() && a.symbol == b.symbol) return a;
  return unknown();
}

// Product of dims: known when all are known; a single non-1 unknown dim among known 1s
// keeps its symbol; otherwise unknown.
Dim product(const SymShape& s, size_t begin, size_t end) {
  int64_t p = 1;
  int unknowns = 0;
  Dim sym;
  for (size_t i = begin; i < end; ++i) {
    if (s[i].known()) {
      p *= s[i].value;
    } else {
      ++unknowns;
      sym = s[i];
    }
  }
  if (unknowns == 0) return known(p);
  if (unknowns == 1 && p == 1) return sym;
  return unknown();
}

// ---- generic rules ----

bool is_bool_result(Op op) {
  switch (op) {
    case Op::Equal: case Op::Less: case Op::LessOrEqual: case Op::Greater: case Op::GreaterOrEqual:
    case Op::And: case Op::Or: case Op::Xor: case Op::Not: case Op::IsNaN: case Op::IsInf:
    case Op::RegexFullMatch:
      return true;
    default:
      return false;
  }
}

Shape broadcast_inputs(const Node& n, size_t first) {
  SymShape s;
  bool any = false;
  for (size_t i = first; i < n.num_inputs(); ++i) {
    if (!n.input(i)) continue;
    const Shape& si = in_shape(n, i);
    if (!si) return std::nullopt;
    s = any ? broadcast_shapes(s, *si) : *si;
    any = true;
  }
  if (!any) return std::nullopt;
  return s;
}

void infer_elementwise(const Node& n, InferredTypes& out) {
  DataType dt = in_dtype(n, 0);
  if (is_bool_result(n.op())) dt = DataType::kBool;
  if (n.op() == Op::StringConcat) dt = DataType::kString;
  set(out, 0, dt, broadcast_inputs(n, 0));
}

void infer_same_as_input(const Node& n, InferredTypes& out) { set(out, 0, in_dtype(n, 0), in_shape(n, 0)); }

void infer_where(const Node& n, InferredTypes& out) { set(out, 0, in_dtype(n, 1), broadcast_inputs(n, 0)); }

void infer_cast(const Node& n, InferredTypes& out) {
  DataType dt = DataType::kUndefined;
  if (n.input(1)) dt = in_dtype(n, 1);
  else if (n.attrs.has("to")) dt = static_cast<DataType>(n.attrs.get_int("to", 0));
  set(out, 0, dt, in_shape(n, 0));
}

void infer_clip(const Node& n, InferredTypes& out) { infer_same_as_input(n, out); }

void infer_prelu(const Node& n, InferredTypes& out) {
  // The slope broadcasts unidirectionally into X.
  set(out, 0, in_dtype(n, 0), in_shape(n, 0));
}

void infer_dropout(const Node& n, InferredTypes& out) {
  set(out, 0, in_dtype(n, 0), in_shape(n, 0));
  set(out, 1, DataType::kBool, in_shape(n, 0));
}

// ---- convolution and pooling ----

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;
  std::string auto_pad;
};

bool read_window(const Node& n, size_t nsp, const std::vector<int64_t>& kernel, Window* w) {
  w->kernel = kernel;
  w->strides = n.attrs.get_ints("strides", std::vector<int64_t>(nsp, 1));
  w->dilations = n.attrs.get_ints("dilations", std::vector<int64_t>(nsp, 1));
  w->pads = n.attrs.get_ints("pads", std::vector<int64_t>(2 * nsp, 0));
  w->auto_pad = n.attrs.get_string("auto_pad", "NOTSET");
  if (w->kernel.size() != nsp || w->strides.size() != nsp || w->dilations.size() != nsp || w->pads.size() != 2 * nsp)
    return false;
  // Bounded like the kernels' attribute checks, so window_out cannot overflow (a fuzzed
  // Conv with pads INT64_MIN did).
  constexpr int64_t kMax = int64_t{1} << 31;
  for (size_t i = 0; i < nsp; ++i) {
    if (w->strides[i] <= 0 || w->dilations[i] <= 0 || w->kernel[i] <= 0) return false;
    if (w->strides[i] > kMax || w->dilations[i] > kMax || w->kernel[i] > kMax) return false;
  }
  for (int64_t p : w->pads) {
    if (p < 0 || p > kMax) return false;
  }
  return true;
}

// Output size of one windowed spatial axis.
Dim window_out(const Dim& in, const Window& w, size_t i, bool ceil_mode) {
  if (!in.known() || in.value > (int64_t{1} << 48)) return unknown();
  const int64_t dk = (w.kernel[i] - 1) * w.dilations[i] + 1;
  const int64_t s = w.strides[i];
  if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") return known((in.value + s - 1) / s);
  if (w.auto_pad == "VALID") {
    if (ceil_mode) return unknown();
    const int64_t span = in.value - dk;
    return span < 0 ? unknown() : known(span / s + 1);
  }
  if (w.auto_pad != "NOTSET" && !w.auto_pad.empty()) return unknown();
  const int64_t nsp = static_cast<int64_t>(w.kernel.size());
  const int64_t pb = w.pads[i], pe = w.pads[static_cast<size_t>(nsp) + i];
  const int64_t span = in.value + pb + pe - dk;
  if (span < 0) return unknown();
  int64_t o = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
  // The last window must start inside the input or its left padding.
  if (ceil_mode && (o - 1) * s >= in.value + pb) --o;
  return known(o);
}

// Output shape of a Conv/FusedConv whose X has (NCHW) shape x.
Shape conv_shape(const Node& n, const Shape& x) {
  const Shape& w = in_shape(n, 1);
  if (!x || x->size() < 3) return std::nullopt;
  const size_t nsp = x->size() - 2;
  SymShape y(x->size(), unknown());
  y[0] = (*x)[0];
  if (w && w->size() == x->size()) y[1] = (*w)[0];
  std::vector<int64_t> kernel = n.attrs.get_ints("kernel_shape");
  if (kernel.empty() && w && w->size() == x->size()) {
    for (size_t i = 0; i < nsp; ++i) kernel.push_back((*w)[2 + i].value);
  }
  Window win;
  if (read_window(n, nsp, kernel, &win)) {
    for (size_t i = 0; i < nsp; ++i) y[2 + i] = window_out((*x)[2 + i], win, i, false);
  }
  return y;
}

// Output shape of a windowed pool (MaxPool, AveragePool, LpPool) whose X has (NCHW) shape x.
Shape pool_shape(const Node& n, const Shape& x) {
  if (!x || x->size() < 3) return std::nullopt;
  const size_t nsp = x->size() - 2;
  SymShape y(x->size(), unknown());
  y[0] = (*x)[0];
  y[1] = (*x)[1];
  Window win;
  const bool ceil_mode = n.attrs.get_int("ceil_mode", 0) != 0;
  if (read_window(n, nsp, n.attrs.get_ints("kernel_shape"), &win)) {
    for (size_t i = 0; i < nsp; ++i) y[2 + i] = window_out((*x)[2 + i], win, i, ceil_mode);
  }
  return y;
}

// Output shape of a global pool whose X has (NCHW) shape x.
Shape global_pool_shape(const Node&, const Shape& x) {
  if (!x || x->size() < 2) return std::nullopt;
  SymShape y = *x;
  for (size_t i = 2; i < y.size(); ++i) y[i] = known(1);
  return y;
}

Shape permuted(const Shape& s, const std::vector<size_t>& perm) {
  if (!s || s->size() != perm.size()) return std::nullopt;
  SymShape y;
  for (size_t p : perm) y.push_back((*s)[p]);
  return y;
}

// Y's shape for a conv/pool node by its kiln_layout (ir/layout.h): NCHW as is; NHWC (4-D X
// only) infers on X transposed to NCHW and transposes the result back. An invalid layout,
// or NHWC with X not 4-D, infers nothing (the kernels report it). The residual Z of a
// FusedConv does not enter the shape: it has Y's shape in either layout.
Shape layout_aware_shape(const Node& n, Shape (*rule)(const Node&, const Shape&)) {
  auto layout = read_layout(n.attrs);
  if (!layout.is_ok()) return std::nullopt;
  const Shape& x = in_shape(n, 0);
  if (*layout == TensorLayout::kNCHW) return rule(n, x);
  if (!x || x->size() != 4) return std::nullopt;
  return permuted(rule(n, permuted(x, {0, 3, 1, 2})), {0, 2, 3, 1});
}

void infer_conv(const Node& n, InferredTypes& out) {
  if (Shape y = layout_aware_shape(n, conv_shape)) set(out, 0, in_dtype(n, 0), std::move(y));
}

void infer_conv_transpose(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const Shape& w = in_shape(n, 1);
  if (!x || x->size() < 3) return;
  const size_t nsp = x->size() - 2;
  SymShape y(x->size(), unknown());
  y[0] = (*x)[0];
  const int64_t group = n.attrs.get_int("group", 1);
  if (w && w->size() == x->size() && (*w)[1].known() && group >= 1 && group <= (int64_t{1} << 31) &&
      (*w)[1].value <= (int64_t{1} << 31)) {
    y[1] = known((*w)[1].value * group);
  }
  std::vector<int64_t> kernel = n.attrs.get_ints("kernel_shape");
  if (kernel.empty() && w && w->size() == x->size()) {
    for (size_t i = 0; i < nsp; ++i) kernel.push_back((*w)[2 + i].value);
  }
  const std::vector<int64_t> output_shape = n.attrs.get_ints("output_shape");
  if (!output_shape.empty()) {
    if (output_shape.size() >= nsp) {
      for (size_t i = 0; i < nsp; ++i) y[2 + i] = known(output_shape[output_shape.size() - nsp + i]);
    }
    set(out, 0, in_dtype(n, 0), y);
    return;
  }
  Window win;
  const std::vector<int64_t> opad = n.attrs.get_ints("output_padding", std::vector<int64_t>(nsp, 0));
  if (read_window(n, nsp, kernel, &win) && opad.size() == nsp) {
    for (size_t i = 0; i < nsp; ++i) {
      const Dim& in = (*x)[2 + i];
      // Bounds keep the products below from overflowing (read_window bounds the window).
      if (!in.known() || in.value > (int64_t{1} << 28) || opad[i] < 0 || opad[i] > (int64_t{1} << 31)) continue;
      const int64_t s = win.strides[i];
      if (win.auto_pad == "SAME_UPPER" || win.auto_pad == "SAME_LOWER") {
        y[2 + i] = known(in.value * s);
      } else if (win.auto_pad == "NOTSET" || win.auto_pad == "VALID" || win.auto_pad.empty()) {
        const int64_t pads = win.auto_pad == "VALID" ? 0 : win.pads[i] + win.pads[nsp + i];
        const int64_t o = s * (in.value - 1) + opad[i] + (win.kernel[i] - 1) * win.dilations[i] + 1 - pads;
        if (o >= 0) y[2 + i] = known(o);
      }
    }
  }
  set(out, 0, in_dtype(n, 0), y);
}

void infer_pool(const Node& n, InferredTypes& out) {
  Shape y = layout_aware_shape(n, pool_shape);
  if (!y) return;
  set(out, 0, in_dtype(n, 0), y);
  set(out, 1, DataType::kInt64, y);  // MaxPool indices
}

void infer_global_pool(const Node& n, InferredTypes& out) {
  if (Shape y = layout_aware_shape(n, global_pool_shape)) set(out, 0, in_dtype(n, 0), std::move(y));
}

void infer_batchnorm(const Node& n, InferredTypes& out) {
  set(out, 0, in_dtype(n, 0), in_shape(n, 0));
  set(out, 1, in_dtype(n, 3), in_shape(n, 3));
  set(out, 2, in_dtype(n, 4), in_shape(n, 4));
}

void infer_first_output_same(const Node& n, InferredTypes& out) { set(out, 0, in_dtype(n, 0), in_shape(n, 0)); }

// ---- linear algebra ----

void infer_matmul(const Node& n, InferredTypes& out) {
  const Shape& a = in_shape(n, 0);
  const Shape& b = in_shape(n, 1);
  if (!a || !b || a->empty() || b->empty()) {
    set(out, 0, in_dtype(n, 0), std::nullopt);
    return;
  }
  SymShape sa = *a, sb = *b;
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), known(1));
  if (b1) sb.push_back(known(1));
  SymShape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  SymShape y = broadcast_shapes(ba, bb);
  if (!a1) y.push_back(sa[sa.size() - 2]);
  if (!b1) y.push_back(sb.back());
  set(out, 0, in_dtype(n, 0), y);
}

// Attention (first output): 4-D Q [B, Hq, Sq, D], V [B, Hkv, Skv, Dv] give [B, Hq, Sq, Dv];
// 3-D Q [B, Sq, Hq*D], V [B, Skv, Hkv*Dv] give [B, Sq, Hq*Dv].
void infer_attention(const Node& n, InferredTypes& out) {
  const Shape& q = in_shape(n, 0);
  const Shape& v = in_shape(n, 2);
  if (!q || !v || q->size() != v->size() || (q->size() != 3 && q->size() != 4)) {
    set(out, 0, in_dtype(n, 0), std::nullopt);
    return;
  }
  SymShape y = *q;
  if (q->size() == 4) {
    y[3] = (*v)[3];
  } else {
    const int64_t hq = n.attrs.get_int("q_num_heads", 0), hkv = n.attrs.get_int("kv_num_heads", 0);
    const Dim& vl = (*v)[2];
    y[2] = hq > 0 && hkv > 0 && vl.known() && vl.value % hkv == 0 ? known(vl.value / hkv * hq) : unknown();
  }
  set(out, 0, in_dtype(n, 0), y);
}

void infer_gemm(const Node& n, InferredTypes& out) {
  const Shape& a = in_shape(n, 0);
  const Shape& b = in_shape(n, 1);
  SymShape y = {unknown(), unknown()};
  if (a && a->size() == 2) y[0] = (*a)[n.attrs.get_int("transA", 0) ? 1 : 0];
  if (b && b->size() == 2) y[1] = (*b)[n.attrs.get_int("transB", 0) ? 0 : 1];
  set(out, 0, in_dtype(n, 0), y);
}

// ---- shape manipulation ----

void infer_reshape(const Node& n, InferredTypes& out) {
  const DataType dt = in_dtype(n, 0);
  auto target = shape_elems(n, 1);
  if (!target) {
    set(out, 0, dt, std::nullopt);
    return;
  }
  const Shape& x = in_shape(n, 0);
  const bool allowzero = n.attrs.get_int("allowzero", 0) != 0;
  SymShape y;
  int infer_at = -1;
  for (size_t i = 0; i < target->size(); ++i) {
    const ShapeElem& e = (*target)[i];
    if (!e.is_int()) {
      // A computed element is a dim of some value (taken as is: a symbolic dim is not
      // taken to be 0) or unknown (never -1 here: a second -1 would make the model invalid).
      y.push_back(e.as_dim());
      continue;
    }
    const int64_t t = e.value;
    if (t == 0 && !allowzero) {
      y.push_back(x && i < x->size() ? (*x)[i] : unknown());
    } else if (t == -1) {
      if (infer_at >= 0) return;
      infer_at = static_cast<int>(i);
      y.push_back(unknown());
    } else if (t >= 0) {
      y.push_back(known(t));
    } else {
      return;
    }
  }
  if (infer_at >= 0 && x) {
    // -1: input elements / the other output dims, when the unknown dims cancel (the same
    // symbols on both sides) and the known parts divide.
    int64_t in_known = 1, out_known = 1;
    std::vector<std::string> in_syms, out_syms;
    bool ok = true;
    for (const Dim& d : *x) {
      if (d.known()) in_known *= d.value;
      else if (!d.symbol.empty()) in_syms.push_back(d.symbol);
      else ok = false;
    }
    for (size_t i = 0; i < y.size(); ++i) {
      if (static_cast<int>(i) == infer_at) continue;
      if (y[i].known()) out_known *= y[i].value;
      else if (!y[i].symbol.empty()) out_syms.push_back(y[i].symbol);
      else ok = false;
    }
    std::sort(in_syms.begin(), in_syms.end());
    std::sort(out_syms.begin(), out_syms.end());
    if (ok && in_syms == out_syms && out_known > 0 && in_known % out_known == 0) {
      y[static_cast<size_t>(infer_at)] = known(in_known / out_known);
    }
  }
  set(out, 0, dt, y);
}

void infer_flatten(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  if (!x) return;
  const int64_t r = static_cast<int64_t>(x->size());
  int64_t axis = n.attrs.get_int("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) return;
  const size_t a = static_cast<size_t>(axis);
  set(out, 0, in_dtype(n, 0), SymShape{product(*x, 0, a), product(*x, a, x->size())});
}

void infer_squeeze(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const DataType dt = in_dtype(n, 0);
  if (!x) return;
  const int64_t r = static_cast<int64_t>(x->size());
  std::vector<bool> drop(x->size(), false);
  if (n.input(1)) {
    auto axes = const_ints(n, 1);
    if (!axes) return set(out, 0, dt, std::nullopt);
    auto na = norm_axes(*axes, r);
    if (!na) return;
    for (int64_t a : *na) drop[static_cast<size_t>(a)] = true;
  } else {
    for (size_t i = 0; i < x->size(); ++i) {
      if (!(*x)[i].known()) return set(out, 0, dt, std::nullopt);
      drop[i] = (*x)[i].value == 1;
    }
  }
  SymShape y;
  for (size_t i = 0; i < x->size(); ++i) if (!drop[i]) y.push_back((*x)[i]);
  set(out, 0, dt, y);
}

void infer_unsqueeze(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const DataType dt = in_dtype(n, 0);
  auto axes = const_ints(n, 1);
  if (!x || !axes) return set(out, 0, dt, std::nullopt);
  const int64_t r = static_cast<int64_t>(x->size() + axes->size());
  auto na = norm_axes(*axes, r);
  if (!na) return;
  std::vector<bool> is_new(static_cast<size_t>(r), false);
  for (int64_t a : *na) is_new[static_cast<size_t>(a)] = true;
  SymShape y;
  size_t k = 0;
  for (size_t i = 0; i < is_new.size(); ++i) y.push_back(is_new[i] ? known(1) : (*x)[k++]);
  set(out, 0, dt, y);
}

void infer_transpose(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const DataType dt = in_dtype(n, 0);
  if (!x) return set(out, 0, dt, std::nullopt);
  std::vector<int64_t> perm = n.attrs.get_ints("perm");
  if (perm.empty()) {
    for (size_t i = x->size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  if (perm.size() != x->size()) return;
  SymShape y;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(x->size())) return;
    y.push_back((*x)[static_cast<size_t>(p)]);
  }
  set(out, 0, dt, y);
}

Dim merge_equal_dims(const Dim& a, const Dim& b) {
  if (a.known()) return a;
  if (b.known()) return b;
  if (!a.symbol.empty()) return a;
  return b;
}

void infer_concat(const Node& n, InferredTypes& out) {
  const DataType dt = in_dtype(n, 0);
  SymShape y;
  bool first = true;
  int64_t axis = n.attrs.get_int("axis", 0);
  size_t a = 0;
  for (size_t i = 0; i < n.num_inputs(); ++i) {
    const Shape& s = in_shape(n, i);
    if (!s) return set(out, 0, dt, std::nullopt);
    if (first) {
      y = *s;
      axis = norm_axis(axis, static_cast<int64_t>(y.size()));
      if (axis < 0) return;
      a = static_cast<size_t>(axis);
      first = false;
      continue;
    }
    if (s->size() != y.size()) return;
    for (size_t d = 0; d < y.size(); ++d) {
      if (d == a) {
        y[d] = (y[d].known() && (*s)[d].known()) ? known(y[d].value + (*s)[d].value) : unknown();
      } else {
        y[d] = merge_equal_dims(y[d], (*s)[d]);
      }
    }
  }
  if (first) return;
  set(out, 0, dt, y);
}

void infer_split(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const DataType dt = in_dtype(n, 0);
  const size_t nout = n.num_outputs();
  if (!x) {
    for (size_t i = 0; i < nout; ++i) set(out, i, dt, std::nullopt);
    return;
  }
  const int64_t axis = norm_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(x->size()));
  if (axis < 0) return;
  const size_t a = static_cast<size_t>(axis);
  std::vector<Dim> sizes(nout, unknown());
  const Dim& d = (*x)[a];
  if (n.input(1)) {
    auto split = const_ints(n, 1);
    if (split && split->size() == nout) {
      for (size_t i = 0; i < nout; ++i) sizes[i] = known((*split)[i]);
    }
  } else if (d.known() && nout > 0) {
    const int64_t k = static_cast<int64_t>(nout);
    if (n.attrs.has("num_outputs")) {
      const int64_t chunk = (d.value + k - 1) / k;
      for (size_t i = 0; i < nout; ++i) {
        const int64_t rest = d.value - chunk * static_cast<int64_t>(i);
        sizes[i] = known(std::max<int64_t>(0, std::min(chunk, rest)));
      }
    } else if (d.value % k == 0) {
      for (size_t i = 0; i < nout; ++i) sizes[i] = known(d.value / k);
    }
  } else if (nout == 1) {
    sizes[0] = d;
  }
  for (size_t i = 0; i < nout; ++i) {
    SymShape y = *x;
    y[a] = sizes[i];
    set(out, i, dt, y);
  }
}

void infer_gather(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const Shape& idx = in_shape(n, 1);
  const DataType dt = in_dtype(n, 0);
  if (!x || !idx) return set(out, 0, dt, std::nullopt);
  const int64_t axis = norm_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(x->size()));
  if (axis < 0) return;
  const size_t a = static_cast<size_t>(axis);
  SymShape y(x->begin(), x->begin() + static_cast<std::ptrdiff_t>(a));
  y.insert(y.end(), idx->begin(), idx->end());
  y.insert(y.end(), x->begin() + static_cast<std::ptrdiff_t>(a) + 1, x->end());
  set(out, 0, dt, y);
}

void infer_gather_elements(const Node& n, InferredTypes& out) { set(out, 0, in_dtype(n, 0), in_shape(n, 1)); }

// Shape's [start, end) range over a rank-r shape.
std::pair<int64_t, int64_t> shape_range(const Node& n, int64_t r) {
  auto clamp = [r](int64_t v) {
    if (v < 0) v += r;
    return std::clamp<int64_t>(v, 0, r);
  };
  const int64_t start = clamp(n.attrs.get_int("start", 0));
  const int64_t end = n.attrs.has("end") ? clamp(n.attrs.get_int("end", r)) : r;
  return {start, std::max(start, end)};
}

void infer_shape_op(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  if (!x) return set(out, 0, DataType::kInt64, SymShape{unknown()});
  auto [start, end] = shape_range(n, static_cast<int64_t>(x->size()));
  set(out, 0, DataType::kInt64, SymShape{known(end - start)});
}

void infer_size(const Node& n, InferredTypes& out) { set(out, 0, DataType::kInt64, SymShape{}); }

void infer_reduce(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const DataType dt = in_dtype(n, 0);
  const bool keepdims = n.attrs.get_int("keepdims", 1) != 0;
  if (!x) return set(out, 0, dt, std::nullopt);
  const int64_t r = static_cast<int64_t>(x->size());
  std::vector<int64_t> axes;
  if (n.input(1)) {
    auto c = const_ints(n, 1);
    if (!c) return set(out, 0, dt, keepdims ? Shape(SymShape(x->size(), unknown())) : std::nullopt);
    axes = *c;
  } else if (n.attrs.has("axes")) {
    axes = n.attrs.get_ints("axes");
  }
  if (axes.empty()) {
    if (n.attrs.get_int("noop_with_empty_axes", 0) != 0) return set(out, 0, dt, x);
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  auto na = norm_axes(axes, r);
  if (!na) return;
  std::vector<bool> reduced(x->size(), false);
  for (int64_t a : *na) reduced[static_cast<size_t>(a)] = true;
  SymShape y;
  for (size_t i = 0; i < x->size(); ++i) {
    if (!reduced[i]) y.push_back((*x)[i]);
    else if (keepdims) y.push_back(known(1));
  }
  set(out, 0, dt, y);
}

void infer_arg(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  if (!x) return set(out, 0, DataType::kInt64, std::nullopt);
  const int64_t axis = norm_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(x->size()));
  if (axis < 0) return;
  SymShape y = *x;
  if (n.attrs.get_int("keepdims", 1) != 0) y[static_cast<size_t>(axis)] = known(1);
  else y.erase(y.begin() + axis);
  set(out, 0, DataType::kInt64, y);
}

void infer_expand(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const DataType dt = in_dtype(n, 0);
  auto target = shape_elems(n, 1);
  if (!x || !target) return set(out, 0, dt, std::nullopt);
  SymShape t;
  for (const ShapeElem& e : *target) {
    if (e.is_int() && e.value < 0) return;
    t.push_back(e.as_dim());
  }
  // An unknown target dim is 1 or x's dim where x's is not 1: broadcasting keeps x's then.
  set(out, 0, dt, broadcast_shapes(*x, t));
}

// Slice ends computed as dims: an end that is the sliced axis's own (symbolic) size
// reads as "to the end" (INT64_MAX); any other unknown end gives nullopt.
// An end that is a symbolic size S on a static axis is recorded in `capped` (the slice
// [0, S) then has the dim min(S, D)); any other unknown end gives nullopt.
std::optional<std::vector<int64_t>> ends_at_axis_size(const Node& n, const SymShape& x,
                                                      const std::optional<std::vector<int64_t>>& axes,
                                                      std::vector<std::string>* capped) {
  auto sv = shape_value(n.input(2));
  if (!sv || sv->scalar) return std::nullopt;
  std::vector<int64_t> ends;
  capped->assign(sv->elems.size(), "");
  for (size_t i = 0; i < sv->elems.size(); ++i) {
    const ShapeElem& e = sv->elems[i];
    if (e.is_int()) {
      ends.push_back(e.value);
      continue;
    }
    int64_t a = axes ? (i < axes->size() ? (*axes)[i] : -1000) : static_cast<int64_t>(i);
    a = norm_axis(a, static_cast<int64_t>(x.size()));
    if (a < 0 || e.kind != ShapeElem::Kind::kDim || e.symbol.empty()) return std::nullopt;
    const Dim& d = x[static_cast<size_t>(a)];
    if (d.known() && d.value > 0) {
      (*capped)[i] = e.symbol;
    } else if (d.symbol != e.symbol) {
      return std::nullopt;
    }
    ends.push_back(std::numeric_limits<int64_t>::max());
  }
  return ends;
}

void infer_slice(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const DataType dt = in_dtype(n, 0);
  if (!x) return set(out, 0, dt, std::nullopt);
  const int64_t r = static_cast<int64_t>(x->size());
  auto starts = known_ints(n, 1);
  auto ends = known_ints(n, 2);
  std::optional<std::vector<int64_t>> axes, steps;
  if (n.input(3)) axes = known_ints(n, 3);
  if (n.input(4)) steps = known_ints(n, 4);
  std::vector<std::string> capped;  // per slice: the symbolic end of a static axis
  if (!ends && starts && (!n.input(3) || axes)) ends = ends_at_axis_size(n, *x, axes, &capped);
  SymShape y = *x;
  if (!starts || !ends || (n.input(3) && !axes) || (n.input(4) && !steps)) {
    // The bounds (or which axes are sliced) are unknown: the sliced axes' dims are, and
    // every dim when the axes are not known either.
    auto na = axes ? norm_axes(*axes, r) : std::nullopt;
    if (na) {
      for (int64_t a : *na) y[static_cast<size_t>(a)] = unknown();
    } else {
      for (Dim& d : y) d = unknown();
    }
    return set(out, 0, dt, y);
  }
  const size_t k = starts->size();
  if (ends->size() != k) return;
  std::vector<int64_t> ax, st(k, 1);
  if (axes) {
    if (axes->size() != k) return;
    auto na = norm_axes(*axes, r);
    if (!na) return;
    ax = *na;
  } else {
    if (static_cast<int64_t>(k) > r) return;
    for (size_t i = 0; i < k; ++i) ax.push_back(static_cast<int64_t>(i));
  }
  if (steps) {
    if (steps->size() != k) return;
    st = *steps;
  }
  for (size_t i = 0; i < k; ++i) {
    const size_t a = static_cast<size_t>(ax[i]);
    const int64_t step = st[i];
    if (step == 0) return;
    const Dim& d = (*x)[a];
    if (i < capped.size() && !capped[i].empty()) {
      y[a] = step == 1 && (*starts)[i] == 0 ? Dim{-1, capped_symbol(capped[i], d.value)} : unknown();
      continue;
    }
    if (!d.known()) {
      // The whole axis: [0, INT_MAX) with step 1 keeps the dim (symbols included).
      if (!(step == 1 && (*starts)[i] == 0 && (*ends)[i] >= std::numeric_limits<int32_t>::max())) y[a] = unknown();
      continue;
    }
    const int64_t dim = d.value;
    int64_t s = (*starts)[i], e = (*ends)[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t len;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    y[a] = known(len);
  }
  set(out, 0, dt, y);
}

void infer_resize(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const DataType dt = in_dtype(n, 0);
  if (!x) return set(out, 0, dt, std::nullopt);
  const int64_t r = static_cast<int64_t>(x->size());
  SymShape y(x->size(), unknown());
  std::vector<int64_t> axes = n.attrs.get_ints("axes");
  if (axes.empty()) {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  auto na = norm_axes(axes, r);
  std::optional<std::vector<double>> scales;
  std::optional<std::vector<int64_t>> sizes;
  if (n.input(3)) sizes = const_ints(n, 3);
  if (sizes && sizes->empty()) sizes.reset();
  if (n.input(2)) scales = const_doubles(n, 2);
  if (scales && scales->empty()) scales.reset();
  if (na) {
    // Unresized axes keep their dims.
    y = *x;
    for (int64_t a : *na) y[static_cast<size_t>(a)] = unknown();
    if (sizes && !scales && sizes->size() == na->size() &&
        n.attrs.get_string("keep_aspect_ratio_policy", "stretch") == "stretch") {
      for (size_t i = 0; i < na->size(); ++i) y[static_cast<size_t>((*na)[i])] = known((*sizes)[i]);
    } else if (scales && !n.input(3) && scales->size() == na->size()) {
      for (size_t i = 0; i < na->size(); ++i) {
        const Dim& d = (*x)[static_cast<size_t>((*na)[i])];
        const double s = (*scales)[i];
        if (d.known() && std::isfinite(s) && s > 0) {
          y[static_cast<size_t>((*na)[i])] = known(static_cast<int64_t>(std::floor(s * static_cast<double>(d.value))));
        }
      }
    } else if (scales && n.input(3) && !sizes && scales->size() == na->size()) {
      // sizes given but not constant: nothing more.
    } else if (scales && sizes) {
      // both non-empty: the model is invalid; leave unknown
    }
  }
  set(out, 0, dt, y);
}

void infer_pad(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const DataType dt = in_dtype(n, 0);
  if (!x) return set(out, 0, dt, std::nullopt);
  const int64_t r = static_cast<int64_t>(x->size());
  SymShape y(x->size(), unknown());
  auto pads = const_ints(n, 1);
  std::vector<int64_t> axes;
  bool axes_ok = true;
  if (n.input(3)) {
    auto a = const_ints(n, 3);
    auto na = a ? norm_axes(*a, r) : std::nullopt;
    if (na) axes = *na;
    else axes_ok = false;
  } else {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  if (pads && axes_ok && pads->size() == 2 * axes.size()) {
    y = *x;
    const size_t k = axes.size();
    for (size_t i = 0; i < k; ++i) {
      const size_t a = static_cast<size_t>(axes[i]);
      const int64_t p = (*pads)[i] + (*pads)[k + i];
      if (p == 0) continue;
      y[a] = y[a].known() && y[a].value + p >= 0 ? known(y[a].value + p) : unknown();
    }
  }
  set(out, 0, dt, y);
}

void infer_constant_of_shape(const Node& n, InferredTypes& out) {
  const Tensor* v = n.attrs.get_tensor("value");
  const DataType dt = v ? v->dtype() : DataType::kFloat32;
  auto target = shape_elems(n, 0);
  if (!target) return set(out, 0, dt, std::nullopt);
  SymShape y;
  for (const ShapeElem& e : *target) {
    if (e.is_int() && e.value < 0) return;
    y.push_back(e.as_dim());
  }
  set(out, 0, dt, y);
}

void infer_range(const Node& n, InferredTypes& out) {
  const DataType dt = in_dtype(n, 0);
  auto start = const_doubles(n, 0), limit = const_doubles(n, 1), delta = const_doubles(n, 2);
  SymShape y{unknown()};
  if (start && limit && delta && start->size() == 1 && limit->size() == 1 && delta->size() == 1 && (*delta)[0] != 0 &&
      is_integer(dt)) {
    // Integer ranges only: float ranges depend on the kernel's rounding.
    const double c = std::ceil(((*limit)[0] - (*start)[0]) / (*delta)[0]);
    y[0] = known(std::max<int64_t>(0, static_cast<int64_t>(c)));
  }
  set(out, 0, dt, y);
}

void infer_tile(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const DataType dt = in_dtype(n, 0);
  if (!x) return set(out, 0, dt, std::nullopt);
  SymShape y(x->size(), unknown());
  auto reps = const_ints(n, 1);
  if (reps && reps->size() == x->size()) {
    for (size_t i = 0; i < y.size(); ++i) {
      const int64_t rp = (*reps)[i];
      if (rp == 1) y[i] = (*x)[i];
      else if ((*x)[i].known() && rp >= 0) y[i] = known((*x)[i].value * rp);
    }
  }
  set(out, 0, dt, y);
}

void infer_topk(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const DataType dt = in_dtype(n, 0);
  if (!x) {
    set(out, 0, dt, std::nullopt);
    set(out, 1, DataType::kInt64, std::nullopt);
    return;
  }
  const int64_t axis = norm_axis(n.attrs.get_int("axis", -1), static_cast<int64_t>(x->size()));
  if (axis < 0) return;
  SymShape y = *x;
  auto k = const_ints(n, 1);
  y[static_cast<size_t>(axis)] = (k && k->size() == 1 && (*k)[0] >= 0) ? known((*k)[0]) : unknown();
  set(out, 0, dt, y);
  set(out, 1, DataType::kInt64, y);
}

void infer_nonzero(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  set(out, 0, DataType::kInt64, SymShape{x ? known(static_cast<int64_t>(x->size())) : unknown(), unknown()});
}

void infer_depth_to_space(const Node& n, InferredTypes& out) {
  const Shape& x = in_shape(n, 0);
  const int64_t b = n.attrs.get_int("blocksize", 0);
  if (!x || x->size() != 4 || b <= 0) return set(out, 0, in_dtype(n, 0), std::nullopt);
  SymShape y = *x;
  const bool to_space = n.op() == Op::DepthToSpace;
  auto scale = [&](const Dim& d, bool up) {
    if (!d.known()) return unknown();
    if (up) return known(d.value * b);
    return d.value % b == 0 ? known(d.value / b) : unknown();
  };
  y[1] = to_space ? ((*x)[1].known() && (*x)[1].value % (b * b) == 0 ? known((*x)[1].value / (b * b)) : unknown())
                  : ((*x)[1].known() ? known((*x)[1].value * b * b) : unknown());
  y[2] = scale((*x)[2], to_space);
  y[3] = scale((*x)[3], to_space);
  set(out, 0, in_dtype(n, 0), y);
}

// Einsum with explicit output ("ij,jk->ik"), no ellipsis.
void infer_einsum(const Node& n, InferredTypes& out) {
  const std::string eq = n.attrs.get_string("equation", "");
  const DataType dt = in_dtype(n, 0);
  std::string spec;
  for (char c : eq) if (c != ' ') spec.push_back(c);
  const size_t arrow = spec.find("->");
  if (arrow == std::string::npos || spec.find('.') != std::string::npos) return set(out, 0, dt, std::nullopt);
  std::vector<std::string> terms;
  std::string cur;
  for (char c : spec.substr(0, arrow)) {
    if (c == ',') {
      terms.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  terms.push_back(cur);
  if (terms.size() != n.num_inputs()) return;
  Dim letters[128];
  bool seen[128] = {};
  for (size_t i = 0; i < terms.size(); ++i) {
    const Shape& s = in_shape(n, i);
    if (!s || s->size() != terms[i].size()) return set(out, 0, dt, std::nullopt);
    for (size_t j = 0; j < terms[i].size(); ++j) {
      const unsigned char c = static_cast<unsigned char>(terms[i][j]);
      if (c >= 128) return;
      letters[c] = seen[c] ? broadcast_dim(letters[c], (*s)[j]) : (*s)[j];
      seen[c] = true;
    }
  }
  SymShape y;
  for (char c : spec.substr(arrow + 2)) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 128 || !seen[u]) return;
    y.push_back(letters[u]);
  }
  set(out, 0, dt, y);
}

void infer_layernorm(const Node& n, InferredTypes& out) { set(out, 0, in_dtype(n, 0), in_shape(n, 0)); }

// FusedResidualNorm: Y has X + R's shape (X's dtype for LayerNorm, the scale's for RMSNorm,
// as RMSNormalization does); Sum is X + R.
void infer_fused_residual_norm(const Node& n, InferredTypes& out) {
  const Shape sum = in_shape(n, 0) && in_shape(n, 1) ? broadcast_shapes(*in_shape(n, 0), *in_shape(n, 1)) : Shape{};
  const bool rms = n.attrs.get_string("norm", "LayerNorm") == "RMSNorm";
  set(out, 0, rms ? in_dtype(n, 2) : in_dtype(n, 0), sum);
  set(out, 1, in_dtype(n, 0), sum);
}

void infer_eyelike(const Node& n, InferredTypes& out) {
  const DataType dt = n.attrs.has("dtype") ? static_cast<DataType>(n.attrs.get_int("dtype", 1)) : in_dtype(n, 0);
  set(out, 0, dt, in_shape(n, 0));
}

void infer_shape_only(const Node& n, InferredTypes& out) { set(out, 0, DataType::kUndefined, in_shape(n, 0)); }

// FusedElementwise: runs the per-op rules through the expr program (broadcasting; dtype of
// the first argument, bool for comparisons, the second for Where; Clip and PRelu keep
// their first argument's shape). A malformed expr infers nothing (the kernel reports it).
void infer_fused_elementwise(const Node& n, InferredTypes& out) {
  auto prog = parse_elementwise_expr(n.attrs.get_string("expr", ""));
  if (!prog.is_ok() || prog->num_inputs > static_cast<int>(n.num_inputs())) return;
  std::vector<DataType> dts;
  std::vector<Shape> shapes;
  for (const ExprInstr& in : prog->instrs) {
    std::vector<DataType> adt;
    std::vector<const Shape*> ash;
    for (const ExprArg& a : in.args) {
      const auto i = static_cast<size_t>(a.index);
      if (a.kind == ExprArg::Kind::kInput) {
        adt.push_back(in_dtype(n, i));
        ash.push_back(&in_shape(n, i));
      } else if (a.kind == ExprArg::Kind::kTemp) {
        adt.push_back(dts[i]);
        ash.push_back(&shapes[i]);
      }
    }
    DataType dt = is_bool_result(in.op) ? DataType::kBool : in.op == Op::Where ? adt[1] : adt[0];
    Shape s = *ash[0];
    if (in.op != Op::Clip && in.op != Op::PRelu) {
      for (size_t k = 1; k < ash.size() && s; ++k) s = *ash[k] ? Shape(broadcast_shapes(*s, **ash[k])) : Shape{};
    }
    dts.push_back(dt);
    shapes.push_back(std::move(s));
  }
  const auto y = static_cast<size_t>(prog->output);
  set(out, 0, dts[y], shapes[y]);
}

struct InferTable {
  InferFn fns[kNumOps] = {};
  InferTable() {
    for (int i = 0; i < kNumOps; ++i) {
      if (op_has_flag(static_cast<Op>(i), kElementwise)) fns[i] = infer_elementwise;
    }
    auto add = [this](Op op, InferFn fn) { fns[static_cast<size_t>(op)] = fn; };
    add(Op::Where, infer_where);
    add(Op::Clip, infer_clip);
    add(Op::Cast, infer_cast);
    add(Op::PRelu, infer_prelu);
    add(Op::Identity, infer_same_as_input);
    add(Op::Dropout, infer_dropout);
    add(Op::Conv, infer_conv);
    add(Op::FusedConv, infer_conv);  // the residual Z has the output's shape
    add(Op::ConvTranspose, infer_conv_transpose);
    add(Op::MaxPool, infer_pool);
    add(Op::AveragePool, infer_pool);
    add(Op::LpPool, infer_pool);
    add(Op::GlobalAveragePool, infer_global_pool);
    add(Op::GlobalMaxPool, infer_global_pool);
    add(Op::GlobalLpPool, infer_global_pool);
    add(Op::BatchNormalization, infer_batchnorm);
    add(Op::LayerNormalization, infer_layernorm);
    add(Op::FusedResidualNorm, infer_fused_residual_norm);
    for (Op op : {Op::InstanceNormalization, Op::GroupNormalization, Op::MeanVarianceNormalization, Op::LRN,
                  Op::Softmax, Op::LogSoftmax, Op::Hardmax, Op::CumSum, Op::CumProd, Op::Trilu,
                  Op::LpNormalization, Op::RMSNormalization}) {
      add(op, infer_first_output_same);
    }
    add(Op::MatMul, infer_matmul);
    add(Op::Gemm, infer_gemm);
    add(Op::Attention, infer_attention);
    add(Op::FusedGemm, infer_matmul);  // A [..., K] x W [K, N]; the bias broadcasts over [..., N]
    add(Op::Einsum, infer_einsum);
    add(Op::Reshape, infer_reshape);
    add(Op::Flatten, infer_flatten);
    add(Op::Squeeze, infer_squeeze);
    add(Op::Unsqueeze, infer_unsqueeze);
    add(Op::Transpose, infer_transpose);
    add(Op::Concat, infer_concat);
    add(Op::Split, infer_split);
    add(Op::Gather, infer_gather);
    add(Op::GatherElements, infer_gather_elements);
    add(Op::Shape, infer_shape_op);
    add(Op::Size, infer_size);
    for (int i = 0; i < kNumOps; ++i) {
      if (op_has_flag(static_cast<Op>(i), kReduction)) fns[i] = infer_reduce;
    }
    add(Op::ArgMax, infer_arg);
    add(Op::ArgMin, infer_arg);
    add(Op::Expand, infer_expand);
    add(Op::Slice, infer_slice);
    add(Op::Resize, infer_resize);
    add(Op::Pad, infer_pad);
    add(Op::ConstantOfShape, infer_constant_of_shape);
    add(Op::Range, infer_range);
    add(Op::Tile, infer_tile);
    add(Op::TopK, infer_topk);
    add(Op::NonZero, infer_nonzero);
    add(Op::DepthToSpace, infer_depth_to_space);
    add(Op::SpaceToDepth, infer_depth_to_space);
    add(Op::EyeLike, infer_eyelike);
    add(Op::QuantizeLinear, infer_shape_only);
    add(Op::DequantizeLinear, infer_shape_only);
    add(Op::FusedElementwise, infer_fused_elementwise);
  }
};

}  // namespace

SymShape broadcast_shapes(const SymShape& a, const SymShape& b) {
  const size_t r = std::max(a.size(), b.size());
  SymShape y(r);
  for (size_t i = 0; i < r; ++i) {
    const bool ha = i < a.size(), hb = i < b.size();
    const Dim& da = ha ? a[a.size() - 1 - i] : b[b.size() - 1 - i];
    const Dim& db = hb ? b[b.size() - 1 - i] : a[a.size() - 1 - i];
    y[r - 1 - i] = (ha && hb) ? broadcast_dim(da, db) : da;
  }
  return y;
}

bool is_static_shape(const std::optional<SymShape>& s) {
  if (!s) return false;
  for (const Dim& d : *s) if (!d.known()) return false;
  return true;
}

bool infer_node_types(const Node& n, InferredTypes* out) {
  static const InferTable table;
  out->dtypes.assign(n.num_outputs(), DataType::kUndefined);
  out->shapes.assign(n.num_outputs(), std::nullopt);
  InferFn fn = table.fns[static_cast<size_t>(n.op())];
  if (!fn || !n.subgraphs().empty()) return false;
  for (const Value* v : n.inputs()) {
    if (v && (v->is_sequence || v->is_optional)) return false;
  }
  for (const Value* v : n.outputs()) {
    if (v && (v->is_sequence || v->is_optional)) return false;
  }
  fn(n, *out);
  // Dims never come out negative-but-known; a malformed rule result is dropped.
  for (auto& s : out->shapes) {
    if (!s) continue;
    for (Dim& d : *s) {
      if (d.value < -1) d = unknown();
    }
  }
  return true;
}

}  // namespace kiln
