// Pooling reference kernels: MaxPool (with Indices), AveragePool, LpPool and the global forms.
#include <cmath>
#include <limits>

#include <algorithm>
#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/nn_common.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

namespace {

enum class PoolKind { kMax, kAverage, kLp };

// Reads the shared pooling attributes and computes the geometry for input x.
Status pool_geometry(const KernelContext& ctx, const Tensor& x, bool allow_ceil, WindowGeometry* g) {
  KILN_RETURN_IF_ERROR(require_rank_at_least(x, 3, "X"));
  const Attributes& a = ctx.attr();
  const size_t nsp = static_cast<size_t>(x.rank() - 2);
  KILN_ENSURE(a.has("kernel_shape"), "attribute 'kernel_shape' is required");
  KILN_RETURN_IF_ERROR(spatial_ints(a, "kernel_shape", nsp, 1, 1, &g->kernel));
  KILN_RETURN_IF_ERROR(spatial_ints(a, "strides", nsp, 1, 1, &g->strides));
  KILN_RETURN_IF_ERROR(spatial_ints(a, "dilations", nsp, 1, 1, &g->dilations));
  KILN_RETURN_IF_ERROR(spatial_pads(a, nsp, &g->pads));
  g->in.assign(x.dims().begin() + 2, x.dims().end());
  const bool ceil_mode = allow_ceil && a.get_int("ceil_mode", 0) != 0;
  return compute_window_geometry(a.get_string("auto_pad", "NOTSET"), ceil_mode, g);
}

Status pool_kernel(KernelContext& ctx, PoolKind kind) {
  const Tensor& x = *ctx.input(0);
  WindowGeometry g;
  KILN_RETURN_IF_ERROR(pool_geometry(ctx, x, true, &g));
  const Attributes& a = ctx.attr();
  const bool count_pad = a.get_int("count_include_pad", 0) != 0;
  const int64_t p = a.get_int("p", 2);
  if (kind == PoolKind::kLp) KILN_ENSURE(p >= 1, "attribute 'p' must be >= 1, got ", p);
  const int64_t storage_order = a.get_int("storage_order", 0);
  KILN_ENSURE(storage_order == 0 || storage_order == 1, "attribute 'storage_order' must be 0 or 1, got ",
              storage_order);
  const bool want_indices = kind == PoolKind::kMax && output_wanted(ctx, 1);

  Dims out_dims = {x.dim(0), x.dim(1)};
  out_dims.insert(out_dims.end(), g.out.begin(), g.out.end());
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(out_dims, &total));
  const size_t nsp = g.nsp();
  WindowTaps taps;
  KILN_RETURN_IF_ERROR(WindowTaps::create(g.in, g.kernel, g.strides, g.dilations, Dims(g.pads.begin(), g.pads.begin() + static_cast<long>(nsp)),
                                          Dims(g.pads.begin() + static_cast<long>(nsp), g.pads.end()), &taps));
  const int64_t planes = x.dim(0) * x.dim(1);
  const int64_t in_sp = num_elements(g.in), out_sp = num_elements(g.out);
  // Column-major spatial offsets for storage_order = 1.
  std::vector<int64_t> colmajor;
  if (want_indices && storage_order == 1) {
    colmajor.resize(static_cast<size_t>(in_sp));
    std::vector<int64_t> idx(g.nsp(), 0);
    int64_t i = 0;
    if (in_sp > 0) {
      do {
        int64_t off = 0, mul = 1;
        for (size_t d = 0; d < g.nsp(); ++d) {
          off += idx[d] * mul;
          mul *= g.in[d];
        }
        colmajor[static_cast<size_t>(i++)] = off;
      } while (next_index(idx, g.in));
    }
  }

  auto run = [&]<typename T>() {
    int64_t* pi = want_indices ? ctx.alloc_output(1, DataType::kInt64, out_dims).data<int64_t>() : nullptr;
    T* py = ctx.alloc_output(0, x.dtype(), out_dims).data<T>();
    const T* px = x.data<T>();
    if (total == 0) return;
    std::vector<int64_t> pos(nsp, 0);
    int64_t o = 0;
    do {  // every output position; its window is shared by all planes
      const int64_t padded_count = taps.compute(pos);
      const std::vector<int64_t>& offs = taps.offsets();
      for (int64_t pl = 0; pl < planes; ++pl) {
        const T* xp = px + pl * in_sp;
        const int64_t yi = pl * out_sp + o;
        if (kind == PoolKind::kMax) {
          int64_t best = -1;
          for (int64_t off : offs) {
            if (off < 0) continue;
            if (best < 0 || to_compute(xp[off]) > to_compute(xp[best])) best = off;
          }
          py[yi] = best >= 0 ? xp[best] : from_compute<T>(compute_t<T>(0));
          if (pi) {
            pi[yi] = best < 0 ? -1 : pl * in_sp + (storage_order == 1 ? colmajor[static_cast<size_t>(best)] : best);
          }
          continue;
        }
        double acc = 0.0;
        int64_t count = 0;
        for (int64_t off : offs) {
          if (off < 0) continue;
          const double v = static_cast<double>(to_compute(xp[off]));
          acc += kind == PoolKind::kLp ? std::pow(std::fabs(v), static_cast<double>(p)) : v;
          ++count;
        }
        if (count_pad) count = padded_count;
        const double r = kind == PoolKind::kLp ? std::pow(acc, 1.0 / static_cast<double>(p))
                                               : acc / static_cast<double>(count);
        py[yi] = from_compute<T>(static_cast<compute_t<T>>(r));
      }
      ++o;
    } while (next_index(pos, g.out));
  };
  bool ok = false;
  if (kind == PoolKind::kMax) {
    ok = dispatch_numeric(x.dtype(), run);
  } else {
    ok = dispatch_float(x.dtype(), run);
  }
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// The registered kernels honour kiln_layout (NHWC: X and Y channels-last, run_with_layout).
Status max_pool_nchw(KernelContext& ctx) { return pool_kernel(ctx, PoolKind::kMax); }
Status average_pool_nchw(KernelContext& ctx) { return pool_kernel(ctx, PoolKind::kAverage); }
Status lp_pool_nchw(KernelContext& ctx) { return pool_kernel(ctx, PoolKind::kLp); }
Status max_pool_kernel(KernelContext& ctx) { return run_with_layout(ctx, max_pool_nchw, {0}); }
Status average_pool_kernel(KernelContext& ctx) { return run_with_layout(ctx, average_pool_nchw, {0}); }
Status lp_pool_kernel(KernelContext& ctx) { return run_with_layout(ctx, lp_pool_nchw, {0}); }

Status global_pool_kernel(KernelContext& ctx, PoolKind kind) {
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(require_rank_at_least(x, 3, "X"));
  const int64_t p = ctx.attr().get_int("p", 2);
  if (kind == PoolKind::kLp) KILN_ENSURE(p >= 1, "attribute 'p' must be >= 1, got ", p);
  Dims out_dims(x.dims().size(), 1);
  out_dims[0] = x.dim(0);
  out_dims[1] = x.dim(1);
  const int64_t planes = x.dim(0) * x.dim(1);
  const int64_t sp = num_elements(Dims(x.dims().begin() + 2, x.dims().end()));
  if (kind == PoolKind::kMax) KILN_ENSURE(sp > 0 || planes == 0, "GlobalMaxPool of an empty spatial extent");
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    Tensor& y = ctx.alloc_output(0, x.dtype(), out_dims);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* xp = px + pl * sp;
      double r = 0.0;
      if (kind == PoolKind::kMax) {
        r = static_cast<double>(to_compute(xp[0]));
        for (int64_t i = 1; i < sp; ++i) {
          const double v = static_cast<double>(to_compute(xp[i]));
          if (v > r) r = v;
        }
      } else {
        for (int64_t i = 0; i < sp; ++i) {
          const double v = static_cast<double>(to_compute(xp[i]));
          r += kind == PoolKind::kLp ? std::pow(std::fabs(v), static_cast<double>(p)) : v;
        }
        r = kind == PoolKind::kLp ? std::pow(r, 1.0 / static_cast<double>(p)) : r / static_cast<double>(sp);
      }
      py[pl] = from_compute<T>(static_cast<compute_t<T>>(r));
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

Status global_average_pool_nchw(KernelContext& ctx) { return global_pool_kernel(ctx, PoolKind::kAverage); }
Status global_max_pool_nchw(KernelContext& ctx) { return global_pool_kernel(ctx, PoolKind::kMax); }
Status global_lp_pool_nchw(KernelContext& ctx) { return global_pool_kernel(ctx, PoolKind::kLp); }
Status global_average_pool_kernel(KernelContext& ctx) { return run_with_layout(ctx, global_average_pool_nchw, {0}); }
Status global_max_pool_kernel(KernelContext& ctx) { return run_with_layout(ctx, global_max_pool_nchw, {0}); }
Status global_lp_pool_kernel(KernelContext& ctx) { return run_with_layout(ctx, global_lp_pool_nchw, {0}); }

}  // namespace

void register_pool_kernels(KernelRegistry& r) {
  r.add(Op::MaxPool, max_pool_kernel);
  r.add(Op::AveragePool, average_pool_kernel);
  r.add(Op::LpPool, lp_pool_kernel);
  r.add(Op::GlobalAveragePool, global_average_pool_kernel);
  r.add(Op::GlobalMaxPool, global_max_pool_kernel);
  r.add(Op::GlobalLpPool, global_lp_pool_kernel);
}

}  // namespace kiln
