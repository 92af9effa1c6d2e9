#include "backends/cpu/reference/util.h"

#include <algorithm>

namespace kiln {

Status normalize_axis(int64_t axis, int64_t rank, int64_t* out) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1)) {
    return invalid_argument("axis ", axis, " is out of range for rank ", rank);
  }
  *out = axis < 0 ? axis + rank : axis;
  return Status::ok();
}

Status normalize_axes(std::vector<int64_t>& axes, int64_t rank) {
  for (auto& a : axes) KILN_RETURN_IF_ERROR(normalize_axis(a, rank, &a));
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return invalid_argument("axes contain a duplicate: ", dims_str(axes));
  }
  return Status::ok();
}

Status broadcast_shapes(const std::vector<Dims>& shapes, Dims* out) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Dims r(rank, 1);
  for (const auto& s : shapes) {
    size_t off = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t d = s[i];
      int64_t& o = r[off + i];
      if (d == o || d == 1) continue;
      if (o == 1) { o = d; continue; }
      std::string all;
      for (const auto& t : shapes) all += dims_str(t) + " ";
      return invalid_argument("shapes ", all, "cannot be broadcast together");
    }
  }
  *out = std::move(r);
  return Status::ok();
}

BroadcastIndexer::BroadcastIndexer(const Dims& out_dims, const std::vector<Dims>& in_dims)
    : out_(out_dims), size_(num_elements(out_dims)) {
  const size_t rank = out_.size();
  for (const Dims& in : in_dims) {
    Dims s(rank, 0);
    Dims cs = contiguous_strides(in);
    size_t off = rank - in.size();
    for (size_t i = 0; i < in.size(); ++i) s[off + i] = in[i] == 1 ? 0 : cs[i];
    strides_.push_back(std::move(s));
  }
}

}  // namespace kiln
