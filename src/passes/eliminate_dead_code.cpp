// Removes nodes none of whose outputs reach a graph output.
#include <unordered_set>

#include "passes/pass.h"

namespace kiln {

namespace {

// Names captured from this graph by subgraphs: implicit uses that keep producers alive.
void captured_names(const Graph& g, std::unordered_set<std::string>& names) {
  for (Node* n : g.nodes()) {
    for (Graph* sub : n->subgraphs()) {
      for (Value* r : sub->outer_refs()) names.insert(r->name());
      captured_names(*sub, names);
    }
  }
}

}  // namespace

Status eliminate_dead_code(Graph& g, PassContext& ctx) {
  std::unordered_set<std::string> captured;
  captured_names(g, captured);
  std::unordered_set<const Value*> outputs(g.outputs().begin(), g.outputs().end());
  auto nodes = g.nodes();
  // Reverse topological order: a node's users are visited (and maybe removed) first.
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = *it;
    bool live = false;
    for (Value* o : n->outputs()) {
      if (o && (!o->uses().empty() || outputs.count(o) || captured.count(o->name()))) live = true;
    }
    if (!live) {
      ctx.rewrote(cat("removed dead ", n->describe()));
      g.remove_node(n);
    }
  }
  return Status::ok();
}

}  // namespace kiln
