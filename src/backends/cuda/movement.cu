// kiln's CUDA data-movement kernels: copies for the shape-only ops (Reshape, Flatten,
// Squeeze, Unsqueeze, Identity), Transpose (32x32 shared-memory tiles when the output's
// last dim is strided in the input, else a strided gather), DepthToSpace/SpaceToDepth (as
// 6-D transposes), Concat/Split (row copies), Slice, Expand, Tile (strided gathers),
// Gather, Pad and Resize.
//
// Any fixed-size dtype moves as raw elements of its size (1, 2, 4 or 8 bytes; bool is one
// byte); contiguous runs move in wider units (up to 16 bytes) when sizes and pointers
// allow. The output shapes given to prepare() are authoritative, so shape-like inputs
// (Reshape's shape, Expand's shape, Tile's repeats, Slice's ends) are never read at run
// time. Plans (dims, strides, tap tables) are built in prepare(); enqueue() only launches.
//
// Gather: an index outside [-n, n) writes zeros (the CPU kernels report an error, which a
// kernel running asynchronously on the device cannot do).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/fast/geometry.h"
#include "backends/cpu/reference/nn_common.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_kernel.h"

namespace kiln::cuda {

namespace {

// ---------------------------------------------------------------------------------------
// dtype helpers

bool int_dtype(DataType dt) { return dt == DataType::kInt64 || dt == DataType::kInt32; }

// Dtypes moved as raw elements of 1, 2, 4 or 8 bytes.
bool movable(DataType dt) {
  if (dt == DataType::kUndefined || dt == DataType::kString || !is_supported_dtype(dt)) return false;
  const size_t es = dtype_size(dt);
  return es == 1 || es == 2 || es == 4 || es == 8;
}

// ---------------------------------------------------------------------------------------
// device helpers

struct alignas(16) U16 {
  uint4 v;
};

// Calls fn.template operator()<U>() with U an unsigned type of `bytes` bytes.
template <typename Fn>
Status by_unit(size_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1: return fn.template operator()<uint8_t>();
    case 2: return fn.template operator()<uint16_t>();
    case 4: return fn.template operator()<uint32_t>();
    case 8: return fn.template operator()<uint64_t>();
    case 16: return fn.template operator()<U16>();
    default: return internal_error("movement: element size ", bytes);
  }
}

bool aligned(const void* p, size_t u) { return (reinterpret_cast<uintptr_t>(p) % u) == 0; }

constexpr int kThreads = 256;
// 32-bit index math below this many elements (grid-stride steps stay below 2^31 too).
constexpr int64_t kI32Max = int64_t{1} << 30;

// ---------------------------------------------------------------------------------------
// strided gather: y[i] = x[offset + sum_d idx_d(i) * istr[d]] with y contiguous.

constexpr int kMaxDims = 16;

struct StridedParams {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t istr[kMaxDims] = {};
  int64_t offset = 0;
  int64_t total = 0;
};

template <typename U, typename I>
__global__ void strided_kernel(const U* __restrict__ x, U* __restrict__ y, StridedParams p) {
  const I total = static_cast<I>(p.total);
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    I rem = i;
    I off = static_cast<I>(p.offset);
    for (int d = p.rank - 1; d > 0; --d) {
      const I n = static_cast<I>(p.dims[d]);
      const I q = rem / n;
      off += (rem - q * n) * static_cast<I>(p.istr[d]);
      rem = q;
    }
    off += rem * static_cast<I>(p.istr[0]);
    y[i] = x[off];
  }
}

// ---------------------------------------------------------------------------------------
// tiled transpose: for each plane, y[a][b] = x[a + b * sl] (a: the output dim that is
// contiguous in the input, b: the output's last dim), through a 32x33 shared tile.

constexpr int kTile = 32;
constexpr int kTileRows = 8;
constexpr int kMaxRest = 14;

struct TileParams {
  int64_t np = 0, nl = 0, sl = 0, sp = 0;
  int64_t planes = 0;
  int rest = 0;
  int64_t rdims[kMaxRest] = {};
  int64_t ristr[kMaxRest] = {};
  int64_t rostr[kMaxRest] = {};
};

template <typename T, int TD>
__global__ void tiled_kernel(const T* __restrict__ x, T* __restrict__ y, TileParams p) {
  __shared__ T tile[TD][TD + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tp = (p.np + TD - 1) / TD, tl = (p.nl + TD - 1) / TD;
  const int64_t per_plane = tp * tl;
  const int64_t ntiles = p.planes * per_plane;
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    int64_t plane = t / per_plane;
    const int64_t r = t - plane * per_plane;
    const int64_t a0 = (r / tl) * TD, b0 = (r % tl) * TD;
    int64_t in_off = 0, out_off = 0;
    for (int d = p.rest - 1; d >= 0; --d) {
      const int64_t q = plane / p.rdims[d];
      const int64_t idx = plane - q * p.rdims[d];
      plane = q;
      in_off += idx * p.ristr[d];
      out_off += idx * p.rostr[d];
    }
    const T* xs = x + in_off;
    T* ys = y + out_off;
#pragma unroll
    for (int k = 0; k < TD; k += kTileRows) {
#pragma unroll
      for (int j = 0; j < TD; j += kTile) {
        const int64_t a = a0 + tx + j, b = b0 + ty + k;
        if (a < p.np && b < p.nl) tile[ty + k][tx + j] = xs[a + b * p.sl];
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TD; k += kTileRows) {
#pragma unroll
      for (int j = 0; j < TD; j += kTile) {
        const int64_t b = b0 + tx + j, a = a0 + ty + k;
        if (a < p.np && b < p.nl) ys[a * p.sp + b] = tile[tx + j][ty + k];
      }
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------------------
// A data-movement plan: y (contiguous, out dims) gathered from x through strides.

struct MovePlan {
  enum Kind { kEmpty, kStrided, kTiled } kind = kEmpty;
  size_t es = 4;
  int64_t in_elems = 0;
  StridedParams sp;
  TileParams tp;
};

// Builds the plan of y[idx] = x[offset + sum idx_d * istr_d] (istr per output dim).
Status build_plan(const Dims& out_dims, const Dims& istr_in, int64_t offset, size_t es, int64_t in_elems,
                  MovePlan* plan) {
  *plan = MovePlan{};
  plan->es = es;
  plan->in_elems = in_elems;
  const int64_t total = num_elements(out_dims);
  if (total == 0) return Status::ok();
  // Collapse: drop size-1 dims; merge dims that stay adjacent in the input.
  Dims dims, istr;
  for (size_t d = 0; d < out_dims.size(); ++d) {
    if (out_dims[d] == 1) continue;
    if (!dims.empty() && istr.back() == istr_in[d] * out_dims[d]) {
      dims.back() *= out_dims[d];
      istr.back() = istr_in[d];
    } else {
      dims.push_back(out_dims[d]);
      istr.push_back(istr_in[d]);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    istr.push_back(1);
  }
  const size_t r = dims.size();
  const Dims ostr = contiguous_strides(dims);
  // Tiled when the output's last dim is strided in the input and another dim is
  // contiguous there (and both are big enough to fill tiles).
  int64_t p = -1;
  if (istr[r - 1] != 1 && es <= 8) {
    for (size_t d = 0; d + 1 < r; ++d) {
      if (istr[d] == 1) p = static_cast<int64_t>(d);
    }
  }
  if (p >= 0 && dims[static_cast<size_t>(p)] >= 8 && dims[r - 1] >= 8 && r - 2 <= static_cast<size_t>(kMaxRest)) {
    TileParams& t = plan->tp;
    const size_t up = static_cast<size_t>(p);
    t.np = dims[up];
    t.nl = dims[r - 1];
    t.sl = istr[r - 1];
    t.sp = ostr[up];
    t.planes = total / (t.np * t.nl);
    t.rest = 0;
    for (size_t d = 0; d + 1 < r; ++d) {
      if (d == up) continue;
      t.rdims[t.rest] = dims[d];
      t.ristr[t.rest] = istr[d];
      t.rostr[t.rest] = ostr[d];
      ++t.rest;
    }
    // offset folds into the input pointer at enqueue (kept in sp.offset)
    plan->sp.offset = offset;
    plan->sp.total = total;
    plan->kind = MovePlan::kTiled;
    return Status::ok();
  }
  KILN_ENSURE(r <= static_cast<size_t>(kMaxDims), "movement: ", r, " dims after collapsing (at most ", kMaxDims, ")");
  StridedParams& s = plan->sp;
  s.rank = static_cast<int>(r);
  for (size_t d = 0; d < r; ++d) {
    s.dims[d] = dims[d];
    s.istr[d] = istr[d];
  }
  s.offset = offset;
  s.total = total;
  plan->kind = MovePlan::kStrided;
  return Status::ok();
}

// Widens a strided plan to units of u bytes (u a multiple of es) if every stride, the
// offset and the contiguous last dim allow it.
bool widen(const StridedParams& in, size_t es, size_t u, StridedParams* out) {
  const int64_t k = static_cast<int64_t>(u / es);
  if (k == 1) {
    *out = in;
    return true;
  }
  const int r = in.rank;
  if (in.istr[r - 1] != 1 || in.dims[r - 1] % k != 0 || in.offset % k != 0) return false;
  for (int d = 0; d + 1 < r; ++d) {
    if (in.istr[d] % k != 0) return false;
  }
  *out = in;
  out->dims[r - 1] /= k;
  for (int d = 0; d + 1 < r; ++d) out->istr[d] /= k;
  out->offset /= k;
  out->total /= k;
  return true;
}

Status launch_plan(const MovePlan& plan, const void* x, void* y, cudaStream_t stream) {
  if (plan.kind == MovePlan::kEmpty) return Status::ok();
  if (plan.kind == MovePlan::kTiled) {
    const TileParams& t = plan.tp;
    // 1- and 2-byte elements: 64x64 tiles (more work per thread), else 32x32.
    const int td = plan.es <= 2 ? 2 * kTile : kTile;
    const int64_t ntiles = t.planes * ((t.np + td - 1) / td) * ((t.nl + td - 1) / td);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ntiles, 65535LL * 16));
    return by_unit(plan.es, [&]<typename U>() -> Status {
      const U* xp = static_cast<const U*>(x) + plan.sp.offset;
      if constexpr (sizeof(U) <= 2) {
        tiled_kernel<U, 2 * kTile><<<blocks, dim3(kTile, kTileRows), 0, stream>>>(xp, static_cast<U*>(y), t);
      } else {
        static_assert(sizeof(U) <= 16);
        if (sizeof(U) > 8) return internal_error("tiled transpose of ", sizeof(U), "-byte elements");
        tiled_kernel<U, kTile><<<blocks, dim3(kTile, kTileRows), 0, stream>>>(xp, static_cast<U*>(y), t);
      }
      KILN_CUDA_LAUNCH_CHECK("tiled transpose");
      return Status::ok();
    });
  }
  // Widest unit the plan and both pointers allow.
  StridedParams p = plan.sp;
  size_t unit = plan.es;
  for (size_t u : {size_t{16}, size_t{8}, size_t{4}, size_t{2}}) {
    if (u <= plan.es) break;
    StridedParams w;
    if (aligned(x, u) && aligned(y, u) && widen(plan.sp, plan.es, u, &w)) {
      p = w;
      unit = u;
      break;
    }
  }
  const bool small = p.total <= kI32Max && plan.in_elems <= kI32Max;
  const unsigned blocks = blocks_for(p.total, kThreads);
  return by_unit(unit, [&]<typename U>() -> Status {
    if (small) strided_kernel<U, int32_t><<<blocks, kThreads, 0, stream>>>(static_cast<const U*>(x), static_cast<U*>(y), p);
    else strided_kernel<U, int64_t><<<blocks, kThreads, 0, stream>>>(static_cast<const U*>(x), static_cast<U*>(y), p);
    KILN_CUDA_LAUNCH_CHECK("strided copy");
    return Status::ok();
  });
}

// Plan for y = transpose(x, perm) (out dim i = in dim perm[i]).
Status transpose_plan(const Dims& in_dims, const std::vector<int64_t>& perm, size_t es, MovePlan* plan,
                      Dims* out_dims) {
  const Dims cs = contiguous_strides(in_dims);
  Dims od, istr;
  for (int64_t p : perm) {
    od.push_back(in_dims[static_cast<size_t>(p)]);
    istr.push_back(cs[static_cast<size_t>(p)]);
  }
  if (out_dims) *out_dims = od;
  return build_plan(od, istr, 0, es, num_elements(in_dims), plan);
}

// ---------------------------------------------------------------------------------------
// row copies (Concat / Split): dst[r * dpitch + c] = src[r * spitch + c], c < width.

template <typename U, typename I>
__global__ void rows_kernel(U* __restrict__ dst, int64_t dpitch, const U* __restrict__ src, int64_t spitch,
                            int64_t width, int64_t rows) {
  const I total = static_cast<I>(rows * width);
  const I w = static_cast<I>(width);
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I r = i / w;
    const I c = i - r * w;
    dst[r * static_cast<I>(dpitch) + c] = src[r * static_cast<I>(spitch) + c];
  }
}

// Byte-level description; picks the widest unit dividing everything.
Status copy_rows(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, int64_t rows,
                 cudaStream_t stream) {
  if (width == 0 || rows == 0) return Status::ok();
  if (rows == 1 || (dpitch == width && spitch == width)) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, width * static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream));
    return Status::ok();
  }
  size_t unit = 1;
  for (size_t u : {size_t{16}, size_t{8}, size_t{4}, size_t{2}}) {
    if (dpitch % u == 0 && spitch % u == 0 && width % u == 0 && aligned(dst, u) && aligned(src, u)) {
      unit = u;
      break;
    }
  }
  const int64_t w = static_cast<int64_t>(width / unit), dp = static_cast<int64_t>(dpitch / unit),
                sp = static_cast<int64_t>(spitch / unit);
  const int64_t total = w * rows;
  const bool small = std::max(dp, sp) * rows <= kI32Max;
  const unsigned blocks = blocks_for(total, kThreads);
  return by_unit(unit, [&]<typename U>() -> Status {
    if (small) {
      rows_kernel<U, int32_t><<<blocks, kThreads, 0, stream>>>(static_cast<U*>(dst), dp, static_cast<const U*>(src), sp, w, rows);
    } else {
      rows_kernel<U, int64_t><<<blocks, kThreads, 0, stream>>>(static_cast<U*>(dst), dp, static_cast<const U*>(src), sp, w, rows);
    }
    KILN_CUDA_LAUNCH_CHECK("row copy");
    return Status::ok();
  });
}

// ---------------------------------------------------------------------------------------
// Reshape / Flatten / Squeeze / Unsqueeze / Identity

class CopyKernel final : public Kernel {
 public:
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* ws) override {
    *ws = 0;
    KILN_ENSURE(!in.empty() && !out.empty() && in[0].dtype == out[0].dtype &&
                    num_elements(in[0].dims) == num_elements(out[0].dims),
                "copy: output ", dims_str(out[0].dims), " does not hold the input's elements");
    bytes_ = static_cast<size_t>(num_elements(out[0].dims)) * dtype_size(out[0].dtype);
    return Status::ok();
  }
  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    if (bytes_ == 0 || out[0]->raw() == in[0]->raw()) return Status::ok();
    KILN_CUDA_CHECK(cudaMemcpyAsync(out[0]->raw(), in[0]->raw(), bytes_, cudaMemcpyDeviceToDevice, stream));
    return Status::ok();
  }

 private:
  size_t bytes_ = 0;
};

bool copy_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  if (!movable(dt) || spec.output_dtypes.size() != 1 || spec.output_dtype(0) != dt) return false;
  if (spec.op == Op::Identity || spec.op == Op::Flatten) return spec.input_dtypes.size() == 1;
  return true;  // Reshape's shape and (Un)Squeeze's axes only decide the output shape
}

Result<std::unique_ptr<Kernel>> copy_create(const LayerSpec& spec) {
  if (!copy_supports(spec)) return unsupported("kiln_cuda_copy: unsupported layer");
  return std::unique_ptr<Kernel>(new CopyKernel());
}

// ---------------------------------------------------------------------------------------
// Transpose

class TransposeKernel final : public Kernel {
 public:
  TransposeKernel(std::vector<int64_t> perm, bool has_perm) : perm_(std::move(perm)), has_perm_(has_perm) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* ws) override {
    *ws = 0;
    const Dims& x = in[0].dims;
    std::vector<int64_t> perm;
    KILN_RETURN_IF_ERROR(fast::transpose_perm(static_cast<int64_t>(x.size()), perm_, has_perm_, &perm));
    Dims want;
    KILN_RETURN_IF_ERROR(transpose_plan(x, perm, dtype_size(in[0].dtype), &plan_, &want));
    KILN_ENSURE(out[0].dims == want, "Transpose: output shape ", dims_str(out[0].dims), " differs from ", dims_str(want));
    return Status::ok();
  }
  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    return launch_plan(plan_, in[0]->raw(), out[0]->raw(), stream);
  }

 private:
  std::vector<int64_t> perm_;
  bool has_perm_;
  MovePlan plan_;
};

bool transpose_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  if (spec.input_dtypes.size() != 1 || !movable(dt) || spec.output_dtype(0) != dt || spec.output_dtypes.size() != 1)
    return false;
  const Attributes& a = spec.attributes();
  return !a.has("perm") || a.get_ints("perm").size() <= 8;
}

Result<std::unique_ptr<Kernel>> transpose_create(const LayerSpec& spec) {
  if (!transpose_supports(spec)) return unsupported("kiln_cuda_transpose: unsupported layer");
  const Attributes& a = spec.attributes();
  return std::unique_ptr<Kernel>(new TransposeKernel(a.get_ints("perm"), a.has("perm")));
}

// ---------------------------------------------------------------------------------------
// DepthToSpace / SpaceToDepth: 6-D transposes

class DepthSpaceKernel final : public Kernel {
 public:
  DepthSpaceKernel(bool to_space, int64_t b, bool dcr) : to_space_(to_space), b_(b), dcr_(dcr) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* ws) override {
    *ws = 0;
    const Dims& x = in[0].dims;
    KILN_ENSURE(x.size() == 4, "DepthToSpace/SpaceToDepth: input must be 4-D");
    const int64_t n = x[0], c = x[1], h = x[2], w = x[3], b = b_;
    Dims six, want;
    std::vector<int64_t> perm;
    if (to_space_) {
      KILN_ENSURE(c % (b * b) == 0, "DepthToSpace: channels not divisible by blocksize^2");
      const int64_t oc = c / (b * b);
      if (dcr_) {
        six = {n, b, b, oc, h, w};
        perm = {0, 3, 4, 1, 5, 2};
      } else {
        six = {n, oc, b, b, h, w};
        perm = {0, 1, 4, 2, 5, 3};
      }
      want = {n, oc, h * b, w * b};
    } else {
      KILN_ENSURE(h % b == 0 && w % b == 0, "SpaceToDepth: spatial dims not divisible by blocksize");
      six = {n, c, h / b, b, w / b, b};
      perm = dcr_ ? std::vector<int64_t>{0, 3, 5, 1, 2, 4} : std::vector<int64_t>{0, 1, 3, 5, 2, 4};
      want = {n, c * b * b, h / b, w / b};
    }
    KILN_ENSURE(out[0].dims == want, "DepthToSpace/SpaceToDepth: output shape differs");
    return transpose_plan(six, perm, dtype_size(in[0].dtype), &plan_, nullptr);
  }
  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    return launch_plan(plan_, in[0]->raw(), out[0]->raw(), stream);
  }

 private:
  bool to_space_;
  int64_t b_;
  bool dcr_;
  MovePlan plan_;
};

bool depth_space_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  if (spec.input_dtypes.size() != 1 || !movable(dt) || spec.output_dtype(0) != dt || spec.output_dtypes.size() != 1)
    return false;
  const Attributes& a = spec.attributes();
  if (!a.has("blocksize")) return false;
  const int64_t b = a.get_int("blocksize", 0);
  const std::string mode = a.get_string("mode", "DCR");
  return b > 0 && b <= 4096 && (mode == "DCR" || mode == "CRD");
}

Result<std::unique_ptr<Kernel>> depth_space_create(const LayerSpec& spec) {
  if (!depth_space_supports(spec)) return unsupported("kiln_cuda_depth_space: unsupported layer");
  const Attributes& a = spec.attributes();
  return std::unique_ptr<Kernel>(new DepthSpaceKernel(spec.op == Op::DepthToSpace, a.get_int("blocksize", 1),
                                                      a.get_string("mode", "DCR") == "DCR"));
}

// ---------------------------------------------------------------------------------------
// Concat / Split

class ConcatSplitKernel final : public Kernel {
 public:
  ConcatSplitKernel(bool split, int64_t axis, std::vector<int64_t> sizes, bool num_outputs)
      : split_(split), axis_(axis), sizes_(std::move(sizes)), num_outputs_(num_outputs) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* ws) override {
    *ws = 0;
    KILN_ENSURE(!in.empty() && !out.empty(), "Concat/Split: no tensors");
    const Dims& joined = split_ ? in[0].dims : out[0].dims;
    int64_t inner, axis;
    KILN_RETURN_IF_ERROR(fast::axis_geometry(joined, axis_, &outer_, &inner, &axis));
    const size_t es = dtype_size(split_ ? in[0].dtype : out[0].dtype);
    const std::vector<TensorShape>& parts = split_ ? out : in;
    const size_t n = parts.size();
    std::vector<int64_t> along;
    KILN_RETURN_IF_ERROR(fast::concat_split_extents(split_, joined, axis, parts, sizes_, num_outputs_, &along));
    int64_t total = 0;
    offset_.assign(n, 0);
    row_.assign(n, 0);
    for (size_t k = 0; k < n; ++k) {
      offset_[k] = static_cast<size_t>(total * inner) * es;
      row_[k] = static_cast<size_t>(along[k] * inner) * es;
      total += along[k];
    }
    joined_row_ = static_cast<size_t>(joined[static_cast<size_t>(axis)] * inner) * es;
    return Status::ok();
  }

  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    if (split_) {
      const auto* joined = static_cast<const std::byte*>(in[0]->raw());
      for (size_t k = 0; k < row_.size(); ++k) {
        if (k >= out.size() || !out[k]) continue;
        KILN_RETURN_IF_ERROR(copy_rows(out[k]->raw(), row_[k], joined + offset_[k], joined_row_, row_[k], outer_, stream));
      }
    } else {
      auto* joined = static_cast<std::byte*>(out[0]->raw());
      for (size_t k = 0; k < row_.size(); ++k) {
        KILN_RETURN_IF_ERROR(copy_rows(joined + offset_[k], joined_row_, in[k]->raw(), row_[k], row_[k], outer_, stream));
      }
    }
    return Status::ok();
  }

 private:
  bool split_;
  int64_t axis_;
  std::vector<int64_t> sizes_;
  bool num_outputs_;
  int64_t outer_ = 1;
  size_t joined_row_ = 0;
  std::vector<size_t> offset_, row_;
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
  if (!movable(dt) || spec.output_dtypes.empty() || spec.input_dtypes.size() > 2) return false;
  for (DataType d : spec.output_dtypes) {
    if (d != dt && d != DataType::kUndefined) return false;
  }
  const bool omitted = std::count(spec.output_dtypes.begin(), spec.output_dtypes.end(), DataType::kUndefined) > 0;
  if (spec.has_input(1)) {
    if (!int_dtype(spec.input_dtype(1))) return false;
    if (omitted && !spec.constant(1)) return false;
  }
  return true;
}

Result<std::unique_ptr<Kernel>> concat_split_create(const LayerSpec& spec) {
  const bool split = spec.op == Op::Split;
  if (!(split ? split_supports(spec) : concat_supports(spec))) return unsupported("kiln_cuda_concat/split: unsupported layer");
  const Attributes& a = spec.attributes();
  std::vector<int64_t> sizes;
  if (split && spec.constant(1) && spec.constant(1)->size() > 0) sizes = spec.constant(1)->to_int_vector();
  return std::unique_ptr<Kernel>(
      new ConcatSplitKernel(split, a.get_int("axis", split ? 0 : 1), std::move(sizes), split && a.has("num_outputs")));
}

// ---------------------------------------------------------------------------------------
// Gather: y[o, j, t] = x[o, idx[j], t]; out-of-range indices write zeros.

template <typename U, typename Idx, typename I>
__global__ void gather_kernel(const U* __restrict__ x, const Idx* __restrict__ idx, U* __restrict__ y, int64_t outer,
                              int64_t nidx, int64_t n, int64_t inner) {
  const I total = static_cast<I>(outer * nidx * inner);
  const I in_ = static_cast<I>(inner), ni = static_cast<I>(nidx);
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I q = i / in_;
    const I t = i - q * in_;
    const I o = q / ni;
    const I j = q - o * ni;
    int64_t v = static_cast<int64_t>(idx[j]);
    if (v < 0) v += n;
    if (v >= 0 && v < n) {
      y[i] = x[(static_cast<I>(o) * static_cast<I>(n) + static_cast<I>(v)) * in_ + t];
    } else {
      y[i] = U{};
    }
  }
}

class GatherKernel final : public Kernel {
 public:
  explicit GatherKernel(int64_t axis) : axis_(axis) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* ws) override {
    *ws = 0;
    const Dims& d = in[0].dims;
    KILN_RETURN_IF_ERROR(fast::gather_geometry(d, in[1].dims, out[0].dims, axis_, &outer_, &inner_, &n_));
    nidx_ = num_elements(in[1].dims);
    es_ = dtype_size(in[0].dtype);
    idx64_ = in[1].dtype == DataType::kInt64;
    in_elems_ = num_elements(d);
    return Status::ok();
  }
  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    const int64_t total = outer_ * nidx_ * inner_;
    if (total == 0) return Status::ok();
    const void* x = in[0]->raw();
    void* y = out[0]->raw();
    size_t unit = es_;
    for (size_t u : {size_t{16}, size_t{8}, size_t{4}, size_t{2}}) {
      if (u <= es_) break;
      if ((static_cast<size_t>(inner_) * es_) % u == 0 && aligned(x, u) && aligned(y, u)) {
        unit = u;
        break;
      }
    }
    const int64_t inner_u = static_cast<int64_t>(static_cast<size_t>(inner_) * es_ / unit);
    const int64_t total_u = outer_ * nidx_ * inner_u;
    const bool small = total_u <= kI32Max && in_elems_ <= kI32Max;
    const unsigned blocks = blocks_for(total_u, kThreads);
    const void* ip = in[1]->raw();
    return by_unit(unit, [&]<typename U>() -> Status {
      const U* xp = static_cast<const U*>(x);
      U* yp = static_cast<U*>(y);
      if (idx64_) {
        const auto* id = static_cast<const int64_t*>(ip);
        if (small) gather_kernel<U, int64_t, int32_t><<<blocks, kThreads, 0, stream>>>(xp, id, yp, outer_, nidx_, n_, inner_u);
        else gather_kernel<U, int64_t, int64_t><<<blocks, kThreads, 0, stream>>>(xp, id, yp, outer_, nidx_, n_, inner_u);
      } else {
        const auto* id = static_cast<const int32_t*>(ip);
        if (small) gather_kernel<U, int32_t, int32_t><<<blocks, kThreads, 0, stream>>>(xp, id, yp, outer_, nidx_, n_, inner_u);
        else gather_kernel<U, int32_t, int64_t><<<blocks, kThreads, 0, stream>>>(xp, id, yp, outer_, nidx_, n_, inner_u);
      }
      KILN_CUDA_LAUNCH_CHECK("gather");
      return Status::ok();
    });
  }

 private:
  int64_t axis_;
  int64_t outer_ = 1, inner_ = 1, n_ = 0, nidx_ = 0, in_elems_ = 0;
  size_t es_ = 4;
  bool idx64_ = true;
};

bool gather_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  return spec.input_dtypes.size() == 2 && movable(dt) && spec.output_dtype(0) == dt &&
         spec.output_dtypes.size() == 1 && int_dtype(spec.input_dtype(1));
}

Result<std::unique_ptr<Kernel>> gather_create(const LayerSpec& spec) {
  if (!gather_supports(spec)) return unsupported("kiln_cuda_gather: unsupported layer");
  return std::unique_ptr<Kernel>(new GatherKernel(spec.attributes().get_int("axis", 0)));
}

// ---------------------------------------------------------------------------------------
// Slice (constant starts, axes, steps; ends may be runtime: the output shape decides)

class SliceKernel final : public Kernel {
 public:
  SliceKernel(std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> axes,
              std::vector<int64_t> steps)
      : starts_(std::move(starts)), ends_(std::move(ends)), axes_(std::move(axes)), steps_(std::move(steps)) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* ws) override {
    *ws = 0;
    const Dims& x = in[0].dims;
    const Dims& y = out[0].dims;
    Dims strides;
    int64_t offset = 0;
    KILN_RETURN_IF_ERROR(fast::slice_geometry(x, y, starts_, ends_, axes_, steps_, &strides, &offset));
    return build_plan(y, strides, offset, dtype_size(in[0].dtype), num_elements(x), &plan_);
  }

  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    return launch_plan(plan_, in[0]->raw(), out[0]->raw(), stream);
  }

 private:
  std::vector<int64_t> starts_, ends_, axes_, steps_;
  MovePlan plan_;
};

bool slice_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  const size_t nin = spec.input_dtypes.size();
  if (nin < 3 || nin > 5 || !movable(dt) || spec.output_dtype(0) != dt || spec.output_dtypes.size() != 1) return false;
  if (!int_dtype(spec.input_dtype(1)) || !spec.constant(1) || !int_dtype(spec.input_dtype(2))) return false;
  for (size_t i = 3; i < nin; ++i) {
    if (spec.has_input(i) && (!int_dtype(spec.input_dtype(i)) || !spec.constant(i))) return false;
  }
  return true;
}

Result<std::unique_ptr<Kernel>> slice_create(const LayerSpec& spec) {
  if (!slice_supports(spec)) return unsupported("kiln_cuda_slice: unsupported layer");
  auto ints = [&](size_t i) {
    const Tensor* t = spec.constant(i);
    return spec.has_input(i) && t ? t->to_int_vector() : std::vector<int64_t>{};
  };
  return std::unique_ptr<Kernel>(new SliceKernel(ints(1), ints(2), ints(3), ints(4)));
}

// ---------------------------------------------------------------------------------------
// Expand (broadcast to the output shape) and Tile (output = input repeated per axis)

class BroadcastKernel final : public Kernel {
 public:
  explicit BroadcastKernel(bool tile) : tile_(tile) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* ws) override {
    *ws = 0;
    const Dims& x = in[0].dims;
    const Dims& y = out[0].dims;
    const size_t es = dtype_size(in[0].dtype);
    const Dims cs = contiguous_strides(x);
    if (!tile_) {
      KILN_ENSURE(y.size() >= x.size(), "Expand: output rank is below the input's");
      const size_t off = y.size() - x.size();
      Dims s(y.size(), 0);
      for (size_t i = 0; i < x.size(); ++i) {
        KILN_ENSURE(x[i] == y[off + i] || x[i] == 1, "Expand: input ", dims_str(x), " does not broadcast to ",
                    dims_str(y));
        s[off + i] = x[i] == 1 ? 0 : cs[i];
      }
      return build_plan(y, s, 0, es, num_elements(x), &plan_);
    }
    KILN_ENSURE(y.size() == x.size(), "Tile: output rank differs");
    Dims vd, vs;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i] == 0) {
        KILN_ENSURE(y[i] == 0, "Tile: output shape differs");
        vd.push_back(1);
        vs.push_back(0);
        vd.push_back(0);
        vs.push_back(cs[i]);
        continue;
      }
      KILN_ENSURE(y[i] % x[i] == 0, "Tile: output shape ", dims_str(y), " is not a tiling of ", dims_str(x));
      vd.push_back(y[i] / x[i]);
      vs.push_back(0);
      vd.push_back(x[i]);
      vs.push_back(cs[i]);
    }
    return build_plan(vd, vs, 0, es, num_elements(x), &plan_);
  }
  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    return launch_plan(plan_, in[0]->raw(), out[0]->raw(), stream);
  }

 private:
  bool tile_;
  MovePlan plan_;
};

bool broadcast_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  return spec.input_dtypes.size() == 2 && movable(dt) && spec.output_dtype(0) == dt &&
         spec.output_dtypes.size() == 1 && int_dtype(spec.input_dtype(1));
}

Result<std::unique_ptr<Kernel>> broadcast_create(const LayerSpec& spec) {
  if (!broadcast_supports(spec)) return unsupported("kiln_cuda_expand/tile: unsupported layer");
  return std::unique_ptr<Kernel>(new BroadcastKernel(spec.op == Op::Tile));
}

// ---------------------------------------------------------------------------------------
// Pad: constant / edge / reflect / wrap; negative pads crop.

constexpr int kMaxPadDims = 8;
enum PadMode : int { kPadConstant = 0, kPadEdge = 1, kPadReflect = 2, kPadWrap = 3 };

struct PadParams {
  int rank = 0;
  int mode = kPadConstant;
  int64_t total = 0;
  int64_t odims[kMaxPadDims] = {};
  int64_t istr[kMaxPadDims] = {};
  int64_t pb[kMaxPadDims] = {};  // padding before (>= 0)
  int64_t lo[kMaxPadDims] = {};  // first kept input position
  int64_t m[kMaxPadDims] = {};   // kept input extent
};

template <typename T, typename I>
__global__ void pad_kernel(const T* __restrict__ x, T* __restrict__ y, const T* __restrict__ value, PadParams p) {
  const T cv = value ? *value : T{};
  const I total = static_cast<I>(p.total);
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    I rem = i, off = 0;
    bool constant = false;
    for (int d = p.rank - 1; d >= 0; --d) {
      const I od = static_cast<I>(p.odims[d]);
      const I q = rem / od;
      const I o = rem - q * od;
      rem = q;
      I j = o - static_cast<I>(p.pb[d]);
      const I m = static_cast<I>(p.m[d]);
      if (j < 0 || j >= m) {
        if (p.mode == kPadConstant) {
          constant = true;
          break;
        } else if (p.mode == kPadEdge) {
          j = j < 0 ? 0 : m - 1;
        } else if (p.mode == kPadWrap) {
          j = ((j % m) + m) % m;
        } else if (m == 1) {
          j = 0;
        } else {
          const I period = 2 * (m - 1);
          j = ((j % period) + period) % period;
          if (j >= m) j = period - j;
        }
      }
      off += (static_cast<I>(p.lo[d]) + j) * static_cast<I>(p.istr[d]);
    }
    y[i] = constant ? cv : x[off];
  }
}

class PadKernel final : public Kernel {
 public:
  PadKernel(std::vector<int64_t> pads, std::vector<int64_t> axes, bool has_axes, int mode)
      : pads_(std::move(pads)), axes_(std::move(axes)), has_axes_(has_axes), mode_(mode) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* ws) override {
    *ws = 0;
    const Dims& x = in[0].dims;
    const int64_t rank = static_cast<int64_t>(x.size());
    KILN_ENSURE(rank <= kMaxPadDims, "Pad: rank ", rank, " above ", kMaxPadDims);
    std::vector<int64_t> axes = axes_;
    if (!has_axes_) {
      axes.clear();
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    }
    const size_t na = axes.size();
    KILN_ENSURE(pads_.size() == 2 * na, "Pad: pads has ", pads_.size(), " values, expected ", 2 * na);
    Dims pb(static_cast<size_t>(rank), 0), pe(static_cast<size_t>(rank), 0);
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    for (size_t i = 0; i < na; ++i) {
      int64_t a = axes[i];
      KILN_ENSURE(a >= -rank && a < rank, "Pad: axis out of range");
      if (a < 0) a += rank;
      const size_t d = static_cast<size_t>(a);
      KILN_ENSURE(!seen[d], "Pad: axis repeated");
      seen[d] = true;
      pb[d] = pads_[i];
      pe[d] = pads_[na + i];
      KILN_ENSURE(std::abs(pb[d]) <= (int64_t{1} << 32) && std::abs(pe[d]) <= (int64_t{1} << 32), "Pad: pad out of range");
    }
    PadParams& p = p_;
    p = PadParams{};
    p.rank = static_cast<int>(rank);
    p.mode = mode_;
    const Dims is = contiguous_strides(x);
    Dims od(static_cast<size_t>(rank));
    for (size_t d = 0; d < static_cast<size_t>(rank); ++d) {
      const int64_t lo = std::max<int64_t>(0, -pb[d]);
      const int64_t m = x[d] - lo - std::max<int64_t>(0, -pe[d]);
      KILN_ENSURE(m >= 0, "Pad: negative pads crop more than the axis");
      od[d] = m + std::max<int64_t>(0, pb[d]) + std::max<int64_t>(0, pe[d]);
      KILN_ENSURE(mode_ == kPadConstant || m > 0 || od[d] == 0, "Pad: cannot pad an empty axis in this mode");
      p.odims[d] = od[d];
      p.istr[d] = is[d];
      p.pb[d] = std::max<int64_t>(0, pb[d]);
      p.lo[d] = lo;
      p.m[d] = m;
    }
    KILN_ENSURE(out[0].dims == od, "Pad: output shape ", dims_str(out[0].dims), " differs from ", dims_str(od));
    p.total = num_elements(od);
    int64_t maxpad = 0;
    for (size_t d = 0; d < static_cast<size_t>(rank); ++d) maxpad = std::max(maxpad, od[d] + p.pb[d]);
    small_ = p.total <= kI32Max && num_elements(x) <= kI32Max && maxpad <= kI32Max / 4;
    es_ = dtype_size(in[0].dtype);
    value_ = in.size() > 2 && in[2].dtype != DataType::kUndefined && num_elements(in[2].dims) == 1;
    if (in.size() > 2 && in[2].dtype != DataType::kUndefined) {
      KILN_ENSURE(num_elements(in[2].dims) <= 1, "Pad: constant_value must be a scalar");
    }
    return Status::ok();
  }
  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    if (p_.total == 0) return Status::ok();
    const void* cv = value_ && in.size() > 2 && in[2] ? in[2]->raw() : nullptr;
    const unsigned blocks = blocks_for(p_.total, kThreads);
    return by_unit(es_, [&]<typename U>() -> Status {
      const U* xp = static_cast<const U*>(in[0]->raw());
      U* yp = static_cast<U*>(out[0]->raw());
      // 32-bit index math when positions stay small (pads are bounded by 2^32 in prepare).
      if (small_) pad_kernel<U, int32_t><<<blocks, kThreads, 0, stream>>>(xp, yp, static_cast<const U*>(cv), p_);
      else pad_kernel<U, int64_t><<<blocks, kThreads, 0, stream>>>(xp, yp, static_cast<const U*>(cv), p_);
      KILN_CUDA_LAUNCH_CHECK("pad");
      return Status::ok();
    });
  }

 private:
  std::vector<int64_t> pads_, axes_;
  bool has_axes_;
  int mode_;
  PadParams p_;
  size_t es_ = 4;
  bool value_ = false;
  bool small_ = false;
};

int pad_mode(const std::string& s) {
  if (s == "constant") return kPadConstant;
  if (s == "edge") return kPadEdge;
  if (s == "reflect") return kPadReflect;
  if (s == "wrap") return kPadWrap;
  return -1;
}

bool pad_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  const size_t nin = spec.input_dtypes.size();
  if (nin < 2 || nin > 4 || !movable(dt) || spec.output_dtype(0) != dt || spec.output_dtypes.size() != 1) return false;
  if (pad_mode(spec.attributes().get_string("mode", "constant")) < 0) return false;
  if (!int_dtype(spec.input_dtype(1)) || !spec.constant(1) || spec.constant(1)->rank() > 1) return false;
  if (spec.has_input(2) && spec.input_dtype(2) != dt) return false;  // a value of another dtype: convert on CPU
  if (spec.has_input(3) &&
      (!int_dtype(spec.input_dtype(3)) || !spec.constant(3) || spec.constant(3)->rank() > 1))
    return false;
  return true;
}

Result<std::unique_ptr<Kernel>> pad_create(const LayerSpec& spec) {
  if (!pad_supports(spec)) return unsupported("kiln_cuda_pad: unsupported layer");
  std::vector<int64_t> axes;
  if (spec.has_input(3)) axes = spec.constant(3)->to_int_vector();
  return std::unique_ptr<Kernel>(new PadKernel(spec.constant(1)->to_int_vector(), std::move(axes),
                                               spec.has_input(3),
                                               pad_mode(spec.attributes().get_string("mode", "constant"))));
}

// ---------------------------------------------------------------------------------------
// Resize: separable taps along the last two axes (the others must keep their size), tap
// tables computed on the host in double by the reference kernel's resize_taps.

// Per-axis table: out positions x k taps (index, weight); unused taps have weight 0.
struct AxisTaps {
  int k = 1;
  std::vector<int32_t> idx;
  std::vector<float> wt;
};

AxisTaps axis_taps(const ResizeAttrs& p, int64_t in, int64_t out, double scale, bool identity) {
  AxisTaps t;
  std::vector<std::vector<int32_t>> is(static_cast<size_t>(out));
  std::vector<std::vector<float>> ws(static_cast<size_t>(out));
  for (int64_t j = 0; j < out; ++j) {
    if (identity) {
      is[static_cast<size_t>(j)] = {static_cast<int32_t>(j)};
      ws[static_cast<size_t>(j)] = {1.0f};
    } else {
      // No roi: tf_crop_and_resize runs on the CPU.
      const double x = resize_source_coordinate(p, static_cast<double>(j), scale, in, out, 0.0, 1.0);
      const ResizeTaps taps = resize_taps(p, x, scale, in);
      for (size_t q = 0; q < taps.index.size(); ++q) {
        is[static_cast<size_t>(j)].push_back(static_cast<int32_t>(taps.index[q]));
        ws[static_cast<size_t>(j)].push_back(static_cast<float>(taps.weight[q]));
      }
    }
    t.k = std::max<int>(t.k, static_cast<int>(is[static_cast<size_t>(j)].size()));
  }
  t.idx.assign(static_cast<size_t>(out * t.k), 0);
  t.wt.assign(static_cast<size_t>(out * t.k), 0.0f);
  for (int64_t j = 0; j < out; ++j) {
    for (size_t q = 0; q < is[static_cast<size_t>(j)].size(); ++q) {
      t.idx[static_cast<size_t>(j * t.k) + q] = is[static_cast<size_t>(j)][q];
      t.wt[static_cast<size_t>(j * t.k) + q] = ws[static_cast<size_t>(j)][q];
    }
  }
  return t;
}

struct ResizeParams {
  int64_t outer = 0, ih = 0, iw = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1;
  bool nearest = false;
};

template <typename T, typename I>
__global__ void resize_kernel(const T* __restrict__ x, T* __restrict__ y, const int32_t* __restrict__ hidx,
                              const float* __restrict__ hw, const int32_t* __restrict__ widx,
                              const float* __restrict__ ww, ResizeParams p) {
  const I total = static_cast<I>(p.outer * p.oh * p.ow);
  const I ow = static_cast<I>(p.ow), oh = static_cast<I>(p.oh), iw = static_cast<I>(p.iw);
  const I plane = static_cast<I>(p.ih * p.iw);
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I t = i / ow;
    const I ox = i - t * ow;
    const I o = t / oh;
    const I oy = t - o * oh;
    const T* src = x + o * plane;
    if (p.nearest) {
      y[i] = src[static_cast<I>(hidx[oy]) * iw + widx[ox]];
      continue;
    }
    float acc = 0.f;
    for (int a = 0; a < p.kh; ++a) {
      const float wa = hw[oy * p.kh + a];
      if (wa == 0.f) continue;
      const T* row = src + static_cast<I>(hidx[oy * p.kh + a]) * iw;
      float racc = 0.f;
      for (int b = 0; b < p.kw; ++b) racc += ww[ox * p.kw + b] * to_f32(row[widx[ox * p.kw + b]]);
      acc += wa * racc;
    }
    y[i] = from_f32<T>(acc);
  }
}

class ResizeKernel final : public Kernel {
 public:
  ResizeKernel(ResizeAttrs a, std::vector<double> scales, std::vector<int64_t> sizes, std::vector<int64_t> axes,
               bool has_axes)
      : a_(std::move(a)), scales_(std::move(scales)), sizes_(std::move(sizes)), axes_(std::move(axes)),
        has_axes_(has_axes) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* ws) override {
    *ws = 0;
    const Dims& x = in[0].dims;
    const int64_t rank = static_cast<int64_t>(x.size());
    KILN_ENSURE(rank >= 1, "Resize: scalar input");
    std::vector<int64_t> axes = axes_;
    if (!has_axes_) {
      axes.clear();
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    }
    for (int64_t& ax : axes) {
      KILN_ENSURE(ax >= -rank && ax < rank, "Resize: axis out of range");
      if (ax < 0) ax += rank;
    }
    const size_t na = axes.size();
    std::vector<double> scale(static_cast<size_t>(rank), 1.0);
    Dims od = x;
    if (!scales_.empty()) {
      KILN_ENSURE(scales_.size() == na, "Resize: scales has ", scales_.size(), " values, expected ", na);
      for (size_t i = 0; i < na; ++i) {
        const double s = scales_[i];
        KILN_ENSURE(std::isfinite(s) && s > 0, "Resize: bad scale");
        const size_t d = static_cast<size_t>(axes[i]);
        scale[d] = s;
        od[d] = static_cast<int64_t>(std::floor(s * static_cast<double>(x[d])));
      }
    } else {
      KILN_ENSURE(sizes_.size() == na, "Resize: sizes has ", sizes_.size(), " values, expected ", na);
      for (size_t i = 0; i < na; ++i) {
        const size_t d = static_cast<size_t>(axes[i]);
        KILN_ENSURE(sizes_[i] >= 0 && (x[d] > 0 || sizes_[i] == 0), "Resize: bad size");
        od[d] = sizes_[i];
        scale[d] = x[d] > 0 ? static_cast<double>(sizes_[i]) / static_cast<double>(x[d]) : 1.0;
      }
    }
    KILN_ENSURE(out[0].dims == od, "Resize: output shape ", dims_str(out[0].dims), " differs from ", dims_str(od));
    auto identity = [&](size_t d) { return std::fabs(scale[d] - 1.0) <= 1e-9 && od[d] == x[d]; };
    for (int64_t d = 0; d + 2 < rank; ++d) {
      KILN_ENSURE(identity(static_cast<size_t>(d)), "Resize: only the last two axes may be resized on CUDA");
    }
    p_ = ResizeParams{};
    p_.nearest = a_.mode == "nearest" && !a_.exclude_outside;
    const size_t dw = static_cast<size_t>(rank - 1);
    p_.iw = x[dw];
    p_.ow = od[dw];
    if (rank >= 2) {
      const size_t dh = static_cast<size_t>(rank - 2);
      p_.ih = x[dh];
      p_.oh = od[dh];
    } else {
      p_.ih = p_.oh = 1;
    }
    p_.outer = 1;
    for (int64_t d = 0; d + 2 < rank; ++d) p_.outer *= x[static_cast<size_t>(d)];
    total_ = num_elements(od);
    if (total_ == 0) return Status::ok();
    KILN_ENSURE(p_.ih <= kI32Max && p_.iw <= kI32Max, "Resize: axis too long");
    AxisTaps th = rank >= 2 ? axis_taps(a_, p_.ih, p_.oh, scale[static_cast<size_t>(rank - 2)], identity(static_cast<size_t>(rank - 2)))
                            : axis_taps(a_, 1, 1, 1.0, true);
    AxisTaps tw = axis_taps(a_, p_.iw, p_.ow, scale[dw], identity(dw));
    p_.kh = th.k;
    p_.kw = tw.k;
    if (p_.nearest) KILN_ENSURE(th.k == 1 && tw.k == 1, "Resize: nearest with several taps");
    KILN_RETURN_IF_ERROR(hidx_.upload(th.idx.data(), th.idx.size() * sizeof(int32_t)));
    KILN_RETURN_IF_ERROR(hw_.upload(th.wt.data(), th.wt.size() * sizeof(float)));
    KILN_RETURN_IF_ERROR(widx_.upload(tw.idx.data(), tw.idx.size() * sizeof(int32_t)));
    KILN_RETURN_IF_ERROR(ww_.upload(tw.wt.data(), tw.wt.size() * sizeof(float)));
    dtype_ = in[0].dtype;
    small_ = total_ <= kI32Max && num_elements(x) <= kI32Max;
    return Status::ok();
  }

  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    if (total_ == 0) return Status::ok();
    const unsigned blocks = blocks_for(total_, kThreads);
    return KILN_CUDA_FLOAT_DISPATCH(dtype_, {
      const T* xp = static_cast<const T*>(in[0]->raw());
      T* yp = static_cast<T*>(out[0]->raw());
      if (small_) {
        resize_kernel<T, int32_t><<<blocks, kThreads, 0, stream>>>(xp, yp, hidx_.as<int32_t>(), hw_.as<float>(),
                                                                   widx_.as<int32_t>(), ww_.as<float>(), p_);
      } else {
        resize_kernel<T, int64_t><<<blocks, kThreads, 0, stream>>>(xp, yp, hidx_.as<int32_t>(), hw_.as<float>(),
                                                                   widx_.as<int32_t>(), ww_.as<float>(), p_);
      }
      KILN_CUDA_LAUNCH_CHECK("resize");
      return Status::ok();
    });
  }

 private:
  ResizeAttrs a_;
  std::vector<double> scales_;
  std::vector<int64_t> sizes_, axes_;
  bool has_axes_;
  ResizeParams p_;
  int64_t total_ = 0;
  DataType dtype_ = DataType::kFloat32;
  bool small_ = false;
  DeviceBuffer hidx_, hw_, widx_, ww_;
};

// Reads the constant scales (float) or sizes (int) of a Resize layer.
bool resize_constants(const LayerSpec& spec, std::vector<double>* scales, std::vector<int64_t>* sizes) {
  scales->clear();
  sizes->clear();
  if (spec.has_input(2)) {
    const Tensor* s = spec.constant(2);
    if (!s || !is_float(s->dtype()) || s->rank() > 1) return false;
    for (int64_t i = 0; i < s->size(); ++i) scales->push_back(s->get_double(i));
  }
  if (spec.has_input(3)) {
    const Tensor* s = spec.constant(3);
    if (!s || !is_integer(s->dtype()) || s->rank() > 1) return false;
    if (s->size() > 0) *sizes = s->to_int_vector();
  }
  return scales->empty() != sizes->empty();
}

bool resize_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  const size_t nin = spec.input_dtypes.size();
  if (nin < 1 || nin > 4 || !is_cuda_float(dt) || spec.output_dtype(0) != dt || spec.output_dtypes.size() != 1)
    return false;
  const Attributes& a = spec.attributes();
  const std::string mode = a.get_string("mode", "nearest");
  const std::string coord = a.get_string("coordinate_transformation_mode", "half_pixel");
  const std::string nm = a.get_string("nearest_mode", "round_prefer_floor");
  if (mode != "nearest" && mode != "linear" && mode != "cubic") return false;
  if (coord != "half_pixel" && coord != "half_pixel_symmetric" && coord != "pytorch_half_pixel" &&
      coord != "align_corners" && coord != "asymmetric" && coord != "tf_half_pixel_for_nn")
    return false;  // tf_crop_and_resize: CPU
  if (nm != "round_prefer_floor" && nm != "round_prefer_ceil" && nm != "floor" && nm != "ceil") return false;
  if (a.get_string("keep_aspect_ratio_policy", "stretch") != "stretch") return false;
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  if (!resize_constants(spec, &scales, &sizes)) return false;
  // Constant scales on leading axes must be 1 (only the last two axes are resized here).
  if (!scales.empty()) {
    const size_t n = scales.size();
    std::vector<int64_t> axes = a.get_ints("axes");
    if (axes.empty()) {
      for (size_t i = 0; i + 2 < n; ++i) {
        if (scales[i] != 1.0) return false;
      }
    }
  }
  return true;
}

Result<std::unique_ptr<Kernel>> resize_create(const LayerSpec& spec) {
  if (!resize_supports(spec)) return unsupported("kiln_cuda_resize: unsupported layer");
  const Attributes& a = spec.attributes();
  ResizeAttrs p = resize_attrs(a);
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  resize_constants(spec, &scales, &sizes);
  return std::unique_ptr<Kernel>(
      new ResizeKernel(std::move(p), std::move(scales), std::move(sizes), a.get_ints("axes"), a.has("axes")));
}

}  // namespace

void add_movement_tactics(std::vector<Tactic>& out) {
  for (Op op : kShapeOnlyOps) {
    out.push_back({"kiln_cuda_copy", op, copy_supports, copy_create});
  }
  out.push_back({"kiln_cuda_transpose", Op::Transpose, transpose_supports, transpose_create});
  out.push_back({"kiln_cuda_depth_to_space", Op::DepthToSpace, depth_space_supports, depth_space_create});
  out.push_back({"kiln_cuda_space_to_depth", Op::SpaceToDepth, depth_space_supports, depth_space_create});
  out.push_back({"kiln_cuda_concat", Op::Concat, concat_supports, concat_split_create});
  out.push_back({"kiln_cuda_split", Op::Split, split_supports, concat_split_create});
  out.push_back({"kiln_cuda_slice", Op::Slice, slice_supports, slice_create});
  out.push_back({"kiln_cuda_gather", Op::Gather, gather_supports, gather_create});
  out.push_back({"kiln_cuda_expand", Op::Expand, broadcast_supports, broadcast_create});
  out.push_back({"kiln_cuda_tile", Op::Tile, broadcast_supports, broadcast_create});
  out.push_back({"kiln_cuda_pad", Op::Pad, pad_supports, pad_create});
  out.push_back({"kiln_cuda_resize", Op::Resize, resize_supports, resize_create});
}

}  // namespace kiln::cuda
