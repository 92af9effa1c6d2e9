// Shared pieces of the kiln Python module: Status -> exception mapping, tensor
// conversion between kiln::Tensor and numpy / DLPack, and running long calls on a
// worker thread so the GIL is released and Ctrl-C is honoured.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "dlpack.h"
#include "py_cuda.h"

namespace kiln::pyapi {

namespace py = pybind11;

// ---- errors ----
// Creates kiln.KilnError and its subclasses in `m`.
void register_errors(py::module_& m);
// Raises the exception class for s.code() with s.message().
[[noreturn]] void throw_status(const Status& s);
inline void check(const Status& s) {
  if (!s.is_ok()) throw_status(s);
}
template <typename T>
T unwrap(Result<T>&& r) {
  if (!r.is_ok()) throw_status(r.status());
  return std::move(r).value();
}
// The exception class for a code (KilnError for kOk).
py::handle error_class(StatusCode code);

// ---- tensors ----
// Python objects (and DLPack tensors) whose memory input Tensors view: kept alive until
// the run that reads them is over. Destroy with the GIL held.
struct InputKeepAlive {
  struct DLDeleter {
    void operator()(dlpack::DLManagedTensor* t) const {
      if (t && t->deleter) t->deleter(t);
    }
  };
  std::vector<py::object> objects;
  std::vector<std::unique_ptr<dlpack::DLManagedTensor, DLDeleter>> dlpack;
};

// A Tensor for input `name` from a numpy array, an object with __dlpack__ (torch, cupy,
// jax, kiln.Tensor) or anything numpy.asarray takes (lists, scalars). Zero-copy for
// C-contiguous host memory; other layouts are copied once. `expected` (may be null)
// gives the dtype for lists and scalars. Errors name the input. Host memory only: a GPU
// tensor is an UnsupportedError (ExecutionContext.run routes those to the device path).
Tensor tensor_from_python(const std::string& name, py::handle value, const TensorDesc* expected, InputKeepAlive& keep);

// ---- GPU tensors (CUDA engines; docs/python.md "GPU tensors") ----
// Where a value lives, from its __dlpack_device__ (DLPack device type and id), without
// asking for its data. Values that are not DLPack tensors (numpy arrays, lists, scalars)
// are host memory: {kDLCPU, 0}.
dlpack::DLDevice dlpack_device_of(py::handle value);
// Device types whose memory CUDA kernels read in place (kDLCUDA, kDLCUDAManaged).
bool is_cuda_device(int32_t device_type);
// "cuda:0", "rocm:1", ...
std::string device_str(int32_t type, int32_t id);

// A C-contiguous CUDA tensor handed over through DLPack: its dtype, dims and device
// address (a placeholder address for empty tensors, so that it is never null).
struct DeviceTensorRef {
  DataType dtype = DataType::kUndefined;
  Dims dims;
  void* data = nullptr;
  size_t nbytes = 0;
};
// Takes the DLPack capsule of `value` (a CUDA tensor on `device`), calling
// __dlpack__(stream=dlpack_stream) so that the producer orders its pending work before
// kiln's on that stream; the capsule goes into `keep`. Checks device, dtype, C-contiguity
// (GPU tensors are never copied: a strided one is an error) and 256-byte alignment.
// Errors name `what` ("input 'x'", "output 'y'").
DeviceTensorRef device_tensor_from_dlpack(const std::string& what, py::handle value, int64_t dlpack_stream, int device,
                                          InputKeepAlive& keep);
// Whether DLPack has a type code for `dt` (not for float8, float4, int4/uint4, int2/uint2).
bool dlpack_has_dtype(DataType dt);
// A kiln.Tensor owning device memory (a CUDA engine output). `ready`, when set, is
// recorded after the run on the stream it was queued on: consumers' streams wait for it.
py::object device_tensor_to_python(DataType dtype, Dims dims, std::shared_ptr<gpu::DeviceMemory> mem,
                                   std::shared_ptr<gpu::Event> ready);
// A stream argument (None, int, torch/cupy stream objects, __cuda_stream__) as a handle
// for kiln (None: null) and the stream number the DLPack protocol uses for it: 0 and 1
// are the legacy default stream (DLPack 1), 2 the per-thread default stream.
struct StreamArg {
  bool given = false;
  void* handle = nullptr;      // the cudaStream_t to queue on (kLegacyStream for 0)
  int64_t dlpack = 1;          // for __dlpack__(stream=...)
};
StreamArg stream_from_python(py::handle s);

// How outputs come back: numpy arrays, or kiln.Tensor objects (DLPack producers).
enum class OutputKind { kNumpy, kDLPack };
OutputKind parse_output_kind(const std::string& s);
// numpy arrays view the Tensor's storage (no copy) except for int4/int2, which ml_dtypes
// stores differently. Sequences become lists, empty optionals None, strings object arrays.
py::object tensor_to_python(const std::string& name, const Tensor& t, OutputKind kind);
// The kiln.Tensor class.
void register_tensor(py::module_& m);

// Dims as a tuple, with None for dynamic (-1) dims.
py::tuple dims_to_tuple(const Dims& d);
// A sequence of ints to Dims; errors name `what`.
Dims dims_from_python(py::handle seq, const std::string& what);

// ---- long calls ----
// Runs work(cancel) on a worker thread while this thread waits with the GIL released,
// checking for Ctrl-C every 50 ms. On Ctrl-C it sets `cancel`, waits for the worker to
// notice (work polls it) and raises KeyboardInterrupt. work must not touch Python
// objects without taking the GIL. Exceptions from work are re-raised here.
template <typename F>
auto run_interruptible(F&& work) -> decltype(work(std::declval<const std::atomic<bool>&>())) {
  using T = decltype(work(std::declval<const std::atomic<bool>&>()));
  std::atomic<bool> cancel{false};
  std::optional<T> result;
  std::exception_ptr error;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread worker([&] {
    try {
      result.emplace(work(cancel));
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lk(m);
    done = true;
    cv.notify_all();
  });
  std::optional<py::error_already_set> interrupted;
  for (;;) {
    bool finished;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> lk(m);
      finished = cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return done; });
    }
    if (finished) break;
    if (!interrupted && PyErr_CheckSignals() != 0) {
      interrupted.emplace();  // takes the pending KeyboardInterrupt
      cancel = true;
    }
  }
  worker.join();
  if (interrupted) throw *interrupted;
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

}  // namespace kiln::pyapi
