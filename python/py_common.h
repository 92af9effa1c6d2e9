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
// gives the dtype for lists and scalars. Errors name the input.
Tensor tensor_from_python(const std::string& name, py::handle value, const TensorDesc* expected, InputKeepAlive& keep);

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
