// kiln's CUDA Attention kernel (tactic "kiln_cuda_attention"): flash-attention style
// softmax(Q K^T * scale + bias) V with an online softmax over tiles of 64 keys held in
// shared memory, float32 statistics and accumulation.
//
// Semantics follow the reference kernel (backends/cpu/reference/attention.cpp) without a
// KV cache: 3-D [B, S, H*D] or 4-D [B, H, S, D] inputs, grouped-query heads, a boolean
// (true = attend) or additive float mask right-aligned against [B, Hq, Lq, L] whose key
// axis may be shorter than L (missing keys masked), causal (top-left aligned: key j <= query
// i) and sliding-window masking, softcap, and a row whose keys are all masked gives zeros.
// As in the reference, Q and K are each multiplied by sqrt(scale) rounded to the input
// type, and the raw score, the softcapped score, the bias and their sum are rounded to the
// input type (no-ops for float32), so float16/bfloat16 results track the reference's
// per-op rounding.
//
// Two kernels:
//   attention_wmma_kernel  float16/bfloat16: 64 query rows per block (4 warps x 16 rows),
//                          Q K^T and P V on tensor cores (WMMA 16x16x16, float32
//                          accumulators); head sizes padded with zeros to multiples of 16.
//   attention_simt_kernel  any float type (float32 here): 32 query rows per block, float32
//                          CUDA-core math.
// Head sizes up to 128; Key tiles entirely excluded by causal/window/mask-length limits of
// the block's rows are skipped.
//
// The faster float16/bfloat16 tactic "kiln_cuda_flash" (attention_flash.cu) computes the same
// function; the parameters, the score/bias helpers and the host-side setup both use are in
// attention_common.cuh (defined here). Both tactics are registered here, the flash one first.
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/attention_common.cuh"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_kernel.h"

namespace kiln::cuda {

namespace attn {

namespace {

constexpr int kBK = 64;  // keys per tile

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// Loads rows [r0, r0 + nrows) (rows >= rlimit as zeros) of one head into shared memory
// `dst` (row stride ld elements, columns [0, dpad) with columns >= d zero), multiplied by
// `mul` and rounded to T when SCALE. TS: the shared memory element type (T or float).
template <typename T, typename TS, bool SCALE>
__device__ __forceinline__ void load_tile(const T* __restrict__ src, int64_t row_stride, int64_t r0, int nrows,
                                          int64_t rlimit, int d, int dpad, TS* dst, int ld, float mul, bool vec) {
  constexpr int kV = 16 / sizeof(T);
  if (vec && (d % kV) == 0 && (dpad % kV) == 0) {
    const int per_row = dpad / kV;
    for (int idx = threadIdx.x; idx < nrows * per_row; idx += blockDim.x) {
      const int r = idx / per_row, c = (idx - r * per_row) * kV;
      const int64_t gr = r0 + r;
      TS* o = dst + r * ld + c;
      if (gr < rlimit && c < d) {
        const Vec<T, kV> a = *reinterpret_cast<const Vec<T, kV>*>(src + gr * row_stride + c);
#pragma unroll
        for (int t = 0; t < kV; ++t) {
          const float f = SCALE ? round_t<T>(to_f32(a.v[t]) * mul) : to_f32(a.v[t]);
          o[t] = from_f32<TS>(f);
        }
      } else {
#pragma unroll
        for (int t = 0; t < kV; ++t) o[t] = from_f32<TS>(0.0f);
      }
    }
    return;
  }
  for (int idx = threadIdx.x; idx < nrows * dpad; idx += blockDim.x) {
    const int r = idx / dpad, c = idx - r * dpad;
    const int64_t gr = r0 + r;
    float f = 0.0f;
    if (gr < rlimit && c < d) {
      f = to_f32(src[gr * row_stride + c]);
      if (SCALE) f = round_t<T>(f * mul);
    }
    dst[r * ld + c] = from_f32<TS>(f);
  }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Online-softmax step for one row with this lane's two scores s0, s1 (columns lane and
// lane + 32): updates m and l, returns the factor for the old accumulator, sets p0, p1
// (rounded to TP, as multiplied into V).
template <typename TP>
__device__ __forceinline__ float online_step(float s0, float s1, float& m, float& l, float& p0, float& p1) {
  const float m_new = fmaxf(m, warp_max(fmaxf(s0, s1)));
  float alpha;
  if (m_new == -INFINITY) {  // nothing attended yet
    alpha = 1.0f;
    p0 = p1 = 0.0f;
  } else {
    alpha = expf(m - m_new);  // 0 when m is -inf
    p0 = to_f32(from_f32<TP>(expf(s0 - m_new)));
    p1 = to_f32(from_f32<TP>(expf(s1 - m_new)));
  }
  l = l * alpha + warp_sum(p0 + p1);
  m = m_new;
  return alpha;
}

// ---- float32 CUDA-core kernel ----

constexpr int kSimtBQ = 32;      // query rows per block
constexpr int kSimtWarps = 4;    // 8 rows per warp
constexpr int kSimtRowsPerWarp = kSimtBQ / kSimtWarps;

size_t simt_smem_bytes(int Dk, int Dv) {
  const size_t floats = static_cast<size_t>(kSimtBQ) * Dk + static_cast<size_t>(kBK) * (Dk + 1) +
                        static_cast<size_t>(kBK) * Dv + static_cast<size_t>(kSimtBQ) * kBK;
  return floats * sizeof(float);
}

template <typename T>
__global__ void __launch_bounds__(kSimtWarps * 32) attention_simt_kernel(AttnParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int Dk = p.Dk, Dv = p.Dv;
  float* Qs = reinterpret_cast<float*>(smem_raw);  // [BQ][Dk]
  float* Ks = Qs + kSimtBQ * Dk;                   // [BK][Dk + 1]
  float* Vs = Ks + kBK * (Dk + 1);                 // [BK][Dv]
  float* Ps = Vs + kBK * Dv;                       // [BQ][BK]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kSimtBQ;
  const int64_t q_hi = imin64(q0 + kSimtBQ, p.Lq);
  const float ss = round_t<T>(p.sqrt_scale);
  const int64_t group = p.Hq / p.Hkv;
  int64_t kbeg, kend;
  key_range(p, q0, q_hi, &kbeg, &kend);

  for (int64_t bh = blockIdx.y; bh < p.B * p.Hq; bh += gridDim.y) {
    const int64_t b = bh / p.Hq, h = bh - b * p.Hq, hk = h / group;
    const T* qh = static_cast<const T*>(p.q) + b * p.q_bs + h * p.q_hs;
    const T* kh = static_cast<const T*>(p.k) + b * p.k_bs + hk * p.k_hs;
    const T* vh = static_cast<const T*>(p.v) + b * p.v_bs + hk * p.v_hs;
    __syncthreads();  // the previous (b, h) is done with shared memory
    load_tile<T, float, true>(qh, p.q_rs, q0, kSimtBQ, p.Lq, Dk, Dk, Qs, Dk, ss, false);

    float m[kSimtRowsPerWarp], l[kSimtRowsPerWarp], o[kSimtRowsPerWarp][4];
#pragma unroll
    for (int r = 0; r < kSimtRowsPerWarp; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.0f;
#pragma unroll
      for (int t = 0; t < 4; ++t) o[r][t] = 0.0f;
    }
    for (int64_t k0 = kbeg; k0 < kend; k0 += kBK) {
      __syncthreads();  // previous tile consumed
      load_tile<T, float, true>(kh, p.k_rs, k0, kBK, kend, Dk, Dk, Ks, Dk + 1, ss, false);
      load_tile<T, float, false>(vh, p.v_rs, k0, kBK, kend, Dv, Dv, Vs, Dv, 1.0f, false);
      __syncthreads();
      // S = Q K^T for this warp's rows, columns lane and lane + 32.
      float acc[kSimtRowsPerWarp][2];
#pragma unroll
      for (int r = 0; r < kSimtRowsPerWarp; ++r) acc[r][0] = acc[r][1] = 0.0f;
      const float* k0p = Ks + lane * (Dk + 1);
      const float* k1p = Ks + (lane + 32) * (Dk + 1);
      const float* qw = Qs + warp * kSimtRowsPerWarp * Dk;
      for (int e = 0; e < Dk; ++e) {
        const float ka = k0p[e], kb = k1p[e];
#pragma unroll
        for (int r = 0; r < kSimtRowsPerWarp; ++r) {
          const float qv = qw[r * Dk + e];
          acc[r][0] = fmaf(qv, ka, acc[r][0]);
          acc[r][1] = fmaf(qv, kb, acc[r][1]);
        }
      }
#pragma unroll
      for (int r = 0; r < kSimtRowsPerWarp; ++r) {
        const int row = warp * kSimtRowsPerWarp + r;
        const int64_t i = q0 + row;
        const int64_t j0 = k0 + lane, j1 = k0 + lane + 32;
        const float s0 = (i < p.Lq && j0 < kend) ? attn_score<T>(p, acc[r][0], attn_bias<T>(p, b, h, i, j0)) : -INFINITY;
        const float s1 = (i < p.Lq && j1 < kend) ? attn_score<T>(p, acc[r][1], attn_bias<T>(p, b, h, i, j1)) : -INFINITY;
        float p0, p1;
        const float alpha = online_step<float>(s0, s1, m[r], l[r], p0, p1);
        Ps[row * kBK + lane] = p0;
        Ps[row * kBK + lane + 32] = p1;
#pragma unroll
        for (int t = 0; t < 4; ++t) o[r][t] *= alpha;
      }
      __syncwarp();
      const int nk = static_cast<int>(imin64(kBK, kend - k0));
      for (int j = 0; j < nk; ++j) {
        float vv[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const int c = lane + 32 * t;
          vv[t] = c < Dv ? Vs[j * Dv + c] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < kSimtRowsPerWarp; ++r) {
          const float pj = Ps[(warp * kSimtRowsPerWarp + r) * kBK + j];
#pragma unroll
          for (int t = 0; t < 4; ++t) o[r][t] = fmaf(pj, vv[t], o[r][t]);
        }
      }
      __syncwarp();
    }
    T* yh = static_cast<T*>(p.y) + b * p.y_bs + h * p.y_hs;
#pragma unroll
    for (int r = 0; r < kSimtRowsPerWarp; ++r) {
      const int64_t i = q0 + warp * kSimtRowsPerWarp + r;
      if (i >= p.Lq) continue;
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int c = lane + 32 * t;
        if (c < Dv) yh[i * p.y_rs + c] = from_f32<T>(l[r] > 0.0f ? o[r][t] * inv : 0.0f);
      }
    }
  }
}

// ---- float16 / bfloat16 tensor-core kernel ----

constexpr int kWmmaBQ = 64;   // query rows per block
constexpr int kWmmaWarps = 4;  // 16 rows per warp
constexpr int kLdS = kBK + 4;  // float scores
constexpr int kLdP = kBK + 8;  // T probabilities


struct WmmaLayout {
  int ldq = 0, ldv = 0, ldo = 0;
  size_t q = 0, k = 0, v = 0, s = 0, p = 0, o = 0, total = 0;
};

// Shared memory carve-up for element size `es` (2) and head sizes Dk, Dv.
__host__ __device__ inline WmmaLayout wmma_layout(int Dk, int Dv) {
  WmmaLayout w;
  const int dk = (Dk + 15) / 16 * 16, dv = (Dv + 15) / 16 * 16;
  w.ldq = dk + 8;
  w.ldv = dv + 8;
  w.ldo = dv + 4;
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = (off + bytes + 127) / 128 * 128;
    return at;
  };
  w.q = take(static_cast<size_t>(kWmmaBQ) * w.ldq * 2);
  w.k = take(static_cast<size_t>(kBK) * w.ldq * 2);
  w.v = take(static_cast<size_t>(kBK) * w.ldv * 2);
  w.s = take(static_cast<size_t>(kWmmaBQ) * kLdS * 4);
  w.p = take(static_cast<size_t>(kWmmaBQ) * kLdP * 2);
  w.o = take(static_cast<size_t>(kWmmaBQ) * w.ldo * 4);
  w.total = off;
  return w;
}

template <typename T>
__global__ void __launch_bounds__(kWmmaWarps * 32) attention_wmma_kernel(AttnParams p) {
  using namespace nvcuda;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int Dk = p.Dk, Dv = p.Dv;
  const int dk16 = (Dk + 15) / 16 * 16, dv16 = (Dv + 15) / 16 * 16;
  const WmmaLayout lay = wmma_layout(Dk, Dv);
  T* Qs = reinterpret_cast<T*>(smem_raw + lay.q);
  T* Ks = reinterpret_cast<T*>(smem_raw + lay.k);
  T* Vs = reinterpret_cast<T*>(smem_raw + lay.v);
  float* Sf = reinterpret_cast<float*>(smem_raw + lay.s);
  T* Ps = reinterpret_cast<T*>(smem_raw + lay.p);
  float* Of = reinterpret_cast<float*>(smem_raw + lay.o);
  const int ldq = lay.ldq, ldv = lay.ldv, ldo = lay.ldo;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = warp * 16;  // this warp's first row in the block
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kWmmaBQ;
  const int64_t q_hi = imin64(q0 + kWmmaBQ, p.Lq);
  const float ss = round_t<T>(p.sqrt_scale);
  const int64_t group = p.Hq / p.Hkv;
  int64_t kbeg, kend;
  key_range(p, q0, q_hi, &kbeg, &kend);

  for (int64_t bh = blockIdx.y; bh < p.B * p.Hq; bh += gridDim.y) {
    const int64_t b = bh / p.Hq, h = bh - b * p.Hq, hk = h / group;
    const T* qh = static_cast<const T*>(p.q) + b * p.q_bs + h * p.q_hs;
    const T* kh = static_cast<const T*>(p.k) + b * p.k_bs + hk * p.k_hs;
    const T* vh = static_cast<const T*>(p.v) + b * p.v_bs + hk * p.v_hs;
    __syncthreads();  // the previous (b, h) is done with shared memory
    load_tile<T, T, true>(qh, p.q_rs, q0, kWmmaBQ, p.Lq, Dk, dk16, Qs, ldq, ss, p.vec);
    for (int idx = lane; idx < 16 * dv16; idx += 32) {
      const int r = idx / dv16, c = idx - r * dv16;
      Of[(row0 + r) * ldo + c] = 0.0f;
    }
    float m[16], l[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.0f;
    }
    for (int64_t k0 = kbeg; k0 < kend; k0 += kBK) {
      __syncthreads();  // previous tile consumed (and Q loaded)
      load_tile<T, T, true>(kh, p.k_rs, k0, kBK, kend, Dk, dk16, Ks, ldq, ss, p.vec);
      load_tile<T, T, false>(vh, p.v_rs, k0, kBK, kend, Dv, dv16, Vs, ldv, 1.0f, p.vec);
      __syncthreads();
      // S = Q K^T: this warp's 16 rows x 64 keys.
#pragma unroll
      for (int jt = 0; jt < kBK / 16; ++jt) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
        wmma::fill_fragment(c, 0.0f);
        for (int kt = 0; kt < dk16 / 16; ++kt) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bf;
          wmma::load_matrix_sync(a, Qs + row0 * ldq + kt * 16, ldq);
          wmma::load_matrix_sync(bf, Ks + (jt * 16) * ldq + kt * 16, ldq);
          wmma::mma_sync(c, a, bf, c);
        }
        wmma::store_matrix_sync(Sf + row0 * kLdS + jt * 16, c, kLdS, wmma::mem_row_major);
      }
      __syncwarp();
      // Online softmax over the tile, P in T, rescale of the output rows.
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const int row = row0 + r;
        const int64_t i = q0 + row;
        const int64_t j0 = k0 + lane, j1 = k0 + lane + 32;
        const float* srow = Sf + row * kLdS;
        const float s0 = (i < p.Lq && j0 < kend) ? attn_score<T>(p, srow[lane], attn_bias<T>(p, b, h, i, j0)) : -INFINITY;
        const float s1 =
            (i < p.Lq && j1 < kend) ? attn_score<T>(p, srow[lane + 32], attn_bias<T>(p, b, h, i, j1)) : -INFINITY;
        float p0, p1;
        const float alpha = online_step<T>(s0, s1, m[r], l[r], p0, p1);
        Ps[row * kLdP + lane] = from_f32<T>(p0);
        Ps[row * kLdP + lane + 32] = from_f32<T>(p1);
        float* orow = Of + row * ldo;
        for (int c = lane; c < dv16; c += 32) orow[c] *= alpha;
      }
      __syncwarp();
      // O += P V: this warp's 16 rows x dv16 columns.
      for (int ct = 0; ct < dv16 / 16; ++ct) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
        wmma::load_matrix_sync(c, Of + row0 * ldo + ct * 16, ldo, wmma::mem_row_major);
#pragma unroll
        for (int kt = 0; kt < kBK / 16; ++kt) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bf;
          wmma::load_matrix_sync(a, Ps + row0 * kLdP + kt * 16, kLdP);
          wmma::load_matrix_sync(bf, Vs + (kt * 16) * ldv + ct * 16, ldv);
          wmma::mma_sync(c, a, bf, c);
        }
        wmma::store_matrix_sync(Of + row0 * ldo + ct * 16, c, ldo, wmma::mem_row_major);
      }
      __syncwarp();
    }
    __syncwarp();
    T* yh = static_cast<T*>(p.y) + b * p.y_bs + h * p.y_hs;
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int64_t i = q0 + row0 + r;
      if (i >= p.Lq) continue;
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      const float* orow = Of + (row0 + r) * ldo;
      for (int c = lane; c < Dv; c += 32) yh[i * p.y_rs + c] = from_f32<T>(l[r] > 0.0f ? orow[c] * inv : 0.0f);
    }
  }
}

// ---- host side ----

bool softmax_precision_ok(const Attributes& a, DataType dt) {
  if (!a.has("softmax_precision")) return true;
  const int64_t sp = a.get_int("softmax_precision", 1);
  return sp == 1 || sp == 11 || sp == static_cast<int64_t>(dt);
}

Dims contiguous(const Dims& d) {
  Dims s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * d[i];
  return s;
}

class AttentionKernel final : public Kernel {
 public:
  explicit AttentionKernel(const LayerSpec& spec) : dt_(spec.input_dtype(0)), attrs_(attention_attrs(spec)) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out,
                 size_t* workspace) override {
    *workspace = 0;
    AttnParams& p = p_;
    KILN_RETURN_IF_ERROR(attention_setup("kiln_cuda_attention", attrs_, in, out, &p));
    empty_ = p.B == 0 || p.Hq == 0 || p.Lq == 0 || p.Dv == 0;
    use_wmma_ = dt_ != DataType::kFloat32;
    if (use_wmma_) {
      smem_ = wmma_layout(p.Dk, p.Dv).total;
      bq_ = kWmmaBQ;
    } else {
      smem_ = simt_smem_bytes(p.Dk, p.Dv);
      bq_ = kSimtBQ;
    }
    int dev = 0, optin = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&dev));
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem_ > static_cast<size_t>(optin)) return unsupported("kiln_cuda_attention: shared memory ", smem_);
    return KILN_CUDA_FLOAT_DISPATCH(dt_, {
      if constexpr (std::is_same_v<T, float>) {
        KILN_CUDA_CHECK(cudaFuncSetAttribute(attention_simt_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem_)));
      } else {
        KILN_CUDA_CHECK(cudaFuncSetAttribute(attention_wmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem_)));
      }
      return Status::ok();
    });
  }

  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    if (empty_) return Status::ok();
    AttnParams p = p_;
    KILN_RETURN_IF_ERROR(attention_bind(in, out, dt_, &p));
    const int64_t qtiles = (p.Lq + bq_ - 1) / bq_;
    if (qtiles > 0x7fffffffLL) return unsupported("kiln_cuda_attention: sequence too long");
    const dim3 grid(static_cast<unsigned>(qtiles), static_cast<unsigned>(imin64(p.B * p.Hq, 65535)));
    return KILN_CUDA_FLOAT_DISPATCH(dt_, {
      if constexpr (std::is_same_v<T, float>) {
        attention_simt_kernel<T><<<grid, kSimtWarps * 32, smem_, stream>>>(p);
      } else {
        attention_wmma_kernel<T><<<grid, kWmmaWarps * 32, smem_, stream>>>(p);
      }
      KILN_CUDA_LAUNCH_CHECK("attention kernel");
      return Status::ok();
    });
  }

 private:
  DataType dt_;
  AttnAttrs attrs_;
  AttnParams p_;
  bool empty_ = true, use_wmma_ = false;
  size_t smem_ = 0;
  int bq_ = kSimtBQ;
};

Result<std::unique_ptr<Kernel>> attention_create(const LayerSpec& spec) {
  if (!attention_supports(spec)) return unsupported("kiln_cuda_attention: unsupported layer");
  return std::unique_ptr<Kernel>(new AttentionKernel(spec));
}

}  // namespace

AttnAttrs attention_attrs(const LayerSpec& spec) {
  const Attributes& a = spec.attributes();
  AttnAttrs r;
  r.has_qh = a.has("q_num_heads");
  r.has_kvh = a.has("kv_num_heads");
  r.qh = a.get_int("q_num_heads", 0);
  r.kvh = a.get_int("kv_num_heads", 0);
  r.causal = static_cast<int>(a.get_int("is_causal", 0));
  r.has_scale = a.has("scale");
  r.scale = a.get_float("scale", 1.0f);
  r.softcap = a.get_float("softcap", 0.0f);
  r.left = a.get_int("left_window_size", -1);
  r.right = a.get_int("right_window_size", -1);
  return r;
}

bool attention_supports(const LayerSpec& spec) {
  if (spec.op != Op::Attention) return false;
  const size_t nin = spec.input_dtypes.size();
  if (nin < 3 || nin > 7) return false;
  const DataType dt = spec.input_dtype(0);
  if (!is_cuda_float(dt) || spec.input_dtype(1) != dt || spec.input_dtype(2) != dt) return false;
  const DataType mdt = spec.input_dtype(3);
  if (mdt != DataType::kUndefined && mdt != DataType::kBool && !is_cuda_float(mdt)) return false;
  for (size_t i = 4; i < nin; ++i) {
    if (spec.has_input(i)) return false;  // past_key, past_value, nonpad_kv_seqlen
  }
  if (spec.output_dtypes.empty() || spec.output_dtypes.size() > 4 || spec.output_dtype(0) != dt) return false;
  for (size_t i = 1; i < spec.output_dtypes.size(); ++i) {
    if (spec.wants_output(i)) return false;  // present_key/value, qk_matmul_output
  }
  const Attributes& a = spec.attributes();
  const int64_t causal = a.get_int("is_causal", 0), mode = a.get_int("qk_matmul_output_mode", 0);
  if ((causal != 0 && causal != 1) || mode < 0 || mode > 3) return false;
  const float softcap = a.get_float("softcap", 0.0f);
  if (!std::isfinite(softcap) || softcap < 0) return false;
  if (a.has("scale")) {
    const float s = a.get_float("scale", 1.0f);
    if (!std::isfinite(s) || s < 0) return false;
  }
  if (a.get_int("left_window_size", -1) < -1 || a.get_int("right_window_size", -1) < -1) return false;
  return softmax_precision_ok(a, dt);
}

Status attention_setup(const char* tactic, const AttnAttrs& a, const std::vector<TensorShape>& in,
                       const std::vector<TensorShape>& out, AttnParams* pp) {
  if (in.size() < 3 || out.empty()) return invalid_argument("Attention: missing inputs");
  const Dims& q = in[0].dims;
  const Dims& k = in[1].dims;
  const Dims& v = in[2].dims;
  if (!(q.size() == 3 || q.size() == 4) || k.size() != q.size() || v.size() != q.size()) {
    return invalid_argument("Attention: Q, K, V must all have rank 3 or 4");
  }
  AttnParams& p = *pp;
  p = AttnParams{};
  const bool is3d = q.size() == 3;
  if (is3d) {
    if (!a.has_qh || !a.has_kvh || a.qh <= 0 || a.kvh <= 0) {
      return invalid_argument("Attention: 3D inputs need positive q_num_heads and kv_num_heads");
    }
    p.B = q[0];
    p.Hq = a.qh;
    p.Hkv = a.kvh;
    p.Lq = q[1];
    p.L = k[1];
    if (q[2] % p.Hq != 0 || k[2] % p.Hkv != 0 || v[2] % p.Hkv != 0) {
      return invalid_argument("Attention: hidden sizes not divisible by the head counts");
    }
    const int64_t dk = q[2] / p.Hq;
    if (k[2] / p.Hkv != dk) return invalid_argument("Attention: Q and K head sizes differ");
    if (k[0] != p.B || v[0] != p.B || v[1] != p.L) return invalid_argument("Attention: K/V shapes disagree with Q");
    p.Dk = static_cast<int>(imin64(dk, kMaxHead + 1));
    p.Dv = static_cast<int>(imin64(v[2] / p.Hkv, kMaxHead + 1));
    if (dk > kMaxHead || v[2] / p.Hkv > kMaxHead) return unsupported(tactic, ": head size over 128");
    p.q_bs = p.Lq * p.Hq * dk;
    p.q_hs = dk;
    p.q_rs = p.Hq * dk;
    p.k_bs = p.L * p.Hkv * dk;
    p.k_hs = dk;
    p.k_rs = p.Hkv * dk;
    p.v_bs = p.L * p.Hkv * p.Dv;
    p.v_hs = p.Dv;
    p.v_rs = p.Hkv * p.Dv;
    p.y_bs = p.Lq * p.Hq * p.Dv;
    p.y_hs = p.Dv;
    p.y_rs = p.Hq * p.Dv;
  } else {
    p.B = q[0];
    p.Hq = q[1];
    p.Lq = q[2];
    p.Hkv = k[1];
    p.L = k[2];
    if (k[0] != p.B || v[0] != p.B || k[3] != q[3] || v[1] != p.Hkv || v[2] != p.L) {
      return invalid_argument("Attention: K/V shapes disagree with Q");
    }
    if (a.has_qh && a.qh != p.Hq) return invalid_argument("Attention: q_num_heads disagrees with Q");
    if (a.has_kvh && a.kvh != p.Hkv) return invalid_argument("Attention: kv_num_heads disagrees with K");
    if (q[3] > kMaxHead || v[3] > kMaxHead) return unsupported(tactic, ": head size over 128");
    p.Dk = static_cast<int>(q[3]);
    p.Dv = static_cast<int>(v[3]);
    p.q_bs = p.Hq * p.Lq * p.Dk;
    p.q_hs = p.Lq * p.Dk;
    p.q_rs = p.Dk;
    p.k_bs = p.Hkv * p.L * p.Dk;
    p.k_hs = p.L * p.Dk;
    p.k_rs = p.Dk;
    p.v_bs = p.Hkv * p.L * p.Dv;
    p.v_hs = p.L * p.Dv;
    p.v_rs = p.Dv;
    p.y_bs = p.Hq * p.Lq * p.Dv;
    p.y_hs = p.Lq * p.Dv;
    p.y_rs = p.Dv;
  }
  if (p.Hkv <= 0 || p.Hq % p.Hkv != 0) return invalid_argument("Attention: q heads not a multiple of kv heads");
  if (p.Dk <= 0) return unsupported(tactic, ": empty head size");
  const Dims ydims = is3d ? Dims{p.B, p.Lq, p.Hq * p.Dv} : Dims{p.B, p.Hq, p.Lq, p.Dv};
  if (out[0].dims != ydims) return invalid_argument("Attention: Y shape ", dims_str(out[0].dims), " expected ", dims_str(ydims));

  // Mask, right-aligned against [B, Hq, Lq, L].
  if (in.size() > 3 && in[3].dtype != DataType::kUndefined) {
    const Dims& md = in[3].dims;
    if (md.empty() || md.size() > 4) return invalid_argument("Attention: attn_mask must have rank 1 to 4");
    switch (in[3].dtype) {
      case DataType::kBool: p.mask_kind = kMaskBool; break;
      case DataType::kFloat32: p.mask_kind = kMaskF32; break;
      case DataType::kFloat16: p.mask_kind = kMaskF16; break;
      case DataType::kBFloat16: p.mask_kind = kMaskBF16; break;
      default: return unsupported(tactic, ": attn_mask dtype");
    }
    const int64_t target[4] = {p.B, p.Hq, p.Lq, p.L};
    const Dims st = contiguous(md);
    const int r = static_cast<int>(md.size());
    for (int d = 0; d < r; ++d) {
      const int axis = 4 - r + d;
      const int64_t n = md[static_cast<size_t>(d)];
      if (axis == 3) {
        if (n > p.L) return invalid_argument("Attention: attn_mask has more keys than the sequence");
        p.mask_last = n;
        p.ms[3] = st[static_cast<size_t>(d)];
      } else {
        if (n != 1 && n != target[axis]) return invalid_argument("Attention: attn_mask does not broadcast");
        p.ms[axis] = n == 1 ? 0 : st[static_cast<size_t>(d)];
      }
    }
  }
  const double scale = a.has_scale ? static_cast<double>(a.scale) : 1.0 / std::sqrt(static_cast<double>(p.Dk));
  p.sqrt_scale = static_cast<float>(std::sqrt(scale));
  p.softcap = a.softcap;
  p.causal = a.causal;
  p.left = a.left;
  p.right = a.right;
  if (p.B * p.Hq > (int64_t{1} << 40)) return unsupported(tactic, ": too many heads");
  return Status::ok();
}

Status attention_bind(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, DataType dt,
                      AttnParams* pp) {
  AttnParams& p = *pp;
  p.q = in[0]->raw();
  p.k = in[1]->raw();
  p.v = in[2]->raw();
  p.mask = in.size() > 3 && in[3] ? in[3]->raw() : nullptr;
  if (p.mask_kind != kMaskNone && !p.mask) return invalid_argument("Attention: attn_mask missing");
  p.y = out[0]->raw();
  // 16-byte accesses: every row start aligned (element strides multiples of 8 halves).
  auto al = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; };
  const bool half = dt != DataType::kFloat32;
  p.vec = half && al(p.q) && al(p.k) && al(p.v) && p.q_bs % 8 == 0 && p.q_hs % 8 == 0 && p.q_rs % 8 == 0 &&
          p.k_bs % 8 == 0 && p.k_hs % 8 == 0 && p.k_rs % 8 == 0 && p.v_bs % 8 == 0 && p.v_hs % 8 == 0 &&
          p.v_rs % 8 == 0;
  p.y_vec = half && al(p.y) && p.y_bs % 8 == 0 && p.y_hs % 8 == 0 && p.y_rs % 8 == 0;
  return Status::ok();
}

// The WMMA kernel as a candidate: not for bfloat16 layers the flash kernel takes, since it
// rounds the probabilities to bfloat16 before P V (2-ulp errors in the conformance suite)
// where the flash kernel keeps them to ~16 bits. Asked for by name, it still runs them.
bool wmma_candidate(const LayerSpec& spec) {
  if (!attention_supports(spec)) return false;
  return spec.input_dtype(0) != DataType::kBFloat16 || !flash_attention_supports(spec);
}

}  // namespace attn

void add_attention_tactics(std::vector<Tactic>& out) {
  // The flash kernel first: without tactic timing it is the one used for float16/bfloat16.
  out.push_back({"kiln_cuda_flash", Op::Attention, attn::flash_attention_supports, attn::flash_attention_create});
  out.push_back({"kiln_cuda_attention", Op::Attention, attn::wmma_candidate, attn::attention_create});
}

}  // namespace kiln::cuda
