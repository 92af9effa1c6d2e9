// Loss reference kernels: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
// Inputs [N, C, d1, ..., dk] with targets [N, d1, ..., dk]; computed in double.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/reference/transformer_common.h"

namespace kiln {

namespace {

using transformer::wanted;

enum class Reduction { kNone, kSum, kMean };

Status parse_reduction(const Attributes& a, Reduction* out) {
  const std::string r = a.get_string("reduction", "mean");
  if (r == "none") *out = Reduction::kNone;
  else if (r == "sum") *out = Reduction::kSum;
  else if (r == "mean") *out = Reduction::kMean;
  else return invalid_argument("reduction must be 'none', 'sum' or 'mean', got '", r, "'");
  return Status::ok();
}

// Shared driver. `logp(n, c, d)` returns log-probability input element [n, c, d] (d is the
// flattened spatial index) as a double.
struct LossProblem {
  int64_t N = 0, C = 0, D = 1;
  Dims target_dims;
};

Status check_loss_shapes(const Tensor& x, const Tensor& target, const Tensor* weight, LossProblem* p) {
  KILN_ENSURE(x.rank() >= 2, "input must have rank >= 2 ([N, C, ...]), got shape ", dims_str(x.dims()));
  KILN_ENSURE(target.dtype() == DataType::kInt64 || target.dtype() == DataType::kInt32,
              "target must be int32 or int64, got ", dtype_name(target.dtype()));
  p->N = x.dim(0);
  p->C = x.dim(1);
  p->D = 1;
  Dims expect{p->N};
  for (int i = 2; i < x.rank(); ++i) {
    p->D *= x.dim(i);
    expect.push_back(x.dim(i));
  }
  KILN_ENSURE(target.dims() == expect, "target has shape ", dims_str(target.dims()), ", expected ", dims_str(expect),
              " for input shape ", dims_str(x.dims()));
  p->target_dims = expect;
  if (weight) {
    KILN_ENSURE(weight->dtype() == x.dtype(), "weight must have the input dtype ", dtype_name(x.dtype()), ", got ",
                dtype_name(weight->dtype()));
    KILN_ENSURE(weight->rank() == 1 && weight->dim(0) == p->C, "weight must have shape [", p->C, "], got ",
                dims_str(weight->dims()));
  }
  return Status::ok();
}

// Computes the per-element losses -w[t] * logp[n, t, d] and their weights, then reduces.
template <typename T, typename LogP>
Status nll_core(KernelContext& ctx, const LossProblem& p, const Tensor& target, const Tensor* weight, LogP&& logp) {
  const Attributes& a = ctx.attr();
  Reduction red;
  KILN_RETURN_IF_ERROR(parse_reduction(a, &red));
  const bool has_ignore = a.has("ignore_index");
  const int64_t ignore = a.get_int("ignore_index", 0);
  const int64_t count = p.N * p.D;
  std::vector<double> loss(static_cast<size_t>(count)), w(static_cast<size_t>(count));
  for (int64_t n = 0; n < p.N; ++n) {
    for (int64_t dd = 0; dd < p.D; ++dd) {
      const int64_t idx = n * p.D + dd;
      const int64_t t = target.get_int(idx);
      if (has_ignore && t == ignore) {
        loss[static_cast<size_t>(idx)] = 0;
        w[static_cast<size_t>(idx)] = 0;
        continue;
      }
      KILN_ENSURE(t >= 0 && t < p.C, "target value ", t, " at index ", idx, " is outside [0, ", p.C, ")");
      const double wt = weight ? weight->get_double(t) : 1.0;
      loss[static_cast<size_t>(idx)] = -logp(n, t, dd) * wt;
      w[static_cast<size_t>(idx)] = wt;
    }
  }
  const DataType dt = ctx.input(0)->dtype();
  if (red == Reduction::kNone) {
    Tensor& out = ctx.alloc_output(0, dt, p.target_dims);
    T* po = out.data<T>();
    for (int64_t i = 0; i < count; ++i) po[i] = from_compute<T>(static_cast<compute_t<T>>(loss[static_cast<size_t>(i)]));
    return Status::ok();
  }
  double sum = 0, wsum = 0;
  for (int64_t i = 0; i < count; ++i) {
    sum += loss[static_cast<size_t>(i)];
    wsum += w[static_cast<size_t>(i)];
  }
  // Mean divides by the total weight of the non-ignored elements (NaN when there are none).
  const double r = red == Reduction::kSum ? sum : sum / wsum;
  Tensor& out = ctx.alloc_output(0, dt, {});
  out.data<T>()[0] = from_compute<T>(static_cast<compute_t<T>>(r));
  return Status::ok();
}

Status nll_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& target = *ctx.input(1);
  const Tensor* weight = ctx.input(2);
  LossProblem p;
  KILN_RETURN_IF_ERROR(check_loss_shapes(x, target, weight, &p));
  Status st = Status::ok();
  if (!dispatch_float(x.dtype(), [&]<typename T>() {
        const T* px = x.data<T>();
        st = nll_core<T>(ctx, p, target, weight, [&](int64_t n, int64_t c, int64_t dd) {
          return static_cast<double>(to_compute(px[(n * p.C + c) * p.D + dd]));
        });
      })) {
    return unsupported_dtype(ctx.op, x.dtype());
  }
  return st;
}

Status sce_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& target = *ctx.input(1);
  const Tensor* weight = ctx.input(2);
  LossProblem p;
  KILN_RETURN_IF_ERROR(check_loss_shapes(x, target, weight, &p));
  Status st = Status::ok();
  if (!dispatch_float(x.dtype(), [&]<typename T>() {
        // log_softmax over the class axis, in double.
        const T* px = x.data<T>();
        std::vector<double> lp(static_cast<size_t>(x.size()));
        for (int64_t n = 0; n < p.N; ++n) {
          for (int64_t dd = 0; dd < p.D; ++dd) {
            const int64_t base = n * p.C * p.D + dd;
            double m = -INFINITY;
            for (int64_t c = 0; c < p.C; ++c) m = std::max(m, static_cast<double>(to_compute(px[base + c * p.D])));
            double s = 0;
            for (int64_t c = 0; c < p.C; ++c) s += std::exp(static_cast<double>(to_compute(px[base + c * p.D])) - m);
            const double ls = std::log(s);
            for (int64_t c = 0; c < p.C; ++c) {
              lp[static_cast<size_t>(base + c * p.D)] = static_cast<double>(to_compute(px[base + c * p.D])) - m - ls;
            }
          }
        }
        st = nll_core<T>(ctx, p, target, weight, [&](int64_t n, int64_t c, int64_t dd) {
          return lp[static_cast<size_t>((n * p.C + c) * p.D + dd)];
        });
        if (st.is_ok() && wanted(ctx, 1)) {
          Tensor& out = ctx.alloc_output(1, x.dtype(), x.dims());
          T* po = out.data<T>();
          for (int64_t i = 0; i < x.size(); ++i) po[i] = from_compute<T>(static_cast<compute_t<T>>(lp[static_cast<size_t>(i)]));
        }
      })) {
    return unsupported_dtype(ctx.op, x.dtype());
  }
  return st;
}

}  // namespace

namespace transformer {
void register_loss_kernels(KernelRegistry& r) {
  r.add(Op::NegativeLogLikelihoodLoss, nll_kernel);
  r.add(Op::SoftmaxCrossEntropyLoss, sce_kernel);
}
}  // namespace transformer

}  // namespace kiln
