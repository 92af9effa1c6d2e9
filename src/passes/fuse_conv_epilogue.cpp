// Fuses a Conv with what follows it into one FusedConv: an optional residual Add of a
// tensor with the Conv output's shape, then an optional activation (Relu, Clip with
// constant bounds, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, SiLU as x*Sigmoid(x),
// Tanh, Gelu, Swish). Only fuses when every intermediate has one user and is no graph output.
#include <cmath>

#include "passes/pass.h"

namespace kiln {

namespace {

// True if some output of n is a graph output or feeds a live node (nodes left dead by an
// earlier pass still hold their inputs until eliminate_dead_code runs).
bool is_live(const Graph& g, const Node* n, int depth = 0) {
  if (depth > 16) return true;
  for (Value* o : n->outputs()) {
    if (!o) continue;
    if (g.is_graph_output(o)) return true;
    for (const Use& u : o->uses()) {
      if (is_live(g, u.node, depth + 1)) return true;
    }
  }
  return false;
}

// The uses of v by live nodes.
std::vector<Use> live_uses(const Graph& g, const Value* v) {
  std::vector<Use> out;
  for (const Use& u : v->uses()) {
    if (is_live(g, u.node)) out.push_back(u);
  }
  return out;
}

bool single_use(const Graph& g, const Value* v) {
  return v && !g.is_graph_output(v) && live_uses(g, v).size() == 1;
}

bool same_known_shape(const Value* a, const Value* b) {
  if (!a->shape || !b->shape || a->shape->size() != b->shape->size()) return false;
  for (size_t i = 0; i < a->shape->size(); ++i) {
    const Dim& x = (*a->shape)[i];
    const Dim& y = (*b->shape)[i];
    if (!x.known() || x.value != y.value) return false;
  }
  return true;
}

// A Clip bound: absent, or a constant scalar of dtype dt that a float attribute holds exactly.
bool clip_bound(const Value* v, DataType dt, std::optional<float>* out) {
  if (!v) return true;
  if (!v->is_constant() || v->constant().dtype() != dt || v->constant().size() != 1) return false;
  const double d = v->constant().get_double(0);
  if (std::isnan(d) || static_cast<double>(static_cast<float>(d)) != d) return false;
  *out = static_cast<float>(d);
  return true;
}

struct Activation {
  std::string name;
  Attributes attrs;  // activation parameters copied onto the FusedConv
  std::vector<Node*> nodes;
  Value* out = nullptr;
};

// Matches an activation consuming v (v's users are the activation's nodes only).
bool match_activation(Graph& g, Value* v, DataType dt, Activation* act) {
  if (!v || g.is_graph_output(v)) return false;
  const std::vector<Use> uses = live_uses(g, v);
  if (uses.size() == 2) {  // SiLU: Mul(v, Sigmoid(v))
    Node* a = uses[0].node;
    Node* b = uses[1].node;
    Node* sig = a->op() == Op::Sigmoid ? a : b;
    Node* mul = sig == a ? b : a;
    if (sig->op() != Op::Sigmoid || mul->op() != Op::Mul || sig == mul) return false;
    Value* s = sig->output(0);
    if (!single_use(g, s) || live_uses(g, s)[0].node != mul) return false;
    if (!((mul->input(0) == v && mul->input(1) == s) || (mul->input(0) == s && mul->input(1) == v))) return false;
    act->name = "SiLU";
    act->nodes = {sig, mul};
    act->out = mul->output(0);
    return true;
  }
  if (uses.size() != 1) return false;
  Node* n = uses[0].node;
  if (uses[0].input_index != 0) return false;
  switch (n->op()) {
    case Op::Relu: act->name = "Relu"; break;
    case Op::Sigmoid: act->name = "Sigmoid"; break;
    case Op::HardSwish: act->name = "HardSwish"; break;
    case Op::Tanh: act->name = "Tanh"; break;
    case Op::LeakyRelu:
      act->name = "LeakyRelu";
      act->attrs.set("alpha", n->attrs.get_float("alpha", 0.01f));
      break;
    case Op::HardSigmoid:
      act->name = "HardSigmoid";
      act->attrs.set("alpha", n->attrs.get_float("alpha", 0.2f));
      act->attrs.set("beta", n->attrs.get_float("beta", 0.5f));
      break;
    case Op::Gelu:
      act->name = "Gelu";
      act->attrs.set("approximate", n->attrs.get_string("approximate", "none"));
      break;
    case Op::Clip: {
      std::optional<float> lo, hi;
      if (!clip_bound(n->input(1), dt, &lo) || !clip_bound(n->input(2), dt, &hi)) return false;
      act->name = "Clip";
      if (lo) act->attrs.set("min", *lo);
      if (hi) act->attrs.set("max", *hi);
      break;
    }
    default:
      // Swish(alpha) (x * Sigmoid(alpha * x)), made from the SiLU pattern by fuse_silu_pattern.
      if (std::string(op_name(n->op())) != "Swish") return false;
      act->name = "Swish";
      act->attrs.set("alpha", n->attrs.get_float("alpha", 1.0f));
      break;
  }
  for (Value* o : n->outputs()) {  // single-output activations only
    if (o && o != n->output(0)) return false;
  }
  act->nodes = {n};
  act->out = n->output(0);
  return act->out != nullptr;
}

}  // namespace

Status fuse_conv_epilogue(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* conv : g.nodes()) {
    if (conv->op() != Op::Conv) continue;
    Value* y = conv->output(0);
    Value* x = conv->input(0);
    if (!y || !x || (y->dtype != DataType::kFloat32 && y->dtype != DataType::kFloat64)) continue;
    Value* cur = y;
    std::vector<Node*> fused;
    Value* z = nullptr;
    if (single_use(g, cur)) {
      Node* add = live_uses(g, cur)[0].node;
      if (add->op() == Op::Add) {
        Value* other = add->input(add->input(0) == cur ? 1 : 0);
        Value* sum = add->output(0);
        if (other && other != cur && other->dtype == cur->dtype && same_known_shape(cur, other) && sum &&
            same_known_shape(cur, sum)) {
          z = other;
          fused.push_back(add);
          cur = sum;
        }
      }
    }
    Activation act;
    if (match_activation(g, cur, y->dtype, &act)) {
      fused.insert(fused.end(), act.nodes.begin(), act.nodes.end());
      cur = act.out;
    }
    if (fused.empty()) continue;
    // Nothing between the Conv and the end of the chain may leak out.
    std::vector<Value*> inputs = {x, conv->input(1), conv->input(2), z};
    while (!inputs.empty() && inputs.back() == nullptr) inputs.pop_back();
    Node* f = g.add_node(Op::FusedConv, g.unique_name(conv->name() + "_fused"), inputs,
                         {g.unique_name(cur->name() + "_fused")});
    f->attrs = conv->attrs;
    f->attrs.set("activation", act.name.empty() ? std::string("None") : act.name);
    for (const auto& [k, a] : act.attrs.all()) f->attrs.set(k, a.value);
    f->onnx_op_type = "FusedConv";
    f->onnx_domain = "kiln";
    f->onnx_opset = conv->onnx_opset;
    Value* out = f->output(0);
    out->dtype = cur->dtype;
    out->shape = cur->shape;
    const bool is_output = g.is_graph_output(cur);
    const std::string name = cur->name();
    g.replace_all_uses_with(cur, out);
    if (is_output) {
      g.rename_value(cur, g.unique_name(name + "_unfused"));
      g.rename_value(out, name);
    }
    std::string what = cat("fused ", conv->describe());
    for (Node* n : fused) what += cat(" + ", n->describe());
    ctx.rewrote(what);
    changed = true;
  }
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();  // the fused nodes are now dead
}

}  // namespace kiln
