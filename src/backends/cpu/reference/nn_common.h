// Helpers shared by the neural-network reference kernels (conv, pool, norm, resize, pad):
// spatial attribute parsing and window geometry. Internal to the reference backend.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

#include "backends/cpu/reference/kernel.h"

namespace kiln {

void register_conv_kernels(KernelRegistry& r);    // Conv, ConvTranspose
void register_pool_kernels(KernelRegistry& r);    // MaxPool, AveragePool, LpPool, Global*Pool
void register_norm_kernels(KernelRegistry& r);    // BatchNormalization ... LRN
void register_resize_kernels(KernelRegistry& r);  // Resize
void register_pad_kernels(KernelRegistry& r);     // Pad

// The Conv reference kernel (inputs X, W, B; the Conv attributes), for fused ops. Always
// NCHW: it ignores kiln_layout (callers handle it with run_with_layout).
Status conv_reference(KernelContext& ctx);

// Runs `nchw_kernel` (a kernel written for the ONNX NCHW layout) by the node's kiln_layout
// (ir/layout.h): directly for NCHW; for NHWC, the inputs listed in `activation_inputs` (X
// and FusedConv's Z; they must be 4-D) are transposed to NCHW, the kernel runs, and its
// output 0 is transposed back to NHWC (other outputs, MaxPool's Indices, are refused).
// Any other kiln_layout value is an error.
Status run_with_layout(KernelContext& ctx, KernelFn nchw_kernel, std::initializer_list<size_t> activation_inputs);

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

// The taps of one sliding window. For a window position p (a multi-index) and every kernel
// offset k (row-major over `kernel`), the coordinate p*stride - pad_begin + k*dilation is
// mapped to its flat row-major offset in a tensor of extents `bound`, or -1 outside it.
// Conv reads input offsets this way; ConvTranspose scatters to output offsets.
class WindowTaps {
 public:
  // Fails when the kernel has more taps than a reference kernel sensibly handles.
  static Status create(const Dims& bound, const Dims& kernel, const Dims& strides, const Dims& dilations,
                       const Dims& pad_begin, const Dims& pad_end, WindowTaps* out);
  int64_t num_taps() const { return num_taps_; }
  // Fills offsets() for window position p. Returns how many taps lie inside the bound
  // extended by the padding (begin and end): the divisor of count_include_pad averaging.
  int64_t compute(const std::vector<int64_t>& p);
  const std::vector<int64_t>& offsets() const { return offsets_; }

 private:
  Dims bound_, kernel_, strides_, dilations_, pad_begin_, pad_end_, bound_strides_;
  int64_t num_taps_ = 0;
  std::vector<int64_t> offsets_;
};

// Rejects a tensor of rank below `min_rank` with a message naming it.
Status require_rank_at_least(const Tensor& t, int min_rank, const char* what);

// Product of dims with an overflow / absurd-size guard.
Status checked_num_elements(const Dims& dims, int64_t* out);

}  // namespace kiln
