#include "ir/printer.h"

#include <map>

namespace kiln {

namespace {

std::string attr_str(const Attribute& a) {
  std::string s;
  std::visit([&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, int64_t> || std::is_same_v<V, float>) {
      s = cat(v);
    } else if constexpr (std::is_same_v<V, std::string>) {
      s = "\"" + v + "\"";
    } else if constexpr (std::is_same_v<V, Tensor>) {
      s = "tensor " + v.describe();
    } else if constexpr (std::is_same_v<V, std::shared_ptr<Graph>>) {
      s = cat("graph '", v ? v->name : "", "' (", v ? v->num_nodes() : 0, " nodes)");
    } else {
      s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += cat(i ? "," : "", v[i]);
      s += "]";
    }
  }, a.value);
  return s;
}

std::string value_str(const Value* v) {
  if (!v) return "<none>";
  return cat(v->name(), ":", dtype_name(v->dtype), sym_shape_str(v->shape));
}

}  // namespace

void print_nodes(const Graph& g, std::ostream& os, int indent) {
  std::string pad(static_cast<size_t>(indent), ' ');
  for (Node* n : g.nodes()) {
    os << pad << "[" << n->id() << "] " << n->name() << ": ";
    for (size_t i = 0; i < n->num_outputs(); ++i) os << (i ? ", " : "") << (n->output(i) ? n->output(i)->name() : "<none>");
    os << " = " << op_name(n->op()) << "(";
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      Value* v = n->input(i);
      os << (i ? ", " : "") << (v ? v->name() : "<none>");
      if (v && v->is_constant()) os << "=const" << dims_str(v->constant().dims());
    }
    os << ")";
    if (!n->attrs.empty()) {
      os << " {";
      bool first = true;
      for (const auto& [name, a] : n->attrs.all()) {
        os << (first ? "" : ", ") << name << "=" << attr_str(a);
        first = false;
      }
      os << "}";
    }
    os << "\n";
    for (Graph* sub : n->subgraphs()) {
      os << pad << "  subgraph '" << sub->name << "':\n";
      print_nodes(*sub, os, indent + 4);
    }
  }
}

void print_graph_summary(const Graph& g, std::ostream& os) {
  os << "Inputs:\n";
  for (Value* v : g.inputs()) os << "  " << value_str(v) << "\n";
  os << "Outputs:\n";
  for (Value* v : g.outputs()) os << "  " << value_str(v) << "\n";
  size_t weights = 0;
  for (Value* c : g.constants()) weights += c->constant().nbytes();
  os << "Constants: " << g.constants().size() << " (" << weights << " bytes)\n";
  std::map<std::string, int> hist;
  for (Node* n : g.nodes()) ++hist[op_name(n->op())];
  os << "Op histogram (" << g.num_nodes() << " nodes):\n";
  for (const auto& [op, count] : hist) os << "  " << op << ": " << count << "\n";
}

}  // namespace kiln
