// Merges nodes that compute the same op on the same inputs with the same attributes.
#include <map>
#include <sstream>

#include "passes/pass.h"

namespace kiln {

namespace {

// A key that is equal for nodes computing the same thing; empty for nodes never merged.
std::string node_key(const Node& n) {
  const std::string name = op_name(n.op());
  if (!n.subgraphs().empty() || name.rfind("Random", 0) == 0 || name == "Bernoulli" || name == "Multinomial" ||
      n.op() == Op::Dropout) {
    return {};
  }
  std::ostringstream os;
  os << name << '(';
  for (Value* v : n.inputs()) os << (v ? v->id() : -1) << ',';
  os << ")#" << n.num_outputs() << '{';
  for (const auto& [k, a] : n.attrs.all()) {
    os << k << '=' << a.value.index() << ':';
    std::visit([&](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<V, int64_t> || std::is_same_v<V, float> || std::is_same_v<V, std::string>) {
        os << v;
      } else if constexpr (std::is_same_v<V, Tensor>) {
        os << v.describe() << ':';
        if (v.is_string()) {
          for (int64_t i = 0; i < v.size(); ++i) os << v.template data<std::string>()[i].size() << v.template data<std::string>()[i];
        } else {
          os.write(static_cast<const char*>(v.raw()), static_cast<std::streamsize>(v.nbytes()));
        }
      } else if constexpr (std::is_same_v<V, std::shared_ptr<Graph>>) {
        os << v.get();
      } else {
        for (const auto& e : v) os << e << ',';
      }
    }, a.value);
    os << ';';
  }
  os << '}';
  return os.str();
}

}  // namespace

Status eliminate_common_subexpressions(Graph& g, PassContext& ctx) {
  std::map<std::string, Node*> seen;
  for (Node* n : g.nodes()) {
    std::string key = node_key(*n);
    if (key.empty()) continue;
    auto [it, inserted] = seen.emplace(key, n);
    if (inserted) continue;
    Node* first = it->second;
    bool mergeable = true;
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      Value* o = n->output(i);
      if (o && (g.is_graph_output(o) || !first->output(i))) mergeable = false;
    }
    if (!mergeable) continue;
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      if (Value* o = n->output(i)) g.replace_all_uses_with(o, first->output(i));
    }
    ctx.rewrote(cat("merged ", n->describe(), " into ", first->describe()));
  }
  return Status::ok();  // merged nodes are now dead; eliminate_dead_code removes them
}

}  // namespace kiln
