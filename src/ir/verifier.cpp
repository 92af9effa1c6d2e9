#include "ir/verifier.h"

#include <unordered_set>

namespace kiln {

namespace {

Status verify(const Graph& g, std::unordered_set<const Value*>& visible) {
  std::unordered_set<const Value*> defined = visible;
  for (Value* v : g.inputs()) defined.insert(v);
  for (Value* v : g.constants()) defined.insert(v);
  for (Value* v : g.outer_refs()) {
    bool found = false;
    for (const Value* outer : visible) {
      if (outer->name() == v->name()) { found = true; break; }
    }
    if (!found) return invalid_model("subgraph '", g.name, "' refers to '", v->name(), "', which no enclosing graph defines");
    defined.insert(v);
  }
  for (Node* n : g.nodes()) {
    const OpInfo& info = op_info(n->op());
    if (info.max_inputs >= 0 && static_cast<int>(n->num_inputs()) > info.max_inputs) {
      return invalid_model(n->describe(), ": too many inputs for ", info.name);
    }
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      Value* v = n->input(i);
      if (!v) continue;
      if (!defined.count(v)) return invalid_model(n->describe(), ": input '", v->name(), "' is used before it is defined");
      bool listed = false;
      for (const Use& u : v->uses()) listed |= (u.node == n && u.input_index == static_cast<int>(i));
      if (!listed) return internal_error(n->describe(), ": use list of '", v->name(), "' is out of date");
    }
    for (Graph* sub : n->subgraphs()) {
      std::unordered_set<const Value*> inner = defined;
      KILN_RETURN_IF_ERROR(verify(*sub, inner));
    }
    for (Value* o : n->outputs()) {
      if (!o) continue;
      if (o->producer() != n) return internal_error(n->describe(), ": output '", o->name(), "' has the wrong producer");
      defined.insert(o);
    }
  }
  for (Value* o : g.outputs()) {
    if (!defined.count(o)) return invalid_model("graph output '", o->name(), "' is not defined");
  }
  return Status::ok();
}

}  // namespace

Status verify_graph(const Graph& g) {
  std::unordered_set<const Value*> none;
  return verify(g, none);
}

}  // namespace kiln
