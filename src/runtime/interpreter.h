// Runs a Graph node by node on the reference kernels: the correctness oracle that
// engines are compared against. Shapes propagate at run time, so any input shape the
// model allows runs.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace kiln {

using TensorMap = std::map<std::string, Tensor>;

// Checks given inputs against the graph's inputs: names, dtypes, ranks, static dims and
// consistency of symbolic dims. Errors name the input, the expectation and what was given.
Status validate_inputs(const Graph& g, const TensorMap& inputs);

class Interpreter {
 public:
  explicit Interpreter(const Graph& g) : graph_(g) {}
  // Called after each node with its outputs (layerwise comparison, debugging).
  using NodeObserver = std::function<void(const Node&, const std::vector<Tensor>&)>;
  void set_observer(NodeObserver obs) { observer_ = std::move(obs); }

  // Returns the graph outputs in order.
  Result<std::vector<Tensor>> run(const TensorMap& inputs);

 private:
  const Graph& graph_;
  NodeObserver observer_;
};

// Executes one graph given values for its inputs and for the outer-scope names it captures.
Result<std::vector<Tensor>> execute_graph(const Graph& g, const std::vector<Tensor>& inputs,
                                          const std::function<const Tensor*(const std::string&)>& outer,
                                          const Interpreter::NodeObserver& observer);

}  // namespace kiln
