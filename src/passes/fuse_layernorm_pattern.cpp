// Fuses LayerNormalization over the last axis written out with elementwise ops:
//   mean = ReduceMean(x, axes=[-1]); d = x - mean; var = ReduceMean(d^2 or d*d, axes=[-1])
//   y = d / Sqrt(var + eps) [* gamma] [+ beta]
// into LayerNormalization(x, gamma or ones, beta; axis=-1, epsilon=eps). eps, gamma and
// beta must be constants; every matched intermediate must feed only the pattern.
// It also fuses ONNX's own LayerNormalization function body (what onnx's function expansion
// and some exporters emit), which works on a Flatten'd 2-D view with Var = E[x^2] - E[x]^2
// and exposes Mean and InvStdDev; see fuse_function_body below.
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

// ---- ONNX's LayerNormalization function body ----
// After the level-1 passes fold its shape arithmetic and drop the same-type Casts
// (stash_type = float32 on float32 inputs), the body reads:
//   x2 = Flatten(X, axis)                  (gone when X already is that 2-D view)
//   mean = ReduceMean(x2, [1]); var = ReduceMean(x2 * x2, [1]) - mean * mean
//   std = Sqrt(var + eps); y2 = (x2 - mean) / std [* Flatten(W, 0)] [+ Flatten(B, 0)]
//   Y = Reshape(y2, Shape(X)); Mean = Reshape(mean, reduced); InvStdDev = Reshape(Reciprocal(std), reduced)
// and becomes LayerNormalization(X, W, B; axis) with its Mean/InvStdDev outputs where used.

// x*x or Pow(x, 2), for x.
bool is_square_of(const Value* sq, const Value* x) {
  Node* n = sq ? sq->producer() : nullptr;
  if (!n || n->num_inputs() != 2 || n->input(0) != x) return false;
  if (n->op() == Op::Mul) return n->input(1) == x;
  double two = 0;
  return n->op() == Op::Pow && pattern::scalar_value(n->input(1), x, &two) && two == 2.0;
}

// Static dims of v, or false.
bool static_dims(const Value* v, Dims* out) {
  if (!v || !v->shape) return false;
  out->clear();
  for (const Dim& d : *v->shape) {
    if (!d.known()) return false;
    out->push_back(d.value);
  }
  return true;
}

bool same_static_shape(const Value* v, const Dims& dims) {
  Dims d;
  return static_dims(v, &d) && d == dims;
}

// The LayerNormalization scale or bias for the operand `p` of the 2-D view's Mul/Add:
// Flatten(W, 0) gives W, a one-element value or one shaped like X's normalized dims
// `norm_dims` stays, and a constant [inner] or [1, inner] is to be reshaped to norm_dims
// (*reshape; done once the whole pattern matched). nullptr when p is none of these.
Value* norm_param(Value* p, const Value* x, const Dims& norm_dims, bool* reshape) {
  *reshape = false;
  if (!p || p->dtype != x->dtype) return nullptr;
  int64_t inner = 1;
  for (int64_t d : norm_dims) inner *= d;
  Node* fl = producer_op(p, Op::Flatten);
  if (fl && fl->attrs.get_int("axis", 1) == 0 && fl->input(0) && fl->input(0)->dtype == x->dtype) p = fl->input(0);
  Dims pd;
  if (!static_dims(p, &pd)) return nullptr;
  int64_t size = 1;
  for (int64_t d : pd) size *= d;
  if ((size == 1 && pd.size() <= norm_dims.size()) || pd == norm_dims) return p;
  // Otherwise only a constant in the 2-D view's own layouts: [inner] or [1, inner].
  if (!p->is_constant() || size != inner || !(pd.size() == 1 || (pd.size() == 2 && pd[0] == 1))) return nullptr;
  *reshape = true;
  return p;
}

bool fuse_function_body(Graph& g, Node* div, PassContext& ctx) {
  Value* dev = div->input(0);
  Node* sub = producer_op(dev, Op::Sub);
  if (!sub || !single_use(g, dev)) return false;
  Value* x2 = sub->input(0);
  Value* mean = sub->input(1);
  if (!x2 || !mean || !is_supported_dtype(x2->dtype) || !is_float(x2->dtype)) return false;
  Node* mean_node = producer_op(mean, Op::ReduceMean);
  if (!mean_node || mean_node->input(0) != x2 || !reduces_last_axis(mean_node, x2)) return false;
  // std = Sqrt(var + eps), var = E[x2^2] - mean^2.
  Value* std_v = div->input(1);
  Node* sqrt = producer_op(std_v, Op::Sqrt);
  if (!sqrt || g.is_graph_output(std_v) || !single_use(g, sqrt->input(0))) return false;
  Node* add_eps = producer_op(sqrt->input(0), Op::Add);
  double eps = 0;
  Value* var = other_operand(add_eps, [&](const Value* a) { return pattern::scalar_value(a, x2, &eps); });
  if (!var || !single_use(g, var)) return false;
  Node* var_node = producer_op(var, Op::Sub);
  if (!var_node || !single_use(g, var_node->input(0)) || !single_use(g, var_node->input(1))) return false;
  Node* msq_node = producer_op(var_node->input(0), Op::ReduceMean);
  if (!msq_node || !reduces_last_axis(msq_node, x2) || !single_use(g, msq_node->input(0)) ||
      !is_square_of(msq_node->input(0), x2) || !is_square_of(var_node->input(1), mean))
    return false;
  // x and the LayerNormalization axis: the Flatten's axis, or the last axis of the view.
  Node* flatten = producer_op(x2, Op::Flatten);
  Value* x = flatten ? flatten->input(0) : x2;
  Dims xd;
  if (!static_dims(x, &xd) || xd.empty() || x->dtype != x2->dtype) return false;
  const int64_t rank = static_cast<int64_t>(xd.size());
  int64_t axis = flatten ? flatten->attrs.get_int("axis", 1) : rank - 1;
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return false;
  const Dims norm_dims(xd.begin() + axis, xd.end());
  Dims reduced(xd.begin(), xd.begin() + axis);
  reduced.resize(xd.size(), 1);
  // Other users of mean and std are the body's Mean and InvStdDev outputs: Reshapes to the
  // reduced shape (required when viewing X through a Flatten), or any users when mean and
  // std already have that shape. `skip` are the pattern's own users.
  const Node* sqm_node = var_node->input(1)->producer();
  std::vector<Value*> mean_outs, inv_outs;
  auto output_view = [&](Value* v, const Node* skip1, const Node* skip2, std::vector<Value*>* outs) {
    std::vector<Value*> reshaped;
    bool other = false, all_reshapes = !g.is_graph_output(v);
    for (const Use& u : v->uses()) {
      Node* r = u.node;
      if (r == skip1 || r == skip2) continue;
      other = true;
      if (r->op() == Op::Reshape && u.input_index == 0 && r->num_outputs() == 1 && r->output(0) &&
          same_static_shape(r->output(0), reduced)) {
        reshaped.push_back(r->output(0));
      } else {
        all_reshapes = false;
      }
    }
    if (!other && !g.is_graph_output(v)) return true;
    if (all_reshapes) {
      outs->insert(outs->end(), reshaped.begin(), reshaped.end());
      return true;
    }
    if (flatten) return false;
    outs->push_back(v);
    return true;
  };
  if (!output_view(mean, sub, sqm_node, &mean_outs)) return false;
  for (const Use& u : std_v->uses()) {
    if (u.node == div) continue;
    Node* rc = u.node;
    if (rc->op() != Op::Reciprocal || rc->num_outputs() != 1 || !rc->output(0) ||
        !output_view(rc->output(0), nullptr, nullptr, &inv_outs))
      return false;
  }
  // One value per optional output, so graph outputs keep their names.
  if (mean_outs.size() > 1 || inv_outs.size() > 1) return false;
  // The Mean and InvStdDev outputs are float32 (stash_type 1), as in the float32 body.
  if ((!mean_outs.empty() || !inv_outs.empty()) && x->dtype != DataType::kFloat32) return false;
  // Optional affine on the view: Mul(scale) then Add(bias), either operand order.
  Value* y = div->output(0);
  Value* scale = nullptr;
  Value* bias = nullptr;
  bool reshape_scale = false, reshape_bias = false;
  auto affine = [&](Op op, Value** param, bool* reshape) {
    if (!single_use(g, y)) return;
    Node* n = y->uses()[0].node;
    if (n->op() != op || n->num_outputs() != 1 || !n->output(0)) return;
    Value* yy = y;
    Value* p = other_operand(n, [&](const Value* a) { return a == yy; });
    if (!p || p == y || !(*param = norm_param(p, x, norm_dims, reshape))) return;
    y = n->output(0);
  };
  affine(Op::Mul, &scale, &reshape_scale);
  if (scale) affine(Op::Add, &bias, &reshape_bias);
  // Y = Reshape(y2, Shape(X)) (or to X's static shape): required after a Flatten, absorbed
  // when it keeps the shape.
  Node* back = single_use(g, y) ? y->uses()[0].node : nullptr;
  if (back && (back->op() != Op::Reshape || back->input(0) != y || back->num_outputs() != 1 || !back->output(0))) {
    back = nullptr;
  }
  if (back) {
    Node* shape = producer_op(back->input(1), Op::Shape);
    const bool whole_shape = shape && shape->input(0) == x && !shape->attrs.has("start") && !shape->attrs.has("end");
    if (!whole_shape && !same_static_shape(back->output(0), xd)) back = nullptr;
  }
  if (flatten && !back) return false;
  if (back) y = back->output(0);
  auto reshaped = [&](Value* p) {
    return g.add_constant(g.unique_name(p->name() + "_ln"), p->constant().reshaped(norm_dims));
  };
  if (reshape_scale) scale = reshaped(scale);
  if (reshape_bias) bias = reshaped(bias);
  if (!scale) scale = g.add_constant(g.unique_name(div->name() + "_ln_scale"),
                                     cast_tensor(make_tensor<double>({}, {1.0}), x->dtype));
  std::vector<Value*> inputs = {x, scale};
  if (bias) inputs.push_back(bias);
  const std::string base = div->name().empty() ? std::string("layernorm") : div->name() + "_layernorm";
  Node* ln = g.add_node(Op::LayerNormalization, g.unique_name(base), inputs,
                        {g.unique_name(y->name() + "_ln"), mean_outs.empty() ? "" : g.unique_name(base + "_mean"),
                         inv_outs.empty() ? "" : g.unique_name(base + "_inv_std_dev")});
  ln->onnx_op_type = "LayerNormalization";
  ln->attrs.set("axis", axis - rank);
  ln->attrs.set("epsilon", static_cast<float>(eps));
  ln->attrs.set("stash_type", int64_t{1});
  auto take_over = [&](Value* from, Value* to) {
    to->dtype = from->dtype;
    to->shape = from->shape;
    pattern::replace_keeping_name(g, from, to);
  };
  take_over(y, ln->output(0));
  if (!mean_outs.empty()) take_over(mean_outs[0], ln->output(1));
  if (!inv_outs.empty()) take_over(inv_outs[0], ln->output(2));
  ctx.rewrote(cat("fused LayerNormalization function body (axis ", axis - rank, ", epsilon ", eps,
                  bias ? ", with bias" : "", mean_outs.empty() ? "" : ", Mean", inv_outs.empty() ? "" : ", InvStdDev",
                  ") into ", ln->describe()));
  return true;
}

// ---- an affine Mul/Add after a LayerNormalization node ----
// LayerNormalization(x, ones[, zeros]) -> Mul(gamma) [-> Add(beta)] (or only the Add), with
// constants over the normalized dims: what an exporter's LayerNormalization without affine
// followed by its own Mul/Add gives, or a pattern fused while the affine's broadcast could
// not be proven yet. The constants become the scale and bias. Only onto a ones scale and a
// missing or zero bias, so the fused op computes what the separate ops did.

bool all_equal(const Tensor& t, double v) {
  for (int64_t i = 0; i < t.size(); ++i) {
    if (t.get_double(i) != v) return false;
  }
  return true;
}

// A constant of x's dtype that broadcasts into x only along the normalized dims
// x[axis:] (all known): as a tensor of those dims, else an undefined tensor.
Tensor param_over_norm_dims(const Value* c, const Value* x, int64_t axis) {
  if (!c || !c->is_constant() || c->dtype != x->dtype || !x->shape) return {};
  const SymShape& xs = *x->shape;
  Dims nd;
  for (size_t i = static_cast<size_t>(axis); i < xs.size(); ++i) {
    if (!xs[i].known()) return {};
    nd.push_back(xs[i].value);
  }
  const Tensor& t = c->constant();
  if (t.dtype() != x->dtype || t.rank() > static_cast<int>(xs.size())) return {};
  if (t.size() == 1) {
    Tensor filled(t.dtype(), nd);
    for (int64_t i = 0; i < filled.size(); ++i) {
      if (t.dtype() == DataType::kFloat32) filled.data<float>()[i] = t.data<float>()[0];
      else if (t.dtype() == DataType::kFloat64) filled.data<double>()[i] = t.data<double>()[0];
      else return {};
    }
    return filled;
  }
  // Leading 1s aside, exactly the normalized dims.
  Dims td = t.dims();
  while (td.size() > nd.size() && td.front() == 1) td.erase(td.begin());
  if (td != nd) return {};
  return t.reshaped(nd);
}

// Whether a subgraph of g reads `name` from g (a use the use lists do not show).
bool captured_by_subgraph(const Graph& g, const std::string& name) {
  for (const Node* n : g.nodes()) {
    for (const Graph* sub : n->subgraphs()) {
      for (const Value* r : sub->outer_refs()) {
        if (r->name() == name) return true;
      }
      if (captured_by_subgraph(*sub, name)) return true;
    }
  }
  return false;
}

bool absorb_affine(Graph& g, Node* ln, PassContext& ctx) {
  Value* x = ln->input(0);
  Value* scale = ln->input(1);
  Value* bias = ln->input(2);
  Value* y = ln->output(0);
  if (!x || !y || !x->shape || !scale || !scale->is_constant() || !all_equal(scale->constant(), 1.0)) return false;
  if (bias && (!bias->is_constant() || !all_equal(bias->constant(), 0.0))) return false;
  for (size_t i = 1; i < ln->num_outputs(); ++i) {
    if (ln->output(i) && (!ln->output(i)->uses().empty() || g.is_graph_output(ln->output(i)))) return false;
  }
  const int64_t rank = static_cast<int64_t>(x->shape->size());
  int64_t axis = ln->attrs.get_int("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return false;
  // The Mul (either operand order), then the Add.
  int absorbed = 0;
  for (Op op : {Op::Mul, Op::Add}) {
    if (!single_use(g, y)) break;
    Node* n = y->uses()[0].node;
    if (n->op() != op || n->num_outputs() != 1 || !n->output(0) || n->output(0)->dtype != y->dtype) continue;
    if (captured_by_subgraph(g, n->output(0)->name())) continue;  // the follower is removed at once
    Value* p = other_operand(n, [&](const Value* a) { return a == y; });
    Tensor t = p && p != y ? param_over_norm_dims(p, x, axis) : Tensor();
    if (!t.defined()) continue;
    Value* c = g.add_constant(g.unique_name(p->name() + (op == Op::Mul ? "_ln_scale" : "_ln_bias")), std::move(t));
    c->dtype = x->dtype;
    if (op == Op::Mul) {
      ln->set_input(1, c);
      // A zero bias scales to zero: it stays.
    } else if (ln->num_inputs() > 2) {
      ln->set_input(2, c);
    } else {
      ln->add_input(c);
    }
    ctx.rewrote(cat("absorbed ", n->describe(), " into ", ln->describe(), op == Op::Mul ? " as its scale" : " as its bias"));
    pattern::absorb_follower(g, n, y);
    ++absorbed;
  }
  return absorbed > 0;
}

}  // namespace

Status fuse_layernorm_pattern(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* div : g.nodes()) {
    if (div->op() != Op::Div || div->num_outputs() != 1 || !div->output(0)) continue;
    if (div->output(0)->uses().empty() && !g.is_graph_output(div->output(0))) continue;  // dead
    if (fuse_function_body(g, div, ctx)) {
      changed = true;
      continue;
    }
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
  for (Node* ln : g.nodes()) {
    if (ln->op() == Op::LayerNormalization && ln->num_outputs() >= 1) changed = absorb_affine(g, ln, ctx) || changed;
  }
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln
