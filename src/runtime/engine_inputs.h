// Inputs for tool runs of an engine (kiln bench / compare, the Python module): the shape
// each input runs with, and seeded random tensors for the inputs a caller did not give.
// One implementation so the CLI and Python produce the same data for the same seed.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/kiln.h"
#include "runtime/interpreter.h"

namespace kiln {

// The engine's optimized graph.
const Graph& engine_graph(const Engine& e);

// Shape of an engine input to run with: an override, else its static dims, else
// profile 0's opt shape, else (no profile entry) unknown dims as 1.
Result<Dims> engine_run_shape(const Engine& e, const Value& input, const std::map<std::string, Dims>& overrides);

// Checks that every name in `shapes` is an input of `g` (the error lists the inputs).
Status check_shape_names(const std::map<std::string, Dims>& shapes, const Graph& g, const std::string& what = "shapes");

// Adds a random tensor (runtime/inputs.h random_input) for every input of `g` missing
// from `feeds`: input k (in graph order, from 1) uses seed + k, so an input's data does
// not depend on which others were given. Appends the names it generated to `generated`.
Status add_random_inputs(const Graph& g, TensorMap& feeds, const std::function<Result<Dims>(const Value&)>& shape_of,
                         uint64_t seed, std::vector<std::string>* generated = nullptr);

}  // namespace kiln
