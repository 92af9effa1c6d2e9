// Canonical op kinds, generated from ops.def.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

enum OpFlag : uint32_t {
  kNone = 0,
  kElementwise = 1u << 0,   // output[i] depends on input[i] (after broadcasting)
  kCommutative = 1u << 1,
  kReduction = 1u << 2,
  kStrings = 1u << 3,       // the kernel handles string tensors (others reject them up front)
};

enum class Op : uint16_t {
#define KILN_OP(name, ...) name,
#include "ir/ops.def"
#undef KILN_OP
  kCount
};

struct OpInfo {
  Op op;
  const char* name;
  int min_inputs, max_inputs;   // max -1: variadic
  int min_outputs, max_outputs;
  uint32_t flags;
  const char* attr_spec;
};

const OpInfo& op_info(Op op);
inline const char* op_name(Op op) { return op_info(op).name; }
std::optional<Op> op_from_name(std::string_view name);
inline bool op_has_flag(Op op, OpFlag f) { return (op_info(op).flags & f) != 0; }
constexpr int kNumOps = static_cast<int>(Op::kCount);

// Ops whose output is their first input's data unchanged, only with another shape: a
// copy kernel in each backend, and a view where the memory plan allows
// (ContextImpl::find_views).
constexpr std::array<Op, 5> kShapeOnlyOps = {Op::Reshape, Op::Flatten, Op::Squeeze, Op::Unsqueeze, Op::Identity};
constexpr bool is_shape_only(Op op) {
  for (Op o : kShapeOnlyOps) {
    if (o == op) return true;
  }
  return false;
}

}  // namespace kiln
