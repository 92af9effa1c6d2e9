// Fuses RMS normalization written out with elementwise ops:
//   ms = ReduceMean(x*x or Pow(x, 2), trailing axes, keepdims); r = Sqrt(ms + eps)
//   y = x / r  or  x * Reciprocal(r)  or  x * (1 / r)      [then * weight]
// into RMSNormalization(x, weight or ones; axis, epsilon). This is what PyTorch exports
// for LLaMA-style RMSNorm (torch.rsqrt becomes Reciprocal(Sqrt)) once the float32 Casts
// are gone, and what ONNX's own RMSNormalization function body expands to. eps must be a
// constant; every matched intermediate must feed only the pattern.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "passes/pass.h"
#include "passes/pattern_util.h"

namespace kiln {

namespace {

using pattern::single_use;

Node* producer_op(const Value* v, Op op) {
  Node* n = v ? v->producer() : nullptr;
  return n && n->op() == op && n->num_outputs() == 1 ? n : nullptr;
}

// n has inputs {a, b} in either order where pred(a) holds; returns b or nullptr.
template <typename Pred>
Value* other_operand(Node* n, Pred pred) {
  if (!n || n->num_inputs() != 2) return nullptr;
  if (pred(n->input(0))) return n->input(1);
  if (pred(n->input(1))) return n->input(0);
  return nullptr;
}

// If `r` is a keepdims ReduceMean of x over the trailing axes [a, rank), returns a as a
// negative axis (-1 for the last axis alone); 0 otherwise. Without a known rank only
// axes = [-1] is recognized.
int64_t trailing_reduce_axis(const Node* r, const Value* x) {
  if (!r || r->op() != Op::ReduceMean || r->attrs.get_int("keepdims", 1) == 0) return 0;
  std::vector<int64_t> axes;
  if (r->input(1)) {
    if (!r->input(1)->is_constant()) return 0;
    axes = r->input(1)->constant().to_int_vector();
  } else if (r->attrs.has("axes")) {
    axes = r->attrs.get_ints("axes");
  } else {
    return 0;
  }
  if (axes.empty()) return 0;
  if (!x->shape) return axes.size() == 1 && axes[0] == -1 ? -1 : 0;
  const int64_t rank = static_cast<int64_t>(x->shape->size());
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return 0;
    if (a >= 0) a -= rank;
  }
  std::sort(axes.begin(), axes.end());
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] != -static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i)) return 0;
  }
  return axes[0];
}

// x*x or Pow(x, 2), for x.
bool is_square_of(const Value* sq, const Value* x) {
  Node* n = sq ? sq->producer() : nullptr;
  if (!n || n->num_inputs() != 2 || n->input(0) != x) return false;
  if (n->op() == Op::Mul) return n->input(1) == x;
  double two = 0;
  return n->op() == Op::Pow && pattern::scalar_value(n->input(1), x, &two) && two == 2.0;
}

// A weight of x's dtype whose static shape covers only the normalized axes (the last
// -axis dims of x, each 1 or equal), so it broadcasts without changing x's shape.
bool is_norm_weight(const Value* w, const Value* x, int64_t axis) {
  if (!w || w->dtype != x->dtype || !w->shape || !x->shape) return false;
  const SymShape& ws = *w->shape;
  const SymShape& xs = *x->shape;
  if (static_cast<int64_t>(ws.size()) > -axis) return false;
  for (size_t i = 0; i < ws.size(); ++i) {
    const Dim& wd = ws[ws.size() - 1 - i];
    const Dim& xd = xs[xs.size() - 1 - i];
    if (!wd.known()) return false;
    if (wd.value != 1 && (!xd.known() || xd.value != wd.value)) return false;
  }
  return true;
}

// Matches the normalized value `n` (output of the Div or Mul), returning x and filling
// axis/eps, or nullptr.
Value* match_rms(const Graph& g, Node* top, int64_t* axis, double* eps) {
  Value* x = nullptr;
  Value* rms = nullptr;  // Sqrt(ms + eps)
  if (top->op() == Op::Div) {
    x = top->input(0);
    rms = top->input(1);
  } else if (top->op() == Op::Mul && top->num_inputs() == 2) {
    // One operand is Reciprocal(rms) or Div(1, rms); the other is x.
    for (int i = 0; i < 2 && !rms; ++i) {
      Value* inv = top->input(static_cast<size_t>(i));
      if (!single_use(g, inv)) continue;
      Value* other = top->input(static_cast<size_t>(1 - i));
      if (Node* rc = producer_op(inv, Op::Reciprocal)) {
        x = other;
        rms = rc->input(0);
      } else if (Node* dv = producer_op(inv, Op::Div)) {
        double one = 0;
        if (other && pattern::scalar_value(dv->input(0), other, &one) && one == 1.0) {
          x = other;
          rms = dv->input(1);
        }
      }
    }
  }
  if (!x || !rms || !is_supported_dtype(x->dtype) || !is_float(x->dtype) || !single_use(g, rms)) return nullptr;
  Node* sqrt = producer_op(rms, Op::Sqrt);
  if (!sqrt || !single_use(g, sqrt->input(0))) return nullptr;
  Node* add_eps = producer_op(sqrt->input(0), Op::Add);
  Value* ms = other_operand(add_eps, [&](const Value* v) { return pattern::scalar_value(v, x, eps); });
  if (!ms || !single_use(g, ms)) return nullptr;
  Node* mean = producer_op(ms, Op::ReduceMean);
  if (!mean) return nullptr;
  *axis = trailing_reduce_axis(mean, x);
  if (*axis == 0) return nullptr;
  Value* sq = mean->input(0);
  if (!single_use(g, sq) || !is_square_of(sq, x)) return nullptr;
  return x;
}

}  // namespace

Status fuse_rmsnorm_pattern(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* top : g.nodes()) {
    if ((top->op() != Op::Div && top->op() != Op::Mul) || top->num_outputs() != 1 || !top->output(0)) continue;
    Value* y = top->output(0);
    if (y->uses().empty() && !g.is_graph_output(y)) continue;  // dead, e.g. left by an earlier fusion
    int64_t axis = 0;
    double eps = 0;
    Value* x = match_rms(g, top, &axis, &eps);
    if (!x) continue;
    // Optional weight: Mul(y, w) in either order.
    Value* weight = nullptr;
    if (single_use(g, y)) {
      Node* mul = y->uses()[0].node;
      if (mul->op() == Op::Mul && mul->num_outputs() == 1 && mul->output(0)) {
        Value* yy = y;
        Value* w = other_operand(mul, [&](const Value* v) { return v == yy; });
        if (w && w != y && is_norm_weight(w, x, axis)) {
          weight = w;
          y = mul->output(0);
        }
      }
    }
    // RMSNormalization requires a scale; its output dtype is the scale's, so ones of x's dtype.
    if (!weight) weight = g.add_constant(g.unique_name(top->name() + "_rms_scale"),
                                         cast_tensor(make_tensor<double>({}, {1.0}), x->dtype));
    Node* rms = g.add_node(Op::RMSNormalization,
                           g.unique_name(top->name().empty() ? std::string("rmsnorm") : top->name() + "_rmsnorm"),
                           {x, weight}, {g.unique_name(y->name() + "_rmsnorm")});
    rms->onnx_op_type = "RMSNormalization";
    rms->attrs.set("axis", axis);
    rms->attrs.set("epsilon", static_cast<float>(eps));
    rms->attrs.set("stash_type", int64_t{1});
    Value* out = rms->output(0);
    out->dtype = y->dtype;
    out->shape = y->shape;
    // The unfused chain is left dead for eliminate_dead_code.
    pattern::replace_keeping_name(g, y, out);
    ctx.rewrote(cat("fused RMSNormalization (axis ", axis, ", epsilon ", eps, ") into ", rms->describe()));
    changed = true;
  }
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln
