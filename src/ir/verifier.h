#pragma once
#include "core/status.h"
#include "ir/graph.h"

namespace kiln {

// Checks the structural invariants of a graph (and its subgraphs): every input is
// defined before use (nodes in topological order), use lists match inputs, arity
// matches the op table, outputs are defined. Runs after import and after every pass
// in tests.
Status verify_graph(const Graph& g);

}  // namespace kiln
