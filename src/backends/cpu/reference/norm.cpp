// Normalization reference kernels: BatchNormalization, InstanceNormalization,
// LayerNormalization, GroupNormalization, MeanVarianceNormalization, LRN.
// Statistics are computed in double (two-pass variance).
#include <cmath>

#include <algorithm>
#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/nn_common.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

namespace {

// Population mean and variance of x over the axes flagged in `reduce`. slot[i] is the
// statistics slot of element i (row-major over dims with the reduced axes set to 1).
struct Moments {
  Dims reduced;
  std::vector<int64_t> slot;
  std::vector<double> mean, var;
};

template <typename T>
Moments compute_moments(const Tensor& x, const std::vector<bool>& reduce) {
  Moments m;
  m.reduced = x.dims();
  for (size_t d = 0; d < reduce.size(); ++d) {
    if (reduce[d]) m.reduced[d] = 1;
  }
  const int64_t nslots = num_elements(m.reduced);
  m.mean.assign(static_cast<size_t>(nslots), 0.0);
  m.var.assign(static_cast<size_t>(nslots), 0.0);
  m.slot.assign(static_cast<size_t>(x.size()), 0);
  std::vector<int64_t> count(static_cast<size_t>(nslots), 0);
  const T* px = x.data<T>();
  BroadcastIndexer(x.dims(), {m.reduced}).for_each([&](int64_t i, const int64_t* off) {
    m.slot[static_cast<size_t>(i)] = off[0];
    m.mean[static_cast<size_t>(off[0])] += static_cast<double>(to_compute(px[i]));
    ++count[static_cast<size_t>(off[0])];
  });
  for (size_t s = 0; s < m.mean.size(); ++s) m.mean[s] /= count[s] > 0 ? static_cast<double>(count[s]) : 1.0;
  for (int64_t i = 0; i < x.size(); ++i) {
    const size_t s = static_cast<size_t>(m.slot[static_cast<size_t>(i)]);
    const double dv = static_cast<double>(to_compute(px[i])) - m.mean[s];
    m.var[s] += dv * dv;
  }
  for (size_t s = 0; s < m.var.size(); ++s) m.var[s] /= count[s] > 0 ? static_cast<double>(count[s]) : 1.0;
  return m;
}

// A per-channel parameter vector (scale, bias, mean, var) of length `n`, read as doubles.
Status read_vector(const Tensor* t, int64_t n, const char* what, std::vector<double>* out) {
  KILN_ENSURE(t != nullptr, "input ", what, " is missing");
  KILN_ENSURE(is_float(t->dtype()), "input ", what, " must be a float tensor, got ", dtype_name(t->dtype()));
  KILN_ENSURE(t->size() == n, "input ", what, " has shape ", dims_str(t->dims()), ", expected ", n, " elements");
  out->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (*out)[static_cast<size_t>(i)] = t->get_double(i);
  return Status::ok();
}

// Writes double values into a fresh tensor of dtype dt (a float type).
Tensor tensor_from_doubles(DataType dt, const Dims& dims, const std::vector<double>& v) {
  Tensor t(dt, dims);
  dispatch_float(dt, [&]<typename T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = from_compute<T>(static_cast<compute_t<T>>(v[i]));
  });
  return t;
}

// Channel index of every element of an [N, C, ...] tensor is (i / inner) % C.
int64_t spatial_size(const Tensor& x) {
  int64_t s = 1;
  for (int d = 2; d < x.rank(); ++d) s *= x.dim(d);
  return s;
}

Status batch_norm_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(require_rank_at_least(x, 2, "X"));
  const Attributes& a = ctx.attr();
  const double eps = a.get_float("epsilon", 1e-5f);
  const double momentum = a.get_float("momentum", 0.9f);
  const bool training = a.get_int("training_mode", 0) != 0;
  const int64_t C = x.dim(1);
  std::vector<double> scale, bias, mean, var;
  KILN_RETURN_IF_ERROR(read_vector(ctx.input(1), C, "scale", &scale));
  KILN_RETURN_IF_ERROR(read_vector(ctx.input(2), C, "B", &bias));
  KILN_RETURN_IF_ERROR(read_vector(ctx.input(3), C, "input_mean", &mean));
  KILN_RETURN_IF_ERROR(read_vector(ctx.input(4), C, "input_var", &var));
  const int64_t inner = spatial_size(x);
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    std::vector<double> use_mean = mean, use_var = var;
    if (training) {
      std::vector<bool> reduce(static_cast<size_t>(x.rank()), true);
      reduce[1] = false;
      Moments m = compute_moments<T>(x, reduce);
      use_mean = m.mean;
      use_var = m.var;
    }
    Tensor& y = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) {
      const size_t c = static_cast<size_t>((i / inner) % C);
      const double v = (static_cast<double>(to_compute(px[i])) - use_mean[c]) / std::sqrt(use_var[c] + eps);
      py[i] = from_compute<T>(static_cast<compute_t<T>>(v * scale[c] + bias[c]));
    }
    {  // running statistics (unchanged input statistics outside training mode)
      std::vector<double> rm(static_cast<size_t>(C)), rv(static_cast<size_t>(C));
      for (size_t c = 0; c < rm.size(); ++c) {
        rm[c] = training ? mean[c] * momentum + use_mean[c] * (1 - momentum) : mean[c];
        rv[c] = training ? var[c] * momentum + use_var[c] * (1 - momentum) : var[c];
      }
      if (output_wanted(ctx, 1)) ctx.set_output(1, tensor_from_doubles(ctx.input(3)->dtype(), {C}, rm));
      if (output_wanted(ctx, 2)) ctx.set_output(2, tensor_from_doubles(ctx.input(4)->dtype(), {C}, rv));
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

Status instance_norm_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(require_rank_at_least(x, 3, "input"));
  const double eps = ctx.attr().get_float("epsilon", 1e-5f);
  const int64_t C = x.dim(1);
  std::vector<double> scale, bias;
  KILN_RETURN_IF_ERROR(read_vector(ctx.input(1), C, "scale", &scale));
  KILN_RETURN_IF_ERROR(read_vector(ctx.input(2), C, "B", &bias));
  const int64_t inner = spatial_size(x);
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    std::vector<bool> reduce(static_cast<size_t>(x.rank()), true);
    reduce[0] = reduce[1] = false;
    Moments m = compute_moments<T>(x, reduce);
    Tensor& y = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) {
      const size_t c = static_cast<size_t>((i / inner) % C);
      const size_t s = static_cast<size_t>(m.slot[static_cast<size_t>(i)]);
      const double v = (static_cast<double>(to_compute(px[i])) - m.mean[s]) / std::sqrt(m.var[s] + eps);
      py[i] = from_compute<T>(static_cast<compute_t<T>>(v * scale[c] + bias[c]));
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

Status layer_norm_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& scale = *ctx.input(1);
  const Tensor* bias = ctx.input(2);
  const Attributes& a = ctx.attr();
  KILN_ENSURE(x.rank() >= 1, "X must have rank >= 1");
  int64_t axis = 0;
  KILN_RETURN_IF_ERROR(normalize_axis(a.get_int("axis", -1), x.rank(), &axis));
  const double eps = a.get_float("epsilon", 1e-5f);
  const int64_t stash = a.get_int("stash_type", 1);
  const DataType stash_dt = static_cast<DataType>(stash);
  KILN_ENSURE(stash == static_cast<int64_t>(static_cast<int32_t>(stash)) && is_supported_dtype(stash_dt) &&
                  is_float(stash_dt),
              "attribute 'stash_type' must be a float dtype, got ", stash);
  KILN_ENSURE(scale.dtype() == x.dtype(), "Scale has dtype ", dtype_name(scale.dtype()), " but X has ",
              dtype_name(x.dtype()));
  std::vector<Dims> shapes = {x.dims(), scale.dims()};
  if (bias) {
    KILN_ENSURE(bias->dtype() == x.dtype(), "B has dtype ", dtype_name(bias->dtype()), " but X has ",
                dtype_name(x.dtype()));
    shapes.push_back(bias->dims());
  }
  Dims bdims;
  KILN_RETURN_IF_ERROR(broadcast_shapes(shapes, &bdims));
  KILN_ENSURE(bdims == x.dims(), "Scale ", dims_str(scale.dims()), bias ? cat(" and B ", dims_str(bias->dims())) : "",
              " do not broadcast to X's shape ", dims_str(x.dims()));
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    std::vector<bool> reduce(static_cast<size_t>(x.rank()), false);
    for (int64_t d = axis; d < x.rank(); ++d) reduce[static_cast<size_t>(d)] = true;
    Moments m = compute_moments<T>(x, reduce);
    Tensor& y = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    const T* ps = scale.data<T>();
    const T* pb = bias ? bias->data<T>() : nullptr;
    T* py = y.data<T>();
    BroadcastIndexer(x.dims(), shapes).for_each([&](int64_t i, const int64_t* off) {
      const size_t s = static_cast<size_t>(m.slot[static_cast<size_t>(i)]);
      double v = (static_cast<double>(to_compute(px[i])) - m.mean[s]) / std::sqrt(m.var[s] + eps);
      v *= static_cast<double>(to_compute(ps[off[1]]));
      if (pb) v += static_cast<double>(to_compute(pb[off[2]]));
      py[i] = from_compute<T>(static_cast<compute_t<T>>(v));
    });
    if (output_wanted(ctx, 1)) ctx.set_output(1, tensor_from_doubles(stash_dt, m.reduced, m.mean));
    if (output_wanted(ctx, 2)) {
      std::vector<double> inv(m.var.size());
      for (size_t s = 0; s < inv.size(); ++s) inv[s] = 1.0 / std::sqrt(m.var[s] + eps);
      ctx.set_output(2, tensor_from_doubles(stash_dt, m.reduced, inv));
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// Opset 18 has one scale/bias per group, opset 21 one per channel; told apart by length.
Status group_norm_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(require_rank_at_least(x, 2, "X"));
  const Attributes& a = ctx.attr();
  const double eps = a.get_float("epsilon", 1e-5f);
  KILN_ENSURE(a.has("num_groups"), "attribute 'num_groups' is required");
  const int64_t G = a.get_int("num_groups", 1);
  const int64_t C = x.dim(1);
  KILN_ENSURE(G >= 1 && C % G == 0, "num_groups ", G, " must be >= 1 and divide the channels ", C);
  const Tensor* st = ctx.input(1);
  const bool per_group = st->size() == G && G != C;
  const int64_t n = per_group ? G : C;
  std::vector<double> scale, bias;
  KILN_RETURN_IF_ERROR(read_vector(st, n, "scale", &scale));
  KILN_RETURN_IF_ERROR(read_vector(ctx.input(2), n, "bias", &bias));
  const int64_t inner = spatial_size(x);
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    // View X as [N, G, C/G * spatial] and normalize the last axis.
    const Tensor xv = x.reshaped({x.dim(0), G, C / G * inner});
    Moments m = compute_moments<T>(xv, {false, false, true});
    Tensor& y = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t c = (i / inner) % C;
      const size_t p = static_cast<size_t>(per_group ? c / (C / G) : c);
      const size_t s = static_cast<size_t>(m.slot[static_cast<size_t>(i)]);
      const double v = (static_cast<double>(to_compute(px[i])) - m.mean[s]) / std::sqrt(m.var[s] + eps);
      py[i] = from_compute<T>(static_cast<compute_t<T>>(v * scale[p] + bias[p]));
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

Status mvn_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  std::vector<int64_t> axes = ctx.attr().get_ints("axes", {0, 2, 3});
  KILN_RETURN_IF_ERROR(normalize_axes(axes, x.rank()));
  std::vector<bool> reduce(static_cast<size_t>(x.rank()), false);
  for (int64_t ax : axes) reduce[static_cast<size_t>(ax)] = true;
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    Moments m = compute_moments<T>(x, reduce);
    Tensor& y = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) {
      const size_t s = static_cast<size_t>(m.slot[static_cast<size_t>(i)]);
      // ONNX's function body: (X - mean) / (sqrt(var) + 1e-9).
      const double v = (static_cast<double>(to_compute(px[i])) - m.mean[s]) / (std::sqrt(m.var[s]) + 1e-9);
      py[i] = from_compute<T>(static_cast<compute_t<T>>(v));
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

Status lrn_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(require_rank_at_least(x, 2, "X"));
  const Attributes& a = ctx.attr();
  KILN_ENSURE(a.has("size"), "attribute 'size' is required");
  const int64_t size = a.get_int("size", 1);
  KILN_ENSURE(size >= 1, "attribute 'size' must be >= 1, got ", size);
  const double alpha = a.get_float("alpha", 1e-4f), beta = a.get_float("beta", 0.75f), bias = a.get_float("bias", 1.0f);
  const int64_t C = x.dim(1), inner = spatial_size(x);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;  // floor and ceil of (size-1)/2
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    Tensor& y = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t c = (i / inner) % C;
      const int64_t base = i - c * inner;
      double sq = 0.0;
      for (int64_t j = std::max<int64_t>(0, c - before); j <= std::min(C - 1, c + after); ++j) {
        const double v = static_cast<double>(to_compute(px[base + j * inner]));
        sq += v * v;
      }
      const double v = static_cast<double>(to_compute(px[i])) / std::pow(bias + alpha / static_cast<double>(size) * sq, beta);
      py[i] = from_compute<T>(static_cast<compute_t<T>>(v));
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

}  // namespace

void register_norm_kernels(KernelRegistry& r) {
  r.add(Op::BatchNormalization, batch_norm_kernel);
  r.add(Op::InstanceNormalization, instance_norm_kernel);
  r.add(Op::LayerNormalization, layer_norm_kernel);
  r.add(Op::GroupNormalization, group_norm_kernel);
  r.add(Op::MeanVarianceNormalization, mvn_kernel);
  r.add(Op::LRN, lrn_kernel);
}

}  // namespace kiln
