// Helpers shared by the transformer and loss kernels (attention.cpp, loss.cpp,
// transformer_misc.cpp, linear_attention.cpp).
#pragma once
#include <cmath>

#include "backends/cpu/reference/kernel.h"

namespace kiln {
namespace transformer {

inline bool wanted(const KernelContext& ctx, size_t i) {
  return i < ctx.output_wanted.size() && ctx.output_wanted[i];
}

// Rounds a value computed in double to the precision of a float dtype and back, so that
// the reference kernels reproduce the per-op rounding of 16-bit (and 32-bit) arithmetic.
inline double round_to(double v, DataType dt) {
  switch (dt) {
    case DataType::kFloat32: return static_cast<double>(static_cast<float>(v));
    case DataType::kFloat16: return static_cast<double>(static_cast<float>(Half(static_cast<float>(v))));
    case DataType::kBFloat16: return static_cast<double>(static_cast<float>(BFloat16(static_cast<float>(v))));
    default: return v;
  }
}

// Registration of the sub-families (called from register_transformer_kernels).
void register_loss_kernels(KernelRegistry& r);
void register_transformer_misc_kernels(KernelRegistry& r);
void register_linear_attention_kernels(KernelRegistry& r);

}  // namespace transformer
}  // namespace kiln
