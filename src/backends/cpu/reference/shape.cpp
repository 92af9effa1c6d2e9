// Shape manipulation reference kernels: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze,
// Transpose, Expand, Tile, Concat, Split, Slice, DepthToSpace, SpaceToDepth, CenterCropPad.
// These ops only move data, so they work on raw elements of any dtype.
// Generators (ConstantOfShape, Range, EyeLike, Trilu) live in generate.cpp and the
// index-driven ops (Gather*, Scatter*, OneHot, NonZero...) in indexing.cpp.
#include <algorithm>
#include <limits>
#include <numeric>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/shape_common.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

using shape_detail::check_dims;
using shape_detail::copy_strided;
using shape_detail::gather_view;
using shape_detail::read_ints;
using shape_detail::register_generator_kernels;
using shape_detail::register_indexing_kernels;

namespace {

Status shape_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const int64_t r = x.rank();
  auto clamp = [r](int64_t v) {
    if (v < 0) v += r;
    return std::clamp<int64_t>(v, 0, r);
  };
  int64_t start = clamp(ctx.attr().get_int("start", 0));
  int64_t end = ctx.attr().has("end") ? clamp(ctx.attr().get_int("end", r)) : r;
  int64_t n = std::max<int64_t>(0, end - start);
  Tensor& out = ctx.alloc_output(0, DataType::kInt64, {n});
  for (int64_t i = 0; i < n; ++i) out.data<int64_t>()[i] = x.dim(static_cast<int>(start + i));
  return Status::ok();
}

Status size_kernel(KernelContext& ctx) {
  ctx.set_output(0, make_scalar_int64(ctx.input(0)->size()));
  return Status::ok();
}

Status reshape_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  std::vector<int64_t> shape;
  KILN_RETURN_IF_ERROR(read_ints(*ctx.input(1), "shape", &shape));
  const bool allowzero = ctx.attr().get_int("allowzero", 0) != 0;
  int infer = -1;
  bool has_zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t& d = shape[i];
    if (d == -1) {
      KILN_ENSURE(infer < 0, "shape ", dims_str(shape), " has more than one -1");
      infer = static_cast<int>(i);
    } else if (d < -1) {
      return invalid_argument("shape ", dims_str(shape), " has an invalid dimension ", d);
    } else if (d == 0) {
      if (allowzero) {
        has_zero = true;
      } else {
        KILN_ENSURE(static_cast<int>(i) < x.rank(), "shape ", dims_str(shape), " copies dimension ", i,
                    " (0) but the input ", x.describe(), " has rank ", x.rank());
        d = x.dim(static_cast<int>(i));
      }
    }
  }
  KILN_ENSURE(!(allowzero && has_zero && infer >= 0), "shape ", dims_str(shape),
              " has both 0 and -1 with allowzero=1");
  if (infer >= 0) {
    Dims known_dims = shape;
    known_dims[static_cast<size_t>(infer)] = 1;
    KILN_RETURN_IF_ERROR(check_dims(known_dims, "Reshape shape"));  // bounds `known` below
    int64_t known = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (static_cast<int>(i) != infer) known *= shape[i];
    }
    KILN_ENSURE(known != 0 && x.size() % known == 0, "cannot reshape ", x.describe(), " to ", dims_str(shape));
    shape[static_cast<size_t>(infer)] = x.size() / known;
  }
  KILN_RETURN_IF_ERROR(check_dims(shape, "Reshape output shape"));
  KILN_ENSURE(num_elements(shape) == x.size(), "cannot reshape ", x.describe(), " to ", dims_str(shape));
  ctx.set_output(0, x.reshaped(shape));
  return Status::ok();
}

Status flatten_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  int64_t axis = ctx.attr().get_int("axis", 1);
  const int64_t r = x.rank();
  KILN_ENSURE(axis >= -r && axis <= r, "axis ", axis, " is out of range for rank ", r);
  if (axis < 0) axis += r;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= x.dim(static_cast<int>(i));
  ctx.set_output(0, x.reshaped({outer, inner}));
  return Status::ok();
}

Status squeeze_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
  if (ctx.input(1) && ctx.input(1)->size() > 0) {  // empty axes: same as absent
    std::vector<int64_t> axes;
    KILN_RETURN_IF_ERROR(read_ints(*ctx.input(1), "axes", &axes));
    KILN_RETURN_IF_ERROR(normalize_axes(axes, x.rank()));
    for (int64_t a : axes) {
      // normalize_axes lets axis 0 through for a scalar; a scalar has no axis to squeeze
      // (x.dim(0) read past its dims, found by fuzz_onnx_importer).
      KILN_ENSURE(a < x.rank(), "axis ", a, " is out of range for rank ", x.rank());
      KILN_ENSURE(x.dim(static_cast<int>(a)) == 1, "cannot squeeze axis ", a, " of ", x.describe(),
                  ": its size is not 1");
      drop[static_cast<size_t>(a)] = true;
    }
  } else {
    for (int i = 0; i < x.rank(); ++i) drop[static_cast<size_t>(i)] = x.dim(i) == 1;
  }
  Dims out;
  for (int i = 0; i < x.rank(); ++i) {
    if (!drop[static_cast<size_t>(i)]) out.push_back(x.dim(i));
  }
  ctx.set_output(0, x.reshaped(out));
  return Status::ok();
}

Status unsqueeze_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  std::vector<int64_t> axes;
  KILN_RETURN_IF_ERROR(read_ints(*ctx.input(1), "axes", &axes));
  const int64_t out_rank = x.rank() + static_cast<int64_t>(axes.size());
  KILN_RETURN_IF_ERROR(normalize_axes(axes, out_rank));
  std::vector<bool> is_new(static_cast<size_t>(out_rank), false);
  for (int64_t a : axes) is_new[static_cast<size_t>(a)] = true;
  Dims out;
  int src = 0;
  for (int64_t i = 0; i < out_rank; ++i) out.push_back(is_new[static_cast<size_t>(i)] ? 1 : x.dim(src++));
  ctx.set_output(0, x.reshaped(out));
  return Status::ok();
}

// Validates a permutation of [0, rank).
Status check_perm(const std::vector<int64_t>& perm, int64_t rank) {
  KILN_ENSURE(static_cast<int64_t>(perm.size()) == rank, "perm ", dims_str(perm), " does not match rank ", rank);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t p : perm) {
    KILN_ENSURE(p >= 0 && p < rank && !seen[static_cast<size_t>(p)], "perm ", dims_str(perm),
                " is not a permutation of [0, ", rank, ")");
    seen[static_cast<size_t>(p)] = true;
  }
  return Status::ok();
}

// out = x transposed by perm (out dim i = x dim perm[i]).
Tensor transpose_tensor(const Tensor& x, const std::vector<int64_t>& perm) {
  Dims in_strides = contiguous_strides(x.dims());
  Dims dims, strides;
  for (int64_t p : perm) {
    dims.push_back(x.dim(static_cast<int>(p)));
    strides.push_back(in_strides[static_cast<size_t>(p)]);
  }
  return gather_view(x, dims, 0, strides);
}

Status transpose_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  std::vector<int64_t> perm;
  if (ctx.attr().has("perm")) {
    perm = ctx.attr().get_ints("perm");
    // Negative entries are not allowed by the spec but some exporters emit them.
    for (int64_t& p : perm) {
      if (p < 0) p += x.rank();
    }
  } else {
    for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  }
  KILN_RETURN_IF_ERROR(check_perm(perm, x.rank()));
  ctx.set_output(0, transpose_tensor(x, perm));
  return Status::ok();
}

// Strides of `in` viewed with out_dims (numpy broadcasting; 0 along broadcast dims).
Dims broadcast_strides(const Dims& in, const Dims& out_dims) {
  Dims cs = contiguous_strides(in);
  Dims s(out_dims.size(), 0);
  size_t off = out_dims.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[off + i] = in[i] == 1 ? 0 : cs[i];
  return s;
}

Status expand_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  std::vector<int64_t> shape;
  KILN_RETURN_IF_ERROR(read_ints(*ctx.input(1), "shape", &shape));
  for (int64_t d : shape) KILN_ENSURE(d >= 0, "shape ", dims_str(shape), " has a negative dimension");
  Dims out_dims;
  KILN_RETURN_IF_ERROR(broadcast_shapes({x.dims(), shape}, &out_dims));
  KILN_RETURN_IF_ERROR(check_dims(out_dims, "Expand output"));
  ctx.set_output(0, gather_view(x, out_dims, 0, broadcast_strides(x.dims(), out_dims)));
  return Status::ok();
}

Status tile_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  std::vector<int64_t> reps;
  KILN_RETURN_IF_ERROR(read_ints(*ctx.input(1), "repeats", &reps));
  KILN_ENSURE(static_cast<int64_t>(reps.size()) == x.rank(), "repeats ", dims_str(reps), " must have one entry per axis of ",
              x.describe());
  // View x as [r0, d0, r1, d1, ...] with stride 0 along each repeat dim.
  Dims cs = contiguous_strides(x.dims());
  Dims view_dims, view_strides;
  for (int i = 0; i < x.rank(); ++i) {
    view_dims.push_back(reps[static_cast<size_t>(i)]);
    view_strides.push_back(0);
    view_dims.push_back(x.dim(i));
    view_strides.push_back(cs[static_cast<size_t>(i)]);
  }
  KILN_RETURN_IF_ERROR(check_dims(view_dims, "Tile repeats x input shape"));
  Dims out_dims;
  for (int i = 0; i < x.rank(); ++i) out_dims.push_back(x.dim(i) * reps[static_cast<size_t>(i)]);
  ctx.set_output(0, gather_view(x, view_dims, 0, view_strides).reshaped(out_dims));
  return Status::ok();
}

Status concat_kernel(KernelContext& ctx) {
  std::vector<const Tensor*> ins;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (ctx.input(i)) ins.push_back(ctx.input(i));
  }
  KILN_ENSURE(!ins.empty(), "Concat needs at least one input");
  const Tensor& first = *ins[0];
  KILN_ENSURE(first.rank() > 0, "Concat inputs must have rank >= 1, got ", first.describe());
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", 1), first.rank(), &axis));
  Dims out_dims = first.dims();
  out_dims[static_cast<size_t>(axis)] = 0;
  for (const Tensor* t : ins) {
    KILN_ENSURE(t->dtype() == first.dtype(), "inputs have different dtypes: ", first.describe(), " and ", t->describe());
    KILN_ENSURE(t->rank() == first.rank(), "inputs have different ranks: ", first.describe(), " and ", t->describe());
    for (int d = 0; d < first.rank(); ++d) {
      KILN_ENSURE(d == axis || t->dim(d) == first.dim(d), "input shapes ", dims_str(first.dims()), " and ",
                  dims_str(t->dims()), " differ outside axis ", axis);
    }
    out_dims[static_cast<size_t>(axis)] += t->dim(static_cast<int>(axis));
  }
  KILN_RETURN_IF_ERROR(check_dims(out_dims, "Concat output"));
  Tensor& out = ctx.alloc_output(0, first.dtype(), out_dims);
  const size_t es = dtype_size(first.dtype());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= out_dims[static_cast<size_t>(d)];
  for (int d = static_cast<int>(axis) + 1; d < first.rank(); ++d) inner *= out_dims[static_cast<size_t>(d)];
  const int64_t out_row = out_dims[static_cast<size_t>(axis)] * inner;
  int64_t col = 0;
  auto* dst = static_cast<std::byte*>(out.raw());
  for (const Tensor* t : ins) {
    const int64_t row = t->dim(static_cast<int>(axis)) * inner;
    const auto* src = static_cast<const std::byte*>(t->raw());
    if (row > 0) {
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(dst + (o * out_row + col) * static_cast<int64_t>(es), src + o * row * static_cast<int64_t>(es),
                    static_cast<size_t>(row) * es);
      }
    }
    col += row;
  }
  return Status::ok();
}

Status split_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.rank() > 0, "cannot split a scalar");
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", 0), x.rank(), &axis));
  const int64_t dim = x.dim(static_cast<int>(axis));
  const int64_t n = static_cast<int64_t>(ctx.outputs.size());
  KILN_ENSURE(n > 0, "Split has no outputs");
  std::vector<int64_t> sizes;
  if (ctx.input(1) && ctx.input(1)->size() > 0) {
    KILN_RETURN_IF_ERROR(read_ints(*ctx.input(1), "split", &sizes));
    KILN_ENSURE(static_cast<int64_t>(sizes.size()) == n, "split ", dims_str(sizes), " has ", sizes.size(),
                " entries but the node has ", n, " outputs");
    int64_t sum = 0;
    for (int64_t s : sizes) {
      KILN_ENSURE(s >= 0 && s <= dim, "split ", dims_str(sizes), " has an entry outside [0, ", dim, "]");
      sum += s;
    }
    KILN_ENSURE(sum == dim, "split ", dims_str(sizes), " sums to ", sum, " but axis ", axis, " of ", x.describe(),
                " has size ", dim);
  } else if (ctx.attr().has("num_outputs")) {
    int64_t k = ctx.attr().get_int("num_outputs", n);
    KILN_ENSURE(k == n, "num_outputs ", k, " does not match the node's ", n, " outputs");
    int64_t chunk = (dim + k - 1) / k;
    int64_t left = dim;
    for (int64_t i = 0; i < k; ++i) {
      sizes.push_back(std::min(chunk, left));
      left -= sizes.back();
    }
  } else {
    KILN_ENSURE(dim % n == 0, "axis ", axis, " of ", x.describe(), " cannot be split evenly into ", n, " outputs");
    sizes.assign(static_cast<size_t>(n), dim / n);
  }
  const Dims strides = contiguous_strides(x.dims());
  int64_t start = 0;
  for (int64_t i = 0; i < n; ++i) {
    Dims d = x.dims();
    d[static_cast<size_t>(axis)] = sizes[static_cast<size_t>(i)];
    if (ctx.output_wanted.size() <= static_cast<size_t>(i) || ctx.output_wanted[static_cast<size_t>(i)]) {
      ctx.set_output(static_cast<size_t>(i), gather_view(x, d, start * strides[static_cast<size_t>(axis)], strides));
    }
    start += sizes[static_cast<size_t>(i)];
  }
  return Status::ok();
}

Status slice_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const int64_t r = x.rank();
  std::vector<int64_t> starts, ends, axes, steps;
  KILN_RETURN_IF_ERROR(read_ints(*ctx.input(1), "starts", &starts));
  KILN_RETURN_IF_ERROR(read_ints(*ctx.input(2), "ends", &ends));
  KILN_ENSURE(starts.size() == ends.size(), "starts ", dims_str(starts), " and ends ", dims_str(ends),
              " have different lengths");
  if (ctx.input(3)) {
    KILN_RETURN_IF_ERROR(read_ints(*ctx.input(3), "axes", &axes));
    KILN_ENSURE(axes.size() == starts.size(), "axes ", dims_str(axes), " and starts ", dims_str(starts),
                " have different lengths");
    KILN_RETURN_IF_ERROR(normalize_axes(axes, r));
  } else {
    KILN_ENSURE(static_cast<int64_t>(starts.size()) <= r, "starts ", dims_str(starts), " has more entries than rank ", r);
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (ctx.input(4)) {
    KILN_RETURN_IF_ERROR(read_ints(*ctx.input(4), "steps", &steps));
    KILN_ENSURE(steps.size() == starts.size(), "steps ", dims_str(steps), " and starts ", dims_str(starts),
                " have different lengths");
  } else {
    steps.assign(starts.size(), 1);
  }
  const Dims cs = contiguous_strides(x.dims());
  Dims out_dims = x.dims();
  Dims strides = cs;
  int64_t offset = 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = static_cast<size_t>(axes[i]);
    const int64_t d = x.dims()[a];
    const int64_t step = steps[i];
    KILN_ENSURE(step != 0, "slice step for axis ", a, " is 0");
    int64_t start = starts[i], end = ends[i];
    if (start < 0) start += d;  // no overflow: d >= 0
    if (end < 0) end += d;
    int64_t count;
    if (d == 0) {
      count = 0;
    } else if (step > 0) {
      start = std::clamp<int64_t>(start, 0, d);
      end = std::clamp<int64_t>(end, 0, d);
      count = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, d - 1);
      end = std::clamp<int64_t>(end, -1, d - 1);
      // -(step + 1) + 1 as unsigned: no overflow for INT64_MIN.
      const uint64_t mag = static_cast<uint64_t>(-(step + 1)) + 1;
      count = start > end ? static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / mag) + 1 : 0;
    }
    out_dims[a] = count;
    if (count > 0) offset += start * cs[a];
    strides[a] = count > 1 ? cs[a] * step : 0;  // |step| < d when count > 1: no overflow
  }
  ctx.set_output(0, gather_view(x, out_dims, num_elements(out_dims) > 0 ? offset : 0, strides));
  return Status::ok();
}

Status depth_to_space_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.rank() == 4, "input must be 4-D [N,C,H,W], got ", x.describe());
  KILN_ENSURE(ctx.attr().has("blocksize"), "attribute 'blocksize' is required");
  const int64_t b = ctx.attr().get_int("blocksize", 1);
  KILN_ENSURE(b > 0 && b <= (int64_t{1} << 20), "blocksize ", b, " is out of range");
  const std::string mode = ctx.attr().get_string("mode", "DCR");
  KILN_ENSURE(mode == "DCR" || mode == "CRD", "mode must be DCR or CRD, got '", mode, "'");
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  KILN_ENSURE(b > 0 && c % b == 0 && (c / b) % b == 0, "channels ", c, " must be divisible by blocksize^2 (blocksize ", b, ")");
  const int64_t oc = c / (b * b);
  Tensor out;
  if (mode == "DCR") {
    out = transpose_tensor(x.reshaped({n, b, b, oc, h, w}), {0, 3, 4, 1, 5, 2});
  } else {
    out = transpose_tensor(x.reshaped({n, oc, b, b, h, w}), {0, 1, 4, 2, 5, 3});
  }
  ctx.set_output(0, out.reshaped({n, oc, h * b, w * b}));
  return Status::ok();
}

Status space_to_depth_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.rank() == 4, "input must be 4-D [N,C,H,W], got ", x.describe());
  KILN_ENSURE(ctx.attr().has("blocksize"), "attribute 'blocksize' is required");
  const int64_t b = ctx.attr().get_int("blocksize", 1);
  KILN_ENSURE(b > 0 && b <= (int64_t{1} << 20), "blocksize ", b, " is out of range");
  const std::string mode = ctx.attr().get_string("mode", "DCR");  // mode: opset 24
  KILN_ENSURE(mode == "DCR" || mode == "CRD", "mode must be DCR or CRD, got '", mode, "'");
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  KILN_ENSURE(b > 0 && h % b == 0 && w % b == 0, "height ", h, " and width ", w,
              " must be divisible by blocksize ", b);
  const std::vector<int64_t> perm = mode == "DCR" ? std::vector<int64_t>{0, 3, 5, 1, 2, 4}
                                                  : std::vector<int64_t>{0, 1, 3, 5, 2, 4};
  Tensor out = transpose_tensor(x.reshaped({n, c, h / b, b, w / b, b}), perm);
  ctx.set_output(0, out.reshaped({n, c * b * b, h / b, w / b}));
  return Status::ok();
}

Status center_crop_pad_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  std::vector<int64_t> shape, axes;
  KILN_RETURN_IF_ERROR(read_ints(*ctx.input(1), "shape", &shape));
  if (ctx.attr().has("axes")) {
    axes = ctx.attr().get_ints("axes");
    KILN_RETURN_IF_ERROR(normalize_axes(axes, x.rank()));
  } else {
    for (int i = 0; i < x.rank(); ++i) axes.push_back(i);
  }
  KILN_ENSURE(shape.size() == axes.size(), "shape ", dims_str(shape), " must have one entry per axis (", axes.size(),
              ")");
  Dims out_dims = x.dims(), copy_dims = x.dims();
  std::vector<int64_t> src_start(static_cast<size_t>(x.rank()), 0), dst_start(static_cast<size_t>(x.rank()), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = static_cast<size_t>(axes[i]);
    const int64_t d = x.dims()[a], s = shape[i];
    KILN_ENSURE(s >= 0, "shape ", dims_str(shape), " has a negative entry");
    out_dims[a] = s;
    copy_dims[a] = std::min(d, s);
    if (s < d) src_start[a] = (d - s) / 2;
    else dst_start[a] = (s - d) / 2;
  }
  KILN_RETURN_IF_ERROR(check_dims(out_dims, "CenterCropPad output"));
  Tensor& out = ctx.alloc_output(0, x.dtype(), out_dims);
  Dims ss = contiguous_strides(x.dims()), ds = contiguous_strides(out_dims);
  int64_t so = 0, dof = 0;
  for (int i = 0; i < x.rank(); ++i) {
    so += src_start[static_cast<size_t>(i)] * ss[static_cast<size_t>(i)];
    dof += dst_start[static_cast<size_t>(i)] * ds[static_cast<size_t>(i)];
  }
  copy_strided(dtype_size(x.dtype()), copy_dims, x.raw(), so, ss, out.raw(), dof, ds);
  return Status::ok();
}

}  // namespace

void register_shape_kernels(KernelRegistry& r) {
  r.add(Op::Shape, shape_kernel);
  r.add(Op::Size, size_kernel);
  r.add(Op::Reshape, reshape_kernel);
  r.add(Op::Flatten, flatten_kernel);
  r.add(Op::Squeeze, squeeze_kernel);
  r.add(Op::Unsqueeze, unsqueeze_kernel);
  r.add(Op::Transpose, transpose_kernel);
  r.add(Op::Expand, expand_kernel);
  r.add(Op::Tile, tile_kernel);
  r.add(Op::Concat, concat_kernel);
  r.add(Op::Split, split_kernel);
  r.add(Op::Slice, slice_kernel);
  r.add(Op::DepthToSpace, depth_to_space_kernel);
  r.add(Op::SpaceToDepth, space_to_depth_kernel);
  r.add(Op::CenterCropPad, center_crop_pad_kernel);
  register_generator_kernels(r);
  register_indexing_kernels(r);
}

}  // namespace kiln
