// CUDA runtime calls of the Python module (see py_cuda.h). The kiln library links the
// CUDA runtime (cudart_static, PUBLIC) in CUDA builds, so the module shares its copy.
#include "py_cuda.h"

#include <map>
#include <mutex>

#ifdef KILN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln::pyapi::gpu {

Status no_cuda() {
  return unsupported("this build of kiln has no CUDA backend (configure with the CUDA toolkit present)");
}

#ifdef KILN_HAVE_CUDA

namespace {

Status cuda_error(cudaError_t e, const std::string& what) {
  cudaGetLastError();  // clear a non-sticky error so later calls do not report it again
  return internal_error(what, " failed: CUDA error ", static_cast<int>(e), " (", cudaGetErrorName(e), ": ",
                        cudaGetErrorString(e), ")");
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

Result<std::shared_ptr<DeviceMemory>> DeviceMemory::allocate(size_t bytes, int device) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) return cuda_error(e, cat("cudaMalloc of ", bytes, " bytes on cuda:", device));
  return std::shared_ptr<DeviceMemory>(new DeviceMemory(p, bytes, device));
}

DeviceMemory::~DeviceMemory() {
  // The last owner may be a consumer's thread (torch frees DLPack tensors wherever their
  // last reference goes) whose current device differs: free on the owning device.
  int prev = -1;
  const bool switched = cudaGetDevice(&prev) == cudaSuccess && prev != device_ && cudaSetDevice(device_) == cudaSuccess;
  cudaFree(ptr_);  // errors (a CUDA runtime already unloaded at exit) are ignored
  if (switched) cudaSetDevice(prev);
  cudaGetLastError();
}

Result<std::shared_ptr<Event>> Event::record(void* stream) {
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return cuda_error(e, "cudaEventCreate");
  std::shared_ptr<Event> out(new Event(ev));
  e = cudaEventRecord(ev, as_stream(stream));
  if (e != cudaSuccess) return cuda_error(e, "cudaEventRecord");
  return out;
}

Event::~Event() { cudaEventDestroy(static_cast<cudaEvent_t>(e_)); }

bool Event::done() const {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(e_));
  if (e == cudaErrorNotReady) return false;
  if (e != cudaSuccess) cudaGetLastError();
  return true;
}

Status Event::wait() const {
  const cudaError_t e = cudaEventSynchronize(static_cast<cudaEvent_t>(e_));
  return e == cudaSuccess ? Status::ok() : cuda_error(e, "cudaEventSynchronize");
}

Status Event::make_stream_wait(void* stream) const {
  const cudaError_t e = cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(e_), 0);
  return e == cudaSuccess ? Status::ok() : cuda_error(e, "cudaStreamWaitEvent");
}

Result<int> current_device() {
  int d = -1;
  const cudaError_t e = cudaGetDevice(&d);
  if (e != cudaSuccess) return cuda_error(e, "cudaGetDevice (is there a usable CUDA device?)");
  return d;
}

Status synchronize(void* stream) {
  const cudaError_t e = cudaStreamSynchronize(as_stream(stream));
  return e == cudaSuccess ? Status::ok() : cuda_error(e, "cudaStreamSynchronize");
}

Status check_device_pointer(const void* ptr, int device, const std::string& what) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return invalid_argument(what, ": its data pointer ", ptr, " is not CUDA memory (cudaPointerGetAttributes: ",
                            cudaGetErrorName(e), ")");
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
    return invalid_argument(what, ": its data pointer ", ptr, " is not device memory (CUDA reports ",
                            a.type == cudaMemoryTypeHost ? "pinned host memory" : "memory unknown to CUDA",
                            "), although the tensor says it is on cuda:", device);
  }
  if (a.device != device) {
    return invalid_argument(what, ": its memory is on cuda:", a.device, ", not cuda:", device, " as the tensor says");
  }
  return Status::ok();
}

Result<void*> empty_placeholder(int device) {
  static std::mutex mu;
  static auto* buffers = new std::map<int, void*>;  // never freed: lives as long as the process
  std::lock_guard<std::mutex> lk(mu);
  auto it = buffers->find(device);
  if (it != buffers->end()) return it->second;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, 256);
  if (e != cudaSuccess) return cuda_error(e, "cudaMalloc of 256 bytes");
  (*buffers)[device] = p;
  return p;
}

Status copy_async(void* dst, const void* src, size_t bytes, bool src_is_host, void* stream) {
  if (bytes == 0) return Status::ok();
  const cudaError_t e =
      cudaMemcpyAsync(dst, src, bytes, src_is_host ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice, as_stream(stream));
  return e == cudaSuccess ? Status::ok() : cuda_error(e, "cudaMemcpyAsync");
}

Status copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  return e == cudaSuccess ? Status::ok() : cuda_error(e, "cudaMemcpy (device to host)");
}

#else  // no CUDA backend: nothing can be allocated or recorded

Result<std::shared_ptr<DeviceMemory>> DeviceMemory::allocate(size_t, int) { return no_cuda(); }
DeviceMemory::~DeviceMemory() = default;
Result<std::shared_ptr<Event>> Event::record(void*) { return no_cuda(); }
Event::~Event() = default;
bool Event::done() const { return true; }
Status Event::wait() const { return no_cuda(); }
Status Event::make_stream_wait(void*) const { return no_cuda(); }
Result<int> current_device() { return no_cuda(); }
Status synchronize(void*) { return no_cuda(); }
Status check_device_pointer(const void*, int, const std::string&) { return no_cuda(); }
Result<void*> empty_placeholder(int) { return no_cuda(); }
Status copy_async(void*, const void*, size_t, bool, void*) { return no_cuda(); }
Status copy_to_host(void*, const void*, size_t) { return no_cuda(); }

#endif

}  // namespace kiln::pyapi::gpu
