// SSA graph IR: Values are defined once (graph input, constant, node output or a
// capture from an enclosing graph) and carry explicit use lists.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/attributes.h"
#include "core/tensor.h"
#include "ir/op.h"

namespace kiln {

class Node;
class Graph;

// One dimension of a value's shape: a known size, or a symbol ("batch"), or unknown.
struct Dim {
  int64_t value = -1;      // >= 0 when known
  std::string symbol;      // non-empty for named symbolic dims
  bool known() const { return value >= 0; }
  std::string str() const { return known() ? std::to_string(value) : (symbol.empty() ? "?" : symbol); }
};
using SymShape = std::vector<Dim>;
std::string sym_shape_str(const std::optional<SymShape>& s);

struct Use {
  Node* node;
  int input_index;
};

class Value {
 public:
  enum class Kind { kGraphInput, kConstant, kNodeOutput, kOuterScope };

  int id() const { return id_; }
  const std::string& name() const { return name_; }
  Kind kind() const { return kind_; }
  DataType dtype = DataType::kUndefined;  // element dtype for sequences and optionals
  std::optional<SymShape> shape;  // nullopt: rank unknown (for sequences: of the elements)
  bool is_sequence = false;       // an ONNX sequence of tensors
  bool is_optional = false;       // an ONNX optional (may hold no value)

  bool is_constant() const { return kind_ == Kind::kConstant; }
  const Tensor& constant() const { return constant_; }
  Node* producer() const { return producer_; }
  int producer_output() const { return producer_output_; }
  const std::vector<Use>& uses() const { return uses_; }
  Graph* graph() const { return graph_; }

 private:
  friend class Graph;
  friend class Node;
  int id_ = -1;
  std::string name_;
  Kind kind_ = Kind::kNodeOutput;
  Tensor constant_;
  Node* producer_ = nullptr;
  int producer_output_ = -1;
  std::vector<Use> uses_;
  Graph* graph_ = nullptr;
};

class Node {
 public:
  int id() const { return id_; }
  Op op() const { return op_; }
  const std::string& name() const { return name_; }
  // Description for error messages: "node 'conv1' (Conv)".
  std::string describe() const;
  // ONNX provenance, kept for error messages.
  std::string onnx_op_type;
  std::string onnx_domain;
  int64_t onnx_opset = 0;

  Attributes attrs;
  const std::vector<Value*>& inputs() const { return inputs_; }    // nullptr: omitted optional input
  const std::vector<Value*>& outputs() const { return outputs_; }  // nullptr: omitted optional output
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }

  void set_input(size_t i, Value* v);
  void add_input(Value* v);
  // Subgraphs held by graph attributes (If branches, Loop/Scan bodies).
  std::vector<Graph*> subgraphs() const;

 private:
  friend class Graph;
  int id_ = -1;
  Op op_ = Op::Identity;
  std::string name_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  std::string name;
  Graph* parent = nullptr;  // enclosing graph for subgraphs

  Value* add_input(const std::string& name, DataType dt, std::optional<SymShape> shape);
  Value* add_constant(const std::string& name, Tensor t);
  // A value defined in an enclosing graph, referenced by name from this subgraph.
  Value* add_outer_ref(const std::string& name);
  // Adds a node; its outputs are created with the given names ("" = omitted optional output).
  Node* add_node(Op op, const std::string& name, const std::vector<Value*>& inputs,
                 const std::vector<std::string>& output_names);
  void add_output(Value* v) { outputs_.push_back(v); }
  void set_output(size_t i, Value* v) { outputs_.at(i) = v; }

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Node*> nodes() const;  // in insertion order
  size_t num_nodes() const { return nodes_.size(); }
  std::vector<Value*> constants() const;
  std::vector<Value*> outer_refs() const;
  Value* find_value(const std::string& name) const;
  std::string unique_name(const std::string& base);

  // Re-points every use of `from` (and graph outputs) to `to`.
  void replace_all_uses_with(Value* from, Value* to);
  // Renames a value; the new name must be free in this graph.
  void rename_value(Value* v, const std::string& name);
  bool is_graph_output(const Value* v) const;
  // Removes a node that has no used outputs.
  void remove_node(Node* n);
  // Orders nodes so every input is defined before use; fails on a cycle.
  Status topological_sort();

 private:
  Value* new_value(const std::string& name, Value::Kind kind);
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::unordered_map<std::string, Value*> by_name_;
  int next_value_id_ = 0;
  int next_node_id_ = 0;
};

}  // namespace kiln
