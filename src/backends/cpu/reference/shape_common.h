// Helpers shared by the shape and indexing reference kernels (shape.cpp, indexing.cpp):
// validation of shape/index tensors, element-size dispatch and strided copies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/reference/kernel.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln {
namespace shape_detail {

// Upper bound on the element count of an output built from model-supplied shapes, so a
// bad shape tensor gives an error instead of an absurd allocation.
inline constexpr int64_t kMaxOutputElements = int64_t{1} << 34;

// Checks dims are non-negative and their product is sane. `what` names the tensor.
inline Status check_dims(const Dims& dims, const char* what) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return invalid_argument(what, " has a negative dimension: ", dims_str(dims));
    if (d != 0 && n > kMaxOutputElements / d) {
      return invalid_argument(what, " ", dims_str(dims), " is too large");
    }
    n *= d;
  }
  if (n > kMaxOutputElements) return invalid_argument(what, " ", dims_str(dims), " is too large");
  return Status::ok();
}

// Reads the values of an int32/int64 tensor. Requires rank <= max_rank.
inline Status read_ints(const Tensor& t, const char* what, std::vector<int64_t>* out, int max_rank = 1) {
  if (t.rank() > max_rank) {
    return invalid_argument(what, " must have rank <= ", max_rank, " but has shape ", dims_str(t.dims()));
  }
  out->resize(static_cast<size_t>(t.size()));
  if (t.dtype() == DataType::kInt64) {
    const int64_t* p = t.data<int64_t>();
    for (int64_t i = 0; i < t.size(); ++i) (*out)[static_cast<size_t>(i)] = p[i];
  } else if (t.dtype() == DataType::kInt32) {
    const int32_t* p = t.data<int32_t>();
    for (int64_t i = 0; i < t.size(); ++i) (*out)[static_cast<size_t>(i)] = p[i];
  } else {
    return invalid_argument(what, " must be int32 or int64 but is ", dtype_name(t.dtype()));
  }
  return Status::ok();
}

// Reads an index tensor of any rank (Gather, ScatterND...): int32 or int64.
inline Status read_indices(const Tensor& t, const char* what, std::vector<int64_t>* out) {
  return read_ints(t, what, out, 1 << 20);
}

// Calls fn.template operator()<N>() with N the element size in bytes (1, 2, 4 or 8).
template <typename Fn>
bool dispatch_size(size_t es, Fn&& fn) {
  switch (es) {
    case 1: fn.template operator()<1>(); return true;
    case 2: fn.template operator()<2>(); return true;
    case 4: fn.template operator()<4>(); return true;
    case 8: fn.template operator()<8>(); return true;
    default: return false;
  }
}

// Copies elements of size es: dst[dst_off + sum idx*dst_strides] = src[src_off + sum idx*src_strides]
// for every index of dims. Strides are in elements and may be zero or negative.
inline void copy_strided(size_t es, const Dims& dims, const void* src_v, int64_t src_off, const Dims& src_strides,
                         void* dst_v, int64_t dst_off, const Dims& dst_strides) {
  const auto* src = static_cast<const std::byte*>(src_v);
  auto* dst = static_cast<std::byte*>(dst_v);
  const int64_t n = num_elements(dims);
  if (n <= 0) return;
  const int r = static_cast<int>(dims.size());
  if (r == 0) {
    std::memcpy(dst + dst_off * static_cast<int64_t>(es), src + src_off * static_cast<int64_t>(es), es);
    return;
  }
  const int64_t inner = dims[r - 1], ss = src_strides[r - 1], ds = dst_strides[r - 1];
  const int64_t outer = n / inner;
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t so = src_off, dof = dst_off;
  // Steps the outer (all but the last) dimensions to the next row, odometer style.
  auto advance = [&]() {
    for (int d = r - 2; d >= 0; --d) {
      ++idx[d];
      so += src_strides[d];
      dof += dst_strides[d];
      if (idx[d] < dims[d]) break;
      so -= src_strides[d] * dims[d];
      dof -= dst_strides[d] * dims[d];
      idx[d] = 0;
    }
  };
  auto inner_copy = [&]<size_t N>() {
    for (int64_t o = 0; o < outer; ++o) {
      if (ss == 1 && ds == 1) {
        std::memcpy(dst + dof * static_cast<int64_t>(N), src + so * static_cast<int64_t>(N),
                    static_cast<size_t>(inner) * N);
      } else {
        for (int64_t i = 0; i < inner; ++i) {
          std::memcpy(dst + (dof + i * ds) * static_cast<int64_t>(N), src + (so + i * ss) * static_cast<int64_t>(N), N);
        }
      }
      advance();
    }
  };
  if (!dispatch_size(es, inner_copy)) {
    // Unusual element size: byte-wise copy.
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        std::memcpy(dst + (dof + i * ds) * static_cast<int64_t>(es), src + (so + i * ss) * static_cast<int64_t>(es), es);
      }
      advance();
    }
  }
}

// Copies a strided view of src into a fresh contiguous tensor of the given dims.
inline Tensor gather_view(const Tensor& src, const Dims& dims, int64_t src_off, const Dims& src_strides) {
  Tensor out(src.dtype(), dims);
  copy_strided(dtype_size(src.dtype()), dims, src.raw(), src_off, src_strides, out.raw(), 0, contiguous_strides(dims));
  return out;
}

// Registered from register_shape_kernels (shape.cpp).
void register_generator_kernels(KernelRegistry& r);  // generate.cpp
void register_indexing_kernels(KernelRegistry& r);   // indexing.cpp

}  // namespace shape_detail
}  // namespace kiln
