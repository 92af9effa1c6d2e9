#pragma once
#include <ostream>

#include "ir/graph.h"

namespace kiln {

// Human-readable summary: inputs/outputs with dtypes and dims, op histogram, node list.
void print_graph_summary(const Graph& g, std::ostream& os);
// One line per node: "  [3] conv1 = Conv(x, w, b) {group=1, ...}".
void print_nodes(const Graph& g, std::ostream& os, int indent = 2);

}  // namespace kiln
