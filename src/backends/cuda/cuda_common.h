// Helpers shared by the CUDA backend's sources: error checks that become kiln Status
// values, device memory owned by kernels, and (in .cu files) float16/bfloat16 loads and
// stores that compute in float32.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln::cuda {

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return internal_error(what, ": CUDA error ", static_cast<int>(e), " (", cudaGetErrorName(e), ": ", cudaGetErrorString(e),
                        ")");
}

// Returns the error of a CUDA runtime call as a Status (from the enclosing function).
#define KILN_CUDA_CHECK(call)                                               \
  do {                                                                      \
    cudaError_t kiln_cuda_err_ = (call);                                    \
    if (kiln_cuda_err_ != cudaSuccess) return ::kiln::cuda::cuda_status(kiln_cuda_err_, #call); \
  } while (0)

// After a kernel launch: the launch error (bad configuration), as a Status.
#define KILN_CUDA_LAUNCH_CHECK(what) KILN_CUDA_CHECK(cudaPeekAtLastError())

// Device memory owned by a kernel or a context (cudaMalloc/cudaFree).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = o.p_;
      n_ = o.n_;
      o.p_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }
  // Allocates (or keeps, if already large enough) at least `bytes`.
  Status reserve(size_t bytes) {
    if (bytes <= n_) return Status::ok();
    reset();
    if (bytes == 0) return Status::ok();
    cudaError_t e = cudaMalloc(&p_, bytes);
    if (e != cudaSuccess) {
      p_ = nullptr;
      return cuda_status(e, cat("cudaMalloc(", bytes, " bytes)").c_str());
    }
    n_ = bytes;
    return Status::ok();
  }
  // Allocates and copies `bytes` from host memory (synchronously).
  Status upload(const void* host, size_t bytes) {
    KILN_RETURN_IF_ERROR(reserve(bytes));
    if (bytes) KILN_CUDA_CHECK(cudaMemcpy(p_, host, bytes, cudaMemcpyHostToDevice));
    return Status::ok();
  }
  void reset() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  void* get() const { return p_; }
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// Whether a float dtype the CUDA kernels compute on (fp32, fp16, bf16).
inline bool is_cuda_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

inline unsigned blocks_for(int64_t n, int threads = 256, int64_t max_blocks = 65535LL * 32) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

}  // namespace kiln::cuda

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kiln::cuda {

// Storage type <-> float compute.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

}  // namespace kiln::cuda

// Calls F.template operator()<T>() with T the device storage type of `dtype` (float,
// __half, __nv_bfloat16); returns unsupported() for other dtypes.
#define KILN_CUDA_FLOAT_DISPATCH(dtype, ...)                                            \
  [&]() -> ::kiln::Status {                                                              \
    switch (dtype) {                                                                     \
      case ::kiln::DataType::kFloat32: { using T = float; __VA_ARGS__; }                 \
      case ::kiln::DataType::kFloat16: { using T = __half; __VA_ARGS__; }                \
      case ::kiln::DataType::kBFloat16: { using T = __nv_bfloat16; __VA_ARGS__; }        \
      default: return ::kiln::unsupported("dtype ", ::kiln::dtype_name(dtype), " on CUDA"); \
    }                                                                                    \
  }()
#endif
