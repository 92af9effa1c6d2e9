// lower_float_precision (pass.h): float32 -> float16/bfloat16 for GPU engines.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/elementwise_expr.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// Inputs that ops read as float32 parameters rather than data.
bool keeps_float32(Op op, size_t input) {
  if (op == Op::Resize) return input == 1 || input == 2;
  return false;
}

Tensor convert_saturating(const Tensor& t, DataType target) {
  Tensor o(target, t.dims());
  const double lim = target == DataType::kFloat16 ? 65504.0 : 3.3895313892515355e38;
  const float* src = t.data<float>();
  dispatch_all(target, [&]<typename T>() {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      T* dst = o.data<T>();
      for (int64_t i = 0; i < t.size(); ++i) {
        double v = src[i];
        if (std::isfinite(v)) v = std::clamp(v, -lim, lim);  // -FLT_MAX masks stay large, not -inf
        dst[i] = convert_element<T>(static_cast<float>(v));
      }
    }
  });
  return o;
}

bool is_f32(const Value* v) { return v && v->dtype == DataType::kFloat32 && !v->is_sequence && !v->is_optional; }

}  // namespace

Status lower_float_precision(Graph& g, DataType target, PassContext& ctx) {
  if (target != DataType::kFloat16 && target != DataType::kBFloat16) {
    return invalid_argument("lower_float_precision: target must be float16 or bfloat16, got ", dtype_name(target));
  }
  const int64_t to = static_cast<int64_t>(target);
  std::vector<Node*> nodes = g.nodes();
  for (Node* n : nodes) {
    if (!n->subgraphs().empty()) {
      return unsupported(n->describe(), ": reduced precision for graphs with subgraphs (If/Loop/Scan) is not supported; "
                         "build without --fp16/--bf16");
    }
  }
  // 1. Float32 graph inputs: one Cast each, read by every former user.
  std::map<Value*, Value*> lowered;  // float32 value -> its low-precision replacement
  for (Value* in : g.inputs()) {
    if (!is_f32(in)) continue;
    Node* cast = g.add_node(Op::Cast, g.unique_name(in->name() + "_to_lp"), {in}, {g.unique_name(in->name() + "_lp")});
    cast->attrs.set("to", to);
    cast->output(0)->dtype = target;
    cast->output(0)->shape = in->shape;
    lowered[in] = cast->output(0);
    ctx.rewrote(cat("cast input '", in->name(), "' to ", dtype_name(target)));
  }
  // 2. Float32 constants: converted copies.
  for (Value* c : g.constants()) {
    if (!is_f32(c)) continue;
    lowered[c] = g.add_constant(g.unique_name(c->name() + "_lp"), convert_saturating(c->constant(), target));
  }
  // 3. Re-point inputs; ops whose output dtype is an attribute produce the target.
  for (Node* n : nodes) {
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      Value* v = n->input(i);
      auto it = lowered.find(v);
      if (it != lowered.end() && !keeps_float32(n->op(), i)) n->set_input(i, it->second);
    }
    if (n->op() == Op::Cast && n->num_inputs() == 1 && n->attrs.get_int("to", 0) == static_cast<int64_t>(DataType::kFloat32)) {
      n->attrs.set("to", to);
    } else if (n->op() == Op::ConstantOfShape && n->attrs.get_tensor("value")) {
      const Tensor v = *n->attrs.get_tensor("value");
      if (v.dtype() == DataType::kFloat32) n->attrs.set("value", convert_saturating(v, target));
    } else if (n->op() == Op::FusedElementwise) {
      KILN_ASSIGN_OR_RETURN(ElementwiseProgram p, parse_elementwise_expr(n->attrs.get_string("expr", "")));
      bool changed = false;
      for (ExprInstr& ins : p.instrs) {
        if (ins.op == Op::Cast && ins.attrs.get_int("to", 0) == static_cast<int64_t>(DataType::kFloat32)) {
          ins.attrs.set("to", to);
          changed = true;
        }
      }
      if (changed) {
        KILN_ASSIGN_OR_RETURN(std::string expr, format_elementwise_expr(p));
        n->attrs.set("expr", expr);
      }
    }
  }
  // 4. New dtypes everywhere; ops that still make float32 (dtype attributes such as
  // EyeLike's or RandomNormal's) get a Cast after them.
  PassReport r;
  PassContext inner(r);
  KILN_RETURN_IF_ERROR(infer_shapes(g, inner));
  for (Node* n : nodes) {
    if (n->op() == Op::Cast) continue;
    for (size_t k = 0; k < n->num_outputs(); ++k) {
      Value* o = n->output(k);
      if (!is_f32(o)) continue;
      bool feeds_lp = false;
      for (Node* u : g.nodes()) {
        for (size_t i = 0; i < u->num_inputs(); ++i) feeds_lp = feeds_lp || (u->input(i) == o && !keeps_float32(u->op(), i) && u != n);
      }
      if (!feeds_lp) continue;
      const std::string name = o->name();
      g.rename_value(o, g.unique_name(name + "_f32"));
      Node* cast = g.add_node(Op::Cast, g.unique_name(name + "_to_lp"), {o}, {name});
      cast->attrs.set("to", to);
      for (Node* u : g.nodes()) {
        if (u == cast) continue;
        for (size_t i = 0; i < u->num_inputs(); ++i) {
          if (u->input(i) == o && !keeps_float32(u->op(), i)) u->set_input(i, cast->output(0));
        }
      }
      for (size_t i = 0; i < g.outputs().size(); ++i) {
        if (g.outputs()[i] == o) g.set_output(i, cast->output(0));
      }
    }
  }
  // 5. Graph outputs that were float32 in the model: Cast back, under the original name.
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    Value* o = g.outputs()[i];
    if (!o || o->dtype != target || o->is_constant() || o->kind() == Value::Kind::kGraphInput) continue;
    const std::string name = o->name();
    g.rename_value(o, g.unique_name(name + "_lp"));
    Node* cast = g.add_node(Op::Cast, g.unique_name(name + "_to_f32"), {o}, {name});
    cast->attrs.set("to", static_cast<int64_t>(DataType::kFloat32));
    g.set_output(i, cast->output(0));
  }
  KILN_RETURN_IF_ERROR(g.topological_sort());
  KILN_RETURN_IF_ERROR(infer_shapes(g, inner));
  PassReport dce;
  PassContext dctx(dce);
  KILN_RETURN_IF_ERROR(eliminate_dead_code(g, dctx));
  ctx.rewrote(cat("lowered float32 to ", dtype_name(target)));
  return Status::ok();
}

}  // namespace kiln
