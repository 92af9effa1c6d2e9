// Helpers shared by the neural-network reference kernels (conv, pool, norm, resize, pad):
// spatial attribute parsing and window geometry. Internal to the reference backend.
#pragma once
#include <string>
#include <vector>

#include "backends/cpu/reference/kernel.h"

namespace kiln {

void register_conv_kernels(KernelRegistry& r);    // Conv, ConvTranspose
void register_pool_kernels(KernelRegistry& r);    // MaxPool, AveragePool, LpPool, Global*Pool
void register_norm_kernels(KernelRegistry& r);    // BatchNormalization ... LRN
void register_resize_kernels(KernelRegistry& r);  // Resize
void register_pad_kernels(KernelRegistry& r);     // Pad

// True when the node asks for output i.
inline bool output_wanted(const KernelContext& ctx, size_t i) {
  return i < ctx.output_wanted.size() && ctx.output_wanted[i];
}

// Reads an ints attribute that has one value per spatial axis (kernel_shape, strides,
// dilations); absent -> `def` repeated. Values must be >= min_value.
Status spatial_ints(const Attributes& a, const char* name, size_t nsp, int64_t def, int64_t min_value, Dims* out);

// Reads `pads` (2 * nsp values, begin values then end values); absent -> zeros.
// Values must be >= 0.
Status spatial_pads(const Attributes& a, size_t nsp, Dims* out);

// Sliding-window geometry for Conv and the pooling ops. On entry `pads` holds the explicit
// pads; for SAME_UPPER/SAME_LOWER/VALID they are replaced by the computed ones.
// Fills out[i] with the output extent of spatial axis i.
struct WindowGeometry {
  Dims in, kernel, strides, dilations, pads, out;
  size_t nsp() const { return in.size(); }
};
Status compute_window_geometry(const std::string& auto_pad, bool ceil_mode, WindowGeometry* g);

// For every position p of `iter` (row-major over its extents) and every kernel offset k
// (row-major over `kernel`), the flat row-major offset into a tensor of extents `bound` of
// coordinate p*stride - pad_begin + k*dilation, or -1 where that falls outside `bound`.
// Conv reads input offsets this way; ConvTranspose scatters to output offsets.
Status build_window_table(const Dims& iter, const Dims& bound, const Dims& kernel, const Dims& strides,
                          const Dims& dilations, const Dims& pad_begin, std::vector<int64_t>* table);

// Rejects a tensor of rank below `min_rank` with a message naming it.
Status require_rank_at_least(const Tensor& t, int min_rank, const char* what);

// Product of dims with an overflow / absurd-size guard.
Status checked_num_elements(const Dims& dims, int64_t* out);

}  // namespace kiln
