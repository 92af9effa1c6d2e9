// FusedElementwise on the GPU ("nvrtc_fused"): the node's expr program is translated into
// the CUDA C source of one kernel (loads with broadcasting, the program evaluated in the
// ops' domains with the device functions of elementwise_ops.cuh, one store), compiled with
// NVRTC to a CUBIN for the device's sm and launched through the runtime's library API
// (cudaLibraryLoadData / cudaLibraryGetKernel / cudaLaunchKernel: no -lcuda).
//
// The source and so the CUBIN depend only on the program and the dtypes, not on shapes:
// a plan may store the CUBIN of a layer (fused_elementwise_cubin) and later create the
// kernel from it without NVRTC (create_fused_elementwise_from_cubin).
//
// Each intermediate value is rounded to its dtype (float16 temps to float16, int32 temps
// wrapped to 32 bits) exactly where the unfused chain would store it, so the fused kernel
// computes what the reference's statement-by-statement evaluation computes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernel.h"
#include "ir/elementwise_expr.h"

namespace kiln::cuda {

// Appends the "nvrtc_fused" tactic for FusedElementwise (called by add_elementwise_tactics).
void add_fused_elementwise_tactics(std::vector<Tactic>& out);

// The CUDA C source of a program on inputs of `input_dtypes` (kUndefined: omitted) writing
// `output_dtype`. Fails (unsupported) when an op or dtype is not handled.
Result<std::string> fused_elementwise_source(const ElementwiseProgram& p, const std::vector<DataType>& input_dtypes,
                                             DataType output_dtype);

// Compiles CUDA C source with NVRTC to a CUBIN for compute capability `sm` (90: sm_90).
// Process-wide cache by (source, sm): equal programs compile once.
Result<std::string> compile_cubin(const std::string& src, int sm);

// The CUBIN of a FusedElementwise layer on spec.env->sm (parse, generate, compile).
Result<std::string> fused_elementwise_cubin(const LayerSpec& spec);

// The layer's kernel from CUBIN bytes made by fused_elementwise_cubin for the same layer
// (the expr and dtypes must match; the device's sm must be the CUBIN's). No NVRTC.
Result<std::unique_ptr<Kernel>> create_fused_elementwise_from_cubin(const LayerSpec& spec, const std::string& cubin);

// Plans carry the CUBIN of each FusedElementwise layer as node attributes (the builder
// calls attach_fused_elementwise_cubin on the plan's graph): the bytes, the sm they were
// compiled for and a hash of the generated source. The tactic's create() uses them when
// both match this layer and this GPU, so loading such a plan needs no NVRTC; otherwise
// (another GPU, a changed code generator) it compiles.
inline constexpr const char* kCubinAttr = "kiln_cubin";
inline constexpr const char* kCubinSmAttr = "kiln_cubin_sm";
inline constexpr const char* kCubinHashAttr = "kiln_cubin_source";
Status attach_fused_elementwise_cubin(const LayerSpec& spec, Attributes* attrs);

// The shared op functions as NVRTC source text (elementwise_ops.cuh), for tests and tools.
const char* elementwise_ops_source();

}  // namespace kiln::cuda
