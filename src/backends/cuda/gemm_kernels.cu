// Element-wise helpers of the cuBLASLt GEMM tactic (see gemm_kernels.h). Compute in float32.
#include "backends/cuda/gemm_kernels.h"

#include <limits>

#include "backends/cuda/cuda_common.h"

namespace kiln::cuda::gemm {

namespace {

template <Act A>
__device__ __forceinline__ float activate(float v) {
  if constexpr (A == Act::kRelu) {
    return v > 0.0f ? v : (v == v ? 0.0f : v);  // NaN stays NaN, like the reference's max-free form
  } else if constexpr (A == Act::kGeluErf) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
  } else if constexpr (A == Act::kGeluTanh) {
    const float k = 0.79788456080286535588f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
  } else {
    return v;
  }
}

template <typename T, typename I>
__global__ void broadcast_copy_kernel(const T* __restrict__ c, I rs, I cs, T* __restrict__ y, I N, I total,
                                      float scale) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I m = i / N, n = i - m * N;
    y[i] = from_f32<T>(scale * to_f32(c[m * rs + n * cs]));
  }
}

template <typename T, typename I, Act A, bool kBias>
__global__ void bias_act_kernel(T* __restrict__ y, const T* __restrict__ bias, I N, I total) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    float v = to_f32(y[i]);
    if constexpr (kBias) v += to_f32(bias[i % N]);
    y[i] = from_f32<T>(activate<A>(v));
  }
}

template <typename T, typename I, Act A>
void launch_bias_act(T* y, const T* bias, I N, I total, cudaStream_t stream) {
  const unsigned blocks = blocks_for(total);
  if (bias) {
    bias_act_kernel<T, I, A, true><<<blocks, 256, 0, stream>>>(y, bias, N, total);
  } else {
    bias_act_kernel<T, I, A, false><<<blocks, 256, 0, stream>>>(y, bias, N, total);
  }
}

template <typename T, typename I>
void dispatch_act(T* y, const T* bias, I N, I total, Act act, cudaStream_t stream) {
  switch (act) {
    case Act::kNone: launch_bias_act<T, I, Act::kNone>(y, bias, N, total, stream); break;
    case Act::kRelu: launch_bias_act<T, I, Act::kRelu>(y, bias, N, total, stream); break;
    case Act::kGeluErf: launch_bias_act<T, I, Act::kGeluErf>(y, bias, N, total, stream); break;
    case Act::kGeluTanh: launch_bias_act<T, I, Act::kGeluTanh>(y, bias, N, total, stream); break;
  }
}

bool fits_32(int64_t a, int64_t b = 0, int64_t c = 0) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max() / 2;
  return a <= kMax && b <= kMax && c <= kMax;
}

}  // namespace

Status broadcast_copy(DataType dtype, const void* c, int64_t c_row_stride, int64_t c_col_stride, void* y, int64_t M,
                      int64_t N, float scale, cudaStream_t stream) {
  const int64_t total = M * N;
  if (total == 0) return Status::ok();
  // The largest source index is (M-1)*rs + (N-1)*cs <= the source's element count.
  const int64_t src_max = (M - 1) * c_row_stride + (N - 1) * c_col_stride;
  return KILN_CUDA_FLOAT_DISPATCH(dtype, {
    const T* pc = static_cast<const T*>(c);
    T* py = static_cast<T*>(y);
    const unsigned blocks = blocks_for(total);
    if (fits_32(total, src_max)) {
      broadcast_copy_kernel<T, int32_t><<<blocks, 256, 0, stream>>>(
          pc, static_cast<int32_t>(c_row_stride), static_cast<int32_t>(c_col_stride), py, static_cast<int32_t>(N),
          static_cast<int32_t>(total), scale);
    } else {
      broadcast_copy_kernel<T, int64_t><<<blocks, 256, 0, stream>>>(pc, c_row_stride, c_col_stride, py, N, total,
                                                                   scale);
    }
    KILN_CUDA_LAUNCH_CHECK("gemm broadcast_copy");
    return Status::ok();
  });
}

Status bias_activation(DataType dtype, void* y, const void* bias, int64_t rows, int64_t N, Act act,
                       cudaStream_t stream) {
  const int64_t total = rows * N;
  if (total == 0) return Status::ok();
  return KILN_CUDA_FLOAT_DISPATCH(dtype, {
    T* py = static_cast<T*>(y);
    const T* pb = static_cast<const T*>(bias);
    if (fits_32(total)) {
      dispatch_act<T, int32_t>(py, pb, static_cast<int32_t>(N), static_cast<int32_t>(total), act, stream);
    } else {
      dispatch_act<T, int64_t>(py, pb, N, total, act, stream);
    }
    KILN_CUDA_LAUNCH_CHECK("gemm bias_activation");
    return Status::ok();
  });
}

}  // namespace kiln::cuda::gemm
