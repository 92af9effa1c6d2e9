// The CUDA backend's kernel interface (issue 6). It mirrors the fast CPU backend's
// (backends/cpu/fast/fast_kernel.h): kernels see dtypes, shapes, attributes and device
// pointers, never the IR.
//
// Lifecycle, which makes "an inference allocates nothing and can be captured as a CUDA
// graph" true:
//   create   once per layer and set of shapes: constant inputs (weights) are known on the
//            host through LayerSpec::constants; the kernel may keep derived device copies
//            (reordered/converted weights) that it allocates in prepare.
//   prepare  with the concrete input/output shapes: may allocate device memory, query
//            cuBLASLt/cuDNN heuristics, compile with NVRTC; says how much workspace
//            enqueue() needs. Runs outside stream capture; it may synchronize.
//   enqueue  many times, possibly while the stream is being captured into a CUDA graph:
//            only asynchronous work on `stream` (kernel launches, cuBLASLt/cuDNN calls
//            with the given workspace, cudaMemcpyAsync device-to-device). No allocation,
//            no synchronization, no host reads of device memory. Must write every element
//            of every output.
//
// Tensors passed to enqueue are kiln::Tensor views (Tensor::wrap) whose raw() is a DEVICE
// pointer: never dereference them on the host. Constant inputs are passed too, already on
// the device (the context uploads every constant once per setup).
#pragma once
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/fast/fast_kernel.h"
#include "core/attributes.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/op.h"

namespace kiln::cuda {

using fast::TensorShape;

// Per-context library state, created by the context before any prepare().
struct Env {
  int device = 0;
  int sm = 90;                      // compute capability major*10+minor
  int sm_count = 0;
  std::string name;                 // "NVIDIA H200": timing-cache entries are per GPU model
  void* cublaslt = nullptr;         // cublasLtHandle_t
  void* cudnn = nullptr;            // cudnnHandle_t
  bool tf32 = false;                // FP32 GEMMs/convs may use TF32 tensor cores
};

// What a factory sees of one layer: op, attrs, input_dtypes (kUndefined for an omitted
// optional input), output_dtypes and constants (per input: the constant's HOST value, or
// nullptr), with the accessors attributes(), input_dtype(i), output_dtype(i), constant(i),
// has_input(i) and wants_output(i) (fast::LayerSpecBase), and the GPU's library state.
struct LayerSpec : fast::LayerSpecBase {
  const Env* env = nullptr;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Concrete shapes; sets *workspace_bytes to the device workspace enqueue() needs.
  virtual Status prepare(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                         size_t* workspace_bytes) = 0;
  // inputs[i] is nullptr for an omitted optional input. Device pointers; see above.
  virtual Status enqueue(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
                         void* workspace, cudaStream_t stream) = 0;
};

// One way to run one op on the GPU. supports() must be cheap and exact: a kernel it
// accepts must run every shape prepare() is later given, or fail prepare() cleanly (the
// context then tries the next tactic, finally the CPU fallback).
struct Tactic {
  const char* name;  // stable, recorded in plans: "cublaslt_gemm", "cudnn_conv", "kiln_cuda_layernorm"...
  Op op;
  bool (*supports)(const LayerSpec& spec);
  Result<std::unique_ptr<Kernel>> (*create)(const LayerSpec& spec);
};

// Every CUDA tactic, in preference order per op.
const std::vector<Tactic>& tactics();
std::vector<const Tactic*> tactics_for(const LayerSpec& spec);
const Tactic* find_tactic(const std::string& name);

// Families (one file each); each appends its tactics.
void add_gemm_tactics(std::vector<Tactic>& out);         // gemm.cpp: MatMul, Gemm, FusedGemm (cuBLASLt)
void add_conv_tactics(std::vector<Tactic>& out);         // conv.cpp: Conv, FusedConv, pooling (cuDNN + own)
void add_elementwise_tactics(std::vector<Tactic>& out);  // elementwise.cu / fused_elementwise.cpp (NVRTC)
void add_norm_tactics(std::vector<Tactic>& out);         // norm.cu: LayerNorm, RMSNorm, FusedResidualNorm, Softmax
void add_attention_tactics(std::vector<Tactic>& out);    // attention.cu
void add_movement_tactics(std::vector<Tactic>& out);     // movement.cu: Reshape, Transpose, Concat, Split, Slice, Gather...
void add_reduce_tactics(std::vector<Tactic>& out);       // reduce.cu: Reduce*, ArgMax/ArgMin

// "cuda 13.0, cudnn 9.x, cublasLt 13.x" for plans and `kiln inspect`.
std::string library_versions();

}  // namespace kiln::cuda
