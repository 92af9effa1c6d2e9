// Shared by kiln's two CUDA Attention tactics (attention.cu: "kiln_cuda_attention",
// attention_flash.cu: "kiln_cuda_flash"): the kernel parameters, the device helpers that
// define the scores' semantics and rounding, and the host-side parameter setup. Both
// tactics compute exactly the same function; see attention.cu for the semantics.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_kernel.h"

namespace kiln::cuda::attn {

constexpr int kMaxHead = 128;

enum MaskKind : int { kMaskNone = 0, kMaskBool = 1, kMaskF32 = 2, kMaskF16 = 3, kMaskBF16 = 4 };

struct AttnParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* y = nullptr;
  const void* mask = nullptr;
  int mask_kind = kMaskNone;
  int64_t ms[4] = {0, 0, 0, 0};  // mask strides over [B, Hq, Lq, L] (0: broadcast)
  int64_t mask_last = 0;         // mask length along the key axis
  int64_t B = 0, Hq = 0, Hkv = 0, Lq = 0, L = 0;
  int Dk = 0, Dv = 0;
  // Element strides of batch, head and sequence position (3-D and 4-D layouts alike).
  int64_t q_bs = 0, q_hs = 0, q_rs = 0;
  int64_t k_bs = 0, k_hs = 0, k_rs = 0;
  int64_t v_bs = 0, v_hs = 0, v_rs = 0;
  int64_t y_bs = 0, y_hs = 0, y_rs = 0;
  float sqrt_scale = 1.0f;  // rounded to the input type in the kernels
  float softcap = 0.0f;     // 0: none
  int causal = 0;
  int64_t left = -1, right = -1;  // window sizes (-1: unbounded)
  bool vec = false;               // 16-byte loads of Q, K, V rows are aligned
  bool y_vec = false;             // 16-byte stores of Y rows are aligned
};

__host__ __device__ __forceinline__ int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t imax64(int64_t a, int64_t b) { return a > b ? a : b; }

template <typename T>
__device__ __forceinline__ float round_t(float x) {
  return to_f32(from_f32<T>(x));
}

// The mask's additive value for key j of the mask row starting at element `row_off`
// (b * ms[0] + h * ms[1] + i * ms[2]): the bool mask as 0 / -inf, -inf beyond the mask's key
// axis. Requires a mask.
__device__ __forceinline__ float mask_value(const AttnParams& p, int64_t row_off, int64_t j) {
  if (j >= p.mask_last) return -INFINITY;
  const int64_t off = row_off + j * p.ms[3];
  switch (p.mask_kind) {
    case kMaskBool: return static_cast<const uint8_t*>(p.mask)[off] ? 0.0f : -INFINITY;
    case kMaskF32: return static_cast<const float*>(p.mask)[off];
    case kMaskF16: return __half2float(static_cast<const __half*>(p.mask)[off]);
    default: return __bfloat162float(static_cast<const __nv_bfloat16*>(p.mask)[off]);
  }
}

// The bias of score (i, j) given its mask value `mv` (0 without a mask): -inf added where
// causal or window masking excludes the key, rounded to T as the reference does.
template <typename T>
__device__ __forceinline__ float finish_bias(const AttnParams& p, float mv, int64_t i, int64_t j) {
  if (p.causal && j > i) mv += -INFINITY;
  if (p.left >= 0 || p.right >= 0) {
    const int64_t diff = i - j;
    const bool allowed = (p.left < 0 || diff <= p.left) && (p.right < 0 || -diff <= p.right);
    if (!allowed) mv += -INFINITY;
  }
  return round_t<T>(mv);
}

// The additive bias of score (i, j) of head (b, h).
template <typename T>
__device__ __forceinline__ float attn_bias(const AttnParams& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  const float mv =
      p.mask_kind != kMaskNone ? mask_value(p, b * p.ms[0] + h * p.ms[1] + i * p.ms[2], j) : 0.0f;
  return finish_bias<T>(p, mv, i, j);
}

// The softcapped score of a raw dot product `acc` (already including the sqrt(scale)
// factors), before the bias.
template <typename T>
__device__ __forceinline__ float attn_capped(const AttnParams& p, float acc) {
  float s = round_t<T>(acc);
  if (p.softcap > 0.0f) s = round_t<T>(round_t<T>(tanhf(round_t<T>(s / p.softcap))) * p.softcap);
  return s;
}

// Final score of a raw dot product `acc` with bias `bias`.
template <typename T>
__device__ __forceinline__ float attn_score(const AttnParams& p, float acc, float bias) {
  return round_t<T>(attn_capped<T>(p, acc) + bias);
}

// Key range [kbeg, kend) that rows [q0, q_hi) can attend to (outside it every bias is -inf).
__host__ __device__ __forceinline__ void key_range(const AttnParams& p, int64_t q0, int64_t q_hi, int64_t* kbeg,
                                                   int64_t* kend) {
  int64_t e = p.L;
  if (p.mask_kind != kMaskNone) e = imin64(e, p.mask_last);
  if (p.causal) e = imin64(e, q_hi);
  if (p.right >= 0) e = imin64(e, q_hi + p.right);
  int64_t s = 0;
  if (p.left >= 0) s = imax64(0, q0 - p.left);
  *kbeg = s;
  *kend = e;
}

// ---- host side (attention.cu) ----

// The layer's attributes, as both tactics read them.
struct AttnAttrs {
  bool has_qh = false, has_kvh = false, has_scale = false;
  int64_t qh = 0, kvh = 0;
  int causal = 0;
  float scale = 1.0f, softcap = 0.0f;
  int64_t left = -1, right = -1;
};
AttnAttrs attention_attrs(const LayerSpec& spec);

// Whether the layer is an Attention these kernels compute (any float dtype; no KV cache,
// no extra outputs).
bool attention_supports(const LayerSpec& spec);

// Fills `p` (shapes, strides, mask geometry, scale) for the concrete shapes; errors name
// `tactic`. Pointers are set by attention_bind.
Status attention_setup(const char* tactic, const AttnAttrs& a, const std::vector<TensorShape>& in,
                       const std::vector<TensorShape>& out, AttnParams* p);

// Sets the device pointers of `p` and its alignment flags for one enqueue.
Status attention_bind(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, DataType dt,
                      AttnParams* p);

// The "kiln_cuda_flash" tactic (attention_flash.cu): float16/bfloat16 only.
bool flash_attention_supports(const LayerSpec& spec);
Result<std::unique_ptr<Kernel>> flash_attention_create(const LayerSpec& spec);

}  // namespace kiln::cuda::attn
