// Small element-wise kernels around the cuBLASLt GEMMs (gemm.cpp): the broadcast copy of
// Gemm's C into the output, and the bias + activation pass for epilogues cuBLASLt has not
// got (erf GELU) or for which it finds no algorithm. Plain C++ declarations, so gemm.cpp
// compiles without nvcc; the definitions are in gemm_kernels.cu.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda::gemm {

enum class Act : int { kNone = 0, kRelu = 1, kGeluErf = 2, kGeluTanh = 3 };

// y[m, n] = scale * c[m * c_row_stride + n * c_col_stride] for an [M, N] row-major y
// (strides in elements; 0 broadcasts). dtype: float32, float16 or bfloat16 (y and c).
Status broadcast_copy(DataType dtype, const void* c, int64_t c_row_stride, int64_t c_col_stride, void* y, int64_t M,
                      int64_t N, float scale, cudaStream_t stream);

// In place on a row-major [rows, N] y: y = act(y + bias[n]) (bias may be nullptr: no bias).
Status bias_activation(DataType dtype, void* y, const void* bias, int64_t rows, int64_t N, Act act,
                       cudaStream_t stream);

}  // namespace kiln::cuda::gemm
