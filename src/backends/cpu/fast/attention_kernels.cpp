// kiln's fast Attention kernel (float32): softmax(Q K^T * scale + mask) V per (batch,
// head), for 3-D [B, S, H*D] and 4-D [B, H, S, D] inputs, grouped-query heads, an additive
// float or boolean mask, causal and sliding-window masking. No KV cache, softcap or
// qk_matmul output: those layers stay on the reference kernel.
//
// Work items are (batch, head, block of query rows), spread over threads. Each builds the
// head's K^T (pre-scaled) in its scratch, then for every 4 query rows computes the scores
// with a register-blocked 4x16 tile, applies masks and softmax in place, and multiplies
// by V straight into Y. Only the key range a row can attend to is computed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/fast/fast_common.h"

namespace kiln::fast {

namespace {

using namespace detail;

constexpr int kMR = 4;             // query rows per tile
constexpr int64_t kNR = 16;        // columns per tile (two vectors of 8)
constexpr int64_t kQBlock = 32;    // query rows per work item

// The GEMM helpers below are always inlined into the ISA clones (qk_tile, pv_tile):
// called out of line they would run the baseline SSE2 build.
#define KILN_INLINE inline __attribute__((always_inline))

// C[MR x 16] = A[MR x K] * B[K x 16] (row strides lda, ldb, ldc). GCC vector extensions
// keep the 2*MR accumulators in registers; they stay local to this function (passing
// them by value would change the ABI between the ISA clones).
template <int MR>
KILN_INLINE void tile_x16(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t K) {
  typedef float v8 __attribute__((vector_size(32)));
  v8 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = v8{};
  for (int64_t k = 0; k < K; ++k) {
    v8 b0, b1;
    std::memcpy(&b0, B + k * ldb, sizeof(v8));
    std::memcpy(&b1, B + k * ldb + 8, sizeof(v8));
    for (int r = 0; r < MR; ++r) {
      const float a = A[r * lda + k];
      const v8 av = {a, a, a, a, a, a, a, a};
      acc[r][0] += av * b0;
      acc[r][1] += av * b1;
    }
  }
  for (int r = 0; r < MR; ++r) {
    std::memcpy(C + r * ldc, &acc[r][0], sizeof(v8));
    std::memcpy(C + r * ldc + 8, &acc[r][1], sizeof(v8));
  }
}

// C[m x n] = A[m x K] * B[K x n] for the tile edges (n < 16).
KILN_INLINE void tile_edge(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t K,
                      int m, int64_t n) {
  for (int r = 0; r < m; ++r) {
    float acc[kNR] = {};
    for (int64_t k = 0; k < K; ++k) {
      const float a = A[r * lda + k];
      for (int64_t c = 0; c < n; ++c) acc[c] += a * B[k * ldb + c];
    }
    for (int64_t c = 0; c < n; ++c) C[r * ldc + c] = acc[c];
  }
}

// C[m x N] = A[m x K] * B[K x N], m <= kMR.
KILN_INLINE void gemm_rows(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t K,
                      int m, int64_t N) {
  int64_t c = 0;
  for (; c + kNR <= N; c += kNR) {
    if (m == kMR) {
      tile_x16<kMR>(A, lda, B + c, ldb, C + c, ldc, K);
    } else {
      for (int r = 0; r < m; ++r) tile_x16<1>(A + r * lda, lda, B + c, ldb, C + r * ldc + c, ldc, K);
    }
  }
  if (c < N) tile_edge(A, lda, B + c, ldb, C + c, ldc, K, m, N - c);
}

struct Geometry {
  bool is3d = false;
  int64_t B = 0, Hq = 0, Hkv = 0, Lq = 0, L = 0, Dk = 0, Dv = 0;
  int64_t Lp = 0;  // L rounded up to kNR (K^T row length)
  // Row strides and per-(batch, head) offsets of Q, K, V, Y in elements.
  int64_t q_rs = 0, k_rs = 0, v_rs = 0, y_rs = 0;
  int64_t q_bs = 0, q_hs = 0, k_bs = 0, k_hs = 0, v_bs = 0, v_hs = 0, y_bs = 0, y_hs = 0;
  // Mask: element strides along batch, head, query; keys are contiguous, `mask_len` of them.
  int64_t m_bs = 0, m_hs = 0, m_qs = 0, mask_len = 0;
};

// Q, K, V and Y offsets of (b, h) in the 3-D [B, S, H*D] and 4-D [B, H, S, D] layouts.
void layout(bool is3d, int64_t S, int64_t H, int64_t D, int64_t* rs, int64_t* bs, int64_t* hs) {
  if (is3d) {
    *rs = H * D;
    *bs = S * H * D;
    *hs = D;
  } else {
    *rs = D;
    *bs = H * S * D;
    *hs = S * D;
  }
}

class AttentionKernel final : public Kernel {
 public:
  AttentionKernel(const LayerSpec& spec) : threads_(spec.threads) {
    const Attributes& a = spec.attributes();
    has_qh_ = a.has("q_num_heads");
    has_kvh_ = a.has("kv_num_heads");
    qh_ = a.get_int("q_num_heads", 0);
    kvh_ = a.get_int("kv_num_heads", 0);
    causal_ = a.get_int("is_causal", 0) != 0;
    left_ = a.get_int("left_window_size", -1);
    right_ = a.get_int("right_window_size", -1);
    has_scale_ = a.has("scale");
    scale_ = a.get_float("scale", 1.0f);
    mask_dtype_ = spec.input_dtype(3);
  }

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    KILN_ENSURE(in.size() >= 3 && !out.empty(), "Attention: needs Q, K, V");
    const Dims &q = in[0].dims, &k = in[1].dims, &v = in[2].dims;
    KILN_ENSURE((q.size() == 3 || q.size() == 4) && k.size() == q.size() && v.size() == q.size(),
                "Attention: Q, K, V must all be 3-D or 4-D");
    Geometry g;
    g.is3d = q.size() == 3;
    if (g.is3d) {
      KILN_ENSURE(has_qh_ && has_kvh_ && qh_ > 0 && kvh_ > 0, "Attention: 3-D inputs need q_num_heads and kv_num_heads");
      g.B = q[0];
      g.Lq = q[1];
      g.L = k[1];
      g.Hq = qh_;
      g.Hkv = kvh_;
      KILN_ENSURE(q[2] % g.Hq == 0 && k[2] % g.Hkv == 0 && v[2] % g.Hkv == 0, "Attention: hidden sizes not divisible by heads");
      g.Dk = q[2] / g.Hq;
      g.Dv = v[2] / g.Hkv;
      KILN_ENSURE(k[2] / g.Hkv == g.Dk && v[1] == g.L, "Attention: K/V shapes disagree with Q");
    } else {
      g.B = q[0];
      g.Hq = q[1];
      g.Lq = q[2];
      g.Dk = q[3];
      g.Hkv = k[1];
      g.L = k[2];
      g.Dv = v[3];
      KILN_ENSURE(k[3] == g.Dk && v[1] == g.Hkv && v[2] == g.L, "Attention: K/V shapes disagree with Q");
      KILN_ENSURE(!has_qh_ || qh_ == g.Hq, "Attention: q_num_heads disagrees with Q");
      KILN_ENSURE(!has_kvh_ || kvh_ == g.Hkv, "Attention: kv_num_heads disagrees with K");
    }
    KILN_ENSURE(k[0] == g.B && v[0] == g.B, "Attention: batch sizes differ");
    KILN_ENSURE(g.Hkv > 0 && g.Hq % g.Hkv == 0, "Attention: q heads must be a multiple of kv heads");
    const Dims ydims = g.is3d ? Dims{g.B, g.Lq, g.Hq * g.Dv} : Dims{g.B, g.Hq, g.Lq, g.Dv};
    KILN_ENSURE(out[0].dims == ydims, "Attention: output shape ", dims_str(out[0].dims), " differs from ", dims_str(ydims));
    if (!has_scale_) KILN_ENSURE(g.Dk > 0, "Attention: head size 0");
    KILN_ENSURE(!has_scale_ || (std::isfinite(scale_) && scale_ >= 0), "Attention: bad scale");
    layout(g.is3d, g.Lq, g.Hq, g.Dk, &g.q_rs, &g.q_bs, &g.q_hs);
    layout(g.is3d, g.L, g.Hkv, g.Dk, &g.k_rs, &g.k_bs, &g.k_hs);
    layout(g.is3d, g.L, g.Hkv, g.Dv, &g.v_rs, &g.v_bs, &g.v_hs);
    layout(g.is3d, g.Lq, g.Hq, g.Dv, &g.y_rs, &g.y_bs, &g.y_hs);
    // The mask is right-aligned against [B, Hq, Lq, L]; its key axis may be shorter
    // (missing keys are masked out) but does not broadcast.
    if (in.size() > 3 && in[3].dtype != DataType::kUndefined) {
      const Dims& m = in[3].dims;
      KILN_ENSURE(m.size() >= 1 && m.size() <= 4, "Attention: mask must have rank 1 to 4");
      const Dims ms = contiguous_strides(m);
      const int64_t target[4] = {g.B, g.Hq, g.Lq, g.L};
      int64_t strides[4] = {0, 0, 0, 0};
      const int r = static_cast<int>(m.size());
      for (int i = 0; i < r; ++i) {
        const int axis = 4 - r + i;
        const int64_t md = m[static_cast<size_t>(i)];
        if (axis == 3) {
          KILN_ENSURE(md <= g.L, "Attention: mask has more keys than K");
          g.mask_len = md;
        } else {
          KILN_ENSURE(md == 1 || md == target[axis], "Attention: mask does not broadcast");
          strides[axis] = md == 1 ? 0 : ms[static_cast<size_t>(i)];
        }
      }
      g.m_bs = strides[0];
      g.m_hs = strides[1];
      g.m_qs = strides[2];
      has_mask_ = true;
    }
    g.Lp = (g.L + kNR - 1) / kNR * kNR;
    g_ = g;
    const double flops = 2.0 * static_cast<double>(g.B * g.Hq * g.Lq * g.L) * static_cast<double>(g.Dk + g.Dv);
    const int64_t items = g.B * g.Hq * ((g.Lq + kQBlock - 1) / kQBlock);
    nt_ = flops < 2e5 || items < 2 ? 1 : std::max(threads_, 1);
    *scratch = static_cast<size_t>(nt_) * per_thread_floats() * sizeof(float);
    const double sc = has_scale_ ? static_cast<double>(scale_) : 1.0 / std::sqrt(static_cast<double>(g.Dk));
    sqrt_scale_ = static_cast<float>(std::sqrt(sc));  // Q and K are each scaled by sqrt(scale)
    return Status::ok();
  }

  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void* scratch) override {
    const Geometry& g = g_;
    const float* q = in[0]->data<float>();
    const float* k = in[1]->data<float>();
    const float* v = in[2]->data<float>();
    const Tensor* mask = has_mask_ && in.size() > 3 ? in[3] : nullptr;
    float* y = out[0]->data<float>();
    const int64_t nqb = (g.Lq + kQBlock - 1) / kQBlock;
    const int64_t items = g.B * g.Hq * nqb;
    float* sbase = static_cast<float*>(scratch);
    const size_t per_thread = per_thread_floats();
    const int nt = nt_;
    // Dynamic schedule: causal items near the end of the sequence cost more.
    parallel_for_tid(items, nt, true, [&](int64_t item, int tid) {
      float* buf = sbase + static_cast<size_t>(tid) * per_thread;
      const int64_t qb = item % nqb, bh = item / nqb;
      const int64_t b = bh / g.Hq, h = bh % g.Hq;
      run_item(q, k, v, mask, y, b, h, qb * kQBlock, std::min(g.Lq, (qb + 1) * kQBlock), buf);
    });
    return Status::ok();
  }

 private:
  size_t per_thread_floats() const {
    return static_cast<size_t>((g_.Dk + kMR) * g_.Lp + kMR * g_.Dk);
  }

  // Keys row i may attend to: [*lo, *hi) from causal and window limits and the mask length.
  void key_range(int64_t i, int64_t* lo, int64_t* hi) const {
    int64_t a = 0, e = g_.L;
    if (causal_) e = std::min(e, i + 1);
    if (left_ >= 0) a = std::max(a, i - left_);
    if (right_ >= 0) e = std::min(e, i + right_ + 1);
    if (has_mask_) e = std::min(e, g_.mask_len);
    *lo = a;
    *hi = std::max(a, e);
  }

  void run_item(const float* q, const float* k, const float* v, const Tensor* mask, float* y, int64_t b, int64_t h,
                int64_t i0, int64_t i1, float* buf) const;

  int threads_;
  int nt_ = 1;
  bool has_qh_ = false, has_kvh_ = false, causal_ = false, has_scale_ = false, has_mask_ = false;
  int64_t qh_ = 0, kvh_ = 0, left_ = -1, right_ = -1;
  float scale_ = 1.0f, sqrt_scale_ = 1.0f;
  DataType mask_dtype_ = DataType::kUndefined;
  Geometry g_;
};

// Softmax of scores s[lo, hi) with the mask row added (float) or applied (bool); the
// rest of [0, Lp) becomes 0. A row with every key masked gives zeros, as the reference.
KILN_FAST_CLONES void mask_softmax_row(float* s, int64_t Lp, int64_t lo, int64_t hi, const float* fmask,
                                       const bool* bmask) {
  for (int64_t j = 0; j < lo; ++j) s[j] = 0.0f;
  if (fmask) {
    for (int64_t j = lo; j < hi; ++j) s[j] += fmask[j];
  } else if (bmask) {
    for (int64_t j = lo; j < hi; ++j) s[j] = select(bmask[j], s[j], -kInf);
  }
  float m = -kInf;
#pragma omp simd reduction(max : m)
  for (int64_t j = lo; j < hi; ++j) m = s[j] > m ? s[j] : m;
  if (m == -kInf) {
    for (int64_t j = lo; j < Lp; ++j) s[j] = 0.0f;
    return;
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = lo; j < hi; ++j) {
    const float e = exp_f(s[j] - m);
    s[j] = e;
    sum += e;
  }
  const float r = 1.0f / sum;
  for (int64_t j = lo; j < hi; ++j) s[j] *= r;
  for (int64_t j = hi; j < Lp; ++j) s[j] = 0.0f;
}

// K^T of one head, scaled, [Dk][Lp] with zero columns past L.
KILN_FAST_CLONES void build_kt(const float* __restrict k, int64_t k_rs, int64_t L, int64_t Dk, int64_t Lp, float s,
                               float* __restrict kt) {
  for (int64_t j0 = 0; j0 < L; j0 += kNR) {
    const int64_t j1 = std::min(L, j0 + kNR);
    for (int64_t e = 0; e < Dk; ++e) {
      float* dst = kt + e * Lp;
      for (int64_t j = j0; j < j1; ++j) dst[j] = k[j * k_rs + e] * s;
    }
  }
  for (int64_t e = 0; e < Dk; ++e) {
    for (int64_t j = L; j < Lp; ++j) kt[e * Lp + j] = 0.0f;
  }
}

// Scores and output rows for one tile of m query rows (the GEMMs of the item).
KILN_FAST_CLONES void qk_tile(const float* qs, int64_t Dk, const float* kt, int64_t Lp, float* s, int m, int64_t ncols) {
  gemm_rows(qs, Dk, kt, Lp, s, Lp, Dk, m, ncols);
}
KILN_FAST_CLONES void pv_tile(const float* p, int64_t Lp, const float* v, int64_t v_rs, float* y, int64_t y_rs, int64_t K,
                              int m, int64_t Dv) {
  gemm_rows(p, Lp, v, v_rs, y, y_rs, K, m, Dv);
}

void AttentionKernel::run_item(const float* q, const float* k, const float* v, const Tensor* mask, float* y,
                               int64_t b, int64_t h, int64_t i0, int64_t i1, float* buf) const {
  const Geometry& g = g_;
  const int64_t hk = h / (g.Hq / g.Hkv);
  float* kt = buf;                      // [Dk][Lp]
  float* qs = kt + g.Dk * g.Lp;         // [kMR][Dk]
  float* s = qs + kMR * g.Dk;           // [kMR][Lp]
  build_kt(k + b * g.k_bs + hk * g.k_hs, g.k_rs, g.L, g.Dk, g.Lp, sqrt_scale_, kt);
  const float* qh = q + b * g.q_bs + h * g.q_hs;
  const float* vh = v + b * g.v_bs + hk * g.v_hs;
  float* yh = y + b * g.y_bs + h * g.y_hs;
  const float* fmask = mask && mask_dtype_ == DataType::kFloat32 ? mask->data<float>() : nullptr;
  const bool* bmask = mask && mask_dtype_ == DataType::kBool ? mask->data<bool>() : nullptr;
  const int64_t mbase = b * g.m_bs + h * g.m_hs;
  for (int64_t i = i0; i < i1; i += kMR) {
    const int m = static_cast<int>(std::min<int64_t>(kMR, i1 - i));
    int64_t lo[kMR], hi[kMR], kmin = g.L, kmax = 0;
    for (int r = 0; r < m; ++r) {
      key_range(i + r, &lo[r], &hi[r]);
      if (hi[r] > lo[r]) {
        kmin = std::min(kmin, lo[r]);
        kmax = std::max(kmax, hi[r]);
      }
      const float* src = qh + (i + r) * g.q_rs;
      for (int64_t e = 0; e < g.Dk; ++e) qs[r * g.Dk + e] = src[e] * sqrt_scale_;
    }
    if (kmax <= kmin) {  // every row fully masked
      for (int r = 0; r < m; ++r) std::fill(yh + (i + r) * g.y_rs, yh + (i + r) * g.y_rs + g.Dv, 0.0f);
      continue;
    }
    // Columns [0, ncols) cover every key any row of the tile attends to.
    const int64_t ncols = std::min(g.Lp, (kmax + kNR - 1) / kNR * kNR);
    qk_tile(qs, g.Dk, kt, g.Lp, s, m, ncols);
    for (int r = 0; r < m; ++r) {
      const int64_t moff = mbase + (i + r) * g.m_qs;
      mask_softmax_row(s + r * g.Lp, ncols, lo[r], hi[r], fmask ? fmask + moff : nullptr, bmask ? bmask + moff : nullptr);
    }
    // Probabilities are zero outside [kmin, kmax), so only those rows of V matter.
    pv_tile(s + kmin, g.Lp, vh + kmin * g.v_rs, g.v_rs, yh + i * g.y_rs, g.y_rs, kmax - kmin, m, g.Dv);
  }
}

bool attention_supports(const LayerSpec& spec) {
  const size_t nin = spec.input_dtypes.size();
  if (nin < 3 || nin > 7) return false;
  for (size_t i = 0; i < 3; ++i) {
    if (spec.input_dtype(i) != DataType::kFloat32) return false;
  }
  const DataType mdt = spec.input_dtype(3);
  if (mdt != DataType::kUndefined && mdt != DataType::kFloat32 && mdt != DataType::kBool) return false;
  for (size_t i = 4; i < nin; ++i) {
    if (spec.has_input(i)) return false;  // past_key, past_value, nonpad_kv_seqlen
  }
  if (spec.output_dtype(0) != DataType::kFloat32) return false;
  for (size_t i = 1; i < spec.output_dtypes.size(); ++i) {
    if (spec.wants_output(i)) return false;  // present_key/value, qk_matmul_output
  }
  const Attributes& a = spec.attributes();
  const int64_t causal = a.get_int("is_causal", 0), mode = a.get_int("qk_matmul_output_mode", 0);
  if ((causal != 0 && causal != 1) || mode < 0 || mode > 3) return false;
  if (a.get_float("softcap", 0.0f) != 0.0f) return false;
  if (a.get_int("left_window_size", -1) < -1 || a.get_int("right_window_size", -1) < -1) return false;
  // Softmax in float32 only (the default for float32 inputs).
  return !a.has("softmax_precision") || a.get_int("softmax_precision", 1) == 1;
}

Result<std::unique_ptr<Kernel>> attention_create(const LayerSpec& spec) {
  if (!attention_supports(spec)) return unsupported("kiln_attention: unsupported layer");
  return std::unique_ptr<Kernel>(new AttentionKernel(spec));
}

}  // namespace

void add_attention_tactics(std::vector<Tactic>& out) {
  out.push_back({"kiln_attention", Op::Attention, attention_supports, attention_create});
}

}  // namespace kiln::fast
