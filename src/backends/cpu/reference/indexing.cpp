// Index-driven reference kernels: Gather, GatherElements, GatherND, ScatterElements,
// ScatterND, OneHot, NonZero, Compress, ReverseSequence, Unique, TensorScatter.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/shape_common.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

using shape_detail::check_dims;
using shape_detail::copy_strided;
using shape_detail::read_indices;
using shape_detail::read_ints;

namespace {

// Wraps a negative index into [0, n); error when out of range.
Status wrap_index(int64_t& v, int64_t n, const char* what) {
  if (v < -n || v >= n) return invalid_argument(what, " index ", v, " is out of range [", -n, ", ", n - 1, "]");
  if (v < 0) v += n;
  return Status::ok();
}

int64_t prod(const Dims& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < d.size(); ++i) p *= d[i];
  return p;
}

void copy_elems(void* dst, int64_t di, const void* src, int64_t si, int64_t n, size_t es) {
  if (n <= 0) return;
  std::memcpy(static_cast<std::byte*>(dst) + di * static_cast<int64_t>(es),
              static_cast<const std::byte*>(src) + si * static_cast<int64_t>(es), static_cast<size_t>(n) * es);
}

Status gather_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& ind = *ctx.input(1);
  KILN_ENSURE(x.rank() >= 1, "data must have rank >= 1, got ", x.describe());
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", 0), x.rank(), &axis));
  std::vector<int64_t> idx;
  KILN_RETURN_IF_ERROR(read_indices(ind, "indices", &idx));
  const Dims& d = x.dims();
  const size_t a = static_cast<size_t>(axis);
  const int64_t n = d[a];
  for (int64_t& v : idx) KILN_RETURN_IF_ERROR(wrap_index(v, n, "Gather"));
  Dims out_dims(d.begin(), d.begin() + axis);
  out_dims.insert(out_dims.end(), ind.dims().begin(), ind.dims().end());
  out_dims.insert(out_dims.end(), d.begin() + axis + 1, d.end());
  KILN_RETURN_IF_ERROR(check_dims(out_dims, "Gather output"));
  Tensor& out = ctx.alloc_output(0, x.dtype(), out_dims);
  const int64_t outer = prod(d, 0, a), inner = prod(d, a + 1, d.size());
  const int64_t ni = static_cast<int64_t>(idx.size());
  const size_t es = dtype_size(x.dtype());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < ni; ++j) {
      copy_elems(out.raw(), (o * ni + j) * inner, x.raw(), (o * n + idx[static_cast<size_t>(j)]) * inner, inner, es);
    }
  }
  return Status::ok();
}

// Checks indices/updates of the *Elements ops against data: same rank, no dim larger
// than data's (except along axis), and wraps every index.
Status check_elements_indices(const Tensor& x, const Tensor& ind, int64_t axis, std::vector<int64_t>& idx) {
  KILN_ENSURE(ind.rank() == x.rank(), "indices ", ind.describe(), " must have the rank of data ", x.describe());
  for (int d = 0; d < x.rank(); ++d) {
    KILN_ENSURE(d == axis || ind.dim(d) <= x.dim(d), "indices ", ind.describe(), " is larger than data ", x.describe(),
                " along axis ", d);
  }
  KILN_RETURN_IF_ERROR(read_indices(ind, "indices", &idx));
  for (int64_t& v : idx) KILN_RETURN_IF_ERROR(wrap_index(v, x.dim(static_cast<int>(axis)), "element"));
  return Status::ok();
}

// Calls fn(i, data_offset) for every element i of the indices tensor, with data_offset the
// data element it addresses (index value along axis, own coordinate elsewhere).
template <typename Fn>
void for_each_element_index(const Tensor& x, const Tensor& ind, int64_t axis, const std::vector<int64_t>& idx, Fn&& fn) {
  const Dims xs = contiguous_strides(x.dims());
  const Dims& id = ind.dims();
  std::vector<int64_t> pos(id.size(), 0);
  for (int64_t i = 0; i < ind.size(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < id.size(); ++d) {
      off += (static_cast<int64_t>(d) == axis ? idx[static_cast<size_t>(i)] : pos[d]) * xs[d];
    }
    fn(i, off);
    next_index(pos, id);
  }
}

Status gather_elements_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& ind = *ctx.input(1);
  KILN_ENSURE(x.rank() >= 1, "data must have rank >= 1, got ", x.describe());
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", 0), x.rank(), &axis));
  std::vector<int64_t> idx;
  KILN_RETURN_IF_ERROR(check_elements_indices(x, ind, axis, idx));
  Tensor& out = ctx.alloc_output(0, x.dtype(), ind.dims());
  const size_t es = dtype_size(x.dtype());
  for_each_element_index(x, ind, axis, idx, [&](int64_t i, int64_t off) { copy_elems(out.raw(), i, x.raw(), off, 1, es); });
  return Status::ok();
}

// Resolves each index tuple (last dim of indices) of GatherND/ScatterND into an element
// offset within one batch of data. Returns offsets in row-major order of indices[:-1].
Status nd_offsets(const Tensor& x, const Tensor& ind, int64_t batch_dims, std::vector<int64_t>* offsets,
                  int64_t* slice_size) {
  const int64_t r = x.rank(), q = ind.rank();
  KILN_ENSURE(r >= 1 && q >= 1, "data ", x.describe(), " and indices ", ind.describe(), " must have rank >= 1");
  KILN_ENSURE(batch_dims >= 0 && batch_dims < std::min(r, q), "batch_dims ", batch_dims, " must be in [0, ",
              std::min(r, q), ")");
  const int64_t m = ind.dim(static_cast<int>(q - 1));
  KILN_ENSURE(m >= 0 && m <= r - batch_dims, "indices last dimension ", m, " must be <= data rank - batch_dims (",
              r - batch_dims, ")");
  for (int64_t b = 0; b < batch_dims; ++b) {
    KILN_ENSURE(x.dim(static_cast<int>(b)) == ind.dim(static_cast<int>(b)), "batch dimension ", b, " differs: data ",
                x.describe(), ", indices ", ind.describe());
  }
  std::vector<int64_t> idx;
  KILN_RETURN_IF_ERROR(read_indices(ind, "indices", &idx));
  const Dims& d = x.dims();
  *slice_size = prod(d, static_cast<size_t>(batch_dims + m), d.size());
  const int64_t tuples = m == 0 ? prod(ind.dims(), 0, static_cast<size_t>(q - 1)) : static_cast<int64_t>(idx.size()) / m;
  offsets->resize(static_cast<size_t>(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int64_t k = 0; k < m; ++k) {
      int64_t v = idx[static_cast<size_t>(t * m + k)];
      const int64_t dim = d[static_cast<size_t>(batch_dims + k)];
      KILN_RETURN_IF_ERROR(wrap_index(v, dim, "ND"));
      off = off * dim + v;
    }
    (*offsets)[static_cast<size_t>(t)] = off * *slice_size;
  }
  return Status::ok();
}

Status gather_nd_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& ind = *ctx.input(1);
  const int64_t b = ctx.attr().get_int("batch_dims", 0);
  std::vector<int64_t> offsets;
  int64_t slice = 0;
  KILN_RETURN_IF_ERROR(nd_offsets(x, ind, b, &offsets, &slice));
  const int64_t m = ind.dim(ind.rank() - 1);
  Dims out_dims(ind.dims().begin(), ind.dims().end() - 1);
  out_dims.insert(out_dims.end(), x.dims().begin() + b + m, x.dims().end());
  KILN_RETURN_IF_ERROR(check_dims(out_dims, "GatherND output"));
  Tensor& out = ctx.alloc_output(0, x.dtype(), out_dims);
  const int64_t batches = prod(x.dims(), 0, static_cast<size_t>(b));
  const int64_t per_batch_tuples = batches == 0 ? 0 : static_cast<int64_t>(offsets.size()) / batches;
  const int64_t batch_size = prod(x.dims(), static_cast<size_t>(b), x.dims().size());
  const size_t es = dtype_size(x.dtype());
  for (int64_t bi = 0; bi < batches; ++bi) {
    for (int64_t t = 0; t < per_batch_tuples; ++t) {
      const int64_t k = bi * per_batch_tuples + t;
      copy_elems(out.raw(), k * slice, x.raw(), bi * batch_size + offsets[static_cast<size_t>(k)], slice, es);
    }
  }
  return Status::ok();
}

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Status parse_reduction(const Attributes& attrs, Reduction* out) {
  const std::string r = attrs.get_string("reduction", "none");
  if (r == "none") *out = Reduction::kNone;
  else if (r == "add") *out = Reduction::kAdd;
  else if (r == "mul") *out = Reduction::kMul;
  else if (r == "max") *out = Reduction::kMax;
  else if (r == "min") *out = Reduction::kMin;
  else return invalid_argument("reduction must be none, add, mul, max or min, got '", r, "'");
  return Status::ok();
}

template <typename T>
T reduce(T a, T b, Reduction r) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (r) {
      case Reduction::kNone: return b;
      case Reduction::kAdd: case Reduction::kMax: return a || b;
      case Reduction::kMul: case Reduction::kMin: return a && b;
    }
    return b;
  } else {
    using C = compute_t<T>;
    const C x = to_compute(a), y = to_compute(b);
    switch (r) {
      case Reduction::kNone: return b;
      case Reduction::kAdd: return from_compute<T>(static_cast<C>(x + y));
      case Reduction::kMul: return from_compute<T>(static_cast<C>(x * y));
      case Reduction::kMax: return from_compute<T>(std::max(x, y));
      case Reduction::kMin: return from_compute<T>(std::min(x, y));
    }
    return b;
  }
}

Status scatter_elements_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& ind = *ctx.input(1);
  const Tensor& upd = *ctx.input(2);
  KILN_ENSURE(x.rank() >= 1, "data must have rank >= 1, got ", x.describe());
  KILN_ENSURE(upd.dtype() == x.dtype(), "updates dtype ", dtype_name(upd.dtype()), " differs from data dtype ",
              dtype_name(x.dtype()));
  KILN_ENSURE(upd.dims() == ind.dims(), "updates ", upd.describe(), " must have the shape of indices ", ind.describe());
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", 0), x.rank(), &axis));
  Reduction red;
  KILN_RETURN_IF_ERROR(parse_reduction(ctx.attr(), &red));
  std::vector<int64_t> idx;
  KILN_RETURN_IF_ERROR(check_elements_indices(x, ind, axis, idx));
  Tensor out = x.clone();
  bool ok = dispatch_all(x.dtype(), [&]<typename T>() {
    T* po = out.data<T>();
    const T* pu = upd.data<T>();
    for_each_element_index(x, ind, axis, idx, [&](int64_t i, int64_t off) { po[off] = reduce(po[off], pu[i], red); });
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  ctx.set_output(0, out);
  return Status::ok();
}

Status scatter_nd_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& ind = *ctx.input(1);
  const Tensor& upd = *ctx.input(2);
  KILN_ENSURE(upd.dtype() == x.dtype(), "updates dtype ", dtype_name(upd.dtype()), " differs from data dtype ",
              dtype_name(x.dtype()));
  Reduction red;
  KILN_RETURN_IF_ERROR(parse_reduction(ctx.attr(), &red));
  std::vector<int64_t> offsets;
  int64_t slice = 0;
  KILN_RETURN_IF_ERROR(nd_offsets(x, ind, 0, &offsets, &slice));
  const int64_t m = ind.dim(ind.rank() - 1);
  Dims want(ind.dims().begin(), ind.dims().end() - 1);
  want.insert(want.end(), x.dims().begin() + m, x.dims().end());
  KILN_ENSURE(upd.dims() == want, "updates ", upd.describe(), " must have shape ", dims_str(want));
  Tensor out = x.clone();
  bool ok = dispatch_all(x.dtype(), [&]<typename T>() {
    T* po = out.data<T>();
    const T* pu = upd.data<T>();
    for (size_t t = 0; t < offsets.size(); ++t) {
      for (int64_t e = 0; e < slice; ++e) {
        T& dst = po[offsets[t] + e];
        dst = reduce(dst, pu[static_cast<int64_t>(t) * slice + e], red);
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  ctx.set_output(0, out);
  return Status::ok();
}

Status one_hot_kernel(KernelContext& ctx) {
  const Tensor& ind = *ctx.input(0);
  const Tensor& depth_t = *ctx.input(1);
  const Tensor& values = *ctx.input(2);
  KILN_ENSURE(depth_t.size() == 1 && depth_t.rank() <= 1, "depth must be a scalar, got ", depth_t.describe());
  KILN_ENSURE(values.size() == 2 && values.rank() == 1, "values must be [off_value, on_value], got ", values.describe());
  KILN_ENSURE(ind.dtype() != DataType::kBool && depth_t.dtype() != DataType::kBool,
              "indices and depth must be numeric");
  const double depth_d = depth_t.get_double(0);
  KILN_ENSURE(std::isfinite(depth_d) && depth_d >= 1 && depth_d <= static_cast<double>(shape_detail::kMaxOutputElements),
              "depth must be a positive size, got ", depth_d);
  const int64_t depth = static_cast<int64_t>(depth_d);
  const int64_t r = ind.rank();
  int64_t axis = ctx.attr().get_int("axis", -1);
  KILN_ENSURE(axis >= -(r + 1) && axis <= r, "axis ", axis, " is out of range for output rank ", r + 1);
  if (axis < 0) axis += r + 1;
  Dims out_dims = ind.dims();
  out_dims.insert(out_dims.begin() + axis, depth);
  KILN_RETURN_IF_ERROR(check_dims(out_dims, "OneHot output"));
  const int64_t outer = prod(ind.dims(), 0, static_cast<size_t>(axis));
  const int64_t inner = prod(ind.dims(), static_cast<size_t>(axis), ind.dims().size());
  const size_t es = dtype_size(values.dtype());
  Tensor& out = ctx.alloc_output(0, values.dtype(), out_dims);
  auto* po = static_cast<std::byte*>(out.raw());
  const auto* off_v = static_cast<const std::byte*>(values.raw());
  const auto* on_v = off_v + es;
  for (int64_t i = 0; i < out.size(); ++i) std::memcpy(po + i * static_cast<int64_t>(es), off_v, es);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      const double v = ind.get_double(o * inner + j);
      if (!std::isfinite(v) || v < static_cast<double>(-depth) || v >= static_cast<double>(depth)) continue;  // all off
      int64_t k = static_cast<int64_t>(v);
      if (k < 0) k += depth;
      std::memcpy(po + ((o * depth + k) * inner + j) * static_cast<int64_t>(es), on_v, es);
    }
  }
  return Status::ok();
}

Status non_zero_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  std::vector<int64_t> hits;
  bool ok = dispatch_all(x.dtype(), [&]<typename T>() {
    const T* p = x.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        if (p[i]) hits.push_back(i);
      } else {
        if (to_compute(p[i]) != compute_t<T>(0)) hits.push_back(i);
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  // A scalar behaves like a one-element vector (numpy's nonzero).
  const Dims dims = x.rank() == 0 ? Dims{1} : x.dims();
  const int64_t r = static_cast<int64_t>(dims.size());
  const int64_t n = static_cast<int64_t>(hits.size());
  Tensor& out = ctx.alloc_output(0, DataType::kInt64, {r, n});
  int64_t* po = out.data<int64_t>();
  for (int64_t j = 0; j < n; ++j) {
    int64_t flat = hits[static_cast<size_t>(j)];
    for (int64_t d = r - 1; d >= 0; --d) {
      po[d * n + j] = flat % dims[static_cast<size_t>(d)];
      flat /= dims[static_cast<size_t>(d)];
    }
  }
  return Status::ok();
}

Status compress_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& cond = *ctx.input(1);
  KILN_ENSURE(cond.rank() == 1, "condition must be 1-D, got ", cond.describe());
  KILN_ENSURE(cond.dtype() == DataType::kBool, "condition must be bool, got ", cond.describe());
  Tensor src = x;
  int64_t axis = 0;
  if (ctx.attr().has("axis")) {
    KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", 0), x.rank(), &axis));
    KILN_ENSURE(x.rank() >= 1, "cannot compress a scalar along an axis");
  } else {
    src = x.reshaped({x.size()});
  }
  const int64_t n = src.dim(static_cast<int>(axis));
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond.size(); ++i) {
    if (!cond.data<bool>()[i]) continue;
    KILN_ENSURE(i < n, "condition selects index ", i, " but the axis has size ", n);
    keep.push_back(i);
  }
  Dims out_dims = src.dims();
  out_dims[static_cast<size_t>(axis)] = static_cast<int64_t>(keep.size());
  Tensor& out = ctx.alloc_output(0, x.dtype(), out_dims);
  const int64_t outer = prod(src.dims(), 0, static_cast<size_t>(axis));
  const int64_t inner = prod(src.dims(), static_cast<size_t>(axis) + 1, src.dims().size());
  const int64_t nk = static_cast<int64_t>(keep.size());
  const size_t es = dtype_size(x.dtype());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < nk; ++j) {
      copy_elems(out.raw(), (o * nk + j) * inner, src.raw(), (o * n + keep[static_cast<size_t>(j)]) * inner, inner, es);
    }
  }
  return Status::ok();
}

Status reverse_sequence_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.rank() >= 2, "input must have rank >= 2, got ", x.describe());
  const int64_t batch_axis = ctx.attr().get_int("batch_axis", 1);
  const int64_t time_axis = ctx.attr().get_int("time_axis", 0);
  KILN_ENSURE((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0),
              "batch_axis and time_axis must be 0 and 1 (in some order), got ", batch_axis, " and ", time_axis);
  std::vector<int64_t> lens;
  KILN_RETURN_IF_ERROR(read_ints(*ctx.input(1), "sequence_lens", &lens));
  const int64_t batch = x.dim(static_cast<int>(batch_axis)), seq = x.dim(static_cast<int>(time_axis));
  KILN_ENSURE(static_cast<int64_t>(lens.size()) == batch, "sequence_lens has ", lens.size(),
              " entries but the batch size is ", batch);
  for (int64_t l : lens) KILN_ENSURE(l >= 0 && l <= seq, "sequence length ", l, " is out of range [0, ", seq, "]");
  Tensor out = x.clone();
  const Dims st = contiguous_strides(x.dims());
  const int64_t inner = prod(x.dims(), 2, x.dims().size());
  const size_t es = dtype_size(x.dtype());
  const int64_t bs = st[static_cast<size_t>(batch_axis)], ts = st[static_cast<size_t>(time_axis)];
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    for (int64_t t = 0; t < len; ++t) {
      copy_elems(out.raw(), b * bs + t * ts, x.raw(), b * bs + (len - 1 - t) * ts, inner, es);
    }
  }
  ctx.set_output(0, out);
  return Status::ok();
}

Status tensor_scatter_kernel(KernelContext& ctx) {
  const Tensor& cache = *ctx.input(0);
  const Tensor& upd = *ctx.input(1);
  const std::string mode = ctx.attr().get_string("mode", "linear");
  KILN_ENSURE(mode == "linear" || mode == "circular", "mode must be linear or circular, got '", mode, "'");
  KILN_ENSURE(upd.dtype() == cache.dtype(), "update dtype ", dtype_name(upd.dtype()), " differs from past_cache dtype ",
              dtype_name(cache.dtype()));
  KILN_ENSURE(cache.rank() >= 2 && upd.rank() == cache.rank(), "past_cache ", cache.describe(), " and update ",
              upd.describe(), " must have the same rank >= 2");
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", -2), cache.rank(), &axis));
  KILN_ENSURE(axis >= 1, "axis must not be the batch axis 0");
  for (int d = 0; d < cache.rank(); ++d) {
    KILN_ENSURE(d == axis ? upd.dim(d) <= cache.dim(d) : upd.dim(d) == cache.dim(d), "update ", upd.describe(),
                " does not fit past_cache ", cache.describe(), " in dimension ", d);
  }
  const int64_t batch = cache.dim(0);
  std::vector<int64_t> write(static_cast<size_t>(batch), 0);
  if (ctx.input(2)) {
    KILN_RETURN_IF_ERROR(read_ints(*ctx.input(2), "write_indices", &write));
    KILN_ENSURE(static_cast<int64_t>(write.size()) == batch, "write_indices has ", write.size(),
                " entries but the batch size is ", batch);
  }
  const size_t a = static_cast<size_t>(axis);
  const int64_t max_seq = cache.dims()[a], seq = upd.dims()[a];
  const int64_t outer = prod(cache.dims(), 0, a), per_batch = prod(cache.dims(), 1, a);
  const int64_t inner = prod(cache.dims(), a + 1, cache.dims().size());
  for (int64_t w : write) {
    KILN_ENSURE(w >= 0 && (mode == "circular" || w <= max_seq - seq), "write index ", w, " with ", seq,
                " updates does not fit sequence length ", max_seq);
  }
  Tensor out = cache.clone();
  const size_t es = dtype_size(cache.dtype());
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t b = per_batch == 0 ? 0 : o / per_batch;
    for (int64_t s = 0; s < seq; ++s) {
      int64_t c = write[static_cast<size_t>(b)] + s;
      if (mode == "circular") c %= max_seq;
      copy_elems(out.raw(), (o * max_seq + c) * inner, upd.raw(), (o * seq + s) * inner, inner, es);
    }
  }
  ctx.set_output(0, out);
  return Status::ok();
}

// Total order for Unique: NaNs sort last and compare equal to each other.
template <typename C>
bool less_total(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

Status unique_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const bool sorted = ctx.attr().get_int("sorted", 1) != 0;
  Tensor src = x;
  int64_t axis = 0;
  if (ctx.attr().has("axis")) {
    KILN_ENSURE(x.rank() >= 1, "cannot take unique slices of a scalar");
    KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", 0), x.rank(), &axis));
  } else {
    src = x.reshaped({x.size()});
  }
  const Dims& d = src.dims();
  const int64_t outer = prod(d, 0, static_cast<size_t>(axis));
  const int64_t n = d[static_cast<size_t>(axis)];
  const int64_t inner = prod(d, static_cast<size_t>(axis) + 1, d.size());
  // Slice a holds elements (o, a, i); compare slices lexicographically over (o, i).
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::vector<int64_t> group_of(static_cast<size_t>(n));  // slice -> group, groups in sorted order
  std::vector<int64_t> group_first;                       // group -> first (smallest) slice index
  std::vector<int64_t> group_count;
  bool ok = dispatch_all(x.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* p = src.data<T>();
    auto cmp = [&](int64_t a, int64_t b) -> int {
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          const C va = to_compute(p[(o * n + a) * inner + i]);
          const C vb = to_compute(p[(o * n + b) * inner + i]);
          if (less_total(va, vb)) return -1;
          if (less_total(vb, va)) return 1;
        }
      }
      return 0;
    };
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
    for (size_t k = 0; k < order.size(); ++k) {
      if (k == 0 || cmp(order[k - 1], order[k]) != 0) {
        group_first.push_back(order[k]);
        group_count.push_back(0);
      }
      group_of[static_cast<size_t>(order[k])] = static_cast<int64_t>(group_first.size()) - 1;
      ++group_count.back();
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  const int64_t u = static_cast<int64_t>(group_first.size());
  // Output position of each group: sorted order, or order of first occurrence.
  std::vector<int64_t> groups(static_cast<size_t>(u));
  std::iota(groups.begin(), groups.end(), 0);
  if (!sorted) {
    std::sort(groups.begin(), groups.end(),
              [&](int64_t a, int64_t b) { return group_first[static_cast<size_t>(a)] < group_first[static_cast<size_t>(b)]; });
  }
  std::vector<int64_t> pos_of_group(static_cast<size_t>(u));
  for (int64_t k = 0; k < u; ++k) pos_of_group[static_cast<size_t>(groups[static_cast<size_t>(k)])] = k;

  Dims y_dims = d;
  y_dims[static_cast<size_t>(axis)] = u;
  Tensor& y = ctx.alloc_output(0, x.dtype(), y_dims);
  const size_t es = dtype_size(x.dtype());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < u; ++k) {
      const int64_t s = group_first[static_cast<size_t>(groups[static_cast<size_t>(k)])];
      copy_elems(y.raw(), (o * u + k) * inner, src.raw(), (o * n + s) * inner, inner, es);
    }
  }
  const size_t nout = ctx.outputs.size();
  if (nout > 1) {
    Tensor& t = ctx.alloc_output(1, DataType::kInt64, {u});
    for (int64_t k = 0; k < u; ++k) t.data<int64_t>()[k] = group_first[static_cast<size_t>(groups[static_cast<size_t>(k)])];
  }
  if (nout > 2) {
    Tensor& t = ctx.alloc_output(2, DataType::kInt64, {n});
    for (int64_t a = 0; a < n; ++a) t.data<int64_t>()[a] = pos_of_group[static_cast<size_t>(group_of[static_cast<size_t>(a)])];
  }
  if (nout > 3) {
    Tensor& t = ctx.alloc_output(3, DataType::kInt64, {u});
    for (int64_t k = 0; k < u; ++k) t.data<int64_t>()[k] = group_count[static_cast<size_t>(groups[static_cast<size_t>(k)])];
  }
  return Status::ok();
}

}  // namespace

namespace shape_detail {
void register_indexing_kernels(KernelRegistry& r) {
  r.add(Op::Gather, gather_kernel);
  r.add(Op::GatherElements, gather_elements_kernel);
  r.add(Op::GatherND, gather_nd_kernel);
  r.add(Op::ScatterElements, scatter_elements_kernel);
  r.add(Op::ScatterND, scatter_nd_kernel);
  r.add(Op::OneHot, one_hot_kernel);
  r.add(Op::NonZero, non_zero_kernel);
  r.add(Op::Compress, compress_kernel);
  r.add(Op::ReverseSequence, reverse_sequence_kernel);
  r.add(Op::Unique, unique_kernel);
  r.add(Op::TensorScatter, tensor_scatter_kernel);
}
}  // namespace shape_detail

}  // namespace kiln
