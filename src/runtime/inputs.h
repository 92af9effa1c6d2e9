// Input preparation shared by the tools: parsing shape overrides and generating
// reproducible random inputs that respect the model (token ids below the vocabulary).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace kiln {

// Parses "name:1x3x224x224,other:2x8" into a map.
Status parse_shape_list(const std::string& spec, std::map<std::string, Dims>* out);

// Concrete shape for a graph input: an override if given, else its static dims, with
// symbolic/unknown dims set to 1. Errors if an override contradicts a static dim.
Result<Dims> concrete_input_shape(const Value& input, const std::map<std::string, Dims>& overrides);

// Exclusive upper bound for random integer values of this input: the vocabulary size
// when the input (possibly through Cast/Reshape/Unsqueeze) indexes a constant table
// with Gather, otherwise a small default.
int64_t integer_input_bound(const Graph& g, const Value& input);

// A random tensor for a graph input: floats uniform in [-1, 1), integers in [0, bound),
// bools fair coin flips. Deterministic for a given seed.
Tensor random_input(const Graph& g, const Value& input, const Dims& dims, uint64_t seed);

}  // namespace kiln
