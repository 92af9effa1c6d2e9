// Attention (opsets 23-25): scaled dot-product attention with optional boolean or additive
// mask, causal and sliding-window masking, internal (past_key/past_value) or external
// (nonpad_kv_seqlen) KV cache, grouped-query heads, softcap and the qk_matmul_output debug
// output. Also registers the other transformer-family kernels (see transformer_common.h).
//
// Arithmetic runs in double, rounded after each step to the input precision (and to the
// softmax_precision type inside the softmax), which reproduces the ONNX function body's
// per-op rounding for float16/bfloat16 inputs.
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/reference/transformer_common.h"

namespace kiln {

namespace {

using transformer::round_to;
using transformer::wanted;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct AttentionDims {
  bool is3d = false;
  int64_t B = 0, Hq = 0, Hkv = 0;
  int64_t Lq = 0;   // query sequence length
  int64_t Lk = 0;   // new key/value sequence length (K, V)
  int64_t P = 0;    // past sequence length
  int64_t L = 0;    // total key/value sequence length (P + Lk)
  int64_t Dk = 0, Dv = 0;
};

Status attention_dims(const KernelContext& ctx, AttentionDims* out) {
  const Tensor& q = *ctx.input(0);
  const Tensor& k = *ctx.input(1);
  const Tensor& v = *ctx.input(2);
  const Attributes& a = ctx.attr();
  AttentionDims d;
  KILN_ENSURE(q.rank() == 3 || q.rank() == 4, "Q must have rank 3 or 4, got shape ", dims_str(q.dims()));
  KILN_ENSURE(k.rank() == q.rank() && v.rank() == q.rank(), "Q, K and V must have the same rank, got ",
              dims_str(q.dims()), ", ", dims_str(k.dims()), " and ", dims_str(v.dims()));
  d.is3d = q.rank() == 3;
  const bool has_qh = a.has("q_num_heads"), has_kvh = a.has("kv_num_heads");
  if (d.is3d) {
    KILN_ENSURE(has_qh && has_kvh, "3D inputs require the q_num_heads and kv_num_heads attributes");
    d.Hq = a.get_int("q_num_heads", 0);
    d.Hkv = a.get_int("kv_num_heads", 0);
    KILN_ENSURE(d.Hq > 0 && d.Hkv > 0, "q_num_heads and kv_num_heads must be positive, got ", d.Hq, " and ", d.Hkv);
    d.B = q.dim(0);
    d.Lq = q.dim(1);
    d.Lk = k.dim(1);
    KILN_ENSURE(q.dim(2) % d.Hq == 0, "Q hidden size ", q.dim(2), " is not divisible by q_num_heads ", d.Hq);
    KILN_ENSURE(k.dim(2) % d.Hkv == 0, "K hidden size ", k.dim(2), " is not divisible by kv_num_heads ", d.Hkv);
    KILN_ENSURE(v.dim(2) % d.Hkv == 0, "V hidden size ", v.dim(2), " is not divisible by kv_num_heads ", d.Hkv);
    d.Dk = q.dim(2) / d.Hq;
    KILN_ENSURE(k.dim(2) / d.Hkv == d.Dk, "Q head size ", d.Dk, " differs from K head size ", k.dim(2) / d.Hkv);
    d.Dv = v.dim(2) / d.Hkv;
    KILN_ENSURE(k.dim(0) == d.B && v.dim(0) == d.B, "Q, K and V batch sizes differ");
    KILN_ENSURE(v.dim(1) == d.Lk, "K and V sequence lengths differ: ", d.Lk, " vs ", v.dim(1));
  } else {
    d.B = q.dim(0);
    d.Hq = q.dim(1);
    d.Lq = q.dim(2);
    d.Dk = q.dim(3);
    d.Hkv = k.dim(1);
    d.Lk = k.dim(2);
    d.Dv = v.dim(3);
    KILN_ENSURE(k.dim(0) == d.B && v.dim(0) == d.B, "Q, K and V batch sizes differ");
    KILN_ENSURE(k.dim(3) == d.Dk, "Q head size ", d.Dk, " differs from K head size ", k.dim(3));
    KILN_ENSURE(v.dim(1) == d.Hkv && v.dim(2) == d.Lk, "K shape ", dims_str(k.dims()), " and V shape ",
                dims_str(v.dims()), " disagree on heads or sequence length");
    if (has_qh) KILN_ENSURE(a.get_int("q_num_heads", 0) == d.Hq, "q_num_heads disagrees with Q shape ", dims_str(q.dims()));
    if (has_kvh) KILN_ENSURE(a.get_int("kv_num_heads", 0) == d.Hkv, "kv_num_heads disagrees with K shape ", dims_str(k.dims()));
  }
  KILN_ENSURE(d.Hkv > 0 && d.Hq % d.Hkv == 0, "q_num_heads (", d.Hq, ") must be a multiple of kv_num_heads (", d.Hkv, ")");
  const Tensor* pk = ctx.input(4);
  const Tensor* pv = ctx.input(5);
  KILN_ENSURE((pk == nullptr) == (pv == nullptr), "past_key and past_value must be given together");
  if (pk) {
    KILN_ENSURE(pk->dtype() == q.dtype() && pv->dtype() == v.dtype(),
                "past_key and past_value must have the dtypes of K and V");
    KILN_ENSURE(pk->rank() == 4 && pk->dim(0) == d.B && pk->dim(1) == d.Hkv && pk->dim(3) == d.Dk,
                "past_key has shape ", dims_str(pk->dims()), ", expected [", d.B, ",", d.Hkv, ",past,", d.Dk, "]");
    d.P = pk->dim(2);
    KILN_ENSURE(pv->rank() == 4 && pv->dim(0) == d.B && pv->dim(1) == d.Hkv && pv->dim(2) == d.P && pv->dim(3) == d.Dv,
                "past_value has shape ", dims_str(pv->dims()), ", expected [", d.B, ",", d.Hkv, ",", d.P, ",", d.Dv, "]");
  }
  d.L = d.P + d.Lk;
  *out = d;
  return Status::ok();
}

// Builds the present key (or value) cache [B, Hkv, P + Lk, D] in the input dtype: the past
// cache followed by the new K (V), transposed from [B, Lk, Hkv*D] for 3D inputs.
template <typename T>
Tensor present_cache(const Tensor* past, const Tensor& x, const AttentionDims& d, int64_t D) {
  Tensor out(x.dtype(), {d.B, d.Hkv, d.L, D});
  T* po = out.data<T>();
  const T* px = x.data<T>();
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.Hkv; ++h) {
      T* dst = po + (b * d.Hkv + h) * d.L * D;
      if (past) {
        const T* src = past->data<T>() + (b * d.Hkv + h) * d.P * D;
        for (int64_t i = 0; i < d.P * D; ++i) dst[i] = src[i];
      }
      dst += d.P * D;
      for (int64_t l = 0; l < d.Lk; ++l) {
        for (int64_t e = 0; e < D; ++e) {
          const int64_t src = d.is3d ? ((b * d.Lk + l) * d.Hkv + h) * D + e : ((b * d.Hkv + h) * d.Lk + l) * D + e;
          dst[l * D + e] = px[src];
        }
      }
    }
  }
  return out;
}

// The attention mask, right-aligned against [B, Hq, Lq, L]; its last axis may be shorter
// than L (the missing keys are masked out).
struct MaskView {
  const Tensor* t = nullptr;
  int64_t strides[4] = {0, 0, 0, 0};
  int64_t last = 0;  // mask length along the key axis
  bool is_bool = false;
};

// A boolean mask selects keys (true: attend); any numeric mask is added to the scores.
Status make_mask_view(const Tensor* m, const AttentionDims& d, MaskView* mv) {
  mv->t = m;
  if (!m) return Status::ok();
  KILN_ENSURE(m->dtype() == DataType::kBool || is_float(m->dtype()) || is_integer(m->dtype()),
              "attn_mask must be bool or numeric, got ", dtype_name(m->dtype()));
  KILN_ENSURE(m->rank() >= 1 && m->rank() <= 4, "attn_mask must have rank 1 to 4, got shape ", dims_str(m->dims()));
  mv->is_bool = m->dtype() == DataType::kBool;
  const int64_t target[4] = {d.B, d.Hq, d.Lq, d.L};
  const Dims strides = contiguous_strides(m->dims());
  const int r = m->rank();
  for (int k = 0; k < r; ++k) {
    const int axis = 4 - r + k;
    const int64_t md = m->dim(k);
    if (axis == 3) {
      KILN_ENSURE(md <= d.L, "attn_mask has ", md, " keys, more than the total sequence length ", d.L);
      mv->last = md;
      mv->strides[3] = strides[static_cast<size_t>(k)];
    } else {
      KILN_ENSURE(md == 1 || md == target[axis], "attn_mask shape ", dims_str(m->dims()),
                  " does not broadcast to [", d.B, ",", d.Hq, ",", d.Lq, ",", d.L, "]");
      mv->strides[axis] = md == 1 ? 0 : strides[static_cast<size_t>(k)];
    }
  }
  return Status::ok();
}

double mask_value(const MaskView& mv, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!mv.t) return 0.0;
  if (j >= mv.last) return kNegInf;  // padded key
  const int64_t off = b * mv.strides[0] + h * mv.strides[1] + i * mv.strides[2] + j * mv.strides[3];
  if (mv.is_bool) return mv.t->data<bool>()[off] ? 0.0 : kNegInf;
  return mv.t->get_double(off);
}

// NaN-propagating maximum, as numpy.max.
double nan_max(const std::vector<double>& v) {
  double m = kNegInf;
  for (double x : v) {
    if (std::isnan(x)) return x;
    if (x > m) m = x;
  }
  return m;
}

// T: the dtype of Q, K, past_key and Y; TV: the dtype of V and past_value.
template <typename T, typename TV>
Status attention_typed(KernelContext& ctx, const AttentionDims& d) {
  const Attributes& a = ctx.attr();
  const DataType dt = ctx.input(0)->dtype();
  KILN_ENSURE(ctx.input(1)->dtype() == dt, "Q and K must have the same dtype, got ", dtype_name(dt), " and ",
              dtype_name(ctx.input(1)->dtype()));
  const int64_t is_causal = a.get_int("is_causal", 0);
  KILN_ENSURE(is_causal == 0 || is_causal == 1, "is_causal must be 0 or 1, got ", is_causal);
  const int64_t mode = a.get_int("qk_matmul_output_mode", 0);
  KILN_ENSURE(mode >= 0 && mode <= 3, "qk_matmul_output_mode must be 0..3, got ", mode);
  const double softcap = a.get_float("softcap", 0.0f);
  KILN_ENSURE(std::isfinite(softcap) && softcap >= 0, "softcap must be a non-negative finite number, got ", softcap);
  const int64_t left = a.get_int("left_window_size", -1);
  const int64_t right = a.get_int("right_window_size", -1);
  KILN_ENSURE(left >= -1 && right >= -1, "window sizes must be -1 or non-negative, got ", left, " and ", right);
  DataType sdt = dt;
  if (a.has("softmax_precision")) {
    const int64_t sp = a.get_int("softmax_precision", 0);
    KILN_ENSURE(sp == 1 || sp == 10 || sp == 11 || sp == 16,
                "softmax_precision must be 1 (float), 10 (float16), 11 (double) or 16 (bfloat16), got ", sp);
    sdt = static_cast<DataType>(sp);
  }
  double scale;
  if (a.has("scale")) {
    scale = a.get_float("scale", 1.0f);
    KILN_ENSURE(std::isfinite(scale) && scale >= 0, "scale must be a non-negative finite number, got ", scale);
  } else {
    KILN_ENSURE(d.Dk > 0, "head size is 0; the default scale 1/sqrt(head_size) is undefined");
    scale = 1.0 / std::sqrt(static_cast<double>(d.Dk));
  }
  // Q and K are each scaled by sqrt(scale) before the matmul (in the input precision).
  const double sqrt_scale = round_to(std::sqrt(scale), dt);

  const Tensor* nonpad = ctx.input(6);
  std::vector<int64_t> nonpad_len;
  if (nonpad) {
    KILN_ENSURE(ctx.input(4) == nullptr, "nonpad_kv_seqlen cannot be combined with past_key/past_value");
    KILN_ENSURE(nonpad->dtype() == DataType::kInt64 || nonpad->dtype() == DataType::kInt32,
                "nonpad_kv_seqlen must be int64, got ", dtype_name(nonpad->dtype()));
    KILN_ENSURE(nonpad->rank() == 1 && nonpad->dim(0) == d.B, "nonpad_kv_seqlen must have shape [", d.B, "], got ",
                dims_str(nonpad->dims()));
    nonpad_len = nonpad->to_int_vector();
  }
  MaskView mask;
  KILN_RETURN_IF_ERROR(make_mask_view(ctx.input(3), d, &mask));

  Tensor pkey = present_cache<T>(ctx.input(4), *ctx.input(1), d, d.Dk);
  Tensor pval = present_cache<TV>(ctx.input(5), *ctx.input(2), d, d.Dv);

  // Scaled queries and keys in the input precision, as doubles.
  std::vector<double> qs(static_cast<size_t>(d.B * d.Hq * d.Lq * d.Dk));
  {
    const T* pq = ctx.input(0)->data<T>();
    size_t n = 0;
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t h = 0; h < d.Hq; ++h)
        for (int64_t i = 0; i < d.Lq; ++i)
          for (int64_t e = 0; e < d.Dk; ++e) {
            const int64_t src = d.is3d ? ((b * d.Lq + i) * d.Hq + h) * d.Dk + e : ((b * d.Hq + h) * d.Lq + i) * d.Dk + e;
            qs[n++] = round_to(static_cast<double>(to_compute(pq[src])) * sqrt_scale, dt);
          }
  }
  std::vector<double> ks(static_cast<size_t>(pkey.size()));
  for (int64_t i = 0; i < pkey.size(); ++i) {
    ks[static_cast<size_t>(i)] = round_to(static_cast<double>(to_compute(pkey.data<T>()[i])) * sqrt_scale, dt);
  }
  const TV* pv = pval.data<TV>();

  const Dims ydims = d.is3d ? Dims{d.B, d.Lq, d.Hq * d.Dv} : Dims{d.B, d.Hq, d.Lq, d.Dv};
  Tensor& y = ctx.alloc_output(0, dt, ydims);
  T* py = y.data<T>();
  T* pqk = nullptr;
  if (wanted(ctx, 3)) pqk = ctx.alloc_output(3, dt, {d.B, d.Hq, d.Lq, d.L}).data<T>();

  const int64_t group = d.Hq / d.Hkv;
  std::vector<double> qk(static_cast<size_t>(d.L)), bias(static_cast<size_t>(d.L)), scores(static_cast<size_t>(d.L));
  std::vector<double> probs(static_cast<size_t>(d.L));
  for (int64_t b = 0; b < d.B; ++b) {
    // Offset of the query block within the key sequence (bottom-right causal alignment).
    const int64_t offset = ctx.input(4) ? d.P : (nonpad ? nonpad_len[static_cast<size_t>(b)] - d.Lq : 0);
    for (int64_t h = 0; h < d.Hq; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < d.Lq; ++i) {
        const double* qrow = &qs[static_cast<size_t>(((b * d.Hq + h) * d.Lq + i) * d.Dk)];
        for (int64_t j = 0; j < d.L; ++j) {
          const double* krow = &ks[static_cast<size_t>(((b * d.Hkv + hk) * d.L + j) * d.Dk)];
          double acc = 0;
          for (int64_t e = 0; e < d.Dk; ++e) acc += qrow[e] * krow[e];
          const double raw = round_to(acc, dt);
          double capped = raw;
          if (softcap > 0) {
            capped = round_to(round_to(std::tanh(round_to(raw / softcap, dt)), dt) * softcap, dt);
          }
          double bv = mask_value(mask, b, h, i, j);
          if (is_causal && !(j <= i + offset)) bv += kNegInf;
          if (left >= 0 || right >= 0) {
            const int64_t diff = i + offset - j;
            const bool allowed = (left < 0 || diff <= left) && (right < 0 || -diff <= right);
            if (!allowed) bv += kNegInf;
          }
          if (nonpad && !(j < nonpad_len[static_cast<size_t>(b)])) bv += kNegInf;
          bv = round_to(bv, dt);
          const size_t sj = static_cast<size_t>(j);
          qk[sj] = mode == 0 ? raw : capped;
          bias[sj] = bv;
          scores[sj] = round_to(capped + bv, dt);
        }
        const int64_t row = ((b * d.Hq + h) * d.Lq + i) * d.L;
        if (pqk && mode != 3) {
          for (int64_t j = 0; j < d.L; ++j) {
            pqk[row + j] = from_compute<T>(static_cast<compute_t<T>>(mode == 2 ? scores[static_cast<size_t>(j)] : qk[static_cast<size_t>(j)]));
          }
        }
        // Softmax in the softmax precision; a fully-masked row (all-bias -inf) gives zeros.
        const bool row_masked = d.L == 0 || nan_max(bias) == kNegInf;
        double m = kNegInf;
        for (int64_t j = 0; j < d.L; ++j) {
          scores[static_cast<size_t>(j)] = round_to(scores[static_cast<size_t>(j)], sdt);
        }
        m = nan_max(scores);
        if (m == kNegInf) m = 0;
        double sum = 0;
        for (int64_t j = 0; j < d.L; ++j) {
          const size_t sj = static_cast<size_t>(j);
          probs[sj] = round_to(std::exp(round_to(scores[sj] - m, sdt)), sdt);
          // numpy sums float16 in float, but bfloat16 (ml_dtypes) element by element.
          sum = sdt == DataType::kBFloat16 ? round_to(sum + probs[sj], sdt) : sum + probs[sj];
        }
        sum = round_to(sum, sdt);
        if (sum == 0) sum = 1;
        for (int64_t j = 0; j < d.L; ++j) {
          const size_t sj = static_cast<size_t>(j);
          probs[sj] = row_masked ? 0.0 : round_to(round_to(probs[sj] / sum, sdt), dt);
          if (pqk && mode == 3) pqk[row + j] = from_compute<T>(static_cast<compute_t<T>>(probs[sj]));
        }
        // Y row = probs @ V.
        const TV* vbase = pv + (b * d.Hkv + hk) * d.L * d.Dv;
        for (int64_t e = 0; e < d.Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < d.L; ++j) {
            acc += probs[static_cast<size_t>(j)] * static_cast<double>(to_compute(vbase[j * d.Dv + e]));
          }
          const int64_t dst = d.is3d ? ((b * d.Lq + i) * d.Hq + h) * d.Dv + e : ((b * d.Hq + h) * d.Lq + i) * d.Dv + e;
          py[dst] = from_compute<T>(static_cast<compute_t<T>>(acc));
        }
      }
    }
  }
  if (wanted(ctx, 1)) ctx.set_output(1, std::move(pkey));
  if (wanted(ctx, 2)) ctx.set_output(2, std::move(pval));
  return Status::ok();
}

Status attention_kernel(KernelContext& ctx) {
  AttentionDims d;
  KILN_RETURN_IF_ERROR(attention_dims(ctx, &d));
  const DataType dt = ctx.input(0)->dtype();
  const DataType vdt = ctx.input(2)->dtype();
  Status st = Status::ok();
  bool v_ok = true;
  if (!dispatch_float(dt, [&]<typename T>() {
        v_ok = dispatch_float(vdt, [&]<typename TV>() { st = attention_typed<T, TV>(ctx, d); });
      })) {
    return unsupported_dtype(ctx.op, dt);
  }
  if (!v_ok) return unsupported_dtype(ctx.op, vdt, "V");
  return st;
}

}  // namespace

void register_transformer_kernels(KernelRegistry& r) {
  r.add(Op::Attention, attention_kernel);
  transformer::register_loss_kernels(r);
  transformer::register_transformer_misc_kernels(r);
  transformer::register_linear_attention_kernels(r);
}

}  // namespace kiln
