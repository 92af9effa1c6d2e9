// Own CUDA kernels of the conv family (conv_kernels.cu), used by conv.cpp: the conv
// epilogue (bias + residual + activation, in place), explicit zero padding (for asymmetric
// pads cuDNN cannot express), and the factories of the tactics written without cuDNN
// (kiln_cuda_depthwise for Conv/FusedConv, kiln_cuda_pool for the pooling ops). Plain C++
// declarations, so conv.cpp compiles without nvcc.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "backends/cuda/cuda_kernel.h"
#include "core/attributes.h"
#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda::conv {

// FusedConv's activation (attribute "activation"), in float.
enum class Act : int {
  kNone = 0,
  kRelu,
  kClip,
  kLeakyRelu,
  kSigmoid,
  kHardSigmoid,
  kHardSwish,
  kSiLU,
  kSwish,
  kTanh,
  kGeluErf,
  kGeluTanh,
};

struct Activation {
  Act kind = Act::kNone;
  float alpha = 0.0f;  // LeakyRelu, HardSigmoid, Swish
  float beta = 0.0f;   // HardSigmoid
  float lo = 0.0f;     // Clip (-inf when absent)
  float hi = 0.0f;     // Clip (+inf when absent)
};

// Reads the activation of a FusedConv (Conv: none). False for an unknown one.
bool parse_activation(Op op, const Attributes& a, Activation* out);

// The "kiln_layout" attribute: false = NCHW (default), true = NHWC; false return for an
// unknown value.
bool parse_layout(const Attributes& a, bool* nhwc);

// Geometry of a Conv/FusedConv layer from its attributes and concrete shapes, in either
// layout (nhwc: X [N, in..., C], Y [N, out..., M]); W is ONNX's [M, C/group, k...].
struct ConvShape {
  int nsp = 0;
  int64_t N = 0, C = 0, M = 0;
  Dims in, kernel, strides, dilations, pads, out;  // pads: nsp begins, then nsp ends
  Dims y_dims;
};
Status conv_shape(const Attributes& a, bool nhwc, int64_t group, const Dims& x_dims, const Dims& w_dims, ConvShape* s);

// Checks shared by the conv tactics: op, dtypes (X, W, B, Z and Y alike, float), input
// count, layout, activation, auto_pad, group, and W's shape and the spatial attributes when
// W is constant.
bool conv_supports_common(const LayerSpec& spec);

// In place on y (`total` elements of `dtype`): y = act((read_y ? y : 0) + bias[ch] + z),
// ch = (i / inner) % channels (NCHW: inner = spatial size; NHWC: inner = 1). bias and z
// may be nullptr.
Status epilogue(DataType dtype, void* y, const void* bias, const void* z, int64_t total, int64_t channels, int64_t inner,
                bool read_y, const Activation& act, cudaStream_t stream);

// Zero-pads x ([N, C, in...] or [N, in..., C]; nsp <= 3 spatial axes) into xp whose
// spatial extents are out[d] = in[d] + pad_begin[d] + pad_end[d] (pad_end implied by out).
Status pad_input(DataType dtype, const void* x, void* xp, int nsp, bool nhwc, int64_t N, int64_t C, const int64_t* in,
                 const int64_t* pad_begin, const int64_t* out, cudaStream_t stream);

// Tactic kiln_cuda_depthwise (Conv, FusedConv).
bool depthwise_supports(const LayerSpec& spec);
Result<std::unique_ptr<Kernel>> depthwise_create(const LayerSpec& spec);

// Tactic kiln_cuda_pool (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool).
bool pool_supports(const LayerSpec& spec);
Result<std::unique_ptr<Kernel>> pool_create(const LayerSpec& spec);

}  // namespace kiln::cuda::conv
