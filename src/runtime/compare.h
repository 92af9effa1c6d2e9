// Engine-vs-model comparison, the computation behind `kiln compare` and kiln.compare()
// in Python: runs the original model on the reference interpreter and the engine on the
// same inputs and measures, per output and (layerwise) per layer, how far apart they are.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/kiln.h"
#include "runtime/interpreter.h"

namespace kiln {

struct TensorDiff {
  int64_t elements = 0;
  int64_t out_of_tolerance = 0;  // NaN against a number counts here too
  int64_t both_nan = 0;
  int64_t worst = -1;            // element with the largest excess over the tolerance
  double worst_excess = -1;
  double max_abs = 0, max_rel = 0, rel_l2 = 0, cosine = 1;
};

// Element i passes when |b - a| <= atol + rtol * |a| (a: reference, b: engine), or both
// are NaN, or both are the same infinity.
TensorDiff diff_tensors(const Tensor& ref, const Tensor& got, double atol, double rtol);

struct OutputComparison {
  std::string name;
  Tensor reference, engine;  // the two outputs (reference first)
  bool compared = false;     // false: not tensors, or the shapes differ (see problem)
  std::string problem;       // why it was not compared
  bool passed = false;
  TensorDiff diff;
  Dims worst_index;          // multi-index of diff.worst (when it is >= 0)
  double worst_reference = 0, worst_engine = 0;
  // Classifier-like outputs ([N, C] floats with C >= 5): rows whose top-1 / top-5 index
  // sets agree. top_k_rows is 0 for other outputs.
  int64_t top_k_rows = 0, top1_agree = 0, top5_agree = 0;
};

struct LayerComparison {
  std::string layer, op, value, model_value;  // model_value: the model value it matched
  TensorDiff diff;
  bool passed() const { return diff.out_of_tolerance == 0; }
};

struct CompareOptions {
  double atol = 1e-4;
  double rtol = 1e-3;
  bool layerwise = false;
  // Polled between nodes of both runs; returning true stops the comparison with a
  // kInternal status "interrupted" (Ctrl-C in Python).
  std::function<bool()> cancelled;
};

struct CompareReport {
  double atol = 0, rtol = 0;
  bool layerwise = false;
  std::vector<OutputComparison> outputs;  // in the model's output order
  std::vector<LayerComparison> layers;    // layerwise: in engine order
  int layers_not_in_model = 0;            // engine values with no same-named model value
  int layers_shape_mismatch = 0;          // same name, different shape (a layout pass)
  bool passed = false;
  // The first layer out of tolerance, or null.
  const LayerComparison* first_divergence() const;
};

// Checks that the engine takes only inputs of the model and produces all its outputs.
Status check_engine_interface(const Graph& model, const Engine& engine);

// Runs both on `feeds` (every model input) and compares. The engine receives the inputs
// it has (an optimized engine may have dropped unused ones).
Result<CompareReport> compare_engine(const Graph& model, const Engine& engine, const TensorMap& feeds,
                                     const CompareOptions& options);

// The report as `kiln compare` prints it, from the "Tolerance:" line to "Result:".
std::string format_compare_report(const CompareReport& r);

}  // namespace kiln
