// Shared plumbing of the oneDNN tactics (onednn_conv.cpp, onednn_matmul.cpp,
// onednn_pool.cpp): the process-wide CPU engine, error conversion (oneDNN throws; kiln
// returns Status), scratch carving, activation -> post-op mapping, and an executor that
// runs a primitive through the C API so run() builds no std::unordered_map of arguments.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/fast/fast_kernel.h"

namespace kiln::fast::onednn {

// One CPU engine per process (creating one queries the ISA; it is thread-safe to share).
dnnl::engine& cpu_engine();

// Converts a caught oneDNN exception into a Status naming the kernel.
Status from_dnnl(const char* kernel, const dnnl::error& e);

// Runs `fn` (which may throw dnnl::error or std::bad_alloc) and returns its Status.
template <typename Fn>
Status guarded(const char* kernel, Fn&& fn) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    return from_dnnl(kernel, e);
  } catch (const std::exception& e) {
    return internal_error(kernel, ": ", e.what());
  }
}

// Sets the calling thread's OpenMP thread count for a scope and restores it: oneDNN sizes
// its work split when a primitive is created and when it runs, from omp_get_max_threads().
class ThreadScope {
 public:
  explicit ThreadScope(int threads);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
  bool changed_;
};

// Lays sub-buffers out in the engine's scratch block, each 64-byte aligned; the block
// itself may be less aligned, so total() includes the slack to align its start.
class ScratchLayout {
 public:
  size_t add(size_t bytes) {
    const size_t off = total_;
    total_ += (bytes + 63) / 64 * 64;
    return off;
  }
  size_t total() const { return total_ == 0 ? 0 : total_ + 64; }
  static char* base(void* scratch) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(scratch);
    return reinterpret_cast<char*>((p + 63) / 64 * 64);
  }

 private:
  size_t total_ = 0;
};

// A memory object whose buffer is bound at run time. Setting a handle can zero-pad a
// blocked layout, so bind() skips it when the engine hands over the same buffer again.
struct Slot {
  dnnl::memory mem;
  const void* last = nullptr;
  void make(const dnnl::memory::desc& md) {
    mem = dnnl::memory(md, cpu_engine(), nullptr);
    last = nullptr;
  }
  Status bind(const void* ptr);
};

// A primitive with its argument list fixed at prepare time (run() only rebinds buffers and
// calls the C API, which takes a plain array) and its user scratchpad.
class Exec {
 public:
  // Takes the primitive and its descriptor (for the scratchpad size). Clears the arguments.
  void reset(dnnl::primitive prim, const dnnl::primitive_desc_base& pd);
  void arg(int which, const dnnl::memory& mem) { args_.push_back({which, mem.get()}); }
  size_t scratchpad_bytes() const { return scratchpad_bytes_; }
  bool empty() const { return !prim_; }
  // `scratchpad` must hold scratchpad_bytes() (64-byte aligned); ignored when that is 0.
  Status run(const dnnl::stream& s, void* scratchpad, const char* kernel);

 private:
  dnnl::primitive prim_;
  std::vector<dnnl_exec_arg_t> args_;
  Slot scratchpad_;
  size_t scratchpad_bytes_ = 0;
};

// An eltwise post-op (oneDNN's alpha/beta meaning per algorithm).
struct Eltwise {
  dnnl::algorithm alg;
  float alpha = 0.0f;
  float beta = 0.0f;
};

// Maps a fused activation (attribute "activation" with alpha/beta/min/max/approximate, as in
// FusedConv / FusedGemm) to eltwise post-ops. Returns false for one oneDNN cannot express
// exactly; "None" gives an empty list.
bool activation_post_ops(const Attributes& attrs, std::vector<Eltwise>* out);

dnnl::post_ops make_post_ops(const std::vector<Eltwise>& eltwise, bool sum_first, float sum_scale = 1.0f);

// The descriptor of a reorder from one layout to another that uses the user scratchpad.
dnnl::reorder::primitive_desc reorder_pd(const dnnl::memory::desc& from, const dnnl::memory::desc& to);

// Plain row-major strides of `dims` as oneDNN dims.
dnnl::memory::dims plain_strides(const dnnl::memory::dims& dims);
dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims);

inline const Tensor* input_at(const std::vector<const Tensor*>& v, size_t i) { return i < v.size() ? v[i] : nullptr; }

// Adds each family's tactics (one file each).
void add_conv_tactics(std::vector<Tactic>& out);
void add_matmul_tactics(std::vector<Tactic>& out);
void add_pool_tactics(std::vector<Tactic>& out);

}  // namespace kiln::fast::onednn
