// Owner of the per-context CUDA library handles behind cuda::Env.
#pragma once
#include <memory>

#include "backends/cuda/cuda_kernel.h"

namespace kiln::cuda {

struct EnvHolder {
  Env env;
  ~EnvHolder();
  // Creates cuBLASLt and cuDNN handles on the current device.
  static Result<std::unique_ptr<EnvHolder>> create(bool tf32);
};

// Whether a CUDA device is usable; `why` says why not.
bool device_available(std::string* why = nullptr);

}  // namespace kiln::cuda
