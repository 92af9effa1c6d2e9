#include "runtime/interpreter.h"

#include <unordered_map>
#include <unordered_set>

#include "backends/cpu/reference/kernel.h"

namespace kiln {

Status validate_inputs(const Graph& g, const TensorMap& inputs) {
  for (const auto& [name, t] : inputs) {
    bool known = false;
    for (Value* v : g.inputs()) known |= v->name() == name;
    if (!known) {
      std::string names;
      for (Value* v : g.inputs()) names += (names.empty() ? "" : ", ") + v->name();
      return invalid_argument("unknown input '", name, "'; the model's inputs are: ", names);
    }
  }
  std::map<std::string, std::pair<int64_t, std::string>> symbols;  // symbol -> (size, input that set it)
  for (Value* v : g.inputs()) {
    auto it = inputs.find(v->name());
    if (it == inputs.end()) return invalid_argument("missing input '", v->name(), "' (", dtype_name(v->dtype), sym_shape_str(v->shape), ")");
    const Tensor& t = it->second;
    if (t.is_none()) {
      if (!v->is_optional) return invalid_argument("input '", v->name(), "' is not optional but was given no value");
      continue;
    }
    if (v->is_sequence != t.is_sequence()) {
      return invalid_argument("input '", v->name(), "': expected a ", v->is_sequence ? "sequence" : "tensor", ", got ",
                              t.describe());
    }
    if (t.is_sequence()) continue;  // element types are checked by the consuming kernels
    if (v->dtype != DataType::kUndefined && t.dtype() != v->dtype) {
      return invalid_argument("input '", v->name(), "': expected dtype ", dtype_name(v->dtype), ", got ", dtype_name(t.dtype()));
    }
    if (!v->shape) continue;
    const SymShape& s = *v->shape;
    if (static_cast<int>(s.size()) != t.rank()) {
      return invalid_argument("input '", v->name(), "': expected shape ", sym_shape_str(v->shape), " (rank ", s.size(),
                              "), got ", dims_str(t.dims()), " (rank ", t.rank(), ")");
    }
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t got = t.dims()[i];
      if (s[i].known() && s[i].value != got) {
        return invalid_argument("input '", v->name(), "': expected shape ", sym_shape_str(v->shape), ", got ",
                                dims_str(t.dims()), " (dimension ", i, " must be ", s[i].value, ")");
      }
      if (!s[i].known() && !s[i].symbol.empty()) {
        auto [sit, inserted] = symbols.emplace(s[i].symbol, std::make_pair(got, v->name()));
        if (!inserted && sit->second.first != got) {
          return invalid_argument("input '", v->name(), "': dimension '", s[i].symbol, "' is ", got, " but input '",
                                  sit->second.second, "' set it to ", sit->second.first);
        }
      }
    }
  }
  return Status::ok();
}

namespace {

// Names that subgraphs (at any depth) capture from enclosing scopes.
// Ops whose kernels take sequences and empty optionals as inputs; every other kernel
// reads a tensor buffer, which those do not have.
bool takes_non_tensors(Op op) {
  const std::string_view name = op_name(op);
  return name.rfind("Sequence", 0) == 0 || name.rfind("Optional", 0) == 0 || op == Op::ConcatFromSequence ||
         op == Op::SplitToSequence || op == Op::Identity || op == Op::If || op == Op::Loop || op == Op::Scan;
}

void collect_captures(const Graph& g, std::unordered_set<std::string>& names) {
  for (Node* n : g.nodes()) {
    for (Graph* sub : n->subgraphs()) {
      for (Value* r : sub->outer_refs()) names.insert(r->name());
      collect_captures(*sub, names);
    }
  }
}

}  // namespace

Result<std::vector<Tensor>> execute_graph(const Graph& g, const std::vector<Tensor>& inputs,
                                          const std::function<const Tensor*(const std::string&)>& outer,
                                          const Interpreter::NodeObserver& observer) {
  const KernelRegistry& kernels = reference_kernels();
  std::unordered_map<const Value*, Tensor> env;
  if (inputs.size() != g.inputs().size()) {
    return invalid_argument("graph '", g.name, "' takes ", g.inputs().size(), " inputs, got ", inputs.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) env[g.inputs()[i]] = inputs[i];
  for (Value* c : g.constants()) env[c] = c->constant();
  for (Value* r : g.outer_refs()) {
    const Tensor* t = outer ? outer(r->name()) : nullptr;
    if (!t) return invalid_argument("outer-scope value '", r->name(), "' is not available");
    env[r] = *t;
  }
  // Remaining uses, so intermediates are freed as soon as their last user ran.
  std::unordered_map<const Value*, int> remaining;
  for (Node* n : g.nodes()) {
    for (Value* v : n->inputs()) if (v) ++remaining[v];
  }
  for (Value* o : g.outputs()) ++remaining[o];
  // Values captured by subgraphs stay alive for the whole run (their uses are implicit).
  std::unordered_set<std::string> captured;
  collect_captures(g, captured);
  for (const auto& name : captured) {
    if (Value* v = g.find_value(name)) ++remaining[v];
  }

  auto lookup = [&](const std::string& name) -> const Tensor* {
    Value* v = g.find_value(name);
    if (v) {
      auto it = env.find(v);
      if (it != env.end()) return &it->second;
    }
    return outer ? outer(name) : nullptr;
  };

  for (Node* n : g.nodes()) {
    KernelFn fn = kernels.find(n->op());
    if (!fn) return unsupported(n->describe(), ": the reference backend has no kernel for ", op_name(n->op()));
    KernelContext ctx;
    ctx.op = n->op();
    ctx.attrs = &n->attrs;
    for (Value* v : n->inputs()) {
      if (!v) { ctx.inputs.push_back(nullptr); continue; }
      auto it = env.find(v);
      if (it == env.end()) return internal_error(n->describe(), ": input '", v->name(), "' has no value");
      ctx.inputs.push_back(&it->second);
    }
    if (!op_has_flag(n->op(), kStrings)) {
      for (size_t i = 0; i < ctx.inputs.size(); ++i) {
        if (ctx.inputs[i] && ctx.inputs[i]->is_string()) {
          return unsupported(n->describe(), ": input ", i, " is a string tensor, which ", op_name(n->op()),
                             " does not support");
        }
      }
    }
    if (!takes_non_tensors(n->op())) {
      // A fuzzed ReduceLogSum of a SplitToSequence output read through a null pointer.
      for (size_t i = 0; i < ctx.inputs.size(); ++i) {
        const Tensor* t = ctx.inputs[i];
        if (t && (t->is_sequence() || t->is_none())) {
          return invalid_argument(n->describe(), ": input ", i, " is ", t->is_sequence() ? "a sequence" : "an empty optional",
                                  ", which ", op_name(n->op()), " does not take");
        }
      }
    }
    ctx.outputs.resize(n->num_outputs());
    for (Value* o : n->outputs()) ctx.output_wanted.push_back(o != nullptr);
    ctx.run_subgraph = [&](const Graph& sub, const std::vector<Tensor>& sub_inputs) {
      return execute_graph(sub, sub_inputs, lookup, observer);
    };
    Status s = fn(ctx);
    if (!s.is_ok()) return s.with_context(n->describe() + ": ");
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      Value* o = n->output(i);
      if (!o) continue;
      if (i >= ctx.outputs.size() || !ctx.outputs[i].defined()) {
        return internal_error(n->describe(), ": kernel did not produce output ", i);
      }
      env[o] = std::move(ctx.outputs[i]);
    }
    if (observer) {
      std::vector<Tensor> outs;
      for (Value* o : n->outputs()) outs.push_back(o ? env[o] : Tensor());
      observer(*n, outs);
    }
    for (Value* v : n->inputs()) {
      if (v && --remaining[v] == 0 && v->kind() == Value::Kind::kNodeOutput) env.erase(v);
    }
    for (Value* o : n->outputs()) {
      if (o && remaining[o] == 0) env.erase(o);
    }
  }
  std::vector<Tensor> outs;
  for (Value* o : g.outputs()) {
    auto it = env.find(o);
    if (it == env.end()) return internal_error("graph output '", o->name(), "' was not computed");
    outs.push_back(it->second);
  }
  return outs;
}

Result<std::vector<Tensor>> Interpreter::run(const TensorMap& inputs) {
  KILN_RETURN_IF_ERROR(validate_inputs(graph_, inputs));
  std::vector<Tensor> ordered;
  for (Value* v : graph_.inputs()) ordered.push_back(inputs.at(v->name()));
  return execute_graph(graph_, ordered, nullptr, observer_);
}

}  // namespace kiln
