#include "backends/cuda/cuda_env.h"

#include <cublasLt.h>
#include <cudnn.h>

#include <algorithm>

#include "backends/cuda/cuda_common.h"

namespace kiln::cuda {

EnvHolder::~EnvHolder() {
  if (env.cublaslt) cublasLtDestroy(static_cast<cublasLtHandle_t>(env.cublaslt));
  if (env.cudnn) cudnnDestroy(static_cast<cudnnHandle_t>(env.cudnn));
}

Result<std::unique_ptr<EnvHolder>> EnvHolder::create(bool tf32) {
  std::string why;
  if (!device_available(&why)) return unsupported("no usable CUDA device: ", why);
  auto h = std::make_unique<EnvHolder>();
  KILN_CUDA_CHECK(cudaGetDevice(&h->env.device));
  cudaDeviceProp prop{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, h->env.device));
  h->env.sm = prop.major * 10 + prop.minor;
  h->env.sm_count = prop.multiProcessorCount;
  h->env.name = prop.name;
  h->env.tf32 = tf32;
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return internal_error("cublasLtCreate failed");
  h->env.cublaslt = lt;
  cudnnHandle_t dnn = nullptr;
  cudnnStatus_t ds = cudnnCreate(&dnn);
  if (ds != CUDNN_STATUS_SUCCESS) return internal_error("cudnnCreate failed: ", cudnnGetErrorString(ds));
  h->env.cudnn = dnn;
  return h;
}

bool device_available(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device found";
    return false;
  }
  return true;
}

namespace {

std::vector<Tactic> make_tactics() {
  std::vector<Tactic> t;
  add_gemm_tactics(t);
  add_conv_tactics(t);
  add_elementwise_tactics(t);
  add_norm_tactics(t);
  add_attention_tactics(t);
  add_movement_tactics(t);
  add_reduce_tactics(t);
  return t;
}

}  // namespace

const std::vector<Tactic>& tactics() {
  static const std::vector<Tactic> all = make_tactics();
  return all;
}

std::vector<const Tactic*> tactics_for(const LayerSpec& spec) { return fast::supporting_tactics(tactics(), spec); }

const Tactic* find_tactic(const std::string& name) { return fast::tactic_named(tactics(), name); }

std::string library_versions() {
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  const size_t dnn = cudnnGetVersion();
  const size_t lt = cublasLtGetVersion();
  return cat("cuda ", rt / 1000, ".", (rt % 1000) / 10, ", cudnn ", dnn / 10000, ".", (dnn % 10000) / 100, ".", dnn % 100,
             ", cublasLt ", lt / 10000, ".", (lt % 10000) / 100, ".", lt % 100);
}

}  // namespace kiln::cuda
