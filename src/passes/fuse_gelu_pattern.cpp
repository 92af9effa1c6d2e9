// Fuses GELU written out with elementwise ops into the Gelu op:
//   erf form:  x * 0.5 * (1 + Erf(x / sqrt(2)))                  -> Gelu(approximate="none")
//   tanh form: x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) -> Gelu(approximate="tanh")
// The three factors x, 0.5 and (1 + ...) may be multiplied in any order and grouping;
// x / sqrt(2) may also be x * (1/sqrt(2)); x^3 may be Pow(x, 3) or x*x*x; the sums may be
// Add or two-input Sum. Constants are matched with a 1e-4 relative tolerance.
#include <array>
#include <cmath>
#include <numbers>

#include "passes/pass.h"
#include "passes/pattern_util.h"

namespace kiln {

namespace {

using pattern::scalar_value;
using pattern::single_use;



// A scalar constant equal to `want` within 1e-4 relative.
bool constant_near(const Value* c, const Value* x, double want) {
  double v = 0;
  return scalar_value(c, x, &v) && std::fabs(v - want) <= 1e-4 * std::fabs(want);
}

// The single-use producer of v if it is `op` with two inputs.
Node* binary(const Graph& g, const Value* v, Op op) {
  if (!single_use(g, v)) return nullptr;
  Node* n = v->producer();
  if (!n || n->op() != op || n->num_inputs() != 2 || n->num_outputs() != 1) return nullptr;
  return n;
}

// Add or two-input Sum.
Node* sum2(const Graph& g, const Value* v) {
  Node* n = binary(g, v, Op::Add);
  return n ? n : binary(g, v, Op::Sum);
}

// n has inputs {a, b} in either order where pred(a) holds; returns b or nullptr.
template <typename Pred>
Value* other_operand(Node* n, Pred pred) {
  if (!n) return nullptr;
  if (pred(n->input(0))) return n->input(1);
  if (pred(n->input(1))) return n->input(0);
  return nullptr;
}

// v == x * x * x (Pow(x, 3) or a Mul chain) with single-use intermediates.
bool is_cube(const Graph& g, const Value* v, const Value* x) {
  if (Node* p = binary(g, v, Op::Pow)) return p->input(0) == x && constant_near(p->input(1), x, 3.0);
  Node* m = binary(g, v, Op::Mul);
  Value* sq = other_operand(m, [&](const Value* a) { return a == x; });
  Node* m2 = binary(g, sq, Op::Mul);
  return m2 && m2->input(0) == x && m2->input(1) == x;
}

// v == Erf(x / sqrt(2)) or Erf(x * (1/sqrt(2))).
bool is_erf_term(const Graph& g, const Value* v, const Value* x) {
  if (!single_use(g, v) || !v->producer() || v->producer()->op() != Op::Erf) return false;
  const Value* u = v->producer()->input(0);
  if (Node* d = binary(g, u, Op::Div)) return d->input(0) == x && constant_near(d->input(1), x, std::numbers::sqrt2);
  Node* m = binary(g, u, Op::Mul);
  return other_operand(m, [&](const Value* a) { return a == x; }) != nullptr &&
         constant_near(other_operand(m, [&](const Value* a) { return a == x; }), x, 1.0 / std::numbers::sqrt2);
}

// v == Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)).
bool is_tanh_term(const Graph& g, const Value* v, const Value* x) {
  if (!single_use(g, v) || !v->producer() || v->producer()->op() != Op::Tanh) return false;
  const double k = std::sqrt(2.0 / std::numbers::pi);
  Node* scale = binary(g, v->producer()->input(0), Op::Mul);
  Value* inner = other_operand(scale, [&](const Value* a) { return constant_near(a, x, k); });
  Value* cube_term = other_operand(sum2(g, inner), [&](const Value* a) { return a == x; });
  Value* cube = other_operand(binary(g, cube_term, Op::Mul), [&](const Value* a) { return constant_near(a, x, 0.044715); });
  return cube && is_cube(g, cube, x);
}

// phi == 1 + Erf(...) or 1 + Tanh(...); returns "none", "tanh" or nullptr.
const char* gelu_kind(const Graph& g, const Value* phi, const Value* x) {
  Value* t = other_operand(sum2(g, phi), [&](const Value* a) { return constant_near(a, x, 1.0); });
  if (!t) return nullptr;
  if (is_erf_term(g, t, x)) return "none";
  if (is_tanh_term(g, t, x)) return "tanh";
  return nullptr;
}

}  // namespace

Status fuse_gelu_pattern(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* top : g.nodes()) {
    if (top->op() != Op::Mul || top->num_inputs() != 2 || top->num_outputs() != 1 || !top->output(0)) continue;
    if (top->output(0)->uses().empty() && !g.is_graph_output(top->output(0))) continue;  // dead
    // The product of three factors: one input of `top` is an inner Mul.
    Value* x = nullptr;
    const char* kind = nullptr;
    for (int side = 0; side < 2 && !kind; ++side) {
      Node* inner = binary(g, top->input(static_cast<size_t>(side)), Op::Mul);
      if (!inner) continue;
      std::array<Value*, 3> f = {inner->input(0), inner->input(1), top->input(static_cast<size_t>(1 - side))};
      static constexpr int kPerms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
      for (const auto& p : kPerms) {
        Value* cx = f[static_cast<size_t>(p[0])];
        Value* half = f[static_cast<size_t>(p[1])];
        Value* phi = f[static_cast<size_t>(p[2])];
        if (!cx || cx->is_constant() || !is_supported_dtype(cx->dtype) || !is_float(cx->dtype)) continue;
        if (!constant_near(half, cx, 0.5)) continue;
        if (const char* k = gelu_kind(g, phi, cx)) {
          x = cx;
          kind = k;
          break;
        }
      }
    }
    if (!kind) continue;
    // The Gelu output takes over the product's name (graph outputs keep their names); the
    // unfused chain is left dead for eliminate_dead_code.
    Value* old_out = top->output(0);
    const std::string name = old_out->name();
    g.rename_value(old_out, g.unique_name(name + "_unfused"));
    Node* n = g.add_node(Op::Gelu, g.unique_name(top->name().empty() ? std::string("gelu") : top->name() + "_gelu"),
                         {x}, {name});
    n->onnx_op_type = "Gelu";
    n->attrs.set("approximate", std::string(kind));
    n->output(0)->dtype = old_out->dtype;
    n->output(0)->shape = old_out->shape;
    g.replace_all_uses_with(old_out, n->output(0));
    ctx.rewrote(cat("fused GELU (", kind, ") into ", n->describe()));
    changed = true;
  }
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln
