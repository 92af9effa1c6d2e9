// kiln's fast data-movement kernels: copies for the shape-only ops (Reshape, Flatten,
// Squeeze, Unsqueeze, Identity), Transpose (row copies or 16x16 tiles), Concat, Split,
// Gather, Slice and Cast. Any fixed-size dtype moves as raw elements of its size; the
// output shapes come from prepare(), so shape inputs are never read at run time.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/fast/fast_common.h"
#include "backends/cpu/fast/geometry.h"

namespace kiln::fast {

// ---- geometry shared with the CUDA kernels (geometry.h) ----

Status axis_geometry(const Dims& dims, int64_t axis, int64_t* outer, int64_t* inner, int64_t* norm_axis) {
  const int64_t r = static_cast<int64_t>(dims.size());
  KILN_ENSURE(axis >= -r && axis < r, "axis ", axis, " out of range for rank ", r);
  if (axis < 0) axis += r;
  *outer = *inner = 1;
  for (int64_t d = 0; d < r; ++d) {
    if (d < axis) *outer *= dims[static_cast<size_t>(d)];
    if (d > axis) *inner *= dims[static_cast<size_t>(d)];
  }
  *norm_axis = axis;
  return Status::ok();
}

Status transpose_perm(int64_t rank, const std::vector<int64_t>& perm_attr, bool has_perm, std::vector<int64_t>* perm) {
  const int64_t r = rank;
  *perm = perm_attr;
  if (!has_perm) {
    perm->clear();
    for (int64_t i = r - 1; i >= 0; --i) perm->push_back(i);
  }
  KILN_ENSURE(static_cast<int64_t>(perm->size()) == r, "Transpose: perm does not match the rank");
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (int64_t& p : *perm) {
    if (p < 0) p += r;
    KILN_ENSURE(p >= 0 && p < r && !seen[static_cast<size_t>(p)], "Transpose: bad perm");
    seen[static_cast<size_t>(p)] = true;
  }
  return Status::ok();
}

Status concat_split_extents(bool split, const Dims& joined, int64_t axis, const std::vector<TensorShape>& parts,
                            const std::vector<int64_t>& split_sizes, bool num_outputs, std::vector<int64_t>* along) {
  const size_t n = parts.size();
  along->assign(n, -1);
  for (size_t k = 0; k < n; ++k) {
    if (parts[k].dtype == DataType::kUndefined) continue;
    const Dims& d = parts[k].dims;
    KILN_ENSURE(d.size() == joined.size(), "Concat/Split: ranks differ");
    for (size_t i = 0; i < d.size(); ++i) {
      KILN_ENSURE(static_cast<int64_t>(i) == axis || d[i] == joined[i], "Concat/Split: shapes differ off the axis");
    }
    (*along)[k] = d[static_cast<size_t>(axis)];
  }
  const int64_t dim = joined[static_cast<size_t>(axis)];
  if (std::count(along->begin(), along->end(), -1) > 0) {
    // Omitted Split outputs take their sizes from the constant split input or the even split.
    KILN_ENSURE(split, "Concat: missing input");
    std::vector<int64_t> s = split_sizes;
    if (s.empty()) {  // num_outputs (ceil-sized chunks) or even split
      const int64_t k = static_cast<int64_t>(n);
      const int64_t chunk = num_outputs ? (dim + k - 1) / k : dim / k;
      int64_t left = dim;
      for (int64_t i = 0; i < k; ++i) {
        s.push_back(std::min(chunk, left));
        left -= s.back();
      }
    }
    KILN_ENSURE(s.size() == n, "Split: cannot tell the sizes of omitted outputs");
    for (size_t k = 0; k < n; ++k) {
      KILN_ENSURE((*along)[k] < 0 || (*along)[k] == s[k], "Split: output sizes disagree with the split");
      (*along)[k] = s[k];
    }
  }
  int64_t total = 0;
  for (size_t k = 0; k < n; ++k) {
    KILN_ENSURE((*along)[k] >= 0, "Concat/Split: negative size");
    total += (*along)[k];
  }
  KILN_ENSURE(total == dim, "Concat/Split: parts add up to ", total, " along the axis, not ", dim);
  return Status::ok();
}

Status gather_geometry(const Dims& data, const Dims& indices, const Dims& out, int64_t axis, int64_t* outer,
                       int64_t* inner, int64_t* n) {
  KILN_ENSURE(!data.empty(), "Gather: data must have rank >= 1");
  int64_t a;
  KILN_RETURN_IF_ERROR(axis_geometry(data, axis, outer, inner, &a));
  *n = data[static_cast<size_t>(a)];
  Dims want(data.begin(), data.begin() + a);
  want.insert(want.end(), indices.begin(), indices.end());
  want.insert(want.end(), data.begin() + a + 1, data.end());
  KILN_ENSURE(out == want, "Gather: output shape differs");
  return Status::ok();
}

Status slice_geometry(const Dims& x, const Dims& y, const std::vector<int64_t>& starts,
                      const std::vector<int64_t>& ends, const std::vector<int64_t>& axes_in,
                      const std::vector<int64_t>& steps_in, Dims* strides, int64_t* offset) {
  const int64_t r = static_cast<int64_t>(x.size());
  KILN_ENSURE(y.size() == x.size(), "Slice: output rank differs");
  const size_t n = starts.size();
  std::vector<int64_t> axes = axes_in, steps = steps_in;
  if (axes.empty()) {
    KILN_ENSURE(static_cast<int64_t>(n) <= r, "Slice: more starts than dimensions");
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(n, 1);
  KILN_ENSURE(axes.size() == n && steps.size() == n && (ends.empty() || ends.size() == n),
              "Slice: starts, ends, axes and steps differ in length");
  const Dims cs = contiguous_strides(x);
  *strides = cs;
  int64_t off = 0;
  std::vector<bool> sliced(static_cast<size_t>(r), false);
  for (size_t i = 0; i < n; ++i) {
    int64_t a = axes[i];
    KILN_ENSURE(a >= -r && a < r, "Slice: axis ", a, " out of range");
    if (a < 0) a += r;
    const size_t ua = static_cast<size_t>(a);
    KILN_ENSURE(!sliced[ua], "Slice: axis ", a, " repeated");
    sliced[ua] = true;
    const int64_t d = x[ua], step = steps[i];
    KILN_ENSURE(step != 0, "Slice: step 0");
    int64_t start = starts[i];
    if (start < 0) start += d;
    start = step > 0 ? std::clamp<int64_t>(start, 0, d) : std::clamp<int64_t>(start, 0, std::max<int64_t>(d - 1, 0));
    const int64_t count = y[ua];
    // The output shape fixes the count; it must stay inside the axis. |step| < d (which
    // any count > 1 needs) is checked before the last position is computed.
    KILN_ENSURE(count >= 0, "Slice: output shape does not fit axis ", a);
    if (count > 1) {
      KILN_ENSURE(step > -d && step < d, "Slice: output shape does not fit axis ", a);
      const int64_t last = start + (count - 1) * step;
      KILN_ENSURE(last >= 0 && last < d, "Slice: output shape does not fit axis ", a);
    } else if (count == 1) {
      KILN_ENSURE(start >= 0 && start < d, "Slice: output shape does not fit axis ", a);
    }
    if (!ends.empty()) {
      int64_t end = ends[i];
      if (end < 0) end += d;
      int64_t want = 0;
      if (d > 0 && step > 0) {
        end = std::clamp<int64_t>(end, 0, d);
        want = end > start ? (end - start - 1) / step + 1 : 0;
      } else if (d > 0) {
        end = std::clamp<int64_t>(end, -1, d - 1);
        const uint64_t mag = static_cast<uint64_t>(-(step + 1)) + 1;
        want = start > end ? static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / mag) + 1 : 0;
      }
      KILN_ENSURE(want == count, "Slice: output shape disagrees with starts/ends");
    }
    if (count > 0) off += start * cs[ua];
    (*strides)[ua] = count > 1 ? cs[ua] * step : 0;
  }
  for (int64_t d = 0; d < r; ++d) {
    KILN_ENSURE(sliced[static_cast<size_t>(d)] || y[static_cast<size_t>(d)] == x[static_cast<size_t>(d)],
                "Slice: output shape differs on an axis that is not sliced");
  }
  *offset = num_elements(y) > 0 ? off : 0;
  return Status::ok();
}

namespace {

using namespace detail;

// Element types by size, for moving elements without caring what they mean.
template <typename Fn>
bool by_size(size_t es, Fn&& fn) {
  switch (es) {
    case 1: fn.template operator()<uint8_t>(); return true;
    case 2: fn.template operator()<uint16_t>(); return true;
    case 4: fn.template operator()<uint32_t>(); return true;
    case 8: fn.template operator()<uint64_t>(); return true;
    default: return false;
  }
}

// Dtypes moved as raw elements: everything with a fixed element size.
bool movable(DataType dt) { return dt != DataType::kUndefined && dt != DataType::kString && is_supported_dtype(dt); }

// Parallel memcpy: bandwidth-bound, so threads only for large copies.
void parallel_copy(void* dst, const void* src, size_t bytes, int threads) {
  if (dst == src || bytes == 0) return;
  constexpr size_t kChunk = size_t{1} << 18;
  const int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
  const int nt = threads_for(static_cast<int64_t>(bytes), threads, int64_t{1} << 20);
  parallel_for(chunks, nt, [=](int64_t c) {
    const size_t b = static_cast<size_t>(c) * kChunk;
    std::memcpy(static_cast<std::byte*>(dst) + b, static_cast<const std::byte*>(src) + b, std::min(kChunk, bytes - b));
  });
}

// ---- Reshape / Flatten / Squeeze / Unsqueeze / Identity: same bytes, new shape ----

class CopyKernel final : public Kernel {
 public:
  explicit CopyKernel(int threads) : threads_(threads) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    *scratch = 0;
    KILN_ENSURE(!in.empty() && !out.empty() && in[0].dtype == out[0].dtype &&
                    num_elements(in[0].dims) == num_elements(out[0].dims),
                "copy: output ", dims_str(out[0].dims), " does not hold the input's elements");
    bytes_ = static_cast<size_t>(num_elements(out[0].dims)) * dtype_size(out[0].dtype);
    return Status::ok();
  }
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*) override {
    KILN_ENSURE(!in[0]->is_sequence() && !in[0]->is_none(), "copy: input is not a tensor");
    parallel_copy(out[0]->raw(), in[0]->raw(), bytes_, threads_);
    return Status::ok();
  }

 private:
  int threads_;
  size_t bytes_ = 0;
};

bool copy_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  if (!movable(dt) || spec.output_dtypes.size() != 1 || spec.output_dtype(0) != dt) return false;
  if (spec.op == Op::Identity || spec.op == Op::Flatten) return spec.input_dtypes.size() == 1;
  return true;  // Reshape's shape and (Un)Squeeze's axes only decide the output shape
}

Result<std::unique_ptr<Kernel>> copy_create(const LayerSpec& spec) {
  if (!copy_supports(spec)) return unsupported("kiln_movement: unsupported layer");
  return std::unique_ptr<Kernel>(new CopyKernel(spec.threads));
}

// ---- Transpose ----

class TransposeKernel final : public Kernel {
 public:
  TransposeKernel(std::vector<int64_t> perm, bool has_perm, int threads)
      : perm_(std::move(perm)), has_perm_(has_perm), threads_(threads) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    *scratch = 0;
    const Dims& x = in[0].dims;
    const int64_t r = static_cast<int64_t>(x.size());
    std::vector<int64_t> perm;
    KILN_RETURN_IF_ERROR(transpose_perm(r, perm_, has_perm_, &perm));
    Dims want;
    for (int64_t p : perm) want.push_back(x[static_cast<size_t>(p)]);
    KILN_ENSURE(out[0].dims == want, "Transpose: output shape differs");
    es_ = dtype_size(in[0].dtype);
    // Output dims (in output order) with their input strides; size-1 dims dropped and
    // runs that stay adjacent in the input merged.
    const Dims is = contiguous_strides(x);
    dims_.clear();
    istr_.clear();
    for (int64_t i = 0; i < r; ++i) {
      const size_t p = static_cast<size_t>(perm[static_cast<size_t>(i)]);
      if (x[p] == 1) continue;
      if (!dims_.empty() && istr_.back() == is[p] * x[p]) {
        dims_.back() *= x[p];
        istr_.back() = is[p];
      } else {
        dims_.push_back(x[p]);
        istr_.push_back(is[p]);
      }
    }
    if (dims_.empty()) {
      dims_.push_back(1);
      istr_.push_back(1);
    }
    ostr_ = contiguous_strides(dims_);
    total_ = num_elements(dims_);
    // Tiled mode: the output's last dim is strided in the input; `p_` is the output dim
    // that is contiguous in the input. The (p_, last) planes are copied in 16x16 tiles.
    p_ = -1;
    const size_t last = dims_.size() - 1;
    if (istr_[last] != 1) {
      for (size_t d = 0; d < last; ++d) {
        if (istr_[d] == 1) p_ = static_cast<int64_t>(d);
      }
      KILN_ENSURE(p_ >= 0, "Transpose: no contiguous input dimension");  // cannot happen
    }
    return Status::ok();
  }

  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*) override {
    const void* x = in[0]->raw();
    void* y = out[0]->raw();
    if (total_ == 0) return Status::ok();
    by_size(es_, [&]<typename T>() { p_ < 0 ? run_rows<T>(static_cast<const T*>(x), static_cast<T*>(y))
                                            : run_tiles<T>(static_cast<const T*>(x), static_cast<T*>(y)); });
    return Status::ok();
  }

 private:
  static constexpr int64_t kTile = 16;

  // Input offset of the output position whose index along every dim except `skip1` and
  // `skip2` comes from `rest` (row-major over the remaining dims).
  int64_t input_offset(int64_t rest, size_t skip1, size_t skip2, int64_t* out_off) const {
    int64_t off = 0, o = 0;
    for (size_t d = dims_.size(); d-- > 0;) {
      if (d == skip1 || d == skip2) continue;
      const int64_t idx = rest % dims_[d];
      rest /= dims_[d];
      off += idx * istr_[d];
      o += idx * ostr_[d];
    }
    *out_off = o;
    return off;
  }

  // Last output dim contiguous in the input: copy rows.
  template <typename T>
  void run_rows(const T* x, T* y) const {
    const size_t last = dims_.size() - 1;
    const int64_t inner = dims_[last], rows = total_ / inner;
    const int nt = threads_for(total_, threads_, 65536);
    parallel_for(rows, nt, [&](int64_t row) {
      int64_t o;
      const int64_t off = input_offset(row, last, last, &o);
      std::memcpy(y + o, x + off, static_cast<size_t>(inner) * sizeof(T));
    });
  }

  template <typename T>
  void run_tiles(const T* x, T* y) const {
    const size_t last = dims_.size() - 1, p = static_cast<size_t>(p_);
    const int64_t np = dims_[p], nl = dims_[last];
    const int64_t sl = istr_[last], sp = ostr_[p];
    const int64_t tp = (np + kTile - 1) / kTile, tl = (nl + kTile - 1) / kTile;
    const int64_t planes = total_ / (np * nl);
    const int nt = threads_for(total_, threads_, 32768);
    parallel_for(planes * tp * tl, nt, [&](int64_t item) {
      const int64_t plane = item / (tp * tl), t = item % (tp * tl);
      const int64_t a0 = (t / tl) * kTile, b0 = (t % tl) * kTile;
      int64_t o;
      const int64_t off = input_offset(plane, p, last, &o);
      const int64_t a1 = std::min(np, a0 + kTile), b1 = std::min(nl, b0 + kTile);
      // y[a][b] = x[a + b * sl]: read along a (contiguous), write along b.
      for (int64_t a = a0; a < a1; ++a) {
        T* dst = y + o + a * sp;
        const T* src = x + off + a;
        for (int64_t b = b0; b < b1; ++b) dst[b] = src[b * sl];
      }
    });
  }

  std::vector<int64_t> perm_;
  bool has_perm_;
  int threads_;
  size_t es_ = 4;
  Dims dims_, istr_, ostr_;
  int64_t total_ = 0, p_ = -1;
};

bool transpose_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  return spec.input_dtypes.size() == 1 && movable(dt) && spec.output_dtype(0) == dt &&
         (dtype_size(dt) == 1 || dtype_size(dt) == 2 || dtype_size(dt) == 4 || dtype_size(dt) == 8);
}

Result<std::unique_ptr<Kernel>> transpose_create(const LayerSpec& spec) {
  if (!transpose_supports(spec)) return unsupported("kiln_transpose: unsupported layer");
  const Attributes& a = spec.attributes();
  return std::unique_ptr<Kernel>(new TransposeKernel(a.get_ints("perm"), a.has("perm"), spec.threads));
}

// ---- Concat / Split: blocks of rows along an axis ----

// Copies `parts` (bytes per outer row each) between a joined tensor and its pieces.
struct Piece {
  size_t row_bytes = 0;  // bytes per outer index
  size_t offset = 0;     // byte offset within a joined row
};

void move_pieces(bool join, std::byte* joined, size_t joined_row, const std::vector<Piece>& pieces,
                 const std::vector<std::byte*>& ptrs, int64_t outer, int threads) {
  const int64_t np = static_cast<int64_t>(pieces.size());
  const int nt = threads_for(outer * static_cast<int64_t>(joined_row), threads, int64_t{1} << 20);
  parallel_for(outer * np, nt, [&](int64_t item) {
    const int64_t o = item / np;
    const size_t k = static_cast<size_t>(item % np);
    const Piece& pc = pieces[k];
    if (!ptrs[k] || pc.row_bytes == 0) return;
    std::byte* j = joined + static_cast<size_t>(o) * joined_row + pc.offset;
    std::byte* s = ptrs[k] + static_cast<size_t>(o) * pc.row_bytes;
    if (join) std::memcpy(j, s, pc.row_bytes);
    else std::memcpy(s, j, pc.row_bytes);
  });
}

class ConcatSplitKernel final : public Kernel {
 public:
  ConcatSplitKernel(bool split, int64_t axis, std::vector<int64_t> split_sizes, int threads)
      : split_(split), axis_(axis), sizes_(std::move(split_sizes)), threads_(threads) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    *scratch = 0;
    KILN_ENSURE(!in.empty() && !out.empty(), "Concat/Split: no tensors");
    const Dims& joined = split_ ? in[0].dims : out[0].dims;
    int64_t inner, axis;
    KILN_RETURN_IF_ERROR(axis_geometry(joined, axis_, &outer_, &inner, &axis));
    const size_t es = dtype_size(split_ ? in[0].dtype : out[0].dtype);
    const std::vector<TensorShape>& parts = split_ ? out : in;
    const size_t n = parts.size();
    std::vector<int64_t> along;
    KILN_RETURN_IF_ERROR(concat_split_extents(split_, joined, axis, parts, sizes_, num_outputs_, &along));
    int64_t total = 0;
    pieces_.assign(n, Piece{});
    for (size_t k = 0; k < n; ++k) {
      pieces_[k].offset = static_cast<size_t>(total * inner) * es;
      pieces_[k].row_bytes = static_cast<size_t>(along[k] * inner) * es;
      total += along[k];
    }
    joined_row_ = static_cast<size_t>(joined[static_cast<size_t>(axis)] * inner) * es;
    ptrs_.assign(n, nullptr);
    return Status::ok();
  }

  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*) override {
    // ptrs_ was sized in prepare: filling it allocates nothing.
    for (size_t k = 0; k < ptrs_.size(); ++k) {
      if (split_) ptrs_[k] = k < out.size() && out[k] ? static_cast<std::byte*>(out[k]->raw()) : nullptr;
      else ptrs_[k] = const_cast<std::byte*>(static_cast<const std::byte*>(in[k]->raw()));
    }
    std::byte* joined = split_ ? const_cast<std::byte*>(static_cast<const std::byte*>(in[0]->raw()))
                               : static_cast<std::byte*>(out[0]->raw());
    move_pieces(!split_, joined, joined_row_, pieces_, ptrs_, outer_, threads_);
    return Status::ok();
  }

  bool num_outputs_ = false;  // Split's num_outputs attribute was given

 private:
  bool split_;
  int64_t axis_;
  std::vector<int64_t> sizes_;
  int threads_;
  int64_t outer_ = 1;
  size_t joined_row_ = 0;
  std::vector<Piece> pieces_;
  std::vector<std::byte*> ptrs_;
};

bool concat_supports(const LayerSpec& spec) {
  const DataType dt = spec.output_dtype(0);
  if (!movable(dt) || spec.output_dtypes.size() != 1 || spec.input_dtypes.empty()) return false;
  for (DataType d : spec.input_dtypes) {
    if (d != dt) return false;  // omitted inputs included
  }
  return true;
}

bool split_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  if (!movable(dt) || spec.output_dtypes.empty()) return false;
  for (DataType d : spec.output_dtypes) {
    if (d != dt && d != DataType::kUndefined) return false;
  }
  // A split input that is present must be constant when some output is omitted (its
  // sizes then locate the others); read_ints semantics: int32/int64.
  bool omitted = std::count(spec.output_dtypes.begin(), spec.output_dtypes.end(), DataType::kUndefined) > 0;
  if (spec.has_input(1)) {
    const DataType st = spec.input_dtype(1);
    if (st != DataType::kInt64 && st != DataType::kInt32) return false;
    if (omitted && !spec.constant(1)) return false;
  }
  return true;
}

Result<std::unique_ptr<Kernel>> concat_split_create(const LayerSpec& spec) {
  const bool split = spec.op == Op::Split;
  if (!(split ? split_supports(spec) : concat_supports(spec))) return unsupported("kiln_movement: unsupported layer");
  const Attributes& a = spec.attributes();
  std::vector<int64_t> sizes;
  if (split && spec.constant(1) && spec.constant(1)->size() > 0) sizes = spec.constant(1)->to_int_vector();
  auto k = std::make_unique<ConcatSplitKernel>(split, a.get_int("axis", split ? 0 : 1), std::move(sizes), spec.threads);
  k->num_outputs_ = split && a.has("num_outputs");
  return std::unique_ptr<Kernel>(std::move(k));
}

// ---- Gather ----

class GatherKernel final : public Kernel {
 public:
  GatherKernel(int64_t axis, int threads) : axis_(axis), threads_(threads) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    *scratch = 0;
    KILN_RETURN_IF_ERROR(gather_geometry(in[0].dims, in[1].dims, out[0].dims, axis_, &outer_, &inner_, &n_));
    nidx_ = num_elements(in[1].dims);
    es_ = dtype_size(in[0].dtype);
    idx64_ = in[1].dtype == DataType::kInt64;
    return Status::ok();
  }
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*) override {
    // Indices are checked first, so a bad one fails before anything is written.
    const void* ip = in[1]->raw();
    for (int64_t j = 0; j < nidx_; ++j) {
      const int64_t v = idx64_ ? static_cast<const int64_t*>(ip)[j] : static_cast<const int32_t*>(ip)[j];
      KILN_ENSURE(v >= -n_ && v < n_, "Gather: index ", v, " is out of range for axis size ", n_);
    }
    by_size(es_, [&]<typename T>() { gather<T>(in[0]->data<T>(), ip, out[0]->data<T>()); });
    return Status::ok();
  }

 private:
  template <typename T>
  void gather(const T* x, const void* ip, T* y) const {
    const int64_t n = n_, inner = inner_, nidx = nidx_;
    const bool idx64 = idx64_;
    const int nt = threads_for(outer_ * nidx * inner, threads_, 65536);
    parallel_for(outer_ * nidx, nt, [&](int64_t item) {
      const int64_t o = item / nidx, j = item % nidx;
      int64_t v = idx64 ? static_cast<const int64_t*>(ip)[j] : static_cast<const int32_t*>(ip)[j];
      if (v < 0) v += n;
      const T* src = x + (o * n + v) * inner;
      T* dst = y + item * inner;
      for (int64_t t = 0; t < inner; ++t) dst[t] = src[t];
    });
  }

  int64_t axis_;
  int threads_;
  int64_t outer_ = 1, inner_ = 1, n_ = 0, nidx_ = 0;
  size_t es_ = 4;
  bool idx64_ = true;
};

bool gather_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0), it = spec.input_dtype(1);
  return spec.input_dtypes.size() == 2 && movable(dt) && spec.output_dtype(0) == dt &&
         (it == DataType::kInt64 || it == DataType::kInt32) &&
         (dtype_size(dt) == 1 || dtype_size(dt) == 2 || dtype_size(dt) == 4 || dtype_size(dt) == 8);
}

Result<std::unique_ptr<Kernel>> gather_create(const LayerSpec& spec) {
  if (!gather_supports(spec)) return unsupported("kiln_gather: unsupported layer");
  return std::unique_ptr<Kernel>(new GatherKernel(spec.attributes().get_int("axis", 0), spec.threads));
}

// ---- Slice (constant starts, axes and steps) ----

class SliceKernel final : public Kernel {
 public:
  SliceKernel(std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> axes,
              std::vector<int64_t> steps, int threads)
      : starts_(std::move(starts)), ends_(std::move(ends)), axes_(std::move(axes)), steps_(std::move(steps)),
        threads_(threads) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    *scratch = 0;
    const Dims& x = in[0].dims;
    const Dims& y = out[0].dims;
    const int64_t r = static_cast<int64_t>(x.size());
    Dims strides;
    int64_t offset = 0;
    KILN_RETURN_IF_ERROR(slice_geometry(x, y, starts_, ends_, axes_, steps_, &strides, &offset));
    // Collapse: drop size-1 dims, merge dims that stay adjacent in the input.
    dims_.clear();
    istr_.clear();
    for (int64_t d = 0; d < r; ++d) {
      const size_t ud = static_cast<size_t>(d);
      if (y[ud] == 1) continue;
      if (!dims_.empty() && istr_.back() == strides[ud] * y[ud]) {
        dims_.back() *= y[ud];
        istr_.back() = strides[ud];
      } else {
        dims_.push_back(y[ud]);
        istr_.push_back(strides[ud]);
      }
    }
    if (dims_.empty()) {
      dims_.push_back(1);
      istr_.push_back(1);
    }
    total_ = num_elements(y);
    offset_ = offset;
    es_ = dtype_size(in[0].dtype);
    return Status::ok();
  }

  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*) override {
    if (total_ == 0) return Status::ok();
    by_size(es_, [&]<typename T>() { copy<T>(in[0]->data<T>() + offset_, out[0]->data<T>()); });
    return Status::ok();
  }

 private:
  template <typename T>
  void copy(const T* x, T* y) const {
    const size_t last = dims_.size() - 1;
    const int64_t inner = dims_[last], rows = total_ / inner, s = istr_[last];
    const int nt = threads_for(total_, threads_, 65536);
    parallel_for(rows, nt, [&](int64_t row) {
      int64_t off = 0, rem = row;
      for (size_t d = last; d-- > 0;) {
        off += (rem % dims_[d]) * istr_[d];
        rem /= dims_[d];
      }
      const T* src = x + off;
      T* dst = y + row * inner;
      if (s == 1) std::memcpy(dst, src, static_cast<size_t>(inner) * sizeof(T));
      else for (int64_t t = 0; t < inner; ++t) dst[t] = src[t * s];
    });
  }

  std::vector<int64_t> starts_, ends_, axes_, steps_;
  int threads_;
  Dims dims_, istr_;
  int64_t total_ = 0, offset_ = 0;
  size_t es_ = 4;
};

bool int_input(const LayerSpec& spec, size_t i) {
  const DataType dt = spec.input_dtype(i);
  return dt == DataType::kInt64 || dt == DataType::kInt32;
}

bool slice_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  const size_t nin = spec.input_dtypes.size();
  if (nin < 3 || nin > 5 || !movable(dt) || spec.output_dtype(0) != dt || spec.output_dtypes.size() != 1) return false;
  const size_t es = dtype_size(dt);
  if (es != 1 && es != 2 && es != 4 && es != 8) return false;
  if (!int_input(spec, 1) || !spec.constant(1) || !int_input(spec, 2)) return false;
  for (size_t i = 3; i < nin; ++i) {
    if (spec.has_input(i) && (!int_input(spec, i) || !spec.constant(i))) return false;
  }
  return true;
}

Result<std::unique_ptr<Kernel>> slice_create(const LayerSpec& spec) {
  if (!slice_supports(spec)) return unsupported("kiln_slice: unsupported layer");
  auto ints = [&](size_t i) {
    const Tensor* t = spec.constant(i);
    return spec.has_input(i) && t ? t->to_int_vector() : std::vector<int64_t>{};
  };
  return std::unique_ptr<Kernel>(new SliceKernel(ints(1), ints(2), ints(3), ints(4), spec.threads));
}

// ---- Cast / CastLike between the numeric types and bool ----

bool castable(DataType dt) { return movable(dt) && !is_low_precision(dt); }

class CastKernel final : public Kernel {
 public:
  CastKernel(DataType from, DataType to, int threads) : from_(from), to_(to), threads_(threads) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    *scratch = 0;
    KILN_ENSURE(in[0].dims == out[0].dims && in[0].dtype == from_ && out[0].dtype == to_, "Cast: shapes or dtypes differ");
    n_ = num_elements(out[0].dims);
    return Status::ok();
  }
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*) override {
    if (from_ == to_) {
      parallel_copy(out[0]->raw(), in[0]->raw(), static_cast<size_t>(n_) * dtype_size(to_), threads_);
      return Status::ok();
    }
    const int64_t n = n_;
    const int nt = threads_for(n, threads_, 65536);
    constexpr int64_t kChunk = 16384;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const void* x = in[0]->raw();
    void* y = out[0]->raw();
    // Same conversion as the reference Cast (convert_element), so results are identical.
    dispatch_all(from_, [&]<typename From>() {
      dispatch_all(to_, [&]<typename To>() {
        const From* px = static_cast<const From*>(x);
        To* py = static_cast<To*>(y);
        parallel_for(chunks, nt, [&](int64_t c) {
          const int64_t e = std::min(n, (c + 1) * kChunk);
          for (int64_t i = c * kChunk; i < e; ++i) py[i] = convert_element<To>(px[i]);
        });
      });
    });
    return Status::ok();
  }

 private:
  DataType from_, to_;
  int threads_;
  int64_t n_ = 0;
};

bool cast_supports(const LayerSpec& spec) {
  const size_t nin = spec.input_dtypes.size();
  return (nin == 1 || nin == 2) && spec.output_dtypes.size() == 1 && castable(spec.input_dtype(0)) &&
         castable(spec.output_dtype(0));
}

Result<std::unique_ptr<Kernel>> cast_create(const LayerSpec& spec) {
  if (!cast_supports(spec)) return unsupported("kiln_cast: unsupported layer");
  return std::unique_ptr<Kernel>(new CastKernel(spec.input_dtype(0), spec.output_dtype(0), spec.threads));
}

}  // namespace

void add_movement_tactics(std::vector<Tactic>& out) {
  for (Op op : kShapeOnlyOps) {
    out.push_back({"kiln_copy", op, copy_supports, copy_create});
  }
  out.push_back({"kiln_transpose", Op::Transpose, transpose_supports, transpose_create});
  out.push_back({"kiln_concat", Op::Concat, concat_supports, concat_split_create});
  out.push_back({"kiln_split", Op::Split, split_supports, concat_split_create});
  out.push_back({"kiln_gather", Op::Gather, gather_supports, gather_create});
  out.push_back({"kiln_slice", Op::Slice, slice_supports, slice_create});
  out.push_back({"kiln_cast", Op::Cast, cast_supports, cast_create});
}

}  // namespace kiln::fast
