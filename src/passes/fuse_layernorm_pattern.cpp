// Fuses LayerNormalization over the last axis written out with elementwise ops:
//   mean = ReduceMean(x, axes=[-1]); d = x - mean; var = ReduceMean(d^2 or d*d, axes=[-1])
//   y = d / Sqrt(var + eps) [* gamma] [+ beta]
// into LayerNormalization(x, gamma or ones, beta; axis=-1, epsilon=eps). eps, gamma and
// beta must be constants; every matched intermediate must feed only the pattern.
#include <cmath>

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

// A ReduceMean of `x`'s rank over exactly its last axis, keeping dims.
bool reduces_last_axis(const Node* r, const Value* x) {
  if (!r || r->op() != Op::ReduceMean || r->attrs.get_int("keepdims", 1) == 0) return false;
  std::vector<int64_t> axes;
  if (r->input(1)) {
    if (!r->input(1)->is_constant()) return false;
    axes = r->input(1)->constant().to_int_vector();
  } else if (r->attrs.has("axes")) {
    axes = r->attrs.get_ints("axes");
  } else {
    return false;
  }
  if (axes.size() != 1) return false;
  if (axes[0] == -1) return true;
  return x->shape && axes[0] == static_cast<int64_t>(x->shape->size()) - 1;
}

// A constant of x's dtype with one element that broadcasts into x without changing x's shape.
bool scalar_constant(const Value* c, const Value* x, double* out) {
  if (!c || !c->is_constant()) return false;
  const Tensor& t = c->constant();
  if (t.dtype() != x->dtype || t.size() != 1) return false;
  if (t.rank() > 0 && (!x->shape || static_cast<int>(x->shape->size()) < t.rank())) return false;
  *out = t.get_double(0);
  return true;
}

// A constant of x's dtype that broadcasts into x without changing x's shape.
bool broadcasts_into(const Value* c, const Value* x) {
  if (!c || !c->is_constant() || !x->shape) return false;
  const Tensor& t = c->constant();
  if (t.dtype() != x->dtype) return false;
  const SymShape& s = *x->shape;
  if (t.rank() > static_cast<int>(s.size())) return false;
  for (int i = 0; i < t.rank(); ++i) {
    const int64_t d = t.dim(t.rank() - 1 - i);
    const Dim& xd = s[s.size() - 1 - static_cast<size_t>(i)];
    if (d != 1 && (!xd.known() || xd.value != d)) return false;
  }
  return true;
}

}  // namespace

Status fuse_layernorm_pattern(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* div : g.nodes()) {
    if (div->op() != Op::Div || div->num_outputs() != 1 || !div->output(0)) continue;
    if (div->output(0)->uses().empty() && !g.is_graph_output(div->output(0))) continue;  // dead
    // d = Sub(x, mean), mean = ReduceMean(x) used only by the Sub.
    Value* d = div->input(0);
    Node* sub = producer_op(d, Op::Sub);
    if (!sub || g.is_graph_output(d)) continue;
    Value* x = sub->input(0);
    Value* mean = sub->input(1);
    if (!x || !is_supported_dtype(x->dtype) || !is_float(x->dtype) || !single_use(g, mean)) continue;
    Node* mean_node = producer_op(mean, Op::ReduceMean);
    if (!mean_node || mean_node->input(0) != x || !reduces_last_axis(mean_node, x)) continue;
    // std = Sqrt(var + eps).
    Value* std_v = div->input(1);
    Node* sqrt = producer_op(std_v, Op::Sqrt);
    if (!sqrt || !single_use(g, std_v) || !single_use(g, sqrt->input(0))) continue;
    Node* add_eps = producer_op(sqrt->input(0), Op::Add);
    double eps = 0;
    Value* var = other_operand(add_eps, [&](const Value* a) { return scalar_constant(a, x, &eps); });
    if (!var || !single_use(g, var)) continue;
    Node* var_node = producer_op(var, Op::ReduceMean);
    if (!var_node || !reduces_last_axis(var_node, x)) continue;
    Value* sq = var_node->input(0);
    if (!single_use(g, sq)) continue;
    Node* sq_node = sq->producer();
    if (!sq_node || sq_node->num_inputs() != 2 || sq_node->input(0) != d) continue;
    double two = 0;
    if (sq_node->op() == Op::Pow) {
      if (!scalar_constant(sq_node->input(1), x, &two) || two != 2.0) continue;
      if (d->uses().size() != 2) continue;  // the Pow and the Div
    } else if (sq_node->op() == Op::Mul) {
      if (sq_node->input(1) != d || d->uses().size() != 3) continue;  // Mul(d, d) and the Div
    } else {
      continue;
    }
    // Optional affine: Mul(gamma) then Add(beta), constants either side.
    Value* y = div->output(0);
    Value* gamma = nullptr;
    Value* beta = nullptr;
    if (single_use(g, y)) {
      Node* mul = y->uses()[0].node;
      if (mul->op() == Op::Mul && mul->num_outputs() == 1 && mul->output(0)) {
        gamma = other_operand(mul, [&](const Value* a) { return a == y; });
        if (gamma && broadcasts_into(gamma, x)) {
          y = mul->output(0);
        } else {
          gamma = nullptr;
        }
      }
    }
    if (gamma && single_use(g, y)) {
      Node* add = y->uses()[0].node;
      if (add->op() == Op::Add && add->num_outputs() == 1 && add->output(0)) {
        Value* yy = y;
        beta = other_operand(add, [&](const Value* a) { return a == yy; });
        if (beta && broadcasts_into(beta, x)) {
          y = add->output(0);
        } else {
          beta = nullptr;
        }
      }
    }
    if (!gamma) gamma = g.add_constant(g.unique_name(div->name() + "_ln_scale"),
                                       cast_tensor(make_tensor<double>({}, {1.0}), x->dtype));
    std::vector<Value*> inputs = {x, gamma};
    if (beta) inputs.push_back(beta);
    // The fused node's output takes over y's name (graph outputs keep their names); the
    // unfused chain is left dead for eliminate_dead_code.
    const std::string name = y->name();
    g.rename_value(y, g.unique_name(name + "_unfused"));
    Node* ln = g.add_node(Op::LayerNormalization,
                          g.unique_name(div->name().empty() ? std::string("layernorm") : div->name() + "_layernorm"),
                          inputs, {name});
    ln->onnx_op_type = "LayerNormalization";
    ln->attrs.set("axis", int64_t{-1});
    ln->attrs.set("epsilon", static_cast<float>(eps));
    Value* out = ln->output(0);
    out->dtype = y->dtype;
    out->shape = y->shape;
    g.replace_all_uses_with(y, out);
    ctx.rewrote(cat("fused LayerNormalization (epsilon ", eps, beta ? ", with bias" : "", ") into ", ln->describe()));
    changed = true;
  }
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln
