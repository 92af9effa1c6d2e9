// The runtime's entry points into the CUDA backend (backends/cuda/cuda_context.cpp). In a
// build without CUDA, runtime/cuda_stubs.cpp defines them: cuda_compiled() is false and the
// others return an error, so the runtime itself never needs CUDA headers.
#pragma once
#include <map>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

struct ContextImpl;
class Graph;

// Whether this build has the CUDA backend.
bool cuda_compiled();
// Ok when a CUDA device is usable, else an error saying why.
Status cuda_device_status();
// "cuda 13.0, cudnn 9.x, cublasLt 13.x" (CUDA builds with a device), else "".
std::string cuda_library_versions();

// Setup for CUDA engines, called by ContextImpl::setup once the slots exist: chooses a CUDA
// tactic per layer (or a CPU fallback), plans device memory, uploads constants.
Status cuda_setup(ContextImpl& c);
// Runs the engine on `stream` (null: the context's own stream); waits when `sync`.
Status cuda_execute(ContextImpl& c, void* stream, bool sync);
// Copies host tensors into the context's own device input buffers (run(), bench).
Status cuda_upload_inputs(ContextImpl& c, const std::map<std::string, Tensor>& host);
// A host copy of an engine output (or any slot by name) after execution.
Result<Tensor> cuda_download(ContextImpl& c, const std::string& name);
// Stores build-time compiled code in the plan's graph `g` (the graph the context was
// specialized from): the CUBIN of every FusedElementwise layer served by NVRTC, as node
// attributes, so loading the plan needs no compiler.
Status cuda_attach_kernels(ContextImpl& c, Graph& g);
// Turns the CUDA graph on or off (on by default); timing of the last execute in ms as
// measured on the GPU with events (-1: not measured).
void cuda_set_graphs(ContextImpl& c, bool on);
double cuda_last_gpu_ms(const ContextImpl& c);
// Whether the context replays a CUDA graph, and how many layers run on the CPU (in host
// mode, ContextImpl::host_mode: every layer).
bool cuda_uses_graph(const ContextImpl& c);
int cuda_fallback_layers(const ContextImpl& c);

// Host mode (runtime/cuda_host_mode.cpp). Frees the context's device memory and CUDA graph
// (kept: handles and streams); queues a copy between host and device memory, its direction
// following from the addresses, on `stream` (null: the legacy default stream); waits for
// the work queued on `stream`.
void cuda_release_device_memory(ContextImpl& c);
Status cuda_copy(void* dst, const void* src, size_t bytes, void* stream);
Status cuda_wait(void* stream);

}  // namespace kiln
