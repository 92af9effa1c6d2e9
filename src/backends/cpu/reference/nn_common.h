// Helpers shared by the neural-network reference kernels (conv, pool, norm, resize, pad):
// spatial attribute parsing, window geometry and Resize sampling. Internal to the reference
// backend, except that the fast and CUDA conv and resize kernels use the host-side pieces
// (attribute checks, Resize taps) so that they agree with it.
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

// Whether `auto_pad` is one of NOTSET (or empty), VALID, SAME_UPPER and SAME_LOWER.
bool known_auto_pad(const std::string& auto_pad);

// Whether a Conv weight of dims `w` fits the node's attributes `a`: rank 3..5 with no empty
// axis, `group` >= 1 dividing its output channels, kernel_shape (when given) equal to its
// spatial dims, and strides, dilations and pads valid for that many spatial axes. The fast
// and CUDA conv tactics check their constant weights with it.
bool conv_weight_fits(const Attributes& a, const Dims& w, int64_t group);

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

// ---- Resize sampling (resize.cpp), in double as the ONNX reference implementation does;
// the CUDA Resize (backends/cuda/movement.cu) builds its tap tables with it too.

struct ResizeAttrs {
  std::string mode, coord, nearest_mode;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;
  double extrapolation = 0.0;
  bool roi_is_float32 = false;
};

// The sampling attributes of a Resize node (mode, coordinate_transformation_mode,
// nearest_mode, cubic_coeff_a, exclude_outside, antialias, extrapolation_value), with their
// defaults; not validated. roi_is_float32 is left false.
ResizeAttrs resize_attrs(const Attributes& a);

// Interpolation weights of one output position along one axis.
struct ResizeTaps {
  std::vector<int64_t> index;  // clamped input positions
  std::vector<double> weight;  // nonzero weights, one per index
  bool extrapolate = false;    // tf_crop_and_resize outside the input: use extrapolation_value
};

// Source coordinate of output position j along an axis of `in` positions resized by
// `scale` to `out_int` (reference implementation semantics); the roi only matters for
// tf_crop_and_resize.
double resize_source_coordinate(const ResizeAttrs& p, double j, double scale, int64_t in, int64_t out_int,
                                double roi_start, double roi_end);

// The taps that sample source coordinate x on an axis of `in` positions.
ResizeTaps resize_taps(const ResizeAttrs& p, double x, double scale, int64_t in);

}  // namespace kiln
