// Small helpers shared by the pattern-matching passes.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::pattern {

// v feeds exactly one node and is not a graph output, so a fusion may absorb it.
inline bool single_use(const Graph& g, const Value* v) {
  return v && v->uses().size() == 1 && !g.is_graph_output(v);
}

// A one-element constant of x's dtype that broadcasts into x without changing x's shape,
// possibly behind Cast/CastLike and Sqrt (exporters' function bodies build constants as
// Sqrt(CastLike(c, x)), which does not fold while x is not constant). Sets *out to its value.
inline bool scalar_value(const Value* v, const Value* x, double* out, int depth = 0) {
  if (!v || !x || depth > 3) return false;
  const Value* src = v;
  Node* p = v->is_constant() ? nullptr : v->producer();
  if (p && p->op() == Op::Sqrt) {
    double s = 0;
    if (!scalar_value(p->input(0), x, &s, depth + 1)) return false;
    *out = std::sqrt(s);
    return true;
  }
  if (p && p->op() == Op::Cast) {
    const DataType target = p->input(1) ? p->input(1)->dtype
                                        : static_cast<DataType>(p->attrs.get_int("to", 0));
    if (target != x->dtype) return false;
    src = p->input(0);
  } else if (p) {
    return false;
  }
  if (!src || !src->is_constant()) return false;
  const Tensor& t = src->constant();
  if ((src == v && t.dtype() != x->dtype) || !is_supported_dtype(t.dtype()) || !is_float(t.dtype()) || t.size() != 1)
    return false;
  if (t.rank() > 0 && (!x->shape || static_cast<int>(x->shape->size()) < t.rank())) return false;
  *out = t.get_double(0);
  return true;
}

// Weights the folding passes rewrite: float32 or float64 (computed in double).
inline bool is_foldable_float(DataType dt) { return dt == DataType::kFloat32 || dt == DataType::kFloat64; }

// A float32/float64 tensor holding values computed in double.
inline Tensor tensor_from_doubles(DataType dt, const Dims& dims, const std::vector<double>& v) {
  Tensor t(dt, dims);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DataType::kFloat32) t.data<float>()[i] = static_cast<float>(v[i]);
    else t.data<double>()[i] = v[i];
  }
  return t;
}

// Redirects the users of `from` to `to`; a graph output keeps its name (the model's
// interface): `to` takes it over and the dead `from` gets a fresh one.
inline void replace_keeping_name(Graph& g, Value* from, Value* to) {
  const bool out = g.is_graph_output(from);
  const std::string name = from->name();
  g.replace_all_uses_with(from, to);
  if (out) {
    g.rename_value(from, g.unique_name(name + "_unfused"));
    g.rename_value(to, name);
  }
}

// `follower` (a BatchNorm, Mul or Add folded into the weights of the node producing `y`)
// is gone: its users read `y` instead, and it is removed at once so it no longer counts as
// a user of `y` (a following fold in the same round then sees `y` with one user).
inline void absorb_follower(Graph& g, Node* follower, Value* y) {
  Value* out = follower->output(0);
  y->dtype = out->dtype;
  y->shape = out->shape;
  replace_keeping_name(g, out, y);
  g.remove_node(follower);
}

}  // namespace kiln::pattern
