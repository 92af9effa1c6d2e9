// Symbolic values of the small integer tensors that hold shape arithmetic.
//
// Exporters compute Reshape/Expand targets at run time when a dim is dynamic:
//   Concat(Unsqueeze(Gather(Shape(x), 0)), Unsqueeze(Gather(Shape(x), 1)), [4], [16])
// The values of such a 0-D/1-D int tensor are not constants, but each element often is
// either a known integer or a dimension of some value (a named symbol such as "batch").
// shape_value() evaluates these chains element by element from the inferred shapes, so
// that shape inference keeps the rank and the symbolic dims through a computed target,
// and fold_shape_ops can fold a chain whose elements all turn out known.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln {

// One element of a shape tensor: a known integer (of any sign: Reshape's -1), or the
// size of a dimension (non-negative; `symbol` names it when the dim is symbolic), or
// nothing known at all.
struct ShapeElem {
  enum class Kind { kInt, kDim, kUnknown };
  Kind kind = Kind::kUnknown;
  int64_t value = 0;   // kInt
  std::string symbol;  // kDim: "" for an unnamed dim

  static ShapeElem of_int(int64_t v) { return {Kind::kInt, v, ""}; }
  static ShapeElem of_dim(const Dim& d) {
    return d.known() ? of_int(d.value) : ShapeElem{Kind::kDim, 0, d.symbol};
  }
  static ShapeElem unknown() { return {}; }
  bool is_int() const { return kind == Kind::kInt; }
  // Known not to be negative (a dim, or a known integer >= 0).
  bool non_negative() const { return kind == Kind::kDim || (kind == Kind::kInt && value >= 0); }
  // The element as a dimension of a shape: known, symbolic or unknown.
  Dim as_dim() const;
};

// The value of a 0-D (scalar) or 1-D integer tensor, element by element.
struct ShapeValue {
  std::vector<ShapeElem> elems;
  bool scalar = false;  // 0-D (one element)
  bool all_known() const;
  std::vector<int64_t> ints() const;  // the elements' values; all_known() first
};

// Evaluates v (a constant, or Shape/Gather/Slice/Unsqueeze/Squeeze/Concat/Cast/Reshape/
// ConstantOfShape/Add/Sub/Mul/Div/Equal/Where/Identity over such values) from the
// inferred shapes; nullopt when v is not such a value (or longer than 64 elements).
std::optional<ShapeValue> shape_value(const Value* v);

}  // namespace kiln
