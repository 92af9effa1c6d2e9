// The `kiln_layout` attribute of Conv, FusedConv and the pooling ops (MaxPool, AveragePool,
// LpPool and their global forms): "NCHW" (the ONNX layout; also when absent) or "NHWC"
// (channels-last: X, FusedConv's residual Z and Y are [N, H, W, C]; the weight W stays the
// ONNX [O, I/group, kh, kw] constant). NHWC is for 4-D tensors only. The channels-last pass
// (passes/channels_last.cpp) sets it; shape inference, the reference kernels and the CUDA
// kernels read it, and the NCHW-only fast CPU tactics decline such nodes.
#pragma once
#include <string>

#include "core/attributes.h"
#include "core/status.h"

namespace kiln {

inline constexpr const char* kLayoutAttr = "kiln_layout";

enum class TensorLayout { kNCHW, kNHWC };

// The layout `a` asks for; an error naming the attribute for any value but "NCHW"/"NHWC"
// (or a kiln_layout that is not a string).
inline Result<TensorLayout> read_layout(const Attributes& a) {
  const Attribute* attr = a.find(kLayoutAttr);
  if (!attr) return TensorLayout::kNCHW;
  const auto* s = std::get_if<std::string>(&attr->value);
  if (!s) return invalid_argument("attribute '", kLayoutAttr, "' must be a string (\"NCHW\" or \"NHWC\")");
  if (*s == "NCHW") return TensorLayout::kNCHW;
  if (*s == "NHWC") return TensorLayout::kNHWC;
  return invalid_argument("attribute '", kLayoutAttr, "' must be \"NCHW\" or \"NHWC\", got \"", *s, "\"");
}

// True when `a` holds kiln_layout = "NHWC".
inline bool is_channels_last(const Attributes& a) {
  auto l = read_layout(a);
  return l.is_ok() && *l == TensorLayout::kNHWC;
}

// True when `a` holds any kiln_layout other than "NCHW" (NHWC or an invalid value): what
// NCHW-only code (fast CPU tactics, weight-folding passes) must not take.
inline bool has_non_nchw_layout(const Attributes& a) {
  auto l = read_layout(a);
  return !l.is_ok() || *l != TensorLayout::kNCHW;
}

}  // namespace kiln
