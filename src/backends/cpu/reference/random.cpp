// Random generation reference kernels: RandomUniform, RandomNormal, RandomUniformLike,
// RandomNormalLike, Bernoulli, Multinomial.
//
// With a 'seed' attribute the output is deterministic and, for the ops the ONNX reference
// implements (all but Multinomial), equal to the reference's: numpy's legacy generator
// seeded with int(seed), values drawn in row-major order, converted to the output dtype,
// then scaled and shifted in that dtype. Without 'seed' every execution draws a fresh
// seed from a per-process std::random_device-seeded engine.
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/numpy_random.h"
#include "backends/cpu/reference/shape_common.h"

namespace kiln {

using shape_detail::check_dims;

namespace {

// The generator for this execution: seeded by the 'seed' attribute (a float: int(seed) as
// numpy takes it, wrapped to 32 bits) or freshly. A NaN seed counts as absent, as in the
// ONNX reference.
Status make_generator(const KernelContext& ctx, std::optional<NumpyLegacyRandom>* gen) {
  if (!ctx.attr().has("seed")) {
    gen->emplace(fresh_random_seed());
    return Status::ok();
  }
  const double s = ctx.attr().get_float("seed", 0.0f);
  if (std::isnan(s)) {
    gen->emplace(fresh_random_seed());
    return Status::ok();
  }
  KILN_ENSURE(std::isfinite(s) && std::fabs(s) < 9.2e18, "attribute 'seed' must be a finite float, got ", s);
  const int64_t v = static_cast<int64_t>(std::trunc(s));
  gen->emplace(static_cast<uint32_t>(static_cast<uint64_t>(v)));
  return Status::ok();
}

bool is_random_float_dtype(DataType dt) {
  return dt == DataType::kFloat32 || dt == DataType::kFloat64 || dt == DataType::kFloat16 ||
         dt == DataType::kBFloat16;
}

// The output dtype from 'dtype' (default: `def`), which must be a float type.
Status output_float_dtype(const KernelContext& ctx, DataType def, DataType* out) {
  DataType dt = def;
  if (ctx.attr().has("dtype")) {
    const int64_t d = ctx.attr().get_int("dtype", 1);
    KILN_ENSURE(d > 0 && d <= 64, "attribute 'dtype' (", d, ") is not a valid dtype");
    dt = static_cast<DataType>(d);
  }
  KILN_ENSURE(is_random_float_dtype(dt), "output dtype must be float16, bfloat16, float32 or float64, got ",
              is_supported_dtype(dt) ? dtype_name(dt) : "an unknown dtype");
  *out = dt;
  return Status::ok();
}

// Output shape from the 'shape' attribute (RandomUniform, RandomNormal).
Status shape_from_attr(const KernelContext& ctx, Dims* dims) {
  KILN_ENSURE(ctx.attr().has("shape"), "missing required attribute 'shape'");
  *dims = ctx.attr().get_ints("shape");
  return check_dims(*dims, "attribute 'shape'");
}

enum class Dist { kUniform, kNormal };

// Fills a new float tensor: uniform low + (high - low) * U or normal mean + scale * N.
// As in the reference, the draw is rounded to the output dtype first, then scaled and
// shifted in that dtype (the parameters rounded to it too).
Status fill_random(KernelContext& ctx, Dist dist, DataType dt, const Dims& dims) {
  std::optional<NumpyLegacyRandom> gen;
  KILN_RETURN_IF_ERROR(make_generator(ctx, &gen));
  double mul, add;
  if (dist == Dist::kUniform) {
    const double high = ctx.attr().get_float("high", 1.0f), low = ctx.attr().get_float("low", 0.0f);
    mul = high - low;
    add = low;
  } else {
    mul = ctx.attr().get_float("scale", 1.0f);
    add = ctx.attr().get_float("mean", 0.0f);
  }
  bool ok = dispatch_float(dt, [&]<typename T>() {
    using C = compute_t<T>;
    // Each step rounds to T, like numpy's in-place float16/float32/float64 arithmetic.
    auto round = [](double v) { return to_compute(from_compute<T>(static_cast<C>(v))); };
    auto round_c = [](C v) { return to_compute(from_compute<T>(v)); };
    const C m = round(mul), a = round(add);
    Tensor& out = ctx.alloc_output(0, dt, dims);
    T* po = out.data<T>();
    for (int64_t i = 0; i < out.size(); ++i) {
      const double r = dist == Dist::kUniform ? gen->next_double() : gen->gauss();
      C v = round(r);
      v = round_c(v * m);
      v = round_c(v + a);
      po[i] = from_compute<T>(v);
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, dt, "output");
  return Status::ok();
}

Status random_kernel(KernelContext& ctx, Dist dist) {
  Dims dims;
  KILN_RETURN_IF_ERROR(shape_from_attr(ctx, &dims));
  DataType dt;
  KILN_RETURN_IF_ERROR(output_float_dtype(ctx, DataType::kFloat32, &dt));
  return fill_random(ctx, dist, dt, dims);
}

// The *Like ops: the input gives the shape and, without 'dtype', the output dtype.
Status random_like_kernel(KernelContext& ctx, Dist dist) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(!x.is_sequence() && !x.is_none(), "input must be a tensor");
  DataType dt;
  KILN_RETURN_IF_ERROR(output_float_dtype(ctx, x.dtype(), &dt));
  return fill_random(ctx, dist, dt, x.dims());
}

// Bernoulli: y[i] = 1 with probability x[i], drawn as numpy's binomial(1, x[i]).
Status bernoulli_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(is_float(x.dtype()), "input must be a float tensor of probabilities, got ", dtype_name(x.dtype()));
  DataType dt = x.dtype();
  if (ctx.attr().has("dtype")) {
    const int64_t d = ctx.attr().get_int("dtype", 1);
    dt = static_cast<DataType>(d);
    KILN_ENSURE(d > 0 && d <= 64 && is_supported_dtype(dt) && dt != DataType::kString && !is_low_precision(dt),
                "attribute 'dtype' (", d, ") is not a supported output dtype");
  }
  std::vector<double> p(static_cast<size_t>(x.size()));
  for (int64_t i = 0; i < x.size(); ++i) {
    p[static_cast<size_t>(i)] = x.get_double(i);
    const double v = p[static_cast<size_t>(i)];
    KILN_ENSURE(v >= 0.0 && v <= 1.0, "probabilities must be in [0, 1], got ", v, " at index ", i);
  }
  std::optional<NumpyLegacyRandom> gen;
  KILN_RETURN_IF_ERROR(make_generator(ctx, &gen));
  bool ok = dispatch_all(dt, [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, dt, x.dims());
    T* po = out.data<T>();
    const T zero = convert_element<T>(0), one = convert_element<T>(1);
    for (int64_t i = 0; i < x.size(); ++i) po[i] = gen->bernoulli(p[static_cast<size_t>(i)]) ? one : zero;
  });
  if (!ok) return unsupported_dtype(ctx.op, dt, "output");
  return Status::ok();
}

// Multinomial: input [batch_size, class_size] of unnormalized log-probabilities; output
// [batch_size, sample_size] of class indices, each drawn from softmax(row) by inverting
// the cumulative distribution with one uniform per sample.
Status multinomial_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(is_float(x.dtype()), "input must be a float tensor of logits, got ", dtype_name(x.dtype()));
  KILN_ENSURE(x.rank() == 2, "input must be 2-D [batch_size, class_size], got ", dims_str(x.dims()));
  const int64_t batch = x.dim(0), classes = x.dim(1);
  const int64_t samples = ctx.attr().get_int("sample_size", 1);
  KILN_ENSURE(samples >= 0, "attribute 'sample_size' must be non-negative, got ", samples);
  const DataType dt = static_cast<DataType>(ctx.attr().get_int("dtype", static_cast<int64_t>(DataType::kInt32)));
  KILN_ENSURE(dt == DataType::kInt32 || dt == DataType::kInt64, "attribute 'dtype' must be int32 or int64, got ",
              ctx.attr().get_int("dtype", 6));
  const Dims dims = {batch, samples};
  KILN_RETURN_IF_ERROR(check_dims(dims, "output shape"));
  KILN_ENSURE(batch * samples == 0 || classes > 0, "class_size must be positive to draw samples");
  std::optional<NumpyLegacyRandom> gen;
  KILN_RETURN_IF_ERROR(make_generator(ctx, &gen));
  Tensor& out = ctx.alloc_output(0, dt, dims);
  std::vector<double> cdf(static_cast<size_t>(classes));
  for (int64_t b = 0; b < batch && samples > 0; ++b) {
    double mx = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) {
      const double v = x.get_double(b * classes + c);
      KILN_ENSURE(!std::isnan(v), "logits must not be NaN (row ", b, ", class ", c, ")");
      mx = std::max(mx, v);
    }
    KILN_ENSURE(mx > -INFINITY, "row ", b, " has no class with a finite logit");
    double total = 0.0;
    for (int64_t c = 0; c < classes; ++c) {
      const double v = x.get_double(b * classes + c);
      // With +inf logits, those classes share all the probability.
      const double w = std::isinf(mx) ? (v == mx ? 1.0 : 0.0) : std::exp(v - mx);
      total += w;
      cdf[static_cast<size_t>(c)] = total;
    }
    for (int64_t s = 0; s < samples; ++s) {
      const double u = gen->next_double() * total;
      int64_t k = 0;
      while (k < classes - 1 && !(u < cdf[static_cast<size_t>(k)])) ++k;
      // Never pick a zero-probability class at the end of the range.
      while (k > 0 && cdf[static_cast<size_t>(k)] == cdf[static_cast<size_t>(k - 1)]) --k;
      if (dt == DataType::kInt32) {
        out.data<int32_t>()[b * samples + s] = static_cast<int32_t>(k);
      } else {
        out.data<int64_t>()[b * samples + s] = k;
      }
    }
  }
  return Status::ok();
}

}  // namespace

void register_random_kernels(KernelRegistry& r) {
  r.add(Op::RandomUniform, [](KernelContext& ctx) { return random_kernel(ctx, Dist::kUniform); });
  r.add(Op::RandomNormal, [](KernelContext& ctx) { return random_kernel(ctx, Dist::kNormal); });
  r.add(Op::RandomUniformLike, [](KernelContext& ctx) { return random_like_kernel(ctx, Dist::kUniform); });
  r.add(Op::RandomNormalLike, [](KernelContext& ctx) { return random_like_kernel(ctx, Dist::kNormal); });
  r.add(Op::Bernoulli, bernoulli_kernel);
  r.add(Op::Multinomial, multinomial_kernel);
}

}  // namespace kiln
