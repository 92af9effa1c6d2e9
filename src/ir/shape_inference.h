// Per-op inference of output element types and symbolic shapes, from the inputs'
// dtypes/shapes and constant inputs (axes, shape, pads...). A table indexed by Op, filled
// once; ops flagged kElementwise share one broadcasting rule. Rules are conservative: a
// dim or dtype they cannot decide stays unknown, and an op without a rule infers nothing.
#pragma once
#include <optional>
#include <vector>

#include "ir/graph.h"

namespace kiln {

// What inference derived for a node's outputs, one slot per output: kUndefined / nullopt
// where nothing was derived.
struct InferredTypes {
  std::vector<DataType> dtypes;
  std::vector<std::optional<SymShape>> shapes;
};

// Infers n's outputs from its current inputs. Returns false when the op has no rule (or
// the node involves sequences, optionals or subgraphs); `out` is then all unknown.
bool infer_node_types(const Node& n, InferredTypes* out);

// Numpy broadcasting of two symbolic shapes (known 1 broadcasts, equal symbols match,
// a known non-1 size wins over a symbol; anything else is unknown).
SymShape broadcast_shapes(const SymShape& a, const SymShape& b);

// True when every dim is known.
bool is_static_shape(const std::optional<SymShape>& s);

}  // namespace kiln
