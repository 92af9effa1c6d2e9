// LinearAttention (opset 27) and FlexAttention (ai.onnx.preview 1).
//
// LinearAttention: recurrent linear attention with a [B, H_kv, d_k, d_v] state.
// Update rules: linear (S += k v^T), gated (S *= exp(g) first), delta (v <- beta (v - S^T k)),
// gated_delta (both). Grouped-query heads read the state of their KV head. The recurrence
// runs in double; outputs are rounded to the query dtype, present_state to past_state's.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/reference/transformer_common.h"

namespace kiln {

namespace {

using transformer::round_to;
using transformer::wanted;

// Element [b, h, t, e] of a packed [B, T, H*D] tensor, as double.
struct Packed {
  const Tensor* t = nullptr;
  int64_t T = 0, H = 0, D = 0;
  double at(int64_t b, int64_t h, int64_t ti, int64_t e) const {
    return t->get_double(((b * T + ti) * H + h) * D + e);
  }
};

Status linear_attention_kernel(KernelContext& ctx) {
  const Tensor& q = *ctx.input(0);
  const Tensor& k = *ctx.input(1);
  const Tensor& v = *ctx.input(2);
  const Tensor* past = ctx.input(3);
  const Tensor* decay = ctx.input(4);
  const Tensor* beta = ctx.input(5);
  const Attributes& a = ctx.attr();
  const std::string rule = a.get_string("update_rule", "gated_delta");
  KILN_ENSURE(rule == "linear" || rule == "gated" || rule == "delta" || rule == "gated_delta",
              "update_rule must be 'linear', 'gated', 'delta' or 'gated_delta', got '", rule, "'");
  const bool gating = rule == "gated" || rule == "gated_delta";
  const bool delta = rule == "delta" || rule == "gated_delta";
  KILN_ENSURE(a.has("q_num_heads") && a.has("kv_num_heads"), "q_num_heads and kv_num_heads are required");
  const int64_t hq = a.get_int("q_num_heads", 0), hkv = a.get_int("kv_num_heads", 0);
  KILN_ENSURE(hq > 0 && hkv > 0 && hq % hkv == 0, "q_num_heads (", hq, ") must be a positive multiple of kv_num_heads (",
              hkv, ")");
  KILN_ENSURE(gating == (decay != nullptr), "update_rule '", rule, "' ", gating ? "requires" : "forbids", " the decay input");
  KILN_ENSURE(delta == (beta != nullptr), "update_rule '", rule, "' ", delta ? "requires" : "forbids", " the beta input");
  const DataType dt = q.dtype();
  KILN_ENSURE(dt == DataType::kFloat32 || dt == DataType::kFloat16 || dt == DataType::kBFloat16,
              "query must be float32, float16 or bfloat16, got ", dtype_name(dt));
  for (const Tensor* t : {&q, &k, &v}) {
    KILN_ENSURE(t->rank() == 3, "query, key and value must have shape [B, T, H*D], got ", dims_str(t->dims()));
    KILN_ENSURE(t->dtype() == dt, "query, key and value must have the same dtype");
  }
  const int64_t B = q.dim(0), T = q.dim(1);
  KILN_ENSURE(k.dim(0) == B && v.dim(0) == B && k.dim(1) == T && v.dim(1) == T,
              "query, key and value disagree on batch or sequence length");
  KILN_ENSURE(q.dim(2) % hq == 0, "query hidden size ", q.dim(2), " is not divisible by q_num_heads ", hq);
  KILN_ENSURE(k.dim(2) % hkv == 0 && v.dim(2) % hkv == 0, "key/value hidden sizes are not divisible by kv_num_heads ", hkv);
  const int64_t dk = q.dim(2) / hq, dv = v.dim(2) / hkv;
  KILN_ENSURE(k.dim(2) / hkv == dk, "key head size ", k.dim(2) / hkv, " differs from query head size ", dk);
  const Packed Q{&q, T, hq, dk}, K{&k, T, hkv, dk}, V{&v, T, hkv, dv};
  bool decay_per_head = false;
  if (decay) {
    KILN_ENSURE(is_float(decay->dtype()) && decay->rank() == 3 && decay->dim(0) == B && decay->dim(1) == T &&
                    (decay->dim(2) == hkv || decay->dim(2) == hkv * dk),
                "decay must be float [", B, ",", T, ",", hkv, " or ", hkv * dk, "], got ", decay->describe());
    decay_per_head = decay->dim(2) == hkv && hkv != hkv * dk;
  }
  int64_t beta_heads = 0;
  if (beta) {
    KILN_ENSURE(is_float(beta->dtype()) && beta->rank() == 3 && beta->dim(0) == B && beta->dim(1) == T &&
                    (beta->dim(2) == hkv || beta->dim(2) == 1),
                "beta must be float [", B, ",", T, ",", hkv, " or 1], got ", beta->describe());
    beta_heads = beta->dim(2);
  }
  DataType sdt = dt;
  std::vector<double> S(static_cast<size_t>(B * hkv * dk * dv), 0.0);
  if (past) {
    KILN_ENSURE(is_float(past->dtype()) && past->dims() == Dims({B, hkv, dk, dv}), "past_state must be float [", B, ",",
                hkv, ",", dk, ",", dv, "], got ", past->describe());
    sdt = past->dtype();
    for (int64_t i = 0; i < past->size(); ++i) S[static_cast<size_t>(i)] = past->get_double(i);
  }
  const float scale_attr = a.get_float("scale", 0.0f);
  const double scale = scale_attr == 0.0f ? 1.0 / std::sqrt(static_cast<double>(dk)) : static_cast<double>(scale_attr);

  const int64_t group = hq / hkv;
  std::vector<double> out(static_cast<size_t>(B * T * hq * dv), 0.0);
  std::vector<double> vt(static_cast<size_t>(dv));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < hkv; ++h) {
        double* s = &S[static_cast<size_t>((b * hkv + h) * dk * dv)];
        if (gating) {
          for (int64_t i = 0; i < dk; ++i) {
            const int64_t col = decay_per_head ? h : h * dk + i;
            const double g = std::exp(decay->get_double((b * T + t) * decay->dim(2) + col));
            for (int64_t m = 0; m < dv; ++m) s[i * dv + m] *= g;
          }
        }
        for (int64_t m = 0; m < dv; ++m) vt[static_cast<size_t>(m)] = V.at(b, h, t, m);
        if (delta) {
          const double bt = beta->get_double((b * T + t) * beta_heads + (beta_heads == 1 ? 0 : h));
          for (int64_t m = 0; m < dv; ++m) {
            double retrieved = 0;
            for (int64_t i = 0; i < dk; ++i) retrieved += s[i * dv + m] * K.at(b, h, t, i);
            vt[static_cast<size_t>(m)] = bt * (vt[static_cast<size_t>(m)] - retrieved);
          }
        }
        for (int64_t i = 0; i < dk; ++i) {
          const double ki = K.at(b, h, t, i);
          for (int64_t m = 0; m < dv; ++m) s[i * dv + m] += ki * vt[static_cast<size_t>(m)];
        }
        // Read: every query head of this KV group.
        for (int64_t g = 0; g < group; ++g) {
          const int64_t qh = h * group + g;
          for (int64_t m = 0; m < dv; ++m) {
            double acc = 0;
            for (int64_t i = 0; i < dk; ++i) acc += Q.at(b, qh, t, i) * s[i * dv + m];
            out[static_cast<size_t>(((b * T + t) * hq + qh) * dv + m)] = scale * acc;
          }
        }
      }
    }
  }
  Tensor& y = ctx.alloc_output(0, dt, {B, T, hq * dv});
  dispatch_float(dt, [&]<typename U>() {
    U* py = y.data<U>();
    for (size_t i = 0; i < out.size(); ++i) py[i] = from_compute<U>(static_cast<compute_t<U>>(out[i]));
  });
  if (wanted(ctx, 1)) {
    Tensor& ps = ctx.alloc_output(1, sdt, {B, hkv, dk, dv});
    dispatch_float(sdt, [&]<typename U>() {
      U* p = ps.data<U>();
      for (size_t i = 0; i < S.size(); ++i) p[i] = from_compute<U>(static_cast<compute_t<U>>(S[i]));
    });
  }
  return Status::ok();
}


// ---- FlexAttention: softmax(score_mod(Q K^T * scale)) -> prob_mod -> @ V ----
// Follows the ONNX function body: Q and K are scaled by sqrt(scale) in the input precision,
// the scores are rounded to the input precision, then cast to the softmax precision
// (float32, or double for double inputs) for the modifiers, softmax and the final matmul.

// Runs an optional [B, H, L, S] modifier subgraph on `vals` (held in dtype sdt).
Status run_modifier(KernelContext& ctx, const char* name, DataType sdt, const Dims& dims, std::vector<double>& vals) {
  auto g = ctx.attr().get_graph(name);
  if (!g) return Status::ok();
  if (!ctx.run_subgraph) return internal_error("subgraphs cannot run in this context");
  Tensor in(sdt, dims);
  dispatch_float(sdt, [&]<typename U>() {
    U* p = in.data<U>();
    for (size_t i = 0; i < vals.size(); ++i) p[i] = from_compute<U>(static_cast<compute_t<U>>(vals[i]));
  });
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> outs, ctx.run_subgraph(*g, {in}));
  KILN_ENSURE(outs.size() == 1, name, " must produce exactly one output, got ", outs.size());
  const Tensor& o = outs[0];
  KILN_ENSURE(!o.is_sequence() && !o.is_none() && o.dtype() == sdt && o.dims() == dims, name, " must return ",
              dtype_name(sdt), dims_str(dims), ", got ", o.describe());
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = o.get_double(static_cast<int64_t>(i));
  return Status::ok();
}

Status flex_attention_kernel(KernelContext& ctx) {
  const Tensor& q = *ctx.input(0);
  const Tensor& k = *ctx.input(1);
  const Tensor& v = *ctx.input(2);
  const DataType dt = q.dtype();
  KILN_ENSURE(is_float(dt), "Q must be a float tensor, got ", dtype_name(dt));
  KILN_ENSURE(k.dtype() == dt && v.dtype() == dt, "Q, K and V must have the same dtype");
  KILN_ENSURE(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, "Q, K and V must have rank 4, got ", dims_str(q.dims()),
              ", ", dims_str(k.dims()), " and ", dims_str(v.dims()));
  const int64_t B = q.dim(0), Hq = q.dim(1), L = q.dim(2), D = q.dim(3);
  const int64_t Hkv = k.dim(1), S = k.dim(2), Dv = v.dim(3);
  KILN_ENSURE(k.dim(0) == B && v.dim(0) == B && k.dim(3) == D && v.dim(1) == Hkv && v.dim(2) == S,
              "incompatible shapes Q ", dims_str(q.dims()), ", K ", dims_str(k.dims()), ", V ", dims_str(v.dims()));
  KILN_ENSURE(Hkv > 0 && Hq % Hkv == 0, "q_num_heads (", Hq, ") must be a multiple of kv_num_heads (", Hkv, ")");
  const Attributes& a = ctx.attr();
  DataType sdt = dt == DataType::kFloat64 ? DataType::kFloat64 : DataType::kFloat32;
  if (a.has("softmax_precision")) {
    const int64_t sp = a.get_int("softmax_precision", 1);
    KILN_ENSURE(sp == 1 || sp == 10 || sp == 11 || sp == 16,
                "softmax_precision must be 1 (float), 10 (float16), 11 (double) or 16 (bfloat16), got ", sp);
    sdt = static_cast<DataType>(sp);
  }
  const DataType scale_dt = dt == DataType::kFloat64 ? DataType::kFloat64 : DataType::kFloat32;
  double scale;
  if (a.has("scale")) {
    scale = a.get_float("scale", 1.0f);
  } else {
    KILN_ENSURE(D > 0, "head size is 0; the default scale 1/sqrt(head_size) is undefined");
    scale = round_to(1.0 / round_to(std::sqrt(static_cast<double>(D)), scale_dt), scale_dt);
  }
  KILN_ENSURE(std::isfinite(scale) && scale >= 0, "scale must be a non-negative finite number, got ", scale);
  const double s = round_to(round_to(std::sqrt(scale), scale_dt), dt);

  const int64_t group = Hq / Hkv;
  const Dims sdims{B, Hq, L, S};
  std::vector<double> scores(static_cast<size_t>(B * Hq * L * S));
  std::vector<double> qrow(static_cast<size_t>(D));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < L; ++i) {
        for (int64_t e = 0; e < D; ++e) {
          qrow[static_cast<size_t>(e)] = round_to(q.get_double(((b * Hq + h) * L + i) * D + e) * s, dt);
        }
        for (int64_t j = 0; j < S; ++j) {
          double acc = 0;
          for (int64_t e = 0; e < D; ++e) {
            acc += qrow[static_cast<size_t>(e)] * round_to(k.get_double(((b * Hkv + hk) * S + j) * D + e) * s, dt);
          }
          scores[static_cast<size_t>(((b * Hq + h) * L + i) * S + j)] = round_to(round_to(acc, dt), sdt);
        }
      }
    }
  }
  KILN_RETURN_IF_ERROR(run_modifier(ctx, "score_mod", sdt, sdims, scores));
  // Softmax over the key axis (ONNX Softmax semantics: an all -inf row gives NaN).
  for (int64_t r = 0; r < B * Hq * L; ++r) {
    double* row = &scores[static_cast<size_t>(r * S)];
    double m = -INFINITY;
    for (int64_t j = 0; j < S; ++j) m = std::isnan(row[j]) || std::isnan(m) ? NAN : std::max(m, row[j]);
    double sum = 0;
    for (int64_t j = 0; j < S; ++j) {
      row[j] = std::exp(row[j] - m);
      sum += row[j];
    }
    for (int64_t j = 0; j < S; ++j) row[j] = round_to(row[j] / sum, sdt);
  }
  KILN_RETURN_IF_ERROR(run_modifier(ctx, "prob_mod", sdt, sdims, scores));
  Tensor& y = ctx.alloc_output(0, dt, {B, Hq, L, Dv});
  dispatch_float(dt, [&]<typename U>() {
    U* py = y.data<U>();
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t hk = h / group;
        for (int64_t i = 0; i < L; ++i) {
          const double* p = &scores[static_cast<size_t>(((b * Hq + h) * L + i) * S)];
          for (int64_t e = 0; e < Dv; ++e) {
            double acc = 0;
            for (int64_t j = 0; j < S; ++j) {
              acc += p[j] * round_to(v.get_double(((b * Hkv + hk) * S + j) * Dv + e), sdt);
            }
            py[((b * Hq + h) * L + i) * Dv + e] = from_compute<U>(static_cast<compute_t<U>>(round_to(acc, sdt)));
          }
        }
      }
    }
  });
  return Status::ok();
}

}  // namespace

namespace transformer {
void register_linear_attention_kernels(KernelRegistry& r) {
  r.add(Op::LinearAttention, linear_attention_kernel);
  r.add(Op::FlexAttention, flex_attention_kernel);
}
}  // namespace transformer

}  // namespace kiln
