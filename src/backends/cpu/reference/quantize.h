// Low-precision dtypes and quantization (quantize.cpp, quantize_ops.cpp): entry points used
// by other kernel families.
#pragma once
#include "backends/cpu/reference/kernel.h"

namespace kiln {

// Cast / CastLike where the source or target is a low-precision type (fp8, fp4, e8m0,
// int4/uint4/int2/uint2). Reads the 'saturate' and 'round_mode' attributes.
Status cast_low_precision(KernelContext& ctx, DataType to);

// MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv (qlinear.cpp); called by
// register_quant_kernels.
void register_qlinear_kernels(KernelRegistry& r);

// Error unless every listed input is present (guards required inputs given as "").
Status require_inputs(const KernelContext& ctx, std::initializer_list<size_t> idx);

}  // namespace kiln
