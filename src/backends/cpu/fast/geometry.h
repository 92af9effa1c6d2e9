// Host-side shape geometry of ops that both the fast CPU kernels (movement_kernels.cpp and
// norm_kernels.cpp define it) and the CUDA ones (backends/cuda/movement.cu, norm.cu) run,
// so that both accept the same shapes and parameters and fail with the same messages.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/cpu/fast/fast_kernel.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln::fast {

// Splits dims around `axis` (negative: from the end) into outer (before) and inner (after)
// element counts; *norm_axis is the axis made non-negative.
Status axis_geometry(const Dims& dims, int64_t axis, int64_t* outer, int64_t* inner, int64_t* norm_axis);

// Transpose's permutation of an input of rank `rank`: `perm_attr` when `has_perm`, else the
// reversed axes, with negative axes resolved. Fails unless it is a permutation of [0, rank).
Status transpose_perm(int64_t rank, const std::vector<int64_t>& perm_attr, bool has_perm, std::vector<int64_t>* perm);

// The extents along `axis` (already normalized) of the parts of a Concat (`parts` are the
// inputs) or Split (`parts` are the outputs; an omitted one has dtype kUndefined) whose
// joined tensor has dims `joined`: each part's own, and for omitted Split outputs those of
// `split_sizes` or, when it is empty, of the even split (ceil-sized chunks when
// `num_outputs`). Fails unless the parts match `joined` off the axis and their extents are
// non-negative and add up to the joined one.
Status concat_split_extents(bool split, const Dims& joined, int64_t axis, const std::vector<TensorShape>& parts,
                            const std::vector<int64_t>& split_sizes, bool num_outputs, std::vector<int64_t>* along);

// Gather's geometry: data of dims `data` indexed along `axis` (negative: from the end) by
// indices of dims `indices` must give the output dims `out`. Sets the element counts
// before (*outer) and after (*inner) the axis and its extent (*n).
Status gather_geometry(const Dims& data, const Dims& indices, const Dims& out, int64_t axis, int64_t* outer,
                       int64_t* inner, int64_t* n);

// The strided view of X (dims `x`, contiguous) that a Slice with constant `starts` (and
// `ends`, `axes`, `steps`; each may be empty: ends unknown, all leading axes, steps of 1)
// reads to produce the output of dims `y` (authoritative: it fixes the count per axis, and
// ends, when known, must agree with it). Sets strides[d] to the input stride of output
// axis d (0 on a sliced axis of at most one element) and *offset to the input offset of
// the first output element (0 for an empty output). Fails on inconsistent parameters or
// shapes.
Status slice_geometry(const Dims& x, const Dims& y, const std::vector<int64_t>& starts,
                      const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
                      const std::vector<int64_t>& steps, Dims* strides, int64_t* offset);

// Softmax/LogSoftmax over `axis` (negative: from the end) of an input of dims `dims` (a
// scalar counts as [1]), as [outer, n, inner] with the reduced extent n; with `coerce`
// (the legacy form) everything from the axis on is reduced, and axis == rank is allowed.
Status softmax_geometry(const Dims& dims, int64_t axis, bool coerce, int64_t* outer, int64_t* n, int64_t* inner);

}  // namespace kiln::fast
