// Evaluates nodes whose inputs are all constants with the reference kernels and
// replaces their outputs by constants (Shape -> Gather -> Concat -> Reshape chains on
// constant data, weight preprocessing, ...).
#include "backends/cpu/reference/kernel.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// Outputs larger than this stay computed at run time, so folding never bloats a model.
constexpr size_t kMaxFoldedBytes = size_t{64} << 20;

bool is_nondeterministic(Op op) {
  const std::string name = op_name(op);
  return name.rfind("Random", 0) == 0 || name == "Bernoulli" || name == "Multinomial" ||
         (op == Op::Dropout);  // training-mode dropout is random; inference Dropout is removed as a no-op
}

}  // namespace

Status fold_constants(Graph& g, PassContext& ctx) {
  const KernelRegistry& kernels = reference_kernels();
  for (Node* n : g.nodes()) {
    if (is_nondeterministic(n->op()) || !n->subgraphs().empty()) continue;
    bool used = false;
    for (Value* o : n->outputs()) used |= o && (!o->uses().empty() || g.is_graph_output(o));
    if (!used) continue;  // dead: eliminate_dead_code removes it without evaluating it
    bool all_const = n->num_inputs() > 0 || op_info(n->op()).min_inputs == 0;
    for (Value* v : n->inputs()) all_const &= (v == nullptr || v->is_constant());
    if (!all_const) continue;
    KernelFn fn = kernels.find(n->op());
    if (!fn) continue;
    KernelContext kc;
    kc.op = n->op();
    kc.attrs = &n->attrs;
    for (Value* v : n->inputs()) kc.inputs.push_back(v ? &v->constant() : nullptr);
    kc.outputs.resize(n->num_outputs());
    for (Value* o : n->outputs()) kc.output_wanted.push_back(o != nullptr);
    // A kernel error here is the model's error at run time too: leave the node for the
    // runtime to report with its input values.
    if (!fn(kc).is_ok()) continue;
    bool foldable = true;
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      if (!n->output(i)) continue;
      const Tensor& t = kc.outputs[i];
      if (!t.defined() || t.is_sequence() || t.is_none() || t.nbytes() > kMaxFoldedBytes) foldable = false;
    }
    if (!foldable) continue;
    std::vector<std::pair<Value*, std::string>> renames;
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      Value* o = n->output(i);
      if (!o) continue;
      Value* c = g.add_constant(g.unique_name(o->name() + "_folded"), std::move(kc.outputs[i]));
      g.replace_all_uses_with(o, c);
      renames.emplace_back(c, o->name());
    }
    ctx.rewrote(cat("folded ", n->describe()));
    g.remove_node(n);
    for (auto& [c, name] : renames) g.rename_value(c, name);  // graph outputs keep their names
  }
  return Status::ok();
}

}  // namespace kiln
