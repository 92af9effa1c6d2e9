// Integer matmul / convolution: MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv.
// Inputs are int8/uint8 with zero points; accumulation is exact (int64), results follow the
// ONNX reference (int32 outputs, or requantized with round-half-to-even and clamping).
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/reference/quantize.h"
#include "backends/cpu/reference/quantize_common.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

using namespace quant;

namespace {

bool is_8bit(DataType dt) { return dt == DataType::kInt8 || dt == DataType::kUInt8; }

// Values of t (an 8-bit int tensor) minus its zero point. zp is a scalar, a 1-D per-row
// vector (per_row: one value per row, i.e. per index of dim rank-2), or any shape that
// broadcasts to t's shape.
Result<std::vector<int64_t>> minus_zero_point(const Tensor& t, const Tensor* zp, bool per_row, const char* what) {
  std::vector<int64_t> v(static_cast<size_t>(t.size()));
  for (int64_t i = 0; i < t.size(); ++i) v[static_cast<size_t>(i)] = static_cast<int64_t>(element_as_double(t, i));
  if (!zp) return v;
  if (zp->dtype() != t.dtype()) {
    return invalid_argument(what, " zero point dtype ", dtype_name(zp->dtype()), " must match its input dtype ",
                            dtype_name(t.dtype()));
  }
  if (zp->size() == 1) {
    int64_t z = static_cast<int64_t>(element_as_double(*zp, 0));
    for (auto& e : v) e -= z;
    return v;
  }
  Dims zd = zp->dims();
  if (per_row && zp->rank() == 1 && t.rank() >= 2 && zp->size() == t.dim(t.rank() - 2)) zd = {zp->size(), 1};
  Dims bd;
  Status st = broadcast_shapes({t.dims(), zd}, &bd);
  if (!st.is_ok() || bd != t.dims()) {
    return invalid_argument(what, " zero point shape ", dims_str(zp->dims()), " does not fit input shape ",
                            dims_str(t.dims()));
  }
  BroadcastIndexer ix(t.dims(), {t.dims(), zd});
  ix.for_each([&](int64_t i, const int64_t* off) {
    v[static_cast<size_t>(i)] -= static_cast<int64_t>(element_as_double(*zp, off[1]));
  });
  return v;
}

// numpy matmul of int64 values. Fills c, its dims, and M/N (for per-row/column scales).
struct MatMulResult {
  std::vector<int64_t> c;
  Dims dims;
  int64_t m = 0, n = 0;
};

Result<MatMulResult> int_matmul(const std::vector<int64_t>& a, Dims ad, const std::vector<int64_t>& b, Dims bd) {
  if (ad.empty() || bd.empty()) return invalid_argument("matmul inputs must have rank >= 1");
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  const int64_t M = ad[ad.size() - 2], K = ad.back(), N = bd.back();
  if (bd[bd.size() - 2] != K) {
    return invalid_argument("matmul inner dimensions differ: ", dims_str(ad), " x ", dims_str(bd));
  }
  Dims abatch(ad.begin(), ad.end() - 2), bbatch(bd.begin(), bd.end() - 2), batch;
  KILN_RETURN_IF_ERROR(broadcast_shapes({abatch, bbatch}, &batch));
  MatMulResult r;
  r.m = M;
  r.n = N;
  r.dims = batch;
  if (!a_vec) r.dims.push_back(M);
  if (!b_vec) r.dims.push_back(N);
  r.c.assign(static_cast<size_t>(num_elements(batch) * M * N), 0);
  BroadcastIndexer ix(batch, {abatch, bbatch});
  ix.for_each([&](int64_t bi, const int64_t* off) {
    const int64_t* pa = a.data() + off[0] * M * K;
    const int64_t* pb = b.data() + off[1] * K * N;
    int64_t* pc = r.c.data() + bi * M * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t av = pa[i * K + k];
        for (int64_t j = 0; j < N; ++j) pc[i * N + j] += av * pb[k * N + j];
      }
  });
  return r;
}

Status matmul_integer_kernel(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, {0, 1}));
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  if (!is_8bit(a.dtype())) return unsupported_dtype(ctx.op, a.dtype(), "A");
  if (!is_8bit(b.dtype())) return unsupported_dtype(ctx.op, b.dtype(), "B");
  KILN_ASSIGN_OR_RETURN(auto av, minus_zero_point(a, ctx.input(2), true, "A"));
  KILN_ASSIGN_OR_RETURN(auto bv, minus_zero_point(b, ctx.input(3), false, "B"));
  KILN_ASSIGN_OR_RETURN(MatMulResult r, int_matmul(av, a.dims(), bv, b.dims()));
  Tensor& y = ctx.alloc_output(0, DataType::kInt32, r.dims);
  for (size_t i = 0; i < r.c.size(); ++i) y.data<int32_t>()[i] = static_cast<int32_t>(r.c[i]);
  return Status::ok();
}

// A scale / zero point that is a scalar or a vector indexed by row or column.
Status check_vector_param(const Tensor* t, int64_t n, const char* what) {
  if (!t || t->size() == 1) return Status::ok();
  if (t->size() != n) {
    return invalid_argument(what, " must be a scalar or have ", n, " elements, got shape ", dims_str(t->dims()));
  }
  return Status::ok();
}
double param_at(const Tensor* t, int64_t i) {
  if (!t) return 0;
  return element_as_double(*t, t->size() == 1 ? 0 : i);
}

Status qlinear_matmul_kernel(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, {0, 1, 3, 4, 6}));
  const Tensor& a = *ctx.input(0);
  const Tensor& a_scale = *ctx.input(1);
  const Tensor& b = *ctx.input(3);
  const Tensor& b_scale = *ctx.input(4);
  const Tensor& y_scale = *ctx.input(6);
  const Tensor* y_zp = ctx.input(7);
  if (!is_8bit(a.dtype())) return unsupported_dtype(ctx.op, a.dtype(), "a");
  if (!is_8bit(b.dtype())) return unsupported_dtype(ctx.op, b.dtype(), "b");
  for (const Tensor* s : {&a_scale, &b_scale, &y_scale}) {
    if (!is_float(s->dtype())) return unsupported_dtype(ctx.op, s->dtype(), "scale");
  }
  const DataType out_dt = y_zp ? y_zp->dtype() : a.dtype();
  if (!is_8bit(out_dt)) return unsupported_dtype(ctx.op, out_dt, "y_zero_point");
  // Zero points: a per row, b per column (which is plain broadcasting for b).
  const Tensor* a_zp = ctx.input(2);
  const Tensor* b_zp = ctx.input(5);
  KILN_ASSIGN_OR_RETURN(auto av, minus_zero_point(a, a_zp, true, "a"));
  KILN_ASSIGN_OR_RETURN(auto bv, minus_zero_point(b, b_zp, false, "b"));
  KILN_ASSIGN_OR_RETURN(MatMulResult r, int_matmul(av, a.dims(), bv, b.dims()));
  KILN_RETURN_IF_ERROR(check_vector_param(&a_scale, r.m, "a_scale"));
  KILN_RETURN_IF_ERROR(check_vector_param(&b_scale, r.n, "b_scale"));
  KILN_RETURN_IF_ERROR(check_vector_param(&y_scale, r.m, "y_scale"));
  KILN_RETURN_IF_ERROR(check_vector_param(y_zp, r.m, "y_zero_point"));
  int64_t lo, hi;
  int_range(out_dt, &lo, &hi);
  // The multiplier a_scale * b_scale / y_scale is computed in the scales' own type.
  const DataType sdt = promote(promote(a_scale.dtype(), b_scale.dtype()), y_scale.dtype());
  Tensor& y = ctx.alloc_output(0, out_dt, r.dims);
  const int64_t mn = r.m * r.n;
  for (size_t i = 0; i < r.c.size(); ++i) {
    const int64_t row = (static_cast<int64_t>(i) % mn) / r.n, col = static_cast<int64_t>(i) % r.n;
    double mult = round_to(sdt, round_to(sdt, param_at(&a_scale, row) * param_at(&b_scale, col)) /
                                    param_at(&y_scale, row));
    double v = static_cast<double>(r.c[i]) * mult + param_at(y_zp, row);
    store_int(y, static_cast<int64_t>(i), round_clamp(v, lo, hi));
  }
  return Status::ok();
}

// ---- integer convolution ----

struct ConvGeom {
  int64_t n = 0, c = 0, m = 0, group = 1;
  Dims in, kernel, out, strides, dilations, pad_begin;
};

Status conv_geometry(const KernelContext& ctx, const Tensor& x, const Tensor& w, ConvGeom* g) {
  if (x.rank() < 3) return invalid_argument("input must have rank >= 3 (N, C, spatial...), got ", dims_str(x.dims()));
  if (w.rank() != x.rank()) {
    return invalid_argument("weight rank ", w.rank(), " must equal input rank ", x.rank());
  }
  const int k = x.rank() - 2;
  const Attributes& at = ctx.attr();
  g->n = x.dim(0);
  g->c = x.dim(1);
  g->m = w.dim(0);
  g->group = at.get_int("group", 1);
  if (g->group <= 0) return invalid_argument("group must be positive, got ", g->group);
  if (g->c != w.dim(1) * g->group) {
    return invalid_argument("input channels ", g->c, " must equal weight dim 1 (", w.dim(1), ") times group ", g->group);
  }
  if (g->m % g->group != 0) return invalid_argument("output channels ", g->m, " not divisible by group ", g->group);
  g->in.assign(x.dims().begin() + 2, x.dims().end());
  g->kernel.assign(w.dims().begin() + 2, w.dims().end());
  std::vector<int64_t> ks = at.get_ints("kernel_shape");
  if (!ks.empty() && ks != g->kernel) {
    return invalid_argument("kernel_shape ", dims_str(ks), " does not match weight shape ", dims_str(w.dims()));
  }
  g->strides = at.get_ints("strides", std::vector<int64_t>(static_cast<size_t>(k), 1));
  g->dilations = at.get_ints("dilations", std::vector<int64_t>(static_cast<size_t>(k), 1));
  std::vector<int64_t> pads = at.get_ints("pads", std::vector<int64_t>(static_cast<size_t>(2 * k), 0));
  if (static_cast<int>(g->strides.size()) != k || static_cast<int>(g->dilations.size()) != k ||
      static_cast<int>(pads.size()) != 2 * k) {
    return invalid_argument("strides/dilations need ", k, " values and pads ", 2 * k);
  }
  for (int i = 0; i < k; ++i) {
    if (g->strides[i] <= 0 || g->dilations[i] <= 0) return invalid_argument("strides and dilations must be positive");
    if (pads[i] < 0 || pads[i + k] < 0) return invalid_argument("pads must be non-negative");
  }
  std::string auto_pad = at.get_string("auto_pad", "NOTSET");
  g->out.resize(static_cast<size_t>(k));
  g->pad_begin.resize(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) {
    const int64_t eff = (g->kernel[i] - 1) * g->dilations[i] + 1;
    const int64_t d = g->in[i], s = g->strides[i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      int64_t o = (d + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (o - 1) * s + eff - d);
      g->pad_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g->out[i] = o;
    } else if (auto_pad == "VALID" || auto_pad == "NOTSET") {
      int64_t pb = auto_pad == "VALID" ? 0 : pads[i], pe = auto_pad == "VALID" ? 0 : pads[i + k];
      int64_t span = d + pb + pe - eff;
      if (span < 0) return invalid_argument("kernel extent ", eff, " exceeds padded input size ", d + pb + pe);
      g->pad_begin[i] = pb;
      g->out[i] = span / s + 1;
    } else {
      return invalid_argument("unknown auto_pad '", auto_pad, "'");
    }
  }
  return Status::ok();
}

// out[n][m][o...] = bias[m] + sum over group channels and kernel of x * w.
std::vector<int64_t> conv_int(const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                              const std::vector<int64_t>* bias, const ConvGeom& g) {
  const int64_t in_sp = num_elements(g.in), out_sp = num_elements(g.out), k_sp = num_elements(g.kernel);
  const int64_t cg = g.c / g.group, mg = g.m / g.group;
  const size_t k = g.in.size();
  std::vector<int64_t> out(static_cast<size_t>(g.n * g.m * out_sp), 0);
  std::vector<int64_t> o_idx(k), k_idx(k);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t m = 0; m < g.m; ++m) {
      const int64_t grp = m / mg;
      int64_t* po = out.data() + (n * g.m + m) * out_sp;
      std::fill(o_idx.begin(), o_idx.end(), 0);
      for (int64_t op = 0; op < out_sp; ++op, next_index(o_idx, g.out)) {
        int64_t acc = bias ? (*bias)[static_cast<size_t>(m)] : 0;
        std::fill(k_idx.begin(), k_idx.end(), 0);
        for (int64_t kp = 0; kp < k_sp; ++kp, next_index(k_idx, g.kernel)) {
          int64_t in_off = 0;
          bool inside = true;
          for (size_t d = 0; d < k; ++d) {
            int64_t pos = o_idx[d] * g.strides[d] - g.pad_begin[d] + k_idx[d] * g.dilations[d];
            if (pos < 0 || pos >= g.in[d]) { inside = false; break; }
            in_off = in_off * g.in[d] + pos;
          }
          if (!inside) continue;
          for (int64_t c = 0; c < cg; ++c) {
            const int64_t xc = grp * cg + c;
            acc += x[static_cast<size_t>((n * g.c + xc) * in_sp + in_off)] *
                   w[static_cast<size_t>((m * cg + c) * k_sp + kp)];
          }
        }
        po[op] = acc;
      }
    }
  return out;
}

// Subtracts a per-output-channel (or scalar) weight zero point.
Result<std::vector<int64_t>> weight_minus_zero_point(const Tensor& w, const Tensor* zp) {
  std::vector<int64_t> v(static_cast<size_t>(w.size()));
  for (int64_t i = 0; i < w.size(); ++i) v[static_cast<size_t>(i)] = static_cast<int64_t>(element_as_double(w, i));
  if (!zp) return v;
  if (zp->dtype() != w.dtype()) {
    return invalid_argument("weight zero point dtype ", dtype_name(zp->dtype()), " must match weight dtype ",
                            dtype_name(w.dtype()));
  }
  const int64_t m = w.dim(0), per = m ? w.size() / m : 0;
  if (zp->size() != 1 && (zp->rank() != 1 || zp->size() != m)) {
    return invalid_argument("weight zero point must be a scalar or have ", m, " elements, got shape ",
                            dims_str(zp->dims()));
  }
  for (int64_t i = 0; i < w.size(); ++i) {
    v[static_cast<size_t>(i)] -= static_cast<int64_t>(element_as_double(*zp, zp->size() == 1 ? 0 : i / per));
  }
  return v;
}

Result<std::vector<int64_t>> input_minus_zero_point(const Tensor& x, const Tensor* zp) {
  if (zp && zp->size() != 1) return invalid_argument("input zero point must be a scalar, got shape ", dims_str(zp->dims()));
  return minus_zero_point(x, zp, false, "input");
}

Status conv_integer_kernel(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, {0, 1}));
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  if (!is_8bit(x.dtype())) return unsupported_dtype(ctx.op, x.dtype());
  if (!is_8bit(w.dtype())) return unsupported_dtype(ctx.op, w.dtype(), "weight");
  ConvGeom g;
  KILN_RETURN_IF_ERROR(conv_geometry(ctx, x, w, &g));
  KILN_ASSIGN_OR_RETURN(auto xv, input_minus_zero_point(x, ctx.input(2)));
  KILN_ASSIGN_OR_RETURN(auto wv, weight_minus_zero_point(w, ctx.input(3)));
  std::vector<int64_t> r = conv_int(xv, wv, nullptr, g);
  Dims od = {g.n, g.m};
  od.insert(od.end(), g.out.begin(), g.out.end());
  Tensor& y = ctx.alloc_output(0, DataType::kInt32, od);
  for (size_t i = 0; i < r.size(); ++i) y.data<int32_t>()[i] = static_cast<int32_t>(r[i]);
  return Status::ok();
}

// Inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B.
Status qlinear_conv_kernel(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, {0, 1, 3, 4, 6}));
  const Tensor& x = *ctx.input(0);
  const Tensor& x_scale = *ctx.input(1);
  const Tensor& w = *ctx.input(3);
  const Tensor& w_scale = *ctx.input(4);
  const Tensor& y_scale = *ctx.input(6);
  const Tensor* y_zp = ctx.input(7);
  const Tensor* bias = ctx.input(8);
  if (!is_8bit(x.dtype())) return unsupported_dtype(ctx.op, x.dtype());
  if (!is_8bit(w.dtype())) return unsupported_dtype(ctx.op, w.dtype(), "weight");
  for (const Tensor* s : {&x_scale, &w_scale, &y_scale}) {
    if (!is_float(s->dtype())) return unsupported_dtype(ctx.op, s->dtype(), "scale");
  }
  if (x_scale.size() != 1 || y_scale.size() != 1) return invalid_argument("x_scale and y_scale must be scalars");
  const DataType out_dt = y_zp ? y_zp->dtype() : x.dtype();
  if (!is_8bit(out_dt)) return unsupported_dtype(ctx.op, out_dt, "y_zero_point");
  if (y_zp && y_zp->size() != 1) return invalid_argument("y_zero_point must be a scalar");
  ConvGeom g;
  KILN_RETURN_IF_ERROR(conv_geometry(ctx, x, w, &g));
  if (w_scale.size() != 1 && (w_scale.rank() != 1 || w_scale.size() != g.m)) {
    return invalid_argument("w_scale must be a scalar or have ", g.m, " elements, got shape ", dims_str(w_scale.dims()));
  }
  std::vector<int64_t> b;
  if (bias) {
    if (bias->dtype() != DataType::kInt32) return unsupported_dtype(ctx.op, bias->dtype(), "bias");
    if (bias->rank() != 1 || bias->size() != g.m) {
      return invalid_argument("bias must have shape [", g.m, "], got ", dims_str(bias->dims()));
    }
    b.assign(bias->data<int32_t>(), bias->data<int32_t>() + g.m);
  }
  KILN_ASSIGN_OR_RETURN(auto xv, input_minus_zero_point(x, ctx.input(2)));
  KILN_ASSIGN_OR_RETURN(auto wv, weight_minus_zero_point(w, ctx.input(5)));
  std::vector<int64_t> r = conv_int(xv, wv, bias ? &b : nullptr, g);
  int64_t lo, hi;
  int_range(out_dt, &lo, &hi);
  const DataType sdt = promote(promote(x_scale.dtype(), w_scale.dtype()), y_scale.dtype());
  const double zy = param_at(y_zp, 0);
  Dims od = {g.n, g.m};
  od.insert(od.end(), g.out.begin(), g.out.end());
  Tensor& y = ctx.alloc_output(0, out_dt, od);
  const int64_t out_sp = num_elements(g.out);
  for (size_t i = 0; i < r.size(); ++i) {
    const int64_t m = (static_cast<int64_t>(i) / out_sp) % g.m;
    double mult = round_to(sdt, round_to(sdt, param_at(&x_scale, 0) * param_at(&w_scale, m)) / param_at(&y_scale, 0));
    double v = static_cast<double>(static_cast<int32_t>(r[i])) * mult + zy;
    store_int(y, static_cast<int64_t>(i), round_clamp(v, lo, hi));
  }
  return Status::ok();
}

}  // namespace

void register_qlinear_kernels(KernelRegistry& r) {
  r.add(Op::MatMulInteger, matmul_integer_kernel);
  r.add(Op::QLinearMatMul, qlinear_matmul_kernel);
  r.add(Op::ConvInteger, conv_integer_kernel);
  r.add(Op::QLinearConv, qlinear_conv_kernel);
}

}  // namespace kiln
