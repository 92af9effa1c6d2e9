#include "ir/graph.h"

#include <algorithm>
#include <set>

namespace kiln {

std::string sym_shape_str(const std::optional<SymShape>& s) {
  if (!s) return "(unknown rank)";
  std::string out = "[";
  for (size_t i = 0; i < s->size(); ++i) out += (i ? "," : "") + (*s)[i].str();
  return out + "]";
}

std::string Node::describe() const {
  std::string op = onnx_op_type.empty() ? op_name(op_) : onnx_op_type;
  return cat("node '", name_, "' (", op, ")");
}

void Node::set_input(size_t i, Value* v) {
  if (i >= inputs_.size()) inputs_.resize(i + 1, nullptr);
  if (Value* old = inputs_[i]) {
    auto& u = old->uses_;
    for (auto it = u.begin(); it != u.end(); ++it) {
      if (it->node == this && it->input_index == static_cast<int>(i)) { u.erase(it); break; }
    }
  }
  inputs_[i] = v;
  if (v) v->uses_.push_back({this, static_cast<int>(i)});
}

void Node::add_input(Value* v) { set_input(inputs_.size(), v); }

std::vector<Graph*> Node::subgraphs() const {
  std::vector<Graph*> out;
  for (const auto& [name, a] : attrs.all()) {
    if (auto* g = std::get_if<std::shared_ptr<Graph>>(&a.value)) out.push_back(g->get());
  }
  return out;
}

Value* Graph::new_value(const std::string& name, Value::Kind kind) {
  auto v = std::make_unique<Value>();
  v->id_ = next_value_id_++;
  v->name_ = name;
  v->kind_ = kind;
  v->graph_ = this;
  Value* raw = v.get();
  values_.push_back(std::move(v));
  if (!name.empty()) by_name_[name] = raw;
  return raw;
}

Value* Graph::add_input(const std::string& name, DataType dt, std::optional<SymShape> shape) {
  Value* v = new_value(name, Value::Kind::kGraphInput);
  v->dtype = dt;
  v->shape = std::move(shape);
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_constant(const std::string& name, Tensor t) {
  Value* v = new_value(name, Value::Kind::kConstant);
  v->dtype = t.dtype();
  SymShape s;
  for (int64_t d : t.dims()) s.push_back(Dim{d, {}});
  v->shape = s;
  v->constant_ = std::move(t);
  return v;
}

Value* Graph::add_outer_ref(const std::string& name) { return new_value(name, Value::Kind::kOuterScope); }

Node* Graph::add_node(Op op, const std::string& name, const std::vector<Value*>& inputs,
                      const std::vector<std::string>& output_names) {
  auto n = std::make_unique<Node>();
  n->id_ = next_node_id_++;
  n->op_ = op;
  n->name_ = name;
  Node* raw = n.get();
  for (Value* v : inputs) raw->add_input(v);
  for (size_t i = 0; i < output_names.size(); ++i) {
    if (output_names[i].empty()) {
      raw->outputs_.push_back(nullptr);
      continue;
    }
    Value* v = new_value(output_names[i], Value::Kind::kNodeOutput);
    v->producer_ = raw;
    v->producer_output_ = static_cast<int>(i);
    raw->outputs_.push_back(v);
  }
  nodes_.push_back(std::move(n));
  return raw;
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

std::vector<Value*> Graph::constants() const {
  std::vector<Value*> out;
  for (const auto& v : values_) if (v->kind_ == Value::Kind::kConstant) out.push_back(v.get());
  return out;
}

std::vector<Value*> Graph::outer_refs() const {
  std::vector<Value*> out;
  for (const auto& v : values_) if (v->kind_ == Value::Kind::kOuterScope) out.push_back(v.get());
  return out;
}

Value* Graph::find_value(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::string Graph::unique_name(const std::string& base) {
  if (!by_name_.count(base)) return base;
  for (int i = 1;; ++i) {
    std::string n = cat(base, "_", i);
    if (!by_name_.count(n)) return n;
  }
}

void Graph::replace_all_uses_with(Value* from, Value* to) {
  std::vector<Use> uses = from->uses_;
  for (const Use& u : uses) u.node->set_input(static_cast<size_t>(u.input_index), to);
  for (Value*& o : outputs_) if (o == from) o = to;
}

void Graph::rename_value(Value* v, const std::string& name) {
  assert(!by_name_.count(name));
  auto it = by_name_.find(v->name_);
  if (it != by_name_.end() && it->second == v) by_name_.erase(it);
  v->name_ = name;
  by_name_[name] = v;
}

bool Graph::is_graph_output(const Value* v) const {
  for (const Value* o : outputs_) if (o == v) return true;
  return false;
}

void Graph::remove_node(Node* n) {
  for (size_t i = 0; i < n->inputs_.size(); ++i) n->set_input(i, nullptr);
  for (Value* o : n->outputs_) {
    if (!o) continue;
    assert(o->uses_.empty());
    o->producer_ = nullptr;
    if (by_name_.count(o->name_) && by_name_[o->name_] == o) by_name_.erase(o->name_);
  }
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(), [&](const auto& p) { return p.get() == n; }),
               nodes_.end());
}

Status Graph::topological_sort() {
  // Kahn's algorithm over node-to-node edges, stable with respect to insertion order.
  std::unordered_map<Node*, int> pending;
  std::unordered_map<Node*, size_t> position;
  for (size_t i = 0; i < nodes_.size(); ++i) position[nodes_[i].get()] = i;
  for (const auto& n : nodes_) {
    int deps = 0;
    for (Value* v : n->inputs_) if (v && v->producer_) ++deps;
    pending[n.get()] = deps;
  }
  std::set<size_t> ready;  // positions of nodes whose inputs are all defined
  for (const auto& n : nodes_) if (pending[n.get()] == 0) ready.insert(position[n.get()]);
  std::vector<Node*> order;
  while (!ready.empty()) {
    Node* n = nodes_[*ready.begin()].get();
    ready.erase(ready.begin());
    order.push_back(n);
    for (Value* o : n->outputs_) {
      if (!o) continue;
      for (const Use& u : o->uses_) {
        if (--pending[u.node] == 0) ready.insert(position[u.node]);
      }
    }
  }
  if (order.size() != nodes_.size()) {
    for (const auto& n : nodes_) {
      if (pending[n.get()] > 0) return invalid_model("graph has a cycle through ", n->describe());
    }
  }
  std::unordered_map<Node*, std::unique_ptr<Node>> owned;
  for (auto& n : nodes_) owned[n.get()] = std::move(n);
  nodes_.clear();
  for (Node* n : order) nodes_.push_back(std::move(owned[n]));
  return Status::ok();
}

}  // namespace kiln
