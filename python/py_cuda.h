// The CUDA runtime calls of the Python module (GPU tensors through DLPack, docs/python.md
// "GPU tensors"): device memory for outputs, events, streams, pointer checks. In a build
// without the CUDA backend (KILN_HAVE_CUDA undefined) nothing here touches CUDA: every
// call returns "this build of kiln has no CUDA backend", and no object can be created.
// Nothing here needs the GIL.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/kiln.h"

namespace kiln::pyapi::gpu {

#ifdef KILN_HAVE_CUDA
inline constexpr bool kCompiled = true;
#else
inline constexpr bool kCompiled = false;
#endif

// The UnsupportedError of builds without CUDA.
Status no_cuda();

// Special stream handles (CUDA's cudaStreamLegacy and cudaStreamPerThread), which are
// also the DLPack/array-API stream numbers of those streams.
inline void* const kLegacyStream = reinterpret_cast<void*>(uintptr_t{1});
inline void* const kPerThreadStream = reinterpret_cast<void*>(uintptr_t{2});

// Device memory from cudaMalloc, freed with cudaFree when the last owner lets go (a
// kiln.Tensor and the DLPack capsules exported from it share it).
class DeviceMemory {
 public:
  static Result<std::shared_ptr<DeviceMemory>> allocate(size_t bytes, int device);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }

 private:
  DeviceMemory(void* p, size_t n, int d) : ptr_(p), bytes_(n), device_(d) {}
  void* ptr_;
  size_t bytes_;
  int device_;
};

// A CUDA event (without timing) recorded on a stream: marks the end of a run queued there.
class Event {
 public:
  static Result<std::shared_ptr<Event>> record(void* stream);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  // Whether the work before it has finished (an error counts as finished: nothing will
  // complete it later).
  bool done() const;
  // Blocks the calling thread until it has completed.
  Status wait() const;
  // Makes `stream` wait for it (device side; the host does not block).
  Status make_stream_wait(void* stream) const;

 private:
  explicit Event(void* e) : e_(e) {}
  void* e_;  // cudaEvent_t
};

// cudaGetDevice.
Result<int> current_device();
// Blocks until the work queued on `stream` has finished.
Status synchronize(void* stream);
// Checks that `ptr` is device (or managed) memory of `device` as the CUDA driver sees it;
// errors name `what` ("input 'x'").
Status check_device_pointer(const void* ptr, int device, const std::string& what);
// 256 bytes of device memory on `device`, allocated once and never freed: the address
// bound for empty tensors (a binding must not be null; nothing reads it).
Result<void*> empty_placeholder(int device);
// cudaMemcpyAsync on `stream`: from host memory when src_is_host, else device to device.
Status copy_async(void* dst, const void* src, size_t bytes, bool src_is_host, void* stream);
// Copies device memory to host memory (synchronous; the legacy default stream).
Status copy_to_host(void* dst, const void* src, size_t bytes);

}  // namespace kiln::pyapi::gpu
