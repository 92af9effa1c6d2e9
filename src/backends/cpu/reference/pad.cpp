// Pad reference kernel: modes constant, reflect, edge, wrap; optional axes (opset 18);
// negative pads crop (the crop happens first, padding then extends the cropped extent).
#include <algorithm>
#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/nn_common.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

namespace {

// Maps output position o of one axis to an input position, or -1 for the constant value.
// lo/m: the cropped input range [lo, lo + m); pb: the (non-negative) padding before it.
int64_t map_index(int64_t o, int64_t pb, int64_t lo, int64_t m, const std::string& mode) {
  int64_t i = o - pb;
  if (i >= 0 && i < m) return lo + i;
  if (mode == "constant") return -1;
  if (mode == "edge") {
    i = i < 0 ? 0 : m - 1;
  } else if (mode == "wrap") {
    i = ((i % m) + m) % m;
  } else {  // reflect, repeated as numpy does for pads wider than the axis
    if (m == 1) {
      i = 0;
    } else {
      const int64_t period = 2 * (m - 1);
      i = ((i % period) + period) % period;
      if (i >= m) i = period - i;
    }
  }
  return lo + i;
}

Status pad_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor* pads_t = ctx.input(1);
  KILN_ENSURE(pads_t != nullptr, "input 'pads' is required");
  KILN_ENSURE(is_integer(pads_t->dtype()) && pads_t->rank() <= 1, "input 'pads' must be a 1-D integer tensor, got ",
              pads_t->describe());
  const std::vector<int64_t> pads = pads_t->to_int_vector();
  const int64_t rank = x.rank();
  std::vector<int64_t> axes;
  if (const Tensor* axes_t = ctx.input(3)) {
    KILN_ENSURE(is_integer(axes_t->dtype()) && axes_t->rank() <= 1, "input 'axes' must be a 1-D integer tensor, got ",
                axes_t->describe());
    axes = axes_t->to_int_vector();
    KILN_RETURN_IF_ERROR(normalize_axes(axes, rank));
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  const size_t na = axes.size();
  KILN_ENSURE(pads.size() == 2 * na, "input 'pads' has ", pads.size(), " values, expected ", 2 * na,
              " (2 per padded axis)");
  const std::string mode = ctx.attr().get_string("mode", "constant");
  KILN_ENSURE(mode == "constant" || mode == "reflect" || mode == "edge" || mode == "wrap", "unknown pad mode '", mode,
              "'");
  Dims pb(static_cast<size_t>(rank), 0), pe(static_cast<size_t>(rank), 0);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < na; ++i) {
    const size_t d = static_cast<size_t>(axes[i]);
    KILN_ENSURE(!seen[d], "axis ", axes[i], " appears twice in 'axes'");
    seen[d] = true;
    pb[d] = pads[i];
    pe[d] = pads[na + i];
    KILN_ENSURE(std::abs(pb[d]) <= (int64_t{1} << 32) && std::abs(pe[d]) <= (int64_t{1} << 32),
                "pad value out of range on axis ", d);
  }
  // Per-axis map from output position to input position (-1: constant value).
  Dims out_dims(static_cast<size_t>(rank));
  std::vector<std::vector<int64_t>> maps(static_cast<size_t>(rank));
  for (size_t d = 0; d < static_cast<size_t>(rank); ++d) {
    const int64_t n = x.dims()[d];
    const int64_t lo = std::max<int64_t>(0, -pb[d]);
    const int64_t m = n - lo - std::max<int64_t>(0, -pe[d]);
    KILN_ENSURE(m >= 0, "negative pads (", pb[d], ", ", pe[d], ") crop more than the ", n, " elements of axis ", d);
    out_dims[d] = m + std::max<int64_t>(0, pb[d]) + std::max<int64_t>(0, pe[d]);
    KILN_ENSURE(mode == "constant" || m > 0 || out_dims[d] == 0, "cannot ", mode, "-pad axis ", d,
                " which has no elements");
  }
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(out_dims, &total));
  for (size_t d = 0; d < static_cast<size_t>(rank); ++d) {
    const int64_t lo = std::max<int64_t>(0, -pb[d]);
    const int64_t m = x.dims()[d] - lo - std::max<int64_t>(0, -pe[d]);
    maps[d].resize(static_cast<size_t>(out_dims[d]));
    for (int64_t o = 0; o < out_dims[d]; ++o) {
      maps[d][static_cast<size_t>(o)] = map_index(o, std::max<int64_t>(0, pb[d]), lo, m, mode);
    }
  }
  const Tensor* cv = ctx.input(2);
  if (cv) KILN_ENSURE(cv->size() <= 1, "input 'constant_value' must be a scalar, got ", cv->describe());
  const Dims in_strides = contiguous_strides(x.dims());
  bool ok = dispatch_all(x.dtype(), [&]<typename T>() {
    T value{};
    if (cv && cv->size() == 1) {
      if (cv->dtype() == x.dtype()) {
        value = cv->data<T>()[0];
      } else {
        value = convert_element<T>(cv->get_double(0));
      }
    }
    Tensor& y = ctx.alloc_output(0, x.dtype(), out_dims);
    if (total == 0) return;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    int64_t o = 0;
    do {
      int64_t off = 0;
      bool constant = false;
      for (size_t d = 0; d < static_cast<size_t>(rank); ++d) {
        const int64_t i = maps[d][static_cast<size_t>(idx[d])];
        if (i < 0) {
          constant = true;
          break;
        }
        off += i * in_strides[d];
      }
      py[o++] = constant ? value : px[off];
    } while (next_index(idx, out_dims));
  });
  if (!ok) return unsupported_dtype(ctx.op, x.dtype());
  return Status::ok();
}

}  // namespace

void register_pad_kernels(KernelRegistry& r) { r.add(Op::Pad, pad_kernel); }

}  // namespace kiln
