// Reduction reference kernels: Reduce* (axes as input 1), Softmax/LogSoftmax/Hardmax,
// ArgMax/ArgMin, TopK, CumSum. Float math happens in double; integer sums and products
// wrap (uint64 arithmetic, no signed-overflow UB).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <type_traits>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

namespace {

template <typename T>
inline bool is_nan_value(T v) {
  if constexpr (is_float_v<T>) return std::isnan(static_cast<double>(to_compute(v)));
  else return false;
}

template <typename T>
inline double to_double(T v) {
  if constexpr (std::is_same_v<T, bool>) return v ? 1.0 : 0.0;
  else return static_cast<double>(to_compute(v));
}

// Writes a double result into T: rounding for floats, Cast semantics (truncation) for ints.
template <typename T>
inline T from_double(double v) {
  if constexpr (is_float_v<T>) return from_compute<T>(static_cast<compute_t<T>>(v));
  else return convert_element<T>(v);
}

int64_t prod(const Dims& d, size_t lo, size_t hi) {
  int64_t n = 1;
  for (size_t i = lo; i < hi; ++i) n *= d[i];
  return n;
}

// Reads an optional integer tensor input (axes, k, axis) with a dtype check.
Status read_int_input(const KernelContext& ctx, size_t i, const char* what, std::vector<int64_t>* out) {
  const Tensor* t = ctx.input(i);
  if (!t) return Status::ok();
  KILN_ENSURE(is_integer(t->dtype()), what, " must be an integer tensor, got ", t->describe());
  KILN_ENSURE(t->rank() <= 1, what, " must be a scalar or 1-D tensor, got ", t->describe());
  *out = t->to_int_vector();
  return Status::ok();
}

// ---- Reduce* ----

enum class RK { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// Calls fn(in_index, out_index) for every input element; ostr maps an input multi-index to
// the output offset (0 along reduced dims).
template <typename Fn>
void for_each_mapped(const Dims& dims, const Dims& ostr, Fn&& fn) {
  const int64_t n = num_elements(dims);
  if (n == 0) return;
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t o = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, o);
    for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
      ++idx[static_cast<size_t>(d)];
      o += ostr[static_cast<size_t>(d)];
      if (idx[static_cast<size_t>(d)] < dims[static_cast<size_t>(d)]) break;
      o -= ostr[static_cast<size_t>(d)] * idx[static_cast<size_t>(d)];
      idx[static_cast<size_t>(d)] = 0;
    }
  }
}

template <typename T>
void reduce_typed(RK kind, const Tensor& x, const Dims& ostr, int64_t count, Tensor& out) {
  const T* px = x.data<T>();
  T* po = out.data<T>();
  const int64_t n_out = out.size();
  using C = compute_t<T>;
  if (kind == RK::kMax || kind == RK::kMin) {
    const bool is_max = kind == RK::kMax;
    C init;
    if constexpr (std::numeric_limits<C>::has_infinity) {
      init = is_max ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    } else {
      init = is_max ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
    }
    // (not std::vector: C may be bool)
    std::unique_ptr<C[]> acc(new C[static_cast<size_t>(n_out)]);
    std::fill(acc.get(), acc.get() + n_out, init);
    for_each_mapped(x.dims(), ostr, [&](int64_t i, int64_t o) {
      C v = to_compute(px[i]);
      C& a = acc[static_cast<size_t>(o)];
      if (is_nan_value(a)) return;  // NaN propagates
      if (is_nan_value(v) || (is_max ? v > a : v < a)) a = v;
    });
    for (int64_t o = 0; o < n_out; ++o) po[o] = from_compute<T>(acc[static_cast<size_t>(o)]);
    return;
  }
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (kind == RK::kSum || kind == RK::kProd || kind == RK::kL1 || kind == RK::kSumSquare) {
      // Exact integer arithmetic, wrapping like the element type.
      std::vector<uint64_t> acc(static_cast<size_t>(n_out), kind == RK::kProd ? 1 : 0);
      for_each_mapped(x.dims(), ostr, [&](int64_t i, int64_t o) {
        T v = px[i];
        uint64_t u = static_cast<uint64_t>(static_cast<int64_t>(v));
        if constexpr (std::is_unsigned_v<T>) u = static_cast<uint64_t>(v);
        uint64_t& a = acc[static_cast<size_t>(o)];
        switch (kind) {
          case RK::kSum: a += u; break;
          case RK::kProd: a *= u; break;
          case RK::kL1: a += (std::is_signed_v<T> && v < 0) ? uint64_t{0} - u : u; break;
          default: a += u * u; break;
        }
      });
      for (int64_t o = 0; o < n_out; ++o) po[o] = static_cast<T>(acc[static_cast<size_t>(o)]);
      return;
    }
  }
  // Everything else in double.
  std::vector<double> mx;
  if (kind == RK::kLogSumExp) {
    // Shift by the largest finite value per output for stability (0 if none is finite).
    mx.assign(static_cast<size_t>(n_out), -std::numeric_limits<double>::infinity());
    for_each_mapped(x.dims(), ostr, [&](int64_t i, int64_t o) {
      double v = to_double(px[i]);
      if (std::isfinite(v)) mx[static_cast<size_t>(o)] = std::max(mx[static_cast<size_t>(o)], v);
    });
    for (double& m : mx) {
      if (!std::isfinite(m)) m = 0.0;
    }
  }
  std::vector<double> acc(static_cast<size_t>(n_out), kind == RK::kProd ? 1.0 : 0.0);
  for_each_mapped(x.dims(), ostr, [&](int64_t i, int64_t o) {
    double v = to_double(px[i]);
    double& a = acc[static_cast<size_t>(o)];
    switch (kind) {
      case RK::kSum:
      case RK::kMean:
      case RK::kLogSum: a += v; break;
      case RK::kProd: a *= v; break;
      case RK::kL1: a += std::fabs(v); break;
      case RK::kL2:
      case RK::kSumSquare: a += v * v; break;
      case RK::kLogSumExp: a += std::exp(v - mx[static_cast<size_t>(o)]); break;
      default: break;
    }
  });
  for (int64_t o = 0; o < n_out; ++o) {
    double a = acc[static_cast<size_t>(o)];
    double r = a;
    switch (kind) {
      case RK::kMean: r = a / static_cast<double>(count); break;
      case RK::kL2: r = std::sqrt(a); break;
      case RK::kLogSum: r = std::log(a); break;
      case RK::kLogSumExp: r = mx[static_cast<size_t>(o)] + std::log(a); break;
      default: break;
    }
    po[o] = from_double<T>(r);
  }
}

Status reduce_kernel(KernelContext& ctx, RK kind) {
  const Tensor& x = *ctx.input(0);
  std::vector<int64_t> axes;
  KILN_RETURN_IF_ERROR(read_int_input(ctx, 1, "axes", &axes));
  const bool keepdims = ctx.attr().get_int("keepdims", 1) != 0;
  const bool noop = ctx.attr().get_int("noop_with_empty_axes", 0) != 0;
  const int64_t rank = x.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  if (axes.empty()) {
    // Reduce all axes, or none with noop_with_empty_axes (the op then acts elementwise,
    // e.g. ReduceSumSquare squares).
    if (!noop) std::fill(reduced.begin(), reduced.end(), true);
  } else {
    for (int64_t& a : axes) {
      KILN_ENSURE(a >= -rank && a < rank, "axis ", a, " is out of range for rank ", rank);
      if (a < 0) a += rank;
    }
    KILN_RETURN_IF_ERROR(normalize_axes(axes, rank));
    for (int64_t a : axes) reduced[static_cast<size_t>(a)] = true;
  }
  Dims keep_dims, out_dims;
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t sz = x.dims()[static_cast<size_t>(d)];
    if (reduced[static_cast<size_t>(d)]) {
      count *= sz;
      keep_dims.push_back(1);
      if (keepdims) out_dims.push_back(1);
    } else {
      keep_dims.push_back(sz);
      out_dims.push_back(sz);
    }
  }
  Dims cs = contiguous_strides(keep_dims);
  Dims ostr(static_cast<size_t>(rank), 0);
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[static_cast<size_t>(d)]) ostr[static_cast<size_t>(d)] = cs[static_cast<size_t>(d)];
  }
  const DataType dt = x.dtype();
  auto run = [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, dt, out_dims);
    reduce_typed<T>(kind, x, ostr, count, out);
  };
  bool ok = (kind == RK::kMax || kind == RK::kMin) ? dispatch_all(dt, run) : dispatch_numeric(dt, run);
  if (!ok) return unsupported_dtype(ctx.op, dt);
  return Status::ok();
}

// ---- Softmax / LogSoftmax / Hardmax ----

enum class SK { kSoftmax, kLogSoftmax, kHardmax };

// Splits x into [outer, n, inner] around the softmax axis (legacy: [outer, n] with inner 1).
Status softmax_geometry(const KernelContext& ctx, int64_t* outer, int64_t* n, int64_t* inner) {
  const Tensor& x = *ctx.input(0);
  Dims dims = x.dims();
  if (dims.empty()) dims.push_back(1);
  const int64_t rank = static_cast<int64_t>(dims.size());
  const bool coerce = ctx.attr().get_int("kiln_coerce_2d", 0) != 0;
  int64_t axis = ctx.attr().get_int("axis", coerce ? 1 : -1);
  if (coerce) {
    // Old semantics: axis may equal rank (then everything is "outer").
    KILN_ENSURE(axis >= -rank && axis <= rank, "axis ", axis, " is out of range for rank ", x.rank());
    if (axis < 0) axis += rank;
    *outer = prod(dims, 0, static_cast<size_t>(axis));
    *n = prod(dims, static_cast<size_t>(axis), dims.size());
    *inner = 1;
  } else {
    KILN_RETURN_IF_ERROR(normalize_axis(axis, rank, &axis));
    *outer = prod(dims, 0, static_cast<size_t>(axis));
    *n = dims[static_cast<size_t>(axis)];
    *inner = prod(dims, static_cast<size_t>(axis) + 1, dims.size());
  }
  return Status::ok();
}

Status softmax_kernel(KernelContext& ctx, SK kind) {
  const Tensor& x = *ctx.input(0);
  int64_t outer = 0, n = 0, inner = 0;
  KILN_RETURN_IF_ERROR(softmax_geometry(ctx, &outer, &n, &inner));
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, x.dtype(), x.dims());
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        const int64_t base = o * n * inner + in;
        auto at = [&](int64_t k) { return base + k * inner; };
        if (kind == SK::kHardmax) {
          int64_t best = 0;
          double bv = n > 0 ? to_double(px[at(0)]) : 0.0;
          for (int64_t k = 1; k < n; ++k) {
            double v = to_double(px[at(k)]);
            if (!std::isnan(bv) && (std::isnan(v) || v > bv)) {
              bv = v;
              best = k;
            }
          }
          for (int64_t k = 0; k < n; ++k) po[at(k)] = from_double<T>(k == best ? 1.0 : 0.0);
          continue;
        }
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t k = 0; k < n; ++k) mx = std::max(mx, to_double(px[at(k)]));
        double sum = 0.0;
        for (int64_t k = 0; k < n; ++k) sum += std::exp(to_double(px[at(k)]) - mx);
        const double log_sum = std::log(sum);
        for (int64_t k = 0; k < n; ++k) {
          double d = to_double(px[at(k)]) - mx;
          po[at(k)] = from_double<T>(kind == SK::kSoftmax ? std::exp(d) / sum : d - log_sum);
        }
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// ---- ArgMax / ArgMin ----

Status arg_kernel(KernelContext& ctx, bool is_max) {
  const Tensor& x = *ctx.input(0);
  const int64_t rank = x.rank();
  const bool keepdims = ctx.attr().get_int("keepdims", 1) != 0;
  const bool last = ctx.attr().get_int("select_last_index", 0) != 0;
  int64_t axis = ctx.attr().get_int("axis", 0);
  KILN_RETURN_IF_ERROR(normalize_axis(axis, rank, &axis));
  Dims dims = x.dims();
  if (dims.empty()) dims.push_back(1);
  const int64_t n = dims[static_cast<size_t>(axis)];
  KILN_ENSURE(n > 0, "cannot take ", is_max ? "ArgMax" : "ArgMin", " over an empty axis of ", x.describe());
  const int64_t outer = prod(dims, 0, static_cast<size_t>(axis));
  const int64_t inner = prod(dims, static_cast<size_t>(axis) + 1, dims.size());
  Dims out_dims;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != axis) out_dims.push_back(x.dims()[static_cast<size_t>(d)]);
    else if (keepdims) out_dims.push_back(1);
  }
  bool ok = dispatch_all(x.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, DataType::kInt64, out_dims);
    const T* px = x.data<T>();
    int64_t* po = out.data<int64_t>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        const int64_t base = o * n * inner + in;
        int64_t best = 0;
        auto bv = to_compute(px[base]);
        for (int64_t k = 1; k < n; ++k) {
          auto v = to_compute(px[base + k * inner]);
          // NaN wins (numpy: the first NaN; with select_last_index, the last one).
          bool take;
          if (is_nan_value(bv)) take = last && is_nan_value(v);
          else if (is_nan_value(v)) take = true;
          else if (v == bv) take = last;
          else take = is_max ? v > bv : v < bv;
          if (take) {
            bv = v;
            best = k;
          }
        }
        po[o * inner + in] = best;
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// ---- TopK ----

Status topk_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(ctx.input(1) != nullptr, "TopK needs the K input");
  std::vector<int64_t> kv;
  KILN_RETURN_IF_ERROR(read_int_input(ctx, 1, "K", &kv));
  KILN_ENSURE(kv.size() == 1, "K must have exactly one element, got ", ctx.input(1)->describe());
  const int64_t k = kv[0];
  const int64_t rank = x.rank();
  KILN_ENSURE(rank >= 1, "TopK input must have rank >= 1, got ", x.describe());
  int64_t axis = ctx.attr().get_int("axis", -1);
  KILN_RETURN_IF_ERROR(normalize_axis(axis, rank, &axis));
  const bool largest = ctx.attr().get_int("largest", 1) != 0;
  const Dims& dims = x.dims();
  const int64_t n = dims[static_cast<size_t>(axis)];
  KILN_ENSURE(k >= 0 && k <= n, "K = ", k, " is out of range for axis ", axis, " of size ", n);
  const int64_t outer = prod(dims, 0, static_cast<size_t>(axis));
  const int64_t inner = prod(dims, static_cast<size_t>(axis) + 1, dims.size());
  Dims out_dims = dims;
  out_dims[static_cast<size_t>(axis)] = k;
  bool ok = dispatch_numeric(x.dtype(), [&]<typename T>() {
    Tensor& vals = ctx.alloc_output(0, x.dtype(), out_dims);
    Tensor& inds = ctx.alloc_output(1, DataType::kInt64, out_dims);
    const T* px = x.data<T>();
    T* pv = vals.data<T>();
    int64_t* pi = inds.data<int64_t>();
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        const int64_t base = o * n * inner + in;
        auto val = [&](int64_t i) { return to_compute(px[base + i * inner]); };
        // NaN sorts as the largest value (numpy order); ties keep the smaller index first.
        auto greater = [&](int64_t a, int64_t b) {
          auto va = val(a), vb = val(b);
          if (is_nan_value(va) || is_nan_value(vb)) return is_nan_value(va) && !is_nan_value(vb);
          return va > vb;
        };
        std::iota(order.begin(), order.end(), int64_t{0});
        if (largest) {
          std::stable_sort(order.begin(), order.end(), greater);
        } else {
          std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return greater(b, a); });
        }
        for (int64_t j = 0; j < k; ++j) {
          const int64_t src = order[static_cast<size_t>(j)];
          pv[o * k * inner + j * inner + in] = px[base + src * inner];
          pi[o * k * inner + j * inner + in] = src;
        }
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

// ---- CumSum ----

Status cumsum_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(ctx.input(1) != nullptr, "CumSum needs the axis input");
  std::vector<int64_t> av;
  KILN_RETURN_IF_ERROR(read_int_input(ctx, 1, "axis", &av));
  KILN_ENSURE(av.size() == 1, "axis must have exactly one element, got ", ctx.input(1)->describe());
  const int64_t rank = x.rank();
  KILN_ENSURE(rank >= 1, "CumSum input must have rank >= 1, got ", x.describe());
  int64_t axis = av[0];
  KILN_RETURN_IF_ERROR(normalize_axis(axis, rank, &axis));
  const bool exclusive = ctx.attr().get_int("exclusive", 0) != 0;
  const bool reverse = ctx.attr().get_int("reverse", 0) != 0;
  const Dims& dims = x.dims();
  const int64_t n = dims[static_cast<size_t>(axis)];
  const int64_t outer = prod(dims, 0, static_cast<size_t>(axis));
  const int64_t inner = prod(dims, static_cast<size_t>(axis) + 1, dims.size());
  bool ok = dispatch_numeric(x.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, x.dtype(), dims);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        const int64_t base = o * n * inner + in;
        // Floats sum in double, integers in wrapping uint64.
        std::conditional_t<is_float_v<T>, double, uint64_t> s = 0;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t i = base + (reverse ? n - 1 - j : j) * inner;
          decltype(s) v;
          if constexpr (is_float_v<T>) v = to_double(px[i]);
          else if constexpr (std::is_unsigned_v<T>) v = static_cast<uint64_t>(px[i]);
          else v = static_cast<uint64_t>(static_cast<int64_t>(px[i]));
          if (exclusive) {
            if constexpr (is_float_v<T>) po[i] = from_double<T>(s);
            else po[i] = static_cast<T>(s);
            s += v;
          } else {
            s += v;
            if constexpr (is_float_v<T>) po[i] = from_double<T>(s);
            else po[i] = static_cast<T>(s);
          }
        }
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

}  // namespace

void register_reduction_kernels(KernelRegistry& r) {
  r.add(Op::ReduceSum, [](KernelContext& c) { return reduce_kernel(c, RK::kSum); });
  r.add(Op::ReduceMean, [](KernelContext& c) { return reduce_kernel(c, RK::kMean); });
  r.add(Op::ReduceMax, [](KernelContext& c) { return reduce_kernel(c, RK::kMax); });
  r.add(Op::ReduceMin, [](KernelContext& c) { return reduce_kernel(c, RK::kMin); });
  r.add(Op::ReduceProd, [](KernelContext& c) { return reduce_kernel(c, RK::kProd); });
  r.add(Op::ReduceL1, [](KernelContext& c) { return reduce_kernel(c, RK::kL1); });
  r.add(Op::ReduceL2, [](KernelContext& c) { return reduce_kernel(c, RK::kL2); });
  r.add(Op::ReduceLogSum, [](KernelContext& c) { return reduce_kernel(c, RK::kLogSum); });
  r.add(Op::ReduceLogSumExp, [](KernelContext& c) { return reduce_kernel(c, RK::kLogSumExp); });
  r.add(Op::ReduceSumSquare, [](KernelContext& c) { return reduce_kernel(c, RK::kSumSquare); });
  r.add(Op::Softmax, [](KernelContext& c) { return softmax_kernel(c, SK::kSoftmax); });
  r.add(Op::LogSoftmax, [](KernelContext& c) { return softmax_kernel(c, SK::kLogSoftmax); });
  r.add(Op::Hardmax, [](KernelContext& c) { return softmax_kernel(c, SK::kHardmax); });
  r.add(Op::ArgMax, [](KernelContext& c) { return arg_kernel(c, true); });
  r.add(Op::ArgMin, [](KernelContext& c) { return arg_kernel(c, false); });
  r.add(Op::TopK, topk_kernel);
  r.add(Op::CumSum, cumsum_kernel);
}

}  // namespace kiln
