// kiln's FlashAttention-2 style CUDA Attention kernel for float16/bfloat16 (tactic
// "kiln_cuda_flash"). Same function, semantics and per-op rounding as "kiln_cuda_attention"
// (attention.cu; shared helpers in attention_common.cuh), organised for speed:
//
// - Each warp owns 16 query rows; a block has 1, 2 or 4 warps (16/32/64 rows), chosen at
//   prepare so that the grid still gives about two blocks per SM.
// - Q is loaded once per (batch, head) into registers as mma A fragments (ldmatrix x4),
//   multiplied by sqrt(scale) there (a packed 16-bit multiply: the exact product rounded
//   once to T, as the reference's round(q * sqrt_scale)).
// - K and V tiles of 64 keys go to shared memory with 16-byte cp.async (zero-filled past
//   the keys and head size), double-buffered: the next tile loads while this one computes.
//   Rows are padded by 8 elements so that ldmatrix reads are free of bank conflicts.
// - S = Q K^T and O += P V with mma.sync m16n8k16 (float32 accumulators in registers);
//   K fragments come from ldmatrix x4 (and are scaled like Q), V fragments from
//   ldmatrix x4 .trans.
// - The online softmax runs on the accumulator fragments: a lane holds 2 rows x 16 keys of
//   the tile; each row's max is reduced over the 4 lanes sharing it (2 shuffles). P is
//   rounded to T and repacked in registers as the A operand of P V, O is rescaled in
//   registers, and the row sums are reduced across lanes once, at the end.
// - Head sizes are a template parameter: max(Dk, Dv) padded to 16, 32, 64, 96 or 128
//   (padding columns are zero; 16-column chunks beyond Dk or Dv are skipped).
// - Key tiles (and 16-key chunks) that causal/window/mask-length limits exclude for all of
//   a warp's rows are skipped; rows whose keys are all masked give zeros.
// - The output goes through the warp's (then free) Q rows in shared memory to 16-byte
//   stores.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "backends/cuda/attention_common.cuh"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_kernel.h"

namespace kiln::cuda::attn {

namespace {

constexpr int kFlashBK = 64;       // keys per tile
constexpr int kFlashMaxWarps = 4;  // 16 query rows each
constexpr float kLog2e = 1.4426950408889634f;

template <typename T>
struct Pair;
template <>
struct Pair<__half> {
  using type = __half2;
};
template <>
struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
};

template <typename P>
__device__ __forceinline__ uint32_t as_u32(P v) {
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
}
template <typename P>
__device__ __forceinline__ P from_u32(uint32_t u) {
  P v;
  memcpy(&v, &u, sizeof(u));
  return v;
}

// Two floats rounded to T and packed (a in the low half: the lower column of a fragment).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  if constexpr (std::is_same_v<T, __half>) {
    return as_u32(__floats2half2_rn(a, b));
  } else {
    return as_u32(__floats2bfloat162_rn(a, b));
  }
}

// The probabilities P of P V. float16 P (11 significant bits) is rounded to T once, and the
// row sums add the rounded values, so Y = sum(P V) / sum(P) uses the same P on both sides.
// bfloat16 has only 8 significant bits: rounding P to it costs up to 2^-9 relative per
// probability, which showed as 2-ulp bfloat16 errors in the ONNX conformance cases; there P
// stays float32 and P V runs as two bfloat16 products, hi = bf16(P) and lo = bf16(P - hi).
template <typename T>
constexpr bool kSplitP = std::is_same_v<T, __nv_bfloat16>;
template <typename T>
__device__ __forceinline__ float round_p(float x) {
  if constexpr (kSplitP<T>) {
    return x;
  } else {
    return round_t<T>(x);
  }
}
// The low bfloat16 parts of two probabilities (what their bfloat16 rounding leaves out).
template <typename T>
__device__ __forceinline__ uint32_t pack_lo(float a, float b) {
  return pack2<T>(a - round_t<T>(a), b - round_t<T>(b));
}

// x (two T) times s2 (two T), each product rounded once to T.
template <typename T>
__device__ __forceinline__ uint32_t mul2(uint32_t x, uint32_t s2) {
  using P = typename Pair<T>::type;
  return as_u32(__hmul2_rn(from_u32<P>(x), from_u32<P>(s2)));
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, or 16 zero bytes when !valid.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices; lanes 8m..8m+7 give the row addresses of matrix m, register m
// receives matrix m (lane l: row l/4, columns 2(l%4), 2(l%4)+1; transposed with .trans).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// c (16x8 float32) += a (16x16, row) * b (16x8, col).
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// e^x (x <= 0 or -inf here).
__device__ __forceinline__ float exp_f(float x) { return exp2f(x * kLog2e); }

// Rows [r0, r0 + nrows) of one head (row stride rs; rows >= rlimit and columns >= d as
// zeros) into shared memory `dst`, D columns, row stride D + 8. vec: 16-byte cp.async (the
// caller checked alignment and d % 8 == 0), else synchronous element copies.
template <typename T, int D>
__device__ __forceinline__ void load_rows(const T* __restrict__ src, int64_t rs, int64_t r0, int nrows,
                                          int64_t rlimit, int d, T* dst, bool vec) {
  constexpr int kLd = D + 8;
  if (vec) {
    constexpr int kChunks = D / 8;
    for (int idx = threadIdx.x; idx < nrows * kChunks; idx += blockDim.x) {
      const int r = idx / kChunks, c = (idx - r * kChunks) * 8;
      const int64_t gr = r0 + r;
      const bool ok = gr < rlimit && c < d;
      cp_async16(dst + r * kLd + c, ok ? src + gr * rs + c : src, ok);
    }
  } else {
    for (int idx = threadIdx.x; idx < nrows * D; idx += blockDim.x) {
      const int r = idx / D, c = idx - r * D;
      const int64_t gr = r0 + r;
      dst[r * kLd + c] = gr < rlimit && c < d ? src[gr * rs + c] : from_f32<T>(0.0f);
    }
  }
}

size_t flash_smem_bytes(int D, int warps, int stages) {
  return static_cast<size_t>(16 * warps + 2 * stages * kFlashBK) * static_cast<size_t>(D + 8) * 2;
}

// One block: 16 * (blockDim.x / 32) query rows of each (batch, head) it visits.
// stages: 2 (double-buffered K/V tiles) or 1.
template <typename T, int D>
__global__ void __launch_bounds__(kFlashMaxWarps * 32) attention_flash_kernel(AttnParams p, int stages) {
  constexpr int kLd = D + 8;
  constexpr int kBK = kFlashBK;
  constexpr int kKC = D / 16;  // 16-column chunks of the head
  constexpr int kNO = D / 8;   // 8-column output tiles
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int nw = static_cast<int>(blockDim.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane >> 2, tq = lane & 3;  // fragment row group and column pair
  T* Qs = reinterpret_cast<T*>(smem_raw);  // [16 nw][kLd]
  T* Ks = Qs + 16 * nw * kLd;              // [stages][kBK][kLd]
  T* Vs = Ks + stages * kBK * kLd;         // [stages][kBK][kLd]

  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * 16 * nw;
  const int64_t q_hi = imin64(q0 + 16 * nw, p.Lq);
  int64_t kbeg, kend;
  key_range(p, q0, q_hi, &kbeg, &kend);
  const int64_t ntiles = kend > kbeg ? (kend - kbeg + kBK - 1) / kBK : 0;
  // This warp's rows and the keys they can attend to.
  const int64_t wq0 = q0 + warp * 16;
  const bool wactive = wq0 < p.Lq;
  int64_t wkbeg = 0, wkend = 0;
  if (wactive) key_range(p, wq0, imin64(wq0 + 16, p.Lq), &wkbeg, &wkend);
  const int64_t i0 = wq0 + g, i1 = i0 + 8;  // the two rows of this lane's fragments
  const bool row0_ok = i0 < p.Lq, row1_ok = i1 < p.Lq;
  const bool plain = p.mask_kind == kMaskNone && !p.causal && p.left < 0 && p.right < 0;
  const bool row_bcast = p.ms[2] == 0;  // one mask row for all queries
  const bool vec = p.vec && p.Dk % 8 == 0 && p.Dv % 8 == 0;
  const uint32_t ss2 = pack2<T>(p.sqrt_scale, p.sqrt_scale);  // sqrt(scale) rounded to T
  const int64_t group = p.Hq / p.Hkv;

  for (int64_t bh = blockIdx.y; bh < p.B * p.Hq; bh += gridDim.y) {
    const int64_t b = bh / p.Hq, h = bh - b * p.Hq, hk = h / group;
    const T* qh = static_cast<const T*>(p.q) + b * p.q_bs + h * p.q_hs;
    const T* kh = static_cast<const T*>(p.k) + b * p.k_bs + hk * p.k_hs;
    const T* vh = static_cast<const T*>(p.v) + b * p.v_bs + hk * p.v_hs;
    const int64_t moff0 = b * p.ms[0] + h * p.ms[1] + i0 * p.ms[2];
    const int64_t moff1 = moff0 + 8 * p.ms[2];
    __syncthreads();  // the previous (b, h) is done with shared memory
    if (ntiles > 0) {
      load_rows<T, D>(qh, p.q_rs, q0, 16 * nw, p.Lq, p.Dk, Qs, vec);
      cp_async_commit();
      load_rows<T, D>(kh, p.k_rs, kbeg, kBK, kend, p.Dk, Ks, vec);
      load_rows<T, D>(vh, p.v_rs, kbeg, kBK, kend, p.Dv, Vs, vec);
      cp_async_commit();
    }

    float o[kNO][4];
#pragma unroll
    for (int n = 0; n < kNO; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g, g + 8 (l: this lane's part)
    uint32_t qf[kKC][4];

    for (int64_t t = 0; t < ntiles; ++t) {
      const int64_t k0 = kbeg + t * kBK;
      const int st = stages == 2 ? static_cast<int>(t & 1) : 0;
      if (stages == 2 && t + 1 < ntiles) {
        T* kn = Ks + (st ^ 1) * kBK * kLd;
        T* vn = Vs + (st ^ 1) * kBK * kLd;
        load_rows<T, D>(kh, p.k_rs, k0 + kBK, kBK, kend, p.Dk, kn, vec);
        load_rows<T, D>(vh, p.v_rs, k0 + kBK, kBK, kend, p.Dv, vn, vec);
        cp_async_commit();
        cp_async_wait<1>();  // all but the tile just issued
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();  // tile t (and Q) visible to every warp

      if (wactive) {
        if (t == 0) {
          // Q fragments: matrices (rows 0-7 | 8-15) x (columns 0-7 | 8-15) of each chunk.
          const T* qw = Qs + (warp * 16 + (lane & 15)) * kLd + (lane >> 4) * 8;
#pragma unroll
          for (int kc = 0; kc < kKC; ++kc) {
            ldmatrix_x4(qf[kc], qw + kc * 16);
#pragma unroll
            for (int r = 0; r < 4; ++r) qf[kc][r] = mul2<T>(qf[kc][r], ss2);
          }
        }
        if (k0 < wkend && k0 + kBK > wkbeg) {
          const T* kt = Ks + st * kBK * kLd;
          const T* vt = Vs + st * kBK * kLd;
          // S = Q K^T: 16 rows x 64 keys, n-tile nt holds keys 8 nt .. 8 nt + 7.
          float s[8][4];
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
          // ldmatrix x4 on K rows: (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 0-7),
          // (keys 8-15, d 8-15) of a 16-key, 16-column block: b0/b1 of two n-tiles.
          const T* kw = kt + ((lane & 7) + ((lane >> 4) << 3)) * kLd + ((lane >> 3) & 1) * 8;
#pragma unroll
          for (int np = 0; np < 4; ++np) {
            if (k0 + 16 * np >= wkend || k0 + 16 * np + 16 <= wkbeg) continue;
#pragma unroll
            for (int kc = 0; kc < kKC; ++kc) {
              if (kc * 16 >= p.Dk) continue;
              uint32_t kb[4];
              ldmatrix_x4(kb, kw + np * 16 * kLd + kc * 16);
#pragma unroll
              for (int r = 0; r < 4; ++r) kb[r] = mul2<T>(kb[r], ss2);
              mma16816<T>(s[2 * np], qf[kc], kb[0], kb[1]);
              mma16816<T>(s[2 * np + 1], qf[kc], kb[2], kb[3]);
            }
          }
          // Scores: s[nt][c] is (row i0, key k0 + col), s[nt][2 + c] is (row i1, same key), with
          // col = 8 nt + 2 tq + c.
          const int ncols = static_cast<int>(imin64(kend - k0, kBK));  // keys of the tile before kend
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int col = 8 * nt + 2 * tq + c;
              const bool ok0 = row0_ok && col < ncols, ok1 = row1_ok && col < ncols;
              const int64_t j = k0 + col;
              if (plain) {
                s[nt][c] = ok0 ? attn_capped<T>(p, s[nt][c]) : -INFINITY;
                s[nt][2 + c] = ok1 ? attn_capped<T>(p, s[nt][2 + c]) : -INFINITY;
              } else {
                float mv0 = 0.0f, mv1 = 0.0f;
                if (p.mask_kind != kMaskNone) {
                  if (ok0) mv0 = mask_value(p, moff0, j);
                  if (row_bcast) {
                    mv1 = mv0;
                  } else if (ok1) {
                    mv1 = mask_value(p, moff1, j);
                  }
                }
                s[nt][c] = ok0 ? attn_score<T>(p, s[nt][c], finish_bias<T>(p, mv0, i0, j)) : -INFINITY;
                s[nt][2 + c] = ok1 ? attn_score<T>(p, s[nt][2 + c], finish_bias<T>(p, mv1, i1, j)) : -INFINITY;
              }
            }
          }
          // Online softmax: row maxima over the 4 lanes of a row group.
          float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
          }
#pragma unroll
          for (int off = 1; off < 4; off <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
          }
          const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
          // While a row has seen only -inf, subtract 0: its probabilities and factor are 0.
          const float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
          const float a0 = exp_f(m0 - mu0), a1 = exp_f(m1 - mu1);
          m0 = mn0;
          m1 = mn1;
          float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            s[nt][0] = round_p<T>(exp_f(s[nt][0] - mu0));
            s[nt][1] = round_p<T>(exp_f(s[nt][1] - mu0));
            s[nt][2] = round_p<T>(exp_f(s[nt][2] - mu1));
            s[nt][3] = round_p<T>(exp_f(s[nt][3] - mu1));
            sum0 += s[nt][0] + s[nt][1];
            sum1 += s[nt][2] + s[nt][3];
          }
          l0 = l0 * a0 + sum0;
          l1 = l1 * a1 + sum1;
#pragma unroll
          for (int n = 0; n < kNO; ++n) {
            o[n][0] *= a0;
            o[n][1] *= a0;
            o[n][2] *= a1;
            o[n][3] *= a1;
          }
          // O += P V. P's A fragment for keys 16 kc .. 16 kc + 15 is n-tiles 2 kc and 2 kc + 1
          // of S; ldmatrix x4 .trans on V rows: (keys 0-7, cols 0-7), (keys 8-15, cols 0-7),
          // (keys 0-7, cols 8-15), (keys 8-15, cols 8-15): b0/b1 of two output n-tiles.
          const T* vw = vt + ((lane & 7) + (((lane >> 3) & 1) << 3)) * kLd + (lane >> 4) * 8;
#pragma unroll
          for (int kc = 0; kc < 4; ++kc) {
            if (k0 + 16 * kc >= wkend || k0 + 16 * kc + 16 <= wkbeg) continue;
            const uint32_t pa[4] = {pack2<T>(s[2 * kc][0], s[2 * kc][1]), pack2<T>(s[2 * kc][2], s[2 * kc][3]),
                                    pack2<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                    pack2<T>(s[2 * kc + 1][2], s[2 * kc + 1][3])};
            // bfloat16: P = hi + lo, both bfloat16, so P V keeps ~16 significant bits of P.
            uint32_t pl[4] = {0, 0, 0, 0};
            if constexpr (kSplitP<T>) {
              pl[0] = pack_lo<T>(s[2 * kc][0], s[2 * kc][1]);
              pl[1] = pack_lo<T>(s[2 * kc][2], s[2 * kc][3]);
              pl[2] = pack_lo<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]);
              pl[3] = pack_lo<T>(s[2 * kc + 1][2], s[2 * kc + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < kKC; ++dp) {
              if (dp * 16 >= p.Dv) continue;
              uint32_t vb[4];
              ldmatrix_x4_trans(vb, vw + kc * 16 * kLd + dp * 16);
              mma16816<T>(o[2 * dp], pa, vb[0], vb[1]);
              mma16816<T>(o[2 * dp + 1], pa, vb[2], vb[3]);
              if constexpr (kSplitP<T>) {
                mma16816<T>(o[2 * dp], pl, vb[0], vb[1]);
                mma16816<T>(o[2 * dp + 1], pl, vb[2], vb[3]);
              }
            }
          }
        }
      }
      __syncthreads();  // every warp is done with this tile's buffers
      if (stages == 1 && t + 1 < ntiles) {
        load_rows<T, D>(kh, p.k_rs, k0 + kBK, kBK, kend, p.Dk, Ks, vec);
        load_rows<T, D>(vh, p.v_rs, k0 + kBK, kBK, kend, p.Dv, Vs, vec);
        cp_async_commit();
      }
    }

    if (wactive) {
      // Y = O / l through this warp's Q rows (no longer needed; every copy into them is done).
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
      }
      const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
      T* os = Qs + warp * 16 * kLd;
#pragma unroll
      for (int n = 0; n < kNO; ++n) {
        const int c = 8 * n + 2 * tq;
        *reinterpret_cast<uint32_t*>(os + g * kLd + c) =
            pack2<T>(l0 > 0.0f ? o[n][0] * inv0 : 0.0f, l0 > 0.0f ? o[n][1] * inv0 : 0.0f);
        *reinterpret_cast<uint32_t*>(os + (g + 8) * kLd + c) =
            pack2<T>(l1 > 0.0f ? o[n][2] * inv1 : 0.0f, l1 > 0.0f ? o[n][3] * inv1 : 0.0f);
      }
      __syncwarp();
      T* yh = static_cast<T*>(p.y) + b * p.y_bs + h * p.y_hs;
      if (p.y_vec && p.Dv % 8 == 0) {
        const int chunks = p.Dv / 8;
        for (int idx = lane; idx < 16 * chunks; idx += 32) {
          const int r = idx / chunks, c = (idx - r * chunks) * 8;
          const int64_t i = wq0 + r;
          if (i < p.Lq) *reinterpret_cast<uint4*>(yh + i * p.y_rs + c) = *reinterpret_cast<const uint4*>(os + r * kLd + c);
        }
      } else {
        for (int idx = lane; idx < 16 * p.Dv; idx += 32) {
          const int r = idx / p.Dv, c = idx - r * p.Dv;
          const int64_t i = wq0 + r;
          if (i < p.Lq) yh[i * p.y_rs + c] = os[r * kLd + c];
        }
      }
    }
  }
}

using FlashFn = void (*)(AttnParams, int);

template <typename T>
FlashFn flash_kernel_for(int D) {
  switch (D) {
    case 16: return attention_flash_kernel<T, 16>;
    case 32: return attention_flash_kernel<T, 32>;
    case 64: return attention_flash_kernel<T, 64>;
    case 96: return attention_flash_kernel<T, 96>;
    default: return attention_flash_kernel<T, 128>;
  }
}

class FlashAttentionKernel final : public Kernel {
 public:
  explicit FlashAttentionKernel(const LayerSpec& spec)
      : dt_(spec.input_dtype(0)), attrs_(attention_attrs(spec)), sm_count_(spec.env ? spec.env->sm_count : 0) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out,
                 size_t* workspace) override {
    *workspace = 0;
    AttnParams& p = p_;
    KILN_RETURN_IF_ERROR(attention_setup("kiln_cuda_flash", attrs_, in, out, &p));
    empty_ = p.B == 0 || p.Hq == 0 || p.Lq == 0 || p.Dv == 0;
    const int dmax = std::max(p.Dk, p.Dv);
    D_ = dmax <= 16 ? 16 : dmax <= 32 ? 32 : dmax <= 64 ? 64 : dmax <= 96 ? 96 : 128;
    fn_ = dt_ == DataType::kFloat16 ? flash_kernel_for<__half>(D_) : flash_kernel_for<__nv_bfloat16>(D_);

    int dev = 0, optin = 0, major = 0, sms = sm_count_;
    KILN_CUDA_CHECK(cudaGetDevice(&dev));
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 8) return unsupported("kiln_cuda_flash: needs compute capability 8.0 or newer");
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (sms <= 0) KILN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    // The most rows per block that still give about two blocks per SM.
    const int64_t heads = p.B * p.Hq;
    warps_ = 1;
    for (int w = kFlashMaxWarps; w > 1; w /= 2) {
      if ((p.Lq + 16 * w - 1) / (16 * w) * heads >= 2 * static_cast<int64_t>(sms)) {
        warps_ = w;
        break;
      }
    }
    stages_ = 2;
    if (flash_smem_bytes(D_, warps_, stages_) > static_cast<size_t>(optin)) stages_ = 1;
    while (flash_smem_bytes(D_, warps_, stages_) > static_cast<size_t>(optin) && warps_ > 1) warps_ /= 2;
    smem_ = flash_smem_bytes(D_, warps_, stages_);
    if (smem_ > static_cast<size_t>(optin)) return unsupported("kiln_cuda_flash: shared memory ", smem_);
    KILN_CUDA_CHECK(cudaFuncSetAttribute(fn_, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_)));
    return Status::ok();
  }

  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    if (empty_) return Status::ok();
    AttnParams p = p_;
    KILN_RETURN_IF_ERROR(attention_bind(in, out, dt_, &p));
    const int64_t rows = 16 * warps_;
    const int64_t qtiles = (p.Lq + rows - 1) / rows;
    if (qtiles > 0x7fffffffLL) return unsupported("kiln_cuda_flash: sequence too long");
    const dim3 grid(static_cast<unsigned>(qtiles), static_cast<unsigned>(imin64(p.B * p.Hq, 65535)));
    fn_<<<grid, 32 * warps_, smem_, stream>>>(p, stages_);
    KILN_CUDA_LAUNCH_CHECK("flash attention kernel");
    return Status::ok();
  }

 private:
  DataType dt_;
  AttnAttrs attrs_;
  int sm_count_ = 0;
  AttnParams p_;
  bool empty_ = true;
  int D_ = 64, warps_ = 1, stages_ = 2;
  size_t smem_ = 0;
  FlashFn fn_ = nullptr;
};

}  // namespace

bool flash_attention_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  if (dt != DataType::kFloat16 && dt != DataType::kBFloat16) return false;
  if (spec.env && spec.env->sm > 0 && spec.env->sm < 80) return false;  // cp.async, bf16 mma
  return attention_supports(spec);
}

Result<std::unique_ptr<Kernel>> flash_attention_create(const LayerSpec& spec) {
  if (!flash_attention_supports(spec)) return unsupported("kiln_cuda_flash: unsupported layer");
  return std::unique_ptr<Kernel>(new FlashAttentionKernel(spec));
}

}  // namespace kiln::cuda::attn
