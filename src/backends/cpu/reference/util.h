// Shared machinery for reference kernels: axis handling and numpy broadcasting.
#pragma once
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

// Normalizes a possibly negative axis into [0, rank); error if out of range.
Status normalize_axis(int64_t axis, int64_t rank, int64_t* out);
Status normalize_axes(std::vector<int64_t>& axes, int64_t rank);

// numpy broadcast of several shapes.
Status broadcast_shapes(const std::vector<Dims>& shapes, Dims* out);

// Iterates the elements of an output shape, tracking the matching element offset
// in each broadcast input (stride 0 along broadcast dims).
class BroadcastIndexer {
 public:
  BroadcastIndexer(const Dims& out_dims, const std::vector<Dims>& in_dims);
  int64_t size() const { return size_; }
  // Calls fn(out_index, offsets) with offsets[k] the element offset into input k.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    const size_t nin = strides_.size();
    std::vector<int64_t> off(nin, 0);
    std::vector<int64_t> idx(out_.size(), 0);
    const int rank = static_cast<int>(out_.size());
    for (int64_t i = 0; i < size_; ++i) {
      fn(i, off.data());
      for (int d = rank - 1; d >= 0; --d) {
        ++idx[d];
        for (size_t k = 0; k < nin; ++k) off[k] += strides_[k][d];
        if (idx[d] < out_[d]) break;
        for (size_t k = 0; k < nin; ++k) off[k] -= strides_[k][d] * idx[d];
        idx[d] = 0;
      }
    }
  }

 private:
  Dims out_;
  std::vector<Dims> strides_;
  int64_t size_;
};

// Multi-index iteration helper: advances idx over dims (row-major); false at the end.
inline bool next_index(std::vector<int64_t>& idx, const Dims& dims) {
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

}  // namespace kiln
