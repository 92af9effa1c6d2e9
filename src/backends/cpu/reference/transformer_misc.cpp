// Transformer-family reference kernels: RMSNormalization, RotaryEmbedding, LpNormalization,
// CumProd, Det, SwiGLU and CausalConvWithState. Float math runs in double; where the
// ONNX reference rounds intermediate results to the input precision, so do these kernels
// (round_to), which keeps float16/bfloat16 results bit-compatible.
#include <cmath>
#include <utility>
#include <vector>

#include "backends/cpu/reference/transformer_common.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

namespace {

using transformer::round_to;
using transformer::wanted;

template <typename T>
T to_t(double v) {
  return from_compute<T>(static_cast<compute_t<T>>(v));
}
template <typename T>
double to_d(T v) {
  return static_cast<double>(to_compute(v));
}

// ---- RMSNormalization: Y = X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * scale ----

Status rms_norm_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& scale = *ctx.input(1);
  KILN_ENSURE(is_float(x.dtype()), "X must be a float tensor, got ", dtype_name(x.dtype()));
  KILN_ENSURE(is_float(scale.dtype()), "scale must be a float tensor, got ", dtype_name(scale.dtype()));
  KILN_ENSURE(x.rank() >= 1, "X must have rank >= 1");
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", -1), x.rank(), &axis));
  const double eps = ctx.attr().get_float("epsilon", 1e-5f);
  const int64_t stash = ctx.attr().get_int("stash_type", 1);
  KILN_ENSURE(stash == 1 || stash == 10 || stash == 11 || stash == 16, "stash_type must be a float dtype, got ", stash);
  // scale broadcasts (numpy rules) to X's shape.
  Dims bdims;
  KILN_RETURN_IF_ERROR(broadcast_shapes({x.dims(), scale.dims()}, &bdims));
  KILN_ENSURE(bdims == x.dims(), "scale shape ", dims_str(scale.dims()), " does not broadcast to X shape ",
              dims_str(x.dims()));
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.rank(); ++i) (i < axis ? outer : inner) *= x.dim(static_cast<int>(i));
  std::vector<double> inv(static_cast<size_t>(outer));
  for (int64_t o = 0; o < outer; ++o) {
    double ss = 0;
    for (int64_t k = 0; k < inner; ++k) {
      const double v = x.get_double(o * inner + k);
      ss += v * v;
    }
    const double mean = inner > 0 ? ss / static_cast<double>(inner) : 0.0;
    inv[static_cast<size_t>(o)] = 1.0 / std::sqrt(mean + eps);
  }
  Tensor& y = ctx.alloc_output(0, scale.dtype(), x.dims());
  Status st = Status::ok();
  dispatch_float(scale.dtype(), [&]<typename V>() {
    V* py = y.data<V>();
    BroadcastIndexer(x.dims(), {scale.dims()}).for_each([&](int64_t i, const int64_t* off) {
      py[i] = to_t<V>(x.get_double(i) * inv[static_cast<size_t>(i / (inner > 0 ? inner : 1))] * scale.get_double(off[0]));
    });
  });
  return st;
}

// ---- RotaryEmbedding (opset 23) ----

template <typename T>
Status rotary_typed(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& cosc = *ctx.input(1);
  const Tensor& sinc = *ctx.input(2);
  const Tensor* pos = ctx.input(3);
  const DataType dt = x.dtype();
  const Attributes& a = ctx.attr();
  KILN_ENSURE(cosc.dtype() == dt && sinc.dtype() == dt, "cos_cache and sin_cache must have the input dtype ",
              dtype_name(dt));
  const int64_t interleaved = a.get_int("interleaved", 0);
  KILN_ENSURE(interleaved == 0 || interleaved == 1, "interleaved must be 0 or 1, got ", interleaved);
  // Logical layout [B, S, H, D] with element offsets for 3D ([B, S, H*D]) and 4D ([B, H, S, D]) input.
  KILN_ENSURE(x.rank() == 3 || x.rank() == 4, "input must have rank 3 or 4, got shape ", dims_str(x.dims()));
  int64_t B = x.dim(0), S, H, D;
  if (x.rank() == 4) {
    H = x.dim(1);
    S = x.dim(2);
    D = x.dim(3);
  } else {
    S = x.dim(1);
    H = a.get_int("num_heads", 0);
    KILN_ENSURE(H > 0, "3D input requires a positive num_heads attribute, got ", H);
    KILN_ENSURE(x.dim(2) % H == 0, "hidden size ", x.dim(2), " is not divisible by num_heads ", H);
    D = x.dim(2) / H;
  }
  int64_t rd = a.get_int("rotary_embedding_dim", 0);
  if (rd == 0) rd = D;
  KILN_ENSURE(rd > 0 && rd <= D && rd % 2 == 0, "rotary_embedding_dim must be even and in (0, head_size=", D, "], got ", rd);
  const int64_t half = rd / 2;
  KILN_ENSURE(cosc.dims() == sinc.dims(), "cos_cache shape ", dims_str(cosc.dims()), " differs from sin_cache shape ",
              dims_str(sinc.dims()));
  std::vector<int64_t> pos_ids;
  if (pos) {
    KILN_ENSURE(pos->dtype() == DataType::kInt64 || pos->dtype() == DataType::kInt32, "position_ids must be int64, got ",
                dtype_name(pos->dtype()));
    KILN_ENSURE(pos->rank() == 2 && pos->dim(0) == B && pos->dim(1) == S, "position_ids must have shape [", B, ",", S,
                "], got ", dims_str(pos->dims()));
    KILN_ENSURE(cosc.rank() == 2 && cosc.dim(1) == half, "cos_cache must have shape [max_position, ", half, "], got ",
                dims_str(cosc.dims()));
    pos_ids = pos->to_int_vector();
    for (int64_t p : pos_ids) {
      KILN_ENSURE(p >= 0 && p < cosc.dim(0), "position id ", p, " is outside [0, ", cosc.dim(0), ")");
    }
  } else {
    KILN_ENSURE(cosc.rank() == 3 && cosc.dim(0) == B && cosc.dim(1) == S && cosc.dim(2) == half,
                "without position_ids, cos_cache must have shape [", B, ",", S, ",", half, "], got ", dims_str(cosc.dims()));
  }
  const T* px = x.data<T>();
  const T* pc = cosc.data<T>();
  const T* ps = sinc.data<T>();
  Tensor& y = ctx.alloc_output(0, dt, x.dims());
  T* py = y.data<T>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      const int64_t cache_row = pos ? pos_ids[static_cast<size_t>(b * S + s)] : b * S + s;
      const T* crow = pc + cache_row * half;
      const T* srow = ps + cache_row * half;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = x.rank() == 4 ? ((b * H + h) * S + s) * D : ((b * S + s) * H + h) * D;
        const T* in = px + base;
        T* out = py + base;
        for (int64_t k = 0; k < half; ++k) {
          const int64_t i1 = interleaved ? 2 * k : k;
          const int64_t i2 = interleaved ? 2 * k + 1 : k + half;
          const double c = to_d(crow[k]), sn = to_d(srow[k]);
          const double x1 = to_d(in[i1]), x2 = to_d(in[i2]);
          out[i1] = to_t<T>(round_to(c * x1, dt) - round_to(sn * x2, dt));
          out[i2] = to_t<T>(round_to(sn * x1, dt) + round_to(c * x2, dt));
        }
        for (int64_t e = rd; e < D; ++e) out[e] = in[e];
      }
    }
  }
  return Status::ok();
}

Status rotary_kernel(KernelContext& ctx) {
  const DataType dt = ctx.input(0)->dtype();
  Status st = Status::ok();
  if (!dispatch_float(dt, [&]<typename T>() { st = rotary_typed<T>(ctx); })) return unsupported_dtype(ctx.op, dt);
  return st;
}

// ---- LpNormalization: x / ||x||_p along axis (p = 1 or 2); a zero norm gives 0 ----

Status lp_norm_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(is_float(x.dtype()), "input must be a float tensor, got ", dtype_name(x.dtype()));
  KILN_ENSURE(x.rank() >= 1, "input must have rank >= 1");
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", -1), x.rank(), &axis));
  const int64_t p = ctx.attr().get_int("p", 2);
  KILN_ENSURE(p == 1 || p == 2, "p must be 1 or 2, got ", p);
  int64_t outer = 1, inner = 1;
  const int64_t n = x.dim(static_cast<int>(axis));
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(static_cast<int>(i));
  for (int64_t i = axis + 1; i < x.rank(); ++i) inner *= x.dim(static_cast<int>(i));
  Tensor& y = ctx.alloc_output(0, x.dtype(), x.dims());
  dispatch_float(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        double norm = 0;
        for (int64_t k = 0; k < n; ++k) {
          const double v = to_d(px[(o * n + k) * inner + in]);
          norm += p == 1 ? std::fabs(v) : v * v;
        }
        if (p == 2) norm = std::sqrt(norm);
        for (int64_t k = 0; k < n; ++k) {
          const int64_t i = (o * n + k) * inner + in;
          py[i] = to_t<T>(norm == 0 ? 0.0 : to_d(px[i]) / norm);
        }
      }
    }
  });
  return Status::ok();
}

// ---- CumProd (opset 26) ----

template <typename T>
T mul_wrap(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return from_compute<T>(to_compute(a) * to_compute(b));
  }
}

Status cumprod_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& at = *ctx.input(1);
  KILN_ENSURE(at.dtype() == DataType::kInt64 || at.dtype() == DataType::kInt32, "axis must be int32 or int64, got ",
              dtype_name(at.dtype()));
  KILN_ENSURE(at.size() == 1 && at.rank() <= 1, "axis must be a scalar, got shape ", dims_str(at.dims()));
  KILN_ENSURE(x.rank() >= 1, "input must have rank >= 1");
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(at.get_int(0), x.rank(), &axis));
  const bool exclusive = ctx.attr().get_int("exclusive", 0) != 0;
  const bool reverse = ctx.attr().get_int("reverse", 0) != 0;
  int64_t outer = 1, inner = 1;
  const int64_t n = x.dim(static_cast<int>(axis));
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(static_cast<int>(i));
  for (int64_t i = axis + 1; i < x.rank(); ++i) inner *= x.dim(static_cast<int>(i));
  Tensor& y = ctx.alloc_output(0, x.dtype(), x.dims());
  auto run = [&]<typename T>() {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        T acc = from_compute<T>(compute_t<T>(1));
        for (int64_t step = 0; step < n; ++step) {
          const int64_t k = reverse ? n - 1 - step : step;
          const int64_t i = (o * n + k) * inner + in;
          if (exclusive) {
            py[i] = acc;
            acc = mul_wrap(acc, px[i]);
          } else {
            acc = mul_wrap(acc, px[i]);
            py[i] = acc;
          }
        }
      }
    }
  };
  switch (x.dtype()) {
    case DataType::kFloat32: run.template operator()<float>(); break;
    case DataType::kFloat64: run.template operator()<double>(); break;
    case DataType::kFloat16: run.template operator()<Half>(); break;
    case DataType::kBFloat16: run.template operator()<BFloat16>(); break;
    case DataType::kInt32: run.template operator()<int32_t>(); break;
    case DataType::kInt64: run.template operator()<int64_t>(); break;
    case DataType::kUInt32: run.template operator()<uint32_t>(); break;
    case DataType::kUInt64: run.template operator()<uint64_t>(); break;
    default: return unsupported_dtype(ctx.op, x.dtype());
  }
  return Status::ok();
}

// ---- Det: determinant of the trailing [M, M] matrices (LU with partial pivoting) ----

Status det_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(is_float(x.dtype()), "input must be a float tensor, got ", dtype_name(x.dtype()));
  KILN_ENSURE(x.rank() >= 2, "input must have rank >= 2, got shape ", dims_str(x.dims()));
  const int64_t m = x.dim(x.rank() - 1);
  KILN_ENSURE(x.dim(x.rank() - 2) == m, "the last two dimensions must be equal (square matrices), got shape ",
              dims_str(x.dims()));
  Dims odims(x.dims().begin(), x.dims().end() - 2);
  const int64_t batch = num_elements(odims);
  Tensor& y = ctx.alloc_output(0, x.dtype(), odims);
  std::vector<double> a(static_cast<size_t>(m * m));
  dispatch_float(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t i = 0; i < m * m; ++i) a[static_cast<size_t>(i)] = to_d(px[bi * m * m + i]);
      auto at = [&](int64_t r, int64_t c) -> double& { return a[static_cast<size_t>(r * m + c)]; };
      double det = 1;
      for (int64_t c = 0; c < m; ++c) {
        int64_t piv = c;
        for (int64_t r = c + 1; r < m; ++r) {
          if (std::fabs(at(r, c)) > std::fabs(at(piv, c))) piv = r;
        }
        if (at(piv, c) == 0) {
          det = 0;
          break;
        }
        if (piv != c) {
          for (int64_t k = 0; k < m; ++k) std::swap(at(piv, k), at(c, k));
          det = -det;
        }
        det *= at(c, c);
        for (int64_t r = c + 1; r < m; ++r) {
          const double f = at(r, c) / at(c, c);
          for (int64_t k = c; k < m; ++k) at(r, k) -= f * at(c, k);
        }
      }
      py[bi] = to_t<T>(det);
    }
  });
  return Status::ok();
}

// ---- SwiGLU (opset 28): Y = A * sigmoid(alpha * A) * B ----

Status swiglu_kernel(KernelContext& ctx) {
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  KILN_ENSURE(a.dtype() == b.dtype(), "A and B must have the same dtype, got ", dtype_name(a.dtype()), " and ",
              dtype_name(b.dtype()));
  KILN_ENSURE(a.dims() == b.dims(), "A and B must have the same shape (no broadcasting), got ", dims_str(a.dims()),
              " and ", dims_str(b.dims()));
  const double alpha = ctx.attr().get_float("alpha", 1.0f);
  const DataType dt = a.dtype();
  Tensor& y = ctx.alloc_output(0, dt, a.dims());
  if (!dispatch_float(dt, [&]<typename T>() {
        const T* pa = a.data<T>();
        const T* pb = b.data<T>();
        T* py = y.data<T>();
        for (int64_t i = 0; i < a.size(); ++i) {
          const double av = to_d(pa[i]);
          const double sig = round_to(1.0 / (1.0 + std::exp(-alpha * av)), dt);
          py[i] = to_t<T>(round_to(av * sig, dt) * to_d(pb[i]));
        }
      })) {
    return unsupported_dtype(ctx.op, dt);
  }
  return Status::ok();
}

// ---- CausalConvWithState (opset 27): depthwise causal conv1d with a carried state ----

template <typename T>
Status causal_conv_typed(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  const Tensor* bias = ctx.input(2);
  const Tensor* past = ctx.input(3);
  const DataType dt = x.dtype();
  const std::string act = ctx.attr().get_string("activation", "none");
  KILN_ENSURE(act == "none" || act == "silu" || act == "swish", "activation must be 'none', 'silu' or 'swish', got '",
              act, "'");
  KILN_ENSURE(x.rank() == 3, "input must have shape [batch, channels, length], got ", dims_str(x.dims()));
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2);
  KILN_ENSURE(w.dtype() == dt && w.rank() == 3 && w.dim(0) == C && w.dim(1) == 1 && w.dim(2) >= 1,
              "weight must be ", dtype_name(dt), "[", C, ",1,k] with k >= 1, got ", w.describe());
  const int64_t k = w.dim(2);
  if (bias) {
    KILN_ENSURE(bias->dtype() == dt && bias->rank() == 1 && bias->dim(0) == C, "bias must be ", dtype_name(dt), "[", C,
                "], got ", bias->describe());
  }
  if (past) {
    KILN_ENSURE(past->dtype() == dt && past->rank() == 3 && past->dim(0) == B && past->dim(1) == C &&
                    past->dim(2) == k - 1,
                "past_state must be ", dtype_name(dt), "[", B, ",", C, ",", k - 1, "], got ", past->describe());
  }
  const int64_t PL = L + k - 1;  // padded length
  std::vector<T> padded(static_cast<size_t>(B * C * PL), from_compute<T>(compute_t<T>(0)));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      T* row = padded.data() + (b * C + c) * PL;
      if (past) {
        const T* src = past->data<T>() + (b * C + c) * (k - 1);
        for (int64_t i = 0; i < k - 1; ++i) row[i] = src[i];
      }
      const T* src = x.data<T>() + (b * C + c) * L;
      for (int64_t i = 0; i < L; ++i) row[k - 1 + i] = src[i];
    }
  }
  Tensor& y = ctx.alloc_output(0, dt, {B, C, L});
  T* py = y.data<T>();
  const T* pw = w.data<T>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      const T* row = padded.data() + (b * C + c) * PL;
      for (int64_t t = 0; t < L; ++t) {
        double acc = bias ? to_d(bias->data<T>()[c]) : 0.0;
        for (int64_t r = 0; r < k; ++r) acc += to_d(pw[c * k + r]) * to_d(row[t + r]);
        double v = round_to(acc, dt);
        if (act != "none") v = v / (1.0 + std::exp(-v));
        py[(b * C + c) * L + t] = to_t<T>(v);
      }
    }
  }
  if (wanted(ctx, 1)) {
    Tensor& st = ctx.alloc_output(1, dt, {B, C, k - 1});
    T* ps = st.data<T>();
    for (int64_t bc = 0; bc < B * C; ++bc) {
      for (int64_t i = 0; i < k - 1; ++i) ps[bc * (k - 1) + i] = padded[static_cast<size_t>(bc * PL + L + i)];
    }
  }
  return Status::ok();
}

Status causal_conv_kernel(KernelContext& ctx) {
  const DataType dt = ctx.input(0)->dtype();
  Status st = Status::ok();
  if (!dispatch_float(dt, [&]<typename T>() { st = causal_conv_typed<T>(ctx); })) return unsupported_dtype(ctx.op, dt);
  return st;
}

}  // namespace

namespace transformer {
void register_transformer_misc_kernels(KernelRegistry& r) {
  r.add(Op::RMSNormalization, rms_norm_kernel);
  r.add(Op::RotaryEmbedding, rotary_kernel);
  r.add(Op::LpNormalization, lp_norm_kernel);
  r.add(Op::CumProd, cumprod_kernel);
  r.add(Op::Det, det_kernel);
  r.add(Op::SwiGLU, swiglu_kernel);
  r.add(Op::CausalConvWithState, causal_conv_kernel);
}
}  // namespace transformer

}  // namespace kiln
