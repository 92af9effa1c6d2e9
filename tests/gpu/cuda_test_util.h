// Helpers for the CUDA backend's tests (tests/gpu/*_test.cpp, binary kiln_cuda_tests,
// ctest label "gpu"). Every test starts with KILN_REQUIRE_GPU(), which skips it (reported
// as skipped, never as passed) on a machine without a CUDA device.
//
// run_cuda() runs one tactic through create/prepare/enqueue on device copies of host
// tensors, into outputs pre-filled with NaN bytes, twice (a kernel must be re-runnable
// with the same workspace), and copies the outputs back. Compare them with run_ref() (the
// CPU reference kernel, tests/unit/fast_kernel_test_util.h) using expect_near_tensor.
#pragma once

#include <gtest/gtest.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "../unit/fast_kernel_test_util.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_kernel.h"
#include "backends/cuda/cuda_env.h"

namespace kiln::testing::gpu {

using kiln::fast::TensorShape;

using kiln::testing::fast::expect_equal_tensor;
using kiln::testing::fast::fresh_seed;
using kiln::testing::fast::random_any;
using kiln::testing::fast::seed_for;
using kiln::testing::fast::expect_near_tensor;
using kiln::testing::fast::random_f32;
using kiln::testing::fast::run_ref;
using kiln::testing::fast::shapes_of;
using kiln::testing::fast::uniform_f32;

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define KILN_REQUIRE_GPU()                                         \
  do {                                                             \
    if (!::kiln::testing::gpu::have_gpu()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// One Env (handles) for the whole test binary.
inline kiln::cuda::Env& test_env() {
  static std::unique_ptr<kiln::cuda::EnvHolder> holder = [] {
    auto h = kiln::cuda::EnvHolder::create(false);
    EXPECT_TRUE(h.is_ok()) << h.status().message();
    return h.is_ok() ? std::move(h).value() : nullptr;
  }();
  return holder->env;
}

// Converts a float32 host tensor to `dt` (float16/bfloat16/float32) by rounding.
inline Tensor convert(const Tensor& t, DataType dt) {
  Tensor o(dt, t.dims());
  dispatch_all(dt, [&]<typename T>() {
    T* p = o.data<T>();
    for (int64_t i = 0; i < t.size(); ++i) p[i] = convert_element<T>(t.get_double(i));
  });
  return o;
}

inline const kiln::cuda::Tactic* cuda_tactic_for(const std::string& name, Op op) {
  for (const auto& t : kiln::cuda::tactics()) {
    if (t.op == op && name == t.name) return &t;
  }
  return nullptr;
}

// The spec of a layer on `inputs` (nullptr: omitted); constant[i] marks input i constant.
inline kiln::cuda::LayerSpec make_cuda_spec(Op op, const Attributes* attrs, const std::vector<const Tensor*>& inputs,
                                            const std::vector<DataType>& output_dtypes,
                                            const std::vector<bool>& constant = {}) {
  kiln::cuda::LayerSpec s;
  s.op = op;
  s.attrs = attrs;
  s.output_dtypes = output_dtypes;
  s.env = &test_env();
  for (size_t i = 0; i < inputs.size(); ++i) {
    s.input_dtypes.push_back(inputs[i] ? inputs[i]->dtype() : DataType::kUndefined);
    const bool c = i < constant.size() && constant[i] && inputs[i] != nullptr;
    s.constants.push_back(c ? inputs[i] : nullptr);
  }
  return s;
}

// A CUDA tactic's kernel prepared at `out_shapes`, with device copies of the inputs, the
// output buffers and its workspace (what run_cuda and time_layer_ms run).
struct CudaLayer {
  std::unique_ptr<kiln::cuda::Kernel> kernel;
  size_t workspace_bytes = 0;
  std::vector<kiln::cuda::DeviceBuffer> in_bufs, out_bufs;
  kiln::cuda::DeviceBuffer ws_buf;
  std::vector<Tensor> in_views, out_views;
  std::vector<const Tensor*> in_ptrs;
  std::vector<Tensor*> out_ptrs;

  Status enqueue(cudaStream_t stream) {
    return kernel->enqueue(in_ptrs, out_ptrs, workspace_bytes ? ws_buf.get() : nullptr, stream);
  }
};

// Sets up tactic `name` for spec.op on host `inputs` (null: omitted) with output shapes
// `out_shapes` (dtype kUndefined: not wanted).
inline Status set_up_cuda_layer(const std::string& name, const kiln::cuda::LayerSpec& spec,
                                const std::vector<const Tensor*>& inputs, const std::vector<TensorShape>& out_shapes,
                                CudaLayer* l) {
  const kiln::cuda::Tactic* t = cuda_tactic_for(name, spec.op);
  if (!t) return internal_error("no CUDA tactic ", name, " for ", op_name(spec.op));
  if (!t->supports(spec)) return unsupported("CUDA tactic ", name, " does not support the layer");
  KILN_ASSIGN_OR_RETURN(l->kernel, t->create(spec));
  std::vector<TensorShape> in_shapes;
  for (const Tensor* x : inputs) in_shapes.push_back(x ? TensorShape{x->dtype(), x->dims()} : TensorShape{});
  KILN_RETURN_IF_ERROR(l->kernel->prepare(in_shapes, out_shapes, &l->workspace_bytes));
  l->in_bufs = std::vector<kiln::cuda::DeviceBuffer>(inputs.size());
  l->out_bufs = std::vector<kiln::cuda::DeviceBuffer>(out_shapes.size());
  l->in_views.assign(inputs.size(), Tensor());
  l->out_views.assign(out_shapes.size(), Tensor());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) {
      l->in_ptrs.push_back(nullptr);
      continue;
    }
    KILN_RETURN_IF_ERROR(l->in_bufs[i].upload(inputs[i]->raw(), inputs[i]->nbytes() ? inputs[i]->nbytes() : 1));
    l->in_views[i] = Tensor::wrap(inputs[i]->dtype(), inputs[i]->dims(), l->in_bufs[i].get());
    l->in_ptrs.push_back(&l->in_views[i]);
  }
  for (size_t i = 0; i < out_shapes.size(); ++i) {
    if (out_shapes[i].dtype == DataType::kUndefined) {
      l->out_ptrs.push_back(nullptr);
      continue;
    }
    const size_t bytes = static_cast<size_t>(num_elements(out_shapes[i].dims)) * dtype_size(out_shapes[i].dtype);
    KILN_RETURN_IF_ERROR(l->out_bufs[i].reserve(bytes ? bytes : 1));
    l->out_views[i] = Tensor::wrap(out_shapes[i].dtype, out_shapes[i].dims, l->out_bufs[i].get());
    l->out_ptrs.push_back(&l->out_views[i]);
  }
  return l->ws_buf.reserve(l->workspace_bytes ? l->workspace_bytes : 1);
}

struct CudaRun {
  Status status;
  std::vector<Tensor> outputs;  // host copies
  size_t workspace_bytes = 0;
};

// Runs tactic `name` for spec.op on host `inputs` with output shapes `out_shapes`, `runs`
// times, the outputs and workspace filled with NaN bytes before each run.
inline CudaRun run_cuda(const std::string& name, const kiln::cuda::LayerSpec& spec,
                        const std::vector<const Tensor*>& inputs, const std::vector<TensorShape>& out_shapes,
                        int runs = 2) {
  CudaRun r;
  CudaLayer l;
  r.status = set_up_cuda_layer(name, spec, inputs, out_shapes, &l);
  r.workspace_bytes = l.workspace_bytes;
  if (!r.status.is_ok()) return r;
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    r.status = internal_error("cudaStreamCreate failed");
    return r;
  }
  for (int i = 0; i < runs && r.status.is_ok(); ++i) {
    for (size_t o = 0; o < l.out_bufs.size(); ++o) {
      if (l.out_ptrs[o]) cudaMemsetAsync(l.out_bufs[o].get(), 0xFF, l.out_bufs[o].size(), stream);  // NaN bytes
    }
    cudaMemsetAsync(l.ws_buf.get(), 0xFF, l.ws_buf.size(), stream);
    r.status = l.enqueue(stream);
    if (r.status.is_ok()) r.status = kiln::cuda::cuda_status(cudaStreamSynchronize(stream), "kernel execution");
  }
  cudaStreamDestroy(stream);
  if (!r.status.is_ok()) return r;
  for (size_t i = 0; i < out_shapes.size(); ++i) {
    if (!l.out_ptrs[i]) {
      r.outputs.emplace_back();
      continue;
    }
    Tensor h(out_shapes[i].dtype, out_shapes[i].dims);
    if (h.nbytes()) cudaMemcpy(h.raw(), l.out_bufs[i].get(), h.nbytes(), cudaMemcpyDeviceToHost);
    r.outputs.push_back(std::move(h));
  }
  return r;
}

// Milliseconds per enqueue of `tactic` on device copies of `ins` (the mean of 50
// back-to-back runs after 5 warm-up runs, CUDA events), or -1 if it cannot run them. For
// the DISABLED_ timing tests, which print and never assert.
inline double time_layer_ms(const char* tactic, Op op, const Attributes& at, const std::vector<const Tensor*>& ins,
                            const TensorShape& out) {
  CudaLayer l;
  if (!set_up_cuda_layer(tactic, make_cuda_spec(op, &at, ins, {out.dtype}), ins, {out}, &l).is_ok()) return -1;
  for (int i = 0; i < 5; ++i) {
    if (!l.enqueue(nullptr).is_ok()) return -1;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int reps = 50;
  cudaEventRecord(e0);
  for (int i = 0; i < reps; ++i) (void)l.enqueue(nullptr);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return static_cast<double>(ms) / reps;
}

// Converts to float32 on the host (to compare fp16/bf16 results with float32 references).
inline Tensor to_f32(const Tensor& t) { return convert(t, DataType::kFloat32); }

}  // namespace kiln::testing::gpu
