// Shared by the fuzz targets: decides whether a graph is small enough to execute and
// makes its inputs. Fuzzed models may legally describe tensors of terabytes or loops of
// billions of iterations; executing those would only report "out of memory" or
// "timeout", which are the model's cost, not kiln bugs. So a graph runs only when shape
// inference proved every value static and small, and when nothing in it iterates an
// unbounded number of times.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "ir/graph.h"
#include "passes/pass.h"
#include "runtime/inputs.h"
#include "runtime/interpreter.h"

namespace kiln::fuzz {

constexpr int64_t kMaxValueElements = 1'000'000;  // any one tensor (the brief's guard)
constexpr int64_t kMaxTotalElements = 200'000;    // all values together: bounds run time too
constexpr size_t kMaxNodes = 256;

// Elements of a static shape, or -1 when a dim is unknown or the product overflows the limit.
inline int64_t static_elements(const Value& v) {
  if (!v.shape || v.is_sequence || v.is_optional) return -1;
  int64_t n = 1;
  for (const Dim& d : *v.shape) {
    if (!d.known()) return -1;
    if (d.value != 0 && n > kMaxValueElements / d.value) return kMaxValueElements + 1;
    n *= d.value;
  }
  return n;
}

inline bool constant_small(const Tensor& t) {
  if (t.is_sequence()) {
    for (const Tensor& item : t.items()) {
      if (!constant_small(item)) return false;
    }
    return true;
  }
  for (int64_t d : t.dims()) {
    if (d < 0) return false;
  }
  return t.size() <= kMaxValueElements;
}

// True when every constant (in subgraphs too) has at most kMaxValueElements elements.
inline bool constants_small(const Graph& g) {
  for (const Value* c : g.constants()) {
    if (!constant_small(c->constant())) return false;
  }
  for (const Node* n : g.nodes()) {
    for (const Graph* sub : n->subgraphs()) {
      if (!constants_small(*sub)) return false;
    }
  }
  return true;
}

// Adds the elements of g's node outputs and constants (subgraphs too) to *total; false
// when one is not static or a limit is passed.
inline bool values_small(const Graph& g, int64_t* total) {
  auto add = [&](const Value* v) {
    if (!v) return true;
    const int64_t n = v->is_constant() ? v->constant().size() : static_elements(*v);
    if (n < 0 || n > kMaxValueElements) return false;
    *total += n;
    return *total <= kMaxTotalElements;
  };
  for (const Node* n : g.nodes()) {
    if (n->op() == Op::Loop) return false;
    for (const Value* v : n->inputs()) {
      if (v && v->is_constant() && !add(v)) return false;
    }
    for (const Value* v : n->outputs()) {
      if (!add(v)) return false;
    }
    for (const Graph* sub : n->subgraphs()) {
      for (const Value* v : sub->inputs()) {
        if (!add(v)) return false;
      }
      if (!values_small(*sub, total)) return false;
    }
  }
  return true;
}

// True when the graph may be executed: after shape inference every input, constant and
// node output (in subgraphs too) has a static shape within the limits, and no node
// loops (Loop's trip count and condition are data; Scan and If are bounded by shapes).
inline bool runnable(const Graph& g) {
  if (g.num_nodes() > kMaxNodes || !constants_small(g)) return false;
  int64_t total = 0;
  for (const Value* v : g.inputs()) {
    const int64_t n = static_elements(*v);
    if (n < 0 || n > kMaxValueElements) return false;
    total += n;
  }
  return values_small(g, &total);
}

// Fixes each input's symbolic dims to 1 (what make_inputs feeds), so shape inference can
// prove the rest of the graph static. False when an input has no usable shape.
inline bool pin_input_shapes(Graph& g) {
  for (Value* v : g.inputs()) {
    if (v->is_sequence || v->is_optional) return false;
    auto dims = concrete_input_shape(*v, {});
    if (!dims.is_ok()) return false;
    SymShape s;
    for (int64_t d : *dims) {
      if (d < 0) return false;
      s.push_back(Dim{d, ""});
    }
    v->shape = s;
  }
  return true;
}

inline void forget_output_shapes(Graph& g) {
  for (Node* n : g.nodes()) {
    for (Value* o : n->outputs()) {
      if (o) o->shape.reset();
    }
    for (Graph* sub : n->subgraphs()) forget_output_shapes(*sub);
  }
}

inline bool infer_all(Graph& g, int passes) {
  PassReport report;
  PassContext ctx(report);
  for (int k = 0; k < passes; ++k) {
    if (!infer_shapes(g, ctx).is_ok()) return false;
    for (Node* n : g.nodes()) {
      for (Graph* sub : n->subgraphs()) {
        if (!infer_all(*sub, 1)) return false;
      }
    }
  }
  return true;
}

// Shapes that runnable() may trust: every node output's declared shape (value_info and
// graph outputs are the model's claims: a Multinomial declared [1,2] asked for [1,2^31])
// is dropped and inferred again, subgraphs too (outer graph, bodies, outer graph again).
inline bool reinfer_shapes(Graph& g) {
  forget_output_shapes(g);
  return infer_all(g, 2);
}

// Random inputs (fixed seed) for the graph's inputs; false when an input cannot be made.
inline bool make_inputs(const Graph& g, TensorMap* feeds) {
  for (const Value* v : g.inputs()) {
    auto dims = concrete_input_shape(*v, {});
    if (!dims.is_ok()) return false;
    for (int64_t d : *dims) {
      if (d < 0) return false;
    }
    if (v->is_sequence || v->is_optional || v->dtype == DataType::kUndefined) return false;
    (*feeds)[v->name()] = random_input(g, *v, *dims, 0x5eed);
  }
  return true;
}

}  // namespace kiln::fuzz
