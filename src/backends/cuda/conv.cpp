// The CUDA conv family: cuDNN convolutions (tactic cudnn_conv for Conv and FusedConv, cuDNN
// 9 legacy API), and the tactics of conv_kernels.cu (kiln_cuda_depthwise,
// kiln_cuda_pool).
//
// cudnn_conv: 1-D (as 2-D with H = 1), 2-D and 3-D convolutions, groups, strides,
// dilations, pads (asymmetric ones through an explicit zero-padded copy of X in the
// workspace, cuDNN having symmetric pads only), auto_pad; float32 (FMA math, or TF32 when
// Env::tf32), float16 and bfloat16 (tensor-op math, float compute). Layout NCHW, or NHWC
// when the layer has kiln_layout = "NHWC" (X, Z, Y channels-last; W reordered once to
// cuDNN's KRSC filter layout). FusedConv computes act(conv(X, W) + B + Z):
//   - activation None or Relu with a bias: one cudnnConvolutionBiasActivationForward
//     (y = act(conv + alpha2 * z + bias)); IDENTITY needs IMPLICIT_PRECOMP_GEMM;
//   - otherwise cudnnConvolutionForward then the in-place epilogue kernel (bias, Z,
//     activation). The fused call falls back to this path when cuDNN declines it.
#include <cudnn.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/conv_kernels.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_kernel.h"

namespace kiln::cuda {

namespace {

using conv::Act;
using conv::Activation;
using conv::ConvShape;

#define KILN_CUDNN_CHECK(call)                                                                           \
  do {                                                                                                   \
    cudnnStatus_t kiln_cudnn_st_ = (call);                                                               \
    if (kiln_cudnn_st_ != CUDNN_STATUS_SUCCESS) {                                                        \
      return ::kiln::internal_error(#call, ": cuDNN error ", static_cast<int>(kiln_cudnn_st_), " (",     \
                                    cudnnGetErrorString(kiln_cudnn_st_), ")");                           \
    }                                                                                                    \
  } while (0)

constexpr size_t kMaxWorkspace = size_t{64} << 20;  // 64 MiB
constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

const Tensor* input_at(const std::vector<const Tensor*>& in, size_t i) { return i < in.size() ? in[i] : nullptr; }

cudnnDataType_t cudnn_dtype(DataType dt) {
  switch (dt) {
    case DataType::kFloat16: return CUDNN_DATA_HALF;
    case DataType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

bool cudnn_conv_supports(const LayerSpec& s) {
  if (!conv::conv_supports_common(s)) return false;
  bool nhwc = false;
  conv::parse_layout(*s.attrs, &nhwc);
  // NHWC needs W on the host (reordered to KRSC at prepare).
  if (nhwc && (s.constants.size() < 2 || s.constants[1] == nullptr)) return false;
  return true;
}

class CudnnConvKernel final : public Kernel {
 public:
  explicit CudnnConvKernel(const LayerSpec& s) : attrs_(*s.attrs), handle_(static_cast<cudnnHandle_t>(s.env->cudnn)) {
    dtype_ = s.input_dtype(0);
    tf32_ = s.env->tf32;
    conv::parse_layout(attrs_, &nhwc_);
    conv::parse_activation(s.op, attrs_, &act_);
    group_ = attrs_.get_int("group", 1);
    has_bias_ = s.input_dtype(2) != DataType::kUndefined;
    has_z_ = s.input_dtype(3) != DataType::kUndefined;
    if (s.constants.size() > 1 && s.constants[1]) {
      const Tensor& w = *s.constants[1];
      w_const_dims_ = w.dims();
      if (nhwc_) {  // [M, Cg, k...] -> [M, k..., Cg]
        const size_t es = dtype_size(w.dtype());
        const int64_t M = w.dim(0), Cg = w.dim(1);
        const int64_t K = num_elements(Dims(w.dims().begin() + 2, w.dims().end()));
        w_host_.resize(static_cast<size_t>(w.nbytes()));
        const auto* src = static_cast<const unsigned char*>(w.raw());
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t c = 0; c < Cg; ++c) {
            for (int64_t k = 0; k < K; ++k) {
              std::memcpy(&w_host_[static_cast<size_t>(((m * K + k) * Cg + c)) * es],
                          src + static_cast<size_t>((m * Cg + c) * K + k) * es, es);
            }
          }
        }
      }
    }
  }

  ~CudnnConvKernel() override {
    if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
    if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
    if (b_desc_) cudnnDestroyTensorDescriptor(b_desc_);
    if (w_desc_) cudnnDestroyFilterDescriptor(w_desc_);
    if (conv_desc_) cudnnDestroyConvolutionDescriptor(conv_desc_);
    if (act_desc_) cudnnDestroyActivationDescriptor(act_desc_);
  }

  Status prepare(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                 size_t* workspace_bytes) override {
    *workspace_bytes = 0;
    ready_ = false;
    KILN_ENSURE(inputs.size() >= 2 && outputs.size() == 1, "cudnn_conv: expected X, W and one output");
    if (!handle_) return unsupported("cudnn_conv: no cuDNN handle");
    const Dims& xd = inputs[0].dims;
    const Dims& wd = inputs[1].dims;
    if (!w_const_dims_.empty()) KILN_ENSURE(wd == w_const_dims_, "cudnn_conv: W shape changed");
    ConvShape s;
    KILN_RETURN_IF_ERROR(conv::conv_shape(attrs_, nhwc_, group_, xd, wd, &s));
    KILN_ENSURE(outputs[0].dims == s.y_dims, "cudnn_conv: output ", dims_str(outputs[0].dims), ", expected ",
                dims_str(s.y_dims));
    if (has_bias_) {
      KILN_ENSURE(inputs.size() > 2 && num_elements(inputs[2].dims) == s.M, "cudnn_conv: B must have ", s.M,
                  " elements");
    }
    if (has_z_) {
      KILN_ENSURE(inputs.size() > 3 && inputs[3].dims == s.y_dims,
                  "cudnn_conv: residual Z must have the output's shape ", dims_str(s.y_dims));
    }
    shape_ = s;
    y_total_ = num_elements(s.y_dims);
    y_inner_ = nhwc_ ? 1 : num_elements(s.out);
    mode_ = Mode::kCudnn;
    if (y_total_ == 0) {
      mode_ = Mode::kEmpty;
      ready_ = true;
      return Status::ok();
    }
    if (num_elements(xd) == 0) {  // C == 0 or an empty spatial axis: only bias, Z, activation
      mode_ = Mode::kFillOnly;
      ready_ = true;
      return Status::ok();
    }
    const int nsp = s.nsp;
    // Explicit padding where begin and end pads differ.
    pad_explicit_ = false;
    int64_t sym[3] = {0, 0, 0};
    for (int d = 0; d < nsp; ++d) {
      const int64_t pb = s.pads[static_cast<size_t>(d)], pe = s.pads[static_cast<size_t>(nsp + d)];
      sym[d] = std::min(pb, pe);
      xp_begin_[d] = pb - sym[d];
      xp_in_[d] = s.in[static_cast<size_t>(d)];
      xp_out_[d] = s.in[static_cast<size_t>(d)] + (pb - sym[d]) + (pe - sym[d]);
      if (pb != pe) pad_explicit_ = true;
    }
    // Limits of cuDNN's int descriptors.
    int64_t xp_total = s.N * s.C;
    for (int d = 0; d < nsp; ++d) xp_total *= xp_out_[d];
    KILN_ENSURE(num_elements(xd) <= kInt32Max && y_total_ <= kInt32Max && xp_total <= kInt32Max &&
                    num_elements(wd) <= kInt32Max,
                "cudnn_conv: tensor too large for cuDNN");
    xp_bytes_ = pad_explicit_ ? static_cast<size_t>(xp_total) * dtype_size(dtype_) : 0;

    // Descriptors (1-D as 2-D with H = 1).
    if (!x_desc_) {
      KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_desc_));
      KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_desc_));
      KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&b_desc_));
      KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_desc_));
      KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_desc_));
      KILN_CUDNN_CHECK(cudnnCreateActivationDescriptor(&act_desc_));
    }
    const int nd = nsp == 1 ? 2 : nsp;  // cuDNN spatial axes
    std::vector<int> xdims = {static_cast<int>(s.N), static_cast<int>(s.C)};
    std::vector<int> ydims = {static_cast<int>(s.N), static_cast<int>(s.M)};
    std::vector<int> wdims = {static_cast<int>(s.M), static_cast<int>(wd[1])};
    std::vector<int> pads, strides, dils;
    if (nsp == 1) {
      xdims.push_back(1);
      ydims.push_back(1);
      wdims.push_back(1);
      pads.push_back(0);
      strides.push_back(1);
      dils.push_back(1);
    }
    for (int d = 0; d < nsp; ++d) {
      const size_t du = static_cast<size_t>(d);
      xdims.push_back(static_cast<int>(xp_out_[d]));
      ydims.push_back(static_cast<int>(s.out[du]));
      wdims.push_back(static_cast<int>(s.kernel[du]));
      KILN_ENSURE(sym[d] <= kInt32Max && s.strides[du] <= kInt32Max && s.dilations[du] <= kInt32Max,
                  "cudnn_conv: attribute too large");
      pads.push_back(static_cast<int>(sym[d]));
      strides.push_back(static_cast<int>(s.strides[du]));
      dils.push_back(static_cast<int>(s.dilations[du]));
    }
    const cudnnDataType_t dt = cudnn_dtype(dtype_);
    const cudnnTensorFormat_t fmt = nhwc_ ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    KILN_CUDNN_CHECK(cudnnSetTensorNdDescriptorEx(x_desc_, fmt, dt, nd + 2, xdims.data()));
    KILN_CUDNN_CHECK(cudnnSetTensorNdDescriptorEx(y_desc_, fmt, dt, nd + 2, ydims.data()));
    std::vector<int> bdims(static_cast<size_t>(nd + 2), 1);
    bdims[1] = static_cast<int>(s.M);
    KILN_CUDNN_CHECK(cudnnSetTensorNdDescriptorEx(b_desc_, CUDNN_TENSOR_NCHW, dt, nd + 2, bdims.data()));
    KILN_CUDNN_CHECK(cudnnSetFilterNdDescriptor(w_desc_, dt, fmt, nd + 2, wdims.data()));
    KILN_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(conv_desc_, nd, pads.data(), strides.data(), dils.data(),
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_desc_, static_cast<int>(group_)));
    const bool strict_fp32 = dtype_ == DataType::kFloat32 && !tf32_;
    const cudnnMathType_t base_math =
        dtype_ == DataType::kFloat32 ? (tf32_ ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH) : CUDNN_TENSOR_OP_MATH;
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_, base_math));
    std::vector<int> got(static_cast<size_t>(nd + 2));
    KILN_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(conv_desc_, x_desc_, w_desc_, nd + 2, got.data()));
    KILN_ENSURE(got == ydims, "cudnn_conv: cuDNN's output shape differs from the reference geometry");

    // Algorithm: the heuristics' first that runs with at most 64 MiB of workspace.
    int max_algos = 0;
    KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(handle_, &max_algos));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(max_algos, 1)));
    int returned = 0;
    KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle_, x_desc_, w_desc_, conv_desc_, y_desc_,
                                                            static_cast<int>(perf.size()), &returned, perf.data()));
    bool found = false;
    for (int i = 0; i < returned && !found; ++i) {
      const cudnnConvolutionFwdAlgoPerf_t& p = perf[static_cast<size_t>(i)];
      if (p.status != CUDNN_STATUS_SUCCESS) continue;
      if (strict_fp32 && p.mathType != CUDNN_FMA_MATH && p.mathType != CUDNN_DEFAULT_MATH) continue;
      const cudnnMathType_t math = strict_fp32 ? CUDNN_FMA_MATH : p.mathType;
      if (cudnnSetConvolutionMathType(conv_desc_, math) != CUDNN_STATUS_SUCCESS) continue;
      size_t ws = 0;
      if (cudnnGetConvolutionForwardWorkspaceSize(handle_, x_desc_, w_desc_, conv_desc_, y_desc_, p.algo, &ws) !=
          CUDNN_STATUS_SUCCESS) {
        continue;
      }
      if (ws > kMaxWorkspace) continue;
      algo_ = p.algo;
      math_ = math;
      algo_ws_ = ws;
      found = true;
    }
    if (!found) return unsupported("cudnn_conv: cuDNN has no algorithm for this convolution within 64 MiB");
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_, math_));

    // The fused cuDNN call: activation None (IDENTITY, IMPLICIT_PRECOMP_GEMM only) or Relu, with a bias.
    fused_ = false;
    fused_ws_ = 0;
    if (has_bias_ && (act_.kind == Act::kNone || act_.kind == Act::kRelu)) {
      fused_algo_ = algo_;
      bool ok = true;
      if (act_.kind == Act::kNone) {
        fused_algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
        ok = cudnnGetConvolutionForwardWorkspaceSize(handle_, x_desc_, w_desc_, conv_desc_, y_desc_, fused_algo_,
                                                     &fused_ws_) == CUDNN_STATUS_SUCCESS &&
             fused_ws_ <= kMaxWorkspace;
      } else {
        fused_ws_ = algo_ws_;
      }
      if (ok) {
        KILN_CUDNN_CHECK(cudnnSetActivationDescriptor(
            act_desc_, act_.kind == Act::kRelu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
            CUDNN_PROPAGATE_NAN, 0.0));
        fused_ = true;
      } else {
        fused_ws_ = 0;
      }
    }
    cudnn_ws_ = std::max(algo_ws_, fused_ws_);
    xp_offset_ = align_up(cudnn_ws_);
    *workspace_bytes = pad_explicit_ ? xp_offset_ + xp_bytes_ : cudnn_ws_;

    // Weights in KRSC for NHWC (once; W is constant).
    if (nhwc_ && !w_uploaded_) {
      KILN_ENSURE(!w_host_.empty(), "cudnn_conv: NHWC needs a constant W");
      KILN_RETURN_IF_ERROR(w_dev_.upload(w_host_.data(), w_host_.size()));
      w_uploaded_ = true;
    }
    ready_ = true;
    return Status::ok();
  }

  Status enqueue(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs, void* workspace,
                 cudaStream_t stream) override {
    if (!ready_) return internal_error("cudnn_conv: enqueue() before a successful prepare()");
    if (mode_ == Mode::kEmpty) return Status::ok();
    const Tensor* b = has_bias_ ? input_at(inputs, 2) : nullptr;
    const Tensor* z = has_z_ ? input_at(inputs, 3) : nullptr;
    void* y = outputs[0]->raw();
    const void* bp = b ? b->raw() : nullptr;
    const void* zp = z ? z->raw() : nullptr;
    if (mode_ == Mode::kFillOnly) {
      return conv::epilogue(dtype_, y, bp, zp, y_total_, shape_.M, y_inner_, false, act_, stream);
    }
    KILN_CUDNN_CHECK(cudnnSetStream(handle_, stream));
    const void* x = inputs[0]->raw();
    if (pad_explicit_) {
      void* xp = static_cast<char*>(workspace) + xp_offset_;
      KILN_RETURN_IF_ERROR(conv::pad_input(dtype_, x, xp, shape_.nsp, nhwc_, shape_.N, shape_.C, xp_in_, xp_begin_,
                                           xp_out_, stream));
      x = xp;
    }
    const void* w = nhwc_ ? w_dev_.get() : inputs[1]->raw();
    const float one = 1.0f, zero = 0.0f;
    if (fused_) {
      const float alpha2 = zp ? 1.0f : 0.0f;
      const cudnnStatus_t st = cudnnConvolutionBiasActivationForward(
          handle_, &one, x_desc_, x, w_desc_, w, conv_desc_, fused_algo_, workspace, cudnn_ws_, &alpha2, y_desc_,
          zp ? zp : y, b_desc_, bp, act_desc_, y_desc_, y);
      if (st == CUDNN_STATUS_SUCCESS) return Status::ok();
      const int code = static_cast<int>(st);
      if (code < CUDNN_STATUS_BAD_PARAM || code >= CUDNN_STATUS_INTERNAL_ERROR) {  // not BAD_PARAM*/NOT_SUPPORTED*
        return internal_error("cudnnConvolutionBiasActivationForward: cuDNN error ", static_cast<int>(st), " (",
                              cudnnGetErrorString(st), ")");
      }
      fused_ = false;  // cuDNN declines this configuration: conv + own epilogue from now on
    }
    KILN_CUDNN_CHECK(cudnnConvolutionForward(handle_, &one, x_desc_, x, w_desc_, w, conv_desc_, algo_, workspace,
                                             cudnn_ws_, &zero, y_desc_, y));
    if (bp || zp || act_.kind != Act::kNone) {
      KILN_RETURN_IF_ERROR(conv::epilogue(dtype_, y, bp, zp, y_total_, shape_.M, y_inner_, true, act_, stream));
    }
    return Status::ok();
  }

 private:
  enum class Mode { kEmpty, kFillOnly, kCudnn };

  Attributes attrs_;
  cudnnHandle_t handle_ = nullptr;
  DataType dtype_ = DataType::kFloat32;
  bool tf32_ = false, nhwc_ = false, has_bias_ = false, has_z_ = false;
  Activation act_;
  int64_t group_ = 1;
  Dims w_const_dims_;
  std::vector<unsigned char> w_host_;  // NHWC: W reordered to KRSC
  DeviceBuffer w_dev_;
  bool w_uploaded_ = false;

  bool ready_ = false;
  Mode mode_ = Mode::kEmpty;
  ConvShape shape_;
  int64_t y_total_ = 0, y_inner_ = 1;
  bool pad_explicit_ = false;
  int64_t xp_in_[3] = {1, 1, 1}, xp_begin_[3] = {0, 0, 0}, xp_out_[3] = {1, 1, 1};
  size_t xp_bytes_ = 0, xp_offset_ = 0;

  cudnnTensorDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr, b_desc_ = nullptr;
  cudnnFilterDescriptor_t w_desc_ = nullptr;
  cudnnConvolutionDescriptor_t conv_desc_ = nullptr;
  cudnnActivationDescriptor_t act_desc_ = nullptr;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionFwdAlgo_t fused_algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  cudnnMathType_t math_ = CUDNN_DEFAULT_MATH;
  size_t algo_ws_ = 0, fused_ws_ = 0, cudnn_ws_ = 0;
  bool fused_ = false;
};

Result<std::unique_ptr<Kernel>> cudnn_conv_create(const LayerSpec& s) {
  if (!cudnn_conv_supports(s)) return unsupported("cudnn_conv: layer not supported");
  if (!s.env || !s.env->cudnn) return unsupported("cudnn_conv: no cuDNN handle");
  return std::unique_ptr<Kernel>(std::make_unique<CudnnConvKernel>(s));
}

}  // namespace

void add_conv_tactics(std::vector<Tactic>& out) {
  out.push_back({"cudnn_conv", Op::Conv, cudnn_conv_supports, cudnn_conv_create});
  out.push_back({"cudnn_conv", Op::FusedConv, cudnn_conv_supports, cudnn_conv_create});
  out.push_back({"kiln_cuda_depthwise", Op::Conv, conv::depthwise_supports, conv::depthwise_create});
  out.push_back({"kiln_cuda_depthwise", Op::FusedConv, conv::depthwise_supports, conv::depthwise_create});
  out.push_back({"kiln_cuda_pool", Op::MaxPool, conv::pool_supports, conv::pool_create});
  out.push_back({"kiln_cuda_pool", Op::AveragePool, conv::pool_supports, conv::pool_create});
  out.push_back({"kiln_cuda_pool", Op::GlobalAveragePool, conv::pool_supports, conv::pool_create});
  out.push_back({"kiln_cuda_pool", Op::GlobalMaxPool, conv::pool_supports, conv::pool_create});
}

}  // namespace kiln::cuda
